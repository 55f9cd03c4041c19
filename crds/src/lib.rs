//! Berth's API types, shared by the operator and the proxy.
//!
//! Responsible for: the `McpUpstream` custom resource (`berth.dev/v1alpha1`), the proxy
//! configuration file format ([`ProxyConfig`]) that the operator renders into a ConfigMap and the
//! proxy parses, and the wire vocabulary both sides must agree on (ports, file names, labels).
//! Not responsible for: any I/O. Nothing here talks to a cluster, a socket or a file.
//!
//! # Module map
//!
//! Layers, bottom first. A module uses only modules of the layers below its own, never one
//! above and never one that uses it back; inside a module the same holds for its children (a
//! parent may use its children, a child that also uses its parent is a cycle).
//! `tests/tests/layers` fails on any cycle (issue 17).
//!
//! 1. The crate root: the wire constants below ([`GROUP`], ports, [`MCP_PATH`],
//!    [`PROXY_CONFIG_KEY`]); all else here is a re-export. [`duration`]: duration strings
//!    (`30s`). [`transport`]: the upstream's wire transport. They use nothing but the root.
//! 2. [`tool_policy`]: which tools clients may call, per-tool grants and rate limits; uses
//!    `duration`.
//! 3. [`proxy_config`]: the proxy's configuration file, and the settings the McpUpstream spec
//!    embeds as they are, one child module each (`audit`, `oauth`, `request_origin`, `session`,
//!    `timeouts`, `tools_probe`, and `upstream` and `downstream_auth` of the file alone) over a
//!    shared `error`; uses `duration`, `transport` and `tool_policy`.
//! 4. [`mcp_upstream`]: the custom resource, one child module per part of the spec that needs
//!    one (`session`, `proxy_auth`, `telemetry`, `pod`, `security`, `network_policy`,
//!    `disruption`); uses every layer below.

pub mod duration;
pub mod mcp_upstream;
pub mod proxy_config;
pub mod tool_policy;
pub mod transport;

pub use duration::{DurationError, DurationString};
pub use mcp_upstream::disruption::PodDisruptionBudgetSpec;
pub use mcp_upstream::network_policy::{EgressPort, EgressRule, NetworkPolicySpec, Protocol};
pub use mcp_upstream::pod::{PodOverrides, RESERVED_POD_ANNOTATIONS, RESERVED_POD_LABELS};
pub use mcp_upstream::proxy_auth::{ProxyAuth, SecretKeyReference};
pub use mcp_upstream::security::{PROXY_RUN_AS_ID, UpstreamCapabilities, UpstreamSecurityContext};
pub use mcp_upstream::session::SessionSettings;
pub use mcp_upstream::telemetry::{TelemetrySpec, TracesSpec};
pub use mcp_upstream::{
    HeaderValueSource, McpUpstream, McpUpstreamSpec, McpUpstreamStatus, ProxySpec, ToolsStatus,
    Transport, UpstreamHeader, UpstreamSpec, UpstreamStatus, crd_yaml,
};
pub use proxy_config::{
    DownstreamAuth, DriftPolicy, HeaderSource, ProxyConfig, ProxyConfigError, SessionSpec,
    SessionStrategy, TimeoutsSpec, ToolsProbePolicy, ToolsProbeSpec, UpstreamEndpoint,
};
pub use tool_policy::{PolicyFinding, ToolGrant, ToolRateLimit, ToolsPolicySpec};

/// API group of every Berth resource.
pub const GROUP: &str = "berth.dev";

/// Port the proxy serves MCP (Streamable HTTP, path [`MCP_PATH`]) on inside a pod.
pub const PROXY_MCP_PORT: u16 = 8080;

/// Port the proxy serves `/metrics`, `/healthz` and `/readyz` on inside a pod.
pub const PROXY_ADMIN_PORT: u16 = 9090;

/// HTTP path of the proxy's MCP endpoint.
pub const MCP_PATH: &str = "/mcp";

/// Key of the proxy configuration inside the ConfigMap the operator renders.
pub const PROXY_CONFIG_KEY: &str = "proxy.yaml";
