//! The bed's `initguard.test/initguard:dev` is what deploy/Dockerfile builds: read back from
//! containerd (`ctr images export`), its config and files are compared with the Dockerfile's
//! final stage and the shipped binary, and every library the binary's ELF header asks for
//! (readelf, not the ldd the bed's build used) is in the image.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::testbed::*;

/// What deploy/Dockerfile's final stage says about the image.
#[derive(Debug, Default)]
struct Stage {
    copy_to: String,
    user: String,
    expose: Vec<String>,
    entrypoint: Value,
    cmd: Value,
}

fn dockerfile_final_stage() -> Stage {
    let path = repo().join("deploy/Dockerfile");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    let last_from = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .unwrap_or_else(|| panic!("{} has no FROM", path.display()));
    let mut stage = Stage::default();
    for line in lines.iter().skip(last_from + 1) {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let json =
            |r: &str| serde_json::from_str::<Value>(r).unwrap_or_else(|e| panic!("{line}: {e}"));
        match word {
            "COPY" => stage.copy_to = rest.rsplit(' ').next().unwrap_or_default().to_owned(),
            "USER" => stage.user = rest.trim().to_owned(),
            "EXPOSE" => stage.expose = rest.split_whitespace().map(str::to_owned).collect(),
            "ENTRYPOINT" => stage.entrypoint = json(rest),
            "CMD" => stage.cmd = json(rest),
            _ => {}
        }
    }
    stage
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn blob(oci: &Path, digest: &str) -> PathBuf {
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or_else(|| panic!("digest {digest}"));
    oci.join("blobs/sha256").join(hex)
}

fn sha256(path: &Path) -> String {
    let out = run("sha256sum", &[path.to_str().unwrap_or_default()]);
    out.split_whitespace().next().unwrap_or_default().to_owned()
}

/// The image containerd holds, exported and unpacked: its config, the shipped binary's
/// digest against the file at the Dockerfile's path, its user, entrypoint, command and ports
/// against the Dockerfile's, and the binary's interpreter and every `NEEDED` library present.
pub(crate) async fn the_initguard_image_is_the_dockerfiles(tb: Arc<Testbed>) {
    let work = tb.dir.join("image-check");
    let rootfs = work.join("rootfs");
    let oci = work.join("oci");
    for d in [&rootfs, &oci] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    }
    let sock = tb.env("TESTBED_CONTAINERD");
    let ctr = |args: &[&str]| {
        let args = [
            &["--address", sock.as_str(), "--namespace", "k8s.io"][..],
            args,
        ]
        .concat();
        run("ctr", &args)
    };
    let reference = ctr(&["images", "ls", "-q"])
        .lines()
        .find(|r| r.ends_with("initguard.test/initguard:dev"))
        .unwrap_or_else(|| panic!("containerd holds no initguard.test/initguard:dev"))
        .to_owned();
    let archive = work.join("image.tar");
    ctr(&[
        "images",
        "export",
        archive.to_str().unwrap_or_default(),
        &reference,
    ]);
    run(
        "tar",
        &[
            "-xf",
            archive.to_str().unwrap_or_default(),
            "-C",
            oci.to_str().unwrap_or_default(),
        ],
    );
    let index = read_json(&oci.join("index.json"));
    let manifest = read_json(&blob(
        &oci,
        index["manifests"][0]["digest"].as_str().unwrap_or_default(),
    ));
    let config = read_json(&blob(
        &oci,
        manifest["config"]["digest"].as_str().unwrap_or_default(),
    ));
    for layer in manifest["layers"].as_array().into_iter().flatten() {
        let path = blob(&oci, layer["digest"].as_str().unwrap_or_default());
        run(
            "tar",
            &[
                "-xf",
                path.to_str().unwrap_or_default(),
                "-C",
                rootfs.to_str().unwrap_or_default(),
            ],
        );
    }

    let stage = dockerfile_final_stage();
    let c = &config["config"];
    assert_eq!(c["User"], json!(stage.user), "{c:#}");
    assert_eq!(c["Entrypoint"], stage.entrypoint, "{c:#}");
    assert_eq!(c["Cmd"], stage.cmd, "{c:#}");
    let mut ports: Vec<String> = c["ExposedPorts"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    ports.sort();
    let mut want: Vec<String> = stage.expose.iter().map(|p| format!("{p}/tcp")).collect();
    want.sort();
    assert_eq!(ports, want, "{c:#}");

    let shipped = repo().join("target/dist/initguard");
    let inside = rootfs.join(stage.copy_to.trim_start_matches('/'));
    assert_eq!(
        sha256(&inside),
        sha256(&shipped),
        "{} differs from {}",
        inside.display(),
        shipped.display()
    );

    // What the ELF header asks for, read by readelf (the bed built the image with ldd).
    let dynamic = run("readelf", &["-d", shipped.to_str().unwrap_or_default()]);
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    assert!(!needed.is_empty(), "no NEEDED entries: {dynamic}");
    let program = run("readelf", &["-l", shipped.to_str().unwrap_or_default()]);
    let interpreter = program
        .lines()
        .find_map(|l| l.split("interpreter: ").nth(1)?.split(']').next())
        .unwrap_or_else(|| panic!("no interpreter: {program}"));
    assert!(
        rootfs.join(interpreter.trim_start_matches('/')).exists(),
        "the loader {interpreter} is not in the image"
    );
    let lib_dirs = [
        "lib/x86_64-linux-gnu",
        "usr/lib/x86_64-linux-gnu",
        "lib64",
        "lib",
        "usr/lib",
    ];
    for lib in needed {
        assert!(
            lib_dirs.iter().any(|d| rootfs.join(d).join(lib).exists()),
            "{lib} (NEEDED by the binary) is in none of {lib_dirs:?} of the image"
        );
    }
    // The user the Dockerfile names exists in the image, and CA certificates are there.
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    let uid = stage.user.split(':').next().unwrap_or_default();
    assert!(
        passwd.lines().any(|l| l.split(':').nth(2) == Some(uid)),
        "uid {uid} has no passwd entry: {passwd}"
    );
    assert!(rootfs.join("etc/ssl/certs/ca-certificates.crt").exists());
    let _ = std::fs::remove_dir_all(&work);
}
