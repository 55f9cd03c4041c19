//! The chaos run's MCP client: one downstream session's `initialize`, calls, standalone stream
//! and `DELETE` over raw Streamable HTTP, and the verdict on every reply: answered (a result or
//! a JSON-RPC error under the request's own id), answered to the wrong client (an id, a payload
//! or a progress token that belongs to another call), or lost (no JSON-RPC response at all).

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::tally::Tally;

/// The protocol revision the client asks for and sends in `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Longest a POST may take before it counts as lost: well past every budget of the proxies the
/// run starts (`timeouts.call` and `timeouts.connect` of a few seconds).
pub const POST_DEADLINE: Duration = Duration::from_secs(30);

/// The tools of the upstream behind the proxy: a quick one that echoes the call's payload, and a
/// slow one that answers the payload after a short sleep (with progress where it can).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tools {
    /// The in-process fault upstream: `echo {message}`, and `slow {ms, steps, message}` with two
    /// progress notifications on the call's stream.
    Fault,
    /// `tests/peers/stdio/fault_child.py`: `echo {tag}`, and `sleep {ms, tag}`.
    FaultChild,
}

/// Milliseconds a slow call sleeps upstream.
const SLOW_MS: u64 = 20;

impl Tools {
    /// The `params` of a `tools/call` with `payload`; a slow call's progress token is
    /// `progress`.
    fn params(self, payload: &str, progress: Option<&str>) -> Value {
        match (self, progress) {
            (Self::Fault, None) => json!({"name": "echo", "arguments": {"message": payload}}),
            (Self::Fault, Some(token)) => json!({"name": "slow",
                "arguments": {"ms": SLOW_MS, "steps": 2, "message": payload},
                "_meta": {"progressToken": token}}),
            (Self::FaultChild, None) => json!({"name": "echo", "arguments": {"tag": payload}}),
            (Self::FaultChild, Some(_)) => {
                json!({"name": "sleep", "arguments": {"ms": SLOW_MS, "tag": payload}})
            }
        }
    }
}

/// What a request expects of its reply.
#[derive(Clone, Copy, Debug)]
pub struct Expect<'a> {
    /// The request's JSON-RPC id.
    pub id: &'a Value,
    /// The text the result carries (a call's payload); `None`: any result.
    pub payload: Option<&'a str>,
    /// The progress token of the request; every progress notification on its stream must
    /// carry it.
    pub progress: Option<&'a str>,
}

/// What one POST got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A result under the request's id, with the call's own payload.
    Result,
    /// A JSON-RPC error under the request's id, or under id `null` (which names no other call).
    Error {
        /// HTTP status of the reply.
        status: u16,
        /// `error.code`.
        code: i64,
        /// Whether the error's id was `null`.
        id_null: bool,
    },
    /// A reply that belongs to another call: another id, another call's payload, or progress
    /// under another progress token.
    WrongClient(String),
    /// No JSON-RPC response at all: a transport error, a timeout, an empty or non-JSON-RPC body.
    Lost(String),
}

/// A Streamable HTTP client of one proxy endpoint. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    tools: Tools,
}

