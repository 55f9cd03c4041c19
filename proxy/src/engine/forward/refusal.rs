//! The requests the proxy answers itself instead of forwarding, as named checks that run before
//! a request goes upstream ([`shape`], then [`tool_rules`] once an upstream session is had).
//! Each refusal is one [`Refusal`], recorded and answered in one place
//! ([`super::checks::Early::end`]): its outcome counted (`berth_proxy_requests_total`, and for
//! a `tools/call` its audit line), and a JSON-RPC error under the client's id whose
//! `error.data.outcome` names it.
//!
//! Not responsible for: what happens to a request that passes (the call loop in
//! [`super::request`]). Uses only the layers below the call engine (the wire format, answers,
//! the policies); what it needs of the upstream's catalogue is passed in ([`Catalogue`]).

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use crate::access::auth::Principal;
use crate::access::auth::grants::Grants;
use crate::access::rate_limits::RateLimits;
use crate::observe::escaped::Escaped;
use crate::wire::answer::Answer;
use crate::wire::echoed::echoed;
use crate::wire::jsonrpc::{self, WireMessage};
use crate::wire::outcome::Outcome;

/// What the tool rules read of the upstream's tool catalogue.
pub(super) trait Catalogue {
    /// The policy (`tools.allow` / `tools.readOnly`) lets clients see `tool`.
    fn exposes(&self, tool: &str) -> bool;
    /// The listing marks `tool` read-only.
    fn is_read_only(&self, tool: &str) -> bool;
    /// The listing names `tool`.
    fn lists(&self, tool: &str) -> bool;
    /// `tool` drifted from its baseline and calls to it are blocked.
    fn is_drifted(&self, tool: &str) -> bool;
}

/// The tool rules' settings (`tools.grants`, `tools.rateLimits`); `None` when not configured.
pub(super) struct ToolRules<'a> {
    pub grants: Option<&'a Grants>,
    pub rate_limits: Option<&'a RateLimits>,
}

/// A request the proxy answers itself, with the outcome it is counted as.
pub(super) struct Refusal {
    outcome: Outcome,
    status: StatusCode,
    code: i64,
    message: String,
    /// `error.data`; `None` for an answer without it.
    data: Option<Map<String, Value>>,
    /// Rate limited: answered with 429 and this `Retry-After`, in seconds.
    retry_after_secs: Option<u64>,
}

impl Refusal {
    /// Refused as `outcome`: HTTP 200 with `error.data.outcome`.
    pub(super) fn new(outcome: Outcome, code: i64, message: impl Into<String>) -> Self {
        let mut data = Map::new();
        data.insert("outcome".into(), json!(outcome.as_label()));
        Self {
            outcome,
            status: StatusCode::OK,
            code,
            message: message.into(),
            data: Some(data),
            retry_after_secs: None,
        }
    }

    /// A member of `error.data` besides `outcome`.
    pub(super) fn with(mut self, key: &str, value: Value) -> Self {
        if let Some(data) = &mut self.data {
            data.insert(key.into(), value);
        }
        self
    }

    /// Answered under `status` with no `error.data` (a malformed request, not a policy).
    pub(super) fn plain(mut self, status: StatusCode) -> Self {
        self.status = status;
        self.data = None;
        self
    }

    /// The outcome the refusal is counted as.
    pub(super) fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The client's answer under `id` (the caller records [`Self::outcome`] first:
    /// [`super::checks::Early::end`]).
    pub(super) fn into_answer(self, id: &Value) -> Answer {
        let body =
            jsonrpc::error_response(id, self.code, &self.message, self.data.map(Value::Object));
        match self.retry_after_secs {
            Some(retry_after_secs) => Answer::TooManyRequests {
                body: body.into(),
                retry_after_secs,
            },
            None => Answer::Json {
                status: self.status,
                body: body.into(),
                session: None,
            },
        }
    }
}

