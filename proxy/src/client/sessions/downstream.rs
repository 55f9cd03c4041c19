//! One downstream session ([`DownstreamSession`]): what the client declared, the JSON-RPC
//! requests it has in flight, the server requests relayed to it, its standalone stream and the
//! event log of its SSE streams. Not responsible for: issuing, finding or expiring sessions
//! (the store, [`super::Sessions`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::events;
use crate::transport::upstream::UpstreamSession;
use crate::wire::jsonrpc::WireMessage;

/// Server messages buffered for a session's standalone GET stream before new ones are dropped
/// (and counted): a client that stops reading holds only its own bounded buffer.
pub const STANDALONE_BUFFER: usize = 64;

/// One downstream session.
#[derive(Debug)]
pub struct DownstreamSession {
    pub(super) id: String,
    pub(super) protocol_version: String,
    pub(super) client_capabilities: Value,
    /// The `clientInfo` of the client's `initialize` (set once, after the session is created).
    pub(super) client_info: std::sync::OnceLock<Value>,
    /// The level the client set with `logging/setLevel`, for a modern upstream that takes it
    /// per request.
    pub(super) log_level: Mutex<Option<String>>,
    /// A modern request's `Mcp-Param-*` headers (SEP-2243 custom headers mirroring tool
    /// arguments), for a modern upstream to check against the body.
    pub(super) param_headers: std::sync::OnceLock<Vec<(String, String)>>,
    /// The OAuth identity the session is bound to ([`DownstreamSession::admits`]).
    pub(super) owner: std::sync::OnceLock<String>,
    pub(super) last_seen: Mutex<Instant>,
    pub(super) in_flight: Mutex<HashMap<String, InFlight>>,
    pub(super) server_requests: Mutex<HashMap<String, ServerRequest>>,
    pub(super) next_server_request: std::sync::atomic::AtomicU64,
    pub(super) standalone: Mutex<Option<mpsc::Sender<WireMessage>>>,
    /// Event ids and replay for this session's SSE streams (legacy sessions only).
    pub(super) events: Arc<events::EventLog>,
    pub(super) dedicated: Option<crate::client::per_client::Dedicated>,
    pub(super) closed: CancellationToken,
    /// Set for a request-scoped session ([`super::Sessions::request_scoped`]): counts it while it
    /// lives; its dedicated upstream session is closed when it is dropped.
    pub(super) scope: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

impl Drop for DownstreamSession {
    fn drop(&mut self) {
        let Some(count) = &self.scope else {
            return;
        };
        count.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        // A registered session ended by `Sessions::remove` was closed there already.
        if self.closed.is_cancelled() {
            return;
        }
        self.closed.cancel();
        if let Some(dedicated) = &self.dedicated
            && tokio::runtime::Handle::try_current().is_ok()
        {
            dedicated.close();
        }
    }
}

/// A server-to-client request relayed to this client and awaiting its answer.
#[derive(Debug)]
pub enum ServerRequest {
    /// A legacy upstream's request: the client's answer goes back to it.
    Upstream {
        /// The upstream session that asked.
        upstream: std::sync::Arc<UpstreamSession>,
        /// The id the upstream used; the client's answer goes back under it.
        upstream_id: Value,
    },
    /// One input request of a modern upstream's `input_required` result, asked of a legacy
    /// client as a server request: the client's answer goes to the call that waits for it
    /// (MRTR bridging, issue 13).
    Input(tokio::sync::oneshot::Sender<WireMessage>),
}

/// A request the session has in flight upstream.
#[derive(Clone, Debug)]
pub struct InFlight {
    /// Fired when the client cancels the request (`notifications/cancelled`).
    pub cancelled: CancellationToken,
}

/// How a standalone stream was opened ([`DownstreamSession::open_standalone`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The session had no open standalone stream.
    New,
    /// It replaced the session's open stream, which ends.
    Replaced,
}

impl Opened {
    /// The `result` label of `berth_proxy_standalone_streams_total`: `opened` or `replaced`.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::New => "opened",
            Self::Replaced => "replaced",
        }
    }
}

/// The request id is already in flight on this session (JSON-RPC ids must be unique among a
/// session's outstanding requests; field case BR-06).
#[derive(Debug, thiserror::Error)]
#[error("request id {0} is already in flight on this session")]
pub struct DuplicateRequestId(pub String);

impl DownstreamSession {
    /// The session id sent in `Mcp-Session-Id`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The protocol revision negotiated with this client.
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// Whether this is a modern (MCP 2026-07-28) client's request-scoped session.
    pub fn is_modern(&self) -> bool {
        crate::wire::revision::is_modern_version(&self.protocol_version)
    }

