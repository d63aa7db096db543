//! `initguard sim`: the simulated API server alone, for kubectl, the guard or any client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use crate::scenario::{Scenario, ScenarioError, run_scenario};
use kube_common::Mechanism;
use kube_sim::KubeVersion;
use kube_sim::Sim;
use kube_sim::SimOptions;

/// The user the written kubeconfig authenticates as.
pub const KUBECONFIG_USER: &str = "admin";

/// Arguments of `initguard sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address to serve the API on (plain HTTP).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// schedulingGates or initializers (default: the scenario's, else schedulingGates).
    #[arg(long, value_name = "M", value_parser = parse_mechanism)]
    pub mechanism: Option<Mechanism>,
    /// Kubernetes version whose API surface to serve: 1.8, 1.11, 1.13 (initializers) or 1.33
    /// (scheduling gates). Default: every group version the simulator knows.
    #[arg(long, value_name = "V", value_parser = parse_kube_version)]
    pub kube_version: Option<KubeVersion>,
    /// Legacy initializer names the server appends to every new pod (repeatable; mechanism
    /// initializers only; a scenario brings its own).
    #[arg(long = "initializer", value_name = "NAME")]
    pub initializers: Vec<String>,
    /// Scenario file: controllers and a timeline of kills, revivals and faults.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Where to write the kubeconfig (default: a file in the system temp dir).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig_out: Option<PathBuf>,
}

/// Parses a `--kube-version`; an unsupported one names the supported versions.
pub fn parse_kube_version(s: &str) -> Result<KubeVersion, String> {
    KubeVersion::parse(s).map_err(|e| e.to_string())
}

/// Parses a mechanism as written in config files (`schedulingGates`, `initializers`), any case.
pub fn parse_mechanism(s: &str) -> Result<Mechanism, String> {
    match s.to_ascii_lowercase().as_str() {
        "schedulinggates" | "scheduling-gates" | "gates" => Ok(Mechanism::SchedulingGates),
        "initializers" | "legacy" => Ok(Mechanism::Initializers),
        _ => Err(format!(
            "unknown mechanism {s:?}: expected schedulingGates or initializers"
        )),
    }
}

/// Runs `initguard sim` on a new Tokio runtime (logging is the caller's); returns the process
/// exit code (0 ok, 1 runtime failure, 2 usage or configuration error).
pub fn run(args: SimArgs) -> ExitCode {
    match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(run_async(args)),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(1)
        }
    }
}

