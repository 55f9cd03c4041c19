//! The Streamable HTTP client side: one POST carrying one JSON-RPC message to the upstream, and
//! its reply as JSON, an SSE stream of messages, or `202 Accepted`.
//!
//! Source: MCP 2025-06-18, "Transports: Streamable HTTP" (§ Sending Messages to the Server,
//! § Session Management). No timeout lives here: callers enforce every budget around these
//! futures, so a black-holed upstream cannot stretch them (README.md "Why it exists", failure 4).

use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;
use sse_stream::SseByteStream;

use super::UpstreamError;
use crate::jsonrpc::WireMessage;

/// Header carrying the MCP session id (MCP 2025-06-18, "Session Management").
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Header carrying the negotiated protocol version on every request after `initialize`.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// Header mirroring a modern request's `method` (MCP 2026-07-28, SEP-2243).
pub const METHOD_HEADER: &str = "mcp-method";
/// Header mirroring a modern request's `params.name` or `params.uri` (SEP-2243).
pub const NAME_HEADER: &str = "mcp-name";
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
    client: reqwest::Client,
    url: reqwest::Url,
    era: std::sync::Arc<super::era::EraCache>,
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
    /// ever shows them.
    ///
    /// # Errors
    /// [`UpstreamError::Config`] for a malformed URL, header, or an HTTP client that cannot be
    /// built (the message names the header, never its value).
    pub fn new(
        url: &str,
        connect: Duration,
        headers: &[(String, String)],
    ) -> Result<Self, UpstreamError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| UpstreamError::Config(format!("invalid upstream url: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(UpstreamError::Config(format!(
                "invalid upstream url {url}: the scheme must be http or https"
            )));
        }
        let mut defaults = HeaderMap::new();
        for (name, value) in headers {
            let header_name =
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    UpstreamError::Config(format!("invalid upstream header name {name:?}"))
                })?;
            let mut header_value = HeaderValue::from_str(value).map_err(|_| {
                UpstreamError::Config(format!("invalid value for upstream header {name:?}"))
            })?;
            header_value.set_sensitive(true);
            defaults.insert(header_name, header_value);
        }
        // No redirect is followed: the credential headers above belong to the configured
        // upstream only (reqwest drops `Authorization` on a cross-origin redirect but would keep a
        // custom header such as `X-Api-Key`), and a POST of a JSON-RPC message has no business
        // moving. A 3xx is an upstream error with its status.
        // TCP_NODELAY (reqwest's default, stated here because it matters): small writes of a
        // request never wait for the upstream's delayed ACK (issue 12, item 0).
        let client = reqwest::Client::builder()
            .default_headers(defaults)
            .tcp_nodelay(true)
            .connect_timeout(connect)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| UpstreamError::Config(format!("failed to build http client: {e}")))?;
        Ok(Self {
            client,
            url,
            era: std::sync::Arc::default(),
        })
    }

    /// The protocol era the upstream was last found to speak (shared by clones).
    pub fn era(&self) -> &super::era::EraCache {
        &self.era
    }

    /// The endpoint URL.
    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// The endpoint URL as logs may show it: a user name and password in it (userinfo) are
    /// replaced by `redacted`, so they never reach a log line.
    pub fn shown_url(&self) -> reqwest::Url {
        let mut shown = self.url.clone();
        if !shown.username().is_empty() || shown.password().is_some() {
            let _ = shown.set_password(None);
            let _ = shown.set_username("redacted");
        }
        shown
    }

    /// POSTs one JSON-RPC message; returns the reply and the `Mcp-Session-Id` response header.
    /// `protocol_version` (the negotiated revision; `None` only for `initialize`) is sent as
    /// `MCP-Protocol-Version`, with or without a `session`.
    ///
    /// # Errors
    /// [`UpstreamError::SessionLost`] when `session` was sent and the upstream answered 404, or
    /// 400 with a body that speaks of the session (the Node SDK's answer for an unknown session);
    /// [`UpstreamError::Status`] for any other non-2xx; [`UpstreamError::Send`] when the request
    /// could not be sent; [`UpstreamError::Malformed`] for an unusable body.
    ///
    /// # Cancellation
    /// Cancel-safe: dropping the future abandons the HTTP request.
    pub async fn post(
        &self,
        message: &WireMessage,
        session: Option<&str>,
        protocol_version: Option<&str>,
    ) -> Result<(Reply, Option<String>), UpstreamError> {
        self.post_with(message, session, headers(protocol_version))
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
        let mut headers = headers(Some(protocol_version));
        for (name, value) in param_headers {
            if let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.insert(name, value);
            }
        }
        let method = message.get("method").and_then(Value::as_str);
        if let Some(value) = method.and_then(|m| HeaderValue::from_str(m).ok()) {
            headers.insert(METHOD_HEADER, value);
        }
        let target = method
            .and_then(|m| crate::revision::named_target(m, message.get("params")))
            .flatten();
        if let Some(value) =
            target.and_then(|name| HeaderValue::from_str(&crate::revision::header_value(name)).ok())
        {
            headers.insert(NAME_HEADER, value);
        }
        self.post_with(message, None, headers)
            .await
            .map(|(reply, _)| reply)
    }

    async fn post_with(
        &self,
        message: &WireMessage,
        session: Option<&str>,
        headers: HeaderMap,
    ) -> Result<(Reply, Option<String>), UpstreamError> {
        let protocol_version = headers
            .get(PROTOCOL_VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Names and constant values are static: no copy of them per request.
        let mut headers = headers;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        if let Some(value) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
            headers.insert(SESSION_HEADER, value);
        }
        let mut request = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(message.text().to_owned());
        // The current span is the upstream's parent (W3C Trace Context; issue 16).
        for (name, value) in crate::telemetry::traceparent_header() {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(UpstreamError::Send)?;
        let status = response.status();
        let session_id = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if !status.is_success() {
            let body = error_body(response).await;
            let lost = session.is_some()
                && (status == reqwest::StatusCode::NOT_FOUND
                    || (status == reqwest::StatusCode::BAD_REQUEST
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
        if status == reqwest::StatusCode::ACCEPTED {
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
                protocol_version,
                response,
            );
            Ok((Reply::Stream(stream), session_id))
        } else if starts_with_ignoring_case(content_type(), "application/json") {
            let bytes = response.bytes().await.map_err(UpstreamError::Read)?;
            let value = WireMessage::parse(&bytes)
                .map_err(|e| UpstreamError::Malformed(format!("invalid JSON body: {e}")))?;
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
            .map(sse_events))
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
    ) -> Result<Option<reqwest::Response>, UpstreamError> {
        let mut request = self
            .client
            .get(self.url.clone())
            .headers(headers(Some(protocol_version)))
            .header(ACCEPT, "text/event-stream")
            .header(SESSION_HEADER, session);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.map_err(UpstreamError::Send)?;
        let status = response.status();
        if status == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Ok(None);
        }
        if status == reqwest::StatusCode::NOT_FOUND {
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
        let response = self
            .client
            .delete(self.url.clone())
            .headers(headers(Some(protocol_version)))
            .header(SESSION_HEADER, session)
            .send()
            .await
            .map_err(UpstreamError::Send)?;
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
    ) -> futures::future::BoxFuture<'a, Result<Option<reqwest::Response>, UpstreamError>> {
        Box::pin(self.get_response(session, protocol_version, Some(last_event_id)))
    }
}

/// `MCP-Protocol-Version` when a version was negotiated: on every request after `initialize`,
/// with or without a session (a server without sessions needs it as much).
fn headers(protocol_version: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(value) = protocol_version.and_then(|v| HeaderValue::from_str(v).ok()) {
        headers.insert(PROTOCOL_VERSION_HEADER, value);
    }
    headers
}

/// Whether `text` begins with `prefix`, ASCII letters compared without case (media types are
/// case-insensitive; RFC 9110 section 8.3.1).
fn starts_with_ignoring_case(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
}

async fn error_body(response: reqwest::Response) -> String {
    let bytes = response.bytes().await.unwrap_or_default();
    let end = bytes.len().min(ERROR_BODY_LIMIT);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Turns an SSE response into `(event id, JSON-RPC message)` pairs, skipping events without
/// data; an event whose data is not JSON is logged and skipped (the stream stays usable).
fn sse_events(
    response: reqwest::Response,
) -> BoxStream<'static, Result<(Option<String>, WireMessage), UpstreamError>> {
    SseByteStream::new(response.bytes_stream())
        .filter_map(|event| async move {
            match event {
                Err(e) => Some(Err(UpstreamError::Malformed(format!("broken SSE stream: {e}")))),
                Ok(sse) => {
                    let data = sse.data.as_deref().map(str::trim).filter(|d| !d.is_empty())?;
                    match WireMessage::parse(data.as_bytes()) {
                        Ok(value) => Some(Ok((sse.id, value))),
                        Err(error) => {
                            tracing::warn!(%error, "skipped a non-JSON event on the upstream stream");
                            None
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
