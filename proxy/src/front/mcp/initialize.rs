//! Downstream `initialize`. `Shared`: answered by the proxy from the upstream's cached
//! handshake, never by a new upstream session (README.md "Why it exists", failure 1). `PerClient`: the client's
//! own handshake on a new upstream session of its own, capped by `session.maxSessions`.

use std::sync::Arc;

use axum::http::StatusCode;
use berth_crds::SessionStrategy;
use serde_json::{Value, json};

use super::refusal::refused;
use super::session_cap::{self, SessionLimit};
use crate::client::per_client::Dedicated;
use crate::front::mcp::state::Front;
use crate::transport::upstream::Unavailable;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;
use crate::wire::outcome::Outcome;
use crate::wire::revision::HANDSHAKE_VERSIONS;

/// Handles `initialize` with the request's `Mcp-Session-Id` header, if any.
///
/// A header naming a live session is a re-initialization: refused with 400 and -32600 carrying
/// the request id, leaving the session intact (field case BR-01). A header naming an unknown
/// session gets 404. Otherwise a new downstream session is created and announced in
/// `Mcp-Session-Id`.
pub async fn handle(
    proxy: &Front,
    header: Option<&str>,
    id: &Value,
    body: &Value,
    caller: Option<&crate::access::auth::Principal>,
) -> Answer {
    if let Some(header) = header {
        if super::session::live_session(proxy, header, caller).is_some() {
            return refused(
                &proxy.engine.metrics,
                "reinitialize",
                StatusCode::BAD_REQUEST,
                id,
                jsonrpc::INVALID_REQUEST,
                "session is already initialized; send initialize without Mcp-Session-Id to start a new session",
            );
        }
        return super::refusal::unknown_session(&proxy.engine.metrics, id);
    }
    let params = body.get("params").cloned().unwrap_or_else(|| json!({}));
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let client_info = params.get("clientInfo").cloned();
    let client_capabilities = params
        .get("capabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let started = std::time::Instant::now();
    // Held until the session exists: a handshake in progress holds its place under the caps.
    let reservation = match session_cap::make_room(proxy, caller) {
        Ok(reservation) => reservation,
        Err(limit) => return session_cap::refused(proxy, id, limit),
    };
    let (upstream, dedicated) = match proxy.strategy {
        SessionStrategy::Shared => {
            match proxy
                .engine
                .upstream
                .try_session(proxy.engine.connect_budget)
                .await
            {
                Ok(upstream) => (upstream, None),
                Err(why) => return unavailable(id, why == Unavailable::TimedOut),
            }
        }
        SessionStrategy::PerClient => {
            // The client's own handshake, with its protocolVersion, capabilities and clientInfo.
            match Dedicated::open(proxy.endpoint.clone(), params, proxy.engine.connect_budget).await
            {
                Ok(dedicated) => {
                    proxy
                        .engine
                        .metrics
                        .upstream_initializations
                        .with_label_values(&["ok"])
                        .inc();
                    (dedicated.current(), Some(dedicated))
                }
                Err(error) => {
                    proxy
                        .engine
                        .metrics
                        .upstream_initializations
                        .with_label_values(&["error"])
                        .inc();
                    tracing::warn!(error = %crate::observe::escaped::Escaped(&crate::transport::upstream::error_chain(&error)), kind = error.kind(), "per-client upstream handshake failed");
                    if let crate::transport::upstream::UpstreamError::Refused(_) = error {
                        // A stdio host at its --max-children: a limit, like maxSessions.
                        return session_cap::refused(proxy, id, SessionLimit::MaxSessions);
                    }
                    return unavailable(id, started.elapsed() >= proxy.engine.connect_budget);
                }
            }
        }
    };
    let version = negotiate(requested.as_deref(), handshake_ceiling(&upstream));
    let mut result = upstream.initialize_result().clone();
    result["protocolVersion"] = json!(version);
    if dedicated.is_none() {
        crate::wire::tasks::hide_capability(&mut result);
    }
    let session = proxy
        .engine
        .sessions
        .create(version, client_capabilities, dedicated, caller);
    drop(reservation);
    if let Some(info) = client_info {
        session.set_client_info(info);
    }
    if let Some(dedicated) = session.dedicated() {
        dedicated.listen(crate::engine::fanout::to_client(
            Arc::downgrade(&session),
            Arc::clone(&proxy.engine.metrics),
        ));
    }
    proxy
        .engine
        .metrics
        .downstream_sessions
        .set(proxy.engine.sessions.len() as i64);
    tracing::info!(
        mcp.session_id = session.id(),
        protocol_version = version,
        upstream_protocol_version = upstream.protocol_version(),
        "downstream session initialized"
    );
    Answer::Json {
        status: StatusCode::OK,
        body: json!({ "jsonrpc": "2.0", "id": id, "result": result }).into(),
        session: Some(session.id().to_owned()),
    }
}

/// The newest legacy revision a client may be answered with: the legacy upstream session's
/// own, or for a modern upstream (which has no handshake) the newest the proxy serves.
fn handshake_ceiling(upstream: &crate::transport::upstream::UpstreamSession) -> &str {
    match upstream.era() {
        crate::transport::upstream::era::UpstreamEra::Legacy => upstream.protocol_version(),
        crate::transport::upstream::era::UpstreamEra::Modern => {
            crate::wire::revision::REQUESTED_VERSION
        }
    }
}

/// The revision a client's session speaks: the one it asked for when the proxy serves it and it
/// is no newer than the upstream session's (a client that speaks only 2025-06-18 must be told
/// 2025-06-18, not the upstream's 2025-11-25, or it gives up: MCP 2025-06-18, "Version
/// Negotiation"), else the upstream session's. The proxy's own hop keeps the upstream's
/// revision; the newer revision's additions are fields older clients ignore, and tasks, the one
/// feature an older client could be asked to take part in, are hidden under `Shared`.
fn negotiate<'a>(requested: Option<&'a str>, upstream: &'a str) -> &'a str {
    match requested {
        Some(version) if HANDSHAKE_VERSIONS.contains(&version) && version <= upstream => version,
        _ => upstream,
    }
}

/// No upstream session for a new client: 504 when the handshake ran out of `timeouts.connect`
/// (a black-holed or silent upstream), 502 when the upstream failed it sooner (refused, reset,
/// HTTP error, bad handshake); field case BR-18. With `Shared` the answer is the outcome of the
/// supervisor's handshake the client waited for, or, while the supervisor backs off after a
/// failed one, that failure at once (issue 12 item 1). Either way a JSON-RPC error under the
/// request id, outcome `upstream_unavailable`, retryable.
pub(super) fn unavailable(id: &Value, timed_out: bool) -> Answer {
    let (status, message) = if timed_out {
        (
            StatusCode::GATEWAY_TIMEOUT,
            "upstream MCP server is unavailable: its handshake did not complete within timeouts.connect; retry later",
        )
    } else {
        (
            StatusCode::BAD_GATEWAY,
            "upstream MCP server is unavailable: it failed the handshake; retry later",
        )
    };
    Answer::error_with_data(
        status,
        id,
        jsonrpc::UPSTREAM_UNAVAILABLE,
        message,
        json!({ "outcome": Outcome::UpstreamUnavailable.as_label(), "retryable": true }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiate_answers_the_clients_revision_when_served_and_not_newer_than_the_upstreams() {
        assert_eq!(negotiate(Some("2025-06-18"), "2025-11-25"), "2025-06-18");
        assert_eq!(negotiate(Some("2024-11-05"), "2025-11-25"), "2024-11-05");
        assert_eq!(negotiate(Some("2025-11-25"), "2025-06-18"), "2025-06-18");
        assert_eq!(negotiate(Some("2099-01-01"), "2025-11-25"), "2025-11-25");
        assert_eq!(negotiate(None, "2025-11-25"), "2025-11-25");
    }
}
