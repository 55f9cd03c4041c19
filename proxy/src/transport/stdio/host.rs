//! `berth-proxy stdio-host`: the dumb spawner in the upstream sidecar of a stdio pod
//! (issue 4, "stdio-host").
//!
//! One child per connection on a Unix socket, at most `--max-children`; a connection past the
//! limit gets one [`REFUSAL_PREFIX`] line with the reason and is closed at once (the proxy turns
//! it into a JSON-RPC error with outcome `rejected`). Bytes are copied both ways untouched (the
//! proxy enforces the line limit and the protocol). Each child's stderr is drained into this
//! process's log with a per-child prefix. A disconnect stops that child; SIGTERM stops every
//! child; stopping is close stdin, grace, SIGTERM, grace, SIGKILL, and every child is reaped.
//!
//! The socket is for the proxy only (issue 40, item 7). With `--allow-uid` the host serves a
//! connection only when its peer credentials (`SO_PEERCRED`) name that user, the proxy
//! container's (the operator runs the proxy as its own user, never the server's); any other
//! peer, a child of this host included, is closed unanswered, logged with its uid and pid and
//! counted. A socket named `@name` is in the abstract namespace of the pod's network namespace
//! ([`address`]): no file exists that a child could unlink or replace, and the name stays bound
//! to this host's listener for as long as the host runs (its children end with its container).
//! A filesystem path (a stale file there is replaced) is for tests and local runs.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::child;
use super::connection::REFUSAL_PREFIX;
use super::stderr::{self, StderrTail};
use crate::observe::metrics::stdio::StdioMetrics;

/// How long a child that exited may flush its stdout to the connection.
const FLUSH_AFTER_EXIT: Duration = Duration::from_secs(1);

/// What the host runs.
#[derive(Clone, Debug)]
pub struct HostSettings {
    /// Unix socket to listen on: `@name` for an abstract socket, else a filesystem path (a
    /// stale file there is replaced).
    pub socket: PathBuf,
    /// The only user id whose connections are served (the proxy's); `None` serves any peer.
    pub allowed_uid: Option<u32>,
    /// Most children alive at once.
    pub max_children: usize,
    /// Wait after closing stdin before SIGTERM, and after SIGTERM before SIGKILL.
    pub grace: Duration,
    /// The server's argv.
    pub command: Vec<String>,
}

/// A host that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The command is empty.
    #[error("stdio-host needs a command after --")]
    EmptyCommand,
    /// `--max-children` is zero.
    #[error("--max-children must be at least 1")]
    NoChildren,
    /// The socket cannot be bound.
    #[error("failed to listen on {path}")]
    Bind {
        /// The socket path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A listening host.
pub struct Host {
    listener: UnixListener,
    settings: HostSettings,
    metrics: StdioMetrics,
}

/// The address to bind or connect for `socket`: `@name` becomes the abstract name `name`
/// (tokio's spelling is a leading NUL byte), anything else is a filesystem path.
pub fn address(socket: &Path) -> Cow<'_, Path> {
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    match socket.as_os_str().as_bytes().strip_prefix(b"@") {
        Some(name) => {
            let mut bytes = vec![0];
            bytes.extend_from_slice(name);
            Cow::Owned(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
        }
        None => Cow::Borrowed(socket),
    }
}

/// Whether `socket` names an abstract socket (`@name`).
fn is_abstract(socket: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    socket.as_os_str().as_bytes().starts_with(b"@")
}

impl Host {
    /// Binds the socket (replacing a stale file).
    ///
    /// # Errors
    /// [`HostError`] for an empty command, a zero limit, or a socket that cannot be bound.
    pub fn bind(settings: HostSettings) -> Result<Self, HostError> {
        if settings.command.first().is_none_or(String::is_empty) {
            return Err(HostError::EmptyCommand);
        }
        if settings.max_children == 0 {
            return Err(HostError::NoChildren);
        }
        let bind_error = |source| HostError::Bind {
            path: settings.socket.display().to_string(),
            source,
        };
        if is_abstract(&settings.socket) {
            // Taken while another process holds the name: AddrInUse, nothing replaced.
            let listener = UnixListener::bind(address(&settings.socket)).map_err(bind_error)?;
            let metrics = StdioMetrics::register(&prometheus::Registry::new());
            return Ok(Self {
                listener,
                settings,
                metrics,
            });
        }
        let _ = std::fs::remove_file(&settings.socket);
        let listener = UnixListener::bind(&settings.socket).map_err(bind_error)?;
        // Connectable by any user: the proxy container runs as another UID than the server;
        // `allowed_uid` decides who is served.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&settings.socket, std::fs::Permissions::from_mode(0o666))
            .map_err(bind_error)?;
        let metrics = StdioMetrics::register(&prometheus::Registry::new());
        Ok(Self {
            listener,
            settings,
            metrics,
        })
    }

    /// The host's own metrics (`berth_proxy_stdio_peer_refusals_total` among them). The host
    /// serves no metrics port: they live in this process, and each refusal's log line carries
    /// the running count.
    pub fn metrics(&self) -> StdioMetrics {
        self.metrics.clone()
    }

    /// Serves until `shutdown` fires, then stops every child and returns once all are reaped
    /// (at most two grace periods and a second later).
    pub async fn run(self, shutdown: CancellationToken) {
        let live = watch::channel(0usize).0;
        let next = AtomicU64::new(1);
        let metrics = self.metrics;
        let settings = Arc::new(self.settings);
        tracing::info!(socket = %settings.socket.display(), max_children = settings.max_children, allowed_uid = ?settings.allowed_uid, "stdio host listening");
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = self.listener.accept() => accepted,
            };
            let Ok((stream, _)) = accepted else { continue };
            if let Some(allowed) = settings.allowed_uid
                && !peer_allowed(&stream, allowed, &metrics)
            {
                // Closed unanswered: nothing is spawned, nothing is said.
                continue;
            }
            if *live.borrow() >= settings.max_children {
                tokio::spawn(refuse(stream, settings.max_children));
                continue;
            }
            live.send_modify(|n| *n += 1);
            let label = format!("child#{}", next.fetch_add(1, Ordering::Relaxed));
            let (live, settings, stop, metrics) = (
                live.clone(),
                Arc::clone(&settings),
                shutdown.clone(),
                metrics.clone(),
            );
            tokio::spawn(async move {
                serve(stream, &settings, label, stop, metrics).await;
                live.send_modify(|n| *n -= 1);
            });
        }
        let mut watching = live.subscribe();
        let budget = settings.grace * 2 + Duration::from_secs(1);
        let _ = tokio::time::timeout(budget, watching.wait_for(|n| *n == 0)).await;
        if !is_abstract(&settings.socket) {
            let _ = std::fs::remove_file(&settings.socket);
        }
        tracing::info!(left = *live.borrow(), "stdio host stopped");
    }
}

