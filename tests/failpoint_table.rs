//! docs/testing.md's failpoint table is the list of crash points a reader trusts: it must name
//! exactly the points compiled into the code, and every one of them must be driven by some
//! test (a point nothing crashes at is a boundary nobody has checked). Issue 11 §4, in the
//! manner of tests/format_spec.rs pinning the hex example.

use std::collections::BTreeSet;
use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `failpoint::hit("name")` in `src/`.
fn points_in_code(root: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut points = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("failpoint::hit(") {
            rest = &rest[at + "failpoint::hit(".len()..];
            let arg = rest.trim_start();
            let name = arg
                .strip_prefix('"')
                .and_then(|a| a.split_once('"'))
                .map(|(name, _)| name)
                .unwrap_or_else(|| {
                    panic!("{}: a failpoint whose name is not a literal", f.display())
                });
            points.insert(name.to_owned());
        }
    }
    points
}

/// The first column of the table under `## Failpoints`.
fn points_in_table(architecture: &str) -> BTreeSet<String> {
    let section = architecture
        .split_once("\n## Failpoints\n")
        .expect("docs/testing.md has a Failpoints section")
        .1;
    let table = section
        .split_once("| name | where |\n|---|---|\n")
        .expect("the Failpoints section has its table")
        .1;
    table
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cell = row.split('|').nth(1).unwrap().trim();
            cell.trim_matches('`').to_owned()
        })
        .collect()
}

#[test]
fn the_failpoint_table_names_exactly_the_points_in_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let code = points_in_code(root);
    let table = points_in_table(&std::fs::read_to_string(root.join("docs/testing.md")).unwrap());
    assert!(
        code.len() >= 30,
        "only {} points found: {code:?}",
        code.len()
    );
    let undocumented: Vec<_> = code.difference(&table).collect();
    let stale: Vec<_> = table.difference(&code).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "in the code but not in docs/testing.md's table: {undocumented:?}; in the table but \
         not in the code: {stale:?}"
    );
}

#[test]
fn every_failpoint_is_driven_by_a_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    let this = root.join("tests/failpoint_table.rs");
    let tests: String = files
        .iter()
        .filter(|f| **f != this)
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let untested: Vec<_> = points_in_code(root)
        .into_iter()
        .filter(|p| !tests.contains(&format!("{p}=")) && !tests.contains(&format!("\"{p}\"")))
        .collect();
    assert!(
        untested.is_empty(),
        "no test names these failpoints, so no crash there is checked: {untested:?}"
    );
}
