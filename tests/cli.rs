//! The command line as a user meets it: help for every flag, `--log-format` on every
//! subcommand, colour only on a terminal and never with `NO_COLOR`. Judged from the binary's
//! own stderr, read by plain byte checks and `serde_json`, not by the logging code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::{CommandFactory as _, Parser as _};
use initguard::cli::Cli;
use initguard_test_support::tools;

const BIN: &str = env!("CARGO_BIN_EXE_initguard");

/// A config and a kubeconfig naming a server that refuses connections at once: `status` and
/// `check-config --kubeconfig` then log kube's connection error and exit 1 by themselves.
struct Unreachable {
    _dir: tempfile::TempDir,
    config: PathBuf,
    kubeconfig: PathBuf,
}

fn unreachable() -> Unreachable {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "listen: 127.0.0.1:0\n").unwrap();
    // Port 1 on loopback: nothing listens there, so the connect fails without a wait.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\n\
         clusters: [{name: c, cluster: {server: \"http://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: x}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .unwrap();
    Unreachable {
        _dir: dir,
        config,
        kubeconfig,
    }
}

fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("NO_COLOR").env_remove("RUST_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"))
}

fn status_args(u: &Unreachable) -> Vec<String> {
    vec![
        "status".into(),
        "--config".into(),
        u.config.display().to_string(),
        "--kubeconfig".into(),
        u.kubeconfig.display().to_string(),
    ]
}

#[test]
fn every_flag_and_argument_has_help() {
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        let path = format!("{path} {}", cmd.get_name());
        for arg in cmd.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            if !builtin && help.trim().is_empty() {
                missing.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_name() != "help" {
                walk(sub, &path, missing);
            }
        }
    }
    let mut missing = Vec::new();
    walk(&Cli::command(), "", &mut missing);
    assert!(missing.is_empty(), "flags without help: {missing:?}");
}

#[test]
fn log_format_is_taken_by_every_subcommand() {
    let mut subcommands: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .filter(|n| n != "help")
        .collect();
    subcommands.sort();
    let mut expected = vec![
        "check-config",
        "restore",
        "run",
        "status",
        "webhooks",
        "why",
    ];
    if cfg!(feature = "sim") {
        expected.extend(["demo", "sim"]);
    }
    expected.sort();
    assert_eq!(subcommands, expected);
    for sub in &subcommands {
        let required: &[&str] = match sub.as_str() {
            "check-config" => &["x.yaml"],
            "why" => &["web-1"],
            _ => &[],
        };
        for args in [
            [
                &["initguard", "--log-format", "json", sub.as_str()][..],
                required,
            ]
            .concat(),
            [
                &["initguard", sub.as_str()][..],
                required,
                &["--log-format", "json"],
            ]
            .concat(),
        ] {
            let parsed =
                Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?} is refused: {e}"));
            assert_eq!(
                parsed.log_format,
                initguard::cli::LogFormat::Json,
                "{args:?}"
            );
        }
    }
}

/// Every log line is one JSON object when asked for, on the subcommands that log through the
/// API client (`status`, `check-config --kubeconfig`); the plain `error:` summary stays text.
#[test]
fn json_logs_are_one_object_per_line() {
    let u = unreachable();
    let kubeconfig = u.kubeconfig.display().to_string();
    let config = u.config.display().to_string();
    let status = status_args(&u);
    let status: Vec<&str> = status.iter().map(String::as_str).collect();
    let check = ["check-config", &config, "--kubeconfig", &kubeconfig];
    for args in [&status[..], &check[..]] {
        let out = run(&[&["--log-format", "json"], args].concat(), &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut objects = 0;
        for line in stderr.lines() {
            if line.starts_with("error: ") {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{args:?}: not a JSON log line ({e}): {line}"));
            assert!(
                value["level"].is_string() && value["message"].is_string(),
                "{line}"
            );
            objects += 1;
        }
        assert!(objects > 0, "{args:?} logged nothing:\n{stderr}");
    }
}

#[test]
fn text_logs_carry_no_colour_when_piped() {
    let u = unreachable();
    let args = status_args(&u);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ERROR"), "no log line to judge:\n{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "ANSI codes on a pipe:\n{stderr:?}"
    );
}

/// Under a pseudo-terminal (util-linux `script`): coloured, unless `NO_COLOR` is set to a
/// non-empty value (no-color.org: an empty one does not count).
#[test]
fn text_logs_are_coloured_only_on_a_terminal_without_no_color() {
    if Command::new("script").arg("--version").output().is_err() {
        tools::missing(
            "cli::text_logs_are_coloured_only_on_a_terminal_without_no_color",
            "script",
            "apt-get install bsdutils",
        );
        return;
    }
    let u = unreachable();
    let command = format!(
        "{BIN} status --config {} --kubeconfig {}",
        u.config.display(),
        u.kubeconfig.display()
    );
    let on_a_terminal = |no_color: Option<&str>| -> String {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &command, "/dev/null"])
            .env_remove("NO_COLOR")
            .env_remove("RUST_LOG");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run script: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("ERROR"), "no log line to judge:\n{text}");
        text
    };
    assert!(
        on_a_terminal(None).contains("\x1b["),
        "no colour on a terminal"
    );
    assert!(
        on_a_terminal(Some("")).contains("\x1b["),
        "an empty NO_COLOR must not switch colour off"
    );
    let plain = on_a_terminal(Some("1"));
    assert!(
        !plain.contains('\x1b'),
        "colour despite NO_COLOR=1: {plain:?}"
    );
}

#[test]
fn check_config_on_a_missing_file_names_it_without_a_location() {
    let missing = Path::new("/nonexistent/dir/initguard.yaml");
    let out = run(&["check-config", &missing.display().to_string()], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        "/nonexistent/dir/initguard.yaml: cannot read the configuration: No such file or \
         directory (os error 2)"
    );
}

/// Run as `kubectl-initguard` (how kubectl finds a plugin: `kubectl initguard ...`), the same
/// binary answers the same commands and its help names itself as kubectl shows it.
#[test]
fn as_a_kubectl_plugin_it_answers_and_says_kubectl_initguard() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join(initguard::cli::KUBECTL_PLUGIN);
    std::os::unix::fs::symlink(BIN, &plugin).unwrap();
    let out = Command::new(&plugin)
        .args(["why", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    assert!(
        help.contains("Usage: kubectl initguard why [OPTIONS] <POD>"),
        "{help}"
    );
    // A usage error is exit 2, as for `initguard`.
    let out = Command::new(&plugin).arg("why").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // As `initguard`, help names `initguard`.
    let out = Command::new(BIN).args(["why", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: initguard why"));
}
