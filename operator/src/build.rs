//! Step 2 of a reconcile: the objects an `McpUpstream` needs, built in memory.
//!
//! Responsible for: the exact shape of every owned object (ConfigMap, Deployment, Service, the
//! session-key Secret, the NetworkPolicy (on by default) and the optional
//! PodDisruptionBudget), their names, labels and owner references. Pure: nothing here reads or writes the cluster, so every
//! shape is unit-tested from YAML fixtures. Not responsible for: deciding whether the spec is
//! servable ([`crate::validate`] runs first) or sending anything ([`crate::apply`]).

pub mod config_hash;
pub mod config_map;
pub mod container;
pub mod deployment;
pub mod network_policy;
mod owner;
pub mod pod;
pub mod pod_disruption_budget;
pub mod secret;
pub mod service;
pub mod stdio;

// The error of `build` lives in `error`, below every step (issue 17); still reachable here.
pub use crate::error::BuildError;

use berth_crds::{McpUpstream, ProxyConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use owner::Owner;

/// Every object one McpUpstream owns, ready for server-side apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    /// `<name>-proxy`: the rendered proxy config under [`berth_crds::PROXY_CONFIG_KEY`].
    pub config_map: ConfigMap,
    /// `<name>`: the proxy and the upstream sidecar.
    pub deployment: Deployment,
    /// `<name>`: ClusterIP in front of the proxy's MCP port.
    pub service: Service,
    /// `<name>-session-key`, without its key: created once with a fresh key, never applied
    /// ([`secret::with_key`]).
    pub session_key: Secret,
    /// `<name>` when `spec.networkPolicy.enabled`.
    pub network_policy: Optional<NetworkPolicy>,
    /// `<name>` when `spec.podDisruptionBudget` is set.
    pub pod_disruption_budget: Optional<PodDisruptionBudget>,
}

/// A child the spec may or may not ask for.
#[derive(Clone, Debug, PartialEq)]
pub enum Optional<K> {
    /// The spec asks for it: apply it.
    Wanted(K),
    /// The spec does not: delete `namespace/name` if the McpUpstream with uid `owner_uid`
    /// controls it.
    Unwanted {
        /// Namespace of the McpUpstream.
        namespace: String,
        /// Name the child has when wanted.
        name: String,
        /// `metadata.uid` of the McpUpstream, so only its own child is deleted.
        owner_uid: String,
    },
}

impl<K> Optional<K> {
    fn of(wanted: Option<K>, owner: &Owner) -> Self {
        match wanted {
            Some(child) => Self::Wanted(child),
            None => Self::Unwanted {
                namespace: owner.namespace.clone(),
                name: owner.name.clone(),
                owner_uid: owner.reference.uid.clone(),
            },
        }
    }
}

/// Builds every child of `upstream`: ConfigMap, Deployment, Service, session-key Secret (without
/// its key), and NetworkPolicy and PodDisruptionBudget as the spec asks.
///
/// `config` is the proxy config [`crate::validate::validate`] returned; `proxy_image` the berth
/// proxy image to run.
///
/// # Errors
/// [`BuildError`] when `upstream` lacks a namespace or uid, or the config does not serialize.
pub fn build(
    upstream: &McpUpstream,
    proxy_image: &str,
    config: &ProxyConfig,
) -> Result<Children, BuildError> {
    let owner = Owner::of(upstream)?;
    let config_map = config_map::config_map(&owner, config)?;
    let deployment = deployment::deployment(&owner, &upstream.spec, proxy_image, &config_map);
    let service = service::service(&owner, upstream.spec.proxy.port);
    let session_key = secret::session_key(&owner);
    let network_policy = Optional::of(
        network_policy::network_policy(&owner, &upstream.spec),
        &owner,
    );
    let pod_disruption_budget = Optional::of(
        pod_disruption_budget::pod_disruption_budget(&owner, &upstream.spec),
        &owner,
    );
    Ok(Children {
        config_map,
        deployment,
        service,
        session_key,
        network_policy,
        pod_disruption_budget,
    })
}

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod tests;
