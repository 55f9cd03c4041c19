//! Messages the upstream sends on its standalone stream (not tied to a client's request),
//! delivered to clients' standalone GET streams.
//!
//! - `notifications/tools/list_changed` re-lists tools over the same session and reaches every
//!   client, as do the other list-changed kinds and `notifications/message` (field case BR-26).
//! - `notifications/resources/updated` reaches the clients subscribed to that URI.
//! - A server-to-client request goes to the only client when there is exactly one and it
//!   declared the capability; otherwise the upstream gets -32601 at once and
//!   `berth_proxy_server_requests_total{result="refused"}` moves.
//! - The upstream's `notifications/cancelled` of a server request it sent reaches the client
//!   that holds the request, under the id that client knows it by, and the request is no longer
//!   pending; one that names no relayed request is dropped (its id means nothing to clients).
//! - On every new upstream session, resource subscriptions are re-established.
//! - A dedicated (`PerClient`) upstream session's messages reach its one client ([`to_client`]).

use std::sync::{Arc, Weak};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::client::sessions::DownstreamSession;
use crate::client::sessions::Sessions;
use crate::client::subscriptions::Subscriptions;
use crate::engine::server_request;
use crate::observe::metrics::Metrics;
use crate::transport::upstream::{Upstream, UpstreamSession};
use crate::wire::jsonrpc::Message;
use crate::wire::jsonrpc::WireMessage;

/// What the fan-out reads: the shared upstream, the client sessions and their resource
/// subscriptions, the metrics.
pub struct Fanout {
    /// The shared upstream: its standalone stream's sessions and tool list.
    pub upstream: Arc<Upstream>,
    /// The client sessions messages go to.
    pub sessions: Arc<Sessions>,
    /// Which clients are subscribed to which resource.
    pub subscriptions: Arc<Subscriptions>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
}

/// Runs until `shutdown` fires or the upstream's message channel closes.
pub async fn run(
    fanout: Fanout,
    mut messages: mpsc::Receiver<WireMessage>,
    shutdown: CancellationToken,
) {
    let mut sessions = fanout.upstream.watch_sessions();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            message = messages.recv() => match message {
                Some(message) => dispatch(&fanout, message),
                None => return,
            },
            changed = sessions.changed() => {
                if changed.is_err() {
                    return;
                }
                let session = sessions.borrow_and_update().clone();
                if let Some(session) = session {
                    resubscribe(&fanout, &session);
                }
            }
        }
    }
}

