//! Helpers shared by the journal test files: realistic events, journal construction, frame
//! boundaries and byte-level surgery on segment files.
#![allow(dead_code)]

use std::ops::Range;
use std::path::{Path, PathBuf};

use dispatch::event::pool::{
    Allocation, PoolAttached, WorkerExited, WorkerLaunched, WorkerStepObserved, WorkerStopIntent,
    WorkerSubmitIntent, WorkerTerminal,
};
use dispatch::event::{Event, Micros};
use dispatch::journal::frame;
use dispatch::journal::scan::{self, Scan};
use dispatch::journal::segment::{self, SEGMENT_HEADER_LEN};
use dispatch::journal::{Options, Writer};
use dispatch::slurm::JobId;
use uuid::Uuid;

pub fn allocation(job_id: u32) -> Allocation {
    Allocation {
        job_id: JobId::new(job_id).expect("a job id is not 0"),
        node: format!("n{:04}", job_id % 1000),
        user: "alice".to_owned(),
        start_time: Micros::from_secs(1_700_000_000),
        end_time: Micros::from_secs(1_700_086_400),
        cpus: 64,
        mem_mb: 256_000,
        partition: "savio4_htc".to_owned(),
        account: "co_test".to_owned(),
        qos: "normal".to_owned(),
    }
}

/// The `i`-th event of a plausible pool's life: an attach, then workers going through their
/// whole lifecycle, so replay exercises every reducer path rather than one kind over and over.
pub fn pool_event(i: usize) -> Event {
    if i == 0 {
        return Event::PoolAttached(PoolAttached {
            pool: "p".to_owned(),
            allocation: allocation(4242),
        });
    }
    let worker = (i - 1) / 6;
    let submission_id = Uuid::from_u128(0x5eed_0000 + worker as u128);
    match (i - 1) % 6 {
        0 => Event::WorkerSubmitIntent(WorkerSubmitIntent {
            pool: "p".to_owned(),
            worker: format!("w{worker}"),
            submission_id,
            cpus: 2,
            mem_mb: 4096,
            publication_timeout_s: 60,
            command: vec![
                "python".to_owned(),
                "train.py".to_owned(),
                format!("--shard={worker}"),
            ],
        }),
        1 => Event::WorkerLaunched(WorkerLaunched {
            submission_id,
            srun_pid: 1000 + worker as u32,
        }),
        2 => Event::WorkerStepObserved(WorkerStepObserved {
            submission_id,
            step_id: worker as u32,
        }),
        3 => Event::WorkerStopIntent(WorkerStopIntent {
            submission_id,
            grace_s: 30,
        }),
        4 => Event::WorkerExited(WorkerExited {
            submission_id,
            code: Some(0),
            signal: None,
        }),
        _ => Event::WorkerTerminal(WorkerTerminal {
            submission_id,
            proof: format!("sacct: step {worker} COMPLETED"),
        }),
    }
}

/// Create a journal in `dir` holding Genesis plus `n` pool events, appended one call each.
pub fn build_journal(dir: &Path, n: usize, opts: Options) {
    let w = Writer::open(dir, opts).expect("open a fresh journal");
    for i in 0..n {
        w.append_one(pool_event(i)).expect("append");
    }
}

pub fn segment_path(dir: &Path, no: u64) -> PathBuf {
    dir.join(segment::file_name(no))
}

/// Byte ranges of the frames of one segment file, which must be clean.
pub fn frames(bytes: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_LEN;
    while at < bytes.len() {
        let f = frame::decode(&bytes[at..]).expect("helper expects a clean segment");
        out.push(at..at + f.len());
        at += f.len();
    }
    out
}

pub fn scan_dir(dir: &Path) -> Scan {
    scan::scan(dir, None, |_| true).expect("scan reads the directory")
}

/// Every file in `dir` with its bytes, sorted by name: to prove nothing was touched.
pub fn snapshot_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let bytes = if e.file_type().unwrap().is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            (name, bytes)
        })
        .collect();
    out.sort();
    out
}

/// Write `files` (name, bytes) into a fresh directory under `root`.
pub fn materialize(root: &Path, name: &str, files: &[(String, Vec<u8>)]) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (n, b) in files {
        std::fs::write(dir.join(n), b).unwrap();
    }
    dir
}

/// Recompute the header CRC and frame CRC of the frame at `r` in place, leaving the chain.
pub fn reseal_crcs(bytes: &mut [u8], r: Range<usize>) {
    let f = &mut bytes[r.clone()];
    let hcrc = crc32fast::hash(&f[..20]);
    f[20..24].copy_from_slice(&hcrc.to_le_bytes());
    let n = f.len();
    let fcrc = crc32fast::hash(&f[..n - 4]);
    f[n - 4..].copy_from_slice(&fcrc.to_le_bytes());
}

/// Recompute chain values and CRCs of frames `from..` as a writer would have, so the only
/// thing wrong with the segment is whatever the caller changed inside those frames.
pub fn rechain_from(bytes: &mut [u8], fr: &[Range<usize>], from: usize) {
    let mut prev: frame::Chain = if from == 0 {
        let mut c = [0u8; 32];
        c.copy_from_slice(&bytes[48..80]);
        c
    } else {
        let p = &fr[from - 1];
        bytes[p.end - 36..p.end - 4].try_into().unwrap()
    };
    for r in &fr[from..] {
        let hcrc = crc32fast::hash(&bytes[r.start..r.start + 20]);
        bytes[r.start + 20..r.start + 24].copy_from_slice(&hcrc.to_le_bytes());
        let payload_end = r.end - 36;
        let chain = frame::next_chain(
            &prev,
            &bytes[r.start..r.start + 20],
            &bytes[r.start + frame::HEADER_LEN..payload_end],
        );
        bytes[payload_end..payload_end + 32].copy_from_slice(&chain);
        reseal_crcs(bytes, r.clone());
        prev = chain;
    }
}
