//! `dispatch worker run`: the worker's life inside its step. Before the payload: receiving-node
//! checks of the worker's directories, every asset's SHA-256, the private checkout. The payload
//! runs in its own process group with the worker's directories in its environment; at the
//! early-shutdown deadline it gets SIGTERM, then SIGKILL after a grace. After it: writer
//! quiescence, native-state hashes, append-only log check, publication within its timeout,
//! step-scoped cleanup. Every step is recorded, before and after, in the worker's own journal
//! (`<evidence>/journal/`).

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::dirs::WorkerDirs;
use super::preflight::{self, LocalAsset, OwnerLock};
use super::{checkout, cleanup, publish, settle};
use crate::event::asset::{AssetKind, AssetRecord};
use crate::event::worker::*;
use crate::event::{Micros, WorkerEvent};
use crate::failpoint;
use crate::journal::{JournalError, Options};

// Everything the supervisor journals goes to the worker's own journal.
type Event = WorkerEvent;
type Writer = crate::journal::JournalWriter<WorkerEvent>;
use crate::policy::node::{self, AfterPayload, StateClass};
use crate::policy::pool::Budgets;

/// How often the supervisor looks at the clock and for a stop while the payload runs (its end
/// is seen at once: `wait_in_background`).
const POLL: Duration = Duration::from_millis(10);
/// Every how many polls the supervisor looks for a checkpoint the payload asked for (100 ms).
const CHECKPOINT_LOOK_EVERY: u64 = 10;
/// How long a failed payload exit waits for a stop signal sent in the same sweep.
const STOP_SWEEP_WAIT: Duration = Duration::from_millis(50);

#[derive(Clone, Debug)]
pub struct RunSpec {
    pub submission_id: Uuid,
    pub evidence_dir: PathBuf,
    pub deadline: Micros,
    pub grace_s: u32,
    pub command: Vec<String>,
    /// The worker's private directories and what to do around the payload. Without it the
    /// supervisor only runs and records the payload (evidence-only mode).
    pub node: Option<NodeSpec>,
}

#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub dirs: WorkerDirs,
    pub pool: Option<String>,
    pub worker: String,
    /// `<state-dir>/pools/<pool>/published` (or `<state-dir>/jobs/published`).
    pub publish_dir: Option<PathBuf>,
    pub assets: Vec<LocalAsset>,
    pub publication_timeout_s: u32,
    pub native_state_s: u32,
    pub cleanup_s: u32,
    pub append_only_glob: String,
    /// Set when this worker continues an earlier one (a generation after the first).
    pub resume: Option<Resume>,
}

/// What a continuation starts from: its predecessor's verified publication and native state.
/// The supervisor checks both before the payload starts and refuses (exit 3) if either does
/// not match what the predecessor recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    /// The predecessor's published directory (`<published>/<worker>-<submission>`): its
    /// manifest, `workspace.bundle`/`workspace.patch` (or workspace copy) and evidence. Given
    /// to the payload, read-only, as `DISPATCH_RESUME_FROM`.
    pub from: PathBuf,
    /// The predecessor's native-state directory, copied (not shared) into this worker's own
    /// and checked against the hashes the predecessor recorded.
    pub state_from: PathBuf,
    /// This worker's generation: 1 for a first run, its predecessor's plus one. Given to the
    /// payload as `DISPATCH_GENERATION`.
    pub generation: u32,
}

