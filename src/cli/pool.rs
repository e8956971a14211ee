//! `dispatch pool …`: argument definitions and rendering.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::exit::{self, Failure};
use super::output::{emit, print_json};
use crate::ops::context::Ctx;
use crate::ops::pool as ops;
use crate::policy::pool::{Budgets, PUBLICATION_TIMEOUT_DEFAULT_S};
use crate::slurm::{JobId, MemoryMb, Scheduler};

/// Where a worker's command runs, said in `pool submit --help` and `submit --help`: a user's
/// `./run.sh` from the login node's directory is not there.
macro_rules! where_it_runs {
    () => {
        "The command runs on the node in the worker's private checkout, $DISPATCH_WORKSPACE (the \
         --source asset's pinned commit, or an empty directory without --source), not in the \
         directory you submit from: ./run.sh is run.sh of that repository. Give a script of \
         your own by its absolute path, on a file system the node sees."
    };
}
pub(super) use where_it_runs;

fn parse_job_id(s: &str) -> Result<JobId, String> {
    JobId::parse(s).map_err(|e| format!("{e}: a job id is a plain positive number such as 1234"))
}

fn parse_mem(s: &str) -> Result<MemoryMb, String> {
    let m = MemoryMb::parse_request(s).map_err(|e| e.to_string())?;
    if m.get() == 0 {
        return Err("memory must be at least 1M".to_owned());
    }
    Ok(m)
}

/// A Slurm time limit: finite and positive.
pub(super) fn parse_time(s: &str) -> Result<crate::slurm::SlurmDuration, String> {
    let d = crate::slurm::SlurmDuration::parse_request(s)
        .map_err(|e| format!("{e}: give a Slurm time such as 90, 1:30:00 or 1-00:00:00"))?;
    match d.as_secs() {
        Some(n) if n > 0 => Ok(d),
        _ => Err("the time limit must be a finite, positive duration".to_owned()),
    }
}

/// A parser of whole seconds in `lo..=hi`: ASCII digits only (no sign, unit or fraction), and
/// every refusal states the bounds.
fn whole_seconds(lo: u32, hi: u32) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync {
    move |s: &str| {
        let n = (!s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten();
        match n {
            Some(n) if (u64::from(lo)..=u64::from(hi)).contains(&n) => Ok(n as u32),
            _ => Err(format!(
                "must be whole seconds from {lo} to {hi}, not {s:?}"
            )),
        }
    }
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// CPUs reserved for the worker
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpus: u32,
    /// Memory reserved for the worker: whole MB (512) or a whole number with a unit K, M, G or
    /// T, optionally followed by B (512M, 512MB, 4G, 4GB, 1T)
    #[arg(long, value_parser = parse_mem)]
    pub mem: MemoryMb,
    /// Worker name (default: w-<8 hex digits of the submission id>)
    #[arg(long, value_parser = crate::names::arg::path_name("worker"))]
    pub name: Option<String>,
    /// Seconds the worker has to publish its workspace and evidence (1 to 300)
    #[arg(long, default_value_t = PUBLICATION_TIMEOUT_DEFAULT_S, allow_hyphen_values = true,
          value_parser = whole_seconds(1, 300))]
    pub publication_timeout: u32,
    /// Seconds kept for hashing and sealing the worker's native state after it stops
    #[arg(long, default_value_t = Budgets::DEFAULT_NATIVE_STATE_S, allow_hyphen_values = true,
          value_parser = whole_seconds(0, 3600))]
    pub native_state_budget: u32,
    /// Seconds kept for removing the worker's runtime, cache and checkout
    #[arg(long, default_value_t = Budgets::DEFAULT_CLEANUP_S, allow_hyphen_values = true,
          value_parser = whole_seconds(0, 3600))]
    pub cleanup_budget: u32,
    /// The payload's command and arguments, run in the worker's private checkout
    /// ($DISPATCH_WORKSPACE: --source's pinned commit, else an empty directory)
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl WorkerArgs {
    /// The worker as the ops take it. Publication, native state, cleanup and the payload's
    /// grace are separate budgets; together they are the early-shutdown window before the
    /// allocation's end.
    pub fn spec(&self, grace_s: u32, extras: &SubmitExtras) -> crate::ops::spec::WorkerSpec {
        crate::ops::spec::WorkerSpec {
            worker: self.name.clone(),
            cpus: self.cpus,
            mem: self.mem,
            budgets: Budgets {
                publication_timeout_s: self.publication_timeout,
                native_state_s: self.native_state_budget,
                cleanup_s: self.cleanup_budget,
                grace_s,
                min_run_s: Budgets::DEFAULT_MIN_RUN_S,
            },
            command: self.command.clone(),
            source: extras.source.clone(),
            image: extras.image.clone(),
            append_only_glob: extras.append_only_glob.clone(),
            trial: extras.trial.clone(),
        }
    }
}

