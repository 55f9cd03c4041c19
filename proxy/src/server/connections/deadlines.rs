//! The read deadlines of a connection between requests (issue 39, item 2): a new connection
//! must deliver its first request's headers within `limits.headerReadTimeout`; a keep-alive
//! connection with no request in flight may stay silent for `limits.idleTimeout`, and once the
//! next request's first byte arrives its headers must be in within `limits.headerReadTimeout`.
//! A connection past its deadline is closed (the read fails with `TimedOut`, and hyper closes
//! the connection) and counted in `berth_proxy_connection_timeouts_total{stage}`.
//!
//! While a request is in flight (from its headers until its response body has ended or was
//! dropped) no deadline runs here: a long `tools/call` or an SSE stream is never idle. The body
//! deadline is the service's (`server::connections::service`).
//!
//! hyper's own `header_read_timeout` is not used: it starts when a keep-alive connection goes
//! idle, so it cannot tell a slow header block from an idle connection.
//!
//! Not responsible for: the connection caps (`caps`), or writing (writes pass through).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::observe::metrics::connections::{ConnectionMetrics, Port, Stage};

/// What a connection is doing, shared by its I/O ([`Deadlines`]) and its requests
/// ([`InFlight`]).
pub(super) struct Activity {
    header_read_timeout: Duration,
    idle_timeout: Duration,
    state: Mutex<State>,
}

struct State {
    /// Requests whose response has not ended.
    in_flight: usize,
    /// Since when, and in which stage, the connection waits for a request's headers.
    waiting: Waiting,
    /// The task that last read the connection: woken when the last request in flight ends, so
    /// that its next read arms the idle deadline (hyper reads again only on bytes otherwise).
    reader: Option<Waker>,
}

#[derive(Clone, Copy)]
enum Waiting {
    /// A new connection, accepted at this instant: its headers are due within the header
    /// deadline.
    Fresh(Instant),
    /// A keep-alive connection idle since this instant, nothing of its next request read.
    Idle(Instant),
    /// The first byte of the next request was read at this instant.
    Header(Instant),
}

impl Activity {
    /// A connection accepted now.
    pub(super) fn new(header_read_timeout: Duration, idle_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            header_read_timeout,
            idle_timeout,
            state: Mutex::new(State {
                in_flight: 0,
                waiting: Waiting::Fresh(Instant::now()),
                reader: None,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When the connection must have delivered more, and which deadline that is; `None` while a
    /// request is in flight. Notes `reader` as the task to wake when the last one ends.
    fn deadline(&self, reader: &Waker) -> Option<(Instant, Stage)> {
        let mut state = self.state();
        if state.in_flight > 0 {
            if !state
                .reader
                .as_ref()
                .is_some_and(|known| known.will_wake(reader))
            {
                state.reader = Some(reader.clone());
            }
            return None;
        }
        Some(match state.waiting {
            Waiting::Fresh(at) | Waiting::Header(at) => {
                (at + self.header_read_timeout, Stage::Header)
            }
            Waiting::Idle(since) => (since + self.idle_timeout, Stage::Idle),
        })
    }

    /// Bytes were read: an idle connection starts its next request's headers.
    fn read_some(&self) {
        let mut state = self.state();
        if state.in_flight == 0 && matches!(state.waiting, Waiting::Idle(_)) {
            state.waiting = Waiting::Header(Instant::now());
        }
    }
}

/// One request in flight on a connection, from its headers until dropped (with its response
/// body, or with the request when the connection ends first).
pub(super) struct InFlight(Arc<Activity>);

impl InFlight {
    /// A request whose headers were just read.
    pub(super) fn start(activity: &Arc<Activity>) -> Self {
        activity.state().in_flight += 1;
        Self(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 {
            state.waiting = Waiting::Idle(Instant::now());
            if let Some(reader) = state.reader.take() {
                reader.wake();
            }
        }
    }
}

/// A connection's I/O with the deadlines of [`Activity`] on its reads.
pub(super) struct Deadlines<T> {
    io: T,
    activity: Arc<Activity>,
    /// The deadline the timer is set to, if any.
    armed: Option<Instant>,
    timer: Pin<Box<Sleep>>,
    /// Set once a deadline passed: every later read fails too.
    expired: bool,
    port: Port,
    metrics: ConnectionMetrics,
}

impl<T> Deadlines<T> {
    /// `io` read under the deadlines of `activity`; a deadline that passes is counted for `port`.
    pub(super) fn new(
        io: T,
        activity: Arc<Activity>,
        port: Port,
        metrics: ConnectionMetrics,
    ) -> Self {
        Self {
            io,
            activity,
            armed: None,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            expired: false,
            port,
            metrics,
        }
    }

    /// Whether the current deadline has passed; registers the timer's wake-up otherwise.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.expired {
            return true;
        }
        let Some((at, stage)) = self.activity.deadline(cx.waker()) else {
            return false;
        };
        if self.armed != Some(at) {
            self.timer.as_mut().reset(at);
            self.armed = Some(at);
        }
        if self.timer.as_mut().poll(cx).is_pending() {
            return false;
        }
        self.expired = true;
        self.metrics.count_timeout(self.port, stage);
        tracing::debug!(
            port = self.port.as_label(),
            stage = stage.as_label(),
            "connection closed by its read deadline"
        );
        true
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Deadlines<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.poll_expired(cx) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "read deadline passed",
            )));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.read_some();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Deadlines<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_secs(1);
    const IDLE: Duration = Duration::from_secs(500);

    /// The deadline's stage, and how far it lies after `now`, within a second.
    fn due(activity: &Activity) -> Option<(Stage, u64)> {
        let (at, stage) = activity.deadline(Waker::noop())?;
        Some((stage, (at - Instant::now()).as_secs_f64().round() as u64))
    }

    #[test]
    fn activity_fresh_connection_is_due_its_headers_within_the_header_deadline() {
        let activity = Activity::new(HEADER, IDLE);
        assert_eq!(due(&activity), Some((Stage::Header, 1)));
        activity.read_some();
        assert_eq!(
            due(&activity),
            Some((Stage::Header, 1)),
            "not restarted by a byte"
        );
    }

    #[test]
    fn activity_in_flight_request_has_no_deadline_then_idles_then_reads_headers() {
        let activity = Activity::new(HEADER, IDLE);
        let request = InFlight::start(&activity);
        activity.read_some();
        assert_eq!(due(&activity), None, "in flight is never idle");
        drop(request);
        assert_eq!(due(&activity), Some((Stage::Idle, 500)));
        activity.read_some();
        assert_eq!(due(&activity), Some((Stage::Header, 1)));
    }
}
