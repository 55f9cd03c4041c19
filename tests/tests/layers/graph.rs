//! The module graph of one library crate, read from its sources with `syn`, and its cycles.
//!
//! Responsible for: finding the crate's modules from `lib.rs` and its `mod` declarations,
//! turning every path the code writes into an edge to the module that path names, and reporting
//! the strongly connected components of that graph. Not responsible for: deciding which cycles
//! are allowed (the tests in `main.rs` do that), type inference or macro expansion.
//!
//! Granularity, as issue 17 counts cycles:
//! - A node is a module with a file of its own: `lib.rs` (named `crate`), `foo.rs` (`foo`),
//!   `foo/bar.rs` (`foo::bar`). An inline `mod x { .. }` belongs to the file it is written in.
//! - An edge A -> B is any path in A's code that names an item of B: `use` items
//!   (`use crate::..`, `use super::..`, `use child::..`, globs) and paths in expressions,
//!   types, patterns and macro arguments (`crate::x::f()`, `super::X`, `child::Y`). A path
//!   through a re-export (`crate::Name` where `lib.rs` has `pub use x::Name`) names the module
//!   the item comes from, not the one re-exporting it.
//! - Declaring `mod child;` is not an edge, so a parent is never in a cycle with its child just
//!   for owning it; a parent that uses its child and a child that uses its parent are.
//! - The crate root's `pub use` items are the crate's facade, not a dependency: they are
//!   followed when resolving paths but add no edge. Anything else in `lib.rs` (a constant, a
//!   function) is a node like any other.
//! - Code under `#[cfg(test)]` is left out: a test may reach any layer to set up its fixture.
//! - Doc links and attributes are not code and add no edge.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Attribute, Item, ItemMod, ItemUse, Macro, UseTree, Visibility};

/// A module's path from the crate root; empty for the root.
type ModPath = Vec<String>;

/// How deep re-exports and `use` bindings are followed before giving up (a binding cycle).
const MAX_DEPTH: usize = 16;

/// What one module (with a file or inline) declares.
#[derive(Default)]
struct Scope {
    /// Child modules, by name.
    children: BTreeSet<String>,
    /// Names bound by `use` items, each to the path it names (written in this scope).
    bindings: BTreeMap<String, Vec<String>>,
    /// Paths of glob imports (`use x::*`), written in this scope.
    globs: Vec<Vec<String>>,
    /// Names of the items defined here.
    items: BTreeSet<String>,
}

/// A path the code writes, to be resolved once every module is known.
struct Reference {
    scope: ModPath,
    segments: Vec<String>,
}

/// The module graph of one crate.
pub struct Graph {
    /// Every module with a file of its own.
    modules: BTreeSet<ModPath>,
    /// Edges between those modules, each with the paths (as written) that make it.
    edges: BTreeMap<(ModPath, ModPath), BTreeSet<String>>,
}

/// A strongly connected component of more than one module.
pub struct Cycle {
    /// The modules, by name (`crate`, `foo`, `foo::bar`), sorted.
    pub modules: Vec<String>,
    /// The edges inside the component: from, to, the paths written.
    pub edges: Vec<(String, String, Vec<String>)>,
}

impl Graph {
    /// Reads the crate whose root is `lib_rs` and every module file it declares.
    ///
    /// # Errors
    /// A file that does not read or parse, or a `mod x;` without `x.rs` or `x/mod.rs`.
    pub fn load(lib_rs: &Path) -> Result<Self, String> {
        let root_dir = lib_rs.parent().ok_or("lib.rs has no directory")?.to_owned();
        let mut collector = Collector::default();
        let mut pending = vec![(ModPath::new(), lib_rs.to_owned(), root_dir)];
        while let Some((module, file, dir)) = pending.pop() {
            let text = std::fs::read_to_string(&file)
                .map_err(|error| format!("failed to read {}: {error}", file.display()))?;
            let parsed = syn::parse_file(&text)
                .map_err(|error| format!("failed to parse {}: {error}", file.display()))?;
            collector.files.insert(module.clone());
            collector.scopes.entry(module.clone()).or_default();
            collector.scope = module;
            collector.dir = dir;
            collector.file_dir = file.parent().map(Path::to_owned).unwrap_or_default();
            collector.visit_file(&parsed);
            pending.append(&mut collector.pending);
        }
        if let Some(error) = collector.errors.first() {
            return Err(error.clone());
        }
        let resolver = Resolver {
            scopes: &collector.scopes,
        };
        let mut edges: BTreeMap<(ModPath, ModPath), BTreeSet<String>> = BTreeMap::new();
        for reference in &collector.references {
            let Some(target) = resolver.resolve(&reference.scope, &reference.segments, 0) else {
                continue;
            };
            let from = file_module(&collector.files, &reference.scope);
            let to = file_module(&collector.files, &target);
            if from != to {
                edges
                    .entry((from, to))
                    .or_default()
                    .insert(reference.segments.join("::"));
            }
        }
        Ok(Self {
            modules: collector.files,
            edges,
        })
    }

