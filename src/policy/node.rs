//! Pure decisions for a worker's life on its node: may these directories be used, is the
//! checkout independent of the shared asset, is a log whole, what class is the native state,
//! what does cleanup remove, and may a worker journal still be trusted. The supervisor
//! (`worker::supervisor`) gathers the observations; nothing here touches a file.

use crate::event::worker::{CheckoutPrepared, DirCheck};
use crate::next::Next;

/// Free space every filesystem holding a worker directory must keep beyond what the worker is
/// known to need: room for the payload's first writes, logs and the publication's temp files.
pub const MARGIN_BYTES: u64 = 256 << 20;
pub const MARGIN_INODES: u64 = 10_000;

/// How many native-state files the journal event lists (the evidence file lists them all).
pub const NATIVE_FILES_LISTED: usize = 2048;
/// How many entries the native-state walk visits at most.
pub const NATIVE_WALK_MAX_ENTRIES: u64 = 200_000;
/// How many append-only logs an event lists.
pub const LOGS_LISTED: usize = 256;
/// How many processes still holding files a quiescence record names.
pub const HOLDERS_LISTED: usize = 32;
/// The default pattern for append-only logs in the native-state directory.
pub const DEFAULT_APPEND_ONLY_GLOB: &str = "*.jsonl";

/// Bytes and inodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Need {
    pub bytes: u64,
    pub inodes: u64,
}

/// What a checkout of a source asset needs: its objects (about the bundle's size, plus the
/// pack index), its working tree (the pinned tree's bytes and files, and as many directories
/// at most), and git's index (about 128 bytes per file).
pub fn checkout_need(bundle_bytes: u64, tree_bytes: u64, tree_files: u64) -> Need {
    Need {
        bytes: bundle_bytes
            .saturating_add(bundle_bytes / 8)
            .saturating_add(tree_bytes)
            .saturating_add(tree_files.saturating_mul(128)),
        inodes: tree_files.saturating_mul(2).saturating_add(64),
    }
}

/// Who owns a worker's root, as its owner file and lock say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerSeen {
    /// No owner recorded yet.
    Free,
    /// This submission's.
    Ours,
    /// Another submission's; `live` when its supervisor still holds the lock.
    Other { submission: String, live: bool },
    /// Ours by name, but another supervisor of the same submission holds the lock.
    OursLive,
}

/// One directory as the supervisor observed it on the receiving node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirProbe {
    pub role: String,
    /// Canonical path (symlinks resolved).
    pub path: String,
    /// Why the directory cannot be used at all (cannot be created, not a directory, a symlink,
    /// not writable), if so.
    pub problem: Option<String>,
    /// Is the canonical path inside the worker's own root?
    pub inside_root: bool,
    /// Which filesystem (`st_dev`) holds it.
    pub fs_id: u64,
    pub free_bytes: u64,
    pub free_inodes: u64,
    /// What this directory itself is about to receive.
    pub need: Need,
}

/// Why a worker may not use a root that its owner file says is someone else's, if so. Checked
/// before anything below the root is looked at, let alone created.
pub fn owner_problem(worker: &str, owner: &OwnerSeen) -> Option<String> {
    match owner {
        OwnerSeen::Free | OwnerSeen::Ours => None,
        OwnerSeen::OursLive => Some(format!(
            "another supervisor of worker {worker} is already running in these directories; \
             a submission never runs twice (see {})",
            Next::PoolStatus(None)
        )),
        OwnerSeen::Other { submission, live } => Some(format!(
            "the directories belong to {} worker (submission {submission}); \
             dispatch never uses another worker's directories",
            if *live {
                "another live"
            } else {
                "another, finished,"
            }
        )),
    }
}

