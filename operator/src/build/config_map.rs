//! The proxy's configuration, stored in the ConfigMap `<name>-proxy`.
//!
//! The proxy reads this file and nothing else, so the operator and the proxy agree through one
//! type, [`ProxyConfig`]. Not responsible for: what the config says (rendered from the spec by
//! [`crate::render::proxy_config`]) or mounting it (see [`super::deployment`]).

use std::collections::BTreeMap;

use berth_crds::{PROXY_CONFIG_KEY, ProxyConfig};
use k8s_openapi::api::core::v1::ConfigMap;

use super::owner::Owner;
use crate::error::BuildError;

/// Name of the ConfigMap of the McpUpstream named `upstream_name`: `<name>-proxy`.
pub fn name(upstream_name: &str) -> String {
    format!("{upstream_name}-proxy")
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
