//! `dispatch doctor`'s verdicts: each check turns what was observed into ok, warn or fail, what
//! was seen, and what to do. Pure: the observations (`ops::doctor` gathers them) are arguments.

pub mod lock_probe;

use serde::{Deserialize, Serialize};

use crate::next::Next::{self, Reconcile, Submit};
use crate::statedir::trust::{self, Observed, Want};

/// How one check came out. `Warn` does not make the cluster unready.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    /// What was observed, in a line.
    pub seen: String,
    /// What to do about it; `None` when nothing is to be done.
    pub todo: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, seen: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            status: Status::Ok,
            seen: seen.into(),
            todo: None,
        }
    }

    fn warn(name: impl Into<String>, seen: impl Into<String>, todo: impl Into<String>) -> Check {
        Check {
            status: Status::Warn,
            todo: Some(todo.into()),
            ..Check::ok(name, seen)
        }
    }

    fn fail(name: impl Into<String>, seen: impl Into<String>, todo: impl Into<String>) -> Check {
        Check {
            status: Status::Fail,
            ..Check::warn(name, seen, todo)
        }
    }
}

/// Ready when no check failed.
pub fn ready(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.status != Status::Fail)
}

/// What one command printed, or that it gave no answer (not found, timed out, killed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    Exited {
        success: bool,
        stdout: String,
        stderr: String,
    },
    NoAnswer(String),
}

impl Probe {
    fn said(&self) -> String {
        match self {
            Probe::Exited { stdout, stderr, .. } => {
                let text = if stderr.trim().is_empty() {
                    stdout
                } else {
                    stderr
                };
                first_line(text)
            }
            Probe::NoAnswer(why) => first_line(why),
        }
    }
}

/// The first non-empty line, at most 200 characters: a check's line never carries a whole page.
fn first_line(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    let line = line.unwrap_or("(nothing)");
    match line.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// The Slurm releases the test suite runs against.
pub const TESTED_RELEASES: [&str; 2] = ["22.05", "24.11"];

/// The programs dispatch needs, each found on PATH or not; `sacct` is only needed for proofs.
pub fn slurm_commands(found: &[(&str, Option<String>)]) -> Check {
    let name = "slurm commands";
    let missing: Vec<&str> = found
        .iter()
        .filter(|(_, at)| at.is_none())
        .map(|(p, _)| *p)
        .collect();
    let dirs: std::collections::BTreeSet<String> = found
        .iter()
        .filter_map(|(_, at)| at.as_deref())
        .filter_map(|p| std::path::Path::new(p).parent())
        .map(|d| d.display().to_string())
        .collect();
    let dirs = dirs.into_iter().collect::<Vec<_>>().join(", ");
    if missing.is_empty() {
        Check::ok(name, format!("all found in {dirs}"))
    } else if missing == ["sacct"] {
        Check::warn(
            name,
            format!("sacct not found on PATH (the others in {dirs})"),
            "put Slurm's bin directory on PATH (`module load slurm` on many clusters)",
        )
    } else {
        Check::fail(
            name,
            format!("not found on PATH: {}", missing.join(", ")),
            "put Slurm's bin directory on PATH (`module load slurm` on many clusters), or run \
             dispatch on a login node of the cluster",
        )
    }
}

/// `squeue --version` (`slurm 22.05.8`, `slurm-wlm 24.11.5`): the release, if it says one.
pub fn release_of(version_line: &str) -> Option<String> {
    let word = version_line.split_whitespace().nth(1)?;
    let mut parts = word.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(major) && digits(minor)).then(|| format!("{major}.{minor}"))
}

