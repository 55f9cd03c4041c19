//! A modern upstream's `input_required` result, bridged for a legacy client (MCP 2026-07-28,
//! "Multi Round-Trip Requests"; issue 13). A legacy client knows no `input_required`: it is
//! asked each input request (sampling, elicitation, roots) as a server request on its call's
//! response stream, the way a legacy server would ask it, and once every answer is in, the
//! proxy retries the original request upstream with `inputResponses` and the upstream's
//! `requestState`, under a new upstream request id, as the revision's client would. The
//! client sees one call with server requests on its stream and one final result.
//!
//! Every round counts against the call's `timeouts.call` budget; after [`MAX_ROUNDS`] rounds
//! the call ends with an error (an upstream that never completes). A client that cannot be
//! asked (its `Accept` names only JSON, or it did not declare the capability the request needs)
//! gets a JSON-RPC error under its id, outcome `rejected`; each input request is counted in
//! `berth_proxy_bridged_server_requests_total{direction="to_legacy_client"}`.

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::call::{Call, rewrite};
use crate::client::sessions::ServerRequest;
use crate::transport::upstream::era::UpstreamEra;
use crate::transport::upstream::late_response::LateResponse;
use crate::transport::upstream::{Reply, UpstreamError};
use crate::wire::jsonrpc::WireMessage;

/// Requests on which a modern server may answer `input_required` ("Supported Requests").
pub const INPUT_METHODS: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];
/// Most rounds of input one call may take before the proxy gives up on the upstream.
pub const MAX_ROUNDS: u32 = 16;
/// The `direction` label of the bridged-server-request counter for this bridge.
const DIRECTION: &str = "to_legacy_client";

/// Whether the final response `message` of `call` is an `input_required` result the proxy
/// bridges: a modern upstream's, to a legacy client, on a method that may carry one.
pub fn bridges(call: &Call, message: &WireMessage) -> bool {
    call.retry_body.is_some()
        && call.upstream.era() == UpstreamEra::Modern
        && message.member_str(&["result", "resultType"]).as_deref() == Some("input_required")
}

/// The original request kept for the retries, when `method` over an upstream of `era` for a
/// client of the other era may need them.
pub fn retry_body(
    method: &str,
    era: UpstreamEra,
    client_is_modern: bool,
    body: &WireMessage,
) -> Option<WireMessage> {
    (era == UpstreamEra::Modern && !client_is_modern && INPUT_METHODS.contains(&method))
        .then(|| body.clone())
}

/// The retry's reply stream and its late-response registration: the relay carries on with them.
pub type Retried = (
    BoxStream<'static, Result<WireMessage, UpstreamError>>,
    LateResponse,
);

/// Why a round of input did not lead to a retry.
#[derive(Debug)]
pub enum Stop {
    /// The client went away or cancelled.
    Cancelled,
    /// The call's budget ran out.
    TimedOut,
    /// The client cannot be asked; the message says why.
    Refused(String),
    /// The client answered an input request with a JSON-RPC error (`error` object).
    ClientError(Value),
    /// The retry failed upstream.
    Upstream(UpstreamError),
}

/// One round: asks the client every input request of `result` on `tx`, waits for every
/// answer, and retries the request upstream with them. Returns the retry's reply stream and
/// its late-response registration; the relay carries on with them.
///
/// # Errors
/// [`Stop`] when the round could not complete; the caller ends the call with it.
pub async fn round(
    call: &mut Call,
    response: &Value,
    tx: &mpsc::Sender<WireMessage>,
    deadline: tokio::time::Instant,
    cancelled: &CancellationToken,
) -> Result<Retried, Stop> {
    call.input_rounds += 1;
    if call.input_rounds > MAX_ROUNDS {
        return Err(Stop::Refused(format!(
            "the upstream asked for input {MAX_ROUNDS} times without completing the request"
        )));
    }
    if call.json_only {
        return Err(refused(
            call,
            "the upstream needs input from the client, and a client whose Accept names only JSON cannot be asked".to_owned(),
        ));
    }
    let result = &response["result"];
    let requests = result
        .get("inputRequests")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut waiting = Vec::with_capacity(requests.len());
    for (key, request) in &requests {
        let method = request
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !call.session.accepts_server_request(method) {
            return Err(refused(
                call,
                format!(
                    "the upstream asks the client for {method:?}, a capability the client did not declare"
                ),
            ));
        }
        let (answer, answered) = oneshot::channel();
        let id = call
            .session
            .relay_server_request(ServerRequest::Input(answer));
        let mut message = json!({ "jsonrpc": "2.0", "id": id, "method": method });
        if let Some(params) = request.get("params") {
            message["params"] = params.clone();
        }
        if tx.send(message.into()).await.is_err() {
            return Err(Stop::Cancelled);
        }
        call.engine
            .metrics
            .bridged_server_requests
            .with_label_values(&[DIRECTION, "asked"])
            .inc();
        waiting.push((key.clone(), id, answered));
    }
    let mut responses = Map::new();
    for (key, id, answered) in waiting {
        let answer = tokio::select! {
            () = tx.closed() => Err(Stop::Cancelled),
            () = cancelled.cancelled() => Err(Stop::Cancelled),
            () = tokio::time::sleep_until(deadline) => Err(Stop::TimedOut),
            answer = answered => answer.map_err(|_| Stop::Cancelled),
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(stop) => {
                // Not answered: the registration goes, so a late answer is refused as unknown.
                let _ = call.session.take_server_request(&json!(id));
                call.engine
                    .metrics
                    .bridged_server_requests
                    .with_label_values(&[DIRECTION, "unanswered"])
                    .inc();
                return Err(stop);
            }
        };
        call.engine
            .metrics
            .bridged_server_requests
            .with_label_values(&[DIRECTION, "answered"])
            .inc();
        match (answer.get("result"), answer.get("error")) {
            (Some(result), _) => {
                responses.insert(key, result.clone());
            }
            (None, error) => return Err(Stop::ClientError(error.cloned().unwrap_or_default())),
        }
    }
    retry(
        call,
        &responses,
        result.get("requestState"),
        deadline,
        cancelled,
    )
    .await
}

