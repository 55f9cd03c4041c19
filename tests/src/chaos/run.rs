//! One chaos run from start to report: the upstream and the proxy process, the warm-up and the
//! baseline, the sessions, churn and faults, then closing every session and waiting for the proxy
//! to settle.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use berth_crds::{DurationString, ProxyConfig, SessionStrategy};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::client::{Client, Tools};
use super::faults::{self, CurrentHandle, HttpFault, StdioFault};
use super::schedule::Schedule;
use super::sessions::{Ctx, churn, probe, sessions};
use super::tally::Tally;
use super::{LogSummary, Report, Settings, Snapshot, metric_sum};
use crate::fault::{FaultUpstream, RestartableUpstream};
use crate::proxy_process::ProxyProcess;
use crate::stdio::{Marker, processes};

/// Pause between recovery probes after a fault.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// Longest the proxy may take to recover from a fault (ready, calls answered with results).
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// Longest the proxy may take to settle back to the baseline after the run: past the 90 s after
/// which its HTTP client closes an idle pooled upstream connection.
const SETTLE_DEADLINE: Duration = Duration::from_secs(100);
/// Longest the proxy may take to open a new upstream session after a restart before a
/// measurement (a quick loss is re-initialized at once, a second one after up to 10 s backoff).
const QUIESCE_DEADLINE: Duration = Duration::from_secs(30);
/// Longest the proxy may take to close the warm-up's sessions before the baseline.
const BASELINE_DEADLINE: Duration = Duration::from_secs(30);
/// How often the HTTP upstream sends a log message on its standalone stream, which the proxy
/// fans out to every client's stream (the unread one included).
const LOG_EVERY: Duration = Duration::from_millis(20);
/// Bytes of padding in each of those log messages: over a default run the unread stream is
/// offered about 20 MB, several times what loopback buffers for a socket nobody reads.
const LOG_PAD: usize = 8192;
/// Metrics reported after the run.
const METRICS: [&str; 6] = [
    "berth_proxy_downstream_sessions",
    "berth_proxy_upstream_session_losses_total",
    "berth_proxy_replays_total",
    "berth_proxy_upstream_initializations_total",
    "berth_proxy_server_messages_dropped_total",
    "berth_proxy_stdio_child_exits_total",
];

/// Runs the HTTP chaos run: the proxy (`Shared`, `timeouts.call` and `connect` 2 s) in front of
/// a [`RestartableUpstream`] that sends an 8 KiB log message every 20 ms on its standalone stream.
///
/// # Errors
/// When the upstream or the proxy cannot be started, or the warm-up fails.
pub async fn run_http(bin: &Path, settings: Settings) -> anyhow::Result<Report> {
    let upstream = RestartableUpstream::start(FaultUpstream::builder().record(false)).await;
    let mut config = crate::proxy::config(&upstream.url, "2s");
    config.timeouts.connect = DurationString::new("2s");
    let port = upstream.addr.port();
    let setup = Setup::start(bin, "http", &config, &[], Some(port), None).await?;
    let mut chaos = HttpChaos {
        current: Arc::new(Mutex::new(upstream.handle())),
        upstream,
        faults: faults::http_faults(),
        logs: None,
    };
    setup
        .run("HTTP upstream, Shared", settings, Tools::Fault, &mut chaos)
        .await
}

/// Runs the stdio chaos run: the proxy (`PerClient`, one `tests/peers/stdio/fault_child.py` per
/// session) while children are killed.
///
/// # Errors
/// When the proxy cannot be started or the warm-up fails.
pub async fn run_stdio(bin: &Path, settings: Settings) -> anyhow::Result<Report> {
    let marker = Marker::new("chaos");
    let command = crate::stdio::fault_child(&marker, &[]);
    let mut config = crate::stdio::config(command, SessionStrategy::PerClient);
    config.session.max_sessions = u32::try_from(settings.sessions * 2)?.max(16);
    config.timeouts.call = DurationString::new("5s");
    // Killed children are expected here: never stop the proxy for a crash loop.
    let env = [("BERTH_STDIO_MAX_QUICK_FAILURES", "0")];
    let setup = Setup::start(bin, "stdio", &config, &env, None, Some(marker)).await?;
    let mut chaos = StdioChaos {
        pid: setup.proxy.pid()?,
        faults: faults::stdio_faults(),
    };
    setup
        .run(
            "stdio upstream, PerClient",
            settings,
            Tools::FaultChild,
            &mut chaos,
        )
        .await
}

