//! Messages the proxy itself sends upstream (cancellations, answers to server requests,
//! unsubscribes), in the background: they never block a caller. Not responsible for: a client's
//! request (the call engine, `forward`, sends those and waits for their answers).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

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
