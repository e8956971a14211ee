//! Events the supervisor writes to the worker's own journal, in its evidence directory.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{Micros, Sha256Digest};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorStarted {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub job_id: Option<u64>,
    pub step_id: Option<u32>,
    pub node: String,
    /// The CPUs this step may run on, as the kernel lists them (`Cpus_allowed_list`).
    pub cpu_set: String,
    /// When SIGTERM is sent unless the payload ended first.
    pub deadline: Micros,
    pub grace_s: u32,
    pub command: Vec<String>,
}

/// The GPUs Slurm gave the step, as the step's environment says them (written right after
/// `SupervisorStarted`): `SLURM_STEP_GPUS` holds the node's GPU indexes, `CUDA_VISIBLE_DEVICES`
/// what the payload sees (renumbered when Slurm constrains devices). `None`: unset, no GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepDevices {
    pub step_gpus: Option<String>,
    pub cuda_visible_devices: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadStarted {
    pub pid: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownSignalled {
    /// `TERM` or `KILL`.
    pub signal: String,
    /// `deadline`, `grace`, or `forwarded` (the supervisor itself was told to stop).
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadExited {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Was the payload interrupted (signal, deadline, stop) rather than finishing on its own?
    pub interrupted: bool,
}

/// The payload declared a checkpoint: its marker (`DISPATCH_CHECKPOINT`) existed when it ended.
/// Written in the commit of its `PayloadExited`, before the native state is hashed; whether the
/// checkpoint counts (an exit 0 of its own) is the state class, in `CleanedUp`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointDeclared {
    /// The marker's path.
    pub marker: String,
    /// The marker's modification time: when the payload declared the checkpoint.
    pub declared_at: Micros,
    /// The payload's exit, as its `PayloadExited` says.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// SIGKILL was sent at the end of the grace before the payload ended.
    pub killed_after_grace: bool,
}

/// This worker continues an earlier one: its predecessor's publication was verified against
/// its manifest, its checkout moved to the predecessor's work, and its native state copied and
/// checked file by file. Written before the payload starts; a continuation that cannot do this
/// is refused instead (`PreflightRefused`, stage `resume`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumedFrom {
    /// This worker's generation (2 for the first continuation).
    pub generation: u32,
    /// The predecessor's published directory (`DISPATCH_RESUME_FROM`).
    pub from: String,
    /// SHA-256 of its `MANIFEST.json`.
    pub manifest_sha256: Sha256Digest,
    /// The predecessor's native-state directory the state was copied from.
    pub state_from: String,
    pub state_files: u64,
    pub state_bytes: u64,
    /// The predecessor's `HEAD`, where the checkout now is (none without a source asset: the
    /// published workspace copy was copied back).
    pub head: Option<String>,
    pub took_ms: u64,
}

/// The payload asked for a checkpoint while running (it created `DISPATCH_CHECKPOINT_NOW`):
/// its workspace and a copy of its native state are being published as checkpoint `number`,
/// into `dir` through `temp_dir`. Written before anything is copied; `CheckpointPublished` or
/// `CheckpointUnpublished` says how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointPublishing {
    /// 1 for this worker's first checkpoint while running, then 2, 3…
    pub number: u32,
    pub dir: String,
    pub temp_dir: String,
    pub timeout_s: u32,
}

/// Checkpoint `number` is published in `dir` (renamed into place and fsynced): the workspace
/// as a final publication has it and the native state's copy under `state/`, each file in its
/// manifest. A continuation after an end that left no publication of its own resumes from the
/// newest of these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointPublished {
    pub number: u32,
    pub dir: String,
    /// SHA-256 of its `MANIFEST.json`.
    pub manifest_sha256: Sha256Digest,
    pub files: u64,
    pub bytes: u64,
    pub took_ms: u64,
    /// The older checkpoint removed once this one was in place (only the newest two are
    /// kept).
    pub removed: Option<String>,
}