/// Whether the peer of `stream` runs as `allowed` (its `SO_PEERCRED`); a refusal is logged
/// (the peer's uid and pid, numbers only) and counted.
fn peer_allowed(stream: &UnixStream, allowed: u32, metrics: &StdioMetrics) -> bool {
    let credentials = stream.peer_cred().ok();
    let uid = credentials.map(|c| c.uid());
    if uid == Some(allowed) {
        return true;
    }
    metrics.peer_refusals.inc();
    tracing::warn!(
        peer_uid = ?uid,
        peer_pid = ?credentials.and_then(|c| c.pid()),
        allowed_uid = allowed,
        refused_total = metrics.peer_refusals.get(),
        "refused a connection: not the proxy's user"
    );
    false
}

async fn refuse(mut stream: UnixStream, max_children: usize) {
    tracing::warn!(max_children, "refused a connection: child limit reached");
    let line = format!(
        "{REFUSAL_PREFIX}the stdio host runs its maximum of {max_children} children (--max-children)\n"
    );
    let _ = stream.write_all(line.as_bytes()).await;
    let _ = stream.shutdown().await;
}

enum Ended {
    Exited(Option<std::process::ExitStatus>),
    Disconnected,
    Stopping,
}

/// One connection: spawn, copy both ways, stop and reap.
async fn serve(
    stream: UnixStream,
    settings: &HostSettings,
    label: String,
    stop: CancellationToken,
    metrics: StdioMetrics,
) {
    let spawned = match child::spawn(&settings.command) {
        Ok(spawned) => spawned,
        Err(error) => {
            tracing::error!(child = %label, %error, program = %settings.command[0], "failed to start the server");
            return;
        }
    };
    let child::Spawned {
        mut child,
        mut stdin,
        mut stdout,
        stderr,
    } = spawned;
    tracing::info!(child = %label, pid = child.id(), "child started");
    let tail = Arc::new(StderrTail::default());
    tokio::spawn(stderr::drain(
        stderr,
        label.clone(),
        tail,
        metrics,
        CancellationToken::new(),
    ));
    let (mut from_proxy, mut to_proxy) = stream.into_split();
    let mut outbound = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut stdout, &mut to_proxy).await;
        let _ = to_proxy.shutdown().await;
    });
    let ended = {
        // Owns the child's stdin: when this block ends the stdin closes.
        let inbound = async move {
            let _ = tokio::io::copy(&mut from_proxy, &mut stdin).await;
        };
        tokio::pin!(inbound);
        tokio::select! {
            status = child.wait() => Ended::Exited(status.ok()),
            () = &mut inbound => Ended::Disconnected,
            () = stop.cancelled() => Ended::Stopping,
        }
    };
    let status = match ended {
        Ended::Exited(status) => {
            if tokio::time::timeout(FLUSH_AFTER_EXIT, &mut outbound)
                .await
                .is_err()
            {
                outbound.abort();
            }
            status
        }
        Ended::Disconnected | Ended::Stopping => {
            let status = child::stop(&mut child, settings.grace).await;
            outbound.abort();
            status
        }
    };
    let code = status
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), child::exit_code);
    match ended {
        Ended::Exited(_) => tracing::warn!(child = %label, code, "child exited"),
        _ => tracing::info!(child = %label, code, "child stopped"),
    }
}
