//! The Streamable HTTP client side: one POST carrying one JSON-RPC message to the upstream, and
//! its reply as JSON, an SSE stream of messages, or `202 Accepted`.
//!
//! Source: MCP 2025-06-18, "Transports: Streamable HTTP" (§ Sending Messages to the Server,
//! § Session Management). No timeout lives here: callers enforce every budget around these
//! futures, so a black-holed upstream cannot stretch them (README.md "Why it exists", failure 4).

mod bounded;
pub(super) mod client;
mod target;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use http_body_util::BodyExt;

pub use self::bounded::ReplyLimit;
pub use self::client::HttpError;
use self::client::{Body, Client};
use self::target::Target;
use super::UpstreamError;
use crate::wire::headers::{
    LAST_EVENT_ID_HEADER, METHOD_HEADER, NAME_HEADER, PROTOCOL_VERSION_HEADER, SESSION_HEADER,
};
use crate::wire::jsonrpc::WireMessage;

/// An upstream's HTTP response, its body not yet read.
pub type Response = http::Response<Body>;

/// Most bytes of an upstream error body kept for logs and client messages.
pub const ERROR_BODY_LIMIT: usize = 512;

/// The upstream's reply to one POST.
pub enum Reply {
    /// `202 Accepted`: the message was a notification or response.
    Accepted,
    /// `application/json`: exactly one JSON-RPC message.
    Json(WireMessage),
    /// `text/event-stream`: JSON-RPC messages in order, the final response last.
    Stream(BoxStream<'static, Result<WireMessage, UpstreamError>>),
}

/// A Streamable HTTP endpoint of an upstream MCP server.
#[derive(Clone)]
pub struct HttpUpstream {
    client: Client,
    target: Arc<Target>,
    era: Arc<super::era::EraCache>,
    reply_limit: ReplyLimit,
}

/// Shows the URL as [`HttpUpstream::shown_url`] does.
impl std::fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpUpstream")
            .field("url", &self.shown_url().as_str())
            .finish_non_exhaustive()
    }
}

impl HttpUpstream {
    /// Creates a client for `url`. `connect` bounds the TCP (and TLS) connect only. `headers`
    /// are sent on every request; their values are marked sensitive, so no log or debug output
    /// ever shows them. The HTTP client is chosen by `client::Route`: hyper directly for a plain
    /// `http://` upstream no proxy setting applies to, reqwest otherwise.
    ///
    /// # Errors
    /// [`UpstreamError::Config`] for a malformed URL, header, or an HTTP client that cannot be
    /// built (the message names the header, never its value).
    pub fn new(
        url: &str,
        connect: Duration,
        headers: &[(String, String)],
    ) -> Result<Self, UpstreamError> {
        let target = Target::parse(url, headers)?;
        // No redirect is followed (by either client): the credential headers above belong to
        // the configured upstream only, and a POST of a JSON-RPC message has no business
        // moving. A 3xx is an upstream error with its status. TCP_NODELAY on both: small writes
        // of a request never wait for the upstream's delayed ACK (issue 12, item 0).
        let client = Client::new(&target.uri, connect)
            .map_err(|e| UpstreamError::Config(format!("failed to build http client: {e}")))?;
        Ok(Self {
            client,
            target: Arc::new(target),
            era: Arc::default(),
            reply_limit: ReplyLimit::default(),
        })
    }

    /// The same upstream with `limit` on each reply (`limits.maxReplyBytes`; default 16 MiB): a
    /// JSON body or one SSE event over it fails the request with [`UpstreamError::TooLarge`].
    #[must_use]
    pub fn with_reply_limit(mut self, limit: ReplyLimit) -> Self {
        self.reply_limit = limit;
        self
    }

    /// A request to the endpoint: `headers`, then each configured header the request does not
    /// set itself.
    fn request(&self, method: Method, mut headers: HeaderMap, body: Bytes) -> http::Request<Bytes> {
        for (name, value) in &self.target.headers {
            if !headers.contains_key(name) {
                headers.insert(name.clone(), value.clone());
            }
        }
        let mut request = http::Request::new(body);
        *request.method_mut() = method;
        *request.uri_mut() = self.target.uri.clone();
        *request.headers_mut() = headers;
        request
    }

