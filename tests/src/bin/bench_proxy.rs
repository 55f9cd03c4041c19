//! `bench_proxy` (issue 14): the same loads, in one run, against every system a user would put
//! in front of an MCP server instead of Berth, and against the upstreams directly. Not a test:
//! it measures and prints.
//!
//! Systems (`berth_tests::bench::systems`): direct; Berth `Shared` and `PerClient` and nginx in
//! front of server-everything over Streamable HTTP and of the Rust fixture; ToolHive's
//! `thv proxy` in front of server-everything over HTTP; Berth stdio `PerClient`,
//! `supergateway --stateful`, `mcp-proxy` (TypeScript) and `mcp-proxy` (Python) in front of
//! server-everything's stdio mode; and `plain_hop`, Berth's own stack (axum, hyper's client,
//! mimalloc) as a plain HTTP hop with no MCP work, in front of both HTTP upstreams. Loads: closed loop at concurrency 1, 16 and 64; an open loop
//! of 64 sessions at `--rate` calls per second in total (latency from each call's due time, so
//! a stall is not hidden); sequential session opens; and 200 sequential calls from Python
//! `httpx` and from the TypeScript SDK client. Figures: p50/p99 and what each adds over direct,
//! calls per second, the hop's own CPU per call and its children's apart (`/proc`), its RSS
//! idle, after the loads and with 1,000 idle sessions (where it does not spawn a server per
//! session).
//!
//! Prints Markdown tables and the targets; `--json PATH` also writes the figures (for
//! `tests/peers/bench/plot.py`). Run it with `scripts/bench.sh`, which installs the peers.
//! Flags: `--proxy-bin PATH`, `--requests N` (per load, default 5000), `--rate N` (default
//! 2000), `--sessions N` (idle sessions, default 1000), `--opens N` (default 50),
//! `--client-calls N` (default 200), `--only TEXT[,TEXT...]` (systems whose name contains one
//! TEXT, and the directs), `--json PATH`, `--audit-log Stdout|Off` (passed to every Berth
//! system; Berth's default, Stdout, writes one audit line per call, here to /dev/null),
//! `--payload-bytes N` (each call's `echo` message is N bytes, in the request and back in the
//! result; default the five bytes `bench`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use berth_tests::bench::load::{self, Load};
use berth_tests::bench::procs::{Usage, own_cpu_between, usage};
use berth_tests::bench::report::{IdleSessions, LoadResult, Report, SystemResult};
use berth_tests::bench::systems::{self, System, Upstream};
use berth_tests::bench::{clients, targets};
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy_process::proxy_bin;

/// Settling time before a memory reading.
const SETTLE: Duration = Duration::from_secs(1);
/// How long after the loads RSS is read again: past Berth's 4 s upstream pool idle timeout and
/// the pool's next sweep (at most another 4 s), so the reading is what the hop keeps once its
/// clients and their calls are gone, not the keep-alive connections of the last burst.
const AFTER_LOAD: Duration = Duration::from_secs(10);

struct Args {
    proxy_bin: Option<PathBuf>,
    requests: usize,
    rate: u32,
    sessions: usize,
    opens: usize,
    client_calls: usize,
    only: Option<String>,
    json: Option<PathBuf>,
    /// `--audit-log` for every Berth system (`Stdout`, the default, or `Off`).
    audit_log: Option<String>,
    /// `--payload-bytes`: the length of every call's `echo` message (0: `bench`).
    payload_bytes: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        proxy_bin: std::env::var_os("BERTH_PROXY_BIN").map(PathBuf::from),
        requests: 5000,
        rate: 2000,
        sessions: 1000,
        opens: 50,
        client_calls: 200,
        only: None,
        json: None,
        audit_log: None,
        payload_bytes: 0,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let number = |what: &str| value.parse::<usize>().with_context(|| what.to_owned());
        match flag.as_str() {
            "--proxy-bin" => args.proxy_bin = Some(value.clone().into()),
            "--requests" => args.requests = number("--requests")?,
            "--rate" => args.rate = value.parse().context("--rate")?,
            "--sessions" => args.sessions = number("--sessions")?,
            "--opens" => args.opens = number("--opens")?,
            "--client-calls" => args.client_calls = number("--client-calls")?,
            "--only" => args.only = Some(value),
            "--json" => args.json = Some(value.into()),
            "--audit-log" => args.audit_log = Some(value),
            "--payload-bytes" => args.payload_bytes = number("--payload-bytes")?,
            _ => bail!(
                "unknown flag {flag} (known: --proxy-bin, --requests, --rate, --sessions, \
                 --opens, --client-calls, --only, --json, --audit-log, --payload-bytes)"
            ),
        }
    }
    ensure!(args.requests >= 64, "--requests must be at least 64");
    ensure!(args.sessions <= 10_000, "--sessions is capped at 10000");
    ensure!((1..=1000).contains(&args.opens), "--opens must be 1-1000");
    ensure!(
        (64..=50_000).contains(&args.rate),
        "--rate must be 64-50000"
    );
    Ok(args)
}

