//! Properties of the journal's codecs, classifier and repair, over generated events and bytes.
//!
//! Every property prints its quickcheck seed (shown only when it fails); set
//! `JOURNAL_QC_SEED` to replay one, `QUICKCHECK_TESTS` to run more cases.

mod common;

use std::path::Path;
use std::sync::OnceLock;

use common::*;
use dispatch::event::asset::*;
use dispatch::event::jobs::*;
use dispatch::event::overrides::*;
use dispatch::event::pool::*;
use dispatch::event::session::*;
use dispatch::event::trial::*;
use dispatch::event::watermark::*;
use dispatch::event::worker::*;
use dispatch::event::ReduceError;
use dispatch::event::{
    self, Actor, Envelope, Event, Genesis, JournalMerged, MergedBranch, Micros, Recovered,
    Sha256Digest, Vocabulary, WorkerEvent, FLAG_MUST_UNDERSTAND, KNOWN_KINDS,
};
use dispatch::journal::scan::Status;
use dispatch::journal::segment::{self, SegmentHeader, SEGMENT_HEADER_LEN};
use dispatch::journal::{self, frame, snapshot, JournalError, Options, Writer};
use dispatch::ops::journal as ops;
use dispatch::state::State;
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult, Testable};
use uuid::Uuid;

