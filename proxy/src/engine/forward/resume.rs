//! A modern client's retry of a call the proxy parked ([`super::parked`]; MRTR bridging, issue
//! 13): the retry is handed to the parked call its `requestState` names, and the call's answer
//! goes to the retry from there.
//!
//! Not responsible for: parking a call (`relay::park`) or the checks every request passes first
//! (`checks::admit`).

use crate::wire::jsonrpc::Pointer as _;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::call::STREAM_BUFFER;
use super::checks::Early;
use super::incoming::Incoming;
use super::parked;
use super::refusal::Refusal;
use crate::access::auth::Principal;
use crate::client::sessions::DownstreamSession;
use crate::engine::state::Engine;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;
use crate::wire::outcome::Outcome;

/// Hands `retry` (its id already taken, `cancelled` its cancellation) to the parked call
/// `state` names. A state unknown here (expired, used, minted elsewhere) or minted for another
/// request is refused with -32602, outcome `rejected`.
pub(super) async fn resume_parked(
    engine: &Engine,
    session: Arc<DownstreamSession>,
    retry: Incoming,
    cancelled: CancellationToken,
    state: &str,
) -> Answer {
    let refuse = |message: &str| {
        session.finish(&retry.id);
        let refusal = Refusal::new(Outcome::Rejected, jsonrpc::INVALID_PARAMS, message);
        Early::Refused(refusal).end(engine, &retry)
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
        progress_token: retry.body.raw_member(&["params", "_meta", "progressToken"]),
        cancelled,
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