/// The argv that starts the supervisor around `command`: what `pool submit` runs in a step and
/// `dispatch submit` in a batch job. It carries everything the supervisor needs to know, so it
/// never reads the coordinator's journal.
pub fn command_line(
    exe: &Path,
    state_dir: &Path,
    sup: &SupervisorArgs<'_>,
    command: &[String],
) -> Vec<OsString> {
    let budgets = &sup.budgets;
    let mut flags: Vec<(&str, OsString)> = vec![
        ("--submission-id", sup.submission_id.to_string().into()),
        ("--worker-dir", sup.dirs.root.clone().into_os_string()),
        ("--worker", sup.worker.into()),
        ("--publish-dir", sup.publish_dir.as_os_str().to_owned()),
        ("--deadline", sup.deadline.clone().into()),
        ("--grace", budgets.grace_s.to_string().into()),
        (
            "--publication-timeout",
            budgets.publication_timeout_s.to_string().into(),
        ),
        (
            "--native-state-budget",
            budgets.native_state_s.to_string().into(),
        ),
        ("--cleanup-budget", budgets.cleanup_s.to_string().into()),
    ];
    flags.extend(sup.pool.map(|pool| ("--pool", pool.into())));
    if let Some(r) = sup.resume {
        flags.push(("--resume-from", r.from.clone().into_os_string()));
        flags.push(("--resume-state-from", r.state_from.clone().into_os_string()));
        flags.push(("--generation", r.generation.to_string().into()));
    }
    flags.extend(
        sup.append_only_glob
            .map(|glob| ("--append-only-glob", glob.into())),
    );
    for record in sup.assets {
        let local = LocalAsset {
            record: record.clone(),
            path: state_dir.join(&record.file),
        };
        let json = serde_json::to_string(&local).expect("an asset always serializes");
        flags.push(("--asset", json.into()));
    }
    let mut argv: Vec<OsString> = vec![exe.as_os_str().to_owned(), "worker".into(), "run".into()];
    for (flag, value) in flags {
        argv.extend([flag.into(), value]);
    }
    argv.push("--".into());
    argv.extend(command.iter().map(OsString::from));
    argv
}

/// What the supervisor is told about its worker.
pub struct SupervisorArgs<'a> {
    pub submission_id: Uuid,
    pub worker: &'a str,
    pub pool: Option<&'a str>,
    pub dirs: &'a WorkerDirs,
    pub publish_dir: &'a Path,
    /// `UNIX_SECONDS` or `+SECONDS`.
    pub deadline: String,
    pub budgets: Budgets,
    pub append_only_glob: Option<&'a str>,
    pub assets: &'a [AssetRecord],
    /// A continuation's predecessor (`None` for a first run).
    pub resume: Option<&'a Resume>,
}

pub fn journal_dir(evidence_dir: &Path) -> PathBuf {
    evidence_dir.join("journal")
}

/// Set by SIGTERM, SIGINT or SIGHUP (signal-hook's handler only stores to it, which is
/// async-signal-safe); the supervision loop polls it.
static STOP_REQUESTED: std::sync::LazyLock<std::sync::Arc<AtomicBool>> =
    std::sync::LazyLock::new(|| std::sync::Arc::new(AtomicBool::new(false)));

fn install_stop_handlers() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        if let Err(e) = signal_hook::flag::register(signal, std::sync::Arc::clone(&STOP_REQUESTED))
        {
            tracing::warn!(
                "cannot handle signal {signal}: {e}; it will end the supervisor at once"
            );
        }
    }
}

/// The CPUs this process may run on, as the kernel lists them.
pub fn cpu_set() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Cpus_allowed_list:")
                    .map(|v| v.trim().to_owned())
            })
        })
        .unwrap_or_default()
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn signal_group(pgid: u32, signal: libc::c_int) {
    let _ = crate::sys::signal_group(pgid, signal);
}

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("worker journal: {0}")]
    Journal(#[from] JournalError),
    #[error("no command to run")]
    NoCommand,
}

/// Why the payload was not started.
struct Refused {
    stage: &'static str,
    reason: String,
}

