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
//! Lines are written by a background thread in batches ([`batched`], not lossy): a line waits
//! at most [`BATCH_WINDOW`], a slow stdout delays callers only once [`BUFFERED_LINES`] are
//! queued, and no line is dropped.

pub mod batched;

use std::sync::Arc;
#[cfg(test)]
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use batched::BatchedWriter;

use crate::access::auth::Principal;
use crate::wire::jsonrpc::{Pointer as _, WireMessage};
use crate::wire::outcome::Outcome;

/// Lines queued before a caller waits for stdout.
pub const BUFFERED_LINES: usize = 16_384;

/// How long the writer thread gathers lines after writing a batch: a line reaches stdout at
/// most about this long after its call ended.
pub const BATCH_WINDOW: Duration = Duration::from_millis(20);

/// Where audit lines go.
pub struct Auditor {
    mcp_upstream: Option<String>,
    sink: Sink,
}

enum Sink {
    /// The batched stdout writer; [`Auditor::close`] writes what is queued and ends its thread.
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
    /// [`arguments_digest`] of `params.arguments`; `None` when the call has none.
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
        // Read through the envelope, and only the arguments parsed (issue 14); arguments a
        // `Value` cannot hold are digested as the message's view holds them.
        let arguments = body.member_text(&["params", "arguments"]).map(|text| {
            serde_json::from_str::<Value>(text).unwrap_or_else(|_| {
                body.view()
                    .at("/params/arguments")
                    .cloned()
                    .unwrap_or(Value::Null)
            })
        });
        Self {
            session_id: session_id.map(str::to_owned),
            request_id: request_id.clone(),
            caller,
            tool: body
                .member_str(&["params", "name"])
                .map(std::borrow::Cow::into_owned),
            arguments_sha256: arguments.as_ref().map(arguments_digest),
        }
    }
}

impl Auditor {
    /// Audit lines on stdout for the McpUpstream `mcp_upstream` (`<namespace>/<name>`),
    /// written by the thread `berth-audit`.
    ///
    /// # Errors
    /// When the writer thread cannot be spawned.
    pub fn stdout(mcp_upstream: Option<String>) -> std::io::Result<Self> {
        let writer = BatchedWriter::start(
            "berth-audit",
            std::io::stdout(),
            BUFFERED_LINES,
            BATCH_WINDOW,
        )?;
        Ok(Self {
            mcp_upstream,
            sink: Sink::Stdout(writer),
        })
    }

    /// Audit lines kept in memory, read back with [`Auditor::lines`] (tests).
    #[cfg(test)]
    pub fn memory(mcp_upstream: Option<String>) -> Self {
        Self {
            mcp_upstream,
            sink: Sink::Memory(Mutex::default()),
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
        self.write(&Line {
            arguments_sha256: call.arguments_sha256.as_deref(),
            client_id: caller.and_then(|c| c.client_id.as_deref()),
            decision,
            duration_ms: duration.as_secs_f64() * 1000.0,
            event: "tools/call",
            mcpupstream: self.mcp_upstream.as_deref(),
            outcome: outcome.as_label(),
            request_id: &call.request_id,
            session_id: call.session_id.as_deref(),
            subject: caller.and_then(|c| c.subject.as_deref()),
            tool: call.tool.as_deref(),
            ts: humantime::format_rfc3339_millis(SystemTime::now()),
        });
    }

    /// Writes the line of a `tools/call` the front refused before the call was handled (its
    /// session unknown, missing or another identity's; its params or headers malformed):
    /// outcome `rejected`, with the session id the request named. Any other message writes
    /// nothing.
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
        let facts = CallFacts::of(session_id, &request_id, caller.cloned(), message);
        self.tool_call(&facts, Outcome::Rejected, duration);
    }

    /// Writes the line of a request refused before its body was read (`reason`:
    /// `unauthorized`, `insufficient_scope` or `auth_unavailable`). The front passes no
    /// `caller`: the claims of a token that failed its checks are never reported.
    pub fn refused_request(&self, reason: &str, caller: Option<&Principal>, duration: Duration) {
        self.write(&Line {
            arguments_sha256: None,
            client_id: caller.and_then(|c| c.client_id.as_deref()),
            decision: "deny",
            duration_ms: duration.as_secs_f64() * 1000.0,
            event: "request",
            mcpupstream: self.mcp_upstream.as_deref(),
            outcome: reason,
            request_id: &Value::Null,
            session_id: None,
            subject: caller.and_then(|c| c.subject.as_deref()),
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
                if let Err(error) = writer.write(text) {
                    tracing::warn!(%error, "could not write an audit line");
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
