//! The committed CRD YAML (`crds/berth.dev_mcpupstreams.yaml` and the Helm chart's copy under
//! `charts/berth/files/crds/`) must equal what the Rust types generate, so the API a cluster installs is
//! the API the operator and proxy were built against.
//!
//! Regenerate both with `BERTH_UPDATE_CRDS=1 cargo test --workspace --test generated` (or
//! `cargo run -p berth-operator -- crd`); never edit them by hand.

use std::path::{Path, PathBuf};

/// The committed copies of the CRD, relative to the workspace root.
const COPIES: [&str; 2] = [
    "crds/berth.dev_mcpupstreams.yaml",
    "charts/berth/files/crds/berth.dev_mcpupstreams.yaml",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

#[test]
fn crd_committed_copies_equal_generated_yaml() {
    let generated = berth_crds::crd_yaml().expect("crd renders");
    let update = std::env::var_os("BERTH_UPDATE_CRDS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for copy in COPIES {
        let path = workspace_root().join(copy);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed == generated {
            continue;
        }
        if update {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).expect("create CRD directory");
            }
            std::fs::write(&path, &generated).expect("write CRD");
        } else {
            stale.push(copy);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from the CRD the types generate; regenerate with \
         `BERTH_UPDATE_CRDS=1 cargo test --workspace --test generated` and commit the result"
    );
}