/// The faults of one run.
trait Chaos {
    /// What each fault does, in order.
    fn names(&self) -> Vec<String>;
    /// The chaos phase begins; the run counts in `tally`.
    fn begin(&mut self, tally: &Arc<Tally>) {
        let _ = tally;
    }
    /// How long after fault `k - 1` ended fault `k` may begin at the earliest.
    fn calm_before(&self, k: usize) -> Duration {
        let _ = k;
        Duration::ZERO
    }
    /// Injects fault `k` and waits until it is over.
    async fn inject(&mut self, k: usize);
    /// The chaos phase is over.
    async fn end(&mut self) {}
    /// Brings the upstream to a state that is the same before and after the run, for the
    /// baseline and the final measurement.
    async fn quiesce(&mut self) {}
}

struct HttpChaos {
    upstream: RestartableUpstream,
    current: CurrentHandle,
    faults: Vec<HttpFault>,
    /// The task sending log messages, and what stops it.
    logs: Option<(tokio::task::JoinHandle<()>, CancellationToken)>,
}

impl Chaos for HttpChaos {
    fn names(&self) -> Vec<String> {
        let replies = |k: usize| if k.is_multiple_of(2) { "SSE" } else { "JSON" };
        let described = self.faults.iter().map(HttpFault::describe);
        described
            .enumerate()
            .map(|(k, fault)| format!("{fault}, then {} replies", replies(k)))
            .collect()
    }

    fn begin(&mut self, tally: &Arc<Tally>) {
        let stop = CancellationToken::new();
        let task = tokio::spawn(send_logs(self.current.clone(), tally.clone(), stop.clone()));
        self.logs = Some((task, stop));
    }

    async fn end(&mut self) {
        if let Some((task, stop)) = self.logs.take() {
            stop.cancel();
            let _ = task.await;
        }
    }

    /// Restarts the upstream and waits until the proxy holds a new session with its standalone
    /// stream open: the proxy's HTTP client keeps idle upstream connections for up to 90 s
    /// (reaped on a 90 s tick), as many as calls were in flight; a restart closes them all, so
    /// both measurements see the proxy with only the connections of its new session.
    async fn quiesce(&mut self) {
        self.upstream.restart().await;
        let handle = self.upstream.handle();
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = handle.clone();
        let Some(handle) = handle else {
            return;
        };
        let deadline = Instant::now() + QUIESCE_DEADLINE;
        while handle.open_streams() == 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn calm_before(&self, k: usize) -> Duration {
        self.faults
            .get(k)
            .map_or(Duration::ZERO, HttpFault::calm_before)
    }

    async fn inject(&mut self, k: usize) {
        if let Some(fault) = self.faults.get(k) {
            fault.inject(&mut self.upstream, &self.current).await;
        }
        // The upstream's reply shape alternates from fault to fault: the proxy relays SSE and
        // JSON replies along different paths.
        if let Some(handle) = self.upstream.handle() {
            handle.update(|f| f.sse_replies = k.is_multiple_of(2));
        }
    }
}

struct StdioChaos {
    pid: u32,
    faults: Vec<StdioFault>,
}

impl Chaos for StdioChaos {
    fn names(&self) -> Vec<String> {
        self.faults
            .iter()
            .map(|f| f.describe().to_owned())
            .collect()
    }

    async fn inject(&mut self, k: usize) {
        if let Some(fault) = self.faults.get(k) {
            fault.inject(self.pid, k);
        }
    }
}

/// Sends a padded log message on the upstream's standalone streams every [`LOG_EVERY`].
async fn send_logs(current: CurrentHandle, tally: Arc<Tally>, stop: CancellationToken) {
    let pad = "x".repeat(LOG_PAD);
    let mut n = 0u64;
    while !stop.is_cancelled() {
        let handle = current.lock().ok().and_then(|h| h.clone());
        if let Some(handle) = handle {
            let reached = handle.log("info", json!({"n": n, "pad": pad}));
            tally.logs_sent.add(1);
            tally.logs_reached.add(u64::from(reached > 0));
            n += 1;
        }
        tokio::time::sleep(LOG_EVERY).await;
    }
}

/// The proxy process of a run and what it needs around it.
struct Setup {
    proxy: ProxyProcess,
    /// For `/readyz` and `/metrics`.
    admin: reqwest::Client,
    upstream_port: Option<u16>,
    marker: Option<Marker>,
    log_path: PathBuf,
    started: Snapshot,
    /// JSON-RPC ids, unique in the run.
    ids: Arc<AtomicU64>,
    /// Recovery probes so far (their payloads are `probe-<n>`).
    probes: AtomicU64,
    _config_dir: tempfile::TempDir,
}

impl Setup {
    async fn start(
        bin: &Path,
        tag: &str,
        config: &ProxyConfig,
        env: &[(&str, &str)],
        upstream_port: Option<u16>,
        marker: Option<Marker>,
    ) -> anyhow::Result<Self> {
        let config_dir = tempfile::tempdir()?;
        let config_path = config_dir.path().join("proxy.yaml");
        std::fs::write(&config_path, serde_yaml::to_string(config)?)?;
        let log_path =
            std::env::temp_dir().join(format!("berth-chaos-{tag}-{}.log", std::process::id()));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("create {}", log_path.display()))?;
        let mut env = env.to_vec();
        env.push(("NO_COLOR", "1"));
        let args = [OsString::from("--config"), config_path.into_os_string()];
        // No pooled connection of our own counts among the proxy's descriptors.
        let admin = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()?;
        let proxy = ProxyProcess::start(bin, &args, &env, Stdio::from(log), &admin).await?;
        let mut setup = Self {
            proxy,
            admin,
            upstream_port,
            marker,
            log_path,
            started: Snapshot::default(),
            ids: Arc::new(AtomicU64::new(1)),
            probes: AtomicU64::new(0),
            _config_dir: config_dir,
        };
        setup.started = setup.snapshot()?;
        Ok(setup)
    }

    fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let pid = self.proxy.pid()?;
        let children = self.proxy.children()?.len();
        let orphans = self.marker.as_ref().map_or(0, |marker| {
            let needle = marker.path.to_string_lossy().into_owned();
            processes()
                .iter()
                .filter(|p| p.ppid != pid && p.state != 'Z' && p.cmdline.contains(&needle))
                .count()
        });
        Ok(Snapshot {
            fds: self.proxy.fds(self.upstream_port)?,
            rss_kib: self.proxy.rss_kib()?,
            threads: self.proxy.threads()?,
            processes: children + orphans,
        })
    }

    /// Warm-up, baseline, the chaos, closing and settling; the report.
    async fn run(
        mut self,
        name: &str,
        settings: Settings,
        tools: Tools,
        chaos: &mut impl Chaos,
    ) -> anyhow::Result<Report> {
        let mut problems = Vec::new();
        let warm_up = self.warm_up(settings, tools).await?;
        chaos.quiesce().await;
        let baseline = self.settle_baseline().await?;

        let client = Client::new(&self.proxy.mcp_url, tools)?;
        let faults = chaos.names();
        let ctx = Arc::new(Ctx {
            client,
            schedule: Schedule::new(settings.calls, faults.len()),
            tally: Arc::new(Tally::new(faults.len())),
            ids: self.ids.clone(),
        });
        chaos.begin(&ctx.tally);
        let began = Instant::now();
        let done = CancellationToken::new();
        let churn = tokio::spawn(churn(ctx.clone(), settings, done.clone()));
        let sessions = async {
            let outcome = sessions(&ctx, settings.sessions).await;
            done.cancel();
            outcome
        };
        let (mut ended_early, recoveries) =
            tokio::join!(sessions, self.inject(chaos, &ctx, &done, &mut problems));
        let elapsed = began.elapsed();
        chaos.end().await;
        match churn.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => ended_early.push(format!("churn: {error:#}")),
            Err(error) => ended_early.push(format!("churn: {error}")),
        }
        problems.extend(ended_early);
        let tally = ctx.tally.clone();
        drop(ctx);

        chaos.quiesce().await;
        let (after, settled_in) = self.settle(&baseline).await?;
        let peak_rss_kib = self.proxy.status_kib("VmHWM")?;
        let text = self.proxy.metrics(&self.admin).await.unwrap_or_default();
        let metrics = METRICS
            .iter()
            .map(|name| (*name, metric_sum(&text, name)))
            .collect();
        if let Some(status) = self.proxy.exited()? {
            problems.push(format!("the proxy exited: {status}"));
        }
        Ok(Report {
            name: name.to_owned(),
            settings,
            tally,
            faults,
            started: self.started,
            baseline,
            after,
            peak_rss_kib,
            settled_in,
            elapsed,
            metrics,
            log: summarize_log(&self.log_path),
            log_path: self.log_path.clone(),
            problems,
            notes: warm_up.into_iter().collect(),
            recoveries,
        })
    }

    /// `settings.warm_up` calls on each of `settings.sessions` sessions (their standalone streams
    /// opened as in the run), then every session closed. None may be answered to the wrong
    /// client or lost; errors (a call past its budget on a loaded machine) are only reported.
    async fn warm_up(&self, settings: Settings, tools: Tools) -> anyhow::Result<Option<String>> {
        let calls = settings.warm_up * settings.sessions as u64;
        let ctx = Arc::new(Ctx {
            client: Client::new(&self.proxy.mcp_url, tools)?,
            schedule: Schedule::new(calls, 0),
            tally: Arc::new(Tally::default()),
            ids: self.ids.clone(),
        });
        ctx.schedule.all_clear();
        let problems = sessions(&ctx, settings.sessions).await;
        ensure!(problems.is_empty(), "warm-up: {}", problems.join("; "));
        let tally = &ctx.tally;
        ensure!(
            tally.wrong_client() == 0 && tally.lost() == 0,
            "warm-up: {} answered to the wrong client, {} lost: {:?}",
            tally.wrong_client(),
            tally.lost(),
            tally.samples()
        );
        let errors = tally.calls.errors.get();
        Ok((errors > 0).then(|| {
            format!(
                "warm-up (not counted): {errors} of {calls} calls answered with an error {:?}",
                tally.calls.codes()
            )
        }))
    }

    /// Waits until the proxy is ready and the warm-up's client connections and processes are
    /// gone, then a second more; the baseline.
    async fn settle_baseline(&self) -> anyhow::Result<Snapshot> {
        let deadline = Instant::now() + BASELINE_DEADLINE;
        loop {
            let now = self.snapshot()?;
            let closed = now.fds.from_clients == 0 && now.processes <= self.started.processes;
            if closed && self.proxy.ready(&self.admin).await {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "the warm-up's sessions were not closed within {BASELINE_DEADLINE:?}: {:?}",
                now
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.snapshot()
    }

    /// Injects each fault when its ticket is due (and its calm after the previous recovery is
    /// over), waits after each until the proxy has recovered (ready, and a new client gets
    /// through), then opens the tail. Returns how long each recovery took,
    /// `None` when it did not within [`READY_DEADLINE`].
    async fn inject(
        &self,
        chaos: &mut impl Chaos,
        ctx: &Ctx,
        done: &CancellationToken,
        problems: &mut Vec<String>,
    ) -> Vec<Option<Duration>> {
        let schedule = &ctx.schedule;
        let mut recoveries = Vec::new();
        let mut ended = Instant::now();
        for k in 0..chaos.names().len() {
            let calm_until = ended + chaos.calm_before(k);
            while (schedule.taken() < schedule.due(k) || Instant::now() < calm_until)
                && !done.is_cancelled()
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if done.is_cancelled() {
                problems.push(format!(
                    "faults {}.. not injected: every client ended",
                    k + 1
                ));
                break;
            }
            schedule.begin(k);
            chaos.inject(k).await;
            let recovered = self.recovered(ctx, done).await;
            ended = Instant::now();
            if recovered.is_none() {
                problems.push(format!(
                    "no recovery within {READY_DEADLINE:?} after fault {}",
                    k + 1
                ));
            }
            recoveries.push(recovered);
        }
        schedule.all_clear();
        recoveries
    }

    /// Waits until the proxy is ready and a new client gets through (a [`probe`] every
    /// [`PROBE_EVERY`]); how long that took. The probes need no call tickets, so the wait ends
    /// however many of the stage's tickets the fault used up.
    async fn recovered(&self, ctx: &Ctx, done: &CancellationToken) -> Option<Duration> {
        let began = Instant::now();
        loop {
            if done.is_cancelled() {
                return Some(began.elapsed());
            }
            if self.proxy.ready(&self.admin).await
                && probe(ctx, self.probes.fetch_add(1, Ordering::Relaxed)).await
            {
                return Some(began.elapsed());
            }
            if began.elapsed() >= READY_DEADLINE {
                return None;
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    /// Waits until the proxy is ready and holds no more file descriptors and processes than at
    /// the baseline, for at most [`SETTLE_DEADLINE`]; the snapshot then and how long it took.
    async fn settle(&self, baseline: &Snapshot) -> anyhow::Result<(Snapshot, Option<Duration>)> {
        let began = Instant::now();
        loop {
            let now = self.snapshot()?;
            let settled = now.fds.total <= baseline.fds.total
                && now.processes <= baseline.processes
                && self.proxy.ready(&self.admin).await;
            if settled {
                return Ok((now, Some(began.elapsed())));
            }
            if began.elapsed() >= SETTLE_DEADLINE {
                return Ok((now, None));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Counts the lines of the proxy's log by level.
fn summarize_log(path: &Path) -> LogSummary {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut summary = LogSummary::default();
    for line in text.lines() {
        summary.lines += 1;
        summary.warnings += usize::from(line.contains(" WARN "));
        summary.errors += usize::from(line.contains(" ERROR "));
        summary.panics += usize::from(line.contains("panicked"));
    }
    summary
}
