//! The audit lines' writer thread, woken at most once per batch window (issue 14).
//!
//! A `tools/call` hands its line to a bounded channel ([`std::sync::mpsc::sync_channel`]) and
//! goes on. The writer thread blocks on the channel only when it has nothing to do; after each
//! batch it sleeps for the window, so the lines of calls that end meanwhile wait in the channel
//! and no call pays a thread wake-up. Measured with `bench_proxy --audit-log Stdout|Off`
//! (docs/benchmarks.md): waking a writer thread for every line cost about 20 µs of CPU per call
//! and 0.1 ms of added p50 in the open loop.
//!
//! Not lossy: a full channel (`capacity` lines, a stdout that does not keep up) makes callers
//! wait, as before. Closing ([`BatchedWriter::close`]) writes every queued line, then ends the
//! thread.

use std::io::{BufWriter, Write};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bytes the writer thread gathers before a `write(2)`.
const WRITE_BUFFER: usize = 64 * 1024;

/// A line could not be queued: the writer was closed.
#[derive(Debug, thiserror::Error)]
#[error("the audit writer is closed")]
pub struct Closed;

/// Lines to a `Write`, from any thread, written by one thread in batches.
pub struct BatchedWriter {
    sender: Mutex<Option<SyncSender<Vec<u8>>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl BatchedWriter {
    /// Starts the thread `name` writing to `out`: at most `capacity` lines queued, a batch
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
        let (sender, receiver) = sync_channel(capacity);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || run(&receiver, out, window))?;
        Ok(Self {
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `line` (its bytes, newline included); waits while the queue is full.
    ///
    /// # Errors
    /// [`Closed`] after [`BatchedWriter::close`].
    pub fn write(&self, line: Vec<u8>) -> Result<(), Closed> {
        let sender = self
            .sender
            .lock()
            .map_err(|_| Closed)?
            .as_ref()
            .ok_or(Closed)?
            .clone();
        sender.send(line).map_err(|_| Closed)
    }

    /// Writes every queued line and ends the thread; later lines are refused with [`Closed`].
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

/// The thread: a batch is every line queued once the first arrives, then one flush and a sleep.
fn run(receiver: &Receiver<Vec<u8>>, out: impl Write, window: Duration) {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, out);
    // `recv` fails once every sender is gone and the queue is empty.
    while let Ok(first) = receiver.recv() {
        let written = std::iter::once(first)
            .chain(receiver.try_iter())
            .try_for_each(|line| out.write_all(&line))
            .and_then(|()| out.flush());
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

    #[test]
    fn a_full_queue_makes_the_caller_wait_and_loses_nothing() {
        let recorder = Recorder::default();
        let writer = Arc::new(
            BatchedWriter::start("audit-test", recorder.clone(), 2, Duration::from_millis(20))
                .expect("thread"),
        );
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let writer = Arc::clone(&writer);
                std::thread::spawn(move || {
                    for n in 0..50 {
                        writer
                            .write(format!("{t}-{n}\n").into_bytes())
                            .expect("queued");
                    }
                })
            })
            .collect();
        for thread in writers {
            thread.join().expect("writer thread");
        }
        writer.close();
        let text = String::from_utf8(recorder.bytes.lock().expect("lock").clone()).expect("utf8");
        assert_eq!(text.lines().count(), 200, "no line dropped: {text}");
        for t in 0..4 {
            let mine: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("{t}-")))
                .collect();
            let expected: Vec<String> = (0..50).map(|n| format!("{t}-{n}")).collect();
            assert_eq!(mine, expected, "each caller's lines in its order");
        }
    }
}
