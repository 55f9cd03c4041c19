//! The Berth operator: reconciles each `McpUpstream` into the Kubernetes objects that run it.
//!
//! Responsible for: turning an `McpUpstream` into a ConfigMap (the rendered proxy config), a
//! Deployment (the berth proxy plus the upstream MCP server as a digest-pinned native sidecar, or
//! for stdio servers a stdio host in the server's image), a Service, a create-once Secret with
//! the session-signing key, the NetworkPolicy (on by default) and the opt-in
//! PodDisruptionBudget, keeping them as declared (server-side apply, hand edits reverted, no
//! write at steady state), and reporting `status` (`observedGeneration`, `endpoint`, the
//! conditions `Ready`, `Progressing`, `Degraded`, `UpstreamReady`, `ToolsDiscovered`,
//! `UpstreamExposed`, the running upstream image ID and the proxy's tool report, read from
//! each proxy's admin port by [`report`]) with an Event per condition transition, plus
//! Prometheus metrics; with leader election, reconciling only while holding a
//! Lease ([`controller`]). Why the operator reads the proxy instead of the proxy writing
//! status: `operator/README.md`.
//! Not responsible for: speaking MCP (the proxy does that), installing the CRD (the chart does).
//!
//! Each reconcile is a pipeline of named steps, one module each:
//! [`validate`] (pure) -> [`build`] (pure) -> [`apply`] -> [`report`] -> [`status`];
//! [`reconcile`] strings them together and [`controller`] runs it for every object.
//!
//! # Module map
//!
//! Layers, bottom first. A module uses only modules of the layers below its own, never one
//! above and never one that uses it back; inside a module the same holds for its children (a
//! parent may use its children, a child that also uses its parent is a cycle).
//! `tests/tests/layers` fails on any cycle and on a use of a layer above (issue 17).
//!
//! 1. The crate root: [`FIELD_MANAGER`] and [`DEFAULT_PROXY_IMAGE`]; all else here is a
//!    re-export. [`labels`]: the labels and selector of every owned object. [`settings`]: how
//!    the operator runs ([`Settings`]) and the defaults. [`diagnostics`]: each proxy's
//!    diagnostics token, derived from the operator's key. They use nothing but the root
//!    (`settings` holds the `diagnostics` key).
//! 2. [`error`]: the error of a reconcile worth retrying, and the errors of the steps it wraps
//!    ([`BuildError`](error::BuildError), [`ListPodsError`](error::ListPodsError)); uses
//!    nothing of the crate.
//! 3. [`render`] (pure): the proxy config a spec renders to, and the names it shares with the
//!    pod (environment variables, the stdio socket); uses nothing of the crate.
//! 4. [`validate`] (pure): whether a spec can be served, checking the proxy config `render`
//!    makes; uses `render`.
//! 5. [`build`] (pure): the shape of every owned object, one child module per object, above
//!    `build::owner` and [`build::container`], which they share. Uses `labels`, `error` and
//!    `render`.
//! 6. [`report`]: what each proxy's admin port says; uses `build::container`, `error` and
//!    `labels`.
//! 7. [`status::conditions`] (pure): each condition's verdict and the wire vocabulary of
//!    conditions; uses `report` and `validate`.
//! 8. [`metrics`]: the operator's Prometheus metrics; uses `status::conditions` (the
//!    condition types it counts).
//! 9. [`apply`]: server-side apply of what `build` made; uses `build`, `error`, `metrics`.
//!    [`status`]: the status to write and writing it, and [`status::events`], the Events of
//!    condition transitions; uses `error`, `metrics`, `report`, `status::conditions`.
//! 10. [`reconcile`]: the pipeline above under a deadline, with backoff; uses layers 1-9.
//! 11. [`admin`]: `/metrics` and `/healthz`; uses `metrics`. [`controller`]: watches, leader
//!     election, runs `reconcile` for each object; uses `reconcile`, `admin` and below.

pub mod admin;
pub mod apply;
pub mod build;
pub mod controller;
pub mod diagnostics;
pub mod error;
pub mod labels;
pub mod metrics;
pub mod reconcile;
pub mod render;
pub mod report;
pub mod settings;
pub mod status;
pub mod validate;

pub use controller::{LeaderElection, RunError, Settings, run, run_with_metrics};

/// Field manager of every server-side apply the operator makes, spec and status alike.
pub const FIELD_MANAGER: &str = "berth-operator";

/// Proxy image used when [`Settings::proxy_image`] is not overridden.
pub const DEFAULT_PROXY_IMAGE: &str = "ghcr.io/berth-dev/berth-proxy:0.1.0";
