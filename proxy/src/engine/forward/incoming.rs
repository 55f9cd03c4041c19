//! A downstream request as the engine received it ([`Incoming`]): the JSON-RPC request id,
//! method and body, and what is read from them once on arrival (the tool a `tools/call` names,
//! its audit facts, the server span, the `timeouts.call` deadline). It becomes the [`Call`] that
//! goes upstream, or is answered before that ([`Incoming::ending`] records how).
//!
//! Not responsible for: deciding whether it goes upstream (the checks) or what happens once it
//! has (`forward`, `call`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tracing::Span;

use super::call::{Call, Ending};
use crate::access::auth::Principal;
use crate::client::audit::CallFacts;
use crate::client::sessions::DownstreamSession;
use crate::engine::state::Engine;
use crate::observe::metrics::Era;
use crate::observe::telemetry::{self, spans};
use crate::transport::upstream::UpstreamSession;
use crate::wire::jsonrpc::WireMessage;

use super::input_required;

/// A downstream request, read once on arrival.
pub(super) struct Incoming {
    /// The client's JSON-RPC request id.
    pub(super) id: Value,
    pub(super) method: String,
    pub(super) body: WireMessage,
    /// The client's `Accept` excludes `text/event-stream`.
    pub(super) json_only: bool,
    /// The OAuth caller, for its tool grants and the audit line.
    pub(super) caller: Option<Arc<Principal>>,
    pub(super) started: Instant,
    /// `timeouts.call` from receipt.
    pub(super) deadline: tokio::time::Instant,
    pub(super) era: Era,
    /// The tool a `tools/call` names (`params.name`); `None` for other methods, and for a
    /// `tools/call` without a name (refused).
    pub(super) tool: Option<String>,
    /// What the audit line of a `tools/call` reports; `None` for other methods and with audit
    /// off.
    pub(super) facts: Option<CallFacts>,
    /// The server span the front opened ([`Span::none`] while traces are off).
    pub(super) span: Span,
}

impl Incoming {
    /// Reads the request `id`, `method`, `body` of `session`, received now.
    pub(super) fn read(
        engine: &Engine,
        session: &DownstreamSession,
        id: Value,
        method: String,
        body: WireMessage,
        json_only: bool,
        caller: Option<Arc<Principal>>,
    ) -> Self {
        let started = Instant::now();
        let span = if telemetry::enabled() {
            Span::current()
        } else {
            Span::none()
        };
        let session_id = (!session.is_modern()).then(|| session.id());
        spans::record_session(&span, session_id, session.protocol_version());
        let is_call = method == "tools/call";
        let tool = is_call
            .then(|| body.member_str(&["params", "name"]).map(Cow::into_owned))
            .flatten();
        let facts = (is_call && engine.auditor.is_on())
            .then(|| CallFacts::of(session_id, &id, caller.clone(), &body));
        Self {
            deadline: tokio::time::Instant::now() + engine.call_budget,
            id,
            method,
            body,
            json_only,
            caller,
            started,
            era: session.era(),
            tool,
            facts,
            span,
        }
    }

    /// How this request's end is recorded when the proxy answers it itself.
    pub(super) fn ending<'a>(&'a self, engine: &'a Engine) -> Ending<'a> {
        Ending {
            engine,
            method: &self.method,
            tool: self.tool.as_deref(),
            started: self.started,
            era: self.era,
            facts: self.facts.as_ref(),
            span: &self.span,
        }
    }

    /// The `requestState` of a modern client's retry of a parked call, if this is one.
    pub(super) fn retry_state(&self, session: &DownstreamSession) -> Option<String> {
        if !session.is_modern() {
            return None;
        }
        super::parked::retry_state(&self.body).map(str::to_owned)
    }

    /// The call that sends this request over `upstream`, and the body it sends.
    pub(super) fn into_call(
        self,
        engine: Arc<Engine>,
        session: Arc<DownstreamSession>,
        upstream: Arc<UpstreamSession>,
    ) -> (Call, WireMessage) {
        let progress_token = self.body.raw_member(&["params", "_meta", "progressToken"]);
        let retry_body = input_required::retry_body(
            &self.method,
            upstream.era(),
            session.is_modern(),
            &self.body,
        );
        // Only the first subscriber's subscribe on the shared session reaches this point (the
        // others were answered locally).
        let subscribing = (self.method == "resources/subscribe" && session.dedicated().is_none())
            .then(|| {
                self.body
                    .member(&["params", "uri"])?
                    .as_str()
                    .map(str::to_owned)
            })
            .flatten();
        let call = Call {
            engine,
            session,
            upstream,
            downstream_id: self.id,
            upstream_id: 0,
            method: self.method,
            tool: self.tool,
            progress_token,
            json_only: self.json_only,
            started: self.started,
            finished: false,
            retry_body,
            input_rounds: 0,
            caller: self.caller,
            facts: self.facts,
            span: self.span,
            attempt: Span::none(),
            subscribing,
        };
        (call, self.body)
    }
}