/// What a worker is given on its node, and the trial it belongs to (`pool submit` and
/// `submit` alike).
#[derive(Debug, Args)]
pub struct SubmitExtras {
    /// Acceptance trial the worker joins (opened with `dispatch trial open`)
    #[arg(long, value_name = "TRIAL", value_parser = crate::names::arg::path_name("trial"))]
    pub trial: Option<String>,
    /// Source asset: the worker gets a private checkout of its pinned commit
    #[arg(long, value_name = "ASSET", value_parser = crate::names::arg::path_name("asset"))]
    pub source: Option<String>,
    /// Image asset: verified on the node and given to the payload as $DISPATCH_IMAGE
    #[arg(long, value_name = "ASSET", value_parser = crate::names::arg::path_name("asset"))]
    pub image: Option<String>,
    /// File names in the native-state directory that are append-only logs, checked to
    /// end on a record boundary (default: *.jsonl)
    #[arg(long, value_name = "GLOB")]
    pub append_only_glob: Option<String>,
}

/// Continuation of a worker past the end of its job or allocation (`pool submit` and `submit`
/// alike).
#[derive(Debug, Args)]
pub struct ContinueArgs {
    /// When the worker's run is proven over by a cause `--continue-on` names, with its state
    /// checkpointed (it created $DISPATCH_CHECKPOINT and exited 0) and published,
    /// `dispatch reconcile` starts a successor from that publication, at most N times in all
    #[arg(long = "continue", value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub continues: u32,
    /// The causes a continuation is for, comma-separated (default: all): `time-limit` (Slurm's
    /// TIMEOUT, or the early-shutdown deadline the supervisor signalled), `preempted` (Slurm's
    /// PREEMPTED), `node-failure` (Slurm's NODE_FAIL, or a node the pool lost; Slurm kills a
    /// failed node's steps without a SIGTERM, so such a run resumes from the newest checkpoint
    /// it published while it ran, $DISPATCH_CHECKPOINT_NOW, or is not continued), `lost` (the job or allocation ended otherwise while the worker ran:
    /// CANCELLED by another, BOOT_FAIL,
    /// DEADLINE, the pool's allocation over), `checkpoint` (the payload declared a checkpoint
    /// and exited 0 on its own: it asks for more)
    #[arg(long, value_name = "CAUSE[,CAUSE]", value_parser = parse_causes, requires = "continues")]
    pub continue_on: Option<String>,
    /// Continue from a crash-class state too (the payload was killed, or its state is not
    /// known to be whole); the successor's receipt says so
    #[arg(long, requires = "continues")]
    pub continue_crashed: bool,
}

fn parse_causes(s: &str) -> Result<String, String> {
    crate::policy::continuation::parse_causes(Some(s)).map(|_| s.to_owned())
}

impl ContinueArgs {
    /// What the receipt records, if continuation is asked.
    pub fn ask(&self) -> Option<crate::ops::spec::ContinueAsk> {
        let causes = crate::policy::continuation::parse_causes(self.continue_on.as_deref())
            .expect("checked by clap");
        (self.continues > 0).then_some(crate::ops::spec::ContinueAsk {
            continues: self.continues,
            causes,
            crashed: self.continue_crashed,
        })
    }
}

