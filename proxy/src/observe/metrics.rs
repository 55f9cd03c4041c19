//! The proxy's Prometheus metrics. Every name here is listed in `docs/metrics.md`.
//!
//! Label values are bounded and known at review time: tool names come only from the upstream's
//! discovered tool list (at most [`MAX_TOOL_LABELS`], otherwise `other`), methods from the MCP
//! method set (otherwise `other`). Never a session id, request id, URL or error text.

pub mod audit;
pub mod auth;
pub mod connections;
pub mod limits;
pub mod stdio;

use std::collections::HashSet;
use std::sync::RwLock;
use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::wire::outcome::Outcome;

/// Most distinct tool names used as label values; further tools count as `other`.
pub const MAX_TOOL_LABELS: usize = 256;

/// Label value for a tool or method outside the known set.
pub const OTHER: &str = "other";

/// MCP request methods used verbatim as `method` label values.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
];

/// Handles to every proxy metric, registered in one [`Registry`].
pub struct Metrics {
    registry: Registry,
    tool_names: RwLock<HashSet<String>>,
    /// `berth_proxy_tool_calls_total{tool,outcome}`.
    pub tool_calls: IntCounterVec,
    /// `berth_proxy_tool_call_duration_seconds{tool,outcome}`.
    pub tool_call_duration: HistogramVec,
    /// `berth_proxy_requests_total{method,outcome,era}`: every forwarded request; `era` is
    /// `legacy` (a client session opened with `initialize`) or `modern` (MCP 2026-07-28).
    pub requests: IntCounterVec,
    /// `berth_proxy_upstream_ready`: 1 while an upstream session is initialized (and tools are
    /// listed, unless the probe policy is `Never`).
    pub upstream_ready: IntGauge,
    /// `berth_proxy_upstream_exposed`: 1 while the HTTP upstream's port answers on the pod IP
    /// as well as on loopback (any pod can call it past the proxy), else 0 (issue 40, item 3).
    pub upstream_exposed: IntGauge,
    /// `berth_proxy_upstream_initializations_total{result}`: `ok`, `error`, `timeout`.
    pub upstream_initializations: IntCounterVec,
    /// `berth_proxy_upstream_session_losses_total{reason}`: upstream sessions the upstream
    /// forgot, by where the loss showed (`not_found`, `stream`, `probe`, `unreachable`, and
    /// `exited` for a stdio child that ended).
    pub upstream_session_losses: IntCounterVec,
    /// `berth_proxy_replays_total`: requests replayed once on a new upstream session after the
    /// upstream refused them for an unknown session.
    pub replays: IntCounter,
    /// `berth_proxy_tools_probes_total{result}`: tool listings (`ok`, `error`, `timeout`).
    pub tools_probes: IntCounterVec,
    /// `berth_proxy_tools_drifted`: baseline tools currently removed or changed.
    pub tools_drifted: IntGauge,
    /// `berth_proxy_tools_missing`: tools in `tools.allow` the upstream does not list.
    pub tools_missing: IntGauge,
    /// `berth_proxy_server_requests_total{result}`: server-to-client requests `relayed` to a
    /// client or `refused` (no client with the capability, or no single owner).
    pub server_requests: IntCounterVec,
    /// `berth_proxy_bridged_server_requests_total{direction,result}`: server-to-client requests
    /// carried across the eras (MRTR, issue 13). `direction`: `to_legacy_client` (an input
    /// request of a modern upstream's `input_required` result, asked of a legacy client as a
    /// server request) or `to_modern_client` (a legacy upstream's server request, returned to
    /// a modern client as an `input_required` result). `result`: `asked`, `answered`,
    /// `refused` (the client cannot be asked: no capability, no stream) or `unanswered`
    /// (the call ended first).
    pub bridged_server_requests: IntCounterVec,
    /// `berth_proxy_server_messages_dropped_total`: server notifications a client could not
    /// receive: its standalone stream was closed or full, or (on a call's stream) the client's
    /// `Accept` names only JSON.
    pub server_messages_dropped: IntCounter,
    /// `berth_proxy_standalone_responses_total{result}`: responses that arrived on the
    /// upstream's standalone stream instead of their POST: `routed` to the call waiting for
    /// them, or `unmatched` (no call waiting: answered, timed out or unknown) and dropped
    /// (issue 12, item 3).
    pub standalone_responses: IntCounterVec,
    /// `berth_proxy_client_notifications_failed_total`: client notifications the upstream could
    /// not be given; the client got an HTTP error, not 202.
    pub client_notifications_failed: IntCounter,
    /// `berth_proxy_tools_discovered`: tools in the last upstream tool list.
    pub tools_discovered: IntGauge,
    /// `berth_proxy_downstream_sessions`: live client sessions.
    pub downstream_sessions: IntGauge,
    /// `berth_proxy_replay_bytes`: message text all sessions keep for `Last-Event-ID`
    /// resumption, bytes (at most `session.replayBufferMiB` once live streams have finished).
    pub replay_bytes: IntGauge,
    /// `berth_proxy_downstream_sessions_expired_total`: client sessions ended by idle expiry.
    pub downstream_sessions_expired: IntCounter,
    /// `berth_proxy_downstream_sessions_adopted_total`: client sessions issued by another
    /// replica (signed id) and served here (field case BR-35).
    pub downstream_sessions_adopted: IntCounter,
    /// `berth_proxy_downstream_sessions_evicted_total`: client sessions ended to make room for a
    /// new one of the same caller at `session.maxSessions`, `session.maxSharedSessions` or
    /// `session.maxSessionsPerIdentity`: the caller's least recently active session with no
    /// request in flight and no open stream (issues 13, 39).
    pub downstream_sessions_evicted: IntCounter,
    /// `berth_proxy_session_limit_refusals_total{limit}`: `initialize`s (and `PerClient` modern
    /// requests) refused at a session limit: `maxSessions`, `maxSharedSessions`,
    /// `maxSessionsPerIdentity` or `newSessionsPerMinute` (issue 39, item 5).
    pub session_limit_refusals: IntCounterVec,
    /// `berth_proxy_invalid_messages_total{reason}`: client messages refused before forwarding.
    pub invalid_messages: IntCounterVec,
    /// `berth_proxy_standalone_streams_total{result}`: client GET streams opened, `opened` when
    /// the session had none open, `replaced` when it closed the session's open stream (issue
    /// 12, item 5). None is ever refused.
    pub standalone_streams: IntCounterVec,
    /// `berth_proxy_stream_resumptions_total{result}`: GETs with `Last-Event-ID`: `replayed`
    /// (the stream it names was resumed), `unknown` (not an id of this session on this replica)
    /// or `evicted` (the events after it were dropped by the replay bounds); the last two get
    /// the standalone stream instead (issue 13, MCP 2025-11-25 "Resumability and Redelivery").
    pub stream_resumptions: IntCounterVec,
    /// The `berth_proxy_stdio_*` metrics of stdio upstreams.
    pub stdio: stdio::StdioMetrics,
    /// The OAuth resource server's metrics (`berth_proxy_jwks_fetches_total`).
    pub auth: auth::AuthMetrics,
    /// The listeners' connection caps and read deadlines (issue 39).
    pub connections: connections::ConnectionMetrics,
    /// The metrics of `limits` (issue 39): replies and subscriptions refused, the proxy's own
    /// requests in flight.
    pub limits: limits::LimitMetrics,
    /// The audit log's metrics (`berth_proxy_audit_events_dropped_total`).
    pub audit: audit::AuditMetrics,
}

