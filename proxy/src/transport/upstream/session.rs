//! One upstream MCP session: its link, its id, request-id allocation, and sending on it. A
//! modern (MCP 2026-07-28) upstream has no session; its "session" is the proxy's link to it (a
//! stdio child, or the HTTP endpoint) with the `DiscoverResult` in place of the handshake's.
//!
//! Opening a session is the child module `handshake` (with the era probe in `probe` and the
//! proxy's own client parameters in `params`); `reply` waits for a response in a reply. The
//! children use this module's types; this module uses only `reply`, `probe` and `params`.
//!
//! Sources: MCP 2025-06-18, "Lifecycle" (initialize, then `notifications/initialized`) and
//! "Transports: Streamable HTTP / Session Management"; MCP 2026-07-28 "Versioning" and
//! "Discovery".

mod handshake;
mod params;
mod probe;
mod reply;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::UpstreamError;
use super::era::{ClientHop, UpstreamEra, fill_meta, has_place_on_modern_wire};
use super::http::{HttpUpstream, Reply};
use super::late_response::{LateResponse, LateResponses};
use crate::transport::stdio::Connection;
use crate::wire::jsonrpc::WireMessage;
pub use params::proxy_initialize_params;
pub use probe::STDIO_PROBE_WAIT;
use reply::{final_response, stdio_reply};

pub use crate::wire::revision::{HANDSHAKE_VERSIONS, REQUESTED_VERSION};

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
    era: UpstreamEra,
    protocol_version: String,
    initialize_result: Value,
    /// Modern: the hop the proxy's own requests declare (the `PerClient` client's, or the
    /// proxy's).
    hop: ClientHop,
    next_request_id: AtomicU64,
    lost: CancellationToken,
    reported: AtomicBool,
    late_responses: Arc<LateResponses>,
    standalone_open: AtomicBool,
    /// Modern: the resource URIs the proxy's `subscriptions/listen` stream on this upstream
    /// asks for; the listener re-opens the stream when they change.
    listen_uris: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
}

impl UpstreamSession {
    fn new(
        link: Link,
        era: UpstreamEra,
        protocol_version: String,
        initialize_result: Value,
        hop: ClientHop,
    ) -> Self {
        let lost = match &link {
            Link::Stdio(connection) => connection.ended().child_token(),
            Link::Http(..) => CancellationToken::new(),
        };
        Self {
            link,
            era,
            protocol_version,
            initialize_result,
            hop,
            next_request_id: AtomicU64::new(1),
            lost,
            reported: AtomicBool::new(false),
            late_responses: Arc::default(),
            standalone_open: AtomicBool::new(false),
            listen_uris: tokio::sync::watch::channel(Default::default()).0,
        }
    }

    /// Follows the resource URIs a modern upstream's listen stream must carry.
    pub fn watch_listen_uris(
        &self,
    ) -> tokio::sync::watch::Receiver<std::collections::BTreeSet<String>> {
        self.listen_uris.subscribe()
    }

    /// Adds (`subscribed`) or removes a resource URI of a modern upstream's listen stream;
    /// returns whether the set changed.
    pub fn set_listen_uri(&self, uri: &str, subscribed: bool) -> bool {
        self.listen_uris.send_if_modified(|uris| {
            if subscribed {
                uris.insert(uri.to_owned())
            } else {
                uris.remove(uri)
            }
        })
    }

    /// The era this session speaks.
    pub fn era(&self) -> UpstreamEra {
        self.era
    }

    /// Modern: the hop the proxy's own requests on this session declare.
    pub fn hop(&self) -> &ClientHop {
        &self.hop
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

    /// The upstream's `InitializeResult` (capabilities, serverInfo, instructions); for a modern
    /// upstream the same members taken from its `DiscoverResult`.
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

    /// Sends one message on this session (with traces on, carrying the current span's trace
    /// context in `params._meta` and, over HTTP, the `traceparent` header). A modern upstream
    /// gets requests only, with the
    /// mirrored headers over HTTP; a message without a place on its wire (a notification over
    /// HTTP, the handshake's notification, a response) is answered `Accepted` without being sent
    /// ([`super::era::has_place_on_modern_wire`]).
    ///
    /// # Errors
    /// As [`HttpUpstream::post`]; a [`UpstreamError::SessionLost`] also marks the session lost.
    pub async fn send(&self, message: &WireMessage) -> Result<Reply, UpstreamError> {
        self.send_with(message, &[]).await
    }

    /// As [`Self::send`], with a modern client's `Mcp-Param-*` headers (SEP-2243) on the POST
    /// to a modern HTTP upstream; other upstreams never see them.
    ///
    /// # Errors
    /// As [`Self::send`].
    pub async fn send_with(
        &self,
        message: &WireMessage,
        param_headers: &[(String, String)],
    ) -> Result<Reply, UpstreamError> {
        self.send_over(message, param_headers, false).await
    }

    /// [`Self::send_with`]; `own` marks a request of the proxy's own to a stdio child
    /// ([`crate::transport::stdio::Connection::send_own`]).
    async fn send_over(
        &self,
        message: &WireMessage,
        param_headers: &[(String, String)],
        own: bool,
    ) -> Result<Reply, UpstreamError> {
        // With traces on, a request names the current span as its parent in `_meta`
        // (SEP-414), over HTTP and stdio alike.
        let traced = crate::observe::telemetry::with_trace_context(message);
        let message = traced.as_ref().unwrap_or(message);
        let http = match &self.link {
            Link::Stdio(connection) => {
                if self.era == UpstreamEra::Modern && !has_place_on_modern_wire(message, true) {
                    return Ok(Reply::Accepted);
                }
                let sent = if own {
                    connection.send_own(message).await
                } else {
                    connection.send(message).await
                };
                return sent.map(stdio_reply);
            }
            Link::Http(http, _) => http,
        };
        if self.era == UpstreamEra::Modern {
            if !has_place_on_modern_wire(message, false) {
                return Ok(Reply::Accepted);
            }
            return http
                .post_modern(message, &self.protocol_version, param_headers)
                .await;
        }
        let result = http
            .post(message, self.id(), Some(&self.protocol_version))
            .await;
        if matches!(result, Err(UpstreamError::SessionLost)) {
            self.mark_lost();
        }
        result.map(|(reply, _)| reply)
    }

    /// Sends a request built from `method` and `params` under a fresh id and returns its final
    /// response. Used for the proxy's own requests (tools probe, liveness ping, era probe);
    /// over stdio, what the child sends meanwhile that is not the response goes where it would
    /// with no request pending (to the clients, or refused at once), never into this wait.
    ///
    /// # Errors
    /// As [`Self::send`], plus [`UpstreamError::Malformed`] when no response arrives.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, UpstreamError> {
        let id = json!(self.next_request_id());
        let mut message: WireMessage =
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).into();
        if self.era == UpstreamEra::Modern {
            fill_meta(&mut message, &self.protocol_version, &self.hop);
        }
        let reply = self.send_over(&message, &[], true).await?;
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
                    body = %crate::observe::escaped::Escaped(&body),
                    protocol_version = %self.protocol_version,
                    "failed to delete upstream session; the upstream keeps it until it expires"
                ),
                Err(error) => tracing::warn!(
                    upstream_session_id = id,
                    error = %crate::observe::escaped::Escaped(&super::error_chain(&error)),
                    "failed to delete upstream session"
                ),
            },
            Link::Http(_, None) => {}
            Link::Stdio(connection) => connection.close(),
        }
    }
}
