//! The named steps a request passes before it goes upstream, each ending it early with an
//! [`Early`] answer: [`admit`] (its shape, then its JSON-RPC request id), then, with the id
//! taken, [`before_upstream`] (the audit queue's room, a caller's grants), [`upstream_session`],
//! [`tool_rules`] and [`answer_locally`]. `forward::request` runs
//! them in that order; an early request ends in one place, [`Early::end`].
//!
//! Not responsible for: recording or answering (the caller does, once), or anything after the
//! request has gone upstream.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::json;

use super::incoming::Incoming;
use super::legacy_over_modern::{self, Local};
use super::refusal::{self, Refusal};
use crate::client::sessions::{DownstreamSession, InFlight};
use crate::engine::state::Engine;
use crate::transport::upstream::UpstreamSession;
use crate::transport::upstream::era::UpstreamEra;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;
use crate::wire::outcome::Outcome;

/// How a request ends before it goes upstream.
pub(super) enum Early {
    /// The proxy refuses it, counted as the refusal's outcome.
    Refused(Refusal),
    /// The proxy answers it itself, counted as `ok`.
    Answered(Answer),
}

impl Early {
    /// The one place a request the proxy answers itself ends: its outcome recorded
    /// (`berth_proxy_requests_total`, a `tools/call`'s audit line, the span), then its answer
    /// under the client's JSON-RPC request id. The caller frees the id if it was taken.
    pub(super) fn end(self, engine: &Engine, request: &Incoming) -> Answer {
        let ending = request.ending(engine);
        match self {
            Self::Refused(refusal) => {
                ending.record(refusal.outcome());
                refusal.into_answer(&request.id)
            }
            Self::Answered(answer) => {
                ending.record(Outcome::Ok);
                answer
            }
        }
    }
}

impl From<Refusal> for Early {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// The checks before the request id is taken: the request's shape ([`refusal::shape`]), then
/// its id, which must not be in flight on the session already (-32600, HTTP 400).
///
/// # Errors
/// The [`Refusal`], outcome `rejected`; the id is not taken then.
pub(super) fn admit(session: &DownstreamSession, request: &Incoming) -> Result<InFlight, Refusal> {
    let shared = session.dedicated().is_none();
    refusal::shape(
        &request.method,
        request.tool.as_deref(),
        shared,
        &request.body,
    )?;
    session.begin(&request.id).map_err(|duplicate| {
        Refusal::new(
            Outcome::Rejected,
            jsonrpc::INVALID_REQUEST,
            duplicate.to_string(),
        )
        .plain(StatusCode::BAD_REQUEST)
    })
}

/// The checks of a `tools/call` that need no upstream, so they hold whatever the upstream's
/// state (issue 39): the audit queue has room for its line ([`crate::client::audit::Auditor::
/// admits_call`], under `limits.auditOnOverflow: RefuseCalls`), and some grant names the tool
/// for the caller, whatever its read-only hint (a grant limited to read-only tools is checked
/// with the listing, in [`tool_rules`]). So an ungranted call is `denied` (audited `deny`)
/// also while the upstream is down, not `upstream_unavailable`.
///
/// # Errors
/// The refusal: outcome `rejected` (-32016, retryable) or `denied`.
pub(super) fn before_upstream(
    engine: &Engine,
    session: &DownstreamSession,
    request: &Incoming,
) -> Result<(), Early> {
    let Some(tool) = request.tool.as_deref() else {
        return Ok(());
    };
    if !engine.auditor.admits_call() {
        return Err(refusal::audit_backlog().into());
    }
    let caller = request.caller.as_deref();
    if let Some(grants) = engine.tool_grants.as_ref()
        && !grants.allows(caller, tool, true)
    {
        return Err(refusal::denied(tool, caller, session.id()).into());
    }
    Ok(())
}

/// The upstream session the request goes over: the client's own (`PerClient`) or the shared
/// one, waiting at most `timeouts.connect` for it.
///
/// # Errors
/// Outcome `upstream_unavailable` (-32003, `retryable`) when there is none; the downstream
/// session is ended too, so its client starts over instead of collecting errors on a
/// half-alive session (field case BR-04).
pub(super) async fn upstream_session(
    engine: &Engine,
    session: &DownstreamSession,
) -> Result<Arc<UpstreamSession>, Early> {
    let upstream = match session.dedicated() {
        Some(dedicated) => Some(dedicated.current()),
        None => engine.upstream.session(engine.connect_budget).await,
    };
    upstream.ok_or_else(|| {
        engine.end_session(session.id());
        Refusal::new(
            Outcome::UpstreamUnavailable,
            jsonrpc::UPSTREAM_UNAVAILABLE,
            "upstream MCP server is unavailable",
        )
        .with("retryable", json!(true))
        .into()
    })
}

/// The rules on calling `tool` ([`refusal::tool_rules`]: the policy, drift, the caller's
/// grants, the rate limits), after the `PerCall` probe lists the tools over `upstream`.
///
/// # Errors
/// The rule's [`Refusal`].
pub(super) async fn tool_rules(
    engine: &Engine,
    session: &DownstreamSession,
    upstream: &Arc<UpstreamSession>,
    request: &Incoming,
    tool: &str,
) -> Result<(), Early> {
    engine.upstream.probe_before_call(upstream).await;
    let rules = refusal::ToolRules {
        grants: engine.tool_grants.as_ref(),
        rate_limits: engine.rate_limits.as_ref(),
    };
    refusal::tool_rules(
        engine.upstream.as_ref(),
        &rules,
        tool,
        request.caller.as_deref(),
        session.id(),
    )?;
    Ok(())
}

/// The answers the proxy gives itself instead of forwarding: a legacy client's request a
/// modern upstream has no method for ([`legacy_over_modern`]), and a resource subscription
/// that changes nothing upstream ([`crate::client::subscriptions::local_answer`]).
///
/// # Errors
/// The local answer, or its refusal (outcome `rejected`).
pub(super) fn answer_locally(
    engine: &Engine,
    session: &DownstreamSession,
    upstream: &UpstreamSession,
    request: &Incoming,
) -> Result<(), Early> {
    let (id, method, body) = (&request.id, request.method.as_str(), &request.body);
    if upstream.era() == UpstreamEra::Modern && !session.is_modern() {
        match legacy_over_modern::answer(session, method, body) {
            Some(Local::Result(result)) => {
                let response = json!({ "jsonrpc": "2.0", "id": id, "result": result });
                return Err(Early::Answered(Answer::ok(response)));
            }
            Some(Local::Refused(code, message)) => {
                return Err(Refusal::new(Outcome::Rejected, code, message).into());
            }
            None => {}
        }
    }
    let subscriptions = &engine.subscriptions;
    match crate::client::subscriptions::local_answer(
        subscriptions,
        session,
        upstream,
        id,
        method,
        body,
    ) {
        Some(Ok(answer)) => Err(Early::Answered(answer)),
        Some(Err(limit)) => {
            engine
                .metrics
                .limits
                .subscriptions_refused
                .with_label_values(&[limit.as_label()])
                .inc();
            Err(Refusal::new(
                Outcome::Rejected,
                jsonrpc::INVALID_PARAMS,
                limit.to_string(),
            )
            .into())
        }
        None => Ok(()),
    }
}
