//! `secureListen` with PEM files: a renewed certificate is served without a restart, as a
//! Secret volume renews it (an atomic `..data` symlink swap), by the same CA or another one.
//! Judged by what `openssl s_client` is served, compared with what `openssl x509` reads from
//! the files. (Unusable pairs: the unit tests of `guard::secure`.)

use std::path::Path;
use std::time::Duration;

use initguard::config::Mechanism;
use initguard_test_support::pki::{ca, leaf};
use initguard_test_support::testbed::free_port;

use crate::harness::*;
use crate::wait::eventually_every;

/// openssl runs as a process per look: poll less often than in-memory checks.
const LOOK: Duration = Duration::from_millis(500);

const SERVER: &str =
    "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";

/// `openssl x509 -noout -serial -issuer` of the PEM file `Ok(file)`, or of what
/// `openssl s_client` is served on `Err(port)`.
async fn identity(dir: &Path, input: Result<&str, u16>) -> String {
    let script = match input {
        Ok(file) => format!("openssl x509 -noout -serial -issuer -in {file}"),
        Err(port) => format!(
            "timeout 10 openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null \
             | openssl x509 -noout -serial -issuer"
        ),
    };
    let out = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .current_dir(dir)
        .output()
        .await
        .expect("sh and the openssl CLI");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Makes `cert`/`key` (files in `from`) the content of the Secret volume `dir`, as the kubelet
/// does: a new timestamped directory, then `..data` switched to it by one rename.
fn publish(from: &Path, dir: &Path, version: &str, cert: &str, key: &str) {
    let data = dir.join(format!("..{version}"));
    std::fs::create_dir(&data).unwrap();
    std::fs::copy(from.join(cert), data.join("tls.crt")).unwrap();
    std::fs::copy(from.join(key), data.join("tls.key")).unwrap();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{version}"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let pki = tempfile::tempdir().unwrap();
    let p = pki.path();
    ca(p, "ca");
    ca(p, "other-ca");
    for (name, issuer) in [("first", "ca"), ("renewed", "ca"), ("reissued", "other-ca")] {
        leaf(p, issuer, name, SERVER);
    }
    let volume = tempfile::tempdir().unwrap();
    let v = volume.path();
    publish(p, v, "1", "first.pem", "first.key");
    for file in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{file}"), v.join(file)).unwrap();
    }

    let c = Cluster::start(Mechanism::SchedulingGates).await;
    let config = config(
        Mechanism::SchedulingGates,
        &format!(
            "secureListen: 127.0.0.1:{}\ntls: {{ certFile: {}, keyFile: {} }}\n",
            free_port(),
            v.join("tls.crt").display(),
            v.join("tls.key").display()
        ),
    );
    let guard = c.guard(&config).await;
    let port = guard.secure_addr.expect("secureListen is set").port();
    let served = || identity(p, Err(port));
    let expect = |name: &'static str| async move { identity(p, Ok(&format!("{name}.pem"))).await };
    let first = expect("first").await;
    assert!(
        first.contains("serial="),
        "openssl read the certificate: {first:?}"
    );
    assert_eq!(served().await, first, "the certificate given at start");

    // Renewed by the same CA.
    publish(p, v, "2", "renewed.pem", "renewed.key");
    let renewed = expect("renewed").await;
    assert_ne!(renewed, first);
    eventually_every(LOOK, "the renewed certificate to be served", || async {
        (served().await == renewed).then_some(())
    })
    .await;

    // Another CA's certificate with its own key.
    publish(p, v, "3", "reissued.pem", "reissued.key");
    let reissued = expect("reissued").await;
    assert!(reissued.contains("other-ca"), "{reissued}");
    eventually_every(
        LOOK,
        "the certificate of the new CA to be served",
        || async { (served().await == reissued).then_some(()) },
    )
    .await;
    c.finish(guard).await;
}