/// Decide for every directory. Directories on one filesystem share its free space, so each
/// filesystem must hold the sum of their needs plus one margin. Two roles may not share a
/// directory or nest in each other.
pub fn check_dirs(worker: &str, probes: &[DirProbe]) -> Vec<DirCheck> {
    let mut per_fs: std::collections::BTreeMap<u64, Need> = std::collections::BTreeMap::new();
    for p in probes.iter().filter(|p| p.problem.is_none()) {
        let n = per_fs.entry(p.fs_id).or_insert(Need {
            bytes: MARGIN_BYTES,
            inodes: MARGIN_INODES,
        });
        n.bytes = n.bytes.saturating_add(p.need.bytes);
        n.inodes = n.inodes.saturating_add(p.need.inodes);
    }
    probes
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let need = per_fs.get(&p.fs_id).copied().unwrap_or_default();
            let overlap = probes.iter().enumerate().find(|(j, q)| {
                *j != i
                    && q.role != "publication"
                    && p.role != "publication"
                    && (nested(&p.path, &q.path) || nested(&q.path, &p.path))
            });
            let reason = if let Some(problem) = &p.problem {
                problem.clone()
            } else if p.role != "publication" && !p.inside_root {
                format!(
                    "{} resolves outside the worker's own directory; refusing to write there",
                    p.path
                )
            } else if let Some((_, q)) = overlap {
                format!(
                    "the {} directory {} overlaps the {} directory {}",
                    p.role, p.path, q.role, q.path
                )
            } else if p.free_bytes < need.bytes || p.free_inodes < need.inodes {
                format!(
                    "its filesystem has {} bytes and {} inodes free; worker {worker} needs {} bytes \
                     and {} inodes there (the checkout plus a {} MiB / {} inode margin). Free space \
                     or submit to another node",
                    p.free_bytes,
                    p.free_inodes,
                    need.bytes,
                    need.inodes,
                    MARGIN_BYTES >> 20,
                    MARGIN_INODES
                )
            } else {
                String::new()
            };
            DirCheck {
                role: p.role.clone(),
                path: p.path.clone(),
                ok: reason.is_empty(),
                free_bytes: p.free_bytes,
                free_inodes: p.free_inodes,
                need_bytes: need.bytes,
                need_inodes: need.inodes,
                reason,
            }
        })
        .collect()
}

/// Is `inner` the same directory as `outer` or below it? Paths are canonical.
fn nested(inner: &str, outer: &str) -> bool {
    inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/') || outer.ends_with('/'))
}

/// Is the checkout an independent, verified copy at the pinned commit?
pub fn checkout_verdict(o: &CheckoutPrepared) -> Result<(), String> {
    if o.alternates {
        return Err("the checkout borrows objects through objects/info/alternates".to_owned());
    }
    if o.shares_asset_inode || o.hardlinked_files > 0 {
        return Err(format!(
            "{} object file(s) of the checkout are hardlinked (shared inodes)",
            o.hardlinked_files.max(1)
        ));
    }
    if o.object_files == 0 {
        return Err("the checkout has no object files of its own".to_owned());
    }
    if !o.fsck_ok {
        return Err("git fsck found the checkout's objects incomplete".to_owned());
    }
    if !o.head.eq_ignore_ascii_case(&o.commit) {
        return Err(format!(
            "the checkout is at {}, not at the pinned commit {}",
            o.head, o.commit
        ));
    }
    Ok(())
}

/// Shell-style match of a file name: `*` is any run of characters, `?` any one, anything else
/// itself. No character classes: the patterns are simple on purpose.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// An append-only log is whole when nothing follows its last record separator (`\n`).
/// `end_of_last_record` is the offset just after the last `\n` (0 when there is none).
pub fn trailing_bytes(bytes: u64, end_of_last_record: u64) -> u64 {
    bytes.saturating_sub(end_of_last_record)
}

/// What the native state is once the payload is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateClass {
    /// The payload finished on its own and left consistent state: hashed and made read-only.
    Sealed,
    /// The payload was interrupted, or its state is not known to be consistent: kept as it
    /// is, for inspection; nothing may resume from it unattended.
    CrashClassPartial,
    /// The payload saved its state and declared a checkpoint (the contract is in
    /// docs/operations.md, "Checkpoints"): hashed and made read-only like a sealed state, and
    /// what a continuation resumes from by default.
    Checkpointed,
    /// The payload never started.
    Empty,
}

impl StateClass {
    pub fn as_str(self) -> &'static str {
        match self {
            StateClass::Sealed => "sealed",
            StateClass::CrashClassPartial => "crash_class_partial",
            StateClass::Checkpointed => "checkpointed",
            StateClass::Empty => "empty",
        }
    }
}

