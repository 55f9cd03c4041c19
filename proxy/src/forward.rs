//! Forwarding one downstream JSON-RPC request over the shared upstream session.
//!
//! The request id is rewritten to an id unique on the upstream session and mapped back on the
//! way out, so two clients that both use id 1 each get exactly their own reply (DESIGN.md
//! failure 2); a `_meta.progressToken` is rewritten the same way. The `timeouts.call` budget is
//! enforced here, outside the HTTP client. Every request ends in exactly one [`Outcome`],
//! recorded once, including when the client goes away mid-call (the [`Call`] drop guard).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::answer::Answer;
use crate::jsonrpc::{self, Message};
use crate::outcome::Outcome;
use crate::server::Proxy;
use crate::sessions::DownstreamSession;
use crate::upstream::{Reply, UpstreamError, UpstreamSession};

/// Messages buffered per streamed response before the relay waits for the client to read.
const STREAM_BUFFER: usize = 32;
/// Budget for sending `notifications/cancelled` upstream; it never blocks a caller.
const CANCEL_BUDGET: Duration = Duration::from_secs(5);

/// One request in flight: ends in exactly one outcome, recorded once.
struct Call {
    proxy: Arc<Proxy>,
    session: Arc<DownstreamSession>,
    upstream: Arc<UpstreamSession>,
    downstream_id: Value,
    upstream_id: u64,
    method: String,
    tool: Option<String>,
    progress_token: Option<Value>,
    started: Instant,
    finished: bool,
}

impl Call {
    /// Records `outcome`, frees the request id, and tells the upstream to stop when the outcome
    /// means it may still be working.
    fn finish(mut self, outcome: Outcome) {
        self.end(outcome);
    }

    fn end(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let elapsed = self.started.elapsed();
        self.proxy
            .metrics
            .record(&self.method, self.tool.as_deref(), outcome, elapsed);
        self.session.finish(&self.downstream_id);
        tracing::debug!(
            mcp.session_id = self.session.id(),
            mcp.method = %self.method,
            mcp.request_id = %self.downstream_id,
            outcome = outcome.as_label(),
            elapsed_ms = elapsed.as_millis() as u64,
            "request finished"
        );
        if matches!(outcome, Outcome::Timeout | Outcome::Cancelled) {
            send_cancelled(Arc::clone(&self.upstream), self.upstream_id, outcome);
        }
    }

    /// Maps an upstream message of this call back to the client's ids; `None` for messages the
    /// client must not see.
    fn restore(&self, mut message: Value) -> Value {
        if message.get("id") == Some(&json!(self.upstream_id)) {
            message["id"] = self.downstream_id.clone();
        }
        if let Some(original) = &self.progress_token
            && let Some(token) = message.pointer_mut("/params/progressToken")
            && *token == progress_token_for(self.upstream_id)
        {
            *token = original.clone();
        }
        message
    }

    fn is_final(&self, message: &Value) -> bool {
        (message.get("result").is_some() || message.get("error").is_some())
            && message.get("id") == Some(&json!(self.upstream_id))
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // The client disconnected (or the handler was dropped) before an outcome.
        self.end(Outcome::Cancelled);
    }
}

fn progress_token_for(upstream_id: u64) -> Value {
    json!(format!("berth-{upstream_id}"))
}

fn send_cancelled(upstream: Arc<UpstreamSession>, upstream_id: u64, outcome: Outcome) {
    let reason = match outcome {
        Outcome::Timeout => "request timed out at the berth proxy",
        _ => "request cancelled by the client",
    };
    let message = json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": upstream_id, "reason": reason },
    });
    tokio::spawn(async move {
        let sent = tokio::time::timeout(CANCEL_BUDGET, upstream.send(&message)).await;
        if !matches!(sent, Ok(Ok(_))) {
            tracing::debug!(
                upstream_request_id = upstream_id,
                "failed to send notifications/cancelled upstream"
            );
        }
    });
}

/// Forwards a downstream request and produces the client's answer.
pub async fn request(
    proxy: Arc<Proxy>,
    session: Arc<DownstreamSession>,
    id: Value,
    method: String,
    mut body: Map<String, Value>,
) -> Answer {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + proxy.call_budget;
    let tool = (method == "tools/call")
        .then(|| body.get("params")?.get("name")?.as_str().map(str::to_owned))
        .flatten();
    let Some(upstream) = proxy.upstream.session(proxy.connect_budget).await else {
        proxy.metrics.record(
            &method,
            tool.as_deref(),
            Outcome::UpstreamUnavailable,
            started.elapsed(),
        );
        return Answer::error_with_data(
            StatusCode::OK,
            &id,
            jsonrpc::UPSTREAM_UNAVAILABLE,
            "upstream MCP server is unavailable",
            json!({ "outcome": Outcome::UpstreamUnavailable.as_label(), "retryable": true }),
        );
    };
    let upstream_id = upstream.next_request_id();
    let in_flight = match session.begin(&id, upstream_id) {
        Ok(in_flight) => in_flight,
        Err(duplicate) => {
            proxy.metrics.record(
                &method,
                tool.as_deref(),
                Outcome::Rejected,
                started.elapsed(),
            );
            return Answer::error(
                StatusCode::BAD_REQUEST,
                &id,
                jsonrpc::INVALID_REQUEST,
                &duplicate.to_string(),
            );
        }
    };
    let progress_token = body
        .get_mut("params")
        .and_then(|p| p.get_mut("_meta"))
        .and_then(|m| m.get_mut("progressToken"))
        .map(|token| std::mem::replace(token, progress_token_for(upstream_id)));
    body.insert("id".into(), json!(upstream_id));
    let call = Call {
        proxy: Arc::clone(&proxy),
        session,
        upstream: Arc::clone(&upstream),
        downstream_id: id,
        upstream_id,
        method,
        tool,
        progress_token,
        started,
        finished: false,
    };
    let message = Value::Object(body);
    let sent = tokio::select! {
        () = in_flight.cancelled.cancelled() => None,
        sent = tokio::time::timeout_at(deadline, upstream.send(&message)) => Some(sent),
    };
    match sent {
        None => {
            let answer = Answer::error(
                StatusCode::OK,
                &call.downstream_id,
                jsonrpc::REQUEST_CANCELLED,
                "request cancelled by the client",
            );
            call.finish(Outcome::Cancelled);
            answer
        }
        Some(Err(_)) => timeout_answer(call),
        Some(Ok(Err(error))) => upstream_failure(call, &error),
        Some(Ok(Ok(Reply::Json(response)))) => {
            let outcome = Outcome::of_response(&response);
            let response = call.restore(response);
            call.finish(outcome);
            Answer::ok(response)
        }
        Some(Ok(Ok(Reply::Accepted))) => {
            let error = UpstreamError::Malformed("request answered with 202".into());
            upstream_failure(call, &error)
        }
        Some(Ok(Ok(Reply::Stream(stream)))) => {
            let (tx, rx) = mpsc::channel(STREAM_BUFFER);
            tokio::spawn(relay(call, stream, tx, deadline, in_flight.cancelled));
            Answer::Stream(rx)
        }
    }
}

