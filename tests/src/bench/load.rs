//! The load generator: MCP sessions over keep-alive HTTP (reqwest, `TCP_NODELAY` on), closed
//! and open loops of `tools/call echo`, and session opens. Latencies in [`Duration`]s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde_json::json;

/// Requests before measuring, per run.
pub const WARM_UP: usize = 500;
/// Deadline for any one HTTP request.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(30);
/// Concurrent handshakes while opening many sessions.
const OPEN_CONCURRENCY: usize = 16;
/// The revision the generator's sessions negotiate.
const REVISION: &str = "2025-06-18";

/// The HTTP client every load uses: keep-alive, `TCP_NODELAY`, a per-request deadline.
///
/// # Errors
/// When reqwest cannot build it.
pub fn client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .timeout(REQUEST_DEADLINE)
        .build()?)
}

/// One run's shape.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Sessions, each driven by one sequential worker.
    pub sessions: usize,
    /// Calls measured, after [`WARM_UP`].
    pub requests: usize,
    /// `None`: closed loop (a worker sends its next call when the last returns). `Some(r)`: open
    /// loop at `r` calls per second in total, latency counted from when each call was due.
    pub rate: Option<u32>,
    /// Length of the `echo` message, bytes; it travels in the request's `arguments` and back in
    /// the result. 0: the five-byte message `bench`.
    pub payload_bytes: usize,
}

impl Load {
    /// `"16"` for a closed loop, `"64@2000/s"` for an open one; with a payload, its size
    /// follows (`"64, 64 KiB"`).
    #[must_use]
    pub fn label(&self) -> String {
        let shape = match self.rate {
            None => self.sessions.to_string(),
            Some(rate) => format!("{}@{rate}/s", self.sessions),
        };
        match self.payload_bytes {
            0 => shape,
            bytes if bytes % 1024 == 0 => format!("{shape}, {} KiB", bytes / 1024),
            bytes => format!("{shape}, {bytes} B"),
        }
    }

    /// The `echo` message of this load's calls.
    #[must_use]
    pub fn message(&self) -> String {
        match self.payload_bytes {
            0 => "bench".to_owned(),
            bytes => "x".repeat(bytes),
        }
    }
}

/// Latency quantiles and rate of one run.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// Calls made, warm-up included.
    pub calls: usize,
    pub p50: Duration,
    pub p99: Duration,
    /// Calls per second over the whole run, warm-up included.
    pub per_second: f64,
}

impl Figures {
    fn of(mut latencies: Vec<Duration>, calls: usize, elapsed: Duration) -> Self {
        latencies.sort_unstable();
        Self {
            calls,
            p50: quantile(&latencies, 0.50),
            p99: quantile(&latencies, 0.99),
            per_second: calls as f64 / elapsed.as_secs_f64(),
        }
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

/// Runs `load` on `sessions` (already open at `url`): one sequential worker per session.
///
/// # Errors
/// When a call gets no JSON-RPC result.
pub async fn run_on(
    client: &reqwest::Client,
    url: &str,
    sessions: &[String],
    load: &Load,
) -> anyhow::Result<Figures> {
    let workers = sessions.len();
    let ids = Arc::new(AtomicU64::new(1));
    let warm = WARM_UP.div_ceil(workers);
    let per_worker = load.requests.div_ceil(workers);
    // Open loop: each worker's calls are due every `workers / rate` seconds, the workers' phases
    // spread evenly over one period.
    let period = load
        .rate
        .map(|rate| Duration::from_secs_f64(workers as f64 / f64::from(rate)));
    let message: Arc<str> = load.message().into();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (n, session) in sessions.iter().cloned().enumerate() {
        let (client, url, ids) = (client.clone(), url.to_owned(), ids.clone());
        let message = Arc::clone(&message);
        tasks.push(tokio::spawn(async move {
            for _ in 0..warm {
                call_echo(&client, &url, &session, &ids, &message).await?;
            }
            let mut ticks = period.map(|period| {
                let offset = period.mul_f64(n as f64 / workers as f64);
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
                call_echo(&client, &url, &session, &ids, &message).await?;
                latencies.push(due.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(per_worker * workers);
    for task in tasks {
        latencies.extend(task.await??);
    }
    Ok(Figures::of(
        latencies,
        (per_worker + warm) * workers,
        started.elapsed(),
    ))
}

/// Opens `count` sessions one after another and times each open (`initialize`, then
/// `notifications/initialized`); each is closed (`DELETE`, untimed) and `settled` awaited
/// before the next (for a hop that spawns a child per session: until that child is gone, so
/// no open shares the machine with the previous child's exit, as the child-alone figure
/// does not).
///
/// # Errors
/// As [`open_session`].
pub async fn session_opens<F, Fut>(
    client: &reqwest::Client,
    url: &str,
    count: usize,
    settled: F,
) -> anyhow::Result<Figures>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut latencies = Vec::with_capacity(count);
    let started = Instant::now();
    for _ in 0..count {
        let began = Instant::now();
        let session = open_session(client, url).await?;
        latencies.push(began.elapsed());
        close_sessions(client, url, &[session]).await;
        settled().await;
    }
    Ok(Figures::of(latencies, count, started.elapsed()))
}

/// One `tools/call echo` of `message` on `session`; fails unless the answer is a JSON-RPC
/// result.
async fn call_echo(
    client: &reqwest::Client,
    url: &str,
    session: &str,
    ids: &AtomicU64,
    message: &str,
) -> anyhow::Result<()> {
    let id = ids.fetch_add(1, Ordering::Relaxed);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": message}}});
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
            .header("mcp-protocol-version", REVISION);
    }
    Ok(request.send().await?)
}

/// Opens `count` sessions, [`OPEN_CONCURRENCY`] at a time.
///
/// # Errors
/// As [`open_session`].
pub async fn open_sessions(
    client: &reqwest::Client,
    url: &str,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    let mut sessions = Vec::with_capacity(count);
    while sessions.len() < count {
        let batch = (count - sessions.len()).min(OPEN_CONCURRENCY);
        let opened = futures::future::try_join_all((0..batch).map(|_| open_session(client, url)));
        sessions.extend(opened.await?);
    }
    Ok(sessions)
}

/// `initialize` and `notifications/initialized`; returns the `Mcp-Session-Id`.
///
/// # Errors
/// When `initialize` is not answered 200 with a session id, or the notification is not
/// accepted (2xx).
pub async fn open_session(client: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": REVISION, "capabilities": {},
        "clientInfo": {"name": "bench_proxy", "version": "0"}}});
    let response = post(client, url, None, init.to_string()).await?;
    let status = response.status();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await?;
    ensure!(status == 200, "initialize: {status} {text}");
    let session = session.context("initialize: no Mcp-Session-Id")?;
    let inited = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = post(client, url, Some(&session), inited.to_string()).await?;
    let status = response.status();
    response.bytes().await?;
    ensure!(status.is_success(), "notifications/initialized: {status}");
    Ok(session)
}

/// Ends `sessions` with `DELETE`, a few at a time; a failure is ignored (the figures are
/// taken; a system that keeps the session only holds memory).
pub async fn close_sessions(client: &reqwest::Client, url: &str, sessions: &[String]) {
    for batch in sessions.chunks(OPEN_CONCURRENCY) {
        futures::future::join_all(batch.iter().map(|session| {
            client
                .delete(url)
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", REVISION)
                .send()
        }))
        .await;
    }
}