/// The systems, in the order they run (each alone on the machine).
#[derive(Debug, Clone, Copy)]
enum Kind {
    Direct(Upstream),
    BerthShared(Upstream),
    BerthPerClient,
    Nginx(Upstream),
    PlainHop(Upstream),
    ToolHive,
    BerthStdio,
    Supergateway,
    McpProxyTs,
    McpProxyPython,
}

const KINDS: [Kind; 14] = [
    Kind::Direct(Upstream::EverythingHttp),
    Kind::BerthShared(Upstream::EverythingHttp),
    Kind::BerthPerClient,
    Kind::Nginx(Upstream::EverythingHttp),
    Kind::PlainHop(Upstream::EverythingHttp),
    Kind::ToolHive,
    Kind::BerthStdio,
    Kind::Supergateway,
    Kind::McpProxyTs,
    Kind::McpProxyPython,
    Kind::Direct(Upstream::Fixture),
    Kind::BerthShared(Upstream::Fixture),
    Kind::Nginx(Upstream::Fixture),
    Kind::PlainHop(Upstream::Fixture),
];

impl Kind {
    /// A name to report when the system cannot start.
    fn name(self) -> &'static str {
        match self {
            Self::Direct(_) => "direct",
            Self::BerthShared(_) => "berth Shared",
            Self::BerthPerClient => "berth PerClient",
            Self::Nginx(_) => "nginx",
            Self::PlainHop(_) => "plain hop",
            Self::ToolHive => "ToolHive thv proxy",
            Self::BerthStdio => "berth stdio PerClient",
            Self::Supergateway => "supergateway",
            Self::McpProxyTs => "mcp-proxy (TS)",
            Self::McpProxyPython => "mcp-proxy (Python)",
        }
    }

    fn upstream(self) -> Upstream {
        match self {
            Self::Direct(u) | Self::BerthShared(u) | Self::Nginx(u) | Self::PlainHop(u) => u,
            Self::BerthPerClient | Self::ToolHive => Upstream::EverythingHttp,
            Self::BerthStdio | Self::Supergateway | Self::McpProxyTs | Self::McpProxyPython => {
                Upstream::EverythingStdio
            }
        }
    }
}

struct Upstreams {
    everything: String,
    fixture: String,
}

impl Upstreams {
    fn url(&self, upstream: Upstream) -> &str {
        match upstream {
            Upstream::Fixture => &self.fixture,
            _ => &self.everything,
        }
    }
}