    /// Every module, by name.
    pub fn modules(&self) -> Vec<String> {
        self.modules.iter().map(name).collect()
    }

    /// Every edge, sorted: from, to (module names), the paths written that make it.
    pub fn edges(&self) -> Vec<(String, String, Vec<String>)> {
        self.edges
            .iter()
            .map(|((from, to), paths)| (name(from), name(to), paths.iter().cloned().collect()))
            .collect()
    }

    /// The strongly connected components of more than one module, sorted by their names.
    pub fn cycles(&self) -> Vec<Cycle> {
        let nodes: Vec<&ModPath> = self.modules.iter().collect();
        let index: BTreeMap<&ModPath, usize> =
            nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let mut successors = vec![Vec::new(); nodes.len()];
        for (from, to) in self.edges.keys() {
            successors[index[from]].push(index[to]);
        }
        let mut cycles: Vec<Cycle> = strongly_connected(&successors)
            .into_iter()
            .filter(|component| component.len() > 1)
            .map(|component| {
                let members: BTreeSet<&ModPath> = component.iter().map(|&i| nodes[i]).collect();
                let edges = self
                    .edges
                    .iter()
                    .filter(|((from, to), _)| members.contains(from) && members.contains(to))
                    .map(|((from, to), paths)| {
                        (name(from), name(to), paths.iter().cloned().collect())
                    })
                    .collect();
                let mut modules: Vec<String> = members.iter().map(|m| name(m)).collect();
                modules.sort();
                Cycle { modules, edges }
            })
            .collect();
        cycles.sort_by(|a, b| a.modules.cmp(&b.modules));
        cycles
    }
}

impl Cycle {
    /// The component and the edges that close it, one per line, for a failure message.
    pub fn describe(&self) -> String {
        let mut text = format!("cycle [{}]:", self.modules.join(", "));
        for (from, to, paths) in &self.edges {
            let _ = write!(text, "\n    {from} -> {to}  ({})", paths.join(", "));
        }
        text
    }
}

/// A module's name: `crate` for the root, else its path without the leading `crate::`.
fn name(module: &ModPath) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// The module with a file of its own that `module` (maybe inline) is written in.
fn file_module(files: &BTreeSet<ModPath>, module: &ModPath) -> ModPath {
    (0..=module.len())
        .rev()
        .map(|len| module[..len].to_vec())
        .find(|prefix| files.contains(prefix))
        .unwrap_or_default()
}

/// Tarjan's algorithm over `successors` (node index -> successor indices).
fn strongly_connected(successors: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        successors: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    fn connect(state: &mut State<'_>, node: usize) {
        state.index[node] = Some(state.next);
        state.low[node] = state.next;
        state.next += 1;
        state.stack.push(node);
        state.on_stack[node] = true;
        for &next in &state.successors[node] {
            match state.index[next] {
                None => {
                    connect(state, next);
                    state.low[node] = state.low[node].min(state.low[next]);
                }
                Some(index) if state.on_stack[next] => {
                    state.low[node] = state.low[node].min(index);
                }
                Some(_) => {}
            }
        }
        if Some(state.low[node]) == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack[member] = false;
                component.push(member);
                if member == node {
                    break;
                }
            }
            state.components.push(component);
        }
    }
    let count = successors.len();
    let mut state = State {
        successors,
        index: vec![None; count],
        low: vec![0; count],
        on_stack: vec![false; count],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for node in 0..count {
        if state.index[node].is_none() {
            connect(&mut state, node);
        }
    }
    state.components
}

