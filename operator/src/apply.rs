//! Step 3 of a reconcile: make the cluster hold the built objects, exactly, and write nothing
//! when it already does, and never touch an object this McpUpstream does not own.
//!
//! Ownership first (issue 40, "the operator never trespasses"): every child but the
//! session-key Secret is read before anything is written, and a child whose name is taken by an object without this McpUpstream's
//! controller owner reference (matched by uid) stops the reconcile with
//! [`Error::NameConflict`] before any write: the foreign object is never modified, adopted or
//! deleted, and the children already created stay as they are.
//!
//! Server-side apply with field manager [`FIELD_MANAGER`]. An object the operator owns is applied
//! with `force`: the operator owns every field it sets, so a hand edit of one of them (by another
//! manager) is taken back on the next reconcile. An absent object is created by an apply without
//! `force`, so one that someone else created between the read and the write makes the apply fail
//! with a conflict (reported as [`Error::NameConflict`]) instead of being taken over. Fields the
//! operator does not set are left to whoever owns them. (A foreign object made between the read
//! and the write that sets none of the operator's fields is merged by the API server, not
//! refused: that window is one round trip long, and the next reconcile reports the conflict only
//! if the owner reference is not the operator's.)
//!
//! Steady state costs no write: [`Applied`] remembers, per child, a hash of the object last
//! applied and a fingerprint of the child as the API server returned it. Each reconcile reads
//! the child (a GET, never a write) and applies only when the desired object or the fingerprint
//! changed, or the child is gone. The fingerprint is the `resourceVersion` for kinds without
//! `metadata.generation` (ConfigMap, Service), and for kinds with one (Deployment) the
//! generation plus the values of the labels and annotations the operator sets and the owner
//! references, so status updates by other controllers do not trigger applies. After an
//! operator restart every child is applied once.
//!
//! Two children are handled differently. The session-key Secret is created once and never
//! applied again, so its random key survives reconciles and operator restarts; the operator
//! cannot read Secrets, so its ownership is recorded in status instead of read
//! ([`session_key`], issue 40, item 6). The NetworkPolicy (on by default) and the optional
//! PodDisruptionBudget are deleted when the spec stops asking for them, and only when this
//! McpUpstream owns them (`remove_unwanted`).
//!
//! Not responsible for: deleting children of a deleted McpUpstream (the garbage collector does
//! that through the owner references).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, PoisonError};

use berth_crds::McpUpstream;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::FIELD_MANAGER;
use crate::build::{Children, Optional};
use crate::error::Error;
use crate::metrics::Metrics;

pub mod session_key;

pub use session_key::SessionKeys;

/// What the operator last applied to each child, so an unchanged child is not applied again.
///
/// Entries of deleted McpUpstreams stay until the operator restarts (a few dozen bytes each).
#[derive(Debug, Default)]
pub struct Applied {
    records: Mutex<HashMap<ChildKey, Record>>,
    /// The session-key Secrets created or found, so steady state sends no create.
    session_keys: SessionKeys,
}

/// Kind, namespace and name of a child.
type ChildKey = (&'static str, String, String);

/// The record of an optional child known to be absent (no real object hashes to all zeros
/// in both fields in practice; at worst one more GET).
const ABSENT: Record = Record {
    desired: 0,
    observed: 0,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    /// Hash of the serialized object last applied.
    desired: u64,
    /// [`fingerprint`] of the child as the API server returned it after that apply.
    observed: u64,
}

impl Applied {
    fn is_current(&self, key: &ChildKey, record: Record) -> bool {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            == Some(&record)
    }

    fn remember(&self, key: ChildKey, record: Record) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, record);
    }

    fn forget(&self, key: &ChildKey) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

/// Reads every child but the session-key Secret, then makes sure the Secret exists and is
/// `upstream`'s ([`session_key`]: created, never read), applies the ConfigMap and
/// the Service, applies or removes the NetworkPolicy and PodDisruptionBudget, then applies the
/// Deployment (so what the pods mount exists before they do), and returns the Deployment as the
/// API server now holds it, status included. `children` are built from `upstream`. A child
/// that already matches what was last applied is read, not written; every write is counted in
/// `metrics`.
///
/// # Errors
/// [`Error::NameConflict`] naming the first child whose name is taken by an object this
/// McpUpstream does not control (nothing is written then; for the Secret, see
/// [`session_key`]), [`Error::Apply`] naming the first object the API server refused
/// (read or write), [`Error::PatchStatus`] when a created Secret's uid cannot be recorded, or
/// [`Error::Build`] when no session key could be generated.
pub async fn apply(
    client: &Client,
    applied: &Applied,
    metrics: &Metrics,
    upstream: &McpUpstream,
    children: &Children,
) -> Result<Deployment, Error> {
    let config_map = read_owned(client, &children.config_map).await?;
    let service = read_owned(client, &children.service).await?;
    let network_policy = read_optional(client, &children.network_policy).await?;
    let pod_disruption_budget = read_optional(client, &children.pod_disruption_budget).await?;
    let deployment = read_owned(client, &children.deployment).await?;

    session_key::ensure(
        client,
        &applied.session_keys,
        metrics,
        upstream,
        &children.session_key,
        deployment.is_some(),
    )
    .await?;
    apply_one(client, applied, metrics, &children.config_map, config_map).await?;
    apply_one(client, applied, metrics, &children.service, service).await?;
    apply_optional(
        client,
        applied,
        metrics,
        &children.network_policy,
        network_policy,
    )
    .await?;
    apply_optional(
        client,
        applied,
        metrics,
        &children.pod_disruption_budget,
        pod_disruption_budget,
    )
    .await?;
    apply_one(client, applied, metrics, &children.deployment, deployment).await
}

