//! The only place that spells a dispatch command line: how a `Next` reads in a message.

use std::fmt;

use crate::next::{Arg, Next};
use crate::ops::session::shell_quote;

/// In a message, the command line stands in backquotes.
impl fmt::Display for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", Line(self))
    }
}

/// The command line alone, as a table cell shows it.
pub fn command_line(next: &Next<'_>) -> String {
    Line(next).to_string()
}

/// A line the user typed, with what it lacked put in (the words after `dispatch`), as a
/// message shows it: each word shell-quoted where the shell would read it otherwise.
pub fn typed_line(words: &[String]) -> String {
    let words: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
    format!("`dispatch {}`", words.join(" "))
}

struct Line<'a>(&'a Next<'a>);

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = |flag: bool, text: &'static str| if flag { text } else { "" };
        f.write_str("dispatch ")?;
        match *self.0 {
            Next::Reconcile => f.write_str("reconcile"),
            Next::Audit => f.write_str("audit"),
            Next::Jobs => f.write_str("jobs"),
            Next::Sessions => f.write_str("sessions"),
            Next::Trials => f.write_str("trials"),
            Next::Submit => f.write_str("submit"),
            Next::Stop(worker) => write!(f, "stop {worker}"),
            Next::Inspect(worker) => write!(f, "inspect {worker}"),
            Next::Forget(None) => f.write_str("forget"),
            Next::Forget(Some(worker)) => write!(f, "forget {worker} --reason TEXT"),
            Next::PoolStatus(pool) => write!(f, "pool status{}", Opt(" ", pool)),
            Next::PoolRefresh => f.write_str("pool status --refresh"),
            Next::PoolCreate(pool) => write!(f, "pool create {pool}"),
            Next::PoolRelease(pool) => write!(f, "pool release {pool}"),
            Next::PoolAttach { pool, job, steal } => {
                let (pool, job) = (pool.unwrap_or(&"…"), Opt(" --job ", job));
                write!(f, "pool attach {pool}{job}{}", on(steal, " --steal"))
            }
            Next::PoolDetach(pool) => write!(f, "pool detach {pool}"),
            Next::PoolStopWorker(worker) => write!(f, "pool stop-worker{}", Opt(" POOL ", worker)),
            Next::PoolStopWorkerIn { pool, worker } => {
                write!(f, "pool stop-worker {pool} {worker}")
            }
            Next::SessionLaunch => f.write_str("session launch"),
            Next::SessionRelease => f.write_str("session release"),
            Next::Session {
                verb,
                mirror,
                target,
            } => {
                let quoted = |name: Arg| shell_quote(&name.to_string());
                write!(f, "session {verb} {} -T {}", quoted(mirror), quoted(target))
            }
            Next::TrialOpen { trial, follows } => {
                let (trial, follows) = (trial.unwrap_or(&"NEW"), Opt(" --follows ", follows));
                write!(f, "trial open {trial}{follows}")
            }
            Next::AssetList => f.write_str("asset list"),
            Next::AssetVerify(name) => write!(f, "asset verify{}", Opt(" ", name)),
            Next::AssetAdd { kind, name } => write!(f, "asset add-{kind} {name} …"),
            Next::JournalInit(None) => f.write_str("journal init"),
            Next::JournalInit(Some(dir)) => write!(f, "--state-dir {dir} journal init"),
            Next::JournalVerify => f.write_str("journal verify"),
            Next::JournalRepair => f.write_str("journal repair"),
            Next::JournalDump(kind) => write!(f, "journal dump{}", Opt(" --kind ", kind)),
            Next::Doctor {
                on_node,
                lock_probe,
            } => {
                let (on_node, lock_probe) =
                    (on(on_node, " --on-node"), on(lock_probe, " --lock-probe"));
                write!(f, "doctor{on_node}{lock_probe}")
            }
        }
    }
}

/// `prefix` and the argument when there is one, nothing otherwise.
struct Opt<'a>(&'static str, Option<Arg<'a>>);

impl fmt::Display for Opt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(arg) => write!(f, "{}{arg}", self.0),
            None => Ok(()),
        }
    }
}
