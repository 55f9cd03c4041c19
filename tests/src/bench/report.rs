//! What `bench_proxy` measured, per system: printed as Markdown tables (the form
//! `docs/benchmarks.md` keeps) and written as JSON (`--json`, which
//! `tests/peers/bench/plot.py` draws), then checked against issue 14's targets.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::load::{Figures, Load};
use super::systems::Upstream;

/// One load's figures on one system. Times in milliseconds, CPU in microseconds per call.
#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    pub label: String,
    pub sessions: usize,
    /// `None` for a closed loop; calls per second in total for an open one.
    pub rate: Option<u32>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// What the system adds over the direct run of the same load (p50, p99).
    pub added_p50_ms: Option<f64>,
    pub added_p99_ms: Option<f64>,
    pub calls_per_s: f64,
    /// The hop process's own CPU time per call (user + system), µs.
    pub cpu_own_us: Option<f64>,
    /// Its children's (stdio servers it spawned), µs per call, counted apart.
    pub cpu_children_us: Option<f64>,
}

impl LoadResult {
    /// Figures of `load`, CPU seconds `(own, children)` spent over it.
    #[must_use]
    pub fn new(load: &Load, figures: &Figures, cpu: Option<(f64, f64)>) -> Self {
        let per_call = |seconds: f64| seconds * 1e6 / figures.calls as f64;
        Self {
            label: load.label(),
            sessions: load.sessions,
            rate: load.rate,
            p50_ms: ms(figures.p50),
            p99_ms: ms(figures.p99),
            added_p50_ms: None,
            added_p99_ms: None,
            calls_per_s: figures.per_second,
            cpu_own_us: cpu.map(|(own, _)| per_call(own)),
            cpu_children_us: cpu.map(|(_, children)| per_call(children)),
        }
    }
}

/// Memory with many idle downstream sessions, KiB.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IdleSessions {
    pub count: usize,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
}

/// Everything measured on one system.
#[derive(Debug, Clone, Serialize, Default)]
pub struct SystemResult {
    pub name: String,
    pub upstream: Option<Upstream>,
    /// Why it was not measured (not installed, failed to start, a load failed).
    pub skipped: Option<String>,
    pub loads: Vec<LoadResult>,
    /// The hop's own RSS before any load, KiB.
    pub rss_idle_kib: Option<u64>,
    /// Its own RSS after the loads, their sessions closed, KiB.
    pub rss_after_kib: Option<u64>,
    /// Its children's RSS, summed, with the loads' largest session count open, KiB.
    pub children_rss_kib_at_peak: Option<u64>,
    /// Live children per open session (1 for a hop that spawns a server per session).
    pub children_per_session: Option<f64>,
    /// `None` where the hop spawns a child per session (1,000 servers do not fit) or is direct.
    pub idle_sessions: Option<IdleSessions>,
    /// `initialize` + `notifications/initialized`, sequential opens, ms.
    pub open_p50_ms: Option<f64>,
    pub open_p99_ms: Option<f64>,
    /// Median sequential `tools/call` latency seen by Python `httpx` and by the TypeScript SDK
    /// client, ms.
    pub httpx_p50_ms: Option<f64>,
    pub sdk_p50_ms: Option<f64>,
}

/// The whole run.
#[derive(Debug, Serialize)]
pub struct Report {
    pub commit: String,
    pub requests: usize,
    /// server-everything's stdio child: spawn to initialized, p50, ms (the floor for a stdio
    /// session open).
    pub stdio_child_open_p50_ms: Option<f64>,
    pub systems: Vec<SystemResult>,
}

/// A duration in milliseconds.
#[must_use]
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn cell(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

fn signed(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:+.3}"))
}