/// A Slurm node name: letters, digits, `.`, `_`, `-` (one node, not a host list).
fn parse_node(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !s.starts_with('-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{:?} is not one node name (letters, digits, '.', '_', '-'; a pool is one node)",
            crate::names::short(s)
        ))
    }
}

/// What `pool create` asks Slurm for.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The pool's name
    #[arg(value_parser = crate::names::arg::path_name("pool"))]
    pub pool: String,
    /// CPUs of the allocation on each node (the pool's capacity)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpus: u32,
    /// Memory of the allocation on each node: whole MB (512) or a whole number with a unit K,
    /// M, G or T, optionally followed by B (512M, 512MB, 4G, 4GB, 1T)
    #[arg(long, value_parser = parse_mem)]
    pub mem: MemoryMb,
    /// Nodes of the allocation. Over one node it is made with `--no-kill`: a failed node ends
    /// only the workers on it (proven over, their budget released, the node's capacity gone),
    /// and the others run on
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub nodes: u32,
    /// GPUs of the allocation on each node (`--gres=gpu:N`); workers reserve them with
    /// `pool submit --gpus`
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub gpus_per_node: u32,
    /// The allocation's time limit (Slurm syntax: MM, HH:MM:SS, D-HH:MM:SS)
    #[arg(long, value_parser = parse_time)]
    pub time: crate::slurm::SlurmDuration,
    /// Target from the config file (partition, account, QOS)
    #[arg(short = 'T', long, value_parser = crate::names::arg::label("target"),
          conflicts_with_all = ["partition", "account", "qos"])]
    pub target: Option<String>,
    /// Partition (instead of a target)
    #[arg(long, value_parser = crate::names::arg::label("partition"))]
    pub partition: Option<String>,
    /// Account (instead of a target)
    #[arg(long, value_parser = crate::names::arg::label("account"))]
    pub account: Option<String>,
    /// QOS (instead of a target)
    #[arg(long, value_parser = crate::names::arg::label("qos"))]
    pub qos: Option<String>,
    /// The node to allocate; Slurm's refusal (no such node) fails at once
    #[arg(long, value_name = "NODE", value_parser = parse_node)]
    pub nodelist: Option<String>,
    /// Seconds to wait for the allocation to be granted and run (salloc --immediate)
    #[arg(long, default_value_t = 600, value_parser = whole_seconds(1, 86_400))]
    pub wait: u32,
    /// Keep the pool across allocations until `pool release`: `dispatch reconcile` asks for
    /// the next allocation (the same request) 2 minutes before this one ends, or at once when
    /// it is proven over (time limit, preemption, all nodes lost), queued so that it cannot
    /// run beside this one (`--dependency=afterany`); it becomes the pool's once this one is
    /// proven over, and the workers that asked to be continued go on there
    #[arg(long)]
    pub renew: bool,
    /// Renew only while the allocation ends before TIME (RFC 3339, or Slurm's
    /// YYYY-MM-DDTHH:MM[:SS] in local time); implies --renew
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    pub renew_until: Option<crate::event::Micros>,
    /// At most N allocations in all, the first included (N >= 2); implies --renew
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=100_000))]
    pub renew_max: Option<u32>,
    /// Ask for the next allocation without the dependency on the current one (no gap in the
    /// queue, but Slurm may run both at once; never more than one next allocation at a time);
    /// implies --renew
    #[arg(long)]
    pub renew_overlap: bool,
}

impl CreateArgs {
    /// The renewal asked, if any of the `--renew*` flags was given.
    fn renewal(&self) -> Option<ops::RenewBounds> {
        let asked = self.renew
            || self.renew_until.is_some()
            || self.renew_max.is_some()
            || self.renew_overlap;
        asked.then_some(ops::RenewBounds {
            until: self.renew_until,
            max_allocations: self.renew_max,
            overlap: self.renew_overlap,
        })
    }
}

