//! The operator's Prometheus metrics, in a registry of its own (no global state).
//!
//! Names follow the `berth_operator_` prefix; label values are bounded and known at review time
//! (reconcile results and error kinds from [`crate::error::Error::kind`]), never an object
//! name or error text.

use std::time::Duration;

use berth_crds::McpUpstream;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::status::CONDITION_TYPES;

/// `result` label value: the children were applied and the status written.
pub const RESULT_OK: &str = "ok";
/// `result` label value: the spec cannot be served; `Ready=False` with reason `InvalidSpec`.
pub const RESULT_INVALID_SPEC: &str = "invalid_spec";
/// `result` label value: a transient failure; the object is retried with backoff.
pub const RESULT_ERROR: &str = "error";

/// `status` label values of `berth_operator_mcpupstreams`; a missing condition counts as
/// `Unknown`.
pub const CONDITION_STATUSES: [&str; 3] = ["True", "False", "Unknown"];

/// `kind` label value of a status write (server-side apply of the `status` subresource).
pub const WRITE_MCP_UPSTREAM_STATUS: &str = "McpUpstreamStatus";
/// `kind` label value of an Event publication.
pub const WRITE_EVENT: &str = "Event";
/// Every `kind` label value of `berth_operator_api_writes_total`.
pub const WRITE_KINDS: [&str; 8] = [
    "Deployment",
    "Service",
    "ConfigMap",
    "Secret",
    "NetworkPolicy",
    "PodDisruptionBudget",
    WRITE_MCP_UPSTREAM_STATUS,
    WRITE_EVENT,
];

/// Handles to every operator metric.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `berth_operator_reconciliations_total{result}`: finished reconciles by result.
    pub reconciliations: IntCounterVec,
    /// `berth_operator_reconcile_errors_total{kind}`: failed reconciles by error kind.
    pub reconcile_errors: IntCounterVec,
    /// `berth_operator_reconcile_duration_seconds`: wall time of one reconcile.
    pub reconcile_duration: Histogram,
    /// `berth_operator_api_writes_total{kind}`: write requests sent to the API server by kind
    /// (one of [`WRITE_KINDS`]).
    pub api_writes: IntCounterVec,
    /// `berth_operator_leader`: 1 while this replica runs the controller (always 1 without
    /// leader election, once started).
    pub leader: IntGauge,
    /// `berth_operator_mcpupstreams{condition,status}`: McpUpstreams whose condition `condition`
    /// (one of the operator's condition types) has status `status` (`True`, `False`,
    /// `Unknown`), as the controller's cache holds them; refreshed by [`Self::count_conditions`].
    pub mcp_upstreams: IntGaugeVec,
}

