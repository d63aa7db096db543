//! `initguard demo`: the README's first command, run as a user would (the binary, default
//! mechanism) and through the library (legacy initializers, at a faster time scale).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use initguard::config::Mechanism;
use initguard::demo::DemoGuard;
use initguard_sim::demo::{DemoError, DemoOptions, run_with_output};

const BIN: &str = env!("CARGO_BIN_EXE_initguard");

/// The two right-most cells (without guard, with guard) of the table row starting with `label`.
fn row<'a>(output: &'a str, label: &str) -> (&'a str, &'a str) {
    let line = output
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no table row {label:?} in:\n{output}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert!(cells.len() >= 2, "short row {line:?}");
    (cells[cells.len() - 2], cells[cells.len() - 1])
}

fn numbers(output: &str, label: &str) -> (u64, u64) {
    let (a, b) = row(output, label);
    let parse = |s: &str| {
        s.parse::<u64>()
            .unwrap_or_else(|_| panic!("row {label:?}: {s:?} is not a number"))
    };
    (parse(a), parse(b))
}

#[test]
fn demo_help_names_its_options() {
    let out = Command::new(BIN).args(["demo", "--help"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in ["--mechanism", "--serve", "schedulingGates", "initializers"] {
        assert!(help.contains(needle), "{needle:?} missing from:\n{help}");
    }
}

#[test]
fn demo_rejects_an_unknown_mechanism_with_a_usage_error() {
    let out = Command::new(BIN)
        .args(["demo", "--mechanism", "webhooks"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("schedulingGates"), "{err}");
}

/// The whole default demo, as the README runs it: exits 0 within a minute and its table shows
/// the guard at work.
#[test]
fn default_demo_exits_zero_within_a_minute_and_shows_the_guard_working() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("pile.svg");
    let mut child = Command::new(BIN)
        .arg("demo")
        .arg("--plot")
        .arg(&plot)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            let partial = reader.join().unwrap();
            panic!("demo still running after 60s; output so far:\n{partial}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = reader.join().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        status.success(),
        "exit {status}\nstdout:\n{output}\nstderr:\n{stderr}"
    );

    // Narration as it happened, then the table.
    assert!(output.contains("owner killed"), "{output}");
    assert!(
        output.contains("guard: bypassed sidecar.example.com on demo/"),
        "{output}"
    );
    assert!(output.contains("http://127.0.0.1:"), "{output}");
    let (without, with) = numbers(&output, "guard bypasses");
    assert_eq!(without, 0);
    assert!(with > 0, "no bypass with the guard:\n{output}");
    let (without, with) = numbers(&output, "largest pile");
    assert!(
        without > with,
        "pile without the guard ({without}) not larger than with it ({with}):\n{output}"
    );
    assert_eq!(
        numbers(&output, "unlabeled pods written by the guard"),
        (0, 0)
    );
    assert_eq!(numbers(&output, "bypasses of the healthy"), (0, 0));
    let (_, with) = numbers(&output, "still waiting at the end");
    assert_eq!(with, 0, "{output}");

    // The picture, read with an XML parser of its own: both runs drawn, the pile without the
    // guard higher than with it (SVG's y grows downwards).
    let svg = std::fs::read_to_string(&plot).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("not XML: {e}"));
    let series = |colour: &str| -> Vec<(f64, f64)> {
        doc.descendants()
            .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some(colour))
            .map(|n| {
                n.attribute("points")
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|p| p.split_once(','))
                    .map(|(x, y)| (x.parse().unwrap(), y.parse().unwrap()))
                    .collect::<Vec<(f64, f64)>>()
            })
            .max_by_key(Vec::len)
            .unwrap_or_else(|| panic!("no polyline in {colour}"))
    };
    let top = |points: &[(f64, f64)]| points.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    let (without, with) = (series("#C0392B"), series("#1F6FB2"));
    assert!(without.len() > 20 && with.len() > 20, "sampled every tick");
    assert!(
        top(&without) < top(&with),
        "the pile without the guard ({}) must peak above the one with it ({})",
        top(&without),
        top(&with)
    );
    for text in ["without initguard", "with initguard", "owner down"] {
        assert!(
            doc.descendants()
                .any(|n| n.text().map(str::trim) == Some(text)),
            "no {text:?} label in the SVG"
        );
    }
}

#[test]
fn demo_plot_to_an_unwritable_path_is_a_usage_error() {
    let out = Command::new(BIN)
        .args(["demo", "--plot", "/nonexistent/dir/pile.svg"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: --plot /nonexistent/dir/pile.svg: No such file or directory"),
        "{stderr}"
    );
}

/// A `Write` whose bytes the test can read afterwards.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_initializers_demo_through_the_library() {
    let out = Shared::default();
    let opts = DemoOptions {
        mechanism: Mechanism::Initializers,
        serve: false,
        time_scale: 0.5,
    };
    let summary = run_with_output(opts, &DemoGuard, Box::new(out.clone()))
        .await
        .unwrap();
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let (a, b) = (&summary.without_guard, &summary.with_guard);

    assert!(!a.with_guard && b.with_guard);
    assert_eq!(a.total_bypasses(), 0);
    assert!(b.total_bypasses() > 0, "{text}");
    // The blocked CREATEs are what piles pods up on a legacy cluster, and what the guard stops.
    assert!(
        a.create_timeouts > b.create_timeouts,
        "timeouts {} vs {}:\n{text}",
        a.create_timeouts,
        b.create_timeouts
    );
    assert!(a.pods_created > b.pods_created, "{text}");
    assert!(a.largest_pile > b.largest_pile, "{text}");
    assert!(b.longest_wait_opted_in < a.longest_wait_opted_in, "{text}");
    // Safety: unlabeled pods exist, and the guard never wrote to them nor bypassed the healthy
    // initializer.
    assert!(b.unlabeled_pods > 0);
    assert_eq!(b.unlabeled_pods_written_by_guard, 0);
    assert_eq!(b.healthy_initializer_bypasses, 0);
    assert_eq!(
        b.pods_created,
        b.initialized_by_owners + b.initialized_after_bypass + b.still_waiting
    );

    assert!(text.contains("legacy pod initializers"), "{text}");
    assert!(text.contains("timed out after 1.0s (504)"), "{text}");
    assert!(text.contains("pod CREATEs timed out (504)"), "{text}");
    assert!(summary.guard_url.starts_with("http://127.0.0.1:"));
}

#[tokio::test]
async fn out_of_range_time_scale_is_refused() {
    for scale in [0.0, -1.0, f64::NAN, 100.0] {
        let opts = DemoOptions {
            time_scale: scale,
            ..DemoOptions::default()
        };
        let err = run_with_output(opts, &DemoGuard, Box::new(Shared::default()))
            .await
            .unwrap_err();
        assert!(matches!(err, DemoError::TimeScale(_)), "{err}");
    }
}
