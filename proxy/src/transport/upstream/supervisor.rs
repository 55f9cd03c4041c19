//! The supervisor task of [`Upstream`]: opens the upstream session (with backoff), probes its
//! tools over that same session, holds it while it lives (liveness pings, a stdio child's exit,
//! a loss reported by a caller), and opens the next one only after the loss.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use berth_crds::{PolicyFinding, ToolsProbePolicy};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::observe::escaped::Escaped;

use super::backoff::{MAX_BACKOFF, MIN_BACKOFF, QUICK_FAILURE_WINDOW};
use super::tools::list_tools;
use super::{
    Phase, Unavailable, Upstream, UpstreamError, UpstreamSession, error_chain, listen, tools,
};
use crate::observe::telemetry::spans;

/// How often the supervisor pings an idle upstream session, so a dead upstream takes the proxy
/// out of readiness even when no client is calling (README.md "Why it exists", failure 5).
const LIVENESS_INTERVAL: Duration = Duration::from_secs(10);
/// Budget for ending the upstream session on shutdown; shutdown never waits longer.
const CLOSE_BUDGET: Duration = Duration::from_secs(2);
impl Upstream {
    pub(super) async fn supervise(
        self: Arc<Self>,
        shutdown: CancellationToken,
        stop_proxy: CancellationToken,
    ) {
        let mut backoff = MIN_BACKOFF;
        let mut quick_failures = 0u32;
        let mut quick_losses = 0u32;
        let mut first = true;
        loop {
            if let Some(stdio) = self.endpoint.stdio().filter(|_| !first) {
                stdio.metrics().restarts.inc();
            }
            first = false;
            self.phase.send_replace(Phase::Connecting);
            let attempt = tokio::select! {
                () = shutdown.cancelled() => break,
                attempt = self.establish() => attempt,
            };
            let session = match attempt {
                Ok(session) => session,
                Err(why) => {
                    // Callers waiting for this attempt fail now, later ones at once until the
                    // next attempt, which the backoff paces (issue 12 item 1).
                    self.phase.send_replace(Phase::BackingOff(why));
                    if self.quick_failure(&mut quick_failures, &stop_proxy)
                        || pause(backoff, &shutdown).await.is_break()
                    {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
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
                if tokio::time::timeout(CLOSE_BUDGET, session.close())
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        budget_ms = CLOSE_BUDGET.as_millis() as u64,
                        "upstream session close timed out; the upstream keeps it until it expires"
                    );
                }
                break;
            }
            tracing::warn!(upstream = %self.endpoint, "upstream session lost; re-initializing");
            let stable = held_since.elapsed() >= QUICK_FAILURE_WINDOW;
            if stable {
                // The next session learns the era again: the server may have restarted as
                // another version (MCP 2026-07-28, "Versioning": the era is cached for the
                // server process). A failed handshake or a quick loss keeps what the probe
                // found, so a crash-looping child is not probed (and started twice) each time.
                self.endpoint.era().forget();
            }
            if self.endpoint.stdio().is_none() {
                // A session held for a while, or the first one in a row lost soon after its
                // handshake, is re-initialized at once; a run of quick losses is an upstream
                // that loses every new session, paced by the backoff (callers fail at once
                // meanwhile) instead of re-initialized as fast as it answers.
                quick_losses = if stable { 0 } else { quick_losses + 1 };
                if let Some(wait) = quick_loss_backoff(quick_losses) {
                    self.phase
                        .send_replace(Phase::BackingOff(Unavailable::Failed));
                    if pause(wait, &shutdown).await.is_break() {
                        break;
                    }
                }
                continue;
            }
            // Its own child ended, or a client's did: readiness waits for a fresh child to
            // complete initialize and tools/list again (field cases BR-07, BR-34).
            session.close().await;
            if session.is_lost() && session.claim_report() {
                self.metrics
                    .upstream_session_losses
                    .with_label_values(&["exited"])
                    .inc();
            }
            if !session.is_lost() || stable {
                quick_failures = 0;
                backoff = MIN_BACKOFF;
                continue;
            }
            self.phase
                .send_replace(Phase::BackingOff(Unavailable::Failed));
            if self.quick_failure(&mut quick_failures, &stop_proxy)
                || pause(backoff, &shutdown).await.is_break()
            {
                break;
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Counts one quick failure of a stdio child; past `max_quick_failures` in a row, gives up:
    /// stops the proxy (`stop_proxy`) and returns true. HTTP upstreams never give up.
    fn quick_failure(&self, count: &mut u32, stop_proxy: &CancellationToken) -> bool {
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
        stop_proxy.cancel();
        true
    }

    /// One handshake within the connect budget, then the first tools probe. Publishes the
    /// session only after the handshake completed (so no caller sees it half-initialized);
    /// readiness follows the probe.
    async fn establish(&self) -> Result<Arc<UpstreamSession>, Unavailable> {
        let span = spans::step(spans::Step::Handshake);
        let handshake = UpstreamSession::handshake(&self.endpoint, None).instrument(span.clone());
        // On expiry the handshake future is dropped: its HTTP exchange is abandoned, nothing of
        // it stays behind.
        let session = match tokio::time::timeout(self.connect_budget, handshake).await {
            Ok(Ok(session)) => Arc::new(session),
            Ok(Err(error)) => {
                spans::record_error(&span, error.kind());
                self.metrics
                    .upstream_initializations
                    .with_label_values(&["error"])
                    .inc();
                tracing::warn!(upstream = %self.endpoint, error = %Escaped(&error_chain(&error)), kind = error.kind(), "upstream handshake failed");
                self.set_last_error(Some(error_chain(&error)));
                return Err(Unavailable::Failed);
            }
            Err(_) => {
                spans::record_error(&span, "timeout");
                self.metrics
                    .upstream_initializations
                    .with_label_values(&["timeout"])
                    .inc();
                tracing::warn!(upstream = %self.endpoint, budget_ms = self.connect_budget.as_millis() as u64, "upstream handshake timed out");
                self.set_last_error(Some(format!(
                    "upstream handshake took longer than timeouts.connect ({} ms)",
                    self.connect_budget.as_millis()
                )));
                return Err(Unavailable::TimedOut);
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
            era = session.era().as_label(),
            "upstream session initialized"
        );
        self.current.send_replace(Some(Arc::clone(&session)));
        self.phase.send_replace(Phase::Up);
        if self.probe.policy == ToolsProbePolicy::Never || self.probe_tools(&session).await {
            self.set_ready(true);
        }
        if session.is_lost() {
            self.report_lost(&session, "probe");
        }
        Ok(session)
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

    /// Pings the upstream over `session` within the connect budget (`server/discover` for a
    /// modern upstream, whose revision has no `ping`). A session the upstream forgot, or an
    /// upstream that does not answer, is reported lost (`not_found` or `unreachable`) and
    /// `false` returned.
    async fn is_reachable(&self, session: &Arc<UpstreamSession>) -> bool {
        let method = match session.era() {
            super::era::UpstreamEra::Legacy => "ping",
            super::era::UpstreamEra::Modern => "server/discover",
        };
        let ping = tokio::time::timeout(self.connect_budget, session.request(method, json!({})));
        let reason = match ping.await {
            Ok(Ok(_)) => return true,
            Ok(Err(UpstreamError::SessionLost)) => "not_found",
            Ok(Err(error)) => {
                tracing::warn!(upstream = %self.endpoint, error = %Escaped(&error_chain(&error)), "upstream unreachable");
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
    pub(super) async fn probe_tools(&self, session: &UpstreamSession) -> bool {
        let span = spans::step(spans::Step::ToolsProbe);
        let listing = tokio::time::timeout(
            self.probe_budget,
            list_tools(session).instrument(span.clone()),
        )
        .await;
        let result = match &listing {
            Ok(Ok(_)) => "ok",
            Ok(Err(_)) => "error",
            Err(_) => "timeout",
        };
        if result != "ok" {
            spans::record_error(&span, result);
        }
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

/// Waits `wait` before the next handshake attempt; breaks when `shutdown` fires first.
async fn pause(wait: Duration, shutdown: &CancellationToken) -> ControlFlow<()> {
    tokio::select! {
        () = shutdown.cancelled() => ControlFlow::Break(()),
        () = tokio::time::sleep(wait) => ControlFlow::Continue(()),
    }
}

/// How long the supervisor waits before re-initializing after the `quick_losses`-th HTTP
/// session in a row lost within [`QUICK_FAILURE_WINDOW`] of its handshake: not at all for the
/// first (an expiry soon after start-up is recovered at once), then [`MIN_BACKOFF`] doubling
/// up to [`MAX_BACKOFF`], so an upstream that loses every new session is not re-initialized as
/// fast as it answers (issue 12 item 1). `None` for no wait.
fn quick_loss_backoff(quick_losses: u32) -> Option<Duration> {
    let doublings = quick_losses.checked_sub(2)?.min(16);
    Some((MIN_BACKOFF * 2u32.pow(doublings)).min(MAX_BACKOFF))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_loss_backoff_first_loss_is_at_once_then_doubles_to_the_cap() {
        assert_eq!(quick_loss_backoff(0), None, "a stable session");
        assert_eq!(quick_loss_backoff(1), None, "the first quick loss");
        assert_eq!(quick_loss_backoff(2), Some(MIN_BACKOFF));
        assert_eq!(quick_loss_backoff(3), Some(MIN_BACKOFF * 2));
        assert_eq!(quick_loss_backoff(4), Some(MIN_BACKOFF * 4));
        assert_eq!(quick_loss_backoff(8), Some(MAX_BACKOFF));
        assert_eq!(quick_loss_backoff(u32::MAX), Some(MAX_BACKOFF));
    }
}
