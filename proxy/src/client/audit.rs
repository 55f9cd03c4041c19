//! Audit events (issue 15): one JSON line on stdout per `tools/call` and per request refused
//! for want of a valid credential, apart from the log (which goes to stderr). Who called which
//! tool, what was decided and how it ended; never the arguments, only their digest, and never a
//! token.
//!
//! Fields (a contract, documented in `docs/audit.md`):
//! `ts` (RFC 3339, UTC, milliseconds), `event` (`tools/call` or `request`), `mcpupstream`
//! (`<namespace>/<name>`, from `BERTH_MCPUPSTREAM`, which the operator sets; `null` when
//! unset), `session_id` (the downstream `Mcp-Session-Id`; `null` for a modern request or a
//! refused one), `request_id` (the client's JSON-RPC id), `subject` and `client_id` (from the
//! OAuth access token; `null` without one), `tool`, `arguments_sha256` (`sha256:<hex>` of the
//! arguments' canonical JSON, keys sorted; `null` when the call has none), `decision` (`allow`:
//! the request went upstream; `deny`: the proxy refused it on a rule), `outcome` (the
//! `berth_proxy_tool_calls_total` label, or for a refused request `unauthorized`,
//! `insufficient_scope` or `auth_unavailable`), `duration_ms` (a float).
//!
//! Lines are written by a background thread in batches ([`batched`]): a line waits at most
//! [`BATCH_WINDOW`]. The queue is bounded in bytes (`limits.auditQueueBytes`) and never makes a
//! caller wait; while it is full `limits.auditOnOverflow` decides: `Drop` loses the line
//! (counted in `berth_proxy_audit_events_dropped_total`), `RefuseCalls` also refuses new
//! calls at admission ([`Auditor::admits_call`]). Every client- or upstream-chosen field is cut
//! to `limits.auditFieldBytes` ([`field`]). Issue 39, item 6.

pub mod batched;
pub mod digest;
pub mod field;

use std::borrow::Cow;
use std::sync::Arc;
#[cfg(test)]
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use berth_crds::proxy_config::limits::{AuditOverflow, LimitsSpec};
use serde_json::Value;

use batched::{BatchedWriter, QueueError};

use crate::access::auth::Principal;
use crate::observe::metrics::audit::AuditMetrics;
use crate::wire::jsonrpc::WireMessage;
use crate::wire::outcome::Outcome;

/// How long the writer thread gathers lines after writing a batch: a line reaches stdout at
/// most about this long after its call ended.
pub const BATCH_WINDOW: Duration = Duration::from_millis(20);

/// The audit log's limits (`limits.auditQueueBytes`, `auditFieldBytes`, `auditOnOverflow`).
#[derive(Clone, Copy, Debug)]
pub struct AuditLimits {
    /// Most bytes of lines queued and not yet written.
    pub queue_bytes: usize,
    /// Longest client- or upstream-chosen string kept in one field, in bytes.
    pub field_bytes: usize,
    /// What a full queue does to calls.
    pub on_overflow: AuditOverflow,
}

impl AuditLimits {
    /// The audit limits of `limits`.
    pub fn of(limits: &LimitsSpec) -> Self {
        Self {
            queue_bytes: limits.audit_queue_bytes as usize,
            field_bytes: limits.audit_field_bytes as usize,
            on_overflow: limits.audit_on_overflow,
        }
    }

    /// The room one line can take at most: the fixed members, and the six chosen by a client,
    /// an upstream or the operator at `field_bytes` each with the truncation marker, escaped.
    fn line_bytes(self) -> usize {
        LINE_CAPACITY + 6 * 2 * (self.field_bytes + 32)
    }
}

impl Default for AuditLimits {
    fn default() -> Self {
        Self::of(&LimitsSpec::default())
    }
}

/// Where audit lines go.
pub struct Auditor {
    mcp_upstream: Option<String>,
    sink: Sink,
    limits: AuditLimits,
    metrics: AuditMetrics,
}

enum Sink {
    /// The batched writer; [`Auditor::close`] writes what is queued and ends its thread.
    Stdout(BatchedWriter),
    /// Lines kept in memory (tests).
    #[cfg(test)]
    Memory(Mutex<Vec<Value>>),
    /// Nothing is written.
    Off,
}