pub fn slurm_version(probe: &Probe) -> Check {
    let name = "slurm version";
    match probe {
        Probe::Exited {
            success: true,
            stdout,
            ..
        } => match release_of(stdout.trim()) {
            Some(release) if TESTED_RELEASES.contains(&release.as_str()) => {
                Check::ok(name, format!("{} (tested)", first_line(stdout)))
            }
            Some(_) => Check::warn(
                name,
                format!("{} (untested)", first_line(stdout)),
                format!(
                    "dispatch is tested on Slurm {}; run {ON_NODE} and watch the first workers \
                     closely (docs/slurm-boundary.md lists what differs between releases)",
                    TESTED_RELEASES.join(" and ")
                ),
            ),
            None => Check::warn(
                name,
                format!("squeue --version printed {:?}", first_line(stdout)),
                "check that `squeue` on PATH is Slurm's",
            ),
        },
        other => Check::fail(
            name,
            format!("squeue --version: {}", other.said()),
            "put Slurm's bin directory on PATH",
        ),
    }
}

/// `scontrol ping` and `squeue --me`: does the controller answer?
pub fn controller(ping: &Probe, squeue: &Probe) -> Check {
    let name = "controller";
    let todo = "check `scontrol ping` by hand; if the controller is down or unreachable from here \
                (a firewall, a wrong SLURM_CONF), ask the cluster's administrators; until it \
                answers every dispatch command that asks Slurm exits 4 and changes nothing";
    match (ping, squeue) {
        (
            Probe::Exited {
                success: true,
                stdout,
                ..
            },
            Probe::Exited { success: true, .. },
        ) if stdout.contains("UP") => {
            Check::ok(name, format!("{}; squeue answers", first_line(stdout)))
        }
        (Probe::Exited { success: true, .. }, Probe::Exited { success: true, .. }) => Check::warn(
            name,
            format!("squeue answers; scontrol ping says {:?}", ping.said()),
            todo,
        ),
        (_, Probe::Exited { success: true, .. }) => Check::warn(
            name,
            format!("squeue answers; scontrol ping: {}", ping.said()),
            todo,
        ),
        (_, squeue) => Check::fail(name, format!("squeue --me: {}", squeue.said()), todo),
    }
}

/// `sacct` answering, disabled, or silent, and what each costs.
pub fn accounting(sacct: &Probe) -> Check {
    let name = "accounting";
    let cost = format!(
        "without accounting a step that never appeared stays unknown (exit 4, its budget held) \
         instead of being proven never to have run, and a {Submit} whose sbatch gave no answer is \
         found only while squeue still lists it; dispatch stays safe (nothing is released \
         without proof) but more ends need {Reconcile} later, or an operator's {}",
        Next::Forget(None)
    );
    match sacct {
        Probe::Exited { success: true, .. } => Check::ok(name, "sacct answers"),
        Probe::Exited { stderr, .. } if stderr.contains("accounting storage is disabled") => {
            Check::warn(
                name,
                "Slurm accounting storage is disabled",
                format!("{cost}; ask the administrators whether slurmdbd can be enabled"),
            )
        }
        other => Check::warn(
            name,
            format!("sacct: {}", other.said()),
            format!("{cost}; check `sacct -X -n -S now-1hours` by hand"),
        ),
    }
}

/// What was seen of the state directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateDirSeen {
    Missing,
    /// What `stat` saw, and the owner's user name if the user database knows it.
    Present(Observed, Option<String>),
    Unreadable(String),
}

pub fn state_dir(path: &std::path::Path, seen: &StateDirSeen, me: u32) -> Check {
    let name = "state directory";
    let shown = path.display();
    match seen {
        StateDirSeen::Missing => Check::warn(
            name,
            format!("{shown} does not exist yet"),
            format!(
                "{} creates it (owner-only), then run the doctor again to test flock there; put \
                 it on a file system the compute nodes see",
                Next::JournalInit(Some(&shown))
            ),
        ),
        StateDirSeen::Unreadable(e) => Check::fail(
            name,
            format!("{shown}: {e}"),
            "use a state directory you can read (--state-dir or DISPATCH_STATE_DIR)",
        ),
        StateDirSeen::Present(o, owner_name) => {
            let facts = format!(
                "{shown}: owner {}, mode {:04o}",
                trust::user_shown(o.uid, owner_name.as_deref()),
                o.mode & 0o7777
            );
            match trust::judge(path, o, me, Want::Dir, std::path::PathBuf::new) {
                Ok(()) => Check::ok(name, facts),
                Err(refusal) => {
                    let refusal = refusal.owned_by(owner_name.clone());
                    Check::fail(name, facts, refusal.to_string())
                }
            }
        }
    }
}

