//! Responses that arrive on the upstream session's standalone `GET` stream instead of the
//! request's own POST exchange.
//!
//! MCP 2025-06-18 ("Transports: Streamable HTTP") puts a request's response on that POST's own
//! reply, but some upstreams answer the POST with a bodiless 202 or an SSE stream that ends
//! without the response, and deliver the response on the session's standalone stream, which
//! only the proxy holds. Each forwarded
//! request registers its upstream id here before it is sent, so a response on the standalone
//! stream reaches the call waiting for it within the call's budget (issue 12, item 3). A
//! registration ends when its [`LateResponse`] is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tokio::sync::oneshot;

use crate::wire::jsonrpc::WireMessage;

/// The calls of one upstream session that may still receive a response on its standalone
/// stream, by upstream request id.
#[derive(Debug, Default)]
pub struct LateResponses(Mutex<HashMap<u64, oneshot::Sender<WireMessage>>>);

impl LateResponses {
    /// Registers the request with upstream id `id`; the registration lasts as long as the
    /// returned [`LateResponse`].
    pub fn expect(self: &Arc<Self>, id: u64) -> LateResponse {
        let (tx, rx) = oneshot::channel();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        LateResponse {
            registry: Arc::clone(self),
            id,
            rx: Some(rx),
        }
    }

    /// Hands a response that arrived on the standalone stream to the call waiting for it.
    ///
    /// # Errors
    /// Gives the message back when no call with its id is waiting (unknown, answered already,
    /// or not an integer id the proxy issued).
    pub fn route(&self, message: WireMessage) -> Result<(), WireMessage> {
        let waiting = message.get("id").and_then(Value::as_u64).and_then(|id| {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id)
        });
        match waiting {
            Some(tx) => tx.send(message),
            None => Err(message),
        }
    }
}

/// One call's registration: receives its response if it arrives on the standalone stream.
#[derive(Debug)]
pub struct LateResponse {
    registry: Arc<LateResponses>,
    id: u64,
    rx: Option<oneshot::Receiver<WireMessage>>,
}

impl LateResponse {
    /// The response, once it arrives; pending forever after it was received once.
    ///
    /// # Cancellation
    /// Cancel-safe: a response that arrives after the future is dropped is kept for the next
    /// call.
    pub async fn recv(&mut self) -> WireMessage {
        match self.rx.as_mut() {
            Some(rx) => match rx.await {
                Ok(message) => {
                    self.rx = None;
                    message
                }
                Err(_) => {
                    self.rx = None;
                    std::future::pending().await
                }
            },
            None => std::future::pending().await,
        }
    }
}

impl Drop for LateResponse {
    fn drop(&mut self) {
        self.registry
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_registered_call_gets_its_response_and_others_are_given_back() {
        let registry = Arc::new(LateResponses::default());
        let mut late = registry.expect(7);
        let stray = WireMessage::from(json!({"jsonrpc":"2.0","id":8,"result":{}}));
        assert!(registry.route(stray).is_err(), "no call 8 is waiting");
        let response = WireMessage::from(json!({"jsonrpc":"2.0","id":7,"result":{"n":1}}));
        assert!(registry.route(response.clone()).is_ok());
        assert_eq!(late.recv().await, response);
        assert!(registry.route(response).is_err(), "answered once only");
    }

    #[tokio::test]
    async fn dropping_the_registration_ends_it() {
        let registry = Arc::new(LateResponses::default());
        drop(registry.expect(3));
        let response = WireMessage::from(json!({"jsonrpc":"2.0","id":3,"result":{}}));
        assert!(registry.route(response).is_err());
        let mut late = registry.expect(4);
        let waited = tokio::time::timeout(Duration::from_millis(20), late.recv()).await;
        assert!(waited.is_err(), "nothing arrived");
    }
}
