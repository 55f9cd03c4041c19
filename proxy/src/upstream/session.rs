//! One upstream MCP session: its handshake, its id, and request-id allocation.
//!
//! Source: MCP 2025-06-18, "Lifecycle" (initialize, then `notifications/initialized`) and
//! "Transports: Streamable HTTP / Session Management".

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::UpstreamError;
use super::endpoint::Endpoint;
use super::http::{HttpUpstream, Reply};
use super::late_response::{LateResponse, LateResponses};
use crate::jsonrpc::WireMessage;
use crate::stdio::Connection;

/// Protocol revisions that have an `initialize` handshake, oldest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The revision the proxy asks the upstream for: the newest with an `initialize` handshake.
pub const REQUESTED_VERSION: &str = "2025-11-25";

/// The transport under one upstream session.
#[derive(Debug)]
pub enum Link {
    /// A Streamable HTTP endpoint and the session's `Mcp-Session-Id`.
    Http(HttpUpstream, Option<String>),
    /// A stdio connection: one child, this session alone.
    Stdio(Arc<Connection>),
}

/// An initialized upstream session.
#[derive(Debug)]
pub struct UpstreamSession {
    link: Link,
    protocol_version: String,
    initialize_result: Value,
    next_request_id: AtomicU64,
    lost: CancellationToken,
    reported: AtomicBool,
    late_responses: Arc<LateResponses>,
    standalone_open: AtomicBool,
}

impl UpstreamSession {
    /// Runs the MCP handshake: `initialize` without a session header, then
    /// `notifications/initialized` on the new session. The session exists only once both
    /// succeeded, so no caller can see a half-initialized session.
    ///
    /// `params` are the `initialize` params to send; `None` sends the proxy's own
    /// ([`proxy_initialize_params`]).
    ///
    /// # Errors
    /// Any [`UpstreamError`] from either step; [`UpstreamError::Handshake`] when the upstream
    /// answers with an error or a protocol revision without a handshake.
    ///
    /// # Cancellation
    /// Applies no timeout itself; callers wrap it in the connect budget. Dropping it abandons
    /// the handshake and leaves no session behind on the proxy's side.
    pub async fn handshake(
        endpoint: &Endpoint,
        params: Option<Value>,
    ) -> Result<Self, UpstreamError> {
        let params = params.unwrap_or_else(proxy_initialize_params);
        let request: WireMessage =
            json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params }).into();
        let (reply, link) = match endpoint {
            Endpoint::Http(http) => {
                let (reply, id) = http.post(&request, None, None).await?;
                (reply, Link::Http(http.clone(), id))
            }
            Endpoint::Stdio(stdio) => {
                // Dropping this future drops the connection, which stops the child.
                let connection = Arc::new(stdio.open().await?);
                let reply = stdio_reply(connection.send(&request).await?);
                (reply, Link::Stdio(connection))
            }
        };
        let response = final_response(reply, &json!(0)).await?;
        if let Some(error) = response.get("error") {
            return Err(UpstreamError::Handshake(format!(
                "initialize failed: {error}"
            )));
        }
        let result = response
            .get("result")
            .cloned()
            .ok_or_else(|| UpstreamError::Handshake("initialize result missing".into()))?;
        let protocol_version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !HANDSHAKE_VERSIONS.contains(&protocol_version.as_str()) {
            return Err(UpstreamError::Handshake(format!(
                "upstream chose unsupported protocol version {protocol_version:?}"
            )));
        }
        let lost = match &link {
            Link::Stdio(connection) => connection.ended().child_token(),
            Link::Http(..) => CancellationToken::new(),
        };
        let session = Self {
            link,
            protocol_version,
            initialize_result: result,
            next_request_id: AtomicU64::new(1),
            lost,
            reported: AtomicBool::new(false),
            late_responses: Arc::default(),
            standalone_open: AtomicBool::new(false),
        };
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        session.send(&initialized.into()).await?;
        Ok(session)
    }

    /// Registers the request with upstream id `id` for a response on the standalone stream
    /// (see [`LateResponses`]); register before sending, so no response can be missed.
    pub fn expect_response(&self, id: u64) -> LateResponse {
        self.late_responses.expect(id)
    }

    /// Records whether the proxy holds the session's standalone stream open right now (set by
    /// the listener).
    pub fn set_standalone_open(&self, open: bool) {
        self.standalone_open.store(open, Ordering::Relaxed);
    }

    /// Whether a response missing from a request's own reply can still arrive: the proxy holds
    /// the session's standalone stream open.
    pub fn standalone_open(&self) -> bool {
        self.standalone_open.load(Ordering::Relaxed)
    }

    /// Hands a response that arrived on the standalone stream to the call waiting for it.
    ///
    /// # Errors
    /// Gives the message back when no call is waiting for it.
    pub fn route_response(&self, message: WireMessage) -> Result<(), WireMessage> {
        self.late_responses.route(message)
    }

    /// The upstream's `Mcp-Session-Id`, `None` for a server that runs without sessions.
    pub fn id(&self) -> Option<&str> {
        match &self.link {
            Link::Http(_, id) => id.as_deref(),
            Link::Stdio(_) => None,
        }
    }

    /// The transport under this session.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The protocol revision negotiated with the upstream, e.g. `2025-06-18`.
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// The upstream's `InitializeResult` (capabilities, serverInfo, instructions).
    pub fn initialize_result(&self) -> &Value {
        &self.initialize_result
    }

    /// A JSON-RPC request id never used before on this session.
    pub fn next_request_id(&self) -> u64 {
        self.next_request_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the upstream has reported this session unknown.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Marks the session lost.
    pub fn mark_lost(&self) {
        self.lost.cancel();
    }

    /// Fires when the session is marked lost.
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }

    /// Marks the loss as reported; true only for the first caller, so a loss is counted once.
    pub fn claim_report(&self) -> bool {
        !self.reported.swap(true, Ordering::Relaxed)
    }

    /// Sends one message on this session.
    ///
    /// # Errors
    /// As [`HttpUpstream::post`]; a [`UpstreamError::SessionLost`] also marks the session lost.
    pub async fn send(&self, message: &WireMessage) -> Result<Reply, UpstreamError> {
        let http = match &self.link {
            Link::Http(http, _) => http,
            Link::Stdio(connection) => return connection.send(message).await.map(stdio_reply),
        };
        let result = http
            .post(message, self.id(), Some(&self.protocol_version))
            .await;
        if matches!(result, Err(UpstreamError::SessionLost)) {
            self.mark_lost();
        }
        result.map(|(reply, _)| reply)
    }

    /// Sends a request built from `method` and `params` under a fresh id and returns its final
    /// response, ignoring notifications that arrive before it. Used for the proxy's own
    /// requests (tools probe).
    ///
    /// # Errors
    /// As [`Self::send`], plus [`UpstreamError::Malformed`] when no response arrives.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, UpstreamError> {
        let id = json!(self.next_request_id());
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let reply = self.send(&message.into()).await?;
        final_response(reply, &id).await
    }

    /// Ends the session upstream: `DELETE` for HTTP (best effort; a refusal is logged with its
    /// status, issue 12, item 4); for stdio the child's stdin closes and it is stopped and
    /// reaped in the background.
    ///
    /// # Cancellation
    /// Cancel-safe; callers bound it (2 s on shutdown).
    pub async fn close(&self) {
        match &self.link {
            Link::Http(http, Some(id)) => match http.delete(id, &self.protocol_version).await {
                Ok(()) => tracing::debug!(upstream_session_id = id, "deleted upstream session"),
                Err(UpstreamError::Status { status: 405, .. }) => tracing::debug!(
                    upstream_session_id = id,
                    "upstream does not let clients end sessions (405); it ends this one itself"
                ),
                Err(UpstreamError::Status { status: 404, .. }) => tracing::debug!(
                    upstream_session_id = id,
                    "upstream session already ended (404)"
                ),
                Err(UpstreamError::Status { status, body }) => tracing::warn!(
                    upstream_session_id = id,
                    status,
                    body = %body,
                    protocol_version = %self.protocol_version,
                    "failed to delete upstream session; the upstream keeps it until it expires"
                ),
                Err(error) => tracing::warn!(
                    upstream_session_id = id,
                    error = %super::error_chain(&error),
                    "failed to delete upstream session"
                ),
            },
            Link::Http(_, None) => {}
            Link::Stdio(connection) => connection.close(),
        }
    }
}

