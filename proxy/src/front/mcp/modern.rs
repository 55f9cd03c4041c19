//! The modern (MCP 2026-07-28) front on `/mcp`, beside the legacy one: requests without a
//! session, each declaring its revision and client capabilities in `params._meta`, served over
//! the legacy upstream session (`Shared`) or an upstream session of their own (`PerClient`).
//!
//! Sources: MCP 2026-07-28 "Streamable HTTP" (request metadata headers and their validation,
//! 404 / -32601 for a method the server does not implement, 405 for GET and DELETE),
//! "Versioning" (-32022 naming `supported` and `requested`), "Discovery" (`server/discover`),
//! "Basic" (per-request `_meta` fields); issue 13. What differs between the eras on the way
//! through is in [`bridge`].

mod bridge;
mod headers;
mod listen;

use crate::wire::jsonrpc::Pointer as _;
use std::borrow::Cow;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use berth_crds::SessionStrategy;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::refusal::refused;
use crate::access::auth::Principal;
use crate::client::per_client::Dedicated;
use crate::client::sessions::DownstreamSession;
use crate::front::mcp::era::{self, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL};
use crate::front::mcp::state::Front;
use crate::transport::upstream::session::REQUESTED_VERSION;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc::{self, Message, WireMessage};
use crate::wire::outcome::Outcome;

/// Methods 2026-07-28 removed (its changelog, "Major changes" 2, 4 and 5): answered 404 with
/// -32601 and never forwarded, since a legacy upstream would run them.
const REMOVED_METHODS: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// The tool a `tools/call` names (`params.name`), read through the envelope (issue 14).
fn tool_name(body: &WireMessage) -> Option<Cow<'_, str>> {
    body.member_str(&["params", "name"])
}

/// The request's `params._meta` (`null` when absent), parsed alone: the rest of the request
/// stays unparsed (issue 14).
fn request_meta(body: &WireMessage) -> Value {
    body.member(&["params", "_meta"])
        .map(Cow::into_owned)
        .unwrap_or_default()
}

/// One modern client message (its body already classified and checked for duplicate members).
pub async fn handle(
    proxy: &Arc<Front>,
    headers: &HeaderMap,
    message: Message,
    caller: Option<Arc<Principal>>,
) -> Answer {
    let id = match &message {
        Message::Request { id, .. } => id.clone(),
        Message::Response { .. } | Message::Notification { .. } => Value::Null,
    };
    let received = std::time::Instant::now();
    let audited = |answer: Answer, body: &WireMessage| {
        proxy
            .engine
            .auditor
            .refused_tool_call(body, None, caller.as_ref(), received.elapsed());
        answer
    };
    let version = match headers::check(headers, message.body()) {
        Ok(version) => version,
        Err(refusal) => {
            proxy
                .engine
                .metrics
                .invalid_messages
                .with_label_values(&[refusal.reason()])
                .inc();
            return audited(refusal.answer(&id), message.body());
        }
    };
    let Message::Request { id, method, body } = message else {
        return refused(
            &proxy.engine.metrics,
            "modern_message",
            StatusCode::BAD_REQUEST,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            "MCP 2026-07-28 over Streamable HTTP takes requests only: no client notifications or responses",
        );
    };
    if REMOVED_METHODS.contains(&method.as_str()) {
        return refused(
            &proxy.engine.metrics,
            "removed_method",
            StatusCode::NOT_FOUND,
            &id,
            jsonrpc::METHOD_NOT_FOUND,
            &format!("{method} is not part of MCP {version}"),
        );
    }
    // The `Mcp-Param-*` headers of a tool this caller may call; a hidden or ungranted tool's
    // call goes on to be refused without telling its parameters.
    if method == "tools/call"
        && let Some(tool) = tool_name(&body)
        && proxy.engine.upstream.exposes(&tool)
        && proxy.engine.tool_grants.as_ref().is_none_or(|grants| {
            grants.allows(
                caller.as_deref(),
                &tool,
                proxy.engine.upstream.is_read_only(&tool),
            )
        })
        && let Err(refusal) =
            headers::check_params(headers, &body, &proxy.engine.upstream.param_headers(&tool))
    {
        proxy
            .engine
            .metrics
            .invalid_messages
            .with_label_values(&[refusal.reason()])
            .inc();
        return audited(refusal.answer(&id), &body);
    }
    let json_only = !super::accept::accepts_sse(headers);
    let params = param_headers(headers);
    let request = ModernRequest {
        version,
        id,
        method,
        body,
        json_only,
        params,
    };
    serve(proxy, request, caller).await
}

/// One checked modern request.
struct ModernRequest<'a> {
    version: &'a str,
    id: Value,
    method: String,
    body: WireMessage,
    json_only: bool,
    params: Vec<(String, String)>,
}

/// The request's `Mcp-Param-*` headers (SEP-2243: tool arguments mirrored in headers), passed
/// to a modern upstream, which checks them against the body too (the proxy checked the ones
/// the last tool listing declared, [`headers::check_params`]).
fn param_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| name.as_str().starts_with("mcp-param-"))
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

