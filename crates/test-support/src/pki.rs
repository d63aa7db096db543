//! Certificates for TLS tests, made by the openssl CLI (independent of the rustls and rcgen
//! code under test): a CA and leaves it signs, in a directory.

use std::path::Path;

/// Runs the openssl CLI in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A P-256 key for `openssl req`.
pub const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

/// A CA named `name`: `name.pem`, `name.key`.
pub fn ca(dir: &Path, name: &str) {
    let (key, pem, subject) = (
        format!("{name}.key"),
        format!("{name}.pem"),
        format!("/CN={name}"),
    );
    let mut args = vec!["req", "-x509", "-nodes", "-days", "2", "-subj", &subject];
    args.extend(EC);
    args.extend(["-keyout", &key, "-out", &pem]);
    openssl(dir, &args);
}

/// A leaf `name.pem`/`name.key` signed by CA `ca` with these extensions.
pub fn leaf(dir: &Path, ca: &str, name: &str, extensions: &str) {
    let ext = format!("{name}.ext");
    std::fs::write(dir.join(&ext), extensions).unwrap();
    let (key, csr, pem, subject) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("/CN={name}"),
    );
    let mut args = vec!["req", "-nodes", "-subj", &subject];
    args.extend(EC);
    args.extend(["-keyout", &key, "-out", &csr]);
    openssl(dir, &args);
    let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &pem,
            "-extfile",
            &ext,
        ],
    );
}
