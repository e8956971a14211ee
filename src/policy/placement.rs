//! Where a worker's budget goes in a pool: each node's room is what the allocation holds there
//! (the smaller of what was recorded at attach and what Slurm shows now) less what the workers
//! placed on it reserve; a worker goes to the first node, in the allocation's order, where its
//! CPUs, memory and GPUs fit, or to the node it named. Slurm does the rest: the step is started
//! on that node with exactly that much (`srun -N1 -n1 -w NODE --exact`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::slurm::NodeShare;
use crate::state::pool::{Pool, Resources};

/// One node of a pool, as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeRoom {
    pub node: String,
    pub capacity: Resources,
    pub reserved: Resources,
}

impl NodeRoom {
    /// What is left: never below nothing, though a node can shrink under what its workers
    /// already reserve (a node lost, a smaller live share).
    pub fn free(&self) -> Resources {
        let free = Resources {
            cpus: self.capacity.cpus.saturating_sub(self.reserved.cpus),
            mem_mb: self.capacity.mem_mb.saturating_sub(self.reserved.mem_mb),
            gpus: self.capacity.gpus.saturating_sub(self.reserved.gpus),
        };
        debug_assert!(
            free.fits(self.capacity),
            "free room beyond the node's capacity"
        );
        free
    }
}

/// Every node of the pool, in the allocation's order. A node Slurm no longer shows in the job,
/// or that the journal says left it, has no capacity: nothing new is placed there. `live` is
/// what Slurm shows the allocation holding now (`AllocationFacts::live_shares`).
pub fn node_rooms(pool: &Pool, live: &[NodeShare]) -> Vec<NodeRoom> {
    let live: BTreeMap<&str, Resources> = live
        .iter()
        .map(|l| (l.name.as_str(), Resources::of(l)))
        .collect();
    rooms(pool, |node| live.get(node).copied())
}

/// [`node_rooms`] without asking Slurm (`pool status`): each node as attach recorded it, a
/// node the journal says left the allocation with nothing.
pub fn recorded_rooms(pool: &Pool) -> Vec<NodeRoom> {
    let recorded: BTreeMap<String, Resources> = pool
        .node_shares()
        .iter()
        .map(|n| (n.name.clone(), Resources::of(n)))
        .collect();
    rooms(pool, |node| recorded.get(node).copied())
}

