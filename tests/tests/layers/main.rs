//! Layers without cycles (issue 17): the module graph of each library crate, read from its
//! sources (see `graph.rs` for what counts as a module and as an edge), has no cycle in
//! `berth-crds`, `berth-operator` and `berth-proxy`; and no module of the operator or the proxy
//! uses one of a layer above its own ([`OPERATOR_LAYERS`] and [`PROXY_LAYERS`], the module maps
//! in `operator/src/lib.rs` and `proxy/src/lib.rs`). Needs nothing but the sources.

mod graph;

use std::path::PathBuf;

use graph::{Cycle, Graph};

/// The proxy's layers, bottom first, by module path (a module's children are in its layer, the
/// longest listed path deciding, see [`layer_of`]): the module map in `proxy/src/lib.rs`. A
/// module uses only modules of its own layer or below; inside a layer the cycle check keeps the
/// uses one way.
const PROXY_LAYERS: &[&[&str]] = &[
    &[
        "wire::jsonrpc",
        "wire::headers",
        "wire::answer",
        "wire::outcome",
        "wire::revision",
        "wire::tasks",
        "wire::echoed",
    ],
    &[
        "observe::telemetry",
        "observe::escaped",
        "observe::metrics",
        "access::auth",
        "access::rate_limits",
    ],
    &["transport::upstream", "transport::stdio"],
    &[
        "client::per_client",
        "client::sessions",
        "client::subscriptions",
        "client::audit",
        "client::parked",
        "client::session_room",
    ],
    &["engine::state"],
    &[
        "engine::server_request",
        "engine::fanout",
        "engine::forward",
    ],
    &["front::mcp", "front::admin"],
    &["server", "lint"],
];

/// The operator's layers, bottom first, by module path, as [`PROXY_LAYERS`]: the module map in
/// `operator/src/lib.rs`. The crate root (`crate`) is in the bottom layer: its constants use
/// nothing, and its `pub use` items are the crate's facade, no edge (see `graph.rs`).
const OPERATOR_LAYERS: &[&[&str]] = &[
    &["crate", "labels", "settings", "diagnostics"],
    &["error"],
    &["render"],
    &["validate"],
    &["build"],
    &["report"],
    &["status::conditions"],
    &["metrics"],
    &["apply", "status"],
    &["reconcile"],
    &["admin", "controller"],
];

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

/// The layer of `module` in `layers`: that of the longest listed path that is `module` or one
/// of its ancestors (`engine::state` places `engine::state::x` before `engine` does); `None`
/// for the crate root and for a module under no listed path.
fn layer_of(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers
        .iter()
        .enumerate()
        .flat_map(|(layer, paths)| paths.iter().map(move |path| (layer, *path)))
        .filter(|(_, path)| is_within(module, path))
        .max_by_key(|(_, path)| path.len())
        .map(|(layer, _)| layer)
}

