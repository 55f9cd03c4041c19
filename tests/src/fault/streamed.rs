//! A `tools/call` result of any size, made as it is sent ([`super::Faults::streamed_result_bytes`]):
//! the fault upstream never holds it whole, so a test can send hundreds of MiB (or an endless
//! reply) and measure only what the proxy keeps of it.

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use serde_json::Value;

/// Size of each chunk of the text.
const CHUNK_BYTES: usize = 64 * 1024;
/// One chunk of the text (`x` repeated).
static CHUNK: [u8; CHUNK_BYTES] = [b'x'; CHUNK_BYTES];

/// The reply to request `id`: a result whose one text content is `bytes` bytes of `x`
/// (`u64::MAX`: never ends), as a JSON body or (`sse`) as one SSE event.
pub(super) fn reply(id: &Value, bytes: u64, sse: bool) -> Response {
    let open =
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#);
    let close = r#""}]}}"#;
    let (open, close, content_type) = if sse {
        (
            format!("event: message\ndata: {open}"),
            format!("{close}\n\n"),
            "text/event-stream",
        )
    } else {
        (open, close.to_owned(), "application/json")
    };
    let text = futures::stream::unfold(bytes, |left| async move {
        if left == 0 {
            return None;
        }
        let take = left.min(CHUNK_BYTES as u64);
        let chunk = Bytes::from_static(&CHUNK[..usize::try_from(take).unwrap_or(CHUNK_BYTES)]);
        let left = if left == u64::MAX { left } else { left - take };
        Some((Ok::<_, std::io::Error>(chunk), left))
    });
    let body = futures::stream::once(async move { Ok(Bytes::from(open)) })
        .chain(text)
        .chain(futures::stream::once(async move { Ok(Bytes::from(close)) }));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(body),
    )
        .into_response()
}
