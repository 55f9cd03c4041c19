//! Client authentication on the MCP endpoint: `Authorization: Bearer <token>` (RFC 6750) with the
//! token from the environment variable `downstreamAuth.bearerTokenEnv` names (issue 5, issue 7).
//!
//! Every method on `/mcp` (POST, GET, DELETE) is checked before the body is read. A missing or
//! wrong token gets `401 Unauthorized` with `WWW-Authenticate: Bearer realm="berth"` and a
//! JSON-RPC error body (id `null`: the unauthenticated body is never parsed), and counts as
//! `berth_proxy_invalid_messages_total{reason="unauthorized"}`. The comparison is constant-time.
//! The client's `Authorization` header is never forwarded upstream: the upstream credential is
//! the proxy's own (`upstream.headers`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use subtle::ConstantTimeEq;

use crate::jsonrpc;
use crate::server::Proxy;

/// The token clients must present. Its `Debug` never shows the value.
#[derive(Clone)]
pub struct BearerToken(Vec<u8>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl BearerToken {
    /// The expected token; `None` when `token` is empty or only whitespace (a configuration
    /// error the caller reports: an empty token would let anyone in).
    pub fn new(token: &str) -> Option<Self> {
        let token = token.trim();
        (!token.is_empty()).then(|| Self(token.as_bytes().to_vec()))
    }

    /// Whether `authorization` (the header's value) is `Bearer <this token>`; the scheme is
    /// case-insensitive (RFC 7235 section 2.1).
    pub fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(value) = authorization.map(HeaderValue::as_bytes) else {
            return false;
        };
        let Some((scheme, presented)) = split_scheme(value) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer") && bool::from(presented.ct_eq(&self.0))
    }
}

fn split_scheme(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = value.iter().position(|b| *b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    Some((scheme, rest.trim_ascii()))
}

/// Middleware: lets the request through when the proxy has no token or the client presented it.
pub async fn require_bearer(
    State(proxy): State<Arc<Proxy>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = &proxy.downstream_token else {
        return next.run(request).await;
    };
    if token.admits(request.headers().get(header::AUTHORIZATION)) {
        return next.run(request).await;
    }
    proxy
        .metrics
        .invalid_messages
        .with_label_values(&["unauthorized"])
        .inc();
    let body = jsonrpc::error_response(
        &Value::Null,
        jsonrpc::INVALID_REQUEST,
        "missing or invalid bearer token: send Authorization: Bearer <token>",
        None,
    );
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"berth\""),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_token_admits_only_the_exact_token() {
        let token = BearerToken::new("s3cret-token").expect("non-empty");
        let header = |v: &str| HeaderValue::from_str(v).expect("valid header");
        assert!(token.admits(Some(&header("Bearer s3cret-token"))));
        assert!(token.admits(Some(&header("bearer s3cret-token"))));
        assert!(!token.admits(None));
        assert!(!token.admits(Some(&header("Bearer s3cret-toke"))));
        assert!(!token.admits(Some(&header("Bearer s3cret-token-longer"))));
        assert!(!token.admits(Some(&header("Basic s3cret-token"))));
        assert!(!token.admits(Some(&header("s3cret-token"))));
        assert!(!token.admits(Some(&header("Bearer"))));
        assert!(BearerToken::new("  ").is_none());
        assert_eq!(format!("{token:?}"), "BearerToken(<redacted>)");
    }
}