async fn start(
    kind: Kind,
    upstreams: &Upstreams,
    bin: &std::path::Path,
    audit_log: Option<&str>,
    client: &reqwest::Client,
) -> anyhow::Result<System> {
    let everything = upstreams.everything.as_str();
    let berth = |name, upstream, args: &[&str]| {
        let mut args: Vec<String> = args.iter().map(|&a| a.to_owned()).collect();
        if let Some(audit_log) = audit_log {
            args.extend(["--audit-log".to_owned(), audit_log.to_owned()]);
        }
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            systems::berth(bin, name, upstream, &args, client).await
        }
    };
    match kind {
        Kind::Direct(u) => Ok(System::direct(u, upstreams.url(u))),
        Kind::BerthShared(u) => {
            let args = ["--upstream-url", upstreams.url(u), "--strategy", "Shared"];
            berth("berth Shared", u, &args).await
        }
        Kind::BerthPerClient => {
            let args = [
                "--upstream-url",
                everything,
                "--strategy",
                "PerClient",
                // The most the proxy accepts: room for the 1,000 idle sessions and 10 more.
                "--max-sessions",
                "1024",
            ];
            berth("berth PerClient", kind.upstream(), &args).await
        }
        Kind::Nginx(u) => systems::nginx(u, upstreams.url(u)).await,
        Kind::PlainHop(u) => systems::plain_hop(u, upstreams.url(u)).await,
        Kind::ToolHive => systems::toolhive(everything).await,
        Kind::BerthStdio => {
            let command = systems::berth_stdio_command()?;
            let args = ["--upstream-command", &command, "--max-sessions", "128"];
            berth("berth stdio PerClient", kind.upstream(), &args).await
        }
        Kind::Supergateway => systems::supergateway().await,
        Kind::McpProxyTs => systems::mcp_proxy_ts().await,
        Kind::McpProxyPython => systems::mcp_proxy_python().await,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    berth_proxy::install_crypto_provider();
    let bin = proxy_bin(args.proxy_bin.clone(), false)?;
    let client = load::client()?;
    let fixture = FaultUpstream::builder().record(false).start().await;
    let everything = berth_tests::peers::everything().await;
    let upstreams = Upstreams {
        everything: everything.url.clone(),
        fixture: fixture.url.clone(),
    };
    if cfg!(debug_assertions) {
        eprintln!("bench_proxy: debug build; figures are not meaningful (use --release)");
    }
    eprintln!("bench_proxy: proxy {}", bin.display());
    let stdio_command = systems::everything_stdio()?;
    let loads = [
        Load {
            sessions: 1,
            requests: args.requests,
            rate: None,
            payload_bytes: args.payload_bytes,
        },
        Load {
            sessions: 16,
            requests: args.requests,
            rate: None,
            payload_bytes: args.payload_bytes,
        },
        Load {
            sessions: 64,
            requests: args.requests,
            rate: None,
            payload_bytes: args.payload_bytes,
        },
        Load {
            sessions: 64,
            requests: args.requests,
            rate: Some(args.rate),
            payload_bytes: args.payload_bytes,
        },
    ];
    let mut report = Report {
        commit: commit(),
        requests: args.requests,
        stdio_child_open_p50_ms: clients::stdio_child_open_p50_ms(&stdio_command, 20)
            .await
            .map_err(|e| eprintln!("stdio child open: {e:#}"))
            .ok(),
        systems: Vec::new(),
    };
    for kind in KINDS {
        let wanted = match (&args.only, kind) {
            (None, _) | (_, Kind::Direct(_)) => true,
            (Some(only), kind) => only.split(',').any(|part| kind.name().contains(part)),
        };
        if !wanted {
            continue;
        }
        eprintln!(
            "bench_proxy: {} ({})",
            kind.name(),
            kind.upstream().describe()
        );
        let audit_log = args.audit_log.as_deref();
        let result = match start(kind, &upstreams, &bin, audit_log, &client).await {
            Ok(system) => match measure(&system, &loads, &args, &client).await {
                Ok(result) => result,
                Err(e) => skipped(&system.name, kind.upstream(), &e),
            },
            Err(e) => skipped(kind.name(), kind.upstream(), &e),
        };
        report.systems.push(result);
    }
    report.fill_added();
    let checks = targets::checks(&report, &loads[3].label());
    println!(
        "bench_proxy at {}: tools/call echo, {} calls per load after {} warm-up\n",
        report.commit,
        args.requests,
        load::WARM_UP
    );
    println!("{}", report.markdown());
    println!("\n**Targets (issue 14)**\n\n{}", targets::markdown(&checks));
    if let Some(path) = &args.json {
        let json = serde_json::json!({"report": report, "targets": checks});
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("bench_proxy: wrote {}", path.display());
    }
    Ok(())
}

fn skipped(name: &str, upstream: Upstream, error: &anyhow::Error) -> SystemResult {
    eprintln!("bench_proxy: {name} not measured: {error:#}");
    SystemResult {
        name: name.to_owned(),
        upstream: Some(upstream),
        skipped: Some(format!("{error:#}")),
        ..SystemResult::default()
    }
}

