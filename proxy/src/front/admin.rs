//! The admin endpoints on their own port: `/metrics` (Prometheus text format), `/healthz`
//! (liveness: the proxy process serves HTTP) and `/readyz` (readiness: the upstream session is
//! initialized and, unless the probe policy is `Never`, the tool list was obtained).
//!
//! Liveness never depends on the upstream, so a dead upstream takes the pod out of the Service
//! without a restart loop (README.md, "Design").

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::observe::metrics::Metrics;
use crate::transport::upstream::Upstream;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct Admin {
    /// The shared upstream: readiness, its tool listing, its last error.
    pub upstream: Arc<Upstream>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// Set when a drain began: `/readyz` answers 503 `draining`.
    pub draining: Arc<AtomicBool>,
}

/// The admin routes.
pub fn router(admin: Admin) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/tools", get(tools))
        .route("/upstream", get(upstream))
        .with_state(admin)
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

/// `{"ready", "lastError", "era", "protocolVersion", "stdio": {"children", "restarts"}}`
/// (`era`: `legacy` or `modern` once the upstream was probed, `null` before): why the upstream is not ready
/// (for a stdio child: how it ended and its last stderr lines, redacted) and, for stdio, the
/// live children and restart count, for the operator's status (field cases BR-13 b, BR-34).
async fn upstream(State(admin): State<Admin>) -> impl IntoResponse {
    let mut body = serde_json::json!({
        "ready": admin.upstream.is_ready(),
        "lastError": admin.upstream.last_error(),
        "era": admin.upstream.endpoint().era().get().map(|era| era.as_label()),
        "protocolVersion": admin.upstream.current().map(|s| s.protocol_version().to_owned()),
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
