//! The audit lines' writer thread, woken at most once per batch window (issue 14), behind a
//! queue bounded in bytes that never blocks its caller (issue 39).
//!
//! A `tools/call` hands its line to a channel and goes on. The writer thread blocks on the
//! channel only when it has nothing to do; after each batch it sleeps for the window, so the
//! lines of calls that end meanwhile wait in the channel and no call pays a thread wake-up.
//! Measured with `bench_proxy --audit-log Stdout|Off` (docs/benchmarks.md): waking a writer
//! thread for every line cost about 20 µs of CPU per call and 0.1 ms of added p50 in the open
//! loop.
//!
//! Bounded in bytes: a line is queued only while the bytes queued and not yet written (flushed)
//! stay within `capacity`; otherwise [`BatchedWriter::write`] returns `QueueFull` at once.
//! Only the writer thread ever blocks on the output (a stdout nobody reads); a runtime worker
//! never does, so `/healthz` and calls keep answering (issue 39, item 6). What the caller does
//! with a full queue is its policy (`limits.auditOnOverflow`, in [`super::Auditor`]). Closing
//! ([`BatchedWriter::close`]) writes every queued line, then ends the thread.

use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes the writer thread gathers before a `write(2)`.
const WRITE_BUFFER: usize = 64 * 1024;

/// A line could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The writer was closed.
    #[error("the audit writer is closed")]
    Closed,
    /// The queue holds `capacity` bytes not yet written: the output does not keep up.
    #[error("the audit queue is full")]
    Full,
}

/// Lines to a `Write`, from any thread, written by one thread in batches.
pub struct BatchedWriter {
    sender: Mutex<Option<Sender<Vec<u8>>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Bytes queued and not yet flushed to the output.
    queued: Arc<AtomicUsize>,
    capacity: usize,
}

impl BatchedWriter {
    /// Starts the thread `name` writing to `out`: at most `capacity` bytes queued, a batch
    /// written then a sleep of `window` (lines wait at most about that long).
    ///
    /// # Errors
    /// When the thread cannot be spawned.
    pub fn start(
        name: &str,
        out: impl Write + Send + 'static,
        capacity: usize,
        window: Duration,
    ) -> std::io::Result<Self> {
        let (sender, receiver) = channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let written = Arc::clone(&queued);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || run(&receiver, out, window, &written))?;
        Ok(Self {
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
            queued,
            capacity,
        })
    }

    /// Whether a line of `bytes` would be queued now.
    pub fn has_room(&self, bytes: usize) -> bool {
        self.queued.load(Ordering::Relaxed).saturating_add(bytes) <= self.capacity
    }

    /// Queues `line` (its bytes, newline included), never waiting.
    ///
    /// # Errors
    /// [`QueueError::Full`] when the line does not fit in the bytes left; [`QueueError::Closed`]
    /// after [`BatchedWriter::close`].
    pub fn write(&self, line: Vec<u8>) -> Result<(), QueueError> {
        let sender = self
            .sender
            .lock()
            .map_err(|_| QueueError::Closed)?
            .as_ref()
            .ok_or(QueueError::Closed)?
            .clone();
        let bytes = line.len();
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                queued
                    .checked_add(bytes)
                    .filter(|total| *total <= self.capacity)
            })
            .map_err(|_| QueueError::Full)?;
        sender.send(line).map_err(|_| {
            self.queued.fetch_sub(bytes, Ordering::AcqRel);
            QueueError::Closed
        })
    }

    /// Writes every queued line and ends the thread; later lines are refused with
    /// [`QueueError::Closed`]. Waits for the output: a stdout nobody reads keeps it waiting.
    pub fn close(&self) {
        if let Ok(mut sender) = self.sender.lock() {
            drop(sender.take());
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::warn!("the audit writer thread panicked");
        }
    }
}

impl Drop for BatchedWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// The thread: a batch is every line queued once the first arrives, then one flush (its bytes
/// leave the queue's count) and a sleep.
fn run(receiver: &Receiver<Vec<u8>>, out: impl Write, window: Duration, queued: &AtomicUsize) {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, out);
    // `recv` fails once every sender is gone and the queue is empty.
    while let Ok(first) = receiver.recv() {
        let mut bytes = 0;
        let written = std::iter::once(first)
            .chain(receiver.try_iter())
            .try_for_each(|line| {
                bytes += line.len();
                out.write_all(&line)
            })
            .and_then(|()| out.flush());
        queued.fetch_sub(bytes, Ordering::AcqRel);
        if let Err(error) = written {
            tracing::warn!(%error, "could not write audit lines");
        }
        std::thread::sleep(window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A `Write` that keeps what it was given and counts its flushes.
    #[derive(Clone, Default)]
    struct Recorder {
        bytes: Arc<Mutex<Vec<u8>>>,
        flushes: Arc<Mutex<usize>>,
    }

    impl Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            *self.flushes.lock().expect("lock") += 1;
            Ok(())
        }
    }

    #[test]
    fn lines_arrive_in_order_in_batches_and_close_writes_the_rest() {
        let recorder = Recorder::default();
        let writer = BatchedWriter::start(
            "audit-test",
            recorder.clone(),
            1024,
            Duration::from_millis(200),
        )
        .expect("thread");
        writer.write(b"0\n".to_vec()).expect("queued");
        // The first line is written at once; the thread then sleeps out its window.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while recorder.bytes.lock().expect("lock").is_empty() {
            assert!(std::time::Instant::now() < deadline, "first line written");
            std::thread::sleep(Duration::from_millis(1));
        }
        for n in 1..100 {
            writer.write(format!("{n}\n").into_bytes()).expect("queued");
        }
        writer.close();
        let text = String::from_utf8(recorder.bytes.lock().expect("lock").clone()).expect("utf8");
        let expected: String = (0..100).map(|n| format!("{n}\n")).collect();
        assert_eq!(text, expected, "every line, in order, after close");
        let flushes = *recorder.flushes.lock().expect("lock");
        assert!(
            flushes <= 3,
            "99 lines queued within one window are one batch, not one flush each: {flushes}"
        );
        assert!(writer.write(b"late\n".to_vec()).is_err(), "closed");
    }

    /// A `Write` that never returns (a stdout nobody reads).
    struct Stalled(std::sync::mpsc::Receiver<()>);

    impl Write for Stalled {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn batched_writer_stalled_output_refuses_past_capacity_without_waiting() {
        let (release, stalled) = std::sync::mpsc::channel();
        let writer = BatchedWriter::start(
            "audit-test",
            Stalled(stalled),
            1000,
            Duration::from_millis(1),
        )
        .expect("thread");
        let started = std::time::Instant::now();
        let mut full = 0;
        for n in 0..1000 {
            match writer.write(format!("{n:099}\n").into_bytes()) {
                Ok(()) => {}
                Err(QueueError::Full) => full += 1,
                Err(QueueError::Closed) => panic!("not closed"),
            }
        }
        assert!(started.elapsed() < Duration::from_secs(1), "never waits");
        assert!(
            full >= 990,
            "at most 10 lines of 100 bytes held: {full} refused"
        );
        assert!(!writer.has_room(100));
        drop(release);
        writer.close();
    }
}