/// Everything before the payload, once the worker's root is claimed, recorded as it goes
/// (`started` in the plan's commit). Returns why the payload may not start, if so.
fn prepare(
    journal: &Writer,
    n: &NodeSpec,
    started: Event,
) -> Result<Option<Refused>, JournalError> {
    let plan = Event::SupervisorPlan(SupervisorPlan {
        pool: n.pool.clone(),
        worker: n.worker.clone(),
        dirs: ["checkout", "runtime", "cache", "state", "evidence"]
            .into_iter()
            .zip(n.dirs.all())
            .map(|(role, p)| NamedPath {
                role: role.to_owned(),
                path: p.display().to_string(),
            })
            .collect(),
        publish_dir: n.publish_dir.as_ref().map(|p| p.display().to_string()),
        assets: n.assets.iter().map(|a| a.record.clone()).collect(),
        publication_timeout_s: n.publication_timeout_s,
        native_state_s: n.native_state_s,
        cleanup_s: n.cleanup_s,
        append_only_glob: n.append_only_glob.clone(),
    });
    journal.append(vec![started, step_devices(), plan])?;
    let source = preflight::source_of(&n.assets);
    let checks = preflight::check_dirs(
        &n.worker,
        &n.dirs,
        n.publish_dir.as_deref(),
        source.map(|s| &s.record),
    );
    let refusal = checks
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{} ({}): {}", c.role, c.path, c.reason))
        .collect::<Vec<_>>()
        .join("; ");
    let ok = checks.ok;
    journal.append_one(Event::ReceivingChecks(checks))?;
    if !ok {
        return Ok(Some(Refused {
            stage: "directories",
            reason: refusal,
        }));
    }
    failpoint::hit("supervisor-before-asset-check");
    let mut bad = Vec::new();
    for a in &n.assets {
        let checked = preflight::check_asset(a);
        if !checked.ok {
            bad.push(format!("asset {}: {}", checked.name, checked.reason));
        }
        journal.append_one(Event::AssetChecked(checked))?;
    }
    if !bad.is_empty() {
        return Ok(Some(Refused {
            stage: "assets",
            reason: bad.join("; "),
        }));
    }
    if let Some(source) = source {
        failpoint::hit("supervisor-before-checkout");
        let deadline = Instant::now() + CHECKOUT_TIMEOUT;
        let (rec, verdict) = checkout::prepare(source, &n.dirs.checkout, deadline);
        journal.append_one(Event::CheckoutPrepared(rec))?;
        if let Err(reason) = verdict {
            return Ok(Some(Refused {
                stage: "checkout",
                reason,
            }));
        }
    }
    Ok(clear_checkpoint_marker(&n.dirs))
}

/// A budget of 0 (allowed on the command line: it narrows the early-shutdown window) still
/// gets this long: hashing and cleanup usually take well under it, and skipping them outright
/// would leave the state unrecorded and the directories behind.
const MIN_STEP_BUDGET_S: u32 = 1;

/// How long cloning and verifying the checkout may take.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(1800);

/// For a continuation, once everything else before the payload is done: take up the
/// predecessor's work and state (`resume::take_up`), recorded as `ResumedFrom`; returns why
/// the payload may not start, if so.
fn continue_predecessor(journal: &Writer, n: &NodeSpec) -> Result<Option<Refused>, JournalError> {
    let Some(resume) = &n.resume else {
        return Ok(None);
    };
    let source = preflight::source_of(&n.assets);
    let deadline = Instant::now() + CHECKOUT_TIMEOUT;
    match super::resume::take_up(resume, &n.dirs, source, deadline) {
        Ok(taken) => {
            journal.append_one(Event::ResumedFrom(taken))?;
            Ok(None)
        }
        Err(reason) => Ok(Some(Refused {
            stage: "resume",
            reason,
        })),
    }
}

/// The file a payload creates to declare a checkpoint (`DISPATCH_CHECKPOINT`), in its runtime
/// directory: its own, so nothing else makes it, and it does not exist when the payload starts
/// (`clear_checkpoint_marker`). docs/operations.md, "Checkpoints", is the contract.
pub fn checkpoint_marker(dirs: &WorkerDirs) -> PathBuf {
    dirs.runtime.join(CHECKPOINT_MARKER)
}

pub const CHECKPOINT_MARKER: &str = "checkpoint-declared";

/// Remove a marker (or a checkpoint request) an earlier run of this worker left, so only this
/// payload's counts.
fn clear_checkpoint_marker(dirs: &WorkerDirs) -> Option<Refused> {
    [
        checkpoint_marker(dirs),
        super::checkpoint::request_path(dirs),
    ]
    .into_iter()
    .find_map(|marker| match std::fs::remove_file(&marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Some(Refused {
            stage: "start",
            reason: format!(
                "cannot remove a stale checkpoint marker {}: {e}",
                marker.display()
            ),
        }),
        _ => None,
    })
}

