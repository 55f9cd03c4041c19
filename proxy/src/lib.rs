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
//! The folders are the layers, bottom first: `wire/`, then `observe/` and `access/`
//! (cross-cutting), `transport/`, `client/`, `engine/` (the engine's state, then the call engine
//! above it), `front/`; the start-up wiring, `server` and `lint`, stays at the root. A module uses
//! only modules of the layers below its own (and those of its own layer named here), never one
//! above and never one that uses it back; inside a module the same holds for its children (a
//! parent may use its children, a child that also uses its parent is a cycle).
//! `tests/tests/layers` fails on any cycle and on a use of a layer above (issue 17).
//!
//! 1. The wire format, `wire/`: [`wire::jsonrpc`] (envelopes, error codes,
//!    [`wire::jsonrpc::WireMessage`], the message as it crossed the wire), [`wire::headers`]
//!    (the MCP HTTP headers), [`wire::answer`] (the one place an answer becomes HTTP: a JSON
//!    body, an SSE stream of [`wire::answer::StreamEvent`]s, or a status), [`wire::outcome`]
//!    (how a request ended), [`wire::revision`] (the MCP revisions and what tells them apart),
//!    [`wire::tasks`] (MCP tasks refused on a shared session), [`wire::echoed`] (client-chosen
//!    text cut to a bound before a refusal repeats it). They use nothing but each other
//!    (`wire::answer` uses `wire::jsonrpc` and `wire::headers`).
//! 2. Cross-cutting, `observe/` and `access/`: [`observe::telemetry`] (traces; uses layer 1),
//!    [`observe::escaped`] (client-, upstream- and child-chosen text made safe for a log line),
//!    [`observe::metrics`] (every Prometheus metric, `observe::metrics::stdio` and
//!    `observe::metrics::auth` those of the stdio transport and the OAuth resource server; uses
//!    `wire::outcome` and `observe::telemetry`), [`access::auth`] (who may call: bearer token,
//!    OAuth resource server, grants; uses `observe::metrics::auth`), [`access::rate_limits`]
//!    (uses `access::auth`).
//! 3. The upstream transports, behind one interface, `transport/`: [`transport::upstream`] (the
//!    shared upstream and its supervisor, [`transport::upstream::UpstreamSession`] over either
//!    transport, per era: `http`, `session`, `listen`, `era`, `tools`, `control` for the proxy's
//!    own messages, `exposure` whether the upstream's port answers beyond loopback) and
//!    [`transport::stdio`] (child processes and the stdio host). They use layers 1 and 2 and
//!    each other's parts: `transport::upstream::endpoint` and `transport::upstream::session`
//!    use `transport::stdio`'s endpoint and connection; `transport::stdio` uses only
//!    `transport::upstream::error` and `transport::upstream::era`.
//! 4. Client state, `client/`: [`client::per_client`] (a client's own upstream session,
//!    `PerClient`; uses `transport::upstream`), [`client::sessions`] (downstream sessions, their
//!    in-flight ids, event logs and server requests; uses `client::per_client`),
//!    [`client::subscriptions`] (resource subscriptions per client; uses `client::sessions`),
//!    [`client::audit`] (the audit line of a tool call; uses `access::auth` and
//!    `transport::upstream::tools`), [`client::parked`] (calls parked on a legacy upstream's
//!    server request until their modern client retries; uses `client::sessions` and
//!    `client::audit`), [`client::session_room`] (the sessions being opened, counted against
//!    the session caps, and the new-session rate per caller; uses nothing of the crate).
//! 5. [`engine::state`]: the [`Engine`] the call engine runs on (the upstream, the sessions,
//!    the budgets and tool rules, the parked calls, the metrics, the audit log), and ending a
//!    session; uses layers 1-4.
//! 6. The call engine, a request's life, the rest of `engine/`: [`engine::server_request`] (a
//!    server-to-client request on its way to one client), [`engine::fanout`] (the upstream's own
//!    messages to clients; handed the upstream, the sessions, the subscriptions and the metrics,
//!    [`engine::fanout::Fanout`]), [`engine::forward`] (one request: ids, budgets, the tool
//!    policy, the outcome, replay once; `engine::forward::call` is the request in flight its
//!    steps share). They use layers 1-5; `engine::fanout` uses `engine::server_request`,
//!    `engine::forward` both.
//! 7. The fronts, `front/`: [`front::mcp`] (Streamable HTTP on `/mcp`, `front::mcp::modern` for
//!    MCP 2026-07-28, `front::mcp::linger` an accepted connection; its state, [`front::mcp::Front`], is the
//!    [`Engine`] and the front's own settings: client auth, `Origin` rules, session strategy and
//!    limit; uses layers 1-6) and [`front::admin`]
//!    (`/metrics`, `/healthz`, `/readyz`; handed only the upstream, the metrics, the drain
//!    flag and the upstream's exposure, [`front::admin::Admin`]).
//! 8. Start-up wiring, at the root: [`server`] (builds the [`Engine`] and the fronts from the config,
//!    serves them through `server::connections`, the listeners' caps and read deadlines, shuts
//!    down in order) and [`lint`] (checks a config against a live upstream, for the
//!    CLI; uses only `transport::upstream`).

/// Layer 1, the wire format: JSON-RPC messages, MCP headers, answers, outcomes, MCP revisions,
/// tasks.
pub mod wire {
    pub mod answer;
    pub mod echoed;
    pub mod headers;
    pub mod jsonrpc;
    pub mod outcome;
    pub mod revision;
    pub mod tasks;
}

/// Layer 2, cross-cutting: traces and metrics.
pub mod observe {
    pub mod escaped;
    pub mod metrics;
    pub mod telemetry;
}

/// Layer 2, cross-cutting: who may call, and how often.
pub mod access {
    pub mod auth;
    pub mod rate_limits;
}

/// Layer 3, the upstream transports: HTTP and stdio, behind one interface.
pub mod transport {
    pub mod stdio;
    pub mod upstream;
}

/// Layer 4, client state: downstream sessions, a client's own upstream session, its
/// subscriptions, audit lines and parked calls.
pub mod client {
    pub mod audit;
    pub mod parked;
    pub mod per_client;
    pub mod session_room;
    pub mod sessions;
    pub mod subscriptions;
}

/// Layer 5, the engine's state ([`engine::state`]), and layer 6 above it, the call engine: a
/// request's life ([`engine::forward`]), the upstream's own messages ([`engine::fanout`]),
/// server-to-client requests ([`engine::server_request`]).
pub mod engine {
    pub mod fanout;
    pub mod forward;
    pub mod server_request;
    pub mod state;
}

/// Layer 7, the fronts: Streamable HTTP on `/mcp` ([`front::mcp`]) and the admin endpoints
/// ([`front::admin`]).
pub mod front {
    pub mod admin;
    pub mod mcp;
}

pub mod lint;
pub mod server;

pub use server::{Engine, RunningProxy, StartError, start, start_on, start_with_env};

/// Installs ring as the process-wide rustls crypto provider (the only TLS provider in Berth).
/// Call once before the first HTTP client is built; later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
