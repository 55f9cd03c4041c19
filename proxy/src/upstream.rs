//! The upstream side of the proxy: one long-lived upstream session, kept by a supervisor task
//! and shared by every caller.
//!
//! The supervisor opens the session at start-up, lists tools over that same session (never a
//! second session per call or per probe: README.md "Why it exists", failure 1), publishes it, and opens a new one
//! only after the upstream reports the old one unknown. Readiness is true while a session is
//! published and, unless the probe policy is `Never`, its tool list was obtained.

pub mod endpoint;
pub mod http;
pub mod listen;
pub mod session;
pub mod tools;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use berth_crds::{PolicyFinding, ToolsPolicySpec, ToolsProbePolicy, ToolsProbeSpec};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
pub use endpoint::Endpoint;
pub use http::{HttpUpstream, Reply};
pub use session::UpstreamSession;
use tools::Catalog;

/// Most `tools/list` pages the probe follows before giving up on a cursor loop.
const MAX_TOOL_PAGES: usize = 100;
/// First wait after a failed handshake; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between handshake attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often the supervisor pings an idle upstream session, so a dead upstream takes the proxy
/// out of readiness even when no client is calling (README.md "Why it exists", failure 5).
const LIVENESS_INTERVAL: Duration = Duration::from_secs(10);
/// Budget for ending the upstream session on shutdown; shutdown never waits longer.
const CLOSE_BUDGET: Duration = Duration::from_secs(2);
/// A stdio child of the supervisor that fails to initialize, or ends within this time of its
/// handshake, is a quick failure (field case BR-34).
pub const QUICK_FAILURE_WINDOW: Duration = Duration::from_secs(10);

/// A failed exchange with the upstream. `kind()` gives a bounded label for metrics and logs.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream URL or HTTP client settings are unusable.
    #[error("{0}")]
    Config(String),
    /// A message could not be encoded.
    #[error("failed to encode message")]
    Encode(#[source] serde_json::Error),
    /// The HTTP request could not be sent or its headers not received.
    #[error("failed to send request to upstream")]
    Send(#[source] reqwest::Error),
    /// The reply body could not be read.
    #[error("failed to read upstream reply")]
    Read(#[source] reqwest::Error),
    /// The upstream does not know the session (HTTP 404, or 400 naming the session).
    #[error("upstream session is unknown to the upstream")]
    SessionLost,
    /// The upstream answered with another HTTP error status.
    #[error("upstream answered HTTP {status}: {body}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// First bytes of the body.
        body: String,
    },
    /// The reply is not the JSON-RPC the protocol requires.
    #[error("malformed upstream reply: {0}")]
    Malformed(String),
    /// The handshake was answered, but not usably.
    #[error("{0}")]
    Handshake(String),
    /// A stdio child could not be started, or a stdio host's socket not reached.
    #[error("failed to start stdio upstream {target}")]
    Spawn {
        /// The program or socket path.
        target: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The stdio connection ended (the child exited, closed its stdout, or the host hung up);
    /// the text names why and carries the child's last stderr lines (redacted), for logs only.
    #[error("{0}")]
    Gone(String),
    /// A stdio host refused the connection (its `--max-children` reached).
    #[error("stdio host refused the connection: {0}")]
    Refused(String),
    /// A stdio reply line was longer than `upstream.maxLineBytes`.
    #[error("upstream reply of {bytes} bytes exceeds upstream.maxLineBytes ({limit} bytes)")]
    TooLong {
        /// Length of the line.
        bytes: u64,
        /// The limit.
        limit: usize,
    },
}

impl UpstreamError {
    /// Bounded kind label: `config`, `encode`, `send`, `read`, `session_lost`, `status`,
    /// `malformed`, `handshake`, `spawn`, `gone`, `refused`, `too_long`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config(_) => "config",
            Self::Encode(_) => "encode",
            Self::Send(_) => "send",
            Self::Read(_) => "read",
            Self::SessionLost => "session_lost",
            Self::Status { .. } => "status",
            Self::Malformed(_) => "malformed",
            Self::Handshake(_) => "handshake",
            Self::Spawn { .. } => "spawn",
            Self::Gone(_) => "gone",
            Self::Refused(_) => "refused",
            Self::TooLong { .. } => "too_long",
        }
    }
}