fn dispatch(fanout: &Fanout, message: WireMessage) {
    match Message::classify(message.clone()) {
        Ok(Message::Notification { method, body }) => match method.as_str() {
            "notifications/resources/updated" => {
                let uri = body
                    .get("params")
                    .and_then(|p| p.get("uri"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                for id in fanout.subscriptions.subscribers(uri) {
                    if let Some(session) = fanout.sessions.get_quiet(&id) {
                        deliver(fanout, &session, message.clone());
                    }
                }
            }
            "notifications/cancelled" => {
                // Of a server request the upstream sent: to the client that holds it.
                let Some(upstream) = fanout.upstream.current() else {
                    return;
                };
                let mapped = fanout.sessions.all().into_iter().find_map(|session| {
                    server_request::cancelled(&session, &upstream, message.clone())
                        .map(|message| (session, message))
                });
                match mapped {
                    Some((session, message)) => deliver(fanout, &session, message),
                    None => tracing::debug!("ignored a cancellation of no relayed server request"),
                }
            }
            "notifications/progress" => {
                tracing::debug!(mcp.method = %crate::observe::escaped::Escaped(&method), "ignored a call notification on the standalone stream");
            }
            _ => {
                if method == "notifications/tools/list_changed" {
                    fanout.upstream.refresh_tools();
                }
                for session in fanout.sessions.all() {
                    deliver(fanout, &session, message.clone());
                }
            }
        },
        Ok(Message::Request { id, method, .. }) => server_request(fanout, message, id, &method),
        Ok(Message::Response { .. }) => {
            let routed = fanout
                .upstream
                .current()
                .is_some_and(|session| session.route_response(message).is_ok());
            late_response(&fanout.metrics, routed);
        }
        Err(_) => tracing::debug!("ignored a malformed message on the standalone stream"),
    }
}

/// Counts a response that arrived on the standalone stream (issue 12, item 3).
pub(crate) fn late_response(metrics: &Metrics, routed: bool) {
    let result = if routed { "routed" } else { "unmatched" };
    metrics
        .standalone_responses
        .with_label_values(&[result])
        .inc();
    if !routed {
        tracing::debug!("dropped a response on the standalone stream that no call is waiting for");
    }
}

fn deliver(fanout: &Fanout, session: &DownstreamSession, message: WireMessage) {
    if !session.push_standalone(message) {
        fanout.metrics.server_messages_dropped.inc();
    }
}

fn server_request(fanout: &Fanout, message: WireMessage, upstream_id: Value, method: &str) {
    let Some(upstream) = fanout.upstream.current() else {
        return;
    };
    let metrics = &fanout.metrics;
    // Modern clients' listen streams carry no server requests (MCP 2026-07-28).
    let legacy: Vec<_> = fanout
        .sessions
        .all()
        .into_iter()
        .filter(|session| !session.is_modern())
        .collect();
    match legacy.as_slice() {
        [only] => {
            if let Some(message) =
                server_request::register(only, &upstream, message, upstream_id, method, metrics)
            {
                server_request::push_standalone(only, &upstream, message, metrics);
            }
        }
        _ => server_request::refuse(
            &upstream,
            upstream_id,
            metrics,
            "no single client of the berth proxy can answer this request",
        ),
    }
}

fn resubscribe(fanout: &Fanout, session: &Arc<crate::transport::upstream::UpstreamSession>) {
    if session.era() == crate::transport::upstream::era::UpstreamEra::Modern {
        // The new session's listen stream carries them.
        for uri in fanout.subscriptions.uris() {
            session.set_listen_uri(&uri, true);
        }
        return;
    }
    let messages = fanout
        .subscriptions
        .uris()
        .into_iter()
        .map(|uri| {
            WireMessage::from(json!({
                "jsonrpc": "2.0",
                "id": session.next_request_id(),
                "method": "resources/subscribe",
                "params": { "uri": uri },
            }))
        })
        .collect();
    fanout.subscriptions.send_all(Arc::clone(session), messages);
}

/// What delivers a dedicated (`PerClient`) upstream session's standalone messages to `client`,
/// for [`crate::client::per_client::Dedicated::listen`]: spawns `deliver_dedicated`.
pub fn to_client(
    client: Weak<DownstreamSession>,
    metrics: Arc<Metrics>,
) -> impl FnOnce(Arc<UpstreamSession>, mpsc::Receiver<WireMessage>) {
    move |upstream, messages| {
        tokio::spawn(deliver_dedicated(client, upstream, messages, metrics));
    }
}

/// Delivers one dedicated (`PerClient`) session's standalone messages to its client:
/// notifications to the client's GET stream, server requests relayed if the client declared the
/// capability (else -32601 upstream at once).
async fn deliver_dedicated(
    client: Weak<DownstreamSession>,
    upstream: Arc<UpstreamSession>,
    mut messages: mpsc::Receiver<WireMessage>,
    metrics: Arc<Metrics>,
) {
    while let Some(message) = messages.recv().await {
        let Some(client) = client.upgrade() else {
            return;
        };
        match Message::classify(message.clone()) {
            Ok(Message::Request { id, method, .. }) => {
                if let Some(message) =
                    server_request::register(&client, &upstream, message, id, &method, &metrics)
                {
                    server_request::push_standalone(&client, &upstream, message, &metrics);
                }
            }
            Ok(Message::Notification { method, .. }) => {
                let message = if method == "notifications/cancelled" {
                    match server_request::cancelled(&client, &upstream, message) {
                        Some(message) => message,
                        None => continue,
                    }
                } else {
                    message
                };
                let delivered = client.push_standalone(message);
                if !delivered {
                    metrics.server_messages_dropped.inc();
                }
            }
            Ok(Message::Response { .. }) => {
                late_response(&metrics, upstream.route_response(message).is_ok());
            }
            _ => {}
        }
    }
}
