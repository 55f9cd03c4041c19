//! `bench_stdio`: prints what a stdio session costs. Not a test: it measures and prints.
//!
//! For each real stdio server (the Node reference server `server-everything stdio`, the Python
//! `mcp` SDK server `tests/peers/python/stdio_server.py`, and `mcp-server-time` from PyPI) it
//! measures session start latency (spawn + `initialize` + `notifications/initialized`):
//! - direct: this program spawns the child and runs the handshake on its stdin/stdout;
//! - through the proxy: a client `initialize` over HTTP to an in-process berth proxy with the
//!   `PerClient` strategy (the proxy spawns a child and runs the client's handshake), then
//!   `DELETE`;
//!
//! and the memory per child: the resident set (`VmRSS`) of each directly spawned child after
//! its handshake and a `tools/list`.
//!
//! Needs what `make test` installs (npm ci in tests/peers/node, the Python venv).
//! Run: `cargo run -p berth-tests --bin bench_stdio -- --runs 20`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berth_crds::SessionStrategy;
use berth_tests::proxy::{mcp_url, post_raw, wait_ready};
use berth_tests::repo_root;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// Deadline for one handshake.
const DEADLINE: Duration = Duration::from_secs(30);

fn python() -> anyhow::Result<String> {
    if let Ok(python) = std::env::var("BERTH_PYTHON") {
        return Ok(python);
    }
    let home = std::env::var("HOME").context("HOME")?;
    let cache = std::env::var("BERTH_CACHE_DIR").unwrap_or_else(|_| format!("{home}/.cache/berth"));
    Ok(std::fs::read_to_string(format!("{cache}/python-peer"))
        .context("run tests/peers/python/install.sh")?
        .trim()
        .to_owned())
}

fn servers() -> anyhow::Result<Vec<(&'static str, Vec<String>)>> {
    let root = repo_root();
    let node = root.join(
        "tests/peers/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    let python = python()?;
    Ok(vec![
        (
            "node server-everything",
            vec![
                "node".into(),
                node.to_string_lossy().into_owned(),
                "stdio".into(),
            ],
        ),
        (
            "python mcp SDK",
            vec![
                python.clone(),
                root.join("tests/peers/python/stdio_server.py")
                    .to_string_lossy()
                    .into_owned(),
            ],
        ),
        (
            "python mcp-server-time",
            vec![python, "-m".into(), "mcp_server_time".into()],
        ),
    ])
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench_stdio", "version": "0"}}})
}

/// One direct session: spawn, handshake (timed), `tools/list`, then the child's RSS in KiB.
async fn direct(argv: &[String]) -> anyhow::Result<(Duration, u64)> {
    let started = Instant::now();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawn {}", argv[0]))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut exchange = async |message: Value, id: Option<i64>| -> anyhow::Result<()> {
        stdin.write_all(format!("{message}\n").as_bytes()).await?;
        stdin.flush().await?;
        let Some(id) = id else { return Ok(()) };
        while let Some(line) = lines.next_line().await? {
            if serde_json::from_str::<Value>(&line).is_ok_and(|v| v["id"] == json!(id)) {
                return Ok(());
            }
        }
        bail!("stdout ended before the response")
    };
    tokio::time::timeout(DEADLINE, exchange(initialize(), Some(1))).await??;
    exchange(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        None,
    )
    .await?;
    let took = started.elapsed();
    tokio::time::timeout(
        DEADLINE,
        exchange(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            Some(2),
        ),
    )
    .await??;
    let pid = child.id().context("pid")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    child.kill().await?;
    Ok((took, rss))
}

/// One session through the proxy: client `initialize` (timed) and `DELETE`.
async fn proxied(url: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let reply =
        tokio::time::timeout(DEADLINE, post_raw(url, None, &initialize().to_string())).await?;
    let took = started.elapsed();
    let session = reply
        .session
        .context("initialize through the proxy failed")?;
    let inited = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post_raw(url, Some(&session), &inited.to_string()).await;
    reqwest::Client::new()
        .delete(url)
        .header("mcp-session-id", session)
        .send()
        .await?;
    Ok(took)
}

fn summary(mut times: Vec<Duration>) -> String {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p50 = times[times.len() / 2];
    format!(
        "p50 {:.1} ms, min {:.1} ms, max {:.1} ms",
        ms(p50),
        ms(times[0]),
        ms(times[times.len() - 1])
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let runs: usize = std::env::args()
        .skip_while(|a| a != "--runs")
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(20);
    berth_proxy::install_crypto_provider();
    println!("session start latency (spawn + handshake), {runs} runs each, and memory per child");
    for (name, argv) in servers()? {
        let mut direct_times = Vec::new();
        let mut rss = Vec::new();
        for _ in 0..runs {
            let (took, kib) = direct(&argv).await?;
            direct_times.push(took);
            rss.push(kib);
        }
        let proxy = berth_tests::stdio::start(
            &berth_tests::stdio::config(argv.clone(), SessionStrategy::PerClient),
            &[],
        )
        .await;
        wait_ready(&proxy, DEADLINE).await;
        let url = mcp_url(&proxy);
        let mut proxied_times = Vec::new();
        for _ in 0..runs {
            proxied_times.push(proxied(&url).await?);
        }
        proxy.shutdown().await;
        rss.sort_unstable();
        println!("{name}:");
        println!("  direct:        {}", summary(direct_times));
        println!("  through proxy: {}", summary(proxied_times));
        println!(
            "  child RSS after handshake + tools/list: median {} KiB",
            rss[rss.len() / 2]
        );
    }
    Ok(())
}
