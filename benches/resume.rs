//! A continuation's copy of its predecessor's native state (`worker::resume::copy_state`: each
//! file hashed in the read that copies it and checked against the predecessor's listing)
//! against `cp -a` of the same files, in the same directory, alternating run by run. Target
//! (issue 37): within 1.5× `cp -a`.
//!
//! `cargo bench --bench resume` (`-- --quick` or `DISPATCH_BENCH_QUICK=1`: smaller, fewer runs).

#[path = "timing/mod.rs"]
mod timing;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use dispatch::worker::{resume, settle};

/// A native state of `small` files of 64 KiB in 16 directories and `large` files of 64 MiB.
fn make_state(dir: &Path, small: usize, large: usize) -> u64 {
    let mut bytes = 0u64;
    let chunk: Vec<u8> = (0..64 << 10).map(|i: u32| (i * 31 % 251) as u8).collect();
    for i in 0..small {
        let sub = dir.join(format!("d{:02}", i % 16));
        std::fs::create_dir_all(&sub).unwrap();
        let mut body = chunk.clone();
        body[0] = i as u8;
        std::fs::write(sub.join(format!("f{i}")), &body).unwrap();
        bytes += body.len() as u64;
    }
    for i in 0..large {
        let body: Vec<u8> = chunk
            .iter()
            .cycle()
            .take(64 << 20)
            .map(|b| b ^ i as u8)
            .collect();
        std::fs::write(dir.join(format!("big{i}")), &body).unwrap();
        bytes += body.len() as u64;
    }
    bytes
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var_os("DISPATCH_BENCH_QUICK").is_some();
    let (small, large, runs) = if quick { (500, 1, 3) } else { (2000, 4, 7) };
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (state, evidence) = (
        scratch.path().join("state"),
        scratch.path().join("evidence"),
    );
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(&evidence).unwrap();
    let bytes = make_state(&state, small, large);
    let far = Instant::now() + Duration::from_secs(3600);
    let (hashed, _) = settle::hash_state(&state, &evidence, "*.jsonl", far);
    assert!(hashed.complete);
    let text = std::fs::read_to_string(evidence.join(settle::LISTING_FILE)).unwrap();
    let listing = resume::parse_listing(&text).unwrap();
    let (mut ours, mut cp) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let to = scratch.path().join(format!("copy{run}"));
        std::fs::create_dir(&to).unwrap();
        let t = Instant::now();
        let (files, copied) = resume::copy_state(&state, &to, &listing, far).unwrap();
        ours.push(t.elapsed());
        assert_eq!((files, copied), (listing.len() as u64, bytes));
        std::fs::remove_dir_all(&to).unwrap();
        let to = scratch.path().join(format!("cp{run}"));
        cp.push(timing::run_ok(
            Command::new("cp").arg("-a").arg(&state).arg(&to),
        ));
        std::fs::remove_dir_all(&to).unwrap();
    }
    let ratios: Vec<f64> = ours
        .iter()
        .zip(&cp)
        .map(|(o, c)| o.as_secs_f64() / c.as_secs_f64())
        .collect();
    let (o, c) = (timing::median(ours), timing::median(cp));
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "native-state copy of {} files, {} MiB ({}): {:.1} ms against cp -a {:.1} ms; \
         ratio median {:.2}x [{:.2}..{:.2}] (target <= 1.5x)",
        listing.len(),
        bytes >> 20,
        if quick { "quick" } else { "full" },
        o.as_secs_f64() * 1e3,
        c.as_secs_f64() * 1e3,
        sorted[sorted.len() / 2],
        sorted[0],
        sorted[sorted.len() - 1]
    );
}
