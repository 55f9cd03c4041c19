//! The audit log's metrics (`berth_proxy_audit_events_dropped_total`), registered by
//! [`super::Metrics`] and counted by `crate::client::audit`. Not responsible for: the outcome of
//! a call refused because the audit queue was full (`berth_proxy_tool_calls_total`, outcome
//! `rejected`).

use prometheus::{IntCounter, Registry};

/// The audit log's metrics.
#[derive(Clone)]
pub struct AuditMetrics {
    /// `berth_proxy_audit_events_dropped_total`: audit events not written because the audit
    /// queue was full (`limits.auditQueueBytes`; the output did not keep up), issue 39.
    pub events_dropped: IntCounter,
}

impl AuditMetrics {
    /// Creates the metrics and registers them with `registry`.
    ///
    /// # Panics
    /// When a metric of the same name is already registered (a programming error).
    pub fn register(registry: &Registry) -> Self {
        let events_dropped = IntCounter::new(
            "berth_proxy_audit_events_dropped_total",
            "audit events dropped because the audit queue was full (limits.auditQueueBytes)",
        )
        .expect("valid metric");
        registry
            .register(Box::new(events_dropped.clone()))
            .expect("unique metric");
        Self { events_dropped }
    }

    /// Metrics registered nowhere (an auditor built outside a proxy, in tests).
    pub fn unregistered() -> Self {
        Self {
            events_dropped: IntCounter::new("berth_proxy_audit_events_dropped_total", "unused")
                .expect("valid metric"),
        }
    }
}
