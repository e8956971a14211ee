//! A fork: two or more writers that each appended after the same frame, because nothing kept
//! them apart (a file lock that did not reach across hosts, an older dispatch without the
//! writer's lease). journal-format.md §8.1 defines it; this module finds one in the bytes of the
//! last segment. Pure: it reads nothing but the bytes it is given.
//!
//! The frames before the walk's first damage are the trunk. Every frame from there to the end
//! of the segment must continue some frame already known (a trunk frame, the segment's
//! previous chain, or an earlier frame of the region) with the seq after it and a chain that
//! recomputes. Then nothing is lost: every frame is a committed event of some branch, and a
//! merge can keep them all.

use crate::next::Next::JournalRepair;
use std::collections::HashMap;

use super::frame::{self, Chain, FrameRef};
use super::segment::{SegmentHeader, SEGMENT_HEADER_LEN};

/// Frames of one seq, across all branches, beyond which a region is not a fork but damage: it
/// bounds the hashing per frame (each candidate predecessor costs one SHA-256).
pub const MAX_BRANCHES: usize = 64;

/// One branch: the frames from where it left the others to its tip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    /// The seq of the last frame it shares with another branch.
    pub forked_after_seq: u64,
    /// Seqs of its own frames, as written (before any merge).
    pub first_seq: u64,
    pub last_seq: u64,
    pub events: u64,
    /// Offset of its first own frame in the segment.
    pub first_offset: u64,
    /// The chain value after its last frame.
    pub tip: Chain,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fork {
    /// Offset of the first frame that does not continue the trunk: the walk's damage offset.
    pub offset: u64,
    /// Bytes from `offset` to the end of the segment, every one of them in a frame.
    pub bytes: u64,
    /// The seq of the last frame every branch shares.
    pub common_seq: u64,
    /// The last trunk frame's seq and chain: where a merge appends.
    pub trunk_seq: u64,
    pub trunk_chain: Chain,
    /// The chain value stored in the segment's last frame.
    pub end_chain: Chain,
    /// Every branch, in the order of its first own frame in the file.
    pub branches: Vec<Branch>,
    /// The frames from `offset` on, in file order: (offset, length).
    pub frames: Vec<(u64, u64)>,
}

impl Fork {
    /// One line for `damage.reason`.
    pub fn describe(&self) -> String {
        let tips: Vec<String> = self
            .branches
            .iter()
            .map(|b| {
                let s = if b.events == 1 { "" } else { "s" };
                format!(
                    "seq {}..{} ({} event{s})",
                    b.first_seq, b.last_seq, b.events
                )
            })
            .collect();
        format!(
            "forked after seq {}: {} branches, {}; {JournalRepair} merges them keeping every event",
            self.common_seq,
            self.branches.len(),
            tips.join(", ")
        )
    }
}

struct Node {
    seq: u64,
    chain: Chain,
    parent: Option<usize>,
    offset: u64,
    on_trunk: bool,
}