/// Walks the files, recording modules, `use` bindings, item names and every path written.
#[derive(Default)]
struct Collector {
    scopes: BTreeMap<ModPath, Scope>,
    files: BTreeSet<ModPath>,
    references: Vec<Reference>,
    /// Module files still to read: module path, file, directory of its child modules.
    pending: Vec<(ModPath, PathBuf, PathBuf)>,
    errors: Vec<String>,
    /// The module being walked.
    scope: ModPath,
    /// Where the child modules of `scope` live.
    dir: PathBuf,
    /// The directory of the file being walked (`#[path]` is relative to it).
    file_dir: PathBuf,
}

impl Collector {
    fn current(&mut self) -> &mut Scope {
        self.scopes.entry(self.scope.clone()).or_default()
    }

    fn refer(&mut self, segments: Vec<String>) {
        self.references.push(Reference {
            scope: self.scope.clone(),
            segments,
        });
    }

    /// The file of `mod name;`: `#[path]`, `dir/name.rs` or `dir/name/mod.rs`, and where its
    /// child modules live.
    fn module_file(&self, module: &ItemMod) -> Option<(PathBuf, PathBuf)> {
        let name = module.ident.to_string();
        let explicit = module.attrs.iter().find_map(|attr| match &attr.meta {
            syn::Meta::NameValue(value) if attr.path().is_ident("path") => match &value.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(path),
                    ..
                }) => Some(self.file_dir.join(path.value())),
                _ => None,
            },
            _ => None,
        });
        if let Some(file) = explicit {
            let dir = file.parent().map(Path::to_owned).unwrap_or_default();
            return file.is_file().then_some((file, dir));
        }
        let flat = self.dir.join(format!("{name}.rs"));
        if flat.is_file() {
            return Some((flat, self.dir.join(&name)));
        }
        let nested = self.dir.join(&name).join("mod.rs");
        nested.is_file().then(|| (nested, self.dir.join(&name)))
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, item: &'ast Item) {
        if test_only(item_attrs(item)) {
            return;
        }
        if let Some(ident) = item_name(item) {
            self.current().items.insert(ident);
        }
        visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, module: &'ast ItemMod) {
        let name = module.ident.to_string();
        self.current().children.insert(name.clone());
        let mut child = self.scope.clone();
        child.push(name.clone());
        self.scopes.entry(child.clone()).or_default();
        match &module.content {
            Some((_, items)) => {
                let outer_scope = std::mem::replace(&mut self.scope, child);
                let outer_dir = self.dir.clone();
                self.dir = outer_dir.join(&name);
                for item in items {
                    self.visit_item(item);
                }
                self.scope = outer_scope;
                self.dir = outer_dir;
            }
            None => match self.module_file(module) {
                Some((file, dir)) => self.pending.push((child, file, dir)),
                None => self.errors.push(format!(
                    "no file for `mod {name};` in {} (looked for {name}.rs and {name}/mod.rs)",
                    self.dir.display()
                )),
            },
        }
    }

    fn visit_item_use(&mut self, item: &'ast ItemUse) {
        if item.leading_colon.is_some() {
            return;
        }
        let facade = self.scope.is_empty() && !matches!(item.vis, Visibility::Inherited);
        let mut leaves = Vec::new();
        use_leaves(&item.tree, &mut Vec::new(), &mut leaves);
        for leaf in leaves {
            match leaf.binding {
                Some(binding) if binding != "_" => {
                    self.current().bindings.insert(binding, leaf.path.clone());
                }
                Some(_) => {}
                None => self.current().globs.push(leaf.path.clone()),
            }
            if !facade {
                self.refer(leaf.path);
            }
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.refer(segments);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast Macro) {
        self.visit_path(&mac.path);
        let mut paths = Vec::new();
        token_paths(mac.tokens.clone(), &mut paths);
        for segments in paths {
            self.refer(segments);
        }
    }

    fn visit_attribute(&mut self, _: &'ast Attribute) {}

    fn visit_visibility(&mut self, _: &'ast Visibility) {}
}

/// One name a `use` item brings in: the full path, and the name it is bound to (`None` for a
/// glob).
struct UseLeaf {
    path: Vec<String>,
    binding: Option<String>,
}

fn use_leaves(tree: &UseTree, prefix: &mut Vec<String>, leaves: &mut Vec<UseLeaf>) {
    match tree {
        UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_leaves(&path.tree, prefix, leaves);
            prefix.pop();
        }
        UseTree::Name(name) if name.ident == "self" => leaves.push(UseLeaf {
            path: prefix.clone(),
            binding: prefix.last().cloned(),
        }),
        UseTree::Name(name) => {
            let mut path = prefix.clone();
            path.push(name.ident.to_string());
            leaves.push(UseLeaf {
                path,
                binding: Some(name.ident.to_string()),
            });
        }
        UseTree::Rename(rename) => {
            let mut path = prefix.clone();
            if rename.ident != "self" {
                path.push(rename.ident.to_string());
            }
            leaves.push(UseLeaf {
                path,
                binding: Some(rename.rename.to_string()),
            });
        }
        UseTree::Glob(_) => leaves.push(UseLeaf {
            path: prefix.clone(),
            binding: None,
        }),
        UseTree::Group(group) => {
            for tree in &group.items {
                use_leaves(tree, prefix, leaves);
            }
        }
    }
}

/// Every `a::b(::c)*` path in a macro's tokens (not `::a::b`, not `$crate::a`).
fn token_paths(tokens: TokenStream, paths: &mut Vec<Vec<String>>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let is_colon = |token: Option<&TokenTree>, spacing: Spacing| {
        let Some(TokenTree::Punct(punct)) = token else {
            return false;
        };
        punct.as_char() == ':' && punct.spacing() == spacing
    };
    let path_sep = |at: usize| {
        is_colon(tokens.get(at), Spacing::Joint) && is_colon(tokens.get(at + 1), Spacing::Alone)
    };
    let mut at = 0;
    while at < tokens.len() {
        match &tokens[at] {
            TokenTree::Group(group) => {
                token_paths(group.stream(), paths);
                at += 1;
            }
            TokenTree::Ident(first) => {
                let after_sep = at >= 2 && path_sep(at - 2);
                let after_dollar =
                    at >= 1 && matches!(&tokens[at - 1], TokenTree::Punct(p) if p.as_char() == '$');
                let mut segments = vec![first.to_string()];
                let mut next = at + 1;
                while path_sep(next) {
                    match tokens.get(next + 2) {
                        Some(TokenTree::Ident(ident)) => {
                            segments.push(ident.to_string());
                            next += 3;
                        }
                        _ => break,
                    }
                }
                if segments.len() > 1 && !after_sep && !after_dollar {
                    paths.push(segments);
                }
                at = next;
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => at += 1,
        }
    }
}

/// Whether the attributes compile the item only for tests: `#[cfg(test)]`, `#[cfg(all(test, ..))]`.
fn test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let syn::Meta::List(list) = &attr.meta else {
            return false;
        };
        if !list.path.is_ident("cfg") {
            return false;
        }
        let tokens: Vec<TokenTree> = list.tokens.clone().into_iter().collect();
        match tokens.as_slice() {
            [TokenTree::Ident(ident)] => ident == "test",
            [TokenTree::Ident(all), TokenTree::Group(group)]
                if all == "all" && group.delimiter() == Delimiter::Parenthesis =>
            {
                group
                    .stream()
                    .into_iter()
                    .any(|token| matches!(token, TokenTree::Ident(ident) if ident == "test"))
            }
            _ => false,
        }
    })
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(item) => &item.attrs,
        Item::Enum(item) => &item.attrs,
        Item::ExternCrate(item) => &item.attrs,
        Item::Fn(item) => &item.attrs,
        Item::ForeignMod(item) => &item.attrs,
        Item::Impl(item) => &item.attrs,
        Item::Macro(item) => &item.attrs,
        Item::Mod(item) => &item.attrs,
        Item::Static(item) => &item.attrs,
        Item::Struct(item) => &item.attrs,
        Item::Trait(item) => &item.attrs,
        Item::TraitAlias(item) => &item.attrs,
        Item::Type(item) => &item.attrs,
        Item::Union(item) => &item.attrs,
        Item::Use(item) => &item.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module's namespace (modules and `use` are recorded apart).
