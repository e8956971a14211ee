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
    assert_eq!(scan.status(), Status::Clean);
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
    use dispatch::event::pool::PoolDetached;
    use dispatch::journal::{Options, Writer};
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
    assert_eq!(ours.status, dispatch::journal::Status::Clean);
    assert_ne!(
        dispatch::ops::journal::verify(&journal).unwrap().status,
        dispatch::journal::Status::Clean
    );
}

// ---------------------------------------------------------------------------------------------
// The rules of §3, §4, §6 and §8 that the worked example does not exercise: each decided in the
// spec, checked here against dispatch and against the independent reader.

use dispatch::journal::frame;
use dispatch::ops::journal::verify;

const READER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/journal-read.py");

/// The worked example's journal in a fresh directory (Genesis, then `PoolDetached "p1"`).
fn example_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("segment-00000001.djl"), FIXTURE).unwrap();
    (tmp, dir)
}

/// Frame 1 of the example spans 0x60..0xF1, frame 2 0xF1..0x172.
const FRAME2: usize = 0xF1;

/// The example with frame 2 rebuilt from `kind`, `flags` and `payload`, correctly chained and
/// CRC'd: whatever is wrong is only what the caller changed.
fn example_with_frame2(flags: u16, payload: &[u8]) -> Vec<u8> {
    let mut bytes = FIXTURE[..FRAME2].to_vec();
    let prev: frame::Chain = FIXTURE[FRAME2 - 36..FRAME2 - 4].try_into().unwrap();
    frame::encode(&mut bytes, &prev, 2, 101, flags, payload);
    bytes
}

fn frame2_payload() -> Vec<u8> {
    FIXTURE[FRAME2 + 24..FIXTURE.len() - 36].to_vec()
}

