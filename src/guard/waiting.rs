//! The `InitializerWaiting` Event: why a pod that has waited long still waits on one
//! initializer, and what the guard will do about it, written where users look
//! (`kubectl describe pod`). Which pods are owed one is the policy's
//! ([`crate::policy::waiting_notices`]); this module words it and names it.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Event;

use super::write::{self, Subject};
use crate::config::{Mechanism, OptInMode};
use crate::policy::{Notice, Plan};

/// The reason of the Normal Event each long-waiting pod and initializer gets once.
pub const WAITING_EVENT_REASON: &str = "InitializerWaiting";

/// One `InitializerWaiting` Event to write.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub notice: Notice,
    /// The owner and its state in words.
    pub owner: String,
    /// Asked just before the write: whether the pod still waits on the initializer (one
    /// queued behind a burst may be bypassed or gone by then, and is not written).
    pub still_waiting: StillWaiting,
}

/// Whether a queued explanation still applies (see [`Waiting::still_waiting`]).
#[derive(Clone)]
pub struct StillWaiting(std::sync::Arc<dyn Fn() -> bool + Send + Sync>);

impl StillWaiting {
    /// A check run just before the write.
    pub fn new(check: impl Fn() -> bool + Send + Sync + 'static) -> StillWaiting {
        StillWaiting(std::sync::Arc::new(check))
    }

    /// Whether the explanation still applies now.
    pub fn holds(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for StillWaiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StillWaiting")
    }
}

impl Waiting {
    /// `namespace/name`, for log lines.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The Event's name: the same for a pod and initializer whoever writes it and whenever, so a
/// restarted guard or a new leader gets 409 instead of writing a second one. The hash covers
/// the pod's uid too: a pod recreated under the same name waits anew.
pub fn event_name(pod: &str, uid: &str, initializer: &str) -> String {
    deterministic_name(pod, "waiting", &[uid, initializer])
}

/// `<object>.initguard-<what>.<hash of parts>`: the same whoever writes it and whenever, within
/// the 253 characters of a DNS subdomain (the object's name is cut to fit).
pub fn deterministic_name(object: &str, what: &str, parts: &[&str]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, parts.join("/").as_bytes());
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let max = 253 - ".initguard-.".len() - what.len() - hash.len();
    let mut object = object.chars().take(max).collect::<String>();
    // A name part must end with an alphanumeric character.
    while object.ends_with(['.', '-']) {
        object.pop();
    }
    format!("{object}.initguard-{what}.{hash}")
}

/// What the guard will do, in words, from the plan and the initializer's `optIn` mode:
/// how the pod could qualify is said only where it could.
pub fn plan_in_words(notice: &Notice, label: &str) -> String {
    const ASK: &str = "ask an administrator to opt the namespace in";
    match (&notice.plan, notice.opt_in) {
        (Plan::BypassAt { at, reason }, _) => format!(
            "initguard bypasses it at {} ({}) unless it is removed first",
            timestamp(*at),
            reason.as_str()
        ),
        (Plan::Bypass { reason }, _) => format!("initguard bypasses it now ({})", reason.as_str()),
        (Plan::Never { .. }, OptInMode::None) => {
            "initguard never bypasses it (optIn: none)".to_owned()
        }
        (Plan::Never { why }, OptInMode::Namespaces)
            if *why == Plan::NEVER_NOT_OPTED_IN || *why == Plan::NEVER_OPT_IN_NAMESPACES =>
        {
            format!(
                "initguard never bypasses it for this pod: only pods of opted-in namespaces \
                 qualify (optIn: namespaces; the pod's own label does not count); {ASK}"
            )
        }
        (Plan::Never { why }, OptInMode::Any) if *why == Plan::NEVER_NOT_OPTED_IN => format!(
            "initguard never bypasses it for this pod: it has not opted in; add the label \
             {label} to its pod template (where initguard's admission policies are on, only in \
             a namespace an administrator allowed), or {ASK}"
        ),
        (Plan::Never { why }, _) if *why == Plan::NEVER_TRIGGER => {
            "initguard never bypasses it for what holds now: only triggers outside its bypassOn \
             apply"
                .to_owned()
        }
        (Plan::Never { why }, _) => format!("initguard never bypasses it ({why})"),
    }
}

/// What one pending entry is called where users read it.
pub fn entry_noun(mechanism: Mechanism) -> &'static str {
    match mechanism {
        Mechanism::SchedulingGates => "scheduling gate",
        Mechanism::Initializers => "initializer",
    }
}

/// The Event's message: the initializer, the wait, the owner and its state, and the plan.
pub fn message(waiting: &Waiting, mechanism: Mechanism, label: &str) -> String {
    format!(
        "Waiting {} on {} {}; owner: {}; {}",
        humantime::format_duration(Duration::from_secs(waiting.notice.waited.as_secs())),
        entry_noun(mechanism),
        waiting.notice.initializer,
        waiting.owner,
        plan_in_words(&waiting.notice, label)
    )
}

