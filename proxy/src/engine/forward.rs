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
mod input_required;
mod legacy_over_modern;
mod refusal;
mod relay;

use crate::wire::jsonrpc::Pointer as _;
use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::{Instrument as _, Span};

use crate::access::auth::Principal;
use crate::client::audit::CallFacts;
use crate::client::sessions::DownstreamSession;
use crate::engine::state::Engine;
use crate::observe::metrics::Era;
use crate::observe::telemetry::spans;
use crate::transport::upstream::era::UpstreamEra;
use crate::transport::upstream::late_response::LateResponse;
use crate::transport::upstream::{Reply, UpstreamError, UpstreamSession};
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::outcome::Outcome;
use call::{Call, Ending, rewrite, session_lost, timeout_answer, upstream_failure};
use refusal::Refusal;

pub use crate::client::parked;

/// Messages buffered per streamed response before the relay waits for the client to read.
const STREAM_BUFFER: usize = 32;

/// A request the proxy answers itself: its outcome recorded once, then its answer under `id`.
fn refuse(ending: &Ending<'_>, id: &Value, refusal: Refusal) -> Answer {
    ending.record(refusal.outcome());
    refusal.into_answer(id)
}

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
pub async fn request(
    engine: Arc<Engine>,
    session: Arc<DownstreamSession>,
    id: Value,
    method: String,
    body: WireMessage,
    json_only: bool,
    caller: Option<Arc<Principal>>,
) -> Answer {
    let started = Instant::now();
    let era = session.era();
    let deadline = tokio::time::Instant::now() + engine.call_budget;
    // The server span the front opened for this request.
    let span = if crate::observe::telemetry::enabled() {
        Span::current()
    } else {
        Span::none()
    };
    let session_id = (!session.is_modern()).then(|| session.id());
    spans::record_session(&span, session_id, session.protocol_version());
    let tool = (method == "tools/call")
        .then(|| body.get("params")?.get("name")?.as_str().map(str::to_owned))
        .flatten();
    let facts = (method == "tools/call" && engine.auditor.is_on()).then(|| {
        let session_id = (!session.is_modern()).then(|| session.id());
        CallFacts::of(session_id, &id, caller.clone(), &body)
    });
    let ending = Ending {
        engine: &engine,
        method: &method,
        tool: tool.as_deref(),
        started,
        era,
        facts: facts.as_ref(),
        span: &span,
    };
    let shared = session.dedicated().is_none();
    if let Err(refusal) = refusal::shape(&method, tool.as_deref(), shared, &body) {
        return refuse(&ending, &id, refusal);
    }
    let in_flight = match session.begin(&id) {
        Ok(in_flight) => in_flight,
        Err(duplicate) => {
            let refusal = Refusal::new(
                Outcome::Rejected,
                jsonrpc::INVALID_REQUEST,
                duplicate.to_string(),
            )
            .plain(StatusCode::BAD_REQUEST);
            return refuse(&ending, &id, refusal);
        }
    };
    if session.is_modern()
        && let Some(state) = parked::retry_state(&body).map(str::to_owned)
    {
        let retry = Retry {
            id,
            method,
            tool,
            body,
            json_only,
            cancelled: in_flight.cancelled,
            started,
            caller,
            facts,
        };
        return resume_parked(&engine, session, retry, &state).await;
    }
    let upstream = match session.dedicated() {
        Some(dedicated) => Some(dedicated.current()),
        None => engine.upstream.session(engine.connect_budget).await,
    };
    let Some(upstream) = upstream else {
        session.finish(&id);
        // No upstream session: this downstream session cannot be served; end it so the client
        // starts over instead of collecting errors on a half-alive session (field case BR-04).
        engine.end_session(session.id());
        let refusal = Refusal::new(
            Outcome::UpstreamUnavailable,
            jsonrpc::UPSTREAM_UNAVAILABLE,
            "upstream MCP server is unavailable",
        )
        .with("retryable", json!(true));
        return refuse(&ending, &id, refusal);
    };
    if let Some(tool) = &tool {
        // PerCall policy: list over the same session first.
        engine.upstream.probe_before_call(&upstream).await;
        let rules = refusal::ToolRules {
            grants: engine.tool_grants.as_ref(),
            rate_limits: engine.rate_limits.as_ref(),
        };
        let checked = refusal::tool_rules(
            engine.upstream.as_ref(),
            &rules,
            tool,
            caller.as_deref(),
            session.id(),
        );
        if let Err(refusal) = checked {
            session.finish(&id);
            return refuse(&ending, &id, refusal);
        }
    }
    if upstream.era() == UpstreamEra::Modern
        && !session.is_modern()
        && let Some(local) = legacy_over_modern::answer(&session, &method, &body)
    {
        session.finish(&id);
        return match local {
            legacy_over_modern::Local::Result(result) => {
                ending.record(Outcome::Ok);
                Answer::ok(json!({ "jsonrpc": "2.0", "id": id, "result": result }))
            }
            legacy_over_modern::Local::Refused(code, message) => {
                refuse(&ending, &id, Refusal::new(Outcome::Rejected, code, message))
            }
        };
    }
    if let Some(answer) = crate::client::subscriptions::local_answer(
        &engine.subscriptions,
        &session,
        &upstream,
        &id,
        &method,
        &body,
    ) {
        session.finish(&id);
        ending.record(Outcome::Ok);
        return answer;
    }
    let progress_token = body.at("/params/_meta/progressToken").cloned();
    let retry_body =
        input_required::retry_body(&method, upstream.era(), session.is_modern(), &body);
    let call = Call {
        engine: Arc::clone(&engine),
        session,
        upstream,
        downstream_id: id,
        upstream_id: 0,
        method,
        tool,
        progress_token,
        json_only,
        started,
        finished: false,
        retry_body,
        input_rounds: 0,
        caller,
        facts,
        span,
        attempt: Span::none(),
    };
    exchange(call, body, in_flight.cancelled, deadline).await
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

/// A modern client's retry of a call the proxy parked ([`parked`]).
struct Retry {
    id: Value,
    method: String,
    tool: Option<String>,
    body: WireMessage,
    json_only: bool,
    cancelled: tokio_util::sync::CancellationToken,
    started: Instant,
    caller: Option<Arc<Principal>>,
    facts: Option<CallFacts>,
}

/// Hands `retry` to the parked call its `requestState` names; the call's answer goes to the
/// retry from there. A state unknown here (expired, used, minted elsewhere) or minted for
/// another request is refused with -32602, outcome `rejected`.
async fn resume_parked(
    engine: &Arc<Engine>,
    session: Arc<DownstreamSession>,
    retry: Retry,
    state: &str,
) -> Answer {
    let refuse = |message: &str| {
        session.finish(&retry.id);
        let ending = Ending {
            engine,
            method: &retry.method,
            tool: retry.tool.as_deref(),
            started: retry.started,
            era: Era::Modern,
            facts: retry.facts.as_ref(),
            span: &Span::current(),
        };
        ending.record(Outcome::Rejected);
        Answer::error_with_data(
            StatusCode::OK,
            &retry.id,
            jsonrpc::INVALID_PARAMS,
            message,
            json!({ "outcome": Outcome::Rejected.as_label() }),
        )
    };
    let owner = retry.caller.as_deref().map(Principal::identity);
    let Some(call) = engine.parked.take(state, owner.as_deref()) else {
        return refuse(
            "requestState is unknown or expired: a call waiting for input is kept once, for timeouts.call, by the proxy replica that asked",
        );
    };
    if call.method != retry.method || (retry.method == "tools/call" && call.name != retry.tool) {
        return refuse("requestState belongs to another request");
    }
    let input_responses = retry
        .body
        .at("/params/inputResponses")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let (tx, mut rx) = mpsc::channel(STREAM_BUFFER);
    let resume = parked::Resume {
        downstream_id: retry.id.clone(),
        session: Arc::clone(&session),
        tx,
        json_only: retry.json_only,
        progress_token: retry.body.at("/params/_meta/progressToken").cloned(),
        cancelled: retry.cancelled,
        input_responses,
        facts: retry.facts.clone(),
    };
    if call.resume.send(resume).is_err() {
        return refuse("the call waiting for this input has ended");
    }
    if retry.json_only {
        rx.recv()
            .await
            .map_or_else(|| Answer::cancelled(true), Answer::ok)
    } else {
        Answer::Stream(rx)
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
