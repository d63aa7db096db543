//! The configuration: [`initguard_core::config`]'s types and rules, read from the file system.

use std::io::Read as _;
use std::path::Path;

pub use initguard_core::config::*;

/// The file system, for the TLS files a configuration names.
struct Disk;

impl ReadFile for Disk {
    fn read(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        std::fs::read(path).map(Some)
    }
}

/// Parse and validate YAML text; `file` labels error locations. The TLS files it names are read
/// and checked, so a bad one fails `check-config`, not the running guard.
pub fn from_yaml_str(text: &str, file: &str) -> Result<Config, ConfigError> {
    Config::from_yaml_with(text, file, &Disk)
}

/// Read and validate the file at `path`. Files over [`MAX_CONFIG_BYTES`] are refused before
/// they are read in full; the text must be UTF-8.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let unreadable = |e: std::io::Error| {
        ConfigError::single(&file, 0, 0, format!("cannot read the configuration: {e}"))
    };
    let too_large = |size: u64| {
        ConfigError::single(
            &file,
            1,
            1,
            format!(
                "the file is {size} bytes; a configuration may be at most 1 MiB \
                 ({MAX_CONFIG_BYTES} bytes)"
            ),
        )
    };
    let metadata = std::fs::metadata(path).map_err(unreadable)?;
    if metadata.is_dir() {
        return Err(ConfigError::single(
            &file,
            0,
            0,
            "cannot read the configuration: it is a directory, expected a YAML file",
        ));
    }
    let limit = MAX_CONFIG_BYTES as u64;
    if metadata.len() > limit {
        return Err(too_large(metadata.len()));
    }
    // Reading one byte past the limit catches files that grow and special files.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
        .map_err(unreadable)?;
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Config::from_yaml_bytes(bytes, &file, &Disk)
}