/// The protocol era of a client request, the `era` label of `berth_proxy_requests_total`
/// (MCP 2026-07-28, "Versioning", "Terminology").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// A session opened with `initialize` (2025-11-25 and earlier).
    Legacy,
    /// Per-request metadata, no session (2026-07-28).
    Modern,
}

impl Era {
    /// `legacy` or `modern`.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::Legacy => "legacy",
            Self::Modern => "modern",
        }
    }
}

impl Metrics {
    /// Creates and registers every metric, plus `berth_build_info{version,component}`.
    ///
    /// # Panics
    /// Never in practice: names and label sets are constants and registered once per registry.
    #[allow(clippy::expect_used)]
    pub fn new() -> Self {
        let registry = Registry::new();
        let buckets = vec![
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
        ];
        let tool_calls = IntCounterVec::new(
            Opts::new(
                "berth_proxy_tool_calls_total",
                "tools/call requests by tool and outcome",
            ),
            &["tool", "outcome"],
        )
        .expect("valid metric");
        let tool_call_duration = HistogramVec::new(
            HistogramOpts::new(
                "berth_proxy_tool_call_duration_seconds",
                "tools/call duration from receipt to final response",
            )
            .buckets(buckets),
            &["tool", "outcome"],
        )
        .expect("valid metric");
        let requests = IntCounterVec::new(
            Opts::new(
                "berth_proxy_requests_total",
                "forwarded requests by method, outcome and protocol era",
            ),
            &["method", "outcome", "era"],
        )
        .expect("valid metric");
        let upstream_ready = IntGauge::new(
            "berth_proxy_upstream_ready",
            "1 while the upstream session is initialized and tools are listed",
        )
        .expect("valid metric");
        let upstream_exposed = IntGauge::new(
            "berth_proxy_upstream_exposed",
            "1 while the upstream's port answers on the pod IP as well as on loopback",
        )
        .expect("valid metric");
        let upstream_initializations = IntCounterVec::new(
            Opts::new(
                "berth_proxy_upstream_initializations_total",
                "upstream MCP handshakes by result",
            ),
            &["result"],
        )
        .expect("valid metric");
        let upstream_session_losses = IntCounterVec::new(
            Opts::new(
                "berth_proxy_upstream_session_losses_total",
                "upstream sessions the upstream reported unknown, by where it showed",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let replays = IntCounter::new(
            "berth_proxy_replays_total",
            "requests replayed once after the upstream refused an unknown session",
        )
        .expect("valid metric");
        let tools_probes = IntCounterVec::new(
            Opts::new(
                "berth_proxy_tools_probes_total",
                "upstream tool listings by result",
            ),
            &["result"],
        )
        .expect("valid metric");
        let tools_drifted = IntGauge::new(
            "berth_proxy_tools_drifted",
            "baseline tools currently removed or changed upstream",
        )
        .expect("valid metric");
        let tools_missing = IntGauge::new(
            "berth_proxy_tools_missing",
            "tools in tools.allow that the upstream does not list",
        )
        .expect("valid metric");
        let server_requests = IntCounterVec::new(
            Opts::new(
                "berth_proxy_server_requests_total",
                "server-to-client requests relayed to a client or refused",
            ),
            &["result"],
        )
        .expect("valid metric");
        let bridged_server_requests = IntCounterVec::new(
            Opts::new(
                "berth_proxy_bridged_server_requests_total",
                "server-to-client requests carried across protocol eras (MRTR), by direction and result",
            ),
            &["direction", "result"],
        )
        .expect("valid metric");
        let server_messages_dropped = IntCounter::new(
            "berth_proxy_server_messages_dropped_total",
            "server notifications a client could not receive: its standalone stream was closed or full, or the call's client accepts only JSON",
        )
        .expect("valid metric");
        let standalone_responses = IntCounterVec::new(
            Opts::new(
                "berth_proxy_standalone_responses_total",
                "responses that arrived on the upstream's standalone stream: routed to the waiting call, or unmatched and dropped",
            ),
            &["result"],
        )
        .expect("valid metric");
        let client_notifications_failed = IntCounter::new(
            "berth_proxy_client_notifications_failed_total",
            "client notifications that could not be forwarded upstream; the client got an HTTP error, not 202",
        )
        .expect("valid metric");
        let tools_discovered = IntGauge::new(
            "berth_proxy_tools_discovered",
            "tools in the last upstream tool list",
        )
        .expect("valid metric");
        let downstream_sessions = IntGauge::new(
            "berth_proxy_downstream_sessions",
            "live downstream client sessions",
        )
        .expect("valid metric");
        let replay_bytes = IntGauge::new(
            "berth_proxy_replay_bytes",
            "message text kept by all sessions for Last-Event-ID resumption, bytes",
        )
        .expect("valid metric");
        let downstream_sessions_expired = IntCounter::new(
            "berth_proxy_downstream_sessions_expired_total",
            "downstream sessions ended by idle expiry",
        )
        .expect("valid metric");
        let downstream_sessions_adopted = IntCounter::new(
            "berth_proxy_downstream_sessions_adopted_total",
            "downstream sessions issued by another replica (signed id) and served here",
        )
        .expect("valid metric");
        let downstream_sessions_evicted = IntCounter::new(
            "berth_proxy_downstream_sessions_evicted_total",
            "downstream sessions ended to make room for a new one of the same caller at a session cap or quota",
        )
        .expect("valid metric");
        let session_limit_refusals = IntCounterVec::new(
            Opts::new(
                "berth_proxy_session_limit_refusals_total",
                "new client sessions refused at a session limit, by the limit's spec field",
            ),
            &["limit"],
        )
        .expect("valid metric");
        let invalid_messages = IntCounterVec::new(
            Opts::new(
                "berth_proxy_invalid_messages_total",
                "client messages refused before forwarding, by reason",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let standalone_streams = IntCounterVec::new(
            Opts::new(
                "berth_proxy_standalone_streams_total",
                "client standalone GET streams opened: opened (none was open) or replaced (it closed the open one)",
            ),
            &["result"],
        )
        .expect("valid metric");
        let stream_resumptions = IntCounterVec::new(
            Opts::new(
                "berth_proxy_stream_resumptions_total",
                "client GETs with Last-Event-ID: replayed, unknown or evicted (the last two open the standalone stream)",
            ),
            &["result"],
        )
        .expect("valid metric");
        let build_info = IntGaugeVec::new(
            Opts::new("berth_build_info", "build information; always 1"),
            &["version", "component"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), "proxy"])
            .set(1);
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(tool_calls.clone()),
            Box::new(tool_call_duration.clone()),
            Box::new(requests.clone()),
            Box::new(upstream_ready.clone()),
            Box::new(upstream_exposed.clone()),
            Box::new(upstream_initializations.clone()),
            Box::new(upstream_session_losses.clone()),
            Box::new(replays.clone()),
            Box::new(tools_probes.clone()),
            Box::new(tools_drifted.clone()),
            Box::new(tools_missing.clone()),
            Box::new(server_requests.clone()),
            Box::new(bridged_server_requests.clone()),
            Box::new(server_messages_dropped.clone()),
            Box::new(standalone_responses.clone()),
            Box::new(client_notifications_failed.clone()),
            Box::new(tools_discovered.clone()),
            Box::new(downstream_sessions.clone()),
            Box::new(replay_bytes.clone()),
            Box::new(downstream_sessions_expired.clone()),
            Box::new(downstream_sessions_adopted.clone()),
            Box::new(downstream_sessions_evicted.clone()),
            Box::new(session_limit_refusals.clone()),
            Box::new(invalid_messages.clone()),
            Box::new(standalone_streams.clone()),
            Box::new(stream_resumptions.clone()),
            Box::new(build_info),
            Box::new(crate::observe::telemetry::counters().exported.clone()),
            Box::new(crate::observe::telemetry::counters().dropped.clone()),
        ];
        for collector in collectors {
            registry.register(collector).expect("unique metric");
        }
        // Every known label value starts at 0, so rate() and absent() work before the first event.
        for reason in ["not_found", "stream", "probe", "unreachable", "exited"] {
            upstream_session_losses.with_label_values(&[reason]);
        }
        for result in ["ok", "error", "timeout"] {
            upstream_initializations.with_label_values(&[result]);
            tools_probes.with_label_values(&[result]);
        }
        for result in ["routed", "unmatched"] {
            standalone_responses.with_label_values(&[result]);
        }
        for direction in ["to_legacy_client", "to_modern_client"] {
            for result in ["asked", "answered", "refused", "unanswered"] {
                bridged_server_requests.with_label_values(&[direction, result]);
            }
        }
        for result in ["relayed", "refused"] {
            server_requests.with_label_values(&[result]);
        }
        for result in ["opened", "replaced"] {
            standalone_streams.with_label_values(&[result]);
        }
        for result in ["replayed", "unknown", "evicted"] {
            stream_resumptions.with_label_values(&[result]);
        }
        let stdio = stdio::StdioMetrics::register(&registry);
        let auth = auth::AuthMetrics::register(&registry);
        let connections = connections::ConnectionMetrics::register(&registry);
        let limits = limits::LimitMetrics::register(&registry);
        let audit = audit::AuditMetrics::register(&registry);
        Self {
            stdio,
            auth,
            connections,
            limits,
            audit,
            registry,
            tool_names: RwLock::new(HashSet::new()),
            tool_calls,
            tool_call_duration,
            requests,
            upstream_ready,
            upstream_exposed,
            upstream_initializations,
            upstream_session_losses,
            replays,
            tools_probes,
            tools_drifted,
            tools_missing,
            server_requests,
            bridged_server_requests,
            server_messages_dropped,
            standalone_responses,
            client_notifications_failed,
            tools_discovered,
            downstream_sessions,
            replay_bytes,
            downstream_sessions_expired,
            downstream_sessions_adopted,
            downstream_sessions_evicted,
            session_limit_refusals,
            invalid_messages,
            standalone_streams,
            stream_resumptions,
        }
    }

    /// Replaces the set of tool names allowed as label values with the upstream's tool list
    /// (the first [`MAX_TOOL_LABELS`] names).
    pub fn set_tool_names<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let names: HashSet<String> = names
            .into_iter()
            .take(MAX_TOOL_LABELS)
            .map(str::to_owned)
            .collect();
        self.tools_discovered
            .set(i64::try_from(names.len()).unwrap_or(i64::MAX));
        if let Ok(mut guard) = self.tool_names.write() {
            *guard = names;
        }
    }

    /// The label value for a tool name: the name if discovered, else [`OTHER`] (no copy of
    /// either per call, issue 14).
    pub fn tool_label<'a>(&self, name: &'a str) -> &'a str {
        match self.tool_names.read() {
            Ok(names) if names.contains(name) => name,
            _ => OTHER,
        }
    }

    /// Records the end of one forwarded request; for `tools/call` also the per-tool metrics.
    pub fn record(
        &self,
        method: &str,
        tool: Option<&str>,
        outcome: Outcome,
        elapsed: Duration,
        era: Era,
    ) {
        let method_label = if KNOWN_METHODS.contains(&method) {
            method
        } else {
            OTHER
        };
        self.requests
            .with_label_values(&[method_label, outcome.as_label(), era.as_label()])
            .inc();
        if method == "tools/call" {
            let tool = self.tool_label(tool.unwrap_or(OTHER));
            self.tool_calls
                .with_label_values(&[tool, outcome.as_label()])
                .inc();
            self.tool_call_duration
                .with_label_values(&[tool, outcome.as_label()])
                .observe(elapsed.as_secs_f64());
        }
    }

    /// Renders every metric in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buffer).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
