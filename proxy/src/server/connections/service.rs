//! What hyper calls for each request of a connection: the front's router, with the request
//! marked in flight (so the connection's idle deadline waits, `deadlines`), its body under the
//! body deadline, and the connection's [`LingerOnClose`] and peer address as `ConnectInfo`.
//!
//! The body deadline (issue 39, item 2): a request's whole body must be read within
//! `limits.requestBodyTimeout` of its headers. When it has not been by then, the handler is
//! dropped and the client gets 408 with `Connection: close` (counted in
//! `berth_proxy_connection_timeouts_total{stage="body"}`). It is a deadline for the whole body,
//! not for each read (tower-http's `TimeoutBody` restarts per frame, so a body sent a byte at a
//! time would never end). A handler that already has the whole body is never cut.
//!
//! Not responsible for: the deadlines between requests (`deadlines`), or what the router answers.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use bytes::Bytes;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};

use super::deadlines::{Activity, InFlight};
use crate::front::mcp::linger::LingerOnClose;
use crate::observe::metrics::connections::{ConnectionMetrics, Port, Stage};
use crate::wire::jsonrpc;

/// The service of one connection. Cheap to clone.
#[derive(Clone)]
pub(super) struct ConnectionService {
    pub(super) router: axum::Router,
    pub(super) linger: LingerOnClose,
    /// The peer's address, for handlers that answer loopback peers only (`front::admin`).
    pub(super) peer: std::net::SocketAddr,
    pub(super) activity: Arc<Activity>,
    pub(super) body_timeout: Duration,
    pub(super) port: Port,
    pub(super) metrics: ConnectionMetrics,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::start(&self.activity);
        let deadline = tokio::time::Instant::now() + self.body_timeout;
        let (mut parts, body) = request.into_parts();
        parts.extensions.insert(ConnectInfo(self.linger.clone()));
        parts.extensions.insert(ConnectInfo(self.peer));
        let (body, read) = Watched::new(body);
        let request = Request::from_parts(parts, Body::new(body));
        let answer = tower::ServiceExt::oneshot(self.router.clone(), request);
        let (body_timeout, port, metrics) = (self.body_timeout, self.port, self.metrics.clone());
        Box::pin(async move {
            let mut answer = std::pin::pin!(answer);
            let answered = tokio::select! {
                biased;
                answered = &mut answer => Some(answered),
                () = tokio::time::sleep_until(deadline) => None,
            };
            let response = match answered {
                Some(answered) => answered.unwrap_or_else(|never| match never {}),
                // A handler that has the whole body is never cut.
                None if read.load(Ordering::Acquire) => {
                    answer.await.unwrap_or_else(|never| match never {})
                }
                None => {
                    metrics.count_timeout(port, Stage::Body);
                    tracing::debug!(port = port.as_label(), "request body not read in time");
                    body_too_slow(body_timeout)
                }
            };
            Ok(response.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// 408 with a JSON-RPC error (`id: null`: the message was never read) and `Connection: close`.
fn body_too_slow(body_timeout: Duration) -> Response<Body> {
    let message = format!(
        "request body not received within {}s (limits.requestBodyTimeout)",
        body_timeout.as_secs_f64()
    );
    let text = jsonrpc::error_response(
        &serde_json::Value::Null,
        jsonrpc::INVALID_REQUEST,
        &message,
        None,
    )
    .to_string();
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that notes when it has been read to its end (or failed).
struct Watched {
    body: Incoming,
    read: Arc<AtomicBool>,
}

impl Watched {
    fn new(body: Incoming) -> (Self, Arc<AtomicBool>) {
        let read = Arc::new(AtomicBool::new(body.is_end_stream()));
        let watched = Self {
            body,
            read: Arc::clone(&read),
        };
        (watched, read)
    }
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => this.body.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            this.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response body that keeps its request in flight until it ends or is dropped.
pub(super) struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
