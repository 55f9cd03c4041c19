//! Upstream HTTP replies read with a size limit (`limits.maxReplyBytes`, issue 39 item 3): a
//! JSON body is read frame by frame and given up as soon as it passes the limit (or at once,
//! from a `Content-Length` over it); an SSE body is watched byte by byte before the SSE parser
//! sees it, so that no one event grows past the limit in the parser's buffer. A reply given up
//! is never relayed: the caller gets [`UpstreamError::TooLarge`], counted once in
//! `berth_proxy_upstream_replies_refused_total{reason="too_large"}`. Dropping the unread body
//! closes its connection rather than draining it.
//!
//! Not responsible for: stdio lines (their limit is the stdio line reader's, `transport::stdio`)
//! or what a reply means.

use axum::body::HttpBody as Body;
use bytes::{Bytes, BytesMut};
use futures::stream::{BoxStream, Stream, StreamExt};
use http_body_util::BodyExt;
use prometheus::IntCounter;

use super::client::HttpError;
use crate::transport::upstream::UpstreamError;

/// The default `limits.maxReplyBytes` (16 MiB), for an upstream built without the config.
const DEFAULT_MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// The size limit on one upstream reply and the counter of replies refused for it. Cheap to
/// clone (the counter is shared).
#[derive(Clone, Debug)]
pub struct ReplyLimit {
    max_bytes: usize,
    refused: IntCounter,
}

impl Default for ReplyLimit {
    /// 16 MiB, counted in a counter no registry exports (tests and `lint`).
    #[allow(clippy::expect_used)]
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_REPLY_BYTES,
            refused: IntCounter::new("unregistered_replies_refused", "not exported")
                .expect("valid metric"),
        }
    }
}

impl ReplyLimit {
    /// At most `max_bytes` per JSON body or SSE event; each refusal counted in `refused`.
    pub fn new(max_bytes: usize, refused: IntCounter) -> Self {
        Self { max_bytes, refused }
    }

    /// The limit, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The error for a reply over the limit, counted.
    fn refuse(&self) -> UpstreamError {
        self.refused.inc();
        tracing::warn!(
            limit_bytes = self.max_bytes,
            "refused an upstream reply over limits.maxReplyBytes"
        );
        UpstreamError::TooLarge {
            limit: self.max_bytes,
        }
    }

    /// A JSON body, read whole if it is at most the limit. `declared` is its `Content-Length`.
    ///
    /// # Errors
    /// [`UpstreamError::TooLarge`] when `declared` or the bytes read pass the limit (the rest
    /// is not read); [`UpstreamError::Read`] when the body breaks.
    ///
    /// # Cancellation
    /// Cancel-safe: dropping the future drops the body.
    pub async fn json_body<B>(
        &self,
        mut body: B,
        declared: Option<u64>,
    ) -> Result<Bytes, UpstreamError>
    where
        B: Body<Data = Bytes, Error = HttpError> + Unpin,
    {
        if declared.is_some_and(|length| length > self.max_bytes as u64) {
            return Err(self.refuse());
        }
        let mut bytes = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(UpstreamError::Read)?.into_data() else {
                continue;
            };
            if bytes.len() + data.len() > self.max_bytes {
                return Err(self.refuse());
            }
            bytes.extend_from_slice(&data);
        }
        Ok(bytes.freeze())
    }

    /// `body`'s bytes for the SSE parser, ended with `ReadError::TooLarge` as soon as one
    /// event passes the limit (its field lines, without line ends, counted together).
    pub fn sse_bytes<B>(&self, body: B) -> BoxStream<'static, Result<Bytes, ReadError>>
    where
        B: Body<Data = Bytes, Error = HttpError> + Send + Unpin + 'static,
    {
        let state = (
            http_body_util::BodyDataStream::new(body),
            EventSize::new(self.max_bytes),
            false,
        );
        futures::stream::unfold(state, |(mut body, mut size, over)| async move {
            if over {
                return None;
            }
            match body.next().await? {
                Ok(chunk) if size.take(&chunk) => Some((Ok(chunk), (body, size, false))),
                Ok(_) => Some((Err(ReadError::TooLarge(size.max)), (body, size, true))),
                Err(error) => Some((Err(ReadError::Body(error)), (body, size, false))),
            }
        })
        .boxed()
    }

    /// The [`UpstreamError`] for an SSE parser's `error`: [`UpstreamError::TooLarge`] (counted)
    /// when [`Self::sse_bytes`] ended the stream, else [`UpstreamError::Malformed`].
    pub fn sse_error(&self, error: &sse_stream::Error) -> UpstreamError {
        if let sse_stream::Error::Body(cause) = error
            && let Some(ReadError::TooLarge(_)) = cause.downcast_ref::<ReadError>()
        {
            return self.refuse();
        }
        UpstreamError::Malformed(format!("broken SSE stream: {error}"))
    }
}