/// The facts of one `tools/call` its audit line reports, gathered when it arrives.
#[derive(Clone, Debug)]
pub struct CallFacts {
    /// The downstream `Mcp-Session-Id`; `None` for a modern (sessionless) request.
    pub session_id: Option<String>,
    /// The client's JSON-RPC id.
    pub request_id: Value,
    /// The OAuth caller, if any.
    pub caller: Option<Arc<Principal>>,
    /// The tool named in `params.name`.
    pub tool: Option<String>,
    /// [`digest::of_text`] of `params.arguments`; `None` when the call has none, and for a
    /// call the front refused before the call engine (no digest is computed for it).
    pub arguments_sha256: Option<String>,
}

impl CallFacts {
    /// The facts of the `tools/call` `body` (a JSON-RPC request with id `request_id`).
    pub fn of(
        session_id: Option<&str>,
        request_id: &Value,
        caller: Option<Arc<Principal>>,
        body: &WireMessage,
    ) -> Self {
        // Read through the envelope, and the arguments digested from their text without a
        // `Value` (issue 39).
        let mut facts = Self::unhashed(session_id, request_id, caller, body);
        facts.arguments_sha256 = body
            .member_text(&["params", "arguments"])
            .map(digest::of_text);
        facts
    }

    /// As [`CallFacts::of`] without the arguments digest: for a call refused before it
    /// reached the call engine, which costs no digest (issue 39).
    pub fn unhashed(
        session_id: Option<&str>,
        request_id: &Value,
        caller: Option<Arc<Principal>>,
        body: &WireMessage,
    ) -> Self {
        Self {
            session_id: session_id.map(str::to_owned),
            request_id: request_id.clone(),
            caller,
            tool: body
                .member_str(&["params", "name"])
                .map(std::borrow::Cow::into_owned),
            arguments_sha256: None,
        }
    }
}

impl Auditor {
    /// Audit lines on stdout for the McpUpstream `mcp_upstream` (`<namespace>/<name>`),
    /// written by the thread `berth-audit`, within `limits`; dropped lines counted in
    /// `metrics`.
    ///
    /// # Errors
    /// When the writer thread cannot be spawned.
    pub fn stdout(
        mcp_upstream: Option<String>,
        limits: AuditLimits,
        metrics: AuditMetrics,
    ) -> std::io::Result<Self> {
        Self::writer(mcp_upstream, std::io::stdout(), limits, metrics)
    }

    /// As [`Auditor::stdout`], to `out`.
    ///
    /// # Errors
    /// When the writer thread cannot be spawned.
    pub fn writer(
        mcp_upstream: Option<String>,
        out: impl std::io::Write + Send + 'static,
        limits: AuditLimits,
        metrics: AuditMetrics,
    ) -> std::io::Result<Self> {
        let writer = BatchedWriter::start("berth-audit", out, limits.queue_bytes, BATCH_WINDOW)?;
        Ok(Self {
            mcp_upstream,
            sink: Sink::Stdout(writer),
            limits,
            metrics,
        })
    }

    /// Audit lines kept in memory, read back with [`Auditor::lines`] (tests).
    #[cfg(test)]
    pub fn memory(mcp_upstream: Option<String>) -> Self {
        Self {
            mcp_upstream,
            sink: Sink::Memory(Mutex::default()),
            limits: AuditLimits::default(),
            metrics: AuditMetrics::unregistered(),
        }
    }

    /// Whether a `tools/call` may go upstream now: always, except under `RefuseCalls` while
    /// the queue has no room for one more line (the call is then refused, retryable, before
    /// it reaches the upstream; issue 39).
    pub fn admits_call(&self) -> bool {
        match &self.sink {
            Sink::Stdout(writer) if self.limits.on_overflow == AuditOverflow::RefuseCalls => {
                writer.has_room(self.limits.line_bytes())
            }
            _ => true,
        }
    }

