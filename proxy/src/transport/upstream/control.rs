//! Messages the proxy itself sends upstream (cancellations, answers to server requests,
//! subscribes and unsubscribes), in the background: they never block a caller. The requests it
//! makes on its own for many URIs at once ([`OwnRequests`]) are bounded in flight
//! (`limits.maxProxyRequestsInFlight`, issue 39 item 4). Not responsible for: a client's request
//! (the call engine, `forward`, sends those and waits for their answers).

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use serde_json::json;
use tokio::sync::Semaphore;

use super::UpstreamSession;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::outcome::Outcome;

/// Budget for proxy-originated messages to the upstream (cancellations, answers to server
/// requests); they never block a caller.
const CONTROL_BUDGET: Duration = Duration::from_secs(5);

/// Tells the upstream that request `upstream_id` is abandoned (`notifications/cancelled`):
/// the call budget ran out ([`Outcome::Timeout`]) or the client went away.
pub fn send_cancelled(upstream: Arc<UpstreamSession>, upstream_id: u64, outcome: Outcome) {
    let reason = match outcome {
        Outcome::Timeout => "request timed out at the berth proxy",
        _ => "request cancelled by the client",
    };
    let message = json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": upstream_id, "reason": reason },
    });
    send_in_background(upstream, message);
}

/// Sends a proxy-originated message upstream without blocking anyone (bounded by
/// `CONTROL_BUDGET`, 5 s).
pub fn send_in_background(upstream: Arc<UpstreamSession>, message: impl Into<WireMessage>) {
    let message = message.into();
    tokio::spawn(async move {
        let sent = tokio::time::timeout(CONTROL_BUDGET, upstream.send(&message)).await;
        if !matches!(sent, Ok(Ok(_))) {
            tracing::debug!("failed to send a control message upstream");
        }
    });
}

/// The requests the proxy sends upstream on its own for its clients' subscriptions
/// (`resources/subscribe`, `resources/unsubscribe`): at most `max` in flight at once across
/// every caller, the rest waiting in order, each bounded by the control budget (5 s). Cheap to
/// clone (the permits and the gauge are shared).
#[derive(Clone, Debug)]
pub struct OwnRequests {
    permits: Arc<Semaphore>,
    in_flight: IntGauge,
}

impl Default for OwnRequests {
    /// 16 in flight, counted in a gauge no registry exports (unit tests).
    #[allow(clippy::expect_used)]
    fn default() -> Self {
        Self::new(
            16,
            IntGauge::new("unregistered_own_requests", "not exported").expect("valid metric"),
        )
    }
}

impl OwnRequests {
    /// At most `max` (at least 1) in flight; `in_flight` shows how many are
    /// (`berth_proxy_own_requests_in_flight`).
    pub fn new(max: usize, in_flight: IntGauge) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
            in_flight,
        }
    }

    /// Sends `messages` on `upstream` in the background, in order, each once a permit is free.
    /// Never blocks the caller; one task waits for the permits of the whole batch.
    pub fn send_all(&self, upstream: Arc<UpstreamSession>, messages: Vec<WireMessage>) {
        if messages.is_empty() {
            return;
        }
        let permits = Arc::clone(&self.permits);
        let in_flight = self.in_flight.clone();
        tokio::spawn(async move {
            for message in messages {
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    return;
                };
                let upstream = Arc::clone(&upstream);
                let in_flight = in_flight.clone();
                in_flight.inc();
                tokio::spawn(async move {
                    let sent = tokio::time::timeout(CONTROL_BUDGET, upstream.send(&message)).await;
                    if !matches!(sent, Ok(Ok(_))) {
                        tracing::debug!("failed to send a request of the proxy's own upstream");
                    }
                    in_flight.dec();
                    drop(permit);
                });
            }
        });
    }
}