/// What happened between the payload's start and the state's hashing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AfterPayload {
    pub payload_started: bool,
    /// Signalled, killed at the deadline, stopped, or dead by a signal. A declared checkpoint
    /// is what a payload does when signalled: it counts instead (see `checkpoint_declared`).
    pub interrupted: bool,
    /// It exited on its own with a non-zero code: whatever it left is not known to be
    /// consistent, so it is never `sealed`.
    pub failed: bool,
    pub quiet: bool,
    pub hashes_complete: bool,
    pub logs_whole: bool,
    /// The payload created its checkpoint marker (`DISPATCH_CHECKPOINT`) before it ended.
    pub checkpoint_declared: bool,
    /// The payload's exit code; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    /// The supervisor sent SIGKILL at the end of the grace before the payload ended.
    pub killed_after_grace: bool,
}

impl AfterPayload {
    /// A payload that never started: nothing after it happened.
    pub fn never_started() -> AfterPayload {
        AfterPayload {
            payload_started: false,
            interrupted: false,
            failed: false,
            quiet: true,
            hashes_complete: true,
            logs_whole: true,
            checkpoint_declared: false,
            exit_code: None,
            killed_after_grace: false,
        }
    }
}

/// Why a declared checkpoint does not count, if so: the payload must have exited 0 on its own,
/// not been killed after the grace nor died by a signal.
fn checkpoint_refusal(a: &AfterPayload) -> Option<String> {
    let said = "the payload declared a checkpoint but";
    if a.killed_after_grace {
        return Some(format!("{said} was killed after the grace"));
    }
    match a.exit_code {
        Some(0) => None,
        Some(code) => Some(format!("{said} exited with code {code}, not 0")),
        None => Some(format!("{said} died by a signal")),
    }
}

pub fn state_class(a: &AfterPayload) -> (StateClass, String) {
    let crash = |why: &str| (StateClass::CrashClassPartial, why.to_owned());
    if !a.payload_started {
        return (StateClass::Empty, "the payload never started".to_owned());
    }
    if a.checkpoint_declared {
        if let Some(why) = checkpoint_refusal(a) {
            return crash(&why);
        }
    } else if a.interrupted {
        return crash("the payload was interrupted (signal, deadline or stop)");
    }
    if a.failed {
        return crash("the payload failed (it exited with a non-zero code)");
    }
    if !a.quiet {
        return crash("writers still held files open when the quiescence wait ended");
    }
    if !a.logs_whole {
        return crash("an append-only log does not end on a record boundary");
    }
    if !a.hashes_complete {
        return crash("the native state could not be hashed completely within its budget");
    }
    if a.checkpoint_declared {
        return (
            StateClass::Checkpointed,
            "the payload declared a checkpoint and exited 0, with quiescent, whole state"
                .to_owned(),
        );
    }
    (
        StateClass::Sealed,
        "the payload finished on its own with quiescent, whole state".to_owned(),
    )
}

/// Which of the worker's directories cleanup removes, and which it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanupPlan {
    pub remove: Vec<&'static str>,
    pub keep: Vec<&'static str>,
}

/// Runtime and cache always go. The checkout goes once its work is published (or when no
/// payload ever ran in it); otherwise it is the only copy of that work and stays. Native state
/// and evidence always stay: they are the worker's record.
pub fn cleanup_plan(payload_started: bool, published: bool) -> CleanupPlan {
    let mut plan = CleanupPlan {
        remove: vec!["runtime", "cache"],
        keep: vec!["state", "evidence"],
    };
    if published || !payload_started {
        plan.remove.push("checkout");
    } else {
        plan.keep.push("checkout");
    }
    plan
}

/// How the supervisor exits: the payload's code (128 + signal when a signal ended it), or 3
/// (refused by a safety check) when the payload never started.
pub fn exit_code(refused: bool, code: Option<i32>, signal: Option<i32>) -> i32 {
    if refused {
        return 3;
    }
    code.unwrap_or_else(|| 128 + signal.unwrap_or(0))
}

crate::words! {
    /// How a worker's payload ended, as every view tells it (`pool status`, `jobs`, `inspect`,
    /// `report`, a trial's evidence) and as its supervisor records it (`SupervisorFinished`).
    pub enum Outcome {
        /// It exited 0 on its own.
        Completed => "completed",
        /// It exited with another code on its own, or could not be started (127): a failure.
        Failed => "failed",
        /// A signal ended it, or it was stopped (deadline, `pool stop`, the step's end).
        Interrupted => "interrupted",
        /// A safety check refused it before it started.
        Refused => "refused",
    }
}

