//! The requests on `/mcp` without a body: `GET` (the session's standalone server stream, or
//! its resumption from `Last-Event-ID`) and `DELETE` (end the session), both naming a legacy
//! session in `Mcp-Session-Id` (MCP 2025-06-18, "Transports: Streamable HTTP"). A modern
//! client's GET or DELETE is refused with 405: MCP 2026-07-28 has neither.
//!
//! Not responsible for: POST (the parent), or what the standalone stream carries (the fan-out).

use std::sync::Arc;

use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;

use super::era;
use super::refusal::unknown_session;
use super::session::{live_session, session_header};
use super::state::Front;
use crate::access::auth::Principal;
use crate::client::sessions::events::StreamKind;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;

/// A modern client's GET or DELETE (no live session, a modern `MCP-Protocol-Version`): 405
/// with a JSON-RPC error (no id),
/// since MCP 2026-07-28 has neither a standalone stream nor sessions to end ("Earlier Streamable
/// HTTP Revisions").
fn modern_without_body(proxy: &Front, headers: &HeaderMap) -> Option<Response> {
    let live =
        session_header(headers).is_some_and(|id| proxy.engine.sessions.get_quiet(id).is_some());
    if live || !era::is_modern_without_body(headers) {
        return None;
    }
    proxy
        .engine
        .metrics
        .invalid_messages
        .with_label_values(&["modern_method"])
        .inc();
    let mut response = Answer::error(
        StatusCode::METHOD_NOT_ALLOWED,
        &Value::Null,
        jsonrpc::INVALID_REQUEST,
        "MCP 2026-07-28 has no GET stream and no sessions to DELETE: send each request as a POST (subscriptions/listen for change notifications)",
    )
    .into_response();
    response.headers_mut().insert(
        axum::http::header::ALLOW,
        axum::http::HeaderValue::from_static("POST"),
    );
    Some(response)
}

/// The `Mcp-Session-Id` a `GET` or `DELETE` names, or its refusal: a modern-era request
/// without a body (`modern_without_body`), or 400 when the header is missing.
fn bodiless_session<'h>(proxy: &Front, headers: &'h HeaderMap) -> Result<&'h str, Box<Response>> {
    if let Some(refusal) = modern_without_body(proxy, headers) {
        return Err(Box::new(refusal));
    }
    session_header(headers).ok_or_else(|| {
        Answer::error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            "missing Mcp-Session-Id header",
        )
        .into_response()
        .into()
    })
}

pub(super) async fn handle_get(
    State(proxy): State<Arc<Front>>,
    caller: Option<Extension<Principal>>,
    headers: HeaderMap,
) -> Response {
    let header = match bodiless_session(&proxy, &headers) {
        Ok(header) => header,
        Err(refusal) => return *refusal,
    };
    if let Some(answer) = era::unsupported_version(&proxy.engine.metrics, &headers, &Value::Null) {
        return answer.into_response();
    }
    let Some(session) = live_session(&proxy, header, caller.as_deref()) else {
        return unknown_session(&proxy.engine.metrics, &Value::Null).into_response();
    };
    if let Some(last_event_id) = headers
        .get(crate::wire::headers::LAST_EVENT_ID_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        match session.resume(last_event_id) {
            Ok(events) => {
                proxy
                    .engine
                    .metrics
                    .stream_resumptions
                    .with_label_values(&["replayed"])
                    .inc();
                return stream_until_shutdown(&proxy, events);
            }
            Err(why) => {
                // The client gets the standalone stream, as from a server that does not replay.
                proxy
                    .engine
                    .metrics
                    .stream_resumptions
                    .with_label_values(&[why.as_label()])
                    .inc();
                tracing::debug!(
                    mcp.session_id = session.id(),
                    last_event_id,
                    ?why,
                    "Last-Event-ID not resumable; opening the standalone stream"
                );
            }
        }
    }
    // The standalone stream carries server messages (fanout) until the session ends or the
    // client re-opens GET, which replaces this stream (the new one wins; each is counted in
    // `berth_proxy_standalone_streams_total`, issue 12, item 5). Shutdown ends it too.
    let (rx, opened) = session.open_standalone();
    proxy
        .engine
        .metrics
        .standalone_streams
        .with_label_values(&[opened.as_label()])
        .inc();
    if opened == crate::client::sessions::Opened::Replaced {
        tracing::debug!(
            mcp.session_id = session.id(),
            "standalone stream replaced by a new GET"
        );
    }
    stream_until_shutdown(&proxy, session.carry(StreamKind::Standalone, rx))
}

/// A GET's SSE stream, which ends when the proxy stops serving (its pump keeps what follows).
fn stream_until_shutdown(
    proxy: &Front,
    events: tokio::sync::mpsc::Receiver<crate::wire::answer::StreamEvent>,
) -> Response {
    let shutdown = proxy.shutdown.clone();
    let events = crate::wire::answer::stream_from(events)
        .map(crate::wire::answer::event_block)
        .take_until(async move { shutdown.cancelled().await });
    crate::wire::answer::sse_response(events)
}

pub(super) async fn handle_delete(
    State(proxy): State<Arc<Front>>,
    caller: Option<Extension<Principal>>,
    headers: HeaderMap,
) -> Response {
    let header = match bodiless_session(&proxy, &headers) {
        Ok(header) => header,
        Err(refusal) => return *refusal,
    };
    // Only the identity that opened a session may end it, held here or adopted from another
    // replica (issue 39, item 9): another identity's DELETE sees an unknown session and ends
    // nothing. A signed id from another replica is adopted, then ended, so it is not adopted later.
    if live_session(&proxy, header, caller.as_deref()).is_none() {
        return unknown_session(&proxy.engine.metrics, &Value::Null).into_response();
    }
    if proxy.engine.end_session(header) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        unknown_session(&proxy.engine.metrics, &Value::Null).into_response()
    }
}