/// `git rev-parse --short HEAD`, or `?`.
fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "?".to_owned(), |s| s.trim().to_owned())
}

fn usage_of(system: &System) -> anyhow::Result<Option<Usage>> {
    system.pid.map(usage).transpose()
}

async fn measure(
    system: &System,
    loads: &[Load],
    args: &Args,
    client: &reqwest::Client,
) -> anyhow::Result<SystemResult> {
    let url = system.url.as_str();
    let mut result = SystemResult {
        name: system.name.clone(),
        upstream: Some(system.upstream),
        ..SystemResult::default()
    };
    tokio::time::sleep(SETTLE).await;
    let idle = usage_of(system)?;
    result.rss_idle_kib = idle.as_ref().map(|u| u.own_rss_kib);
    // The loads run on their own client, dropped before the after-load RSS reading, so none of
    // their keep-alive connections (64 and more) is still open then: RSS after load is what
    // the hop keeps once its clients have gone.
    let loads_client = load::client()?;
    for load in loads {
        let sessions = load::open_sessions(&loads_client, url, load.sessions).await?;
        let before = usage_of(system)?;
        let figures = load::run_on(&loads_client, url, &sessions, load).await;
        let after = usage_of(system)?;
        load::close_sessions(&loads_client, url, &sessions).await;
        let figures = figures.with_context(|| load.label())?;
        let cpu = before
            .zip(after.as_ref())
            .map(|(b, a)| (own_cpu_between(&b, a), a.children_cpu - b.children_cpu));
        if let (Some(idle), Some(after)) = (idle.as_ref(), after)
            && load.sessions >= 64
            && load.rate.is_none()
        {
            let extra = after.children.saturating_sub(idle.children);
            result.children_per_session = Some(extra as f64 / load.sessions as f64);
            result.children_rss_kib_at_peak = Some(after.children_rss_kib);
        }
        result.loads.push(LoadResult::new(load, &figures, cpu));
    }
    drop(loads_client);
    tokio::time::sleep(AFTER_LOAD).await;
    result.rss_after_kib = usage_of(system)?.map(|u| u.own_rss_kib);
    // A hop that spawns a child per session: the next open waits until the last one's child
    // exited (at most 5 s), as the child-alone figure waits for each child's exit.
    let children_idle = idle.map_or(0, |u| u.children);
    let settled = || async {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline
            && usage_of(system)
                .ok()
                .flatten()
                .is_some_and(|u| u.children > children_idle)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let opens = load::session_opens(client, url, args.opens, settled).await?;
    result.open_p50_ms = Some(berth_tests::bench::report::ms(opens.p50));
    result.open_p99_ms = Some(berth_tests::bench::report::ms(opens.p99));
    result.httpx_p50_ms = external(
        systems::marker("bench-python").ok(),
        "sequential_httpx.py",
        url,
        args,
    )
    .await;
    result.sdk_p50_ms = external(Some("node".into()), "sequential_sdk.mjs", url, args).await;
    if system.pid.is_some() && result.children_per_session.is_some_and(|c| c < 0.5) {
        let warm = load::open_sessions(client, url, 10).await?;
        tokio::time::sleep(SETTLE).await;
        let before = usage_of(system)?.map_or(0, |u| u.own_rss_kib);
        let idle = load::open_sessions(client, url, args.sessions).await?;
        tokio::time::sleep(SETTLE).await;
        let after = usage_of(system)?.map_or(0, |u| u.own_rss_kib);
        load::close_sessions(client, url, &idle).await;
        load::close_sessions(client, url, &warm).await;
        result.idle_sessions = Some(IdleSessions {
            count: args.sessions,
            rss_before_kib: before,
            rss_after_kib: after,
        });
    }
    Ok(result)
}

async fn external(program: Option<PathBuf>, script: &str, url: &str, args: &Args) -> Option<f64> {
    let program = program?;
    clients::sequential_median_ms(&program, script, url, args.client_calls)
        .await
        .map_err(|e| eprintln!("bench_proxy: {script} against {url}: {e:#}"))
        .ok()
}
