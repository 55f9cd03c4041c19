//! The session-key Secret, made without reading Secrets (issue 40, item 6).
//!
//! The operator may `create` Secrets and nothing else: no `get`, `list` or `watch`, so it reads
//! no tenant's Secret and no session key. It creates `<name>-session-key` with a fresh key and
//! takes the API server's `409 AlreadyExists` as "it exists". Ownership (issue 40, item 1) then
//! rests on a record instead of a read: the uid the create answered is written at once to
//! `status.sessionKeySecretUid` (a merge patch of the status subresource, separate from the
//! status apply, so a stale copy of the McpUpstream never removes it). A create answered
//! `AlreadyExists` is accepted only when that record exists, when this process created the
//! Secret (the watch may not have delivered the record yet), or when this McpUpstream's own
//! Deployment already exists (an earlier operator version created the Secret, checking its
//! owner, before it applied the Deployment); otherwise the Secret is someone else's and the
//! reconcile stops with [`Error::NameConflict`] naming it, before any other write.
//!
//! Steady state sends nothing: [`SessionKeys`] remembers, per Secret, the McpUpstream
//! generation for which the Secret was created or found, and the create is sent again only
//! when the spec changes (a new generation) or the operator restarts. So a deleted session-key
//! Secret is recreated, with a new key, at the next spec change or operator restart, not at
//! the next resync (the operator cannot see that it is gone).
//!
//! What a create cannot tell: whether the Secret in place is still the one whose uid is
//! recorded. Someone allowed to delete and create Secrets in the namespace could replace it;
//! they can read its key anyway. Compare the uids to check (docs/security.md).
//!
//! Not responsible for: the Secret's shape ([`crate::build::secret`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use berth_crds::McpUpstream;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::FIELD_MANAGER;
use crate::build::secret;
use crate::error::Error;
use crate::metrics::{Metrics, WRITE_MCP_UPSTREAM_STATUS};

/// What this process knows of each session-key Secret (by namespace and name), so an
/// unchanged McpUpstream sends no create. Entries of deleted McpUpstreams stay until the
/// operator restarts (a few dozen bytes each).
#[derive(Debug, Default)]
pub struct SessionKeys {
    seen: Mutex<HashMap<(String, String), Seen>>,
}

/// One session-key Secret known to exist.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    /// uid of the McpUpstream it was created or found for.
    owner_uid: String,
    /// `metadata.generation` of that McpUpstream when it was.
    generation: Option<i64>,
    /// uid of the Secret when this process created it.
    created_uid: Option<String>,
}

impl SessionKeys {
    fn get(&self, key: &(String, String)) -> Option<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    fn remember(&self, key: (String, String), seen: Seen) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, seen);
    }
}

/// Makes sure the session-key Secret `template` (built for `upstream`, without its key)
/// exists and is this McpUpstream's, creating it with a fresh key when it does not exist.
/// `deployment_owned` says whether `upstream`'s Deployment exists with `upstream` as its
/// controller. Sends nothing when this process already created or found the Secret for the
/// current generation of `upstream` and the status records what it should.
///
/// # Errors
/// [`Error::NameConflict`] naming the Secret when one of that name exists and nothing shows
/// the operator created it for `upstream`; [`Error::Apply`] when the create is refused for
/// another reason (an admission policy, RBAC); [`Error::PatchStatus`] when the created
/// Secret's uid cannot be recorded; [`Error::Build`] when no key could be generated.
///
/// # Cancellation
/// Dropped after the create and before the record, the next reconcile of this process still
/// knows the Secret is its own; after a restart it reports `NameConflict` until the Secret is
/// deleted (a one-round-trip window).
pub(super) async fn ensure(
    client: &Client,
    keys: &SessionKeys,
    metrics: &Metrics,
    upstream: &McpUpstream,
    template: &Secret,
    deployment_owned: bool,
) -> Result<(), Error> {
    let name = template.name_any();
    let namespace = template.namespace().unwrap_or_default();
    let key = (namespace.clone(), name.clone());
    let owner_uid = upstream.uid().unwrap_or_default();
    let generation = upstream.metadata.generation;
    let recorded = upstream
        .status
        .as_ref()
        .and_then(|s| s.session_key_secret_uid.clone());
    let known = keys.get(&key).filter(|seen| seen.owner_uid == owner_uid);
    if let Some(seen) = known.as_ref().filter(|seen| seen.generation == generation) {
        return match (&seen.created_uid, recorded) {
            // Created here, and the record did not reach the status (or this copy of the
            // McpUpstream predates it): write it (again; the same value).
            (Some(uid), None) => record_uid(client, metrics, upstream, uid).await,
            _ => Ok(()),
        };
    }
    let created_here = known.and_then(|seen| seen.created_uid);
    let secret = secret::with_fresh_key(template.clone())?;
    metrics.count_write("Secret");
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    match api.create(&PostParams::default(), &secret).await {
        Ok(created) => {
            let uid = created.uid().unwrap_or_default();
            keys.remember(
                key,
                Seen {
                    owner_uid,
                    generation,
                    created_uid: Some(uid.clone()),
                },
            );
            record_uid(client, metrics, upstream, &uid).await
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            if recorded.is_none() && created_here.is_none() && !deployment_owned {
                return Err(Error::NameConflict {
                    kind: "Secret",
                    name,
                });
            }
            keys.remember(
                key,
                Seen {
                    owner_uid,
                    generation,
                    created_uid: created_here,
                },
            );
            Ok(())
        }
        Err(source) => Err(Error::Apply {
            kind: "Secret",
            name,
            source,
        }),
    }
}

/// Writes `uid` to `status.sessionKeySecretUid` of `upstream` by a merge patch of the status
/// subresource (field manager [`FIELD_MANAGER`]), counting the write. An McpUpstream deleted
/// meanwhile (HTTP 404) is not an error.
///
/// # Errors
/// [`Error::PatchStatus`] when the API server refuses the patch.
async fn record_uid(
    client: &Client,
    metrics: &Metrics,
    upstream: &McpUpstream,
    uid: &str,
) -> Result<(), Error> {
    let name = upstream.name_any();
    let api: Api<McpUpstream> =
        Api::namespaced(client.clone(), &upstream.namespace().unwrap_or_default());
    let body = serde_json::json!({"status": {"sessionKeySecretUid": uid}});
    metrics.count_write(WRITE_MCP_UPSTREAM_STATUS);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    match api.patch_status(&name, &params, &Patch::Merge(&body)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::PatchStatus { name, source }),
    }
}