/// `--renew-until`: RFC 3339, or Slurm's `YYYY-MM-DDTHH:MM[:SS]` in local time.
fn parse_until(s: &str) -> Result<crate::event::Micros, String> {
    use chrono::TimeZone;
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(crate::event::Micros(t.timestamp_micros()));
    }
    ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())
        .and_then(|t| chrono::Local.from_local_datetime(&t).earliest())
        .map(|t| crate::event::Micros(t.timestamp_micros()))
        .ok_or_else(|| {
            format!(
                "{:?} is not a time (2026-12-31T18:00:00Z, or 2026-12-31T18:00 local)",
                crate::names::short(s)
            )
        })
}

/// What `pool submit` is asked.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The pool's name
    #[arg(value_parser = crate::names::arg::path_name("pool"))]
    pub pool: String,
    #[command(flatten)]
    pub worker: WorkerArgs,
    /// GPUs of its node the worker reserves (Slurm gives the step that many, `--gres=gpu:G`);
    /// without it the worker sees no GPU
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub gpus: u32,
    /// The node of the allocation to run on (default: the first node with room, in the
    /// allocation's order)
    #[arg(long, value_name = "NODE", value_parser = parse_node)]
    pub node: Option<String>,
    /// When a node failure ends the worker (its node left a `--no-kill` allocation),
    /// `dispatch reconcile` submits it again, at most N times, on another node; the new
    /// submission names the one it replaces
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=16))]
    pub resubmit_on_node_failure: u32,
    #[command(flatten)]
    pub continuation: ContinueArgs,
    /// Seconds between SIGTERM and SIGKILL when the worker must stop early
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=300))]
    pub grace: u32,
    #[command(flatten)]
    pub assets: SubmitExtras,
    /// When the pool has no room, wait for it (first come, first served among waiters),
    /// at most SECS seconds if given (exit 3 after them)
    #[arg(long, value_name = "SECS", num_args = 0..=1, require_equals = true,
          value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    pub wait: Option<Option<u64>>,
    /// Check everything a submit checks (Slurm asked, budget, lifetime, identity) and say
    /// what it would do; start nothing, journal nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create an allocation (salloc --no-shell) that dispatch owns, and attach it as a pool
    #[command(after_help = "Examples:\n  \
        dispatch pool create p --cpus 8 --mem 8G --time 1:00:00 -T savio-htc\n  \
        dispatch pool create p --cpus 4 --mem 4G --time 30:00 --partition debug --nodelist vm\n  \
        dispatch pool create p --nodes 3 --cpus 4 --mem 16G --gpus-per-node 2 --time 2:00:00\n  \
        dispatch pool create p --cpus 4 --mem 4G --time 72:00:00 --renew-max 3   # 3 allocations\n  \
        dispatch pool release p   # stops its workers and cancels the allocation")]
    Create(CreateArgs),
    /// Attach a running allocation you own as a pool (never creates or cancels it); its budget
    /// is per node: CPUs, memory and GPUs as `scontrol -d show job` shows them.
    /// The job's comment is marked with this state directory's journal, and an allocation
    /// another state directory holds is refused (exit 3, naming its journal and host)
    #[command(after_help = "Examples:\n  \
        salloc -N1 -c8 --mem=16G --no-shell   # prints the job id, say 4242\n  \
        dispatch pool attach p --job 4242\n  \
        dispatch pool attach p --job 4242 --steal 'login1 is gone for good'")]
    Attach {
        /// The pool's name
        #[arg(value_parser = crate::names::arg::path_name("pool"))]
        pool: String,
        /// The allocation's job id
        #[arg(long, value_parser = parse_job_id)]
        job: JobId,
        /// Attach it even though another state directory's mark names it, for this reason
        /// (recorded as an override; that pool's workers keep running, and its `pool release`
        /// of a created allocation still cancels it)
        #[arg(long, value_name = "REASON")]
        steal: Option<String>,
    },
    /// Start a worker as its own job step inside the pool's allocation
    #[command(after_help = concat!(where_it_runs!(), "\n\nExamples:\n  \
        dispatch pool submit p --cpus 2 --mem 4G --source src --name w1 -- ./run.sh\n  \
        dispatch pool submit p --cpus 2 --mem 4G --name w2 -- \"$HOME/jobs/run.sh\"\n  \
        dispatch pool submit p --cpus 1 --mem 2G --source src --image py311 --trial t1 -- make test\n  \
        dispatch pool submit p --cpus 4 --mem 16G --gpus 1 --source src --name train -- python train.py\n  \
        dispatch pool submit p --cpus 1 --mem 1G --node node2 --name probe -- hostname"))]
    Submit(SubmitArgs),
    /// Show pools, their allocations, reservations and workers (no Slurm call unless --refresh)
    #[command(after_help = "Examples:\n  \
        dispatch pool status\n  \
        dispatch pool status p --refresh --json\n  \
        dispatch pool status p --at 120\n  \
        dispatch pool status --refresh --watch 30")]
    Status {
        /// One pool (default: every pool)
        #[arg(value_parser = crate::names::arg::path_name("pool"))]
        pool: Option<String>,
        /// Reconcile with Slurm first
        #[arg(long)]
        refresh: bool,
        /// As it was after event SEQ, or at TIME (RFC 3339, or YYYY-MM-DD HH:MM[:SS] local),
        /// from the journal alone: no Slurm call, no worker journal read
        #[arg(long, value_name = "SEQ|TIME", conflicts_with_all = ["refresh", "watch"],
              value_parser = super::replay::at_arg)]
        at: Option<crate::state::replay::Cut>,
        /// Full submission ids and uncut cells (rows may pass 80 columns)
        #[arg(long)]
        wide: bool,
        /// Look again every SECS seconds (default 5; at least 5 with --refresh) until Ctrl-C:
        /// redrawn on a terminal, one JSON document per look with --json
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "5",
              value_parser = super::watch::parse_secs)]
        watch: Option<u64>,
    },
    /// Stop one worker's step; the allocation and every other worker keep running
    #[command(after_help = "Examples:\n  \
        dispatch pool stop-worker p w1\n  \
        dispatch pool stop-worker p w1 --grace 60")]
    StopWorker {
        /// The pool's name
        #[arg(value_parser = crate::names::arg::path_name("pool"))]
        pool: String,
        /// The worker's name in that pool
        #[arg(value_parser = crate::names::arg::path_name("worker"))]
        worker: String,
        /// Seconds the payload has between SIGTERM and SIGKILL (its supervisor kills it; the
        /// step is cancelled if it has not ended 10 s after that); default: the worker's own
        /// grace (`--grace` at submit, as its supervisor recorded it), 10 without that record
        #[arg(long, value_parser = clap::value_parser!(u64).range(0..=3600))]
        grace: Option<u64>,
    },
    /// End a pool dispatch created: stop every worker with proof, cancel the allocation, prove it gone
    #[command(after_help = "Examples:\n  \
        dispatch pool release p\n  \
        dispatch pool release p --grace 60 --json")]
    Release {
        /// The pool's name
        #[arg(value_parser = crate::names::arg::path_name("pool"))]
        pool: String,
        /// Seconds each worker's payload has between SIGTERM and SIGKILL (its step is cancelled
        /// if it has not ended 10 s after that); default: each worker's own grace (`--grace` at
        /// submit, as its supervisor recorded it), 10 without that record
        #[arg(long, value_parser = clap::value_parser!(u64).range(0..=3600))]
        grace: Option<u64>,
    },
    /// Forget a pool (refused while any worker holds budget; never cancels the allocation)
    #[command(after_help = "Examples:\n  \
        dispatch pool detach p")]
    Detach {
        /// The pool's name
        #[arg(value_parser = crate::names::arg::path_name("pool"))]
        pool: String,
    },
}

