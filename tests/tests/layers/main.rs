//! Layers without cycles (issue 17): the module graph of each library crate, read from its
//! sources (see `graph.rs` for what counts as a module and as an edge), has no cycle in
//! `berth-crds`, `berth-operator` and `berth-proxy`. Needs nothing but the sources.

mod graph;

use std::path::PathBuf;

use graph::{Cycle, Graph};

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
fn proxy_module_graph_has_no_cycle() {
    assert_no_cycle("proxy");
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
