//! What `scontrol -d show job` says an allocation holds on each of its nodes: the per-node
//! groups `Nodes=<hostlist> CPU_IDs=<ids> Mem=<MB> GRES=<detail>`, expanded to one
//! [`NodeShare`] per node. Slurm prints a group once for every run of nodes that hold the same
//! share, so the groups are the only per-node truth; a job's `NumCPUs` and `TRES` are totals.

use serde::{Deserialize, Serialize};

use super::digits::parse_u32;
use super::error::{ParseError, Parsed};

/// The most node names one hostlist may expand to; beyond it the list is refused rather than
/// grown without bound.
pub const MAX_NODES: usize = 4096;

/// What one node of an allocation holds for the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeShare {
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    /// The GPU indexes Slurm gave the job on this node (`GRES=gpu:…(IDX:0-1)`); for GPUs
    /// counted without indexes (`gpu(CNT:2)`), `0..count`.
    pub gpus: Vec<u32>,
}

fn refused(what: &str, text: &str, reason: impl Into<String>) -> ParseError {
    ParseError::new(Parsed::ScontrolRecord, &format!("{what}={text}"), reason)
}

/// `node[1-3,5],gpu07` → `node1 node2 node3 node5 gpu07` (Slurm's hostlist, one bracket per
/// name; leading zeros of a range are kept: `x[08-10]` is `x08 x09 x10`).
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, ParseError> {
    let err = |reason: &str| refused("Nodes", list, reason);
    let mut names = Vec::new();
    for part in split_outside(list, '[', ']').map_err(err)? {
        let Some(open) = part.find('[') else {
            if part.is_empty() || part.contains(']') {
                return Err(err("an empty or unbalanced node name"));
            }
            names.push(part.to_owned());
            continue;
        };
        let close = part.find(']').ok_or_else(|| err("an unclosed '['"))?;
        let (prefix, suffix) = (&part[..open], &part[close + 1..]);
        if suffix.contains(['[', ']']) {
            return Err(err("more than one bracket in a node name"));
        }
        for range in part[open + 1..close].split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let (a, b) = (
                parse_u32(lo).map_err(|e| err(e.reason()))?,
                parse_u32(hi).map_err(|e| err(e.reason()))?,
            );
            if a > b || names.len() + (b - a) as usize >= MAX_NODES {
                return Err(err("a reversed range, or more nodes than dispatch takes"));
            }
            names.extend((a..=b).map(|n| format!("{prefix}{n:0width$}{suffix}", width = lo.len())));
        }
    }
    Ok(names)
}