fn check<A: Testable>(default_tests: u64, prop: A) {
    let seed = std::env::var("JOURNAL_QC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("quickcheck seed {seed} (JOURNAL_QC_SEED={seed} replays it)");
    let mut qc = QuickCheck::new().rng(Gen::from_size_and_seed(40, seed));
    if std::env::var_os("QUICKCHECK_TESTS").is_none() {
        qc = qc.tests(default_tests);
    }
    qc.quickcheck(prop);
}

// ---- generators -------------------------------------------------------------------------

fn uuid(g: &mut Gen) -> Uuid {
    Uuid::from_u128(u128::arbitrary(g))
}

fn micros(g: &mut Gen) -> Micros {
    Micros(i64::arbitrary(g))
}

fn text(g: &mut Gen) -> String {
    String::arbitrary(g)
}

fn actor(g: &mut Gen) -> Actor {
    Actor {
        user: text(g),
        host: text(g),
        pid: u32::arbitrary(g),
        command: Vec::arbitrary(g),
    }
}

fn allocation(g: &mut Gen) -> Allocation {
    Allocation {
        job_id: job(g),
        node: text(g),
        user: text(g),
        start_time: micros(g),
        end_time: micros(g),
        cpus: u32::arbitrary(g),
        mem_mb: u64::arbitrary(g),
        partition: text(g),
        account: text(g),
        qos: text(g),
    }
}

fn digest(g: &mut Gen) -> Sha256Digest {
    Sha256Digest(std::array::from_fn(|_| u8::arbitrary(g)))
}

fn asset_record(g: &mut Gen) -> AssetRecord {
    AssetRecord {
        name: text(g),
        kind: if bool::arbitrary(g) {
            AssetKind::Source
        } else {
            AssetKind::Image
        },
        sha256: digest(g),
        bytes: u64::arbitrary(g),
        file: text(g),
        commit: Option::arbitrary(g),
        tree_files: Option::arbitrary(g),
        tree_bytes: Option::arbitrary(g),
    }
}

fn dir_check(g: &mut Gen) -> DirCheck {
    DirCheck {
        role: text(g),
        path: text(g),
        ok: bool::arbitrary(g),
        free_bytes: u64::arbitrary(g),
        free_inodes: u64::arbitrary(g),
        need_bytes: u64::arbitrary(g),
        need_inodes: u64::arbitrary(g),
        reason: text(g),
    }
}

fn few<T>(g: &mut Gen, mut f: impl FnMut(&mut Gen) -> T) -> Vec<T> {
    (0..usize::arbitrary(g) % 4).map(|_| f(g)).collect()
}

/// A body for each known kind. A kind added to `event.rs` without a generator here fails
/// `generators_cover_every_known_kind`.
fn known_event(code: u16, g: &mut Gen) -> Event {
    match code {
        1 => Event::Genesis(Genesis {
            journal_id: uuid(g),
            format_version: u16::arbitrary(g),
        }),
        2 => Event::Recovered(Recovered {
            segment: text(g),
            offset: u64::arbitrary(g),
            length: u64::arbitrary(g),
            sha256: digest(g),
            saved_as: text(g),
            reason: text(g),
        }),
        3 => Event::JournalMerged(JournalMerged {
            segment: text(g),
            offset: u64::arbitrary(g),
            length: u64::arbitrary(g),
            sha256: digest(g),
            saved_as: text(g),
            common_seq: u64::arbitrary(g),
            branches: (0..u8::arbitrary(g) % 4)
                .map(|_| MergedBranch {
                    forked_after_seq: u64::arbitrary(g),
                    first_seq: u64::arbitrary(g),
                    last_seq: u64::arbitrary(g),
                    events: u64::arbitrary(g),
                })
                .collect(),
            events: u64::arbitrary(g),
            reason: text(g),
        }),
        100 => Event::PoolAttached(PoolAttached {
            pool: text(g),
            allocation: allocation(g),
        }),
        101 => Event::PoolDetached(PoolDetached { pool: text(g) }),
        102 => Event::PoolCreateIntent(PoolCreateIntent {
            pool: text(g),
            creation_id: uuid(g),
            job_name: text(g),
            salloc_limit_s: u32::arbitrary(g),
            cpus: u32::arbitrary(g),
            mem_mb: u64::arbitrary(g),
            time_s: u64::arbitrary(g),
            partition: Option::arbitrary(g),
            account: Option::arbitrary(g),
            qos: Option::arbitrary(g),
            nodelist: Option::arbitrary(g),
        }),
        103 => Event::PoolCreateJob(PoolCreateJob {
            pool: text(g),
            creation_id: uuid(g),
            job_id: job(g),
            how: text(g),
        }),
        104 => Event::PoolCreateFailed(PoolCreateFailed {
            pool: text(g),
            creation_id: uuid(g),
            definite: bool::arbitrary(g),
            reason: text(g),
        }),
        105 => Event::PoolOwned(PoolOwned {
            pool: text(g),
            creation_id: uuid(g),
            job_id: job(g),
        }),
        106 => Event::PoolReleaseIntent(PoolReleaseIntent {
            pool: text(g),
            job_id: job(g),
        }),
        107 => Event::PoolReleased(PoolReleased {
            pool: text(g),
            job_id: job(g),
            proof: text(g),
        }),
        108 => Event::AllocationMarkIntent(AllocationMarkIntent {
            pool: text(g),
            job_id: job(g),
            comment: text(g),
            previous: text(g),
        }),
        109 => Event::AllocationMarked(AllocationMarked {
            pool: text(g),
            job_id: job(g),
            ok: bool::arbitrary(g),
            reason: text(g),
        }),
        110 => Event::WorkerSubmitIntent(WorkerSubmitIntent {
            pool: text(g),
            worker: text(g),
            submission_id: uuid(g),
            cpus: u32::arbitrary(g),
            mem_mb: u64::arbitrary(g),
            publication_timeout_s: u32::arbitrary(g),
            command: Vec::arbitrary(g),
        }),
        111 => Event::WorkerLaunched(WorkerLaunched {
            submission_id: uuid(g),
            srun_pid: u32::arbitrary(g),
        }),
        112 => Event::WorkerLaunchFailed(WorkerLaunchFailed {
            submission_id: uuid(g),
            definite: bool::arbitrary(g),
            reason: text(g),
        }),
        113 => Event::WorkerStepObserved(WorkerStepObserved {
            submission_id: uuid(g),
            step_id: u32::arbitrary(g),
        }),
        114 => Event::WorkerStopIntent(WorkerStopIntent {
            submission_id: uuid(g),
            grace_s: u32::arbitrary(g),
        }),
        115 => Event::WorkerExited(WorkerExited {
            submission_id: uuid(g),
            code: Option::arbitrary(g),
            signal: Option::arbitrary(g),
        }),
        116 => Event::WorkerTerminal(WorkerTerminal {
            submission_id: uuid(g),
            proof: text(g),
        }),
        117 => Event::WorkerPlaced(WorkerPlaced {
            submission_id: uuid(g),
            node: text(g),
            gpus: u32::arbitrary(g),
        }),
        119 => Event::PoolCreateShape(PoolCreateShape {
            pool: text(g),
            creation_id: uuid(g),
            nodes: u32::arbitrary(g),
            gpus_per_node: u32::arbitrary(g),
            no_kill: bool::arbitrary(g),
        }),
        173 => Event::PoolRenewalAsked(PoolRenewalAsked {
            pool: text(g),
            creation_id: uuid(g),
            until: bool::arbitrary(g).then(|| micros(g)),
            max_allocations: Option::arbitrary(g),
            overlap: bool::arbitrary(g),
        }),
        174 => Event::PoolRenewalIntent(PoolRenewalIntent {
            pool: text(g),
            renewal_id: uuid(g),
            generation: u32::arbitrary(g),
            job_name: text(g),
            salloc_limit_s: u32::arbitrary(g),
            previous_job_id: job(g),
            after: bool::arbitrary(g).then(|| job(g)),
        }),
        175 => Event::PoolRenewalJob(PoolRenewalJob {
            pool: text(g),
            renewal_id: uuid(g),
            job_id: job(g),
            how: text(g),
        }),
        176 => Event::PoolRenewalFailed(PoolRenewalFailed {
            pool: text(g),
            renewal_id: uuid(g),
            definite: bool::arbitrary(g),
            reason: text(g),
        }),
        177 => Event::PoolRenewed(PoolRenewed {
            pool: text(g),
            renewal_id: uuid(g),
            generation: u32::arbitrary(g),
            allocation: allocation(g),
            previous_job_id: job(g),
            cause: text(g),
            proof: text(g),
        }),
        178 => Event::PoolRenewalStopped(PoolRenewalStopped {
            pool: text(g),
            reason: text(g),
        }),
        139 => Event::PoolNodeLost(PoolNodeLost {
            pool: text(g),
            job_id: job(g),
            node: text(g),
            proof: text(g),
        }),
        190 => Event::WorkerRequest(WorkerRequest {
            submission_id: uuid(g),
            resubmits_left: u32::arbitrary(g),
            command: Vec::arbitrary(g),
            gpus: u32::arbitrary(g),
            publication_timeout_s: u32::arbitrary(g),
            native_state_s: u32::arbitrary(g),
            cleanup_s: u32::arbitrary(g),
            grace_s: u32::arbitrary(g),
            source: Option::arbitrary(g),
            image: Option::arbitrary(g),
            append_only_glob: Option::arbitrary(g),
            trial: Option::arbitrary(g),
        }),
        191 => Event::WorkerResubmitted(WorkerResubmitted {
            submission_id: uuid(g),
            replaces: uuid(g),
        }),
        192 => Event::WorkerResubmitRefused(WorkerResubmitRefused {
            replaces: uuid(g),
            reason: text(g),
        }),
        193 => Event::WorkerContinued(WorkerContinued {
            submission_id: uuid(g),
            predecessor: uuid(g),
            generation: u32::arbitrary(g),
            cause: text(g),
            proof: text(g),
            published_dir: Option::arbitrary(g),
            manifest_sha256: bool::arbitrary(g).then(|| digest(g)),
            from_crash_class: bool::arbitrary(g),
        }),
        194 => Event::ContinuationRefused(ContinuationRefused {
            predecessor: uuid(g),
            reason: text(g),
        }),
        195 => Event::ContinuationAsked(ContinuationAsked {
            submission_id: uuid(g),
            continues_left: u32::arbitrary(g),
            causes: Vec::arbitrary(g),
            crashed: bool::arbitrary(g),
        }),
        196 => Event::JobRequest(JobRequest {
            submission_id: uuid(g),
            job_name_prefix: text(g),
            target: Option::arbitrary(g),
            partition: Option::arbitrary(g),
            account: Option::arbitrary(g),
            qos: Option::arbitrary(g),
            time_s: u64::arbitrary(g),
            command: Vec::arbitrary(g),
            publication_timeout_s: u32::arbitrary(g),
            native_state_s: u32::arbitrary(g),
            cleanup_s: u32::arbitrary(g),
            grace_s: u32::arbitrary(g),
            source: Option::arbitrary(g),
            image: Option::arbitrary(g),
            append_only_glob: Option::arbitrary(g),
            trial: Option::arbitrary(g),
        }),
        118 => Event::PoolNodes(PoolNodes {
            pool: text(g),
            job_id: job(g),
            nodes: (0..usize::arbitrary(g) % 4)
                .map(|_| dispatch::slurm::NodeShare {
                    name: text(g),
                    cpus: u32::arbitrary(g),
                    mem_mb: u64::arbitrary(g),
                    gpus: Vec::arbitrary(g),
                })
                .collect(),
        }),
        120 => Event::JobSubmitIntent(JobSubmitIntent {
            submission_id: uuid(g),
            worker: text(g),
            target: Option::arbitrary(g),
            cpus: u32::arbitrary(g),
            mem_mb: u64::arbitrary(g),
            time_s: u64::arbitrary(g),
            publication_timeout_s: u32::arbitrary(g),
            command: Vec::arbitrary(g),
        }),
        121 => Event::JobSubmitted(JobSubmitted {
            submission_id: uuid(g),
            job_id: job(g),
            how: text(g),
        }),
        122 => Event::JobSubmitFailed(JobSubmitFailed {
            submission_id: uuid(g),
            definite: bool::arbitrary(g),
            reason: text(g),
        }),
        123 => Event::JobTerminal(JobTerminal {
            submission_id: uuid(g),
            proof: text(g),
        }),
        124 => Event::JobStopIntent(JobStopIntent {
            submission_id: uuid(g),
            grace_s: u32::arbitrary(g),
        }),
        125 => Event::JobNamed(JobNamed {
            submission_id: uuid(g),
            job_name: text(g),
            sbatch_limit_s: u32::arbitrary(g),
        }),
        170 => Event::WorkerForgotten(WorkerForgotten {
            submission_id: uuid(g),
            worker: text(g),
            state: text(g),
            job_id: opt_job(g),
            step_id: Option::arbitrary(g),
            reason: text(g),
        }),
        171 => Event::SessionForgotten(SessionForgotten {
            session: session_key(g),
            job_id: opt_job(g),
            submission_id: if bool::arbitrary(g) {
                Some(uuid(g))
            } else {
                None
            },
            reason: text(g),
        }),
        172 => Event::AllocationStolen(AllocationStolen {
            pool: text(g),
            job_id: job(g),
            holder: text(g),
            reason: text(g),
        }),
        180 => Event::WatermarkIntent(WatermarkIntent {
            beacon_id: uuid(g),
            job_name: text(g),
            sbatch_limit_s: u32::arbitrary(g),
        }),
        181 => Event::WatermarkMade(WatermarkMade {
            beacon_id: uuid(g),
            job_id: job(g),
        }),
        182 => Event::WatermarkFailed(WatermarkFailed {
            beacon_id: uuid(g),
            definite: bool::arbitrary(g),
            reason: text(g),
        }),
        183 => Event::WatermarkCancelled(WatermarkCancelled {
            beacon_id: uuid(g),
            job_id: opt_job(g),
            answered: bool::arbitrary(g),
            reason: text(g),
        }),
        184 => Event::PoolAllocationEndIntent(PoolAllocationEndIntent {
            pool: text(g),
            job_id: job(g),
            reason: text(g),
        }),
        185 => Event::PoolAllocationEndAnswered(PoolAllocationEndAnswered {
            pool: text(g),
            job_id: job(g),
            outcome: text(g),
            detail: text(g),
        }),
        130 => Event::AssetAddIntent(AssetAddIntent {
            asset: asset_record(g),
            origin: text(g),
            rev: Option::arbitrary(g),
        }),
        131 => Event::AssetAdded(AssetAdded {
            name: text(g),
            sha256: digest(g),
        }),
        132 => Event::AssetAddFailed(AssetAddFailed {
            name: text(g),
            reason: text(g),
        }),
        133 => Event::WorkerAssetsBound(WorkerAssetsBound {
            submission_id: uuid(g),
            assets: few(g, asset_record),
        }),
        134 => Event::WorkerReportIngested(WorkerReportIngested {
            submission_id: uuid(g),
            journal_id: uuid(g),
            last_seq: u64::arbitrary(g),
            head: digest(g),
            preflight: Option::arbitrary(g),
            publication: Option::arbitrary(g),
            published_dir: Option::arbitrary(g),
            manifest_sha256: if bool::arbitrary(g) {
                Some(digest(g))
            } else {
                None
            },
            state_class: Option::arbitrary(g),
            finished: Option::arbitrary(g),
        }),
        144 => Event::JobRequeued(JobRequeued {
            submission_id: uuid(g),
            job_id: job(g),
            restarts: u32::arbitrary(g),
            proof: text(g),
        }),
        143 => Event::WorkerDevicesIngested(WorkerDevicesIngested {
            submission_id: uuid(g),
            step_gpus: Option::arbitrary(g),
            cuda_visible_devices: Option::arbitrary(g),
        }),
        135 => Event::WorkerJournalDamaged(WorkerJournalDamaged {
            submission_id: uuid(g),
            status: text(g),
            reason: text(g),
        }),
        136 => Event::PoolAllocationEnded(PoolAllocationEnded {
            pool: text(g),
            job_id: job(g),
            proof: text(g),
        }),
        137 => Event::WorkerCleanupIntent(WorkerCleanupIntent {
            submission_id: uuid(g),
            remove: Vec::arbitrary(g),
            keep: Vec::arbitrary(g),
            state_class: text(g),
            reason: text(g),
        }),
        138 => Event::WorkerCleanedUp(WorkerCleanedUp {
            submission_id: uuid(g),
            removed: Vec::arbitrary(g),
            kept: Vec::arbitrary(g),
            state_class: text(g),
            errors: Vec::arbitrary(g),
        }),
        140 => Event::TrialOpened(TrialOpened {
            trial: text(g),
            pin: Option::arbitrary(g),
            follows: Option::arbitrary(g),
            note: text(g),
        }),
        141 => Event::TrialWorkerJoined(TrialWorkerJoined {
            trial: text(g),
            submission_id: uuid(g),
        }),
        142 => Event::TrialJudged(TrialJudged {
            trial: text(g),
            verdict: if bool::arbitrary(g) {
                Verdict::Passed
            } else {
                Verdict::Failed
            },
            reason: text(g),
            evidence: few(g, |g| TrialEvidence {
                submission_id: uuid(g),
                worker: text(g),
                state: text(g),
                outcome: Option::arbitrary(g),
                published_dir: Option::arbitrary(g),
                manifest_sha256: if bool::arbitrary(g) {
                    Some(digest(g))
                } else {
                    None
                },
            }),
        }),
        200 => Event::SessionLaunchIntent(SessionLaunchIntent {
            session: session_key(g),
            submission_id: uuid(g),
            job_name: text(g),
            confined: bool::arbitrary(g),
            command: Vec::arbitrary(g),
            replacing: opt_job(g),
        }),
        201 => Event::SessionJobSubmitted(SessionJobSubmitted {
            session: session_key(g),
            submission_id: uuid(g),
            job_id: job(g),
        }),
        202 => Event::SessionSubmitFailed(SessionSubmitFailed {
            session: session_key(g),
            submission_id: uuid(g),
            may_exist: bool::arbitrary(g),
            job_hint: opt_job(g),
            reason: text(g),
        }),
        203 => Event::SessionNodeResolved(SessionNodeResolved {
            session: session_key(g),
            job_id: job(g),
            node: text(g),
        }),
        204 => Event::SessionAdopted(SessionAdopted {
            session: session_key(g),
            job_id: job(g),
            how: text(g),
            state: text(g),
            partition: text(g),
            account: Option::arbitrary(g),
            qos: Option::arbitrary(g),
            replacing: opt_job(g),
        }),
        205 => Event::SessionCancelIntent(SessionCancelIntent {
            session: session_key(g),
            job_id: job(g),
        }),
        206 => Event::SessionCancelFailed(SessionCancelFailed {
            session: session_key(g),
            job_id: job(g),
            definite: bool::arbitrary(g),
            reason: text(g),
        }),
        207 => Event::SessionReleased(SessionReleased {
            session: session_key(g),
            job_id: job(g),
            proof: text(g),
        }),
        208 => Event::SessionDetached(SessionDetached {
            session: session_key(g),
            job_id: job(g),
            holders: Vec::arbitrary(g),
        }),
        209 => Event::SessionCleared(SessionCleared {
            session: session_key(g),
            job_id: job(g),
            reason: text(g),
        }),
        210 => Event::SessionHoldDecided(SessionHoldDecided {
            session: session_key(g),
            job_id: job(g),
            winner: job(g),
        }),
        211 => Event::SessionHoldSettled(SessionHoldSettled {
            session: session_key(g),
            job_id: job(g),
            action: text(g),
            ok: bool::arbitrary(g),
            reason: text(g),
        }),
        other => panic!("no generator for event kind {other}"),
    }
}

/// A body for each kind of a worker's own journal.
fn known_worker_event(code: u16, g: &mut Gen) -> WorkerEvent {
    match code {
        // The kinds any journal can have: the coordinator's generators.
        1..=3 => match known_event(code, g) {
            Event::Genesis(e) => WorkerEvent::Genesis(e),
            Event::Recovered(e) => WorkerEvent::Recovered(e),
            Event::JournalMerged(e) => WorkerEvent::JournalMerged(e),
            other => unreachable!("kind {code} is {other:?}"),
        },
        150 => WorkerEvent::SupervisorStarted(SupervisorStarted {
            submission_id: uuid(g),
            job_id: Option::arbitrary(g),
            step_id: Option::arbitrary(g),
            node: text(g),
            cpu_set: text(g),
            deadline: micros(g),
            grace_s: u32::arbitrary(g),
            command: Vec::arbitrary(g),
        }),
        151 => WorkerEvent::PayloadStarted(PayloadStarted {
            pid: u32::arbitrary(g),
        }),
        152 => WorkerEvent::ShutdownSignalled(ShutdownSignalled {
            signal: text(g),
            reason: text(g),
        }),
        153 => WorkerEvent::PayloadExited(PayloadExited {
            code: Option::arbitrary(g),
            signal: Option::arbitrary(g),
            interrupted: bool::arbitrary(g),
        }),
        154 => WorkerEvent::SupervisorPlan(SupervisorPlan {
            pool: Option::arbitrary(g),
            worker: text(g),
            dirs: few(g, |g| NamedPath {
                role: text(g),
                path: text(g),
            }),
            publish_dir: Option::arbitrary(g),
            assets: few(g, asset_record),
            publication_timeout_s: u32::arbitrary(g),
            native_state_s: u32::arbitrary(g),
            cleanup_s: u32::arbitrary(g),
            append_only_glob: text(g),
        }),
        155 => WorkerEvent::ReceivingChecks(ReceivingChecks {
            checks: few(g, dir_check),
            ok: bool::arbitrary(g),
        }),
        156 => WorkerEvent::AssetChecked(AssetChecked {
            name: text(g),
            kind: asset_record(g).kind,
            expected: digest(g),
            observed: if bool::arbitrary(g) {
                Some(digest(g))
            } else {
                None
            },
            ok: bool::arbitrary(g),
            reason: text(g),
        }),
        157 => WorkerEvent::CheckoutPrepared(CheckoutPrepared {
            commit: text(g),
            head: text(g),
            object_files: u64::arbitrary(g),
            hardlinked_files: u64::arbitrary(g),
            shares_asset_inode: bool::arbitrary(g),
            alternates: bool::arbitrary(g),
            fsck_ok: bool::arbitrary(g),
            ok: bool::arbitrary(g),
            took_ms: u64::arbitrary(g),
        }),
        158 => WorkerEvent::PreflightRefused(PreflightRefused {
            stage: text(g),
            reason: text(g),
        }),
        159 => WorkerEvent::WritersQuiesced(WritersQuiesced {
            quiet: bool::arbitrary(g),
            waited_ms: u64::arbitrary(g),
            holders: few(g, |g| OpenFileHolder {
                pid: u32::arbitrary(g),
                command: text(g),
                path: text(g),
            }),
        }),
        160 => WorkerEvent::NativeStateHashed(NativeStateHashed {
            files: few(g, |g| FileDigest {
                path: text(g),
                bytes: u64::arbitrary(g),
                sha256: digest(g),
            }),
            total_files: u64::arbitrary(g),
            total_bytes: u64::arbitrary(g),
            listing_sha256: digest(g),
            complete: bool::arbitrary(g),
        }),
        161 => WorkerEvent::AppendOnlyLogsChecked(AppendOnlyLogsChecked {
            glob: text(g),
            logs: few(g, |g| LogCheck {
                path: text(g),
                bytes: u64::arbitrary(g),
                records: u64::arbitrary(g),
                trailing_bytes: u64::arbitrary(g),
            }),
            ok: bool::arbitrary(g),
        }),
        162 => WorkerEvent::PublicationStarted(PublicationStarted {
            dir: text(g),
            temp_dir: text(g),
            timeout_s: u32::arbitrary(g),
        }),
        163 => WorkerEvent::Published(Published {
            dir: text(g),
            manifest_sha256: digest(g),
            files: u64::arbitrary(g),
            bytes: u64::arbitrary(g),
            commits: u64::arbitrary(g),
            patch_bytes: u64::arbitrary(g),
            took_ms: u64::arbitrary(g),
        }),
        164 => WorkerEvent::PublicationTimedOut(PublicationTimedOut {
            timeout_s: u32::arbitrary(g),
            took_ms: u64::arbitrary(g),
            stage: text(g),
            temp_removed: bool::arbitrary(g),
        }),
        165 => WorkerEvent::PublicationFailed(PublicationFailed {
            reason: text(g),
            temp_removed: bool::arbitrary(g),
        }),
        166 => WorkerEvent::CleanupStarted(CleanupStarted {
            remove: Vec::arbitrary(g),
            keep: Vec::arbitrary(g),
        }),
        167 => WorkerEvent::CleanedUp(CleanedUp {
            removed: Vec::arbitrary(g),
            kept: Vec::arbitrary(g),
            state_class: text(g),
            reason: text(g),
            errors: Vec::arbitrary(g),
        }),
        168 => WorkerEvent::SupervisorFinished(SupervisorFinished {
            outcome: text(g),
            exit_code: i32::arbitrary(g),
        }),
        169 => WorkerEvent::StepDevices(StepDevices {
            step_gpus: Option::arbitrary(g),
            cuda_visible_devices: Option::arbitrary(g),
        }),
        220 => WorkerEvent::CheckpointDeclared(CheckpointDeclared {
            marker: text(g),
            declared_at: micros(g),
            code: Option::arbitrary(g),
            signal: Option::arbitrary(g),
            killed_after_grace: bool::arbitrary(g),
        }),
        221 => WorkerEvent::ResumedFrom(ResumedFrom {
            generation: u32::arbitrary(g),
            from: text(g),
            manifest_sha256: digest(g),
            state_from: text(g),
            state_files: u64::arbitrary(g),
            state_bytes: u64::arbitrary(g),
            head: Option::arbitrary(g),
            took_ms: u64::arbitrary(g),
        }),
        222 => WorkerEvent::CheckpointPublishing(CheckpointPublishing {
            number: u32::arbitrary(g),
            dir: text(g),
            temp_dir: text(g),
            timeout_s: u32::arbitrary(g),
        }),
        223 => WorkerEvent::CheckpointPublished(CheckpointPublished {
            number: u32::arbitrary(g),
            dir: text(g),
            manifest_sha256: digest(g),
            files: u64::arbitrary(g),
            bytes: u64::arbitrary(g),
            took_ms: u64::arbitrary(g),
            removed: Option::arbitrary(g),
        }),
        224 => WorkerEvent::CheckpointUnpublished(CheckpointUnpublished {
            number: u32::arbitrary(g),
            reason: text(g),
            temp_removed: bool::arbitrary(g),
        }),
        other => panic!("no generator for event kind {other}"),
    }
}

fn session_key(g: &mut Gen) -> SessionKey {
    SessionKey {
        mirror: text(g),
        target: text(g),
    }
}

fn job(g: &mut Gen) -> dispatch::slurm::JobId {
    dispatch::slurm::JobId::new(u32::arbitrary(g).max(1)).expect("non-zero")
}

fn opt_job(g: &mut Gen) -> Option<dispatch::slurm::JobId> {
    bool::arbitrary(g).then(|| job(g))
}

/// An event of a kind this dispatch does not know, as a newer dispatch would write it: the
/// usual `[time, id, actor, body]` payload with a body of any shape.
fn unknown_event(g: &mut Gen, must_understand: bool, time: Micros, id: Uuid, a: &Actor) -> Event {
    let kind = loop {
        let k = u16::arbitrary(g);
        if KNOWN_KINDS.iter().all(|(c, _)| *c != k) {
            break k;
        }
    };
    // Bit 0 is the only flag format version 1 defines; a newer dispatch that needs another
    // changes the format version (journal-format.md §4).
    let flags = if must_understand {
        FLAG_MUST_UNDERSTAND
    } else {
        0
    };
    let body: (String, Vec<u64>, Option<bool>, Vec<Vec<u8>>) = Arbitrary::arbitrary(g);
    let payload = rmp_serde::to_vec(&(time, id, a, body)).unwrap();
    Event::Unknown {
        kind,
        flags,
        payload,
    }
}

/// An envelope's worth of event: its body plus the time, id and actor it is encoded with.
#[derive(Clone, Debug)]
struct AnyEnvelope {
    time: Micros,
    id: Uuid,
    actor: Actor,
    event: Event,
}

impl Arbitrary for AnyEnvelope {
    fn arbitrary(g: &mut Gen) -> Self {
        let (time, id, actor) = (micros(g), uuid(g), actor(g));
        let pick = usize::arbitrary(g) % (Event::KINDS.len() + 2);
        let event = match pick.checked_sub(Event::KINDS.len()) {
            None => known_event(Event::KINDS[pick].0, g),
            Some(n) => unknown_event(g, n == 0, time, id, &actor),
        };
        AnyEnvelope {
            time,
            id,
            actor,
            event,
        }
    }
}

fn is_unknown(e: &Event) -> bool {
    matches!(e, Event::Unknown { .. })
}

// ---- codec round trips ------------------------------------------------------------------

#[test]
fn generators_cover_every_known_kind() {
    let mut g = Gen::new(10);
    for &(code, name) in KNOWN_KINDS {
        if WorkerEvent::KINDS.iter().any(|(c, _)| *c == code) {
            let e = known_worker_event(code, &mut g);
            assert_eq!((e.kind(), e.kind_name()), (code, name));
        }
        if Event::KINDS.iter().any(|(c, _)| *c == code) {
            let e = known_event(code, &mut g);
            assert_eq!((e.kind(), e.kind_name()), (code, name));
        }
    }
    for must in [false, true] {
        let a = actor(&mut g);
        let e = unknown_event(&mut g, must, Micros(0), Uuid::nil(), &a);
        assert_eq!(e.flags() & FLAG_MUST_UNDERSTAND != 0, must);
        assert_eq!(e.kind_name(), "Unknown");
    }
}

#[test]
fn every_event_survives_the_payload_codec() {
    fn prop(seq: u64, e: AnyEnvelope) -> TestResult {
        let mut buf = Vec::new();
        event::encode_payload(&mut buf, e.time, &e.id, &e.actor, &e.event).unwrap();
        let got = event::decode_payload(seq, e.event.kind(), e.event.flags(), &buf).unwrap();
        let want = Envelope {
            seq,
            time: e.time,
            id: e.id,
            actor: e.actor,
            event: e.event,
        };
        TestResult::from_bool(got == want)
    }
    check(500, prop as fn(u64, AnyEnvelope) -> TestResult);
}

/// An event of a worker's own journal with the envelope fields it is encoded with.
#[derive(Clone, Debug)]
struct AnyWorkerEnvelope {
    time: Micros,
    id: Uuid,
    actor: Actor,
    event: WorkerEvent,
}

impl Arbitrary for AnyWorkerEnvelope {
    fn arbitrary(g: &mut Gen) -> Self {
        let pick = usize::arbitrary(g) % WorkerEvent::KINDS.len();
        AnyWorkerEnvelope {
            time: micros(g),
            id: uuid(g),
            actor: actor(g),
            event: known_worker_event(WorkerEvent::KINDS[pick].0, g),
        }
    }
}

#[test]
fn every_worker_event_survives_the_payload_codec_and_a_real_journal() {
    fn prop(seq: u64, events: Vec<AnyWorkerEnvelope>) -> TestResult {
        for e in &events {
            let mut buf = Vec::new();
            event::encode_payload(&mut buf, e.time, &e.id, &e.actor, &e.event).unwrap();
            let got =
                event::decode_payload_of::<WorkerEvent>(seq, e.event.kind(), e.event.flags(), &buf)
                    .unwrap();
            if got.event != e.event || got.time != e.time || got.id != e.id || got.actor != e.actor
            {
                return TestResult::error(format!("{got:?} != {e:?}"));
            }
            // The coordinator's vocabulary does not know a worker's kinds (but the three it
            // shares).
            let coordinator = event::decode_payload(seq, e.event.kind(), 0, &buf).unwrap();
            if (coordinator.event.kind_name() == "Unknown") != (e.event.kind() > 3) {
                return TestResult::error(format!("the coordinator read {coordinator:?}"));
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("j");
        let w = journal::JournalWriter::<WorkerEvent>::open(&dir, Options::default()).unwrap();
        let events: Vec<WorkerEvent> = events.into_iter().map(|e| e.event).collect();
        w.append(events.clone()).unwrap();
        drop(w);
        let mut replayed = Vec::new();
        let scan = journal::reader::replay_of::<WorkerEvent>(&dir, None, |env| {
            replayed.push(env.event);
            Ok(())
        })
        .unwrap();
        if scan.status() != Status::Clean || !matches!(replayed[0], WorkerEvent::Genesis(_)) {
            return TestResult::error(format!("{scan:?}"));
        }
        TestResult::from_bool(replayed[1..] == events[..])
    }
    check(100, prop as fn(u64, Vec<AnyWorkerEnvelope>) -> TestResult);
}

#[test]
fn every_event_survives_a_real_journal() {
    fn prop(events: Vec<AnyEnvelope>, split: u8) -> TestResult {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("j");
        let w = Writer::open(&dir, Options::default()).unwrap();
        let events: Vec<Event> = events.into_iter().map(|e| e.event).collect();
        // Some events alone, the rest in one batch: both ways of framing.
        let alone = (split as usize).min(events.len());
        let mut committed = Vec::new();
        for e in &events[..alone] {
            committed.push(w.append_one(e.clone()).unwrap());
        }
        committed.extend(w.append(events[alone..].to_vec()).unwrap());
        drop(w);
        let me = Actor::current();
        let mut replayed = Vec::new();
        let scan = journal::replay(&dir, None, |env| {
            replayed.push(env);
            Ok(())
        })
        .unwrap();
        if scan.status() != Status::Clean || replayed.len() != events.len() + 1 {
            return TestResult::error(format!("{scan:?}"));
        }
        for ((env, want), c) in replayed[1..].iter().zip(&events).zip(&committed) {
            if env.event != *want || env.seq != c.seq {
                return TestResult::error(format!("{env:?} is not {want:?} at {}", c.seq));
            }
            // An unknown event carries its own envelope fields; a known one gets the writer's.
            if !is_unknown(want) && (env.id, env.time, &env.actor) != (c.id, c.time, &me) {
                return TestResult::error(format!("envelope of seq {} differs", c.seq));
            }
        }
        TestResult::passed()
    }
    check(40, prop as fn(Vec<AnyEnvelope>, u8) -> TestResult);
}

#[test]
fn frames_survive_their_codec_and_any_single_flip_is_caught() {
    fn prop(seq: u64, kind: u16, flags: u16, payload: Vec<u8>, at: usize) -> bool {
        let prev = frame::genesis_chain(&[3; 16]);
        let mut buf = Vec::new();
        let chain = frame::encode(&mut buf, &prev, seq, kind, flags, &payload);
        let f = frame::decode(&buf).unwrap();
        let same = (f.seq, f.kind, f.flags, f.payload, f.chain_value(), f.len())
            == (seq, kind, flags, &payload[..], chain, buf.len());
        let mut flipped = buf.clone();
        let at = at % buf.len();
        flipped[at] ^= 1 << (at % 8);
        same && frame::decode(&flipped).is_err()
    }
    check(500, prop as fn(u64, u16, u16, Vec<u8>, usize) -> bool);
}

// ---- decoders never panic ---------------------------------------------------------------

/// Bytes that are mostly random but sometimes start like the real thing, so decoders get past
/// their first check more often than pure noise would let them.
#[derive(Clone, Debug)]
struct Noise(Vec<u8>);

impl Arbitrary for Noise {
    fn arbitrary(g: &mut Gen) -> Self {
        let mut b: Vec<u8> = Vec::arbitrary(g);
        match u8::arbitrary(g) % 4 {
            0 => {
                let mut v = frame::FRAME_MAGIC.to_le_bytes().to_vec();
                v.append(&mut b);
                b = v;
            }
            1 => {
                let mut v = segment::SEGMENT_MAGIC.to_vec();
                v.append(&mut b);
                b = v;
            }
            2 => {
                let mut v = snapshot::SNAPSHOT_MAGIC.to_vec();
                v.append(&mut b);
                b = v;
            }
            _ => {}
        }
        Noise(b)
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        Box::new(self.0.shrink().map(Noise))
    }
}

#[test]
fn decoders_take_any_bytes_without_panicking() {
    fn prop(n: Noise, kind_pick: usize, flags: u16) -> bool {
        let b = &n.0;
        let _ = frame::decode(b);
        let _ = SegmentHeader::decode(b);
        let _ = snapshot::decode::<dispatch::state::State>(b);
        let kind = KNOWN_KINDS
            .get(kind_pick % (KNOWN_KINDS.len() + 1))
            .map_or(0xBEEF, |k| k.0);
        let _ = event::check_payload(1, kind, flags, b);
        true
    }
    check(2000, prop as fn(Noise, usize, u16) -> bool);
}

/// Noise behind valid CRCs, so that what follows the checksum check is exercised too: the
/// header fields of a segment, the length and state of a snapshot, the payload of a frame.
#[test]
fn decoders_take_any_bytes_behind_valid_crcs() {
    fn prop(mut header: Vec<u8>, body: Vec<u8>, seq: u64, kind: u16) -> bool {
        header.resize(SEGMENT_HEADER_LEN, 0);
        header[..8].copy_from_slice(segment::SEGMENT_MAGIC);
        let crc = crc32fast::hash(&header[..92]);
        header[92..96].copy_from_slice(&crc.to_le_bytes());
        let _ = SegmentHeader::decode(&header);

        let mut snap = header.clone();
        snap[..8].copy_from_slice(snapshot::SNAPSHOT_MAGIC);
        snap[8..10].copy_from_slice(&snapshot::SNAPSHOT_VERSION.to_le_bytes());
        snap[88..92].copy_from_slice(&(body.len() as u32).to_le_bytes());
        let crc = crc32fast::hash(&snap[..92]);
        snap[92..96].copy_from_slice(&crc.to_le_bytes());
        snap.extend_from_slice(&body);
        let crc = crc32fast::hash(&snap);
        snap.extend_from_slice(&crc.to_le_bytes());
        let _ = snapshot::decode::<dispatch::state::State>(&snap);

        let mut f = Vec::new();
        frame::encode(&mut f, &[0; 32], seq, kind, 0, &body);
        frame::decode(&f).is_ok() && {
            let _ = event::check_payload(seq, kind, 0, &body);
            true
        }
    }
    check(1000, prop as fn(Vec<u8>, Vec<u8>, u64, u16) -> bool);
}

#[test]
fn deeply_nested_payloads_decode_or_fail_without_crashing() {
    // rmp-serde caps nesting at 1024 levels. An unoptimised build spends about 2 KiB of stack
    // per level skipping an unknown body (a release build under 128 KiB in all), so the check
    // runs on a thread with the main thread's 8 MiB rather than the test harness's 2 MiB.
    let t = std::thread::Builder::new().stack_size(8 << 20).spawn(|| {
        for depth in [1_000usize, 1_023, 1_024, 1_100, 100_000] {
            let mut nested = vec![0x91u8; depth]; // fixarray of one element, nested
            nested.push(0xc0);
            for &(kind, _) in KNOWN_KINDS.iter().chain(&[(0xBEEF, "unknown")]) {
                assert!(event::check_payload(1, kind, 0, &nested).is_err());
            }
            // The same nesting as the body of an otherwise valid envelope.
            let mut p = rmp_serde::to_vec(&(Micros(0), Uuid::nil(), Actor::current())).unwrap();
            p[0] += 1; // a fixarray of three becomes one of four: the body follows
            p.extend_from_slice(&nested);
            for &(kind, _) in KNOWN_KINDS {
                assert!(event::check_payload(1, kind, 0, &p).is_err(), "kind {kind}");
            }
            let unknown = event::decode_payload(1, 0xBEEF, 0, &p);
            // The envelope is one level of the cap's 1024: only well below it may succeed.
            if depth <= 1_000 {
                assert!(unknown.is_ok(), "depth {depth}: {unknown:?}");
            } else if depth >= 1_024 {
                assert!(unknown.is_err(), "depth {depth}");
            }
        }
    });
    t.unwrap().join().unwrap();
}

// ---- the classifier ---------------------------------------------------------------------

/// A clean single-segment journal, built once: Genesis plus some pool events.
fn base_segment() -> &'static Vec<u8> {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        build_journal(tmp.path(), 12, Options::default());
        std::fs::read(segment_path(tmp.path(), 1)).unwrap()
    })
}