/// `pool submit --wait`'s progress on a terminal (stderr).
fn wait_progress(p: &ops::WaitProgress) {
    let (cpus, mem) = p.capacity;
    let standing = match (p.ahead, p.reserved) {
        (0, Some((rc, rm))) => format!("next in line; {rc}/{cpus} CPUs and {rm}/{mem} MB reserved"),
        (0, None) => "next in line".to_owned(),
        (n, _) => format!("{n} ahead in line"),
    };
    super::output::note(&format!(
        "waiting for room in pool {}: {standing} ({} s)",
        p.pool,
        p.waited.as_secs()
    ));
}

pub async fn run<S: Scheduler>(cmd: &PoolCommand, ctx: &Ctx<S>, json: bool) -> Result<u8, Failure> {
    match cmd {
        PoolCommand::Create(_) => {
            return Err(Failure::new(
                exit::FAILED,
                "pool create needs the config: run it through `dispatch pool create`".to_owned(),
            ))
        }
        PoolCommand::Release { pool, grace } => run_release(ctx, pool, *grace, json).await?,
        PoolCommand::Attach { pool, job, steal } => {
            run_attach(ctx, pool, *job, steal.as_deref(), json).await?
        }
        PoolCommand::Submit(args) => run_submit_command(args, ctx, json).await?,
        PoolCommand::Status {
            pool,
            refresh,
            at,
            wide,
            watch,
        } => {
            let args = super::pool_status::StatusArgs {
                pool: pool.as_deref(),
                refresh: *refresh,
                at: *at,
                wide: *wide,
                watch: *watch,
            };
            return super::pool_status::run(&args, ctx, json).await;
        }
        PoolCommand::StopWorker {
            pool,
            worker,
            grace,
        } => {
            let r = ops::stop_worker(ctx, pool, worker, grace.map(Duration::from_secs)).await?;
            print_stopped(&r, json)?;
        }
        PoolCommand::Detach { pool } => {
            let r = ops::detach(ctx, pool).await?;
            emit(json, &r, || {
                crate::outln!("pool {} detached; job {} is untouched", r.pool, r.job_id);
                for w in &r.warnings {
                    eprintln!("warning: {w}");
                }
            })?;
        }
    }
    Ok(exit::OK)
}

