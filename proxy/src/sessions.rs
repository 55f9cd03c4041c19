//! Downstream (client) sessions: the proxy's own session ids and the JSON-RPC requests each
//! session has in flight.
//!
//! Session ids are 128 random bits from the operating system's CSPRNG (UUID v4), so they cannot
//! be guessed. An unknown, deleted or expired id is answered with 404 by the front, which makes
//! MCP clients start a new session (MCP 2025-06-18, "Session Management"; field case BR-02).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One downstream session.
#[derive(Debug)]
pub struct DownstreamSession {
    id: String,
    protocol_version: String,
    last_seen: Mutex<Instant>,
    in_flight: Mutex<HashMap<String, InFlight>>,
    closed: CancellationToken,
}

/// A request the session has in flight upstream.
#[derive(Clone, Debug)]
pub struct InFlight {
    /// The id the request carries upstream.
    pub upstream_id: u64,
    /// Fired when the client cancels the request (`notifications/cancelled`).
    pub cancelled: CancellationToken,
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

    /// Fired when the session ends (DELETE or idle expiry).
    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    /// Registers `id` as in flight under `upstream_id`.
    ///
    /// # Errors
    /// [`DuplicateRequestId`] when the same id is already in flight; the first request is not
    /// disturbed.
    pub fn begin(&self, id: &Value, upstream_id: u64) -> Result<InFlight, DuplicateRequestId> {
        let key = id_key(id);
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if in_flight.contains_key(&key) {
            return Err(DuplicateRequestId(key));
        }
        let entry = InFlight {
            upstream_id,
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
}

impl Sessions {
    /// An empty store whose sessions expire after `idle_timeout` without a request.
    pub fn new(idle_timeout: Duration) -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            idle_timeout,
        }
    }

    /// Creates a session with a fresh random id.
    pub fn create(&self, protocol_version: &str) -> Arc<DownstreamSession> {
        let session = Arc::new(DownstreamSession {
            id: uuid::Uuid::new_v4().simple().to_string(),
            protocol_version: protocol_version.to_owned(),
            last_seen: Mutex::new(Instant::now()),
            in_flight: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
        });
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

    /// Ends session `id`. Returns whether it existed.
    pub fn remove(&self, id: &str) -> bool {
        let removed = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            map.remove(id)
        };
        removed.map(|s| s.closed.cancel()).is_some()
    }

    /// Ends every session idle for longer than the idle timeout; returns how many ended.
    pub fn expire_idle(&self) -> usize {
        let now = Instant::now();
        let expired: Vec<String> = {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            map.values()
                .filter(|s| s.idle_for(now) > self.idle_timeout)
                .map(|s| s.id.clone())
                .collect()
        };
        expired.iter().filter(|id| self.remove(id)).count()
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
        let a = sessions.create("2025-06-18");
        let b = sessions.create("2025-06-18");
        assert_ne!(a.id(), b.id());
        assert_eq!(a.id().len(), 32);
    }

    #[test]
    fn duplicate_in_flight_id_is_rejected_and_first_kept() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let s = sessions.create("2025-06-18");
        let first = s.begin(&json!(2), 10).expect("first id accepted");
        assert!(s.begin(&json!(2), 11).is_err());
        assert_eq!(
            s.in_flight(&json!(2)).map(|f| f.upstream_id),
            Some(first.upstream_id)
        );
        assert!(
            s.begin(&json!("2"), 12).is_ok(),
            "string id \"2\" differs from number 2"
        );
        s.finish(&json!(2));
        assert!(s.begin(&json!(2), 13).is_ok());
    }

    #[test]
    fn removed_or_expired_session_is_unknown() {
        let sessions = Sessions::new(Duration::ZERO);
        let s = sessions.create("2025-06-18");
        std::thread::sleep(Duration::from_millis(5));
        assert!(sessions.get(s.id()).is_none(), "idle past timeout");
        assert_eq!(sessions.expire_idle(), 1);
        assert!(s.closed().is_cancelled());
        assert!(!sessions.remove(s.id()));
    }
}
