//! The `PerClient` strategy for HTTP upstreams: each downstream session holds an upstream session
//! of its own, opened with the client's own `initialize` params, closed when the client's session
//! ends (DELETE or idle expiry), never left behind.
//!
//! Recovery is the shared strategy's, per client: on session loss one re-handshake with the
//! client's original `protocolVersion`, `capabilities` and `clientInfo` (field case BR-03), run
//! once for all of that client's concurrent callers, then a replay of the refused call. When
//! that one re-handshake fails, every caller that waited for it fails at once, and none of them
//! tries again (issue 12 item 1).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::observe::metrics::Metrics;
use crate::observe::telemetry::spans;
use crate::transport::upstream::listen::{self, Ended};
use crate::transport::upstream::session::Link;
use crate::transport::upstream::{Endpoint, UpstreamError, UpstreamSession};
use crate::wire::jsonrpc::WireMessage;

/// Server messages buffered between a dedicated upstream session and its client.
const BUFFER: usize = 64;
/// Budget for ending a client's upstream session (its `DELETE`).
const CLOSE_BUDGET: Duration = Duration::from_secs(2);

/// A downstream session's own upstream session.
#[derive(Debug)]
pub struct Dedicated {
    endpoint: Endpoint,
    params: Value,
    current: Mutex<Arc<UpstreamSession>>,
    /// Held while a re-handshake runs (single flight); holds the lost session whose one
    /// re-handshake failed, so the callers queued behind it fail instead of trying again.
    recovering: tokio::sync::Mutex<Option<Arc<UpstreamSession>>>,
    listening: Mutex<CancellationToken>,
    connect_budget: Duration,
}

impl Dedicated {
    /// Opens an upstream session with the client's `initialize` params within `connect_budget`.
    ///
    /// # Errors
    /// [`UpstreamError`] from the handshake; [`UpstreamError::Handshake`] when the budget ran out.
    pub async fn open(
        endpoint: Endpoint,
        params: Value,
        connect_budget: Duration,
    ) -> Result<Self, UpstreamError> {
        let session = handshake(&endpoint, &params, connect_budget).await?;
        Ok(Self {
            endpoint,
            params,
            current: Mutex::new(session),
            recovering: tokio::sync::Mutex::new(None),
            listening: Mutex::new(CancellationToken::new()),
            connect_budget,
        })
    }

    /// The current upstream session.
    pub fn current(&self) -> Arc<UpstreamSession> {
        Arc::clone(&self.current.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Starts relaying the upstream session's standalone stream: `deliver` is handed the
    /// session and the receiver of its messages, and starts what delivers them to the client
    /// ([`crate::engine::fanout::to_client`]).
    pub fn listen(&self, deliver: impl FnOnce(Arc<UpstreamSession>, mpsc::Receiver<WireMessage>)) {
        let stop = CancellationToken::new();
        let previous = std::mem::replace(
            &mut *self.listening.lock().unwrap_or_else(|e| e.into_inner()),
            stop.clone(),
        );
        previous.cancel();
        let (sink, messages) = mpsc::channel(BUFFER);
        let session = self.current();
        deliver(Arc::clone(&session), messages);
        tokio::spawn(async move {
            if listen::listen(Arc::clone(&session), stop, sink).await == Ended::Lost {
                session.mark_lost();
            }
        });
    }

    /// A session to replace `lost`: the current one if another caller already recovered,
    /// otherwise one new handshake (single flight per client), shared by every caller that saw
    /// the loss; `deliver` as for [`Self::listen`]. `None` when it failed, for the caller that
    /// ran it and at once for the callers that waited for it: one re-handshake per loss, never
    /// one per caller.
    ///
    /// # Cancellation
    /// Cancel-safe: a cancelled caller abandons its handshake, and the next caller in line
    /// runs one.
    pub async fn recover(
        &self,
        lost: &Arc<UpstreamSession>,
        metrics: &Metrics,
        deliver: impl FnOnce(Arc<UpstreamSession>, mpsc::Receiver<WireMessage>),
    ) -> Option<Arc<UpstreamSession>> {
        let mut failed = self.recovering.lock().await;
        let current = self.current();
        if !Arc::ptr_eq(&current, lost) && !current.is_lost() {
            return Some(current);
        }
        lost.mark_lost();
        // From here `current` is the lost session: the caller's, or one lost since.
        if failed.as_ref().is_some_and(|f| Arc::ptr_eq(f, &current)) {
            return None;
        }
        if current.claim_report() {
            metrics
                .upstream_session_losses
                .with_label_values(&["not_found"])
                .inc();
        }
        match handshake(&self.endpoint, &self.params, self.connect_budget).await {
            Ok(session) => {
                metrics
                    .upstream_initializations
                    .with_label_values(&["ok"])
                    .inc();
                *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&session);
                self.listen(deliver);
                Some(session)
            }
            Err(error) => {
                metrics
                    .upstream_initializations
                    .with_label_values(&["error"])
                    .inc();
                tracing::warn!(error = %error, kind = error.kind(), "per-client upstream re-initialization failed");
                *failed = Some(current);
                None
            }
        }
    }

    /// Ends the upstream session (`DELETE`, or for stdio stopping the child, in the
    /// background) and stops listening.
    pub fn close(&self) {
        self.listening
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancel();
        let session = self.current();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CLOSE_BUDGET, session.close()).await;
        });
    }
}

/// On shutdown, ends every client's HTTP upstream session in `sessions` (`PerClient`,
/// each [`Dedicated::current`]), all at once and within 2 s, so none is left open upstream
/// (issue 12, item 4). Stdio children are stopped by the stdio shutdown instead.
///
/// # Cancellation
/// Cancel-safe: dropping it abandons the `DELETE`s still in flight.
pub async fn close_all(sessions: Vec<Arc<UpstreamSession>>) {
    let sessions: Vec<_> = sessions
        .into_iter()
        .filter(|session| matches!(session.link(), Link::Http(..)))
        .collect();
    if sessions.is_empty() {
        return;
    }
    let closes = futures::future::join_all(sessions.iter().map(|session| session.close()));
    if tokio::time::timeout(CLOSE_BUDGET, closes).await.is_err() {
        tracing::warn!(
            budget_ms = CLOSE_BUDGET.as_millis() as u64,
            "closing client upstream sessions timed out; the upstream keeps them until it expires them"
        );
    }
}

async fn handshake(
    endpoint: &Endpoint,
    params: &Value,
    budget: Duration,
) -> Result<Arc<UpstreamSession>, UpstreamError> {
    // On expiry the handshake future is dropped; for stdio that stops the child (BR-13).
    let span = spans::step(spans::Step::Handshake);
    let handshake =
        UpstreamSession::handshake(endpoint, Some(params.clone())).instrument(span.clone());
    let result = match tokio::time::timeout(budget, handshake).await {
        Ok(result) => result.map(Arc::new),
        Err(_) => Err(UpstreamError::Handshake(format!(
            "upstream handshake took longer than {budget:?}"
        ))),
    };
    if let Err(error) = &result {
        spans::record_error(&span, error.kind());
    }
    result
}