impl Report {
    /// Fills each load's added latency from the direct run of the same upstream (server-everything
    /// over HTTP for the stdio hops: the same server, its own transport).
    pub fn fill_added(&mut self) {
        let baseline = |upstream: Upstream| match upstream {
            Upstream::EverythingStdio => Upstream::EverythingHttp,
            other => other,
        };
        let directs: Vec<(Upstream, Vec<LoadResult>)> = self
            .systems
            .iter()
            .filter(|s| s.name == "direct")
            .filter_map(|s| Some((s.upstream?, s.loads.clone())))
            .collect();
        for system in &mut self.systems {
            let Some(upstream) = system.upstream else {
                continue;
            };
            let Some((_, direct)) = directs.iter().find(|(u, _)| *u == baseline(upstream)) else {
                continue;
            };
            for load in &mut system.loads {
                if let Some(d) = direct.iter().find(|d| d.label == load.label) {
                    load.added_p50_ms = Some(load.p50_ms - d.p50_ms);
                    load.added_p99_ms = Some(load.p99_ms - d.p99_ms);
                }
            }
        }
    }

    /// The Markdown tables: one per load, then memory, session open and the external clients.
    #[must_use]
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let labels: Vec<String> = self
            .systems
            .iter()
            .flat_map(|s| s.loads.iter().map(|l| l.label.clone()))
            .fold(Vec::new(), |mut seen, label| {
                if !seen.contains(&label) {
                    seen.push(label);
                }
                seen
            });
        for label in labels {
            let _ = writeln!(out, "\n**{}**\n", describe_label(&label));
            out.push_str(
                "| upstream | system | p50 ms | p99 ms | added p50 / p99 ms | calls/s | own CPU µs/call | children CPU µs/call |\n\
                 |---|---|---|---|---|---|---|---|\n",
            );
            for system in &self.systems {
                let Some(load) = system.loads.iter().find(|l| l.label == label) else {
                    continue;
                };
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.3} | {:.3} | {} / {} | {:.0} | {} | {} |",
                    upstream_name(system),
                    system.name,
                    load.p50_ms,
                    load.p99_ms,
                    signed(load.added_p50_ms),
                    signed(load.added_p99_ms),
                    load.calls_per_s,
                    cell(load.cpu_own_us, 1),
                    cell(load.cpu_children_us, 1),
                );
            }
        }
        out.push_str(
            "\n**Memory, session open, other clients**\n\n\
             | upstream | system | RSS idle / after load MiB | +1,000 idle sessions MiB | children per session | session open p50 / p99 ms | httpx p50 ms | TS SDK p50 ms |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for system in &self.systems {
            let mib = |kib: Option<u64>| cell(kib.map(|k| k as f64 / 1024.0), 1);
            let idle = system
                .idle_sessions
                .map(|i| (i.rss_after_kib.saturating_sub(i.rss_before_kib)) as f64 / 1024.0);
            let _ = writeln!(
                out,
                "| {} | {} | {} / {} | {} | {} | {} / {} | {} | {} |",
                upstream_name(system),
                system.name,
                mib(system.rss_idle_kib),
                mib(system.rss_after_kib),
                cell(idle, 2),
                cell(system.children_per_session, 2),
                cell(system.open_p50_ms, 3),
                cell(system.open_p99_ms, 3),
                cell(system.httpx_p50_ms, 3),
                cell(system.sdk_p50_ms, 3),
            );
        }
        let skipped: Vec<&SystemResult> = self
            .systems
            .iter()
            .filter(|s| s.skipped.is_some())
            .collect();
        if !skipped.is_empty() {
            out.push_str("\nNot measured:\n\n");
            for system in skipped {
                let _ = writeln!(
                    out,
                    "- {}: {}",
                    system.name,
                    system.skipped.as_deref().unwrap_or_default()
                );
            }
        }
        out
    }
}

fn upstream_name(system: &SystemResult) -> &'static str {
    system.upstream.map_or("–", Upstream::describe)
}

fn describe_label(label: &str) -> String {
    match label.split_once('@') {
        Some((sessions, rate)) => format!("Open loop: {sessions} sessions at {rate} in total"),
        None => format!("Closed loop, concurrency {label}"),
    }
}