async fn serve(
    proxy: &Arc<Front>,
    request: ModernRequest<'_>,
    caller: Option<Arc<Principal>>,
) -> Answer {
    let ModernRequest {
        version,
        id,
        method,
        body,
        json_only,
        params,
    } = request;
    let meta = request_meta(&body);
    let capabilities = meta
        .get(META_CLIENT_CAPABILITIES)
        .cloned()
        .unwrap_or_default();
    let session = match proxy.strategy {
        SessionStrategy::Shared => {
            proxy
                .engine
                .sessions
                .request_scoped(version, capabilities, None)
        }
        SessionStrategy::PerClient => match dedicated(proxy, &id, &meta, caller.as_deref()).await {
            Ok((dedicated, reservation)) => {
                let session =
                    proxy
                        .engine
                        .sessions
                        .request_scoped(version, capabilities, Some(dedicated));
                // Counted as a request-scoped session from here on.
                drop(reservation);
                session
            }
            Err(answer) => return answer,
        },
    };
    session.set_param_headers(params);
    if method == "server/discover" {
        return discover(proxy, &session, &id).await;
    }
    if method == "subscriptions/listen" {
        let Ok(upstream) = serving_upstream(proxy, &session).await else {
            return super::initialize::unavailable(&id, false);
        };
        let capabilities = upstream
            .initialize_result()
            .get("capabilities")
            .cloned()
            .unwrap_or_default();
        return listen::open(proxy, session, id, &body, &capabilities);
    }
    let server_info = server_info(proxy, &session);
    let wants_logs = meta.get(META_LOG_LEVEL).is_some();
    let answer = crate::engine::forward::request(
        Arc::clone(&proxy.engine),
        Arc::clone(&session),
        id,
        method.clone(),
        body,
        json_only,
        caller,
    )
    .await;
    shape(answer, method, server_info, wants_logs, session).await
}

/// The `PerClient` upstream session for one modern request, opened with the client's
/// capabilities and `clientInfo` (the revision is the proxy's: the upstream is legacy), capped
/// with the other client sessions by `session.maxSessions`.
async fn dedicated<'a>(
    proxy: &'a Front,
    id: &Value,
    meta: &Value,
    caller: Option<&Principal>,
) -> Result<(Dedicated, crate::client::session_room::Reservation<'a>), Answer> {
    use super::session_cap::{self, SessionLimit};
    let reservation = match session_cap::make_room(proxy, caller) {
        Ok(reservation) => reservation,
        Err(limit) => return Err(session_cap::refused(proxy, id, limit)),
    };
    let object = |key| meta.get(key).filter(|v| v.is_object()).cloned();
    let params = json!({
        "protocolVersion": REQUESTED_VERSION,
        "capabilities": object(META_CLIENT_CAPABILITIES).unwrap_or_else(|| json!({})),
        "clientInfo": object(META_CLIENT_INFO)
            .unwrap_or_else(|| json!({"name": "berth-modern-client", "version": "0"})),
    });
    Dedicated::open(proxy.endpoint.clone(), params, proxy.engine.connect_budget)
        .await
        .map(|dedicated| (dedicated, reservation))
        .map_err(|error| {
            tracing::warn!(error = %crate::observe::escaped::Escaped(&crate::transport::upstream::error_chain(&error)), "per-client upstream handshake for a modern request failed");
            if let crate::transport::upstream::UpstreamError::Refused(_) = error {
                return session_cap::refused(proxy, id, SessionLimit::MaxSessions);
            }
            super::initialize::unavailable(id, false)
        })
}

/// The upstream session that serves `session`: its own (`PerClient`), or the shared one once
/// the supervisor has it (within `timeouts.connect`).
async fn serving_upstream(
    proxy: &Front,
    session: &DownstreamSession,
) -> Result<Arc<crate::transport::upstream::UpstreamSession>, crate::transport::upstream::Unavailable>
{
    match session.dedicated() {
        Some(dedicated) => Ok(dedicated.current()),
        None => {
            proxy
                .engine
                .upstream
                .try_session(proxy.engine.connect_budget)
                .await
        }
    }
}

/// The upstream's `serverInfo`, from the handshake of the session that serves `session`.
fn server_info(proxy: &Front, session: &DownstreamSession) -> Option<Value> {
    let upstream = match session.dedicated() {
        Some(dedicated) => Some(dedicated.current()),
        None => proxy.engine.upstream.current(),
    }?;
    upstream.initialize_result().get("serverInfo").cloned()
}

