//! A legacy upstream's server requests (sampling, elicitation, roots) during a modern client's
//! call, bridged as MCP 2026-07-28 multi round-trip requests (MRTR, issue 13).
//!
//! A legacy upstream asks mid-call and waits for the answer on its session; a modern client
//! takes no server requests, and answers `input_required` results on a retry instead. So the
//! proxy **parks** the call: the client's request gets an `input_required` result whose
//! `inputRequests` are the upstream's requests (keys `berth-<n>`) and whose `requestState` names
//! the parked call (`berth-mrtr:<random>`); the upstream call stays open, its messages buffered.
//! The client's retry (a new request with the `inputResponses` and the `requestState` echoed)
//! takes the call back: each answer goes upstream under the upstream's own request id, and the
//! retry's response stream carries the rest of the call, its final result last.
//!
//! The state lives in this proxy process: it is single-use, bound to the method and the name of
//! the request (`params.name` / `params.uri`), and expires with the call's `timeouts.call`
//! budget, after which the upstream is told the call is cancelled. A retry whose `requestState`
//! is unknown here (expired, used, or minted by another replica) gets -32602. Each upstream
//! request is counted in `berth_proxy_bridged_server_requests_total{direction="to_modern_client"}`.

use crate::wire::jsonrpc::Pointer as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::client::sessions::DownstreamSession;
use crate::wire::jsonrpc::WireMessage;

/// The prefix of every `requestState` the proxy mints for a parked call.
pub const STATE_PREFIX: &str = "berth-mrtr:";
/// The `direction` label of the bridged-server-request counter for this bridge.
pub const DIRECTION: &str = "to_modern_client";

/// What a client's retry brings to its parked call.
#[derive(Debug)]
pub struct Resume {
    /// The retry's JSON-RPC request id: the rest of the call is answered under it.
    pub downstream_id: Value,
    /// The retry's (request-scoped) session.
    pub session: Arc<DownstreamSession>,
    /// Where the rest of the call goes: the retry's answer.
    pub tx: mpsc::Sender<WireMessage>,
    /// The retry's `Accept` names only JSON.
    pub json_only: bool,
    /// The retry's own progress token, if it asked for progress.
    pub progress_token: Option<Box<serde_json::value::RawValue>>,
    /// Fires when the retry is cancelled.
    pub cancelled: CancellationToken,
    /// `params.inputResponses` of the retry (keys as the `inputRequests` named them).
    pub input_responses: Map<String, Value>,
    /// The retry's audit facts (its request id), for the line the call writes when it ends.
    pub facts: Option<crate::client::audit::CallFacts>,
}

/// A call waiting for its client's retry.
#[derive(Debug)]
pub struct Parked {
    /// The method of the original request.
    pub method: String,
    /// Its `params.name` or `params.uri`.
    pub name: Option<String>,
    /// Hands the retry to the call.
    pub resume: oneshot::Sender<Resume>,
    /// The identity ([`crate::access::auth::Principal::identity`]) of the caller whose call this is;
    /// only a retry of the same caller may resume it.
    pub owner: Option<String>,
}

/// Every parked call of this proxy, by the token in its `requestState`.
#[derive(Debug, Default)]
pub struct ParkedCalls {
    by_token: Mutex<HashMap<String, Parked>>,
}

impl ParkedCalls {
    /// Parks a call of `method` on `name` for the caller `owner`; returns the `requestState`
    /// to send and where the retry arrives.
    pub fn park(
        &self,
        method: &str,
        name: Option<&str>,
        owner: Option<String>,
    ) -> (String, oneshot::Receiver<Resume>) {
        let token = format!("{STATE_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let (resume, resumed) = oneshot::channel();
        let parked = Parked {
            method: method.to_owned(),
            name: name.map(str::to_owned),
            resume,
            owner,
        };
        self.lock().insert(token.clone(), parked);
        (token, resumed)
    }

    /// Takes the parked call of `request_state` (single use) for the caller `owner`; a call
    /// parked for another caller stays parked, and its state is unknown to this one.
    pub fn take(&self, request_state: &str, owner: Option<&str>) -> Option<Parked> {
        let mut parked = self.lock();
        if parked.get(request_state)?.owner.as_deref() != owner {
            return None;
        }
        parked.remove(request_state)
    }

    /// Forgets a parked call whose time ran out.
    pub fn forget(&self, request_state: &str) {
        self.lock().remove(request_state);
    }

    /// Parked calls now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no call is parked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked>> {
        self.by_token.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `requestState` of a modern retry when the proxy minted it.
pub fn retry_state(body: &Value) -> Option<&str> {
    body.at("/params/requestState")
        .and_then(Value::as_str)
        .filter(|state| state.starts_with(STATE_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_parked_call_is_taken_once_by_its_state_and_its_caller() {
        let parked = ParkedCalls::default();
        let (token, _resumed) = parked.park("tools/call", Some("ask"), Some("alice".into()));
        assert!(token.starts_with(STATE_PREFIX));
        assert_eq!(parked.len(), 1);
        let body = json!({"params": {"requestState": token}});
        assert_eq!(retry_state(&body), Some(token.as_str()));
        assert!(
            parked.take(&token, Some("mallory")).is_none(),
            "another caller cannot resume it"
        );
        assert!(
            parked.take(&token, None).is_none(),
            "nor a caller without a token"
        );
        let taken = parked.take(&token, Some("alice")).expect("parked");
        assert_eq!(taken.name.as_deref(), Some("ask"));
        assert!(parked.take(&token, Some("alice")).is_none(), "single use");
        assert!(retry_state(&json!({"params": {"requestState": "theirs"}})).is_none());
    }
}
