//! Decode cost: the guard's slim pod type against the full `k8s_openapi` Pod, on the same
//! realistic JSON pods (managedFields, two containers, volumes, status, annotations).
//!
//! Reports nanoseconds per pod and the bytes each decoded pod keeps alive, measured by a
//! counting global allocator (requested bytes; the system allocator adds its own per-chunk
//! overhead on top). Prints a Markdown section on stdout; see benches/README.md.
//!
//! Usage: `cargo bench --bench decode -- [--pods N] [--rounds N]`

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use initguard::pod::SlimPod;
use initguard_test_support::alloc::{Counting, live};
use k8s_openapi::api::core::v1::Pod;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct Args {
    pods: usize,
    rounds: usize,
}

const USAGE: &str = "usage: decode [--pods N] [--rounds N]   (defaults: 50000 pods, 3 rounds)";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        pods: 50_000,
        rounds: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            let v = it.next().ok_or_else(|| format!("{name} needs a value"))?;
            v.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: expected a positive whole number, got {v:?}"))
        };
        match arg.as_str() {
            "--pods" => args.pods = number("--pods")?,
            "--rounds" => args.rounds = number("--rounds")?,
            // `cargo bench` passes --bench to harness-less benchmarks.
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    eprintln!("decode: generating {} pods", args.pods);
    let docs: Vec<String> = (0..args.pods)
        .map(|i| realistic_pod(i).to_string())
        .collect();
    let json_bytes: usize = docs.iter().map(String::len).sum();

    // Sanity: both types read the same pods, and the slim one finds the gates.
    let gated = docs
        .iter()
        .filter_map(|d| serde_json::from_str::<SlimPod>(d).ok())
        .filter(|p| !p.scheduling_gates.is_empty())
        .count();
    if gated != args.pods.div_ceil(10) {
        eprintln!(
            "error: SlimPod found {gated} gated pods, expected {}",
            args.pods.div_ceil(10)
        );
        return ExitCode::from(1);
    }

    let slim = match measure::<SlimPod>(&docs, args.rounds) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: decoding SlimPod: {e}");
            return ExitCode::from(1);
        }
    };
    let full = match measure::<Pod>(&docs, args.rounds) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: decoding Pod: {e}");
            return ExitCode::from(1);
        }
    };
    // A second slim pass after the full one, so drift on a shared machine shows.
    let slim_again = match measure::<SlimPod>(&docs, args.rounds) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: decoding SlimPod: {e}");
            return ExitCode::from(1);
        }
    };

    let n = args.pods as f64;
    println!("## Decode cost: `SlimPod` vs `k8s_openapi` `Pod`\n");
    println!(
        "{}\n",
        initguard_test_support::bench::machine_line(env!("CARGO_PKG_VERSION"))
    );
    println!(
        "{} realistic pods, {:.1} KiB of JSON each on average (managedFields, 2 containers, \
         volumes, tolerations, status with conditions and container statuses, annotations \
         including last-applied-configuration; 1 in 10 carries a scheduling gate). Each type \
         decodes all of them with `serde_json::from_str` and keeps them in a `Vec`; {} rounds \
         per pass. Retained bytes are heap bytes requested and not freed, counted by a global \
         allocator in the benchmark (the system allocator's per-chunk overhead comes on top), \
         plus the `Vec` slot itself.\n",
        args.pods,
        json_bytes as f64 / n / 1024.0,
        args.rounds,
    );
    println!(
        "| type | ns/pod (best) | ns/pod (median) | retained bytes/pod | live allocations/pod |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, m) in [
        ("`SlimPod` (pass 1)", &slim),
        ("`Pod` (k8s-openapi)", &full),
        ("`SlimPod` (pass 2)", &slim_again),
    ] {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.1} |",
            m.best_ns(n),
            m.median_ns(n),
            m.retained_bytes as f64 / n,
            m.retained_allocs as f64 / n,
        );
    }
    let slim_best = slim.best_ns(n).min(slim_again.best_ns(n));
    println!(
        "| **`Pod` / `SlimPod`** | **{:.1}×** | | **{:.1}×** | **{:.1}×** |",
        full.best_ns(n) / slim_best,
        full.retained_bytes as f64 / slim.retained_bytes.max(1) as f64,
        full.retained_allocs as f64 / slim.retained_allocs.max(1) as f64,
    );
    println!();
    println!(
        "For 50,000 pods: `SlimPod` keeps {:.1} MiB, `Pod` {:.1} MiB (the guard keeps only \
         waiting pods, but the watch decodes every pod event).\n",
        slim.retained_bytes as f64 / n * 50_000.0 / 1_048_576.0,
        full.retained_bytes as f64 / n * 50_000.0 / 1_048_576.0,
    );
    ExitCode::SUCCESS
}