/// The fork that the bytes of the last segment (`segment`, its whole file) hold, if the walk's
/// first damage at `damage_at` is the start of one; otherwise why not. `check` is the reader's
/// checks 4 and 5 (flags, one value, payload) on a valid frame, `Some(reason)` when it fails.
pub fn find(
    segment: &[u8],
    header: &SegmentHeader,
    damage_at: usize,
    check: impl Fn(&FrameRef<'_>) -> Option<String>,
) -> Result<Fork, String> {
    assert!(
        (SEGMENT_HEADER_LEN..segment.len()).contains(&damage_at),
        "the damage lies inside the segment, past its header"
    );
    let mut nodes = trunk(segment, header, damage_at)?;
    let trunk_len = nodes.len();
    // Two writers never write the same event: a frame equal to a known one is a duplicate.
    let mut seen: HashMap<Chain, u64> = nodes.iter().map(|n| (n.chain, n.offset)).collect();
    let (trunk_seq, trunk_chain) = (nodes[trunk_len - 1].seq, nodes[trunk_len - 1].chain);
    let mut region: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut frames = Vec::new();
    let mut offset = damage_at;
    while offset < segment.len() {
        let f = frame::decode(&segment[offset..])
            .map_err(|fault| format!("{} at offset {offset}, inside the fork", fault.describe()))?;
        if let Some(why) = check(&f) {
            return Err(why);
        }
        if let Some(first) = seen.insert(f.chain_value(), offset as u64) {
            return Err(format!(
                "the frame at offset {offset} repeats the one at offset {first}, byte for byte"
            ));
        }
        let parent = predecessor(&nodes, trunk_len, &region, &f)
            .ok_or_else(|| format!("seq {} at offset {offset} continues no branch", f.seq))?;
        let same_seq = region.entry(f.seq).or_default();
        if same_seq.len() == MAX_BRANCHES {
            return Err(format!("more than {MAX_BRANCHES} frames of seq {}", f.seq));
        }
        same_seq.push(nodes.len());
        nodes.push(Node {
            seq: f.seq,
            chain: f.chain_value(),
            parent: Some(parent),
            offset: offset as u64,
            on_trunk: false,
        });
        frames.push((offset as u64, f.len() as u64));
        offset += f.len();
    }
    let common_seq = nodes[trunk_len..]
        .iter()
        .filter_map(|n| n.parent.filter(|&p| nodes[p].on_trunk))
        .map(|p| nodes[p].seq)
        .min()
        .expect("the first frame of the region continues the trunk");
    assert!(
        common_seq < trunk_seq,
        "a fork leaves the trunk before its tip"
    );
    Ok(Fork {
        offset: damage_at as u64,
        bytes: (segment.len() - damage_at) as u64,
        common_seq,
        trunk_seq,
        trunk_chain,
        end_chain: nodes.last().expect("the region has a frame").chain,
        branches: branches(&nodes, common_seq),
        frames,
    })
}

/// The trunk: the segment's previous chain (as a frame of seq `first_seq - 1`), then every
/// frame before `damage_at`, each re-checked for seq and chain.
fn trunk(segment: &[u8], header: &SegmentHeader, damage_at: usize) -> Result<Vec<Node>, String> {
    let mut nodes = vec![Node {
        seq: header.first_seq - 1,
        chain: header.prev_chain,
        parent: None,
        offset: 0,
        on_trunk: true,
    }];
    let mut offset = SEGMENT_HEADER_LEN;
    while offset < damage_at {
        let last = nodes
            .last()
            .expect("the trunk starts with the previous chain");
        let f = frame::decode(&segment[offset..]).map_err(|fault| fault.describe())?;
        if f.seq != last.seq + 1
            || frame::next_chain(&last.chain, f.header, f.payload)[..] != *f.chain
        {
            return Err(format!("the frame at offset {offset} does not re-read"));
        }
        nodes.push(Node {
            seq: f.seq,
            chain: f.chain_value(),
            parent: Some(nodes.len() - 1),
            offset: offset as u64,
            on_trunk: true,
        });
        offset += f.len();
    }
    if offset != damage_at {
        return Err("the damage does not start at a frame boundary".to_owned());
    }
    Ok(nodes)
}

/// The known frame that `f` continues: of seq `f.seq - 1`, with a chain that recomputes to
/// `f`'s stored chain.
fn predecessor(
    nodes: &[Node],
    trunk_len: usize,
    region: &HashMap<u64, Vec<usize>>,
    f: &FrameRef<'_>,
) -> Option<usize> {
    let before = f.seq.checked_sub(1)?;
    let trunk_first = nodes[0].seq;
    let on_trunk = before
        .checked_sub(trunk_first)
        .map(|i| i as usize)
        .filter(|&i| i < trunk_len);
    let off_trunk = region.get(&before).into_iter().flatten().copied();
    on_trunk
        .into_iter()
        .chain(off_trunk)
        .find(|&i| frame::next_chain(&nodes[i].chain, f.header, f.payload)[..] == *f.chain)
}

/// Every tip's path back to where it leaves the others.
fn branches(nodes: &[Node], common_seq: u64) -> Vec<Branch> {
    let mut children = vec![0usize; nodes.len()];
    for n in nodes {
        if let Some(p) = n.parent {
            children[p] += 1;
        }
    }
    let mut out: Vec<Branch> = (0..nodes.len())
        .filter(|&i| children[i] == 0)
        .map(|tip| {
            let mut first = tip;
            let mut events = 1;
            loop {
                let p = nodes[first]
                    .parent
                    .expect("a tip descends from the trunk's start");
                if children[p] > 1 || nodes[p].seq <= common_seq {
                    break;
                }
                first = p;
                events += 1;
            }
            let split = nodes[first].parent.expect("checked above");
            Branch {
                forked_after_seq: nodes[split].seq,
                first_seq: nodes[first].seq,
                last_seq: nodes[tip].seq,
                events,
                first_offset: nodes[first].offset,
                tip: nodes[tip].chain,
            }
        })
        .collect();
    out.sort_by_key(|b| b.first_offset);
    assert!(out.len() >= 2, "a fork has two branches at least");
    out
}
