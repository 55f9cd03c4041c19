//! The connections both servers (the front and the admin port, served by `server`) accept:
//! `TCP_NODELAY` on every connection, and a lingering close for connections on which the front
//! answered before reading the whole request body.
//!
//! A server that closes a TCP connection with the client's bytes still unread makes the kernel
//! send a reset, and a client still sending its body then often loses the answer it was sent
//! (RFC 9112 §9.6, "Tear-down"). So when the front refuses a body without reading it (a
//! `Content-Length` over the limit, issue 12 item 7), it asks for a lingering close through
//! [`LingerOnClose`]: when hyper closes the connection, the write side is shut down at once (the
//! client sees the answer and then end-of-file) and whatever the client still sends is read and
//! discarded until it closes its side or [`LINGER`] has passed; only then is the socket closed.
//! Not responsible for: what is answered, or when hyper closes (the answer's
//! `Connection: close` decides that).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// The longest a lingering close reads and discards the client's bytes before the socket is
/// closed anyway (as Apache's lingering close; nginx's `lingering_time` is longer).
pub const LINGER: Duration = Duration::from_secs(2);

/// Bytes discarded per read while lingering.
const DISCARD_CHUNK: usize = 16 * 1024;

/// A connection's request for a lingering close, shared by the connection and every request it
/// carries (as `ConnectInfo<LingerOnClose>` in the request's extensions). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct LingerOnClose(Arc<AtomicBool>);

impl LingerOnClose {
    /// Asks that the connection, once hyper closes it, linger: shut down its write side, then
    /// discard what the client still sends for up to [`LINGER`]. Call it with an answer that
    /// closes the connection (`Connection: close`) and leaves the request body unread.
    pub fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// One accepted connection: `TCP_NODELAY` set, and a lingering close when one is requested
/// through its [`LingerOnClose`].
pub fn accept(stream: TcpStream) -> Connection {
    // Without it a response head and its first SSE event, written separately, wait for the
    // client's delayed ACK: about 40 ms per call for common clients (issue 12, item 0).
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "failed to set TCP_NODELAY on an accepted connection");
    }
    Connection {
        stream,
        linger: LingerOnClose::default(),
        closing: Closing::Open,
    }
}

/// One accepted connection: the TCP stream, and its lingering close.
pub struct Connection {
    stream: TcpStream,
    linger: LingerOnClose,
    closing: Closing,
}

/// Where a connection's close is.
enum Closing {
    /// Not begun.
    Open,
    /// Write side shut down; discarding the client's bytes until end-of-file or the deadline.
    Lingering(Pin<Box<Sleep>>),
    /// Over: the socket may be closed.
    Done,
}

impl Connection {
    /// The connection's lingering close, to hand to its requests as `ConnectInfo`.
    pub fn linger(&self) -> LingerOnClose {
        self.linger.clone()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    /// Shuts the write side down; with a lingering close requested, then discards the client's
    /// bytes until it closes its side, a read fails, or [`LINGER`] has passed.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.closing {
                Closing::Open => {
                    ready!(Pin::new(&mut this.stream).poll_shutdown(cx))?;
                    this.closing = if this.linger.requested() {
                        Closing::Lingering(Box::pin(tokio::time::sleep(LINGER)))
                    } else {
                        Closing::Done
                    };
                }
                Closing::Lingering(deadline) => {
                    if deadline.as_mut().poll(cx).is_ready() {
                        tracing::debug!("lingering close ended by its deadline");
                        this.closing = Closing::Done;
                        continue;
                    }
                    let mut scratch = [0u8; DISCARD_CHUNK];
                    let mut discard = ReadBuf::new(&mut scratch);
                    match ready!(Pin::new(&mut this.stream).poll_read(cx, &mut discard)) {
                        Ok(()) if discard.filled().is_empty() => this.closing = Closing::Done,
                        Ok(()) => {}
                        Err(_) => this.closing = Closing::Done,
                    }
                }
                Closing::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}