/// The payload's declaration, if its marker exists now that it has ended.
fn checkpoint_declared(
    spec: &RunSpec,
    exited: &PayloadExited,
    killed_after_grace: bool,
) -> Option<CheckpointDeclared> {
    let marker = checkpoint_marker(&spec.node.as_ref()?.dirs);
    let m = marker.symlink_metadata().ok()?;
    let declared_at = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(Micros(0), |d| Micros(d.as_micros() as i64));
    Some(CheckpointDeclared {
        marker: marker.display().to_string(),
        declared_at,
        code: exited.code,
        signal: exited.signal,
        killed_after_grace,
    })
}

/// The environment the payload gets: the worker's own directories, and nothing of another's.
fn payload_env(cmd: &mut Command, spec: &RunSpec) {
    let resume = spec.node.as_ref().and_then(|n| n.resume.as_ref());
    cmd.env("DISPATCH_DEADLINE", spec.deadline.secs().to_string())
        .env("DISPATCH_EVIDENCE_DIR", &spec.evidence_dir)
        .env(
            "DISPATCH_GENERATION",
            resume.map_or(1, |r| r.generation).to_string(),
        );
    match resume {
        Some(r) => cmd.env("DISPATCH_RESUME_FROM", &r.from),
        None => cmd.env_remove("DISPATCH_RESUME_FROM"),
    };
    match &spec.node {
        Some(n) => {
            cmd.env("DISPATCH_WORKSPACE", &n.dirs.checkout)
                .env("DISPATCH_RUNTIME_DIR", &n.dirs.runtime)
                .env("DISPATCH_CACHE_DIR", &n.dirs.cache)
                .env("DISPATCH_STATE_DIR", &n.dirs.state)
                .env("DISPATCH_CHECKPOINT", checkpoint_marker(&n.dirs))
                .env(
                    "DISPATCH_CHECKPOINT_NOW",
                    super::checkpoint::request_path(&n.dirs),
                )
                .current_dir(&n.dirs.checkout);
            if let Some(image) = n.assets.iter().find(|a| a.record.kind == AssetKind::Image) {
                cmd.env("DISPATCH_IMAGE", &image.path);
            }
        }
        None => {
            // Inherited values would name some other worker's (or the coordinator's) places.
            for k in [
                "DISPATCH_WORKSPACE",
                "DISPATCH_RUNTIME_DIR",
                "DISPATCH_CACHE_DIR",
                "DISPATCH_STATE_DIR",
                "DISPATCH_IMAGE",
                "DISPATCH_CHECKPOINT",
                "DISPATCH_CHECKPOINT_NOW",
            ] {
                cmd.env_remove(k);
            }
        }
    }
}

/// Wait for `child` on a thread of its own: its end is known the moment it comes (a poll
/// of every [`POLL`] saw it 5 ms late on average, on every worker's way out), while the
/// supervision loop goes on looking at the clock and for a stop.
fn wait_in_background(
    mut child: std::process::Child,
    pgid: u32,
) -> std::sync::mpsc::Receiver<std::process::ExitStatus> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let status = child.wait().unwrap_or_else(|e| {
            eprintln!("dispatch worker: waiting for the payload failed: {e}; killing it");
            signal_group(pgid, libc::SIGKILL);
            child
                .wait()
                .unwrap_or_else(|_| std::process::ExitStatus::from_raw(libc::SIGKILL))
        });
        // The receiver lives until a status came.
        let _ = tx.send(status);
    });
    rx
}

