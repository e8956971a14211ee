//! Reading and classifying a journal: clean, torn tail, corrupt or tampered.
//!
//! The scan walks every frame of every segment in order, checks CRCs, seq continuity and the
//! hash chain, hands each valid frame to a visitor, and stops at the first damage. Damage is a
//! torn tail only when it is confined to the end of the last segment with no valid frame after
//! it; a fork when two writers appended after one frame and every later frame continues one of
//! the branches (`fork`); everything else is corrupt (never truncated) or, when the CRCs hold
//! but the chain does not, tampered.

use std::path::{Path, PathBuf};

use super::fork::{self, Fork};
use super::frame::{self, Chain, FrameFault, FrameRef};
use super::segment::{self, SegmentHeader, SEGMENT_HEADER_LEN};

/// The most bytes one writer call puts on disk; a torn write cannot damage more than this.
pub const MAX_WRITE_BYTES: usize = 8 << 20;
/// A damaged tail longer than this cannot be one torn write, so it is corruption.
pub const MAX_TORN_SPAN: usize = MAX_WRITE_BYTES + frame::MAX_PAYLOAD + frame::OVERHEAD;

crate::words! {
    /// What a scan found the journal to be; `journal verify` and the audit show its word.
    #[derive(Default)]
    pub enum Status {
        #[default]
        Clean => "clean",
        /// The writer died mid-frame: the tail is cut by the next write or `journal repair`.
        TornTail => "torn_tail",
        Corrupt => "corrupt",
        Tampered => "tampered",
        /// Two writers appended after the same frame (§8.1): every frame is whole and continues
        /// some branch, so `journal repair` can merge them keeping every event.
        Forked => "forked",
    }
}

impl Status {
    /// Whether every write, and every command that loads state, refuses the journal.
    pub fn refuses_writes(self) -> bool {
        matches!(self, Status::Corrupt | Status::Tampered | Status::Forked)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The segment's file name.
    pub segment: String,
    pub offset: u64,
    /// Length of the damaged span (to the next valid frame, or to the end of the file).
    pub bytes: u64,
    pub reason: String,
}

/// Where the valid prefix of the journal ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub journal_id: [u8; 16],
    pub last_seq: u64,
    pub chain: Chain,
    pub segment_no: u64,
    pub segment_path: PathBuf,
    /// Length of the valid prefix of the last segment.
    pub segment_len: u64,
    /// Start offset of the last valid frame in its segment, if the segment has one.
    pub last_frame_offset: Option<u64>,
}

impl Head {
    /// Where a scan goes on after this head: `None` when its segment has no frame yet.
    pub fn resume(&self) -> Option<Resume> {
        Some(Resume {
            journal_id: self.journal_id,
            segment_no: self.segment_no,
            offset: self.segment_len,
            next_seq: self.last_seq + 1,
            chain: self.chain,
            last_frame_offset: self.last_frame_offset?,
        })
    }
}

/// The class of damage that ends a scan (a fork is told apart only after, §8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    TornTail,
    Corrupt,
    Tampered,
}

/// How a scan ended: each damaged outcome carries its damage.
#[derive(Clone, Debug)]
pub enum Outcome {
    Clean,
    Damaged(Class, Damage),
    Forked(Damage, Box<Fork>),
}

#[derive(Clone, Debug)]
pub struct Scan {
    /// Valid frames visited.
    pub events: u64,
    /// `None` when the journal has no segment at all.
    pub head: Option<Head>,
    pub outcome: Outcome,
}

impl Scan {
    pub fn status(&self) -> Status {
        match &self.outcome {
            Outcome::Clean => Status::Clean,
            Outcome::Damaged(Class::TornTail, _) => Status::TornTail,
            Outcome::Damaged(Class::Corrupt, _) => Status::Corrupt,
            Outcome::Damaged(Class::Tampered, _) => Status::Tampered,
            Outcome::Forked(..) => Status::Forked,
        }
    }

    pub fn damage(&self) -> Option<&Damage> {
        match &self.outcome {
            Outcome::Clean => None,
            Outcome::Damaged(_, damage) | Outcome::Forked(damage, _) => Some(damage),
        }
    }

    pub fn fork(&self) -> Option<&Fork> {
        match &self.outcome {
            Outcome::Forked(_, fork) => Some(fork),
            _ => None,
        }
    }

