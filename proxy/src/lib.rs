//! The berth MCP proxy.
//!
//! Responsible for: serving MCP Streamable HTTP to clients (downstream) and relaying their
//! JSON-RPC messages over one long-lived, reused upstream session; rewriting request ids and
//! progress tokens so clients never see each other's data; enforcing the connect and call
//! budgets itself; counting every `tools/call` by outcome. See `proxy/README.md` for the design.
//! Not responsible for: Kubernetes (the operator renders the config this crate reads).
//!
//! # Module map
//!
//! Layers, bottom first. A module uses only modules of the layers below its own (and those of
//! its own layer named here), never one above and never one that uses it back; inside a module
//! the same holds for its children (a parent may use its children, a child that also uses its
//! parent is a cycle).
//! `tests/tests/layers` fails on any cycle and on a use of a layer above (issue 17).
//!
//! 1. The wire format: [`jsonrpc`] (envelopes, error codes, [`jsonrpc::WireMessage`], the
//!    message as it crossed the wire), [`outcome`] (how a request ended), [`revision`] (the
//!    MCP revisions and what tells them apart), [`tasks`] (MCP tasks refused on a shared
//!    session). They use nothing but `jsonrpc`.
//! 2. Cross-cutting: [`telemetry`] (traces; uses layer 1), [`metrics`] (every Prometheus
//!    metric, `metrics::stdio` and `metrics::auth` those of the stdio transport and the OAuth
//!    resource server; uses `outcome` and `telemetry`), [`auth`] (who may call: bearer token,
//!    OAuth resource server, grants; uses `metrics::auth`), [`rate_limits`] (uses `auth`).
//! 3. The upstream transports, behind one interface: [`upstream`] (the shared upstream and its
//!    supervisor, [`upstream::UpstreamSession`] over either transport, per era: `http`,
//!    `session`, `listen`, `era`, `tools`, `control` for the proxy's own messages) and
//!    [`stdio`] (child processes and the stdio host). They use layers 1 and 2 and each other's
//!    parts: `upstream::endpoint` and `upstream::session` use `stdio`'s endpoint and
//!    connection; `stdio` uses only `upstream::error` and `upstream::era`.
//! 4. Client state: [`per_client`] (a client's own upstream session, `PerClient`; uses
//!    `upstream`), [`sessions`] (downstream sessions, their in-flight ids, event logs and
//!    server requests; uses `per_client`), [`answer`] (the one place an answer becomes HTTP;
//!    uses `sessions::events` and the session header of `upstream::http`), [`subscriptions`]
//!    (resource subscriptions per client; uses `sessions` and `answer`), [`audit`] (the audit
//!    line of a tool call; uses `auth` and `upstream::tools`), [`parked`] (calls parked on a
//!    legacy upstream's server request until their modern client retries; uses `sessions` and
//!    `audit`).
//! 5. [`state`]: the [`Proxy`] every handler shares (the upstream, the sessions, the budgets
//!    and policies, the parked calls, the metrics), and ending a session; uses layers 1-4.
//! 6. The call engine, a request's life: [`server_request`] (a server-to-client request on its
//!    way to one client), [`fanout`] (the upstream's own messages to clients; handed the
//!    upstream, the sessions, the subscriptions and the metrics, [`fanout::Fanout`]),
//!    [`forward`] (one request: ids, budgets, the tool policy, the outcome, replay once;
//!    `forward::call` is the request in flight its steps share). They use layers 1-5; `fanout`
//!    uses `server_request`, `forward` both.
//! 7. The fronts: [`front`] (Streamable HTTP on `/mcp`, `front::modern` for MCP 2026-07-28,
//!    `front::linger` the listener; uses layers 1-6) and [`admin`] (`/metrics`, `/healthz`,
//!    `/readyz`; handed only the upstream, the metrics and the drain flag, [`admin::Admin`]).
//! 8. Start-up wiring: [`server`] (builds [`Proxy`] from the config, serves the fronts, shuts
//!    down in order) and [`lint`] (checks a config against a live upstream, for the CLI; uses
//!    only `upstream`).

pub mod front {
    pub mod admin;
    pub mod mcp;
}

pub mod engine {
    pub mod fanout;
    pub mod forward;
    pub mod server_request;
    pub mod state;
}

pub mod client {
    pub mod answer;
    pub mod audit;
    pub mod parked;
    pub mod per_client;
    pub mod sessions;
    pub mod subscriptions;
}

pub mod transport {
    pub mod stdio;
    pub mod upstream;
}

pub mod access {
    pub mod auth;
    pub mod rate_limits;
}

pub mod observe {
    pub mod metrics;
    pub mod telemetry;
}

pub mod wire {
    pub mod jsonrpc;
    pub mod outcome;
    pub mod revision;
    pub mod tasks;
}

pub mod lint;
pub mod server;

pub use server::{Proxy, RunningProxy, StartError, start, start_on, start_with_env};

/// Installs ring as the process-wide rustls crypto provider (the only TLS provider in Berth).
/// Call once before the first HTTP client is built; later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