impl Outcome {
    /// How the payload ended: `refused` when it never started, else from its exit (code,
    /// signal, whether it was interrupted).
    pub fn of(refused: bool, code: Option<i32>, signal: Option<i32>, interrupted: bool) -> Outcome {
        match code {
            _ if refused => Outcome::Refused,
            _ if interrupted || signal.is_some() => Outcome::Interrupted,
            Some(0) => Outcome::Completed,
            _ => Outcome::Failed,
        }
    }

    /// What a reader tells of a recorded outcome (`SupervisorFinished.outcome`, or its
    /// ingested copy) and the exit recorded beside it: a supervisor before `failed` existed
    /// wrote `completed` for any exit it was not interrupted in, so a non-zero code makes it
    /// `failed`. Without a recorded outcome (the supervisor did not finish), the exit alone
    /// tells, when it is known.
    pub fn told(recorded: Option<&str>, code: Option<i32>, signal: Option<i32>) -> Option<Outcome> {
        let word = match recorded {
            None if code.is_none() && signal.is_none() => return None,
            None => return Some(Outcome::of(false, code, signal, false)),
            Some(w) => w,
        };
        match word {
            "completed" if code.is_some_and(|c| c != 0) => Some(Outcome::Failed),
            "completed" => Some(Outcome::Completed),
            "failed" => Some(Outcome::Failed),
            "interrupted" => Some(Outcome::Interrupted),
            "refused" => Some(Outcome::Refused),
            _ => None,
        }
    }
}

/// A worker journal as read now, against what was ingested from it before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalSeen {
    pub journal_id: [u8; 16],
    pub last_seq: u64,
    /// The chain value of the frame at the previously ingested seq, if the journal has it.
    pub chain_at_ingested: Option<[u8; 32]>,
}

/// A journal may be trusted only if it still extends what was ingested from it: same journal
/// id, at least as long, and the same chain value at the ingested seq. Anything else means it
/// was replaced or rewritten after the coordinator read it.
pub fn check_extends(
    ingested: Option<(&[u8; 16], u64, &[u8; 32])>,
    seen: &JournalSeen,
) -> Result<(), String> {
    let Some((id, seq, head)) = ingested else {
        return Ok(());
    };
    if &seen.journal_id != id {
        return Err("the worker journal was replaced by another journal".to_owned());
    }
    if seen.last_seq < seq {
        return Err(format!(
            "the worker journal ends at seq {} but seq {seq} was ingested from it",
            seen.last_seq
        ));
    }
    if seen.chain_at_ingested.as_ref() != Some(head) {
        return Err(format!(
            "the worker journal's chain at seq {seq} differs from the one ingested"
        ));
    }
    Ok(())
}

/// The state class to report for a worker whose step is over: what its supervisor recorded,
/// or crash-class partial when the supervisor never got to record it (it was killed).
pub fn settled_state_class(recorded: Option<&str>, step_over: bool) -> Option<String> {
    match recorded {
        Some(c) => Some(c.to_owned()),
        None if step_over => Some(StateClass::CrashClassPartial.as_str().to_owned()),
        None => None,
    }
}

/// The grace a stop gives when none is asked and the worker's supervisor recorded none.
pub const DEFAULT_STOP_GRACE_S: u32 = 10;

