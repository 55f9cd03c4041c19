//! A fault upstream at a fixed address that dies and comes back, for chaos runs (issue 12,
//! item 9).
//!
//! Each incarnation (a serving fault upstream, a silent acceptor or a black hole) runs on a tokio
//! runtime of its own, so that killing it drops every task it started: its listener and every
//! connection close at once, as the kernel closes a crashed process's sockets. (Dropping a
//! [`super::FaultUpstream`] only stops accepting; its open connections live on.) The next
//! incarnation binds the same port again; a restarted upstream starts with fresh state (no
//! sessions) and issues session ids no earlier incarnation issued.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::silent::{self, BlackHole, SilentUpstream};
use super::{Builder, FaultHandle};

/// How long binding the port again may wait for the killed incarnation's listener to close.
const REBIND_DEADLINE: Duration = Duration::from_secs(5);
/// Accept queue of a serving or silent incarnation.
const BACKLOG: u32 = 1024;

/// One incarnation: what listens, and the runtime that owns its tasks and sockets.
struct Incarnation {
    /// The serving upstream's handle; `None` for a silent acceptor or a black hole.
    serving: Option<FaultHandle>,
    /// What listens (a [`super::FaultUpstream`], [`SilentUpstream`] or [`BlackHole`]), held for its
    /// sockets and tasks.
    listening: Box<dyn Send>,
    runtime: tokio::runtime::Runtime,
}

impl Incarnation {
    fn kill(self) {
        let Self {
            listening, runtime, ..
        } = self;
        {
            // Tokio sockets are dropped where their runtime can deregister them.
            let _entered = runtime.enter();
            drop(listening);
        }
        // Drops every task of the incarnation (connections included) without blocking.
        runtime.shutdown_background();
    }
}

/// A fault upstream on one 127.0.0.1 address across restarts: serving, down (connections
/// refused), silent (connections accepted, never answered) or a black hole (connection attempts
/// dropped). Dropping it kills the current incarnation.
pub struct RestartableUpstream {
    /// The MCP endpoint, `http://127.0.0.1:<port>/mcp`, the same for every incarnation.
    pub url: String,
    /// The listen address.
    pub addr: SocketAddr,
    builder: Builder,
    incarnations: usize,
    current: Option<Incarnation>,
}

impl RestartableUpstream {
    /// Starts serving `builder`'s upstream on 127.0.0.1:0.
    ///
    /// # Panics
    /// When it cannot bind or start a runtime.
    pub async fn start(builder: Builder) -> Self {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a port for the restartable upstream");
        let mut upstream = Self {
            url: format!("http://{addr}/mcp"),
            addr,
            builder,
            incarnations: 0,
            current: None,
        };
        upstream.restart().await;
        upstream
    }

    /// The handle of the serving incarnation, `None` while down, silent or black-holed.
    pub fn handle(&self) -> Option<FaultHandle> {
        self.current.as_ref()?.serving.clone()
    }

    /// How many incarnations started so far (serving, silent and black holes).
    pub fn incarnations(&self) -> usize {
        self.incarnations
    }

    /// Kills the current incarnation: its listener and every connection close now, so the port
    /// refuses connections until the next incarnation.
    pub fn kill(&mut self) {
        if let Some(incarnation) = self.current.take() {
            incarnation.kill();
        }
    }

    /// Kills the current incarnation and starts a fresh upstream from the builder on the same
    /// port, with no sessions and a session id prefix of its own.
    ///
    /// # Panics
    /// When the port cannot be bound again within 5 s.
    pub async fn restart(&mut self) {
        let builder = self.builder.clone().session_prefix(format!(
            "fault-{}-i{}",
            self.addr.port(),
            self.incarnations
        ));
        self.replace(
            move |listener| async move {
                let upstream = builder.start_on(listener);
                (Some(upstream.handle()), Box::new(upstream) as Box<dyn Send>)
            },
            BACKLOG,
        )
        .await;
    }

    /// Kills the current incarnation and accepts connections on the port without ever reading
    /// or answering (a hung process).
    ///
    /// # Panics
    /// When the port cannot be bound again within 5 s.
    pub async fn silence(&mut self) {
        self.replace(
            |listener| async move {
                let silent: SilentUpstream = silent::silent_on(listener);
                (None, Box::new(silent) as Box<dyn Send>)
            },
            BACKLOG,
        )
        .await;
    }

    /// Kills the current incarnation and drops connection attempts on the port (a firewall
    /// `DROP`); see [`silent::black_hole`].
    ///
    /// # Panics
    /// When the port cannot be bound again within 5 s or its queue does not fill.
    pub async fn black_hole(&mut self) {
        self.replace(
            |listener| async move {
                let hole: BlackHole = silent::black_hole_on(listener).await;
                (None, Box::new(hole) as Box<dyn Send>)
            },
            0,
        )
        .await;
    }

    /// Kills the current incarnation and starts `make` on a new runtime, on the same port bound
    /// with `backlog`.
    async fn replace<F, Fut>(&mut self, make: F, backlog: u32)
    where
        F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = (Option<FaultHandle>, Box<dyn Send>)> + Send + 'static,
    {
        self.kill();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-upstream")
            .enable_all()
            .build()
            .expect("runtime for an upstream incarnation");
        let addr = self.addr;
        let (serving, listening) = runtime
            .spawn(async move { make(listen_again(addr, backlog).await).await })
            .await
            .expect("upstream incarnation starts");
        self.incarnations += 1;
        self.current = Some(Incarnation {
            serving,
            listening,
            runtime,
        });
    }
}

impl Drop for RestartableUpstream {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Binds `addr` again (with `SO_REUSEADDR`, so the killed incarnation's connections in
/// `TIME_WAIT` do not block it), retrying while its previous listener is still closing.
///
/// # Panics
/// When it cannot bind within [`REBIND_DEADLINE`].
async fn listen_again(addr: SocketAddr, backlog: u32) -> tokio::net::TcpListener {
    let deadline = Instant::now() + REBIND_DEADLINE;
    loop {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        match socket.bind(addr) {
            Ok(()) => return socket.listen(backlog).expect("listen"),
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => {
                assert!(
                    Instant::now() < deadline,
                    "{addr} still in use after {REBIND_DEADLINE:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("bind {addr}: {error}"),
        }
    }
}