fn classify(dir: &Path) -> dispatch::journal::Scan {
    let scan = scan_dir(dir);
    // Every entry point must survive the same bytes.
    let _ = ops::verify(dir);
    let _ = journal::load::<dispatch::state::State>(dir);
    scan
}

#[test]
fn the_classifier_takes_any_segment_file_without_panicking() {
    fn prop(n: Noise, keep_frames: u8) -> TestResult {
        let base = base_segment();
        let fr = frames(base);
        let tmp = tempfile::tempdir().unwrap();
        // Alone, as the whole file.
        let alone = materialize(tmp.path(), "alone", &[(segment::file_name(1), n.0.clone())]);
        let scan = classify(&alone);
        if scan.status() == Status::Clean && !n.0.is_empty() {
            return TestResult::error("noise classified clean");
        }
        let before = snapshot_files(&alone);
        if Writer::open(&alone, Options::default()).is_ok() {
            return TestResult::error("a writer accepted noise as a journal");
        }
        let after: Vec<_> = snapshot_files(&alone)
            .into_iter()
            .filter(|(n, _)| n != "LOCK")
            .collect();
        if after != before {
            return TestResult::error("noise was overwritten");
        }

        // After a valid header and some valid frames: a garbage tail.
        let keep = fr[(keep_frames as usize) % fr.len()].end;
        let mut bytes = base[..keep].to_vec();
        bytes.extend_from_slice(&n.0);
        let tail = materialize(tmp.path(), "tail", &[(segment::file_name(1), bytes)]);
        let scan = classify(&tail);
        let want = if n.0.is_empty() {
            Status::Clean
        } else {
            Status::TornTail
        };
        if scan.status() != want {
            return TestResult::error(format!(
                "garbage tail: {:?} {:?}",
                scan.status(),
                scan.damage()
            ));
        }
        if want == Status::TornTail {
            let w = Writer::open(&tail, Options::default()).unwrap();
            let rec = w.opened().repaired.clone().unwrap();
            drop(w);
            let after = std::fs::read(segment_path(&tail, 1)).unwrap();
            if rec.offset != keep as u64 || after[..keep] != base[..keep] {
                return TestResult::error("repair did not keep the valid prefix");
            }
        }
        TestResult::passed()
    }
    check(300, prop as fn(Noise, u8) -> TestResult);
}

