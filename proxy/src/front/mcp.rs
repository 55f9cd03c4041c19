//! The downstream Streamable HTTP front on `/mcp`: POST (client messages) here; GET (the
//! session's standalone server stream) and DELETE (end a session) in `bodiless`.
//!
//! Source: MCP 2025-06-18, "Transports: Streamable HTTP". Rules the front enforces before
//! anything reaches the upstream: the body is one JSON-RPC message (batches, removed after
//! revision 2025-03-26, are refused with -32600); a non-initialize message needs a live
//! `Mcp-Session-Id` (missing -> 400, unknown or expired -> 404); errors echo the request id.

mod accept;
mod auth;
mod bodiless;
mod body;
mod client_response;
mod origin;
mod refusal;
mod session;
mod session_cap;
mod state;

pub(crate) mod era;
mod initialize;
pub mod linger;
mod modern;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
use tracing::Instrument as _;

use crate::access::auth::Principal;
use crate::client::sessions::DownstreamSession;
use crate::client::sessions::events::StreamKind;
use crate::engine::forward;
use crate::observe::telemetry;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc::{self, Invalid, Message};
use accept::{accepts_sse, contains_ignoring_case, starts_with_ignoring_case};
use refusal::{refused, unknown_session};
use session::{live_session, session_header};
pub use state::Front;

/// The `/mcp` routes, and the protected resource metadata when OAuth is configured.
pub fn router(proxy: Arc<Front>) -> Router {
    let max_request_bytes = proxy.max_request_bytes;
    Router::new()
        .route(
            berth_crds::MCP_PATH,
            post(handle_post)
                .get(bodiless::handle_get)
                .delete(bodiless::handle_delete)
                .head(head_not_allowed),
        )
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&proxy),
            admit,
        ))
        .merge(auth::metadata_router(&proxy))
        .with_state(proxy)
}

/// Middleware on every method of `/mcp`: DNS rebinding protection ([`origin`]) first, then
/// client authentication ([`auth`]). One layer for both: each `from_fn` layer clones and boxes
/// the routes it wraps on every request (issue 14).
async fn admit(
    State(proxy): State<Arc<Front>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(refusal) = origin::refusal(&proxy, request.headers()) {
        return refusal;
    }
    auth::require_auth(State(proxy), request, next).await
}

/// `HEAD /mcp` is not part of Streamable HTTP: 405, like any other method. Without this, axum
/// serves HEAD with the GET handler, and a HEAD probe would replace a session's open standalone
/// stream (whose notifications would then be dropped).
async fn head_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(axum::http::header::ALLOW, "GET, POST, DELETE")],
    )
        .into_response()
}

async fn handle_post(State(proxy): State<Arc<Front>>, request: Request) -> Response {
    // The caller `auth::require_auth` found in the access token, if OAuth is on.
    let caller = request
        .extensions()
        .get::<Principal>()
        .cloned()
        .map(Arc::new);
    match body::read(&proxy.engine.metrics, proxy.max_request_bytes, request).await {
        Ok((headers, body)) => client_message(&proxy, &headers, &body, caller)
            .await
            .into_response(),
        Err(refusal) => refusal,
    }
}

/// One client message, its body read whole ([`body::read`]).
async fn client_message(
    proxy: &Arc<Front>,
    headers: &HeaderMap,
    body: &Bytes,
    caller: Option<Arc<Principal>>,
) -> Answer {
    if let Some(answer) = bad_headers(proxy, headers) {
        return answer;
    }
    let value = match jsonrpc::WireMessage::parse(body) {
        Ok(value) => value,
        Err(_) => {
            return refused(
                &proxy.engine.metrics,
                "parse",
                StatusCode::BAD_REQUEST,
                &Value::Null,
                jsonrpc::PARSE_ERROR,
                "body is not valid JSON",
            );
        }
    };
    let message = match Message::classify(value) {
        Ok(message) => message,
        Err(invalid) => return refuse(proxy, &invalid),
    };
    // One server span per request (issue 16); none while traces are off.
    let span = match &message {
        Message::Request { id, body, .. } => telemetry::spans::server(headers, body, id),
        _ => tracing::Span::none(),
    };
    classified(proxy, headers, message, caller)
        .instrument(span)
        .await
}

