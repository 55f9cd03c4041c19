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
