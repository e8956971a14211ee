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

/// Below `cli`, a message names the command to run as a `dispatch::next::Next`, and
/// `cli::hint` spells it: no other layer knows how the CLI is spelled. A unit test module may
/// pin the text a user reads.
#[test]
fn only_cli_spells_a_dispatch_command_line() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut spelled = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("cli") || rel == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (line, literal) in string_literals(&without_test_modules(&text)) {
            // A command line in backquotes, or a session's built bare (`dispatch session launch
            // MIRROR -T TARGET`, once `ops::session::command_for`'s own spelling).
            let bare_session = literal.contains("dispatch session {") && literal.contains(" -T ");
            if literal.contains("`dispatch ") || bare_session {
                spelled.push(format!("{}:{line}: {literal}", rel.display()));
            }
        }
    }
    assert!(
        spelled.is_empty(),
        "command lines spelled outside src/cli/ (name a `next::Next` instead): {spelled:#?}"
    );
}

#[test]
fn a_continued_line_does_not_hide_a_command_line() {
    let code = "let q = '\"'; // \"`dispatch x`\"\n\
                f::<'a>(\"Run `dispatch \\\n    reconcile`\", r#\"q\"#, '\\'', '…');";
    assert_eq!(
        string_literals(code),
        [
            (2, "Run `dispatch reconcile`".to_owned()),
            (3, "q".to_owned())
        ]
    );
}

/// `text` with each `#[cfg(test)] mod` blanked out, its lines kept so that lines still count.
fn without_test_modules(text: &str) -> String {
    let mut parts = text.split("\n#[cfg(test)]\nmod ");
    let mut code = parts.next().unwrap().to_owned();
    for part in parts {
        let (module, after) = part.split_once("\n}\n").unwrap_or((part, ""));
        code += &"\n".repeat(module.matches('\n').count() + 4);
        code += after;
    }
    code
}

/// The text of each string literal in `code`, escapes resolved (a line continuation cannot
/// split what it holds), with the line it starts on. Comments are skipped.
fn string_literals(code: &str) -> Vec<(usize, String)> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let (b, mut i, mut line, mut found) = (code.as_bytes(), 0, 1, Vec::new());
    while i < b.len() {
        let rest = &code[i..];
        let raw_hashes = (b[i] == b'r' && (i == 0 || !ident(b[i - 1])))
            .then(|| rest.len() - 1 - rest[1..].trim_start_matches('#').len())
            .filter(|&h| rest[1 + h..].starts_with('"'));
        let skip = if rest.starts_with("//") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            rest.find("*/").unwrap() + 2
        } else if b[i] == b'\'' {
            // A char literal, else a lifetime.
            match rest[1..].chars().next() {
                Some('\\') => rest[3..].find('\'').unwrap() + 4,
                Some(c) if rest[1 + c.len_utf8()..].starts_with('\'') => 2 + c.len_utf8(),
                _ => 1,
            }
        } else if let Some(h) = raw_hashes {
            let close = format!("\"{}", "#".repeat(h));
            let end = 2 + h + rest[2 + h..].find(&close).unwrap();
            found.push((line, rest[2 + h..end].to_owned()));
            end + close.len()
        } else if b[i] == b'"' {
            let (text, len) = cooked(&rest[1..]);
            found.push((line, text));
            len + 1
        } else {
            rest.chars().next().unwrap().len_utf8()
        };
        line += rest[..skip].matches('\n').count();
        i += skip;
    }
    found
}

/// A string literal's text, from just after its opening quote, and its length in `s` with
/// the closing quote.
fn cooked(s: &str) -> (String, usize) {
    let (mut text, mut chars) = (String::new(), s.char_indices());
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return (text, at + 1),
            '\\' => match chars.next() {
                Some((at, '\n')) => {
                    let after = &s[at + 1..];
                    let blank = &after[..after.len() - after.trim_start().len()];
                    for _ in blank.chars() {
                        chars.next();
                    }
                }
                Some((_, 'n')) => text.push('\n'),
                Some((_, 't')) => text.push('\t'),
                Some((_, escaped)) => text.push(escaped),
                None => break,
            },
            c => text.push(c),
        }
    }
    panic!("a string literal with no end: {s:.80}")
}
