//! The identity every child of one McpUpstream shares: its name, namespace and controller
//! owner reference, and the metadata that follows from them.
//!
//! Not responsible for: the children themselves (one module each beside this one).

use berth_crds::McpUpstream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::error::BuildError;
use crate::labels;

/// Identity shared by every child: where it lives and who owns it.
#[derive(Clone, Debug)]
pub(super) struct Owner {
    /// Name of the McpUpstream.
    pub(super) name: String,
    /// Namespace of the McpUpstream and of every child.
    pub(super) namespace: String,
    /// Controller owner reference to the McpUpstream, blocking its deletion.
    pub(super) reference: OwnerReference,
}

impl Owner {
    /// The owner of `upstream`'s children.
    ///
    /// # Errors
    /// [`BuildError::MissingMetadata`] when `upstream` has no namespace or uid.
    pub(super) fn of(upstream: &McpUpstream) -> Result<Self, BuildError> {
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
    pub(super) fn child_metadata(&self, name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels::labels(&self.name)),
            owner_references: Some(vec![self.reference.clone()]),
            ..ObjectMeta::default()
        }
    }
}
