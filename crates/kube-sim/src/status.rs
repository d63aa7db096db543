//! API errors rendered as `meta/v1 Status` bodies, with the reasons, codes and messages a
//! real API server uses.

use serde_json::{Value, json};

use super::resources::ResourceInfo;

/// An error answered to a client as a `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub code: u16,
    /// `StatusReason` (`NotFound`, `Conflict`, …); empty for none.
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Seconds for the `Retry-After` header (and `details.retryAfterSeconds`).
    pub retry_after: Option<u64>,
}

/// One field validation failure, as `field.Error` renders it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldError {
    /// Dotted path, e.g. `spec.schedulingGates[1].name`.
    pub field: String,
    pub kind: FieldErrorKind,
    pub detail: String,
}

/// `field.ErrorType`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FieldErrorKind {
    Required,
    Forbidden,
    /// `Invalid value: <json of the value>`.
    Invalid(Value),
    /// `Duplicate value: <json of the value>`.
    Duplicate(Value),
    /// `Too many: <count>: must have at most <max> items`.
    TooMany {
        count: usize,
        max: usize,
    },
}

impl FieldError {
    pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Forbidden,
            detail: detail.into(),
        }
    }

    pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Required,
            detail: detail.into(),
        }
    }

    pub(crate) fn duplicate(field: impl Into<String>, value: Value) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Duplicate(value),
            detail: String::new(),
        }
    }

    pub(crate) fn too_many(field: impl Into<String>, count: usize, max: usize) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::TooMany { count, max },
            detail: String::new(),
        }
    }

    pub(crate) fn invalid(
        field: impl Into<String>,
        value: Value,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            field: field.into(),
            kind: FieldErrorKind::Invalid(value),
            detail: detail.into(),
        }
    }

    /// The message without the field (`Forbidden: …`), as in `details.causes[].message`.
    fn body(&self) -> String {
        match &self.kind {
            FieldErrorKind::Required => format!("Required value: {}", self.detail),
            FieldErrorKind::Forbidden => format!("Forbidden: {}", self.detail),
            FieldErrorKind::Invalid(v) => {
                let shown = match v {
                    Value::String(s) => format!("\"{s}\""),
                    other => other.to_string(),
                };
                format!("Invalid value: {shown}: {}", self.detail)
            }
            FieldErrorKind::Duplicate(v) => format!("Duplicate value: {v}"),
            FieldErrorKind::TooMany { count, max } => {
                format!("Too many: {count}: must have at most {max} items")
            }
        }
    }

    fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::Invalid(_) => "FieldValueInvalid",
            FieldErrorKind::Duplicate(_) => "FieldValueDuplicate",
            FieldErrorKind::TooMany { .. } => "FieldValueTooMany",
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

