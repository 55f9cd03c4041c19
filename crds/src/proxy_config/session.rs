//! How downstream (client) sessions map onto upstream sessions (`session`): the strategy, the
//! idle timeout, the `PerClient` session limit and the replay buffer of all sessions. The
//! McpUpstream spec embeds it unchanged.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::{ProxyConfigError, parse_positive};
use crate::duration::DurationString;

/// Smallest `session.maxSessions`.
pub const MAX_SESSIONS_MIN: u64 = 1;
/// Largest `session.maxSessions`.
pub const MAX_SESSIONS_MAX: u64 = 1024;
/// Largest `session.replayBufferMiB`.
pub const REPLAY_BUFFER_MIB_MAX: u64 = 4096;

/// How downstream (client) sessions map onto upstream sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSpec {
    /// Session strategy. `Shared` (default): one long-lived upstream session serves every client;
    /// the proxy answers each client's `initialize` from the upstream's handshake and rewrites
    /// JSON-RPC request ids so clients never see each other's replies. `PerClient`: each client
    /// session gets an upstream session of its own, opened with the client's own `initialize`
    /// and closed when the client's session ends (DELETE or idle expiry); at most
    /// `maxSessions` at once.
    #[serde(default)]
    pub strategy: SessionStrategy,
    /// A client session with no request for this long ends; its next request gets HTTP 404 and
    /// the client starts a new session. Example `30m`. Default `30m`.
    #[serde(default = "default_idle_timeout")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('168h')", "message": "spec.session.idleTimeout must be more than 0s and at most 168h"}]))]
    pub idle_timeout: DurationString,
    /// Most client sessions served at once with the `PerClient` strategy (each holds an upstream
    /// session of its own); past it, a new `initialize` gets a clear JSON-RPC error. Range
    /// 1-1024. Default `16`.
    #[serde(default = "default_max_sessions")]
    #[schemars(with = "i32", range(min = MAX_SESSIONS_MIN, max = MAX_SESSIONS_MAX))]
    pub max_sessions: u32,
    /// Most client sessions kept at once with the `Shared` strategy (issue 39). At the cap, a
    /// new client's `initialize` ends the least recently active idle session of its own caller,
    /// else of a caller holding at least two more sessions than its own; with neither, the
    /// `initialize` gets HTTP 503 and a JSON-RPC error naming this field. Range 1-65536.
    /// Default `4096`.
    #[serde(default = "default_max_shared_sessions")]
    #[schemars(with = "i32", range(min = 1, max = MAX_SHARED_SESSIONS_MAX))]
    pub max_shared_sessions: u32,
    /// Most client sessions one authenticated identity (OAuth `sub` and client id) holds at
    /// once, under either strategy (issue 39). Past it, that identity's least recently active
    /// idle session ends to make room, else its `initialize` gets HTTP 503 and a JSON-RPC error
    /// naming this field; other identities' sessions are never touched. Unset (default): half
    /// the strategy's cap (`maxSessions` or `maxSharedSessions`), at least 1, so one identity
    /// cannot hold every slot. Without `downstreamAuth.oauth` callers cannot be told apart and
    /// only the cap applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>", range(min = 1, max = MAX_SHARED_SESSIONS_MAX))]
    pub max_sessions_per_identity: Option<u32>,
    /// New client sessions one authenticated caller (OAuth `sub` and client id) may open per
    /// minute, under either strategy (issue 39): a token bucket of this many sessions, refilled
    /// at this rate. Past it, the caller's `initialize` (or, for a modern client under
    /// `PerClient`, the request that would open its upstream session) gets HTTP 429 with
    /// `Retry-After` and a JSON-RPC error naming this field, and nothing reaches the upstream.
    /// Without `spec.proxy.auth.oauth` callers cannot be told apart, so no rate applies and only
    /// the caps do (one shared bucket would let one client lock every other out). Range
    /// 1-100000. Default `120`.
    #[serde(default = "default_new_sessions_per_minute")]
    #[schemars(with = "i32", range(min = 1, max = NEW_SESSIONS_PER_MINUTE_MAX))]
    pub new_sessions_per_minute: u32,
    /// Message text, in MiB, that all client sessions together keep so a client whose SSE
    /// stream broke can resume it with `Last-Event-ID` (MCP 2025-11-25, "Resumability and
    /// Redelivery"). Each session also keeps at most 4 MiB. Past this bound, the streams that
    /// finished first, in any session, are forgotten first; a stream still in progress never
    /// is. Counts against the proxy container's memory: size it below its memory limit.
    /// `berth_proxy_replay_bytes` shows what is kept. Range 0-4096. Default `32`.
    #[serde(default = "default_replay_buffer_mib", rename = "replayBufferMiB")]
    #[schemars(with = "i32", range(min = 0, max = REPLAY_BUFFER_MIB_MAX))]
    pub replay_buffer_mib: u32,
}

impl Default for SessionSpec {
    fn default() -> Self {
        Self {
            strategy: SessionStrategy::default(),
            idle_timeout: default_idle_timeout(),
            max_sessions: default_max_sessions(),
            max_shared_sessions: default_max_shared_sessions(),
            max_sessions_per_identity: None,
            new_sessions_per_minute: default_new_sessions_per_minute(),
            replay_buffer_mib: default_replay_buffer_mib(),
        }
    }
}

impl SessionSpec {
    /// The session cap of the strategy in force: `maxSessions` (`PerClient`) or
    /// `maxSharedSessions` (`Shared`).
    pub fn cap(&self) -> u32 {
        match self.strategy {
            SessionStrategy::Shared => self.max_shared_sessions,
            SessionStrategy::PerClient => self.max_sessions,
        }
    }

    /// The sessions one authenticated identity may hold: `maxSessionsPerIdentity`, else half
    /// of [`Self::cap`] (at least 1); never more than the cap.
    pub fn per_identity(&self) -> u32 {
        self.max_sessions_per_identity
            .unwrap_or(self.cap() / 2)
            .clamp(1, self.cap().max(1))
    }

    /// The replay buffer of all sessions together, in bytes.
    pub fn replay_buffer_bytes(&self) -> usize {
        (self.replay_buffer_mib as usize) << 20
    }

    /// The client session idle timeout.
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] when `idleTimeout` does not parse.
    pub fn idle_timeout(&self) -> Result<Duration, ProxyConfigError> {
        parse_positive("session.idleTimeout", &self.idle_timeout)
    }
}

/// How client sessions map onto upstream sessions: `Shared` or `PerClient`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SessionStrategy {
    /// One upstream session for the whole pod, reused by every client.
    #[default]
    Shared,
    /// One upstream session per client session.
    PerClient,
}

fn default_max_sessions() -> u32 {
    16
}

/// Default `session.maxSharedSessions`.
pub fn default_max_shared_sessions() -> u32 {
    4096
}

/// Largest `session.maxSharedSessions` and `session.maxSessionsPerIdentity`.
pub const MAX_SHARED_SESSIONS_MAX: u64 = 65536;

/// Default `session.newSessionsPerMinute`.
pub fn default_new_sessions_per_minute() -> u32 {
    120
}

/// Largest `session.newSessionsPerMinute`.
pub const NEW_SESSIONS_PER_MINUTE_MAX: u64 = 100_000;

/// Default `session.replayBufferMiB`.
pub fn default_replay_buffer_mib() -> u32 {
    32
}

fn default_idle_timeout() -> DurationString {
    DurationString::new("30m")
}
