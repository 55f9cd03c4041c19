//! OpenTelemetry traces (issue 16; docs/tracing.md).
//!
//! Off unless an OTLP endpoint is configured with the standard variables
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`; the operator sets
//! them from `spec.telemetry`). When on, spans go through the SDK's batch span processor to an
//! OTLP/HTTP (protobuf) exporter; the SDK reads the rest of the standard variables itself
//! (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]`,
//! `OTEL_EXPORTER_OTLP_*HEADERS`/`*TIMEOUT`, `OTEL_BSP_*`). The default sampler is
//! `parentbased_always_on`: a client's sampling decision is honoured.
//!
//! A collector that is down never slows a call: spans wait in a bounded queue and the ones that
//! do not fit, or whose export failed, are dropped and counted
//! (`berth_proxy_trace_spans_dropped_total{reason}`; the child module `export`).
//!
//! When off, no span is created at all ([`enabled`] is checked first), so the hot path pays one
//! atomic load per request.

mod context;
mod export;
mod setup;
pub mod spans;
mod state;

pub use context::{parent_of, traceparent_header, with_trace_context};
pub use export::SpanCounters;
pub use setup::{Settings, SettingsError, Telemetry, init};
pub use state::{counters, enabled};