/// One client message that is a JSON-RPC request, notification or response.
async fn classified(
    proxy: &Arc<Front>,
    headers: &HeaderMap,
    message: Message,
    caller: Option<Arc<Principal>>,
) -> Answer {
    let received = std::time::Instant::now();
    let header = session_header(headers);
    // A `tools/call` refused here still gets its audit event (outcome `rejected`).
    let audited = |answer: Answer| {
        proxy.engine.auditor.refused_tool_call(
            message.body(),
            header,
            caller.as_ref(),
            received.elapsed(),
        );
        answer
    };
    if let Some(name) = message.body().duplicate_member() {
        // Parsers differ on which duplicate counts, so the upstream might read another id,
        // method or tool than the proxy checked: refused, nothing forwarded.
        let id = match &message {
            Message::Request { id, .. } | Message::Response { id, .. } if name != "id" => {
                id.clone()
            }
            _ => Value::Null,
        };
        return audited(refused(
            &proxy.engine.metrics,
            "shape",
            StatusCode::BAD_REQUEST,
            &id,
            jsonrpc::INVALID_REQUEST,
            &format!(
                "member {:?} appears twice; a JSON-RPC message must be unambiguous",
                crate::wire::echoed::echoed(&name)
            ),
        ));
    }
    let live = header.and_then(|header| live_session(proxy, header, caller.as_deref()));
    if live.is_none() && era::is_modern(headers, &message) {
        // A modern client's stale `Mcp-Session-Id` is ignored (MCP 2026-07-28, "Earlier
        // Streamable HTTP Revisions").
        return modern::handle(proxy, headers, message, caller).await;
    }
    if let Some(answer) = bad_params(proxy, &message) {
        return audited(answer);
    }
    if let Message::Request { id, method, body } = &message
        && method == "initialize"
    {
        return initialize::handle(proxy, header, id, body, caller.as_deref()).await;
    }
    let request_id = match &message {
        Message::Request { id, .. } | Message::Response { id, .. } => id.clone(),
        Message::Notification { .. } => Value::Null,
    };
    if header.is_none() {
        return audited(refused(
            &proxy.engine.metrics,
            "missing_session",
            StatusCode::BAD_REQUEST,
            &request_id,
            jsonrpc::INVALID_REQUEST,
            "missing Mcp-Session-Id header: send initialize first",
        ));
    }
    if let Some(answer) = era::unsupported_version(&proxy.engine.metrics, headers, &request_id) {
        return audited(answer);
    }
    let Some(session) = live else {
        return audited(unknown_session(&proxy.engine.metrics, &request_id));
    };
    match message {
        Message::Request { id, method, body } => {
            let json_only = !accepts_sse(headers);
            let answer = forward::request(
                Arc::clone(&proxy.engine),
                Arc::clone(&session),
                id,
                method,
                body,
                json_only,
                caller,
            )
            .await;
            match answer {
                Answer::Stream(rx) => Answer::Events(session.carry(StreamKind::Reply, rx)),
                other => other,
            }
        }
        Message::Notification { method, body } => {
            notification(proxy, &session, &method, body).await
        }
        Message::Response { id, body } => client_response::relay(proxy, &session, &id, body).await,
    }
}

/// The POST must carry JSON (`Content-Type: application/json`) and accept JSON or SSE replies
/// (MCP 2025-06-18, "Sending Messages to the Server"). Absent headers are tolerated; wrong ones get
/// 415 or 406 with a JSON-RPC error.
fn bad_headers(proxy: &Front, headers: &HeaderMap) -> Option<Answer> {
    let value = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::as_bytes)
    };
    let (status, reason, message) = if value("content-type")
        .is_some_and(|t| !starts_with_ignoring_case(t, b"application/json"))
    {
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content_type",
            "Content-Type must be application/json",
        )
    } else if value("accept").is_some_and(|accept| {
        ![
            "application/json",
            "text/event-stream",
            "*/*",
            "application/*",
            "text/*",
        ]
        .iter()
        .any(|kind| contains_ignoring_case(accept, kind.as_bytes()))
    }) {
        (
            StatusCode::NOT_ACCEPTABLE,
            "accept",
            "Accept must include application/json and text/event-stream",
        )
    } else {
        return None;
    };
    Some(refused(
        &proxy.engine.metrics,
        reason,
        status,
        &Value::Null,
        jsonrpc::INVALID_REQUEST,
        message,
    ))
}

