//! The era probe (MCP 2026-07-28, "Backward Compatibility"): a `server/discover` request that
//! tells a modern upstream from a legacy one, over HTTP and over stdio.
//!
//! Not responsible for: acting on the answer (the handshake does) or caching the era (the
//! endpoint does).

use std::time::Duration;

use serde_json::{Value, json};

use super::reply::{final_response, stdio_reply};
use crate::transport::stdio::Connection;
use crate::transport::upstream::UpstreamError;
use crate::transport::upstream::era::{ClientHop, Probe, classify, fill_meta};
use crate::transport::upstream::http::HttpUpstream;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::revision::MODERN_VERSIONS;

/// How long a stdio child of an upstream whose era is not known yet may stay silent on the era
/// probe before the proxy takes it for a legacy server and sends `initialize` (MCP 2026-07-28,
/// "stdio", "Backward Compatibility": "does not respond within a reasonable timeout"). Paid once
/// per endpoint, not per child: the era is cached. A modern server slower to start is found by
/// its late answer (`initialize_after_silence`).
pub const STDIO_PROBE_WAIT: Duration = Duration::from_secs(5);

/// The era probe's request: `server/discover` under id 0 with the modern `_meta` for `hop`.
fn probe_request(hop: &ClientHop) -> WireMessage {
    let mut request: WireMessage =
        json!({ "jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {} }).into();
    fill_meta(&mut request, MODERN_VERSIONS[0], hop);
    crate::observe::telemetry::with_trace_context(&request).unwrap_or(request)
}

/// Probes an HTTP upstream ("Streamable HTTP", "Backward Compatibility"): a 4xx whose body is
/// not a recognized modern error, or a reply without a response, means legacy.
///
/// # Errors
/// An upstream that cannot be reached or answers 5xx: neither era can be told, the handshake
/// fails and is retried.
pub(super) async fn probe_http(
    http: &HttpUpstream,
    hop: &ClientHop,
) -> Result<Probe, UpstreamError> {
    match http
        .post_modern(&probe_request(hop), MODERN_VERSIONS[0], &[])
        .await
    {
        Ok(reply) => match final_response(reply, &json!(0)).await {
            Ok(response) => Ok(classify(Some(&response))),
            Err(UpstreamError::Malformed(_)) => Ok(Probe::Legacy),
            Err(error) => Err(error),
        },
        Err(UpstreamError::Status { status, body }) if (400..500).contains(&status) => {
            let response = WireMessage::parse(body.as_bytes())
                .ok()
                .map(WireMessage::into_view);
            Ok(classify(response.as_ref()))
        }
        Err(error) => Err(error),
    }
}

/// The probe's answer when it has not come yet.
pub(super) type Unanswered =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, UpstreamError>> + Send>>;

/// Probes a stdio child ("stdio", "Backward Compatibility"): its answer is classified; a child
/// that stays silent for [`STDIO_PROBE_WAIT`], answers out of shape, or ends is legacy. A
/// silent child's answer may still come (a server slow to start): it is returned unfinished.
pub(super) async fn probe_stdio(
    connection: &Connection,
    hop: &ClientHop,
    wait: Duration,
) -> (Probe, Option<Unanswered>) {
    connection.set_era_probe(true);
    let Ok(pending) = connection.send_own(&probe_request(hop)).await else {
        return (Probe::Legacy, None);
    };
    let mut answer: Unanswered =
        Box::pin(async move { final_response(stdio_reply(pending), &json!(0)).await });
    let answered = if wait == Duration::MAX {
        Ok(answer.as_mut().await)
    } else {
        tokio::time::timeout(wait, &mut answer).await
    };
    // A child the probe ended stays marked: its exit is the probe's, not a crash.
    match answered {
        Ok(Ok(response)) => {
            connection.set_era_probe(false);
            (classify(Some(&response)), None)
        }
        Ok(Err(_)) => (Probe::Legacy, None),
        Err(_) => {
            connection.set_era_probe(false);
            (Probe::Legacy, Some(answer))
        }
    }
}
