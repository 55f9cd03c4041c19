//! `plain_hop` (issue 14): a plain HTTP hop built on Berth's own stack and nothing else, the
//! floor `bench_proxy` measures Berth's CPU per call against, beside nginx's.
//!
//! It serves every request with axum (`axum::serve`, `TCP_NODELAY` on accepted connections),
//! reads the whole request body, sends it to the upstream through hyper's pooled client
//! (`hyper_util::client::legacy`, `TCP_NODELAY`, 4 s pool idle timeout, as Berth's upstream hop),
//! reads the whole response body and answers with it. It keeps the MCP headers both ways and
//! does no MCP work: no JSON-RPC parsing, no id rewrite, no metrics, no audit. mimalloc is its
//! allocator and the runtime has as many worker threads as the process may use, as Berth's
//! defaults; `bench_proxy` runs it with the proxy image's environment.
//!
//! Usage: `plain_hop --listen 127.0.0.1:PORT --upstream http://HOST:PORT`. Not for production:
//! a benchmark peer.

use std::time::Duration;

use anyhow::{Context, bail};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt as _;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Berth's upstream pool idle timeout.
const POOL_IDLE: Duration = Duration::from_secs(4);

/// The request headers passed on (the rest, `Host` and hop-by-hop ones included, are not).
const REQUEST_HEADERS: [HeaderName; 5] = [
    header::CONTENT_TYPE,
    header::ACCEPT,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
    HeaderName::from_static("last-event-id"),
];
/// The response headers passed back.
const RESPONSE_HEADERS: [HeaderName; 2] = [
    header::CONTENT_TYPE,
    HeaderName::from_static("mcp-session-id"),
];

#[derive(Clone)]
struct Hop {
    upstream: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
}

fn main() -> anyhow::Result<()> {
    let mut argv = std::env::args().skip(1);
    let (mut listen, mut upstream) = (None, None);
    while let Some(flag) = argv.next() {
        let value = argv
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = Some(value),
            "--upstream" => upstream = Some(value.parse::<Uri>().context("--upstream")?),
            _ => bail!("unknown flag {flag} (known: --listen, --upstream)"),
        }
    }
    let listen = listen.context("--listen is required")?;
    let upstream = upstream.context("--upstream is required")?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(listen, upstream))
}

async fn serve(listen: String, upstream: Uri) -> anyhow::Result<()> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE)
        .build(connector);
    let app = axum::Router::new()
        .fallback(forward)
        .with_state(Hop { upstream, client });
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("bind {listen}"))?;
    axum::serve(
        listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        }),
        app,
    )
    .await?;
    Ok(())
}

async fn forward(State(hop): State<Hop>, request: Request) -> Response {
    match relay(&hop, request).await {
        Ok(response) => response,
        Err(error) => (StatusCode::BAD_GATEWAY, format!("{error:#}")).into_response(),
    }
}

async fn relay(hop: &Hop, request: Request) -> anyhow::Result<Response> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut uri = hop.upstream.clone().into_parts();
    uri.path_and_query = parts.uri.path_and_query().cloned();
    let mut outgoing = axum::http::Request::builder()
        .method(parts.method)
        .uri(Uri::from_parts(uri)?);
    for name in &REQUEST_HEADERS {
        if let Some(value) = parts.headers.get(name) {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = hop.client.request(outgoing.body(Full::new(body))?).await?;
    let (head, body) = answer.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut response = Response::builder().status(head.status);
    for name in &RESPONSE_HEADERS {
        if let Some(value) = head.headers.get(name) {
            response = response.header(name, value);
        }
    }
    Ok(response.body(Body::from(body))?)
}
