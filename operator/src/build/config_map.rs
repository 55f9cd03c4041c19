//! The proxy's configuration: rendered from the spec, stored in the ConfigMap `<name>-proxy`.
//!
//! The proxy reads this file and nothing else, so the operator and the proxy agree through one
//! type, [`ProxyConfig`]. Not responsible for: mounting it (see [`super::deployment`]).

use std::collections::BTreeMap;

use berth_crds::{
    DownstreamAuth, HeaderSource, McpUpstreamSpec, PROXY_CONFIG_KEY, ProxyConfig, Transport,
    UpstreamEndpoint,
};
use k8s_openapi::api::core::v1::ConfigMap;

use super::owner::Owner;
use super::secret::SESSION_KEY_ENV;
use super::stdio::STDIO_SOCKET;
use crate::error::BuildError;

/// Proxy environment variable holding the bearer token clients must present, filled by the
/// kubelet from `spec.proxy.auth.bearerTokenSecretRef`.
pub const DOWNSTREAM_TOKEN_ENV: &str = "BERTH_DOWNSTREAM_TOKEN";

/// Name of the ConfigMap of the McpUpstream named `upstream_name`: `<name>-proxy`.
pub fn name(upstream_name: &str) -> String {
    format!("{upstream_name}-proxy")
}

/// The proxy config for `spec`: MCP on `0.0.0.0:<proxy.port>`, admin on
/// `0.0.0.0:<proxy.adminPort>`; the upstream either the HTTP sidecar on the pod's loopback at
/// `http://127.0.0.1:<port><path>` or, for `Stdio`, the stdio host's socket [`STDIO_SOCKET`];
/// the session strategy resolved for the transport ([`berth_crds::SessionSettings::resolve`]);
/// tools-probe, timeout and tool-policy settings copied unchanged; client auth through
/// [`DOWNSTREAM_TOKEN_ENV`] when `spec.proxy.auth` is set; and session ids always signed with
/// the key in [`SESSION_KEY_ENV`] (field case BR-35).
///
/// Pure and unchecked; [`crate::validate::validate`] calls [`ProxyConfig::check`] on it.
pub fn proxy_config(spec: &McpUpstreamSpec) -> ProxyConfig {
    let transport = spec.upstream.transport;
    let (url, socket) = match transport {
        Transport::StreamableHttp => (
            Some(format!(
                "http://127.0.0.1:{}{}",
                spec.upstream.port, spec.upstream.path
            )),
            None,
        ),
        Transport::Stdio => (None, Some(STDIO_SOCKET.to_owned())),
    };
    ProxyConfig {
        listen: format!("0.0.0.0:{}", spec.proxy.port),
        admin_listen: format!("0.0.0.0:{}", spec.proxy.admin_port),
        upstream: UpstreamEndpoint {
            command: Vec::new(),
            socket,
            max_line_bytes: None,
            transport,
            url,
            headers: spec
                .upstream
                .headers
                .iter()
                .enumerate()
                .map(|(index, header)| HeaderSource {
                    name: header.name.clone(),
                    value: header.value.clone(),
                    value_env: header.value_from.as_ref().map(|_| header_env_var(index)),
                })
                .collect(),
        },
        session: spec.session.resolve(transport),
        tools_probe: spec.tools_probe.clone(),
        timeouts: spec.timeouts.clone(),
        tools: spec.tools.clone(),
        downstream_auth: spec.proxy.auth.as_ref().map(|auth| DownstreamAuth {
            bearer_token_env: auth
                .bearer_token_secret_ref
                .as_ref()
                .map(|_| DOWNSTREAM_TOKEN_ENV.to_owned()),
            oauth: auth.oauth.clone(),
        }),
        session_key_env: Some(SESSION_KEY_ENV.to_owned()),
        request_origin: spec.proxy.request_origin.clone(),
        audit: spec.proxy.audit,
    }
}

/// The proxy environment variable that carries the Secret value of upstream header `index`
/// (`BERTH_UPSTREAM_HEADER_<index>`): the value reaches the proxy through the kubelet, never
/// through the ConfigMap or a command line.
pub fn header_env_var(index: usize) -> String {
    format!("BERTH_UPSTREAM_HEADER_{index}")
}

/// The ConfigMap holding `config` as YAML under [`PROXY_CONFIG_KEY`].
pub(super) fn config_map(owner: &Owner, config: &ProxyConfig) -> Result<ConfigMap, BuildError> {
    let text = config
        .to_yaml()
        .map_err(|source| BuildError::RenderConfig {
            name: owner.name.clone(),
            source,
        })?;
    Ok(ConfigMap {
        metadata: owner.child_metadata(name(&owner.name)),
        data: Some(BTreeMap::from([(PROXY_CONFIG_KEY.to_owned(), text)])),
        ..ConfigMap::default()
    })
}
