//! Downstream (client) sessions: the proxy's own session ids and the JSON-RPC requests each
//! session has in flight.
//!
//! Session ids are 128 random bits from the operating system's CSPRNG (UUID v4), so they cannot
//! be guessed. An unknown, deleted or expired id is answered with 404 by the front, which makes
//! MCP clients start a new session (MCP 2025-06-18, "Session Management"; field case BR-02).
//!
//! With a session key (`sessionKeyEnv`) ids are signed instead ([`signed_id`]), and a request
//! naming a validly signed id this replica does not hold is served by adopting the session
//! ([`Sessions::adopt`]; field case BR-35). An id ended here (DELETE or idle expiry) is
//! remembered for one idle timeout so it cannot be adopted back on this replica.

pub mod events;
pub mod signed_id;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::WireMessage;
use crate::upstream::UpstreamSession;

/// Server messages buffered for a session's standalone GET stream before new ones are dropped
/// (and counted): a client that stops reading holds only its own bounded buffer.
pub const STANDALONE_BUFFER: usize = 64;

/// One downstream session.
#[derive(Debug)]
pub struct DownstreamSession {
    id: String,
    protocol_version: String,
    client_capabilities: Value,
    /// The `clientInfo` of the client's `initialize` (set once, after the session is created).
    client_info: std::sync::OnceLock<Value>,
    /// The level the client set with `logging/setLevel`, for a modern upstream that takes it
    /// per request.
    log_level: Mutex<Option<String>>,
    /// A modern request's `Mcp-Param-*` headers (SEP-2243 custom headers mirroring tool
    /// arguments), for a modern upstream to check against the body.
    param_headers: std::sync::OnceLock<Vec<(String, String)>>,
    /// The OAuth identity the session is bound to ([`DownstreamSession::admits`]).
    owner: std::sync::OnceLock<String>,
    last_seen: Mutex<Instant>,
    in_flight: Mutex<HashMap<String, InFlight>>,
    server_requests: Mutex<HashMap<String, ServerRequest>>,
    next_server_request: std::sync::atomic::AtomicU64,
    standalone: Mutex<Option<mpsc::Sender<WireMessage>>>,
    /// Event ids and replay for this session's SSE streams (legacy sessions only).
    events: Arc<events::EventLog>,
    dedicated: Option<crate::per_client::Dedicated>,
    closed: CancellationToken,
    /// Set for a request-scoped session ([`Sessions::request_scoped`]): counts it while it
    /// lives; its dedicated upstream session is closed when it is dropped.
    scope: Option<Arc<std::sync::atomic::AtomicUsize>>,
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
        crate::revision::is_modern_version(&self.protocol_version)
    }

    /// The era of a request made on this session (the `era` label of its metrics).
    pub fn era(&self) -> crate::metrics::Era {
        if self.is_modern() {
            crate::metrics::Era::Modern
        } else {
            crate::metrics::Era::Legacy
        }
    }

    /// The session's own upstream session (`PerClient` strategy); `None` with `Shared`.
    pub fn dedicated(&self) -> Option<&crate::per_client::Dedicated> {
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
    pub fn admits(&self, caller: Option<&crate::auth::Principal>) -> bool {
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
    pub fn client_hop(&self) -> crate::upstream::era::ClientHop {
        let capabilities = if self.is_modern() {
            self.client_capabilities.clone()
        } else {
            crate::upstream::era::modern_capabilities(&self.client_capabilities)
        };
        crate::upstream::era::ClientHop {
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
    ) -> mpsc::Receiver<events::StreamEvent> {
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
    ) -> Result<mpsc::Receiver<events::StreamEvent>, events::Unresumable> {
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
    fn is_idle(&self) -> bool {
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

    fn touch(&self) {
        *self.last_seen.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(*self.last_seen.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `1` and `"1"` are different JSON-RPC ids; keep them apart.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// Every live downstream session.
#[derive(Debug)]
pub struct Sessions {
    map: RwLock<HashMap<String, Arc<DownstreamSession>>>,
    idle_timeout: Duration,
    signer: Option<signed_id::SessionSigner>,
    ended: Mutex<HashMap<String, Instant>>,
    request_scoped: Arc<std::sync::atomic::AtomicUsize>,
}

impl Sessions {
    /// An empty store whose sessions expire after `idle_timeout` without a request.
    pub fn new(idle_timeout: Duration) -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            idle_timeout,
            signer: None,
            ended: Mutex::new(HashMap::new()),
            request_scoped: Arc::default(),
        }
    }

    /// The same store issuing ids signed by `signer`, and adopting ids it signed.
    pub fn with_signer(mut self, signer: signed_id::SessionSigner) -> Self {
        self.signer = Some(signer);
        self
    }

    /// The session a validly signed `id` names, created on this replica from the id's claims
    /// (protocol revision, declared capabilities). `None` without a key, for an id this key did
    /// not sign, or for an id ended on this replica. The caller adopts only where a session
    /// needs no per-session upstream state (strategy `Shared`).
    pub fn adopt(&self, id: &str) -> Option<Arc<DownstreamSession>> {
        let claims = self.signer.as_ref()?.verify(id)?;
        if self
            .ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(id)
        {
            return None;
        }
        let session = self.new_session(
            id.to_owned(),
            &claims.protocol_version,
            claims.capabilities_object(),
            None,
        );
        if let Some(owner) = claims.owner {
            let _ = session.owner.set(owner);
        }
        let session = Arc::new(session);
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        // Two concurrent first requests: keep whichever was inserted first.
        Some(Arc::clone(map.entry(id.to_owned()).or_insert(session)))
    }

    fn new_session(
        &self,
        id: String,
        protocol_version: &str,
        client_capabilities: Value,
        dedicated: Option<crate::per_client::Dedicated>,
    ) -> DownstreamSession {
        DownstreamSession {
            id,
            protocol_version: protocol_version.to_owned(),
            client_capabilities,
            client_info: std::sync::OnceLock::new(),
            log_level: Mutex::new(None),
            param_headers: std::sync::OnceLock::new(),
            owner: std::sync::OnceLock::new(),
            last_seen: Mutex::new(Instant::now()),
            in_flight: Mutex::new(HashMap::new()),
            server_requests: Mutex::new(HashMap::new()),
            next_server_request: std::sync::atomic::AtomicU64::new(1),
            standalone: Mutex::new(None),
            events: Arc::default(),
            dedicated,
            closed: CancellationToken::new(),
            scope: None,
        }
    }

    /// A session for one modern (MCP 2026-07-28) request, which has no session of its own:
    /// never stored, so no other request can name it; it ends when the request's answer is
    /// done and the last reference is dropped, closing `dedicated` if it has one.
    pub fn request_scoped(
        &self,
        protocol_version: &str,
        client_capabilities: Value,
        dedicated: Option<crate::per_client::Dedicated>,
    ) -> Arc<DownstreamSession> {
        let id = format!("request-{}", uuid::Uuid::new_v4().simple());
        let mut session = self.new_session(id, protocol_version, client_capabilities, dedicated);
        self.request_scoped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        session.scope = Some(Arc::clone(&self.request_scoped));
        Arc::new(session)
    }

    /// Request-scoped sessions alive now ([`Self::request_scoped`]).
    pub fn request_scoped_len(&self) -> usize {
        self.request_scoped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stores a request-scoped session ([`Self::request_scoped`]) so server notifications reach
    /// it (a modern `subscriptions/listen` stream) until it is ended with [`Self::remove`].
    pub fn register(&self, session: Arc<DownstreamSession>) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.insert(session.id.clone(), session);
    }

    /// Creates a session with a fresh random id, owned by `owner` (the OAuth caller that sent
    /// the `initialize`; `None` without OAuth).
    pub fn create(
        &self,
        protocol_version: &str,
        client_capabilities: Value,
        dedicated: Option<crate::per_client::Dedicated>,
        owner: Option<&crate::auth::Principal>,
    ) -> Arc<DownstreamSession> {
        let owner = owner.map(crate::auth::Principal::owner_digest);
        let id = match &self.signer {
            Some(signer) => signer.mint(protocol_version, &client_capabilities, owner.as_deref()),
            None => uuid::Uuid::new_v4().simple().to_string(),
        };
        let session = self.new_session(id, protocol_version, client_capabilities, dedicated);
        if let Some(owner) = owner {
            let _ = session.owner.set(owner);
        }
        let session = Arc::new(session);
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.insert(session.id.clone(), Arc::clone(&session));
        session
    }

    /// The live session `id`, marking it active. `None` if unknown, deleted or expired.
    pub fn get(&self, id: &str) -> Option<Arc<DownstreamSession>> {
        let session = {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            map.get(id).cloned()
        }?;
        if session.idle_for(Instant::now()) > self.idle_timeout {
            return None;
        }
        session.touch();
        Some(session)
    }

    /// The live session `id` without marking it active (for server-initiated delivery).
    pub fn get_quiet(&self, id: &str) -> Option<Arc<DownstreamSession>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.get(id).cloned()
    }

    /// Ends session `id`. Returns whether it existed.
    pub fn remove(&self, id: &str) -> bool {
        let removed = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            map.remove(id)
        };
        if self.signer.is_some() {
            let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
            ended.insert(id.to_owned(), Instant::now());
        }
        let Some(session) = removed else {
            return false;
        };
        session.closed.cancel();
        if let Some(dedicated) = &session.dedicated {
            dedicated.close();
        }
        true
    }

    /// The session to end when a new one is needed at the session cap: the least recently
    /// active of those with no request in flight, no relayed server request awaiting its answer
    /// and no open standalone stream (a client using its session is never cut off). `None` when
    /// every session is busy.
    pub fn least_recently_active_idle(&self) -> Option<String> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values()
            .filter(|s| s.is_idle())
            .min_by_key(|s| *s.last_seen.lock().unwrap_or_else(|e| e.into_inner()))
            .map(|s| s.id.clone())
    }

    /// Ids of every session idle for longer than the idle timeout (the caller ends them).
    pub fn expired_ids(&self) -> Vec<String> {
        let now = Instant::now();
        self.ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, at| now.duration_since(*at) <= self.idle_timeout);
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values()
            .filter(|s| s.idle_for(now) > self.idle_timeout)
            .map(|s| s.id.clone())
            .collect()
    }

    /// Every live session (for fan-out of server notifications).
    pub fn all(&self) -> Vec<Arc<DownstreamSession>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.map.read().map(|m| m.len()).unwrap_or_default()
    }

    /// Whether there are no live sessions.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn session_ids_are_unique_and_long() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let a = sessions.create("2025-06-18", Value::Null, None, None);
        let b = sessions.create("2025-06-18", Value::Null, None, None);
        assert_ne!(a.id(), b.id());
        assert_eq!(a.id().len(), 32);
    }

    #[test]
    fn duplicate_in_flight_id_is_rejected_and_first_kept() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let s = sessions.create("2025-06-18", Value::Null, None, None);
        let first = s.begin(&json!(2)).expect("first id accepted");
        assert!(s.begin(&json!(2)).is_err());
        let kept = s.in_flight(&json!(2)).expect("first still in flight");
        first.cancelled.cancel();
        assert!(
            kept.cancelled.is_cancelled(),
            "the entry is the first request's"
        );
        assert!(
            s.begin(&json!("2")).is_ok(),
            "string id \"2\" differs from number 2"
        );
        s.finish(&json!(2));
        assert!(s.begin(&json!(2)).is_ok());
    }

    #[test]
    fn server_request_capability_follows_client_declaration() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let s = sessions.create(
            "2025-06-18",
            json!({"sampling": {}, "roots": {"listChanged": true}}),
            None,
            None,
        );
        assert!(s.accepts_server_request("sampling/createMessage"));
        assert!(s.accepts_server_request("roots/list"));
        assert!(!s.accepts_server_request("elicitation/create"));
        assert!(s.accepts_server_request("ping"));
        assert!(!s.accepts_server_request("tools/call"));
    }

    #[test]
    fn standalone_stream_reopen_replaces_and_full_buffer_drops() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let s = sessions.create("2025-06-18", Value::Null, None, None);
        assert!(!s.push_standalone(json!(1).into()), "no stream open");
        let (mut old, opened) = s.open_standalone();
        assert_eq!(opened, Opened::New);
        let (new, opened) = s.open_standalone();
        assert_eq!(opened, Opened::Replaced, "the first was still open");
        assert!(matches!(
            old.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
        for n in 0..STANDALONE_BUFFER {
            assert!(s.push_standalone(json!(n).into()));
        }
        assert!(
            !s.push_standalone(json!("overflow").into()),
            "bounded buffer"
        );
        drop(new);
        let (_reopened, opened) = s.open_standalone();
        assert_eq!(opened, Opened::New, "the client had closed its stream");
    }

    #[tokio::test]
    async fn a_session_whose_listener_dropped_is_idle_at_the_cap_one_listened_to_is_not() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let s = sessions.create("2025-11-25", Value::Null, None, None);
        let (messages, _) = s.open_standalone();
        let connection = s.carry(events::StreamKind::Standalone, messages);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            sessions.least_recently_active_idle(),
            None,
            "a client listens"
        );
        drop(connection);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            sessions.least_recently_active_idle().as_deref(),
            Some(s.id()),
            "kept only for resumption: may be ended at the cap"
        );
        let modern = sessions.create("2026-07-28", Value::Null, None, None);
        let (_held, _) = modern.open_standalone();
        assert_eq!(
            sessions.least_recently_active_idle().as_deref(),
            Some(s.id()),
            "a stream read directly (modern listen) keeps its session busy"
        );
    }

    #[test]
    fn signed_ids_are_adopted_by_a_replica_with_the_key_unless_ended_there() {
        let key = b"0123456789abcdef-shared";
        let signer = || signed_id::SessionSigner::new(key).expect("key");
        let a = Sessions::new(Duration::from_secs(60)).with_signer(signer());
        let b = Sessions::new(Duration::from_secs(60)).with_signer(signer());
        let s = a.create("2025-03-26", json!({"sampling": {}}), None, None);
        assert!(b.get(s.id()).is_none(), "b never saw it");
        let adopted = b.adopt(s.id()).expect("b verifies a's id");
        assert_eq!(adopted.protocol_version(), "2025-03-26");
        assert!(adopted.accepts_server_request("sampling/createMessage"));
        assert!(b.get(s.id()).is_some(), "kept after adoption");
        assert!(b.remove(s.id()));
        assert!(b.adopt(s.id()).is_none(), "ended here: not adopted back");
        let unsigned = Sessions::new(Duration::from_secs(60));
        assert!(unsigned.adopt(s.id()).is_none(), "no key, no adoption");
        let other = Sessions::new(Duration::from_secs(60))
            .with_signer(signed_id::SessionSigner::new(b"another-key-0123456").expect("key"));
        assert!(other.adopt(s.id()).is_none(), "other key");
    }

    #[test]
    fn an_adopted_session_stays_with_the_identity_that_opened_it_on_another_replica() {
        let key = b"0123456789abcdef-shared";
        let signer = || signed_id::SessionSigner::new(key).expect("key");
        let a = Sessions::new(Duration::from_secs(60)).with_signer(signer());
        let b = Sessions::new(Duration::from_secs(60)).with_signer(signer());
        let principal = |sub: &str| crate::auth::Principal {
            subject: Some(sub.to_owned()),
            client_id: Some("agent".to_owned()),
            ..crate::auth::Principal::default()
        };
        let (alice, mallory) = (principal("alice"), principal("mallory"));
        let s = a.create("2025-06-18", json!({}), None, Some(&alice));
        assert!(
            !s.id().contains("alice"),
            "the id names no subject: {}",
            s.id()
        );
        assert!(!s.admits(Some(&mallory)) && s.admits(Some(&alice)));
        // Mallory's request is the first to reach replica b: the id's owner still holds.
        let adopted = b.adopt(s.id()).expect("b verifies a's id");
        assert!(
            !adopted.admits(Some(&mallory)),
            "another identity is refused"
        );
        assert!(!adopted.admits(None), "and so is a request without a token");
        assert!(adopted.admits(Some(&alice)));
    }

    #[test]
    fn a_modern_session_declares_capabilities_but_takes_no_server_requests() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let s = sessions.request_scoped(
            "2026-07-28",
            serde_json::json!({"elicitation": {}, "roots": {}}),
            None,
        );
        assert!(s.declares("elicitation/create"));
        assert!(s.declares("roots/list"));
        assert!(!s.declares("sampling/createMessage"));
        assert!(!s.declares("tools/call"));
        assert!(!s.accepts_server_request("elicitation/create"));
    }

    #[test]
    fn removed_or_expired_session_is_unknown() {
        let sessions = Sessions::new(Duration::ZERO);
        let s = sessions.create("2025-06-18", Value::Null, None, None);
        std::thread::sleep(Duration::from_millis(5));
        assert!(sessions.get(s.id()).is_none(), "idle past timeout");
        assert_eq!(sessions.expired_ids(), [s.id().to_owned()]);
        assert!(sessions.remove(s.id()));
        assert!(s.closed().is_cancelled());
        assert!(!sessions.remove(s.id()));
    }
}