/// Why reading an SSE body stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The body broke.
    #[error(transparent)]
    Body(HttpError),
    /// One event passed the limit (bytes).
    #[error("an upstream SSE event exceeds limits.maxReplyBytes ({0} bytes)")]
    TooLarge(usize),
}

/// The size of the SSE event being read: bytes since the last blank line (an event ends at a
/// blank line; lines end with CRLF, LF or CR; WHATWG HTML, "Server-sent events", 9.2.5).
#[derive(Debug)]
struct EventSize {
    max: usize,
    current: usize,
    /// Nothing but a line end read since the last line end: the next line end is a blank line.
    line_empty: bool,
    /// The last byte was CR: an LF now belongs to it.
    after_cr: bool,
}

impl EventSize {
    fn new(max: usize) -> Self {
        Self {
            max,
            current: 0,
            line_empty: true,
            after_cr: false,
        }
    }

    /// Takes in `chunk`; `false` when the event being read passes the limit.
    fn take(&mut self, chunk: &[u8]) -> bool {
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' | b'\n' => {
                    if self.line_empty {
                        self.current = 0;
                    }
                    self.line_empty = true;
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.line_empty = false;
                    self.after_cr = false;
                    self.current += 1;
                    if self.current > self.max {
                        return false;
                    }
                }
            }
        }
        true
    }
}

/// Parsed SSE events of `body`, no event larger than `limit` allows.
pub fn sse_events<B>(
    limit: &ReplyLimit,
    body: B,
) -> impl Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send + 'static
where
    B: Body<Data = Bytes, Error = HttpError> + Send + Unpin + 'static,
{
    sse_stream::SseByteStream::new(limit.sse_bytes(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(chunks: Vec<&'static [u8]>) -> impl Body<Data = Bytes, Error = HttpError> + Unpin {
        let chunks = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
        );
        axum::body::Body::from_stream(chunks).map_err(HttpError::new)
    }

    fn limit(max: usize) -> ReplyLimit {
        ReplyLimit {
            max_bytes: max,
            ..ReplyLimit::default()
        }
    }

    #[test]
    fn event_size_resets_at_each_blank_line_whatever_the_line_ends() {
        let mut size = EventSize::new(10);
        assert!(size.take(b"data: 1234\n\n"));
        assert!(size.take(b"data: 1234\r\n\r\n"));
        assert!(size.take(b"data: 1234\r\r"));
        assert!(size.take(b"data: 12\r"));
        assert!(size.take(b"\n\r\n"), "CRLF split across chunks");
        assert!(!size.take(b"data: 12345"));
        let mut lines = EventSize::new(10);
        assert!(lines.take(b"data: 1\n"));
        assert!(!lines.take(b"data: 2\n"), "one event's lines add up");
    }

    #[tokio::test]
    async fn json_body_over_the_limit_is_refused_and_counted() {
        let limit = limit(8);
        let whole = limit.json_body(body(vec![b"{\"a\"", b":1}"]), None).await;
        assert_eq!(whole.expect("within the limit").as_ref(), b"{\"a\":1}");
        let over = limit
            .json_body(body(vec![b"{\"a\":", b"12345}"]), None)
            .await;
        assert!(matches!(over, Err(UpstreamError::TooLarge { limit: 8 })));
        let declared = limit.json_body(body(vec![]), Some(9)).await;
        assert!(matches!(declared, Err(UpstreamError::TooLarge { .. })));
        assert_eq!(limit.refused.get(), 2);
    }

    #[tokio::test]
    async fn sse_event_over_the_limit_ends_the_stream_with_too_large() {
        let limit = limit(16);
        let mut events = Box::pin(sse_events(
            &limit,
            body(vec![
                b"data: {\"a\":1}\n\n",
                b"data: ",
                b"0123456789abcdef\n\n",
            ]),
        ));
        let first = events.next().await.expect("an event").expect("parsed");
        assert_eq!(first.data.as_deref(), Some("{\"a\":1}"));
        let error = events
            .next()
            .await
            .expect("an error")
            .expect_err("too large");
        assert!(matches!(
            limit.sse_error(&error),
            UpstreamError::TooLarge { limit: 16 }
        ));
        assert!(events.next().await.is_none(), "the stream ends");
    }
}