/// Whether `module` is `ancestor` or one of its descendants, by whole path segments
/// (`engine::stateful` is not within `engine::state`).
fn is_within(module: &str, ancestor: &str) -> bool {
    module
        .strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

/// The edges of `graph` from a module to one of a layer above its own, one per line.
fn upward_edges(graph: &Graph, layers: &[&[&str]]) -> Vec<String> {
    graph
        .edges()
        .into_iter()
        .filter(|(from, to, _)| {
            matches!(
                (layer_of(layers, from), layer_of(layers, to)),
                (Some(from), Some(to)) if to > from
            )
        })
        .map(|(from, to, paths)| format!("{from} -> {to}  ({})", paths.join(", ")))
        .collect()
}

/// Asserts that every module of the crate in `dir` is in one of `layers` (named `name` in this
/// file) and uses none of a layer above its own.
fn assert_layered(dir: &str, name: &str, layers: &[&[&str]]) {
    let graph = crate_graph(dir);
    let unplaced: Vec<String> = graph
        .modules()
        .into_iter()
        .filter(|module| module != "crate" && layer_of(layers, module).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "{dir}: modules in no layer; place them in {name} (tests/tests/layers/main.rs) \
         and in the module map of {dir}/src/lib.rs: {unplaced:?}"
    );
    let upward = upward_edges(&graph, layers);
    assert!(
        upward.is_empty(),
        "{dir}: modules using a layer above their own (pass what they need in, or move it \
         down):\n{}",
        upward.join("\n")
    );
}

#[test]
fn operator_modules_use_no_layer_above_their_own() {
    assert_layered("operator", "OPERATOR_LAYERS", OPERATOR_LAYERS);
}

#[test]
fn proxy_modules_use_no_layer_above_their_own() {
    assert_layered("proxy", "PROXY_LAYERS", PROXY_LAYERS);
}

/// The proxy's folders read in layer order (the module map in `proxy/src/lib.rs`): listed bottom
/// first, a folder's modules sit in one layer or in consecutive ones, and no path is listed twice.
#[test]
fn proxy_layers_follow_the_folders() {
    let paths: Vec<&str> = PROXY_LAYERS
        .iter()
        .flat_map(|layer| layer.iter().copied())
        .collect();
    let mut folders: Vec<&str> = Vec::new();
    for (at, path) in paths.iter().enumerate() {
        assert!(
            !paths[..at].contains(path),
            "{path} is listed twice in PROXY_LAYERS"
        );
        let folder = path.split("::").next().unwrap_or(path);
        if folders.last() != Some(&folder) {
            assert!(
                !folders.contains(&folder),
                "{folder}: its modules are listed apart, between those of other folders; the \
                 folders are the layers, bottom first: {PROXY_LAYERS:?}"
            );
            folders.push(folder);
        }
    }
}

/// A crate written to a temporary directory: (path under `src/`, contents).
fn fixture_graph(files: &[(&str, &str)]) -> Graph {
    let dir = tempfile::tempdir().expect("temp dir");
    for (path, text) in files {
        let path = dir.path().join("src").join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create dir");
        std::fs::write(&path, text).expect("write fixture");
    }
    Graph::load(&dir.path().join("src/lib.rs")).expect("fixture loads")
}

/// The cycles of a crate written as [`fixture_graph`].
fn fixture_cycles(files: &[(&str, &str)]) -> Vec<Vec<String>> {
    fixture_graph(files)
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

#[test]
fn module_layers_a_child_using_a_layer_above_is_reported() {
    // No cycle: `low::part` uses `high`, which uses nothing; but `low` is the lower layer.
    let graph = fixture_graph(&[
        ("lib.rs", "mod high;\nmod low;\n"),
        ("high.rs", "pub struct High;\n"),
        ("low.rs", "mod part;\n"),
        (
            "low/part.rs",
            "pub fn f() -> crate::high::High { crate::high::High }\n",
        ),
    ]);
    assert!(graph.cycles().is_empty());
    let layers: &[&[&str]] = &[&["low"], &["high"]];
    assert_eq!(
        upward_edges(&graph, layers),
        vec!["low::part -> high  (crate::high::High)"]
    );
    let layers: &[&[&str]] = &[&["high"], &["low"]];
    assert!(upward_edges(&graph, layers).is_empty());
}

#[test]
fn module_layers_the_longest_listed_path_places_a_module() {
    // `engine::state` is listed below the rest of `engine`: its use of `engine::forward` goes up a
    // layer; `engine::stateful`, placed by `engine`, uses `engine::forward` within its own layer.
    let graph = fixture_graph(&[
        (
            "lib.rs",
            "pub mod engine {\n    pub mod forward;\n    pub mod state;\n    \
             pub mod stateful;\n}\n",
        ),
        ("engine/forward.rs", "pub fn go() {}\n"),
        (
            "engine/state.rs",
            "pub fn f() { crate::engine::forward::go(); }\n",
        ),
        (
            "engine/stateful.rs",
            "pub fn f() { super::forward::go(); }\n",
        ),
    ]);
    let layers: &[&[&str]] = &[&["engine::state"], &["engine"]];
    assert_eq!(layer_of(layers, "engine::state"), Some(0));
    assert_eq!(layer_of(layers, "engine::state::part"), Some(0));
    assert_eq!(layer_of(layers, "engine::stateful"), Some(1));
    assert_eq!(layer_of(layers, "engine"), Some(1));
    assert_eq!(layer_of(layers, "crate"), None);
    assert_eq!(layer_of(layers, "wire"), None);
    assert_eq!(
        upward_edges(&graph, layers),
        vec!["engine::state -> engine::forward  (crate::engine::forward::go)"]
    );
}
