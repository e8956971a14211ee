//! Issue 20: one state directory on a shared file system, used from two login nodes at once.
//! On Lustre `localflock`, NFS `local_lock` and FUSE, `flock` does not exclude across hosts,
//! so the journal's `LOCK` alone let two writers append the same seq (a fork: `journal verify`
//! corrupt, every later command exit 5).
//!
//! Two hosts on one machine are two bindfs mounts of one directory (`tests/two_mounts`):
//! coherent for data, `stat`, `rename` and `O_EXCL`, not for `flock`. Each host runs its
//! commands one after another with `--state-dir <its mount>/state` (the same directory), both
//! hosts at once, against one fake Slurm: the cluster's controller, which both login nodes ask.
//! Its scenario, use counts and call log are outside the mounts (on this machine's own disk,
//! where the fake's `flock` does exclude), so the two hosts see one controller whose answers
//! (a step listed once, then gone; a held job, then running, then cancelled) advance with the
//! calls of either host. Each host names its own trials, pools, workers and mirrors, so what
//! the two contend for is the journal (a session's token lock, `<state>/sessions/locks`, is a
//! `flock` too: two hosts launching one mirror at once is not tested here). A command that
//! exits 4 naming the lock is run again, as its message asks.
//!
//! The lock-holder tests are written against the planned interface of the fix: a writer holds
//! `journal/WRITER` (made with `O_CREAT|O_EXCL`, naming host, boot id, pid, process start time
//! and a heartbeat) while it writes; `DISPATCH_HOST_ID` replaces host name and boot id in that
//! record (so one machine can play two hosts); `DISPATCH_LOCK_LEASE_MS` shortens the lease.

mod fake_cli;
mod two_mounts;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use dispatch::slurm::request::{show_job_argv, steps_argv};
use dispatch::slurm::{JobId, JobName, JobQuery};
use serde_json::{json, Value};
use two_mounts::TwoMounts;

// The split of the 1,000 commands: per host, in cycles of commands that follow each other.
// Most are the quick trial writes (where appends overlap most); the Slurm kinds wait on the
// driver's polls (250 ms each) more than they write. Measured on 2 cores shared with other
// builds, with a lock that excludes across the mounts: about 120 s for the 1,000.
/// `trial open`, then `trial verdict … failed`.
const TRIAL_CYCLES: usize = 156;
/// `pool attach`, `pool submit`, `pool stop-worker`, `pool detach`: one allocation each.
const POOL_CYCLES: usize = 16;
/// `submit`: one sbatch job each.
const SUBMITS: usize = 64;
/// `session launch`, then `session release`: one mirror each.
const SESSION_CYCLES: usize = 30;
const PER_HOST: usize = 2 * TRIAL_CYCLES + 4 * POOL_CYCLES + SUBMITS + 2 * SESSION_CYCLES;
const _: () = assert!(2 * PER_HOST == 1000, "1,000 commands in all");

/// A bound on any one command: a writer that never gets the lock fails the test, not hangs it.
const COMMAND_BOUND: Duration = Duration::from_secs(120);
/// A bound on each host's loop: past it, its remaining commands are not run (and the test fails).
const LOOP_BOUND: Duration = Duration::from_secs(600);

/// The configuration both hosts read (from the shared home, through their own mount).
const CONFIG: &str = r#"
[targets.T]
partition = "debug"
account = "dev"
qos = "normal"
time = "01:00:00"
confined = true
"#;

// ---------------------------------------------------------------------------------------------
// The hosts and the controller they share.

/// One login node: its view of the shared directory, and the controller both ask.
struct Host {
    /// `a` or `b`: in names, so that each host's pools, workers, trials and mirrors are its own.
    name: &'static str,
    /// 0 or 1: in job ids.
    index: u32,
    view: PathBuf,
    slurm: PathBuf,
}

/// What a command did.
struct Ran {
    /// The exit code; -1 killed by a signal, -2 killed by this test after [`COMMAND_BOUND`].
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Host {
    fn pair(mounts: &TwoMounts) -> [Host; 2] {
        let slurm = mounts.outside.join("slurm");
        std::fs::create_dir_all(&slurm).unwrap();
        let home = mounts.back.join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("config.toml"), CONFIG).unwrap();
        let [m1, m2] = mounts.views();
        [("a", 0, m1), ("b", 1, m2)].map(|(name, index, view)| Host {
            name,
            index,
            view: view.to_owned(),
            slurm: slurm.clone(),
        })
    }

    fn state(&self) -> PathBuf {
        self.view.join("state")
    }

    fn writer_file(&self) -> PathBuf {
        self.state().join("journal/WRITER")
    }