/// Wait for the payload's end: its group is TERMed at the deadline (on a stop, which Slurm
/// sent to all of it already, its first process), and KILLed once the grace (the stop's own,
/// if it named one) has run out. Returns how it ended, whether a TERM was sent and whether
/// the KILL at the end of the grace was.
fn supervise(
    journal: &Writer,
    spec: &RunSpec,
    pgid: u32,
    exit: &std::sync::mpsc::Receiver<std::process::ExitStatus>,
) -> Result<(std::process::ExitStatus, bool, bool), JournalError> {
    let mut term_sent_at: Option<Micros> = None;
    let mut grace_s = spec.grace_s;
    let mut kill_sent = false;
    let mut checkpoints = super::checkpoint::Checkpoints::default();
    let mut polls = 0u64;
    loop {
        polls += 1;
        match exit.recv_timeout(POLL) {
            Ok(status) => return Ok((status, term_sent_at.is_some(), kill_sent)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                unreachable!("the waiting thread sends before it ends")
            }
        }
        let now = Micros::now();
        if term_sent_at.is_none() && polls.is_multiple_of(CHECKPOINT_LOOK_EVERY) {
            checkpoints.take_if_asked(journal, spec, now)?;
        }
        match term_sent_at {
            None => {
                let stop = STOP_REQUESTED.load(Ordering::SeqCst);
                if stop || now >= spec.deadline {
                    if stop {
                        // A stop names its own grace (`stop_request`); read before the TERM
                        // goes on, as the stop wrote it before sending it.
                        if let Some(asked) = spec
                            .node
                            .as_ref()
                            .and_then(|n| super::stop_request::read(&n.dirs.root))
                        {
                            grace_s = asked;
                        }
                    }
                    if stop {
                        // Slurm's TERM (a stop, a preemption) reached every process of the
                        // step, the payload's among them; ours goes to its first process
                        // only: a program its handler has started since (`git commit`)
                        // must not get a second one.
                        let _ = crate::sys::signal_process(pgid, libc::SIGTERM);
                    } else {
                        signal_group(pgid, libc::SIGTERM);
                    }
                    term_sent_at = Some(now);
                    let reason = if stop { "forwarded" } else { "deadline" };
                    journal.append_one(Event::ShutdownSignalled(ShutdownSignalled {
                        signal: "TERM".to_owned(),
                        reason: reason.to_owned(),
                    }))?;
                }
            }
            Some(at) if !kill_sent && now.0 - at.0 >= i64::from(grace_s) * 1_000_000 => {
                signal_group(pgid, libc::SIGKILL);
                kill_sent = true;
                journal.append_one(Event::ShutdownSignalled(ShutdownSignalled {
                    signal: "KILL".to_owned(),
                    reason: "grace".to_owned(),
                }))?;
            }
            Some(_) => {}
        }
    }
}

/// How the payload ended: its record, and what else decides its state's class.
struct Ended {
    exited: PayloadExited,
    killed_after_grace: bool,
    checkpoint: Option<CheckpointDeclared>,
}

/// Start the payload and supervise it to its end; returns how it ended.
fn run_payload(journal: &Writer, spec: &RunSpec) -> Result<Ended, JournalError> {
    failpoint::hit("supervisor-before-spawn");
    let mut cmd = Command::new(&spec.command[0]);
    cmd.args(&spec.command[1..])
        .process_group(0)
        .stdin(Stdio::null());
    payload_env(&mut cmd, spec);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dispatch worker: cannot start {:?}: {e}", spec.command[0]);
            let exited = PayloadExited {
                code: Some(127),
                signal: None,
                interrupted: false,
            };
            journal.append_one(Event::PayloadExited(exited.clone()))?;
            return Ok(Ended {
                exited,
                killed_after_grace: false,
                checkpoint: None,
            });
        }
    };
    let pgid = child.id();
    journal.append_one(Event::PayloadStarted(PayloadStarted { pid: pgid }))?;

    let exit = wait_in_background(child, pgid);
    let (status, term_sent, killed_after_grace) = supervise(journal, spec, pgid, &exit)?;
    // The step is the cleanup boundary: nothing the payload started outlives it.
    signal_group(pgid, libc::SIGKILL);
    // A stop may reach the payload without us: a Slurm whose process tracking signals every
    // process of the step (24.11 here, proctrack/linuxproc) TERMs the payload and this
    // supervisor at once, and a shell payload then exits with a code (its `sleep` died), not
    // by the signal. The stop we received says it was interrupted all the same. The signal to
    // us is sent in the same sweep, so a failed exit waits one poll for it before it counts
    // as the payload's own.
    if !term_sent && !status.success() && !STOP_REQUESTED.load(Ordering::SeqCst) {
        std::thread::sleep(STOP_SWEEP_WAIT);
    }
    let stopped = STOP_REQUESTED.load(Ordering::SeqCst);
    let exited = PayloadExited {
        code: status.code(),
        signal: status.signal(),
        interrupted: term_sent || status.signal().is_some() || stopped,
    };
    failpoint::hit("supervisor-before-exit-record");
    let checkpoint = checkpoint_declared(spec, &exited, killed_after_grace);
    let mut commit = vec![Event::PayloadExited(exited.clone())];
    commit.extend(checkpoint.clone().map(Event::CheckpointDeclared));
    journal.append(commit)?;
    Ok(Ended {
        exited,
        killed_after_grace,
        checkpoint,
    })
}

