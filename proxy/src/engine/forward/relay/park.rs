//! Parking a call on a legacy upstream's server request for a modern client
//! ([`crate::client::parked`]): the relay's side.

use std::collections::VecDeque;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::super::call::Call;
use crate::client::parked::{DIRECTION, Resume};
use crate::engine::server_request;
use crate::observe::metrics::Era;
use crate::transport::upstream::UpstreamError;
use crate::transport::upstream::control::{send_cancelled, send_in_background};
use crate::transport::upstream::late_response::LateResponse;
use crate::wire::jsonrpc::{self, WireMessage};
use crate::wire::outcome::Outcome;

/// Most upstream messages buffered while a call waits for its client's retry; past it the call
/// is given up (cancelled upstream).
const PARK_BUFFER: usize = 256;

/// How parking went.
pub(in crate::engine::forward) enum Parking {
    /// The request was answered upstream without the client (`ping`, or refused for a missing
    /// capability); the relay carries on with its `tx`.
    NotParked(mpsc::Sender<WireMessage>),
    /// The client retried: the call is now its retry's.
    Resumed(Box<Resume>),
    /// The call ended while parked (no retry within the budget, the upstream stream failed, or
    /// the client was gone); everything was recorded and the upstream told.
    Ended,
}

/// Where the relay's upstream input comes from while parked.
pub(in crate::engine::forward) struct Upstream<'a> {
    pub stream: &'a mut BoxStream<'static, Result<WireMessage, UpstreamError>>,
    pub late: &'a mut LateResponse,
    pub buffered: &'a mut VecDeque<WireMessage>,
    pub ended: &'a mut bool,
}

/// Handles the upstream's server request `message` (id `upstream_id`, method `method`) on a
/// modern client's call: parks the call and answers the client with an `input_required`
/// result on `tx` (then dropped), waits for the retry until `deadline`, and on the retry sends
/// the answer upstream and rebases `call` onto the retry.
pub(in crate::engine::forward) async fn park(
    call: &mut Call,
    message: WireMessage,
    upstream_id: Value,
    method: &str,
    tx: mpsc::Sender<WireMessage>,
    input: Upstream<'_>,
    deadline: tokio::time::Instant,
) -> Parking {
    let metrics = std::sync::Arc::clone(&call.engine.metrics);
    if method == "ping" {
        // No input for a person or a model: the proxy answers for its own hop.
        let pong = json!({ "jsonrpc": "2.0", "id": upstream_id, "result": {} });
        send_in_background(std::sync::Arc::clone(&call.upstream), pong);
        return Parking::NotParked(tx);
    }
    if !call.session.declares(method) {
        metrics
            .bridged_server_requests
            .with_label_values(&[DIRECTION, "refused"])
            .inc();
        server_request::refuse(
            &call.upstream,
            upstream_id,
            &metrics,
            "the client did not declare this capability",
        );
        return Parking::NotParked(tx);
    }
    call.input_rounds += 1;
    let key = format!("berth-{}", call.input_rounds);
    let owner = call
        .caller
        .as_deref()
        .map(crate::access::auth::Principal::identity);
    let (token, resumed) = call
        .engine
        .parked
        .park(&call.method, call.tool.as_deref(), owner);
    let mut request = json!({ "method": method });
    if let Some(params) = message.get("params") {
        request["params"] = params.clone();
    }
    let result = json!({
        "jsonrpc": "2.0",
        "id": call.downstream_id,
        "result": {
            "resultType": "input_required",
            "inputRequests": { key.clone(): request },
            "requestState": token,
        },
    });
    // This request of the client's is done: an `input_required` result.
    call.ending(Era::Modern).record(Outcome::Ok);
    call.session.finish(&call.downstream_id);
    call.finished = true;
    let delivered = tx.send(result.into()).await.is_ok();
    drop(tx);
    if !delivered {
        return give_up(call, &token, upstream_id, "unanswered");
    }
    metrics
        .bridged_server_requests
        .with_label_values(&[DIRECTION, "asked"])
        .inc();
    let mut resumed = resumed;
    let resume = loop {
        if input.buffered.len() > PARK_BUFFER {
            return give_up(call, &token, upstream_id, "unanswered");
        }
        tokio::select! {
            resume = &mut resumed => match resume {
                Ok(resume) => break resume,
                Err(_) => return give_up(call, &token, upstream_id, "unanswered"),
            },
            () = tokio::time::sleep_until(deadline) => {
                return give_up(call, &token, upstream_id, "unanswered");
            }
            message = input.late.recv() => input.buffered.push_back(message),
            next = input.stream.next(), if !*input.ended => match next {
                Some(Ok(message)) => input.buffered.push_back(message),
                Some(Err(_)) => return give_up(call, &token, upstream_id, "unanswered"),
                None if call.upstream.standalone_open() => *input.ended = true,
                None => return give_up(call, &token, upstream_id, "unanswered"),
            },
        }
    };
    metrics
        .bridged_server_requests
        .with_label_values(&[DIRECTION, "answered"])
        .inc();
    let answer = match resume.input_responses.get(&key) {
        Some(result) if result.is_object() => {
            json!({ "jsonrpc": "2.0", "id": upstream_id, "result": result })
        }
        _ => jsonrpc::error_response(
            &upstream_id,
            jsonrpc::INVALID_PARAMS,
            "the client's retry carried no answer to this request",
            None,
        ),
    };
    send_in_background(std::sync::Arc::clone(&call.upstream), answer);
    call.downstream_id = resume.downstream_id.clone();
    call.session = std::sync::Arc::clone(&resume.session);
    call.json_only = resume.json_only;
    call.progress_token = resume.progress_token.clone();
    call.facts = resume.facts.clone();
    call.started = std::time::Instant::now();
    call.finished = false;
    Parking::Resumed(Box::new(resume))
}

/// Ends a parked call without a retry: the state is forgotten, the upstream's request refused
/// and the upstream call cancelled. The client's request was recorded when it was answered.
fn give_up(call: &Call, token: &str, upstream_id: Value, result: &str) -> Parking {
    call.engine.parked.forget(token);
    call.engine
        .metrics
        .bridged_server_requests
        .with_label_values(&[DIRECTION, result])
        .inc();
    let refusal = jsonrpc::error_response(
        &upstream_id,
        jsonrpc::INTERNAL_ERROR,
        "the client did not answer in time",
        None,
    );
    send_in_background(std::sync::Arc::clone(&call.upstream), refusal);
    send_cancelled(
        std::sync::Arc::clone(&call.upstream),
        call.upstream_id,
        Outcome::Timeout,
    );
    Parking::Ended
}