/// `dispatch pool submit`, or its dry run.
async fn run_submit_command<S: Scheduler>(
    args: &SubmitArgs,
    ctx: &Ctx<S>,
    json: bool,
) -> Result<(), Failure> {
    let SubmitArgs {
        pool,
        worker,
        gpus,
        node,
        resubmit_on_node_failure,
        continuation,
        grace,
        assets,
        wait,
        dry_run,
    } = args;
    let req = ops::SubmitRequest {
        pool: pool.clone(),
        spec: worker.spec(*grace, assets),
        gpus: *gpus,
        node: node.clone(),
        resubmits: *resubmit_on_node_failure,
        replaces: None,
        continuation: continuation.ask(),
        continues: None,
    };
    if *dry_run {
        run_pool_submit_dry_run(ctx, &req, wait.is_some(), json).await
    } else {
        run_pool_submit(ctx, &req, *wait, json).await
    }
}

/// `dispatch pool release`.
async fn run_release<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    grace: Option<u64>,
    json: bool,
) -> Result<(), Failure> {
    let note = |m: &str| super::output::note(m);
    let r = ops::release(ctx, pool, grace.map(Duration::from_secs), &note).await?;
    emit(json, &r, || {
        let gone = r.job_id.map_or_else(
            || "no allocation of it is left".to_owned(),
            |j| format!("allocation {j} gone"),
        );
        crate::outln!(
            "pool {} released: {gone} ({}); {} worker(s) released",
            r.pool,
            r.proof,
            r.workers.len()
        )
    })
}

/// `dispatch pool attach`.
async fn run_attach<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    job: JobId,
    steal: Option<&str>,
    json: bool,
) -> Result<(), Failure> {
    let r = ops::attach(ctx, pool, job, steal).await?;
    emit(json, &r, || {
        let a = &r.allocation;
        crate::outln!(
            "attached job {} on {} as pool {}: {} CPUs, {} MB, until {} ({}/{}/{})",
            a.job_id,
            a.node,
            r.pool,
            a.cpus,
            a.mem_mb,
            a.end_time,
            a.partition,
            a.account,
            a.qos
        );
    })
}

