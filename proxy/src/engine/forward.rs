//! Forwarding one downstream JSON-RPC request over the upstream session.
//!
//! The request id is rewritten to an id unique on the upstream session and mapped back on the
//! way out, so two clients that both use id 1 each get exactly their own reply (README.md "Why it exists",
//! failure 2); a `_meta.progressToken` is rewritten the same way. The `timeouts.call` budget is
//! enforced here, outside the HTTP client (failure 4). A request the upstream refused because it
//! did not know the session provably never ran, so it is replayed once on the next session;
//! nothing else is ever replayed (failure 3). Every request ends in exactly one [`Outcome`],
//! recorded once, including when the client goes away mid-call (the `Call` drop guard).

mod call;
mod checks;
mod incoming;
mod input_required;
mod legacy_over_modern;
mod refusal;
mod relay;
mod resume;

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{Instrument as _, Span};

use crate::access::auth::Principal;
use crate::client::sessions::DownstreamSession;
use crate::engine::state::Engine;
use crate::observe::telemetry::spans;
use crate::transport::upstream::late_response::LateResponse;
use crate::transport::upstream::{Reply, UpstreamError, UpstreamSession};
use crate::wire::answer::Answer;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::outcome::Outcome;
use call::{Call, STREAM_BUFFER, rewrite, session_lost, timeout_answer, upstream_failure};
use checks::{Early, admit, answer_locally, before_upstream, tool_rules, upstream_session};
use incoming::Incoming;

pub use crate::client::parked;

/// The tool rules read the shared upstream's catalogue.
impl refusal::Catalogue for crate::transport::upstream::Upstream {
    fn exposes(&self, tool: &str) -> bool {
        self.exposes(tool)
    }

    fn is_read_only(&self, tool: &str) -> bool {
        self.is_read_only(tool)
    }

    fn lists(&self, tool: &str) -> bool {
        self.lists(tool)
    }

    fn is_drifted(&self, tool: &str) -> bool {
        self.is_drifted(tool)
    }
}

/// Forwards a downstream request and produces the client's answer: JSON, or an SSE stream when
/// the upstream streams its reply and the client accepts `text/event-stream`. For a client
/// whose `Accept` names only JSON (`json_only`), a streamed reply is collected into its final
/// response; the call's notifications are counted in `berth_proxy_server_messages_dropped_total`
/// and its server-to-client requests refused upstream at once (the client has no stream to
/// receive them on).
///
/// The steps, in order: `checks::admit` (shape, request id), a parked call's retry
/// (`resume::resume_parked`), `prepare` (an upstream session, the tool rules, local answers),
/// then `exchange`. A request answered before it goes upstream ends in `checks::Early::end`,
/// the one place such an outcome is recorded.
pub async fn request(
    engine: Arc<Engine>,
    session: Arc<DownstreamSession>,
    id: Value,
    method: String,
    body: WireMessage,
    json_only: bool,
    caller: Option<Arc<Principal>>,
) -> Answer {
    let request = Incoming::read(&engine, &session, id, method, body, json_only, caller);
    let in_flight = match admit(&session, &request) {
        Ok(in_flight) => in_flight,
        Err(refusal) => return Early::from(refusal).end(&engine, &request),
    };
    if let Some(state) = request.retry_state(&session) {
        return resume::resume_parked(&engine, session, request, in_flight.cancelled, &state).await;
    }
    match prepare(&engine, &session, &request).await {
        Ok(upstream) => {
            let deadline = request.deadline;
            let (call, body) = request.into_call(engine, session, upstream);
            exchange(call, body, in_flight.cancelled, deadline).await
        }
        Err(early) => {
            session.finish(&request.id);
            early.end(&engine, &request)
        }
    }
}

/// The steps between taking the request id and sending the request upstream: the checks that
/// need no upstream, the upstream session it goes over, the tool rules for a `tools/call`, and the answers the proxy gives
/// itself.
///
/// # Errors
/// The [`Early`] end of a request that does not go upstream.
async fn prepare(
    engine: &Engine,
    session: &DownstreamSession,
    request: &Incoming,
) -> Result<Arc<UpstreamSession>, Early> {
    before_upstream(engine, session, request)?;
    let upstream = upstream_session(engine, session).await?;
    if let Some(tool) = &request.tool {
        tool_rules(engine, session, &upstream, request, tool).await?;
    }
    answer_locally(engine, session, &upstream, request)?;
    Ok(upstream)
}

