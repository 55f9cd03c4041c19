//! W3C trace context in and out: the `traceparent` / `tracestate` HTTP headers (W3C Trace
//! Context) and the same keys in a request's `params._meta` (MCP SEP-414), for HTTP and stdio
//! alike.

use crate::wire::jsonrpc::Pointer as _;
use std::collections::HashMap;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::wire::jsonrpc::WireMessage;

struct Meta<'a>(&'a Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.as_str()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.to_str().ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

fn valid(context: Context) -> Option<Context> {
    context.span().span_context().is_valid().then_some(context)
}

/// The client's trace context for one request: `params._meta.traceparent` (with
/// `tracestate`) when it holds a valid one, else the `traceparent` header; `None` when neither
/// does (the proxy's span then starts a trace).
pub fn parent_of(headers: &HeaderMap, request: &Value) -> Option<Context> {
    let propagator = TraceContextPropagator::new();
    let from_meta = request
        .at("/params/_meta")
        .and_then(Value::as_object)
        .and_then(|meta| valid(propagator.extract(&Meta(meta))));
    from_meta.or_else(|| valid(propagator.extract(&Headers(headers))))
}

/// `traceparent` and, when there is one, `tracestate` of the current span; empty when traces
/// are off or no span is current.
fn current() -> HashMap<String, String> {
    let mut carrier = HashMap::new();
    if !super::state::enabled() {
        return carrier;
    }
    let context = tracing::Span::current().context();
    if context.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
    }
    carrier
}

/// The trace context headers an upstream HTTP request carries: the current span's, so the
/// upstream's span is its child. Empty when traces are off.
pub fn traceparent_header() -> Vec<(HeaderName, HeaderValue)> {
    current()
        .into_iter()
        .filter_map(|(name, value)| {
            Some((
                HeaderName::from_bytes(name.as_bytes()).ok()?,
                HeaderValue::from_str(&value).ok()?,
            ))
        })
        .collect()
}

/// A copy of the request `message` whose `params._meta` carries the current span's
/// `traceparent` / `tracestate` (replacing the client's: the proxy's span is the upstream's
/// parent), every other byte unchanged; `None` (send the message as it is) when traces are off,
/// no span is current, or the message is not a request with object `params`.
pub fn with_trace_context(message: &WireMessage) -> Option<WireMessage> {
    if !super::state::enabled() || message.get("method").is_none() || message.get("id").is_none() {
        return None;
    }
    let carrier = current();
    if carrier.is_empty() {
        return None;
    }
    let mut traced = message.clone();
    let members: Map<String, Value> = carrier
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    match traced.get("params") {
        None => {
            let params = serde_json::json!({ "_meta": members });
            traced.insert_member(&[], "params", &params).then_some(())?;
        }
        Some(params) if params.get("_meta").is_none() => {
            traced
                .insert_member(&["params"], "_meta", &Value::Object(members))
                .then_some(())?;
        }
        Some(_) => {
            for (key, value) in &members {
                if !traced.set(&["params", "_meta", key], value) {
                    traced
                        .insert_member(&["params", "_meta"], key, value)
                        .then_some(())?;
                }
            }
        }
    }
    Some(traced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLIENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const HEADER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn trace_id(context: &Context) -> String {
        context.span().span_context().trace_id().to_string()
    }

    #[test]
    fn meta_traceparent_wins_over_the_header_and_a_bad_one_falls_back() {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", HEADER.parse().expect("header value"));
        let request = json!({"method": "tools/call", "params": {"_meta": {"traceparent": CLIENT}}});
        let parent = parent_of(&headers, &request).expect("a parent");
        assert_eq!(trace_id(&parent), "0af7651916cd43dd8448eb211c80319c");
        let bad = json!({"method": "tools/call", "params": {"_meta": {"traceparent": "00-zz"}}});
        let parent = parent_of(&headers, &bad).expect("the header parent");
        assert_eq!(trace_id(&parent), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(parent_of(&HeaderMap::new(), &json!({"method": "ping"})).is_none());
    }

    #[test]
    fn without_traces_on_a_message_goes_unchanged() {
        let message = WireMessage::parse(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"traceparent":"x"}}}"#,
        )
        .expect("a message");
        assert!(with_trace_context(&message).is_none());
        assert!(traceparent_header().is_empty());
    }
}