/// The Normal Event `InitializerWaiting` about one pod and initializer.
pub fn waiting_event(
    waiting: &Waiting,
    mechanism: Mechanism,
    label: &str,
    identity: &str,
    now: jiff::Timestamp,
) -> Event {
    let pod = Subject {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: Some(waiting.namespace.clone()),
        name: waiting.name.clone(),
        uid: Some(waiting.uid.clone()),
    };
    let note = message(waiting, mechanism, label);
    let mut event = write::event(&pod, WAITING_EVENT_REASON, "Wait", note, identity, now);
    event.type_ = Some("Normal".into());
    event.metadata.name = Some(event_name(
        &waiting.name,
        &waiting.uid,
        &waiting.notice.initializer,
    ));
    event
}

/// An instant as RFC 3339 in UTC, to the second.
fn timestamp(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at)
        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
        .unwrap_or_else(|_| format!("{at:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Reason;

    fn waiting(plan: Plan, opt_in: OptInMode) -> Waiting {
        Waiting {
            namespace: "team-a".into(),
            name: "web-1".into(),
            uid: "uid-1".into(),
            notice: Notice {
                initializer: "gates.example.com/warden".into(),
                waited: Duration::from_millis(45_700),
                plan,
                opt_in,
            },
            owner: "deployment kube-system/warden down for 30s".into(),
            still_waiting: StillWaiting::new(|| true),
        }
    }

    const LABEL: &str = "initguard.io/bypass";

    #[test]
    fn the_name_is_the_same_for_a_pod_and_initializer_and_differs_otherwise() {
        let a = event_name("web-1", "uid-1", "a.example.com");
        assert_eq!(a, event_name("web-1", "uid-1", "a.example.com"));
        assert!(a.starts_with("web-1.initguard-waiting."), "{a}");
        assert_eq!(a.len(), "web-1.initguard-waiting.".len() + 16);
        assert_ne!(a, event_name("web-1", "uid-1", "b.example.com"));
        assert_ne!(a, event_name("web-1", "uid-2", "a.example.com"));
        // The longest pod name still gives a valid name.
        let long = format!("{}-x", "p".repeat(251));
        let name = event_name(&long, "uid", "a.example.com");
        assert!(name.len() <= 253, "{}", name.len());
        assert!(!name.contains("-.") && !name.contains(".."), "{name}");
    }

    #[test]
    fn the_message_names_the_wait_the_owner_and_when_it_is_bypassed() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_045);
        let w = waiting(
            Plan::BypassAt {
                at,
                reason: Reason::OwnerDown,
            },
            OptInMode::Any,
        );
        assert_eq!(
            message(&w, Mechanism::SchedulingGates, LABEL),
            "Waiting 45s on scheduling gate gates.example.com/warden; owner: deployment \
             kube-system/warden down for 30s; initguard bypasses it at 2027-01-15T08:00:45Z \
             (owner_down) unless it is removed first"
        );
        let event = waiting_event(
            &w,
            Mechanism::Initializers,
            LABEL,
            "master-1_ab",
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(event.reason.as_deref(), Some("InitializerWaiting"));
        assert_eq!(
            event.metadata.name.as_deref(),
            Some(event_name("web-1", "uid-1", "gates.example.com/warden").as_str())
        );
        assert_eq!(event.involved_object.uid.as_deref(), Some("uid-1"));
        assert!(
            event
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("Waiting 45s on initializer ")),
            "{:?}",
            event.message
        );
    }

    #[test]
    fn how_to_qualify_is_said_only_where_it_could() {
        let never = |why| Plan::Never { why };
        let any = plan_in_words(
            &waiting(never(Plan::NEVER_NOT_OPTED_IN), OptInMode::Any).notice,
            LABEL,
        );
        assert!(
            any.contains("add the label initguard.io/bypass") && any.contains("administrator"),
            "{any}"
        );
        for why in [Plan::NEVER_NOT_OPTED_IN, Plan::NEVER_OPT_IN_NAMESPACES] {
            let ns = plan_in_words(&waiting(never(why), OptInMode::Namespaces).notice, LABEL);
            assert!(
                !ns.contains("add the label") && ns.contains("opt the namespace in"),
                "{ns}"
            );
        }
        for why in [Plan::NEVER_NOT_OPTED_IN, Plan::NEVER_OPT_IN_NONE] {
            let none = plan_in_words(&waiting(never(why), OptInMode::None).notice, LABEL);
            assert_eq!(none, "initguard never bypasses it (optIn: none)");
        }
        let trigger = plan_in_words(
            &waiting(never(Plan::NEVER_TRIGGER), OptInMode::Any).notice,
            LABEL,
        );
        assert!(
            trigger.contains("bypassOn") && !trigger.contains("label"),
            "{trigger}"
        );
    }
}
