//! `bench_operator`: prints what the berth operator costs at scale. Not a test: it measures and
//! prints.
//!
//! Against the cluster in `KUBECONFIG` (the local control plane of `tests/controlplane/up.sh`),
//! in a fresh namespace, it starts the real `berth-operator` binary scoped to that namespace,
//! creates N McpUpstreams (default 1,000) and measures: the time from the first create until
//! every ConfigMap, Service and Deployment exists (and until every McpUpstream has a status);
//! the operator's resident memory (`VmRSS` and peak `VmHWM` from `/proc/<pid>/status`); and the
//! writes it sends during an idle window (default 60 s, spanning at least two resyncs of every
//! object at the 25 s resync this bench sets), read from its own `/metrics`
//! (`berth_operator_api_writes_total`). Issue 5 targets: ≤ 60 s, ≤ 64 MiB, 0 writes.
//!
//! The operator binary: `--operator-bin PATH`, else `$BERTH_OPERATOR_BIN`, else the
//! `berth-operator` beside this program (built with cargo in the same profile when missing;
//! `berth_tests::cluster::operator::operator_bin`).
//! Everything listens on 127.0.0.1; every wait has a deadline.
//!
//! Run: `cargo run --release -p berth-tests --bin bench_operator` (flags: `--upstreams N`,
//! `--idle-seconds S`, `--resync-seconds S`, `--concurrency N` (the operator's; default its own
//! default), `--operator-bin PATH`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use berth_crds::McpUpstream;
use berth_tests::cluster::{TestNamespace, client, ensure_crd};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Api;
use kube::api::{ListParams, PostParams};
use tokio::process::{Child, Command};

/// Concurrent creates.
const CREATE_CONCURRENCY: usize = 16;
/// Deadline for all children to appear (well past the 60 s target, so a miss is measured).
const APPLY_DEADLINE: Duration = Duration::from_secs(600);
/// Writes must stay unchanged this long before the idle window starts.
const QUIET: Duration = Duration::from_secs(10);

struct Args {
    operator_bin: Option<PathBuf>,
    upstreams: usize,
    idle: Duration,
    resync: Duration,
    concurrency: Option<u16>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        operator_bin: std::env::var_os("BERTH_OPERATOR_BIN").map(PathBuf::from),
        upstreams: 1000,
        idle: Duration::from_secs(60),
        resync: Duration::from_secs(25),
        concurrency: None,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--operator-bin" => args.operator_bin = Some(value.into()),
            "--upstreams" => args.upstreams = value.parse().context("--upstreams")?,
            "--idle-seconds" => {
                args.idle = Duration::from_secs(value.parse().context("--idle-seconds")?)
            }
            "--concurrency" => args.concurrency = Some(value.parse().context("--concurrency")?),
            "--resync-seconds" => {
                args.resync = Duration::from_secs(value.parse().context("--resync-seconds")?);
            }
            _ => bail!(
                "unknown flag {flag} (known: --operator-bin, --upstreams, --idle-seconds, \
                 --resync-seconds, --concurrency)"
            ),
        }
    }
    ensure!(args.upstreams > 0, "--upstreams must be positive");
    ensure!(
        args.resync.as_secs() > 0,
        "--resync-seconds must be positive"
    );
    Ok(args)
}

/// The `berth-operator run` process; killed when dropped.
struct OperatorProcess {
    metrics_url: String,
    child: Child,
}

