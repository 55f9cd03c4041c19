//! Stdio metrics (`berth_proxy_stdio_*`), registered in the proxy's one registry. Every name is
//! in `docs/metrics.md`.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Handles to the stdio metrics.
#[derive(Debug, Clone)]
pub struct StdioMetrics {
    /// `berth_proxy_stdio_children`: child processes alive now (spawned by this proxy and not
    /// yet reaped), the "child-up" gauge of field case BR-07.
    pub children: IntGauge,
    /// `berth_proxy_stdio_child_exits_total{code,cause}`: reaped children by exit `code`
    /// (`0`-`255`, or `signal`) and `cause` ([`ExitCause`]).
    pub child_exits: IntCounterVec,
    /// `berth_proxy_stdio_spawn_failures_total`: children that could not be started (no such
    /// program, not executable) or stdio-host connections that could not be opened.
    pub spawn_failures: IntCounter,
    /// `berth_proxy_stdio_skipped_lines_total{reason}`: child stdout lines, or members of a
    /// batch line, not forwarded: `blank`, `not_json`, `not_jsonrpc` (also a member name twice),
    /// `too_long`, `unmatched` (a response to no pending request) (field cases BR-10, BR-23).
    pub skipped_lines: IntCounterVec,
    /// `berth_proxy_stdio_restarts_total`: children the supervisor started again after its
    /// child ended or a client's child exited (field case BR-34).
    pub restarts: IntCounter,
    /// `berth_proxy_stdio_refusals_total`: connections a stdio host refused (its
    /// `--max-children` reached).
    pub refusals: IntCounter,
    /// `berth_proxy_stdio_peer_refusals_total`: connections a stdio host closed unanswered
    /// because the peer's user is not the proxy's (`--allow-uid`; issue 40, item 7).
    pub peer_refusals: IntCounter,
    /// `berth_proxy_stdio_stderr_lines_total{result}`: child stderr lines `logged` or
    /// `suppressed` by the per-child log rate limit (all are drained and kept in the tail).
    pub stderr_lines: IntCounterVec,
}

impl StdioMetrics {
    /// Creates the metrics and registers them in `registry`.
    ///
    /// # Panics
    /// Never in practice: names and label sets are constants, registered once per registry.
    #[allow(clippy::expect_used)]
    pub fn register(registry: &Registry) -> Self {
        let metrics = Self {
            children: IntGauge::new("berth_proxy_stdio_children", "stdio child processes alive")
                .expect("valid metric"),
            child_exits: IntCounterVec::new(
                Opts::new(
                    "berth_proxy_stdio_child_exits_total",
                    "reaped stdio children by exit code and cause",
                ),
                &["code", "cause"],
            )
            .expect("valid metric"),
            spawn_failures: IntCounter::new(
                "berth_proxy_stdio_spawn_failures_total",
                "stdio children or stdio-host connections that could not be started",
            )
            .expect("valid metric"),
            skipped_lines: IntCounterVec::new(
                Opts::new(
                    "berth_proxy_stdio_skipped_lines_total",
                    "child stdout lines (or members of a batch line) not forwarded, by reason",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            restarts: IntCounter::new(
                "berth_proxy_stdio_restarts_total",
                "stdio children started again by the supervisor",
            )
            .expect("valid metric"),
            refusals: IntCounter::new(
                "berth_proxy_stdio_refusals_total",
                "connections refused by a stdio host at its child limit",
            )
            .expect("valid metric"),
            peer_refusals: IntCounter::new(
                "berth_proxy_stdio_peer_refusals_total",
                "connections a stdio host refused because the peer is not the proxy's user",
            )
            .expect("valid metric"),
            stderr_lines: IntCounterVec::new(
                Opts::new(
                    "berth_proxy_stdio_stderr_lines_total",
                    "child stderr lines, logged or suppressed by the log rate limit",
                ),
                &["result"],
            )
            .expect("valid metric"),
        };
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(metrics.children.clone()),
            Box::new(metrics.child_exits.clone()),
            Box::new(metrics.spawn_failures.clone()),
            Box::new(metrics.skipped_lines.clone()),
            Box::new(metrics.restarts.clone()),
            Box::new(metrics.refusals.clone()),
            Box::new(metrics.peer_refusals.clone()),
            Box::new(metrics.stderr_lines.clone()),
        ];
        for collector in collectors {
            registry.register(collector).expect("unique metric");
        }
        for reason in ["blank", "not_json", "not_jsonrpc", "too_long", "unmatched"] {
            metrics.skipped_lines.with_label_values(&[reason]);
        }
        for result in ["logged", "suppressed"] {
            metrics.stderr_lines.with_label_values(&[result]);
        }
        metrics
    }

    /// Counts one reaped child.
    pub fn record_exit(&self, status: std::process::ExitStatus, cause: ExitCause) {
        let code = status
            .code()
            .map_or_else(|| "signal".to_owned(), |c| c.clamp(0, 255).to_string());
        self.child_exits
            .with_label_values(&[&code, cause.as_label()])
            .inc();
    }
}

/// Why a reaped stdio child ended, the `cause` label of `berth_proxy_stdio_child_exits_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCause {
    /// It exited on its own: a crash, or a server that quit (`exited`, what
    /// `BerthStdioChildCrashes` counts).
    Exited,
    /// The proxy ended it: session end, stdout EOF, shutdown (`stopped`).
    Stopped,
    /// It exited while the era probe (`server/discover`) waited for its answer: a legacy
    /// server ending on a request it does not know, started again for `initialize`
    /// (`era_probe`; issue 39, item 11).
    EraProbe,
}

impl ExitCause {
    /// The label value.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::Exited => "exited",
            Self::Stopped => "stopped",
            Self::EraProbe => "era_probe",
        }
    }
}