/// What [`settle_and_publish`] found.
struct Settled {
    /// The state class, and why.
    class: (StateClass, String),
    published: bool,
    /// Records not yet committed: they go in the commit of the cleanup's start. Each step
    /// after the payload commits what it saw with the start of the next (one fsync each, not
    /// two; ~3 ms apiece here, on every worker's way out).
    records: Vec<Event>,
}

/// After the payload: quiescence, hashes, logs, publication.
fn settle_and_publish(
    journal: &Writer,
    spec: &RunSpec,
    n: &NodeSpec,
    ended: Option<&Ended>,
) -> Result<Settled, JournalError> {
    let Some(ended) = ended else {
        return Ok(Settled {
            class: node::state_class(&AfterPayload::never_started()),
            published: false,
            records: Vec::new(),
        });
    };
    let started = Instant::now();
    let budget = Duration::from_secs(u64::from(n.native_state_s.max(MIN_STEP_BUDGET_S)));
    // Half the native-state budget for writers to let go; hashing may use the rest.
    let quiet = settle::wait_quiet(&n.dirs.payload_dirs(), started + budget / 2);
    let is_quiet = quiet.quiet;
    let (hashed, logs) = settle::hash_state(
        &n.dirs.state,
        &spec.evidence_dir,
        &n.append_only_glob,
        started + budget,
    );
    let class = node::state_class(&AfterPayload {
        payload_started: true,
        interrupted: ended.exited.interrupted,
        failed: node::Outcome::of(
            false,
            ended.exited.code,
            ended.exited.signal,
            ended.exited.interrupted,
        ) == node::Outcome::Failed,
        quiet: is_quiet,
        hashes_complete: hashed.complete,
        logs_whole: logs.ok,
        checkpoint_declared: ended.checkpoint.is_some(),
        exit_code: ended.exited.code,
        killed_after_grace: ended.killed_after_grace,
    });
    let records = vec![
        Event::WritersQuiesced(quiet),
        Event::NativeStateHashed(hashed),
        Event::AppendOnlyLogsChecked(logs),
    ];
    let Some(dir) = &n.publish_dir else {
        return Ok(Settled {
            class,
            published: false,
            records,
        });
    };
    let pinned = preflight::source_of(&n.assets).and_then(|s| s.record.commit.as_deref());
    let outcome = publish::publish(
        &publish::Request {
            worker: &n.worker,
            submission_id: spec.submission_id,
            dirs: &n.dirs,
            publish_dir: dir,
            pinned,
            timeout_s: n.publication_timeout_s,
            checkpoint: None,
        },
        journal,
        records,
    )?;
    Ok(Settled {
        class,
        published: outcome.published(),
        records: vec![outcome.event()],
    })
}

/// The GPUs Slurm gave this step, as its environment says them.
fn step_devices() -> Event {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    Event::StepDevices(StepDevices {
        step_gpus: var("SLURM_STEP_GPUS"),
        cuda_visible_devices: var("CUDA_VISIBLE_DEVICES"),
    })
}

/// The supervisor's first record: which step of which job runs what, where, until when.
fn supervisor_started(spec: &RunSpec) -> Event {
    Event::SupervisorStarted(SupervisorStarted {
        submission_id: spec.submission_id,
        job_id: env_number("SLURM_JOB_ID"),
        step_id: env_number("SLURM_STEP_ID"),
        node: std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| crate::event::current_host()),
        cpu_set: cpu_set(),
        deadline: spec.deadline,
        grace_s: spec.grace_s,
        command: spec.command.clone(),
    })
}