impl Metrics {
    /// Creates and registers every metric, plus `berth_build_info{version,component="operator"}`.
    ///
    /// # Errors
    /// Only if a metric definition is invalid or registered twice, which the constants here rule
    /// out in practice.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let reconciliations = IntCounterVec::new(
            Opts::new(
                "berth_operator_reconciliations_total",
                "finished McpUpstream reconciles by result (ok, invalid_spec, error)",
            ),
            &["result"],
        )?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "berth_operator_reconcile_errors_total",
                "failed McpUpstream reconciles by error kind",
            ),
            &["kind"],
        )?;
        let reconcile_duration = Histogram::with_opts(
            HistogramOpts::new(
                "berth_operator_reconcile_duration_seconds",
                "wall time of one McpUpstream reconcile",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ]),
        )?;
        let api_writes = IntCounterVec::new(
            Opts::new(
                "berth_operator_api_writes_total",
                "write requests the operator sent to the API server, by kind of object written",
            ),
            &["kind"],
        )?;
        let leader = IntGauge::new(
            "berth_operator_leader",
            "1 while this replica holds the lease and runs the controller",
        )?;
        let mcp_upstreams = IntGaugeVec::new(
            Opts::new(
                "berth_operator_mcpupstreams",
                "McpUpstreams by condition type and condition status",
            ),
            &["condition", "status"],
        )?;
        for condition in CONDITION_TYPES {
            for status in CONDITION_STATUSES {
                mcp_upstreams.with_label_values(&[condition, status]);
            }
        }
        let build_info = IntGaugeVec::new(
            Opts::new("berth_build_info", "build information; always 1"),
            &["version", "component"],
        )?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), "operator"])
            .set(1);
        // Every result exists from the start, so rate() and absent() work before the first one.
        for result in [RESULT_OK, RESULT_INVALID_SPEC, RESULT_ERROR] {
            reconciliations.with_label_values(&[result]);
        }
        for kind in WRITE_KINDS {
            api_writes.with_label_values(&[kind]);
        }
        registry.register(Box::new(reconciliations.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(api_writes.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(mcp_upstreams.clone()))?;
        registry.register(Box::new(build_info))?;
        Ok(Self {
            registry,
            reconciliations,
            reconcile_errors,
            reconcile_duration,
            api_writes,
            leader,
            mcp_upstreams,
        })
    }

    /// Sets `berth_operator_mcpupstreams` from `upstreams`: for each of the operator's condition
    /// types and each status, how many carry it. An McpUpstream without a condition of a type
    /// counts as `Unknown` for it.
    pub fn count_conditions<'a>(&self, upstreams: impl IntoIterator<Item = &'a McpUpstream>) {
        let mut counts = [[0_i64; 3]; CONDITION_TYPES.len()];
        for upstream in upstreams {
            let conditions = upstream
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            for (row, type_) in counts.iter_mut().zip(CONDITION_TYPES) {
                let status = conditions
                    .iter()
                    .find(|c| c.type_ == type_)
                    .map_or("Unknown", |c| c.status.as_str());
                let column = CONDITION_STATUSES
                    .iter()
                    .position(|s| *s == status)
                    .unwrap_or(2);
                row[column] += 1;
            }
        }
        for (row, type_) in counts.iter().zip(CONDITION_TYPES) {
            for (count, status) in row.iter().zip(CONDITION_STATUSES) {
                self.mcp_upstreams
                    .with_label_values(&[type_, status])
                    .set(*count);
            }
        }
    }

    /// Counts one finished reconcile with `result` (one of the `RESULT_*` constants) that took
    /// `elapsed`.
    pub fn observe(&self, result: &'static str, elapsed: Duration) {
        self.reconciliations.with_label_values(&[result]).inc();
        self.reconcile_duration.observe(elapsed.as_secs_f64());
    }

    /// Counts one failed reconcile of error kind `kind` (bounded, from `Error::kind`).
    pub fn observe_error(&self, kind: &'static str, elapsed: Duration) {
        self.observe(RESULT_ERROR, elapsed);
        self.reconcile_errors.with_label_values(&[kind]).inc();
    }

    /// Counts one write request of `kind` (one of [`WRITE_KINDS`]) sent to the API server,
    /// whatever its outcome.
    pub fn count_write(&self, kind: &'static str) {
        self.api_writes.with_label_values(&[kind]).inc();
    }

    /// Write requests of `kind` sent so far.
    pub fn writes(&self, kind: &str) -> u64 {
        self.api_writes.with_label_values(&[kind]).get()
    }

    /// Write requests of every kind sent so far.
    pub fn total_writes(&self) -> u64 {
        WRITE_KINDS.iter().map(|kind| self.writes(kind)).sum()
    }

    /// Finished reconciles of every result so far.
    pub fn total_reconciliations(&self) -> u64 {
        [RESULT_OK, RESULT_INVALID_SPEC, RESULT_ERROR]
            .iter()
            .map(|result| self.reconciliations.with_label_values(&[result]).get())
            .sum()
    }

    /// Every metric in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        // Encoding into a Vec only fails on metric families with invalid names, which
        // registration already refused.
        if let Err(err) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            tracing::warn!(error = %err, "failed to encode metrics");
        }
        String::from_utf8_lossy(&buffer).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_names_results_and_build_info() {
        let metrics = Metrics::new().expect("metrics register");
        metrics.observe(RESULT_OK, Duration::from_millis(20));
        metrics.observe_error("apply", Duration::from_millis(5));
        metrics.count_write(WRITE_EVENT);
        let text = metrics.render();
        assert!(
            text.contains("berth_operator_reconciliations_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("berth_operator_reconciliations_total{result=\"error\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("berth_operator_reconciliations_total{result=\"invalid_spec\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("berth_operator_reconcile_errors_total{kind=\"apply\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("berth_operator_reconcile_duration_seconds_count 2"),
            "{text}"
        );
        assert!(
            text.contains("berth_operator_api_writes_total{kind=\"Event\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("berth_operator_api_writes_total{kind=\"Deployment\"} 0"),
            "{text}"
        );
        assert_eq!(metrics.total_writes(), 1);
        assert!(
            text.contains("berth_build_info{component=\"operator\",version=\""),
            "{text}"
        );
    }

    fn upstream(ready: Option<&str>) -> McpUpstream {
        let conditions = ready.map_or(String::new(), |status| {
            format!(
                "status: {{conditions: [{{type: Ready, status: '{status}', reason: r, message: m, \
                 lastTransitionTime: '2030-01-01T00:00:00Z'}}]}}"
            )
        });
        serde_yaml::from_str(&format!(
            "apiVersion: berth.dev/v1alpha1\nkind: McpUpstream\nmetadata: {{name: a}}\n\
             spec: {{upstream: {{image: 'r/x@sha256:{}'}}}}\n{conditions}",
            "0".repeat(64)
        ))
        .expect("upstream fixture parses")
    }

    #[test]
    fn count_conditions_counts_each_status_and_missing_as_unknown() {
        let metrics = Metrics::new().expect("metrics register");
        let upstreams = [
            upstream(Some("True")),
            upstream(Some("True")),
            upstream(Some("False")),
            upstream(None),
        ];
        metrics.count_conditions(&upstreams);
        let text = metrics.render();
        for line in [
            "berth_operator_mcpupstreams{condition=\"Ready\",status=\"True\"} 2",
            "berth_operator_mcpupstreams{condition=\"Ready\",status=\"False\"} 1",
            "berth_operator_mcpupstreams{condition=\"Ready\",status=\"Unknown\"} 1",
            "berth_operator_mcpupstreams{condition=\"Degraded\",status=\"Unknown\"} 4",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        metrics.count_conditions(&upstreams[..1]);
        assert!(
            metrics
                .render()
                .contains("berth_operator_mcpupstreams{condition=\"Ready\",status=\"False\"} 0"),
            "a refresh replaces the counts"
        );
    }
}
