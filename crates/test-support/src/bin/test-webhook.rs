//! `test-webhook --cert FILE --key FILE --port PORT`: the admission webhook of
//! [`initguard_test_support::webhook::WebhookServer`] (`/validate` allows, `/mutate` allows and
//! annotates) as a program of its own, for a webhook backend that runs as a Deployment on the
//! test bed's real node (`initguard.test/webhook:dev`, tests/testbed/image). It listens on
//! every address of its pod and exits on SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

use initguard_test_support::webhook::WebhookServer;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("test-webhook: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let (mut cert, mut key, mut port) = (None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--cert" => cert = Some(value),
            "--key" => key = Some(value),
            "--port" => {
                port = Some(
                    value
                        .parse::<u16>()
                        .map_err(|e| format!("--port {value}: {e}"))?,
                )
            }
            other => return Err(format!("unknown argument {other} (--cert, --key, --port)")),
        }
    }
    let read = |what: &str, path: Option<String>| -> Result<String, String> {
        let path = path.ok_or_else(|| format!("--{what} is required"))?;
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))
    };
    let (cert, key) = (read("cert", cert)?, read("key", key)?);
    let port = port.ok_or("--port is required")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| format!("SIGTERM handler: {e}"))?;
        let server = WebhookServer::from_pem(SocketAddr::from(([0, 0, 0, 0], port)), &cert, &key)?;
        println!("test-webhook: serving on {}", server.addr);
        term.recv().await;
        println!(
            "test-webhook: SIGTERM after {} calls",
            server.calls.load(std::sync::atomic::Ordering::SeqCst)
        );
        Ok(())
    })
}
