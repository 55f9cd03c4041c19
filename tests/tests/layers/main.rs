//! Layers without cycles (issue 17): the module graph of each library crate, read from its
//! sources (see `graph.rs` for what counts as a module and as an edge), has no cycle in
//! `berth-crds` and `berth-operator`; in `berth-proxy` the cycles are exactly the known ones
//! below, a ratchet: a new cycle or a larger one fails, and so does a listed cycle that is gone
//! or smaller, so the list only ever shrinks (to empty). Needs nothing but the sources.

mod graph;

use std::path::PathBuf;

use graph::{Cycle, Graph};

/// The proxy's module cycles today, each sorted by name. Remove a cycle (or modules from one)
/// when it is broken; never add one.
const KNOWN_PROXY_CYCLES: &[&[&str]] = &[&[
    "forward",
    "forward::input_required",
    "forward::relay",
    "forward::relay::park",
]];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_owned()
}

fn crate_graph(dir: &str) -> Graph {
    let lib_rs = workspace_root().join(dir).join("src/lib.rs");
    Graph::load(&lib_rs).unwrap_or_else(|error| panic!("{error}"))
}

fn assert_no_cycle(dir: &str) {
    let graph = crate_graph(dir);
    assert!(
        graph.modules().len() > 3,
        "{dir}: too few modules found: {:?}",
        graph.modules()
    );
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "{dir}: module cycles (a module that uses another must not be used by it, directly or \
         through others; move what both need into a module below them):\n{}",
        describe(&cycles)
    );
}

fn describe(cycles: &[Cycle]) -> String {
    cycles
        .iter()
        .map(Cycle::describe)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn crds_module_graph_has_no_cycle() {
    assert_no_cycle("crds");
}

#[test]
fn operator_module_graph_has_no_cycle() {
    assert_no_cycle("operator");
}

#[test]
fn proxy_module_cycles_are_the_known_ones() {
    let graph = crate_graph("proxy");
    let cycles = graph.cycles();
    let found: Vec<Vec<String>> = cycles.iter().map(|cycle| cycle.modules.clone()).collect();
    let mut known: Vec<Vec<String>> = KNOWN_PROXY_CYCLES
        .iter()
        .map(|cycle| {
            let mut modules: Vec<String> = cycle.iter().map(|m| (*m).to_owned()).collect();
            modules.sort();
            modules
        })
        .collect();
    known.sort();
    let within_known = |cycle: &Vec<String>| {
        known
            .iter()
            .any(|listed| cycle.iter().all(|module| listed.contains(module)))
    };
    let new: Vec<&Cycle> = cycles
        .iter()
        .filter(|cycle| !within_known(&cycle.modules))
        .collect();
    assert!(
        new.is_empty(),
        "proxy: new or larger module cycles (break them; do not list them):\n{}",
        new.iter()
            .map(|cycle| cycle.describe())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        found, known,
        "proxy: a known cycle is gone or smaller; shrink KNOWN_PROXY_CYCLES in \
         tests/tests/layers/main.rs to what is found"
    );
}

/// A crate written to a temporary directory: (path under `src/`, contents).
fn fixture_cycles(files: &[(&str, &str)]) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        let path = dir.path().join("src").join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create dir");
        std::fs::write(&path, text).expect("write fixture");
    }
    let graph = Graph::load(&dir.path().join("src/lib.rs")).expect("fixture loads");
    graph
        .cycles()
        .into_iter()
        .map(|cycle| cycle.modules)
        .collect()
}

#[test]
fn module_graph_sibling_uses_each_other_is_a_cycle() {
    let cycles = fixture_cycles(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::B;\npub struct A(B);\n"),
        ("b.rs", "pub struct B;\npub fn f() { crate::c::g(); }\n"),
        ("c.rs", "pub fn g() { let _ = super::a::A(crate::b::B); }\n"),
    ]);
    assert_eq!(cycles, vec![vec!["a", "b", "c"]]);
}

#[test]
fn module_graph_parent_and_child_using_each_other_is_a_cycle() {
    let cycles = fixture_cycles(&[
        ("lib.rs", "pub mod a;\n"),
        (
            "a.rs",
            "mod child;\npub struct Shared;\npub fn f() { child::g(); }\n",
        ),
        ("a/child.rs", "pub fn g() { let _ = super::Shared; }\n"),
    ]);
    assert_eq!(cycles, vec![vec!["a", "a::child"]]);
}

#[test]
fn module_graph_parent_owning_child_is_no_cycle() {
    let cycles = fixture_cycles(&[
        (
            "lib.rs",
            "pub mod a;\npub use a::Shared;\npub const PORT: u16 = 1;\n",
        ),
        (
            "a.rs",
            "mod child;\npub use child::Shared;\npub fn port() -> u16 { crate::PORT }\n",
        ),
        ("a/child.rs", "pub struct Shared;\n"),
    ]);
    assert_eq!(cycles, Vec::<Vec<String>>::new());
}

#[test]
fn module_graph_path_through_reexport_names_its_source() {
    // `crate::Shared` is `a::Shared`: b -> a, and a -> b closes the cycle.
    let cycles = fixture_cycles(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::Shared;\n"),
        (
            "a.rs",
            "pub struct Shared;\npub fn f() { crate::b::g(); }\n",
        ),
        ("b.rs", "pub fn g() -> crate::Shared { crate::Shared }\n"),
    ]);
    assert_eq!(cycles, vec![vec!["a", "b"]]);
}

#[test]
fn module_graph_paths_in_macros_are_edges() {
    let cycles = fixture_cycles(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "pub const X: u8 = 1;\npub fn f() { println!(\"{}\", crate::b::Y); }\n",
        ),
        (
            "b.rs",
            "pub const Y: u8 = 2;\npub fn g() { assert_eq!(super::a::X, 1); }\n",
        ),
    ]);
    assert_eq!(cycles, vec![vec!["a", "b"]]);
}

#[test]
fn module_graph_test_only_code_is_left_out() {
    let cycles = fixture_cycles(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "pub struct A;\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\n",
        ),
        (
            "b.rs",
            "pub struct B(crate::a::A);\n#[cfg(test)]\nmod tests;\n",
        ),
        ("b/tests.rs", "use crate::a::A;\n"),
    ]);
    assert_eq!(cycles, Vec::<Vec<String>>::new());
}
