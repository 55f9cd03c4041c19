//! A real trace backend for the tracing tests (issue 16): Jaeger (`cmd/jaeger`), built by
//! `tests/tracing/build.sh` from the Go tool pinned in `tests/tracing/jaeger/go.mod`, run with
//! `tests/tracing/jaeger.yaml`: an OTLP/HTTP receiver and the query API on free loopback ports,
//! traces in memory.
//!
//! The binary comes from `BERTH_JAEGER` (`make test` sets it), else the build script is run
//! (cached, so only the first run builds).
//!
//! Not responsible for: what the spans say (the tests check that).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running Jaeger; killed on drop.
pub struct Jaeger {
    /// The OTLP/HTTP endpoint base, `http://127.0.0.1:PORT` (what `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// names; exporters append `/v1/traces`).
    pub otlp: String,
    query: String,
    http: reqwest::Client,
    child: Child,
    _dir: tempfile::TempDir,
}

/// The Jaeger binary: `BERTH_JAEGER`, else what `tests/tracing/build.sh` builds (cached).
///
/// # Panics
/// When the build script fails.
pub fn binary() -> PathBuf {
    crate::go_tool("BERTH_JAEGER", "tests/tracing/build.sh", "jaeger")
}

/// One span of a trace as Jaeger's query API gives it.
#[derive(Debug, Clone)]
pub struct Span {
    /// Hex span id.
    pub id: String,
    /// The parent's hex span id (the `CHILD_OF` reference), if any.
    pub parent: Option<String>,
    /// The span name.
    pub name: String,
    /// The `service.name` of the process that sent it.
    pub service: String,
    /// Tags (attributes, plus Jaeger's `span.kind`, `otel.status_code`, `error`) as JSON values.
    pub tags: serde_json::Map<String, Value>,
}

impl Span {
    /// The tag `key` as a string (numbers and booleans in their JSON text).
    pub fn tag(&self, key: &str) -> Option<String> {
        self.tags.get(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

impl Jaeger {
    /// Starts Jaeger on free ports and waits until its query API answers.
    ///
    /// # Panics
    /// When it cannot start or is not ready within 60 s.
    pub async fn start() -> Self {
        berth_proxy::install_crypto_provider();
        let dir = tempfile::tempdir().expect("temp dir");
        let (otlp, query, grpc) = (crate::free_port(), crate::free_port(), crate::free_port());
        let config = crate::repo_root().join("tests/tracing/jaeger.yaml");
        let log = std::fs::File::create(dir.path().join("jaeger.log")).expect("log file");
        let binary = binary();
        let child = Command::new(&binary)
            .arg("--config")
            .arg(format!("file:{}", config.display()))
            .env("BERTH_JAEGER_OTLP_PORT", otlp.to_string())
            .env("BERTH_JAEGER_QUERY_PORT", query.to_string())
            .env("BERTH_JAEGER_QUERY_GRPC_PORT", grpc.to_string())
            // Jaeger's own telemetry stays in the process.
            .env("OTEL_TRACES_EXPORTER", "none")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|err| panic!("failed to start {}: {err}", binary.display()));
        let jaeger = Self {
            otlp: format!("http://127.0.0.1:{otlp}"),
            query: format!("http://127.0.0.1:{query}"),
            http: reqwest::Client::new(),
            child,
            _dir: dir,
        };
        let services = format!("{}/api/services", jaeger.query);
        let otlp_port = otlp;
        crate::wait_for("Jaeger to be ready", Duration::from_secs(60), || {
            let (services, http) = (services.clone(), &jaeger.http);
            async move {
                http.get(&services)
                    .send()
                    .await
                    .ok()?
                    .status()
                    .is_success()
                    .then_some(())?;
                tokio::net::TcpStream::connect(("127.0.0.1", otlp_port))
                    .await
                    .ok()
                    .map(drop)
            }
        })
        .await;
        jaeger
    }

    /// The spans of trace `trace_id` (32 hex digits) Jaeger holds now; empty when it has none.
    ///
    /// # Panics
    /// When the query API answers something other than a trace or 404.
    pub async fn spans(&self, trace_id: &str) -> Vec<Span> {
        let reply = self
            .http
            .get(format!("{}/api/traces/{trace_id}", self.query))
            .send()
            .await
            .expect("GET /api/traces");
        if reply.status() == reqwest::StatusCode::NOT_FOUND {
            return Vec::new();
        }
        let body: Value = reply.json().await.expect("trace JSON");
        let Some(trace) = body.pointer("/data/0") else {
            return Vec::new();
        };
        let processes = &trace["processes"];
        trace["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|span| Span {
                id: span["spanID"].as_str().unwrap_or_default().to_owned(),
                parent: span["references"].as_array().and_then(|refs| {
                    refs.iter()
                        .find(|r| r["refType"] == "CHILD_OF")
                        .and_then(|r| r["spanID"].as_str())
                        .map(str::to_owned)
                }),
                name: span["operationName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                service: span["processID"]
                    .as_str()
                    .and_then(|p| processes[p]["serviceName"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
                tags: span["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| Some((t["key"].as_str()?.to_owned(), t["value"].clone())))
                    .collect(),
            })
            .collect()
    }

    /// Waits (at most 30 s) until trace `trace_id` has at least `count` spans, and returns them.
    ///
    /// # Panics
    /// On the deadline, naming what arrived.
    pub async fn wait_for_spans(&self, trace_id: &str, count: usize) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans(trace_id).await;
            if spans.len() >= count {
                // A moment for late spans of the same trace.
                tokio::time::sleep(Duration::from_millis(300)).await;
                return self.spans(trace_id).await;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "trace {trace_id}: {} of {count} spans after 30 s: {spans:#?}",
                spans.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
