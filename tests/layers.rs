//! Data flows one way between the crate's files: no two modules import each
//! other, directly or around a longer circle. Each file under `src/` is parsed
//! (syn) and every `crate::`, `self::` and `super::` path in it, in `use` lines
//! and in code, is resolved to the file it names.
//!
//! A module and its own submodules are one unit split into files (the parent
//! declares and re-exports its children, a child uses what its parent defines),
//! so paths between a module and its ancestors are not counted. Nor are paths
//! in `#[cfg(test)]` modules: a test may drive two modules together (a filter
//! compiled in one and handed to the kernel through the other) without data
//! flowing between them in the program.
//!
//! Layers, beside circles: the record model (`record/`, the types every verb's
//! results are made of) imports only the plain data modules it is built
//! from, never a verb's code nor the renderers; the renderers (`report/`) are
//! imported by no module of the library (the binary renders).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// Module path (`["analyze", "agg"]`) → its file.
type Modules = BTreeMap<Vec<String>, PathBuf>;
/// Module → the modules it names, with one path as evidence.
type Edges = BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>;

/// The modules of the crate whose root file is `root`, its submodules in `dir`.
fn modules(root: &Path, dir: &Path) -> Modules {
    let mut m = Modules::new();
    m.insert(Vec::new(), root.to_path_buf());
    let mut stack = vec![(dir.to_path_buf(), Vec::<String>::new())];
    while let Some((d, prefix)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd {
            let p = e.expect("read_dir entry").path();
            let name = p.file_name().and_then(|n| n.to_str()).expect("UTF-8 name").to_string();
            if p.is_dir() {
                // src/bin is other crates (the binaries), checked from their own root.
                if !(prefix.is_empty() && name == "bin" && dir.ends_with("src")) {
                    stack.push((p, [prefix.clone(), vec![name]].concat()));
                }
            } else if let Some(stem) = name.strip_suffix(".rs") {
                if p == root {
                    continue;
                }
                let module =
                    if stem == "mod" { prefix.clone() } else { [prefix.clone(), vec![stem.to_string()]].concat() };
                m.insert(module, p);
            }
        }
    }
    m
}

/// Collects the paths a file names, each made absolute from the module it is written in.
struct Paths {
    /// The file's module, then the inline modules (`mod tests { … }`) entered.
    at: Vec<String>,
    found: Vec<(Vec<String>, String)>,
}

impl Paths {
    fn add(&mut self, segs: &[String]) {
        let Some(first) = segs.first() else { return };
        let mut base = self.at.clone();
        let mut rest = segs;
        match first.as_str() {
            "crate" => {
                base.clear();
                rest = &segs[1..];
            }
            "self" => rest = &segs[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            _ => return,
        }
        base.extend(rest.iter().cloned());
        self.found.push((base, segs.join("::")));
    }

    fn tree(&mut self, prefix: &mut Vec<String>, t: &syn::UseTree) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.add(&[prefix.clone(), vec![n.ident.to_string()]].concat()),
            syn::UseTree::Rename(r) => self.add(&[prefix.clone(), vec![r.ident.to_string()]].concat()),
            syn::UseTree::Glob(_) => self.add(prefix),
            syn::UseTree::Group(g) => g.items.iter().for_each(|i| self.tree(prefix, i)),
        }
    }
}

impl<'a> Visit<'a> for Paths {
    fn visit_item_use(&mut self, u: &'a syn::ItemUse) {
        self.tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'a syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.add(&segs);
        syn::visit::visit_path(self, p);
    }

    fn visit_item_mod(&mut self, m: &'a syn::ItemMod) {
        let test =
            m.attrs.iter().any(|a| a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"));
        if test {
            return;
        }
        self.at.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.at.pop();
    }
}

/// The module a path lands in: its longest prefix that is a module's file.
fn resolve<'m>(mods: &'m Modules, path: &[String]) -> Option<&'m Vec<String>> {
    (0..=path.len()).rev().find_map(|n| mods.get_key_value(&path[..n]).map(|(k, _)| k))
}

