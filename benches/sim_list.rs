//! Listing many pods from the simulated API server through kube::Api, in pages of 500.
//!
//! Seeds N gated pods (default 50,000) over HTTP, then lists them all several times with
//! `limit=500` (namespaced and cluster-wide, with and without a label selector) and prints
//! the figures as Markdown. A printed benchmark, not a timed test. Usage:
//! `cargo bench --bench sim_list -- [--pods N] [--rounds N]`

use initguard_sim::SimClients as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube_sim::{Sim, SimOptions};
use tokio::time::Instant;

const NS: &str = "bench";
const PAGE: u32 = 500;
const SEED_CONCURRENCY: usize = 32;

struct Args {
    pods: usize,
    rounds: usize,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        pods: 50_000,
        rounds: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--pods" => args.pods = it.next().context("--pods needs a number")?.parse()?,
            "--rounds" => args.rounds = it.next().context("--rounds needs a number")?.parse()?,
            // cargo bench passes --bench to every bench binary.
            "--bench" => {}
            other => bail!("unknown argument {other}; use --pods N, --rounds N"),
        }
    }
    Ok(args)
}

fn machine_line() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!(
        "_machine: {cores} cores, {mem_gib:.1} GiB memory; initguard {} (release); {}_",
        env!("CARGO_PKG_VERSION"),
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
    )
}

/// Resident memory of this process (server and client share it), in MiB.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn gated_pod(i: usize) -> Pod {
    let app = format!("app-{}", i % 10);
    initguard_test_support::pod::gated(
        &format!("pod-{i:06}"),
        &[("app", &app)],
        &["example.com/gate"],
    )
}

/// List every page; returns (items, pages, elapsed).
async fn list_all(api: &Api<Pod>, lp: ListParams) -> Result<(usize, usize, Duration)> {
    let start = Instant::now();
    let mut items = 0;
    let mut pages = 0;
    let mut lp = lp.limit(PAGE);
    loop {
        let page = api.list(&lp).await.context("list page")?;
        pages += 1;
        items += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    Ok((items, pages, start.elapsed()))
}

async fn run(args: Args) -> Result<()> {
    let sim = Sim::start(SimOptions {
        // Enough window for the seeding; list cost does not depend on it.
        history_window: 10_000,
        ..SimOptions::default()
    })
    .await?;
    let client = sim.client("admin");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NS.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .context("create namespace")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    eprintln!("seeding {} pods…", args.pods);
    let seed_start = Instant::now();
    stream::iter(0..args.pods)
        .map(|i| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &gated_pod(i))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(SEED_CONCURRENCY)
        .try_collect::<()>()
        .await
        .context("seed pods")?;
    let seeded = seed_start.elapsed();
    let rss = rss_mib();

    println!(
        "## Simulated API server: listing {} pods in pages of {PAGE}\n",
        args.pods
    );
    println!("{}\n", machine_line());
    println!(
        "Seeded {} gated pods with {SEED_CONCURRENCY} concurrent CREATEs in {:.2} s ({:.0} creates/s); \
         resident memory of the process (server + client) afterwards: {rss:.0} MiB.\n",
        args.pods,
        seeded.as_secs_f64(),
        args.pods as f64 / seeded.as_secs_f64(),
    );
    println!("| list | round | items | pages | time | pods/s | ms/page |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let all: Api<Pod> = Api::all(client.clone());
    let cases: [(&str, &Api<Pod>, ListParams); 3] = [
        ("namespaced", &pods, ListParams::default()),
        ("all namespaces", &all, ListParams::default()),
        (
            "label app=app-3 (1 in 10)",
            &pods,
            ListParams::default().labels("app=app-3"),
        ),
    ];
    for (label, api, lp) in cases {
        for round in 1..=args.rounds {
            let (items, pages, took) = list_all(api, lp.clone()).await?;
            let secs = took.as_secs_f64();
            println!(
                "| {label} | {round} | {items} | {pages} | {:.3} s | {:.0} | {:.1} |",
                secs,
                items as f64 / secs,
                secs * 1000.0 / pages as f64,
            );
        }
    }
    println!(
        "\nEach page is one GET through kube::Api over HTTP on 127.0.0.1 (JSON encode in the \
         server, decode into k8s-openapi `Pod`s in the client, same process)."
    );
    sim.shutdown().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sim_list: {e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sim_list: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sim_list: {e:#}");
            ExitCode::FAILURE
        }
    }
}
