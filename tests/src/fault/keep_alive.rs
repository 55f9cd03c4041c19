//! A server keep-alive timeout in front of an upstream: a TCP hop that closes a connection whose
//! client sends again after it has been idle for the timeout, without passing the bytes on.
//!
//! That is the race a pooling client loses against Node's `http.Server` (`keepAliveTimeout`,
//! 5 s by default) and uvicorn (`timeout_keep_alive`, 5 s): the server closes an idle
//! connection just as the client writes its next request on it, and the request is lost with
//! the connection. Here the race is lost every time, so a test can see it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::AbortOnDrop;

/// Node's and uvicorn's default keep-alive timeout.
pub const SERVER_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// The hop: listens on 127.0.0.1, forwards each connection to `target`, and closes one whose
/// client writes after `idle` without a byte either way. Dropping it stops accepting (open
/// connections end with their peers).
pub struct KeepAliveCloser {
    /// The upstream's MCP endpoint through the hop, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    closed_idle: Arc<AtomicUsize>,
    _task: AbortOnDrop,
}

impl KeepAliveCloser {
    /// Starts the hop in front of `target` with a keep-alive timeout of `idle`.
    ///
    /// # Panics
    /// When it cannot bind.
    pub async fn start(target: SocketAddr, idle: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind keep-alive hop");
        let addr = listener.local_addr().expect("keep-alive hop addr");
        let closed_idle = Arc::new(AtomicUsize::new(0));
        let closed = closed_idle.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let closed = closed.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(target).await
                        && forward(client, server, idle).await
                    {
                        closed.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        Self {
            url: format!("http://{addr}/mcp"),
            closed_idle,
            _task: AbortOnDrop(task),
        }
    }

    /// Connections closed because their client wrote after the keep-alive timeout (each one
    /// lost what it wrote then).
    pub fn closed_idle(&self) -> usize {
        self.closed_idle.load(Ordering::SeqCst)
    }
}

/// Copies both ways until either side closes; true when it closed the connection because the
/// client wrote after `idle` of silence.
async fn forward(mut client: TcpStream, mut server: TcpStream, idle: Duration) -> bool {
    let (mut from_client, mut to_server) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let mut last = Instant::now();
    loop {
        tokio::select! {
            read = client.read(&mut from_client) => match read {
                Ok(0) | Err(_) => return false,
                Ok(n) => {
                    if last.elapsed() >= idle {
                        return true;
                    }
                    last = Instant::now();
                    if server.write_all(&from_client[..n]).await.is_err() {
                        return false;
                    }
                }
            },
            read = server.read(&mut to_server) => match read {
                Ok(0) | Err(_) => return false,
                Ok(n) => {
                    last = Instant::now();
                    if client.write_all(&to_server[..n]).await.is_err() {
                        return false;
                    }
                }
            },
        }
    }
}
