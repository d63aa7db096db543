//! What the differential scenarios share: a raw request (no retries, no typed client between
//! the script and the server's answer) and the comparison of two servers' normalized answers
//! against a committed table of tolerated differences.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use http::{Method, Request};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{Value, json};

/// `method path` with an optional body of `content_type`: (status, body as JSON or Null).
pub async fn call(
    client: &kube::Client,
    method: Method,
    path: &str,
    body: Option<(&str, Value)>,
) -> (u16, Value) {
    let mut request = Request::builder().method(method.clone()).uri(path);
    let bytes = match body {
        Some((content_type, value)) => {
            request = request.header(http::header::CONTENT_TYPE, content_type);
            serde_json::to_vec(&value).unwrap_or_default()
        }
        None => Vec::new(),
    };
    let request = request
        .body(Body::from(bytes))
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let (status, raw) = send(client, request).await;
    (status, serde_json::from_slice(&raw).unwrap_or(Value::Null))
}

/// Send `request`: (status, body).
pub async fn send(client: &kube::Client, request: Request<Body>) -> (u16, bytes::Bytes) {
    let what = format!("{} {}", request.method(), request.uri());
    let response = client
        .send(request)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let status = response.status().as_u16();
    let raw = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{what}: reading the body: {e}"))
        .to_bytes();
    (status, raw)
}

/// What a comparison looks at in a `Status` answer: the code, reason and kind (not the
/// message, whose wording servers of one version already vary).
pub fn status_view(status: u16, body: &Value) -> Value {
    json!({ "code": status, "reason": body["reason"], "kind": body["kind"] })
}

/// What a comparison looks at in a list answer: the code, kind and the items' names, sorted.
pub fn list_view(status: u16, list: &Value) -> Value {
    let mut names: Vec<&str> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    names.sort_unstable();
    json!({ "code": status, "kind": list["kind"], "items": names })
}

/// Steps whose answers may differ: the first column of the table rows of `table` (Markdown:
/// `| step | simulator | real server | why it does not matter |`).
pub fn tabled_differences(table: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(table)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", table.display()));
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| step") && !l.starts_with("| ---"))
        .filter_map(|l| {
            l.split('|')
                .nth(1)
                .map(|s| s.trim().trim_matches('`').to_owned())
        })
        .collect()
}

/// Compare the simulator's answers with the real server's, step by step: a difference that
/// `table` does not list fails, and so does a listed difference that is gone, so the table
/// stays true. `what` names the comparison in messages.
pub fn assert_same_or_tabled(
    what: &str,
    from_sim: &BTreeMap<&'static str, Value>,
    from_real: &BTreeMap<&'static str, Value>,
    table: &Path,
) {
    let tabled = tabled_differences(table);
    let mut untabled = Vec::new();
    let mut stale = Vec::new();
    for (step, real_answer) in from_real {
        let sim_answer = &from_sim[step];
        let differs = sim_answer != real_answer;
        println!(
            "{what}: {step}: {}",
            if differs { "DIFFERS" } else { "same" }
        );
        match (differs, tabled.contains(*step)) {
            (true, false) => untabled.push(format!(
                "{step}:\n  simulator:   {sim_answer}\n  real server: {real_answer}"
            )),
            (false, true) => stale.push(step.to_string()),
            _ => {}
        }
    }
    assert!(
        untabled.is_empty(),
        "{what}: the simulator differs from the real API server (fix it, or table the \
         difference in {} with why it does not matter):\n{}",
        table.display(),
        untabled.join("\n")
    );
    assert!(
        stale.is_empty(),
        "{what}: tabled differences that are gone (remove them from {}): {stale:?}",
        table.display()
    );
}
