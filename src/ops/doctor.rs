//! `dispatch doctor`: observe what a first run on a cluster depends on (Slurm's commands and
//! controller, accounting, the state directory and its file system, flock there, the config's
//! targets, and, with `--on-node`, what a compute node sees) and hand the observations to
//! `policy::doctor` for the verdicts. Reads only; the one write is the flock test's temporary
//! file in the state directory, removed at once.
//!
//! Slurm calls go through the runner, each bounded at 20 s: `squeue --version`, `scontrol
//! ping`, `squeue --me`, `sacct`, `scontrol show partition P`, `scontrol show assoc_mgr`. The
//! file system type comes from `statfs`. The flock test takes an exclusive lock on a temporary
//! file; a second exclusive lock through another open must be refused. `--on-node` runs one
//! `srun -N1 -n1 -c1 --time=1 --immediate=60` step (bounded at 120 s) running `dispatch doctor
//! --node-probe`, and merges the JSON checks it prints. Nothing is journaled: doctor decides
//! nothing and changes nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod lock_probe;

use crate::config::{self, Config};
use crate::policy::doctor::{
    self as verdict, Check, ConfigSeen, FlockSeen, Known, Probe, StateDirSeen, TargetSeen,
};
use crate::slurm::runner::Runner;
use crate::slurm::{CliConfig, SlurmCommand};
use crate::statedir::trust::Observed;

/// How long the on-node probe may take, queueing included (srun gives up after 60 s without
/// resources, `--immediate`).
pub const NODE_PROBE_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound of one query: a doctor that hangs on a dead controller would not help anyone.
const QUERY_TIMEOUT: Duration = Duration::from_secs(20);

/// What to check.
pub struct Options {
    pub state_dir: PathBuf,
    /// The config as found (`None`: none found, defaults), or why it did not load.
    pub config: Result<Option<(PathBuf, Config)>, String>,
    /// The target whose partition/account/QOS the on-node probe uses.
    pub target: Option<String>,
    pub on_node: bool,
    /// This binary, run on the node by the probe.
    pub exe: PathBuf,
    pub slurm: CliConfig,
    /// `--lock-probe`: take part in a probe with other hosts for this long, first.
    pub lock_probe: Option<Duration>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub ready: bool,
    pub checks: Vec<Check>,
}

impl Report {
    fn of(checks: Vec<Check>) -> Report {
        Report {
            ready: verdict::ready(&checks),
            checks,
        }
    }
}

async fn probe(runner: &Runner, command: SlurmCommand, args: &[&str], limit: Duration) -> Probe {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    match runner.run(command, &args, limit).await {
        Ok(out) => Probe::Exited {
            success: out.status.success(),
            stdout: out.stdout,
            stderr: out.stderr,
        },
        Err(e) => Probe::NoAnswer(e.to_string()),
    }
}

