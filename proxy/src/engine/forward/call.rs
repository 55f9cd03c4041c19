//! A request in flight (`Call`): its ids on both sides, its end recorded exactly once (the
//! `Ending`: metrics, audit line, span), and the answers that end it on a timeout, a lost
//! session or an upstream failure. The steps of a request's life (`forward`, `relay`,
//! `input_required`) share it. Not responsible for: deciding what to send upstream or when
//! (the steps do).

use crate::wire::jsonrpc::Pointer as _;
use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tracing::Span;

use crate::access::auth::Principal;
use crate::client::audit::CallFacts;
use crate::client::sessions::DownstreamSession;
use crate::engine::state::Engine;
use crate::observe::escaped::Escaped;
use crate::observe::metrics::Era;
use crate::observe::telemetry::spans;
use crate::transport::upstream::control::send_cancelled;
use crate::transport::upstream::era::{self, UpstreamEra};
use crate::transport::upstream::{UpstreamError, UpstreamSession};
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::outcome::Outcome;

/// Messages buffered per streamed response before the relay waits for the client to read.
pub(super) const STREAM_BUFFER: usize = 32;

/// One request in flight: ends in exactly one outcome, recorded once.
pub(super) struct Call {
    pub(super) engine: Arc<Engine>,
    pub(super) session: Arc<DownstreamSession>,
    pub(super) upstream: Arc<UpstreamSession>,
    pub(super) downstream_id: Value,
    pub(super) upstream_id: u64,
    pub(super) method: String,
    pub(super) tool: Option<String>,
    /// The client's `_meta.progressToken` as it wrote it (given back byte for byte).
    pub(super) progress_token: Option<Box<RawValue>>,
    /// The client's `Accept` excludes `text/event-stream`: a streamed upstream reply is
    /// collected and answered as one JSON response.
    pub(super) json_only: bool,
    pub(super) started: Instant,
    pub(super) finished: bool,
    /// The original request, kept for the retries of an `input_required` result bridged for a
    /// legacy client ([`super::input_required`]); `None` when no bridge can apply.
    pub(super) retry_body: Option<WireMessage>,
    /// Rounds of input bridged so far.
    pub(super) input_rounds: u32,
    /// The OAuth caller, for its tool grants (`tools.grants`).
    pub(super) caller: Option<Arc<Principal>>,
    /// What the audit line of a `tools/call` reports; `None` for other methods.
    pub(super) facts: Option<CallFacts>,
    /// The request's server span (issue 16; [`Span::none`] while traces are off).
    pub(super) span: Span,
    /// The client span of the current exchange with the upstream.
    pub(super) attempt: Span,
    /// The URI of a shared upstream session's `resources/subscribe`: the proxy counted the
    /// client as subscribed before sending it, and forgets that again unless the upstream
    /// answers with a result (a refusal, a timeout, a lost session), so the next subscribe
    /// (this client's retry, or another client's) goes upstream instead of being answered
    /// locally for a subscription the upstream may not hold.
    pub(super) subscribing: Option<String>,
}

impl Call {
    /// Records `outcome`, frees the request id, and tells the upstream to stop when the outcome
    /// means it may still be working.
    pub(super) fn finish(mut self, outcome: Outcome) {
        self.end(outcome);
    }

    fn end(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let elapsed = self.started.elapsed();
        self.ending(self.session.era()).record(outcome);
        spans::record_outcome(&self.attempt, outcome);
        self.session.finish(&self.downstream_id);
        if let Some(uri) = self.subscribing.take()
            && outcome != Outcome::Ok
        {
            // Nothing is sent upstream: a subscription the upstream may still hold (after a
            // timeout the proxy cancels the request) only sends updates nobody receives.
            let _ = self.engine.subscriptions.remove(&uri, self.session.id());
        }
        tracing::debug!(
            mcp.session_id = self.session.id(),
            mcp.method = %Escaped(&self.method),
            mcp.request_id = %self.downstream_id,
            outcome = outcome.as_label(),
            elapsed_ms = elapsed.as_millis() as u64,
            "request finished"
        );
        if matches!(outcome, Outcome::Timeout | Outcome::Cancelled) {
            send_cancelled(Arc::clone(&self.upstream), self.upstream_id, outcome);
        }
    }

