//! `dispatch forget`: arguments and rendering.

use clap::Args;

use super::exit::Failure;
use super::output::emit;
use crate::event::session::SessionKey;
use crate::ops::context::Ctx;
use crate::ops::forget::{self, ForgetReport};
use crate::slurm::Scheduler;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["worker", "session"])))]
pub struct ForgetArgs {
    /// The worker (pool or `dispatch submit`), by name or submission id
    #[arg(value_parser = crate::names::arg::path_name("worker"))]
    pub worker: Option<String>,
    /// A session's mirror instead of a worker (with -T)
    #[arg(long, value_name = "MIRROR", requires = "target",
          value_parser = crate::names::arg::label("mirror"))]
    pub session: Option<String>,
    /// The session's target
    #[arg(short = 'T', long, value_name = "TARGET", requires = "session",
          value_parser = crate::names::arg::label("target"))]
    pub target: Option<String>,
    /// Why no proof can settle it (kept in the journal; `dispatch audit` shows it)
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

fn render(r: &ForgetReport) -> String {
    let what = match (&r.worker, &r.session) {
        (Some(w), _) => format!(
            "worker {w} (submission {}, was {})",
            r.submission_id.as_deref().unwrap_or("-"),
            r.state.as_deref().unwrap_or("-")
        ),
        (None, Some(s)) => format!("session {} on {}", s.mirror, s.target),
        (None, None) => "nothing".to_owned(),
    };
    let released = if r.worker.is_some() {
        "its budget is released"
    } else {
        "dispatch no longer tracks its job"
    };
    let mut s = format!(
        "forgot {what} at seq {}: {released} by your decision, not by proof; `dispatch audit` \
         lists it as an override",
        r.seq
    );
    if let Some(h) = &r.hint {
        s.push_str(&format!("\n{h}"));
    }
    s
}

pub fn run<S: Scheduler>(args: &ForgetArgs, ctx: &Ctx<S>, json: bool) -> Result<u8, Failure> {
    let report = match (&args.worker, &args.session, &args.target) {
        (Some(w), _, _) => forget::forget_worker(ctx, w, &args.reason)?,
        (None, Some(m), Some(t)) => {
            forget::forget_session(ctx, &SessionKey::new(m, t), &args.reason)?
        }
        _ => unreachable!("clap requires a worker, or --session with -T"),
    };
    emit(json, &report, || crate::outln!("{}", render(&report)))?;
    Ok(super::exit::OK)
}