/// Checks that need no upstream: a `tools/call` names its tool (one that cannot be named
/// cannot be checked against any rule), and task-augmented requests are refused on a shared
/// upstream session ([`crate::wire::tasks`]).
///
/// # Errors
/// The [`Refusal`], outcome `rejected`.
/// `shared`: the request goes over the shared upstream session (not a dedicated one).
pub(super) fn shape(
    method: &str,
    tool: Option<&str>,
    shared: bool,
    body: &WireMessage,
) -> Result<(), Refusal> {
    if method == "tools/call" && tool.is_none() {
        let message = if body.has_lone_surrogate(&["params", "name"]) {
            "tools/call params.name holds a lone UTF-16 surrogate escape, which encodes no \
             character; a tool's name must be Unicode text"
        } else {
            "tools/call needs params.name, the tool's name as a string"
        };
        return Err(Refusal::new(
            Outcome::Rejected,
            jsonrpc::INVALID_PARAMS,
            message,
        ));
    }
    if shared && let Some((code, message)) = crate::wire::tasks::refusal(method, body) {
        return Err(Refusal::new(Outcome::Rejected, code, message));
    }
    Ok(())
}

/// The grants' refusal of `tool` to `caller` (`tools.grants`), logged with `session_id`.
pub(super) fn denied(tool: &str, caller: Option<&Principal>, session_id: &str) -> Refusal {
    tracing::info!(
        mcp.session_id = session_id,
        tool = %Escaped(tool),
        subject = %Escaped(caller.and_then(|c| c.subject.as_deref()).unwrap_or_default()),
        "tools/call denied: no grant for this caller (tools.grants)"
    );
    Refusal::new(
        Outcome::Denied,
        jsonrpc::INVALID_PARAMS,
        format!(
            "tool {:?} is not granted to this caller (tools.grants)",
            echoed(tool)
        ),
    )
    .with("tool", json!(echoed(tool)))
}

/// A `tools/call` refused because the audit queue is full under `limits.auditOnOverflow:
/// RefuseCalls` (issue 39): outcome `rejected`, retryable, nothing sent upstream.
pub(super) fn audit_backlog() -> Refusal {
    Refusal::new(
        Outcome::Rejected,
        jsonrpc::AUDIT_BACKLOG,
        "the proxy's audit log is not keeping up; retry later",
    )
    .with("retryable", json!(true))
    .with("limit", json!("auditQueueBytes"))
}

/// The tool rules, in order: a tool the policy hides is absent for clients whatever the
/// upstream offers (`tools.allow` / `tools.readOnly`); one the caller's grants do not name is
/// refused for this caller only (`tools.grants`); a caller over a rate limit waits, told for
/// how long (`tools.rateLimits`); a drifted tool is blocked (`toolsProbe.onDrift`).
///
/// # Errors
/// The [`Refusal`]: outcome `rejected`, `denied`, `rate_limited` or `drift_blocked`.
/// `session_id` names the downstream session in the log line of a denial.
pub(super) fn tool_rules(
    catalogue: &impl Catalogue,
    rules: &ToolRules<'_>,
    tool: &str,
    caller: Option<&Principal>,
    session_id: &str,
) -> Result<(), Refusal> {
    if !catalogue.exposes(tool) {
        return Err(Refusal::new(
            Outcome::Rejected,
            jsonrpc::INVALID_PARAMS,
            format!(
                "tool {:?} is not exposed by this proxy (tools.allow / tools.readOnly)",
                echoed(tool)
            ),
        )
        .with("tool", json!(echoed(tool))));
    }
    if let Some(grants) = rules.grants
        && !grants.allows(caller, tool, catalogue.is_read_only(tool))
    {
        return Err(denied(tool, caller, session_id));
    }
    if let Some(limits) = rules.rate_limits
        && let Err(wait) = limits.admit(caller, tool, catalogue.lists(tool))
    {
        let retry_after_secs = crate::access::rate_limits::retry_after_secs(wait);
        let mut refusal = Refusal::new(
            Outcome::RateLimited,
            jsonrpc::RATE_LIMITED,
            format!(
                "rate limit for tool {:?} reached (tools.rateLimits); retry in {retry_after_secs} s",
                echoed(tool)
            ),
        )
        .with("tool", json!(echoed(tool)))
        .with("retryAfterSeconds", json!(retry_after_secs));
        refusal.retry_after_secs = Some(retry_after_secs);
        return Err(refusal);
    }
    if catalogue.is_drifted(tool) {
        return Err(Refusal::new(
            Outcome::DriftBlocked,
            jsonrpc::DRIFT_BLOCKED,
            "tool changed or disappeared upstream since it was reviewed; calls are blocked",
        )
        .with("tool", json!(echoed(tool))));
    }
    Ok(())
}
