//! `initguard` command line: parses arguments and wires the library together.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

use initguard::cli::DEFAULT_CONFIG;
use initguard::cli::{Command, LogFormat, Output, StatusOutput, WebhooksOutput};
use initguard::config::{Config, Mechanism};
use initguard::deployed::{self, Source};
use initguard::guard::Guard;
use initguard::{inventory, restore, status};

fn main() -> ExitCode {
    let cli = initguard::cli::parse_from(std::env::args_os());
    let format = cli.log_format;
    match cli.command {
        Command::CheckConfig {
            path,
            output,
            kubeconfig,
        } => {
            init_logging(format, "info");
            check_config(&path, output, kubeconfig.as_deref())
        }
        Command::Run {
            config,
            kubeconfig,
            dry_run,
        } => {
            init_logging(format, "info");
            run(&config, kubeconfig.as_deref(), dry_run)
        }
        Command::Status {
            config,
            config_map,
            kubeconfig,
            output,
        } => {
            init_logging(format, "info");
            let source = Source::from_args(config, config_map, Path::new(DEFAULT_CONFIG));
            status_report(&source, kubeconfig.as_deref(), output)
        }
        Command::Webhooks {
            config,
            kubeconfig,
            output,
        } => {
            init_logging(format, "info");
            webhooks_audit(config.as_deref(), kubeconfig.as_deref(), output)
        }
        Command::Why {
            pod,
            namespace,
            kubeconfig,
            mechanism,
            config,
            config_map,
        } => {
            init_logging(format, "warn");
            let source = Source::from_args(config, config_map, Path::new(DEFAULT_CONFIG));
            why(
                &pod,
                namespace.as_deref(),
                kubeconfig.as_deref(),
                mechanism.map(Into::into),
                &source,
            )
        }
        Command::Restore {
            config,
            kubeconfig,
            webhooks,
            dry_run,
            conflicts_ok,
            by,
        } => {
            init_logging(format, "info");
            let options = restore::Options {
                webhooks,
                dry_run,
                by,
            };
            restore_now(&config, kubeconfig.as_deref(), &options, conflicts_ok)
        }
        // kube's per-request error lines are off: simulated creators get 504s by design.
        #[cfg(feature = "sim")]
        Command::Sim(args) => {
            init_logging(format, "info,kube_client=off");
            initguard_sim::cli::run(args)
        }
        #[cfg(feature = "sim")]
        Command::Demo {
            mechanism,
            serve,
            plot,
        } => {
            // The narration on stdout is the demo; logs are kept to warnings on stderr. kube's
            // client logs every error response, and the simulated 504s of legacy creates are
            // expected here.
            init_logging(format, "warn,kube_client::client::builder=off");
            initguard::demo::main(mechanism.into(), serve, plot.as_deref())
        }
    }
}

/// Logs go to stderr; `RUST_LOG` refines `default_filter`. Text is coloured only on a terminal
/// and never with `NO_COLOR` (`cli::colour`).
fn init_logging(format: LogFormat, default_filter: &str) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let ansi = initguard::cli::colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(ansi).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

fn load(path: &Path) -> Result<Config, ExitCode> {
    initguard::config::load(path).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|e| {
        eprintln!("error: cannot start the async runtime: {e}");
        ExitCode::from(1)
    })
}

fn run(path: &Path, kubeconfig: Option<&Path>, dry_run: bool) -> ExitCode {
    let mut config = match load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    config.dry_run |= dry_run;
    let config = Arc::new(config);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let client = match status::connect(kubeconfig, &config).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot connect");
                return ExitCode::from(1);
            }
        };
        match Guard::start(client, config).await {
            Ok(guard) => {
                let panics = guard.run_until_signal().await;
                if panics.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    // Logged at error when they happened; the exit code makes them count.
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start");
                ExitCode::from(1)
            }
        }
    })
}

