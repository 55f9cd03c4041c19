//! The listeners' metrics (`berth_proxy_connections_refused_total`,
//! `berth_proxy_connection_timeouts_total`, `berth_proxy_oversized_headers_total`,
//! `berth_proxy_open_connections`, `berth_proxy_diagnostics_refusals_total`), registered in the
//! proxy's one registry: what each connection cap refused, each read deadline closed and the
//! header size limit refused, per port (issue 39, item 2), and the admin port's diagnostics
//! requests refused (item 10). Every name is in `docs/metrics.md`.
//!
//! Not responsible for: enforcing the limits (`server::connections` does).

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

/// The `port` label: which listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// The MCP port (`listen`).
    Mcp,
    /// The admin port (`adminListen`: `/metrics`, `/healthz`, `/readyz`).
    Admin,
}

impl Port {
    /// `mcp` or `admin`.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::Mcp => "mcp",
            Self::Admin => "admin",
        }
    }
}

/// Why a connection was refused as soon as it was accepted: the `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The listener's cap on open connections was reached (`limits.maxConnections`).
    MaxConnections,
    /// The cap on open connections from the connection's source IP address was reached
    /// (`limits.maxConnectionsPerSource`).
    MaxConnectionsPerSource,
}

impl Refusal {
    /// `max_connections` or `max_connections_per_source`.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::MaxConnections => "max_connections",
            Self::MaxConnectionsPerSource => "max_connections_per_source",
        }
    }
}

/// Which read deadline closed a connection: the `stage` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// A request's line and headers were not all in within `limits.headerReadTimeout`.
    Header,
    /// A request's body was not all in within `limits.requestBodyTimeout` of its headers.
    Body,
    /// A keep-alive connection had no request for `limits.idleTimeout`.
    Idle,
}

impl Stage {
    /// `header`, `body` or `idle`.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::Body => "body",
            Self::Idle => "idle",
        }
    }
}

/// Handles to the listeners' metrics. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ConnectionMetrics {
    /// `berth_proxy_connections_refused_total{port,reason}`: connections closed as soon as they
    /// were accepted, by [`Refusal`].
    pub refused: IntCounterVec,
    /// `berth_proxy_connection_timeouts_total{port,stage}`: connections closed by a read
    /// deadline, by [`Stage`].
    pub timeouts: IntCounterVec,
    /// `berth_proxy_oversized_headers_total{port}`: requests whose line and headers passed
    /// `limits.maxHeaderBytes`, answered 431 and their connection closed.
    pub oversized_headers: IntCounterVec,
    /// `berth_proxy_open_connections{port}`: connections open now (refused ones are never
    /// counted).
    pub open: IntGaugeVec,
    /// `berth_proxy_diagnostics_refusals_total`: requests for the admin port's diagnostics
    /// (`/tools`, `/upstream`) refused for want of the diagnostics token.
    pub diagnostics_refused: IntCounter,
}

impl ConnectionMetrics {
    /// Creates the metrics, registers them in `registry`, and sets every label pair to 0.
    ///
    /// # Panics
    /// Never in practice: names and label sets are constants, registered once per registry.
    #[allow(clippy::expect_used)]
    pub fn register(registry: &Registry) -> Self {
        let metrics = Self {
            refused: IntCounterVec::new(
                Opts::new(
                    "berth_proxy_connections_refused_total",
                    "connections closed on accept by a connection cap, by port and reason",
                ),
                &["port", "reason"],
            )
            .expect("valid metric"),
            timeouts: IntCounterVec::new(
                Opts::new(
                    "berth_proxy_connection_timeouts_total",
                    "connections closed by a read deadline, by port and stage",
                ),
                &["port", "stage"],
            )
            .expect("valid metric"),
            oversized_headers: IntCounterVec::new(
                Opts::new(
                    "berth_proxy_oversized_headers_total",
                    "requests refused with 431 for a header block over the limit, by port",
                ),
                &["port"],
            )
            .expect("valid metric"),
            open: IntGaugeVec::new(
                Opts::new(
                    "berth_proxy_open_connections",
                    "client connections open now, by port",
                ),
                &["port"],
            )
            .expect("valid metric"),
            diagnostics_refused: IntCounter::new(
                "berth_proxy_diagnostics_refusals_total",
                "admin diagnostics requests refused for want of the diagnostics token",
            )
            .expect("valid metric"),
        };
        for collector in [
            Box::new(metrics.refused.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.timeouts.clone()),
            Box::new(metrics.oversized_headers.clone()),
            Box::new(metrics.open.clone()),
            Box::new(metrics.diagnostics_refused.clone()),
        ] {
            registry.register(collector).expect("unique metric");
        }
        for port in [Port::Mcp, Port::Admin] {
            metrics.open.with_label_values(&[port.as_label()]);
            metrics
                .oversized_headers
                .with_label_values(&[port.as_label()]);
            for reason in [Refusal::MaxConnections, Refusal::MaxConnectionsPerSource] {
                metrics
                    .refused
                    .with_label_values(&[port.as_label(), reason.as_label()]);
            }
            for stage in [Stage::Header, Stage::Body, Stage::Idle] {
                metrics
                    .timeouts
                    .with_label_values(&[port.as_label(), stage.as_label()]);
            }
        }
        metrics
    }

    /// Counts one connection refused on `port` for `reason`.
    pub fn count_refusal(&self, port: Port, reason: Refusal) {
        self.refused
            .with_label_values(&[port.as_label(), reason.as_label()])
            .inc();
    }

    /// Counts one connection on `port` closed by the deadline of `stage`.
    pub fn count_timeout(&self, port: Port, stage: Stage) {
        self.timeouts
            .with_label_values(&[port.as_label(), stage.as_label()])
            .inc();
    }
}