fn ancestry(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn edges(mods: &Modules) -> Edges {
    let mut e = Edges::new();
    for (m, file) in mods {
        let text = std::fs::read_to_string(file).expect("read source");
        let ast = syn::parse_file(&text).unwrap_or_else(|err| panic!("{}: {err}", file.display()));
        let mut v = Paths { at: m.clone(), found: Vec::new() };
        v.visit_file(&ast);
        for (abs, written) in v.found {
            if let Some(t) = resolve(mods, &abs).filter(|t| !ancestry(m, t)) {
                e.entry(m.clone()).or_default().entry(t.clone()).or_insert(written);
            }
        }
    }
    e
}

fn name(m: &[String]) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

/// Every circle, each as its modules in order with the path that leads on.
fn circles(e: &Edges) -> Vec<String> {
    // Tarjan's strongly connected components; one circle is shown per component.
    struct T<'e> {
        e: &'e Edges,
        index: BTreeMap<&'e Vec<String>, usize>,
        low: BTreeMap<&'e Vec<String>, usize>,
        stack: Vec<&'e Vec<String>>,
        on: BTreeSet<&'e Vec<String>>,
        comps: Vec<BTreeSet<&'e Vec<String>>>,
    }
    impl<'e> T<'e> {
        fn visit(&mut self, v: &'e Vec<String>) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.e.get(v).into_iter().flat_map(|t| t.keys()) {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v, l);
                } else if self.on.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut c = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    c.insert(w);
                    if w == v {
                        break;
                    }
                }
                if c.len() > 1 {
                    self.comps.push(c);
                }
            }
        }
    }
    let mut t = T {
        e,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        comps: Vec::new(),
    };
    for v in e.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.comps
        .iter()
        .map(|c| {
            // Walk inside the component from its first module back to it.
            let start = *c.first().expect("non-empty");
            let mut seen = vec![start];
            let mut out = name(start);
            let mut at = start;
            loop {
                let (next, via) = e[at]
                    .iter()
                    .find(|(n, _)| c.contains(n) && (!seen.contains(n) || *n == start))
                    .or_else(|| e[at].iter().find(|(n, _)| c.contains(n)))
                    .expect("an edge inside the component");
                out += &format!(" --({via})--> {}", name(next));
                if next == start || seen.contains(&next) {
                    break;
                }
                seen.push(next);
                at = next;
            }
            out
        })
        .collect()
}

/// Writes `text` to `dir/path`, making its folders: one file of a test crate.
fn write(dir: &Path, path: &str, text: &str) {
    let f = dir.join(path);
    std::fs::create_dir_all(f.parent().expect("parent")).expect("mkdir");
    std::fs::write(f, text).expect("write");
}

fn check(root: &Path, dir: &Path) -> Vec<String> {
    circles(&edges(&modules(root, dir)))
}

/// The record model's module.
const MODEL: &str = "record";
/// What the model may import: data it embeds (`dist`'s histograms, `tcp`'s
/// side, `detect`'s view of a TLS segment) and the words its sentences use.
const MODEL_USES: [&str; 4] = ["dist", "tcp", "detect", "words"];
/// The renderers' module.
const RENDERERS: &str = "report";

/// Every import that breaks the layers, as `module --(path)--> module`.
fn layer_breaks(e: &Edges) -> Vec<String> {
    let top = |m: &Vec<String>| m.first().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for (from, to) in e {
        for (t, via) in to {
            let (f, t0) = (top(from), top(t));
            let model_reaches_out = f == MODEL && t0 != MODEL && !MODEL_USES.contains(&t0.as_str());
            let renderer_used = t0 == RENDERERS && f != RENDERERS;
            if model_reaches_out || renderer_used {
                out.push(format!("{} --({via})--> {}", name(from), name(t)));
            }
        }
    }
    out
}

