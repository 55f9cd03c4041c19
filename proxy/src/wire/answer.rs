//! What the front sends back for one POST, and the one place that turns it into HTTP.
//!
//! Statuses follow MCP 2025-06-18 "Transports: Streamable HTTP": 202 for accepted notifications
//! and responses, 400 for a malformed or session-less request, 404 for an unknown session;
//! JSON-RPC errors always echo the request id when there was one.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use sse_stream::{KeepAlive, Sse, SseBody, Timer};
use tokio::sync::mpsc;

use crate::wire::headers::SESSION_HEADER;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::jsonrpc::error_response;

/// One SSE event the proxy writes: its id and the message, or none for the priming event that
/// only carries an id (sent first on each stream of a 2025-11-25 session, so a client can
/// resume before the first message).
#[derive(Clone, Debug)]
pub struct StreamEvent {
    /// The SSE `id` field.
    pub id: String,
    /// The JSON-RPC message; `None` for the priming event (empty `data`).
    pub message: Option<WireMessage>,
}

/// Interval of SSE keep-alive comments on streams the proxy writes (below common client idle
/// timeouts of 30–60 s; field case BR-15).
pub const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The proxy's answer to one POST.
#[derive(Debug)]
pub enum Answer {
    /// A single JSON-RPC message with an HTTP status; `session` sets `Mcp-Session-Id`.
    Json {
        /// HTTP status.
        status: StatusCode,
        /// The JSON-RPC message.
        body: WireMessage,
        /// Session id to announce (initialize only).
        session: Option<String>,
    },
    /// JSON-RPC messages streamed as SSE, in order, the final response last (none when the
    /// client cancelled the request).
    Stream(mpsc::Receiver<WireMessage>),
    /// A legacy session's stream carried through its event log: each event has an id a client
    /// can resume from (`crate::client::sessions::DownstreamSession::carry`).
    Events(mpsc::Receiver<StreamEvent>),
    /// `202 Accepted` with no body: a notification or response, or a request the client
    /// cancelled ([`Answer::cancelled`]).
    Accepted,
    /// `429 Too Many Requests` with `Retry-After: <retry_after_secs>` and a JSON-RPC error
    /// (`tools.rateLimits`; RFC 6585 section 4).
    TooManyRequests {
        /// The JSON-RPC error.
        body: WireMessage,
        /// Seconds until the call would be admitted, at least 1.
        retry_after_secs: u64,
    },
}

impl Answer {
    /// A JSON-RPC error under `status`, echoing `id`.
    pub fn error(status: StatusCode, id: &Value, code: i64, message: &str) -> Self {
        Self::Json {
            status,
            body: error_response(id, code, message, None).into(),
            session: None,
        }
    }

    /// A JSON-RPC error under `status` with `error.data`.
    pub fn error_with_data(
        status: StatusCode,
        id: &Value,
        code: i64,
        message: &str,
        data: Value,
    ) -> Self {
        Self::Json {
            status,
            body: error_response(id, code, message, Some(data)).into(),
            session: None,
        }
    }

    /// The answer to a request the client cancelled with `notifications/cancelled`: no
    /// JSON-RPC response, since the receiver of a cancellation should not answer the cancelled
    /// request (MCP 2025-11-25, "Cancellation"; issue 12, item 2). A client that accepts SSE
    /// gets a stream that ends without a message; one whose `Accept` names only JSON
    /// (`json_only`) gets `202 Accepted` with no body (proxy/README.md, "Cancellation").
    pub fn cancelled(json_only: bool) -> Self {
        if json_only {
            Self::Accepted
        } else {
            Self::Stream(mpsc::channel(1).1)
        }
    }

    /// A JSON-RPC message with 200: a response relayed as it came (text kept), or one the
    /// proxy built.
    pub fn ok(body: impl Into<WireMessage>) -> Self {
        Self::Json {
            status: StatusCode::OK,
            body: body.into(),
            session: None,
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self {
            Self::Accepted => StatusCode::ACCEPTED.into_response(),
            Self::Json {
                status,
                body,
                session,
            } => {
                let mut response = (
                    status,
                    [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                    body.into_text(),
                )
                    .into_response();
                if let Some(value) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
                    response.headers_mut().insert(SESSION_HEADER, value);
                }
                response
            }
            Self::TooManyRequests {
                body,
                retry_after_secs,
            } => (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    (CONTENT_TYPE, HeaderValue::from_static("application/json")),
                    (RETRY_AFTER, HeaderValue::from(retry_after_secs)),
                ],
                body.into_text(),
            )
                .into_response(),
            Self::Stream(rx) => sse_response(stream_from(rx).map(|m| message_event(None, &m))),
            Self::Events(rx) => sse_response(stream_from(rx).map(event_block)),
        }
    }
}

/// The messages of `rx` as a stream.
pub fn stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The SSE block of one event of a resumable stream: its message, or the priming event.
pub fn event_block(event: StreamEvent) -> Sse {
    match event.message {
        Some(message) => message_event(Some(event.id), &message),
        None => priming_event(event.id),
    }
}

/// One JSON-RPC message as an SSE `message` event, with an `id` when the stream is resumable.
pub fn message_event(id: Option<String>, message: &WireMessage) -> Sse {
    Sse {
        event: Some("message".to_owned()),
        data: Some(message.sse_data().into_owned()),
        id,
        retry: None,
    }
}

/// The event that opens a resumable stream at MCP 2025-11-25: an id and an empty `data` field
/// ("Sending Messages to the Server", item 6), which clients skip as a message but remember as
/// the point to resume from.
pub fn priming_event(id: String) -> Sse {
    Sse {
        event: None,
        data: Some(String::new()),
        id: Some(id),
        retry: None,
    }
}

/// An SSE response (`text/event-stream`, `Cache-Control: no-cache`) with keep-alive comments
/// every [`SSE_KEEP_ALIVE`] and `X-Accel-Buffering: no`, so reverse proxies forward events as
/// they come.
pub fn sse_response<S>(events: S) -> Response
where
    S: futures::Stream<Item = Sse> + Send + 'static,
{
    let body = SseBody::new(events.map(Ok::<_, Infallible>))
        .with_keep_alive::<KeepAliveTimer>(KeepAlive::new().interval(SSE_KEEP_ALIVE));
    let mut response = Response::new(Body::new(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The tokio timer behind the keep-alive comments of [`sse_response`].
struct KeepAliveTimer(Pin<Box<tokio::time::Sleep>>);

impl Future for KeepAliveTimer {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl Timer for KeepAliveTimer {
    fn reset(mut self: Pin<&mut Self>, instant: std::time::Instant) {
        self.0
            .as_mut()
            .reset(tokio::time::Instant::from_std(instant));
    }

    fn from_duration(duration: Duration) -> Self {
        Self(Box::pin(tokio::time::sleep(duration)))
    }
}
