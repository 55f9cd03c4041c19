//! Stdio upstreams: MCP servers that speak newline-delimited JSON-RPC on stdin/stdout
//! (MCP 2025-06-18, "Transports: stdio").
//!
//! Responsible for: starting one child per connection, either itself (`upstream.command`,
//! `--upstream-command`) or through a same-pod `berth-proxy stdio-host` over a Unix socket
//! (`upstream.socket`); reading its stdout with a line limit; draining its stderr; and stopping
//! and reaping it. The session, budget, outcome, tools-probe and readiness machinery is the
//! HTTP upstream's (`crate::transport::upstream`): a [`Connection`] is one more link under an
//! `UpstreamSession`. Not responsible for: which client gets which child (`per_client`, the
//! upstream supervisor) or Kubernetes (the operator builds the pod). See `proxy/README.md`,
//! "Stdio upstreams", for the design.

pub mod child;
pub mod connection;
pub mod host;
pub mod lines;
pub mod stderr;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

pub use crate::observe::metrics::stdio::{self as metrics, ExitCause, StdioMetrics};
pub use connection::{Connection, EndReason, PendingReply};

use crate::transport::upstream::UpstreamError;
use connection::Shared;
use stderr::StderrTail;

/// Default longest line accepted from a child: 16 MiB (`upstream.maxLineBytes`).
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Default wait after closing a child's stdin before SIGTERM, and after SIGTERM before SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// How long a child that exited may still flush its stdout before its connection ends.
const FLUSH_AFTER_EXIT: Duration = Duration::from_secs(1);
/// How long a child whose stdout ended may take to exit on its own (to learn its exit code)
/// before it is stopped (field case BR-08).
const EXIT_AFTER_EOF: Duration = Duration::from_millis(200);
/// Longest wait for every child to be reaped on shutdown, beyond the two grace periods.
const REAP_SLACK: Duration = Duration::from_secs(1);

/// Where children come from.
#[derive(Clone, Debug)]
pub enum Target {
    /// Spawn `argv[0]` with `argv[1..]` in this process.
    Command(Vec<String>),
    /// Connect to a `berth-proxy stdio-host` listening on this Unix socket.
    Socket(PathBuf),
}

/// A source of stdio connections, each one child, shared by the upstream supervisor and the
/// `PerClient` sessions.
#[derive(Debug)]
pub struct StdioEndpoint {
    target: Target,
    max_line_bytes: usize,
    grace: Duration,
    connect_budget: Duration,
    metrics: StdioMetrics,
    stop_all: CancellationToken,
    live: watch::Sender<usize>,
    exits: watch::Sender<u64>,
    next_label: AtomicU64,
    era: crate::transport::upstream::era::EraCache,
}

