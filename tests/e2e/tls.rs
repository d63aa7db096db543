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
/// `openssl s_client` is served on `Err(port)`, by a client that trusts only the CA file
/// `trust` and refuses a certificate it cannot verify (then the result is empty).
async fn identity(dir: &Path, input: Result<&str, u16>, trust: &str) -> String {
    let script = match input {
        Ok(file) => format!("openssl x509 -noout -serial -issuer -in {file}"),
        Err(port) => format!(
            "timeout 10 openssl s_client -connect 127.0.0.1:{port} -CAfile {trust} \
             -verify_return_error </dev/null 2>/dev/null | openssl x509 -noout -serial -issuer"
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

/// What `openssl s_client` says (stdout and stderr) when it verifies the certificate served on
/// `port` with only the CA file `trust`.
async fn verification(dir: &Path, port: u16, trust: &str) -> String {
    let out = tokio::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "timeout 10 openssl s_client -connect 127.0.0.1:{port} -CAfile {trust} \
                 -verify_return_error </dev/null 2>&1"
            ),
        ])
        .current_dir(dir)
        .output()
        .await
        .expect("sh and the openssl CLI");
    String::from_utf8_lossy(&out.stdout).into_owned()
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

/// A guard serving `first` (leaf of CA `ca`, in `pki`) from a Secret-like volume; then `next`
/// (leaf of `next_ca`) is published, and must be served by the same guard to a client that
/// trusts `next_ca` only. Before it, a client of `next_ca` is refused when that is another CA.
async fn rotation(next: &str, next_ca: &str) {
    let pki = tempfile::tempdir().unwrap();
    let p = pki.path();
    ca(p, "ca");
    if next_ca != "ca" {
        ca(p, next_ca);
    }
    leaf(p, "ca", "first", SERVER);
    leaf(p, next_ca, next, SERVER);
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
    let served = |trust: String| async move { identity(p, Err(port), &trust).await };
    let file = |name: String| async move { identity(p, Ok(&format!("{name}.pem")), "").await };
    let first = file("first".into()).await;
    assert!(
        first.contains("serial="),
        "openssl read the certificate: {first:?}"
    );
    assert_eq!(
        served("ca.pem".into()).await,
        first,
        "the certificate given at start"
    );
    let next_ca_file = format!("{next_ca}.pem");
    if next_ca != "ca" {
        assert_eq!(
            served(next_ca_file.clone()).await,
            "",
            "a client of the new CA only refuses the first certificate"
        );
        let said = verification(p, port, &next_ca_file).await;
        assert!(
            said.contains("verify error"),
            "refused for its issuer, not for a failed connection: {said}"
        );
    }

    publish(p, v, "2", &format!("{next}.pem"), &format!("{next}.key"));
    let expected = file(next.to_owned()).await;
    assert_ne!(expected, first);
    assert!(
        expected.contains(&format!("CN={next_ca}"))
            || expected.contains(&format!("CN = {next_ca}")),
        "{expected}"
    );
    eventually_every(LOOK, "the new certificate to be served", || async {
        (served(next_ca_file.clone()).await == expected).then_some(())
    })
    .await;
    // The same process served both: the guard was never restarted.
    c.finish(guard).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart() {
    rotation("renewed", "ca").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_a_new_ca_is_served_without_a_restart() {
    rotation("reissued", "next-ca").await;
}
