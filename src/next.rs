//! `Next`: a command the user is told to run, as a value. The layers below `cli` name the
//! command and its arguments; only `cli::hint` spells it as a command line, so a message
//! written anywhere reads the way the CLI is spelled.

use std::fmt::Display;

/// A value the user puts on the command line: a name, a job id, a path.
pub type Arg<'a> = &'a dyn Display;

/// An argument left out is shown as its placeholder (`POOL`, `NEW`, `TEXT`, `…`) where the
/// command needs one.
#[derive(Clone, Copy)]
pub enum Next<'a> {
    Reconcile,
    Audit,
    Jobs,
    Sessions,
    Trials,
    Submit,
    Stop(Arg<'a>),
    Inspect(Arg<'a>),
    /// With a worker, its `--reason` too.
    Forget(Option<Arg<'a>>),
    PoolStatus(Option<Arg<'a>>),
    /// `pool status --refresh`: every pool, after asking Slurm.
    PoolRefresh,
    PoolCreate(Arg<'a>),
    PoolRelease(Arg<'a>),
    PoolAttach {
        pool: Option<Arg<'a>>,
        job: Option<Arg<'a>>,
        steal: bool,
    },
    PoolDetach(Arg<'a>),
    /// With a worker, its pool too.
    PoolStopWorker(Option<Arg<'a>>),
    /// `pool stop-worker POOL WORKER` of one worker, its pool named.
    PoolStopWorkerIn {
        pool: Arg<'a>,
        worker: Arg<'a>,
    },
    SessionLaunch,
    SessionRelease,
    /// `session VERB MIRROR -T TARGET` of one session (the names shell-quoted).
    Session {
        verb: &'static str,
        mirror: Arg<'a>,
        target: Arg<'a>,
    },
    TrialOpen {
        trial: Option<Arg<'a>>,
        follows: Option<Arg<'a>>,
    },
    AssetList,
    AssetVerify(Option<Arg<'a>>),
    AssetAdd {
        kind: Arg<'a>,
        name: Arg<'a>,
    },
    /// Of the state directory given, if one is.
    JournalInit(Option<Arg<'a>>),
    JournalVerify,
    JournalRepair,
    /// Of the events of a kind, if one is given.
    JournalDump(Option<Arg<'a>>),
    Doctor {
        on_node: bool,
        lock_probe: bool,
    },
}
