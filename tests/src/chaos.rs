//! A chaos run that counts (issue 12, item 9): the real `berth-proxy` process, concurrent
//! sessions making a fixed number of calls while the upstream is killed and restarted, hangs,
//! is black-holed, forgets its sessions and answers 404 storms (HTTP), or has its children
//! killed (stdio); one client never reads its standalone stream and sessions churn all along.
//! Then every session is closed and the proxy left to settle, and the run reports what it
//! counted: calls made and answered, answered to the wrong client, lost without any answer, and
//! the processes, file descriptors and memory the proxy holds before and after.
//!
//! Each call carries a payload unique to its session and call, echoed back by the tool, and a
//! JSON-RPC id: odd sessions use numbers unique in the run, even ones number their own requests
//! `"c1"`, `"c2"`, ... as clients do (so equal ids are in flight on many sessions at once). A
//! reply with another call's id, payload or progress token (every eighth call is a slow one
//! with progress) is answered to the wrong client. A JSON-RPC error under the call's own id is
//! an answer (the proxy's budgets and recovery promise an answer, not a result); a POST that
//! ends without any JSON-RPC response is lost.
//!
//! The clock is the call count (see [`schedule`]): each fault is due at a fixed ticket, and
//! begins only once the proxy recovered from the previous one (ready, and a new client's call
//! answered with its result), so the figures do not depend on the machine's speed and faults do
//! not pile up; only the timing of a fault within the calls does.
//!
//! Not responsible for: latency figures (see `bench_proxy`); the calls' latencies are only
//! reported to show that no call ran past its budget.

pub mod client;
pub mod faults;
mod run;
pub mod schedule;
mod sessions;
pub mod tally;

use std::sync::Arc;
use std::time::Duration;

use crate::proxy_process::Fds;

pub use run::{run_http, run_stdio};

/// The shape of one chaos run.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Calls the concurrent sessions make in all; the run's clock.
    pub calls: u64,
    /// Concurrent sessions.
    pub sessions: usize,
    /// Sessions opened, called once and deleted during the run (their calls come on top of
    /// `calls`).
    pub churn: usize,
    /// Calls per session before the baseline is measured (not counted).
    pub warm_up: u64,
}

/// What `/proc` says about the proxy at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    /// Open file descriptors.
    pub fds: Fds,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Threads.
    pub threads: u64,
    /// Child processes (zombies included) plus any process of the run's upstream command that is
    /// no longer the proxy's child (an orphan).
    pub processes: usize,
}

/// Lines of the proxy's log, by level.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogSummary {
    /// Every line.
    pub lines: usize,
    /// `WARN` lines.
    pub warnings: usize,
    /// `ERROR` lines.
    pub errors: usize,
    /// Lines of a panic.
    pub panics: usize,
}

/// Everything one chaos run found.
pub struct Report {
    /// Which proxy setup, e.g. `HTTP upstream, Shared`.
    pub name: String,
    /// The run's shape.
    pub settings: Settings,
    /// What the clients counted.
    pub tally: Arc<tally::Tally>,
    /// The faults injected, in order.
    pub faults: Vec<String>,
    /// The proxy when it first reported ready.
    pub started: Snapshot,
    /// After the warm-up, with every session closed: the baseline.
    pub baseline: Snapshot,
    /// After the run, with every session closed and the proxy settled.
    pub after: Snapshot,
    /// Peak resident memory (`VmHWM`), KiB.
    pub peak_rss_kib: u64,
    /// How long the proxy took to settle back to the baseline; `None` when it did not within the
    /// deadline.
    pub settled_in: Option<Duration>,
    /// How long the calls took, faults included.
    pub elapsed: Duration,
    /// Selected `/metrics` samples after the run, summed over labels.
    pub metrics: Vec<(&'static str, f64)>,
    /// The proxy's log.
    pub log: LogSummary,
    /// Where the proxy's log is.
    pub log_path: std::path::PathBuf,
    /// Problems that ended clients early or stopped the proxy, described.
    pub problems: Vec<String>,
    /// Remarks that are not failures (errors during the warm-up).
    pub notes: Vec<String>,
    /// For each fault, how long after it ended the proxy was ready and a new client got through
    /// (a session and a call with its result); `None` when that did not happen within a minute.
    pub recoveries: Vec<Option<Duration>>,
}

impl Report {
    /// Processes the proxy holds beyond the baseline.
    pub fn leftover_processes(&self) -> usize {
        self.after.processes.saturating_sub(self.baseline.processes)
    }

