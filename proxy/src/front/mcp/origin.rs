//! DNS rebinding protection on the MCP endpoint (MCP 2025-11-25 and 2026-07-28, "Streamable
//! HTTP", "Security": servers MUST validate `Origin` and answer 403 when it is invalid): a
//! request whose `Origin` is not a loopback origin or in `requestOrigin.allowedOrigins`, or
//! whose `Host` is not allowed by `requestOrigin.allowedHosts` when that is set, gets 403 with a
//! JSON-RPC error (id `null`: the body is never read) and counts as
//! `berth_proxy_invalid_messages_total{reason="origin"|"host"}`. Checked on every method, before
//! authentication. The admin port (kubelet probes, Prometheus) is not checked.
//!
//! Behind Berth the upstream's own check sees the proxy's `Host`, so the proxy is where this
//! must hold.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::front::mcp::state::Front;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;

/// The 403 answer for a request whose `Origin` or `Host` is not allowed; `None` lets it
/// through. Run first by the front's middleware ([`super::admit`]).
pub(super) fn refusal(proxy: &Front, headers: &HeaderMap) -> Option<Response> {
    let policy = &proxy.request_origin;
    // Borrowed unless not UTF-8: most requests are let through.
    let text = |name| {
        headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()))
    };
    let origin = text(header::ORIGIN)
        .filter(|o| !policy.allows_origin(o))
        .map(|origin| {
            let message = format!(
                "requests from origin {:?} are not allowed (requestOrigin.allowedOrigins)",
                crate::wire::echoed::echoed(&origin)
            );
            ("origin", message)
        });
    let refusal = origin.or_else(|| {
        text(header::HOST)
            .filter(|h| !policy.allows_host(h))
            .map(|host| {
                let message = format!(
                    "requests for host {:?} are not allowed (requestOrigin.allowedHosts)",
                    crate::wire::echoed::echoed(&host)
                );
                ("host", message)
            })
    });
    let (reason, message) = refusal?;
    proxy
        .engine
        .metrics
        .invalid_messages
        .with_label_values(&[reason])
        .inc();
    tracing::info!(reason, message = %crate::observe::escaped::Escaped(&message), "refused a request (DNS rebinding protection)");
    Answer::error(
        StatusCode::FORBIDDEN,
        &Value::Null,
        jsonrpc::INVALID_REQUEST,
        &message,
    )
    .into_response()
    .into()
}
