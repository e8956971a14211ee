//! No function body in `src/` runs over 70 lines unless the reason is written beside it (the
//! rule began in `ops/` and `cli/`, and now holds everywhere). `tools/long-fns` measures them (a `// long: WHY` line above a function
//! is its written reason and is listed with it); this test fails when one over the limit has no
//! reason, so the rule holds without anyone remembering to run the tool.

use std::path::Path;
use std::process::Command;

#[test]
fn no_function_in_src_runs_over_70_lines_without_its_reason() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("tools/long-fns"))
        .arg("src")
        .current_dir(root)
        .output()
        .expect("python3 runs tools/long-fns");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unexplained: Vec<&str> = std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("(long: "))
        .collect();
    assert!(
        unexplained.is_empty(),
        "split these, or write why above each (`// long: …`):\n{}",
        unexplained.join("\n")
    );
}

/// The measure itself: a function one line over the limit is listed, one at it is not, and a
/// written reason travels with it.
#[test]
fn the_measure_counts_body_lines_and_keeps_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let body = |n: usize| {
        (0..n)
            .map(|i| format!("    let _x{i} = {i};\n"))
            .collect::<String>()
    };
    let src = format!(
        "fn at_limit() {{\n{}}}\n\nfn over() {{\n{}}}\n\n// long: one table, read top to bottom\nfn explained() {{\n{}}}\n",
        body(70),
        body(71),
        body(80)
    );
    let file = dir.path().join("f.rs");
    std::fs::write(&file, src).unwrap();
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/long-fns"))
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap_or(""))
        .collect();
    assert_eq!(names, ["explained", "over"], "{text}");
    assert!(
        text.contains("(long: one table, read top to bottom)"),
        "{text}"
    );
}
