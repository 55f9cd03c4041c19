//! Relaying an upstream SSE response to the client: progress and other notifications of the
//! call, server-to-client requests (sampling, elicitation, roots) routed to the client that made
//! the call, and the final response with the client's id.

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Call, timeout_answer, upstream_failure};
use crate::answer::Answer;
use crate::jsonrpc::Message;
use crate::jsonrpc::WireMessage;
use crate::outcome::Outcome;
use crate::server_request;
use crate::upstream::UpstreamError;
use crate::upstream::late_response::LateResponse;

/// Relays until the final response, the deadline, the client's cancellation, or the client
/// going away. With `timeouts.maxCall`, each `notifications/progress` of the call restarts the
/// `timeouts.call` budget, never past `maxCall` from receipt (issue 3, "Budgets").
pub(super) async fn run(
    call: Call,
    mut stream: BoxStream<'static, Result<WireMessage, UpstreamError>>,
    mut late: LateResponse,
    tx: mpsc::Sender<WireMessage>,
    mut deadline: tokio::time::Instant,
    cancelled: CancellationToken,
) {
    let budget = call.proxy.call_budget;
    let cap = call.proxy.max_call.map(|max| deadline - budget + max);
    // Once the reply stream ended without the response, only the standalone stream can still
    // bring it (issue 12, item 3), until the deadline.
    let mut ended = false;
    loop {
        let next = tokio::select! {
            () = tx.closed() => return call.finish(Outcome::Cancelled),
            () = cancelled.cancelled() => return call.finish(Outcome::Cancelled),
            () = tokio::time::sleep_until(deadline) => {
                if let Answer::Json { body, .. } = timeout_answer(call) {
                    let _ = tx.send(body).await;
                }
                return;
            }
            message = late.recv() => Some(Ok(message)),
            next = stream.next(), if !ended => next,
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(error)) => return send_failure(call, &error, &tx).await,
            None if call.upstream.standalone_open() => {
                ended = true;
                continue;
            }
            None => {
                let error = UpstreamError::Malformed("stream ended before the response".into());
                return send_failure(call, &error, &tx).await;
            }
        };
        if call.is_final(&message) {
            let outcome = Outcome::of_response(&message);
            let message = call.finalize(message);
            call.finish(outcome);
            let _ = tx.send(message).await;
            return;
        }
        let forward = match Message::classify(message.clone()) {
            Ok(Message::Notification { method, .. }) => {
                if let Some(cap) = cap
                    && method == "notifications/progress"
                {
                    deadline = (tokio::time::Instant::now() + budget).min(cap);
                }
                if call.json_only {
                    call.proxy.metrics.server_messages_dropped.inc();
                    None
                } else {
                    Some(call.restore(message))
                }
            }
            Ok(Message::Request { id, .. }) if call.json_only => {
                server_request::refuse(
                    &call.upstream,
                    id,
                    &call.proxy.metrics,
                    "the client accepts only JSON responses, so it cannot receive requests",
                );
                None
            }
            Ok(Message::Request { id, method, .. }) => server_request(&call, message, id, &method),
            _ => {
                tracing::debug!("ignored unexpected message on an upstream response stream");
                None
            }
        };
        if let Some(forward) = forward
            && tx.send(forward).await.is_err()
        {
            return call.finish(Outcome::Cancelled);
        }
    }
}

async fn send_failure(call: Call, error: &UpstreamError, tx: &mpsc::Sender<WireMessage>) {
    if let Answer::Json { body, .. } = upstream_failure(call, error) {
        let _ = tx.send(body).await;
    }
}

/// A server-to-client request that arrived on this call's stream goes to the client that made
/// the call; its answer is relayed back under the upstream's id (front, `Message::Response`).
fn server_request(
    call: &Call,
    message: WireMessage,
    upstream_id: Value,
    method: &str,
) -> Option<WireMessage> {
    let metrics = &call.proxy.metrics;
    let message = server_request::register(
        &call.session,
        &call.upstream,
        message,
        upstream_id,
        method,
        metrics,
    )?;
    server_request::delivered(metrics);
    Some(message)
}
