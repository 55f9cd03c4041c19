//! `bench_proxy`: prints what the berth proxy costs. Not a test: it measures and prints.
//!
//! Against the in-process fault upstream's `echo` (JSON replies, recording off), it measures:
//! the latency of one `tools/call` through the proxy and straight to the upstream (p50, p99) at
//! concurrency 1 and 64, and the difference (the latency the proxy adds); calls per second
//! through the proxy; and the proxy's resident memory growth per idle downstream session, read
//! from `/proc/<pid>/status` around opening 1,000 sessions on a fresh proxy process.
//!
//! The proxy runs as the real `berth-proxy` binary: `--proxy-bin PATH`, else `$BERTH_PROXY_BIN`,
//! else the `berth-proxy` beside this program (built with cargo in the same profile when
//! missing). Everything is on 127.0.0.1; every count is bounded and every wait has a deadline.
//!
//! Closed loop (each of `concurrency` workers sends its next call when the last one returns)
//! saturates this machine at concurrency 64, so the latency the proxy adds there is its CPU cost
//! times the queue (Little's law), not the cost of one call. An open-loop row adds 64 sessions
//! sending at a fixed total rate (`--rate`, below saturation), latency measured from each call's
//! scheduled time so that a stall is not hidden (no coordinated omission).
//!
//! Run for meaningful figures: `cargo run --release -p berth-tests --bin bench_proxy`.
//! Flags: `--requests N` (per run, default 10000), `--sessions N` (default 1000), `--rate N`
//! (open-loop calls per second, default 2000), `--only-concurrency N` (only the closed loop at
//! N, to profile one load).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use berth_tests::fault::FaultUpstream;
use berth_tests::proxy_process::{ProxyProcess, cpu_seconds, proxy_bin};
use serde_json::json;

/// Requests before measuring, per run.
const WARM_UP: usize = 500;
/// Deadline for any one request.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Concurrent handshakes while opening the idle sessions.
const OPEN_CONCURRENCY: usize = 16;

struct Args {
    proxy_bin: Option<PathBuf>,
    requests: usize,
    sessions: usize,
    rate: u32,
    /// Only the closed loop at this concurrency (for profiling one load).
    only: Option<usize>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        proxy_bin: std::env::var_os("BERTH_PROXY_BIN").map(PathBuf::from),
        requests: 10_000,
        sessions: 1000,
        rate: 2000,
        only: None,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--proxy-bin" => args.proxy_bin = Some(value.into()),
            "--requests" => args.requests = value.parse().context("--requests")?,
            "--sessions" => args.sessions = value.parse().context("--sessions")?,
            "--rate" => args.rate = value.parse().context("--rate")?,
            "--only-concurrency" => {
                args.only = Some(value.parse().context("--only-concurrency")?);
            }
            _ => bail!(
                "unknown flag {flag} (known: --proxy-bin, --requests, --sessions, --rate, \
                 --only-concurrency)"
            ),
        }
    }
    ensure!(args.requests >= 64, "--requests must be at least 64");
    ensure!(args.sessions <= 10_000, "--sessions is capped at 10000");
    ensure!(
        (64..=50_000).contains(&args.rate),
        "--rate must be 64-50000"
    );
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    berth_proxy::install_crypto_provider();
    let proxy_bin = proxy_bin(args.proxy_bin.clone(), false)?;
    let upstream = FaultUpstream::builder().record(false).start().await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .timeout(REQUEST_DEADLINE)
        .build()?;

    let profile = if cfg!(debug_assertions) {
        "debug (figures are not meaningful; use --release)"
    } else {
        "release"
    };
    println!(
        "bench_proxy: {profile} build, proxy {}",
        proxy_bin.display()
    );
    println!(
        "tools/call echo, {} requests per run after {WARM_UP} warm-up, keep-alive, loopback",
        args.requests
    );

    let proxy = start_proxy(&proxy_bin, &upstream.url, &client).await?;
    let nginx = start_nginx(&upstream.url).await?;
    println!();
    println!(
        "{:>11} | {:>10} {:>10} {:>8} | {:>10} {:>10} {:>8} | {:>10} {:>10} | {:>14}",
        "concurrency",
        "direct p50",
        "p99",
        "call/s",
        "proxy p50",
        "p99",
        "call/s",
        "added p50",
        "p99",
        "proxy CPU/call"
    );
    let mut peer_rows = Vec::new();
    let loads = match args.only {
        Some(concurrency) => vec![(concurrency, None)],
        None => vec![(1, None), (64, None), (64, Some(args.rate))],
    };
    for (concurrency, rate) in loads {
        let load = Load {
            concurrency,
            requests: args.requests,
            rate,
        };
        let label = match rate {
            None => concurrency.to_string(),
            Some(rate) => format!("{concurrency}@{rate}/s"),
        };
        let direct = run(&client, &upstream.url, &load).await?;
        let proxied = run_through(&client, &proxy.mcp_url, proxy.pid()?, &load).await?;
        println!("{}", row(&label, &direct, &proxied));
        // The same load through nginx, right after, against the same direct figures.
        let via_nginx = run_through(&client, &nginx.mcp_url(), nginx.pid(), &load).await?;
        peer_rows.push(row(&label, &direct, &via_nginx));
    }
    println!();
    println!(
        "peer: nginx {} (one worker, HTTP/1.1 keep-alive to the upstream), the same loads:",
        nginx_version()
    );
    for line in peer_rows {
        println!("{line}");
    }
    drop((proxy, nginx));

    let fresh = start_proxy(&proxy_bin, &upstream.url, &client).await?;
    let warm = open_sessions(&client, &fresh.mcp_url, 10).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = fresh.rss_kib()?;
    let idle = open_sessions(&client, &fresh.mcp_url, args.sessions).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = fresh.rss_kib()?;
    let per_session = (after.saturating_sub(before) as f64 * 1024.0) / args.sessions as f64;
    println!();
    println!(
        "idle sessions: {} opened; proxy RSS {before} KiB -> {after} KiB; {:.0} bytes ({:.2} KiB) per session",
        args.sessions,
        per_session,
        per_session / 1024.0
    );
    println!("targets: added p50 <= 0.3 ms, added p99 <= 2 ms, <= 8 KiB per idle session");
    drop((warm, idle));
    Ok(())
}

