//! The proxy's spans, named and attributed after the OpenTelemetry semantic conventions for
//! MCP (`mcp.method.name`, `gen_ai.tool.name`, `mcp.session.id`, `mcp.protocol.version`,
//! `jsonrpc.request.id`, `error.type`). Each constructor returns [`Span::none`] while traces are
//! off, so an off proxy creates no span.
//!
//! Log lines written inside a span carry its `trace_id` and `span_id` fields (the stderr
//! format prints the fields of the spans a line is in).

use crate::wire::jsonrpc::{Pointer as _, WireMessage};
use axum::http::HeaderMap;
use opentelemetry::trace::{Status, TraceContextExt as _};
use serde_json::Value;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::wire::outcome::Outcome;

/// A step of the proxy's own around calls, each its own span (internal kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// An upstream session's `initialize` handshake.
    Handshake,
    /// Waiting for the session that replaces a lost one, before a replay.
    Reinitialize,
    /// A `tools/list` the proxy sends for its tool policy (`toolsProbe`).
    ToolsProbe,
    /// Starting a stdio child (spawned here, or by the stdio host sidecar).
    StdioStart,
}

impl Step {
    /// The span name: `berth.upstream.handshake`, `berth.upstream.reinitialize`,
    /// `berth.tools.probe`, `berth.stdio.start`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Handshake => "berth.upstream.handshake",
            Self::Reinitialize => "berth.upstream.reinitialize",
            Self::ToolsProbe => "berth.tools.probe",
            Self::StdioStart => "berth.stdio.start",
        }
    }
}

/// Longest client-given text (method, tool or prompt name, request id) a span keeps, in bytes:
/// a span is created before any policy check, so what a client sends must not size it.
const MAX_CLIENT_TEXT: usize = 128;

/// `text` cut to [`MAX_CLIENT_TEXT`] bytes at a character boundary.
fn bounded(text: &str) -> &str {
    if text.len() <= MAX_CLIENT_TEXT {
        return text;
    }
    let mut end = MAX_CLIENT_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `{method} {target}` as the conventions name MCP spans (target: the tool of a `tools/call`,
/// the prompt of `prompts/get`).
fn span_name(method: &str, target: Option<&str>) -> String {
    let method = bounded(method);
    match target {
        Some(target) => format!("{method} {}", bounded(target)),
        None => method.to_owned(),
    }
}

fn target_of<'a>(method: &str, request: &'a Value) -> Option<&'a str> {
    matches!(method, "tools/call" | "prompts/get")
        .then(|| request.at("/params/name")?.as_str())
        .flatten()
}

fn method_attributes(span: &Span, method: &str, target: Option<&str>) {
    let target = target.map(bounded);
    span.set_attribute("mcp.method.name", bounded(method).to_owned());
    match (method, target) {
        ("tools/call", target) => {
            span.set_attribute("gen_ai.operation.name", "execute_tool");
            if let Some(tool) = target {
                span.set_attribute("gen_ai.tool.name", tool.to_owned());
            }
        }
        ("prompts/get", Some(prompt)) => {
            span.set_attribute("gen_ai.prompt.name", prompt.to_owned())
        }
        _ => {}
    }
}

/// Records `trace_id` and `span_id` on `span` for the log lines inside it.
fn ids_for_logs(span: &Span) {
    let context = span.context();
    let ids = context.span().span_context().clone();
    if ids.is_valid() {
        span.record("trace_id", ids.trace_id().to_string());
        span.record("span_id", ids.span_id().to_string());
    }
}

/// The server span of one downstream JSON-RPC request (its POST's `headers`), child of the
/// client's trace context when it sent one ([`super::parent_of`]).
pub fn server(headers: &HeaderMap, request: &WireMessage, id: &Value) -> Span {
    if !super::state::enabled() {
        return Span::none();
    }
    let request = request.view();
    let parent = super::parent_of(headers, request);
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let target = target_of(method, request);
    let span = tracing::info_span!(
        "mcp.server",
        otel.name = %span_name(method, target),
        otel.kind = "server",
        trace_id = Empty,
        span_id = Empty,
    );
    if let Some(parent) = parent {
        let _ = span.set_parent(parent);
    }
    ids_for_logs(&span);
    method_attributes(&span, method, target);
    span.set_attribute("jsonrpc.request.id", request_id(id));
    span
}

/// `jsonrpc.request.id`: a string id as it is, a number in its JSON text (both
/// [`bounded`]).
fn request_id(id: &Value) -> String {
    match id {
        Value::String(s) => bounded(s).to_owned(),
        other => bounded(&other.to_string()).to_owned(),
    }
}

/// The client span of one exchange with the upstream for the current request (`attempt` 1, or
/// 2 for the replay on a new session), child of the current span.
pub fn client(method: &str, tool: Option<&str>, upstream_id: u64, attempt: u32) -> Span {
    if !super::state::enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        "mcp.client",
        otel.name = %span_name(method, tool),
        otel.kind = "client",
        trace_id = Empty,
        span_id = Empty,
    );
    ids_for_logs(&span);
    method_attributes(&span, method, tool);
    span.set_attribute("jsonrpc.request.id", upstream_id.to_string());
    span.set_attribute("berth.attempt", i64::from(attempt));
    if attempt > 1 {
        span.set_attribute("berth.replay", true);
    }
    span
}

/// The span of one of the proxy's own steps ([`Step`]), child of the current span.
pub fn step(step: Step) -> Span {
    if !super::state::enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        "berth.step",
        otel.name = step.name(),
        otel.kind = "internal",
        trace_id = Empty,
        span_id = Empty,
    );
    ids_for_logs(&span);
    span
}

/// Records the downstream session (`mcp.session.id`, absent for an MCP 2026-07-28 request,
/// which has none) and the negotiated `mcp.protocol.version` on `span`.
pub fn record_session(span: &Span, session_id: Option<&str>, protocol_version: &str) {
    if span.is_none() {
        return;
    }
    if let Some(id) = session_id {
        span.set_attribute("mcp.session.id", id.to_owned());
    }
    span.set_attribute("mcp.protocol.version", protocol_version.to_owned());
}

/// Records how the request ended: `error.type` = the outcome label and status error when it
/// is not `ok` (the same labels as `berth_proxy_requests_total{outcome}`).
pub fn record_outcome(span: &Span, outcome: Outcome) {
    if span.is_none() || outcome == Outcome::Ok {
        return;
    }
    span.set_attribute("error.type", outcome.as_label());
    span.set_status(Status::error(outcome.as_label()));
}

/// Records a failure of a [`Step`] or client span as `error.type` = `kind`.
pub fn record_error(span: &Span, kind: &'static str) {
    if span.is_none() {
        return;
    }
    span.set_attribute("error.type", kind);
    span.set_status(Status::error(kind));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_text_in_span_names_and_attributes_is_bounded_at_a_character_boundary() {
        let long = "é".repeat(200);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_CLIENT_TEXT && cut.len() >= MAX_CLIENT_TEXT - 1);
        assert!(long.starts_with(cut));
        let name = span_name("tools/call", Some(&long));
        assert!(
            name.len() <= "tools/call ".len() + MAX_CLIENT_TEXT,
            "{}",
            name.len()
        );
        assert_eq!(span_name("tools/call", Some("echo")), "tools/call echo");
        assert_eq!(
            request_id(&serde_json::json!("x".repeat(500))).len(),
            MAX_CLIENT_TEXT
        );
        assert_eq!(request_id(&serde_json::json!(7)), "7");
    }
}