/// Each node's room: the smaller of what attach recorded and `live` shows of it (`None`: not
/// shown), nothing on a node the journal says was lost, less what its workers reserve.
fn rooms(pool: &Pool, live: impl Fn(&str) -> Option<Resources>) -> Vec<NodeRoom> {
    let lost = |node: &str| {
        pool.spread
            .as_ref()
            .is_some_and(|s| s.lost.contains_key(node))
    };
    // One pass over the workers, not one per node: placement stays linear in nodes + workers.
    let reserved = pool.reserved_by_node();
    pool.node_shares()
        .iter()
        .map(|recorded| {
            let capacity = live(&recorded.name)
                .filter(|_| !lost(&recorded.name))
                .map_or(Resources::default(), |l| Resources::of(recorded).min(l));
            // Never more than attach recorded: Slurm showing more later grants nothing.
            debug_assert!(capacity.fits(Resources::of(recorded)));
            NodeRoom {
                node: recorded.name.clone(),
                capacity,
                reserved: reserved
                    .get(recorded.name.as_str())
                    .copied()
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// What the pool can hold now: its nodes' capacities summed (a lost node adds nothing).
pub fn capacity_now(rooms: &[NodeRoom]) -> Resources {
    rooms
        .iter()
        .fold(Resources::default(), |sum, r| sum.plus(r.capacity))
}

/// Why a worker has no node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoNode {
    /// It named a node the pool does not have.
    Unknown,
    /// No node (or not the named one) has room now; one could, once workers end.
    Full,
    /// No node (or not the named one) could ever hold it.
    Never,
}

/// The node for a worker that reserves `need`, optionally on `named`: the first with room.
pub fn place(rooms: &[NodeRoom], need: Resources, named: Option<&str>) -> Result<String, NoNode> {
    let candidates: Vec<&NodeRoom> = rooms
        .iter()
        .filter(|r| named.is_none_or(|n| r.node == n))
        .collect();
    if candidates.is_empty() {
        return Err(if named.is_some() {
            NoNode::Unknown
        } else {
            NoNode::Never
        });
    }
    if let Some(room) = candidates.iter().find(|r| need.fits(r.free())) {
        // A worker that named its node goes there or nowhere.
        assert!(
            named.is_none_or(|n| room.node == n),
            "placed off the named node"
        );
        return Ok(room.node.clone());
    }
    if candidates.iter().any(|r| need.fits(r.capacity)) {
        Err(NoNode::Full)
    } else {
        Err(NoNode::Never)
    }
}

/// `node1 2/4 CPUs, 1000/8000 MB, 0/2 GPUs free; node2 …`: what a refusal shows.
pub fn describe_free(rooms: &[NodeRoom]) -> String {
    if rooms.is_empty() {
        return "no node".to_owned();
    }
    rooms
        .iter()
        .map(|r| {
            let (free, cap) = (r.free(), r.capacity);
            format!(
                "{} {}/{} CPUs, {}/{} MB, {}/{} GPUs free",
                r.node, free.cpus, cap.cpus, free.mem_mb, cap.mem_mb, free.gpus, cap.gpus
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `node1 4 CPUs, 8000 MB, 2 GPUs; node2 …`: what each node holds in all.
pub fn describe_capacity(rooms: &[NodeRoom]) -> String {
    if rooms.is_empty() {
        return "the allocation shows no node".to_owned();
    }
    let nodes: Vec<String> = rooms
        .iter()
        .map(|r| {
            let c = r.capacity;
            format!(
                "{} {} CPUs, {} MB, {} GPUs",
                r.node, c.cpus, c.mem_mb, c.gpus
            )
        })
        .collect();
    format!("its nodes hold {}", nodes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    fn room(node: &str, cap: (u64, u64, u64), reserved: (u64, u64, u64)) -> NodeRoom {
        let r = |(cpus, mem_mb, gpus)| Resources { cpus, mem_mb, gpus };
        NodeRoom {
            node: node.into(),
            capacity: r(cap),
            reserved: r(reserved),
        }
    }

    fn need(cpus: u64, mem_mb: u64, gpus: u64) -> Resources {
        Resources { cpus, mem_mb, gpus }
    }

    /// A node that shrank under its reservations (here: its GPU is no longer shown) still
    /// takes a worker that fits what is left of what it asks for.
    #[test]
    fn a_node_shrunk_under_its_reservations_takes_what_still_fits() {
        let rooms = [room("n1", (4, 8000, 0), (1, 100, 1))];
        assert_eq!(place(&rooms, need(1, 10, 0), None), Ok("n1".into()));
        assert_eq!(place(&rooms, need(1, 10, 1), None), Err(NoNode::Never));
    }

    #[test]
    fn first_node_with_room_or_the_named_one() {
        let rooms = [
            room("n1", (4, 8000, 2), (4, 100, 0)),
            room("n2", (4, 8000, 2), (1, 100, 2)),
            room("n3", (4, 8000, 2), (0, 0, 0)),
        ];
        assert_eq!(place(&rooms, need(1, 10, 0), None), Ok("n2".into()));
        assert_eq!(place(&rooms, need(1, 10, 1), None), Ok("n3".into()));
        assert_eq!(place(&rooms, need(1, 10, 1), Some("n2")), Err(NoNode::Full));
        assert_eq!(place(&rooms, need(1, 10, 0), Some("n3")), Ok("n3".into()));
        assert_eq!(place(&rooms, need(1, 10, 3), None), Err(NoNode::Never));
        assert_eq!(
            place(&rooms, need(1, 10, 0), Some("n9")),
            Err(NoNode::Unknown)
        );
        assert_eq!(place(&[], need(1, 1, 0), None), Err(NoNode::Never));
        let full = [room("n1", (4, 8000, 2), (4, 0, 0))];
        assert_eq!(place(&full, need(1, 1, 0), None), Err(NoNode::Full));
        assert_eq!(
            describe_free(&rooms[..1]),
            "n1 0/4 CPUs, 7900/8000 MB, 2/2 GPUs free"
        );
    }

    quickcheck! {
        /// Placing workers one after another never reserves more than a node holds, and a
        /// worker is refused only when no node has room for it.
        fn prop_placement_never_overbooks_a_node(caps: Vec<(u8, u8, u8)>, asks: Vec<(u8, u8, u8)>) -> bool {
            let mut rooms: Vec<NodeRoom> = caps
                .iter()
                .take(8)
                .enumerate()
                .map(|(i, &(c, m, g))| room(&format!("n{i}"), (u64::from(c % 9), u64::from(m), u64::from(g % 4)), (0, 0, 0)))
                .collect();
            for &(c, m, g) in asks.iter().take(40) {
                let n = need(u64::from(c % 5), u64::from(m / 4), u64::from(g % 3));
                match place(&rooms, n, None) {
                    Ok(node) => {
                        let r = rooms.iter_mut().find(|r| r.node == node).unwrap();
                        r.reserved = r.reserved.plus(n);
                        if !r.reserved.fits(r.capacity) {
                            return false;
                        }
                    }
                    Err(_) => {
                        if rooms.iter().any(|r| n.fits(r.free())) {
                            return false;
                        }
                    }
                }
            }
            true
        }
    }
}