    /// Whether lines are written at all: callers skip gathering [`CallFacts`] (an arguments
    /// digest per call) when not.
    pub fn is_on(&self) -> bool {
        !matches!(self.sink, Sink::Off)
    }

    /// No audit lines.
    pub fn off() -> Self {
        Self {
            mcp_upstream: None,
            sink: Sink::Off,
            limits: AuditLimits::default(),
            metrics: AuditMetrics::unregistered(),
        }
    }

    /// The lines written so far to a [`Auditor::memory`] sink (empty for the others).
    #[cfg(test)]
    pub fn lines(&self) -> Vec<Value> {
        match &self.sink {
            Sink::Memory(lines) => lines.lock().map(|l| l.clone()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Writes every buffered line and stops the writer thread (when the proxy stops); lines
    /// written afterwards are dropped with a warning.
    pub fn close(&self) {
        if let Sink::Stdout(writer) = &self.sink {
            writer.close();
        }
    }

    /// Writes the line of one finished `tools/call`: `outcome` after `duration` (from
    /// receipt to outcome).
    pub fn tool_call(&self, call: &CallFacts, outcome: Outcome, duration: Duration) {
        let decision = match outcome {
            Outcome::Denied | Outcome::Rejected | Outcome::DriftBlocked | Outcome::RateLimited => {
                "deny"
            }
            _ => "allow",
        };
        let caller = call.caller.as_deref();
        let cut = self.cut();
        let client_id = caller.and_then(|c| c.client_id.as_deref()).map(&cut);
        let subject = caller.and_then(|c| c.subject.as_deref()).map(&cut);
        let session_id = call.session_id.as_deref().map(&cut);
        let tool = call.tool.as_deref().map(&cut);
        let request_id = field::truncate_id(&call.request_id, self.limits.field_bytes);
        self.write(&Line {
            arguments_sha256: call.arguments_sha256.as_deref(),
            client_id: client_id.as_deref(),
            decision,
            duration_ms: duration.as_secs_f64() * 1000.0,
            event: "tools/call",
            mcpupstream: self.mcp_upstream.as_deref().map(&cut).as_deref(),
            outcome: outcome.as_label(),
            request_id: &request_id,
            session_id: session_id.as_deref(),
            subject: subject.as_deref(),
            tool: tool.as_deref(),
            ts: humantime::format_rfc3339_millis(SystemTime::now()),
        });
    }

    /// Cuts a chosen field to `limits.auditFieldBytes` ([`field::truncate`]).
    fn cut(&self) -> impl Fn(&str) -> Cow<'_, str> + '_ {
        let max = self.limits.field_bytes;
        move |text: &str| field::truncate(text, max)
    }

    /// Writes the line of a `tools/call` the front refused before the call was handled (its
    /// session unknown, missing or another identity's; its params or headers malformed):
    /// outcome `rejected`, with the session id the request named, and no arguments digest (a
    /// refusal costs no digest). Any other message writes nothing.
    pub fn refused_tool_call(
        &self,
        message: &WireMessage,
        session_id: Option<&str>,
        caller: Option<&Arc<Principal>>,
        duration: Duration,
    ) {
        if !self.is_on() || message.member_str(&["method"]).as_deref() != Some("tools/call") {
            return;
        }
        let request_id = message.member_value(&["id"]).unwrap_or(Value::Null);
        let facts = CallFacts::unhashed(session_id, &request_id, caller.cloned(), message);
        self.tool_call(&facts, Outcome::Rejected, duration);
    }

    /// Writes the line of a request refused before its body was read (`reason`:
    /// `unauthorized`, `insufficient_scope` or `auth_unavailable`). The front passes no
    /// `caller`: the claims of a token that failed its checks are never reported.
    pub fn refused_request(&self, reason: &str, caller: Option<&Principal>, duration: Duration) {
        let cut = self.cut();
        let client_id = caller.and_then(|c| c.client_id.as_deref()).map(&cut);
        let subject = caller.and_then(|c| c.subject.as_deref()).map(&cut);
        self.write(&Line {
            arguments_sha256: None,
            client_id: client_id.as_deref(),
            decision: "deny",
            duration_ms: duration.as_secs_f64() * 1000.0,
            event: "request",
            mcpupstream: self.mcp_upstream.as_deref().map(&cut).as_deref(),
            outcome: reason,
            request_id: &Value::Null,
            session_id: None,
            subject: subject.as_deref(),
            tool: None,
            ts: humantime::format_rfc3339_millis(SystemTime::now()),
        });
    }

    fn write(&self, line: &Line<'_>) {
        match &self.sink {
            Sink::Stdout(writer) => {
                let mut text = Vec::with_capacity(LINE_CAPACITY);
                // A `Line` always serializes (its members are strings, numbers and JSON).
                let _ = serde_json::to_writer(&mut text, line);
                text.push(b'\n');
                match writer.write(text) {
                    Ok(()) => {}
                    // Counted, not logged: a log line per dropped event would flood stderr.
                    Err(QueueError::Full) => self.metrics.events_dropped.inc(),
                    Err(error @ QueueError::Closed) => {
                        tracing::warn!(%error, "could not write an audit line");
                    }
                }
            }
            #[cfg(test)]
            Sink::Memory(lines) => {
                if let Ok(mut lines) = lines.lock()
                    && let Ok(line) = serde_json::to_value(line)
                {
                    lines.push(line);
                }
            }
            Sink::Off => {}
        }
    }
}

/// Bytes reserved for one line: most lines fit without growing.
const LINE_CAPACITY: usize = 512;

/// One audit line, serialized with its members in name order (the order the lines have always
/// had); the fields are the contract in the module docs.
#[derive(serde::Serialize)]
struct Line<'a> {
    arguments_sha256: Option<&'a str>,
    client_id: Option<&'a str>,
    decision: &'a str,
    duration_ms: f64,
    event: &'a str,
    mcpupstream: Option<&'a str>,
    outcome: &'a str,
    request_id: &'a Value,
    session_id: Option<&'a str>,
    subject: Option<&'a str>,
    tool: Option<&'a str>,
    #[serde(serialize_with = "serialize_display")]
    ts: humantime::Rfc3339Timestamp,
}

fn serialize_display<S: serde::Serializer>(
    value: &impl std::fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// `sha256:<hex>` of `arguments`' canonical JSON (object keys sorted, recursively), so the same
/// arguments give the same digest whatever order the client wrote them in.
pub fn arguments_digest(arguments: &Value) -> String {
    crate::transport::upstream::tools::canonical_digest(arguments)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_tool_call_line_has_every_field_and_never_the_arguments() {
        let auditor = Auditor::memory(Some("team-a/search".into()));
        let caller = Principal {
            subject: Some("alice".into()),
            client_id: Some("agent".into()),
            ..Principal::default()
        };
        let arguments = json!({"query": "secret plans", "limit": 3});
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "search", "arguments": arguments}});
        let facts = CallFacts::of(Some("s-1"), &json!(7), Some(Arc::new(caller)), &body.into());
        let digest = arguments_digest(&arguments);
        assert_eq!(facts.arguments_sha256.as_deref(), Some(digest.as_str()));
        auditor.tool_call(&facts, Outcome::Denied, Duration::from_micros(1500));
        let lines = auditor.lines();
        let line = &lines[0];
        assert_eq!(line["event"], "tools/call");
        assert_eq!(line["mcpupstream"], "team-a/search");
        assert_eq!(line["subject"], "alice");
        assert_eq!(line["client_id"], "agent");
        assert_eq!(line["decision"], "deny");
        assert_eq!(line["outcome"], "denied");
        assert_eq!(line["request_id"], 7);
        assert_eq!(line["session_id"], "s-1");
        assert_eq!(line["tool"], "search");
        assert_eq!(line["arguments_sha256"], digest.as_str());
        assert_eq!(line["duration_ms"], 1.5);
        assert!(line["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')));
        assert!(!line.to_string().contains("secret plans"));
        let reordered = json!({"limit": 3, "query": "secret plans"});
        assert_eq!(
            arguments_digest(&reordered),
            digest,
            "key order does not matter"
        );
        assert_ne!(
            arguments_digest(&json!({"limit": 4, "query": "secret plans"})),
            digest
        );
    }
}
