//! `initguard why POD` (also `kubectl initguard why POD`): why one pod waits, from what the
//! caller may read with their own kubeconfig and RBAC: the pod (its pending initializers and
//! initguard's bypass record) and initguard's Events about it in its namespace
//! (`InitializerWaiting`, `InitializerBypassed`). With the right to read the guard's
//! configuration (the chart's ConfigMap, or `--config`) and the owners, it adds what the guard
//! plans for the pod and each owner's state, as `status` computes them. What the caller may not
//! read is said, not guessed.

use std::fmt::Write as _;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use crate::bypass::{BYPASSED_ANNOTATION, BypassRecord, parse_records};
use crate::client::Connection;
use crate::config::Mechanism;
use crate::deployed::{Deployed, DeployedError};
use crate::guard::actuator::BYPASS_EVENT_REASON;
use crate::guard::waiting::WAITING_EVENT_REASON;
use crate::owners::OwnerReport;
use crate::pod::SlimPod;
use crate::report::PodStatus;
use crate::status::{plan_words, short, state_words};

/// Why `why` could not explain the pod.
#[derive(Debug, thiserror::Error)]
pub enum WhyError {
    #[error(
        "you may not read pods in namespace {namespace} ({reason}); ask for `get` on pods \
         there (kubectl auth can-i get pods -n {namespace})"
    )]
    Forbidden { namespace: String, reason: String },
    #[error(
        "no pod {namespace}/{name}{hint}",
        hint = if *.legacy {
            ""
        } else {
            " (on Kubernetes 1.7-1.13 a pod still initializing is hidden from reads: pass \
             --mechanism initializers)"
        }
    )]
    NotFound {
        namespace: String,
        name: String,
        legacy: bool,
    },
    #[error("reading pod {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

/// One Event of initguard's about the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// When it was last written (RFC 3339), as the server keeps it.
    pub at: String,
    pub reason: String,
    pub message: String,
}

/// What `why` found.
#[derive(Debug, Clone)]
pub struct Why {
    pub namespace: String,
    pub name: String,
    pub mechanism: Mechanism,
    /// Pending initializer names, in order.
    pub pending: Vec<String>,
    /// initguard's record of the initializers it removed.
    pub bypassed: Vec<BypassRecord>,
    /// initguard's Events about this pod, oldest first; Err: why they could not be read.
    pub said: Result<Vec<Said>, String>,
    /// The pod as read, for [`plan`].
    pub pod: SlimPod,
    /// What the guard's configuration plans for it; Err: why it could not be read. None: not
    /// asked for yet.
    pub plan: Option<Result<Planned, String>>,
}

/// What the guard's configuration plans for the pod, from the owners the caller may read.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Where the configuration was read (a file, or `ConfigMap NAMESPACE/NAME`).
    pub from: String,
    /// The pod, if the configuration tracks it (it has pending initializers).
    pub pod: Option<PodStatus>,
    /// The owners of its pending initializers.
    pub owners: Vec<OwnerReport>,
    /// Its wait on a listed init container (the node stage), if it has one.
    pub init: Option<crate::report::InitWaitStatus>,
    /// What the plan could not take from the cluster (counted as unknown or not opted in).
    pub unread: Vec<String>,
}

/// Adds what the guard's configuration `deployed` plans for the pod of `why`.
pub async fn plan(
    mut why: Why,
    connection: Connection,
    deployed: Result<Deployed, DeployedError>,
) -> Why {
    let planned = match deployed {
        Err(e) => Err(format!("{e}")),
        Ok(Deployed {
            config,
            from,
            left_out,
        }) => match crate::status::gather_pod(connection, &config, &why.pod).await {
            Ok((report, mut unread)) => {
                unread.extend(left_out);
                Ok(Planned {
                    from,
                    pod: report.waiting_pods.into_iter().next(),
                    owners: report.owners,
                    init: report.init_containers.into_iter().next(),
                    unread,
                })
            }
            Err(e) => Err(format!("from {from}: {e}")),
        },
    };
    why.plan = Some(planned);
    why
}

