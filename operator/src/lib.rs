//! The Berth operator: reconciles each `McpUpstream` into the Kubernetes objects that run it.
//!
//! Responsible for: turning an `McpUpstream` into a ConfigMap (the rendered proxy config), a
//! Deployment (the berth proxy plus the upstream MCP server as a digest-pinned native sidecar, or
//! for stdio servers a stdio host in the server's image), a Service, a create-once Secret with
//! the session-signing key, and the opt-in NetworkPolicy and PodDisruptionBudget, keeping them
//! as declared (server-side apply, hand edits reverted, no write at steady state), and reporting
//! `status` (`observedGeneration`, `endpoint`, the conditions `Ready`, `Progressing`,
//! `Degraded`, `UpstreamReady`, `ToolsDiscovered`, the running upstream image ID and the proxy's
//! tool report, read from each proxy's admin port by [`report`]) with an Event per condition
//! transition, plus Prometheus metrics; with leader election, reconciling only while holding a
//! Lease ([`controller`]). Why the operator reads the proxy instead of the proxy writing
//! status: `operator/README.md`.
//! Not responsible for: speaking MCP (the proxy does that), installing the CRD (the chart does).
//!
//! Each reconcile is a pipeline of named steps, one module each:
//! [`validate`] (pure) -> [`build`] (pure) -> [`apply`] -> [`report`] -> [`status`];
//! [`reconcile`] strings them together and [`controller`] runs it for every object.

pub mod admin;
pub mod apply;
pub mod build;
pub mod controller;
pub mod error;
pub mod labels;
pub mod metrics;
pub mod reconcile;
pub mod report;
pub mod settings;
pub mod status;
pub mod validate;

pub use controller::{LeaderElection, RunError, Settings, run, run_with_metrics};

/// Field manager of every server-side apply the operator makes, spec and status alike.
pub const FIELD_MANAGER: &str = "berth-operator";

/// Proxy image used when [`Settings::proxy_image`] is not overridden.
pub const DEFAULT_PROXY_IMAGE: &str = "ghcr.io/berth-dev/berth-proxy:0.1.0";
