//! A continuation's copy of its predecessor's native state (`worker::resume::copy_state`: each
//! file hashed in the read that copies it and checked against the predecessor's listing)
//! against `cp -a` of the same files, in the same directory, alternating run by run. Target
//! (issue 37): within 1.5× `cp -a`.
//!
//! Three shapes: many tiny files (4 KiB), small files (64 KiB), a few large files (64 MiB).
//! The two copies alternate which goes first; both land on the same filesystem, and every copy
//! is kept until the end (about 4 GB in the full run, 0.3 GB quick). Wall times and CPU times
//! (the copy's thread; `cp`'s, from its rusage) are reported: on a shared machine the CPU
//! times are the steadier ratio.
//!
//! `cargo bench --bench resume` (`-- --quick` or `DISPATCH_BENCH_QUICK=1`: smaller, fewer runs;
//! `DISPATCH_BENCH_ONLY=large` one shape).

#[path = "timing/mod.rs"]
mod timing;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use dispatch::worker::{resume, settle};

/// A native state of `count` files of `size` bytes, in 16 directories when there are many.
fn make_state(dir: &Path, count: usize, size: usize) -> u64 {
    let chunk: Vec<u8> = (0..size.min(1 << 20))
        .map(|i| (i as u32 * 31 % 251) as u8)
        .collect();
    let mut bytes = 0u64;
    for i in 0..count {
        let sub = if count > 16 {
            dir.join(format!("d{:02}", i % 16))
        } else {
            dir.to_owned()
        };
        std::fs::create_dir_all(&sub).unwrap();
        let body: Vec<u8> = chunk
            .iter()
            .cycle()
            .take(size)
            .map(|b| b ^ i as u8)
            .collect();
        std::fs::write(sub.join(format!("f{i}")), &body).unwrap();
        bytes += body.len() as u64;
    }
    bytes
}

/// One shape of native state, copied `runs` times each way, alternating which goes first.
fn measure(scratch: &Path, what: &str, count: usize, size: usize, runs: usize) {
    let (state, evidence) = (scratch.join(what), scratch.join(format!("{what}-evidence")));
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&evidence).unwrap();
    let bytes = make_state(&state, count, size);
    let far = Instant::now() + Duration::from_secs(3600);
    let (hashed, _) = settle::hash_state(&state, &evidence, "*.jsonl", far);
    assert!(hashed.complete);
    let text = std::fs::read_to_string(evidence.join(settle::LISTING_FILE)).unwrap();
    let listing = resume::parse_listing(&text).unwrap();
    let (mut ours, mut cp) = (Vec::new(), Vec::new());
    let (mut ours_cpu, mut cp_cpu) = (Vec::new(), Vec::new());
    for run in 0..runs {
        // Nothing is deleted before the end: ext4 gives a new file an inode it has not freed in
        // the last minute, and after thousands of deletions that search dominated both copies
        // (perf: `recently_deleted`), swinging the ratio from 0.5x to 12x.
        let ours_to = scratch.join(format!("{what}-copy{run}"));
        let cp_to = scratch.join(format!("{what}-cp{run}"));
        let copy = || {
            std::fs::create_dir(&ours_to).unwrap();
            let (t, cpu) = (Instant::now(), thread_cpu());
            let (files, copied) = resume::copy_state(&state, &ours_to, &listing, far).unwrap();
            let took = (t.elapsed(), thread_cpu() - cpu);
            assert_eq!((files, copied), (listing.len() as u64, bytes));
            took
        };
        let cp_a = || {
            let cpu = children_cpu();
            let took = timing::run_ok(Command::new("cp").arg("-a").arg(&state).arg(&cp_to));
            (took, children_cpu() - cpu)
        };
        let (o, c) = if run % 2 == 0 {
            let o = copy();
            (o, cp_a())
        } else {
            let c = cp_a();
            (copy(), c)
        };
        ours.push(o.0);
        ours_cpu.push(o.1);
        cp.push(c.0);
        cp_cpu.push(c.1);
    }
    let mut ratios: Vec<f64> = ours
        .iter()
        .zip(&cp)
        .map(|(o, c)| o.as_secs_f64() / c.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let (o, c) = (timing::median(ours), timing::median(cp));
    let (oc, cc) = (timing::median(ours_cpu), timing::median(cp_cpu));
    println!(
        "native-state copy, {what}: {} files, {} MiB: {:.1} ms against cp -a {:.1} ms; \
         ratio median {:.2}x [{:.2}..{:.2}] over {runs} runs (target <= 1.5x); CPU time \
         {:.1} ms against {:.1} ms: {:.2}x",
        listing.len(),
        bytes >> 20,
        o.as_secs_f64() * 1e3,
        c.as_secs_f64() * 1e3,
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1],
        oc.as_secs_f64() * 1e3,
        cc.as_secs_f64() * 1e3,
        oc.as_secs_f64() / cc.as_secs_f64()
    );
}

/// This thread's CPU time (user and system): what the copy itself cost, whatever else the
/// machine's cores are doing (wall times on a shared machine swing by 2x from run to run).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The CPU time of this process's waited-for children (user and system): `cp`'s.
fn children_cpu() -> Duration {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var_os("DISPATCH_BENCH_QUICK").is_some();
    let only = std::env::var("DISPATCH_BENCH_ONLY").unwrap_or_default();
    let (scale, runs) = if quick { (1, 3) } else { (4, 5) };
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let shapes = [
        ("many tiny files", 1000 * scale, 4 << 10),
        ("small files", 500 * scale, 64 << 10),
        ("large files", scale, 64 << 20),
    ];
    for (what, count, size) in shapes {
        if only.is_empty() || what.contains(only.as_str()) {
            measure(scratch.path(), what, count, size, runs);
        }
    }
}
