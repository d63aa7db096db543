//! The command line: every subcommand and flag of `initguard` (README "Commands"). Parsing
//! only; `main.rs` wires each command to the library.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Where the static pod and the Deployment mount the configuration.
pub const DEFAULT_CONFIG: &str = "/etc/initguard/config.yaml";

#[derive(Parser)]
#[command(
    name = "initguard",
    version,
    about = "Keeps pods from waiting forever on a failed initializer or scheduling gate"
)]
/// `initguard` and its subcommand.
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format on stderr, for every subcommand: text (coloured only on a terminal, never
    /// with NO_COLOR set) or json (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Run the guard: watch, decide, bypass; serve /metrics, /healthz, /readyz, /status.
    Run {
        /// Path of the YAML configuration.
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Kubeconfig file; default $KUBECONFIG or ~/.kube/config, then in-cluster.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Log and count decisions without writing (overrides the config).
        #[arg(long)]
        dry_run: bool,
    },
    /// One-shot, read-only report: waiting pods, waits, owner states, planned actions.
    Status {
        /// Path of the YAML configuration; default: /etc/initguard/config.yaml inside the
        /// guard's pod, else the chart's ConfigMap (see --config-map).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The ConfigMap (NAMESPACE/NAME) whose config.yaml is the configuration; default: the
        /// one labelled app.kubernetes.io/name=initguard that holds config.yaml.
        #[arg(long, value_parser = crate::config::parse_object_ref, conflicts_with = "config")]
        config_map: Option<crate::config::ObjectRef>,
        /// Kubeconfig file; default $KUBECONFIG or ~/.kube/config, then in-cluster.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Report format on stdout.
        #[arg(long, value_enum, default_value_t = StatusOutput::Table)]
        output: StatusOutput,
    },
    /// Undo every recorded webhook bypass (or those named) now, whatever the owner's state, as
    /// the guard's own restore does, leaving a tombstone: no guard bypasses the entry again
    /// until its owner has been seen up. Exit 0 when no recorded bypass remains (with
    /// --conflicts-ok: when only conflicts remain), 1 otherwise.
    Restore {
        /// Path of the YAML configuration (which webhooks are listed).
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Kubeconfig file; default $KUBECONFIG or ~/.kube/config, then in-cluster.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Only this listed webhook (KIND/CONFIGURATION/WEBHOOK); repeatable.
        #[arg(long = "webhook", value_parser = crate::config::parse_webhook_id)]
        webhooks: Vec<crate::config::WebhookId>,
        /// Print what would be restored and exit 0.
        #[arg(long)]
        dry_run: bool,
        /// Exit 0 when only conflicts remain (an entry someone else changed is left alone).
        #[arg(long)]
        conflicts_ok: bool,
        /// Who the tombstone names (the chart's uninstall hook passes `uninstall`).
        #[arg(long, value_enum, default_value_t = crate::restore::RestoredBy::Cli, hide = true)]
        by: crate::restore::RestoredBy,
    },
    /// Read-only audit of every admission webhook: failure policy, backend, Service and ready
    /// endpoints, risks, whether guarded; bypass records left behind; CRD conversion webhooks
    /// and unavailable APIServices.
    Webhooks {
        /// The guard's configuration, to say which entries it guards (none without it).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Kubeconfig file; default $KUBECONFIG or ~/.kube/config, then in-cluster.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Report format on stdout: table, or yaml (a `webhooks:` section to start from).
        #[arg(long, value_enum, default_value_t = WebhooksOutput::Table)]
        output: WebhooksOutput,
    },
    /// Why one pod waits, from what your own kubeconfig may read: its pending initializers,
    /// initguard's bypass record and initguard's Events about it (`kubectl initguard why`);
    /// where you may read the guard's configuration and owners, also its plan for the pod.
    Why {
        /// The pod's name.
        pod: String,
        /// Its namespace; default: the kubeconfig context's, else `default`.
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Kubeconfig file; default $KUBECONFIG or ~/.kube/config, then in-cluster.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Where pending initializers live: schedulingGates, or initializers (Kubernetes
        /// 1.7-1.13, whose initializing pods only such reads see); default: the
        /// configuration's, else schedulingGates.
        #[arg(long, value_enum)]
        mechanism: Option<MechanismArg>,
        /// Path of the guard's configuration; default: /etc/initguard/config.yaml inside the
        /// guard's pod, else the chart's ConfigMap (see --config-map), where you may read it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The ConfigMap (NAMESPACE/NAME) whose config.yaml is the guard's configuration;
        /// default: the one labelled app.kubernetes.io/name=initguard that holds config.yaml.
        #[arg(long, value_parser = crate::config::parse_object_ref, conflicts_with = "config")]
        config_map: Option<crate::config::ObjectRef>,
    },
    /// Validate a configuration file: exit 0 with a summary, or 2 with located errors.
    CheckConfig {
        /// Path of the YAML configuration.
        path: PathBuf,
        /// text: a normalized summary; json: the resolved configuration.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Also report listed owners that do not exist in this cluster (warnings; exit 0).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// The simulated API server alone (plain HTTP); writes a kubeconfig for any client.
    #[cfg(feature = "sim")]
    Sim(initguard_sim::cli::SimArgs),
    /// Embedded simulated cluster and guard, narrated: one owner outage without, then with the
    /// guard, and a side-by-side table. No cluster needed.
    #[cfg(feature = "sim")]
    Demo {
        /// Pending-initializer mechanism of the simulated cluster.
        #[arg(long, value_enum, default_value_t = DemoMechanism::SchedulingGates)]
        mechanism: DemoMechanism,
        /// Afterwards keep the simulated cluster and the guard running until Ctrl-C, with a
        /// kubeconfig for kubectl.
        #[arg(long)]
        serve: bool,
        /// Also draw the pile of waiting pods over time, without and with the guard, as an
        /// SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
}

#[cfg(feature = "sim")]
/// `initguard demo --mechanism`.
#[derive(Clone, Copy, ValueEnum)]
pub enum DemoMechanism {
    #[value(name = "schedulingGates", alias = "scheduling-gates")]
    SchedulingGates,
    #[value(name = "initializers", alias = "legacy")]
    Initializers,
}

/// `initguard why --mechanism`.
#[derive(Clone, Copy, ValueEnum)]
pub enum MechanismArg {
    #[value(name = "schedulingGates", alias = "scheduling-gates")]
    SchedulingGates,
    #[value(name = "initializers", alias = "legacy")]
    Initializers,
}

impl From<MechanismArg> for crate::config::Mechanism {
    fn from(m: MechanismArg) -> Self {
        match m {
            MechanismArg::SchedulingGates => crate::config::Mechanism::SchedulingGates,
            MechanismArg::Initializers => crate::config::Mechanism::Initializers,
        }
    }
}

/// The name kubectl runs the binary by as a plugin (`kubectl initguard ...`).
pub const KUBECTL_PLUGIN: &str = "kubectl-initguard";

/// Parse `args` (the process's, program name first). Run as [`KUBECTL_PLUGIN`] (a link or a
/// copy of that name on the PATH), the same commands answer, and help says
/// `kubectl initguard`.
pub fn parse_from<I, T>(args: I) -> Cli
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory as _, FromArgMatches as _};
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let as_plugin = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_stem())
        .is_some_and(|n| n == KUBECTL_PLUGIN);
    let mut command = Cli::command();
    if as_plugin {
        command = command.bin_name("kubectl initguard");
    }
    let parsed = command
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    }
}

/// `initguard check-config --output`.
#[derive(Clone, Copy, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// `initguard webhooks --output`.
#[derive(Clone, Copy, ValueEnum)]
pub enum WebhooksOutput {
    /// One line per entry, tab-separated, then what was left behind or cannot be guarded.
    Table,
    /// A `webhooks:` section for the unguarded fail-closed entries (passes check-config).
    Yaml,
}

/// `initguard status --output`.
#[derive(Clone, Copy, ValueEnum)]
pub enum StatusOutput {
    Table,
    Json,
}

/// `--log-format`, on every subcommand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Whether text logs may carry ANSI colours: only on a terminal, and never when `NO_COLOR` is
/// set to anything but the empty string (no-color.org).
pub fn colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(feature = "sim")]
impl From<DemoMechanism> for crate::config::Mechanism {
    fn from(m: DemoMechanism) -> Self {
        use crate::config::Mechanism;
        match m {
            DemoMechanism::SchedulingGates => Mechanism::SchedulingGates,
            DemoMechanism::Initializers => Mechanism::Initializers,
        }
    }
}
