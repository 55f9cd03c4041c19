//! A client message refused before anything reached the upstream: counted in
//! `berth_proxy_invalid_messages_total{reason}` and answered with a JSON-RPC error under the
//! request's id. Not responsible for: deciding what is invalid (the front and its parts do).

use axum::http::StatusCode;
use serde_json::Value;

use crate::observe::metrics::Metrics;
use crate::observe::telemetry;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;

/// A client message refused before anything reached the upstream: counted in
/// `berth_proxy_invalid_messages_total{reason}` and answered with a JSON-RPC error under `id`.
pub(super) fn refused(
    metrics: &Metrics,
    reason: &'static str,
    status: StatusCode,
    id: &Value,
    code: i64,
    message: &str,
) -> Answer {
    metrics.invalid_messages.with_label_values(&[reason]).inc();
    telemetry::spans::record_outcome(
        &tracing::Span::current(),
        crate::wire::outcome::Outcome::Rejected,
    );
    Answer::error(status, id, code, message)
}

/// A request naming a session this replica does not hold: 404, the client re-initializes.
pub(super) fn unknown_session(metrics: &Metrics, id: &Value) -> Answer {
    refused(
        metrics,
        "unknown_session",
        StatusCode::NOT_FOUND,
        id,
        jsonrpc::INVALID_REQUEST,
        "session not found: it expired or was never issued; send initialize without a session id",
    )
}