/// The uid of the controller owner reference `object` carries, if any.
fn controller_uid(object: &impl Resource) -> Option<&str> {
    object
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// The API handle for `object`'s namespace (the client's default one when it has none).
fn api_for<K: Child>(client: &Client, object: &K) -> Api<K> {
    match object.namespace() {
        Some(namespace) => Api::namespaced(client.clone(), &namespace),
        None => Api::default_namespaced(client.clone()),
    }
}

/// Reads the object the built child `desired` would be: `None` when absent, the object when its
/// controller owner reference is the one `desired` carries (same uid).
///
/// # Errors
/// [`Error::NameConflict`] when the object exists without that controller reference,
/// [`Error::Apply`] when the read is refused.
async fn read_owned<K: Child>(client: &Client, desired: &K) -> Result<Option<K>, Error> {
    let kind = <K as k8s_openapi::Resource>::KIND;
    let name = desired.name_any();
    let current = api_for(client, desired)
        .get_opt(&name)
        .await
        .map_err(|source| Error::Apply {
            kind,
            name: name.clone(),
            source,
        })?;
    match current {
        Some(current)
            if controller_uid(&current).is_none_or(|uid| controller_uid(desired) != Some(uid)) =>
        {
            Err(Error::NameConflict { kind, name })
        }
        current => Ok(current),
    }
}

/// [`read_owned`] for a wanted optional child; `None` for an unwanted one (its removal reads it,
/// and a foreign object of that name is simply left alone).
async fn read_optional<K: Child>(client: &Client, child: &Optional<K>) -> Result<Option<K>, Error> {
    match child {
        Optional::Wanted(object) => read_owned(client, object).await,
        Optional::Unwanted { .. } => Ok(None),
    }
}

/// A namespaced child object the operator applies by server-side apply.
trait Child:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + k8s_openapi::Resource
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
{
}

impl<K> Child for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
{
}

/// Applies a wanted optional child (`current` is what [`read_optional`] returned), or removes an
/// unwanted one.
async fn apply_optional<K>(
    client: &Client,
    applied: &Applied,
    metrics: &Metrics,
    child: &Optional<K>,
    current: Option<K>,
) -> Result<(), Error>
where
    K: Child,
{
    match child {
        Optional::Wanted(object) => apply_one(client, applied, metrics, object, current)
            .await
            .map(drop),
        Optional::Unwanted {
            namespace,
            name,
            owner_uid,
        } => remove_unwanted::<K>(client, applied, metrics, (namespace, name), owner_uid).await,
    }
}

/// Deletes the child `name` of kind `K` if it exists and its controller is the McpUpstream with
/// uid `owner_uid` (a same-named object someone else made is left alone). The delete carries a
/// uid precondition, so an object replaced in between is not touched.
async fn remove_unwanted<K>(
    client: &Client,
    applied: &Applied,
    metrics: &Metrics,
    (namespace, name): (&str, &str),
    owner_uid: &str,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + DeserializeOwned,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let key: ChildKey = (kind, namespace.to_owned(), name.to_owned());
    // Once seen absent, it stays absent until this operator applies it: only the operator
    // creates objects its McpUpstream controls.
    if applied.is_current(&key, ABSENT) {
        return Ok(());
    }
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let failed = |source| Error::Apply {
        kind,
        name: name.to_owned(),
        source,
    };
    let Some(current) = api.get_opt(name).await.map_err(failed)? else {
        applied.remember(key, ABSENT);
        return Ok(());
    };
    if controller_uid(&current) != Some(owner_uid) {
        applied.forget(&key);
        return Ok(());
    }
    metrics.count_write(kind);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: current.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
        Err(err) => return Err(failed(err)),
    }
    applied.remember(key, ABSENT);
    Ok(())
}

