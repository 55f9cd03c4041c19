//! A counting tap: an HTTP relay between the proxy and a real upstream that records every
//! JSON-RPC method and `Mcp-Session-Id` it carries, so tests can prove what the upstream saw
//! without trusting the proxy's own metrics.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

/// One POSTed JSON-RPC message: its method (`<response>` for responses) and session header.
pub type Entry = (String, Option<String>);

/// What the upstream was sent, in order.
#[derive(Clone, Default)]
pub struct Record(Arc<Mutex<Vec<Entry>>>);

impl Record {
    /// Every recorded `(method, session)`; responses are recorded as method `<response>`.
    pub fn entries(&self) -> Vec<Entry> {
        self.0.lock().expect("record lock").clone()
    }

    /// How many messages had `method`.
    pub fn count(&self, method: &str) -> usize {
        self.entries().iter().filter(|(m, _)| m == method).count()
    }
}

#[derive(Clone)]
struct Tap {
    target: String,
    client: reqwest::Client,
    record: Record,
}

/// A running tap.
pub struct Running {
    /// URL to point the proxy at.
    pub url: String,
    /// What passed through.
    pub record: Record,
}

/// Starts a tap on 127.0.0.1 relaying to `target` (a full MCP endpoint URL).
///
/// # Panics
/// When it cannot bind.
pub async fn start(target: &str) -> Running {
    berth_proxy::install_crypto_provider();
    let record = Record::default();
    let tap = Tap {
        target: target.to_owned(),
        client: reqwest::Client::new(),
        record: record.clone(),
    };
    let app = Router::new().fallback(relay).with_state(tap);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind tap");
    let addr = listener.local_addr().expect("tap addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Running {
        url: format!("http://{addr}/mcp"),
        record,
    }
}

async fn relay(
    State(tap): State<Tap>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let session = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if method == Method::POST
        && let Ok(value) = serde_json::from_slice::<Value>(&body)
    {
        let name = value
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("<response>")
            .to_owned();
        tap.record
            .0
            .lock()
            .expect("record lock")
            .push((name, session));
    }
    let mut request = tap.client.request(method, &tap.target).body(body);
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    let Ok(upstream) = request.send().await else {
        return Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::empty())
            .unwrap_or_default();
    };
    let mut response = Response::builder().status(upstream.status().as_u16());
    for (name, value) in upstream.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(upstream.bytes_stream()))
        .unwrap_or_default()
}