/// Checkpoint `number` was not published (its timeout, or an error): nothing of it is visible.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointUnpublished {
    pub number: u32,
    pub reason: String,
    /// Its temporary directory is gone.
    pub temp_removed: bool,
}

/// A directory with the role it plays for the worker (`checkout`, `runtime`, …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedPath {
    pub role: String,
    pub path: String,
}

/// What the supervisor was asked to do around the payload, before it does any of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorPlan {
    pub pool: Option<String>,
    pub worker: String,
    pub dirs: Vec<NamedPath>,
    /// Where the workspace and evidence are published (`…/published`), if anywhere.
    pub publish_dir: Option<String>,
    pub assets: Vec<crate::event::asset::AssetRecord>,
    pub publication_timeout_s: u32,
    pub native_state_s: u32,
    pub cleanup_s: u32,
    /// File names in the native-state directory that are append-only logs.
    pub append_only_glob: String,
}

/// One receiving-node check of a worker directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirCheck {
    pub role: String,
    pub path: String,
    pub ok: bool,
    pub free_bytes: u64,
    pub free_inodes: u64,
    /// What this directory's filesystem must have free (summed over the directories on it).
    pub need_bytes: u64,
    pub need_inodes: u64,
    /// Empty when `ok`; otherwise why the directory was refused.
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceivingChecks {
    pub checks: Vec<DirCheck>,
    pub ok: bool,
}

/// An asset's SHA-256, recomputed on the receiving node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetChecked {
    pub name: String,
    pub kind: crate::event::asset::AssetKind,
    pub expected: Sha256Digest,
    pub observed: Option<Sha256Digest>,
    pub ok: bool,
    pub reason: String,
}

/// The private checkout: cloned from the source asset, independent of it, at the pinned commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckoutPrepared {
    pub commit: String,
    /// What `HEAD` resolved to after the clone.
    pub head: String,
    pub object_files: u64,
    /// Object files with more than one link (a hardlink into anything else).
    pub hardlinked_files: u64,
    pub shares_asset_inode: bool,
    pub alternates: bool,
    pub fsck_ok: bool,
    pub ok: bool,
    pub took_ms: u64,
}

/// The supervisor refused to start the payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreflightRefused {
    /// `directories`, `assets`, `checkout`, `resume` or `start`.
    pub stage: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenFileHolder {
    pub pid: u32,
    pub command: String,
    pub path: String,
}

/// After the payload: did every writer let go of the worker's files?
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritersQuiesced {
    pub quiet: bool,
    pub waited_ms: u64,
    /// Who still held files open when the wait ended (at most a few).
    pub holders: Vec<OpenFileHolder>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// Relative to the native-state directory.
    pub path: String,
    pub bytes: u64,
    pub sha256: Sha256Digest,
}

/// The native-state files and their SHA-256. The full list is also in the evidence
/// (`native-state.sha256`); the event lists at most a bounded number of them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeStateHashed {
    pub files: Vec<FileDigest>,
    pub total_files: u64,
    pub total_bytes: u64,
    /// SHA-256 of the full listing (`<sha256>  <path>\n` lines, sorted by path).
    pub listing_sha256: Sha256Digest,
    /// False when the walk stopped at its bound or its time budget.
    pub complete: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCheck {
    pub path: String,
    pub bytes: u64,
    pub records: u64,
    /// Bytes after the last record separator: 0 for a log that ends on a record boundary.
    pub trailing_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendOnlyLogsChecked {
    pub glob: String,
    pub logs: Vec<LogCheck>,
    pub ok: bool,
}

/// About to publish into a temporary directory that is renamed into place when complete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicationStarted {
    pub dir: String,
    pub temp_dir: String,
    pub timeout_s: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub dir: String,
    pub manifest_sha256: Sha256Digest,
    pub files: u64,
    pub bytes: u64,
    /// Commits the worker made on top of the pinned commit (in `workspace.bundle`).
    pub commits: u64,
    pub patch_bytes: u64,
    pub took_ms: u64,
}