impl Client {
    /// A client of the MCP endpoint `url` in front of an upstream with `tools`.
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn new(url: &str, tools: Tools) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(5))
            .build()?;
        Ok(Self {
            http,
            url: url.to_owned(),
            tools,
        })
    }

    fn post(&self, session: Option<&str>, body: String) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .timeout(POST_DEADLINE)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", PROTOCOL_VERSION);
        }
        request
    }

    /// Sends `initialize` under `id`; on a result, the `Mcp-Session-Id` it issued.
    pub async fn initialize(&self, id: &Value) -> (Verdict, Option<String>) {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "chaos_proxy", "version": "0"}}});
        let expect = Expect {
            id,
            payload: None,
            progress: None,
        };
        let (verdict, session, _) = self.exchange(None, body.to_string(), expect).await;
        match (verdict, session) {
            (Verdict::Result, None) => (
                Verdict::Lost("initialize without Mcp-Session-Id".into()),
                None,
            ),
            (verdict, session) => (verdict, session),
        }
    }

    /// Sends `notifications/initialized`; whether it was accepted (202).
    pub async fn initialized(&self, session: &str) -> bool {
        let body = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = self.post(Some(session), body.to_string()).send().await;
        response.is_ok_and(|r| r.status() == 202)
    }

    /// Calls the quick tool under `id` with `payload`, or with `slow` the slow one (with a
    /// progress token of its own); the verdict and the HTTP status (0 when none came).
    pub async fn call(
        &self,
        session: &str,
        id: &Value,
        payload: &str,
        slow: bool,
    ) -> (Verdict, u16) {
        let token = slow.then(|| format!("progress-{payload}"));
        let params = self.tools.params(payload, token.as_deref());
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let expect = Expect {
            id,
            payload: Some(payload),
            progress: token.as_deref(),
        };
        let (verdict, _, status) = self.exchange(Some(session), body.to_string(), expect).await;
        (verdict, status)
    }

    async fn exchange(
        &self,
        session: Option<&str>,
        body: String,
        expect: Expect<'_>,
    ) -> (Verdict, Option<String>, u16) {
        let response = match self.post(session, body).send().await {
            Ok(response) => response,
            Err(error) => return (Verdict::Lost(format!("send: {error}")), None, 0),
        };
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let issued = header("mcp-session-id");
        let streamed = header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
        let body: Result<(Vec<Value>, String), String> = if streamed {
            read_events(response).await.map_err(|e| e.to_string())
        } else {
            let text = response.text().await.map_err(|e| e.to_string());
            text.map(|text| {
                let messages = serde_json::from_str(&text).into_iter().collect();
                (messages, text)
            })
        };
        match body {
            Ok((messages, text)) => (judge(expect, status, &messages, &text), issued, status),
            Err(error) => (Verdict::Lost(format!("body: {error}")), None, status),
        }
    }

    /// Ends `session` with `DELETE`; the HTTP status, `None` when the request failed.
    pub async fn delete(&self, session: &str) -> Option<u16> {
        let request = self
            .http
            .delete(&self.url)
            .timeout(POST_DEADLINE)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", PROTOCOL_VERSION);
        Some(request.send().await.ok()?.status().as_u16())
    }

    /// Opens the session's standalone stream (`GET`); `None` unless it answered 200.
    pub async fn open_stream(&self, session: &str) -> Option<reqwest::Response> {
        let request = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", PROTOCOL_VERSION);
        let response = tokio::time::timeout(POST_DEADLINE, request.send()).await;
        response.ok()?.ok().filter(|r| r.status() == 200)
    }
}

/// The verdict on a reply to a request that expects `expect`: its HTTP `status`, the JSON-RPC
/// `messages` of its body and the body's `text` (to describe a loss).
pub fn judge(expect: Expect<'_>, status: u16, messages: &[Value], text: &str) -> Verdict {
    let own = expect.id;
    if let Some(token) = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| &m["params"]["progressToken"])
        .find(|token| expect.progress.is_none_or(|own| *token != own))
    {
        return Verdict::WrongClient(format!("request {own} got progress for token {token}"));
    }
    let responses: Vec<&Value> = messages.iter().filter(|m| is_response(m)).collect();
    if let Some(other) = responses
        .iter()
        .find(|r| r["id"] != *own && !r["id"].is_null())
    {
        return Verdict::WrongClient(format!("request {own} answered with id {}", other["id"]));
    }
    let response = match responses.as_slice() {
        [] => {
            let shown: String = text.chars().take(120).collect();
            return Verdict::Lost(format!("HTTP {status}, no JSON-RPC response: {shown:?}"));
        }
        [one] => *one,
        [..] => {
            return Verdict::WrongClient(format!(
                "request {own} got {} responses",
                responses.len()
            ));
        }
    };
    if let Some(error) = response.get("error") {
        return Verdict::Error {
            status,
            code: error["code"].as_i64().unwrap_or_default(),
            id_null: response["id"].is_null(),
        };
    }
    if response["id"].is_null() {
        return Verdict::WrongClient(format!("request {own} got a result with id null"));
    }
    let Some(payload) = expect.payload else {
        return Verdict::Result;
    };
    let text = &response["result"]["content"][0]["text"];
    if text != payload {
        return Verdict::WrongClient(format!("call {own} sent {payload:?}, got {text}"));
    }
    Verdict::Result
}