fn item_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(item) => &item.ident,
        Item::Enum(item) => &item.ident,
        Item::Fn(item) => &item.sig.ident,
        Item::Macro(item) => item.ident.as_ref()?,
        Item::Static(item) => &item.ident,
        Item::Struct(item) => &item.ident,
        Item::Trait(item) => &item.ident,
        Item::TraitAlias(item) => &item.ident,
        Item::Type(item) => &item.ident,
        Item::Union(item) => &item.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Resolves written paths to the module that defines what they name.
struct Resolver<'a> {
    scopes: &'a BTreeMap<ModPath, Scope>,
}

impl Resolver<'_> {
    fn scope(&self, module: &[String]) -> Option<&Scope> {
        self.scopes.get(module)
    }

    /// The module whose item `segments`, written in `scope`, names; `None` for a path outside
    /// the crate (`std::..`, `kube::..`, a generic parameter, an enum of another crate).
    fn resolve(&self, scope: &ModPath, segments: &[String], depth: usize) -> Option<ModPath> {
        let absolute = self.absolute(scope, segments, depth)?;
        Some(self.defining_module(&absolute, depth))
    }

    /// `segments`, written in `scope`, as a path from the crate root.
    fn absolute(&self, scope: &ModPath, segments: &[String], depth: usize) -> Option<Vec<String>> {
        if depth > MAX_DEPTH {
            return None;
        }
        let (first, rest) = segments.split_first()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => scope.clone(),
            "super" => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                let base = scope[..scope.len().checked_sub(supers)?].to_vec();
                return Some(
                    base.into_iter()
                        .chain(segments[supers..].iter().cloned())
                        .collect(),
                );
            }
            name if self.scope(scope)?.children.contains(name) => {
                let mut base = scope.clone();
                base.push(name.to_owned());
                base
            }
            name => {
                let data = self.scope(scope)?;
                match data.bindings.get(name) {
                    // `use serde;` and the like: a crate, not a module of this one.
                    Some(target) if target.len() == 1 && target[0] == name => return None,
                    Some(target) => self.absolute(scope, target, depth + 1)?,
                    None => self.through_glob(scope, data, name, depth)?,
                }
            }
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The module that defines the item at `path` (from the root), following re-exports.
    fn defining_module(&self, path: &[String], depth: usize) -> ModPath {
        let mut module = ModPath::new();
        for (at, segment) in path.iter().enumerate() {
            let Some(scope) = self.scope(&module) else {
                return module;
            };
            if scope.children.contains(segment) {
                module.push(segment.clone());
                continue;
            }
            if depth < MAX_DEPTH {
                let followed = if let Some(target) = scope.bindings.get(segment) {
                    self.absolute(&module, target, depth + 1)
                } else if scope.items.contains(segment) {
                    None
                } else {
                    self.through_glob(&module, scope, segment, depth)
                };
                if let Some(mut target) = followed {
                    target.extend(path[at + 1..].iter().cloned());
                    return self.defining_module(&target, depth + 1);
                }
            }
            return module;
        }
        module
    }

    /// `segment` as one of `module`'s glob imports names it, if one of them has it.
    fn through_glob(
        &self,
        module: &ModPath,
        scope: &Scope,
        segment: &str,
        depth: usize,
    ) -> Option<Vec<String>> {
        scope.globs.iter().find_map(|glob| {
            let mut target = self.absolute(module, glob, depth + 1)?;
            let source = self.scope(&target)?;
            let has = source.children.contains(segment)
                || source.items.contains(segment)
                || source.bindings.contains_key(segment);
            has.then(|| {
                target.push(segment.to_owned());
                target
            })
        })
    }
}
