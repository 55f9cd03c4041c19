//! One upstream MCP session: its handshake, its id, and request-id allocation. A modern
//! (MCP 2026-07-28) upstream has no session; its "session" is the proxy's link to it (a stdio
//! child, or the HTTP endpoint) with the `DiscoverResult` in place of the handshake's.
//!
//! Sources: MCP 2025-06-18, "Lifecycle" (initialize, then `notifications/initialized`) and
//! "Transports: Streamable HTTP / Session Management"; MCP 2026-07-28 "Versioning" and
//! "Discovery".

use crate::wire::jsonrpc::Pointer as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::UpstreamError;
use super::endpoint::Endpoint;
use super::era::{ClientHop, Probe, UpstreamEra, classify, fill_meta, has_place_on_modern_wire};
use super::http::{HttpUpstream, Reply};
use super::late_response::{LateResponse, LateResponses};
use crate::transport::stdio::Connection;
use crate::wire::jsonrpc::WireMessage;

pub use crate::wire::revision::{HANDSHAKE_VERSIONS, REQUESTED_VERSION};
use crate::wire::revision::{META_SERVER_INFO, MODERN_VERSIONS};

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
    /// Opens an upstream session in the era the upstream speaks ([`super::era`]). Unless the
    /// endpoint is known to be legacy, a `server/discover` probe comes first: a modern
    /// upstream's `DiscoverResult` makes a modern session (no handshake, no session id); any
    /// other answer, or silence for [`STDIO_PROBE_WAIT`] on stdio, falls back to the `initialize`
    /// handshake, on a fresh child when the probe ended the old one, so a legacy server that
    /// mishandles the probe still gets its `initialize` (issue 13). The era found is cached on
    /// the endpoint.
    ///
    /// `params` are the `initialize` params to send (a `PerClient` client's own); `None` sends
    /// the proxy's ([`proxy_initialize_params`]). A modern upstream is told their
    /// `capabilities` and `clientInfo` on the proxy's own requests.
    ///
    /// # Errors
    /// Any [`UpstreamError`] from either step; [`UpstreamError::Handshake`] when the upstream
    /// answers `initialize` with an error or a revision without a handshake, or speaks only
    /// modern revisions the proxy does not.
    ///
    /// # Cancellation
    /// Applies no timeout itself; callers wrap it in the connect budget. Dropping it abandons
    /// the handshake and leaves no session behind on the proxy's side.
    pub async fn handshake(
        endpoint: &Endpoint,
        params: Option<Value>,
    ) -> Result<Self, UpstreamError> {
        let params = params.unwrap_or_else(proxy_initialize_params);
        if endpoint.era().get() == Some(UpstreamEra::Legacy) {
            let session = Self::initialize(endpoint, None, &params).await;
            if let Err(UpstreamError::Handshake(_)) = &session {
                // The cached era may be stale (the server changed): the next attempt probes.
                endpoint.era().forget();
            }
            return session;
        }
        let hop = hop_of(&params);
        let (probe, connection) = match endpoint {
            Endpoint::Http(http) => (probe_http(http, &hop).await?, None),
            Endpoint::Stdio(stdio) => {
                let connection = Arc::new(stdio.open().await?);
                // An upstream known to be modern is waited for within the connect budget (the
                // caller's); an unknown one for `STDIO_PROBE_WAIT`.
                let wait = match endpoint.era().get() {
                    Some(UpstreamEra::Modern) => Duration::MAX,
                    _ => STDIO_PROBE_WAIT,
                };
                let (probe, unanswered) = probe_stdio(&connection, &hop, wait).await;
                if probe == Probe::Legacy && !connection.ended().is_cancelled() {
                    return Self::initialize_after_silence(
                        endpoint, connection, unanswered, &params, hop,
                    )
                    .await;
                }
                let alive = !connection.ended().is_cancelled();
                (probe, alive.then_some(connection))
            }
        };
        match probe {
            Probe::Modern { version, result } => {
                endpoint.era().set(UpstreamEra::Modern);
                let link = match (endpoint, connection) {
                    (Endpoint::Http(http), _) => Link::Http(http.clone(), None),
                    (Endpoint::Stdio(_), Some(connection)) => Link::Stdio(connection),
                    (Endpoint::Stdio(stdio), None) => Link::Stdio(Arc::new(stdio.open().await?)),
                };
                Self::modern(link, version, result, hop).await
            }
            Probe::ModernWithoutCommonVersion {
                legacy_offered: false,
                supported,
            } => Err(UpstreamError::Handshake(format!(
                "upstream speaks only MCP revisions {supported:?}; the proxy speaks {:?}",
                crate::wire::revision::supported_versions()
            ))),
            Probe::ModernWithoutCommonVersion { .. } => {
                // A dual-era server without the proxy's modern revision: its legacy side, on
                // a fresh child (a stdio server may hold to the era its first message chose).
                endpoint.era().set(UpstreamEra::Legacy);
                Self::initialize(endpoint, None, &params).await
            }
            Probe::Legacy => {
                tracing::info!(upstream = %endpoint, restarted = connection.is_none() && endpoint.stdio().is_some(), "upstream speaks a legacy MCP revision: initialize");
                endpoint.era().set(UpstreamEra::Legacy);
                Self::initialize(endpoint, connection, &params).await
            }
        }
    }

    /// `initialize` on a stdio child that answered the probe in no way: a legacy server that
    /// ignores unknown requests, or a modern one slow to start. If `initialize` fails and the
    /// probe's answer arrives after all (within [`STDIO_PROBE_WAIT`] more) naming a modern
    /// revision, the child is modern and gets a modern session.
    async fn initialize_after_silence(
        endpoint: &Endpoint,
        connection: Arc<Connection>,
        unanswered: Option<Unanswered>,
        params: &Value,
        hop: ClientHop,
    ) -> Result<Self, UpstreamError> {
        endpoint.era().set(UpstreamEra::Legacy);
        let legacy = Self::initialize(endpoint, Some(Arc::clone(&connection)), params).await;
        let (Err(error), Some(unanswered)) = (&legacy, unanswered) else {
            return legacy;
        };
        let late = tokio::time::timeout(STDIO_PROBE_WAIT, unanswered).await;
        let Ok(Ok(response)) = late else {
            return legacy;
        };
        match classify(Some(&response)) {
            Probe::Modern { version, result } if !connection.ended().is_cancelled() => {
                tracing::info!(upstream = %endpoint, refused = %error, "stdio upstream answered the era probe late: modern");
                endpoint.era().set(UpstreamEra::Modern);
                Self::modern(Link::Stdio(connection), version, result, hop).await
            }
            Probe::Modern { .. } => {
                // It ended on the `initialize` it was not meant to get: the next attempt knows
                // it is modern and waits for its answer to the probe.
                tracing::info!(upstream = %endpoint, "stdio upstream answered the era probe late and ended on initialize: modern");
                endpoint.era().set(UpstreamEra::Modern);
                legacy
            }
            _ => legacy,
        }
    }

    /// The legacy handshake: `initialize` without a session header, then
    /// `notifications/initialized` on the new session. The session exists only once both
    /// succeeded, so no caller can see a half-initialized session. A stdio `connection` still
    /// alive after the era probe is used; otherwise a new child is started.
    async fn initialize(
        endpoint: &Endpoint,
        connection: Option<Arc<Connection>>,
        params: &Value,
    ) -> Result<Self, UpstreamError> {
        let request: WireMessage =
            json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params }).into();
        // The handshake names the proxy's span (replacing a client's `_meta.traceparent` that
        // came with PerClient's forwarded params).
        let request = crate::observe::telemetry::with_trace_context(&request).unwrap_or(request);
        let (reply, link) = match endpoint {
            Endpoint::Http(http) => {
                let (reply, id) = http.post(&request, None, None).await?;
                (reply, Link::Http(http.clone(), id))
            }
            Endpoint::Stdio(stdio) => {
                // Dropping this future drops the connection, which stops the child.
                let connection = match connection {
                    Some(connection) => connection,
                    None => Arc::new(stdio.open().await?),
                };
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
        let session = Self::new(
            link,
            UpstreamEra::Legacy,
            protocol_version,
            result,
            ClientHop::default(),
        );
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        session.send(&initialized.into()).await?;
        Ok(session)
    }

    /// A modern session over `link`: the upstream's `DiscoverResult` (asked for again when the
    /// probe got a modern error instead) kept, and seen as an `initialize` result
    /// (`capabilities`, `serverInfo`, `instructions`) by the rest of the proxy.
    async fn modern(
        link: Link,
        version: &str,
        discover: Value,
        hop: ClientHop,
    ) -> Result<Self, UpstreamError> {
        let mut session = Self::new(
            link,
            UpstreamEra::Modern,
            version.to_owned(),
            Value::Null,
            hop,
        );
        let discover = if discover.is_object() {
            discover
        } else {
            let response = session.request("server/discover", json!({})).await?;
            response.get("result").cloned().ok_or_else(|| {
                UpstreamError::Handshake(format!(
                    "server/discover failed: {}",
                    response.get("error").cloned().unwrap_or_default()
                ))
            })?
        };
        let mut view = json!({
            "protocolVersion": version,
            "capabilities": discover.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        });
        if let Some(info) = discover.at("/_meta").and_then(|m| m.get(META_SERVER_INFO)) {
            view["serverInfo"] = info.clone();
        }
        if let Some(instructions) = discover.get("instructions") {
            view["instructions"] = instructions.clone();
        }
        session.initialize_result = view;
        tracing::debug!(protocol_version = version, "modern upstream discovered");
        Ok(session)
    }

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
        // With traces on, a request names the current span as its parent in `_meta`
        // (SEP-414), over HTTP and stdio alike.
        let traced = crate::observe::telemetry::with_trace_context(message);
        let message = traced.as_ref().unwrap_or(message);
        let http = match &self.link {
            Link::Stdio(connection) => {
                if self.era == UpstreamEra::Modern && !has_place_on_modern_wire(message, true) {
                    return Ok(Reply::Accepted);
                }
                return connection.send(message).await.map(stdio_reply);
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
    /// response, ignoring notifications that arrive before it. Used for the proxy's own
    /// requests (tools probe).
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
        let reply = self.send(&message).await?;
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

/// How long a stdio child of an upstream whose era is not known yet may stay silent on the era
/// probe before the proxy takes it for a legacy server and sends `initialize` (MCP 2026-07-28,
/// "stdio", "Backward Compatibility": "does not respond within a reasonable timeout"). Paid once
/// per endpoint, not per child: the era is cached. A modern server slower to start is found by
/// its late answer (`initialize_after_silence`).
pub const STDIO_PROBE_WAIT: Duration = Duration::from_secs(5);

/// The era probe's request: `server/discover` under id 0 with the modern `_meta` for `hop`.
fn probe_request(hop: &ClientHop) -> WireMessage {
    let mut request: WireMessage =
        json!({ "jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {} }).into();
    fill_meta(&mut request, MODERN_VERSIONS[0], hop);
    crate::observe::telemetry::with_trace_context(&request).unwrap_or(request)
}

/// Probes an HTTP upstream ("Streamable HTTP", "Backward Compatibility"): a 4xx whose body is
/// not a recognized modern error, or a reply without a response, means legacy.
///
/// # Errors
/// An upstream that cannot be reached or answers 5xx: neither era can be told, the handshake
/// fails and is retried.
async fn probe_http(http: &HttpUpstream, hop: &ClientHop) -> Result<Probe, UpstreamError> {
    match http
        .post_modern(&probe_request(hop), MODERN_VERSIONS[0], &[])
        .await
    {
        Ok(reply) => match final_response(reply, &json!(0)).await {
            Ok(response) => Ok(classify(Some(&response))),
            Err(UpstreamError::Malformed(_)) => Ok(Probe::Legacy),
            Err(error) => Err(error),
        },
        Err(UpstreamError::Status { status, body }) if (400..500).contains(&status) => {
            let response = WireMessage::parse(body.as_bytes())
                .ok()
                .map(WireMessage::into_view);
            Ok(classify(response.as_ref()))
        }
        Err(error) => Err(error),
    }
}

/// The probe's answer when it has not come yet.
type Unanswered =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, UpstreamError>> + Send>>;

/// Probes a stdio child ("stdio", "Backward Compatibility"): its answer is classified; a child
/// that stays silent for [`STDIO_PROBE_WAIT`], answers out of shape, or ends is legacy. A
/// silent child's answer may still come (a server slow to start): it is returned unfinished.
async fn probe_stdio(
    connection: &Connection,
    hop: &ClientHop,
    wait: Duration,
) -> (Probe, Option<Unanswered>) {
    let Ok(pending) = connection.send(&probe_request(hop)).await else {
        return (Probe::Legacy, None);
    };
    let mut answer: Unanswered =
        Box::pin(async move { final_response(stdio_reply(pending), &json!(0)).await });
    let answered = if wait == Duration::MAX {
        Ok(answer.as_mut().await)
    } else {
        tokio::time::timeout(wait, &mut answer).await
    };
    match answered {
        Ok(Ok(response)) => (classify(Some(&response)), None),
        Ok(Err(_)) => (Probe::Legacy, None),
        Err(_) => (Probe::Legacy, Some(answer)),
    }
}

/// The hop a modern upstream is told on the proxy's own requests: the capabilities and
/// `clientInfo` of `initialize` params.
fn hop_of(params: &Value) -> ClientHop {
    ClientHop {
        capabilities: super::era::modern_capabilities(
            params.get("capabilities").unwrap_or(&Value::Null),
        ),
        info: params.get("clientInfo").cloned().unwrap_or_default(),
        log_level: None,
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
fn stdio_reply(pending: crate::transport::stdio::PendingReply) -> Reply {
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
