//! The layering ARCHITECTURE.md states ("## Layers") holds in the code: a module of `src/`
//! imports (`crate::…`) only from its own floor and the floors below, except the upward imports
//! the section names one by one. A new upward import fails here; so does a named one that is
//! gone (then strike it from the list). Issue 11 §4.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn layers_section(architecture: &str) -> &str {
    let section = architecture
        .split_once("\n## Layers\n")
        .expect("ARCHITECTURE.md has a Layers section")
        .1;
    section.split_once("\n## ").map_or(section, |(s, _)| s)
}

/// Each module's floor, from the numbered list: "N. `a`, `b`: ...".
fn floors(section: &str) -> BTreeMap<String, usize> {
    let mut floors = BTreeMap::new();
    for line in section.lines() {
        let Some((number, rest)) = line.split_once(". ") else {
            continue;
        };
        let Ok(floor) = number.trim().parse::<usize>() else {
            continue;
        };
        let names = rest.split_once(':').map_or(rest, |(n, _)| n);
        for name in names.split(',') {
            let name = name.trim().trim_matches('`');
            assert!(!name.is_empty(), "an empty name on floor {floor}: {line}");
            floors.insert(name.to_owned(), floor);
        }
    }
    floors
}

/// The named exceptions: "- `from -> to`: why".
fn exceptions(section: &str) -> BTreeSet<(String, String)> {
    section
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split_once('`'))
        .filter_map(|(edge, _)| edge.split_once(" -> "))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

/// Every (module, module it imports) in `src/`, by the first path segment after `crate::`.
fn imports(src: &Path, known: &BTreeMap<String, usize>) -> BTreeSet<(String, String)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges = BTreeSet::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (at, _) in text.match_indices("crate::") {
            let before = text[..at].chars().next_back();
            // `dispatch::crate::` does not occur; `$crate::` is a macro's own path.
            if before == Some('$') {
                continue;
            }
            let name: String = text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                .collect();
            if known.contains_key(&name) && name != module {
                edges.insert((module.clone(), name));
            }
        }
    }
    edges
}

#[test]
fn no_module_imports_from_a_floor_above_its_own_but_the_named_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let section = layers_section(&architecture);
    let floors = floors(section);
    let allowed = exceptions(section);

    // Every module of the crate has a floor.
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let modules: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect();
    let unplaced: Vec<_> = modules
        .iter()
        .filter(|m| !floors.contains_key(*m))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules with no floor in ARCHITECTURE.md: {unplaced:?}"
    );

    let edges = imports(&root.join("src"), &floors);
    assert!(edges.len() > 20, "too few imports found: {edges:?}");
    let upward: BTreeSet<(String, String)> = edges
        .iter()
        .filter(|(a, b)| floors[b] > floors[a])
        .cloned()
        .collect();
    let new: Vec<_> = upward.difference(&allowed).collect();
    let mended: Vec<_> = allowed.difference(&upward).collect();
    assert!(
        new.is_empty(),
        "imports that run up a floor (move the code down, or argue for it in ARCHITECTURE.md's \
         Layers): {new:?}"
    );
    assert!(
        mended.is_empty(),
        "named upward imports that no longer exist: strike them from ARCHITECTURE.md's Layers: \
         {mended:?}"
    );
}
