//! Client authentication on the MCP endpoint, as HTTP: every method on `/mcp` (POST, GET,
//! DELETE) is checked before the body is read, and a refusal carries a JSON-RPC error with id
//! `null` (the unauthenticated body is never parsed). Issue 5 (static token), issue 15 (OAuth).
//!
//! - Static token (`downstreamAuth.bearerTokenEnv`): a missing or wrong token gets 401 with
//!   `WWW-Authenticate: Bearer realm="berth"`.
//! - OAuth (`downstreamAuth.oauth`; MCP "Authorization", RFC 6750 section 3, RFC 9728 section
//!   5.1): no token gets 401 with `WWW-Authenticate: Bearer resource_metadata="…"` and the
//!   required `scope`; an invalid one 401 with `error="invalid_token"` and an
//!   `error_description`; a valid one without a required scope 403 with
//!   `error="insufficient_scope"` and the `scope` needed; when the authorization server's keys
//!   cannot be fetched, 503 with `Retry-After`. The accepted token's [`Principal`] goes into the
//!   request's extensions.
//!
//! Refusals count as `berth_proxy_invalid_messages_total{reason}` with `unauthorized` (401),
//! `insufficient_scope` (403) or `auth_unavailable` (503), and each writes an audit event
//! ([`crate::client::audit`]). The client's `Authorization` header
//! is never forwarded upstream.
//!
//! Also here: the protected resource metadata routes (RFC 9728 section 3), served without
//! authentication.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use berth_crds::proxy_config::oauth::RESOURCE_METADATA_PATH;
use serde_json::Value;

use crate::access::auth::bearer::bearer_token;
use crate::access::auth::{DownstreamAuth, Principal, Rejection, ResourceServer};
use crate::front::mcp::state::Front;
use crate::wire::jsonrpc;

/// Seconds a client is told to wait when the authorization server's keys are unavailable.
const UNAVAILABLE_RETRY_SECS: u32 = 5;

/// Middleware: lets the request through when the proxy needs no authentication or the client
/// is authenticated; the OAuth caller's [`Principal`] is added to the request's extensions.
pub async fn require_auth(
    State(proxy): State<Arc<Front>>,
    mut request: Request,
    next: Next,
) -> Response {
    // Owned (a cheap clone): no borrow of the request, whose body is not `Sync`, lives across
    // the await below.
    let received = std::time::Instant::now();
    let authorization = request.headers().get(header::AUTHORIZATION).cloned();
    let authorization = authorization.as_ref();
    let refusal = match &proxy.downstream_auth {
        None => None,
        Some(DownstreamAuth::Bearer(token)) if token.admits(authorization) => None,
        Some(DownstreamAuth::Bearer(_)) => Some(static_token_refusal()),
        Some(DownstreamAuth::OAuth(server)) => {
            let token = authorization.and_then(bearer_token).map(str::to_owned);
            let verdict = match token {
                None => Err(Rejection::Missing),
                Some(token) => server.authenticate(&token).await,
            };
            match verdict {
                Ok(principal) => {
                    request.extensions_mut().insert::<Principal>(principal);
                    None
                }
                Err(rejection) => Some(oauth_refusal(server, &rejection)),
            }
        }
    };
    let Some((reason, response)) = refusal else {
        return next.run(request).await;
    };
    proxy
        .engine
        .metrics
        .invalid_messages
        .with_label_values(&[reason])
        .inc();
    proxy
        .engine
        .auditor
        .refused_request(reason, None, received.elapsed());
    response
}

fn static_token_refusal() -> (&'static str, Response) {
    tracing::info!("refused a request (authorization): missing or wrong static bearer token");
    let response = refusal(
        StatusCode::UNAUTHORIZED,
        "missing or invalid bearer token: send Authorization: Bearer <token>",
        "Bearer realm=\"berth\"".to_owned(),
    );
    ("unauthorized", response)
}

