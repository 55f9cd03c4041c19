//! Downstream (client) sessions: the store of live sessions ([`Sessions`]: issuing, finding,
//! adopting and expiring the proxy's own session ids). One session, with the JSON-RPC requests
//! it has in flight, is a [`DownstreamSession`] (`sessions::downstream`).
//!
//! Session ids are 128 random bits from the operating system's CSPRNG (UUID v4), so they cannot
//! be guessed. An unknown, deleted or expired id is answered with 404 by the front, which makes
//! MCP clients start a new session (MCP 2025-06-18, "Session Management"; field case BR-02).
//!
//! With a session key (`sessionKeyEnv`) ids are signed instead ([`signed_id`]), and a request
//! naming a validly signed id this replica does not hold is served by adopting the session
//! ([`Sessions::adopt`]; field case BR-35). An id ended here (DELETE or idle expiry) is
//! remembered for one idle timeout so it cannot be adopted back on this replica.

mod downstream;
pub mod events;
pub mod signed_id;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use downstream::{
    DownstreamSession, DuplicateRequestId, InFlight, Opened, STANDALONE_BUFFER, ServerRequest,
};

/// Every live downstream session.
#[derive(Debug)]
pub struct Sessions {
    map: RwLock<HashMap<String, Arc<DownstreamSession>>>,
    idle_timeout: Duration,
    signer: Option<signed_id::SessionSigner>,
    ended: Mutex<HashMap<String, Instant>>,
    request_scoped: Arc<std::sync::atomic::AtomicUsize>,
    /// The replay budget every session's event log counts against.
    replay: Arc<events::ReplayBudget>,
}

impl Sessions {
    /// An empty store whose sessions expire after `idle_timeout` without a request, with the
    /// default replay buffer (`session.replayBufferMiB`; [`Self::with_replay_budget`]).
    pub fn new(idle_timeout: Duration) -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            idle_timeout,
            signer: None,
            ended: Mutex::new(HashMap::new()),
            request_scoped: Arc::default(),
            replay: Arc::new(events::ReplayBudget::new(
                berth_crds::SessionSpec::default().replay_buffer_bytes(),
                prometheus::IntGauge::new("replay_bytes", "unregistered").expect("valid gauge"),
            )),
        }
    }

    /// The same store whose sessions keep at most `bytes` of message text for `Last-Event-ID`
    /// resumption, all together ([`events::ReplayBudget`]), counted in `used`
    /// (`berth_proxy_replay_bytes`).
    pub fn with_replay_budget(mut self, bytes: usize, used: prometheus::IntGauge) -> Self {
        self.replay = Arc::new(events::ReplayBudget::new(bytes, used));
        self
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
        dedicated: Option<crate::client::per_client::Dedicated>,
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
            events: Arc::new(events::EventLog::new(Arc::clone(&self.replay))),
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
        dedicated: Option<crate::client::per_client::Dedicated>,
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
        dedicated: Option<crate::client::per_client::Dedicated>,
        owner: Option<&crate::access::auth::Principal>,
    ) -> Arc<DownstreamSession> {
        let owner = owner.map(crate::access::auth::Principal::owner_digest);
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

    /// How many sessions `owner` (an owner digest; `None`: sessions opened without OAuth) holds,
    /// and the least recently active idle one of them (as in
    /// [`Self::least_recently_active_idle`]), in one pass over the table.
    pub fn owned_by(&self, owner: Option<&str>) -> (usize, Option<String>) {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut held = 0;
        let mut idle: Option<(Instant, &Arc<DownstreamSession>)> = None;
        for session in map
            .values()
            .filter(|s| s.owner.get().map(String::as_str) == owner)
        {
            held += 1;
            if !session.is_idle() {
                continue;
            }
            let seen = *session.last_seen.lock().unwrap_or_else(|e| e.into_inner());
            if idle.is_none_or(|(oldest, _)| seen < oldest) {
                idle = Some((seen, session));
            }
        }
        (held, idle.map(|(_, s)| s.id.clone()))
    }

    /// The least recently active idle session of an owner that holds at least two more
    /// sessions than `held` (the caller's count): the one a caller with no idle session of its
    /// own may end at the session cap, so abandoned sessions never lock new callers out for a
    /// whole idle timeout (issue 13), yet no caller is ever left with fewer sessions than the
    /// one that ended its session (issue 39, item 5). `None` when no such session exists.
    pub fn idle_of_a_larger_holder(&self, held: usize) -> Option<String> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut counts: HashMap<Option<&str>, usize> = HashMap::new();
        for session in map.values() {
            *counts
                .entry(session.owner.get().map(String::as_str))
                .or_default() += 1;
        }
        map.values()
            .filter(|s| s.is_idle())
            .filter(|s| counts[&s.owner.get().map(String::as_str)] >= held + 2)
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
    use tokio::sync::mpsc;

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
    fn idle_of_a_larger_holder_is_taken_only_from_one_holding_two_more_than_the_caller() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let principal = |sub: &str| crate::access::auth::Principal {
            subject: Some(sub.to_owned()),
            client_id: Some("agent".to_owned()),
            ..crate::access::auth::Principal::default()
        };
        let (alice, bob) = (principal("alice"), principal("bob"));
        let first = sessions.create("2025-06-18", json!({}), None, Some(&alice));
        assert_eq!(
            sessions.idle_of_a_larger_holder(0),
            None,
            "one session each would be left: alice keeps hers"
        );
        sessions.create("2025-06-18", json!({}), None, Some(&alice));
        assert_eq!(
            sessions.idle_of_a_larger_holder(0).as_deref(),
            Some(first.id()),
            "alice holds two more than a caller with none: her oldest idle one"
        );
        sessions.create("2025-06-18", json!({}), None, Some(&bob));
        assert_eq!(
            sessions.idle_of_a_larger_holder(1),
            None,
            "bob holds one, alice two"
        );
        assert_eq!(sessions.owned_by(Some(&bob.owner_digest())).0, 1);
    }

    #[test]
    fn an_adopted_session_stays_with_the_identity_that_opened_it_on_another_replica() {
        let key = b"0123456789abcdef-shared";
        let signer = || signed_id::SessionSigner::new(key).expect("key");
        let a = Sessions::new(Duration::from_secs(60)).with_signer(signer());
        let b = Sessions::new(Duration::from_secs(60)).with_signer(signer());
        let principal = |sub: &str| crate::access::auth::Principal {
            subject: Some(sub.to_owned()),
            client_id: Some("agent".to_owned()),
            ..crate::access::auth::Principal::default()
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
