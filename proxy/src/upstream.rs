//! The upstream side of the proxy: one long-lived upstream session, kept by a supervisor task
//! and shared by every caller.
//!
//! The supervisor opens the session at start-up, lists tools over that same session (never a
//! second session per call or per probe: DESIGN.md failure 1), publishes it, and opens a new one
//! only after the upstream reports the old one unknown. Readiness is true while a session is
//! published and, unless the probe policy is `Never`, its tool list was obtained.

pub mod http;
pub mod session;

use std::sync::Arc;
use std::time::Duration;

use berth_crds::{ToolsProbePolicy, ToolsProbeSpec};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
pub use http::{HttpUpstream, Reply};
pub use session::UpstreamSession;

/// Most `tools/list` pages the probe follows before giving up on a cursor loop.
const MAX_TOOL_PAGES: usize = 100;
/// First wait after a failed handshake; doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between handshake attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

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
}

impl UpstreamError {
    /// Bounded kind label: `config`, `encode`, `send`, `read`, `session_lost`, `status`,
    /// `malformed`, `handshake`.
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
        }
    }
}

/// The shared upstream: the current session (if any) and readiness.
pub struct Upstream {
    http: HttpUpstream,
    connect_budget: Duration,
    probe: ToolsProbeSpec,
    probe_budget: Duration,
    current: watch::Sender<Option<Arc<UpstreamSession>>>,
    ready: watch::Sender<bool>,
    lost: Notify,
    metrics: Arc<Metrics>,
}

impl Upstream {
    /// Creates the upstream and starts its supervisor, which runs until `shutdown` fires and
    /// then closes the session.
    ///
    /// `connect_budget` bounds each handshake; `probe_budget` bounds each tool listing.
    pub fn spawn(
        http: HttpUpstream,
        connect_budget: Duration,
        probe: ToolsProbeSpec,
        probe_budget: Duration,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let upstream = Arc::new(Self {
            http,
            connect_budget,
            probe,
            probe_budget,
            current: watch::channel(None).0,
            ready: watch::channel(false).0,
            lost: Notify::new(),
            metrics,
        });
        tokio::spawn(Arc::clone(&upstream).supervise(shutdown));
        upstream
    }

    /// Whether the proxy can serve: a session is up and, unless the policy is `Never`, tools
    /// were listed.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// The current session, waiting at most `budget` for one to be established.
    ///
    /// # Errors
    /// `None` when no session was available within `budget`.
    ///
    /// # Cancellation
    /// Cancel-safe.
    pub async fn session(&self, budget: Duration) -> Option<Arc<UpstreamSession>> {
        let mut rx = self.current.subscribe();
        let wait = rx.wait_for(|s| s.as_ref().is_some_and(|s| !s.is_lost()));
        match tokio::time::timeout(budget, wait).await {
            Ok(Ok(session)) => session.clone(),
            _ => None,
        }
    }

