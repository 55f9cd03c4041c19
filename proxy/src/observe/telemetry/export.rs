//! Counting what the batch span processor exports and drops.
//!
//! The SDK's `BatchSpanProcessor` drops a span when its queue is full but only logs the total at
//! shutdown, so the proxy bounds the queue itself: [`Bounded`] passes a finished span on only
//! while fewer than `capacity` spans are waiting for export (the processor's own queue has the
//! same capacity, so it never drops), and [`CountingExporter`] settles each batch: exported, or
//! dropped with reason `export_failed` (collector down, refused, timed out).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus::{IntCounter, IntCounterVec, Opts};

/// `berth_proxy_trace_spans_exported_total` and `berth_proxy_trace_spans_dropped_total{reason}`
/// (`queue_full`, `export_failed`).
#[derive(Clone)]
pub struct SpanCounters {
    /// Spans the collector accepted.
    pub exported: IntCounter,
    /// Spans given up, by reason.
    pub dropped: IntCounterVec,
}

impl SpanCounters {
    pub(super) fn new() -> Self {
        let exported = IntCounter::new(
            "berth_proxy_trace_spans_exported_total",
            "Trace spans the OTLP collector accepted.",
        )
        .expect("valid metric");
        let dropped = IntCounterVec::new(
            Opts::new(
                "berth_proxy_trace_spans_dropped_total",
                "Trace spans dropped: queue_full (the export queue was full) or export_failed \
                 (the collector refused, timed out or could not be reached).",
            ),
            &["reason"],
        )
        .expect("valid metric");
        for reason in ["queue_full", "export_failed"] {
            dropped.with_label_values(&[reason]);
        }
        Self { exported, dropped }
    }
}

/// Spans finished but not yet settled by the exporter.
#[derive(Clone, Default)]
pub(super) struct Waiting(Arc<AtomicUsize>);

/// A span processor that admits at most `capacity` waiting spans into `inner`.
#[derive(Debug)]
pub(super) struct Bounded<P> {
    inner: P,
    waiting: Waiting,
    capacity: usize,
    counters: SpanCounters,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Waiting({})", self.0.load(Ordering::Relaxed))
    }
}

impl std::fmt::Debug for SpanCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanCounters").finish_non_exhaustive()
    }
}

impl<P> Bounded<P> {
    pub(super) fn new(inner: P, waiting: Waiting, capacity: usize, counters: SpanCounters) -> Self {
        Self {
            inner,
            waiting,
            capacity,
            counters,
        }
    }
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        // Never exported, so never waiting.
        if !span.span_context.is_sampled() {
            return;
        }
        let admitted = self
            .waiting
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            self.inner.on_end(span);
        } else {
            self.counters
                .dropped
                .with_label_values(&["queue_full"])
                .inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter that settles every batch it is given in [`SpanCounters`] and [`Waiting`].
#[derive(Debug)]
pub(super) struct CountingExporter<E> {
    inner: E,
    waiting: Waiting,
    counters: SpanCounters,
}

impl<E> CountingExporter<E> {
    pub(super) fn new(inner: E, waiting: Waiting, counters: SpanCounters) -> Self {
        Self {
            inner,
            waiting,
            counters,
        }
    }
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.waiting.0.fetch_sub(n, Ordering::AcqRel);
        match &result {
            Ok(()) => self.counters.exported.inc_by(n as u64),
            Err(error) => {
                let dropped = self.counters.dropped.with_label_values(&["export_failed"]);
                if dropped.get() == 0 {
                    tracing::warn!(%error, spans = n, "trace export failed; spans are dropped and counted in berth_proxy_trace_spans_dropped_total");
                } else {
                    tracing::debug!(%error, spans = n, "trace export failed");
                }
                dropped.inc_by(n as u64);
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::error::OTelSdkError;
    use opentelemetry_sdk::trace::SimpleSpanProcessor;

    struct Failing;

    #[derive(Debug, Default, Clone)]
    struct Accepting(Arc<AtomicUsize>);

    impl SpanExporter for Accepting {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.fetch_add(batch.len(), Ordering::Relaxed);
            Ok(())
        }
    }

    impl std::fmt::Debug for Failing {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Failing")
        }
    }

    impl SpanExporter for Failing {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            Err(OTelSdkError::InternalFailure("collector down".into()))
        }
    }

    fn span() -> SpanData {
        use opentelemetry::trace::{
            SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
        };
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(1),
                SpanId::from(1),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: opentelemetry::trace::SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "test".into(),
            start_time: std::time::SystemTime::now(),
            end_time: std::time::SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: opentelemetry_sdk::trace::SpanEvents::default(),
            links: opentelemetry_sdk::trace::SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: opentelemetry::InstrumentationScope::default(),
        }
    }

    #[test]
    fn a_failed_export_counts_its_spans_as_dropped_and_frees_the_queue() {
        let counters = SpanCounters::new();
        let waiting = Waiting::default();
        let exporter = CountingExporter::new(Failing, waiting.clone(), counters.clone());
        let processor = Bounded::new(
            SimpleSpanProcessor::new(exporter),
            waiting.clone(),
            4,
            counters.clone(),
        );
        for _ in 0..3 {
            processor.on_end(span());
        }
        let failed = counters.dropped.with_label_values(&["export_failed"]).get();
        assert_eq!(failed, 3);
        assert_eq!(counters.exported.get(), 0);
        assert_eq!(waiting.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn spans_beyond_the_capacity_are_dropped_as_queue_full() {
        let counters = SpanCounters::new();
        let waiting = Waiting::default();
        // Nothing settles: an exporter that never runs (the processor is a sink).
        struct Sink;
        impl std::fmt::Debug for Sink {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("Sink")
            }
        }
        impl SpanProcessor for Sink {
            fn on_start(&self, _: &mut Span, _: &Context) {}
            fn on_end(&self, _: SpanData) {}
            fn force_flush(&self) -> OTelSdkResult {
                Ok(())
            }
            fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
                Ok(())
            }
        }
        let processor = Bounded::new(Sink, waiting.clone(), 2, counters.clone());
        for _ in 0..5 {
            processor.on_end(span());
        }
        assert_eq!(counters.dropped.with_label_values(&["queue_full"]).get(), 3);
        assert_eq!(waiting.0.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn an_accepted_batch_counts_as_exported() {
        let counters = SpanCounters::new();
        let waiting = Waiting::default();
        let accepting = Accepting::default();
        let exporter = CountingExporter::new(accepting.clone(), waiting.clone(), counters.clone());
        let processor = Bounded::new(
            SimpleSpanProcessor::new(exporter),
            waiting.clone(),
            4,
            counters.clone(),
        );
        processor.on_end(span());
        processor.on_end(span());
        assert_eq!(counters.exported.get(), 2);
        assert_eq!(accepting.0.load(Ordering::Relaxed), 2);
        assert_eq!(waiting.0.load(Ordering::Relaxed), 0);
    }
}