/// File system magic numbers (`statfs(2)`'s `f_type`) of the kinds met on clusters.
const FILE_SYSTEMS: &[(u64, &str, bool)] = &[
    // (magic, name, shared between nodes)
    (0x6969, "nfs", true),
    (0x0BD0_0BD0, "lustre", true),
    (0x4750_4653, "gpfs", true),
    (0x1983_0326, "beegfs", true),
    (0x00C3_6400, "ceph", true),
    (0xFF53_4D42, "cifs", true),
    (0xFE53_4D42, "smb2", true),
    (0xAAD7_AAEA, "panfs", true),
    (0x6573_5546, "fuse", true),
    (0xEF53, "ext4", false),
    (0x5846_5342, "xfs", false),
    (0x9123_683E, "btrfs", false),
    (0x2FC1_2FC1, "zfs", false),
    (0x0102_1994, "tmpfs", false),
    (0x794C_7630, "overlayfs", false),
];

pub fn file_system_name(magic: u64) -> Option<(&'static str, bool)> {
    FILE_SYSTEMS
        .iter()
        .find(|(m, _, _)| *m == magic)
        .map(|(_, n, shared)| (*n, *shared))
}

/// The state directory's file system: workers write their evidence there from the node.
const ON_NODE: Next = Next::Doctor {
    on_node: true,
    lock_probe: false,
};

pub fn file_system(magic: Result<u64, String>) -> Check {
    let name = "state file system";
    let look = format!("run {ON_NODE} to see whether the compute nodes see it");
    match magic {
        Err(e) => Check::warn(name, format!("statfs failed: {e}"), look),
        Ok(m) => match file_system_name(m) {
            Some((fs, true)) => Check::ok(name, format!("{fs} (a network file system)")),
            Some((fs, false)) => Check::warn(
                name,
                format!("{fs} (a local file system)"),
                format!(
                    "workers write their evidence from the compute node: unless this directory \
                     is exported to the nodes, use a state directory on a shared file system; \
                     {ON_NODE} tells"
                ),
            ),
            None => Check::warn(name, format!("file system type 0x{m:x}"), look),
        },
    }
}

/// A local file system the compute node was shown to see (the node read the host's marker):
/// the node is this host, or the directory is exported after all. Nothing to warn about then.
pub fn file_system_seen_from_node(check: Check) -> Check {
    match check.status {
        Status::Warn if check.seen.ends_with("(a local file system)") => Check::ok(
            check.name,
            format!("{}, but the compute node sees it", check.seen),
        ),
        _ => check,
    }
}

/// The flock test: a first exclusive lock taken, a second one on another open of the same file
/// refused while the first is held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlockSeen {
    /// The state directory is not there: nothing to test in.
    NotTested,
    Works,
    /// The first lock failed (ENOLCK on an NFS mount without a lock manager, say).
    LockFailed(String),
    /// Both locks were granted: flock is a no-op here.
    NotExclusive,
    /// The test file could not be made.
    Io(String),
}

pub fn flock(seen: &FlockSeen) -> Check {
    let name = "flock";
    let todo = "the journal, assets and workers lock with flock; use a state directory on a file \
                system where it works (NFS needs a lock manager or `local_lock=none`; Lustre \
                needs the `flock` mount option, not `localflock`)";
    match seen {
        FlockSeen::NotTested => Check::warn(
            name,
            "not tested: no state directory yet",
            format!(
                "create it ({}) and run the doctor again",
                Next::JournalInit(None)
            ),
        ),
        FlockSeen::Works => Check::ok(name, "an exclusive lock excludes a second one"),
        FlockSeen::LockFailed(e) => Check::fail(name, format!("flock failed: {e}"), todo),
        FlockSeen::NotExclusive => Check::fail(name, "two exclusive locks were both granted", todo),
        FlockSeen::Io(e) => Check::fail(
            name,
            format!("cannot make a test file: {e}"),
            "the state directory must be writable by you",
        ),
    }
}