/// A journal from generated events, possibly over several segments, with its frame layout.
struct Built {
    _tmp: tempfile::TempDir,
    segments: Vec<(String, Vec<u8>)>,
    envelopes: Vec<Envelope>,
}

fn build(events: &[AnyEnvelope], max_segment_bytes: u64) -> Built {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let w = Writer::open(&dir, Options { max_segment_bytes }).unwrap();
    let evs: Vec<Event> = events.iter().map(|e| e.event.clone()).collect();
    w.append(evs).unwrap();
    drop(w);
    let mut envelopes = Vec::new();
    journal::replay(&dir, None, |e| {
        envelopes.push(e);
        Ok(())
    })
    .unwrap();
    let segments = snapshot_files(&dir)
        .into_iter()
        .filter(|(n, _)| segment::parse_file_name(n).is_some())
        .collect();
    Built {
        _tmp: tmp,
        segments,
        envelopes,
    }
}

#[test]
fn any_single_truncation_is_clean_or_torn_and_repair_keeps_whole_frames() {
    fn prop(events: Vec<AnyEnvelope>, small: bool, cut: usize) -> TestResult {
        let built = build(&events, if small { 600 } else { 64 << 20 });
        // Cut points: anywhere after a segment header. A header is never torn: a segment is
        // written under a temporary name, fsynced, then renamed into place.
        let mut points = Vec::new();
        for (i, (_, b)) in built.segments.iter().enumerate() {
            points.extend((SEGMENT_HEADER_LEN..=b.len()).map(|at| (i, at)));
        }
        let (seg, at) = points[cut % points.len()];
        let mut files: Vec<_> = built.segments[..=seg].to_vec();
        let original = files[seg].1.clone();
        files[seg].1.truncate(at);

        let fr = frames_upto(&original, at);
        let boundary = fr.last().map_or(SEGMENT_HEADER_LEN, |r| r.end);
        let kept_frames: usize = built.segments[..seg]
            .iter()
            .map(|(_, b)| frames(b).len())
            .sum::<usize>()
            + fr.len();

        let tmp = tempfile::tempdir().unwrap();
        let dir = materialize(tmp.path(), "cut", &files);
        let scan = scan_dir(&dir);
        let want = if at == boundary {
            Status::Clean
        } else {
            Status::TornTail
        };
        if scan.status() != want || scan.events != kept_frames as u64 {
            return TestResult::error(format!(
                "cut {seg}:{at}: {:?} {:?}, {} events, want {want:?} {kept_frames}",
                scan.status(),
                scan.damage(),
                scan.events
            ));
        }
        let w = Writer::open(&dir, Options::default()).unwrap();
        let repaired = w.opened().repaired.clone();
        drop(w);
        if repaired.is_some() != (want == Status::TornTail) {
            return TestResult::error("repair without a torn tail, or no repair of one");
        }
        let after = std::fs::read(dir.join(&files[seg].0)).unwrap();
        if after.len() < boundary || after[..boundary] != original[..boundary] {
            return TestResult::error("repair did not keep the whole frames");
        }
        let mut replayed = Vec::new();
        let scan = journal::replay(&dir, None, |e| {
            replayed.push(e);
            Ok(())
        })
        .unwrap();
        // Cut before Genesis was whole, the journal is empty again and gets a new Genesis
        // (the same journal id, from the header), ahead of any Recovered record.
        let regenesis = kept_frames == 0;
        let want_len = kept_frames + usize::from(regenesis) + usize::from(repaired.is_some());
        if scan.status() != Status::Clean
            || replayed.len() != want_len
            || replayed[..kept_frames] != built.envelopes[..kept_frames]
        {
            return TestResult::error(format!(
                "replay after repair is not the prefix: {} events, want {want_len}",
                replayed.len()
            ));
        }
        if regenesis && replayed[0].event != built.envelopes[0].event {
            return TestResult::error("the new Genesis differs from the lost one");
        }
        if let Some(rec) = repaired {
            if replayed.last().unwrap().event != Event::Recovered(rec) {
                return TestResult::error("the last event is not the Recovered record");
            }
        }
        TestResult::passed()
    }
    check(60, prop as fn(Vec<AnyEnvelope>, bool, usize) -> TestResult);
}