/// A response: an id and a `result` or an `error`.
fn is_response(message: &Value) -> bool {
    message.get("id").is_some()
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// The JSON messages of an SSE body, read to its end, and their data as text.
async fn read_events(
    response: reqwest::Response,
) -> Result<(Vec<Value>, String), sse_stream::Error> {
    let mut events = sse_stream::SseByteStream::new(response.bytes_stream());
    let (mut messages, mut text) = (Vec::new(), String::new());
    while let Some(event) = events.next().await {
        let Some(data) = event?.data else {
            continue;
        };
        if let Ok(message) = serde_json::from_str(&data) {
            messages.push(message);
        }
        text.push_str(&data);
    }
    Ok((messages, text))
}

/// Reads a standalone stream until it ends, counting in `tally` its notifications and every
/// response on it (a response belongs on the POST of its request, so one here was misrouted).
pub async fn read_stream(response: reqwest::Response, tally: &Tally) {
    let mut events = sse_stream::SseByteStream::new(response.bytes_stream());
    while let Some(Ok(event)) = events.next().await {
        let Some(message) = event
            .data
            .and_then(|d| serde_json::from_str::<Value>(&d).ok())
        else {
            continue;
        };
        if is_response(&message) {
            tally.record_misrouted(&message);
        } else {
            tally.stream_messages.add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(id: u64, payload: &str, status: u16, body: &str) -> Verdict {
        let messages: Vec<Value> = serde_json::from_str(body).into_iter().collect();
        let id = json!(id);
        let expect = Expect {
            id: &id,
            payload: Some(payload),
            progress: None,
        };
        judge(expect, status, &messages, body)
    }

    #[test]
    fn judge_result_with_own_id_and_payload_is_answered() {
        let body =
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"w1-c2"}]}}"#;
        assert_eq!(judged(7, "w1-c2", 200, body), Verdict::Result);
    }

    #[test]
    fn judge_another_id_payload_or_progress_token_is_wrong_client() {
        let other_id = r#"{"jsonrpc":"2.0","id":8,"result":{"content":[{"text":"w1-c2"}]}}"#;
        assert!(matches!(
            judged(7, "w1-c2", 200, other_id),
            Verdict::WrongClient(_)
        ));
        let other_payload = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"w2-c2"}]}}"#;
        assert!(matches!(
            judged(7, "w1-c2", 200, other_payload),
            Verdict::WrongClient(_)
        ));
        let id = json!("c1");
        let result: Value = serde_json::from_str(
            r#"{"jsonrpc":"2.0","id":"c1","result":{"content":[{"text":"p"}]}}"#,
        )
        .expect("json");
        let progress = |token: &str| {
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1}})
        };
        let expect = Expect {
            id: &id,
            payload: Some("p"),
            progress: Some("mine"),
        };
        let own = [progress("mine"), result.clone()];
        assert_eq!(judge(expect, 200, &own, ""), Verdict::Result);
        let other = [progress("theirs"), result];
        assert!(matches!(
            judge(expect, 200, &other, ""),
            Verdict::WrongClient(_)
        ));
    }

    #[test]
    fn judge_error_is_answered_and_no_response_is_lost() {
        let error = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}"#;
        assert_eq!(
            judged(7, "p", 404, error),
            Verdict::Error {
                status: 404,
                code: -32600,
                id_null: true
            }
        );
        assert!(matches!(judged(7, "p", 502, ""), Verdict::Lost(_)));
        let notification = r#"{"jsonrpc":"2.0","method":"notifications/message"}"#;
        assert!(matches!(
            judged(7, "p", 200, notification),
            Verdict::Lost(_)
        ));
    }
}