fn independent_reader(dir: &std::path::Path) -> serde_json::Value {
    let out = std::process::Command::new("python3")
        .arg(READER)
        .arg(dir)
        .output()
        .expect("python3");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// dispatch's verdict on the example with `bytes` as its segment, checked against load (every
/// command that builds state) and against the independent reader, which must see damage at
/// the same offset.
fn verdict(bytes: &[u8]) -> dispatch::ops::journal::VerifyReport {
    let (_tmp, dir) = example_dir();
    std::fs::write(dir.join("segment-00000001.djl"), bytes).unwrap();
    let r = verify(&dir).unwrap();
    let load = journal::load::<dispatch::state::State>(&dir);
    match r.status {
        Status::Clean | Status::TornTail => assert!(load.is_ok(), "{load:?}"),
        _ => assert!(
            load.is_err(),
            "load must refuse what verify calls {}",
            r.status
        ),
    }
    let theirs = independent_reader(&dir);
    if r.status == Status::Clean {
        assert_eq!(theirs["status"], "clean", "{theirs}");
    } else {
        assert_eq!(theirs["status"], "damaged", "{theirs}");
        assert_eq!(
            theirs["offset"],
            r.damage.as_ref().unwrap().offset,
            "{theirs}"
        );
    }
    r
}

fn with_header_field(at: usize, value: &[u8]) -> Vec<u8> {
    let mut b = FIXTURE.to_vec();
    b[at..at + value.len()].copy_from_slice(value);
    let crc = crc32fast::hash(&b[..92]);
    b[92..96].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn a_segment_header_outside_version_1_is_corrupt_before_the_first_frame() {
    let cases: [(&str, Vec<u8>, &str); 7] = [
        (
            "header length 95",
            with_header_field(10, &95u16.to_le_bytes()),
            "claims 95 bytes",
        ),
        (
            "header length 97",
            with_header_field(10, &97u16.to_le_bytes()),
            "claims 97 bytes",
        ),
        (
            "format version 0",
            with_header_field(8, &0u16.to_le_bytes()),
            "version 0",
        ),
        (
            "format version 2",
            with_header_field(8, &2u16.to_le_bytes()),
            "upgrade dispatch",
        ),
        (
            "a flag",
            with_header_field(12, &1u32.to_le_bytes()),
            "flags",
        ),
        (
            "a high flag",
            with_header_field(12, &0x8000_0000u32.to_le_bytes()),
            "flags",
        ),
        (
            "reserved",
            with_header_field(88, &1u32.to_le_bytes()),
            "reserved",
        ),
    ];
    for (what, bytes, reason) in cases {
        let r = verdict(&bytes);
        assert_eq!(r.status, Status::Corrupt, "{what}");
        let d = r.damage.as_ref().unwrap();
        assert_eq!(
            (d.segment.as_str(), d.offset),
            ("segment-00000001.djl", 0),
            "{what}"
        );
        assert!(d.reason.contains(reason), "{what}: {}", d.reason);
        // Damage before the first frame: no event, no head.
        assert_eq!(
            (r.events, r.last_seq, r.head.as_str()),
            (0, 0, ""),
            "{what}"
        );
    }
    // A newer version is refused whatever follows its version field: its layout is unknown.
    let mut newer = FIXTURE.to_vec();
    newer[8..10].copy_from_slice(&7u16.to_le_bytes());
    let r = verdict(&newer);
    assert!(r.damage.unwrap().reason.contains("upgrade dispatch"));
}

#[test]
fn an_undefined_frame_flag_bit_is_corrupt_at_its_frame() {
    for flags in [0x0003u16, 0x0002, 0x8001] {
        let r = verdict(&example_with_frame2(flags, &frame2_payload()));
        assert_eq!(r.status, Status::Corrupt, "flags {flags:#06x}");
        let d = r.damage.unwrap();
        assert_eq!((d.offset, d.bytes), (FRAME2 as u64, 0x81), "{flags:#06x}");
        assert!(d.reason.contains("undefined frame flag"), "{}", d.reason);
        assert_eq!((r.events, r.last_seq), (1, 1));
        assert_eq!(r.head, hex::encode(&FIXTURE[FRAME2 - 36..FRAME2 - 4]));
    }
    // Bit 0 of a known kind is the kind's to say: clear on PoolDetached, it is still read.
    assert_eq!(
        verdict(&example_with_frame2(0, &frame2_payload())).status,
        Status::Clean
    );
}

#[test]
fn bytes_after_the_payload_value_are_corrupt() {
    for extra in [&[0xc0u8][..], &[0x00], &[0x91, 0x01]] {
        let mut payload = frame2_payload();
        payload.extend_from_slice(extra);
        let r = verdict(&example_with_frame2(1, &payload));
        assert_eq!(r.status, Status::Corrupt, "{extra:?}");
        let d = r.damage.unwrap();
        assert_eq!(d.offset, FRAME2 as u64);
        assert!(
            d.reason.contains("after its MessagePack value"),
            "{}",
            d.reason
        );
    }
}

/// §6: where `str` is specified, a `bin` holding UTF-8 is read as that string (rmp-serde reads
/// by type, not by format family); one that is not UTF-8 is corrupt. Writers never write it.
/// (The independent reader does not decode fields, so it is not asked.)
#[test]
fn bin_where_str_is_specified_reads_as_the_string_it_holds() {
    let payload = frame2_payload();
    assert_eq!(&payload[payload.len() - 4..], [0x91, 0xa2, b'p', b'1']);
    let body = |bin: &[u8]| {
        let mut p = payload[..payload.len() - 3].to_vec();
        p.extend_from_slice(bin);
        example_with_frame2(1, &p)
    };
    let (_tmp, dir) = example_dir();
    let seg = dir.join("segment-00000001.djl");
    std::fs::write(&seg, body(&[0xc4, 0x02, b'p', b'1'])).unwrap();
    assert_eq!(verify(&dir).unwrap().status, Status::Clean);
    let mut events = Vec::new();
    journal::replay(&dir, None, |env| {
        events.push(env);
        Ok(())
    })
    .unwrap();
    assert!(matches!(&events[1].event, Event::PoolDetached(d) if d.pool == "p1"));

    std::fs::write(&seg, body(&[0xc4, 0x02, 0xff, 0xfe])).unwrap();
    let r = verify(&dir).unwrap();
    assert_eq!(r.status, Status::Corrupt);
    assert_eq!(r.damage.unwrap().offset, FRAME2 as u64);
    assert!(journal::load::<dispatch::state::State>(&dir).is_err());
}

/// §10.1's damage examples, each made from the worked example, read as the spec says.
#[test]
fn the_damage_examples_read_as_the_spec_says() {
    let genesis = "753b98c9";
    let frame1 = "bf93b22b";
    let mut flipped = FIXTURE.to_vec();
    flipped[0xA0] ^= 0x01;
    let mut tampered = FIXTURE.to_vec();
    tampered[0x14D] = b'2';
    let n = tampered.len();
    let crc = crc32fast::hash(&tampered[FRAME2..n - 4]);
    tampered[n - 4..].copy_from_slice(&crc.to_le_bytes());
    // (change, bytes, status, damage offset, damage bytes, last seq, head prefix)
    type Example = (
        &'static str,
        Vec<u8>,
        &'static str,
        u64,
        u64,
        u64,
        &'static str,
    );
    let cases: [Example; 4] = [
        (
            "cut at 0x160",
            FIXTURE[..0x160].to_vec(),
            "torn_tail",
            0xF1,
            0x6F,
            1,
            frame1,
        ),
        (
            "zeros",
            [FIXTURE, &[0; 40]].concat(),
            "torn_tail",
            0x172,
            40,
            2,
            "b447ca24",
        ),
        ("bit 0 of 0xA0", flipped, "corrupt", 0x60, 0x91, 0, genesis),
        ("p1 → p2", tampered, "tampered", 0xF1, 0x81, 1, frame1),
    ];
    for (what, bytes, status, offset, span, last_seq, head) in cases {
        let r = verdict(&bytes);
        let d = r.damage.as_ref().unwrap();
        assert_eq!(
            (r.status.as_str(), d.offset, d.bytes, r.last_seq),
            (status, offset, span, last_seq),
            "{what}: {}",
            d.reason
        );
        assert!(r.head.starts_with(head), "{what}: {}", r.head);
        let row =
            format!("| {what} | `{status}` | `{offset:03X}` | {span} | {last_seq} | `{head}…` |");
        assert!(SPEC.contains(&row), "journal-format.md §10.1 lacks `{row}`");
    }
}

/// §6: structs are arrays and UUIDs and digests are `bin`, the writer's only forms. rmp-serde
/// would read a struct written as a map (by field names or positions, unknown keys skipped) and
/// a UUID written as an array of integers; dispatch refuses both as `corrupt`, at the frame.
#[test]
fn a_map_or_a_uuid_of_integers_is_corrupt() {
    let payload = frame2_payload();
    let (head, body) = payload.split_at(payload.len() - 4);
    assert_eq!(body, [0x91, 0xa2, b'p', b'1']);
    assert_eq!(&head[10..12], [0xc4, 0x10], "the id follows a uint 64 time");
    let mut id_as_ints = vec![0xdc, 0x00, 0x10];
    for &b in &head[12..28] {
        id_as_ints.extend(if b < 0x80 { vec![b] } else { vec![0xcc, b] });
    }
    let cases: [(&str, Vec<u8>, u16); 5] = [
        ("a map by name", [head, b"\x81\xa4pool\xa2p1"].concat(), 101),
        ("a map by position", [head, b"\x81\x00\xa2p1"].concat(), 101),
        ("a map in an unknown kind", [head, b"\x80"].concat(), 9999),
        (
            "an id of integers",
            [&head[..10], &id_as_ints, &head[28..], body].concat(),
            101,
        ),
        ("the writer's form", payload.clone(), 101),
    ];
    for (what, p, kind) in cases {
        let mut bytes = FIXTURE[..FRAME2].to_vec();
        let prev: frame::Chain = FIXTURE[FRAME2 - 36..FRAME2 - 4].try_into().unwrap();
        frame::encode(&mut bytes, &prev, 2, kind, 0, &p);
        let r = verdict(&bytes);
        if what == "the writer's form" {
            assert_eq!(r.status, Status::Clean);
            continue;
        }
        assert_eq!(r.status, Status::Corrupt, "{what}");
        let d = r.damage.unwrap();
        assert_eq!(d.offset, FRAME2 as u64, "{what}: {}", d.reason);
    }
}

/// §9: the table and the reader's rule name the snapshot version dispatch writes.
#[test]
fn the_snapshot_version_in_the_spec_is_the_one_written() {
    let v = dispatch::journal::snapshot::SNAPSHOT_VERSION;
    let section = SPEC.split("## 9. Snapshot files").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    assert!(
        section.contains(&format!("| 8 | 2 | snapshot format version, `u16` {v} (")),
        "§9's table names another version than {v}"
    );
    assert!(
        section.contains(&format!("its version is {v} (the table's)")),
        "§9's rule names another version than {v}"
    );
    for other in (1..v).chain(v + 1..v + 3) {
        assert!(
            // The word after it too: "is 1" is the start of "is 10".
            !section.contains(&format!("its version is {other} ")),
            "§9 names version {other}"
        );
    }
}

/// §6: every job-id field of an event body (a `JobId` in `src/event/`) is typed `JobId` in
/// the spec's row for its struct, so that a reader knows which integers must not be 0.
#[test]
fn every_job_id_field_is_typed_job_id_in_the_spec() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/event");
    let mut found = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let source = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for block in source.split("pub struct ").skip(1) {
            let name = block.split([' ', '(', '{']).next().unwrap();
            let body = block.split("\n}").next().unwrap();
            for line in body.lines().map(str::trim) {
                let Some((field, ty)) = line
                    .strip_prefix("pub ")
                    .and_then(|l| l.strip_suffix(','))
                    .and_then(|l| l.split_once(": "))
                else {
                    continue;
                };
                if ty != "JobId" && ty != "Option<JobId>" {
                    continue;
                }
                found += 1;
                let row = SPEC
                    .lines()
                    .find(|l| {
                        l.contains(&format!(" | `{name}` | "))
                            || l.starts_with(&format!("`{name}` ="))
                    })
                    .unwrap_or_else(|| panic!("journal-format.md has no row for {name}"));
                assert!(
                    row.contains(&format!("`{field}: {ty}`")),
                    "journal-format.md: {name}.{field} is not typed `{ty}`"
                );
            }
        }
    }
    assert!(
        found >= 20,
        "only {found} job-id fields found: did the sources move?"
    );
    assert!(!SPEC.contains("job_id: u32`") && !SPEC.contains("job_id: Option<u32>`"));
}