/// Read the pod `namespace/name` and initguard's Events about it.
pub async fn gather(
    client: kube::Client,
    mechanism: Mechanism,
    namespace: &str,
    name: &str,
) -> Result<Why, WhyError> {
    let pods: Api<SlimPod> = Api::namespaced(client.clone(), namespace);
    let pod = match pods.get_opt(name).await {
        Ok(Some(pod)) => pod,
        Ok(None) => {
            return Err(WhyError::NotFound {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                legacy: mechanism == Mechanism::Initializers,
            });
        }
        Err(kube::Error::Api(e)) if e.code == 403 => {
            return Err(WhyError::Forbidden {
                namespace: namespace.to_owned(),
                reason: e.message.clone(),
            });
        }
        Err(source) => {
            return Err(WhyError::Read {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            });
        }
    };
    let bypassed = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BYPASSED_ANNOTATION))
        .map(|a| parse_records(a))
        .unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let events: Api<Event> = Api::namespaced(client, namespace);
    let params = ListParams::default().fields(&format!(
        "involvedObject.kind=Pod,involvedObject.name={name}"
    ));
    let said = match events.list(&params).await {
        Ok(list) => {
            let mut said: Vec<(String, Said)> = list
                .items
                .into_iter()
                .filter(|e| {
                    // initguard's reasons, from initguard (whoever may create Events in the
                    // namespace could use the same reasons).
                    let ours = [
                        WAITING_EVENT_REASON,
                        BYPASS_EVENT_REASON,
                        crate::guard::recreate::WAITING_REASON,
                        crate::guard::recreate::RECREATED_REASON,
                    ]
                    .contains(&e.reason.as_deref().unwrap_or_default())
                        && e.reporting_component.as_deref() == Some("initguard");
                    // This pod, not an earlier one of the same name.
                    let this = e.involved_object.uid.as_deref().is_none_or(|u| u == uid);
                    ours && this
                })
                .map(|e| {
                    let at = e
                        .last_timestamp
                        .as_ref()
                        .or(e.first_timestamp.as_ref())
                        .map(|t| t.0.to_string())
                        .unwrap_or_default();
                    let said = Said {
                        at: at.clone(),
                        reason: e.reason.clone().unwrap_or_default(),
                        message: e.message.clone().unwrap_or_default(),
                    };
                    (at, said)
                })
                .collect();
            said.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(said.into_iter().map(|(_, s)| s).collect())
        }
        Err(kube::Error::Api(e)) if e.code == 403 => Err(format!(
            "you may not list Events in namespace {namespace} ({}); ask for `list` on events \
             there",
            e.message
        )),
        Err(e) => Err(format!("listing Events in namespace {namespace}: {e}")),
    };
    Ok(Why {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        mechanism,
        pending: pod.pending(mechanism).to_vec(),
        bypassed,
        said,
        pod,
        plan: None,
    })
}

/// The explanation as text; `now` is this machine's clock, for ages.
pub fn render(why: &Why, now: SystemTime) -> String {
    let mut out = String::new();
    let kind = crate::guard::waiting::entry_noun(why.mechanism);
    let pod = format!("{}/{}", why.namespace, why.name);
    if why.pending.is_empty() {
        let _ = writeln!(out, "pod {pod} waits on no {kind}.");
    } else {
        let _ = writeln!(
            out,
            "pod {pod} waits on {} {kind}(s): {}",
            why.pending.len(),
            why.pending.join(", ")
        );
    }
    for r in &why.bypassed {
        let _ = writeln!(
            out,
            "initguard removed {} ({}) at {}",
            r.initializer, r.reason, r.at
        );
    }
    match &why.said {
        Ok(said) if said.is_empty() => {
            let _ = writeln!(
                out,
                "initguard has said nothing about it: it explains a wait once the pod has waited \
                 half an initializer's deadline or the owner is down, and only for initializers \
                 its configuration guards."
            );
        }
        Ok(said) => {
            let _ = writeln!(out, "initguard said:");
            for s in said {
                let _ = writeln!(out, "  {}  {}  {}", s.at, s.reason, s.message);
            }
        }
        Err(why_not) => {
            let _ = writeln!(out, "initguard's Events: {why_not}");
        }
    }
    match &why.plan {
        None => {}
        Some(Err(why_not)) => {
            let _ = writeln!(out, "initguard's configuration: {why_not}");
        }
        Some(Ok(planned)) => render_plan(&mut out, planned, now),
    }
    out
}

fn render_plan(out: &mut String, planned: &Planned, now: SystemTime) {
    let _ = writeln!(out, "initguard's configuration ({}):", planned.from);
    render_steps(out, planned, now);
    if let Some(init) = &planned.init {
        let _ = writeln!(out, "  on node {}: {}", init.node, init.explanation);
    }
    for unread in &planned.unread {
        let _ = writeln!(out, "  not known here: {unread}");
    }
}