/// `dispatch pool submit --dry-run`.
async fn run_pool_submit_dry_run<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &ops::SubmitRequest,
    wait: bool,
    json: bool,
) -> Result<(), Failure> {
    let plan = ops::submit_dry_run(ctx, req, wait).await?;
    emit(json, &plan, || {
        crate::outln!(
            "would submit worker {} to pool {} as step {} of job {} on {}: {} CPU(s), {} MB, {} GPU(s), \
             room {} ({}/{} CPUs and {}/{} MB reserved), shutdown signalled at {}",
            plan.worker,
            plan.pool,
            plan.step_name,
            plan.job_id,
            plan.node.as_deref().unwrap_or("the first node with room"),
            plan.cpus,
            plan.mem_mb,
            plan.gpus,
            plan.room,
            plan.reserved_cpus,
            plan.capacity_cpus,
            plan.reserved_mem_mb,
            plan.capacity_mem_mb,
            plan.early_shutdown_at
        )
    })
}

/// `dispatch pool submit`, with `--wait [SECS]` as `wait` (`Some(None)`: no limit).
async fn run_pool_submit<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &ops::SubmitRequest,
    wait: Option<Option<u64>>,
    json: bool,
) -> Result<(), Failure> {
    let wait = wait.map(|limit| ops::Wait {
        limit: limit.map(Duration::from_secs),
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr())
            .then_some(wait_progress as fn(&ops::WaitProgress)),
    });
    let r = ops::submit_waiting(ctx, req, wait).await?;
    super::output::warn(&r.warnings);
    emit(json, &r, || {
        crate::outln!(
            "worker {} submitted to pool {} (submission {}): {}, step {}",
            r.worker,
            r.pool,
            r.submission_id,
            r.state.as_str(),
            r.step_id.as_deref().unwrap_or("not seen yet")
        )
    })
}

/// `dispatch pool create`: the placement comes from a config target or the flags.
pub async fn run_create<S: Scheduler>(
    args: &CreateArgs,
    ctx: &Ctx<S>,
    config: &crate::config::Config,
    config_path: &std::path::Path,
    json: bool,
) -> Result<u8, Failure> {
    let (partition, account, qos) = match &args.target {
        Some(name) => {
            let t = config
                .target(name, config_path)
                .map_err(|e| Failure::new(exit::USAGE, e.to_string()))?;
            (
                Some(t.partition.clone()),
                Some(t.account.clone()),
                t.qos.clone(),
            )
        }
        None => (
            args.partition.clone(),
            args.account.clone(),
            args.qos.clone(),
        ),
    };
    let req = ops::CreateRequest {
        pool: args.pool.clone(),
        job_name_prefix: config.job_name_prefix.clone(),
        cpus: args.cpus,
        mem: args.mem,
        time: args.time,
        partition,
        account,
        qos,
        nodelist: args.nodelist.clone(),
        nodes: args.nodes,
        gpus_per_node: args.gpus_per_node,
        wait: Duration::from_secs(u64::from(args.wait)),
        renew: args.renewal(),
    };
    let note = |m: &str| super::output::note(m);
    let r = ops::create(ctx, &req, &note).await?;
    emit(json, &r, || {
        let a = &r.allocation;
        crate::outln!(
            "{} job {} on {} as pool {}: {} CPUs, {} MB, until {} ({}/{}/{}); dispatch's to \
             cancel: `dispatch pool release {}`",
            r.action,
            a.job_id,
            a.node,
            r.pool,
            a.cpus,
            a.mem_mb,
            a.end_time,
            a.partition,
            a.account,
            a.qos,
            r.pool
        );
    })?;
    Ok(exit::OK)
}

fn print_stopped(r: &ops::StopReport, json: bool) -> Result<(), Failure> {
    if json {
        return print_json(r);
    }
    let what = if r.already_released {
        "was already released"
    } else {
        "stopped"
    };
    crate::outln!(
        "worker {} {what}: {}",
        r.worker,
        r.proof.as_deref().unwrap_or("not proven yet")
    );
    Ok(())
}