/// Server-side applies one namespaced object (its serialization carries `apiVersion` and
/// `kind`, as apply requires) unless the cluster already holds what was last applied. `current`
/// is the object as [`read_owned`] found it: owned, so applied with `force`, or absent, so
/// created by an apply without `force`.
///
/// # Errors
/// [`Error::NameConflict`] when an absent object appeared, made by someone else, before the
/// apply; [`Error::Apply`] when the API server refuses the apply.
async fn apply_one<K>(
    client: &Client,
    applied: &Applied,
    metrics: &Metrics,
    object: &K,
    current: Option<K>,
) -> Result<K, Error>
where
    K: Child,
{
    let kind = <K as k8s_openapi::Resource>::KIND;
    let name = object.name_any();
    let key: ChildKey = (kind, object.namespace().unwrap_or_default(), name.clone());
    let desired = hash_of(object);
    let creating = current.is_none();
    let params = PatchParams::apply(FIELD_MANAGER);
    let params = match current {
        Some(current) => {
            let record = Record {
                desired,
                observed: fingerprint(current.meta(), object.meta()),
            };
            if applied.is_current(&key, record) {
                return Ok(current);
            }
            params.force()
        }
        None => params,
    };
    metrics.count_write(kind);
    let result = match api_for(client, object)
        .patch(&name, &params, &Patch::Apply(object))
        .await
    {
        Ok(result) => result,
        Err(kube::Error::Api(status)) if creating && status.code == 409 => {
            return Err(Error::NameConflict { kind, name });
        }
        Err(source) => return Err(Error::Apply { kind, name, source }),
    };
    let record = Record {
        desired,
        observed: fingerprint(result.meta(), object.meta()),
    };
    applied.remember(key, record);
    Ok(result)
}

/// Hash of `object`'s serialization (stable within one process, which is all it is used for).
fn hash_of(object: &impl Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    // Serializing built objects cannot fail (string keys only); a failure hashes as empty,
    // which at worst applies once more.
    serde_json::to_vec(object)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// What must stay the same in `live` for the last apply of `desired` to still hold: the
/// `resourceVersion` when the kind has no generation; otherwise the generation, the values of
/// the labels and annotations `desired` sets, and the owner references.
fn fingerprint(live: &ObjectMeta, desired: &ObjectMeta) -> u64 {
    let mut hasher = DefaultHasher::new();
    match live.generation {
        None => live.resource_version.hash(&mut hasher),
        Some(generation) => {
            generation.hash(&mut hasher);
            owned_values(live.labels.as_ref(), desired.labels.as_ref()).hash(&mut hasher);
            owned_values(live.annotations.as_ref(), desired.annotations.as_ref()).hash(&mut hasher);
            hash_of(&live.owner_references).hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// The values `live` holds for each key `desired` sets (absent keys as `None`).
fn owned_values<'a>(
    live: Option<&'a BTreeMap<String, String>>,
    desired: Option<&'a BTreeMap<String, String>>,
) -> Vec<(&'a str, Option<&'a str>)> {
    desired
        .into_iter()
        .flat_map(BTreeMap::keys)
        .map(|key| {
            let value = live.and_then(|l| l.get(key)).map(String::as_str);
            (key.as_str(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(generation: Option<i64>, version: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            generation,
            resource_version: Some(version.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn fingerprint_with_generation_ignores_status_writes_and_foreign_labels() {
        let desired = meta(None, "", &[("app", "a")]);
        let before = fingerprint(&meta(Some(1), "10", &[("app", "a")]), &desired);
        let status_update = fingerprint(&meta(Some(1), "11", &[("app", "a")]), &desired);
        let foreign_label = fingerprint(
            &meta(Some(1), "12", &[("app", "a"), ("team", "x")]),
            &desired,
        );
        assert_eq!(before, status_update);
        assert_eq!(before, foreign_label);
    }

    #[test]
    fn fingerprint_with_generation_changes_on_spec_or_owned_label_edit() {
        let desired = meta(None, "", &[("app", "a")]);
        let before = fingerprint(&meta(Some(1), "10", &[("app", "a")]), &desired);
        let spec_edit = fingerprint(&meta(Some(2), "11", &[("app", "a")]), &desired);
        let label_edit = fingerprint(&meta(Some(1), "12", &[("app", "b")]), &desired);
        let label_removed = fingerprint(&meta(Some(1), "13", &[]), &desired);
        assert_ne!(before, spec_edit);
        assert_ne!(before, label_edit);
        assert_ne!(before, label_removed);
    }

    #[test]
    fn fingerprint_without_generation_follows_resource_version() {
        let desired = meta(None, "", &[]);
        assert_eq!(
            fingerprint(&meta(None, "10", &[]), &desired),
            fingerprint(&meta(None, "10", &[]), &desired)
        );
        assert_ne!(
            fingerprint(&meta(None, "10", &[]), &desired),
            fingerprint(&meta(None, "11", &[]), &desired)
        );
    }
}