fn oauth_refusal(server: &ResourceServer, rejection: &Rejection) -> (&'static str, Response) {
    let spec = server.spec();
    let metadata = format!("resource_metadata=\"{}\"", spec.resource_metadata_url());
    let scope = |scopes: &[String]| format!("scope=\"{}\"", scopes.join(" "));
    let mut challenge = vec!["Bearer".to_owned()];
    let (status, reason, message) = match rejection {
        Rejection::Missing => {
            challenge.push(metadata);
            if !spec.required_scopes.is_empty() {
                challenge.push(scope(&spec.required_scopes));
            }
            let message =
                "authorization required: send Authorization: Bearer <access token>".to_owned();
            (StatusCode::UNAUTHORIZED, "unauthorized", message)
        }
        Rejection::InvalidToken(why) => {
            challenge.push("error=\"invalid_token\"".to_owned());
            challenge.push(format!("error_description=\"{}\"", quoted(why)));
            challenge.push(metadata);
            if !spec.required_scopes.is_empty() {
                challenge.push(scope(&spec.required_scopes));
            }
            let message = format!("invalid access token: {why}");
            (StatusCode::UNAUTHORIZED, "unauthorized", message)
        }
        Rejection::InsufficientScope(missing) => {
            challenge.push("error=\"insufficient_scope\"".to_owned());
            challenge.push(scope(&spec.required_scopes));
            challenge.push(format!(
                "error_description=\"the token lacks scope {}\"",
                quoted(&missing.join(" "))
            ));
            challenge.push(metadata);
            let message = format!("the access token lacks scope {}", missing.join(" "));
            (StatusCode::FORBIDDEN, "insufficient_scope", message)
        }
        Rejection::Unavailable(why) => {
            tracing::warn!(why = %crate::observe::escaped::Escaped(&why.to_string()), "refused a request: the authorization server's keys are unavailable");
            let message = "the authorization server's signing keys are unavailable; retry later";
            let mut response = refusal(StatusCode::SERVICE_UNAVAILABLE, message, String::new());
            response.headers_mut().remove(header::WWW_AUTHENTICATE);
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(UNAVAILABLE_RETRY_SECS),
            );
            return ("auth_unavailable", response);
        }
    };
    tracing::info!(message = %crate::observe::escaped::Escaped(&message), "refused a request (authorization)");
    // Parameters are comma-separated after the scheme (RFC 7235 section 2.1).
    let value = format!("{} {}", challenge[0], challenge[1..].join(", "));
    (reason, refusal(status, &message, value))
}

/// A `quoted-string` body: `"` and `\` escaped, control characters dropped (RFC 7230 3.2.6).
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars().filter(|c| !c.is_control()) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn refusal(status: StatusCode, message: &str, challenge: String) -> Response {
    let body = jsonrpc::error_response(&Value::Null, jsonrpc::INVALID_REQUEST, message, None);
    let mut response = (status, axum::Json(body)).into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge)
        && !challenge.is_empty()
    {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The protected resource metadata routes (RFC 9728 section 3.1): the root form and the
/// path-suffixed form of the configured audience, plus the `/mcp` suffix; empty without OAuth.
pub fn metadata_router(proxy: &Arc<Front>) -> Router<Arc<Front>> {
    let Some(DownstreamAuth::OAuth(server)) = &proxy.downstream_auth else {
        return Router::new();
    };
    let mut paths = vec![
        RESOURCE_METADATA_PATH.to_owned(),
        format!("{RESOURCE_METADATA_PATH}{}", berth_crds::MCP_PATH),
    ];
    let suffixed = format!("{RESOURCE_METADATA_PATH}{}", server.spec().audience_path());
    if !paths.contains(&suffixed) {
        paths.push(suffixed);
    }
    let document = server.metadata();
    let mut router = Router::new();
    for path in paths {
        let document = document.clone();
        router = router.route(&path, get(move || async move { axum::Json(document) }));
    }
    router
}
