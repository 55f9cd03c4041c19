//! The OAuth resource server's metrics (`berth_proxy_jwks_fetches_total`), registered by
//! [`super::Metrics`] and counted by `crate::access::auth::jwks`. Not responsible for: any other proxy
//! metric.

use prometheus::{IntCounterVec, Opts, Registry};

/// The resource server's metrics.
#[derive(Clone)]
pub struct AuthMetrics {
    /// `berth_proxy_jwks_fetches_total{result}`: fetches of the authorization server's key set
    /// (with discovery when not yet known), `ok` or `error`.
    pub jwks_fetches: IntCounterVec,
}

impl AuthMetrics {
    /// Creates the metrics and registers them with `registry`.
    ///
    /// # Panics
    /// When a metric of the same name is already registered (a programming error).
    pub fn register(registry: &Registry) -> Self {
        let jwks_fetches = IntCounterVec::new(
            Opts::new(
                "berth_proxy_jwks_fetches_total",
                "fetches of the authorization server's signing keys, by result (ok, error)",
            ),
            &["result"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(jwks_fetches.clone()))
            .expect("unique metric");
        for result in ["ok", "error"] {
            jwks_fetches.with_label_values(&[result]);
        }
        Self { jwks_fetches }
    }
}