/// The whole frames of a clean segment that end at or before `at`.
fn frames_upto(bytes: &[u8], at: usize) -> Vec<std::ops::Range<usize>> {
    frames(bytes).into_iter().filter(|r| r.end <= at).collect()
}

// ---- the unknown-kind rule --------------------------------------------------------------

fn env(seq: u64, event: Event) -> Envelope {
    Envelope {
        seq,
        time: Micros(seq as i64),
        id: Uuid::from_u128(seq as u128),
        actor: Actor::current(),
        event,
    }
}

#[test]
fn reducers_skip_unknown_kinds_unless_they_must_understand_them() {
    fn prop(kind_seed: u16, other_flags: u16) -> TestResult {
        let mut g = Gen::from_size_and_seed(10, u64::from(kind_seed));
        let a = Actor::current();
        let skip = unknown_event(&mut g, false, Micros(1), Uuid::nil(), &a);
        let Event::Unknown { kind, payload, .. } = skip.clone() else {
            unreachable!()
        };
        let mut state = State::default();
        let genesis = Event::Genesis(Genesis {
            journal_id: Uuid::nil(),
            format_version: 1,
        });
        state.apply(&env(1, genesis)).unwrap();
        state.apply(&env(2, skip)).unwrap();
        if (state.events, state.skipped_unknown) != (2, 1) {
            return TestResult::error("an unknown kind without the flag is skipped and counted");
        }
        let flags = (other_flags & !FLAG_MUST_UNDERSTAND) | FLAG_MUST_UNDERSTAND;
        let must = Event::Unknown {
            kind,
            flags,
            payload,
        };
        let before = state.clone();
        let r = state.apply(&env(3, must));
        if r != Err(ReduceError::MustUnderstand { seq: 3, kind }) || state != before {
            return TestResult::error(format!("{r:?}: a must-understand kind is refused"));
        }
        TestResult::passed()
    }
    check(200, prop as fn(u16, u16) -> TestResult);
}