    /// File descriptors the proxy holds beyond the baseline.
    pub fn leftover_fds(&self) -> usize {
        self.after.fds.total.saturating_sub(self.baseline.fds.total)
    }

    /// A `/metrics` sample read after the run.
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0.0, |(_, v)| *v)
    }

    /// Why the run failed; empty when it passed: anything answered to the wrong client, lost,
    /// left over (processes, file descriptors, downstream sessions), a panic, or a problem.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = self.problems.clone();
        let mut check = |count: u64, what: &str| {
            if count > 0 {
                failures.push(format!("{count} {what}"));
            }
        };
        check(self.tally.wrong_client(), "answered to the wrong client");
        check(self.tally.lost(), "lost without any answer");
        check(self.leftover_processes() as u64, "processes left over");
        check(self.leftover_fds() as u64, "file descriptors left over");
        check(
            self.metric("berth_proxy_downstream_sessions") as u64,
            "downstream sessions left over",
        );
        check(self.log.panics as u64, "panic lines in the proxy log");
        failures
    }
}

/// The sum over labels of the samples of `name` in Prometheus text `metrics`.
pub fn metric_sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Prints `reports` side by side as a table, then what went wrong in each.
pub fn print(reports: &[Report]) {
    let column = |label: &str, cell: &dyn Fn(&Report) -> String| {
        let cells: Vec<String> = reports.iter().map(|r| format!("{:>28}", cell(r))).collect();
        println!("{label:<54}{}", cells.join(""));
    };
    let n = |v: u64| group(v);
    column("", &|r| r.name.clone());
    column("concurrent sessions", &|r| r.settings.sessions.to_string());
    column("faults injected", &|r| r.faults.len().to_string());
    column("calls made", &|r| n(r.tally.calls.made.get()));
    column("  of them by churned sessions", &|r| {
        n(r.tally.churned.get())
    });
    column("  of them recovery probes (new sessions)", &|r| {
        n(r.tally.probes.get())
    });
    column("calls answered", &|r| n(r.tally.calls.answered()));
    column("  with a result", &|r| n(r.tally.calls.results.get()));
    column("  with a JSON-RPC error", &|r| {
        n(r.tally.calls.errors.get())
    });
    column("calls answered to the wrong client", &|r| {
        n(r.tally.wrong_client())
    });
    column("calls lost without any answer", &|r| n(r.tally.lost()));
    column(
        "calls after the last fault: made / result",
        &|r| match r.tally.tail() {
            Some(tail) => format!("{} / {}", n(tail.made.get()), n(tail.results.get())),
            None => "-".to_owned(),
        },
    );
    column("initializes: made / result / error", &|r| {
        let i = &r.tally.initializes;
        format!(
            "{} / {} / {}",
            n(i.made.get()),
            n(i.results.get()),
            n(i.errors.get())
        )
    });
    column("sessions churned", &|r| n(r.tally.churned.get()));
    column(
        "standalone streams opened / refused / messages read",
        &|r| {
            format!(
                "{} / {} / {}",
                n(r.tally.streams_opened.get()),
                n(r.tally.streams_refused.get()),
                n(r.tally.stream_messages.get())
            )
        },
    );
    column("refused: notifications/initialized / DELETE", &|r| {
        format!(
            "{} / {}",
            n(r.tally.initialized_refused.get()),
            n(r.tally.deletes_failed.get())
        )
    });
    column("upstream log messages sent / to the proxy (HTTP)", &|r| {
        format!(
            "{} / {}",
            n(r.tally.logs_sent.get()),
            n(r.tally.logs_reached.get())
        )
    });
    column("call latency p50 / p99 / max", &|r| {
        let ms = |q| r.tally.quantile(q).as_secs_f64() * 1000.0;
        format!("{:.1} / {:.0} / {:.0} ms", ms(0.5), ms(0.99), ms(1.0))
    });
    column("calls took (faults included)", &|r| {
        format!("{:.1} s", r.elapsed.as_secs_f64())
    });
    column("processes: baseline / after", &|r| {
        format!("{} / {}", r.baseline.processes, r.after.processes)
    });
    column("processes left over", &|r| {
        r.leftover_processes().to_string()
    });
    column("file descriptors: baseline / after", &|r| {
        format!("{} / {}", r.baseline.fds.total, r.after.fds.total)
    });
    column("file descriptors left over", &|r| {
        r.leftover_fds().to_string()
    });
    column("settled back to the baseline in", &|r| match r.settled_in {
        Some(took) => format!("{:.1} s", took.as_secs_f64()),
        None => "never".to_owned(),
    });
    column("RSS: started / baseline / after (MiB)", &|r| {
        let mib = |kib: u64| kib as f64 / 1024.0;
        format!(
            "{:.1} / {:.1} / {:.1}",
            mib(r.started.rss_kib),
            mib(r.baseline.rss_kib),
            mib(r.after.rss_kib)
        )
    });
    column("peak RSS (MiB)", &|r| {
        format!("{:.1}", r.peak_rss_kib as f64 / 1024.0)
    });
    column("threads: baseline / after", &|r| {
        format!("{} / {}", r.baseline.threads, r.after.threads)
    });
    for (name, label) in [
        (
            "berth_proxy_downstream_sessions",
            "downstream sessions left (gauge)",
        ),
        (
            "berth_proxy_upstream_session_losses_total",
            "upstream session losses",
        ),
        ("berth_proxy_replays_total", "replays"),
        (
            "berth_proxy_upstream_initializations_total",
            "upstream initializations",
        ),
        (
            "berth_proxy_server_messages_dropped_total",
            "server messages dropped",
        ),
        ("berth_proxy_stdio_child_exits_total", "stdio child exits"),
    ] {
        column(label, &|r| n(r.metric(name) as u64));
    }
    column("proxy log: warnings / errors / panics", &|r| {
        format!("{} / {} / {}", r.log.warnings, r.log.errors, r.log.panics)
    });
    for report in reports {
        println!();
        println!("{}:", report.name);
        let codes = |counts: &tally::Counts| {
            let codes: Vec<String> = counts
                .codes()
                .iter()
                .map(|((status, code), count)| format!("{code} (HTTP {status}) x{}", group(*count)))
                .collect();
            codes.join(", ")
        };
        println!("  call errors: {}", codes(&report.tally.calls));
        println!("  initialize errors: {}", codes(&report.tally.initializes));
        println!("  calls of the concurrent sessions by stage (made, result, errors):");
        let last = report.tally.stages.len().saturating_sub(1);
        for (k, stage) in report.tally.stages.iter().enumerate() {
            let name = match k {
                0 => "ended before the first fault".to_owned(),
                k if k == last => "begun after the last fault, proxy ready".to_owned(),
                k => format!(
                    "ended from fault {k:>2} on ({})",
                    report.faults.get(k - 1).map_or("", String::as_str)
                ),
            };
            let recovery = match k.checked_sub(1).and_then(|f| report.recoveries.get(f)) {
                Some(Some(took)) => format!("; recovered {:.1} s after", took.as_secs_f64()),
                Some(None) => "; did not recover".to_owned(),
                None => String::new(),
            };
            println!(
                "    {name}: {}, {}, {}{recovery}",
                group(stage.made.get()),
                group(stage.results.get()),
                codes(stage)
            );
        }
        println!("  fds baseline: {}", report.baseline.fds);
        println!("  fds after:    {}", report.after.fds);
        println!("  proxy log: {}", report.log_path.display());
        for note in &report.notes {
            println!("  note: {note}");
        }
        for sample in report.tally.samples() {
            println!("  {sample}");
        }
        for failure in report.failures() {
            println!("  FAILED: {failure}");
        }
    }
}

/// `12345678` as `12,345,678`.
fn group(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sum_adds_labelled_samples_of_one_name_only() {
        let text = "# HELP x\nberth_proxy_replays_total 3\nberth_proxy_replays_total_other 9\n\
                    berth_proxy_losses{reason=\"a\"} 1\nberth_proxy_losses{reason=\"b\"} 2\n";
        assert_eq!(metric_sum(text, "berth_proxy_replays_total"), 3.0);
        assert_eq!(metric_sum(text, "berth_proxy_losses"), 3.0);
        assert_eq!(group(20_200), "20,200");
        assert_eq!(group(999), "999");
    }
}