impl OperatorProcess {
    fn start(bin: &PathBuf, namespace: &str, args: &Args) -> anyhow::Result<Self> {
        let port = berth_tests::free_port();
        let mut command = Command::new(bin);
        command.args(["run", "--namespace", namespace]);
        if let Some(concurrency) = args.concurrency {
            command.arg(format!("--concurrency={concurrency}"));
        }
        let child = command
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--resync-seconds")
            .arg(args.resync.as_secs().to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        Ok(Self {
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
            child,
        })
    }

    /// `(VmRSS, VmHWM)` in KiB.
    fn memory_kib(&self) -> anyhow::Result<(u64, u64)> {
        let pid = self.child.id().context("operator exited")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .with_context(|| format!("{name} in /proc/{pid}/status"))
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// Sum of `berth_operator_api_writes_total` over kinds, and the reconcile count.
    async fn counters(&self, http: &reqwest::Client) -> anyhow::Result<(u64, u64)> {
        let text = http
            .get(&self.metrics_url)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let sum = |prefix: &str| {
            text.lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum::<f64>()
        };
        // Counters are integers well below 2^53.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let counts = (
            sum("berth_operator_api_writes_total{") as u64,
            sum("berth_operator_reconciliations_total{") as u64,
        );
        Ok(counts)
    }
}

fn upstream(name: &str) -> anyhow::Result<McpUpstream> {
    let mut upstream: McpUpstream =
        serde_yaml::from_str(include_str!("../../../examples/everything.yaml"))?;
    upstream.metadata.name = Some(name.to_owned());
    Ok(upstream)
}

async fn count<K>(api: &Api<K>) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = ListParams::default().labels("app.kubernetes.io/managed-by=berth-operator");
    api.list_metadata(&params)
        .await
        .map_or(0, |list| list.items.len())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let bin = match &args.operator_bin {
        Some(bin) => bin.clone(),
        None => berth_tests::cluster::operator::operator_bin(),
    };
    let client = client().await;
    ensure_crd(&client).await;
    let ns = TestNamespace::create(&client, "bench-operator").await;
    let operator = OperatorProcess::start(&bin, &ns.name, &args)?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let (started_rss, _) = operator.memory_kib()?;
    let n = args.upstreams;
    eprintln!("{n} McpUpstreams into namespace {}", ns.name);

    let upstreams = ns.api::<McpUpstream>();
    let started = Instant::now();
    let created: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let upstreams = upstreams.clone();
            async move {
                upstreams
                    .create(&PostParams::default(), &upstream(&format!("up-{i}"))?)
                    .await
                    .map(|_| ())
                    .with_context(|| format!("create up-{i}"))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let all_created = started.elapsed();

    let (config_maps, services, deployments) = (
        ns.api::<ConfigMap>(),
        ns.api::<Service>(),
        ns.api::<Deployment>(),
    );
    let mut peak_rss = 0;
    let applied = loop {
        let counts = (
            count(&config_maps).await,
            count(&services).await,
            count(&deployments).await,
        );
        peak_rss = peak_rss.max(operator.memory_kib()?.0);
        if counts == (n, n, n) {
            break started.elapsed();
        }
        ensure!(
            started.elapsed() < APPLY_DEADLINE,
            "children after {APPLY_DEADLINE:?}: {counts:?} of {n} each"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let with_status = loop {
        let list = upstreams.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|u| {
                u.status
                    .as_ref()
                    .is_some_and(|s| s.observed_generation.is_some())
            })
            .count();
        if done == n {
            break started.elapsed();
        }
        ensure!(
            started.elapsed() < APPLY_DEADLINE,
            "status after {APPLY_DEADLINE:?}: {done} of {n}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // Settle: no write for QUIET, then the idle window.
    let settle_deadline = Instant::now() + APPLY_DEADLINE;
    let (mut last, _) = operator.counters(&http).await?;
    let mut since = Instant::now();
    while since.elapsed() < QUIET {
        ensure!(Instant::now() < settle_deadline, "writes did not settle");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (now, _) = operator.counters(&http).await?;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    let (writes_before, reconciles_before) = operator.counters(&http).await?;
    tokio::time::sleep(args.idle).await;
    let (writes_after, reconciles_after) = operator.counters(&http).await?;
    let (rss, hwm) = operator.memory_kib()?;
    let idle_reconciles = reconciles_after - reconciles_before;

    println!("McpUpstreams:                     {n}");
    println!(
        "created (API, {CREATE_CONCURRENCY} at a time):   {:.1} s",
        all_created.as_secs_f64()
    );
    println!(
        "all children applied after:       {:.1} s  (target <= 60 s)",
        applied.as_secs_f64()
    );
    println!(
        "all statuses written after:       {:.1} s",
        with_status.as_secs_f64()
    );
    println!("writes until steady:              {writes_before}");
    println!(
        "operator RSS: start {:.1} MiB, steady {:.1} MiB, peak {:.1} MiB  (target <= 64 MiB)",
        kib_to_mib(started_rss),
        kib_to_mib(rss),
        kib_to_mib(hwm.max(peak_rss))
    );
    println!(
        "idle {} s (resync {} s): {idle_reconciles} reconciles, {} writes  (target 0)",
        args.idle.as_secs(),
        args.resync.as_secs(),
        writes_after - writes_before
    );
    ensure!(
        idle_reconciles >= n as u64,
        "the idle window did not span a resync of every object ({idle_reconciles} reconciles)"
    );
    drop(operator);
    ns.delete().await;
    Ok(())
}

#[allow(clippy::cast_precision_loss)]
fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