/// Timings of several rounds and what one full decode keeps alive.
struct Measurement {
    rounds: Vec<Duration>,
    retained_bytes: isize,
    retained_allocs: isize,
}

impl Measurement {
    fn best_ns(&self, n: f64) -> f64 {
        self.rounds
            .iter()
            .min()
            .map_or(0.0, |d| d.as_nanos() as f64 / n)
    }

    fn median_ns(&self, n: f64) -> f64 {
        let mut sorted = self.rounds.clone();
        sorted.sort();
        sorted
            .get(sorted.len() / 2)
            .map_or(0.0, |d| d.as_nanos() as f64 / n)
    }
}

fn measure<T: DeserializeOwned>(docs: &[String], rounds: usize) -> Result<Measurement, String> {
    let mut times = Vec::with_capacity(rounds);
    let mut retained = (0, 0);
    for round in 0..rounds {
        let before = live();
        let start = Instant::now();
        let mut kept: Vec<T> = Vec::with_capacity(docs.len());
        for (i, doc) in docs.iter().enumerate() {
            kept.push(serde_json::from_str(doc).map_err(|e| format!("pod {i}: {e}"))?);
        }
        times.push(start.elapsed());
        let after = live();
        if round == 0 {
            retained = (after.0 - before.0, after.1 - before.1);
        }
        drop(black_box(kept));
    }
    Ok(Measurement {
        rounds: times,
        retained_bytes: retained.0,
        retained_allocs: retained.1,
    })
}

