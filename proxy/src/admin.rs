//! The admin endpoints on their own port: `/metrics` (Prometheus text format), `/healthz`
//! (liveness: the proxy process serves HTTP) and `/readyz` (readiness: the upstream session is
//! initialized and, unless the probe policy is `Never`, the tool list was obtained).
//!
//! Liveness never depends on the upstream, so a dead upstream takes the pod out of the Service
//! without a restart loop (README.md, "Design").

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::state::Proxy;

/// The admin routes.
pub fn router(proxy: Arc<Proxy>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/tools", get(tools))
        .route("/upstream", get(upstream))
        .with_state(proxy)
}

async fn metrics(State(proxy): State<Arc<Proxy>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        proxy.metrics.render(),
    )
}

/// `{"count": N, "fingerprint": "sha256:...", "drifted": [..]}` of the last tool listing, for
/// the operator's status and for pinning `toolsProbe.expectedFingerprint`.
async fn tools(State(proxy): State<Arc<Proxy>>) -> impl IntoResponse {
    axum::Json(proxy.upstream.tools_summary())
}

/// `{"ready", "lastError", "era", "protocolVersion", "stdio": {"children", "restarts"}}`
/// (`era`: `legacy` or `modern` once the upstream was probed, `null` before): why the upstream is not ready
/// (for a stdio child: how it ended and its last stderr lines, redacted) and, for stdio, the
/// live children and restart count, for the operator's status (field cases BR-13 b, BR-34).
async fn upstream(State(proxy): State<Arc<Proxy>>) -> impl IntoResponse {
    let mut body = serde_json::json!({
        "ready": proxy.upstream.is_ready(),
        "lastError": proxy.upstream.last_error(),
        "era": proxy.upstream.endpoint().era().get().map(|era| era.as_label()),
        "protocolVersion": proxy.upstream.current().map(|s| s.protocol_version().to_owned()),
    });
    if proxy.upstream.endpoint().stdio().is_some() {
        body["stdio"] = serde_json::json!({
            "children": proxy.metrics.stdio.children.get(),
            "restarts": proxy.metrics.stdio.restarts.get(),
        });
    }
    axum::Json(body)
}

async fn readyz(State(proxy): State<Arc<Proxy>>) -> impl IntoResponse {
    if proxy.draining.load(std::sync::atomic::Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining".to_owned())
    } else if proxy.upstream.is_ready() {
        (StatusCode::OK, "ready".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            proxy.upstream.not_ready_reason(),
        )
    }
}