fn resource_details(res: &ResourceInfo, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": res.plural });
    if !res.group.is_empty() {
        d["group"] = json!(res.group);
    }
    d
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 404 `pods "x" not found`.
    pub(crate) fn not_found(res: &ResourceInfo, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", res.qualified()),
        )
        .with_details(resource_details(res, name))
    }

    /// 404 for a path that names no resource.
    pub(crate) fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 `pods "x" already exists`.
    pub(crate) fn already_exists(res: &ResourceInfo, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", res.qualified()),
        )
        .with_details(resource_details(res, name))
    }

    /// 409 Conflict: `Operation cannot be fulfilled on pods "x": <why>`.
    pub(crate) fn conflict(res: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.qualified()
            ),
        )
        .with_details(resource_details(res, name))
    }

    /// The stale-resourceVersion conflict.
    pub(crate) fn stale(res: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid: `Pod "x" is invalid: <field errors>`.
    pub(crate) fn invalid(res: &ResourceInfo, name: &str, errors: &[FieldError]) -> Self {
        let listed = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            format!(
                "[{}]",
                errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({ "reason": e.reason(), "message": e.body(), "field": e.field }))
            .collect();
        let mut details = json!({ "name": name, "kind": res.kind, "causes": causes });
        if !res.group.is_empty() {
            details["group"] = json!(res.group);
        }
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {listed}", res.kind),
        )
        .with_details(details)
    }

    /// 422 from applying a JSON patch (a failed `test`, a missing path), as
    /// `NewGenericServerResponse(422, …)` renders it (no causes). Real servers (1.11 on) say
    /// only the sentence; the simulator appends the patch error ("Testing value … failed") so
    /// that logs can tell why, and clients must accept both.
    pub(crate) fn patch_unprocessable(patch_error: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!(
                "the server rejected our request due to an error in our request: {patch_error}"
            ),
        )
        .with_details(json!({}))
    }

    /// 500 without a reason, as servers answered errors they passed through unwrapped.
    pub(crate) fn internal_unwrapped(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// 400 BadRequest.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub(crate) fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden with the authorizer's wording.
    pub(crate) fn forbidden(res_label: &str, group: &str, name: Option<&str>, why: &str) -> Self {
        let subject = match name {
            Some(n) => format!("{res_label} \"{n}\""),
            None => res_label.to_string(),
        };
        let mut details = json!({ "kind": res_label });
        if let Some(n) = name {
            details["name"] = json!(n);
        }
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self::new(403, "Forbidden", format!("{subject} is forbidden: {why}")).with_details(details)
    }

    /// 405 MethodNotAllowed.
    pub(crate) fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
        .with_details(json!({}))
    }

    /// 406 NotAcceptable.
    pub(crate) fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "the server was unable to respond with a content type that the client supports ({accept}); only application/json is served"
            ),
        )
    }

    /// 415 UnsupportedMediaType listing what is accepted.
    pub(crate) fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
        .with_details(json!({}))
    }

    /// 410 Gone with reason Expired (watch from a compacted resourceVersion).
    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    /// 500 InternalError.
    pub(crate) fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({ "causes": [{ "message": message.to_string() }] }))
    }

    /// 503 ServiceUnavailable.
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 429 TooManyRequests with a Retry-After.
    pub(crate) fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "too many requests, please try again later",
        )
        .with_details(json!({ "retryAfterSeconds": retry_after }));
        e.retry_after = Some(retry_after);
        e
    }

    /// 504 Timeout, as `NewTimeoutError` renders it.
    pub(crate) fn timeout(message: impl std::fmt::Display) -> Self {
        Self::new(504, "Timeout", format!("Timeout: {message}")).with_details(json!({}))
    }

    /// A status for an arbitrary injected code.
    pub(crate) fn injected(code: u16) -> Self {
        match code {
            409 => Self::new(
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your \
                 changes to the latest version and try again (injected fault)",
            ),
            429 => Self::too_many_requests(1),
            500 => Self::internal("injected fault"),
            503 => Self::unavailable(
                "injected fault: the server is currently unable to handle the request",
            ),
            504 => {
                Self::timeout("injected fault: request did not complete within allowed duration")
            }
            _ => Self::new(code, "", format!("injected fault (HTTP {code})")),
        }
    }

    /// A failure status taken from an object (e.g. `metadata.initializers.result`).
    pub(crate) fn from_status_value(v: &Value) -> Self {
        let code = v["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| (400..600).contains(c))
            .unwrap_or(500);
        let reason = match v["reason"].as_str().unwrap_or("") {
            "Forbidden" => "Forbidden",
            "Invalid" => "Invalid",
            "BadRequest" => "BadRequest",
            "NotFound" => "NotFound",
            "Conflict" => "Conflict",
            _ => "InternalError",
        };
        let mut e = Self::new(
            code,
            reason,
            v["message"].as_str().unwrap_or("initialization failed"),
        );
        if !v["details"].is_null() {
            e.details = Some(v["details"].clone());
        }
        e
    }

    /// The `Status` object.
    pub(crate) fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        if !self.reason.is_empty() {
            s["reason"] = json!(self.reason);
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// A `Status` with `status: Success` (answered by DELETE on most resources).
pub(crate) fn success_status(res: &ResourceInfo, name: &str, uid: &str) -> Value {
    let mut details = resource_details(res, name);
    details["uid"] = json!(uid);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::by_plural;

    #[test]
    fn messages_match_the_api_server() {
        let pods = by_plural("pods").unwrap();
        let deploy = by_plural("deployments").unwrap();
        assert_eq!(
            ApiError::not_found(pods, "x").message,
            "pods \"x\" not found"
        );
        assert_eq!(
            ApiError::not_found(deploy, "x").message,
            "deployments.apps \"x\" not found"
        );
        let e = ApiError::invalid(
            pods,
            "p",
            &[FieldError::forbidden(
                "spec.schedulingGates[1].name",
                "only deletion is allowed, but found new scheduling gate 'g'",
            )],
        );
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'g'"
        );
        let s = e.to_status();
        assert_eq!(s["code"], 422);
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueForbidden");
        let e = FieldError::invalid("metadata.name", json!("A"), "bad");
        assert_eq!(e.to_string(), "metadata.name: Invalid value: \"A\": bad");
    }
}