/// A pod as a real API server returns it for a Job's worker: `i` varies names, UIDs, IPs,
/// times and which pods are gated.
fn realistic_pod(i: usize) -> Value {
    let name = format!("batch-worker-{:05}-{}", i / 7, suffix(i));
    let uid = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        i * 2_654_435_761 % 0xffff_ffff,
        i % 0xffff,
        i % 0xfff,
        (i * 7) % 0xfff,
        i * 97
    );
    let job = format!("batch-worker-{:05}", i / 7);
    let created = format!(
        "2026-11-{:02}T{:02}:{:02}:{:02}Z",
        1 + i % 28,
        i % 24,
        i % 60,
        (i * 7) % 60
    );
    let ip = format!("10.{}.{}.{}", 20 + i % 200, (i / 250) % 250, 1 + i % 250);
    let applied = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"labels": {"app": "batch-worker", "tier": "compute"}, "name": name, "namespace": "analytics"},
        "spec": {"containers": [{"image": "registry.example.com/analytics/worker:2.14.3", "name": "worker"}]},
    })
    .to_string();
    let fields_spec = json!({
        "f:spec": {
            "f:containers": {"k:{\"name\":\"worker\"}": {
                ".": {}, "f:args": {}, "f:env": {
                    ".": {},
                    "k:{\"name\":\"JOB_ID\"}": {".": {}, "f:name": {}, "f:value": {}},
                    "k:{\"name\":\"SHARD\"}": {".": {}, "f:name": {}, "f:value": {}},
                    "k:{\"name\":\"POD_IP\"}": {".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}
                },
                "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
                "f:volumeMounts": {".": {}, "k:{\"mountPath\":\"/data\"}": {".": {}, "f:mountPath": {}, "f:name": {}}}
            }},
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {},
            "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
            "f:volumes": {".": {}, "k:{\"name\":\"data\"}": {".": {}, "f:emptyDir": {}, "f:name": {}}}
        },
        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:batch.kubernetes.io/job-name": {}, "f:job-name": {}},
            "f:ownerReferences": {".": {}, "k:{\"uid\":\"0f1e2d3c\"}": {}}}
    });
    let fields_status = json!({
        "f:status": {
            "f:conditions": {
                "k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
            },
            "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {},
            "f:podIPs": {".": {}, "k:{\"ip\":\"10.0.0.1\"}": {".": {}, "f:ip": {}}}, "f:startTime": {}
        }
    });
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": created});
    let container = |name: &str, image: &str, cpu: &str, memory: &str| {
        json!({
            "name": name, "image": image, "args": ["--shard", (i % 64).to_string(), "--verbose"],
            "env": [
                {"name": "JOB_ID", "value": job},
                {"name": "SHARD", "value": (i % 64).to_string()},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}
            ],
            "ports": [{"containerPort": 8080, "name": "metrics", "protocol": "TCP"}],
            "resources": {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}},
            "volumeMounts": [
                {"mountPath": "/data", "name": "data"},
                {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": true}
            ],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent"
        })
    };
    let container_status = |name: &str, image: &str| {
        json!({
            "name": name, "image": image, "imageID": format!("{image}@sha256:{:064x}", i),
            "containerID": format!("containerd://{:064x}", i * 31), "ready": true, "restartCount": 0,
            "started": true, "state": {"running": {"startedAt": created}}, "lastState": {}
        })
    };
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "generateName": format!("{job}-"), "namespace": "analytics", "uid": uid,
            "resourceVersion": (1_000_000 + i).to_string(), "creationTimestamp": created,
            "labels": {
                "app": "batch-worker", "tier": "compute", "job-name": job,
                "batch.kubernetes.io/job-name": job, "controller-uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
                "initguard.io/bypass": "true"
            },
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": applied,
                "prometheus.io/scrape": "true", "prometheus.io/port": "8080",
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "true"
            },
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
                "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1", "fieldsV1": fields_spec},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1", "fieldsV1": fields_status, "subresource": "status"}
            ]
        },
        "spec": {
            "containers": [
                container("worker", "registry.example.com/analytics/worker:2.14.3", "500m", "512Mi"),
                container("log-shipper", "registry.example.com/infra/fluent-bit:3.1.4", "50m", "64Mi")
            ],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]}}
            ],
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": format!("node-{}", i % 40),
            "securityContext": {}, "schedulerName": "default-scheduler", "priority": 0,
            "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        },
        "status": {
            "phase": "Running", "hostIP": "192.168.1.17", "hostIPs": [{"ip": "192.168.1.17"}],
            "podIP": ip, "podIPs": [{"ip": ip}], "startTime": created, "qosClass": "Guaranteed",
            "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
            "containerStatuses": [
                container_status("worker", "registry.example.com/analytics/worker:2.14.3"),
                container_status("log-shipper", "registry.example.com/infra/fluent-bit:3.1.4")
            ]
        }
    });
    if i.is_multiple_of(10) {
        pod["spec"]["schedulingGates"] = json!([{"name": "kueue.x-k8s.io/admission"}]);
        pod["status"] = json!({
            "phase": "Pending", "qosClass": "Guaranteed",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates", "lastProbeTime": null, "lastTransitionTime": created}]
        });
    }
    pod
}

/// A five-character generateName-style suffix derived from `i`.
fn suffix(i: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = i.wrapping_mul(2_654_435_761);
    (0..5)
        .map(|_| {
            let c = char::from(ALPHABET[n % ALPHABET.len()]);
            n /= ALPHABET.len();
            c
        })
        .collect()
}