/// `git --version` from the PATH dispatch's Slurm calls use, bounded.
async fn git_version(search_path: Option<&std::ffi::OsStr>) -> Probe {
    let path = search_path
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("--version")
        .env("PATH", &path)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(QUERY_TIMEOUT, cmd.output()).await {
        Ok(Ok(out)) => Probe::Exited {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        Ok(Err(e)) => Probe::NoAnswer(format!("git: {e}")),
        Err(_) => Probe::NoAnswer(format!("git --version: no answer in {QUERY_TIMEOUT:?}")),
    }
}

pub fn state_dir_seen(path: &Path) -> StateDirSeen {
    match std::fs::metadata(path) {
        Ok(m) => {
            let observed = Observed::of(&m);
            let owner_name = crate::sys::user_name(observed.uid);
            StateDirSeen::Present(observed, owner_name)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => StateDirSeen::Missing,
        Err(e) => StateDirSeen::Unreadable(e.to_string()),
    }
}

fn statfs_magic(path: &Path) -> Result<u64, String> {
    crate::sys::statfs_type(path).map_err(|e| e.to_string())
}

/// Take an exclusive flock on a fresh file in the state directory, then try a second one through
/// another open of it: on a file system where flock works the second is refused.
pub fn flock_test(state_dir: &Path) -> FlockSeen {
    if !state_dir.is_dir() {
        return FlockSeen::NotTested;
    }
    let path = state_dir.join(format!(".doctor-flock-{}", std::process::id()));
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
    };
    let first = match open() {
        Ok(f) => f,
        Err(e) => return FlockSeen::Io(format!("{}: {e}", path.display())),
    };
    let seen = match first.try_lock() {
        Err(e) => FlockSeen::LockFailed(e.to_string()),
        Ok(()) => match open() {
            Err(e) => FlockSeen::Io(format!("{}: {e}", path.display())),
            Ok(second) => match second.try_lock() {
                Ok(()) => FlockSeen::NotExclusive,
                Err(std::fs::TryLockError::WouldBlock) => FlockSeen::Works,
                Err(e) => FlockSeen::LockFailed(e.to_string()),
            },
        },
    };
    let _ = std::fs::remove_file(&path);
    seen
}

/// The checks of the state directory that hold on any machine, this host or a node.
async fn local_checks(state_dir: &Path, search_path: Option<&std::ffi::OsStr>) -> Vec<Check> {
    let seen = state_dir_seen(state_dir);
    let mut checks = vec![verdict::state_dir(state_dir, &seen, crate::sys::geteuid())];
    if matches!(seen, StateDirSeen::Present(..)) {
        checks.push(verdict::file_system(statfs_magic(state_dir)));
    }
    checks.push(verdict::flock(&flock_test(state_dir)));
    checks.push(verdict::git(&git_version(search_path).await, false));
    checks
}

/// What `doctor --node-probe` reports from the compute node: the state directory seen there,
/// flock there, and git there.
pub async fn node_probe(state_dir: &Path, marker: Option<&str>) -> Report {
    let host = hostname();
    let mut checks = vec![Check {
        name: "node".to_owned(),
        status: verdict::Status::Ok,
        seen: format!(
            "ran on {host} as uid {}: {}",
            crate::sys::geteuid(),
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        ),
        todo: None,
    }];
    let seen = state_dir_seen(state_dir);
    let same = marker.map(|nonce| {
        std::fs::read_to_string(state_dir.join(marker_name(nonce))).is_ok_and(|t| t == nonce)
    });
    checks.push(verdict::node_state_dir(state_dir, &seen, same));
    if matches!(seen, StateDirSeen::Present(..)) {
        let mut lock = verdict::flock(&flock_test(state_dir));
        lock.name = "node: flock".to_owned();
        checks.push(lock);
    }
    checks.push(verdict::git(&git_version(None).await, true));
    Report::of(checks)
}

fn hostname() -> String {
    crate::sys::hostname().unwrap_or_else(|_| "?".to_owned())
}

/// Whether the association manager lists something (`scontrol show assoc_mgr`): the words it
/// prints for nothing are the same whether it does not exist or accounting is off.
fn listed(probe: &Probe, line_has: impl Fn(&str) -> bool, accounting_on: bool) -> Known {
    match probe {
        Probe::Exited {
            success: true,
            stdout,
            ..
        } => {
            if stdout.lines().any(|l| line_has(l.trim())) {
                Known::Yes
            } else if accounting_on {
                Known::No
            } else {
                Known::Unknown("accounting is off".to_owned())
            }
        }
        Probe::Exited { stderr, .. } => Known::Unknown(stderr.clone()),
        Probe::NoAnswer(why) => Known::Unknown(why.clone()),
    }
}

/// A partition, account or QOS name Slurm could hold: one word, not an option. Anything else is
/// never sent to Slurm (it would be read as a flag) and cannot exist.
fn single_word(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A target with a name that is not one word: none of its names is sent to Slurm; the ones
/// that are not one word cannot exist, the others are not checked.
fn unchecked_target(name: &str, target: &config::Target) -> TargetSeen {
    let known = |n: &str| {
        if single_word(n) {
            Known::Unknown("not checked".into())
        } else {
            Known::No
        }
    };
    TargetSeen {
        target: name.to_owned(),
        partition: target.partition.clone(),
        partition_known: known(&target.partition),
        account: target.account.clone(),
        account_known: known(&target.account),
        qos: target.qos.as_ref().map(|q| (q.clone(), known(q))),
    }
}

/// QOS `qos` (lowercased, as Slurm keeps it) and whether the association manager knows it.
async fn qos_known(runner: &Runner, qos: &str, accounting_on: bool) -> (String, Known) {
    let q = qos.to_ascii_lowercase();
    let answer = probe(
        runner,
        SlurmCommand::Scontrol,
        &["show", "assoc_mgr", &format!("qos={q}"), "flags=qos"],
        QUERY_TIMEOUT,
    )
    .await;
    let known = listed(
        &answer,
        |l| l.to_ascii_lowercase().starts_with(&format!("qos={q}(")),
        accounting_on,
    );
    (q, known)
}

async fn target_seen(
    runner: &Runner,
    name: &str,
    target: &config::Target,
    user: &str,
    accounting_on: bool,
) -> TargetSeen {
    if ![
        Some(&target.partition),
        Some(&target.account),
        target.qos.as_ref(),
    ]
    .into_iter()
    .flatten()
    .all(|n| single_word(n))
    {
        return unchecked_target(name, target);
    }
    let partition_known = match probe(
        runner,
        SlurmCommand::Scontrol,
        &["show", "partition", &target.partition],
        QUERY_TIMEOUT,
    )
    .await
    {
        Probe::Exited { success: true, .. } => Known::Yes,
        Probe::Exited { stderr, .. } if stderr.contains("not found") => Known::No,
        Probe::Exited { stderr, .. } => Known::Unknown(stderr),
        Probe::NoAnswer(why) => Known::Unknown(why),
    };
    let account = target.account.to_ascii_lowercase();
    let assoc = probe(
        runner,
        SlurmCommand::Scontrol,
        &[
            "show",
            "assoc_mgr",
            &format!("users={user}"),
            &format!("accounts={account}"),
            "flags=assoc",
        ],
        QUERY_TIMEOUT,
    )
    .await;
    let account_known = listed(
        &assoc,
        |l| {
            let l = l.to_ascii_lowercase();
            l.contains(&format!("account={account} "))
                && l.contains(&format!("username={}(", user.to_ascii_lowercase()))
        },
        accounting_on,
    );
    let qos = match &target.qos {
        Some(q) => Some(qos_known(runner, q, accounting_on).await),
        None => None,
    };
    TargetSeen {
        target: name.to_owned(),
        partition: target.partition.clone(),
        partition_known,
        account: target.account.clone(),
        account_known,
        qos,
    }
}

/// Every check, in the order a user would fix them.
/// `--lock-probe`: take part for `window` (off the runtime's threads: it sleeps) and judge.
async fn lock_probe_checks(state_dir: &Path, window: Option<Duration>) -> Vec<Check> {
    let Some(window) = window else {
        return Vec::new();
    };
    let dir = state_dir.to_owned();
    let seen = tokio::task::spawn_blocking(move || lock_probe::run(&dir, window)).await;
    match seen {
        Ok(Ok(seen)) => verdict::lock_probe::lock_probe(&seen),
        Ok(Err(e)) => vec![verdict::lock_probe::failed(&e)],
        Err(e) => vec![verdict::lock_probe::failed(&e.to_string())],
    }
}

pub async fn run(opts: &Options) -> Report {
    let runner = Runner::new(opts.slurm.clone());
    let limit = opts.slurm.timeout.min(QUERY_TIMEOUT);
    // The lock probe first, so that two hosts started together overlap whatever else takes.
    let mut checks = lock_probe_checks(&opts.state_dir, opts.lock_probe).await;

    let found: Vec<(&str, Option<String>)> = SlurmCommand::ALL
        .iter()
        .map(|c| {
            let at = runner.resolve(*c).ok().map(|p| p.display().to_string());
            (c.program(), at)
        })
        .collect();
    let squeue_found = found.iter().any(|(p, at)| *p == "squeue" && at.is_some());
    checks.push(verdict::slurm_commands(&found));

    let mut accounting_on = false;
    if squeue_found {
        checks.push(verdict::slurm_version(
            &probe(&runner, SlurmCommand::Squeue, &["--version"], limit).await,
        ));
        let ping = probe(&runner, SlurmCommand::Scontrol, &["ping"], limit).await;
        let queue = probe(
            &runner,
            SlurmCommand::Squeue,
            &["--me", "--noheader", "--format=%i"],
            limit,
        )
        .await;
        checks.push(verdict::controller(&ping, &queue));
        let sacct = probe(
            &runner,
            SlurmCommand::Sacct,
            &["-X", "-n", "-P", "-S", "now-1hours", "--format=JobID"],
            limit,
        )
        .await;
        accounting_on = matches!(sacct, Probe::Exited { success: true, .. });
        checks.push(verdict::accounting(&sacct));
    }

    checks.extend(local_checks(&opts.state_dir, opts.slurm.search_path.as_deref()).await);

    let config_seen = match &opts.config {
        Ok(None) => ConfigSeen::Defaults,
        Ok(Some((path, config))) => ConfigSeen::Loaded {
            path: path.display().to_string(),
            targets: config.targets.len(),
        },
        Err(e) => ConfigSeen::Broken(e.clone()),
    };
    checks.push(verdict::config(&config_seen));
    if let (Ok(Some((_, config))), true) = (&opts.config, squeue_found) {
        let user = crate::event::current_user();
        for (name, target) in &config.targets {
            let seen = target_seen(&runner, name, target, &user, accounting_on).await;
            checks.push(verdict::target(&seen, accounting_on));
        }
    }

    if opts.on_node {
        let (node_checks, node_saw_ours) = on_node(&runner, opts).await;
        if node_saw_ours {
            checks = checks
                .into_iter()
                .map(verdict::file_system_seen_from_node)
                .collect();
        }
        checks.extend(node_checks);
    }
    Report::of(checks)
}

/// The file the host leaves in its state directory for the node probe to find.
fn marker_name(nonce: &str) -> String {
    format!(".doctor-marker-{nonce}")
}

/// Write the marker, owner-only, never over an existing file; `None` when there is no state
/// directory to write it in (the probe then only says whether the path exists there).
fn write_marker(state_dir: &Path) -> Option<(PathBuf, String)> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if !state_dir.is_dir() {
        return None;
    }
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let path = state_dir.join(marker_name(&nonce));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .ok()?;
    f.write_all(nonce.as_bytes()).ok()?;
    f.sync_all().ok()?;
    Some((path, nonce))
}

/// One short job step that runs this binary's `doctor --node-probe` on a compute node; also
/// whether the node read the marker this host left (it sees this very directory).
async fn on_node(runner: &Runner, opts: &Options) -> (Vec<Check>, bool) {
    let mut args: Vec<OsString> = [
        "-N1",
        "-n1",
        "-c1",
        "--time=1",
        "--immediate=60",
        "--job-name=dispatch-doctor",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if let (Some(name), Ok(Some((_, config)))) = (&opts.target, &opts.config) {
        if let Some(t) = config.targets.get(name) {
            args.push(format!("--partition={}", t.partition).into());
            args.push(format!("--account={}", t.account).into());
            if let Some(q) = &t.qos {
                args.push(format!("--qos={q}").into());
            }
        }
    }
    args.push(opts.exe.clone().into_os_string());
    args.extend(["doctor", "--node-probe", "--json", "--state-dir"].map(OsString::from));
    args.push(opts.state_dir.clone().into_os_string());
    let marker = write_marker(&opts.state_dir);
    if let Some((_, nonce)) = &marker {
        args.push("--marker".into());
        args.push(nonce.into());
    }
    let exe = opts.exe.display().to_string();
    let answer = runner
        .run(SlurmCommand::Srun, &args, NODE_PROBE_TIMEOUT)
        .await;
    if let Some((path, _)) = &marker {
        let _ = std::fs::remove_file(path);
    }
    let out = match answer {
        Ok(out) => out,
        Err(e) => {
            let unreached = verdict::node_unreached(&Probe::NoAnswer(e.to_string()), &exe);
            return (vec![unreached], false);
        }
    };
    match serde_json::from_str::<Report>(out.stdout.trim()) {
        Ok(report) => {
            let saw_ours = marker.is_some()
                && report
                    .checks
                    .iter()
                    .any(|c| c.name == verdict::NODE_STATE_DIR && c.status == verdict::Status::Ok);
            (report.checks, saw_ours)
        }
        Err(_) => {
            let said = Probe::Exited {
                success: out.status.success(),
                stdout: out.stdout,
                stderr: out.stderr,
            };
            (vec![verdict::node_unreached(&said, &exe)], false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directory_seen_names_its_owner_as_the_user_database_does() {
        let d = tempfile::tempdir().unwrap();
        let me = crate::sys::geteuid();
        match state_dir_seen(d.path()) {
            StateDirSeen::Present(o, name) => {
                assert_eq!(o.uid, me);
                assert_eq!(name, crate::sys::user_name(me));
                assert!(name.is_some(), "uid {me} has a name here");
            }
            other => panic!("{other:?}"),
        }
    }
}