    /// Sends `request`.
    ///
    /// # Errors
    /// [`UpstreamError::Send`] when it could not be sent or no response head arrived.
    async fn send(&self, request: http::Request<Bytes>) -> Result<Response, UpstreamError> {
        self.client.send(request).await.map_err(UpstreamError::Send)
    }

    /// The protocol era the upstream was last found to speak (shared by clones).
    pub fn era(&self) -> &super::era::EraCache {
        &self.era
    }

    /// The endpoint URL.
    pub fn url(&self) -> &reqwest::Url {
        &self.target.url
    }

    /// The endpoint URL as logs may show it: a user name and password in it (userinfo) are
    /// replaced by `redacted`, so they never reach a log line.
    pub fn shown_url(&self) -> reqwest::Url {
        target::shown(&self.target.url)
    }

    /// POSTs one JSON-RPC message; returns the reply and the `Mcp-Session-Id` response header.
    /// `protocol_version` (the negotiated revision; `None` only for `initialize`) is sent as
    /// `MCP-Protocol-Version`, with or without a `session`.
    ///
    /// # Errors
    /// [`UpstreamError::SessionLost`] when `session` was sent and the upstream answered 404, or
    /// 400 with a body that speaks of the session (the Node SDK's answer for an unknown session);
    /// [`UpstreamError::Status`] for any other non-2xx; [`UpstreamError::Send`] when the request
    /// could not be sent; [`UpstreamError::Malformed`] for an unusable body;
    /// [`UpstreamError::TooLarge`] for a JSON body over the reply limit (an SSE event over it
    /// ends the reply's stream with that error).
    ///
    /// # Cancellation
    /// Cancel-safe: dropping the future abandons the HTTP request.
    pub async fn post(
        &self,
        message: &WireMessage,
        session: Option<&str>,
        protocol_version: Option<&str>,
    ) -> Result<(Reply, Option<String>), UpstreamError> {
        self.post_with(message, session, protocol_version, HeaderMap::new())
            .await
    }