    /// Reports that the upstream forgot `session`; the supervisor opens a new one. Reports
    /// about a session that was already replaced are ignored.
    pub fn report_lost(&self, session: &Arc<UpstreamSession>) {
        let is_current = self
            .current
            .borrow()
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, session));
        if is_current {
            self.lost.notify_one();
        }
    }

    async fn supervise(self: Arc<Self>, shutdown: CancellationToken) {
        let mut backoff = MIN_BACKOFF;
        loop {
            let attempt = tokio::select! {
                () = shutdown.cancelled() => break,
                attempt = self.establish() => attempt,
            };
            let Some(session) = attempt else {
                let wait = tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(backoff) => backoff,
                };
                backoff = (wait * 2).min(MAX_BACKOFF);
                continue;
            };
            backoff = MIN_BACKOFF;
            let stopping = tokio::select! {
                () = shutdown.cancelled() => true,
                () = self.hold(&session) => false,
            };
            self.ready.send_replace(false);
            self.metrics.upstream_ready.set(0);
            self.current.send_replace(None);
            if stopping {
                session.close().await;
                break;
            }
            self.metrics.upstream_session_losses.inc();
            tracing::warn!(upstream = %self.http.url(), "upstream session lost; re-initializing");
        }
    }

    /// One handshake within the connect budget, then the first tools probe. Publishes the
    /// session as soon as the handshake completed; readiness follows the probe.
    async fn establish(&self) -> Option<Arc<UpstreamSession>> {
        let handshake = UpstreamSession::handshake(self.http.clone());
        let session = match tokio::time::timeout(self.connect_budget, handshake).await {
            Ok(Ok(session)) => Arc::new(session),
            Ok(Err(error)) => {
                self.metrics
                    .upstream_initializations
                    .with_label_values(&["error"])
                    .inc();
                tracing::warn!(upstream = %self.http.url(), error = %error, kind = error.kind(), "upstream handshake failed");
                return None;
            }
            Err(_) => {
                self.metrics
                    .upstream_initializations
                    .with_label_values(&["timeout"])
                    .inc();
                tracing::warn!(upstream = %self.http.url(), budget_ms = self.connect_budget.as_millis() as u64, "upstream handshake timed out");
                return None;
            }
        };
        self.metrics
            .upstream_initializations
            .with_label_values(&["ok"])
            .inc();
        tracing::info!(
            upstream = %self.http.url(),
            protocol_version = session.protocol_version(),
            "upstream session initialized"
        );
        self.current.send_replace(Some(Arc::clone(&session)));
        if self.probe.policy == ToolsProbePolicy::Never || self.probe_tools(&session).await {
            self.ready.send_replace(true);
            self.metrics.upstream_ready.set(1);
        }
        Some(session)
    }

    /// Holds the session until it is reported lost, re-probing on the `Interval` policy.
    async fn hold(&self, session: &Arc<UpstreamSession>) {
        let interval = self.probe.interval().unwrap_or(Duration::from_secs(300));
        loop {
            let not_ready = !self.is_ready();
            let reprobe = self.probe.policy == ToolsProbePolicy::Interval || not_ready;
            let wait = if not_ready { MAX_BACKOFF } else { interval };
            tokio::select! {
                () = self.lost.notified() => return,
                () = tokio::time::sleep(wait), if reprobe => {
                    let listed = self.probe_tools(session).await;
                    if session.is_lost() {
                        return;
                    }
                    self.ready.send_replace(listed);
                    self.metrics.upstream_ready.set(i64::from(listed));
                }
            }
        }
    }

    /// Lists every tool over `session` (following cursors) and records the names for metric
    /// labels. Returns whether the listing succeeded within the probe budget.
    async fn probe_tools(&self, session: &UpstreamSession) -> bool {
        let listing = tokio::time::timeout(self.probe_budget, list_tools(session)).await;
        match listing {
            Ok(Ok(names)) => {
                tracing::info!(tools = names.len(), "upstream tools listed");
                self.metrics
                    .set_tool_names(names.iter().map(String::as_str));
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(error = %error, kind = error.kind(), "upstream tools probe failed");
                if matches!(error, UpstreamError::SessionLost) {
                    self.lost.notify_one();
                }
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

/// Every tool name the upstream lists, following `nextCursor` (at most [`MAX_TOOL_PAGES`]).
async fn list_tools(session: &UpstreamSession) -> Result<Vec<String>, UpstreamError> {
    let mut names = Vec::new();
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
        let tools = response
            .pointer("/result/tools")
            .and_then(Value::as_array)
            .ok_or_else(|| UpstreamError::Malformed("tools/list result has no tools".into()))?;
        names.extend(
            tools
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str))
                .map(str::to_owned),
        );
        cursor = response.pointer("/result/nextCursor").cloned();
        if cursor.as_ref().is_none_or(Value::is_null) {
            return Ok(names);
        }
    }
    Err(UpstreamError::Malformed(
        "tools/list pagination did not end".into(),
    ))
}
