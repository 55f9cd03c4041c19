//! Reading the standard `OTEL_*` variables and installing the tracing subscriber.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use super::export::{Bounded, CountingExporter, Waiting};

/// The SDK's default `OTEL_BSP_MAX_QUEUE_SIZE`.
const DEFAULT_QUEUE: usize = 2048;
/// Largest `OTEL_BSP_MAX_QUEUE_SIZE` accepted (the SDK allocates the queue up front).
const MAX_QUEUE: usize = 65_536;

/// Whether traces are on, as the `OTEL_*` variables say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Export traces over OTLP/HTTP.
    pub traces: bool,
    /// Most finished spans waiting for export (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2,048).
    pub queue: usize,
}

/// A variable that names something this proxy does not do; the proxy refuses to start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    /// `OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL` other than `http/protobuf`.
    #[error(
        "{0}={1:?} is not supported: the proxy exports OTLP over HTTP with protobuf (http/protobuf, the collector's port 4318)"
    )]
    Protocol(&'static str, String),
    /// `OTEL_TRACES_EXPORTER` naming an exporter other than `otlp` or `none`.
    #[error("OTEL_TRACES_EXPORTER names {0:?}, which is not supported: use otlp or none")]
    Exporter(String),
    /// `OTEL_BSP_MAX_QUEUE_SIZE` that is not a number from 1 to 65,536.
    #[error("OTEL_BSP_MAX_QUEUE_SIZE={0:?} must be a number of spans from 1 to 65536")]
    Queue(String),
}