#[test]
fn the_model_and_the_renderers_keep_their_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = layer_breaks(&edges(&modules(&src.join("lib.rs"), &src)));
    assert!(
        found.is_empty(),
        "record/ may import only {MODEL_USES:?}, and nothing in the library may import report/ \
         (producers fill records from record/; the binary renders them):\n{}",
        found.join("\n")
    );
}

/// The check itself: the model reaching a renderer or a verb's code, and a
/// verb's code reaching a renderer, are found; renderers reading the model,
/// the model using its data modules and a test module's paths are not.
#[test]
fn the_check_finds_an_import_across_the_layers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let w = |p: &str, s: &str| write(dir.path(), p, s);
    w("lib.rs", "mod analyze; mod dist; mod record; mod report;\n");
    w("dist.rs", "pub struct Spread;\n");
    w("record/mod.rs", "pub mod bench;\npub struct Report(crate::dist::Spread);\n");
    w("record/bench.rs", "pub struct Bench;\nfn f() { crate::report::style::head(); }\n");
    w("report/mod.rs", "pub mod style;\nuse crate::record::Report;\n");
    w("report/style.rs", "pub fn head() {}\n");
    w(
        "analyze.rs",
        "use crate::record::Report;\nuse crate::report::style;\nfn f() -> crate::record::bench::Bench { todo!() }\n",
    );
    let breaks = || layer_breaks(&edges(&modules(&dir.path().join("lib.rs"), dir.path())));
    assert_eq!(
        breaks(),
        [
            "analyze --(crate::report::style)--> report::style",
            "record::bench --(crate::report::style::head)--> report::style"
        ]
    );
    w("record/bench.rs", "pub struct Bench;\nfn f() { crate::analyze::f(); }\n");
    w(
        "analyze.rs",
        "use crate::record::Report;\npub fn f() {}\n#[cfg(test)]\nmod tests { use crate::report::style; }\n",
    );
    assert_eq!(breaks(), ["record::bench --(crate::analyze::f)--> analyze"]);
    w("record/bench.rs", "pub struct Bench;\n");
    assert!(breaks().is_empty(), "{:?}", breaks());
}

#[test]
fn no_two_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = check(&src.join("lib.rs"), &src);
    let bins = src.join("bin");
    for e in std::fs::read_dir(&bins).expect("src/bin") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "rs") {
            found.extend(check(&p, &p.with_extension("")));
        }
    }
    assert!(
        found.is_empty(),
        "modules that import each other (move the shared part to its own module):\n{}",
        found.join("\n")
    );
}

/// The check itself: a circle through three files, closed by a `super::`
/// inside an inline module, is found; a child using its parent is not a
/// circle, nor is a test module's path.
#[test]
fn the_check_finds_a_circle() {
    let dir = tempfile::tempdir().expect("temp dir");
    let w = |p: &str, s: &str| write(dir.path(), p, s);
    w("lib.rs", "mod a; mod b; mod c; mod d;\n");
    w("a.rs", "use crate::b::B;\npub struct A;\n");
    w("b.rs", "pub struct B(crate::c::C);\n");
    w("c.rs", "pub struct C;\nmod inner { use super::super::a::A; }\n");
    w("d/mod.rs", "mod e;\npub use e::E;\npub struct D;\n");
    w("d/e.rs", "use super::D;\npub struct E(D);\n");
    let found = check(&dir.path().join("lib.rs"), dir.path());
    assert_eq!(found.len(), 1, "{found:?}");
    for m in ["a --(crate::b::B)--> b", "b --(crate::c::C)--> c", "c --(super::super::a::A)--> a"] {
        assert!(found[0].contains(m), "{m} in {}", found[0]);
    }
    w("c.rs", "pub struct C;\n#[cfg(test)]\nmod tests { use super::super::a::A; }\n");
    assert!(check(&dir.path().join("lib.rs"), dir.path()).is_empty());
}
