//! The worked example in `journal-format.md` is a real journal: its hex dump must match the
//! fixture byte for byte, and the reader must accept it as the spec describes.

use dispatch::event::{Event, FLAG_MUST_UNDERSTAND};
use dispatch::journal::{self, Status};

const SPEC: &str = include_str!("../journal-format.md");
const FIXTURE: &[u8] = include_bytes!("fixtures/journal/example-segment-00000001.djl");

/// Parse `xxd` lines of the form `00000010: 784c 10f9 …  ascii`.
fn hex_dump_bytes(spec: &str) -> Vec<u8> {
    let section = spec
        .split("## 10. Worked example")
        .nth(1)
        .expect("the spec has a worked example");
    let block = section
        .split("```")
        .nth(1)
        .expect("the example has a code block");
    let mut out = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (offset, rest) = line.split_once(": ").expect("xxd line");
        assert_eq!(
            usize::from_str_radix(offset, 16).unwrap(),
            out.len(),
            "offsets are contiguous"
        );
        let hex_part = &rest[..rest
            .find("  ")
            .expect("xxd separates hex and ascii by two spaces")];
        let digits: String = hex_part.split_whitespace().collect();
        out.extend(hex::decode(digits).expect("hex digits"));
    }
    out
}

#[test]
fn spec_hex_dump_is_the_fixture() {
    assert_eq!(hex_dump_bytes(SPEC), FIXTURE);
}

#[test]
fn the_example_reads_as_the_spec_says() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("segment-00000001.djl"), FIXTURE).unwrap();
    let mut events = Vec::new();
    let scan = journal::replay(dir.path(), None, |env| {
        events.push(env);
        Ok(())
    })
    .unwrap();
    assert_eq!(scan.status, Status::Clean);
    let head = scan.head.unwrap();
    assert_eq!(head.last_seq, 2);
    assert!(hex::encode(head.chain).starts_with("b447ca24"));
    assert!(SPEC.contains("b447ca24"));
    assert_eq!(events.len(), 2);
    assert!(matches!(&events[0].event, Event::Genesis(g) if g.format_version == 1));
    assert!(matches!(&events[1].event, Event::PoolDetached(d) if d.pool == "p1"));
    assert_eq!(
        events[1].event.flags() & FLAG_MUST_UNDERSTAND,
        FLAG_MUST_UNDERSTAND
    );
    assert_eq!(events[0].actor.user, "ana");
    assert_eq!(events[0].actor.pid, 4242);
}

#[test]
fn every_known_kind_is_in_the_spec_table() {
    for (code, name) in dispatch::event::KNOWN_KINDS {
        let row = format!("| {code} | `{name}` |");
        assert!(SPEC.contains(&row), "journal-format.md §6.2 lacks `{row}`");
    }
}

/// An independent reader, written in Python from the spec alone, agrees with dispatch on a
/// multi-segment journal: same events, same last seq, same head.
#[test]
fn an_independent_reader_agrees_with_dispatch() {
    use dispatch::journal::{Options, Writer};
    use dispatch::state::pool::PoolDetached;
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let w = Writer::open(
        &journal,
        Options {
            max_segment_bytes: 4096,
        },
    )
    .unwrap();
    for i in 0..100 {
        w.append(vec![Event::PoolDetached(PoolDetached {
            pool: format!("pool-{i}"),
        })])
        .unwrap();
    }
    drop(w);
    let segments = dispatch::journal::segment::list(&journal).unwrap().len();
    assert!(
        segments > 3,
        "the journal should span several segments, has {segments}"
    );
    let reader = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/journal-read.py");
    let out = std::process::Command::new("python3")
        .arg(reader)
        .arg(&journal)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let theirs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours = dispatch::ops::journal::verify(&journal).unwrap();
    assert_eq!(theirs["status"], "clean");
    assert_eq!(theirs["events"], ours.events);
    assert_eq!(theirs["last_seq"], ours.last_seq);
    assert_eq!(theirs["head"], ours.head);
    assert_eq!(theirs["kinds"]["101"], 100);

    // And it sees the same damage as damage.
    let first = journal.join(dispatch::journal::segment::file_name(1));
    let mut bytes = std::fs::read(&first).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&first, bytes).unwrap();
    let out = std::process::Command::new("python3")
        .arg(reader)
        .arg(&journal)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(ours.kind, dispatch::journal::Status::Clean);
    assert_ne!(
        dispatch::ops::journal::verify(&journal).unwrap().kind,
        dispatch::journal::Status::Clean
    );
}
