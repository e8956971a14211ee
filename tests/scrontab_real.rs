//! Issue 38's last "done when" on the real 24.11 dev cluster: `reconcile` run from the user's
//! `scrontab`, and by nothing else, renews a pool. The test creates a pool with `--time 3
//! --renew-max 2`, puts an entry in its user's crontab (between two marker lines unique to the
//! run, so that exactly those lines are taken out afterwards, also on panic, and whatever the
//! crontab held before stays) that runs `dispatch --state-dir … --config … reconcile` every
//! minute with its own `PATH`, and never runs reconcile itself: it only reads `pool status`
//! until the pool is on its second allocation. Then: Slurm started the second no earlier than
//! the first ended (sacct); every renewal event of the journal was written by a process that a
//! run of the entry's Slurm job said it was (the entry prints its shell's pid and
//! `SLURM_JOB_ID`, then `exec`s dispatch under that pid), at a time sacct shows that run going;
//! `pool release` ends the second allocation with proof, and `audit` is ok.
//!
//! Only 24.11: Debian 12's Slurm 22.05 ships no `scrontab`. The test fails, saying so, when
//! the Slurm on `PATH` is another (tools/test runs it in the 24.11-only long shard).

mod real_cluster;
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use real_cluster::{
    assert_started_after_end, cancel_jobs_named, create_renewing_pool, dispatch_with_config, json,
    release_with_proof_then_audit, require_cluster,
};
use support::run_bounded;

const PREFIX: &str = "dtsc-";
/// The first allocation's 3 minutes, Slurm's kill of it, the next minute's run that adopts
/// the second, and a margin for a busy node.
const RENEWED_WITHIN: Duration = Duration::from_secs(480);

/// The user's crontab as `scrontab -l` shows it; `None` when there is none.
fn crontab() -> Option<String> {
    let out = Command::new("scrontab")
        .arg("-l")
        .output()
        .unwrap_or_else(|e| {
            panic!("no scrontab on PATH ({e}): the 24.11 client binaries must come first")
        });
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    if out.status.success() {
        return Some(stdout);
    }
    assert!(
        stdout.contains("no crontab for") || stderr.contains("no crontab for"),
        "scrontab -l failed (is ScronParameters=enable set?): {stdout}{stderr}"
    );
    None
}

/// Make `text` the user's crontab (none at all when it is blank); whether scrontab took it.
fn set_crontab(text: &str, file: &Path) -> bool {
    if text.trim().is_empty() {
        return run_bounded(Command::new("scrontab").arg("-r"), Duration::from_secs(30));
    }
    std::fs::write(file, text).unwrap();
    run_bounded(Command::new("scrontab").arg(file), Duration::from_secs(30))
}

/// Cancels the pool's allocations (and a successor pending) by name when dropped.
struct PoolJobs(String);

impl Drop for PoolJobs {
    fn drop(&mut self) {
        cancel_jobs_named(&self.0);
    }
}

/// The test's entry in the user's crontab. Dropped (also on panic): its lines are taken out of
/// whatever the crontab holds then, which cancels its Slurm job; then that job is cancelled by
/// name, in case scrontab did not answer.
struct ScronEntry {
    marker: String,
    job_name: String,
    file: PathBuf,
}

impl ScronEntry {
    fn install(marker: String, job_name: String, lines: &str, dir: &Path) -> Self {
        let entry = ScronEntry {
            file: dir.join("crontab"),
            marker,
            job_name,
        };
        let mut text = crontab().unwrap_or_default();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{}\n{lines}{}\n", entry.begin(), entry.end()));
        assert!(set_crontab(&text, &entry.file), "scrontab refused {text}");
        entry
    }

    fn begin(&self) -> String {
        format!("# {} begin", self.marker)
    }

    fn end(&self) -> String {
        format!("# {} end", self.marker)
    }