    /// POSTs one JSON-RPC request to a modern (MCP 2026-07-28) upstream: no session, and the
    /// headers that mirror the body (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`;
    /// "Streamable HTTP", "Request Metadata").
    ///
    /// # Errors
    /// As [`Self::post`] (never [`UpstreamError::SessionLost`]: there is no session).
    pub async fn post_modern(
        &self,
        message: &WireMessage,
        protocol_version: &str,
        param_headers: &[(String, String)],
    ) -> Result<Reply, UpstreamError> {
        let mut headers = HeaderMap::new();
        for (name, value) in param_headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.insert(name, value);
            }
        }
        // Read through the envelope: the request's `params` stay unparsed (issue 14).
        let method = message.member_str(&["method"]);
        if let Some(value) = method
            .as_deref()
            .and_then(|m| HeaderValue::from_str(m).ok())
        {
            headers.insert(METHOD_HEADER, value);
        }
        let target = method
            .as_deref()
            .and_then(|m| crate::wire::revision::named_target(message, m))
            .flatten();
        if let Some(value) = target.and_then(|name| {
            HeaderValue::from_str(&crate::wire::revision::header_value(&name)).ok()
        }) {
            headers.insert(NAME_HEADER, value);
        }
        self.post_with(message, None, Some(protocol_version), headers)
            .await
            .map(|(reply, _)| reply)
    }

    /// POSTs `message` with `headers` (a modern request's mirrored ones) and the headers every
    /// POST carries: `MCP-Protocol-Version`, `Content-Type`, `Accept`, the session's id and
    /// the trace context.
    async fn post_with(
        &self,
        message: &WireMessage,
        session: Option<&str>,
        protocol_version: Option<&str>,
        mut headers: HeaderMap,
    ) -> Result<(Reply, Option<String>), UpstreamError> {
        if let Some(version) = protocol_version {
            set_protocol_version(&mut headers, version);
        }
        // Names and constant values are static: no copy of them per request.
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(value) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
            headers.insert(SESSION_HEADER, value);
        }
        // The current span is the upstream's parent (W3C Trace Context; issue 16).
        for (name, value) in crate::observe::telemetry::traceparent_header() {
            headers.insert(name, value);
        }
        let request = self.request(Method::POST, headers, message.to_bytes());
        let response = self.send(request).await?;
        let status = response.status();
        let session_id = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if !status.is_success() {
            let body = error_body(response).await;
            let lost = session.is_some()
                && (status == StatusCode::NOT_FOUND
                    || (status == StatusCode::BAD_REQUEST
                        && body.to_ascii_lowercase().contains("session")));
            return Err(if lost {
                UpstreamError::SessionLost
            } else {
                UpstreamError::Status {
                    status: status.as_u16(),
                    body,
                }
            });
        }
        if status == StatusCode::ACCEPTED {
            return Ok((Reply::Accepted, session_id));
        }
        let content_type = || {
            response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
        };
        if starts_with_ignoring_case(content_type(), "text/event-stream") {
            let stream = super::resume::call_stream(
                self.clone(),
                session.map(str::to_owned),
                protocol_version.map(str::to_owned),
                response,
            );
            Ok((Reply::Stream(stream), session_id))
        } else if starts_with_ignoring_case(content_type(), "application/json") {
            let declared = response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.trim().parse().ok());
            let bytes = self
                .reply_limit
                .json_body(response.into_body(), declared)
                .await?;
            let value = WireMessage::parse_unambiguous(&bytes)
                .map_err(|e| UpstreamError::Malformed(format!("unusable JSON body: {e}")))?;
            Ok((Reply::Json(value), session_id))
        } else {
            Err(UpstreamError::Malformed(format!(
                "unexpected content type {:?}",
                content_type().to_ascii_lowercase()
            )))
        }
    }

    /// Opens the session's standalone server stream with `GET` (MCP 2025-06-18, "Listening for
    /// Messages from the Server"). `Ok(None)` when the upstream offers none (405).
    ///
    /// # Errors
    /// [`UpstreamError::SessionLost`] for 404; [`UpstreamError::Status`] for other errors;
    /// [`UpstreamError::Send`] when the request could not be sent.
    pub async fn get(
        &self,
        session: &str,
        protocol_version: &str,
        last_event_id: Option<&str>,
    ) -> Result<
        Option<BoxStream<'static, Result<(Option<String>, WireMessage), UpstreamError>>>,
        UpstreamError,
    > {
        Ok(self
            .get_response(session, protocol_version, last_event_id)
            .await?
            .map(|response| sse_events(&self.reply_limit, response)))
    }

    /// As [`Self::get`], the response unparsed.
    ///
    /// # Errors
    /// As [`Self::get`].
    pub(super) async fn get_response(
        &self,
        session: &str,
        protocol_version: &str,
        last_event_id: Option<&str>,
    ) -> Result<Option<Response>, UpstreamError> {
        let mut headers = HeaderMap::new();
        set_protocol_version(&mut headers, protocol_version);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        insert_value(&mut headers, SESSION_HEADER, session)?;
        if let Some(id) = last_event_id {
            insert_value(&mut headers, LAST_EVENT_ID_HEADER, id)?;
        }
        let response = self
            .send(self.request(Method::GET, headers, Bytes::new()))
            .await?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(None);
        }
        if status == StatusCode::NOT_FOUND {
            return Err(UpstreamError::SessionLost);
        }
        if !status.is_success() {
            let body = error_body(response).await;
            return Err(UpstreamError::Status {
                status: status.as_u16(),
                body,
            });
        }
        Ok(Some(response))
    }

    /// Ends an upstream session with `DELETE`, carrying the session's negotiated
    /// `protocol_version` like every request after the handshake (MCP 2025-06-18, "Session
    /// Management" and "Protocol Version Header"; issue 12, item 4). Best effort: errors are
    /// returned, not retried.
    ///
    /// # Errors
    /// [`UpstreamError::Send`] when the request could not be sent; [`UpstreamError::Status`]
    /// for any status but 2xx (405 means the upstream does not let clients end sessions; 404
    /// that it no longer knows this one).
    ///
    /// # Cancellation
    /// Cancel-safe: dropping the future abandons the HTTP request.
    pub async fn delete(&self, session: &str, protocol_version: &str) -> Result<(), UpstreamError> {
        let mut headers = HeaderMap::new();
        set_protocol_version(&mut headers, protocol_version);
        insert_value(&mut headers, SESSION_HEADER, session)?;
        let response = self
            .send(self.request(Method::DELETE, headers, Bytes::new()))
            .await?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        Err(UpstreamError::Status {
            status: status.as_u16(),
            body: error_body(response).await,
        })
    }
}