/// The publication overran its timeout: stopped, its temporary directory removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicationTimedOut {
    pub timeout_s: u32,
    pub took_ms: u64,
    /// What it was doing when time ran out.
    pub stage: String,
    pub temp_removed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicationFailed {
    pub reason: String,
    pub temp_removed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupStarted {
    pub remove: Vec<String>,
    pub keep: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanedUp {
    pub removed: Vec<String>,
    pub kept: Vec<String>,
    /// `sealed`, `checkpointed`, `crash_class_partial` or `empty`.
    pub state_class: String,
    pub reason: String,
    pub errors: Vec<String>,
}

/// The supervisor's last word.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorFinished {
    /// `completed` (exit 0), `failed` (another exit code; older supervisors wrote `completed`
    /// for it, which readers tell as `failed`), `interrupted` or `refused`
    /// (`policy::node::Outcome`).
    pub outcome: String,
    pub exit_code: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// journal-format.md gives this body byte for byte.
    #[test]
    fn checkpoint_declared_is_the_bytes_journal_format_gives() {
        let body = CheckpointDeclared {
            marker: "/w/runtime/checkpoint-declared".to_owned(),
            declared_at: Micros(1_700_000_000_000_000),
            code: Some(0),
            signal: None,
            killed_after_grace: false,
        };
        assert_eq!(
            crate::event::body_hex(&body),
            "95 be 2f 77 2f 72 75 6e 74 69 6d 65 2f 63 68 65 63 6b 70 6f 69 6e 74 2d 64 65 63 6c \
             61 72 65 64 cf 00 06 0a 24 18 1e 40 00 00 c0 c2"
        );
    }

    /// journal-format.md gives this body byte for byte.
    #[test]
    fn resumed_from_is_the_bytes_journal_format_gives() {
        let body = ResumedFrom {
            generation: 2,
            from: "/p/w-1".to_owned(),
            manifest_sha256: Sha256Digest([0xab; 32]),
            state_from: "/s".to_owned(),
            state_files: 3,
            state_bytes: 300,
            head: None,
            took_ms: 12,
        };
        let digest = ["ab"; 32].join(" ");
        assert_eq!(
            crate::event::body_hex(&body),
            format!("98 02 a6 2f 70 2f 77 2d 31 c4 20 {digest} a2 2f 73 03 cd 01 2c c0 0c")
        );
    }

    /// journal-format.md gives these bodies byte for byte.
    #[test]
    fn checkpoint_publication_records_are_the_bytes_journal_format_gives() {
        let publishing = CheckpointPublishing {
            number: 1,
            dir: "/p/w-1-checkpoint-1".to_owned(),
            temp_dir: "/p/.t".to_owned(),
            timeout_s: 60,
        };
        assert_eq!(
            crate::event::body_hex(&publishing),
            "94 01 b3 2f 70 2f 77 2d 31 2d 63 68 65 63 6b 70 6f 69 6e 74 2d 31 a5 2f 70 2f 2e 74 3c"
        );
        let published = CheckpointPublished {
            number: 3,
            dir: "/p/c3".to_owned(),
            manifest_sha256: Sha256Digest([0xab; 32]),
            files: 2,
            bytes: 10,
            took_ms: 5,
            removed: Some("/p/c1".to_owned()),
        };
        let digest = ["ab"; 32].join(" ");
        assert_eq!(
            crate::event::body_hex(&published),
            format!("97 03 a5 2f 70 2f 63 33 c4 20 {digest} 02 0a 05 a5 2f 70 2f 63 31")
        );
        let unpublished = CheckpointUnpublished {
            number: 2,
            reason: "full".to_owned(),
            temp_removed: true,
        };
        assert_eq!(
            crate::event::body_hex(&unpublished),
            "93 02 a4 66 75 6c 6c c3"
        );
    }
}