    /// How this call's end is recorded, as a request of `era`.
    pub(super) fn ending(&self, era: Era) -> Ending<'_> {
        Ending {
            engine: &self.engine,
            method: &self.method,
            tool: self.tool.as_deref(),
            started: self.started,
            era,
            facts: self.facts.as_ref(),
            span: &self.span,
        }
    }

    /// Maps an upstream message of this call back to the client's id and progress token;
    /// every other byte stays as the upstream sent it (issue 12, item 6). The call's response
    /// goes under the client's id, also an error the upstream sent with `id: null` on this
    /// call's reply (field case BR-01).
    pub(super) fn restore(&self, mut message: WireMessage) -> WireMessage {
        if message.is_response_to(&Value::from(self.upstream_id)) {
            message.set_id(&self.downstream_id);
        }
        if let Some(original) = &self.progress_token
            && message.member_value(&["params", "progressToken"])
                == Some(progress_token_for(self.upstream_id))
        {
            message.set_raw(&["params", "progressToken"], original);
        }
        message
    }

    /// The final response as the client sees it: [`Self::restore`]d, and for `tools/list`
    /// without the tools the policy hides or the caller's grants do not name, or one in which a
    /// name repeats while tools can be hidden, as the proxy read it (the only rewrites of a
    /// result).
    pub(super) fn finalize(&self, message: WireMessage) -> WireMessage {
        let mut message = self.restore(message);
        let policy = &self.engine.tools_policy;
        let grants = self.engine.tool_grants.as_ref();
        let caller = self.caller.as_deref();
        let shown = |tool: &Value| {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            let read_only = crate::transport::upstream::tools::is_read_only(tool);
            policy.exposes(name, read_only)
                && grants.is_none_or(|grants| grants.allows(caller, name, read_only))
        };
        // A listing in which a name repeats (`"name":"hidden","name":"shown"` in a tool) reads
        // differently to a parser that takes the first duplicate, so while tools may be hidden
        // the client gets it as the proxy read it (found by a new user: a hidden tool was listed).
        // Levels: `result`, `tools`, a tool, its `annotations`.
        let restricts = policy.allow.is_some() || policy.read_only || grants.is_some();
        let rewrite = self.method == "tools/list"
            && (message
                .at("/result/tools")
                .and_then(Value::as_array)
                .is_some_and(|tools| !tools.iter().all(shown))
                || restricts && message.repeats_within(&["result"], 4));
        if rewrite && message.is_partial() {
            // Re-serializing would lose what the view cannot hold; hiding nothing would break
            // the policy. Neither: the client gets an error.
            return jsonrpc::error_response(
                &self.downstream_id,
                jsonrpc::INTERNAL_ERROR,
                "the upstream's tools/list result is nested too deeply to be filtered by the tool policy",
                None,
            )
            .into();
        }
        if rewrite {
            message.rebuild(|view| {
                if let Some(tools) = view
                    .pointer_mut("/result/tools")
                    .and_then(Value::as_array_mut)
                {
                    tools.retain(shown);
                }
            });
        }
        // With grants each caller's listing is its own: never marked shareable between
        // callers (MCP 2026-07-28 `cacheScope`).
        if self.method == "tools/list" && grants.is_some() {
            keep_private(&mut message);
        }
        message
    }

    /// Whether `message`, read on this call's reply, is its response (an error with
    /// `id: null` there is: field case BR-01).
    pub(super) fn is_final(&self, message: &WireMessage) -> bool {
        message.is_response_to(&Value::from(self.upstream_id))
    }

    pub(super) fn error(&self, code: i64, message: &str, outcome: Outcome) -> Answer {
        Answer::error_with_data(
            StatusCode::OK,
            &self.downstream_id,
            code,
            message,
            json!({ "outcome": outcome.as_label(), "retryable": true }),
        )
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // The client disconnected (or the handler was dropped) before an outcome.
        self.end(Outcome::Cancelled);
    }
}

