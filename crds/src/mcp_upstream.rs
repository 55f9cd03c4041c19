//! The `McpUpstream` custom resource (`berth.dev/v1alpha1`): one MCP server a user wants run
//! behind the berth proxy.
//!
//! Field doc comments here are user documentation: they become the CRD's `description`s and so
//! what `kubectl explain mcpupstream.spec` prints.

pub mod disruption;
pub mod network_policy;
pub mod pod;
pub mod proxy_auth;
pub mod security;
pub mod session;
pub mod telemetry;

// Defined in `transport`, below this module and the proxy config, which both name it.
pub use crate::transport::Transport;

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, ResourceRequirements, SecretKeySelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::core::crd::CustomResourceExt;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::proxy_config::{TimeoutsSpec, ToolsProbeSpec};
use crate::tool_policy::ToolsPolicySpec;
use disruption::PodDisruptionBudgetSpec;
use network_policy::NetworkPolicySpec;
use pod::PodOverrides;
use proxy_auth::ProxyAuth;
use security::UpstreamSecurityContext;
use session::SessionSettings;
use telemetry::TelemetrySpec;

/// An MCP server run in production behind the berth proxy.
///
/// The operator turns it into a Deployment whose pods pair the berth proxy with the upstream MCP
/// server as a digest-pinned native sidecar, a Service in front of the proxy, a ConfigMap
/// holding the proxy's configuration and a Secret `<name>-session-key` holding the key that
/// signs client session ids (so any replica accepts a session another issued), a NetworkPolicy
/// admitting only the proxy's ports (on by default) and an optional PodDisruptionBudget.
/// Deleting the McpUpstream deletes them all.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "berth.dev",
    version = "v1alpha1",
    kind = "McpUpstream",
    plural = "mcpupstreams",
    shortname = "mcpu",
    namespaced,
    status = "McpUpstreamStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Transport","type":"string","jsonPath":".spec.upstream.transport"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.proxy) || (has(self.upstream.transport) && self.upstream.transport == 'Stdio') || (self.upstream.port != self.proxy.port && self.upstream.port != self.proxy.adminPort)").message("spec.upstream.port must differ from spec.proxy.port and spec.proxy.adminPort (the proxy's own ports)"))]
#[x_kube(validation = Rule::new("!has(self.podDisruptionBudget) || !has(self.podDisruptionBudget.minAvailable) || type(self.podDisruptionBudget.minAvailable) != int || self.podDisruptionBudget.minAvailable < (has(self.replicas) ? self.replicas : 1)").message("spec.podDisruptionBudget.minAvailable must be less than spec.replicas: a budget that keeps every replica available never allows a disruption, so node drains block; lower minAvailable or raise replicas"))]
#[x_kube(validation = Rule::new("!has(self.tools) || !has(self.tools.grants) || (has(self.proxy) && has(self.proxy.auth) && has(self.proxy.auth.oauth))").message("spec.tools.grants needs spec.proxy.auth.oauth: grants match the claims of OAuth access tokens"))]
#[x_kube(validation = Rule::new("!has(self.toolsProbe) || !has(self.toolsProbe.policy) || self.toolsProbe.policy != 'Never' || !has(self.tools) || ((!has(self.tools.readOnly) || !self.tools.readOnly) && (!has(self.tools.grants) || self.tools.grants.all(g, !has(g.readOnly) || !g.readOnly)))").message("spec.toolsProbe.policy Never cannot serve spec.tools.readOnly or a readOnly grant: readOnlyHint comes from the proxy's own tool listing"))]
pub struct McpUpstreamSpec {
    /// The upstream MCP server: its image, transport and how it listens.
    pub upstream: UpstreamSpec,
    /// The berth proxy container: its ports, resources and client authentication. Default:
    /// `{port: 8080, adminPort: 9090}`.
    #[serde(default)]
    pub proxy: ProxySpec,
    /// How client sessions map onto upstream sessions. Default: `Shared` strategy for HTTP
    /// upstreams, `PerClient` for stdio ones; `{idleTimeout: 30m, maxSessions: 16,
    /// replayBufferMiB: 32}`.
    #[serde(default)]
    pub session: SessionSettings,
    /// When the proxy lists the upstream's tools. Readiness waits for the first listing unless
    /// the policy is `Never`. Default: `{policy: OnStart, interval: 5m}`.
    #[serde(default)]
    pub tools_probe: ToolsProbeSpec,
    /// Time budgets the proxy enforces. Default: `{connect: 10s, call: 60s}`.
    #[serde(default)]
    pub timeouts: TimeoutsSpec,
    /// Which upstream tools clients may see and call. Default: every tool.
    #[serde(default, skip_serializing_if = "is_default")]
    pub tools: ToolsPolicySpec,
    /// Number of pods, 1-1000. Every replica accepts every client session (session ids are
    /// signed with the shared key in the Secret `<name>-session-key`, field case BR-35), so the
    /// Service needs no session affinity; each replica keeps its own upstream session.
    /// With `podDisruptionBudget.minAvailable: N` (a number), `replicas` must be above `N`, so
    /// that a node drain can evict a pod (its replacement starts elsewhere first).
    /// Default `1`.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub replicas: i32,
    /// Scheduling and metadata of the pods: nodeSelector, tolerations, affinity,
    /// priorityClassName, serviceAccountName, imagePullSecrets, extra labels and annotations.
    /// Default: none.
    #[serde(default, skip_serializing_if = "is_default")]
    pub pod: PodOverrides,
    /// The NetworkPolicy `<name>`: ingress only to the proxy's MCP and admin ports (on by
    /// default; `{ingress: false}` opts out), and with `enabled: true` egress only to DNS and
    /// the listed destinations (off by default). Default: `{ingress: true, enabled: false}`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub network_policy: NetworkPolicySpec,
    /// An optional PodDisruptionBudget, for example `{minAvailable: 1}` with `replicas: 2`. It
    /// must allow at least one disruption at `replicas` (see its fields). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetSpec>,
    /// OpenTelemetry traces of the proxy, exported with OTLP over HTTP with protobuf (a
    /// collector's port 4318; gRPC is not supported), for example
    /// `{traces: {endpoint: http://otel-collector.observability.svc:4318, samplingRatio: 0.1}}`.
    /// Default: none (traces off).
    #[serde(default, skip_serializing_if = "is_default")]
    pub telemetry: TelemetrySpec,
}

fn default_replicas() -> i32 {
    1
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The berth proxy container of each pod.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.port != self.adminPort").message("spec.proxy.adminPort must differ from spec.proxy.port"))]
pub struct ProxySpec {
    /// TCP port the proxy serves MCP (Streamable HTTP, path `/mcp`) on; also the Service port.
    /// Default `8080`.
    #[serde(default = "default_proxy_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// TCP port of the proxy's `/metrics`, `/healthz`, `/readyz` and `/tools` (the tool count
    /// and fingerprint the operator reads into status). Default `9090`.
    #[serde(default = "default_admin_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub admin_port: i32,
    /// CPU and memory requests and limits of the proxy container, in the Kubernetes form, for
    /// example `{requests: {cpu: 50m, memory: 32Mi}, limits: {memory: 128Mi}}`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Client authentication, for example
    /// `{bearerTokenSecretRef: {name: weather-clients, key: token}}`. Default: none (any client
    /// that reaches the Service may connect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ProxyAuth>,
    /// Browser origins and `Host` names the MCP endpoint accepts, so a web page a user visits
    /// cannot reach it through DNS rebinding, for example
    /// `{allowedOrigins: ["https://inspector.example.com"]}`. Default: requests without `Origin`
    /// (clients that are not browsers) and from loopback origins, with any `Host`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub request_origin: crate::proxy_config::request_origin::RequestOriginSpec,
    /// Audit events: `Stdout` (default), one JSON line on the proxy container's standard
    /// output per `tools/call` (time, McpUpstream, caller `sub` and client id, tool, a SHA-256
    /// digest of the arguments but never the arguments, decision, outcome, duration,
    /// downstream session id) and per request refused for want of a valid credential; the
    /// log is on standard error. `Off`: none. Fields: `docs/audit.md`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub audit: crate::proxy_config::audit::AuditLog,
    /// What one client, connection or upstream reply may cost the proxy: request and reply
    /// sizes, header and body read deadlines, the keep-alive idle timeout, connection caps
    /// (in total and per source address), the largest bearer token, and the audit queue. Every
    /// limit has a safe default; see `proxy/README.md`, "Limits", for each one's metric.
    /// Example: `{maxRequestBytes: 1048576, maxConnectionsPerSource: 1024}`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: crate::proxy_config::limits::LimitsSpec,
}

impl Default for ProxySpec {
    fn default() -> Self {
        Self {
            port: default_proxy_port(),
            admin_port: default_admin_port(),
            resources: None,
            auth: None,
            request_origin: Default::default(),
            audit: Default::default(),
            limits: Default::default(),
        }
    }
}

fn default_proxy_port() -> i32 {
    i32::from(crate::PROXY_MCP_PORT)
}

fn default_admin_port() -> i32 {
    i32::from(crate::PROXY_ADMIN_PORT)
}

/// The upstream MCP server container, run as a native sidecar next to the proxy.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.transport) || self.transport != 'Stdio' || !has(self.headers)").message("spec.upstream.headers apply only to StreamableHttp upstreams; a Stdio server gets settings through spec.upstream.env"))]
#[x_kube(validation = Rule::new("!has(self.transport) || self.transport != 'Stdio' || has(self.command)").message("spec.upstream.command is required when spec.upstream.transport is Stdio (the operator cannot read the image's entrypoint)"))]
pub struct UpstreamSpec {
    /// Container image of the MCP server, pinned by digest: `name@sha256:<64 lowercase hex>`,
    /// for example `ghcr.io/acme/mcp-server@sha256:3f1c...`. Tags alone (`:latest`) are rejected
    /// so that what runs is exactly what was reviewed.
    #[x_kube(validation = Rule::new("self.matches('^[^@\\\\s]+@sha256:[a-f0-9]{64}$')").message("spec.upstream.image must be pinned by digest: name@sha256:<64 lowercase hex>, for example registry.example/mcp/server@sha256:<digest>"))]
    #[schemars(length(max = 512))]
    pub image: String,
    /// How the proxy talks to the server. `StreamableHttp` (default): the server serves MCP
    /// Streamable HTTP on `port` and `path` on the pod's loopback. `Stdio`: the server speaks
    /// newline-delimited JSON-RPC on stdin/stdout; the sidecar runs a berth stdio host that
    /// starts one server process (`command` plus `args`) per client session, at most
    /// `spec.session.maxSessions`. `Stdio` requires `command`; `port` and `path` are unused.
    #[serde(default)]
    pub transport: Transport,
    /// TCP port the server listens on inside the pod (loopback is enough), 1-65535. Must differ
    /// from the proxy's ports (`spec.proxy.port`, `spec.proxy.adminPort`). Unused for `Stdio`.
    /// Default `3000`.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// HTTP path of the server's MCP endpoint. Must start with `/`. Default `/mcp`.
    #[serde(default = "default_path")]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("spec.upstream.path must start with /"))]
    pub path: String,
    /// The server's program and its leading arguments, for example `["node", "dist/index.js"]`
    /// or `["mcp-server-time"]`. With `StreamableHttp` it replaces the image's entrypoint
    /// (default: the image's own `ENTRYPOINT`). With `Stdio` it is required: the operator cannot
    /// read an image's entrypoint, and the stdio host runs `command` then `args` for each
    /// client session. At most 64 entries; neither the list nor its first entry may be empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("size(self) > 0 && size(self[0]) > 0").message("spec.upstream.command must not be empty: give the program to run, for example [\"mcp-server-time\"]"))]
    pub command: Option<Vec<String>>,
    /// Arguments passed after `command` (or to the image's entrypoint), for example
    /// `["streamableHttp"]`. Default: none (the image's own `CMD`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables of the server container, in the Kubernetes `EnvVar` form
    /// (`value` or `valueFrom`). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Whole ConfigMaps or Secrets exposed as environment variables of the server container,
    /// in the Kubernetes `envFrom` form, for example `[{secretRef: {name: weather-api}}]`.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<EnvFromSource>,
    /// CPU and memory requests and limits of the server container (for stdio: of all its
    /// server processes together), for example `{limits: {memory: 512Mi}}`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Security overrides of the server container, limited to what the `restricted` Pod
    /// Security profile allows, for example `{runAsUser: 1000, readOnlyRootFilesystem: true}`.
    /// Default: none (non-root user 65532, no privilege escalation, every capability dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<UpstreamSecurityContext>,
    /// HTTP headers the proxy presents on every request to the upstream (for example an
    /// `Authorization` the upstream requires). Each takes its value from a Secret key
    /// (`valueFrom.secretKeyRef`, recommended) or a literal `value`. The proxy reads Secret values
    /// from its environment; they never appear on a command line, in logs, status, Events or
    /// metrics. The upstream credential is the proxy's own: clients' headers are never forwarded.
    /// The proxy follows no HTTP redirect, so the headers only ever reach the configured upstream
    /// (a 3xx answer is an upstream error). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub headers: Vec<UpstreamHeader>,
}

/// One header for upstream requests: `name` and exactly one of `value` or `valueFrom`.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.value) != has(self.valueFrom)").message("spec.upstream.headers: each header needs exactly one of value or valueFrom.secretKeyRef"))]
pub struct UpstreamHeader {
    /// Header name, e.g. `Authorization` or `X-Api-Key`. Headers the MCP transport sets itself
    /// (`Mcp-Session-Id`, `Mcp-Protocol-Version`, `Content-Type`, `Accept`, `Host`,
    /// `Content-Length`, `Last-Event-ID`) cannot be set.
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
    )]
    #[x_kube(validation = Rule::new("!(self.lowerAscii() in ['mcp-session-id', 'mcp-protocol-version', 'content-type', 'accept', 'host', 'content-length', 'last-event-id'])").message("spec.upstream.headers[*].name is a header the MCP transport sets itself"))]
    pub name: String,
    /// A literal value. Stored in the proxy's ConfigMap: prefer `valueFrom` for credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8192))]
    pub value: Option<String>,
    /// Where the value comes from: `secretKeyRef: {name, key}` of a Secret in the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<HeaderValueSource>,
}