fn render_steps(out: &mut String, planned: &Planned, now: SystemTime) {
    let Some(pod) = &planned.pod else {
        let _ = writeln!(
            out,
            "  plans nothing for it: it tracks only pods that wait and are not being deleted."
        );
        return;
    };
    let _ = writeln!(
        out,
        "  the pod is {}",
        if pod.opted_in {
            "opted in"
        } else {
            "not opted in: initguard never changes it"
        }
    );
    for plan in &pod.initializers {
        let _ = writeln!(
            out,
            "  {}: waited {}; {}",
            plan.initializer,
            plan.waited.map_or_else(|| "-".to_owned(), short),
            plan_words(&plan.plan, now)
        );
        for owner in planned
            .owners
            .iter()
            .filter(|o| o.initializer == plan.initializer)
        {
            let _ = writeln!(
                out,
                "    owner {} {}: {}",
                owner.owner_kind,
                owner.target,
                state_words(owner.state, &owner.detail, now)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(pending: &[&str], said: Result<Vec<Said>, String>) -> Why {
        Why {
            namespace: "team-a".into(),
            name: "web-1".into(),
            mechanism: Mechanism::SchedulingGates,
            pending: pending.iter().map(|s| s.to_string()).collect(),
            bypassed: Vec::new(),
            said,
            pod: SlimPod::default(),
            plan: None,
        }
    }

    #[test]
    fn it_says_what_waits_and_what_initguard_said() {
        let text = render(
            &why(
                &["gates.example.com/warden"],
                Ok(vec![Said {
                    at: "2026-11-26T12:00:03Z".into(),
                    reason: "InitializerWaiting".into(),
                    message: "Waiting 45s on scheduling gate gates.example.com/warden".into(),
                }]),
            ),
            SystemTime::UNIX_EPOCH,
        );
        assert_eq!(
            text,
            "pod team-a/web-1 waits on 1 scheduling gate(s): gates.example.com/warden\n\
             initguard said:\n  2026-11-26T12:00:03Z  InitializerWaiting  Waiting 45s on \
             scheduling gate gates.example.com/warden\n"
        );
    }

    #[test]
    fn it_says_what_it_may_not_read_and_when_nothing_was_said() {
        let text = render(
            &why(&["a.example.com"], Err("you may not list Events".into())),
            SystemTime::UNIX_EPOCH,
        );
        assert!(
            text.ends_with("initguard's Events: you may not list Events\n"),
            "{text}"
        );
        let text = render(&why(&[], Ok(Vec::new())), SystemTime::UNIX_EPOCH);
        assert!(
            text.starts_with("pod team-a/web-1 waits on no scheduling gate.\n")
                && text.contains("has said nothing about it"),
            "{text}"
        );
    }

    #[test]
    fn with_the_configuration_it_says_the_plan_and_each_owners_state() {
        use crate::policy::{OwnerState, Plan, Reason};
        use std::time::Duration;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut w = why(&["a.example.com", "b.example.com"], Ok(Vec::new()));
        let plan = |initializer: &str, index, waited, plan| crate::policy::InitializerPlan {
            initializer: initializer.into(),
            index,
            waited,
            plan,
        };
        w.plan = Some(Ok(Planned {
            from: "ConfigMap ops/guard".into(),
            pod: Some(PodStatus {
                namespace: "team-a".into(),
                name: "web-1".into(),
                opted_in: true,
                controller: None,
                via: None,
                created: now,
                initializers: vec![
                    plan(
                        "a.example.com",
                        0,
                        Some(Duration::from_secs(65)),
                        Plan::BypassAt {
                            at: now + Duration::from_secs(30),
                            reason: Reason::Deadline,
                        },
                    ),
                    plan("b.example.com", 1, None, Plan::Never { why: "not listed" }),
                ],
            }),
            owners: vec![OwnerReport {
                initializer: "a.example.com".into(),
                owner_kind: "deployment",
                target: "ops/a".into(),
                state: OwnerState::Down {
                    since: now - Duration::from_secs(90),
                },
                detail: "0 of 1 available".into(),
            }],
            unread: vec!["whether optIn.namespaceSelector opts the namespace in".into()],
            init: None,
        }));
        let text = render(&w, now);
        assert!(
            text.ends_with(
                "initguard's configuration (ConfigMap ops/guard):\n  the pod is opted in\n  \
                 a.example.com: waited 1m 5s; bypass in 30s (deadline)\n    owner deployment \
                 ops/a: DOWN for 1m 30s\n  b.example.com: waited -; none: not listed\n  not \
                 known here: whether optIn.namespaceSelector opts the namespace in\n"
            ),
            "{text}"
        );
        // A wait on a listed init container: its sentence, with the node.
        if let Some(Ok(planned)) = w.plan.as_mut() {
            planned.unread.clear();
            planned.init = Some(crate::report::InitWaitStatus {
                namespace: "team-a".into(),
                name: "web-1".into(),
                container: "istio-validation".into(),
                node: "n3".into(),
                opted_in: true,
                outcome: crate::node_stage::StepOutcome {
                    waited: Duration::from_secs(240),
                    trigger: None,
                    plan: crate::node_stage::StepPlan::Waiting,
                    next_wake: None,
                },
                explanation: "waiting on init container istio-validation for 4m".into(),
            });
        }
        let text = render(&w, now);
        assert!(
            text.ends_with("  on node n3: waiting on init container istio-validation for 4m\n"),
            "{text}"
        );
        w.plan = Some(Err("you may not list ConfigMaps".into()));
        assert!(
            render(&w, now).ends_with("initguard's configuration: you may not list ConfigMaps\n")
        );
    }

    #[test]
    fn a_missing_pod_hints_at_legacy_reads_only_where_they_matter() {
        let missing = |legacy| WhyError::NotFound {
            namespace: "a".into(),
            name: "p".into(),
            legacy,
        };
        assert!(
            missing(false)
                .to_string()
                .contains("--mechanism initializers")
        );
        assert_eq!(missing(true).to_string(), "no pod a/p");
    }
}
