//! What the front sends back for one POST, and the one place that turns it into HTTP.
//!
//! Statuses follow MCP 2025-06-18 "Transports: Streamable HTTP": 202 for accepted notifications
//! and responses, 400 for a malformed or session-less request, 404 for an unknown session;
//! JSON-RPC errors always echo the request id when there was one.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::jsonrpc::WireMessage;
use crate::jsonrpc::error_response;
use crate::upstream::http::SESSION_HEADER;

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
    /// `202 Accepted` with no body: a notification or response, or a request the client
    /// cancelled ([`Answer::cancelled`]).
    Accepted,
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
            Self::Stream(rx) => {
                let events = tokio_stream_from(rx).map(|message| {
                    Ok::<_, Infallible>(Event::default().event("message").data(message.sse_data()))
                });
                sse_response(events)
            }
        }
    }
}

fn tokio_stream_from(
    mut rx: mpsc::Receiver<WireMessage>,
) -> impl futures::Stream<Item = WireMessage> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// An SSE response with keep-alive comments every [`SSE_KEEP_ALIVE`] and
/// `X-Accel-Buffering: no`, so reverse proxies forward events as they come.
pub fn sse_response<S>(events: S) -> Response
where
    S: futures::Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(SSE_KEEP_ALIVE))
        .into_response();
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
