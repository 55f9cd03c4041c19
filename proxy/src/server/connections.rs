//! The two listeners (the MCP port and the admin port): every read has a deadline and every
//! listener a cap (issue 39, item 2).
//!
//! Each accepted connection is first counted against the listener's caps (`caps`: open
//! connections in total and per source IP address); one past either is answered `503` with
//! `Connection: close` in a single non-blocking write and closed at once, before a byte of its
//! request is read, and counted in `berth_proxy_connections_refused_total{port,reason}`. An
//! admitted one is served by hyper's HTTP/1 connection builder, which refuses a request line and
//! header block over `limits.maxHeaderBytes` with 431 and closes the connection (counted in
//! `berth_proxy_oversized_headers_total{port}`; it never buffers more than that while it waits
//! for one), under the read deadlines of `deadlines` (headers, idle keep-alive) and
//! `service` (the body). `TCP_NODELAY` and the lingering close are `front::mcp::linger`'s.
//! On shutdown the listener stops accepting, idle connections close, and in-flight requests
//! finish (hyper-util's graceful shutdown).
//!
//! Not responsible for: what the routers answer.

mod caps;
mod deadlines;
mod service;

use std::io::{self, Write as _};
use std::time::Duration;

use berth_crds::ProxyConfigError;
use berth_crds::proxy_config::limits::LimitsSpec;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use self::caps::{Admission, Caps};
use self::deadlines::{Activity, Deadlines};
use self::service::ConnectionService;
use crate::front::mcp::linger;
use crate::observe::metrics::connections::{ConnectionMetrics, Port};

/// Most connections open at once on the admin port (`/metrics`, `/healthz`, `/readyz`): probes
/// and scrapes need few.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;
/// Most connections open at once on the admin port from one source address: half the admin
/// cap, so one client cannot take every place from the kubelet's probes.
pub const ADMIN_MAX_CONNECTIONS_PER_SOURCE: usize = 32;

/// hyper's smallest read buffer limit, in bytes.
const MIN_BUFFER_BYTES: usize = 8 * 1024;

/// How long the accept loop pauses after an accept error that is not one connection's (out of
/// file descriptors), as axum's `serve` does.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The answer to a connection past a cap: written once, without reading the request.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n";

/// The limits one listener holds, from `limits` (`crds/src/proxy_config/limits.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// `limits.headerReadTimeout`: a request's line and headers, from the connection's accept
    /// or the next request's first byte.
    pub header_read_timeout: Duration,
    /// `limits.requestBodyTimeout`: a request's whole body, from its headers.
    pub request_body_timeout: Duration,
    /// `limits.idleTimeout`: a keep-alive connection with no request in flight.
    pub idle_timeout: Duration,
    /// `limits.maxConnections`: connections open at once.
    pub max_connections: usize,
    /// `limits.maxConnectionsPerSource`: connections open at once from one IP address.
    pub max_connections_per_source: usize,
    /// `limits.maxHeaderBytes`: request line and headers of one request, in bytes.
    pub max_header_bytes: usize,
}

impl ListenerLimits {
    /// The MCP port's limits: all of them from `limits`.
    ///
    /// # Errors
    /// [`ProxyConfigError::Duration`] for a deadline that does not parse or is zero.
    pub fn mcp(limits: &LimitsSpec) -> Result<Self, ProxyConfigError> {
        Ok(Self {
            header_read_timeout: limits.header_read_timeout()?,
            request_body_timeout: limits.request_body_timeout()?,
            idle_timeout: limits.idle_timeout()?,
            max_connections: usize_of(limits.max_connections),
            max_connections_per_source: usize_of(limits.max_connections_per_source),
            max_header_bytes: usize_of(limits.max_header_bytes),
        })
    }

