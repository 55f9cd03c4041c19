//! The proxy's configuration: rendered from the spec, stored in the ConfigMap `<name>-proxy`.
//!
//! The proxy reads this file and nothing else, so the operator and the proxy agree through one
//! type, [`ProxyConfig`]. Not responsible for: mounting it (see [`super::deployment`]).

use std::collections::BTreeMap;

use berth_crds::{
    McpUpstreamSpec, PROXY_ADMIN_PORT, PROXY_CONFIG_KEY, PROXY_MCP_PORT, ProxyConfig, Transport,
    UpstreamEndpoint,
};
use k8s_openapi::api::core::v1::ConfigMap;

use super::{BuildError, Owner};

/// Name of the ConfigMap of the McpUpstream named `upstream_name`: `<name>-proxy`.
pub fn name(upstream_name: &str) -> String {
    format!("{upstream_name}-proxy")
}

/// The proxy config for `spec`: MCP on `0.0.0.0:8080`, admin on `0.0.0.0:9090`, the upstream
/// sidecar reached on the pod's loopback at `http://127.0.0.1:<port><path>`, and the session,
/// tools-probe and timeout settings copied unchanged (they are the same types).
///
/// Pure and unchecked; [`crate::validate::validate`] calls [`ProxyConfig::check`] on it.
pub fn proxy_config(spec: &McpUpstreamSpec) -> ProxyConfig {
    ProxyConfig {
        listen: format!("0.0.0.0:{PROXY_MCP_PORT}"),
        admin_listen: format!("0.0.0.0:{PROXY_ADMIN_PORT}"),
        upstream: UpstreamEndpoint {
            transport: Transport::StreamableHttp,
            url: Some(format!(
                "http://127.0.0.1:{}{}",
                spec.upstream.port, spec.upstream.path
            )),
        },
        session: spec.session.clone(),
        tools_probe: spec.tools_probe.clone(),
        timeouts: spec.timeouts.clone(),
    }
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