/// Where a request's end is recorded, once: its `berth_proxy_requests_total` /
/// `berth_proxy_tool_calls_total` sample and, for a `tools/call`, its audit line
/// ([`crate::client::audit`]).
pub(crate) struct Ending<'a> {
    pub(super) engine: &'a Engine,
    pub(super) method: &'a str,
    pub(super) tool: Option<&'a str>,
    pub(super) started: Instant,
    pub(super) era: Era,
    pub(super) facts: Option<&'a CallFacts>,
    pub(super) span: &'a Span,
}

impl Ending<'_> {
    /// Records `outcome`, timed from receipt.
    pub(crate) fn record(&self, outcome: Outcome) {
        let elapsed = self.started.elapsed();
        self.engine
            .metrics
            .record(self.method, self.tool, outcome, elapsed, self.era);
        if let Some(facts) = self.facts {
            self.engine.auditor.tool_call(facts, outcome, elapsed);
        }
        spans::record_outcome(self.span, outcome);
    }
}

/// Marks a result `cacheScope: "private"` where the upstream said otherwise (a listing made
/// for one caller must not be shared with another); a result without the member is left as
/// it is.
fn keep_private(message: &mut WireMessage) {
    if message
        .at("/result/cacheScope")
        .is_some_and(|scope| scope != "private")
    {
        message.set(&["result", "cacheScope"], &json!("private"));
    }
}

/// The progress token the upstream sees for the request with `upstream_id`.
fn progress_token_for(upstream_id: u64) -> Value {
    json!(format!("berth-{upstream_id}"))
}

/// Rewrites the message as the upstream sees it: upstream id and, if the client asked for
/// progress, the upstream-side progress token; and the `_meta` fields of the client's hop as
/// the upstream's era wants them: removed for a legacy upstream (a modern client's), filled in
/// from the client's session for a modern one (a legacy client's `initialize`; issue 13).
/// Nothing else changes, byte for byte.
pub(super) fn rewrite(body: &mut WireMessage, call: &Call) {
    body.set_id(&json!(call.upstream_id));
    if call.progress_token.is_some() {
        body.set(
            &["params", "_meta", "progressToken"],
            &progress_token_for(call.upstream_id),
        );
    }
    match call.upstream.era() {
        UpstreamEra::Legacy if call.session.is_modern() => era::strip_client_hop(body),
        UpstreamEra::Legacy => {}
        UpstreamEra::Modern => era::fill_meta(
            body,
            call.upstream.protocol_version(),
            &call.session.client_hop(),
        ),
    }
}

pub(super) fn timeout_answer(call: Call) -> Answer {
    let answer = Answer::error_with_data(
        StatusCode::OK,
        &call.downstream_id,
        jsonrpc::REQUEST_TIMEOUT,
        "request timed out at the berth proxy",
        json!({ "outcome": Outcome::Timeout.as_label(), "timeoutMs": call.engine.call_budget.as_millis() as u64 }),
    );
    call.finish(Outcome::Timeout);
    answer
}

/// The session was lost and could not be recovered for this call: the client gets a retryable
/// error and its downstream session ends, so its next request gets 404 and it starts over
/// (field case BR-04).
pub(super) fn session_lost(call: Call) -> Answer {
    end_lost(
        call,
        "not_found",
        "upstream session was lost and could not be recovered; start a new session",
    )
}

/// Ends a call whose upstream session (or this session's own stdio child) is gone: a shared
/// upstream is reported lost for `reason` (a metric label), the client's downstream session
/// ends, and the call is answered `SESSION_LOST` with `message`.
fn end_lost(call: Call, reason: &'static str, message: &str) -> Answer {
    if call.session.dedicated().is_none() {
        call.engine.upstream.report_lost(&call.upstream, reason);
    }
    call.engine.end_session(call.session.id());
    let answer = call.error(jsonrpc::SESSION_LOST, message, Outcome::SessionLost);
    call.finish(Outcome::SessionLost);
    answer
}

