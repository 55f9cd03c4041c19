//! The metrics of the limits the proxy holds against hostile upstreams and clients (issue 39,
//! `limits`), registered in the proxy's one registry. Every name is in `docs/metrics.md`.
//!
//! Not responsible for: the limits themselves (the transports, the front and the engine hold
//! them) or the limits that have metrics of their own elsewhere (the request body,
//! `berth_proxy_invalid_messages_total{reason="body"}`; the stdio line,
//! `berth_proxy_stdio_skipped_lines_total{reason="too_long"}`).

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

/// Handles to the limit metrics.
#[derive(Debug, Clone)]
pub struct LimitMetrics {
    /// `berth_proxy_upstream_replies_refused_total{reason}`: upstream HTTP replies not relayed
    /// because of a limit: `too_large` (a JSON body or one SSE event over
    /// `limits.maxReplyBytes`).
    pub upstream_replies_refused: IntCounterVec,
    /// `berth_proxy_subscriptions_refused_total{limit}`: resource subscriptions refused by a
    /// limit: `max_listen_uris` (a `subscriptions/listen` naming more URIs than
    /// `limits.maxListenUris`), `max_subscriptions_per_session` (a session past
    /// `limits.maxSubscriptionsPerSession`), `max_uri_bytes` (a URI longer than
    /// `limits.maxUriBytes`).
    pub subscriptions_refused: IntCounterVec,
    /// `berth_proxy_own_requests_in_flight`: requests the proxy sends upstream on its own
    /// (`resources/subscribe` and `resources/unsubscribe` for its clients) in flight now, at
    /// most `limits.maxProxyRequestsInFlight`.
    pub own_requests_in_flight: IntGauge,
}

impl LimitMetrics {
    /// Creates the metrics and registers them in `registry`.
    ///
    /// # Panics
    /// Never in practice: names and label sets are constants, registered once per registry.
    #[allow(clippy::expect_used)]
    pub fn register(registry: &Registry) -> Self {
        let metrics = Self {
            upstream_replies_refused: IntCounterVec::new(
                Opts::new(
                    "berth_proxy_upstream_replies_refused_total",
                    "upstream replies not relayed because of a limit, by reason",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            subscriptions_refused: IntCounterVec::new(
                Opts::new(
                    "berth_proxy_subscriptions_refused_total",
                    "resource subscriptions refused by a limit, by limit",
                ),
                &["limit"],
            )
            .expect("valid metric"),
            own_requests_in_flight: IntGauge::new(
                "berth_proxy_own_requests_in_flight",
                "requests the proxy sends upstream on its own, in flight now",
            )
            .expect("valid metric"),
        };
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(metrics.upstream_replies_refused.clone()),
            Box::new(metrics.subscriptions_refused.clone()),
            Box::new(metrics.own_requests_in_flight.clone()),
        ];
        for collector in collectors {
            registry.register(collector).expect("unique metric");
        }
        metrics
            .upstream_replies_refused
            .with_label_values(&["too_large"]);
        for limit in [
            "max_listen_uris",
            "max_subscriptions_per_session",
            "max_uri_bytes",
        ] {
            metrics.subscriptions_refused.with_label_values(&[limit]);
        }
        metrics
    }
}
