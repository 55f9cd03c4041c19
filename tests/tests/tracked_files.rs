//! Run artefacts stay out of the repository (issue 17): no tracked file is a log, a pid file or
//! captured output (`*.log`, `*.log.1`, `*.pid`, `*.out`, `nohup.out`), and `.gitignore` ignores
//! such files wherever a run leaves them. Needs `git` and a checkout, nothing else.

use std::path::PathBuf;
use std::process::Command;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_owned()
}

/// Whether the file at `path` (relative, `/`-separated) is what a run leaves behind.
fn is_run_artefact(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let rotated_log = name.split_once(".log.").is_some_and(|(_, suffix)| {
        !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit())
    });
    name.ends_with(".log") || name.ends_with(".pid") || name.ends_with(".out") || rotated_log
}

fn git(args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(workspace_root())
        .output()
        .unwrap_or_else(|error| panic!("failed to run git {args:?}: {error}"))
}

#[test]
fn tracked_files_include_no_log_pid_or_output_file() {
    let output = git(&["ls-files", "-z"]);
    assert!(
        output.status.success(),
        "git ls-files failed (run from a git checkout): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listing = String::from_utf8(output.stdout).expect("git lists paths as UTF-8");
    let tracked: Vec<&str> = listing.split('\0').filter(|p| !p.is_empty()).collect();
    assert!(
        tracked.len() > 100,
        "too few tracked files: {}",
        tracked.len()
    );
    let artefacts: Vec<&str> = tracked.into_iter().filter(|p| is_run_artefact(p)).collect();
    assert!(
        artefacts.is_empty(),
        "run artefacts are tracked; `git rm --cached` them (.gitignore keeps them out): \
         {artefacts:?}"
    );
}

#[test]
fn gitignore_ignores_run_artefacts_anywhere() {
    let samples = [
        "operator.log",
        "proxy/run.log.1",
        "tests/controlplane/state/etcd.pid",
        "nohup.out",
        "scripts/bench.out",
    ];
    for sample in samples {
        assert!(is_run_artefact(sample), "{sample} is a run artefact");
        let ignored = git(&["check-ignore", "--quiet", "--no-index", sample]);
        assert!(
            ignored.status.success(),
            "{sample} is not ignored by .gitignore"
        );
    }
}

#[test]
fn run_artefact_pattern_spares_sources_and_docs() {
    for path in [
        "docs/logging.md",
        "proxy/src/client/audit/log.rs",
        "tests/src/logout.rs",
        "charts/berth/templates/output.yaml",
        "release.log.md",
        "Cargo.lock",
    ] {
        assert!(!is_run_artefact(path), "{path} is not a run artefact");
    }
}