/// The source of a header value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderValueSource {
    /// A key of a Secret in the McpUpstream's namespace.
    pub secret_key_ref: SecretKeySelector,
}

/// Observed state of an McpUpstream, written by the operator.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpUpstreamStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions, each with its own `observedGeneration`:
    /// `Ready` (the proxy Deployment is available and its proxies answer the operator),
    /// `Progressing` (a rollout is under way), `Degraded` (serving, or trying to, with a fault:
    /// a stalled rollout, missing replicas, an allowed tool the upstream lacks, a failed apply),
    /// `UpstreamReady` (at least one pod is ready, i.e. the proxy's `/readyz` holds an
    /// initialized upstream session; the message carries the proxy's reason otherwise) and
    /// `ToolsDiscovered` (the proxy listed the upstream's tools; count and fingerprint in
    /// `status.tools`, reason `AllowedToolMissing` naming the tools `spec.tools.allow` lists but
    /// the upstream lacks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// In-cluster URL clients use to reach the proxy, e.g.
    /// `http://weather.team-a.svc.cluster.local:8080/mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The upstream image as pinned in the spec and as the running pods report it, so the two
    /// can be compared. Absent until a pod reports its containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamStatus>,
    /// The upstream's tools as the proxy last listed them (read from the proxy's admin endpoint
    /// `/tools`). Absent until a running proxy answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsStatus>,
    /// The `metadata.uid` of the session-key Secret (`<name>-session-key`) the operator
    /// created for this McpUpstream, recorded from the API server's answer to the create.
    /// The operator holds no right to read Secrets (issue 40, item 6), so this record is how it
    /// knows the Secret of that name is its own: when the create finds a Secret already there
    /// and nothing records that the operator made it, the McpUpstream reports `Ready=False`
    /// with reason `NameConflict` naming the Secret, and its pods are not given that Secret.
    /// Compare it with `kubectl get secret <name>-session-key -o jsonpath='{.metadata.uid}'`
    /// to check the Secret in place is the one the operator made. Absent until the operator
    /// created the Secret (and for McpUpstreams whose Secret an earlier operator version
    /// created). Written by the operator only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key_secret_uid: Option<String>,
}

