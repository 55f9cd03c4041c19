//! The admin endpoints on their own port: `/metrics` (Prometheus text format), `/healthz`
//! (liveness: the proxy process serves HTTP) and `/readyz` (readiness: the upstream session is
//! initialized and, unless the probe policy is `Never`, the tool list was obtained).
//!
//! Liveness never depends on the upstream, so a dead upstream takes the pod out of the Service
//! without a restart loop (README.md, "Design").
//!
//! The diagnostics, `/tools` (tool names and fingerprints) and `/upstream` (the upstream's last
//! error, a stdio child's last stderr lines), are not public (issue 39, item 10): a peer that
//! is not on loopback must send `Authorization: Bearer <token>` whose SHA-256 is
//! `diagnosticsTokenSha256` (the operator's); without that setting they answer loopback peers
//! only. Anything else gets 401 with no body, counted in
//! `berth_proxy_diagnostics_refusals_total`. `/metrics`, `/healthz` and `/readyz` stay open to
//! scrapers and probes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::observe::metrics::Metrics;
use crate::transport::upstream::Upstream;
use crate::transport::upstream::exposure::Exposure;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct Admin {
    /// The shared upstream: readiness, its tool listing, its last error.
    pub upstream: Arc<Upstream>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Set when a drain began: `/readyz` answers 503 `draining`.
    pub draining: Arc<AtomicBool>,
    /// SHA-256 of the diagnostics token (`diagnosticsTokenSha256`); `None`: loopback only.
    pub diagnostics_token: Option<[u8; 32]>,
    /// Whether the upstream's port answers on the pod IP too (issue 40, item 3).
    pub exposure: Arc<Exposure>,
}

/// The admin routes.
pub fn router(admin: Admin) -> Router {
    let diagnostics = Router::new()
        .route("/tools", get(tools))
        .route("/upstream", get(upstream))
        .route_layer(axum::middleware::from_fn_with_state(
            admin.clone(),
            diagnostics_access,
        ));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(diagnostics)
        .with_state(admin)
}

/// Lets a diagnostics request through from a loopback peer, or with the diagnostics token;
/// else 401, counted.
async fn diagnostics_access(
    State(admin): State<Admin>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let allowed = peer.ip().is_loopback()
        || admin.diagnostics_token.is_some_and(|expected| {
            bearer(request.headers()).is_some_and(|token| {
                let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
                bool::from(digest.ct_eq(&expected))
            })
        });
    if allowed {
        return next.run(request).await;
    }
    admin.metrics.connections.diagnostics_refused.inc();
    StatusCode::UNAUTHORIZED.into_response()
}

/// The token of an `Authorization: Bearer` header.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The SHA-256 of `diagnosticsTokenSha256` (64 hex digits, as checked by the config).
pub fn diagnostics_digest(text: Option<&str>) -> Option<[u8; 32]> {
    let mut digest = [0u8; 32];
    hex::decode_to_slice(text?, &mut digest).ok()?;
    Some(digest)
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        admin.metrics.render(),
    )
}

/// `{"count": N, "fingerprint": "sha256:...", "drifted": [..]}` of the last tool listing, for
/// the operator's status and for pinning `toolsProbe.expectedFingerprint`.
async fn tools(State(admin): State<Admin>) -> impl IntoResponse {
    axum::Json(admin.upstream.tools_summary())
}

/// `{"ready", "lastError", "era", "protocolVersion", "exposed", "stdio": {"children", "restarts"}}`
/// (`era`: `legacy` or `modern` once the upstream was probed, `null` before; `exposed`: whether
/// the upstream's port answers on the pod IP too, `null` when not checked or not known yet,
/// issue 40, item 3): why the upstream is not ready
/// (for a stdio child: how it ended and its last stderr lines, redacted) and, for stdio, the
/// live children and restart count, for the operator's status (field cases BR-13 b, BR-34).
async fn upstream(State(admin): State<Admin>) -> impl IntoResponse {
    let mut body = serde_json::json!({
        "ready": admin.upstream.is_ready(),
        "lastError": admin.upstream.last_error(),
        "era": admin.upstream.endpoint().era().get().map(|era| era.as_label()),
        "protocolVersion": admin.upstream.current().map(|s| s.protocol_version().to_owned()),
        "exposed": admin.exposure.get(),
    });
    if admin.upstream.endpoint().stdio().is_some() {
        body["stdio"] = serde_json::json!({
            "children": admin.metrics.stdio.children.get(),
            "restarts": admin.metrics.stdio.restarts.get(),
        });
    }
    axum::Json(body)
}

async fn readyz(State(admin): State<Admin>) -> impl IntoResponse {
    if admin.draining.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining".to_owned())
    } else if admin.upstream.is_ready() {
        (StatusCode::OK, "ready".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            admin.upstream.not_ready_reason(),
        )
    }
}
