//! The berth MCP proxy.
//!
//! Responsible for: serving MCP Streamable HTTP to clients (downstream) and relaying their
//! JSON-RPC messages over one long-lived, reused upstream session; rewriting request ids and
//! progress tokens so clients never see each other's data; enforcing the connect and call
//! budgets itself; counting every `tools/call` by outcome. See `proxy/README.md` for the design.
//! Not responsible for: Kubernetes (the operator renders the config this crate reads).

pub mod admin;
pub mod answer;
pub mod audit;
pub mod auth;
pub mod fanout;
pub mod forward;
pub mod front;
pub mod jsonrpc;
pub mod lint;
pub mod metrics;
pub mod outcome;
pub mod per_client;
pub mod rate_limits;
pub mod revision;
pub mod server;
pub mod server_request;
pub mod sessions;
pub mod state;
pub mod stdio;
pub mod subscriptions;
pub mod tasks;
pub mod telemetry;
pub mod upstream;

pub use outcome::Outcome;
pub use server::{Proxy, RunningProxy, StartError, start, start_on, start_with_env};

/// Installs ring as the process-wide rustls crypto provider (the only TLS provider in Berth).
/// Call once before the first HTTP client is built; later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
