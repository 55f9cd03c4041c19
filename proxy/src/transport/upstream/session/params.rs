//! What the proxy, as the upstream's client, says about itself when it opens a session: its
//! own `initialize` params, and the hop a modern upstream is told on the proxy's own requests.

use serde_json::{Value, json};

use crate::transport::upstream::era::{ClientHop, modern_capabilities};
use crate::wire::revision::REQUESTED_VERSION;

/// The hop a modern upstream is told on the proxy's own requests: the capabilities and
/// `clientInfo` of `initialize` params.
pub(super) fn hop_of(params: &Value) -> ClientHop {
    ClientHop {
        capabilities: modern_capabilities(params.get("capabilities").unwrap_or(&Value::Null)),
        info: params.get("clientInfo").cloned().unwrap_or_default(),
        log_level: None,
    }
}

/// The proxy's own `initialize` params for a shared session: the newest revision with a
/// handshake, and the client capabilities whose server requests the proxy routes to the client
/// that made the call (sampling, elicitation, roots).
pub fn proxy_initialize_params() -> Value {
    json!({
        "protocolVersion": REQUESTED_VERSION,
        "capabilities": { "sampling": {}, "elicitation": {}, "roots": { "listChanged": true } },
        "clientInfo": { "name": "berth-proxy", "version": env!("CARGO_PKG_VERSION") },
    })
}