    /// dispatch on this host: its `--state-dir` through its own mount, the fake Slurm first on
    /// PATH, nothing armed and the real host identity unless a test sets them.
    fn command(&self, args: &[&str]) -> Command {
        let home = self.view.join("home");
        let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
        c.arg("--state-dir")
            .arg(self.state())
            .arg("--config")
            .arg(home.join("config.toml"))
            .args(args)
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", fake_cli::fake_bin().display()),
            )
            .env("FAKE_SLURM_SCENARIO", self.slurm.join("scenario.json"))
            .env("FAKE_SLURM_STATE", self.slurm.join("counts.json"))
            .env("FAKE_SLURM_LOG", self.slurm.join("calls.jsonl"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("DISPATCH_SLURM_TIMEOUT", "20")
            .env_remove("DISPATCH_FAILPOINTS")
            .env_remove("DISPATCH_HOST_ID")
            .env_remove("DISPATCH_LOCK_LEASE_MS")
            .stdin(Stdio::null());
        c
    }

    /// The identity this host gives its lock record in the stress test: two hosts, not two
    /// processes of one (the planned `DISPATCH_HOST_ID`; ignored by a dispatch without it).
    fn host_id(&self) -> String {
        format!("two-hosts-{}", self.name)
    }

    fn run(&self, args: &[&str]) -> Ran {
        run_within(self.command(args), COMMAND_BOUND)
    }

    /// `journal verify --json` through this host's mount.
    fn verify(&self) -> Value {
        let r = self.run(&["--json", "journal", "verify"]);
        serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "journal verify through {}: not JSON ({e}): {} / {}",
                self.view.display(),
                r.stdout,
                r.stderr
            )
        })
    }

    /// `journal dump --json` through this host's mount.
    fn events(&self) -> Vec<Value> {
        let r = self.run(&["--json", "journal", "dump"]);
        assert_eq!(r.code, 0, "journal dump: {}", r.stderr);
        r.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Run `cmd` to its end, killing it after `bound`.
fn run_within(mut cmd: Command, bound: Duration) -> Ran {
    let started = Instant::now();
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start dispatch");
    finish_within(child, started, bound)
}

/// Wait for `child` (started at `started`, its stdout and stderr piped), killing it after
/// `bound`.
fn finish_within(mut child: Child, started: Instant, bound: Duration) -> Ran {
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().expect("stdout piped")));
    let err = read(Box::new(child.stderr.take().expect("stderr piped")));
    let deadline = started + bound;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code().unwrap_or(-1);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break -2;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    Ran {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        took,
    }
}

/// Exit 4 naming the lock: the journal's writer lock could not be had, nothing was written,
/// and the message asks to run the command again (docs/cli.md: 4 is "outcome unknown").
fn retryable(code: i32, stderr: &str) -> bool {
    code == 4
        && stderr
            .to_lowercase()
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| matches!(w, "lock" | "locked" | "writer"))
}

// ---------------------------------------------------------------------------------------------
// The workload and the controller's answers to it.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    TrialOpen,
    TrialVerdict,
    PoolAttach,
    PoolSubmit,
    PoolStopWorker,
    PoolDetach,
    Submit,
    SessionLaunch,
    SessionRelease,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::TrialOpen => "trial open",
            Kind::TrialVerdict => "trial verdict",
            Kind::PoolAttach => "pool attach",
            Kind::PoolSubmit => "pool submit",
            Kind::PoolStopWorker => "pool stop-worker",
            Kind::PoolDetach => "pool detach",
            Kind::Submit => "submit",
            Kind::SessionLaunch => "session launch",
            Kind::SessionRelease => "session release",
        }
    }
}

struct Step {
    kind: Kind,
    args: Vec<String>,
    /// The trial, pool or mirror the command names (for workers: found in its output).
    subject: String,
}

fn step(kind: Kind, subject: &str, args: &[&str]) -> Step {
    Step {
        kind,
        args: args.iter().map(|a| a.to_string()).collect(),
        subject: subject.to_owned(),
    }
}

fn pool_job(h: &Host, i: usize) -> u32 {
    10_000 + 1_000 * h.index + i as u32
}

fn submit_job(h: &Host, i: usize) -> u32 {
    20_000 + 1_000 * h.index + i as u32
}

fn session_job(h: &Host, i: usize) -> u32 {
    30_000 + 1_000 * h.index + i as u32
}

fn job_id(n: u32) -> JobId {
    JobId::new(n).unwrap()
}

/// The session's job name (the default `job_name_prefix`, `dispatch-`, + mirror).
fn session_name(h: &Host, i: usize) -> String {
    format!("dispatch-m-{}-{i}", h.name)
}

/// Host `h`'s commands, the kinds interleaved evenly, each cycle's commands in order.
fn plan(h: &Host) -> Vec<Step> {
    let n = h.name;
    let mut cycles: Vec<(f64, Vec<Step>)> = Vec::new();
    let mut add = |count: usize, make: &dyn Fn(usize) -> Vec<Step>| {
        for i in 0..count {
            cycles.push(((i as f64 + 0.5) / count as f64, make(i)));
        }
    };
    add(TRIAL_CYCLES, &|i| {
        let t = format!("t-{n}-{i}");
        vec![
            step(Kind::TrialOpen, &t, &["--json", "trial", "open", &t]),
            step(
                Kind::TrialVerdict,
                &t,
                &[
                    "--json",
                    "trial",
                    "verdict",
                    &t,
                    "failed",
                    "--reason",
                    "two hosts",
                ],
            ),
        ]
    });
    add(POOL_CYCLES, &|i| {
        let p = format!("p-{n}-{i}");
        let job = pool_job(h, i).to_string();
        vec![
            step(
                Kind::PoolAttach,
                &p,
                &["--json", "pool", "attach", &p, "--job", &job],
            ),
            step(
                Kind::PoolSubmit,
                &p,
                &[
                    "--json", "pool", "submit", &p, "--cpus", "1", "--mem", "100M", "--name", "w",
                    "--", "true",
                ],
            ),
            step(
                Kind::PoolStopWorker,
                &p,
                &["--json", "pool", "stop-worker", &p, "w", "--grace", "0"],
            ),
            step(Kind::PoolDetach, &p, &["--json", "pool", "detach", &p]),
        ]
    });
    add(SUBMITS, &|i| {
        let w = format!("s-{n}-{i}");
        vec![step(
            Kind::Submit,
            &w,
            &[
                "--json", "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", &w,
                "--", "true",
            ],
        )]
    });
    add(SESSION_CYCLES, &|i| {
        let m = format!("m-{n}-{i}");
        vec![
            step(
                Kind::SessionLaunch,
                &m,
                &["--json", "session", "launch", &m, "-T", "T", "--detached"],
            ),
            step(
                Kind::SessionRelease,
                &m,
                &["--json", "session", "release", &m, "-T", "T", "--yes"],
            ),
        ]
    });
    cycles.sort_by(|a, b| a.0.total_cmp(&b.0));
    cycles.into_iter().flat_map(|(_, s)| s).collect()
}