fn refused(call: &Call, why: String) -> Stop {
    call.engine
        .metrics
        .bridged_server_requests
        .with_label_values(&[DIRECTION, "refused"])
        .inc();
    Stop::Refused(why)
}

/// Sends the original request again with `inputResponses` and the upstream's `requestState`
/// (echoed exactly, or left out when the upstream sent none: "Client Requirements").
async fn retry(
    call: &mut Call,
    responses: &Map<String, Value>,
    request_state: Option<&Value>,
    deadline: tokio::time::Instant,
    cancelled: &CancellationToken,
) -> Result<Retried, Stop> {
    let Some(mut body) = call.retry_body.clone() else {
        return Err(Stop::Refused("the request cannot be retried".to_owned()));
    };
    with_member(
        &mut body,
        "inputResponses",
        &Value::Object(responses.clone()),
    );
    if let Some(state) = request_state {
        with_member(&mut body, "requestState", state);
    }
    call.upstream_id = call.upstream.next_request_id();
    let late = call.upstream.expect_response(call.upstream_id);
    rewrite(&mut body, call);
    let sent = tokio::select! {
        () = cancelled.cancelled() => return Err(Stop::Cancelled),
        sent = tokio::time::timeout_at(deadline, call.upstream.send(&body)) => sent,
    };
    match sent {
        Err(_) => Err(Stop::TimedOut),
        Ok(Err(error)) => Err(Stop::Upstream(error)),
        Ok(Ok(Reply::Json(message))) => {
            Ok((futures::stream::once(async { Ok(message) }).boxed(), late))
        }
        Ok(Ok(Reply::Stream(stream))) => Ok((stream, late)),
        Ok(Ok(Reply::Accepted)) => Err(Stop::Upstream(UpstreamError::Malformed(
            "request answered with 202".into(),
        ))),
    }
}

/// Sets `params.<key>` of a request, adding the member when it is absent.
fn with_member(body: &mut WireMessage, key: &str, value: &Value) {
    if body.pointer(&format!("/params/{key}")).is_some() {
        body.set(&["params", key], value);
    } else if body.get("params").is_some_and(Value::is_object) {
        body.insert_member(&["params"], key, value);
    } else {
        body.insert_member(&[], "params", &json!({ key: value }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_member_adds_or_replaces_and_keeps_the_rest_byte_for_byte() {
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask","arguments":{"n":12345678901234567890}}}"#;
        let mut body = WireMessage::parse(text.as_bytes()).expect("parse");
        with_member(
            &mut body,
            "inputResponses",
            &json!({"q": {"action": "accept"}}),
        );
        with_member(&mut body, "requestState", &json!("s1"));
        with_member(&mut body, "requestState", &json!("s2"));
        assert_eq!(body.pointer("/params/requestState"), Some(&json!("s2")));
        assert_eq!(
            body.pointer("/params/inputResponses/q/action"),
            Some(&json!("accept"))
        );
        assert!(
            body.text()
                .contains(r#""arguments":{"n":12345678901234567890}"#)
        );
    }

    #[test]
    fn retry_body_is_kept_only_for_a_legacy_client_over_a_modern_upstream() {
        let body: WireMessage = json!({"jsonrpc":"2.0","id":1,"method":"tools/call"}).into();
        assert!(retry_body("tools/call", UpstreamEra::Modern, false, &body).is_some());
        assert!(retry_body("tools/call", UpstreamEra::Modern, true, &body).is_none());
        assert!(retry_body("tools/call", UpstreamEra::Legacy, false, &body).is_none());
        assert!(retry_body("tools/list", UpstreamEra::Modern, false, &body).is_none());
    }
}