/// The proxy's own `initialize` params for a shared session: the newest revision with a
/// handshake, and the client capabilities whose server requests the proxy routes to the client
/// that made the call (sampling, elicitation, roots).
pub fn proxy_initialize_params() -> Value {
    json!({
        "protocolVersion": REQUESTED_VERSION,
        "capabilities": { "sampling": {}, "elicitation": {}, "roots": { "listChanged": true } },
        "clientInfo": { "name": "berth-proxy", "version": env!("CARGO_PKG_VERSION") },
    })
}

/// A stdio reply as the HTTP-shaped [`Reply`] the forwarding code handles: a stream for a
/// request, `Accepted` for anything else.
fn stdio_reply(pending: crate::stdio::PendingReply) -> Reply {
    if pending.is_request() {
        Reply::Stream(Box::pin(pending))
    } else {
        Reply::Accepted
    }
}

/// Waits for the response with `id` in a reply.
async fn final_response(reply: Reply, id: &Value) -> Result<Value, UpstreamError> {
    match reply {
        Reply::Json(value) if value.get("id") == Some(id) => Ok(value.into_view()),
        Reply::Json(_) => Err(UpstreamError::Malformed(
            "response id does not match".into(),
        )),
        Reply::Accepted => Err(UpstreamError::Malformed("request answered with 202".into())),
        Reply::Stream(mut stream) => {
            while let Some(message) = stream.next().await {
                let message = message?;
                let is_response = message.get("result").is_some() || message.get("error").is_some();
                if is_response && message.get("id") == Some(id) {
                    return Ok(message.into_view());
                }
            }
            Err(UpstreamError::Malformed(
                "stream ended before the response".into(),
            ))
        }
    }
}