/// One table row: `direct` against `through` (a proxy's figures and its CPU per call).
fn row(label: &str, direct: &Figures, (through, cpu_per_call): &(Figures, Duration)) -> String {
    format!(
        "{label:>11} | {:>10} {:>10} {:>8.0} | {:>10} {:>10} {:>8.0} | {:>10} {:>10} | {:>14}",
        ms(direct.p50),
        ms(direct.p99),
        direct.per_second,
        ms(through.p50),
        ms(through.p99),
        through.per_second,
        ms_signed(through.p50, direct.p50),
        ms_signed(through.p99, direct.p99),
        ms(*cpu_per_call),
    )
}

/// Runs `load` against `url`, served by the process `pid`, and returns the figures and that
/// process's CPU time per call.
async fn run_through(
    client: &reqwest::Client,
    url: &str,
    pid: u32,
    load: &Load,
) -> anyhow::Result<(Figures, Duration)> {
    let before = cpu_seconds(pid)?;
    let figures = run(client, url, load).await?;
    let cpu = cpu_seconds(pid)? - before;
    let per_call = Duration::from_secs_f64(cpu / figures.calls as f64);
    Ok((figures, per_call))
}

/// nginx as a plain HTTP reverse proxy in front of `upstream_url` (no MCP awareness): the floor
/// any HTTP hop on this machine costs.
async fn start_nginx(upstream_url: &str) -> anyhow::Result<berth_tests::nginx::Nginx> {
    let url = reqwest::Url::parse(upstream_url)?;
    let backend = format!(
        "{}:{}",
        url.host_str().context("upstream host")?,
        url.port_or_known_default().context("upstream port")?
    );
    Ok(berth_tests::nginx::Nginx::start_with(
        &[backend],
        "keepalive 128;",
        "proxy_http_version 1.1; proxy_set_header Connection \"\";",
    )
    .await)
}

/// `nginx -v` output, or `(version unknown)`.
fn nginx_version() -> String {
    std::process::Command::new("/usr/sbin/nginx")
        .arg("-v")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stderr).ok())
        .and_then(|text| Some(text.trim().rsplit_once(": ")?.1.to_owned()))
        .unwrap_or_else(|| "(version unknown)".to_owned())
}