/// A call's SSE stream is re-opened with [`HttpUpstream::get_response`].
impl super::resume::Reopen for HttpUpstream {
    fn reopen<'a>(
        &'a self,
        session: &'a str,
        protocol_version: &'a str,
        last_event_id: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<Response>, UpstreamError>> {
        Box::pin(self.get_response(session, protocol_version, Some(last_event_id)))
    }

    fn reply_limit(&self) -> &ReplyLimit {
        &self.reply_limit
    }
}

pub(super) use self::bounded::sse_events as bounded_sse_events;

/// Sets `MCP-Protocol-Version`, the negotiated revision: sent on every request after
/// `initialize`, with or without a session (a server without sessions needs it as much).
fn set_protocol_version(headers: &mut HeaderMap, protocol_version: &str) {
    if let Ok(value) = HeaderValue::from_str(protocol_version) {
        headers.insert(PROTOCOL_VERSION_HEADER, value);
    }
}

/// Sets `name` to `value`.
///
/// # Errors
/// [`UpstreamError::Send`] when `value` cannot be a header value (a control character in a
/// session id or event id the upstream gave): the request cannot be sent.
fn insert_value(
    headers: &mut HeaderMap,
    name: HeaderName,
    value: &str,
) -> Result<(), UpstreamError> {
    let value = HeaderValue::from_str(value).map_err(|e| UpstreamError::Send(HttpError::new(e)))?;
    headers.insert(name, value);
    Ok(())
}

/// Whether `text` begins with `prefix`, ASCII letters compared without case (media types are
/// case-insensitive; RFC 9110 section 8.3.1).
fn starts_with_ignoring_case(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
}

/// The first [`ERROR_BODY_LIMIT`] bytes of a non-2xx reply's body, as text: the rest is never
/// read (dropping the body closes its connection), so an upstream answering an error with an
/// endless body costs the proxy this much and no more (issue 39, item 3). A body that breaks
/// gives what was read.
async fn error_body(response: Response) -> String {
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while bytes.len() < ERROR_BODY_LIMIT {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let room = ERROR_BODY_LIMIT - bytes.len();
                    bytes.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            Some(Err(_)) | None => break,
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Turns an SSE response into `(event id, JSON-RPC message)` pairs, skipping events without
/// data; an event whose data is not JSON is logged and skipped (the stream stays usable). An
/// event over `limit` ends the stream with [`UpstreamError::TooLarge`].
fn sse_events(
    limit: &ReplyLimit,
    response: Response,
) -> BoxStream<'static, Result<(Option<String>, WireMessage), UpstreamError>> {
    let limit = limit.clone();
    bounded::sse_events(&limit, response.into_body())
        .filter_map(move |event| {
            let limit = limit.clone();
            async move {
            match event {
                Err(e) => Some(Err(limit.sse_error(&e))),
                Ok(sse) => {
                    let data = sse.data.as_deref().map(str::trim).filter(|d| !d.is_empty())?;
                    match WireMessage::parse_unambiguous(data.as_bytes()) {
                        Ok(value) => Some(Ok((sse.id, value))),
                        Err(error) => {
                            tracing::warn!(%error, "skipped an unusable event on the upstream stream");
                            None
                        }
                    }
                }
            }
            }
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn shown(url: &str) -> String {
        crate::install_crypto_provider();
        HttpUpstream::new(url, Duration::from_secs(1), &[])
            .expect("upstream")
            .shown_url()
            .to_string()
    }

    #[test]
    fn userinfo_in_the_upstream_url_is_redacted_for_display() {
        assert_eq!(
            shown("http://admin:s3cr3t@127.0.0.1:3001/mcp"),
            "http://redacted@127.0.0.1:3001/mcp"
        );
        assert!(!shown("https://tok3n@example.test/mcp").contains("tok3n"));
        assert_eq!(
            shown("http://127.0.0.1:3001/mcp"),
            "http://127.0.0.1:3001/mcp"
        );
    }
}
