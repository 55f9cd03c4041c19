//! The fault upstream's tools: their definitions and what one `tools/call` does, including the
//! messages a call sends on its own SSE stream before its result (progress, server-to-client
//! requests) and what happens when the client cancels it.

use std::time::Duration;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::http::{json_reply, stream_reply};
use super::{ANSWER_DEADLINE, FaultHandle, id_key};

/// JSON-RPC error code for a cancelled request (as the TypeScript SDK uses).
const REQUEST_CANCELLED: i64 = -32800;

/// The built-in tools, as `tools/list` lists them at start.
pub(super) fn definitions() -> Vec<Value> {
    let object = json!({"type": "object"});
    vec![
        json!({
            "name": "echo",
            "description": "Returns `message` as text.",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}},
                "required": ["message"]},
        }),
        json!({"name": "bad", "description": "Returns a result with isError: true.",
            "inputSchema": object}),
        json!({"name": "missing", "description": "Fails with JSON-RPC -32602.",
            "inputSchema": object}),
        json!({
            "name": "slow",
            "description": "Answers `message` (default `slept <ms> ms`) after `ms` milliseconds, with `steps` (default 3) progress notifications.",
            "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}, "steps": {"type": "integer"}, "message": {"type": "string"}}},
        }),
        json!({"name": "ask",
            "description": "Asks the client for sampling, elicitation and roots, in turn.",
            "inputSchema": object}),
    ]
}

/// One `tools/call` in progress.
struct Call {
    handle: FaultHandle,
    session: String,
    id: Value,
    name: String,
    arguments: Value,
    progress_token: Option<Value>,
    /// The call's SSE stream, when it streams.
    out: Option<mpsc::Sender<Value>>,
    cancel: CancellationToken,
}

/// Removes the call from the session's in-flight map however the call ends.
struct InFlight {
    handle: FaultHandle,
    session: String,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(session) = self.handle.lock().sessions.get_mut(&self.session) {
            session.in_flight.remove(&self.key);
        }
    }
}

/// Answers one `tools/call`: as JSON, or as an SSE stream when faults ask for SSE or the tool
/// sends messages before its result.
pub(super) async fn call(
    handle: FaultHandle,
    session: String,
    id: Value,
    params: Value,
) -> Response {
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    let progress_token = params["_meta"].get("progressToken").cloned();
    let cancel = CancellationToken::new();
    let (known, sse) = {
        let mut inner = handle.lock();
        let known = inner.tools.iter().any(|t| t["name"] == name.as_str());
        if let Some(state) = inner.sessions.get_mut(&session) {
            state.in_flight.insert(id_key(&id), cancel.clone());
        }
        (known, inner.faults.sse_replies)
    };
    let guard = InFlight {
        handle: handle.clone(),
        session: session.clone(),
        key: id_key(&id),
    };
    let streams = sse || name == "ask" || (name == "slow" && progress_token.is_some());
    let mut call = Call {
        handle,
        session,
        id,
        name,
        arguments: params.get("arguments").cloned().unwrap_or(json!({})),
        progress_token,
        out: None,
        cancel,
    };
    if !known {
        let message = format!("Tool {} not found", call.name);
        let reply = call.error(-32602, &message);
        call.finish();
        drop(guard);
        return json_reply(StatusCode::OK, &reply);
    }
    if !streams {
        let reply = call.run().await;
        call.finish();
        drop(guard);
        let reply = reply.unwrap_or_else(|| call.error(REQUEST_CANCELLED, "Request cancelled"));
        return json_reply(StatusCode::OK, &reply);
    }
    let (tx, rx) = mpsc::channel(16);
    call.out = Some(tx.clone());
    tokio::spawn(async move {
        let _guard = guard;
        let reply = call.run().await;
        call.finish();
        if let Some(reply) = reply {
            let _ = tx.send(reply).await;
        }
    });
    stream_reply(rx)
}

impl Call {
    /// Runs the tool; `None` when the client cancelled it.
    async fn run(&self) -> Option<Value> {
        match self.name.as_str() {
            "echo" => {
                let text = self.arguments["message"].as_str().unwrap_or_default();
                Some(self.result(json!({"content": [{"type": "text", "text": text}]})))
            }
            "bad" => Some(self.result(json!({
                "content": [{"type": "text", "text": "missing param"}], "isError": true,
            }))),
            "missing" => Some(self.error(-32602, "Invalid params: missing argument")),
            "slow" => self.slow().await,
            "ask" if self.arguments["cancel"] == json!(true) => self.ask_and_cancel().await,
            "ask" => self.ask().await,
            _ => {
                let text = self.arguments.to_string();
                Some(self.result(json!({"content": [{"type": "text", "text": text}]})))
            }
        }
    }