    /// The era of a request made on this session (the `era` label of its metrics).
    pub fn era(&self) -> crate::observe::metrics::Era {
        if self.is_modern() {
            crate::observe::metrics::Era::Modern
        } else {
            crate::observe::metrics::Era::Legacy
        }
    }

    /// The session's own upstream session (`PerClient` strategy); `None` with `Shared`.
    pub fn dedicated(&self) -> Option<&crate::client::per_client::Dedicated> {
        self.dedicated.as_ref()
    }

    /// The `capabilities` the client declared in its `initialize`.
    pub fn client_capabilities(&self) -> &Value {
        &self.client_capabilities
    }

    /// Records the `clientInfo` of the client's `initialize` (the first value wins).
    pub fn set_client_info(&self, info: Value) {
        let _ = self.client_info.set(info);
    }

    /// Whether `caller` may use this session. The session is bound to its opener's identity
    /// (`sub` and client id) at `initialize`, and an adopted one (signed id) to the owner its
    /// id carries; otherwise the first authenticated request binds it. A request
    /// from any other identity is then treated as naming an unknown session, so a session id
    /// that leaked is useless to anyone else (MCP "Security Best Practices", session hijacking;
    /// issue 15). Without OAuth, `caller` is always `None` and every request is admitted.
    pub fn admits(&self, caller: Option<&crate::access::auth::Principal>) -> bool {
        let Some(caller) = caller else {
            return self.owner.get().is_none();
        };
        let owner = caller.owner_digest();
        *self.owner.get_or_init(|| owner.clone()) == owner
    }

    /// Records a modern request's `Mcp-Param-*` headers (set once).
    pub fn set_param_headers(&self, headers: Vec<(String, String)>) {
        let _ = self.param_headers.set(headers);
    }

    /// The `Mcp-Param-*` headers of this (request-scoped) session's request; empty for others.
    pub fn param_headers(&self) -> &[(String, String)] {
        self.param_headers.get().map_or(&[], Vec::as_slice)
    }

    /// Records the level a legacy client set with `logging/setLevel`.
    pub fn set_log_level(&self, level: &str) {
        *self.log_level.lock().unwrap_or_else(|e| e.into_inner()) = Some(level.to_owned());
    }

    /// The client's hop as a modern upstream is told it on each of the client's requests:
    /// its capabilities, `clientInfo` and log level (MCP 2026-07-28, "Per-request protocol
    /// fields"; issue 13).
    pub fn client_hop(&self) -> crate::transport::upstream::era::ClientHop {
        let capabilities = if self.is_modern() {
            self.client_capabilities.clone()
        } else {
            crate::transport::upstream::era::modern_capabilities(&self.client_capabilities)
        };
        crate::transport::upstream::era::ClientHop {
            capabilities,
            info: self.client_info.get().cloned().unwrap_or_default(),
            // A legacy client that set no level gets every log message, as from a legacy
            // server; a modern upstream sends none unless a level is named.
            log_level: self
                .log_level
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .or_else(|| (!self.is_modern()).then(|| "debug".to_owned())),
        }
    }

    /// Whether a legacy client may be sent the server request `method` on its stream: it
    /// declared the capability ([`Self::declares`]). A modern client's stream carries no server
    /// requests (MCP 2026-07-28, "Receiving Messages"); the call engine bridges them as input
    /// requests instead.
    pub fn accepts_server_request(&self, method: &str) -> bool {
        !self.is_modern() && self.declares(method)
    }

    /// Whether the client declared the capability a server request `method` needs:
    /// `sampling/*` -> `sampling`, `elicitation/*` -> `elicitation`, `roots/*` -> `roots`.
    /// `ping` needs none.
    pub fn declares(&self, method: &str) -> bool {
        if method == "ping" {
            return true;
        }
        let capability = method.split('/').next().unwrap_or_default();
        matches!(capability, "sampling" | "elicitation" | "roots")
            && self.client_capabilities.get(capability).is_some()
    }

    /// Registers a server request relayed to this client; returns the id the client sees
    /// (`berth-s<n>`, unique on this session).
    pub fn relay_server_request(&self, request: ServerRequest) -> String {
        let n = self
            .next_server_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("berth-s{n}");
        let mut pending = self
            .server_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.insert(id_key(&Value::String(id.clone())), request);
        id
    }

    /// Takes the pending server request the client answers with `id`.
    pub fn take_server_request(&self, id: &Value) -> Option<ServerRequest> {
        let mut pending = self
            .server_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.remove(&id_key(id))
    }

