//! The verdicts of `dispatch doctor --lock-probe`: whether `flock` and exclusive create reach
//! from this host to the others that ran the probe in the same window. Pure: the observations
//! come from `ops::doctor::lock_probe`.

use crate::next::Next;
use serde::{Deserialize, Serialize};

const LOCK_PROBE: Next = Next::Doctor {
    on_node: false,
    lock_probe: true,
};

use super::Check;

/// What one participant of the probe said of itself, in its marker file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Participant {
    /// The host identity the journal's lease would record (`DISPATCH_HOST_ID` replaces it).
    pub host: String,
    pub pid: u32,
    pub token: String,
    /// Whether it got the probe's exclusive `flock` (held for its whole window).
    pub got_flock: bool,
    /// Whether its `O_CREAT|O_EXCL` of the probe's file succeeded (kept for its whole window).
    pub created_excl: bool,
}

/// What this host saw: itself, and every other participant whose marker it read while both
/// were inside their windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockProbeSeen {
    pub me: Participant,
    pub peers: Vec<Participant>,
    pub window_s: u64,
}

/// The probe's checks: who took part, then `flock` and exclusive create against each host.
pub fn lock_probe(seen: &LockProbeSeen) -> Vec<Check> {
    let others: Vec<&Participant> = seen
        .peers
        .iter()
        .filter(|p| p.host != seen.me.host)
        .collect();
    if others.is_empty() {
        let same_host = seen.peers.len();
        return vec![Check::warn(
            "lock probe",
            format!(
                "no other host ran {LOCK_PROBE} on this state directory in the {} s window{}",
                seen.window_s,
                if same_host > 0 {
                    format!(" ({same_host} process(es) of this host did)")
                } else {
                    String::new()
                }
            ),
            format!(
                "run {LOCK_PROBE} on another login node at the same time (within the window), \
                 against the same state directory"
            ),
        )];
    }
    let mut checks = Vec::with_capacity(2 * others.len());
    for peer in others {
        checks.push(flock_across(&seen.me, peer));
        checks.push(excl_across(&seen.me, peer));
    }
    checks
}

/// The probe could not run (its directory or files could not be made).
pub fn failed(why: &str) -> Check {
    Check::fail(
        "lock probe",
        format!("the probe could not run: {why}"),
        format!(
            "check that the state directory exists and is writable ({})",
            Next::JournalInit(None)
        ),
    )
}

fn flock_across(me: &Participant, peer: &Participant) -> Check {
    let name = format!("lock probe: flock with {}", peer.host);
    match (me.got_flock, peer.got_flock) {
        (true, true) => Check::warn(
            name,
            format!(
                "this host and {} both held the exclusive flock at once: flock does not reach \
                 across hosts here (Lustre localflock, NFS local_lock, FUSE)",
                peer.host
            ),
            "the journal does not rest on flock (its writer lease does: journal-format.md §7.3); \
             session, pool-queue and asset locks do, so run dispatch commands that work on the \
             same session, pool or asset from one login node, or mount with global flock \
             (Lustre `flock`)",
        ),
        (true, false) => Check::ok(
            name,
            format!(
                "{} was refused the flock this host held: flock reaches across",
                peer.host
            ),
        ),
        (false, true) => Check::ok(
            name,
            format!(
                "this host was refused the flock {} held: flock reaches across",
                peer.host
            ),
        ),
        (false, false) => Check::warn(
            name,
            format!(
                "neither this host nor {} got the flock: a third holder, or flock fails",
                peer.host
            ),
            "run the probe again on two hosts only",
        ),
    }
}

fn excl_across(me: &Participant, peer: &Participant) -> Check {
    let name = format!("lock probe: exclusive create with {}", peer.host);
    if me.created_excl && peer.created_excl {
        Check::fail(
            name,
            format!(
                "this host and {} both created the probe's file with O_CREAT|O_EXCL: exclusive \
                 create does not exclude across hosts, and the journal's writer lease rests on it",
                peer.host
            ),
            "put the state directory (--state-dir, DISPATCH_STATE_DIR) on a file system that \
             makes O_EXCL atomic across clients (NFSv3 or later, Lustre, GPFS), or use dispatch \
             from one login node only",
        )
    } else if me.created_excl || peer.created_excl {
        Check::ok(
            name,
            format!(
                "one of this host and {} made the file, the other was refused: the lease holds",
                peer.host
            ),
        )
    } else {
        Check::warn(
            name,
            format!(
                "neither this host nor {} made the probe's file: a third participant made it",
                peer.host
            ),
            "run the probe again on two hosts only",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::doctor::Status;

    fn p(host: &str, got_flock: bool, created_excl: bool) -> Participant {
        Participant {
            host: host.into(),
            pid: 1,
            token: host.into(),
            got_flock,
            created_excl,
        }
    }

    fn statuses(me: Participant, peers: Vec<Participant>) -> Vec<Status> {
        lock_probe(&LockProbeSeen {
            me,
            peers,
            window_s: 15,
        })
        .into_iter()
        .map(|c| c.status)
        .collect()
    }

    #[test]
    fn each_host_pair_is_judged_on_flock_and_on_exclusive_create() {
        // flock local to each host, O_EXCL global: the FUSE / localflock case.
        assert_eq!(
            statuses(p("a", true, true), vec![p("b", true, false)]),
            [Status::Warn, Status::Ok]
        );
        // Both global.
        assert_eq!(
            statuses(p("a", false, false), vec![p("b", true, true)]),
            [Status::Ok, Status::Ok]
        );
        // O_EXCL not exclusive: the lease cannot hold.
        assert_eq!(
            statuses(p("a", true, true), vec![p("b", true, true)]),
            [Status::Warn, Status::Fail]
        );
    }

    #[test]
    fn without_another_host_the_probe_says_to_run_it_on_one() {
        let checks = lock_probe(&LockProbeSeen {
            me: p("a", true, true),
            peers: vec![p("a", false, false)],
            window_s: 15,
        });
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].status, Status::Warn);
        assert!(
            checks[0].seen.contains("1 process(es) of this host"),
            "{}",
            checks[0].seen
        );
    }
}