/// Splits at the commas outside `open`…`close` pairs, which may not nest.
fn split_outside(text: &str, open: char, close: char) -> Result<Vec<&str>, &'static str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
        } else if c == ',' && depth == 0 {
            parts.push(&text[start..i]);
            start = i + 1;
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced brackets");
        }
    }
    if depth != 0 {
        return Err("unbalanced brackets");
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// `0-3,6` → `[0, 1, 2, 3, 6]`: Slurm's list of ids (CPU ids, GPU indexes).
pub fn expand_ids(what: &str, ids: &str) -> Result<Vec<u32>, ParseError> {
    let err = |reason: &str| refused(what, ids, reason);
    let mut out = Vec::new();
    for range in ids.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let (a, b) = (
            parse_u32(lo).map_err(|e| err(e.reason()))?,
            parse_u32(hi).map_err(|e| err(e.reason()))?,
        );
        if a > b || out.len() + (b - a) as usize >= MAX_NODES * 64 {
            return Err(err("a reversed or oversized range"));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

/// The GPUs of a group's `GRES=` detail: `gpu:fake:2(IDX:0-1)`, `gpu:2(IDX:0,1)`,
/// `gpu(CNT:2)`, several types comma-separated, other GRES ignored, empty or `(null)` none.
pub fn gpus_of_gres(detail: &str) -> Result<Vec<u32>, ParseError> {
    let err = |reason: &str| refused("GRES", detail, reason);
    let mut gpus = Vec::new();
    let items = split_outside(detail, '(', ')').map_err(err)?;
    for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
        if !(item == "gpu" || item.starts_with("gpu:") || item.starts_with("gpu(")) {
            continue;
        }
        let inner = item
            .split_once('(')
            .and_then(|(_, rest)| rest.strip_suffix(')'))
            .ok_or_else(|| err("a GPU without (IDX:…) or (CNT:…)"))?;
        if let Some(idx) = inner.strip_prefix("IDX:") {
            if idx != "N/A" {
                gpus.extend(expand_ids("GRES", idx)?);
            }
        } else if let Some(cnt) = inner.strip_prefix("CNT:") {
            let n = parse_u32(cnt).map_err(|e| err(e.reason()))?;
            gpus.extend(0..n);
        } else {
            return Err(err("neither IDX: nor CNT: in a GPU's detail"));
        }
    }
    gpus.sort_unstable();
    gpus.dedup();
    Ok(gpus)
}

/// The shares of every node, in Slurm's order, from a record's pairs: each `Nodes=` opens a
/// group that its `CPU_IDs=`, `Mem=` and `GRES=` fill. None when the record has no groups
/// (`scontrol` without `-d`, or a job not running).
pub fn node_shares(pairs: &[(String, String)]) -> Result<Vec<NodeShare>, ParseError> {
    let mut shares: Vec<NodeShare> = Vec::new();
    let mut group: Vec<usize> = Vec::new();
    for (key, value) in pairs {
        let value = value.trim();
        match key.as_str() {
            "Nodes" => {
                let names = expand_hostlist(value)?;
                if shares.len() + names.len() > MAX_NODES {
                    return Err(refused("Nodes", value, "more nodes than dispatch takes"));
                }
                group = (shares.len()..shares.len() + names.len()).collect();
                shares.extend(names.into_iter().map(|name| NodeShare {
                    name,
                    cpus: 0,
                    mem_mb: 0,
                    gpus: Vec::new(),
                }));
            }
            "CPU_IDs" => {
                let n = u32::try_from(expand_ids("CPU_IDs", value)?.len()).unwrap_or(u32::MAX);
                group.iter().for_each(|&i| shares[i].cpus = n);
            }
            "Mem" => {
                let mb = parse_u32(value)
                    .map(u64::from)
                    .map_err(|e| refused("Mem", value, e.reason()))?;
                group.iter().for_each(|&i| shares[i].mem_mb = mb);
            }
            "GRES" => {
                let gpus = gpus_of_gres(value)?;
                group.iter().for_each(|&i| shares[i].gpus.clone_from(&gpus));
            }
            _ => group.clear(),
        }
    }
    let mut names: Vec<&str> = shares.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(ParseError::new(
            Parsed::ScontrolRecord,
            "Nodes=…",
            "a node named in two groups",
        ));
    }
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    #[test]
    fn hostlists_expand_as_scontrol_show_hostnames_does() {
        assert_eq!(
            expand_hostlist("node[1-3],x[01-02]").unwrap(),
            ["node1", "node2", "node3", "x01", "x02"]
        );
        assert_eq!(expand_hostlist("vm").unwrap(), ["vm"]);
        assert_eq!(
            expand_hostlist("n[1,3-4]-ib").unwrap(),
            ["n1-ib", "n3-ib", "n4-ib"]
        );
        assert_eq!(expand_hostlist("x[8-10]").unwrap(), ["x8", "x9", "x10"]);
        for bad in [
            "",
            "n[1-",
            "n]1",
            "n[2-1]",
            "n[a]",
            "a,,b",
            "n[1][2]",
            "n[0-99999]",
        ] {
            assert!(expand_hostlist(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn gres_details_give_the_gpu_indexes() {
        assert_eq!(gpus_of_gres("gpu:fake:2(IDX:0-1)").unwrap(), [0, 1]);
        assert_eq!(gpus_of_gres("gpu:1(IDX:1)").unwrap(), [1]);
        assert_eq!(gpus_of_gres("gpu(CNT:2)").unwrap(), [0, 1]);
        assert_eq!(
            gpus_of_gres("gpu:a:1(IDX:0),gpu:b:2(IDX:2-3),mps:100(0/100)").unwrap(),
            [0, 2, 3]
        );
        assert_eq!(gpus_of_gres("").unwrap(), Vec::<u32>::new());
        assert_eq!(gpus_of_gres("(null)").unwrap(), Vec::<u32>::new());
        assert_eq!(
            gpus_of_gres("gpu:fake:0(IDX:N/A)").unwrap(),
            Vec::<u32>::new()
        );
        assert!(gpus_of_gres("gpu:2").is_err());
    }

    fn pairs(line: &str) -> Vec<(String, String)> {
        crate::slurm::scontrol::split_pairs(line).unwrap()
    }

    #[test]
    fn groups_become_one_share_per_node() {
        // As 22.05 prints it for `salloc -N3 --ntasks-per-node=2 --mem=1000 --gres=gpu:1`,
        // with a second group for a node that holds more.
        let line = "JobId=63 JOB_GRES=gpu:fake:3   Nodes=node[1-2] CPU_IDs=0-1 Mem=1000 \
                    GRES=gpu:fake:1(IDX:0) Nodes=node3 CPU_IDs=0-3 Mem=2000 GRES= MinCPUsNode=2";
        let shares = node_shares(&pairs(line)).unwrap();
        let seen: Vec<(&str, u32, u64, Vec<u32>)> = shares
            .iter()
            .map(|s| (s.name.as_str(), s.cpus, s.mem_mb, s.gpus.clone()))
            .collect();
        assert_eq!(
            seen,
            [
                ("node1", 2, 1000, vec![0]),
                ("node2", 2, 1000, vec![0]),
                ("node3", 4, 2000, vec![]),
            ]
        );
        assert!(node_shares(&pairs("JobId=1 NodeList=vm"))
            .unwrap()
            .is_empty());
        assert!(node_shares(&pairs(
            "JobId=1 Nodes=a CPU_IDs=0 Mem=1 GRES= Nodes=a CPU_IDs=1"
        ))
        .is_err());
    }

    quickcheck! {
        fn prop_a_range_expands_to_its_length(prefix: u8, lo: u16, len: u8) -> bool {
            let prefix = format!("n{}", prefix % 10);
            let hi = u32::from(lo) + u32::from(len);
            let names = expand_hostlist(&format!("{prefix}[{lo}-{hi}]")).unwrap();
            names.len() == usize::from(len) + 1
                && names.first().unwrap() == &format!("{prefix}{lo}")
                && names.last().unwrap() == &format!("{prefix}{hi}")
        }

        fn prop_never_panics(s: String) -> bool {
            let _ = expand_hostlist(&s);
            let _ = gpus_of_gres(&s);
            let _ = expand_ids("CPU_IDs", &s);
            true
        }
    }
}