/// `git --version`, needed for source assets (on this host to make them, on the node to check
/// them out).
pub fn git(probe: &Probe, on_node: bool) -> Check {
    let name = if on_node { "node: git" } else { "git" };
    match probe {
        Probe::Exited {
            success: true,
            stdout,
            ..
        } => Check::ok(name, first_line(stdout)),
        other => Check::warn(
            name,
            format!("git --version: {}", other.said()),
            "source assets (`asset add-source`, `--source`) need git on PATH here and on the \
             compute nodes; install it or load its module",
        ),
    }
}

/// The config file: where it was looked for, and whether it parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSeen {
    /// No file found by the search: defaults (no targets, so no sessions).
    Defaults,
    Loaded {
        path: String,
        targets: usize,
    },
    Broken(String),
}

pub fn config(seen: &ConfigSeen) -> Check {
    let name = "config";
    match seen {
        ConfigSeen::Defaults => Check::ok(
            name,
            format!(
                "no config file: defaults (pools and {Submit} need none; sessions need a target)"
            ),
        ),
        ConfigSeen::Loaded { path, targets: 0 } => Check::ok(name, format!("{path}: no targets")),
        ConfigSeen::Loaded { path, targets } => {
            Check::ok(name, format!("{path}: {targets} target(s)"))
        }
        ConfigSeen::Broken(e) => Check::fail(
            name,
            first_line(e),
            "fix the file at the line named (README, \"Sessions and their configuration\")",
        ),
    }
}

/// Is a name among the rows the association manager listed? `None`: it could not tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    Yes,
    No,
    Unknown(String),
}

/// What Slurm said about one target's partition, account (for this user) and QOS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSeen {
    pub target: String,
    pub partition: String,
    pub partition_known: Known,
    pub account: String,
    pub account_known: Known,
    pub qos: Option<(String, Known)>,
}

pub fn target(seen: &TargetSeen, accounting_on: bool) -> Check {
    let name = format!("target {}", seen.target);
    let mut fails = Vec::new();
    let mut unknowns = Vec::new();
    let mut note = |what: String, known: &Known| match known {
        Known::Yes => {}
        Known::No => fails.push(what),
        Known::Unknown(why) => unknowns.push(format!("{what} ({})", first_line(why))),
    };
    note(
        format!("partition {:?}", seen.partition),
        &seen.partition_known,
    );
    note(format!("account {:?}", seen.account), &seen.account_known);
    let mut what = format!("partition {}, account {}", seen.partition, seen.account);
    if let Some((qos, known)) = &seen.qos {
        note(format!("qos {qos:?}"), known);
        what += &format!(", qos {qos}");
    }
    if !fails.is_empty() {
        Check::fail(
            name,
            format!("{what}: unknown to Slurm: {}", fails.join(", ")),
            "correct the target in the config; `sinfo -s` lists partitions, `sacctmgr show assoc \
             user=$USER format=account,partition,qos` your accounts and QOS",
        )
    } else if !unknowns.is_empty() {
        let why = if accounting_on {
            "check them with `sacctmgr show assoc user=$USER format=account,partition,qos`"
        } else {
            "without accounting Slurm keeps no accounts or QOS to check against; a launch will \
             say if they are wrong"
        };
        Check::warn(
            name,
            format!("{what}: not verified: {}", unknowns.join(", ")),
            why,
        )
    } else {
        Check::ok(name, format!("{what}: all known to Slurm"))
    }
}

