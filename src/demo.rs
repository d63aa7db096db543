//! `initguard demo`: initguard-sim's narrated demo, handed this crate's guard (initguard-sim
//! does not depend on the guard, so that the guard's crate can depend on it optionally).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use futures::future::BoxFuture;
use initguard_sim::demo::{GuardStarter, RunningGuard, StartError};

use crate::config::Config;
use crate::guard::{Guard, RunError};
use crate::policy::OwnerState;

/// Starts [`Guard`]s for the demo.
pub struct DemoGuard;

impl GuardStarter for DemoGuard {
    fn start(
        &self,
        kube: kube::Config,
        config: Config,
    ) -> BoxFuture<'_, Result<Box<dyn RunningGuard>, StartError>> {
        Box::pin(async move {
            let connection = crate::client::connect(kube, config.mechanism).map_err(|e| {
                StartError::Other(format!(
                    "cannot build the guard's client for the simulated cluster: {e}"
                ))
            })?;
            match Guard::start(connection, Arc::new(config)).await {
                Ok(guard) => Ok(Box::new(Running(guard)) as Box<dyn RunningGuard>),
                Err(e @ RunError::Listen { .. }) => Err(StartError::Listen(e.to_string())),
                Err(e) => Err(StartError::Other(e.to_string())),
            }
        })
    }

    fn stop_signal(&self) -> BoxFuture<'static, ()> {
        Box::pin(crate::guard::wait_for_signal())
    }
}

struct Running(Guard);

impl RunningGuard for Running {
    fn addr(&self) -> SocketAddr {
        self.0.addr
    }

    fn not_ready(&self) -> Vec<String> {
        let mut missing = self.0.shared.not_ready();
        missing.extend(self.0.shared.owners.not_synced());
        missing
    }

    fn owner_state(&self, initializer: &str) -> OwnerState {
        self.0.shared.owners.state(initializer)
    }

    fn shutdown(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(self.0.shutdown())
    }
}

/// `initguard demo`: the exit code (0 done, 1 failed, 2 a `--plot` file that cannot be written).
pub fn main(mechanism: crate::config::Mechanism, serve: bool, plot: Option<&Path>) -> ExitCode {
    // A plot file that cannot be written is a usage error, found before a minute of demo.
    if let Some(path) = plot
        && let Err(e) = std::fs::File::create(path)
    {
        eprintln!("error: --plot {}: {e}", path.display());
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let opts = initguard_sim::demo::DemoOptions {
        mechanism,
        serve,
        ..Default::default()
    };
    let outcome = rt.block_on(initguard_sim::demo::run(opts, &DemoGuard));
    match outcome
        .map(|summary| plot.map(|path| initguard_sim::demo::plot::write_svg(&summary, path)))
    {
        Ok(None | Some(Ok(()))) => ExitCode::SUCCESS,
        Ok(Some(Err(e))) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
