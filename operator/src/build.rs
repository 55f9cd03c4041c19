//! Step 2 of a reconcile: the objects an `McpUpstream` needs, built in memory.
//!
//! Responsible for: the exact shape of every owned object (ConfigMap, Deployment, Service, the
//! session-key Secret, and the optional NetworkPolicy and PodDisruptionBudget), their names,
//! labels and owner references. Pure: nothing here reads or writes the cluster, so every
//! shape is unit-tested from YAML fixtures. Not responsible for: deciding whether the spec is
//! servable ([`crate::validate`] runs first) or sending anything ([`crate::apply`]).

pub mod config_hash;
pub mod config_map;
pub mod deployment;
pub mod network_policy;
pub mod pod;
pub mod pod_disruption_budget;
pub mod secret;
pub mod service;
pub mod stdio;

use berth_crds::{McpUpstream, ProxyConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::labels;

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

/// An McpUpstream whose children cannot be built. Never caused by the spec itself (that is
/// [`crate::validate::InvalidSpec`]); only by an object that did not come from the API server.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The object lacks metadata the API server always sets (namespace, uid).
    #[error("mcpupstream {name} has no metadata.{field}")]
    MissingMetadata {
        /// The object's name, possibly empty.
        name: String,
        /// The absent field.
        field: &'static str,
    },
    /// The proxy config did not serialize to YAML.
    #[error("failed to render proxy config of {name}")]
    RenderConfig {
        /// The McpUpstream's name.
        name: String,
        /// The serializer's error.
        #[source]
        source: serde_yaml::Error,
    },
    /// No random bytes for a new session key.
    #[error("failed to generate the session key of {name}")]
    GenerateSessionKey {
        /// Name of the Secret.
        name: String,
        /// The random source's error.
        #[source]
        source: getrandom::Error,
    },
}

impl BuildError {
    /// Bounded label for metrics and Event reasons.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingMetadata { .. } => "missing_metadata",
            Self::RenderConfig { .. } => "render_config",
            Self::GenerateSessionKey { .. } => "generate_session_key",
        }
    }
}

/// Identity shared by every child: where it lives and who owns it.
#[derive(Clone, Debug)]
struct Owner {
    name: String,
    namespace: String,
    reference: OwnerReference,
}

impl Owner {
    fn of(upstream: &McpUpstream) -> Result<Self, BuildError> {
        let name = upstream.name_any();
        let missing = |field| BuildError::MissingMetadata {
            name: name.clone(),
            field,
        };
        let namespace = upstream.namespace().ok_or_else(|| missing("namespace"))?;
        let reference = upstream
            .controller_owner_ref(&())
            .ok_or_else(|| missing("uid"))?;
        Ok(Self {
            name: name.clone(),
            namespace,
            reference: OwnerReference {
                block_owner_deletion: Some(true),
                ..reference
            },
        })
    }

    /// Metadata of a child called `name`: namespace, the standard labels and a controller
    /// owner reference (so the garbage collector deletes it with its McpUpstream).
    fn child_metadata(&self, name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels::labels(&self.name)),
            owner_references: Some(vec![self.reference.clone()]),
            ..ObjectMeta::default()
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