#[test]
fn loading_a_journal_stops_at_a_must_understand_unknown_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    let a = Actor::current();
    let mut g = Gen::new(10);
    {
        let w = Writer::open(&dir, Options::default()).unwrap();
        w.append_one(pool_event(0)).unwrap();
        w.append_one(unknown_event(&mut g, false, Micros(1), Uuid::nil(), &a))
            .unwrap();
    }
    let loaded = journal::load::<dispatch::state::State>(&dir).unwrap();
    assert_eq!((loaded.state.events, loaded.state.skipped_unknown), (3, 1));
    assert!(loaded.state.pools.pools.contains_key("p"));

    let must = unknown_event(&mut g, true, Micros(2), Uuid::nil(), &a);
    let kind = must.kind();
    Writer::open(&dir, Options::default())
        .unwrap()
        .append_one(must)
        .unwrap();
    match journal::load::<dispatch::state::State>(&dir) {
        Err(JournalError::Reduce(ReduceError::MustUnderstand { seq: 4, kind: k })) => {
            assert_eq!(k, kind)
        }
        other => panic!("{other:?}"),
    }
    // The journal itself is fine: an older reader is what cannot go on.
    assert_eq!(ops::verify(&dir).unwrap().status.as_str(), "clean");
}

// ---- the cost of scanning crafted damage ------------------------------------------------

