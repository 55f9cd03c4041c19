//! Clients the bench did not write: Python `httpx` and the TypeScript SDK client
//! (`tests/peers/clients`), which do not set `TCP_NODELAY` the way the generator does, so a
//! hop that stalls a small write (Nagle against delayed ACK, about 40 ms) shows there. And the
//! floor for a stdio session: server-everything's own spawn and handshake.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::repo_root;

/// How long one external client run may take.
const CLIENT_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `tests/peers/clients/<script>` with `program` against `url` for `calls` sequential
/// `tools/call echo` and returns the median latency it printed, ms.
///
/// # Errors
/// When it cannot run, fails, runs past 120 s or prints no `median_ms`.
pub async fn sequential_median_ms(
    program: &Path,
    script: &str,
    url: &str,
    calls: usize,
) -> anyhow::Result<f64> {
    let script = repo_root().join("tests/peers/clients").join(script);
    let output = tokio::time::timeout(
        CLIENT_DEADLINE,
        Command::new(program)
            .arg(&script)
            .arg(url)
            .arg(calls.to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("client ran past its deadline")??;
    ensure!(
        output.status.success(),
        "{} exited {}: {}",
        script.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let line = String::from_utf8(output.stdout)?;
    let json: serde_json::Value = serde_json::from_str(line.trim()).context("client output")?;
    json.get("median_ms")
        .and_then(serde_json::Value::as_f64)
        .context("no median_ms")
}

/// Spawns `command` `count` times and times each from spawn to `initialize` answered and
/// `notifications/initialized` written (stdio, newline-delimited JSON-RPC); returns the p50, ms.
///
/// # Errors
/// When a child cannot be spawned or does not answer within 30 s.
pub async fn stdio_child_open_p50_ms(command: &[String], count: usize) -> anyhow::Result<f64> {
    let (program, args) = command.split_first().context("empty command")?;
    let mut took = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdin = child.stdin.take().context("stdin")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench_proxy", "version": "0"}}});
        stdin.write_all(format!("{init}\n").as_bytes()).await?;
        tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if line.contains("\"id\":0") && line.contains("\"result\"") {
                    return anyhow::Ok(());
                }
            }
            anyhow::bail!("stdout closed before the initialize result")
        })
        .await
        .context("no initialize result within 30 s")??;
        stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .await?;
        stdin.flush().await?;
        took.push(started.elapsed());
        drop(stdin);
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    }
    took.sort_unstable();
    Ok(super::report::ms(took[took.len() / 2]))
}