fn timeout_answer(call: Call) -> Answer {
    let answer = Answer::error_with_data(
        StatusCode::OK,
        &call.downstream_id,
        jsonrpc::REQUEST_TIMEOUT,
        "request timed out at the berth proxy",
        json!({ "outcome": Outcome::Timeout.as_label(), "timeoutMs": call.proxy.call_budget.as_millis() as u64 }),
    );
    call.finish(Outcome::Timeout);
    answer
}

fn upstream_failure(call: Call, error: &UpstreamError) -> Answer {
    let (outcome, code, message) = failure_of(error);
    if matches!(error, UpstreamError::SessionLost) {
        call.proxy.upstream.report_lost(&call.upstream);
    }
    tracing::warn!(
        mcp.session_id = call.session.id(),
        mcp.method = %call.method,
        mcp.request_id = %call.downstream_id,
        upstream_session_id = call.upstream.id().unwrap_or_default(),
        protocol_version = call.upstream.protocol_version(),
        error = %error,
        kind = error.kind(),
        "upstream request failed"
    );
    let answer = Answer::error_with_data(
        StatusCode::OK,
        &call.downstream_id,
        code,
        message,
        json!({ "outcome": outcome.as_label(), "retryable": true }),
    );
    call.finish(outcome);
    answer
}

fn failure_of(error: &UpstreamError) -> (Outcome, i64, &'static str) {
    match error {
        UpstreamError::SessionLost => (
            Outcome::SessionLost,
            jsonrpc::SESSION_LOST,
            "upstream session was lost; retry the request",
        ),
        _ => (
            Outcome::UpstreamUnavailable,
            jsonrpc::UPSTREAM_ERROR,
            "upstream MCP server failed to answer",
        ),
    }
}

/// Relays an upstream SSE response to the client until the final response, the deadline, the
/// client's cancellation, or the client going away.
async fn relay(
    call: Call,
    mut stream: BoxStream<'static, Result<Value, UpstreamError>>,
    tx: mpsc::Sender<Value>,
    deadline: tokio::time::Instant,
    cancelled: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            () = tx.closed() => return call.finish(Outcome::Cancelled),
            () = cancelled.cancelled() => return call.finish(Outcome::Cancelled),
            () = tokio::time::sleep_until(deadline) => {
                let Answer::Json { body, .. } = timeout_answer(call) else { return };
                let _ = tx.send(body).await;
                return;
            }
            next = stream.next() => next,
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(error)) => return send_failure(call, &error, &tx).await,
            None => {
                let error = UpstreamError::Malformed("stream ended before the response".into());
                return send_failure(call, &error, &tx).await;
            }
        };
        if call.is_final(&message) {
            let outcome = Outcome::of_response(&message);
            let message = call.restore(message);
            call.finish(outcome);
            let _ = tx.send(message).await;
            return;
        }
        match Message::classify(message.clone()) {
            Ok(Message::Notification { .. }) => {
                if tx.send(call.restore(message)).await.is_err() {
                    return call.finish(Outcome::Cancelled);
                }
            }
            Ok(Message::Request { id, method, .. }) => answer_server_request(&call, id, &method),
            _ => tracing::debug!("ignored unexpected message on upstream response stream"),
        }
    }
}

async fn send_failure(call: Call, error: &UpstreamError, tx: &mpsc::Sender<Value>) {
    if let Answer::Json { body, .. } = upstream_failure(call, error) {
        let _ = tx.send(body).await;
    }
}

/// Server-to-client requests are not routed to clients yet: the proxy declares no client
/// capabilities upstream, answers `ping` itself and refuses anything else at once so the
/// upstream never waits on an answer that cannot come.
fn answer_server_request(call: &Call, id: Value, method: &str) {
    let reply = if method == "ping" {
        json!({ "jsonrpc": "2.0", "id": id, "result": {} })
    } else {
        jsonrpc::error_response(
            &id,
            jsonrpc::METHOD_NOT_FOUND,
            "method not supported by the berth proxy",
            None,
        )
    };
    let upstream = Arc::clone(&call.upstream);
    tokio::spawn(async move {
        let _ = tokio::time::timeout(CANCEL_BUDGET, upstream.send(&reply)).await;
    });
}