fn strs(v: Vec<std::ffi::OsString>) -> Vec<String> {
    v.into_iter().map(|s| s.into_string().unwrap()).collect()
}

/// A fixed start for every allocation: an attached allocation's incarnation must not drift.
fn started() -> chrono::DateTime<chrono::Local> {
    static BASE: std::sync::OnceLock<chrono::DateTime<chrono::Local>> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| chrono::Local::now() - chrono::Duration::seconds(60))
}

/// `scontrol --oneliner show job J`: a running 4-CPU, 4 GB allocation of root's, an hour left.
fn show_job(j: u32) -> String {
    show_job_ending(j, 3600)
}

/// [`show_job`] with `left` seconds left.
fn show_job_ending(j: u32, left: i64) -> String {
    let fmt = |t: chrono::DateTime<chrono::Local>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    format!(
        "JobId={j} JobName=alloc UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 Account=dev \
         QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 \
         ExitCode=0:0 RunTime=00:01:00 TimeLimit=01:00:00 TimeMin=N/A SubmitTime={s} EligibleTime={s} \
         AccrueTime=Unknown StartTime={s} EndTime={e} Deadline=N/A Partition=debug AllocNode:Sid=vm:1 \
         ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=4 NumTasks=1 \
         CPUs/Task=4 ReqB:S:C:T=0:0:*:* TRES=cpu=4,mem=4G,node=1,billing=4 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* \
         CoreSpec=* MinCPUsNode=4 MinMemoryNode=4G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 \
         OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/root Power=\n",
        s = fmt(started()),
        e = fmt(chrono::Local::now() + chrono::Duration::seconds(left)),
    )
}

/// One squeue job row in the driver's format.
fn job_row(id: u32, state: &str, node: &str, name: &str) -> String {
    format!(
        "{id}|{id}|{state}|debug|dev|normal|root|1|1|{node}|1:00:00|2:00:00|N/A|N/A|None|{name}\n"
    )
}

/// The controller's answers to both hosts' workloads (the two hosts never name the same
/// thing, so each answer sequence below is driven by one host's commands, in their order):
/// - an allocation per pool: `scontrol show job`; its step listed once (the submit's
///   discovery), then absent beside the job listed running (the stop's proof);
/// - a job id per `submit` worker, by its job name;
/// - per session: the name probe empty (nothing to adopt), then the held job (ours alone:
///   nobody raced us, so it is released), then empty (after the cancel; the user's listing
///   with another job of theirs vouches for it); the job running, then cancelled.
fn scenario(hosts: &[Host]) -> Value {
    let (mut scontrol, mut squeue, mut sbatch) = (Vec::new(), Vec::new(), Vec::new());
    for h in hosts {
        for i in 0..POOL_CYCLES {
            let j = pool_job(h, i);
            let steps = strs(steps_argv(job_id(j)));
            let step_row = format!(
                "{j}.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p-{}-{i}.w\n",
                h.name
            );
            scontrol.push(json!({"argv": strs(show_job_argv(job_id(j))), "stdout": show_job(j)}));
            squeue.push(json!({"argv": steps, "times": 1, "stdout": step_row}));
            squeue.push(json!({"argv": steps, "stdout": ""}));
            let listing = strs(JobQuery::ids(vec![job_id(j)]).argv().unwrap());
            squeue.push(json!({"argv": listing, "stdout": job_row(j, "RUNNING", "vm", "alloc")}));
        }
        for i in 0..SUBMITS {
            let name = format!("--job-name=dispatch-s-{}-{i}-[0-9a-f]{{8}}", h.name);
            sbatch.push(json!({"match": [name], "stdout": format!("{}\n", submit_job(h, i))}));
        }
        for i in 0..SESSION_CYCLES {
            let (k, name) = (session_job(h, i), session_name(h, i));
            // With no prefix configured, sucoder's name is asked for beside dispatch's own.
            let sucoders = name.replacen("dispatch-", "sucoder-", 1);
            let probe = strs(
                JobQuery::mine_named_any(vec![
                    JobName::new(name.clone()).unwrap(),
                    JobName::new(sucoders).unwrap(),
                ])
                .argv()
                .unwrap(),
            );
            let held = job_row(k, "PENDING", "", &name).replace("|None|", "|JobHeldUser|");
            squeue.push(json!({"argv": probe, "times": 1, "stdout": ""}));
            squeue.push(json!({"argv": probe, "times": 1, "stdout": held}));
            squeue.push(json!({"argv": probe, "stdout": ""}));
            let by_id = strs(JobQuery::ids(vec![job_id(k)]).argv().unwrap());
            squeue.push(
                json!({"argv": by_id, "times": 1, "stdout": job_row(k, "RUNNING", "n0007", &name)}),
            );
            squeue.push(json!({"argv": by_id, "stdout": job_row(k, "CANCELLED", "n0007", &name)}));
            sbatch
                .push(json!({"match": [format!("--job-name={name}")], "stdout": format!("{k}\n")}));
        }
    }
    // The user's own listing (`squeue --me --states=all`): another job of theirs.
    let others = job_row(777, "RUNNING", "n0001", "other");
    squeue.push(json!({"match": ["--me", "--states=all"], "stdout": others}));
    json!({
        "scontrol": scontrol,
        "squeue": squeue,
        "sbatch": sbatch,
        "srun": [{"stdout": ""}],
        "scancel": [{"stdout": ""}],
    })
}

// ---------------------------------------------------------------------------------------------
// Running it and judging the result.

struct Outcome {
    host: &'static str,
    kind: Kind,
    args: Vec<String>,
    subject: String,
    ran: Ran,
    /// When it started, from when both hosts started.
    at: Duration,
    /// Runs of this command: more than one when a retryable exit was retried.
    attempts: u32,
}