    /// The crontab without this entry's lines (those between its markers, whatever Slurm
    /// made of them, `#DISABLED:` included).
    fn remove(&self) -> bool {
        let Some(text) = crontab() else {
            return true;
        };
        let mut inside = false;
        let mut kept = String::new();
        for line in text.lines() {
            if line == self.begin() {
                inside = true;
            } else if line == self.end() {
                inside = false;
            } else if !inside {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        kept == text || set_crontab(&kept, &self.file)
    }

    /// The entry's Slurm job once slurmctld lists it.
    fn queued(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some((job, _)) = self.job() {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "no job for the entry {}",
                self.marker
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The entry's Slurm job and its state: pending between runs, one id for all of them.
    fn job(&self) -> Option<(u64, String)> {
        let out = Command::new("squeue")
            .args(["--me", "-h", "-o", "%A|%j|%T"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let mut f = l.split('|');
            let (id, name, state) = (f.next()?, f.next()?, f.next()?);
            if name != self.job_name {
                return None;
            }
            Some((id.parse().ok()?, state.to_owned()))
        })
    }
}

impl Drop for ScronEntry {
    fn drop(&mut self) {
        let removed = self.remove();
        if !removed {
            eprintln!(
                "could not take the test's entry out of the crontab: {}",
                self.marker
            );
        }
        cancel_jobs_named(&self.job_name);
    }
}

/// The directory of `cmd` on PATH.
fn dir_on_path(cmd: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|d| d.join(cmd).is_file())
        .unwrap_or_else(|| panic!("{cmd} is not on PATH"))
}

/// The entry: every minute (24.11 refuses `*/1`), a log line with the run's pid and job,
/// then dispatch `exec`'d under that pid with the Slurm client first on its own PATH.
fn entry_lines(job_name: &str, log: &Path, sd: &Path, config: &Path) -> String {
    let path = format!("{}:/usr/bin:/bin", dir_on_path("scontrol").display());
    format!(
        "#SCRON --job-name={job_name}\n#SCRON --time=00:05:00\n#SCRON --mem=200M\n\
         #SCRON --output={log}\n#SCRON --open-mode=append\n\
         * * * * * echo \"scron run pid=$$ job=$SLURM_JOB_ID\"; exec env PATH={path} \
         {dispatch} --state-dir {sd} --config {config} reconcile --json\n",
        log = log.display(),
        dispatch = env!("CARGO_BIN_EXE_dispatch"),
        sd = sd.display(),
        config = config.display(),
    )
}

/// `(pid, job)` of every run the entry's log shows.
fn runs_logged(log: &Path) -> BTreeSet<(u32, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("scron run pid=")?;
            let (pid, job) = rest.split_once(" job=")?;
            Some((pid.parse().ok()?, job.trim().parse().ok()?))
        })
        .collect()
}

/// The start and end, Unix seconds, of each finished run of the cron job `job` (`sacct -D`:
/// one record a run, `REQUEUED` for all but the last).
fn runs_in_sacct(job: u64) -> Vec<(i64, i64)> {
    let out = Command::new("sacct")
        .env("TZ", "UTC")
        .args([
            "-D",
            "-X",
            "-n",
            "-P",
            "-j",
            &job.to_string(),
            "-o",
            "Start,End",
        ])
        .output()
        .unwrap();
    let utc = |t: &str| {
        chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S")
            .ok()
            .map(|t| t.and_utc().timestamp())
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (s, e) = l.split_once('|')?;
            Some((utc(s)?, utc(e)?))
        })
        .collect()
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Take the entry out between two runs (its job pending, well before the next minute), so
/// that no run is cancelled in the middle of a round; then its job is gone.
fn remove_between_runs(entry: &ScronEntry) {
    let deadline = Instant::now() + Duration::from_secs(150);
    while Instant::now() < deadline {
        match entry.job() {
            Some((_, state)) if state == "PENDING" && now_s() % 60 < 45 => break,
            None => break,
            _ => std::thread::sleep(Duration::from_secs(1)),
        }
    }
    assert!(
        entry.remove(),
        "could not take the entry out of the crontab"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while entry.job().is_some() {
        assert!(
            Instant::now() < deadline,
            "the entry's job outlived the entry"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Every renewal event of `pool` was written by a run of the entry: a pid a run logged under
/// the entry's job, running `reconcile`, at a time sacct shows one of that job's runs going.
fn assert_written_by_scron(sd: &Path, config: &Path, pool: &str, job: u64, log: &Path) {
    let dump = dispatch_with_config(
        sd,
        config,
        &[
            "journal",
            "dump",
            "--json",
            "--pool",
            pool,
            "--kind",
            "PoolRenewalIntent",
        ]
        .into_iter()
        .chain(["--kind", "PoolRenewalJob", "--kind", "PoolRenewed"])
        .collect::<Vec<_>>(),
    );
    assert_eq!(dump.code, 0, "{}", dump.stderr);
    let events: Vec<serde_json::Value> = dump.stdout.lines().map(json).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"PoolRenewalIntent"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "PoolRenewed").count(),
        1,
        "{kinds:?}"
    );
    let runs = runs_logged(log);
    assert!(runs.iter().all(|(_, j)| *j == job), "{runs:?} (job {job})");
    let pids: BTreeSet<u32> = runs.iter().map(|(p, _)| *p).collect();
    // sacct may show the last run a moment after it ended.
    let deadline = Instant::now() + Duration::from_secs(60);
    for e in &events {
        let actor = &e["actor"];
        let pid = actor["pid"].as_u64().unwrap() as u32;
        assert!(
            pids.contains(&pid),
            "{e} not by a run of the entry: {pids:?}"
        );
        assert_ne!(pid, std::process::id());
        let command: Vec<&str> = actor["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        assert_eq!(command.last(), Some(&"--json"), "{e}");
        assert!(command.contains(&"reconcile"), "{e}");
        let at = chrono::DateTime::parse_from_rfc3339(e["time"].as_str().unwrap())
            .unwrap()
            .timestamp();
        loop {
            let runs = runs_in_sacct(job);
            if runs.iter().any(|(s, end)| *s <= at && at <= *end) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{e}: in no run of job {job}: {runs:?}"
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// The pool's status once it is on its second allocation; reconcile is the entry's alone.
fn wait_for_generation_2(sd: &Path, config: &Path, pool: &str, log: &Path) -> serde_json::Value {
    let deadline = Instant::now() + RENEWED_WITHIN;
    loop {
        let status = dispatch_with_config(sd, config, &["pool", "status", pool, "--json"]);
        assert_eq!(status.code, 0, "{}", status.stderr);
        let p = json(&status.stdout)["pools"][0].clone();
        if p["renewal"]["generation"] == 2 {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "not renewed within {RENEWED_WITHIN:?}: {p}\nthe entry's log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_secs(5));
    }
}

#[test]
fn reconcile_run_from_scrontab_alone_renews_a_pool() {
    let version = support::cluster_version();
    assert_eq!(
        version, "24.11",
        "scrontab_real needs the 24.11 dev cluster (Debian 12's Slurm 22.05 ships no \
         scrontab), not {version}: put /var/lib/dispatch-slurm-24.11/bin first on PATH"
    );
    let _cluster = require_cluster();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("job_name_prefix = \"{PREFIX}\"\n")).unwrap();
    let sd = dir.path().join("state");
    let log = dir.path().join("scron.log");
    let tag = format!("{}-{}", std::process::id(), now_s());
    let pool = format!("sc{}", std::process::id() % 100_000);
    let job_name = format!("{PREFIX}reconcile-{tag}");

    // Dropped after the entry: the driver goes first, then what it may have asked for.
    let _pool_jobs = PoolJobs(format!("{PREFIX}pool-{pool}-"));
    let first = create_renewing_pool(&sd, &config, &pool);
    let lines = entry_lines(&job_name, &log, &sd, &config);
    let marker = format!("dispatch test scrontab_real {tag}");
    let entry = ScronEntry::install(marker, job_name, &lines, dir.path());
    let cron_job = entry.queued();
    let p = wait_for_generation_2(&sd, &config, &pool, &log);
    let second = p["allocation"]["job_id"].as_u64().unwrap();
    assert_ne!(second, first, "{p}");
    remove_between_runs(&entry);

    // Slurm started the second no earlier than the first ended.
    assert_started_after_end(second, first);
    assert_written_by_scron(&sd, &config, &pool, cron_job, &log);
    release_with_proof_then_audit(&sd, &config, &pool, second);
}
