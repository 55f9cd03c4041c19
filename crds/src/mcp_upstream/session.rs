//! `spec.session`: how client sessions map onto upstream sessions, as the user writes it.
//!
//! The strategy is optional here because its default depends on the transport (issue 4:
//! `PerClient` for stdio, `Shared` for HTTP); [`SessionSettings::resolve`] turns it into the
//! proxy's [`SessionSpec`]. Not responsible for: what the strategies do (the proxy).

use kube::KubeSchema;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::duration::DurationString;
use crate::proxy_config::{
    MAX_SHARED_SESSIONS_MAX, NEW_SESSIONS_PER_MINUTE_MAX, REPLAY_BUFFER_MIB_MAX,
    default_max_shared_sessions, default_new_sessions_per_minute, default_replay_buffer_mib,
};
use crate::proxy_config::{SessionSpec, SessionStrategy};
use crate::transport::Transport;

/// How client sessions map onto upstream sessions.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSettings {
    /// Session strategy. `Shared`: one long-lived upstream session (for stdio: one child
    /// process) serves every client; the proxy answers each client's `initialize` from the
    /// upstream's handshake and rewrites JSON-RPC request ids so clients never see each other's
    /// replies. To the upstream, all clients of a `Shared` session are one requestor: state the
    /// server keeps per session (its logging level, session-scoped resources) is common to them,
    /// and MCP tasks are not offered (a task belongs to its requestor). `PerClient`: each client
    /// session gets an upstream session (for stdio: a child process) of its own, opened with the
    /// client's own `initialize` and closed when the client's session ends (DELETE or idle
    /// expiry); at most `maxSessions` at once. Choose it for servers that keep per-session state
    /// for different users. Default: `Shared` for `StreamableHttp`, `PerClient` for `Stdio` (a
    /// stdio server speaks to exactly one client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "strategy_schema")]
    pub strategy: Option<SessionStrategy>,
    /// A client session with no request for this long ends; its next request gets HTTP 404 and
    /// the client starts a new session. Example `30m`. Default `30m`.
    #[serde(default = "default_idle_timeout")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "duration(self) > duration('0s') && duration(self) <= duration('168h')", "message": "spec.session.idleTimeout must be more than 0s and at most 168h"}]))]
    pub idle_timeout: DurationString,
    /// Most client sessions served at once with the `PerClient` strategy (each holds an upstream
    /// session, or for stdio a child process, of its own). At the cap, a new client's session
    /// ends the least recently active idle one (no request in flight, no open stream), whose
    /// next request gets HTTP 404 so its client starts over (most clients never end their
    /// sessions); only when every session is busy does a new `initialize` get HTTP 503 with a
    /// clear JSON-RPC error. For stdio it is also the stdio host's `--max-children`. Range
    /// 1-1024. Default `16`.
    #[serde(default = "default_max_sessions")]
    #[schemars(with = "i32", range(min = 1, max = 1024))]
    pub max_sessions: u32,
    /// Most client sessions kept at once with the `Shared` strategy. At the cap, a new
    /// client's `initialize` ends the least recently active idle session (no request in
    /// flight, no open stream) of its own caller or, when its caller has none, of a caller
    /// holding at least two more sessions than its own; when there is none either, the
    /// `initialize` gets HTTP 503 with a JSON-RPC error naming this field. Each session costs a
    /// few KiB plus what it keeps for replay. Range 1-65536. Default `4096`.
    #[serde(default = "default_max_shared_sessions")]
    #[schemars(with = "i32", range(min = 1, max = MAX_SHARED_SESSIONS_MAX))]
    pub max_shared_sessions: u32,
    /// Most client sessions one authenticated caller (OAuth `sub` and client id) holds at once,
    /// under either strategy. Past it, that caller's own least recently active idle session
    /// ends to make room, else its `initialize` gets HTTP 503 with a JSON-RPC error naming this
    /// field; other callers' sessions are never ended for it. Default: half of the strategy's
    /// cap (`maxSessions` or `maxSharedSessions`), at least 1, so no caller can hold every
    /// slot. Without `spec.proxy.auth.oauth` callers cannot be told apart and only the cap
    /// applies. Range 1-65536. Example `8`.
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
    /// is. Counts against the proxy container's memory: size it below its memory limit
    /// (`spec.proxy.resources`). `berth_proxy_replay_bytes` shows what is kept. Range 0-4096.
    /// Default `32`.
    #[serde(default = "default_replay_buffer_mib", rename = "replayBufferMiB")]
    #[schemars(with = "i32", range(min = 0, max = REPLAY_BUFFER_MIB_MAX))]
    pub replay_buffer_mib: u32,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            strategy: None,
            idle_timeout: default_idle_timeout(),
            max_sessions: default_max_sessions(),
            max_shared_sessions: default_max_shared_sessions(),
            max_sessions_per_identity: None,
            new_sessions_per_minute: default_new_sessions_per_minute(),
            replay_buffer_mib: default_replay_buffer_mib(),
        }
    }
}

impl SessionSettings {
    /// The strategy in force: the one written, else the default of `transport` (`PerClient`
    /// for `Stdio`, `Shared` for `StreamableHttp`; issue 4 "CRD and pod").
    pub fn strategy_for(&self, transport: Transport) -> SessionStrategy {
        self.strategy.unwrap_or(match transport {
            Transport::Stdio => SessionStrategy::PerClient,
            Transport::StreamableHttp => SessionStrategy::Shared,
        })
    }

    /// The proxy's session settings for an upstream speaking `transport`.
    pub fn resolve(&self, transport: Transport) -> SessionSpec {
        SessionSpec {
            strategy: self.strategy_for(transport),
            idle_timeout: self.idle_timeout.clone(),
            max_sessions: self.max_sessions,
            max_shared_sessions: self.max_shared_sessions,
            max_sessions_per_identity: self.max_sessions_per_identity,
            new_sessions_per_minute: self.new_sessions_per_minute,
            replay_buffer_mib: self.replay_buffer_mib,
        }
    }
}

/// The strategy's schema, flat (a plain optional string enum), so the field's own description
/// is what `kubectl explain` shows rather than the enum type's.
fn strategy_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "enum": ["Shared", "PerClient"]})
}

fn default_idle_timeout() -> DurationString {
    SessionSpec::default().idle_timeout
}

fn default_max_sessions() -> u32 {
    SessionSpec::default().max_sessions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_strategy_unset_defaults_by_transport() {
        let unset = SessionSettings::default();
        assert_eq!(
            unset.strategy_for(Transport::Stdio),
            SessionStrategy::PerClient
        );
        assert_eq!(
            unset.strategy_for(Transport::StreamableHttp),
            SessionStrategy::Shared
        );
    }

    #[test]
    fn session_strategy_written_wins_over_transport_default() {
        let shared = SessionSettings {
            strategy: Some(SessionStrategy::Shared),
            ..SessionSettings::default()
        };
        let resolved = shared.resolve(Transport::Stdio);
        assert_eq!(resolved.strategy, SessionStrategy::Shared);
        assert_eq!(resolved.max_sessions, 16);
        assert_eq!(resolved.idle_timeout, DurationString::new("30m"));
    }
}
