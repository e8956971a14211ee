//! Session benchmarks (`cargo bench --bench session`): a fresh `session launch --detached` until
//! it reports the job running, against the bare Slurm submission it wraps measured in the same
//! run, alternating, medians over several rounds:
//! - an unconfined target: `salloc --no-shell` (returns once granted, so the job runs);
//! - a confined target: `sbatch` of a script that sleeps, then `squeue -j J` until RUNNING.
//!
//! Every launch submits held and is released once a name probe shows no older job of the
//! target (the arbitration between state directories, issue 10 item 12), so it pays a name
//! probe, `sbatch --test-only`, the held submission, a second name probe, `scontrol release`
//! and then the controller's next scheduling pass for the released job, which the bare
//! submission does not wait for (salloc is granted inside its own RPC). That pass is most of
//! the difference, and nothing on the client side can shorten it. Each round ends with the job
//! cancelled, so the next launch finds its record's job gone and submits again.
//!
//! Needs the dev cluster (`tools/slurm-dev-cluster start`). `DISPATCH_BENCH_QUICK=1` does
//! fewer rounds.
//!
//! Measured 2026-12-01 (2 shared cores, load ~2, Slurm 22.05): unconfined 827 ms against 5 ms
//! for `salloc --no-shell` (182x: salloc is granted inside its own RPC, a released job waits
//! for the scheduling pass); confined 1.81 s against 0.95 s for sbatch + poll (1.9x: the bare
//! sbatch waits for a pass too). An unheld salloc arbitrated after the grant would be fast, but
//! in a blackout it would leave our job running beside an older one we cannot see; held, it
//! cannot run before the decision.

#[path = "timing/mod.rs"]
mod timing;
use timing::{median, timed};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const TARGETS: &str = r#"
job_name_prefix = "bs-"

[targets.alloc]
partition = "debug"
account = "dev"
time = "00:10:00"
mem = "100M"
confined = false

[targets.batch]
partition = "batch"
account = "dev"
time = "00:10:00"
mem = "100M"
confined = true
"#;

fn cancel_named(name: &str) {
    let _ = Command::new("scancel")
        .args(["--me", &format!("--name={name}")])
        .status();
    // Until squeue no longer lists it live, so the next round starts from nothing.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let out = Command::new("squeue")
            .args(["--me", "-h", "-o", "%i", &format!("--name={name}")])
            .output()
            .expect("squeue");
        if out.status.success() && out.stdout.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn launch(dir: &Path, target: &str) -> Duration {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .args([
            "--json",
            "session",
            "launch",
            "m",
            "-T",
            target,
            "--detached",
        ]);
    let (took, out) = timed(&mut c);
    assert!(out.contains("\"RUNNING\""), "{out}");
    cancel_named("bs-m");
    took
}

fn bare_salloc() -> Duration {
    let (took, _) = timed(Command::new("salloc").args([
        "--no-shell",
        "--job-name=bs-bare",
        "--partition=debug",
        "--account=dev",
        "--time=00:10:00",
        "--mem=100M",
    ]));
    cancel_named("bs-bare");
    took
}

fn bare_sbatch(dir: &Path) -> Duration {
    let t = Instant::now();
    let (_, out) = timed(
        Command::new("sbatch")
            .args([
                "--parsable",
                "--job-name=bs-bare",
                "--partition=batch",
                "--account=dev",
                "--time=00:10:00",
                "--mem=100M",
            ])
            .arg(format!("--output={}", dir.join("bare-%j.out").display()))
            .arg("--wrap=exec sleep 600"),
    );
    let job = out.trim().to_owned();
    loop {
        let state = Command::new("squeue")
            .args(["-h", "-o", "%T", "-j", &job])
            .output()
            .expect("squeue");
        if String::from_utf8_lossy(&state.stdout).trim() == "RUNNING" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "job {job} never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t.elapsed();
    cancel_named("bs-bare");
    took
}

fn main() {
    let rounds = if std::env::var_os("DISPATCH_BENCH_QUICK").is_some() {
        3
    } else {
        7
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), TARGETS).unwrap();
    for (target, what) in [("alloc", "salloc --no-shell"), ("batch", "sbatch + poll")] {
        let (mut ours, mut bare) = (Vec::new(), Vec::new());
        launch(dir.path(), target); // warm-up: the state directory and caches exist
        for _ in 0..rounds {
            ours.push(launch(dir.path(), target));
            bare.push(match target {
                "alloc" => bare_salloc(),
                _ => bare_sbatch(dir.path()),
            });
        }
        let (o, b) = (median(ours), median(bare));
        println!(
            "session launch -T {target} (until running): median {:.0} ms; bare {what}: {:.0} ms; \
             ratio {:.1}x ({rounds} rounds, alternating)",
            o.as_secs_f64() * 1e3,
            b.as_secs_f64() * 1e3,
            o.as_secs_f64() / b.as_secs_f64()
        );
    }
}