pub(super) fn upstream_failure(call: Call, error: &UpstreamError) -> Answer {
    tracing::warn!(
        mcp.session_id = call.session.id(),
        mcp.method = %Escaped(&call.method),
        mcp.request_id = %call.downstream_id,
        upstream_session_id = call.upstream.id().unwrap_or_default(),
        protocol_version = call.upstream.protocol_version(),
        error = %Escaped(&crate::transport::upstream::error_chain(error)),
        kind = error.kind(),
        "upstream request failed"
    );
    if let UpstreamError::Gone(_) = error {
        // The stdio child of this session ended: its state is gone with it, so the call ends
        // `session_lost` and so does the client's session; its next session gets a new child.
        return end_lost(
            call,
            "exited",
            "upstream MCP server process ended; start a new session",
        );
    }
    if let UpstreamError::Status { status, body } = error {
        // The upstream refused the request with a JSON-RPC error in an HTTP error (the Node SDK
        // answers malformed params with 400 and -32700): that is the upstream's answer to this
        // request, so the client gets it under its own id, counted as rpc_error.
        if let Some(mut rpc_error) = WireMessage::parse(body.as_bytes())
            .ok()
            .filter(|message| message.get("error").is_some())
        {
            rpc_error.set_id(&call.downstream_id);
            // A modern client reads the status too (MCP 2026-07-28, "Streamable HTTP": 400
            // for header, version and capability errors): it gets the upstream's.
            let status = if call.session.is_modern() {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST)
            } else {
                StatusCode::OK
            };
            let answer = Answer::Json {
                status,
                body: rpc_error,
                session: None,
            };
            call.finish(Outcome::RpcError);
            return answer;
        }
        let answer = Answer::error_with_data(
            StatusCode::OK,
            &call.downstream_id,
            jsonrpc::UPSTREAM_ERROR,
            &format!("upstream MCP server answered HTTP {status}"),
            json!({
                "outcome": Outcome::UpstreamUnavailable.as_label(),
                "retryable": *status >= 500,
                "upstreamStatus": status,
                "upstreamReason": body,
            }),
        );
        call.finish(Outcome::UpstreamUnavailable);
        return answer;
    }
    if matches!(
        error,
        UpstreamError::Send(_) | UpstreamError::Read(_) | UpstreamError::Malformed(_)
    ) {
        // The connection failed or broke mid-reply (a reset SSE stream is `Malformed`): the
        // upstream may be gone. The supervisor pings it at once, so readiness drops now rather
        // than at the next liveness interval.
        call.engine.upstream.check_reachable();
    }
    let message = match error {
        // Sizes only: no upstream internals reach the client.
        UpstreamError::TooLong { .. } | UpstreamError::TooLarge { .. } => error.to_string(),
        _ => "upstream MCP server failed to answer".to_owned(),
    };
    let answer = call.error(
        jsonrpc::UPSTREAM_ERROR,
        &message,
        Outcome::UpstreamUnavailable,
    );
    call.finish(Outcome::UpstreamUnavailable);
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_for_one_caller_is_never_marked_public() {
        let mut public = WireMessage::from(json!({"jsonrpc": "2.0", "id": 1,
            "result": {"tools": [], "cacheScope": "public", "ttlMs": 300000}}));
        keep_private(&mut public);
        assert_eq!(
            public.pointer("/result/cacheScope"),
            Some(&json!("private"))
        );
        assert!(
            public.text().contains(r#""cacheScope":"private""#),
            "{}",
            public.text()
        );
        assert_eq!(public.pointer("/result/ttlMs"), Some(&json!(300000)));
        let mut silent =
            WireMessage::from(json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}));
        keep_private(&mut silent);
        assert_eq!(silent.pointer("/result/cacheScope"), None);
    }
}
