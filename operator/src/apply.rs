//! Step 3 of a reconcile: make the cluster hold the built objects, exactly.
//!
//! Server-side apply with field manager [`FIELD_MANAGER`] and `force`: the operator owns every
//! field it sets, so a hand edit of one of them (by another manager) is taken back on the next
//! reconcile, and a deleted object is recreated. Fields the operator does not set are left to
//! whoever owns them. Not responsible for: deleting children (the garbage collector does that
//! through the owner references).

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::FIELD_MANAGER;
use crate::build::Children;
use crate::reconcile::Error;

/// Applies the ConfigMap, then the Service, then the Deployment (so the config the pods mount
/// exists before they do), and returns the Deployment as the API server now holds it, status
/// included.
///
/// # Errors
/// [`Error::Apply`] naming the first object the API server refused.
pub async fn apply(client: &Client, children: &Children) -> Result<Deployment, Error> {
    apply_one(client, &children.config_map).await?;
    apply_one(client, &children.service).await?;
    apply_one(client, &children.deployment).await
}

/// Server-side applies one namespaced object (its serialization carries `apiVersion` and
/// `kind`, as apply requires).
async fn apply_one<K>(client: &Client, object: &K) -> Result<K, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let name = object.name_any();
    let api: Api<K> = match object.namespace() {
        Some(namespace) => Api::namespaced(client.clone(), &namespace),
        None => Api::default_namespaced(client.clone()),
    };
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|source| Error::Apply {
        kind: <K as k8s_openapi::Resource>::KIND,
        name,
        source,
    })
}
