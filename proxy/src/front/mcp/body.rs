//! The body of a client POST, bounded by `limits.maxRequestBytes` (issue 12, item 7; the limit
//! a spec field since issue 39, default 4 MiB).
//!
//! A body whose `Content-Length` already exceeds the limit is refused from the header, before a
//! byte of it is read (and without `100 Continue`, so a client that waits for one never sends
//! it). One without a declared length (chunked) is read up to the limit and refused when it
//! passes it. Either refusal is 413 with a JSON-RPC error (-32600, `id: null`: the message was
//! never parsed) and `Connection: close`, and the connection lingers on close
//! ([`LingerOnClose`]) so that a client still sending reads the answer instead of a reset.
//! Not responsible for: what the body says (the front parses and classifies it).

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::linger::LingerOnClose;
use super::refusal::refused;
use crate::observe::metrics::Metrics;
use crate::wire::jsonrpc;

/// The request's headers and its whole body, at most `limit` bytes (`limits.maxRequestBytes`;
/// the router's `DefaultBodyLimit` holds the same value, so a body without a declared length
/// is cut off there).
///
/// # Errors
/// The 413 answer to send (counted as `berth_proxy_invalid_messages_total{reason="body"}`)
/// when the body declares or turns out to have more than `limit` bytes, or cannot be read; the
/// message names `limits.maxRequestBytes` and its value.
///
/// Cancellation safety: dropping the future drops the request; nothing else is held.
pub(super) async fn read(
    metrics: &Metrics,
    limit: usize,
    request: Request,
) -> Result<(HeaderMap, Bytes), Response> {
    let (mut parts, body) = request.into_parts();
    let linger = parts
        .extensions
        .get::<ConnectInfo<LingerOnClose>>()
        .map(|info| info.0.clone());
    let version = parts.version;
    let refuse = |status: StatusCode, message: &str| {
        let answer = refused(
            metrics,
            "body",
            status,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            message,
        );
        closing(answer.into_response(), version, linger.as_ref())
    };
    if let Some(declared) = declared_length(&parts.headers)
        && declared > limit as u64
    {
        return Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "request body of {declared} bytes refused: over limits.maxRequestBytes ({limit} bytes)"
            ),
        ));
    }
    // Taken, not copied: reading the body needs the extensions (the body limit), not the
    // headers.
    let headers = std::mem::take(&mut parts.headers);
    match Bytes::from_request(Request::from_parts(parts, body), &()).await {
        Ok(body) => Ok((headers, body)),
        Err(rejection) => Err(refuse(
            rejection.status(),
            &format!(
                "request body refused: {} (limits.maxRequestBytes: {limit} bytes)",
                rejection.body_text()
            ),
        )),
    }
}

/// The `Content-Length` the client declared, when it declared a readable one.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `response`, closing its HTTP/1 connection after it (`Connection: close`, which HTTP/2
/// forbids) with a lingering close when the connection offers one.
fn closing(mut response: Response, version: Version, linger: Option<&LingerOnClose>) -> Response {
    if version < Version::HTTP_2 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        if let Some(linger) = linger {
            linger.request();
        }
    }
    response
}