/// `server/discover`, answered by the proxy from the upstream's handshake (a legacy upstream
/// has no `server/discover`); outcome recorded like any request.
async fn discover(proxy: &Front, session: &DownstreamSession, id: &Value) -> Answer {
    let started = std::time::Instant::now();
    let Ok(upstream) = serving_upstream(proxy, session).await else {
        proxy.engine.metrics.record(
            "server/discover",
            None,
            Outcome::UpstreamUnavailable,
            started.elapsed(),
            crate::observe::metrics::Era::Modern,
        );
        return super::initialize::unavailable(id, false);
    };
    let mut handshake = upstream.initialize_result().clone();
    if session.dedicated().is_none() {
        crate::wire::tasks::hide_capability(&mut handshake);
    }
    let result = bridge::discover_result(&handshake, &era::supported_versions());
    proxy.engine.metrics.record(
        "server/discover",
        None,
        Outcome::Ok,
        started.elapsed(),
        crate::observe::metrics::Era::Modern,
    );
    Answer::ok(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// The HTTP status of a JSON answer to a modern client: 404 for -32601 and 400 for the errors
/// the modern revision defines (MCP 2026-07-28, "Streamable HTTP"), when the answer was 200.
fn error_status(status: StatusCode, body: &Value) -> StatusCode {
    if status != StatusCode::OK {
        return status;
    }
    match body.at("/error/code").and_then(Value::as_i64) {
        Some(jsonrpc::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(code) if crate::wire::revision::MODERN_ERROR_CODES.contains(&code) => {
            StatusCode::BAD_REQUEST
        }
        _ => status,
    }
}

/// The forwarded request's answer, shaped for the modern client ([`bridge::shape_response`]):
/// a JSON answer at once (a -32601 from the upstream as 404, as the revision wants); a stream
/// message by message, its final response shaped and log messages dropped unless the request
/// asked for them with `_meta.logLevel` (MCP 2026-07-28, "Logging"). `session` is held until
/// the stream ends, so a `PerClient` upstream session lives exactly as long as its request.
async fn shape(
    answer: Answer,
    method: String,
    server_info: Option<Value>,
    wants_logs: bool,
    session: Arc<DownstreamSession>,
) -> Answer {
    match answer {
        Answer::Json {
            status,
            mut body,
            session: _,
        } => {
            bridge::shape_response(&mut body, &method, server_info.as_ref());
            let status = error_status(status, &body);
            Answer::Json {
                status,
                body,
                session: None,
            }
        }
        Answer::Stream(mut upstream) => {
            // A reply whose first message is its final response is answered as JSON, so its
            // error gets its HTTP status (404 for -32601, 400 for the modern errors) as from a
            // modern server; one that streams first stays a stream.
            let Some(first) = upstream.recv().await else {
                return Answer::Stream(upstream);
            };
            if first.get("method").is_none() {
                let mut body = first;
                bridge::shape_response(&mut body, &method, server_info.as_ref());
                let status = error_status(StatusCode::OK, &body);
                return Answer::Json {
                    status,
                    body,
                    session: None,
                };
            }
            let (resend, rest) = mpsc::channel(crate::client::sessions::STANDALONE_BUFFER);
            let _ = resend.try_send(first);
            tokio::spawn(async move {
                let mut upstream = upstream;
                while let Some(message) = upstream.recv().await {
                    if resend.send(message).await.is_err() {
                        return;
                    }
                }
            });
            let mut upstream = rest;
            let (sink, shaped) = mpsc::channel(1);
            tokio::spawn(async move {
                let _session = session;
                loop {
                    let next = tokio::select! {
                        next = upstream.recv() => next,
                        // The client went away: dropping `upstream` tells the relay (a
                        // cancellation), as it would without this shaping step.
                        () = sink.closed() => return,
                    };
                    let Some(mut message) = next else {
                        return;
                    };
                    let is_log = message.get("method").and_then(Value::as_str)
                        == Some("notifications/message");
                    if is_log && !wants_logs {
                        continue;
                    }
                    if message.get("method").is_none() {
                        bridge::shape_response(&mut message, &method, server_info.as_ref());
                    }
                    if sink.send(message).await.is_err() {
                        return;
                    }
                }
            });
            Answer::Stream(shaped)
        }
        // Only a legacy session's streams are carried as resumable events.
        other @ (Answer::Accepted | Answer::Events(_) | Answer::TooManyRequests { .. }) => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::jsonrpc::Message;

    #[test]
    fn a_modern_call_is_read_on_the_way_in_with_no_view_built() {
        // issue 14: every read the modern front makes of a `tools/call` before it is forwarded.
        let text = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"get_weather","arguments":{"region":"eu"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}}}}"#;
        let message =
            Message::classify(WireMessage::parse(text.as_bytes()).expect("parse")).expect("valid");
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "get_weather"),
        ] {
            headers.insert(name, value.parse().expect("header value"));
        }
        assert!(era::is_modern(&headers, &message));
        let body = message.body();
        assert_eq!(headers::check(&headers, body), Ok("2026-07-28"));
        assert_eq!(tool_name(body).as_deref(), Some("get_weather"));
        let meta = request_meta(body);
        assert_eq!(meta[META_CLIENT_CAPABILITIES], json!({"sampling": {}}));
        assert!(!body.view_is_built(), "the request's view was built");
        // The same answers once the view is built.
        let _ = body.view();
        assert_eq!(tool_name(body).as_deref(), Some("get_weather"));
        assert_eq!(request_meta(body), meta);
        let bare = WireMessage::parse(br#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#)
            .expect("parse");
        assert_eq!(request_meta(&bare), Value::Null);
        assert_eq!(tool_name(&bare), None);
    }
}