/// A `berth-proxy` process in front of `upstream`, its log on this program's stderr.
async fn start_proxy(
    bin: &Path,
    upstream: &str,
    client: &reqwest::Client,
) -> anyhow::Result<ProxyProcess> {
    let args = [OsString::from("--upstream-url"), OsString::from(upstream)];
    ProxyProcess::start(bin, &args, &[], Stdio::inherit(), client).await
}

/// Latency quantiles and rate of one run.
struct Figures {
    /// Calls made, warm-up included.
    calls: usize,
    p50: Duration,
    p99: Duration,
    per_second: f64,
}

/// One run's shape: `requests` calls (after a warm-up) over `concurrency` sessions, each worker
/// sequential on its own session; closed loop, or paced to `rate` calls per second in total.
struct Load {
    concurrency: usize,
    requests: usize,
    rate: Option<u32>,
}

async fn run(client: &reqwest::Client, url: &str, load: &Load) -> anyhow::Result<Figures> {
    let concurrency = load.concurrency;
    let sessions = open_sessions(client, url, concurrency).await?;
    let ids = Arc::new(AtomicU64::new(1));
    let warm = WARM_UP.div_ceil(concurrency);
    let per_worker = load.requests / concurrency;
    // Open loop: each worker's calls are due every `concurrency / rate` seconds; latency counts
    // from when a call was due, so a call delayed by the one before it still pays for the wait.
    let period = load
        .rate
        .map(|rate| Duration::from_secs_f64(concurrency as f64 / f64::from(rate)));
    let started = Instant::now();
    let mut workers = Vec::new();
    for (n, session) in sessions.into_iter().enumerate() {
        let (client, url, ids) = (client.clone(), url.to_owned(), ids.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..warm {
                call_echo(&client, &url, &session, &ids).await?;
            }
            let mut ticks = period.map(|period| {
                // Spread the workers' phases evenly over one period.
                let offset = period.mul_f64(n as f64 / concurrency as f64);
                let mut ticks =
                    tokio::time::interval_at(tokio::time::Instant::now() + offset, period);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                ticks
            });
            let mut latencies = Vec::with_capacity(per_worker);
            for _ in 0..per_worker {
                let due = match ticks.as_mut() {
                    Some(ticks) => ticks.tick().await.into_std(),
                    None => Instant::now(),
                };
                call_echo(&client, &url, &session, &ids).await?;
                latencies.push(due.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(load.requests);
    for worker in workers {
        latencies.extend(worker.await??);
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let total = (per_worker + warm) * concurrency;
    Ok(Figures {
        calls: total,
        p50: quantile(&latencies, 0.50),
        p99: quantile(&latencies, 0.99),
        per_second: total as f64 / elapsed.as_secs_f64(),
    })
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

async fn call_echo(
    client: &reqwest::Client,
    url: &str,
    session: &str,
    ids: &AtomicU64,
) -> anyhow::Result<()> {
    let id = ids.fetch_add(1, Ordering::Relaxed);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "bench"}}});
    let response = post(client, url, Some(session), body.to_string()).await?;
    let status = response.status();
    let text = response.text().await?;
    ensure!(
        status == 200 && text.contains("\"result\""),
        "call failed: {status} {text}"
    );
    Ok(())
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: String,
) -> anyhow::Result<reqwest::Response> {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    Ok(request.send().await?)
}

/// Opens `count` sessions (`initialize` + `notifications/initialized`), a few at a time.
async fn open_sessions(
    client: &reqwest::Client,
    url: &str,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    let mut sessions = Vec::with_capacity(count);
    let mut remaining = count;
    while remaining > 0 {
        let batch = remaining.min(OPEN_CONCURRENCY);
        let opened = futures::future::try_join_all((0..batch).map(|_| open_session(client, url)));
        sessions.extend(opened.await?);
        remaining -= batch;
    }
    Ok(sessions)
}

async fn open_session(client: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench_proxy", "version": "0"}}});
    let response = post(client, url, None, init.to_string()).await?;
    ensure!(
        response.status() == 200,
        "initialize: {}",
        response.status()
    );
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .context("no Mcp-Session-Id")?
        .to_owned();
    response.bytes().await?;
    let inited = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = post(client, url, Some(&session), inited.to_string()).await?;
    ensure!(
        response.status() == 202,
        "initialized: {}",
        response.status()
    );
    Ok(session)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn ms_signed(a: Duration, b: Duration) -> String {
    format!("{:+.3} ms", (a.as_secs_f64() - b.as_secs_f64()) * 1000.0)
}
