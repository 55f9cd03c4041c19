//! Relaying an upstream SSE response to the client: progress and other notifications of the
//! call, server-to-client requests (sampling, elicitation, roots) routed to the client that made
//! the call, and the final response with the client's id.

mod park;

use std::collections::VecDeque;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::call::{Call, timeout_answer, upstream_failure};
use super::input_required;
use crate::engine::server_request;
use crate::transport::upstream::UpstreamError;
use crate::transport::upstream::late_response::LateResponse;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::jsonrpc::{self, Message};
use crate::wire::outcome::Outcome;

/// Relays until the final response, the deadline, the client's cancellation, or the client
/// going away. With `timeouts.maxCall`, each `notifications/progress` of the call restarts the
/// `timeouts.call` budget, never past `maxCall` from receipt (issue 3, "Budgets").
pub(super) async fn run(
    mut call: Call,
    mut stream: BoxStream<'static, Result<WireMessage, UpstreamError>>,
    mut late: LateResponse,
    mut tx: mpsc::Sender<WireMessage>,
    mut deadline: tokio::time::Instant,
    mut cancelled: CancellationToken,
) {
    let budget = call.engine.call_budget;
    let cap = call.engine.max_call.map(|max| deadline - budget + max);
    // Once the reply stream ended without the response, only the standalone stream can still
    // bring it (issue 12, item 3), until the deadline.
    let mut ended = false;
    // Upstream messages that arrived while the call was parked for its client's retry.
    let mut buffered = VecDeque::new();
    loop {
        let next = if let Some(message) = buffered.pop_front() {
            Some(Ok(message))
        } else {
            tokio::select! {
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
            }
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
        if call.is_final(&message) && input_required::bridges(&call, &message) {
            match input_required::round(&mut call, &message, &tx, deadline, &cancelled).await {
                Ok((next, next_late)) => {
                    (stream, late, ended) = (next, next_late, false);
                    continue;
                }
                Err(stop) => return end_round(call, stop, &tx).await,
            }
        }
        if call.is_final(&message) {
            let outcome = Outcome::of_response(&message);
            let message = call.finalize(message);
            call.finish(outcome);
            let _ = tx.send(message).await;
            return;
        }
        if let Ok(Message::Request { id, method, .. }) = Message::classify(message.clone())
            && call.session.is_modern()
        {
            // A legacy upstream asks a modern client: parked as an `input_required` result.
            let input = park::Upstream {
                stream: &mut stream,
                late: &mut late,
                buffered: &mut buffered,
                ended: &mut ended,
            };
            match park::park(&mut call, message, id, &method, tx, input, deadline).await {
                park::Parking::NotParked(same) => tx = same,
                park::Parking::Resumed(resume) => {
                    tx = resume.tx;
                    cancelled = resume.cancelled;
                }
                park::Parking::Ended => return,
            }
            continue;
        }
        let forward = match Message::classify(message.clone()) {
            Ok(Message::Notification { method, .. }) => {
                if let Some(cap) = cap
                    && method == "notifications/progress"
                {
                    deadline = (tokio::time::Instant::now() + budget).min(cap);
                }
                if call.json_only {
                    call.engine.metrics.server_messages_dropped.inc();
                    None
                } else if method == "notifications/cancelled" {
                    // Of a server request the upstream sent this client: under the id the
                    // client knows it by, or not at all.
                    crate::engine::server_request::cancelled(&call.session, &call.upstream, message)
                } else {
                    Some(call.restore(message))
                }
            }
            Ok(Message::Request { id, .. }) if call.json_only => {
                server_request::refuse(
                    &call.upstream,
                    id,
                    &call.engine.metrics,
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

/// Ends a call whose round of input did not lead to a retry.
async fn end_round(call: Call, stop: input_required::Stop, tx: &mpsc::Sender<WireMessage>) {
    let answer = match stop {
        input_required::Stop::Cancelled => return call.finish(Outcome::Cancelled),
        input_required::Stop::TimedOut => timeout_answer(call),
        input_required::Stop::Upstream(error) => return send_failure(call, &error, tx).await,
        input_required::Stop::Refused(why) => {
            let answer = call.error(jsonrpc::UPSTREAM_ERROR, &why, Outcome::Rejected);
            call.finish(Outcome::Rejected);
            answer
        }
        input_required::Stop::ClientError(error) => {
            let message = jsonrpc::error_response(
                &call.downstream_id,
                error
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(jsonrpc::INTERNAL_ERROR),
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the client refused the upstream's input request"),
                error.get("data").cloned(),
            );
            call.finish(Outcome::RpcError);
            Answer::ok(message)
        }
    };
    if let Answer::Json { body, .. } = answer {
        let _ = tx.send(body).await;
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
    let metrics = &call.engine.metrics;
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