/// The shared upstream: the current session (if any), readiness and the tool catalogue.
pub struct Upstream {
    endpoint: Endpoint,
    max_quick_failures: u32,
    gave_up: AtomicBool,
    last_error: RwLock<Option<String>>,
    connect_budget: Duration,
    probe: ToolsProbeSpec,
    probe_budget: Duration,
    policy: ToolsPolicySpec,
    current: watch::Sender<Option<Arc<UpstreamSession>>>,
    ready: watch::Sender<bool>,
    attempts: watch::Sender<u64>,
    refresh: Notify,
    check: Notify,
    catalog: RwLock<Catalog>,
    server_messages: mpsc::Sender<Value>,
    metrics: Arc<Metrics>,
}

/// What the supervisor needs from the proxy config.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// `timeouts.connect`: bounds each handshake.
    pub connect_budget: Duration,
    /// `toolsProbe`.
    pub probe: ToolsProbeSpec,
    /// Bounds each tool listing (`timeouts.call`).
    pub probe_budget: Duration,
    /// `tools`: decides which allowed tools must exist upstream.
    pub policy: ToolsPolicySpec,
    /// Stdio: after this many consecutive quick failures of the supervisor's child the proxy
    /// stops (and the binary exits non-zero) so the pod visibly crash-loops; 0 never stops
    /// (field case BR-34). HTTP upstreams ignore it.
    pub max_quick_failures: u32,
}

impl Upstream {
    /// Creates the upstream and starts its supervisor, which runs until `shutdown` fires and
    /// then closes the session. Messages the upstream sends on its standalone stream go to
    /// `server_messages`.
    pub fn spawn(
        endpoint: Endpoint,
        settings: UpstreamSettings,
        metrics: Arc<Metrics>,
        server_messages: mpsc::Sender<Value>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let UpstreamSettings {
            connect_budget,
            probe,
            probe_budget,
            policy,
            max_quick_failures,
        } = settings;
        let upstream = Arc::new(Self {
            endpoint,
            max_quick_failures,
            gave_up: AtomicBool::new(false),
            last_error: RwLock::new(None),
            connect_budget,
            catalog: RwLock::new(Catalog::new(probe.expected_fingerprint.clone())),
            probe,
            probe_budget,
            policy,
            current: watch::channel(None).0,
            ready: watch::channel(false).0,
            attempts: watch::channel(0).0,
            refresh: Notify::new(),
            check: Notify::new(),
            server_messages,
            metrics,
        });
        tokio::spawn(Arc::clone(&upstream).supervise(shutdown));
        upstream
    }

    /// Whether the supervisor gave up after too many consecutive quick failures of its stdio
    /// child and stopped the proxy; the binary then exits non-zero (field case BR-34).
    pub fn gave_up(&self) -> bool {
        self.gave_up.load(Ordering::Relaxed)
    }

