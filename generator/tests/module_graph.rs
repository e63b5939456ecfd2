//! The generator's module tree has no import cycles, file by file and
//! between its top-level modules (`target`, `format`, `family`, `emit`, ...).
//!
//! Edges are the `crate::` paths a source file names outside its test
//! module; a `mod` declaration is not an edge. Run with `--nocapture` to
//! print the top-level graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `family/int8/emit/mod.rs` -> `family::int8::emit`.
fn module_of(rel: &Path) -> String {
    let s = rel.with_extension("").to_string_lossy().replace('\\', "/");
    let s = s.strip_suffix("/mod").unwrap_or(&s).to_string();
    s.replace('/', "::")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without line comments and without the `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let cut = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..cut]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Modules named by `crate::a::b::...` paths, resolved to the longest
/// prefix that is a module; `use crate::a::{b, c}` names `a::b` and `a::c`.
fn references(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + 7..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':' || *c == '{')
            .collect();
        let (head, group) = match path.split_once('{') {
            Some((h, _)) => {
                let end = rest.find('}').unwrap_or(rest.len());
                (
                    h.trim_end_matches(':').to_string(),
                    Some(&rest[h.len() + 1..end]),
                )
            }
            None => (path.clone(), None),
        };
        // `a::{b, c}` names `a::b` and `a::c`; `a` itself only through `self`
        // or items of its own (resolved below to the longest module prefix).
        let mut candidates = Vec::new();
        match group {
            Some(g) => {
                for item in g.split(',') {
                    let item = item.trim().split(" as ").next().unwrap_or("").trim();
                    match item {
                        "" => {}
                        "self" => candidates.push(head.clone()),
                        _ => candidates.push(format!("{head}::{item}")),
                    }
                }
            }
            None => candidates.push(head.clone()),
        }
        for c in candidates {
            let segs: Vec<&str> = c.split("::").filter(|s| !s.is_empty()).collect();
            for n in (1..=segs.len()).rev() {
                let m = segs[..n].join("::");
                if modules.contains(&m) {
                    out.insert(m);
                    break;
                }
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = src_dir();
    let mut all = Vec::new();
    files(&root, &mut all);
    let mut by_module = BTreeMap::new();
    for f in &all {
        let rel = f.strip_prefix(&root).unwrap();
        let m = module_of(rel);
        if m == "lib" || m == "main" {
            continue;
        }
        by_module.insert(m, std::fs::read_to_string(f).unwrap());
    }
    let modules: BTreeSet<String> = by_module.keys().cloned().collect();
    by_module
        .iter()
        .map(|(m, text)| {
            let mut refs = references(&code(text), &modules);
            refs.remove(m);
            (m.clone(), refs)
        })
        .collect()
}

/// A cycle in `g`, if any, as the list of nodes around it.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_cycles_between_files() {
    let g = graph();
    assert!(g.len() > 20, "found only {} modules", g.len());
    if let Some(c) = find_cycle(&g) {
        panic!("module cycle: {}", c.join(" -> "));
    }
}

#[test]
fn no_cycles_between_top_level_modules() {
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, refs) in graph() {
        let head = m.split("::").next().unwrap().to_string();
        let entry = top.entry(head.clone()).or_default();
        for r in refs {
            let rh = r.split("::").next().unwrap().to_string();
            if rh != head {
                entry.insert(rh);
            }
        }
    }
    for (m, refs) in &top {
        println!(
            "{m} -> {}",
            refs.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    if let Some(c) = find_cycle(&top) {
        panic!("top-level module cycle: {}", c.join(" -> "));
    }
}

#[test]
fn the_checker_finds_a_cycle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&g).unwrap(), ["a", "b", "c", "a"]);
    let modules = BTreeSet::from(["x".to_string(), "x::y".to_string(), "z".to_string()]);
    let r = references(
        "use crate::x::{y::Thing, Other};\nlet a = crate::z::f();",
        &modules,
    );
    assert_eq!(r, BTreeSet::from(["x".into(), "x::y".into(), "z".into()]));
}