/// What the on-node probe saw, as the node's own checks, or why it never ran.
pub fn node_unreached(probe: &Probe, exe: &str) -> Check {
    let said = probe.said();
    let todo = if said.contains("No such file") || said.contains("execve") {
        format!(
            "the compute node cannot run {exe}: install dispatch on a file system the nodes see \
             (a home or project directory), and run that copy"
        )
    } else {
        "the probe step did not run; check the partition and account (`-T TARGET`) and that \
         `srun -N1 -n1 --time=1 true` works from here"
            .to_owned()
    };
    Check::fail("node", format!("srun: {said}"), todo)
}

pub const NODE_STATE_DIR: &str = "node: state directory";

/// The node saw this host's state directory, another directory of the same path, or none.
/// `same`: whether the marker this host wrote there was read on the node (`None`: no marker,
/// the host has no state directory yet).
pub fn node_state_dir(
    path: &std::path::Path,
    seen_on_node: &StateDirSeen,
    same: Option<bool>,
) -> Check {
    let name = NODE_STATE_DIR;
    match seen_on_node {
        StateDirSeen::Present(..) if same == Some(false) => Check::fail(
            name,
            format!(
                "{} exists on the node but is another directory: the marker written on this \
                 host is not there",
                path.display()
            ),
            "workers write their evidence there from the node: use a state directory on a \
             file system the compute nodes mount at the same path (not /tmp or local scratch)",
        ),
        StateDirSeen::Present(..) if same == Some(true) => Check::ok(
            name,
            format!(
                "{} is visible and is this host's (its marker was read on the node)",
                path.display()
            ),
        ),
        StateDirSeen::Present(..) => Check::ok(name, format!("{} is visible", path.display())),
        StateDirSeen::Missing => Check::fail(
            name,
            format!("{} does not exist on the node", path.display()),
            "workers write their evidence there from the node: use a state directory on a \
             file system the compute nodes mount at the same path",
        ),
        StateDirSeen::Unreadable(e) => Check::fail(
            name,
            format!("{}: {e}", path.display()),
            "use a state directory the nodes can read and write as you",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statedir::trust::Seen;

    fn exited(success: bool, stdout: &str, stderr: &str) -> Probe {
        Probe::Exited {
            success,
            stdout: stdout.to_owned(),
            stderr: stderr.to_owned(),
        }
    }

    #[test]
    fn releases_are_read_from_both_version_lines() {
        assert_eq!(release_of("slurm 22.05.8").as_deref(), Some("22.05"));
        assert_eq!(release_of("slurm-wlm 24.11.5").as_deref(), Some("24.11"));
        assert_eq!(release_of("slurm"), None);
        assert_eq!(release_of("slurm x.y"), None);
        assert_eq!(
            slurm_version(&exited(true, "slurm 23.02.1\n", "")).status,
            Status::Warn
        );
        assert_eq!(
            slurm_version(&exited(true, "slurm 24.11.5\n", "")).status,
            Status::Ok
        );
    }

    #[test]
    fn missing_commands_fail_but_a_missing_sacct_only_warns() {
        let all = |missing: &[&str]| {
            let found: Vec<(&str, Option<String>)> = ["sbatch", "srun", "sacct"]
                .iter()
                .map(|p| {
                    let at = (!missing.contains(p)).then(|| format!("/usr/bin/{p}"));
                    (*p, at)
                })
                .collect();
            slurm_commands(&found).status
        };
        assert_eq!(all(&[]), Status::Ok);
        assert_eq!(all(&["sacct"]), Status::Warn);
        assert_eq!(all(&["srun"]), Status::Fail);
    }

    #[test]
    fn a_silent_controller_fails_and_disabled_accounting_warns_with_its_cost() {
        let down = Probe::NoAnswer("timed out after 30s".into());
        assert_eq!(controller(&down, &down).status, Status::Fail);
        let up = exited(true, "Slurmctld(primary) at vm is UP\n", "");
        assert_eq!(controller(&up, &exited(true, "", "")).status, Status::Ok);
        let off = accounting(&exited(false, "", "Slurm accounting storage is disabled\n"));
        assert_eq!(off.status, Status::Warn);
        assert!(off.todo.unwrap().contains("unknown (exit 4"));
    }

    #[test]
    fn the_state_directory_must_be_ours_and_closed() {
        let path = std::path::Path::new("/s");
        let dir = |uid, mode| {
            StateDirSeen::Present(
                Observed {
                    seen: Seen::Dir,
                    uid,
                    mode,
                },
                None,
            )
        };
        assert_eq!(state_dir(path, &dir(7, 0o700), 7).status, Status::Ok);
        let open = state_dir(path, &dir(7, 0o777), 7);
        assert_eq!(open.status, Status::Fail);
        assert!(open.todo.unwrap().contains("chmod 700"));
        assert_eq!(state_dir(path, &dir(8, 0o700), 7).status, Status::Fail);
        assert_eq!(
            state_dir(path, &StateDirSeen::Missing, 7).status,
            Status::Warn
        );
    }

    #[test]
    fn another_users_state_directory_names_its_owner_by_name_and_uid() {
        let path = std::path::Path::new("/s");
        let observed = Observed {
            seen: Seen::Dir,
            uid: 1001,
            mode: 0o700,
        };
        let theirs = state_dir(
            path,
            &StateDirSeen::Present(observed.clone(), Some("alice".to_owned())),
            7,
        );
        assert_eq!(theirs.status, Status::Fail);
        assert_eq!(theirs.seen, "/s: owner uid 1001 (alice), mode 0700");
        let todo = theirs.todo.unwrap();
        assert!(
            todo.contains("/s belongs to uid 1001 (alice), not to you (uid 7)"),
            "{todo}"
        );
        // A uid the user database does not know is named by its number alone.
        let nameless = state_dir(path, &StateDirSeen::Present(observed, None), 7);
        assert_eq!(nameless.seen, "/s: owner uid 1001, mode 0700");
        assert!(nameless.todo.unwrap().contains("belongs to uid 1001, not"));
    }

    #[test]
    fn flock_that_grants_two_exclusive_locks_fails() {
        assert_eq!(flock(&FlockSeen::Works).status, Status::Ok);
        assert_eq!(flock(&FlockSeen::NotExclusive).status, Status::Fail);
        assert_eq!(
            flock(&FlockSeen::LockFailed("ENOLCK".into())).status,
            Status::Fail
        );
    }

    #[test]
    fn file_systems_are_named_and_local_ones_warned_about() {
        assert_eq!(file_system(Ok(0x6969)).status, Status::Ok);
        assert_eq!(file_system(Ok(0xEF53)).status, Status::Warn);
        assert!(file_system(Ok(0x1234)).seen.contains("0x1234"));
        let seen = file_system_seen_from_node(file_system(Ok(0xEF53)));
        assert_eq!(seen.status, Status::Ok);
        let unknown = file_system_seen_from_node(file_system(Ok(0x1234)));
        assert_eq!(
            unknown.status,
            Status::Warn,
            "only a named local file system is settled"
        );
    }

    #[test]
    fn a_target_unknown_to_slurm_fails_and_an_unverifiable_one_warns() {
        let t = |p, a| TargetSeen {
            target: "t".into(),
            partition: "p".into(),
            partition_known: p,
            account: "a".into(),
            account_known: a,
            qos: None,
        };
        assert_eq!(target(&t(Known::Yes, Known::Yes), true).status, Status::Ok);
        assert_eq!(target(&t(Known::No, Known::Yes), true).status, Status::Fail);
        let unverified = target(
            &t(Known::Yes, Known::Unknown("no accounting".into())),
            false,
        );
        assert_eq!(unverified.status, Status::Warn);
        assert!(ready(&[unverified]));
        assert!(!ready(&[target(&t(Known::Yes, Known::No), true)]));
    }

    #[test]
    fn long_answers_are_cut_to_a_line() {
        let long = "x".repeat(500);
        assert_eq!(
            first_line(&format!("\n  {long}\nmore")).chars().count(),
            201
        );
    }
}