    /// The error every write and every load of the journal in `dir` refuses this scan with.
    pub fn refusal(&self, dir: &Path) -> Result<(), super::JournalError> {
        match self.damage() {
            Some(damage) if self.status().refuses_writes() => Err(super::JournalError::Damaged {
                dir: dir.to_owned(),
                status: self.status(),
                damage: damage.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// Where to start scanning: the whole journal, or a known-good point inside it.
#[derive(Clone, Debug)]
pub struct Resume {
    pub journal_id: [u8; 16],
    pub segment_no: u64,
    pub offset: u64,
    pub next_seq: u64,
    pub chain: Chain,
    /// Start of the frame that ends at `offset`.
    pub last_frame_offset: u64,
}

fn damaged(class: Class, name: &str, offset: u64, bytes: u64, reason: String) -> (Class, Damage) {
    (
        class,
        Damage {
            segment: name.to_owned(),
            offset,
            bytes,
            reason,
        },
    )
}

/// How the search for a valid frame after damage is done.
type FindValidFrame = fn(&[u8]) -> Option<usize>;

/// Whether each valid frame's payload is decoded too (§8 of journal-format.md: a frame whose
/// payload does not decode is damage like any other, and it is `corrupt`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Payloads {
    /// Decoded by the scan: the classifier.
    Decode,
    /// Left to the visitor, which decodes them anyway (replay); a visitor that cannot decode
    /// one asks [`classify`] for the verdict.
    Visitor,
}

/// The one classifier of a journal: every command that says what state a journal is in
/// (`journal verify`, `journal repair`, `journal dump`, `audit`, the writer's open, `load`)
/// takes its verdict from this function. It is [`scan`] with every payload decoded (§6,
/// strictly: see `event::check_payload`), so that a frame whose CRCs and chain hold but whose
/// payload does not decode is `corrupt`, reported at that frame's offset, with the head at the
/// frame before it.
pub fn classify(
    dir: &Path,
    resume: Option<&Resume>,
    visit: impl FnMut(&FrameRef<'_>) -> bool,
) -> std::io::Result<Scan> {
    scan_using(dir, resume, visit, find_valid_frame, Payloads::Decode)
}

/// [`classify`] with the search for a valid frame after damage done the obvious way: the
/// reference the properties compare against.
#[doc(hidden)]
pub fn classify_with_reference_search(
    dir: &Path,
    resume: Option<&Resume>,
    visit: impl FnMut(&FrameRef<'_>) -> bool,
) -> std::io::Result<Scan> {
    scan_using(
        dir,
        resume,
        visit,
        reference_find_valid_frame,
        Payloads::Decode,
    )
}

/// Why a valid frame's payload is damage, if it is: it does not decode as its kind's body
/// (§6), or it is the first frame of the journal and not a `Genesis` of this journal (§6.1).
fn payload_fault(f: &FrameRef<'_>, journal_id: &[u8; 16], payloads: Payloads) -> Option<String> {
    if f.seq == 1 {
        if f.kind != GENESIS_KIND {
            return Some(format!(
                "the first event is kind {}, not Genesis (kind {GENESIS_KIND})",
                f.kind
            ));
        }
        return match crate::event::decode_payload(f.seq, f.kind, f.flags, f.payload) {
            Ok(env) => match env.event {
                crate::event::Event::Genesis(g) if g.journal_id.as_bytes() == journal_id => None,
                crate::event::Event::Genesis(g) => Some(format!(
                    "the Genesis event names journal {}, not the segment header's {}",
                    g.journal_id,
                    uuid::Uuid::from_bytes(*journal_id)
                )),
                _ => unreachable!("kind 1 decodes to Genesis"),
            },
            Err(e) => Some(format!("event 1 does not decode: {e}")),
        };
    }
    if payloads == Payloads::Visitor {
        return None;
    }
    crate::event::check_payload(f.seq, f.kind, f.flags, f.payload)
        .err()
        .map(|e| format!("event {} does not decode: {e}", f.seq))
}

const GENESIS_KIND: u16 = 1;

/// The rules of §4 and §6 a reader checks on every valid frame, whatever it knows of its kind
/// and in every mode (so that `load`, which decodes on another thread, and [`classify`] agree):
/// no undefined flag bit is set, and the payload is exactly one MessagePack value.
fn frame_rule_fault(f: &FrameRef<'_>) -> Option<String> {
    rule_fault(f.seq, f.flags, f.payload)
}

/// [`frame_rule_fault`] on a frame's parts: the writer asks it too, so that it never writes a
/// frame a reader would call corrupt.
pub(crate) fn rule_fault(seq: u64, flags: u16, payload: &[u8]) -> Option<String> {
    let undefined = flags & !crate::event::FLAG_MUST_UNDERSTAND;
    if undefined != 0 {
        return Some(format!(
            "event {seq} sets undefined frame flag bits {undefined:#06x}"
        ));
    }
    match msgpack_value(payload) {
        Some(v) if v.len != payload.len() => Some(format!(
            "event {seq} does not decode: {} bytes after its MessagePack value",
            payload.len() - v.len
        )),
        Some(MsgpackValue {
            first_map: Some(at),
            ..
        }) => Some(format!(
            "event {seq} does not decode: a MessagePack map at payload byte {at}, \
             where every struct is an array"
        )),
        Some(_) => None,
        None => Some(format!(
            "event {seq} does not decode: its payload is not a MessagePack value"
        )),
    }
}

/// What [`msgpack_value`] measured.
#[derive(Debug, PartialEq, Eq)]
struct MsgpackValue {
    len: usize,
    /// The offset of the first map in it: no payload may hold one (journal-format.md §6).
    first_map: Option<usize>,
}

/// The one MessagePack value `b` starts with, if it holds a whole one. Iterative (a count of
/// values still to skip), so nesting costs no stack; each value takes at least one byte, so a
/// count above the bytes left is not a value.
fn msgpack_value(b: &[u8]) -> Option<MsgpackValue> {
    let mut at = 0usize;
    let mut pending = 1usize;
    let mut first_map = None;
    let be = |at: usize, n: usize| -> Option<usize> {
        let bytes = b.get(at..at + n)?;
        Some(
            bytes
                .iter()
                .fold(0usize, |acc, &x| acc << 8 | usize::from(x)),
        )
    };
    while pending > 0 {
        pending -= 1;
        let marker = *b.get(at)?;
        if matches!(marker, 0x80..=0x8f | 0xde | 0xdf) {
            first_map.get_or_insert(at);
        }
        at += 1;
        // (bytes of length field, then: payload bytes per unit, children per unit, extra bytes)
        let (skip, children) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * usize::from(marker & 0x0f)),
            0x90..=0x9f => (0, usize::from(marker & 0x0f)),
            0xa0..=0xbf => (usize::from(marker & 0x1f), 0),
            0xc1 => return None,
            0xc4 | 0xd9 => (be(at, 1)? + 1, 0),
            0xc5 | 0xda => (be(at, 2)? + 2, 0),
            0xc6 | 0xdb => (be(at, 4)? + 4, 0),
            0xc7 => (be(at, 1)? + 2, 0),
            0xc8 => (be(at, 2)? + 3, 0),
            0xc9 => (be(at, 4)? + 5, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (2, be(at, 2)?),
            0xdd => (4, be(at, 4)?),
            0xde => (2, 2 * be(at, 2)?),
            0xdf => (4, 2 * be(at, 4)?),
        };
        at = at.checked_add(skip)?;
        if at > b.len() {
            return None;
        }
        pending = pending.checked_add(children)?;
        if pending > b.len() - at {
            return None;
        }
    }
    Some(MsgpackValue { len: at, first_map })
}

/// Scan the journal in `dir`, calling `visit` for each valid frame in order.
/// `visit` may stop the scan early by returning `false`.
///
/// Its work is linear in the bytes it reads, whatever the frame headers in them claim: every
/// byte goes through CRC-32 a bounded number of times (see [`find_valid_frame`]).
pub fn scan(
    dir: &Path,
    resume: Option<&Resume>,
    visit: impl FnMut(&FrameRef<'_>) -> bool,
) -> std::io::Result<Scan> {
    scan_using(dir, resume, visit, find_valid_frame, Payloads::Visitor)
}

/// [`scan`] with the search for a valid frame after damage done the obvious way
/// ([`reference_find_valid_frame`]: decode a frame at every magic, re-reading up to 1 MiB per
/// candidate). Its verdicts are the reference `scan` is tested against; dispatch never calls it.
#[doc(hidden)]
pub fn scan_with_reference_search(
    dir: &Path,
    resume: Option<&Resume>,
    visit: impl FnMut(&FrameRef<'_>) -> bool,
) -> std::io::Result<Scan> {
    scan_using(
        dir,
        resume,
        visit,
        reference_find_valid_frame,
        Payloads::Visitor,
    )
}

/// The classifier. Every kind of damage is decided in one place, in the order of §8:
///
/// | where | damage | class | decided by |
/// |---|---|---|---|
/// | segment | header does not decode (§3) | corrupt | [`load_segment`] |
/// | segment | number, journal id, missing segment, first seq | corrupt | [`check_link`] |
/// | segment | previous chain does not continue the chain | tampered | [`check_link`] |
/// | frame | invalid (§4): short, bad CRC, bad header | torn tail (last segment, nothing valid after: short, zero fill or one write) or corrupt | [`classify_fault`] |
/// | frame | seq gap, repeat or reorder; chain; flags; payload | see [`FRAME_CHECKS`] | [`check_frame`] |
/// | frame | a repeat in the last segment starting a fork (§8.1) | forked | [`stop_at_damage`] |
fn scan_using(
    dir: &Path,
    resume: Option<&Resume>,
    mut visit: impl FnMut(&FrameRef<'_>) -> bool,
    find: FindValidFrame,
    payloads: Payloads,
) -> std::io::Result<Scan> {
    let segments = segment::list(dir)?;
    let mut scan = Scan {
        events: 0,
        head: None,
        outcome: Outcome::Clean,
    };
    let Some(&(last_no, _)) = segments.last() else {
        return Ok(scan);
    };
    let mut link = Link {
        expect_no: segments[0].0,
        expect_seq: 1,
        chain: None,
        journal_id: resume.map(|r| r.journal_id),
    };
    // One buffer for every segment: a fresh 64 MiB Vec per segment costs a page fault per
    // 4 KiB, which is more than the CRCs over it.
    let mut bytes = Vec::new();
    for (no, path) in &segments {
        if resume.is_some_and(|r| *no < r.segment_no) {
            continue;
        }
        let resume_here = resume.filter(|r| r.segment_no == *no);
        let seg = match load_segment(path, *no == last_no, resume_here, &mut bytes)? {
            Ok(seg) => seg,
            Err(damage) => return Ok(scan.stopped(damage)),
        };
        if let Some((class, reason)) = check_link(&seg.header, *no, &link, resume) {
            let len = SEGMENT_HEADER_LEN as u64;
            return Ok(scan.stopped(damaged(class, &seg.name, 0, len, reason)));
        }
        let start = Cursor::start(&seg, resume_here);
        let ctx = FrameContext {
            journal_id: seg.header.journal_id,
            is_last: seg.is_last,
            find,
            payloads,
        };
        let Some(end) = walk_frames(&mut scan, &seg, &bytes, start, &ctx, &mut visit)? else {
            return Ok(scan);
        };
        link = Link {
            expect_no: no + 1,
            expect_seq: end.expect_seq,
            chain: Some(end.running),
            journal_id: Some(seg.header.journal_id),
        };
        scan.head = Some(head(&seg, &end));
    }
    Ok(scan)
}

impl Scan {
    /// The scan, ended at `damage`.
    fn stopped(mut self, (class, damage): (Class, Damage)) -> Scan {
        self.outcome = Outcome::Damaged(class, damage);
        self
    }
}

/// What the next segment must continue: the previous segment's end, as far as known.
struct Link {
    expect_no: u64,
    expect_seq: u64,
    /// The previous segment's last chain; `None` before the first segment scanned.
    chain: Option<Chain>,
    journal_id: Option<[u8; 16]>,
}

/// A segment read and its header decoded.
struct Loaded<'a> {
    path: &'a Path,
    name: String,
    header: SegmentHeader,
    /// File bytes left out of the buffer after the header (a resume point inside it).
    skip: usize,
    is_last: bool,
}

/// Read the segment at `path` into `bytes` and decode its header, or the damage it is.
/// Resuming (from a snapshot) inside this segment: only its header and the bytes from the
/// resume point on are ever looked at, so only they are read.
fn load_segment<'a>(
    path: &'a Path,
    is_last: bool,
    resume_here: Option<&Resume>,
    bytes: &mut Vec<u8>,
) -> std::io::Result<Result<Loaded<'a>, (Class, Damage)>> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("?")
        .to_owned();
    let mut skip = read_segment(path, resume_here.map_or(0, |r| r.offset), bytes)?;
    let mut decoded = SegmentHeader::decode(bytes);
    if decoded.is_err() && skip > 0 {
        // Damage is reported against the whole file, as a full read would see it.
        *bytes = std::fs::read(path)?;
        skip = 0;
        decoded = SegmentHeader::decode(bytes);
    }
    Ok(match decoded {
        Ok(header) => Ok(Loaded {
            path,
            name,
            header,
            skip,
            is_last,
        }),
        Err(fault) => {
            let len = bytes.len() as u64;
            Err(damaged(Class::Corrupt, &name, 0, len, fault.describe()))
        }
    })
}

/// Where the walk through a segment's frames is, and what it expects next.
struct Cursor {
    /// Index into the buffer (file offset minus the segment's `skip`).
    offset: usize,
    expect_seq: u64,
    /// The chain of the last valid frame (or the segment's previous chain).
    running: Chain,
    last_frame_offset: Option<u64>,
}

impl Cursor {
    /// The first frame of `seg`: after its header, or at the resume point inside it.
    fn start(seg: &Loaded<'_>, resume_here: Option<&Resume>) -> Cursor {
        match resume_here {
            Some(r) => Cursor {
                offset: r.offset as usize - seg.skip,
                expect_seq: r.next_seq,
                running: r.chain,
                last_frame_offset: Some(r.last_frame_offset),
            },
            None => Cursor {
                offset: SEGMENT_HEADER_LEN,
                expect_seq: seg.header.first_seq,
                running: seg.header.prev_chain,
                last_frame_offset: None,
            },
        }
    }
}

/// What the checks of a frame need besides the frame and the cursor.
struct FrameContext {
    journal_id: [u8; 16],
    is_last: bool,
    find: FindValidFrame,
    payloads: Payloads,
}

/// Hand each valid frame of `seg` to `visit`, from `at` on. Returns where the segment ends,
/// or `None` once the scan is over (damage, recorded in `scan`, or the visitor stopped it).
fn walk_frames(
    scan: &mut Scan,
    seg: &Loaded<'_>,
    bytes: &[u8],
    mut at: Cursor,
    ctx: &FrameContext,
    visit: &mut impl FnMut(&FrameRef<'_>) -> bool,
) -> std::io::Result<Option<Cursor>> {
    while at.offset < bytes.len() {
        let f = match check_frame(&bytes[at.offset..], &at, ctx) {
            Ok(f) => f,
            Err(fault) => {
                stop_at_damage(scan, seg, bytes, &at, fault)?;
                return Ok(None);
            }
        };
        scan.events += 1;
        at.running = f.chain_value();
        at.last_frame_offset = Some((at.offset + seg.skip) as u64);
        at.offset += f.len();
        at.expect_seq += 1;
        debug_assert!(
            at.offset <= bytes.len(),
            "a valid frame lies in the bytes read"
        );
        if !visit(&f) {
            scan.head = Some(head(seg, &at));
            return Ok(None);
        }
    }
    Ok(Some(at))
}

/// A frame's damage: its class, why, and the span damaged.
type Fault = (Class, String, u64);

/// A check of a frame that is valid by §4: its class and why, if it fails.
type FrameCheck = fn(&FrameRef<'_>, &Cursor, &FrameContext) -> Option<(Class, String)>;

/// The checks of §8 after validity, in the order that decides: the first that fails gives
/// the frame's class, the damage spanning the frame.
const FRAME_CHECKS: [FrameCheck; 4] = [seq_fault, chain_fault, rules_fault, decode_fault];

/// (2) seq (§6.1): a gap, duplicate or reorder is corrupt (a repeat may start a fork).
fn seq_fault(f: &FrameRef<'_>, at: &Cursor, _: &FrameContext) -> Option<(Class, String)> {
    (f.seq != at.expect_seq).then(|| {
        let why = format!(
            "seq {} where {} was expected (a gap, duplicate or reorder)",
            f.seq, at.expect_seq
        );
        (Class::Corrupt, why)
    })
}

/// (3) chain (§5): CRCs that hold over a chain that does not are tampering.
fn chain_fault(f: &FrameRef<'_>, at: &Cursor, _: &FrameContext) -> Option<(Class, String)> {
    let computed = frame::next_chain(&at.running, f.header, f.payload);
    (computed[..] != f.chain[..]).then(|| {
        let why = "CRCs hold but the hash chain does not";
        (
            Class::Tampered,
            format!("chain mismatch at seq {}: {why}", f.seq),
        )
    })
}

/// (4) undefined flag bits, or not exactly one MessagePack value (§4, §6): corrupt.
fn rules_fault(f: &FrameRef<'_>, _: &Cursor, _: &FrameContext) -> Option<(Class, String)> {
    frame_rule_fault(f).map(|why| (Class::Corrupt, why))
}

/// (5) a payload that does not decode, or seq 1 not this journal's Genesis (§6): corrupt.
fn decode_fault(f: &FrameRef<'_>, _: &Cursor, ctx: &FrameContext) -> Option<(Class, String)> {
    payload_fault(f, &ctx.journal_id, ctx.payloads).map(|why| (Class::Corrupt, why))
}

/// The frame at the start of `rest` if it passes every check of §8, else its damage:
/// (1) validity (§4), then [`FRAME_CHECKS`] in order.
fn check_frame<'a>(rest: &'a [u8], at: &Cursor, ctx: &FrameContext) -> Result<FrameRef<'a>, Fault> {
    let f = frame::decode(rest).map_err(|e| classify_fault(rest, e, ctx.is_last, ctx.find))?;
    match FRAME_CHECKS.iter().find_map(|check| check(&f, at, ctx)) {
        Some((class, why)) => Err((class, why, f.len() as u64)),
        None => Ok(f),
    }
}

/// End the scan at the damage `at` the cursor. A repeated seq in the last segment is first
/// tried as the start of a fork (§8.1): forked if its region holds, else the damage it was.
fn stop_at_damage(
    scan: &mut Scan,
    seg: &Loaded<'_>,
    bytes: &[u8],
    at: &Cursor,
    (class, reason, span): Fault,
) -> std::io::Result<()> {
    let offset = at.offset + seg.skip;
    let fork = if seg.is_last && repeats(&bytes[at.offset..], at.expect_seq) {
        Some(fork_at(seg.path, bytes, seg.skip, &seg.header, offset)?)
    } else {
        None
    };
    let name = &seg.name;
    let damage = |bytes, reason| damaged(class, name, offset as u64, bytes, reason).1;
    scan.outcome = match fork {
        Some(Ok(fork)) => Outcome::Forked(damage(fork.bytes, fork.describe()), Box::new(fork)),
        Some(Err(why)) => {
            Outcome::Damaged(class, damage(span, format!("{reason}; not a fork: {why}")))
        }
        None => Outcome::Damaged(class, damage(span, reason)),
    };
    scan.head = Some(head(seg, at));
    Ok(())
}

/// Whether the bytes at `rest` are a valid frame of a seq already seen: a repeat, the first
/// frame of a fork (§8.1) if the rest of the segment continues known frames.
fn repeats(rest: &[u8], expect_seq: u64) -> bool {
    matches!(frame::decode(rest), Ok(f) if f.seq < expect_seq)
}

/// The fork starting at file offset `at` of the last segment, or why there is none. `bytes`
/// holds the segment from `skip` on (after its header); the trunk before a resume point is read
/// again, since a fork may have left it anywhere.
fn fork_at(
    path: &Path,
    bytes: &[u8],
    skip: usize,
    header: &SegmentHeader,
    at: usize,
) -> std::io::Result<Result<Fork, String>> {
    let whole;
    let segment = if skip == 0 {
        bytes
    } else {
        whole = std::fs::read(path)?;
        // What this scan saw of the file, not what a writer may have appended since.
        &whole[..(skip + bytes.len()).min(whole.len())]
    };
    // The region's payloads are always decoded: no visitor will ever see them.
    Ok(fork::find(segment, header, at, |f| {
        frame_rule_fault(f).or_else(|| payload_fault(f, &header.journal_id, Payloads::Decode))
    }))
}

/// Read a segment into `buf`: all of it, or, when `from` lies past the header, the header
/// followed by the bytes from `from` on. Returns how many file bytes were left out.
fn read_segment(path: &Path, from: u64, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    use std::io::{Read, Seek, SeekFrom};
    buf.clear();
    let mut f = std::fs::File::open(path)?;
    if from <= SEGMENT_HEADER_LEN as u64 {
        f.read_to_end(buf)?;
        return Ok(0);
    }
    (&mut f).take(SEGMENT_HEADER_LEN as u64).read_to_end(buf)?;
    if buf.len() < SEGMENT_HEADER_LEN {
        return Ok(0);
    }
    f.seek(SeekFrom::Start(from))?;
    f.read_to_end(buf)?;
    Ok(from as usize - SEGMENT_HEADER_LEN)
}

/// Where the valid prefix ends when the walk through `seg` stops at `at`.
fn head(seg: &Loaded<'_>, at: &Cursor) -> Head {
    Head {
        journal_id: seg.header.journal_id,
        last_seq: at.expect_seq - 1,
        chain: at.running,
        segment_no: seg.header.segment_no,
        segment_path: seg.path.to_owned(),
        segment_len: (at.offset + seg.skip) as u64,
        last_frame_offset: at.last_frame_offset,
    }
}

/// Does this segment header continue the journal where the previous segment ended?
fn check_link(
    header: &SegmentHeader,
    file_no: u64,
    link: &Link,
    resume: Option<&Resume>,
) -> Option<(Class, String)> {
    let Link {
        expect_no,
        expect_seq,
        ..
    } = *link;
    if header.segment_no != file_no {
        return Some((
            Class::Corrupt,
            format!(
                "segment header says number {} but the file is number {file_no}",
                header.segment_no
            ),
        ));
    }
    if let Some(id) = &link.journal_id {
        if &header.journal_id != id {
            return Some((
                Class::Corrupt,
                "segment belongs to another journal (journal id differs)".to_owned(),
            ));
        }
    }
    if resume.is_some_and(|r| r.segment_no == file_no) {
        return None;
    }
    if file_no != expect_no {
        return Some((Class::Corrupt, format!("segment {expect_no} is missing")));
    }
    match &link.chain {
        None if resume.is_none() => {
            if header.segment_no != 1 || header.first_seq != 1 {
                return Some((
                    Class::Corrupt,
                    format!(
                        "the first segment is number {} starting at seq {}; earlier segments are missing",
                        header.segment_no, header.first_seq
                    ),
                ));
            }
            if header.prev_chain != frame::genesis_chain(&header.journal_id) {
                return Some((
                    Class::Tampered,
                    "first segment does not start from the genesis chain".to_owned(),
                ));
            }
        }
        None => {}
        Some(chain) => {
            if header.first_seq != expect_seq {
                return Some((
                    Class::Corrupt,
                    format!(
                        "segment starts at seq {} where {expect_seq} was expected",
                        header.first_seq
                    ),
                ));
            }
            if &header.prev_chain != chain {
                return Some((
                    Class::Tampered,
                    "segment does not continue the previous segment's chain".to_owned(),
                ));
            }
        }
    }
    None
}

/// Decide whether damage that starts at `rest[0]` is a torn tail or corruption.
fn classify_fault(
    rest: &[u8],
    fault: FrameFault,
    is_last: bool,
    find: FindValidFrame,
) -> (Class, String, u64) {
    let span = rest.len() as u64;
    let what = fault.describe();
    let next_valid = find(rest);
    if !is_last {
        // Spec §8: the damage runs to the next valid frame if one follows, in any segment.
        return (
            Class::Corrupt,
            format!("{what} in a segment that is not the last"),
            next_valid.map_or(span, |at| at as u64),
        );
    }
    if let Some(at) = next_valid {
        return (
            Class::Corrupt,
            format!("{what}, and a valid frame follows at +{at}"),
            at as u64,
        );
    }
    if fault == FrameFault::Short {
        return (Class::TornTail, what, span);
    }
    if rest.iter().all(|&b| b == 0) {
        return (
            Class::TornTail,
            "zero fill at the end of the last segment".to_owned(),
            span,
        );
    }
    if rest.len() > MAX_TORN_SPAN {
        return (
            Class::Corrupt,
            format!(
                "{what}, over {} bytes: longer than any single write",
                rest.len()
            ),
            span,
        );
    }
    (
        Class::TornTail,
        format!("{what} at the end of the last segment"),
        span,
    )
}

/// The offset of the first frame after damage whose CRCs hold: proof that the damage is not a
/// torn tail. Our writer never preallocates or reuses space, so no stale frame can sit there.
///
/// It answers exactly what decoding a frame at every magic would ([`reference_find_valid_frame`]),
/// without re-reading each candidate's claimed payload: there, a header with a valid CRC that
/// claims L bytes costs L bytes of CRC, so a tail of headers each claiming 1 MiB costs 1 MiB
/// per header. Here the CRC of a candidate's range is derived from the CRCs of two prefixes of
/// `rest` (CRC-32 is linear: crc(a ‖ b) = crc(a)·x^(8|b|) + crc(b) mod P, zlib's
/// `crc32_combine`), and the prefixes are computed in one forward
/// sweep per window of candidate starts. A window is at least as long as the longest frame, so
/// every byte is swept at most twice; add 20 header bytes per magic found (magics cannot
/// overlap, so at most one every 4 bytes).
fn find_valid_frame(rest: &[u8]) -> Option<usize> {
    const _: () = assert!(SEARCH_WINDOW >= frame::MAX_PAYLOAD + frame::OVERHEAD);
    let mut candidates = Vec::new();
    let mut ends = Vec::new();
    // The CRC of `rest[..base]`, where the next window's sweep starts.
    let (mut base, mut base_crc) = (0usize, 0u32);
    let mut window = 1;
    while window + frame::OVERHEAD <= rest.len() {
        let window_end = (window + SEARCH_WINDOW).min(rest.len());
        collect_candidates(rest, window, window_end, &mut candidates);
        // Starts come in order; ends nearly so (most headers claim similar lengths), which
        // the sort handles in about one pass.
        ends.clear();
        ends.extend((0..candidates.len()).map(|i| (candidates[i].crc_at, i)));
        ends.sort_unstable();
        let mut sweep = PrefixCrc {
            bytes: rest,
            at: base,
            hasher: crc32fast::Hasher::new_with_initial(base_crc),
        };
        let mut next_end = ends.iter().peekable();
        let mut next_base = None;
        for i in 0..candidates.len() {
            let start = candidates[i].start;
            while let Some(&&(at, j)) = next_end.peek().filter(|e| e.0 <= start) {
                candidates[j].crc_to_end = sweep.upto(at);
                next_end.next();
            }
            candidates[i].crc_to_start = sweep.upto(start);
        }
        for &(at, j) in next_end {
            if next_base.is_none() && window_end <= at {
                next_base = Some(sweep.upto(window_end));
            }
            candidates[j].crc_to_end = sweep.upto(at);
        }
        let next_base = next_base.unwrap_or_else(|| sweep.upto(window_end));
        // Crafted or not, most candidates claim the same length as the one before.
        let mut shift = (usize::MAX, 0);
        for c in &candidates {
            let len = c.crc_at - c.start;
            if shift.0 != len {
                shift = (len, gf2::x_pow_8n(len));
            }
            let crc = c.crc_to_end ^ gf2::mul(shift.1, c.crc_to_start);
            if crc == frame::u32_at(rest, c.crc_at) {
                return Some(c.start);
            }
        }
        (base, base_crc) = (window_end, next_base);
        window = window_end;
    }
    None
}

/// The CRC-32 of ever longer prefixes of `bytes`, each byte hashed once.
struct PrefixCrc<'a> {
    bytes: &'a [u8],
    at: usize,
    hasher: crc32fast::Hasher,
}

impl PrefixCrc<'_> {
    /// The CRC-32 of `bytes[..to]`; `to` never goes back.
    fn upto(&mut self, to: usize) -> u32 {
        debug_assert!(to >= self.at, "the sweep only goes forward");
        frame::count_crc_bytes(to - self.at);
        self.hasher.update(&self.bytes[self.at..to]);
        self.at = to;
        self.hasher.clone().finalize()
    }
}

/// Candidate starts are taken this many bytes at a time.
const SEARCH_WINDOW: usize = 2 << 20;

/// A frame start whose header is valid and whose claimed bytes are all present: only its frame
/// CRC, over `start..crc_at`, stored at `crc_at`, is left to check.
struct Candidate {
    start: usize,
    crc_at: usize,
    /// The CRC-32 of `rest[..start]` and of `rest[..crc_at]`, once swept.
    crc_to_start: u32,
    crc_to_end: u32,
}

/// Every candidate that starts in `rest[from..to]`, in order.
fn collect_candidates(rest: &[u8], from: usize, to: usize, out: &mut Vec<Candidate>) {
    out.clear();
    let magic = frame::FRAME_MAGIC.to_le_bytes();
    // A magic starting before `to` may end up to 3 bytes after it.
    let region = &rest[from..(to + 3).min(rest.len())];
    let mut at = 0;
    while let Some(found) = region[at..].windows(4).position(|w| w == magic) {
        let start = from + at + found;
        if let Ok(total) = frame::check_header(&rest[start..]) {
            out.push(Candidate {
                start,
                crc_at: start + total - 4,
                crc_to_start: 0,
                crc_to_end: 0,
            });
        }
        at += found + 1;
    }
}

/// The CRC-32 of `b`, from the CRC-32 of `a` and of `a ‖ b` (`b` being `len` bytes): CRC-32 is
/// linear over GF(2), so crc(a ‖ b) = crc(a)·x^(8·len) + crc(b) mod P (zlib's
/// `crc32_combine`), and addition is XOR.
#[cfg(test)]
fn crc_range(crc_a: u32, crc_ab: u32, len: usize) -> u32 {
    crc_ab ^ gf2::mul(gf2::x_pow_8n(len), crc_a)
}

/// Arithmetic modulo the CRC-32 polynomial, in the reflected bit order CRC-32 computes in
/// (the coefficient of x^0 is bit 31).
mod gf2 {
    use std::sync::OnceLock;

    const POLY: u32 = 0xEDB8_8320;
    const ONE: u32 = 1 << 31;
    /// x^8: one byte's worth of shift.
    const X8: u32 = 1 << 23;
    const LOW: usize = 1024;
    /// The longest range a frame CRC covers, in bytes.
    const MAX_LEN: usize = super::frame::MAX_PAYLOAD + super::frame::OVERHEAD;

    /// a·b mod P; branch-free, as it runs twice per candidate.
    pub(super) fn mul(a: u32, mut b: u32) -> u32 {
        let mut product = 0;
        for i in (0..32).rev() {
            product ^= b & ((a >> i) & 1).wrapping_neg();
            b = (b >> 1) ^ (POLY & (b & 1).wrapping_neg());
        }
        product
    }

    /// x^(8·n) for every n ≤ MAX_LEN, from two tables: x^(8·j) for j < LOW and
    /// x^(8·LOW·k), so one lookup costs one multiplication.
    struct Powers {
        low: Vec<u32>,
        high: Vec<u32>,
    }

    fn powers() -> &'static Powers {
        static POWERS: OnceLock<Powers> = OnceLock::new();
        POWERS.get_or_init(|| {
            let mut low = vec![ONE; LOW];
            for j in 1..LOW {
                low[j] = mul(low[j - 1], X8);
            }
            let step = mul(low[LOW - 1], X8);
            let mut high = vec![ONE; MAX_LEN / LOW + 1];
            for k in 1..high.len() {
                high[k] = mul(high[k - 1], step);
            }
            Powers { low, high }
        })
    }

    pub(super) fn x_pow_8n(n: usize) -> u32 {
        assert!(n <= MAX_LEN, "a frame CRC covers at most {MAX_LEN} bytes");
        let p = powers();
        mul(p.high[n / LOW], p.low[n % LOW])
    }
}

/// The search as it was first written: decode a frame at every magic. Correct, and quadratic
/// in what the headers claim; kept as the reference [`find_valid_frame`] is tested against.
fn reference_find_valid_frame(rest: &[u8]) -> Option<usize> {
    let magic = frame::FRAME_MAGIC.to_le_bytes();
    let mut at = 1;
    while at + frame::OVERHEAD <= rest.len() {
        let found = rest[at..].windows(4).position(|w| w == magic)?;
        at += found;
        if frame::decode(&rest[at..]).is_ok() {
            return Some(at);
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{Arbitrary, Gen, QuickCheck};

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn a_messagepack_value_is_measured_whole_and_alone() {
        let values = [
            rmp_serde::to_vec(&(1u64, "ana", vec![0u8; 40], (Some(-3i64), u64::MAX))).unwrap(),
            rmp_serde::to_vec(&vec!["x".repeat(300); 70]).unwrap(),
            rmp_serde::to_vec(&std::collections::BTreeMap::from([
                (1u8, 2.5f64),
                (3, -1.0),
            ]))
            .unwrap(),
            rmp_serde::to_vec(&vec!["y".repeat(70_000)]).unwrap(),
        ];
        let msgpack_value_len = |b: &[u8]| msgpack_value(b).map(|v| v.len);
        for v in values {
            assert_eq!(msgpack_value_len(&v), Some(v.len()));
            let mut longer = v.clone();
            longer.push(0xc0);
            assert_eq!(msgpack_value_len(&longer), Some(v.len()), "a trailing nil");
            assert_eq!(msgpack_value_len(&v[..v.len() - 1]), None, "cut short");
        }
        assert_eq!(msgpack_value_len(&[0xc1]), None, "the unused marker");
        assert_eq!(
            msgpack_value_len(&[0xdd, 0xff, 0xff, 0xff, 0xff]),
            None,
            "an array claiming more elements than bytes"
        );
        let nested_map =
            rmp_serde::to_vec(&(1u8, vec![std::collections::BTreeMap::from([(1u8, 2u8)])]))
                .unwrap();
        assert_eq!(
            msgpack_value(&nested_map),
            Some(MsgpackValue {
                len: nested_map.len(),
                first_map: Some(3)
            })
        );
        let no_map = rmp_serde::to_vec(&(1u8, vec![(1u8, 2u8)])).unwrap();
        assert_eq!(msgpack_value(&no_map).unwrap().first_map, None);
    }

    #[test]
    fn the_crc_of_a_range_follows_from_the_crcs_of_two_prefixes() {
        let bytes = noise(frame::MAX_PAYLOAD + 3 * frame::OVERHEAD, 7);
        let ranges = [
            (0, 0),
            (0, 1),
            (5, 5),
            (3, 64),
            (1000, 1000 + 1023),
            (1000, 1000 + 1024),
            (17, 17 + frame::MAX_PAYLOAD + frame::OVERHEAD),
        ];
        for (a, b) in ranges {
            let crc_a = crc32fast::hash(&bytes[..a]);
            let crc_ab = crc32fast::hash(&bytes[..b]);
            assert_eq!(
                crc_range(crc_a, crc_ab, b - a),
                crc32fast::hash(&bytes[a..b]),
                "{a}..{b}"
            );
        }
    }

    /// Bytes after damage as an attacker or a bad disk might leave them: noise, with real
    /// frames, headers with valid CRCs claiming more than is there or than the frame holds,
    /// and flipped copies of real frames planted at random offsets.
    #[derive(Clone, Debug)]
    struct Tail(Vec<u8>);

    impl Arbitrary for Tail {
        fn arbitrary(g: &mut Gen) -> Tail {
            let len = usize::arbitrary(g) % 4096;
            let mut bytes = noise(len, u64::arbitrary(g));
            for _ in 0..usize::arbitrary(g) % 6 {
                let mut piece = Vec::new();
                let payload = noise(usize::arbitrary(g) % 300, u64::arbitrary(g));
                frame::encode(&mut piece, &[3; 32], u64::arbitrary(g), 1, 0, &payload);
                match u8::arbitrary(g) % 4 {
                    0 => {}
                    1 => {
                        let at = usize::arbitrary(g) % piece.len();
                        piece[at] ^= 1 << (u8::arbitrary(g) % 8);
                    }
                    2 => {
                        // Claim another length, with a valid header CRC.
                        let claim = u32::arbitrary(g) % (frame::MAX_PAYLOAD as u32 + 2);
                        piece[4..8].copy_from_slice(&claim.to_le_bytes());
                        let crc = crc32fast::hash(&piece[..20]);
                        piece[20..24].copy_from_slice(&crc.to_le_bytes());
                    }
                    _ => piece.truncate(usize::arbitrary(g) % piece.len()),
                }
                let at = if bytes.is_empty() {
                    0
                } else {
                    usize::arbitrary(g) % bytes.len()
                };
                bytes.splice(at..at, piece);
            }
            Tail(bytes)
        }
    }

    #[test]
    fn the_linear_search_finds_what_decoding_at_every_magic_finds() {
        fn prop(t: Tail) -> bool {
            find_valid_frame(&t.0) == reference_find_valid_frame(&t.0)
        }
        QuickCheck::new()
            .tests(2000)
            .quickcheck(prop as fn(Tail) -> bool);
    }

    #[test]
    fn a_valid_frame_past_the_first_window_is_found_at_its_offset() {
        let mut bytes = noise(3 * SEARCH_WINDOW + 11, 9);
        let mut piece = Vec::new();
        frame::encode(&mut piece, &[0; 32], 9, 1, 0, &noise(frame::MAX_PAYLOAD, 5));
        let at = 2 * SEARCH_WINDOW - 7;
        bytes.splice(at..at, piece);
        assert_eq!(find_valid_frame(&bytes), Some(at));
        assert_eq!(reference_find_valid_frame(&bytes), Some(at));
    }
}