/// After the payload (or its refusal) on a node: settle and publish, commit that with the
/// cleanup's start, then clean up. Returns the cleanup's record, committed with the finish.
fn settle_and_clean(
    journal: &Writer,
    spec: &RunSpec,
    n: &NodeSpec,
    ended: Option<&Ended>,
) -> Result<Event, JournalError> {
    let settled = settle_and_publish(journal, spec, n, ended)?;
    let (class, reason) = settled.class;
    let plan = node::cleanup_plan(ended.is_some(), settled.published);
    let mut commit = settled.records;
    commit.push(Event::CleanupStarted(CleanupStarted {
        remove: plan.remove.iter().map(|r| r.to_string()).collect(),
        keep: plan.keep.iter().map(|r| r.to_string()).collect(),
    }));
    journal.append(commit)?;
    failpoint::hit("supervisor-before-cleanup");
    let deadline =
        Instant::now() + Duration::from_secs(u64::from(n.cleanup_s.max(MIN_STEP_BUDGET_S)));
    let done = cleanup::run(&n.dirs, &plan, class, &reason, deadline);
    Ok(Event::CleanedUp(done))
}

/// Record the supervisor's finish (after `last`, not yet committed) and return its exit code.
fn finish(
    journal: &Writer,
    exited: Option<&PayloadExited>,
    mut last: Vec<Event>,
) -> Result<i32, JournalError> {
    let code = node::exit_code(
        exited.is_none(),
        exited.and_then(|e| e.code),
        exited.and_then(|e| e.signal),
    );
    let outcome = match exited {
        None => node::Outcome::Refused,
        Some(e) => node::Outcome::of(false, e.code, e.signal, e.interrupted),
    };
    last.push(Event::SupervisorFinished(SupervisorFinished {
        outcome: outcome.as_str().to_owned(),
        exit_code: code,
    }));
    journal.append(last)?;
    Ok(code)
}

/// Run the worker to its end. Returns the exit code the supervisor should exit with: the
/// payload's code, 128 + the signal that ended it, or 3 when the payload was refused.
pub fn run(spec: &RunSpec) -> Result<i32, SupervisorError> {
    if spec.command.is_empty() {
        return Err(SupervisorError::NoCommand);
    }
    // The root first: the worker journal lives below it, and another worker's root must not
    // even get a journal written into it.
    let _lock: Option<OwnerLock> = match &spec.node {
        Some(n) => match preflight::claim(&n.worker, spec.submission_id, &n.dirs.root) {
            Ok(lock) => Some(lock),
            Err(reason) => {
                eprintln!(
                    "dispatch worker {}: refused before the payload started: {reason}",
                    n.worker
                );
                return Ok(node::exit_code(true, None, None));
            }
        },
        None => None,
    };
    let journal_dir = journal_dir(&spec.evidence_dir);
    let (job, restarts) = (
        env_number("SLURM_JOB_ID"),
        env_number("SLURM_RESTART_COUNT"),
    );
    if let Some(reason) = preflight::earlier_run(&journal_dir, job, restarts) {
        eprintln!("dispatch worker: refused before the payload started: {reason}");
        return Ok(node::exit_code(true, None, None));
    }
    let journal = Writer::open(&journal_dir, Options::default())?;
    install_stop_handlers();
    let started = supervisor_started(spec);
    let mut refused = match &spec.node {
        Some(n) => match prepare(&journal, n, started)? {
            None => continue_predecessor(&journal, n)?,
            refused => refused,
        },
        None => {
            journal.append(vec![started, step_devices()])?;
            None
        }
    };
    if refused.is_none()
        && (STOP_REQUESTED.load(Ordering::SeqCst) || Micros::now() >= spec.deadline)
    {
        refused = Some(Refused {
            stage: "start",
            reason: "a stop was requested, or the early-shutdown deadline passed, before the \
                     payload could start"
                .to_owned(),
        });
    }
    let ended = match refused {
        None => Some(run_payload(&journal, spec)?),
        Some(r) => {
            eprintln!(
                "dispatch worker: refused before the payload started ({}): {}",
                r.stage, r.reason
            );
            journal.append_one(Event::PreflightRefused(PreflightRefused {
                stage: r.stage.to_owned(),
                reason: r.reason,
            }))?;
            None
        }
    };
    // Committed with the supervisor's finish: the cleanup's outcome.
    let mut last = Vec::new();
    if let Some(n) = &spec.node {
        last.push(settle_and_clean(&journal, spec, n, ended.as_ref())?);
    }
    Ok(finish(&journal, ended.as_ref().map(|e| &e.exited), last)?)
}
