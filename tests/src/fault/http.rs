//! The fault upstream's HTTP side: `POST`, `GET` and `DELETE /mcp`, session checks, the faults
//! that act on the transport, and the shape of every reply (JSON, SSE, 202, error statuses).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{
    ALREADY_INITIALIZED_BODY, DEFAULT_PROTOCOL_VERSION, Delete, FaultHandle, Inner,
    PROTOCOL_VERSION_REQUIRED_BODY, Received, SESSION_REQUIRED_BODY, SESSIONLESS_KEY,
    SUPPORTED_PROTOCOL_VERSIONS, SecondSession, id_key, tools,
};

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// How many messages a standalone GET stream buffers before new ones are dropped.
const STREAM_BUFFER: usize = 64;

pub(super) fn router(handle: FaultHandle) -> Router {
    Router::new()
        .route("/mcp", post(on_post).get(on_get).delete(on_delete))
        .with_state(handle)
}

async fn on_post(
    State(handle): State<FaultHandle>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // The proxy's own reader, so JSON a `Value` cannot hold whole (deep nesting, `1e400`) is
    // still read for its envelope.
    let message: Value = berth_proxy::wire::jsonrpc::WireMessage::parse(&body)
        .map(berth_proxy::wire::jsonrpc::WireMessage::into_view)
        .unwrap_or(Value::Null);
    handle.record(Method::POST, &message, &body, &headers, peer);
    if handle.lock().not_found_now() {
        return status_only(StatusCode::NOT_FOUND);
    }
    let Some(object) = message.as_object() else {
        let error = json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32700, "message": "Parse error"}});
        return json_reply(StatusCode::BAD_REQUEST, &error);
    };
    let method = object.get("method").and_then(Value::as_str);
    let id = object.get("id").cloned();
    if method == Some("initialize") {
        return initialize(&handle, &message, session_header(&headers).as_deref()).await;
    }
    let session = match handle.lock().session_of(&headers) {
        Ok(session) => session,
        Err(refusal) => return *refusal,
    };
    match (method, id) {
        (Some(method), None) => notification(&handle, &session, method, &message),
        (None, Some(id)) => {
            let refuse = handle.lock().faults.answer_status;
            if let Some(status) = refuse.and_then(|s| StatusCode::from_u16(s).ok()) {
                return status_only(status);
            }
            handle.deliver_answer(&session, &id, message);
            status_only(StatusCode::ACCEPTED)
        }
        (Some(method), Some(id)) => request(&handle, session, method, id, &message).await,
        (None, None) => {
            let error = json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": "Invalid Request"}});
            json_reply(StatusCode::BAD_REQUEST, &error)
        }
    }
}