/// What runs as the upstream container, from the pods' `status.initContainerStatuses` (the
/// upstream is a native sidecar).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamStatus {
    /// The image the spec pins, copied from `spec.upstream.image`, e.g.
    /// `docker.io/mcp/everything@sha256:<64 hex>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The image ID the container runtime reports for the running upstream container
    /// (`containerStatuses[].imageID`), e.g. `docker.io/mcp/everything@sha256:<64 hex>`. When
    /// the pods disagree (a rollout), the first ready pod's, else the first reporting pod's.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Whether the digest of `imageID` equals the digest pinned in `image`. Absent when no pod
    /// reports an image ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_matches: Option<bool>,
}

/// The tool list a running proxy reports (`GET /tools` on its admin port).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsStatus {
    /// Number of upstream tools the proxy exposes after `spec.tools` filtering.
    pub count: i64,
    /// `sha256:<64 hex>` over the exposed tools' names and input schemas; pin it in
    /// `spec.toolsProbe.expectedFingerprint` to block drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Names in `spec.tools.allow` the upstream does not offer (issue 7); empty when all exist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

fn default_port() -> i32 {
    3000
}

fn default_path() -> String {
    "/mcp".to_owned()
}

/// The CRD of [`McpUpstream`] as YAML, exactly as committed under `crds/` and in the chart.
///
/// # Errors
/// Only if YAML serialization fails.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let mut crd = serde_json::to_value(McpUpstream::crd())
        .map_err(<serde_yaml::Error as serde::ser::Error>::custom)?;
    unwrap_descriptions(&mut crd);
    let text = serde_yaml::to_string(&crd)?;
    Ok(format!(
        "# Generated from the Rust types in crds/src by `cargo run -p berth-operator -- crd`.\n\
         # Do not edit: a test fails when this file differs from what the types generate.\n{text}"
    ))
}