impl std::fmt::Display for StdioEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Target::Command(argv) => write!(f, "stdio:{}", argv.first().map_or("", String::as_str)),
            Target::Socket(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl StdioEndpoint {
    /// A new endpoint. `max_line_bytes` bounds each stdout line, `grace` each shutdown step,
    /// `connect_budget` the socket connect.
    pub fn new(
        target: Target,
        max_line_bytes: usize,
        grace: Duration,
        connect_budget: Duration,
        metrics: StdioMetrics,
    ) -> Self {
        Self {
            target,
            max_line_bytes,
            grace,
            connect_budget,
            metrics,
            stop_all: CancellationToken::new(),
            live: watch::channel(0).0,
            exits: watch::channel(0).0,
            next_label: AtomicU64::new(1),
            era: crate::transport::upstream::era::EraCache::default(),
        }
    }

    /// The protocol era its children were last found to speak.
    pub fn era(&self) -> &crate::transport::upstream::era::EraCache {
        &self.era
    }

    /// The stdio metrics.
    pub fn metrics(&self) -> &StdioMetrics {
        &self.metrics
    }

    /// Counts connections that ended without the proxy closing them (a child exit, stdout EOF,
    /// a host disconnect); readiness follows it (field cases BR-07, BR-34).
    pub fn exits(&self) -> watch::Receiver<u64> {
        self.exits.subscribe()
    }

    /// Opens a connection: spawns a child, or connects to the stdio host.
    ///
    /// # Errors
    /// [`UpstreamError::Spawn`] when the program cannot be started or the socket not reached
    /// (also counted in `berth_proxy_stdio_spawn_failures_total`).
    pub async fn open(&self) -> Result<Connection, UpstreamError> {
        let n = self.next_label.fetch_add(1, Ordering::Relaxed);
        let span = crate::observe::telemetry::spans::step(
            crate::observe::telemetry::spans::Step::StdioStart,
        );
        let opened = match &self.target {
            Target::Command(argv) => span.in_scope(|| self.spawn(argv, n)),
            Target::Socket(path) => self.connect(path, n).instrument(span.clone()).await,
        };
        if let Err(error) = &opened {
            crate::observe::telemetry::spans::record_error(&span, error.kind());
            self.metrics.spawn_failures.inc();
        }
        opened
    }

    fn spawn(&self, argv: &[String], n: u64) -> Result<Connection, UpstreamError> {
        let program = argv.first().cloned().unwrap_or_default();
        let spawned = child::spawn(argv).map_err(|source| UpstreamError::Spawn {
            target: program.clone(),
            source,
        })?;
        let label = format!("{}#{n}", short_name(&program));
        tracing::info!(child = %label, pid = spawned.child.id(), "stdio child started");
        let tail = Arc::new(StderrTail::default());
        let shared = Shared::new(
            label.clone(),
            self.max_line_bytes,
            Arc::clone(&tail),
            self.metrics.clone(),
        );
        tokio::spawn(stderr::drain(
            spawned.stderr,
            label,
            tail,
            self.metrics.clone(),
            shared.stderr_done.clone(),
        ));
        let close = self.stop_all.child_token();
        let connection = Connection::start(
            Arc::clone(&shared),
            spawned.stdout,
            spawned.stdin,
            close.clone(),
            false,
        );
        self.metrics.children.inc();
        let keeper = self.keeper(shared, close);
        tokio::spawn(keeper.keep_child(spawned.child));
        Ok(connection)
    }

    /// The keeper of a connection just started: counts it live until it ends.
    fn keeper(&self, shared: Arc<Shared>, close: CancellationToken) -> Keeper {
        self.live.send_modify(|n| *n += 1);
        Keeper {
            shared,
            close,
            grace: self.grace,
            metrics: self.metrics.clone(),
            live: self.live.clone(),
            exits: self.exits.clone(),
        }
    }

    async fn connect(&self, path: &Path, n: u64) -> Result<Connection, UpstreamError> {
        let spawn_error = |source| UpstreamError::Spawn {
            target: path.display().to_string(),
            source,
        };
        let stream = tokio::time::timeout(
            self.connect_budget,
            tokio::net::UnixStream::connect(host::address(path)),
        )
        .await
        .map_err(|_| spawn_error(std::io::ErrorKind::TimedOut.into()))?
        .map_err(spawn_error)?;
        let (read, write) = stream.into_split();
        let label = format!("socket#{n}");
        let shared = Shared::new(
            label,
            self.max_line_bytes,
            Arc::new(StderrTail::default()),
            self.metrics.clone(),
        );
        let close = self.stop_all.child_token();
        let connection = Connection::start(Arc::clone(&shared), read, write, close.clone(), true);
        let keeper = self.keeper(shared, close);
        tokio::spawn(keeper.keep_socket());
        Ok(connection)
    }

    /// Stops every child (close stdin, grace, SIGTERM, grace, SIGKILL) and waits until all are
    /// reaped, at most two grace periods and a second.
    pub async fn shutdown(&self) {
        self.stop_all.cancel();
        let mut live = self.live.subscribe();
        let all_reaped = live.wait_for(|n| *n == 0);
        let budget = self.grace * 2 + REAP_SLACK;
        if tokio::time::timeout(budget, all_reaped).await.is_err() {
            tracing::warn!(
                live = *self.live.borrow(),
                "stdio children still running after shutdown budget"
            );
        }
    }

    /// Connections (children) not yet ended and reaped.
    pub fn live(&self) -> usize {
        *self.live.borrow()
    }
}

fn short_name(program: &str) -> &str {
    Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(program)
}

/// Watches one connection until it ends, stops its child, reaps it and records why it ended.
struct Keeper {
    shared: Arc<Shared>,
    close: CancellationToken,
    grace: Duration,
    metrics: StdioMetrics,
    live: watch::Sender<usize>,
    exits: watch::Sender<u64>,
}

impl Keeper {
    async fn keep_child(self, mut child: tokio::process::Child) {
        let (status, reason) = tokio::select! {
            biased;
            () = self.close.cancelled() => (child::stop(&mut child, self.grace).await, EndReason::Closed),
            status = child.wait() => {
                // Let the reader route what the child wrote before exiting (BR-07: an answer,
                // then exit 0), and the drain keep its last stderr lines (BR-13 b).
                let flushed = async {
                    self.shared.eof.cancelled().await;
                    self.shared.stderr_done.cancelled().await;
                };
                let _ = tokio::time::timeout(FLUSH_AFTER_EXIT, flushed).await;
                let code = status.as_ref().map_or_else(|_| "signal".to_owned(), child::exit_code);
                if self.close.is_cancelled() {
                    // It exited on the stdin EOF of a close the proxy asked for.
                    (status.ok(), EndReason::Closed)
                } else {
                    (status.ok(), EndReason::Exited(code))
                }
            }
            () = self.shared.eof.cancelled() => {
                match tokio::time::timeout(EXIT_AFTER_EOF, child.wait()).await {
                    Ok(Ok(status)) if self.close.is_cancelled() => (Some(status), EndReason::Closed),
                    Ok(Ok(status)) => (Some(status), EndReason::Exited(child::exit_code(&status))),
                    _ if self.close.is_cancelled() => {
                        (child::stop(&mut child, self.grace).await, EndReason::Closed)
                    }
                    _ => {
                        // Stdout ended but the process lives: fatal to this connection (BR-08).
                        self.shared.end(EndReason::StdoutClosed);
                        self.close.cancel();
                        (child::stop(&mut child, self.grace).await, EndReason::StdoutClosed)
                    }
                }
            }
        };
        let cause = match reason {
            EndReason::Closed | EndReason::StdoutClosed => ExitCause::Stopped,
            _ if self.shared.era_probe() => ExitCause::EraProbe,
            _ => ExitCause::Exited,
        };
        if let Some(status) = status {
            self.metrics.record_exit(status, cause);
        }
        self.metrics.children.dec();
        self.finish(reason);
    }

    async fn keep_socket(self) {
        let reason = tokio::select! {
            biased;
            () = self.close.cancelled() => EndReason::Closed,
            () = self.shared.eof.cancelled() => EndReason::Disconnected,
        };
        self.finish(reason);
    }

    fn finish(self, reason: EndReason) {
        // A refusal or a stdout EOF was already recorded by the reader or the keeper.
        let reason = self.shared.reason().unwrap_or(reason);
        let unexpected = !matches!(reason, EndReason::Closed | EndReason::Refused(_));
        if unexpected {
            tracing::warn!(
                child = %self.shared.label,
                reason = ?reason,
                last_stderr = self.shared.stderr.last().unwrap_or_default(),
                "stdio child ended"
            );
            self.exits.send_modify(|n| *n += 1);
        } else {
            tracing::debug!(child = %self.shared.label, "stdio child stopped");
        }
        self.shared.end(reason);
        self.live.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Copies the running executable to `dest` with mode 0755 (`berth-proxy copy-self`: the
/// operator's init container has no `cp`; issue 4 contract).
///
/// # Errors
/// The I/O error of finding the executable, copying it, or setting the mode.
pub fn copy_self(dest: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let me = std::env::current_exe()?;
    std::fs::copy(&me, dest)?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))
}