async fn initialize(handle: &FaultHandle, message: &Value, session: Option<&str>) -> Response {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let (delay, sse, sessionless) = {
        let mut inner = handle.lock();
        inner.initializes += 1;
        if session.is_some() {
            let error = json!({"jsonrpc": "2.0", "id": null,
                "error": {"code": -32600, "message": "already initialized"}});
            return json_reply(StatusCode::BAD_REQUEST, &error);
        }
        if until_active(inner.faults.unavailable_initialize_until) {
            return status_only(StatusCode::SERVICE_UNAVAILABLE);
        }
        let reject = inner.faults.second_session == SecondSession::RejectInitialize;
        if reject && !inner.sessions.is_empty() {
            return raw_json(StatusCode::BAD_REQUEST, ALREADY_INITIALIZED_BODY);
        }
        let faults = &inner.faults;
        (
            faults.handshake_delay,
            faults.sse_replies,
            faults.sessionless,
        )
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let requested = message["params"]["protocolVersion"].as_str();
    let version = requested
        .filter(|v| SUPPORTED_PROTOCOL_VERSIONS.contains(v))
        .unwrap_or(DEFAULT_PROTOCOL_VERSION);
    let (session_id, capabilities) = {
        let mut inner = handle.lock();
        inner.sessions_issued += 1;
        let session_id = if sessionless {
            SESSIONLESS_KEY.to_owned()
        } else {
            format!("{}-{}", inner.session_prefix, inner.sessions_issued)
        };
        let session = inner.sessions.entry(session_id.clone()).or_default();
        session.protocol_version = version.to_owned();
        (session_id, inner.capabilities.to_json())
    };
    let reply = json!({"jsonrpc": "2.0", "id": id, "result": {
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": {"name": "berth-fault-upstream", "version": "0.1.0"},
    }});
    let mut response = if sse {
        single_event(reply)
    } else {
        json_reply(StatusCode::OK, &reply)
    };
    if let Ok(value) = HeaderValue::from_str(&session_id)
        && !sessionless
    {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

fn notification(handle: &FaultHandle, session: &str, method: &str, message: &Value) -> Response {
    let mut inner = handle.lock();
    match method {
        "notifications/initialized" => {
            if inner.faults.fail_initialized_once {
                inner.faults.fail_initialized_once = false;
                return status_only(StatusCode::INTERNAL_SERVER_ERROR);
            }
            let reject = inner.faults.second_session == SecondSession::RejectInitialized;
            let other_initialized = inner
                .sessions
                .iter()
                .any(|(id, s)| id != session && s.initialized);
            if reject && other_initialized {
                return raw_json(StatusCode::BAD_REQUEST, ALREADY_INITIALIZED_BODY);
            }
            if inner.faults.forget_after_initialized {
                inner.sessions.remove(session);
            } else if let Some(state) = inner.sessions.get_mut(session) {
                state.initialized = true;
            }
        }
        "notifications/cancelled" => {
            let request_id = message["params"]["requestId"].clone();
            let token = inner
                .sessions
                .get_mut(session)
                .and_then(|s| s.in_flight.get(&id_key(&request_id)).cloned());
            inner.cancellations.push(request_id);
            if let Some(token) = token {
                token.cancel();
            }
        }
        _ => {}
    }
    status_only(StatusCode::ACCEPTED)
}

async fn request(
    handle: &FaultHandle,
    session: String,
    method: &str,
    id: Value,
    message: &Value,
) -> Response {
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    if method == "tools/call" && params["name"] == "raw" {
        let (result, null_id, streamed, sse, status) = {
            let faults = &handle.lock().faults;
            (
                faults.raw_result.clone(),
                faults.null_id_error,
                faults.streamed_result_bytes,
                faults.sse_replies,
                faults.streamed_status,
            )
        };
        if let Some(bytes) = streamed {
            let mut reply = super::streamed::reply(&id, bytes, sse);
            if let Some(status) = status.and_then(|s| StatusCode::from_u16(s).ok()) {
                *reply.status_mut() = status;
            }
            return reply;
        }
        if null_id {
            return raw_reply(handle, super::NULL_ID_ERROR.to_owned());
        }
        return raw_result(handle, &id, result);
    }
    let raw_list = handle.lock().faults.raw_tools_list.clone();
    if method == "tools/list"
        && let Some(result) = raw_list
    {
        return raw_result(handle, &id, Some(result));
    }
    let on_standalone = handle.lock().faults.answer_on_standalone;
    if method == "tools/call"
        && params["name"] == "echo"
        && let Some(shape) = on_standalone
    {
        return answer_on_standalone(handle, &session, id, &params, shape);
    }
    if method == "tools/call" && params["name"] == "echo" && handle.lock().faults.sse_polling {
        return polled(handle, &session, id, &params);
    }
    if method == "tools/call" {
        return tools::call(handle.clone(), session, id, params).await;
    }
    if method == "resources/subscribe" {
        handle.delay_subscribe().await;
    }
    let outcome = {
        let mut inner = handle.lock();
        match method {
            "ping" | "logging/setLevel" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": inner.tools })),
            "resources/list" => Ok(json!({"resources": [
                {"uri": "fault://counter", "name": "counter", "mimeType": "text/plain"},
            ]})),
            "resources/read" => {
                let uri = params["uri"].clone();
                Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": "0"}]}))
            }
            "resources/subscribe" if inner.faults.subscribe_error => {
                Err(json!({"code": -32603, "message": "subscriptions are unavailable"}))
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params["uri"].as_str().unwrap_or_default().to_owned();
                if let Some(state) = inner.sessions.get_mut(&session) {
                    if method == "resources/subscribe" {
                        state.subscriptions.insert(uri);
                    } else {
                        state.subscriptions.remove(&uri);
                    }
                }
                Ok(json!({}))
            }
            _ => Err(json!({"code": -32601, "message": format!("Method not found: {method}")})),
        }
    };
    let reply = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    };
    if handle.lock().faults.sse_replies {
        single_event(reply)
    } else {
        json_reply(StatusCode::OK, &reply)
    }
}

async fn on_get(
    State(handle): State<FaultHandle>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    handle.record(Method::GET, &Value::Null, &[], &headers, peer);
    let mut inner = handle.lock();
    if inner.not_found_now() {
        return status_only(StatusCode::NOT_FOUND);
    }
    let session = match inner.session_of(&headers) {
        Ok(session) => session,
        Err(refusal) => return *refusal,
    };
    let polled = header_text(&headers, "last-event-id").is_some_and(|id| {
        inner
            .sessions
            .get(&session)
            .is_some_and(|state| state.polled.contains_key(&id))
    });
    if polled && inner.faults.empty_resumptions > 0 {
        inner.faults.empty_resumptions -= 1;
        let none = futures::stream::empty::<Result<Event, Infallible>>();
        return Sse::new(none).into_response();
    }
    let Some(state) = inner.sessions.get_mut(&session) else {
        return status_only(StatusCode::NOT_FOUND);
    };
    if let Some(response) =
        header_text(&headers, "last-event-id").and_then(|id| state.polled.remove(&id))
    {
        let event = Event::default()
            .event("message")
            .id("resumed")
            .data(response.to_string());
        return Sse::new(futures::stream::iter([Ok::<_, Infallible>(event)])).into_response();
    }
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    state.streams.push(tx);
    Sse::new(events(rx))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

async fn on_delete(
    State(handle): State<FaultHandle>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    handle.record(Method::DELETE, &Value::Null, &[], &headers, peer);
    let mut inner = handle.lock();
    let response = inner.delete(&headers);
    inner.delete_requests.push(Delete {
        session: session_header(&headers),
        protocol_version: header_text(&headers, PROTOCOL_VERSION_HEADER),
        status: response.status().as_u16(),
    });
    response
}

impl FaultHandle {
    fn record(
        &self,
        http_method: Method,
        message: &Value,
        raw: &[u8],
        headers: &HeaderMap,
        peer: SocketAddr,
    ) {
        let session = session_header(headers);
        let mut inner = self.lock();
        if !inner.record {
            return;
        }
        inner.received.push(Received {
            http_method: http_method.to_string(),
            method: message["method"].as_str().map(str::to_owned),
            id: message.get("id").cloned(),
            session,
            message: message.clone(),
            raw: String::from_utf8_lossy(raw).into_owned(),
            headers: headers
                .iter()
                .map(|(name, value)| {
                    let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                    (name.as_str().to_owned(), value)
                })
                .collect(),
            peer,
        });
    }

    /// Hands a client's answer to the server-to-client request waiting for it (if any).
    fn deliver_answer(&self, session: &str, id: &Value, message: Value) {
        let waiter = self
            .lock()
            .sessions
            .get_mut(session)
            .and_then(|s| s.pending.remove(&id_key(id)));
        if let Some(waiter) = waiter {
            let _ = waiter.send(message);
        }
    }
}

impl Inner {
    fn not_found_now(&self) -> bool {
        until_active(self.faults.not_found_until)
    }

    /// The live session a request after the handshake belongs to, or the refusal it gets: 400
    /// without `Mcp-Session-Id` (unless [`super::Faults::sessionless`]), 404 for an unknown
    /// one, then (with [`super::Faults::strict_protocol_version`]) 400 when its
    /// `MCP-Protocol-Version` is not the session's revision.
    fn session_of(&self, headers: &HeaderMap) -> Result<String, Box<Response>> {
        let session = session_header(headers)
            .or_else(|| self.faults.sessionless.then(|| SESSIONLESS_KEY.to_owned()))
            .ok_or_else(|| Box::new(raw_json(StatusCode::BAD_REQUEST, SESSION_REQUIRED_BODY)))?;
        let state = self
            .sessions
            .get(&session)
            .ok_or_else(|| Box::new(status_only(StatusCode::NOT_FOUND)))?;
        let version = header_text(headers, PROTOCOL_VERSION_HEADER);
        if self.faults.strict_protocol_version
            && version.as_deref() != Some(state.protocol_version.as_str())
        {
            return Err(Box::new(raw_json(
                StatusCode::BAD_REQUEST,
                PROTOCOL_VERSION_REQUIRED_BODY,
            )));
        }
        Ok(session)
    }

    /// Ends the session a `DELETE` names, or says why not.
    fn delete(&mut self, headers: &HeaderMap) -> Response {
        if self.not_found_now() {
            return status_only(StatusCode::NOT_FOUND);
        }
        let session = match self.session_of(headers) {
            Ok(session) => session,
            Err(refusal) => return *refusal,
        };
        if let Some(status) = self.faults.delete_status {
            return status_only(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST));
        }
        self.sessions.remove(&session);
        self.deletes += 1;
        status_only(StatusCode::OK)
    }
}

fn until_active(until: Option<Instant>) -> bool {
    until.is_some_and(|until| Instant::now() < until)
}

fn session_header(headers: &HeaderMap) -> Option<String> {
    header_text(headers, SESSION_HEADER)
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn status_only(status: StatusCode) -> Response {
    status.into_response()
}

fn raw_json(status: StatusCode, body: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(super) fn json_reply(status: StatusCode, message: &Value) -> Response {
    let body = Body::from(message.to_string());
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Answers `tools/call echo` on the session's standalone streams 50 ms from now, and its POST
/// with `shape`.
fn answer_on_standalone(
    handle: &FaultHandle,
    session: &str,
    id: Value,
    params: &Value,
    shape: super::StandaloneAnswer,
) -> Response {
    let text = params["arguments"]["message"].clone();
    let response = json!({"jsonrpc": "2.0", "id": id,
        "result": {"content": [{"type": "text", "text": text}]}});
    let handle = handle.clone();
    let session = session.to_owned();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(state) = handle.lock().sessions.get_mut(&session) {
            for tx in &state.streams {
                let _ = tx.try_send(response.clone());
            }
        }
    });
    match shape {
        super::StandaloneAnswer::Accepted => status_only(StatusCode::ACCEPTED),
        super::StandaloneAnswer::EmptyStream => {
            let (_tx, rx) = mpsc::channel(1);
            stream_reply(rx)
        }
    }
}

/// `tools/call echo` with `sse_polling`: a priming event only; the response waits for the GET
/// that resumes after it.
fn polled(handle: &FaultHandle, session: &str, id: Value, params: &Value) -> Response {
    let text = params["arguments"]["message"].clone();
    let response = json!({"jsonrpc": "2.0", "id": id,
        "result": {"content": [{"type": "text", "text": text}]}});
    let event_id = format!("prime-{}", id_token(&id));
    if let Some(state) = handle.lock().sessions.get_mut(session) {
        state.polled.insert(event_id.clone(), response);
    }
    let priming = Event::default()
        .id(event_id)
        .retry(Duration::from_millis(50))
        .data("");
    Sse::new(futures::stream::iter([Ok::<_, Infallible>(priming)])).into_response()
}

/// A priming event id unique per request id.
fn id_token(id: &Value) -> String {
    id.to_string()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "")
}

/// A reply with the text `result` (`{}` when `None`) spliced in as it is:
/// [`super::Faults::raw_result`], [`super::Faults::raw_tools_list`].
fn raw_result(handle: &FaultHandle, id: &Value, result: Option<String>) -> Response {
    let result = result.unwrap_or_else(|| "{}".to_owned());
    raw_reply(
        handle,
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
    )
}

/// `text` as it is: a JSON body, or with `sse_replies` one SSE event.
fn raw_reply(handle: &FaultHandle, text: String) -> Response {
    let sse = handle.lock().faults.sse_replies;
    if sse {
        let event = Event::default().event("message").data(text);
        let events = futures::stream::iter([Ok::<_, Infallible>(event)]);
        Sse::new(events).into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            text,
        )
            .into_response()
    }
}

/// An SSE reply carrying one message (the request's response).
fn single_event(message: Value) -> Response {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(message);
    stream_reply(rx)
}

/// An SSE reply carrying every message sent into `rx`, ending when all senders are dropped.
pub(super) fn stream_reply(rx: mpsc::Receiver<Value>) -> Response {
    Sse::new(events(rx)).into_response()
}

fn events(rx: mpsc::Receiver<Value>) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(rx, |mut rx| async move {
        let message = rx.recv().await?;
        let event = Event::default().event("message").data(message.to_string());
        Some((Ok(event), rx))
    })
}
