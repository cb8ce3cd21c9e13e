//! The library's modules form no import circle: every `crate::…`, `super::…` and `self::…` path
//! in `src/` outside comments is resolved to the module it names (the longest module prefix of
//! the path), and the graph of "module uses module" has no cycle. A module naming one of its
//! own ancestors (a child using its parent's items) is the tree, not a circle, and is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

/// Every module of `src/` (its path of names) with its file's text.
fn modules() -> BTreeMap<Module, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("a source entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&src).expect("under src");
            let mut names: Module = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if names.last().is_some_and(|n| n == "mod" || n == "lib") {
                names.pop();
            }
            out.insert(
                names,
                std::fs::read_to_string(&path).expect("a source file"),
            );
        }
    }
    out
}

/// The paths `crate::a::b`, `super::a`, `self::a` of one line, as (root, names).
fn paths(line: &str) -> Vec<(&str, Vec<&str>)> {
    let mut out = Vec::new();
    for root in ["crate", "super", "self"] {
        let mut rest = line;
        while let Some(i) = rest.find(&format!("{root}::")) {
            let before = rest[..i].chars().last();
            let tail = &rest[i + root.len()..];
            rest = tail;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut names = Vec::new();
            let mut t = tail;
            while let Some(after) = t.strip_prefix("::") {
                let end = after
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                if end == 0 {
                    break;
                }
                names.push(&after[..end]);
                t = &after[end..];
            }
            out.push((root, names));
        }
    }
    out
}

/// "module uses module" edges between distinct modules, ancestors left out.
fn graph(mods: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut g: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, text) in mods {
        if m.is_empty() {
            continue;
        }
        for line in text.lines() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (root, names) in paths(line) {
                let mut full: Module = match root {
                    "crate" => Vec::new(),
                    "super" => m[..m.len() - 1].to_vec(),
                    _ => m.clone(),
                };
                for n in names {
                    if n == "super" {
                        full.pop();
                    } else {
                        full.push(n.to_string());
                    }
                }
                let target = (1..=full.len())
                    .rev()
                    .map(|k| full[..k].to_vec())
                    .find(|p| mods.contains_key(p));
                if let Some(t) = target.filter(|t| t != m && !m.starts_with(t)) {
                    g.entry(m.clone()).or_default().insert(t);
                }
            }
        }
    }
    g
}

/// A cycle of `g`, if any, as the modules along it.
fn cycle(g: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    // 0 unvisited, 1 on the stack, 2 done
    fn visit(
        v: &Module,
        g: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, u8>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        state.insert(v.clone(), 1);
        stack.push(v.clone());
        for w in g.get(v).into_iter().flatten() {
            match state.get(w).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|x| x == w).unwrap_or(0);
                    return Some(stack[at..].to_vec());
                }
                0 => {
                    if let Some(c) = visit(w, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(v.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in g.keys() {
        if state.get(v).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(v, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_module_imports_another_that_imports_it_back() {
    let mods = modules();
    assert!(mods.len() > 50, "found {} modules under src/", mods.len());
    let g = graph(&mods);
    if let Some(c) = cycle(&g) {
        let names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
        panic!("import circle: {} -> back", names.join(" -> "));
    }
}

/// The scan sees real imports: a child naming a sibling through `super::`, and a module
/// naming another through `crate::`, become edges (so a circle through them would be found).
#[test]
fn the_scan_resolves_crate_and_super_paths() {
    let mut mods = BTreeMap::new();
    let m = |s: &str| -> Module { s.split("::").map(String::from).collect() };
    mods.insert(
        m("a"),
        "use crate::b::Thing;\n// crate::c::Ignored\n".to_string(),
    );
    mods.insert(m("b"), "fn f() { super::a::g() }".to_string());
    mods.insert(
        m("a::child"),
        "use super::Item; use super::super::b::X;".to_string(),
    );
    mods.insert(m("c"), String::new());
    let g = graph(&mods);
    assert_eq!(g[&m("a")], BTreeSet::from([m("b")]));
    assert_eq!(g[&m("b")], BTreeSet::from([m("a")]));
    assert_eq!(
        g[&m("a::child")],
        BTreeSet::from([m("b")]),
        "the parent is not an edge"
    );
    assert!(cycle(&g).is_some_and(|c| c.len() == 2));
}
