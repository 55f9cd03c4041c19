//! The operator's admin HTTP endpoints: `/metrics` (Prometheus text format) and `/healthz`
//! (liveness: the process serves HTTP).
//!
//! Not responsible for: readiness of McpUpstreams (that is their `Ready` condition).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// Content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The admin routes, serving `metrics`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(metrics)
}

async fn render_metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(CONTENT_TYPE, PROMETHEUS_TEXT)], metrics.render())
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, to_bytes};
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::*;

    async fn get_text(path: &str) -> (StatusCode, String) {
        let metrics = Arc::new(Metrics::new().expect("metrics register"));
        let request = Request::get(path).body(Body::empty()).expect("request");
        let response = router(metrics).oneshot(request).await.expect("infallible");
        let status = response.status();
        let body = to_bytes(response.into_body(), 1 << 20).await.expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn admin_metrics_serves_operator_metrics() {
        let (status, body) = get_text("/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains("berth_operator_reconciliations_total"),
            "{body}"
        );
        assert!(body.contains("berth_build_info"), "{body}");
    }

    #[tokio::test]
    async fn admin_healthz_answers_ok() {
        assert_eq!(
            get_text("/healthz").await,
            (StatusCode::OK, "ok".to_owned())
        );
    }
}