    /// Sleeps `arguments.ms` in `arguments.steps` (default 3) steps, sending progress after
    /// each when asked to; answers with `arguments.message`, else `slept <ms> ms`.
    async fn slow(&self) -> Option<Value> {
        let ms = self.arguments["ms"].as_u64().unwrap_or(0);
        let steps = self.arguments["steps"].as_u64().unwrap_or(3).max(1);
        let step = Duration::from_millis(ms / steps);
        for n in 1..=steps {
            tokio::select! {
                () = tokio::time::sleep(step) => {}
                () = self.cancel.cancelled() => return None,
            }
            if let Some(token) = &self.progress_token {
                self.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": n, "total": steps}}))
                    .await;
            }
        }
        let text = match self.arguments["message"].as_str() {
            Some(message) => message.to_owned(),
            None => format!("slept {ms} ms"),
        };
        Some(self.result(json!({"content": [{"type": "text", "text": text}]})))
    }

    /// Sends sampling, elicitation and roots requests in turn, each waiting for the client's
    /// answer (up to [`ANSWER_DEADLINE`]); the result carries the three answers.
    async fn ask(&self) -> Option<Value> {
        let sampling = json!({"messages": [{"role": "user",
            "content": {"type": "text", "text": "say hi"}}], "maxTokens": 10});
        let elicitation = json!({"message": "Pick a colour", "requestedSchema": {
            "type": "object", "properties": {"colour": {"type": "string"}}}});
        let mut answers = serde_json::Map::new();
        for (key, method, params) in [
            ("sampling", "sampling/createMessage", Some(sampling)),
            ("elicitation", "elicitation/create", Some(elicitation)),
            ("roots", "roots/list", None),
        ] {
            let answer = self.ask_client(method, params).await?;
            answers.insert(key.to_owned(), answer);
        }
        let answers = Value::Object(answers);
        Some(self.result(json!({
            "content": [{"type": "text", "text": answers.to_string()}],
            "structuredContent": answers,
        })))
    }

    /// `ask` with `{"cancel": true}`: sends `sampling/createMessage`, then 100 ms later
    /// `notifications/cancelled` for it on the call's stream, and answers the call with the
    /// text `asked and cancelled <request id>`. A late answer to the request is ignored.
    async fn ask_and_cancel(&self) -> Option<Value> {
        let request_id = {
            let mut inner = self.handle.lock();
            let session = inner.sessions.get_mut(&self.session)?;
            session.next_request += 1;
            json!(format!("up-{}", session.next_request))
        };
        self.send(
            json!({"jsonrpc": "2.0", "id": request_id, "method": "sampling/createMessage",
            "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                "maxTokens": 10}}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "no longer needed"}}),
        )
        .await;
        let text = format!("asked and cancelled {request_id}");
        Some(self.result(json!({"content": [{"type": "text", "text": text}]})))
    }

    /// One server-to-client request: the client's answer message, `Value::Null` when none came
    /// in time, `None` when the call was cancelled.
    async fn ask_client(&self, method: &str, params: Option<Value>) -> Option<Value> {
        let (tx, rx) = oneshot::channel();
        let request_id = {
            let mut inner = self.handle.lock();
            let session = inner.sessions.get_mut(&self.session)?;
            session.next_request += 1;
            let request_id = json!(format!("up-{}", session.next_request));
            session.pending.insert(id_key(&request_id), tx);
            request_id
        };
        let mut request = json!({"jsonrpc": "2.0", "id": request_id, "method": method});
        if let Some(params) = params {
            request["params"] = params;
        }
        self.send(request).await;
        tokio::select! {
            answer = tokio::time::timeout(ANSWER_DEADLINE, rx) => {
                Some(answer.ok().and_then(Result::ok).unwrap_or(Value::Null))
            }
            () = self.cancel.cancelled() => None,
        }
    }

    async fn send(&self, message: Value) {
        if let Some(out) = &self.out {
            let _ = out.send(message).await;
        }
    }

    fn result(&self, result: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id, "result": result})
    }

    fn error(&self, code: i64, message: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id, "error": {"code": code, "message": message}})
    }

    /// Counts the call against the session and forgets the session when its call budget
    /// ([`super::Faults::expire_after_calls`]) is spent.
    fn finish(&self) {
        let mut inner = self.handle.lock();
        let limit = inner.faults.expire_after_calls;
        let Some(session) = inner.sessions.get_mut(&self.session) else {
            return;
        };
        session.calls += 1;
        if limit.is_some_and(|limit| session.calls >= limit) {
            inner.sessions.remove(&self.session);
        }
    }
}