/// The grace a stop gives a worker's payload between SIGTERM and SIGKILL: the one asked
/// (`--grace`); else the worker's own (`--grace` at submit, `own`: as its supervisor recorded it
/// when it started), so that a stop never cuts a payload's save shorter than the worker asked;
/// else [`DEFAULT_STOP_GRACE_S`] (no supervisor recorded its start: its payload has not
/// started). No other bound: a stop's wait ends as soon as the step is proven over, and the
/// allocation's end ends the step.
pub fn stop_grace_s(asked: Option<u32>, own: Option<u32>) -> u32 {
    asked.or(own).unwrap_or(DEFAULT_STOP_GRACE_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 38, what is left (3): an asked grace wins, then the worker's own, then 10 s.
    #[test]
    fn a_stop_gives_the_asked_grace_else_the_workers_own() {
        assert_eq!(stop_grace_s(Some(5), Some(20)), 5);
        assert_eq!(stop_grace_s(Some(0), Some(20)), 0);
        assert_eq!(stop_grace_s(None, Some(20)), 20);
        assert_eq!(stop_grace_s(None, Some(3)), 3);
        assert_eq!(stop_grace_s(None, None), DEFAULT_STOP_GRACE_S);
    }

    fn probe(role: &str, path: &str, fs: u64, free: u64) -> DirProbe {
        DirProbe {
            role: role.into(),
            path: path.into(),
            problem: None,
            inside_root: true,
            fs_id: fs,
            free_bytes: free,
            free_inodes: 1_000_000,
            need: Need::default(),
        }
    }

    fn dirs(free: u64) -> Vec<DirProbe> {
        let mut v = vec![
            probe("checkout", "/w/checkout", 1, free),
            probe("runtime", "/w/runtime", 1, free),
            probe("state", "/w/state", 1, free),
        ];
        v[0].need = Need {
            bytes: 100 << 20,
            inodes: 100,
        };
        v
    }

    #[test]
    fn space_is_summed_per_filesystem_with_one_margin() {
        let ok = check_dirs("w", &dirs(MARGIN_BYTES + (100 << 20)));
        assert!(ok.iter().all(|c| c.ok), "{ok:?}");
        assert_eq!(ok[1].need_bytes, MARGIN_BYTES + (100 << 20));
        let short = check_dirs("w", &dirs(MARGIN_BYTES + (100 << 20) - 1));
        assert!(short.iter().all(|c| !c.ok));
        assert!(short[0].reason.contains("needs"), "{}", short[0].reason);
        // On another filesystem the runtime needs only the margin.
        let mut split = dirs(MARGIN_BYTES);
        split[0].fs_id = 2;
        split[0].free_bytes = MARGIN_BYTES + (100 << 20);
        assert!(check_dirs("w", &split).iter().all(|c| c.ok));
    }

    #[test]
    fn inodes_count_too() {
        let mut d = dirs(u64::MAX);
        for p in &mut d {
            p.free_inodes = MARGIN_INODES + 99;
        }
        assert!(check_dirs("w", &d).iter().all(|c| !c.ok));
    }

    #[test]
    fn refuses_problems_escapes_overlaps_and_other_owners() {
        let mut d = dirs(u64::MAX);
        d[1].problem = Some("not writable".into());
        let c = check_dirs("w", &d);
        assert_eq!(
            c.iter().map(|c| c.ok).collect::<Vec<_>>(),
            [true, false, true]
        );
        assert_eq!(c[1].reason, "not writable");

        let mut d = dirs(u64::MAX);
        d[2].inside_root = false;
        assert!(!check_dirs("w", &d)[2].ok);

        let mut d = dirs(u64::MAX);
        d[2].path = "/w/checkout/state".into();
        let c = check_dirs("w", &d);
        assert!(!c[0].ok && !c[2].ok && c[1].ok);
        // A shared prefix that is not a parent is no overlap.
        let mut d = dirs(u64::MAX);
        d[2].path = "/w/checkout2".into();
        assert!(check_dirs("w", &d).iter().all(|c| c.ok));
    }

    #[test]
    fn another_owner_is_refused() {
        assert_eq!(owner_problem("w", &OwnerSeen::Free), None);
        assert_eq!(owner_problem("w", &OwnerSeen::Ours), None);
        let other = |live| OwnerSeen::Other {
            submission: "x".into(),
            live,
        };
        for (seen, says) in [
            (OwnerSeen::OursLive, "already running"),
            (other(true), "another live worker"),
            (other(false), "another, finished, worker"),
        ] {
            let problem = owner_problem("w", &seen).unwrap();
            assert!(problem.contains(says), "{problem}");
        }
    }

    #[test]
    fn the_publication_directory_is_checked_for_space_but_may_be_elsewhere() {
        let mut d = dirs(u64::MAX);
        let mut p = probe("publication", "/s/pools/p/published", 1, u64::MAX);
        p.inside_root = false;
        d.push(p);
        assert!(check_dirs("w", &d).iter().all(|c| c.ok));
    }

    #[test]
    fn checkout_must_be_independent_verified_and_pinned() {
        let good = CheckoutPrepared {
            commit: "abc".into(),
            head: "ABC".into(),
            object_files: 3,
            hardlinked_files: 0,
            shares_asset_inode: false,
            alternates: false,
            fsck_ok: true,
            ok: false,
            took_ms: 0,
        };
        assert_eq!(checkout_verdict(&good), Ok(()));
        let with = |f: fn(&mut CheckoutPrepared)| {
            let mut o = good.clone();
            f(&mut o);
            checkout_verdict(&o).unwrap_err()
        };
        assert!(with(|o| o.alternates = true).contains("alternates"));
        assert!(with(|o| o.hardlinked_files = 2).contains("hardlinked"));
        assert!(with(|o| o.shares_asset_inode = true).contains("hardlinked"));
        assert!(with(|o| o.object_files = 0).contains("no object"));
        assert!(with(|o| o.fsck_ok = false).contains("fsck"));
        assert!(with(|o| o.head = "def".into()).contains("pinned"));
    }

    #[test]
    fn globs() {
        for (p, n, m) in [
            ("*.jsonl", "rollout.jsonl", true),
            ("*.jsonl", "rollout.json", false),
            ("*.jsonl", ".jsonl", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*", "", true),
            ("", "", true),
            ("", "x", false),
            ("*a*b", "xxaxxb", true),
            ("*a*b", "xxaxxbc", false),
            ("log-*-*.jsonl", "log-1-2.jsonl", true),
            ("é*", "été", true),
        ] {
            assert_eq!(glob_match(p, n), m, "{p} {n}");
        }
    }

    #[test]
    fn logs_end_on_a_record_boundary() {
        assert_eq!(trailing_bytes(0, 0), 0);
        assert_eq!(trailing_bytes(10, 10), 0);
        assert_eq!(trailing_bytes(13, 10), 3);
        assert_eq!(trailing_bytes(5, 0), 5);
    }

    #[test]
    fn state_classes() {
        let clean = AfterPayload {
            payload_started: true,
            interrupted: false,
            failed: false,
            quiet: true,
            hashes_complete: true,
            logs_whole: true,
            checkpoint_declared: false,
            exit_code: Some(0),
            killed_after_grace: false,
        };
        assert_eq!(state_class(&clean).0, StateClass::Sealed);
        for f in [
            |a: &mut AfterPayload| a.interrupted = true,
            |a: &mut AfterPayload| a.failed = true,
            |a: &mut AfterPayload| a.quiet = false,
            |a: &mut AfterPayload| a.logs_whole = false,
            |a: &mut AfterPayload| a.hashes_complete = false,
        ] {
            let mut a = clean;
            f(&mut a);
            assert_eq!(state_class(&a).0, StateClass::CrashClassPartial);
        }
        let mut never = clean;
        never.payload_started = false;
        never.interrupted = true;
        assert_eq!(state_class(&never).0, StateClass::Empty);
    }

    fn after(checkpoint_declared: bool, exit_code: Option<i32>, killed: bool) -> AfterPayload {
        AfterPayload {
            payload_started: true,
            interrupted: true,
            failed: false,
            quiet: true,
            hashes_complete: true,
            logs_whole: true,
            checkpoint_declared,
            exit_code,
            killed_after_grace: killed,
        }
    }

    #[test]
    fn a_declared_checkpoint_counts_only_after_an_exit_0_of_its_own() {
        // Signalled at the deadline, saved, declared, exited 0: checkpointed.
        let (class, why) = state_class(&after(true, Some(0), false));
        assert_eq!(class, StateClass::Checkpointed, "{why}");
        // The same without a signal (a clean finish that asks for more).
        let mut own = after(true, Some(0), false);
        own.interrupted = false;
        assert_eq!(state_class(&own).0, StateClass::Checkpointed);
        for (a, says) in [
            (after(true, None, true), "killed after the grace"),
            (after(true, Some(0), true), "killed after the grace"),
            (after(true, Some(3), false), "exited with code 3"),
            (after(true, None, false), "died by a signal"),
        ] {
            let (class, why) = state_class(&a);
            assert_eq!(class, StateClass::CrashClassPartial, "{a:?}");
            assert!(why.contains("declared a checkpoint but"), "{why}");
            assert!(why.contains(says), "{why}");
        }
        // The usual checks still hold.
        let mut torn = after(true, Some(0), false);
        torn.logs_whole = false;
        assert_eq!(state_class(&torn).0, StateClass::CrashClassPartial);
        // Without a marker, an interruption is crash-class as ever.
        assert_eq!(
            state_class(&after(false, Some(0), false)).0,
            StateClass::CrashClassPartial
        );
    }

    quickcheck::quickcheck! {
        /// Checkpointed implies a marker, an exit 0 and no kill, and every check passed;
        /// a marker never makes a state sealed.
        fn checkpointed_needs_marker_exit_0_no_kill_and_whole_state(
            bits: u8, code: Option<i8>
        ) -> bool {
            let bit = |i: u8| bits & (1 << i) != 0;
            let a = AfterPayload {
                payload_started: bit(0),
                interrupted: bit(1),
                failed: bit(7),
                quiet: bit(2),
                hashes_complete: bit(3),
                logs_whole: bit(4),
                checkpoint_declared: bit(5),
                exit_code: code.map(i32::from),
                killed_after_grace: bit(6),
            };
            let (class, _) = state_class(&a);
            let whole = a.quiet && a.hashes_complete && a.logs_whole;
            let checkpointed = class == StateClass::Checkpointed;
            let expected = a.payload_started
                && !a.failed
                && a.checkpoint_declared
                && a.exit_code == Some(0)
                && !a.killed_after_grace
                && whole;
            checkpointed == expected && !(a.checkpoint_declared && class == StateClass::Sealed)
        }
    }

    #[test]
    fn cleanup_keeps_unpublished_work_state_and_evidence() {
        let p = cleanup_plan(true, true);
        assert_eq!(p.remove, ["runtime", "cache", "checkout"]);
        assert_eq!(p.keep, ["state", "evidence"]);
        let p = cleanup_plan(true, false);
        assert_eq!(p.remove, ["runtime", "cache"]);
        assert!(p.keep.contains(&"checkout"));
        assert!(cleanup_plan(false, false).remove.contains(&"checkout"));
    }

    /// A non-zero exit is a failure wherever it is told, even where an older supervisor
    /// recorded `completed` for it.
    #[test]
    fn a_non_zero_exit_is_a_failure() {
        assert_eq!(Outcome::of(false, Some(0), None, false), Outcome::Completed);
        assert_eq!(Outcome::of(false, Some(3), None, false), Outcome::Failed);
        assert_eq!(Outcome::of(false, Some(127), None, false), Outcome::Failed);
        assert_eq!(
            Outcome::of(false, None, Some(9), true),
            Outcome::Interrupted
        );
        assert_eq!(
            Outcome::of(false, Some(143), None, true),
            Outcome::Interrupted
        );
        assert_eq!(Outcome::of(true, None, None, false), Outcome::Refused);
        let told = |r, c| Outcome::told(r, c, None).map(Outcome::as_str);
        assert_eq!(told(Some("completed"), Some(3)), Some("failed"));
        assert_eq!(told(Some("completed"), Some(0)), Some("completed"));
        assert_eq!(told(Some("interrupted"), Some(143)), Some("interrupted"));
        assert_eq!(told(None, Some(3)), Some("failed"));
        assert_eq!(told(None, None), None);
        assert_eq!(
            Outcome::told(None, None, Some(9)),
            Some(Outcome::Interrupted)
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(false, Some(7), None), 7);
        assert_eq!(exit_code(false, None, Some(9)), 137);
        assert_eq!(exit_code(true, None, None), 3);
    }

    #[test]
    fn a_journal_must_extend_what_was_ingested() {
        let seen = JournalSeen {
            journal_id: [1; 16],
            last_seq: 9,
            chain_at_ingested: Some([7; 32]),
        };
        assert_eq!(check_extends(None, &seen), Ok(()));
        assert_eq!(check_extends(Some((&[1; 16], 5, &[7; 32])), &seen), Ok(()));
        for (ingested, says) in [
            ((&[2; 16], 5, &[7; 32]), "replaced"),
            ((&[1; 16], 10, &[7; 32]), "ends at seq 9"),
            ((&[1; 16], 5, &[8; 32]), "differs"),
        ] {
            let problem = check_extends(Some(ingested), &seen).unwrap_err();
            assert!(problem.contains(says), "{problem}");
        }
    }

    #[test]
    fn a_killed_supervisor_leaves_crash_class_state() {
        assert_eq!(settled_state_class(Some("sealed"), true).unwrap(), "sealed");
        assert_eq!(
            settled_state_class(None, true).unwrap(),
            "crash_class_partial"
        );
        assert_eq!(settled_state_class(None, false), None);
    }

    #[test]
    fn checkout_need_grows_with_the_tree() {
        let n = checkout_need(1000, 5000, 10);
        assert_eq!(n.bytes, 1000 + 125 + 5000 + 1280);
        assert_eq!(n.inodes, 84);
        assert_eq!(checkout_need(u64::MAX, u64::MAX, u64::MAX).bytes, u64::MAX);
    }
}