    /// The last failed handshake's error with its causes (for a stdio child: why it ended and
    /// its last stderr lines, secret-like values redacted), for the admin `/upstream` endpoint
    /// (field cases BR-13 b, BR-34). `None` once a handshake succeeded.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.read().ok().and_then(|e| e.clone())
    }

    fn set_last_error(&self, error: Option<String>) {
        if let Ok(mut last) = self.last_error.write() {
            *last = error;
        }
    }

    /// Where upstream sessions come from.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Whether the proxy can serve: a session is up and, unless the policy is `Never`, tools
    /// were listed.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// The current session, waiting at most `budget` for one to be established.
    ///
    /// Returns `None` when no session was available within `budget`.
    ///
    /// # Cancellation
    /// Cancel-safe. Waiting callers never drive or cancel the handshake: the supervisor alone
    /// runs it (single flight), so no caller's deadline can interrupt it.
    pub async fn session(&self, budget: Duration) -> Option<Arc<UpstreamSession>> {
        if let Some(current) = self.current() {
            return Some(current); // the common case: no timer, no subscription
        }
        let mut rx = self.current.subscribe();
        let wait = rx.wait_for(|s| s.as_ref().is_some_and(|s| !s.is_lost()));
        match tokio::time::timeout(budget, wait).await {
            Ok(Ok(session)) => session.clone(),
            _ => None,
        }
    }

    /// A session to replace `lost`: the current one if the supervisor already re-initialized,
    /// otherwise the result of the supervisor's next handshake attempt, waiting at most
    /// `budget`. One failed attempt ends the wait, so a caller causes at most one
    /// re-initialization per loss and never loops (field case BR-03).
    ///
    /// # Cancellation
    /// Cancel-safe; the handshake itself belongs to the supervisor.
    pub async fn recover(
        &self,
        lost: &Arc<UpstreamSession>,
        budget: Duration,
    ) -> Option<Arc<UpstreamSession>> {
        let mut attempts = self.attempts.subscribe();
        attempts.borrow_and_update();
        if let Some(current) = self.current().filter(|s| !Arc::ptr_eq(s, lost)) {
            return Some(current);
        }
        let next_attempt = tokio::time::timeout(budget, attempts.changed()).await;
        if !matches!(next_attempt, Ok(Ok(()))) {
            return None;
        }
        self.current().filter(|s| !Arc::ptr_eq(s, lost))
    }

    /// The current session, if one is published and not lost (does not wait).
    pub fn current(&self) -> Option<Arc<UpstreamSession>> {
        self.current.borrow().clone().filter(|s| !s.is_lost())
    }

    /// Follows the published session (each new session after a re-initialization).
    pub fn watch_sessions(&self) -> watch::Receiver<Option<Arc<UpstreamSession>>> {
        self.current.subscribe()
    }

    /// Reports that the upstream forgot `session` (`reason`: `not_found`, `stream`, `probe`);
    /// the supervisor opens a new one. Reports about a session already replaced are ignored, so
    /// concurrent callers cause one re-initialization and one count.
    pub fn report_lost(&self, session: &Arc<UpstreamSession>, reason: &'static str) {
        let is_current = self
            .current
            .borrow()
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, session));
        session.mark_lost();
        if is_current && session.claim_report() {
            self.metrics
                .upstream_session_losses
                .with_label_values(&[reason])
                .inc();
        }
    }

    /// Asks the supervisor to check at once that the upstream still answers on the session (a
    /// request just failed at the connection level). An unreachable upstream loses the session
    /// and readiness.
    pub fn check_reachable(&self) {
        self.check.notify_one();
    }

    /// Asks the supervisor to list tools again (on `notifications/tools/list_changed`).
    pub fn refresh_tools(&self) {
        if self.probe.policy != ToolsProbePolicy::Never {
            self.refresh.notify_one();
        }
    }

    /// Whether calls to `tool` are blocked by drift (`toolsProbe.onDrift: FailClosed`).
    pub fn is_drifted(&self, tool: &str) -> bool {
        self.catalog.read().is_ok_and(|c| c.is_drifted(tool))
    }

    /// Whether the tool policy exposes `tool` (its `readOnlyHint` from the last listing).
    pub fn exposes(&self, tool: &str) -> bool {
        let read_only = self.catalog.read().is_ok_and(|c| c.is_read_only(tool));
        self.policy.exposes(tool, read_only)
    }

    /// Why the proxy is not ready, for `/readyz`.
    pub fn not_ready_reason(&self) -> String {
        let missing = self
            .catalog
            .read()
            .map(|c| c.missing().to_vec())
            .unwrap_or_default();
        if !missing.is_empty() {
            return format!("allowed tools missing upstream: {}", missing.join(", "));
        }
        // The last failure (for a stdio child: how it ended and its last stderr lines, redacted)
        // travels with the reason, so the operator's UpstreamReady message carries it (BR-34).
        let mut reason = match self.last_error() {
            Some(error) => format!("upstream session not ready: {error}"),
            None => "upstream session not ready".to_owned(),
        };
        let restarts = self.metrics.stdio.restarts.get();
        if self.endpoint.stdio().is_some() && restarts > 0 {
            reason.push_str(&format!(" (child restarts: {restarts})"));
        }
        reason
    }

    /// `{"count", "fingerprint", "drifted", "missing"}` of the last listing.
    pub fn tools_summary(&self) -> Value {
        self.catalog
            .read()
            .map(|c| c.summary())
            .unwrap_or(Value::Null)
    }

    /// Lists tools now over `session` if the policy is `PerCall`; returns whether the listing
    /// (when one was due) succeeded.
    pub async fn probe_before_call(&self, session: &UpstreamSession) -> bool {
        self.probe.policy != ToolsProbePolicy::PerCall || self.probe_tools(session).await
    }

    async fn supervise(self: Arc<Self>, shutdown: CancellationToken) {
        let mut backoff = MIN_BACKOFF;
        let mut quick_failures = 0u32;
        let mut first = true;
        loop {
            if let Some(stdio) = self.endpoint.stdio().filter(|_| !first) {
                stdio.metrics().restarts.inc();
            }
            first = false;
            let attempt = tokio::select! {
                () = shutdown.cancelled() => break,
                attempt = self.establish() => attempt,
            };
            self.attempts.send_modify(|n| *n += 1);
            let Some(session) = attempt else {
                if self.quick_failure(&mut quick_failures, &shutdown) {
                    break;
                }
                let wait = tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(backoff) => backoff,
                };
                backoff = (wait * 2).min(MAX_BACKOFF);
                continue;
            };
            let held_since = Instant::now();
            if self.endpoint.stdio().is_none() {
                backoff = MIN_BACKOFF;
            }
            let listening = CancellationToken::new();
            let (this, held) = (Arc::clone(&self), Arc::clone(&session));
            let (stop, sink) = (listening.clone(), self.server_messages.clone());
            tokio::spawn(async move {
                if listen::listen(Arc::clone(&held), stop, sink).await == listen::Ended::Lost {
                    this.report_lost(&held, "stream");
                }
            });
            let stopping = tokio::select! {
                () = shutdown.cancelled() => true,
                () = self.hold(&session) => false,
            };
            listening.cancel();
            self.ready.send_replace(false);
            self.metrics.upstream_ready.set(0);
            self.current.send_replace(None);
            if stopping {
                let _ = tokio::time::timeout(CLOSE_BUDGET, session.close()).await;
                break;
            }
            tracing::warn!(upstream = %self.endpoint, "upstream session lost; re-initializing");
            if self.endpoint.stdio().is_some() {
                // Its own child ended, or a client's did: readiness waits for a fresh child to
                // complete initialize and tools/list again (field cases BR-07, BR-34).
                session.close().await;
                if session.is_lost() && session.claim_report() {
                    self.metrics
                        .upstream_session_losses
                        .with_label_values(&["exited"])
                        .inc();
                }
                if !session.is_lost() || held_since.elapsed() >= QUICK_FAILURE_WINDOW {
                    quick_failures = 0;
                    backoff = MIN_BACKOFF;
                    continue;
                }
                if self.quick_failure(&mut quick_failures, &shutdown) {
                    break;
                }
                let wait = tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(backoff) => backoff,
                };
                backoff = (wait * 2).min(MAX_BACKOFF);
            }
        }
    }

    /// Counts one quick failure of a stdio child; past `max_quick_failures` in a row, gives up:
    /// stops the proxy (`shutdown`) and returns true. HTTP upstreams never give up.
    fn quick_failure(&self, count: &mut u32, shutdown: &CancellationToken) -> bool {
        if self.endpoint.stdio().is_none() || self.max_quick_failures == 0 {
            return false;
        }
        *count += 1;
        if *count < self.max_quick_failures {
            return false;
        }
        tracing::error!(
            upstream = %self.endpoint,
            failures = *count,
            "stdio upstream failed too often in a row; stopping the proxy"
        );
        self.gave_up.store(true, Ordering::Relaxed);
        shutdown.cancel();
        true
    }

    /// One handshake within the connect budget, then the first tools probe. Publishes the
    /// session only after the handshake completed (so no caller sees it half-initialized);
    /// readiness follows the probe.
    async fn establish(&self) -> Option<Arc<UpstreamSession>> {
        let handshake = UpstreamSession::handshake(&self.endpoint, None);
        // On expiry the handshake future is dropped: its HTTP exchange is abandoned, nothing of
        // it stays behind.
        let session = match tokio::time::timeout(self.connect_budget, handshake).await {
            Ok(Ok(session)) => Arc::new(session),
            Ok(Err(error)) => {
                self.metrics
                    .upstream_initializations
                    .with_label_values(&["error"])
                    .inc();
                tracing::warn!(upstream = %self.endpoint, error = %error_chain(&error), kind = error.kind(), "upstream handshake failed");
                self.set_last_error(Some(error_chain(&error)));
                return None;
            }
            Err(_) => {
                self.metrics
                    .upstream_initializations
                    .with_label_values(&["timeout"])
                    .inc();
                tracing::warn!(upstream = %self.endpoint, budget_ms = self.connect_budget.as_millis() as u64, "upstream handshake timed out");
                self.set_last_error(Some(format!(
                    "upstream handshake took longer than timeouts.connect ({} ms)",
                    self.connect_budget.as_millis()
                )));
                return None;
            }
        };
        self.metrics
            .upstream_initializations
            .with_label_values(&["ok"])
            .inc();
        self.set_last_error(None);
        tracing::info!(
            upstream = %self.endpoint,
            protocol_version = session.protocol_version(),
            "upstream session initialized"
        );
        self.current.send_replace(Some(Arc::clone(&session)));
        if self.probe.policy == ToolsProbePolicy::Never || self.probe_tools(&session).await {
            self.set_ready(true);
        }
        if session.is_lost() {
            self.report_lost(&session, "probe");
        }
        Some(session)
    }

    fn set_ready(&self, ready: bool) {
        self.ready.send_replace(ready);
        self.metrics.upstream_ready.set(i64::from(ready));
    }

    /// Holds the session until it is reported lost, re-probing on the `Interval` policy, on
    /// `list_changed`, and while the last probe failed.
    async fn hold(&self, session: &Arc<UpstreamSession>) {
        let interval = self.probe.interval().unwrap_or(Duration::from_secs(300));
        let mut child_exits = self.endpoint.stdio().map(|stdio| stdio.exits());
        loop {
            let not_ready = !self.is_ready();
            let periodic = self.probe.policy == ToolsProbePolicy::Interval || not_ready;
            let wait = if not_ready { MAX_BACKOFF } else { interval };
            tokio::select! {
                () = session.lost().cancelled() => return,
                () = child_exit(&mut child_exits) => {
                    self.set_ready(false);
                    return;
                }
                () = self.refresh.notified() => {}
                () = tokio::time::sleep(wait), if periodic => {}
                () = self.check.notified() => {
                    if !self.is_reachable(session).await {
                        return;
                    }
                    continue;
                }
                () = tokio::time::sleep(LIVENESS_INTERVAL) => {
                    if !self.is_reachable(session).await {
                        return;
                    }
                    continue;
                }
            }
            let listed = self.probe_tools(session).await;
            if session.is_lost() {
                self.report_lost(session, "probe");
                return;
            }
            self.set_ready(listed);
        }
    }

    /// Pings the upstream over `session` within the connect budget. A session the upstream
    /// forgot, or an upstream that does not answer, is reported lost (`not_found` or
    /// `unreachable`) and `false` returned.
    async fn is_reachable(&self, session: &Arc<UpstreamSession>) -> bool {
        let ping = tokio::time::timeout(self.connect_budget, session.request("ping", json!({})));
        let reason = match ping.await {
            Ok(Ok(_)) => return true,
            Ok(Err(UpstreamError::SessionLost)) => "not_found",
            Ok(Err(error)) => {
                tracing::warn!(upstream = %self.endpoint, error = %error_chain(&error), "upstream unreachable");
                "unreachable"
            }
            Err(_) => {
                tracing::warn!(upstream = %self.endpoint, "upstream did not answer ping within the connect budget");
                "unreachable"
            }
        };
        self.report_lost(session, reason);
        false
    }

    /// Lists every tool over `session` (following cursors), updates the catalogue and the
    /// metric label set. Returns whether the listing succeeded within the probe budget.
    async fn probe_tools(&self, session: &UpstreamSession) -> bool {
        let listing = tokio::time::timeout(self.probe_budget, list_tools(session)).await;
        let result = match &listing {
            Ok(Ok(_)) => "ok",
            Ok(Err(_)) => "error",
            Err(_) => "timeout",
        };
        self.metrics.tools_probes.with_label_values(&[result]).inc();
        match listing {
            Ok(Ok(tools)) => {
                let drifted = {
                    let Ok(mut catalog) = self.catalog.write() else {
                        return false;
                    };
                    let hints = tools.iter().filter_map(|tool| {
                        let name = tool.get("name")?.as_str()?;
                        Some((name, tools::is_read_only(tool)))
                    });
                    let missing: Vec<String> = self
                        .policy
                        .check_against(hints)
                        .into_iter()
                        .filter_map(|finding| match finding {
                            PolicyFinding::Missing(name) => Some(name),
                            _ => None,
                        })
                        .collect();
                    if !missing.is_empty() {
                        tracing::warn!(missing = ?missing, "allowed tools are missing upstream; not ready");
                    }
                    self.metrics.tools_missing.set(missing.len() as i64);
                    let complete = missing.is_empty();
                    // Drift, fingerprint and metric labels cover the tools clients can see.
                    let exposed: Vec<Value> = tools
                        .iter()
                        .filter(|tool| {
                            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
                            self.policy.exposes(name, tools::is_read_only(tool))
                        })
                        .cloned()
                        .collect();
                    catalog.update(&exposed, self.probe.on_drift);
                    catalog.set_missing(missing);
                    self.metrics.set_tool_names(catalog.names());
                    let drifted = catalog.drifted().map(str::to_owned).collect::<Vec<_>>();
                    (drifted, complete)
                };
                let (drifted, complete) = drifted;
                self.metrics.tools_drifted.set(drifted.len() as i64);
                if !complete {
                    return false;
                }
                if drifted.is_empty() {
                    tracing::info!(tools = tools.len(), "upstream tools listed");
                } else {
                    tracing::warn!(tools = tools.len(), drifted = ?drifted, "upstream tools drifted from the baseline");
                }
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(error = %error, kind = error.kind(), "upstream tools probe failed");
                false
            }
            Err(_) => {
                tracing::warn!(
                    budget_ms = self.probe_budget.as_millis() as u64,
                    "upstream tools probe timed out"
                );
                false
            }
        }
    }
}

/// Resolves when a stdio child ended on its own (never for HTTP).
async fn child_exit(exits: &mut Option<watch::Receiver<u64>>) {
    if let Some(exits) = exits
        && exits.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// An error with its causes, `outer: inner: innermost`, for logs (never for metric labels).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Every tool the upstream lists, following `nextCursor` (at most [`MAX_TOOL_PAGES`] pages).
pub(crate) async fn list_tools(session: &UpstreamSession) -> Result<Vec<Value>, UpstreamError> {
    let mut tools = Vec::new();
    let mut cursor: Option<Value> = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let response = session.request("tools/list", params).await?;
        if let Some(error) = response.get("error") {
            return Err(UpstreamError::Malformed(format!(
                "tools/list failed: {error}"
            )));
        }
        let page = response
            .pointer("/result/tools")
            .and_then(Value::as_array)
            .ok_or_else(|| UpstreamError::Malformed("tools/list result has no tools".into()))?;
        tools.extend(page.iter().cloned());
        cursor = response.pointer("/result/nextCursor").cloned();
        if cursor.as_ref().is_none_or(Value::is_null) {
            return Ok(tools);
        }
    }
    Err(UpstreamError::Malformed(
        "tools/list pagination did not end".into(),
    ))
}
