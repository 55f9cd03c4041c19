//! The upstream side of the proxy: one long-lived upstream session, kept by a supervisor task
//! and shared by every caller.
//!
//! The supervisor opens the session at start-up, lists tools over that same session (never a
//! second session per call or per probe: README.md "Why it exists", failure 1), publishes it, and opens a new one
//! only after the upstream reports the old one unknown. Readiness is true while a session is
//! published and, unless the probe policy is `Never`, its tool list was obtained.

mod backoff;
pub mod control;
pub mod endpoint;
pub mod era;
mod error;
pub mod exposure;
pub mod http;
pub mod late_response;
pub mod listen;
pub mod param_headers;
mod resume;
pub mod session;
mod supervisor;
pub mod tools;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use berth_crds::{ToolsPolicySpec, ToolsProbePolicy, ToolsProbeSpec};
use serde_json::Value;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::observe::metrics::Metrics;
use crate::wire::jsonrpc::WireMessage;
pub use backoff::QUICK_FAILURE_WINDOW;
pub use endpoint::Endpoint;
pub use error::{UpstreamError, error_chain};
pub use http::{HttpUpstream, Reply};
pub use session::UpstreamSession;
use tools::Catalog;
pub use tools::list_tools;

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
    phase: watch::Sender<Phase>,
    refresh: Notify,
    check: Notify,
    catalog: RwLock<Catalog>,
    server_messages: mpsc::Sender<WireMessage>,
    metrics: Arc<Metrics>,
}

/// Why a caller got no upstream session (issue 12 item 1: the caller learns it from the one
/// handshake attempt it waited for, or at once while the supervisor backs off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// The handshake, or the caller's wait for one, ran out of `timeouts.connect` (a
    /// black-holed or silent upstream).
    TimedOut,
    /// The upstream failed the handshake sooner (refused, HTTP error, reset, bad reply), or lost
    /// its new sessions as soon as they were opened.
    Failed,
}

/// Where the supervisor is, as callers without a session see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A handshake is running or about to start: callers wait for its result.
    Connecting,
    /// A session is published (it may have been lost since; the supervisor then moves on).
    Up,
    /// The last attempt failed and the supervisor waits out its backoff: callers fail at once
    /// rather than wait for a later attempt.
    BackingOff(Unavailable),
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
    /// then closes the session (within 2 s). Messages the upstream sends on its standalone
    /// stream go to `server_messages`. A supervisor that gives up on a crash-looping stdio child
    /// cancels `stop_proxy` (field case BR-34). The returned task ends when the supervisor has
    /// closed the session: whoever shuts the proxy down waits for it, so the `DELETE` is sent
    /// before the process exits (issue 12, item 4).
    pub fn spawn(
        endpoint: Endpoint,
        settings: UpstreamSettings,
        metrics: Arc<Metrics>,
        server_messages: mpsc::Sender<WireMessage>,
        shutdown: CancellationToken,
        stop_proxy: CancellationToken,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
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
            phase: watch::channel(Phase::Connecting).0,
            refresh: Notify::new(),
            check: Notify::new(),
            server_messages,
            metrics,
        });
        let supervisor = tokio::spawn(Arc::clone(&upstream).supervise(shutdown, stop_proxy));
        (upstream, supervisor)
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

    /// The current session, or the result of the handshake the supervisor is running, waiting
    /// at most `budget`. `None` when no session could be had; [`Self::try_session`] says why.
    ///
    /// # Cancellation
    /// Cancel-safe. Waiting callers never drive or cancel the handshake: the supervisor alone
    /// runs it (single flight), so no caller's deadline can interrupt it.
    pub async fn session(&self, budget: Duration) -> Option<Arc<UpstreamSession>> {
        self.try_session(budget).await.ok()
    }

    /// The current session, or the result of the supervisor's handshake in progress (waiting at
    /// most `budget`). A failed attempt ends the wait, and while the supervisor backs off after
    /// one the answer is immediate: a caller fails as fast as the upstream does, never by
    /// sitting out the budget through the supervisor's retries (issue 12 item 1).
    ///
    /// # Errors
    /// [`Unavailable::TimedOut`] when the handshake or the wait ran out of time,
    /// [`Unavailable::Failed`] when the upstream failed it sooner.
    ///
    /// # Cancellation
    /// Cancel-safe, as [`Self::session`].
    pub async fn try_session(&self, budget: Duration) -> Result<Arc<UpstreamSession>, Unavailable> {
        if let Some(current) = self.current() {
            return Ok(current); // the common case: no timer, no subscription
        }
        self.next_session(None, budget).await
    }

    /// A session to replace `lost`: the current one if the supervisor already re-initialized,
    /// otherwise the result of the one handshake attempt the supervisor runs for the loss,
    /// waiting at most `budget`. Every caller that saw the loss shares that attempt, and its
    /// failure ends their wait at once (as does a supervisor already backing off), so a loss
    /// costs at most two upstream `initialize`s however many callers saw it (field case BR-03,
    /// issue 12 item 1).
    ///
    /// # Cancellation
    /// Cancel-safe; the handshake itself belongs to the supervisor.
    pub async fn recover(
        &self,
        lost: &Arc<UpstreamSession>,
        budget: Duration,
    ) -> Option<Arc<UpstreamSession>> {
        self.next_session(Some(lost), budget).await.ok()
    }

    /// A published session that is not lost and not `lost`, following the supervisor's phase:
    /// waits while it connects (or has yet to notice a loss), fails at once while it backs off.
    async fn next_session(
        &self,
        lost: Option<&Arc<UpstreamSession>>,
        budget: Duration,
    ) -> Result<Arc<UpstreamSession>, Unavailable> {
        let deadline = tokio::time::Instant::now() + budget;
        let mut phase = self.phase.subscribe();
        loop {
            // The phase is read before the session, so a change after this check wakes the wait.
            let seen = *phase.borrow_and_update();
            let replacement = self
                .current()
                .filter(|s| lost.is_none_or(|lost| !Arc::ptr_eq(s, lost)));
            if let Some(session) = replacement {
                return Ok(session);
            }
            if let Phase::BackingOff(why) = seen {
                return Err(why);
            }
            match tokio::time::timeout_at(deadline, phase.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Unavailable::Failed),
                Err(_) => return Err(Unavailable::TimedOut),
            }
        }
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

    /// The `Mcp-Param-*` headers the last listing declared for `tool` (empty when it declared
    /// none or the tool was never listed).
    pub fn param_headers(&self, tool: &str) -> Vec<param_headers::ParamHeader> {
        self.catalog
            .read()
            .map(|c| c.param_headers(tool).to_vec())
            .unwrap_or_default()
    }

    /// Whether the last tool listing names `tool`.
    pub fn lists(&self, tool: &str) -> bool {
        self.catalog
            .read()
            .is_ok_and(|c| c.names().any(|name| name == tool))
    }

    /// Whether the last listing annotated `tool` `readOnlyHint: true`.
    pub fn is_read_only(&self, tool: &str) -> bool {
        self.catalog.read().is_ok_and(|c| c.is_read_only(tool))
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
}
