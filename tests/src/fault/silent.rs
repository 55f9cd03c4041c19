//! Upstreams that never answer: a TCP acceptor that holds connections silently, and a closed
//! port that refuses them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::AbortOnDrop;

/// Accepts TCP connections on 127.0.0.1 and never reads or writes a byte. Dropping it closes
/// the listener and every held connection.
pub struct SilentUpstream {
    /// An MCP endpoint URL on it, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// Its listen address.
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    _task: AbortOnDrop,
}

impl SilentUpstream {
    /// How many connections it accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Starts a [`SilentUpstream`] on 127.0.0.1:0.
///
/// # Panics
/// When it cannot bind.
pub async fn silent() -> SilentUpstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind silent upstream");
    silent_on(listener)
}

/// Starts a [`SilentUpstream`] on `listener` (e.g. the port of an upstream that just died), on
/// the current runtime.
///
/// # Panics
/// When the listener has no local address.
pub fn silent_on(listener: tokio::net::TcpListener) -> SilentUpstream {
    let addr = listener.local_addr().expect("silent upstream addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    SilentUpstream {
        url: format!("http://{addr}/mcp"),
        addr,
        accepted,
        _task: AbortOnDrop(task),
    }
}

/// An MCP endpoint URL on a 127.0.0.1 port nothing listens on, so connecting is refused. (The
/// port was bound and released; another process could take it, which tests can ignore.)
pub fn closed_port_url() -> String {
    format!("http://127.0.0.1:{}/mcp", crate::free_port())
}

/// A 127.0.0.1 port where connection attempts are silently dropped, like a firewall `DROP` or
/// an unroutable address (field case BR-18), without privileges: a listener with a backlog of
/// zero that never accepts, its accept queue filled by filler connections, so the kernel drops
/// every further SYN and a client's `connect` hangs until its own timeout.
pub struct BlackHole {
    /// An MCP endpoint URL on it, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// Its address.
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    _fillers: Vec<tokio::net::TcpStream>,
}

impl BlackHole {
    /// Opens the hole: a well-behaved fault upstream starts accepting on the same port (the
    /// queued filler connections are accepted and closed by it).
    pub fn open(self) -> super::FaultUpstream {
        super::FaultUpstream::builder().start_on(self.listener)
    }
}

/// Starts a [`BlackHole`] on 127.0.0.1:0.
///
/// # Panics
/// When it cannot bind, or its accept queue never fills within 64 connections.
pub async fn black_hole() -> BlackHole {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind black hole");
    let listener = socket.listen(0).expect("listen with backlog 0");
    black_hole_on(listener).await
}

/// Makes a [`BlackHole`] of `listener`, which must have been opened with a backlog of 0 and
/// never accepts: fills its accept queue, on the current runtime.
///
/// # Panics
/// When the listener has no local address, or its accept queue never fills within 64
/// connections.
pub async fn black_hole_on(listener: tokio::net::TcpListener) -> BlackHole {
    let addr = listener.local_addr().expect("black hole addr");
    let mut fillers = Vec::new();
    loop {
        let attempt = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            tokio::net::TcpStream::connect(addr),
        )
        .await;
        match attempt {
            Ok(Ok(stream)) => fillers.push(stream),
            Ok(Err(error)) => panic!("filling the black hole's queue: {error}"),
            // This SYN was dropped: the queue is full.
            Err(_) => break,
        }
        assert!(fillers.len() < 64, "accept queue never filled");
    }
    BlackHole {
        url: format!("http://{addr}/mcp"),
        addr,
        listener,
        _fillers: fillers,
    }
}