/// Run host `h`'s commands one after another, from when both hosts are ready. A retryable
/// exit is run again, as its message asks (at most 5 times).
fn run_host(h: &Host, steps: Vec<Step>, start: &Barrier) -> Vec<Outcome> {
    start.wait();
    let t0 = Instant::now();
    let mut out = Vec::with_capacity(steps.len());
    for s in steps {
        let at = t0.elapsed();
        if at > LOOP_BOUND {
            break;
        }
        let args: Vec<&str> = s.args.iter().map(String::as_str).collect();
        let mut attempts = 0;
        let ran = loop {
            attempts += 1;
            let mut c = h.command(&args);
            c.env("DISPATCH_HOST_ID", h.host_id());
            let ran = run_within(c, COMMAND_BOUND);
            if !retryable(ran.code, &ran.stderr) || attempts == 5 {
                break ran;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        out.push(Outcome {
            host: h.name,
            kind: s.kind,
            args: s.args,
            subject: s.subject,
            ran,
            at,
            attempts,
        });
    }
    out
}

/// Per kind: how many, their exit codes, mean and slowest time.
fn summary(outcomes: &[Outcome], wall: Duration) -> String {
    let mut by_kind: BTreeMap<Kind, Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        by_kind.entry(o.kind).or_default().push(o);
    }
    let mut s = format!(
        "{} commands in {:.1} s (both hosts at once)\n",
        outcomes.len(),
        wall.as_secs_f64()
    );
    for (kind, os) in by_kind {
        let mut codes: BTreeMap<i32, usize> = BTreeMap::new();
        for o in &os {
            *codes.entry(o.ran.code).or_default() += 1;
        }
        let ms: Vec<u128> = os.iter().map(|o| o.ran.took.as_millis()).collect();
        let retried: u32 = os.iter().map(|o| o.attempts - 1).sum();
        s += &format!(
            "  {:<17} {:>4}  exit codes {:?}  mean {:>5} ms  max {:>6} ms  retries {retried}\n",
            kind.name(),
            os.len(),
            codes,
            ms.iter().sum::<u128>() / ms.len() as u128,
            ms.iter().max().unwrap(),
        );
    }
    s
}

fn describe(o: &Outcome) -> String {
    format!(
        "host {} at {:.3} s: `dispatch {}` exit {} after {} ms ({} attempts): {}",
        o.host,
        o.at.as_secs_f64(),
        o.args.join(" "),
        o.ran.code,
        o.ran.took.as_millis(),
        o.attempts,
        o.ran.stderr.trim()
    )
}

/// What an event is about: a trial, pool, submission id or session mirror.
fn subject_of(kind: &str, event: &Value) -> Option<String> {
    let v = if kind.starts_with("Trial") {
        &event["trial"]
    } else if kind == "PoolAttached" || kind == "PoolDetached" {
        &event["pool"]
    } else if kind.starts_with("Worker") || kind.starts_with("Job") {
        &event["submission_id"]
    } else if kind.starts_with("Session") {
        &event["session"]["mirror"]
    } else {
        return None;
    };
    v.as_str().map(str::to_owned)
}

/// The events a command that exited 0 must have left, each once: (kind, subject).
fn expected(o: &Outcome) -> Result<Vec<(&'static str, String)>, String> {
    let out: Value = serde_json::from_str(o.ran.stdout.trim()).map_err(|e| {
        format!(
            "its output is not one JSON document ({e}): {:?}",
            o.ran.stdout
        )
    })?;
    let sid = || -> Result<String, String> {
        out["submission_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no submission_id in {out}"))
    };
    let subject = o.subject.clone();
    Ok(match o.kind {
        Kind::TrialOpen => vec![("TrialOpened", subject)],
        Kind::TrialVerdict => vec![("TrialJudged", subject)],
        Kind::PoolAttach => vec![("PoolAttached", subject)],
        Kind::PoolDetach => vec![("PoolDetached", subject)],
        Kind::PoolSubmit => {
            let s = sid()?;
            vec![
                ("WorkerSubmitIntent", s.clone()),
                ("WorkerLaunched", s.clone()),
                ("WorkerStepObserved", s),
            ]
        }
        Kind::PoolStopWorker => {
            let s = sid()?;
            vec![("WorkerStopIntent", s.clone()), ("WorkerTerminal", s)]
        }
        Kind::Submit => {
            let s = sid()?;
            vec![("JobSubmitIntent", s.clone()), ("JobSubmitted", s)]
        }
        Kind::SessionLaunch => vec![
            ("SessionLaunchIntent", subject.clone()),
            ("SessionJobSubmitted", subject),
        ],
        Kind::SessionRelease => vec![
            ("SessionCancelIntent", subject.clone()),
            ("SessionReleased", subject),
        ],
    })
}