/// Sends the request upstream and answers with the reply; a request the upstream refused for
/// an unknown session provably never ran and is replayed once on the next session ([`recover`]);
/// every other failure ends the call with its outcome.
async fn exchange(
    mut call: Call,
    mut body: WireMessage,
    cancelled: tokio_util::sync::CancellationToken,
    deadline: tokio::time::Instant,
) -> Answer {
    let mut replayed = false;
    loop {
        call.upstream_id = call.upstream.next_request_id();
        call.attempt = spans::client(
            &call.method,
            call.tool.as_deref(),
            call.upstream_id,
            if replayed { 2 } else { 1 },
        );
        // Registered before the POST, so a response the upstream puts on its standalone stream
        // instead (issue 12, item 3) cannot arrive unawaited.
        let late = call.upstream.expect_response(call.upstream_id);
        rewrite(&mut body, &call);
        let sent = tokio::select! {
            () = cancelled.cancelled() => None,
            sent = tokio::time::timeout_at(
                deadline,
                call.upstream
                    .send_with(&body, call.session.param_headers())
                    .instrument(call.attempt.clone()),
            ) => Some(sent),
        };
        let reply = match sent {
            None => {
                let answer = Answer::cancelled(call.json_only);
                call.finish(Outcome::Cancelled);
                return answer;
            }
            Some(Err(_)) => return timeout_answer(call),
            Some(Ok(Err(UpstreamError::SessionLost))) if !replayed => {
                // The upstream refused the request because it did not know the session: it
                // provably never ran. Replay it once on the next session.
                replayed = true;
                spans::record_error(&call.attempt, Outcome::SessionLost.as_label());
                // The first attempt ends here, before the wait for the next session.
                call.attempt = Span::none();
                let reinitialize = spans::step(spans::Step::Reinitialize);
                match recover(&call, deadline).instrument(reinitialize).await {
                    Some(next) => {
                        call.engine.metrics.replays.inc();
                        call.upstream = next;
                        continue;
                    }
                    None => return session_lost(call),
                }
            }
            Some(Ok(Err(UpstreamError::SessionLost))) => return session_lost(call),
            Some(Ok(Err(error))) => return upstream_failure(call, &error),
            Some(Ok(Ok(reply))) => reply,
        };
        return answer_reply(call, reply, late, deadline, cancelled).await;
    }
}

/// The client's answer to the upstream's `reply`: JSON at once, or relayed as a stream.
async fn answer_reply(
    call: Call,
    reply: Reply,
    late: LateResponse,
    deadline: tokio::time::Instant,
    cancelled: tokio_util::sync::CancellationToken,
) -> Answer {
    match reply {
        // An input request for a legacy client: asked on a stream, like a server request.
        Reply::Json(response) if input_required::bridges(&call, &response) => {
            let stream = futures::stream::once(async { Ok(response) }).boxed();
            relay_reply(call, stream, late, deadline, cancelled).await
        }
        Reply::Json(response) => {
            let outcome = Outcome::of_response(&response);
            let response = call.finalize(response);
            call.finish(outcome);
            Answer::ok(response)
        }
        // A bodiless 202 for a request: the response can only come on the standalone
        // stream, so it is awaited like a stream that ended without it.
        Reply::Accepted if !call.upstream.standalone_open() => {
            let error = UpstreamError::Malformed("request answered with 202".into());
            upstream_failure(call, &error)
        }
        Reply::Accepted => {
            let stream = futures::stream::empty().boxed();
            relay_reply(call, stream, late, deadline, cancelled).await
        }
        Reply::Stream(stream) => relay_reply(call, stream, late, deadline, cancelled).await,
    }
}

/// Relays a streamed reply: as an SSE answer, or (`json_only`) collected into its final
/// response.
async fn relay_reply(
    call: Call,
    stream: BoxStream<'static, Result<WireMessage, UpstreamError>>,
    late: LateResponse,
    deadline: tokio::time::Instant,
    cancel: tokio_util::sync::CancellationToken,
) -> Answer {
    if call.json_only {
        // Only the final response (or the error that ends the call) is sent on `tx`;
        // nothing is sent when the client cancelled the call.
        // Spawned, not joined: a call parked for its modern client's retry keeps relaying
        // after the answer (an `input_required` result) went out. A client that goes away
        // drops `rx`, which the relay sees as a cancellation.
        let (tx, mut rx) = mpsc::channel(1);
        // The relay logs and retries under the request's span.
        let span = call.span.clone();
        tokio::spawn(relay::run(call, stream, late, tx, deadline, cancel).instrument(span));
        rx.recv()
            .await
            .map_or_else(|| Answer::cancelled(true), Answer::ok)
    } else {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        // The relay logs and retries under the request's span.
        let span = call.span.clone();
        tokio::spawn(relay::run(call, stream, late, tx, deadline, cancel).instrument(span));
        Answer::Stream(rx)
    }
}

/// A session to replace the lost one of `call`, waiting at most until `deadline` (and the
/// connect budget): the shared supervisor's next session, or the client's own re-handshake.
/// Either way one attempt per loss, shared by every caller that saw it; its failure ends the
/// wait at once (issue 12 item 1).
async fn recover(call: &Call, deadline: tokio::time::Instant) -> Option<Arc<UpstreamSession>> {
    let engine = &call.engine;
    match call.session.dedicated() {
        Some(dedicated) => {
            let deliver = crate::engine::fanout::to_client(
                Arc::downgrade(&call.session),
                Arc::clone(&engine.metrics),
            );
            dedicated
                .recover(&call.upstream, &engine.metrics, deliver)
                .await
        }
        None => {
            engine.upstream.report_lost(&call.upstream, "not_found");
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let budget = remaining.min(engine.connect_budget);
            engine.upstream.recover(&call.upstream, budget).await
        }
    }
}