/// Joins the hard-wrapped lines of every `description` (doc comments wrap at 100 columns) so
/// `kubectl explain` reflows them; blank lines stay paragraph breaks.
fn unwrap_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, entry) in map.iter_mut() {
                match entry {
                    serde_json::Value::String(text) if key == "description" => {
                        *text = text
                            .split("\n\n")
                            .map(|paragraph| {
                                paragraph
                                    .split('\n')
                                    .map(str::trim)
                                    .collect::<Vec<_>>()
                                    .join(" ")
                            })
                            .collect::<Vec<_>>()
                            .join("\n\n");
                    }
                    other => unwrap_descriptions(other),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_has_status_subresource_and_short_name() {
        let crd = McpUpstream::crd();
        assert_eq!(crd.spec.group, crate::GROUP);
        assert_eq!(crd.spec.names.short_names, Some(vec!["mcpu".to_owned()]));
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Ready", "Transport", "Endpoint", "Age"]);
    }

    #[test]
    fn crd_image_rule_message_names_the_field() {
        let yaml = crd_yaml().expect("crd renders");
        assert!(yaml.contains("x-kubernetes-validations"));
        assert!(yaml.contains("spec.upstream.image must be pinned by digest"));
    }

    #[test]
    fn crd_pod_metadata_rules_reject_every_reserved_key() {
        let yaml = crd_yaml().expect("crd renders");
        for key in pod::RESERVED_POD_LABELS
            .iter()
            .chain(&pod::RESERVED_POD_ANNOTATIONS)
        {
            assert!(
                yaml.contains(&format!("'{key}'")),
                "{key} not in a CEL rule"
            );
        }
    }

    #[test]
    fn spec_minimal_yaml_gets_defaults() {
        let spec: McpUpstreamSpec = serde_yaml::from_str(
            "upstream: {image: 'r/x@sha256:0000000000000000000000000000000000000000000000000000000000000000'}",
        )
        .expect("parses");
        assert_eq!(spec.upstream.transport, Transport::StreamableHttp);
        assert_eq!(spec.upstream.port, 3000);
        assert_eq!(spec.upstream.path, "/mcp");
    }
}