/// `initguard why POD`: 0 explained, 1 could not read the pod. The guard's configuration is
/// an addition: where it cannot be read, the explanation says why and goes on.
fn why(
    pod: &str,
    namespace: Option<&str>,
    kubeconfig: Option<&Path>,
    mechanism: Option<Mechanism>,
    source: &Source,
) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        let deployed = deployed::connect_and_read(kubeconfig, source).await;
        if let Err(e @ deployed::DeployedError::Connect(_)) = &deployed {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
        let mechanism = mechanism
            .or_else(|| deployed.as_ref().ok().map(|d| d.config.mechanism))
            .unwrap_or(Mechanism::SchedulingGates);
        let connection = match status::connect_for(kubeconfig, mechanism).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        };
        let namespace = namespace
            .map(str::to_owned)
            .unwrap_or_else(|| connection.client.default_namespace().to_owned());
        match initguard::why::gather(connection.client.clone(), mechanism, &namespace, pod).await {
            Ok(found) => {
                let found = initguard::why::plan(found, connection, deployed).await;
                print!("{}", initguard::why::render(&found, SystemTime::now()));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        }
    })
}

fn status_report(source: &Source, kubeconfig: Option<&Path>, output: StatusOutput) -> ExitCode {
    // A file is checked before any connection, as `run` does (exit 2 on a bad one).
    let file = match source {
        Source::File(path) => match load(path) {
            Ok(c) => Some(c),
            Err(code) => return code,
        },
        _ => None,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    rt.block_on(async move {
        // An invalid configuration is a configuration error (2) wherever it was read.
        let failed = |e: String| (e, ExitCode::from(1));
        let report = async {
            let config = match file {
                Some(config) => config,
                None => {
                    let found = deployed::connect_and_read(kubeconfig, source)
                        .await
                        .map_err(|e| {
                            let code = match e {
                                deployed::DeployedError::Invalid(_) => 2,
                                _ => 1,
                            };
                            (e.to_string(), ExitCode::from(code))
                        })?;
                    // stdout is the report; where it came from, and what it leaves out, on stderr.
                    eprintln!("initguard status: the configuration of {}", found.from);
                    for note in &found.left_out {
                        eprintln!("initguard status: {note}");
                    }
                    found.config
                }
            };
            let config = Arc::new(config);
            let client = status::connect(kubeconfig, &config)
                .await
                .map_err(|e| failed(e.to_string()))?;
            status::gather(client, config)
                .await
                .map_err(|e| failed(e.to_string()))
        };
        match report.await {
            Ok(report) => {
                match output {
                    StatusOutput::Table => {
                        print!("{}", status::render_table(&report, SystemTime::now()))
                    }
                    StatusOutput::Json => match serde_json::to_string_pretty(&report) {
                        Ok(json) => println!("{json}"),
                        Err(e) => {
                            eprintln!("error: cannot render the report as JSON: {e}");
                            return ExitCode::from(1);
                        }
                    },
                }
                ExitCode::SUCCESS
            }
            Err((e, code)) => {
                eprintln!("error: {e}");
                code
            }
        }
    })
}

/// `initguard webhooks`: the audit on stdout.
fn webhooks_audit(
    path: Option<&Path>,
    kubeconfig: Option<&Path>,
    output: WebhooksOutput,
) -> ExitCode {
    // Without --config the defaults (which list no webhook) only set up the client.
    let loaded = match path {
        Some(p) => load(p),
        None => initguard::config::from_yaml_str("{}", "(defaults)").map_err(|e| {
            eprintln!("{e}");
            ExitCode::from(1)
        }),
    };
    let config = match loaded {
        Ok(c) => c,
        Err(code) => return code,
    };
    let gathered = one_shot(&config, kubeconfig, async |client| {
        inventory::gather(&client, path.map(|_| &config))
            .await
            .map_err(|e| e.to_string())
    });
    match gathered {
        Ok(found) => {
            match output {
                WebhooksOutput::Table => print!("{}", inventory::render_table(&found)),
                WebhooksOutput::Yaml => print!("{}", inventory::render_yaml(&found)),
            }
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// Run `work` with a client for `config` on a fresh runtime; an error is printed (exit 1).
fn one_shot<T>(
    config: &Config,
    kubeconfig: Option<&Path>,
    work: impl AsyncFnOnce(kube::Client) -> Result<T, String>,
) -> Result<T, ExitCode> {
    let rt = runtime()?;
    rt.block_on(async {
        let connection = status::connect(kubeconfig, config)
            .await
            .map_err(|e| e.to_string())?;
        work(connection.client).await
    })
    .map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(1)
    })
}

/// `initguard restore`: one line per listed webhook on stdout.
fn restore_now(
    path: &Path,
    kubeconfig: Option<&Path>,
    options: &restore::Options,
    conflicts_ok: bool,
) -> ExitCode {
    let config = match load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let done = one_shot(&config, kubeconfig, async |client| {
        restore::restore(&client, &config, options)
            .await
            .map_err(|e| e.to_string())
    });
    match done {
        Ok(lines) => {
            for line in &lines {
                println!("{line}");
            }
            if restore::succeeded(&lines, options.dry_run, conflicts_ok) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(code) => code,
    }
}

fn check_config(path: &std::path::Path, output: Output, kubeconfig: Option<&Path>) -> ExitCode {
    match initguard::config::load(path) {
        Ok(config) => {
            let found = match kubeconfig {
                Some(kubeconfig) => match missing_owners(kubeconfig, &config) {
                    Ok(found) => found,
                    Err(code) => return code,
                },
                None => ClusterFindings::default(),
            };
            let ClusterFindings {
                warnings: missing,
                errors,
                notes,
            } = found;
            // A DaemonSet owner that does not exist is an error: the step it names can never
            // be judged, so the config says something the cluster cannot back.
            for line in &errors {
                eprintln!("error: {line}");
            }
            match output {
                Output::Text => {
                    print!("{}", config.summary());
                    for line in &notes {
                        println!("note: {line}");
                    }
                    for line in &missing {
                        println!("warning: {line}");
                    }
                }
                // stdout stays one JSON document; the warnings go to stderr.
                Output::Json => match serde_json::to_string_pretty(&config) {
                    Ok(json) => {
                        println!("{json}");
                        for line in &notes {
                            eprintln!("note: {line}");
                        }
                        for line in &missing {
                            eprintln!("warning: {line}");
                        }
                    }
                    Err(e) => {
                        eprintln!("error: cannot render configuration as JSON: {e}");
                        return ExitCode::from(1);
                    }
                },
            }
            if errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

/// What `check-config --kubeconfig` found in the cluster.
#[derive(Default)]
struct ClusterFindings {
    warnings: Vec<String>,
    errors: Vec<String>,
    notes: Vec<String>,
}

/// The listed owners missing from the cluster of `kubeconfig`, bypass records left on
/// webhooks no longer listed, and the node stage's DaemonSets; exit 1 when it cannot be
/// reached at all (a valid config with missing owners is still exit 0: they are warnings,
/// except a missing DaemonSet owner, an error).
fn missing_owners(kubeconfig: &Path, config: &Config) -> Result<ClusterFindings, ExitCode> {
    let rt = runtime()?;
    rt.block_on(async {
        match status::connect(Some(kubeconfig), config).await {
            // Reachability first: "could not check" for every owner would bury the cause.
            Ok(conn) => match conn.client.apiserver_version().await {
                Ok(_) => {
                    // One read of `/apis` for the three checks.
                    let discovery = initguard::discovery::Discovery::new(conn.client);
                    let mut lines = initguard::owners::missing_owners(&discovery, config).await;
                    lines.extend(restore::orphaned_records(&discovery, config).await);
                    lines.extend(
                        initguard::guard::webhooks::canary_findings(&discovery, config).await,
                    );
                    let stage =
                        initguard::owners::daemonset_owners(discovery.client(), config).await;
                    lines.extend(stage.warnings);
                    Ok(ClusterFindings {
                        warnings: lines,
                        errors: stage.errors,
                        notes: stage.notes,
                    })
                }
                Err(e) => {
                    eprintln!("error: cannot reach the API server to check the owners: {e}");
                    Err(ExitCode::from(1))
                }
            },
            Err(e) => {
                eprintln!("error: {e}");
                Err(ExitCode::from(1))
            }
        }
    })
}