    /// The admin port's limits: the deadlines and header size of `limits`, the caps
    /// [`ADMIN_MAX_CONNECTIONS`] and [`ADMIN_MAX_CONNECTIONS_PER_SOURCE`].
    ///
    /// # Errors
    /// As [`Self::mcp`].
    pub fn admin(limits: &LimitsSpec) -> Result<Self, ProxyConfigError> {
        Ok(Self {
            max_connections: ADMIN_MAX_CONNECTIONS,
            max_connections_per_source: ADMIN_MAX_CONNECTIONS_PER_SOURCE,
            ..Self::mcp(limits)?
        })
    }
}

fn usize_of(value: u32) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// One listener: where, what it serves, under which limits, counted where.
pub struct Listener {
    /// The bound socket.
    pub socket: TcpListener,
    /// Which port it is (the `port` label).
    pub port: Port,
    /// What it serves.
    pub router: axum::Router,
    /// What it holds.
    pub limits: ListenerLimits,
}

/// Serves `listener` until `shutdown`; then stops accepting and returns once every connection
/// has ended (idle ones close at once, in-flight requests finish).
pub fn serve(
    listener: Listener,
    metrics: ConnectionMetrics,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let open = metrics.open.with_label_values(&[listener.port.as_label()]);
        let limits = listener.limits;
        let caps = Caps::new(
            limits.max_connections,
            limits.max_connections_per_source,
            open,
        );
        let server = Server {
            http: http1_builder(&limits),
            graceful: GracefulShutdown::new(),
            router: listener.router,
            limits,
            port: listener.port,
            metrics,
        };
        loop {
            let accepted = tokio::select! {
                accepted = listener.socket.accept() => accepted,
                () = shutdown.cancelled() => break,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            };
            match caps.admit(peer.ip()) {
                Ok(admission) => server.spawn(stream, peer, admission),
                Err(reason) => {
                    server.metrics.count_refusal(server.port, reason);
                    refuse(stream);
                }
            }
        }
        drop(listener.socket);
        server.graceful.shutdown().await;
    })
}

/// What every connection of one listener is served with.
struct Server {
    http: http1::Builder,
    graceful: GracefulShutdown,
    router: axum::Router,
    limits: ListenerLimits,
    port: Port,
    metrics: ConnectionMetrics,
}

impl Server {
    /// Serves an admitted connection in a task of its own, watched by the graceful shutdown;
    /// its place under the caps is given back when it ends.
    fn spawn(&self, stream: TcpStream, peer: std::net::SocketAddr, admission: Admission) {
        let connection = linger::accept(stream);
        let limits = &self.limits;
        let activity = Activity::new(limits.header_read_timeout, limits.idle_timeout);
        let service = ConnectionService {
            router: self.router.clone(),
            linger: connection.linger(),
            peer,
            activity: activity.clone(),
            body_timeout: limits.request_body_timeout,
            port: self.port,
            metrics: self.metrics.clone(),
        };
        let io = Deadlines::new(connection, activity, self.port, self.metrics.clone());
        let served = self
            .graceful
            .watch(self.http.serve_connection(TokioIo::new(io), service));
        let (port, metrics) = (self.port, self.metrics.clone());
        tokio::spawn(async move {
            if let Err(error) = served.await {
                // hyper answered 431 before it ended the connection.
                if error.is_parse_too_large() {
                    metrics
                        .oversized_headers
                        .with_label_values(&[port.as_label()])
                        .inc();
                }
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(admission);
        });
    }
}

/// hyper's HTTP/1 server with keep-alive and the header size limit. Its own header read
/// timeout is off: [`deadlines`] holds that one and the idle one.
fn http1_builder(limits: &ListenerLimits) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true)
        .max_header_size(limits.max_header_bytes)
        // The read buffer too, so a header block that never ends holds no more than the limit.
        .max_buf_size(limits.max_header_bytes.max(MIN_BUFFER_BYTES));
    http
}

/// Answers a connection past a cap with [`REFUSAL`] if the socket takes it at once, and closes
/// it. Reads nothing.
fn refuse(stream: TcpStream) {
    if let Ok(stream) = stream.into_std() {
        let _ = (&stream).write(REFUSAL);
    }
}

/// Logs an accept error, and pauses when it is not one connection's (out of descriptors).
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "failed to accept a connection");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}