/// Every write command kind, from both hosts at once through their own mounts, 1,000 commands:
/// the journal never forks (clean through either mount), no command that exited 0 lost an
/// event, and every command exited 0 or with a retryable lock exit (never 5, never a panic).
/// Fails on a dispatch whose journal lock is `flock` alone: the first two overlapping appends
/// get the same seq, and every command after that exits 5.
#[test]
fn writers_through_two_mounts_never_fork_the_journal_nor_lose_an_event() {
    let mounts = TwoMounts::new();
    let hosts = Host::pair(&mounts);
    let init = hosts[0].run(&["journal", "init"]);
    assert_eq!(init.code, 0, "journal init: {}", init.stderr);
    std::fs::write(
        hosts[0].slurm.join("scenario.json"),
        scenario(&hosts).to_string(),
    )
    .unwrap();

    let start = Barrier::new(2);
    let t0 = Instant::now();
    let outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let runs: Vec<_> = hosts
            .iter()
            .map(|h| {
                let (steps, start) = (plan(h), &start);
                s.spawn(move || run_host(h, steps, start))
            })
            .collect();
        runs.into_iter()
            .flat_map(|r| r.join().expect("a host's loop panicked"))
            .collect()
    });
    let wall = t0.elapsed();
    let summary = summary(&outcomes, wall);
    eprintln!("{summary}");
    assert_eq!(
        outcomes.len(),
        1000,
        "the hosts' loops ran out of their {LOOP_BOUND:?}:\n{summary}"
    );

    // 0 forks.
    let first_5 = outcomes
        .iter()
        .filter(|o| o.ran.code == 5)
        .min_by_key(|o| o.at)
        .map(describe)
        .unwrap_or_default();
    for h in &hosts {
        let v = h.verify();
        assert_eq!(
            v["status"],
            "clean",
            "the journal forked: `journal verify` through {} says {v}\n{summary}first exit 5: {first_5}",
            h.view.display()
        );
    }

    // Every command exited 0 or retryably.
    let bad: Vec<String> = outcomes
        .iter()
        .filter(|o| o.ran.code != 0 && !retryable(o.ran.code, &o.ran.stderr))
        .map(describe)
        .collect();
    assert!(
        bad.is_empty(),
        "{} commands exited neither 0 nor with a retryable lock exit:\n{}\n{summary}",
        bad.len(),
        bad[..bad.len().min(10)].join("\n")
    );

    // 0 lost events: each command that exited 0 left its events, each once.
    let events = hosts[1].events();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for e in &events {
        let kind = e["kind"].as_str().unwrap();
        if let Some(subject) = subject_of(kind, &e["event"]) {
            *seen.entry((kind.to_owned(), subject)).or_default() += 1;
        }
    }
    let mut lost = Vec::new();
    for o in outcomes.iter().filter(|o| o.ran.code == 0) {
        match expected(o) {
            Err(why) => lost.push(format!("{}: {why}", describe(o))),
            Ok(want) => {
                for (kind, subject) in want {
                    let n = seen
                        .get(&(kind.to_owned(), subject.clone()))
                        .copied()
                        .unwrap_or(0);
                    if n != 1 {
                        lost.push(format!("{kind} of {subject}: {n} times ({})", describe(o)));
                    }
                }
            }
        }
    }
    assert!(
        lost.is_empty(),
        "{} events lost or doubled (of {} in the journal):\n{}",
        lost.len(),
        events.len(),
        lost[..lost.len().min(10)].join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The lock holder's death (the planned interface: `journal/WRITER`, `DISPATCH_HOST_ID`,
// `DISPATCH_LOCK_LEASE_MS`).

/// A command started in the background; killed (SIGKILL, which also ends a stopped one) if
/// the test ends first, so no frozen process keeps a mount busy.
struct Background {
    child: Option<Child>,
    started: Instant,
}

impl Background {
    fn start(mut c: Command) -> Background {
        let started = Instant::now();
        let child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dispatch");
        Background {
            child: Some(child),
            started,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn signal(&self, sig: libc::c_int) {
        let r = unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill({}, {sig})", self.pid());
    }

    fn running(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_none()
    }

    fn finish(mut self, bound: Duration) -> Ran {
        let child = self.child.take().unwrap();
        finish_within(child, Instant::now(), bound)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `f` every 10 ms for up to `bound`; panics with `what` when it never answers.
fn wait_for<T>(what: &str, bound: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "{what} (waited {bound:?})");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `record` names `pid` (as a whole number, whatever the record's format).
fn names_pid(record: &str, pid: u32) -> bool {
    record
        .split(|c: char| !c.is_ascii_digit())
        .any(|w| w == pid.to_string())
}

/// The writer lock record of `pid`, once it is there: the lock is held.
fn holders_record(h: &Host, pid: u32) -> String {
    let path = h.writer_file();
    wait_for(
        &format!(
            "{} never named the holder (pid {pid}) while it held the journal: no cross-host \
             writer lock (issue 20)",
            path.display()
        ),
        Duration::from_secs(15),
        || {
            std::fs::read_to_string(&path)
                .ok()
                .filter(|r| names_pid(r, pid))
        },
    )
}

/// How often each trial was opened.
fn trials_opened(h: &Host) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for e in h.events() {
        if e["kind"] == "TrialOpened" {
            *n.entry(e["event"]["trial"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    n
}

fn assert_clean(hosts: &[Host]) {
    for h in hosts {
        let v = h.verify();
        assert_eq!(
            v["status"],
            "clean",
            "journal verify through {}: {v}",
            h.view.display()
        );
    }
}

fn fresh_journal(hosts: &[Host]) {
    let r = hosts[0].run(&["journal", "init"]);
    assert_eq!(r.code, 0, "journal init: {}", r.stderr);
    let r = hosts[0].run(&["trial", "open", "before"]);
    assert_eq!(r.code, 0, "trial open: {}", r.stderr);
}

/// (a) A holder on this host killed (SIGKILL) while it holds the journal: a command through
/// the other mount waits while the holder lives (it must not write beside it) and goes on at
/// once when it dies (its pid is gone on this host: no need to wait out the lease). The dead
/// holder wrote nothing; the journal is clean.
#[test]
fn a_holder_killed_on_this_host_is_taken_over_at_once_through_the_other_mount() {
    let mounts = TwoMounts::new();
    let hosts = Host::pair(&mounts);
    fresh_journal(&hosts);
    const LEASE_MS: u64 = 30_000;
    let same_host = |h: &Host, args: &[&str]| {
        let mut c = h.command(args);
        c.env("DISPATCH_LOCK_LEASE_MS", LEASE_MS.to_string());
        c
    };

    let mut holder = same_host(&hosts[0], &["trial", "open", "held"]);
    holder.env("DISPATCH_FAILPOINTS", "journal-before-write=sleep:60000");
    let holder = Background::start(holder);
    holders_record(&hosts[1], holder.pid());

    // While the holder lives, the other mount's command waits (or gives up retryably).
    let mut waiter = Background::start(same_host(&hosts[1], &["trial", "open", "waited"]));
    std::thread::sleep(Duration::from_millis(1_500));
    let waited = waiter.running();
    if !waited {
        let r = waiter.finish(Duration::from_secs(1));
        assert!(
            retryable(r.code, &r.stderr),
            "a command through the other mount ended (exit {}) while the holder held the journal: \
             it must wait or exit 4 naming the lock: {}",
            r.code,
            r.stderr
        );
        waiter = Background::start(same_host(&hosts[1], &["trial", "open", "waited"]));
    }

    holder.signal(libc::SIGKILL);
    let killed = Instant::now();
    // Reaped at once, as its shell would: a zombie's pid still answers kill(pid, 0).
    let dead = holder.finish(Duration::from_secs(10));
    assert_eq!(dead.code, -1, "the holder was not killed: {}", dead.stderr);
    let r = waiter.finish(Duration::from_secs(LEASE_MS / 1000 + 30));
    let after_kill = killed.elapsed();
    assert_eq!(r.code, 0, "the command after the kill: {}", r.stderr);
    assert!(
        after_kill < Duration::from_secs(5),
        "the command through the other mount took {after_kill:?} after the holder (same host) \
         was killed: it must take over at once, not after the {LEASE_MS} ms lease"
    );

    assert!(
        !hosts[1].writer_file().exists(),
        "journal/WRITER is left behind after the last command ended"
    );
    assert_clean(&hosts);
    let opened = trials_opened(&hosts[0]);
    assert_eq!(
        opened.get("held"),
        None,
        "the killed holder's event is there"
    );
    assert_eq!(opened.get("waited"), Some(&1), "{opened:?}");
}

/// (b) A holder on the other host frozen (SIGSTOP) past its lease: this host takes over after
/// the lease, not before (the other host's pid means nothing here); the frozen one, resumed,
/// must not write: it exits non-zero saying it lost the lock and wrote nothing.
#[test]
fn a_frozen_holder_on_another_host_loses_the_lock_after_its_lease_and_writes_nothing() {
    let mounts = TwoMounts::new();
    let hosts = Host::pair(&mounts);
    fresh_journal(&hosts);
    const LEASE_MS: u64 = 3_000;
    let on = |h: &Host, args: &[&str]| {
        let mut c = h.command(args);
        c.env("DISPATCH_HOST_ID", h.host_id())
            .env("DISPATCH_LOCK_LEASE_MS", LEASE_MS.to_string());
        c
    };
    let lease = Duration::from_millis(LEASE_MS);

    // Host a's writer pauses before its write (so that it is frozen holding the lock, before
    // writing) and is frozen as soon as its lock record is there.
    let mut frozen = on(&hosts[0], &["trial", "open", "frozen"]);
    frozen.env("DISPATCH_FAILPOINTS", "journal-before-write=sleep:6000");
    let frozen = Background::start(frozen);
    let record = holders_record(&hosts[1], frozen.pid());
    frozen.signal(libc::SIGSTOP);
    assert!(
        record.contains(&hosts[0].host_id()),
        "the lock record does not carry DISPATCH_HOST_ID {:?}: {record}",
        hosts[0].host_id()
    );

    // Host b waits out the lease of host a's lock, then writes.
    let r = run_within(
        on(&hosts[1], &["trial", "open", "taker"]),
        lease + Duration::from_secs(30),
    );
    let done = Instant::now();
    assert_eq!(
        r.code, 0,
        "host b's command with host a frozen: {}",
        r.stderr
    );
    assert!(
        done >= frozen.started + lease,
        "host b wrote {:?} after host a's holder started, within its {LEASE_MS} ms lease: a lock \
         of another host's may only be taken over once its heartbeat is older than the lease",
        done - frozen.started
    );
    assert!(
        r.took < lease + Duration::from_secs(15),
        "host b took {:?} to take over a lock whose lease is {LEASE_MS} ms",
        r.took
    );

    // Host a wakes up: it lost the lock and must not write.
    frozen.signal(libc::SIGCONT);
    let r = frozen.finish(Duration::from_secs(30));
    assert!(
        r.code > 0 && r.code != 5,
        "the resumed holder exited {} (it must fail, saying it lost the lock): {}",
        r.code,
        r.stderr
    );
    let said = r.stderr.to_lowercase();
    assert!(
        said.contains("lock") && said.contains("nothing"),
        "the resumed holder must say it lost the lock and that nothing was written: {}",
        r.stderr
    );
    assert_clean(&hosts);
    let opened = trials_opened(&hosts[1]);
    assert_eq!(
        opened.get("frozen"),
        None,
        "the holder that lost its lock wrote its event"
    );
    assert_eq!(opened.get("taker"), Some(&1), "{opened:?}");
    assert!(
        !hosts[0].writer_file().exists(),
        "journal/WRITER is left behind after the last command ended"
    );
}

/// `doctor --lock-probe` run through both mounts at once, as two hosts: each sees the other hold
/// the flock (FUSE keeps flock per mount) and be refused the exclusive create.
#[test]
fn doctor_lock_probe_through_two_mounts_sees_a_local_flock_and_a_shared_exclusive_create() {
    let mounts = TwoMounts::new();
    let probe = |i: usize, view: &std::path::Path| {
        let state = view.join("probe-state");
        std::fs::create_dir_all(&state).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
        c.arg("--state-dir")
            .arg(&state)
            .args(["--json", "doctor", "--lock-probe", "4"])
            .env("DISPATCH_HOST_ID", format!("probe-host-{i}"))
            .env("DISPATCH_SLURM_TIMEOUT", "5")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let [m1, m2] = mounts.views();
    let children = [probe(1, m1), probe(2, m2)];
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("doctor {i}: {e}: {}", String::from_utf8_lossy(&out.stderr))
        });
        let other = format!("probe-host-{}", 2 - i);
        let check = |prefix: &str| -> Value {
            doc["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == format!("lock probe: {prefix} with {other}"))
                .unwrap_or_else(|| panic!("doctor {i}: no {prefix} check with {other}: {doc}"))
                .clone()
        };
        assert_eq!(check("flock")["status"], "warn", "{doc}");
        assert_eq!(check("exclusive create")["status"], "ok", "{doc}");
    }
}

// ---------------------------------------------------------------------------------------------
// Issue 38 item 5: pool renewal from two login nodes at once.

/// The renewing pools of the renewal test: pool `rp{i}`'s first allocation is job `901 + i`,
/// its next one `911 + i`.
const RENEWING_POOLS: u32 = 3;

/// A squeue row of a renewing pool's job, with Slurm's reason.
fn renew_row(id: u32, state: &str, reason: &str) -> String {
    job_row(id, state, "vm", "alloc").replace("|None|", &format!("|{reason}|"))
}

/// The step of each renewing pool's worker `w` in the pool's allocation `base + i`.
fn worker_steps(base: u32) -> String {
    (0..RENEWING_POOLS)
        .map(|i| {
            format!(
                "{}.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|rp{i}.w\n",
                base + i
            )
        })
        .collect()
}

/// The controller as both hosts see it: every pool's first allocation in `first`, its next one
/// in `next` (`None`: not there), each answering every squeue (extra rows are ignored), the
/// workers' steps running in allocations `steps_in + i`; the next allocation's salloc, slow to
/// name its job (so that the two hosts' runs overlap), `scontrol show job` of each job, and an
/// srun (a worker's step) for each submission.
fn renewal_scenario(first: (&str, &str), next: Option<(&str, &str)>, steps_in: u32) -> Value {
    let (mut rows, mut salloc, mut scontrol) = (String::new(), Vec::new(), Vec::new());
    for i in 0..RENEWING_POOLS {
        let (old, new) = (901 + i, 911 + i);
        rows += &renew_row(old, first.0, first.1);
        if let Some((state, reason)) = next {
            rows += &renew_row(new, state, reason);
        }
        salloc.push(json!({
            "match": [format!("--job-name=dispatch-pool-rp{i}-[0-9a-f]{{8}}"),
                      format!("--dependency=afterany:{old}")],
            "delay": 2,
            "stderr": format!("salloc: Pending job allocation {new}\nsalloc: job {new} queued and waiting for resources\n"),
            "hang": 2,
        }));
        scontrol.push(json!({"match": [old.to_string()], "stdout": show_job_ending(old, 123)}));
        scontrol.push(json!({"match": [new.to_string()], "stdout": show_job_ending(new, 3595)}));
    }
    json!({
        "salloc": salloc,
        "squeue": [{"match": ["--steps"], "stdout": worker_steps(steps_in)}, {"stdout": rows}],
        "scontrol": scontrol,
        "srun": [{"hang": 2}],
    })
}

/// `reconcile --json` through both mounts at the same moment, each run again while it exits
/// retryably: both documents.
fn reconcile_on_both(hosts: &[Host; 2]) -> Vec<Value> {
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let runs: Vec<_> = hosts
            .iter()
            .map(|h| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let mut attempts = 0;
                    loop {
                        attempts += 1;
                        let mut c = h.command(&["--json", "reconcile"]);
                        c.env("DISPATCH_HOST_ID", h.host_id());
                        let r = run_within(c, COMMAND_BOUND);
                        if retryable(r.code, &r.stderr) && attempts < 5 {
                            continue;
                        }
                        assert_eq!(r.code, 0, "reconcile on host {}: {}", h.name, r.stderr);
                        break serde_json::from_str::<Value>(r.stdout.trim()).unwrap();
                    }
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// The `program` calls of the controller's log (both hosts').
fn controller_calls(h: &Host, program: &str) -> Vec<Vec<String>> {
    fake_cli::settle(&h.slurm.join("calls.jsonl"));
    std::fs::read_to_string(h.slurm.join("calls.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["cmd"] == program)
        .map(|v| {
            v["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned())
                .collect()
        })
        .collect()
}

/// Per renewing pool, how many events of `kind` name it.
fn per_pool(events: &[Value], kind: &str) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for e in events.iter().filter(|e| e["kind"] == kind) {
        *n.entry(e["event"]["pool"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    n
}

/// Renewing pool `rp{i}` made through host `h`, its allocation ending in 123 s, with worker
/// `w` (`--continue 1`) in it: the worker's submission id.
fn renewing_pool_with_a_worker(h: &Host, i: u32) -> uuid::Uuid {
    let (job, pool) = (901 + i, format!("rp{i}"));
    let create = json!({
        "salloc": [{"stderr": format!("salloc: Granted job allocation {job}\n")}],
        "squeue": [{"match": ["--steps"], "stdout": worker_steps(901)},
                   {"stdout": renew_row(job, "RUNNING", "None")}],
        "scontrol": [{"stdout": show_job_ending(job, 123)}],
        "srun": [{"hang": 2}],
    });
    std::fs::write(h.slurm.join("scenario.json"), create.to_string()).unwrap();
    let _ = std::fs::remove_file(h.slurm.join("counts.json"));
    let r = h.run(&[
        "pool", "create", &pool, "--cpus", "4", "--mem", "4G", "--time", "1:00:00", "--wait", "5",
        "--renew",
    ]);
    assert_eq!(r.code, 0, "pool create {pool}: {}", r.stderr);
    let submit = format!(
        "--json pool submit {pool} --cpus 1 --mem 100M --name w --continue 1 \
         --publication-timeout 5 -- true"
    );
    let r = h.run(&submit.split_whitespace().collect::<Vec<_>>());
    assert_eq!(r.code, 0, "pool submit {pool}: {}", r.stderr);
    let out: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    out["submission_id"].as_str().unwrap().parse().unwrap()
}

/// Two login nodes run `reconcile` at the same moment, round after round, on renewing pools
/// whose next allocation is due (the fake salloc slow to name its job, so that the runs
/// overlap): Slurm is asked for one successor per pool (the controller's call log), the
/// journal never forks, `audit` is ok, and once each last allocation is over and its successor
/// runs, it becomes the pool's exactly once and the pool's worker is continued there once
/// (one srun each).
#[test]
fn two_hosts_reconciling_renewing_pools_at_once_ask_one_successor_each_and_adopt_it_once() {
    let mounts = TwoMounts::new();
    let hosts = Host::pair(&mounts);
    let r = hosts[0].run(&["journal", "init"]);
    assert_eq!(r.code, 0, "journal init: {}", r.stderr);
    let workers: Vec<uuid::Uuid> = (0..RENEWING_POOLS)
        .map(|i| renewing_pool_with_a_worker(&hosts[i as usize % 2], i))
        .collect();
    fake_cli::settle(&hosts[0].slurm.join("calls.jsonl"));
    let _ = std::fs::remove_file(hosts[0].slurm.join("calls.jsonl"));
    // Within the lead time (2 minutes) of the allocations' end.
    std::thread::sleep(Duration::from_secs(4));

    let scenario = hosts[0].slurm.join("scenario.json");
    let pending = renewal_scenario(("RUNNING", "None"), Some(("PENDING", "Dependency")), 901);
    std::fs::write(&scenario, pending.to_string()).unwrap();
    let mut outcomes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut note = |docs: Vec<Value>| {
        for d in docs {
            for r in d["renewals"].as_array().into_iter().flatten() {
                let pool = r["pool"].as_str().unwrap().to_owned();
                outcomes
                    .entry(pool)
                    .or_default()
                    .push(r["outcome"].as_str().unwrap().to_owned());
            }
        }
    };
    for _ in 0..3 {
        note(reconcile_on_both(&hosts));
    }
    let asked = controller_calls(&hosts[0], "salloc");
    assert_eq!(
        asked.len(),
        RENEWING_POOLS as usize,
        "one salloc per pool: {asked:?}\n{outcomes:?}"
    );
    let events = hosts[1].events();
    let intents = per_pool(&events, "PoolRenewalIntent");
    assert!(intents.values().all(|n| *n == 1), "{intents:?}");
    assert_eq!(intents.len(), RENEWING_POOLS as usize, "{intents:?}");

    // The last allocations over (each worker checkpointed at the end), the next ones running:
    // each adopted once, each worker continued there once.
    for (i, id) in workers.iter().enumerate() {
        let pools = hosts[i % 2].state().join("pools");
        fake_cli::checkpointed_at_the_end(&pools, &format!("rp{i}"), "w", *id);
    }
    fake_cli::settle(&hosts[0].slurm.join("calls.jsonl"));
    let _ = std::fs::remove_file(hosts[0].slurm.join("calls.jsonl"));
    let running = renewal_scenario(("TIMEOUT", "None"), Some(("RUNNING", "None")), 911);
    std::fs::write(&scenario, running.to_string()).unwrap();
    for _ in 0..3 {
        note(reconcile_on_both(&hosts));
    }
    assert_eq!(controller_calls(&hosts[0], "salloc").len(), 0);
    let sruns = controller_calls(&hosts[0], "srun");
    assert_eq!(
        sruns.len(),
        workers.len(),
        "one continuation each: {sruns:?}"
    );
    assert_clean(&hosts);
    let events = hosts[0].events();
    let renewed = per_pool(&events, "PoolRenewed");
    assert_eq!(
        renewed.len(),
        RENEWING_POOLS as usize,
        "{renewed:?}\n{outcomes:?}"
    );
    assert!(
        renewed.values().all(|n| *n == 1),
        "{renewed:?}\n{outcomes:?}"
    );
    for (pool, seen) in &outcomes {
        let renewals = seen.iter().filter(|o| *o == "renewed").count();
        assert_eq!(renewals, 1, "{pool}: {seen:?}");
        assert_eq!(
            seen.iter().filter(|o| *o == "asked").count(),
            1,
            "{pool}: {seen:?}"
        );
    }
    let mut continued: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "WorkerContinued")
        .map(|e| e["event"]["predecessor"].as_str().unwrap().to_owned())
        .collect();
    continued.sort();
    let mut want: Vec<String> = workers.iter().map(|w| w.to_string()).collect();
    want.sort();
    assert_eq!(continued, want, "each worker continued once");
    for h in &hosts {
        let r = h.run(&["--json", "pool", "status"]);
        let doc: Value = serde_json::from_str(r.stdout.trim()).unwrap();
        for p in doc["pools"].as_array().unwrap() {
            let i = p["pool"].as_str().unwrap()[2..].parse::<u32>().unwrap();
            assert_eq!(p["allocation"]["job_id"], 911 + i, "{p}");
            assert_eq!(p["renewal"]["generation"], 2, "{p}");
            let second = p["workers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["generation"] == 2);
            let second = second.unwrap_or_else(|| panic!("no continued worker: {p}"));
            assert_eq!(second["step_id"], format!("{}.0", 911 + i), "{p}");
        }
        let r = h.run(&["--json", "audit"]);
        assert_eq!(
            r.code,
            0,
            "audit through {}: {}",
            h.view.display(),
            r.stdout
        );
    }
}