/// A frame header with a valid header CRC that claims a 1 MiB payload: each one is a
/// candidate the torn-tail search has to check, and none is followed by a valid frame.
fn header_claiming_a_full_payload(seq: u64) -> [u8; frame::HEADER_LEN] {
    let mut h = [0u8; frame::HEADER_LEN];
    h[0..4].copy_from_slice(&frame::FRAME_MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&(frame::MAX_PAYLOAD as u32).to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..18].copy_from_slice(&101u16.to_le_bytes());
    let crc = crc32fast::hash(&h[..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A clean journal of Genesis + 20 events, followed by `tail` bytes of such headers, one every
/// `spacing` bytes (the gaps filled with non-zero bytes). Returns the directory and the
/// length of the clean prefix.
fn journal_with_crafted_tail(
    root: &Path,
    tail: usize,
    spacing: usize,
) -> (std::path::PathBuf, u64) {
    let dir = root.join("j");
    build_journal(&dir, 20, Options::default());
    let path = segment_path(&dir, 1);
    let mut bytes = std::fs::read(&path).unwrap();
    let clean = bytes.len();
    let mut at = 0;
    let mut seq = 22;
    while at < tail {
        let h = header_claiming_a_full_payload(seq);
        let n = h.len().min(tail - at);
        bytes.extend_from_slice(&h[..n]);
        bytes.extend(std::iter::repeat_n(
            0xA5u8,
            spacing.saturating_sub(n).min(tail - at - n),
        ));
        at = bytes.len() - clean;
        seq += 1;
    }
    assert_eq!(bytes.len() - clean, tail);
    std::fs::write(&path, &bytes).unwrap();
    (dir, clean as u64)
}

/// Scans the crafted tail and checks both the verdict the spec gives (a torn tail: the span
/// is within one write, and no valid frame starts after the damage) and the work done: the
/// bytes run through CRC-32 are a small multiple of the file's bytes, however many headers
/// claim a 1 MiB payload. A meter, not a clock, so it cannot flake on a loaded machine.
fn crafted_tail_is_torn_and_scanned_in_linear_work(spacing: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let tail = 8 << 20;
    let (dir, clean) = journal_with_crafted_tail(tmp.path(), tail, spacing);
    let file_bytes = std::fs::metadata(segment_path(&dir, 1)).unwrap().len();
    let before = frame::crc_bytes_on_this_thread();
    let scan = scan_dir(&dir);
    let work = frame::crc_bytes_on_this_thread() - before;
    assert_eq!(scan.status(), Status::TornTail, "{:?}", scan.damage());
    let damage = scan.damage().unwrap();
    assert_eq!((damage.offset, damage.bytes), (clean, tail as u64));
    let head = scan.head.as_ref().unwrap();
    assert_eq!((head.last_seq, head.segment_len), (21, clean));
    assert!(
        work <= 4 * file_bytes,
        "the scan ran {work} bytes through CRC-32 for a {file_bytes}-byte file \
         (headers every {spacing} bytes)"
    );
}

#[test]
fn a_tail_of_sparse_headers_claiming_1_mib_is_scanned_in_linear_work() {
    crafted_tail_is_torn_and_scanned_in_linear_work(64 << 10);
}

#[test]
fn a_tail_of_back_to_back_headers_claiming_1_mib_is_scanned_in_linear_work() {
    crafted_tail_is_torn_and_scanned_in_linear_work(frame::HEADER_LEN);
}

/// One way a journal's bytes can be damaged, applied at a generated place.
#[derive(Clone, Debug)]
enum Damage {
    Truncate,
    Flip,
    AppendNoise(Vec<u8>),
    AppendZeros(u16),
    /// Headers with valid CRCs claiming payloads, as in a crafted tail.
    AppendClaimingHeaders(u8),
    /// A copy of an earlier frame: a valid frame (with a stale seq) after the damage.
    CopyFrame,
    /// Zero out a stretch in the middle.
    ZeroSpan(u16),
}

impl Arbitrary for Damage {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 7 {
            0 => Damage::Truncate,
            1 => Damage::Flip,
            2 => Damage::AppendNoise(Noise::arbitrary(g).0),
            3 => Damage::AppendZeros(u16::arbitrary(g) % 2000),
            4 => Damage::AppendClaimingHeaders(u8::arbitrary(g) % 40),
            5 => Damage::CopyFrame,
            _ => Damage::ZeroSpan(u16::arbitrary(g) % 500),
        }
    }
}

#[test]
fn the_scan_classifies_random_damage_as_the_reference_search_does() {
    fn prop(
        events: Vec<AnyEnvelope>,
        small: bool,
        damages: Vec<(Damage, usize, usize)>,
    ) -> TestResult {
        let built = build(&events, if small { 600 } else { 64 << 20 });
        let mut files = built.segments.clone();
        for (damage, pick, at) in damages.iter().take(3) {
            let seg = pick % files.len();
            let bytes = &mut files[seg].1;
            let at = at % (bytes.len() + 1);
            match damage {
                Damage::Truncate => bytes.truncate(at.max(SEGMENT_HEADER_LEN)),
                Damage::Flip if at < bytes.len() => bytes[at] ^= 1 << (pick % 8),
                Damage::Flip => {}
                Damage::AppendNoise(n) => bytes.extend_from_slice(n),
                Damage::AppendZeros(n) => bytes.extend(std::iter::repeat_n(0, *n as usize)),
                Damage::AppendClaimingHeaders(n) => {
                    for i in 0..*n as u64 {
                        let mut h = header_claiming_a_full_payload(i);
                        let claim = (at as u32).wrapping_mul(i as u32 + 1) % 5000;
                        h[4..8].copy_from_slice(&claim.to_le_bytes());
                        let crc = crc32fast::hash(&h[..20]);
                        h[20..24].copy_from_slice(&crc.to_le_bytes());
                        bytes.extend_from_slice(&h);
                        bytes.extend(std::iter::repeat_n(0x5A, at % 97));
                    }
                }
                Damage::CopyFrame => {
                    if let Some(r) = frames_upto(&built.segments[seg].1, usize::MAX)
                        .get(at % 7)
                        .cloned()
                    {
                        let copy = built.segments[seg].1[r].to_vec();
                        bytes.extend_from_slice(&copy);
                    }
                }
                Damage::ZeroSpan(n) => {
                    let end = (at + *n as usize).min(bytes.len());
                    bytes[at..end].fill(0);
                }
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = materialize(tmp.path(), "damaged", &files);
        let scan = dispatch::journal::scan::scan(&dir, None, |_| true).unwrap();
        let reference =
            dispatch::journal::scan::scan_with_reference_search(&dir, None, |_| true).unwrap();
        if (scan.status(), scan.events, &scan.head, &scan.damage())
            != (
                reference.status(),
                reference.events,
                &reference.head,
                &reference.damage(),
            )
        {
            return TestResult::error(format!(
                "{damages:?}: scan {:?} {:?} {:?}, reference {:?} {:?} {:?}",
                scan.status(),
                scan.damage(),
                scan.head,
                reference.status(),
                reference.damage(),
                reference.head
            ));
        }
        TestResult::passed()
    }
    check(
        200,
        prop as fn(Vec<AnyEnvelope>, bool, Vec<(Damage, usize, usize)>) -> TestResult,
    );
}
