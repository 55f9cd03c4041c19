//! Issue 14's targets, checked against one run's figures (ratios between systems measured
//! side by side, so they hold on a noisy machine). A target whose systems were not measured is
//! reported as not checked, never as met.

use std::fmt::Write as _;

use super::report::{LoadResult, Report, SystemResult};
use super::systems::Upstream;

/// One target: what it asks, what was measured, whether it holds (`None`: not checked).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

fn system<'a>(report: &'a Report, prefix: &str, upstream: Upstream) -> Option<&'a SystemResult> {
    report
        .systems
        .iter()
        .find(|s| s.upstream == Some(upstream) && s.name.starts_with(prefix) && s.skipped.is_none())
}

fn load<'a>(system: Option<&'a SystemResult>, label: &str) -> Option<&'a LoadResult> {
    system?.loads.iter().find(|l| l.label == label)
}

/// Hops that parse MCP (every measured peer but nginx, the plain hop and Berth).
fn mcp_peers(report: &Report) -> impl Iterator<Item = &SystemResult> {
    report.systems.iter().filter(|s| {
        s.skipped.is_none()
            && s.name != "direct"
            && !s.name.starts_with("berth")
            && !s.name.starts_with("nginx")
            && !s.name.starts_with("plain hop")
    })
}

/// Every target of issue 14 against `report`; `open` is the open-loop label (`64@2000/s`).
#[must_use]
pub fn checks(report: &Report, open: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut add = |target: String, measured: String, met: Option<bool>| {
        checks.push(Check {
            target,
            measured,
            met,
        });
    };
    for upstream in [Upstream::Fixture, Upstream::EverythingHttp] {
        let shared = system(report, "berth Shared", upstream);
        let nginx = system(report, "nginx", upstream);
        let at = |s| load(s, "64");
        let where_ = upstream.describe();
        let cpu = |s| at(s).and_then(|l: &LoadResult| l.cpu_own_us);
        match (cpu(shared), cpu(nginx)) {
            (Some(b), Some(n)) => add(
                format!("CPU per call at 64, Shared ≤ 1.5× nginx ({where_})"),
                format!("{b:.1} µs against {n:.1} µs: {:.2}×", b / n),
                Some(b <= 1.5 * n),
            ),
            _ => add(
                format!("CPU per call at 64, Shared ≤ 1.5× nginx ({where_})"),
                "not measured".into(),
                None,
            ),
        }
        let added = |s| at(s).and_then(|l: &LoadResult| l.added_p50_ms);
        match (added(shared), added(nginx)) {
            (Some(b), Some(n)) => add(
                format!("added p50 at 64, closed loop ≤ nginx's + 0.3 ms ({where_})"),
                format!("{b:+.3} ms against nginx {n:+.3} ms"),
                Some(b <= n + 0.3),
            ),
            _ => add(
                format!("added p50 at 64 ≤ nginx's + 0.3 ms ({where_})"),
                "not measured".into(),
                None,
            ),
        }
        let open_load = load(shared, open);
        let direct_open = load(system(report, "direct", upstream), open);
        let rate = open_load.and_then(|l| l.rate).map_or(0.0, f64::from);
        match open_load.and_then(|l| Some((l.added_p50_ms?, l.added_p99_ms?))) {
            // An upstream that cannot carry the rate directly measures its own queue.
            Some(_) if direct_open.is_some_and(|d| d.calls_per_s < 0.95 * rate) => add(
                format!("open loop {open}: added p50 ≤ 0.15 ms, p99 ≤ 0.5 ms ({where_})"),
                format!(
                    "the upstream carried only {:.0} calls/s directly",
                    direct_open.map_or(0.0, |d| d.calls_per_s)
                ),
                None,
            ),
            Some((p50, p99)) => add(
                format!("open loop {open}: added p50 ≤ 0.15 ms, p99 ≤ 0.5 ms ({where_})"),
                format!("{p50:+.3} / {p99:+.3} ms"),
                Some(p50 <= 0.15 && p99 <= 0.5),
            ),
            None => add(
                format!("open loop {open}: added p50 ≤ 0.15 ms, p99 ≤ 0.5 ms ({where_})"),
                "not measured".into(),
                None,
            ),
        }
    }
    let shared = system(report, "berth Shared", Upstream::EverythingHttp);
    if let Some(b) = load(shared, "64").and_then(|l| l.cpu_own_us) {
        for peer in mcp_peers(report) {
            if let Some(p) = load(Some(peer), "64").and_then(|l| l.cpu_own_us) {
                add(
                    format!("CPU per call at 64, Shared ≤ a tenth of {}'s", peer.name),
                    format!("{b:.1} µs against {p:.1} µs: 1/{:.1}", p / b),
                    Some(b * 10.0 <= p),
                );
            }
        }
        if let Some(open_b) = shared.and_then(|s| s.open_p50_ms) {
            add(
                "session open through Shared, p50 ≤ 0.5 ms".into(),
                format!("{open_b:.3} ms"),
                Some(open_b <= 0.5),
            );
            for peer in mcp_peers(report) {
                if let Some(p) = peer.open_p50_ms {
                    add(
                        format!("session open through Shared ≥ 4× faster than {}", peer.name),
                        format!("{open_b:.3} ms against {p:.3} ms: {:.1}×", p / open_b),
                        Some(open_b * 4.0 <= p),
                    );
                }
            }
        }
        if let Some(idle) = shared.and_then(|s| s.rss_idle_kib) {
            add(
                "idle RSS ≤ 15 MiB (Shared)".into(),
                format!("{:.1} MiB", idle as f64 / 1024.0),
                Some(idle <= 15 * 1024),
            );
            if let Some(after) = shared.and_then(|s| s.rss_after_kib) {
                add(
                    "RSS after load within 10% of idle (Shared)".into(),
                    format!(
                        "{:.1} → {:.1} MiB",
                        idle as f64 / 1024.0,
                        after as f64 / 1024.0
                    ),
                    Some(after as f64 <= idle as f64 * 1.1),
                );
            }
        }
        if let Some(i) = shared.and_then(|s| s.idle_sessions) {
            let grew = i.rss_after_kib.saturating_sub(i.rss_before_kib);
            add(
                format!("{} idle sessions add ≤ 2 MiB (Shared)", i.count),
                format!("{:.2} MiB", grew as f64 / 1024.0),
                Some(grew <= 2 * 1024),
            );
        }
    }
    let stdio = system(report, "berth stdio", Upstream::EverythingStdio);
    match (
        stdio.and_then(|s| s.open_p50_ms),
        report.stdio_child_open_p50_ms,
    ) {
        (Some(b), Some(child)) => add(
            "stdio PerClient session open ≤ the child's own spawn and handshake + 1 ms".into(),
            format!(
                "{b:.1} ms against the child's {child:.1} ms: {:+.2} ms",
                b - child
            ),
            Some(b <= child + 1.0),
        ),
        _ => add(
            "stdio PerClient session open ≤ the child's own + 1 ms".into(),
            "not measured".into(),
            None,
        ),
    }
    checks
}

/// The checks as a Markdown table.
#[must_use]
pub fn markdown(checks: &[Check]) -> String {
    let mut out = String::from("| target | measured | met |\n|---|---|---|\n");
    for check in checks {
        let met = match check.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not checked",
        };
        let _ = writeln!(out, "| {} | {} | {met} |", check.target, check.measured);
    }
    out
}
