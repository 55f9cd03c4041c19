//! What the chaos run counts: every request's verdict by kind (`tools/call`, `initialize`), the
//! JSON-RPC error codes, call latencies, the messages seen on standalone streams, and a few
//! samples of anything that went wrong, to show in the report.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;

use super::client::Verdict;

/// Samples of wrong or lost replies kept for the report, per kind.
const SAMPLES: usize = 8;

/// A counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The verdicts on one kind of request.
#[derive(Debug, Default)]
pub struct Counts {
    /// Requests made.
    pub made: Counter,
    /// Answered with a result.
    pub results: Counter,
    /// Answered with a JSON-RPC error.
    pub errors: Counter,
    /// Errors whose id was `null` (included in `errors`).
    pub id_null: Counter,
    /// Answered with another call's id or payload.
    pub wrong_client: Counter,
    /// Ended with no JSON-RPC response.
    pub lost: Counter,
    /// Errors by (HTTP status, JSON-RPC code).
    codes: Mutex<BTreeMap<(u16, i64), u64>>,
    /// The first few wrong or lost replies, described.
    samples: Mutex<Vec<String>>,
}

impl Counts {
    /// Counts one request and its verdict.
    pub fn record(&self, verdict: &Verdict) {
        self.made.add(1);
        match verdict {
            Verdict::Result => self.results.add(1),
            Verdict::Error {
                status,
                code,
                id_null,
            } => {
                self.errors.add(1);
                if *id_null {
                    self.id_null.add(1);
                }
                let mut codes = self.codes.lock().unwrap_or_else(PoisonError::into_inner);
                *codes.entry((*status, *code)).or_default() += 1;
            }
            Verdict::WrongClient(why) => {
                self.wrong_client.add(1);
                self.sample(format!("wrong client: {why}"));
            }
            Verdict::Lost(why) => {
                self.lost.add(1);
                self.sample(format!("lost: {why}"));
            }
        }
    }

    /// Requests answered at all (a result or an error, under their own id).
    pub fn answered(&self) -> u64 {
        self.results.get() + self.errors.get()
    }

    fn sample(&self, text: String) {
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        if samples.len() < SAMPLES {
            samples.push(text);
        }
    }

    /// Errors by (HTTP status, JSON-RPC code), most frequent first.
    pub fn codes(&self) -> Vec<((u16, i64), u64)> {
        let codes = self.codes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut codes: Vec<_> = codes.iter().map(|(k, v)| (*k, *v)).collect();
        codes.sort_by_key(|code| std::cmp::Reverse(code.1));
        codes
    }

    /// The first few wrong or lost replies, described.
    pub fn samples(&self) -> Vec<String> {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Everything one chaos run counts.
#[derive(Debug, Default)]
pub struct Tally {
    /// `tools/call` requests of every session.
    pub calls: Counts,
    /// The calls of the concurrent sessions by stage (see `Schedule::stage_ended`): ended before
    /// the first fault, ended from each fault on, and begun after the last fault once the proxy
    /// was ready again (the tail).
    pub stages: Vec<Counts>,
    /// `initialize` requests.
    pub initializes: Counts,
    /// `notifications/initialized` not accepted with 202.
    pub initialized_refused: Counter,
    /// Sessions opened, called and deleted by the churn.
    pub churned: Counter,
    /// Calls (one per session) that checked whether a new client gets through after a fault.
    pub probes: Counter,
    /// `DELETE`s answered neither 200/204 nor 404 (a session the proxy had ended already).
    pub deletes_failed: Counter,
    /// Standalone streams opened.
    pub streams_opened: Counter,
    /// Standalone streams that could not be opened.
    pub streams_refused: Counter,
    /// Notifications and requests read on standalone streams.
    pub stream_messages: Counter,
    /// Responses read on standalone streams (each belongs on its request's POST).
    pub stream_misrouted: Counter,
    /// Log messages the HTTP upstream sent while serving.
    pub logs_sent: Counter,
    /// Of those, the ones that reached an open upstream standalone stream (the proxy's).
    pub logs_reached: Counter,
    latencies: Mutex<Vec<Duration>>,
    misrouted_samples: Mutex<Vec<String>>,
}

impl Tally {
    /// A tally for a run of `faults` faults.
    pub fn new(faults: usize) -> Self {
        Self {
            stages: (0..faults + 2).map(|_| Counts::default()).collect(),
            ..Self::default()
        }
    }

    /// The calls after the last fault (the tail), if the run had stages.
    pub fn tail(&self) -> Option<&Counts> {
        self.stages.last()
    }

    /// Records how long one call took.
    pub fn latency(&self, took: Duration) {
        self.latencies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(took);
    }

    /// The call latency at quantile `q` (0.0-1.0), zero with no calls.
    pub fn quantile(&self, q: f64) -> Duration {
        let mut latencies = self
            .latencies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        latencies.sort_unstable();
        let index = ((latencies.len().saturating_sub(1)) as f64 * q).round() as usize;
        latencies.get(index).copied().unwrap_or_default()
    }

    /// Counts a response read on a standalone stream.
    pub fn record_misrouted(&self, message: &Value) {
        self.stream_misrouted.add(1);
        let mut samples = self
            .misrouted_samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if samples.len() < SAMPLES {
            let shown: String = message.to_string().chars().take(160).collect();
            samples.push(format!("response on a standalone stream: {shown}"));
        }
    }

    /// Calls and initializes answered to the wrong client, responses on standalone streams
    /// included.
    pub fn wrong_client(&self) -> u64 {
        self.calls.wrong_client.get()
            + self.initializes.wrong_client.get()
            + self.stream_misrouted.get()
    }

    /// Calls and initializes lost without any answer.
    pub fn lost(&self) -> u64 {
        self.calls.lost.get() + self.initializes.lost.get()
    }

    /// Every sample of something wrong.
    pub fn samples(&self) -> Vec<String> {
        let mut samples = self.calls.samples();
        samples.extend(self.initializes.samples());
        samples.extend(
            self.misrouted_samples
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned(),
        );
        samples
    }
}
