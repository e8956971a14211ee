//! Reading and classifying a journal: clean, torn tail, corrupt or tampered.
//!
//! The scan walks every frame of every segment in order, checks CRCs, seq continuity and the
//! hash chain, hands each valid frame to a visitor, and stops at the first damage. Damage is a
//! torn tail only when it is confined to the end of the last segment with no valid frame after
//! it; everything else is corrupt (never truncated) or, when the CRCs hold but the chain does
//! not, tampered.

use std::path::{Path, PathBuf};

use super::frame::{self, Chain, FrameFault, FrameRef};
use super::segment::{self, SegmentHeader, SEGMENT_HEADER_LEN};

/// The most bytes one writer call puts on disk; a torn write cannot damage more than this.
pub const MAX_WRITE_BYTES: usize = 8 << 20;
/// A damaged tail longer than this cannot be one torn write, so it is corruption.
pub const MAX_TORN_SPAN: usize = MAX_WRITE_BYTES + frame::MAX_PAYLOAD + frame::OVERHEAD;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Clean,
    TornTail,
    Corrupt,
    Tampered,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Clean => "clean",
            Status::TornTail => "torn_tail",
            Status::Corrupt => "corrupt",
            Status::Tampered => "tampered",
        }
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

#[derive(Clone, Debug)]
pub struct Scan {
    pub status: Status,
    /// Valid frames visited.
    pub events: u64,
    /// `None` when the journal has no segment at all.
    pub head: Option<Head>,
    pub damage: Option<Damage>,
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

fn damaged(
    status: Status,
    name: &str,
    offset: u64,
    bytes: u64,
    reason: String,
) -> (Status, Damage) {
    (
        status,
        Damage {
            segment: name.to_owned(),
            offset,
            bytes,
            reason,
        },
    )
}

/// Scan the journal in `dir`, calling `visit` for each valid frame in order.
/// `visit` may stop the scan early by returning `false`.
pub fn scan(
    dir: &Path,
    resume: Option<&Resume>,
    mut visit: impl FnMut(&FrameRef<'_>) -> bool,
) -> std::io::Result<Scan> {
    let segments = segment::list(dir)?;
    let mut scan = Scan {
        status: Status::Clean,
        events: 0,
        head: None,
        damage: None,
    };
    let Some(&(last_no, _)) = segments.last() else {
        return Ok(scan);
    };
    let mut expect_no = segments[0].0;
    let mut expect_seq = 1u64;
    let mut chain: Option<Chain> = None;
    let mut journal_id: Option<[u8; 16]> = resume.map(|r| r.journal_id);
    // One buffer for every segment: a fresh 64 MiB Vec per segment costs a page fault per
    // 4 KiB, which is more than the CRCs over it.
    let mut bytes = Vec::new();
    for (no, path) in &segments {
        if let Some(r) = resume {
            if *no < r.segment_no {
                continue;
            }
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_owned();
        let resume_here = resume.filter(|r| r.segment_no == *no);
        // Resuming (from a snapshot) inside this segment: only its header and the bytes from
        // the resume point on are ever looked at, so only they are read. `skip` maps indexes
        // past the header in `bytes` back to file offsets.
        let mut skip = read_segment(path, resume_here.map_or(0, |r| r.offset), &mut bytes)?;
        let is_last = *no == last_no;
        let mut decoded = SegmentHeader::decode(&bytes);
        if decoded.is_err() && skip > 0 {
            // Damage is reported against the whole file, as a full read would see it.
            bytes = std::fs::read(path)?;
            skip = 0;
            decoded = SegmentHeader::decode(&bytes);
        }
        let header = match decoded {
            Ok(h) => h,
            Err(fault) => {
                let (status, damage) = damaged(
                    Status::Corrupt,
                    &name,
                    0,
                    bytes.len() as u64,
                    fault.describe(),
                );
                scan.status = status;
                scan.damage = Some(damage);
                return Ok(scan);
            }
        };
        let link_fault = check_link(
            &header,
            *no,
            expect_no,
            expect_seq,
            chain.as_ref(),
            journal_id.as_ref(),
            resume,
        );
        if let Some((status, reason)) = link_fault {
            let (status, damage) = damaged(status, &name, 0, SEGMENT_HEADER_LEN as u64, reason);
            scan.status = status;
            scan.damage = Some(damage);
            return Ok(scan);
        }
        journal_id = Some(header.journal_id);
        let (mut offset, mut running) = match resume {
            Some(r) if r.segment_no == *no => {
                expect_seq = r.next_seq;
                (r.offset as usize - skip, r.chain)
            }
            _ => {
                expect_seq = header.first_seq;
                (SEGMENT_HEADER_LEN, header.prev_chain)
            }
        };
        let mut last_frame_offset = resume
            .filter(|r| r.segment_no == *no)
            .map(|r| r.last_frame_offset);
        while offset < bytes.len() {
            let rest = &bytes[offset..];
            let outcome = match frame::decode(rest) {
                Ok(f) if f.seq != expect_seq => Err((
                    Status::Corrupt,
                    format!(
                        "seq {} where {} was expected (a gap, duplicate or reorder)",
                        f.seq, expect_seq
                    ),
                    f.len() as u64,
                )),
                Ok(f) => {
                    let computed = frame::next_chain(&running, f.header, f.payload);
                    if computed[..] != f.chain[..] {
                        Err((
                            Status::Tampered,
                            format!(
                                "chain mismatch at seq {}: CRCs hold but the hash chain does not",
                                f.seq
                            ),
                            f.len() as u64,
                        ))
                    } else {
                        Ok(f)
                    }
                }
                Err(fault) => Err(classify_fault(rest, fault, is_last)),
            };
            match outcome {
                Ok(f) => {
                    scan.events += 1;
                    running = f.chain_value();
                    last_frame_offset = Some((offset + skip) as u64);
                    offset += f.len();
                    expect_seq += 1;
                    if !visit(&f) {
                        scan.head = Some(head(
                            &header,
                            &running,
                            expect_seq,
                            path,
                            offset + skip,
                            last_frame_offset,
                        ));
                        return Ok(scan);
                    }
                }
                Err((status, reason, span)) => {
                    let (status, damage) =
                        damaged(status, &name, (offset + skip) as u64, span, reason);
                    scan.status = status;
                    scan.damage = Some(damage);
                    scan.head = Some(head(
                        &header,
                        &running,
                        expect_seq,
                        path,
                        offset + skip,
                        last_frame_offset,
                    ));
                    return Ok(scan);
                }
            }
        }
        chain = Some(running);
        expect_no = no + 1;
        scan.head = Some(head(
            &header,
            &running,
            expect_seq,
            path,
            offset + skip,
            last_frame_offset,
        ));
    }
    Ok(scan)
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

fn head(
    header: &SegmentHeader,
    chain: &Chain,
    next_seq: u64,
    path: &Path,
    len: usize,
    last_frame_offset: Option<u64>,
) -> Head {
    Head {
        journal_id: header.journal_id,
        last_seq: next_seq - 1,
        chain: *chain,
        segment_no: header.segment_no,
        segment_path: path.to_owned(),
        segment_len: len as u64,
        last_frame_offset,
    }
}

/// Does this segment header continue the journal where the previous segment ended?
fn check_link(
    header: &SegmentHeader,
    file_no: u64,
    expect_no: u64,
    expect_seq: u64,
    chain: Option<&Chain>,
    journal_id: Option<&[u8; 16]>,
    resume: Option<&Resume>,
) -> Option<(Status, String)> {
    if header.segment_no != file_no {
        return Some((
            Status::Corrupt,
            format!(
                "segment header says number {} but the file is number {file_no}",
                header.segment_no
            ),
        ));
    }
    if let Some(id) = journal_id {
        if &header.journal_id != id {
            return Some((
                Status::Corrupt,
                "segment belongs to another journal (journal id differs)".to_owned(),
            ));
        }
    }
    if resume.is_some_and(|r| r.segment_no == file_no) {
        return None;
    }
    if file_no != expect_no {
        return Some((Status::Corrupt, format!("segment {expect_no} is missing")));
    }
    match chain {
        None if resume.is_none() => {
            if header.segment_no != 1 || header.first_seq != 1 {
                return Some((
                    Status::Corrupt,
                    format!(
                        "the first segment is number {} starting at seq {}; earlier segments are missing",
                        header.segment_no, header.first_seq
                    ),
                ));
            }
            if header.prev_chain != frame::genesis_chain(&header.journal_id) {
                return Some((
                    Status::Tampered,
                    "first segment does not start from the genesis chain".to_owned(),
                ));
            }
        }
        None => {}
        Some(chain) => {
            if header.first_seq != expect_seq {
                return Some((
                    Status::Corrupt,
                    format!(
                        "segment starts at seq {} where {expect_seq} was expected",
                        header.first_seq
                    ),
                ));
            }
            if &header.prev_chain != chain {
                return Some((
                    Status::Tampered,
                    "segment does not continue the previous segment's chain".to_owned(),
                ));
            }
        }
    }
    None
}

/// Decide whether damage that starts at `rest[0]` is a torn tail or corruption.
fn classify_fault(rest: &[u8], fault: FrameFault, is_last: bool) -> (Status, String, u64) {
    let span = rest.len() as u64;
    let what = fault.describe();
    if !is_last {
        return (
            Status::Corrupt,
            format!("{what} in a segment that is not the last"),
            span,
        );
    }
    if let Some(at) = find_valid_frame(rest) {
        return (
            Status::Corrupt,
            format!("{what}, and a valid frame follows at +{at}"),
            at as u64,
        );
    }
    if fault == FrameFault::Short {
        return (Status::TornTail, what, span);
    }
    if rest.iter().all(|&b| b == 0) {
        return (
            Status::TornTail,
            "zero fill at the end of the last segment".to_owned(),
            span,
        );
    }
    if rest.len() > MAX_TORN_SPAN {
        return (
            Status::Corrupt,
            format!(
                "{what}, over {} bytes: longer than any single write",
                rest.len()
            ),
            span,
        );
    }
    (
        Status::TornTail,
        format!("{what} at the end of the last segment"),
        span,
    )
}

/// The offset of the first frame after damage whose CRCs hold: proof that the damage is not a
/// torn tail. Our writer never preallocates or reuses space, so no stale frame can sit there.
fn find_valid_frame(rest: &[u8]) -> Option<usize> {
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