/// A client notification the upstream could not be given: the client gets 502 with a JSON-RPC
/// error (no id: notifications have none) instead of 202, the drop is counted, and the
/// supervisor checks the upstream at once (MCP 2025-06-18, "Sending Messages to the Server": a
/// server that cannot accept the input answers with an HTTP error status).
fn notification_failed(
    proxy: &Front,
    session: &DownstreamSession,
    method: &str,
    error: &str,
) -> Answer {
    tracing::warn!(mcp.session_id = session.id(), mcp.method = method, %error, "failed to forward notification upstream");
    proxy.engine.metrics.client_notifications_failed.inc();
    if session.dedicated().is_none() {
        proxy.engine.upstream.check_reachable();
    }
    Answer::error_with_data(
        StatusCode::BAD_GATEWAY,
        &Value::Null,
        jsonrpc::UPSTREAM_UNAVAILABLE,
        "the notification could not be forwarded to the upstream MCP server",
        serde_json::json!({ "outcome": crate::wire::outcome::Outcome::UpstreamUnavailable.as_label(), "retryable": true }),
    )
}

/// MCP params are objects (MCP 2025-06-18, "Messages"); `initialize` needs a string
/// `protocolVersion`. Anything else is refused with -32602 before it reaches the upstream, so a
/// client's mistake is never counted as an upstream failure.
fn bad_params(proxy: &Front, message: &Message) -> Option<Answer> {
    let (Message::Request { body, .. } | Message::Notification { body, .. }) = message else {
        return None;
    };
    // Read through the envelope: `params` stay unparsed (issue 14).
    let reason = if body
        .member_text(&["params"])
        .is_some_and(|params| !params.starts_with('{'))
    {
        "params must be an object"
    } else if message.method() == Some("initialize")
        && body.member_str(&["params", "protocolVersion"]).is_none()
    {
        "initialize needs params.protocolVersion (a string)"
    } else {
        return None;
    };
    let id = body.member_value(&["id"]).unwrap_or(Value::Null);
    Some(refused(
        &proxy.engine.metrics,
        "params",
        StatusCode::BAD_REQUEST,
        &id,
        jsonrpc::INVALID_PARAMS,
        reason,
    ))
}

fn refuse(proxy: &Front, invalid: &Invalid) -> Answer {
    let (reason, id) = match invalid {
        Invalid::Batch => ("batch", Value::Null),
        Invalid::Shape { id, .. } => ("shape", id.clone().unwrap_or(Value::Null)),
    };
    refused(
        &proxy.engine.metrics,
        reason,
        StatusCode::BAD_REQUEST,
        &id,
        jsonrpc::INVALID_REQUEST,
        &invalid.to_string(),
    )
}

/// Client notifications: `initialized` is absorbed (the upstream session is already
/// initialized), `cancelled` is mapped to the upstream request id, others go upstream as sent.
async fn notification(
    proxy: &Front,
    session: &DownstreamSession,
    method: &str,
    body: jsonrpc::WireMessage,
) -> Answer {
    match method {
        "notifications/initialized" => Answer::Accepted,
        "notifications/cancelled" => {
            let request_id = body
                .get("params")
                .and_then(|p| p.get("requestId"))
                .cloned()
                .unwrap_or(Value::Null);
            if let Some(in_flight) = session.in_flight(&request_id) {
                in_flight.cancelled.cancel();
            }
            Answer::Accepted
        }
        // A request method without an id is not a notification in MCP (notifications are
        // `notifications/*`): forwarding it would skip the tool policy, drift checks and
        // outcome accounting, and an upstream may crash on it. Refused; nothing is forwarded.
        _ if !method.starts_with("notifications/") => refused(
            &proxy.engine.metrics,
            "request_without_id",
            StatusCode::BAD_REQUEST,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            &format!(
                "{method} is a request and needs an id (MCP notifications are notifications/*); nothing was forwarded"
            ),
        ),
        _ => {
            let upstream = match session.dedicated() {
                Some(dedicated) => Some(dedicated.current()),
                None => {
                    proxy
                        .engine
                        .upstream
                        .session(proxy.engine.connect_budget)
                        .await
                }
            };
            let sent = match upstream {
                Some(upstream) => upstream
                    .send(&body)
                    .await
                    .map(|_| ())
                    .map_err(|error| crate::transport::upstream::error_chain(&error)),
                None => Err("no upstream session".to_owned()),
            };
            match sent {
                Ok(()) => Answer::Accepted,
                Err(error) => notification_failed(proxy, session, method, &error),
            }
        }
    }
}
