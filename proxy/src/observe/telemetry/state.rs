//! Whether traces are on, and the span export counters: the process-wide state the other
//! telemetry modules read. Below them all (it uses none of them).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::export::SpanCounters;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// True once [`super::init`] has turned traces on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turns traces on for the process (once the exporter is installed).
pub(super) fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// The span export counters, registered in every proxy's metrics registry (zero while traces
/// are off).
pub fn counters() -> &'static SpanCounters {
    static COUNTERS: OnceLock<SpanCounters> = OnceLock::new();
    COUNTERS.get_or_init(SpanCounters::new)
}