    /// Takes the pending request that `upstream` sent under `upstream_id` and returns the id
    /// this client sees it under: for the upstream's `notifications/cancelled` of it.
    pub fn cancel_server_request(
        &self,
        upstream: &std::sync::Arc<UpstreamSession>,
        upstream_id: &Value,
    ) -> Option<Value> {
        let mut pending = self
            .server_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = pending.iter().find_map(|(key, request)| match request {
            ServerRequest::Upstream {
                upstream: asked_by,
                upstream_id: asked_as,
            } if std::sync::Arc::ptr_eq(asked_by, upstream) && asked_as == upstream_id => {
                Some(key.clone())
            }
            _ => None,
        })?;
        pending.remove(&key);
        serde_json::from_str(&key).ok()
    }

    /// Puts back a server request taken with [`Self::take_server_request`] whose answer could
    /// not be handed on, so the client can send it again under the same `id`.
    pub fn restore_server_request(&self, id: &Value, request: ServerRequest) {
        let mut pending = self
            .server_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.insert(id_key(id), request);
    }

    /// Opens (or replaces) the standalone stream; returns its receiving end, and whether it
    /// replaced a stream still open (its receiver not yet dropped). A re-opened GET replaces
    /// the stale stream, which ends (field case BR-15); the caller counts replacements
    /// (issue 12, item 5).
    pub fn open_standalone(&self) -> (mpsc::Receiver<WireMessage>, Opened) {
        let (tx, rx) = mpsc::channel(STANDALONE_BUFFER);
        let previous = self
            .standalone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(tx);
        let opened = match previous {
            Some(previous) if !previous.is_closed() => Opened::Replaced,
            _ => Opened::New,
        };
        (rx, opened)
    }

    /// Queues a server message on the standalone stream. Returns false when no stream is open or
    /// its buffer is full (the message is dropped; the caller counts it).
    pub fn push_standalone(&self, message: WireMessage) -> bool {
        let guard = self.standalone.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .as_ref()
            .is_some_and(|tx| tx.try_send(message).is_ok())
    }

    /// Carries one of this session's SSE streams through its [`events::EventLog`]: numbered
    /// events, kept for `Last-Event-ID` resumption, and a call that goes on when the client's
    /// connection drops. Only a legacy session has streams to resume (MCP 2025-11-25,
    /// "Resumability and Redelivery"; 2026-07-28 has neither sessions nor resumption); a
    /// session at 2025-11-25 also gets the priming event that revision defines, older ones do
    /// not (their clients may not parse an event without data).
    pub fn carry(
        &self,
        kind: events::StreamKind,
        messages: mpsc::Receiver<WireMessage>,
    ) -> mpsc::Receiver<crate::wire::answer::StreamEvent> {
        let prime = self.protocol_version.as_str() >= "2025-11-25";
        self.events
            .carry(kind, messages, prime, self.closed.clone())
    }

    /// The events after `last_event_id` on the stream that minted it, then that stream live.
    ///
    /// # Errors
    /// [`events::Unresumable`] when the id is not this session's or was dropped.
    pub fn resume(
        &self,
        last_event_id: &str,
    ) -> Result<mpsc::Receiver<crate::wire::answer::StreamEvent>, events::Unresumable> {
        self.events.resume(last_event_id)
    }

    /// Fired when the session ends (DELETE or idle expiry).
    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    /// Registers `id` as in flight under `upstream_id`.
    ///
    /// # Errors
    /// [`DuplicateRequestId`] when the same id is already in flight; the first request is not
    /// disturbed.
    pub fn begin(&self, id: &Value) -> Result<InFlight, DuplicateRequestId> {
        let key = id_key(id);
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if in_flight.contains_key(&key) {
            return Err(DuplicateRequestId(key));
        }
        let entry = InFlight {
            cancelled: CancellationToken::new(),
        };
        in_flight.insert(key, entry.clone());
        Ok(entry)
    }

    /// Removes `id` from the in-flight set.
    pub fn finish(&self, id: &Value) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        in_flight.remove(&id_key(id));
    }

    /// The in-flight request with downstream id `id`, if any.
    pub fn in_flight(&self, id: &Value) -> Option<InFlight> {
        let in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        in_flight.get(&id_key(id)).cloned()
    }

    /// No request in flight, no server request awaiting the client's answer, no client
    /// connected to a standalone stream (one kept only for resumption does not count).
    pub(super) fn is_idle(&self) -> bool {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
            && self
                .server_requests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
            && (self
                .standalone
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_none_or(mpsc::Sender::is_closed)
                || self.events.standalone_detached())
    }

    pub(super) fn touch(&self) {
        *self.last_seen.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(super) fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(*self.last_seen.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `1` and `"1"` are different JSON-RPC ids; keep them apart.
pub(super) fn id_key(id: &Value) -> String {
    id.to_string()
}
