//! Server-to-client requests (sampling, elicitation, roots, ping) on their way to one client:
//! registered with that client's session under an id unique on it, or refused upstream at once
//! with -32601, so the upstream never waits until its own timeout (field case BR-27).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::client::sessions::{DownstreamSession, ServerRequest};
use crate::observe::metrics::Metrics;
use crate::transport::upstream::UpstreamSession;
use crate::transport::upstream::control::send_in_background;
use crate::wire::jsonrpc;
use crate::wire::jsonrpc::WireMessage;

/// Registers the upstream's request `message` (method `method`, id `upstream_id`) with `client`
/// and returns it under the client-side id; the client's answer goes back under `upstream_id`.
/// Returns `None`, after refusing upstream, when the client did not declare the capability.
pub fn register(
    client: &DownstreamSession,
    upstream: &Arc<UpstreamSession>,
    mut message: WireMessage,
    upstream_id: Value,
    method: &str,
    metrics: &Metrics,
) -> Option<WireMessage> {
    if !client.accepts_server_request(method) {
        refuse(
            upstream,
            upstream_id,
            metrics,
            "the client did not declare this capability",
        );
        return None;
    }
    let id = client.relay_server_request(ServerRequest::Upstream {
        upstream: Arc::clone(upstream),
        upstream_id,
    });
    message.set_id(&json!(id));
    Some(message)
}

/// The upstream's `notifications/cancelled` of a request it sent (`params.requestId`), as the
/// client that holds that request sees it: `requestId` is the client-side id, and the request
/// is no longer pending (a late answer gets 400 and nothing goes upstream). `None` when
/// `client` holds no request of `upstream` under that id: the notification means nothing to it.
pub fn cancelled(
    client: &DownstreamSession,
    upstream: &Arc<UpstreamSession>,
    mut message: WireMessage,
) -> Option<WireMessage> {
    let upstream_id = message.member_value(&["params", "requestId"])?;
    let client_id = client.cancel_server_request(upstream, &upstream_id)?;
    message
        .set(&["params", "requestId"], &client_id)
        .then_some(message)
}

/// Counts a registered request as delivered to its client.
pub fn delivered(metrics: &Metrics) {
    metrics
        .server_requests
        .with_label_values(&["relayed"])
        .inc();
}

/// Delivers a registered request on the client's standalone stream; when that stream is closed
/// or full, takes the registration back and refuses upstream.
pub fn push_standalone(
    client: &DownstreamSession,
    upstream: &Arc<UpstreamSession>,
    message: WireMessage,
    metrics: &Metrics,
) {
    let client_id = message["id"].clone();
    if client.push_standalone(message) {
        delivered(metrics);
    } else if let Some(ServerRequest::Upstream { upstream_id, .. }) =
        client.take_server_request(&client_id)
    {
        refuse(
            upstream,
            upstream_id,
            metrics,
            "the client has no open stream",
        );
    }
}

/// Answers the upstream's request `upstream_id` with -32601 at once, counted as refused.
pub fn refuse(upstream: &Arc<UpstreamSession>, upstream_id: Value, metrics: &Metrics, why: &str) {
    metrics
        .server_requests
        .with_label_values(&["refused"])
        .inc();
    let reply = jsonrpc::error_response(&upstream_id, jsonrpc::METHOD_NOT_FOUND, why, None);
    send_in_background(Arc::clone(upstream), reply);
}