impl Settings {
    /// From the process environment.
    ///
    /// # Errors
    /// As [`Self::from_lookup`].
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// From `get` (a variable's value, if set). Traces are on when an OTLP endpoint is set
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`), unless
    /// `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER` includes `none` (OpenTelemetry
    /// "Environment Variable Specification"). With traces off nothing else is read.
    ///
    /// # Errors
    /// With traces on, [`SettingsError`] for a protocol or exporter the proxy does not have or
    /// a queue size out of range.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let set = |name: &str| {
            get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let endpoint = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .is_some();
        // A comma-separated list (OpenTelemetry "Exporter Selection").
        let exporters: Vec<String> = set("OTEL_TRACES_EXPORTER")
            .map(|list| list.split(',').map(|e| e.trim().to_owned()).collect())
            .unwrap_or_default();
        let off = Self {
            traces: false,
            queue: DEFAULT_QUEUE,
        };
        if !endpoint || disabled || exporters.iter().any(|e| e == "none") {
            // Nothing below is used, so nothing below can stop the proxy.
            return Ok(off);
        }
        if let Some(other) = exporters.iter().find(|e| *e != "otlp") {
            return Err(SettingsError::Exporter(other.clone()));
        }
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = set(name)
                && protocol != "http/protobuf"
            {
                return Err(SettingsError::Protocol(name, protocol));
            }
        }
        let queue = match set("OTEL_BSP_MAX_QUEUE_SIZE") {
            None => DEFAULT_QUEUE,
            Some(value) => match value.parse::<usize>() {
                Ok(n) if (1..=MAX_QUEUE).contains(&n) => n,
                _ => return Err(SettingsError::Queue(value)),
            },
        };
        Ok(Self {
            traces: true,
            queue,
        })
    }
}

/// What [`init`] set up. [`Telemetry::shutdown`] exports what is queued (bounded by the SDK's
/// shutdown timeout, 5 s); call it outside the async runtime.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(error) = provider.shutdown()
        {
            eprintln!("berth-proxy: trace export at shutdown failed: {error}");
        }
    }
}

/// Installs the global tracing subscriber: log lines on stderr filtered by `RUST_LOG`
/// (default `info`), and with traces on an OpenTelemetry layer fed by the proxy's own spans.
/// Call once, outside the async runtime (the OTLP exporter's blocking HTTP client is built
/// here).
///
/// # Errors
/// The OTLP exporter cannot be built (for example a malformed endpoint URL).
pub fn init(settings: &Settings) -> anyhow::Result<Telemetry> {
    // Colours only on a terminal: a pod's log (and any file) gets plain text.
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        );
    if !settings.traces {
        tracing_subscriber::registry().with(logs).init();
        return Ok(Telemetry { provider: None });
    }
    let counters = super::state::counters().clone();
    let waiting = Waiting::default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build the OTLP trace exporter: {e}"))?;
    let batches = BatchSpanProcessor::builder(CountingExporter::new(
        exporter,
        waiting.clone(),
        counters.clone(),
    ))
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(settings.queue)
            .build(),
    )
    .build();
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    let mut resource = Resource::builder();
    if !named {
        resource = resource.with_service_name("berth-proxy");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Bounded::new(batches, waiting, settings.queue, counters))
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("berth-proxy");
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Attributes are the MCP conventions' (and `trace_id` / `span_id`, the fields the log
        // lines show), not tracing's bookkeeping.
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target("berth_proxy", tracing::Level::INFO),
        );
    tracing_subscriber::registry().with(logs).with(spans).init();
    super::state::enable();
    Ok(Telemetry {
        provider: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn traces_are_off_without_an_endpoint_and_on_with_either_endpoint_variable() {
        assert!(!settings(&[]).expect("valid settings").traces);
        assert!(
            !settings(&[("OTEL_SERVICE_NAME", "x")])
                .expect("valid settings")
                .traces
        );
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert!(settings(&[base]).expect("valid settings").traces);
        let traces = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4318/v1/traces",
        );
        assert!(settings(&[traces]).expect("valid settings").traces);
        assert!(
            !settings(&[base, ("OTEL_SDK_DISABLED", "TRUE")])
                .expect("valid settings")
                .traces
        );
        assert!(
            !settings(&[base, ("OTEL_TRACES_EXPORTER", "none")])
                .expect("valid settings")
                .traces
        );
        assert!(
            settings(&[base, ("OTEL_TRACES_EXPORTER", "otlp")])
                .expect("valid settings")
                .traces
        );
    }

    const ON: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");

    #[test]
    fn a_protocol_or_exporter_the_proxy_lacks_is_refused_by_name() {
        let error = settings(&[ON, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).expect_err("refused");
        assert_eq!(
            error,
            SettingsError::Protocol("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".into())
        );
        assert!(error.to_string().contains("http/protobuf"));
        let error = settings(&[ON, ("OTEL_TRACES_EXPORTER", "otlp,zipkin")]).expect_err("refused");
        assert_eq!(error, SettingsError::Exporter("zipkin".into()));
        assert!(
            settings(&[ON, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")])
                .expect("valid settings")
                .traces
        );
    }

    #[test]
    fn with_traces_off_other_variables_cannot_stop_the_proxy() {
        // A platform may inject these into every pod; without an endpoint they are unused.
        let injected = [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_TRACES_EXPORTER", "console"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
        ];
        assert!(!settings(&injected).expect("valid settings").traces);
        let disabled = [ON, ("OTEL_SDK_DISABLED", "true"), injected[0]];
        assert!(!settings(&disabled).expect("valid settings").traces);
        let none = [ON, ("OTEL_TRACES_EXPORTER", "none,console")];
        assert!(!settings(&none).expect("valid settings").traces);
    }

    #[test]
    fn the_queue_bound_follows_otel_bsp_max_queue_size() {
        assert_eq!(
            settings(&[ON]).expect("valid settings").queue,
            DEFAULT_QUEUE
        );
        let queue = |v| settings(&[ON, ("OTEL_BSP_MAX_QUEUE_SIZE", v)]);
        assert_eq!(queue("64").expect("valid settings").queue, 64);
        for bad in ["0", "-1", "many", "100000000000"] {
            assert_eq!(
                queue(bad).expect_err("refused"),
                SettingsError::Queue(bad.into())
            );
        }
    }
}