/// [`run`] for callers already inside a Tokio runtime.
pub async fn run_async(args: SimArgs) -> ExitCode {
    let scenario = match &args.scenario {
        Some(path) => match Scenario::load(path) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let options = match sim_options(&args, scenario.as_ref()) {
        Ok(o) => o,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot listen for SIGINT and SIGTERM: {e}");
            return ExitCode::from(1);
        }
    };
    let mechanism = options.mechanism;
    let sim = match Sim::start(options).await {
        Ok(sim) => sim,
        Err(e) => {
            eprintln!(
                "error: cannot start the simulated API server on {}: {e}",
                args.listen
            );
            return ExitCode::from(1);
        }
    };
    let path = args
        .kubeconfig_out
        .clone()
        .unwrap_or_else(default_kubeconfig_path);
    if let Err(e) = sim.write_kubeconfig(&path, KUBECONFIG_USER) {
        eprintln!("error: cannot write kubeconfig {}: {e}", path.display());
        sim.shutdown().await;
        return ExitCode::from(1);
    }
    println!(
        "simulated API server ({}) listening on {}",
        mechanism.as_str(),
        sim.url()
    );
    println!("kubeconfig: {}", path.display());
    println!(
        "try: kubectl --kubeconfig {} get pods -A",
        shell_quote(&path)
    );
    if let Some(path) = &args.scenario {
        println!("running scenario {}", path.display());
    }
    println!("press Ctrl-C to stop");

    let cancel = CancellationToken::new();
    let work = async {
        match &scenario {
            Some(s) => run_scenario(&sim, s, cancel.clone()).await,
            None => {
                cancel.cancelled().await;
                Ok::<(), ScenarioError>(())
            }
        }
    };
    let mut work = std::pin::pin!(work);
    let result = tokio::select! {
        r = &mut work => r,
        _ = signals.recv() => {
            cancel.cancel();
            work.await
        }
    };
    sim.shutdown().await;
    match result {
        Ok(()) => {
            println!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Server settings from the command line and the scenario; a conflict is a usage error.
fn sim_options(args: &SimArgs, scenario: Option<&Scenario>) -> Result<SimOptions, String> {
    let version_mechanism = args.kube_version.map(KubeVersion::mechanism);
    if let (Some(v), Some(m)) = (args.kube_version, args.mechanism)
        && v.mechanism() != m
    {
        return Err(format!(
            "--mechanism {} conflicts with --kube-version {}, which implements {}",
            m.as_str(),
            v.as_str(),
            v.mechanism().as_str()
        ));
    }
    let base = SimOptions {
        listen: args.listen,
        mechanism: args
            .mechanism
            .or(version_mechanism)
            .unwrap_or(Mechanism::SchedulingGates),
        kube_version: args.kube_version,
        legacy_initializers: args.initializers.clone(),
        ..SimOptions::default()
    };
    let Some(scenario) = scenario else {
        if base.mechanism == Mechanism::SchedulingGates && !base.legacy_initializers.is_empty() {
            return Err("--initializer needs --mechanism initializers".to_string());
        }
        return Ok(base);
    };
    if let Some(m) = args.mechanism
        && m != scenario.mechanism
    {
        return Err(format!(
            "--mechanism {} conflicts with the scenario's mechanism {}",
            m.as_str(),
            scenario.mechanism.as_str()
        ));
    }
    if !args.initializers.is_empty() {
        return Err(
            "--initializer cannot be combined with --scenario (list them in the scenario)"
                .to_string(),
        );
    }
    if let Some(v) = args.kube_version
        && v.mechanism() != scenario.mechanism
    {
        return Err(format!(
            "--kube-version {} implements {}, but the scenario uses {}",
            v.as_str(),
            v.mechanism().as_str(),
            scenario.mechanism.as_str()
        ));
    }
    Ok(scenario.sim_options(base))
}

fn default_kubeconfig_path() -> PathBuf {
    std::env::temp_dir().join(format!("initguard-sim-{}.kubeconfig", std::process::id()))
}

/// The path quoted for a POSIX shell when it needs to be.
fn shell_quote(path: &Path) -> String {
    let s = path.display().to_string();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// SIGINT and SIGTERM handlers, installed before the server announces itself so that a
/// signal sent right after the announcement stops it cleanly.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    /// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => {}
                _ = self.int.recv() => {}
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_parse_in_any_case() {
        assert_eq!(
            parse_mechanism("schedulingGates"),
            Ok(Mechanism::SchedulingGates)
        );
        assert_eq!(parse_mechanism("INITIALIZERS"), Ok(Mechanism::Initializers));
        assert!(parse_mechanism("webhooks").is_err());
    }

    #[test]
    fn kube_versions_pick_the_mechanism_and_reject_the_unsupported() {
        let e = parse_kube_version("1.10").unwrap_err();
        assert!(e.contains("unsupported Kubernetes version \"1.10\""), "{e}");
        let args = |kube: &str, mechanism: Option<Mechanism>| SimArgs {
            listen: "127.0.0.1:0".parse().unwrap(),
            mechanism,
            kube_version: Some(parse_kube_version(kube).unwrap()),
            initializers: Vec::new(),
            scenario: None,
            kubeconfig_out: None,
        };
        let options = sim_options(&args("1.11", None), None).unwrap();
        assert_eq!(options.mechanism, Mechanism::Initializers);
        assert_eq!(options.kube_version, Some(KubeVersion::V1_11));
        let e = sim_options(&args("1.8", Some(Mechanism::SchedulingGates)), None).unwrap_err();
        assert!(e.contains("conflicts with --kube-version 1.8"), "{e}");
    }

    #[test]
    fn paths_are_quoted_only_when_needed() {
        assert_eq!(
            shell_quote(Path::new("/tmp/a.kubeconfig")),
            "/tmp/a.kubeconfig"
        );
        assert_eq!(shell_quote(Path::new("/tmp/my dir/x")), "'/tmp/my dir/x'");
        assert_eq!(shell_quote(Path::new("/tmp/it's")), r"'/tmp/it'\''s'");
    }
}
