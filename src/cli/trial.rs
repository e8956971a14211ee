//! `dispatch trial open|verdict|show` and `dispatch trials`.

use clap::Subcommand;

use super::exit::{self, Failure};
use super::output::emit;
use crate::event::trial::Verdict;
use crate::ops::context::Ctx;
use crate::ops::trial::{self, TrialView};
use crate::slurm::Scheduler;

#[derive(Debug, Subcommand)]
pub enum TrialCommand {
    /// Open an acceptance trial; workers join it with `--trial NAME` on `pool submit`/`submit`
    #[command(after_help = "Examples:\n  \
        dispatch trial open t1 --pin 78f43ad --note \"native build\"\n  \
        dispatch trial open t2 --follows t1")]
    Open {
        /// The trial's name
        #[arg(value_parser = crate::names::arg::path_name("trial"))]
        trial: String,
        /// What is under trial (for example the commit of the code being accepted)
        #[arg(long)]
        pin: Option<String>,
        /// The earlier trial this one follows on from (a failed trial is never relabelled)
        #[arg(long, value_name = "TRIAL", value_parser = crate::names::arg::path_name("trial"))]
        follows: Option<String>,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Judge a trial once, with the evidence each worker left: `passed` needs every worker
    /// ended, completed and published with evidence that verifies; `failed` is always allowed
    #[command(after_help = "Examples:\n  \
        dispatch trial verdict t1 passed --reason \"all workers green\"\n  \
        dispatch trial verdict t1 failed --reason \"w2 timed out\"")]
    Verdict {
        /// The trial's name
        #[arg(value_parser = crate::names::arg::path_name("trial"))]
        trial: String,
        /// passed or failed
        #[arg(value_parser = ["passed", "failed"])]
        verdict: String,
        /// Why: what was checked, what went wrong
        #[arg(long)]
        reason: String,
    },
    /// One trial with the forensic view of each of its workers (offline)
    #[command(after_help = "Examples:\n  \
        dispatch trial show t1\n  \
        dispatch trial show t1 --json")]
    Show {
        /// The trial's name
        #[arg(value_parser = crate::names::arg::path_name("trial"))]
        trial: String,
    },
}

fn render(v: &TrialView) -> String {
    let mut s = format!("trial {} (opened {})", v.trial, v.opened_at);
    if let Some(pin) = &v.pin {
        s.push_str(&format!(", pin {pin}"));
    }
    if let Some(f) = &v.follows {
        s.push_str(&format!(", follows {f}"));
    }
    match &v.verdict {
        Some(j) => s.push_str(&format!(
            ": {} at {} ({})",
            j.verdict.as_str(),
            j.at,
            j.reason
        )),
        None => s.push_str(": not judged"),
    }
    for w in &v.workers {
        s.push_str(&format!("\n  {} {} {}", w.worker, w.submission_id, w.state));
    }
    if let Some(j) = &v.verdict {
        for e in &j.evidence {
            s.push_str(&format!(
                "\n  evidence {}: {} {} {}",
                e.worker,
                e.state,
                e.outcome.as_deref().unwrap_or("-"),
                e.published_dir.as_deref().unwrap_or("(nothing published)")
            ));
        }
    }
    s
}

pub fn run<S: Scheduler>(cmd: &TrialCommand, ctx: &Ctx<S>, json: bool) -> Result<u8, Failure> {
    let v = match cmd {
        TrialCommand::Open {
            trial,
            pin,
            follows,
            note,
        } => trial::open(
            ctx,
            &trial::OpenRequest {
                trial: trial.clone(),
                pin: pin.clone(),
                follows: follows.clone(),
                note: note.clone(),
            },
        )?,
        TrialCommand::Verdict {
            trial,
            verdict,
            reason,
        } => {
            let verdict = Verdict::parse(verdict).expect("clap allows only passed and failed");
            trial::judge(ctx, trial, verdict, reason)?
        }
        TrialCommand::Show { trial } => return run_show(&ctx.state_dir, trial, None, json),
    };
    emit(json, &v, || crate::outln!("{}", render(&v)))?;
    Ok(exit::OK)
}

/// `dispatch trial show` and `dispatch inspect --trial [--at SEQ|TIME]` (offline).
pub fn run_show(
    checked: &crate::statedir::Checked,
    trial: &str,
    at: Option<crate::state::replay::Cut>,
    json: bool,
) -> Result<u8, Failure> {
    let at = at
        .map(|cut| super::replay::state_at(checked, cut))
        .transpose()?;
    let shown = match &at {
        Some(at) => trial::show_at(checked, trial, at)?,
        None => trial::show(checked, trial)?,
    };
    super::replay::emit_at(at.map(|a| a.point()), &shown, json, || {
        crate::outln!("{}", render(&shown.trial));
        for r in &shown.inspected {
            let outcome = r.outcome.map(|o| format!(" {o}")).unwrap_or_default();
            crate::outln!(
                "\nworker {} ({}{outcome}): {} events in the coordinator's journal, last {}; own \
                 journal {}",
                r.worker,
                super::table::with_exit(&r.state, r.exit_code, r.exit_signal),
                r.timeline.len(),
                r.last_event.as_ref().map_or("-", |e| e.kind),
                r.worker_journal
                    .as_ref()
                    .map_or("absent", |j| j.status.as_str())
            );
        }
    })?;
    Ok(exit::OK)
}

/// `dispatch trials [--at SEQ|TIME]`.
pub fn run_list(
    checked: &crate::statedir::Checked,
    at: Option<crate::state::replay::Cut>,
    json: bool,
) -> Result<u8, Failure> {
    let (all, point) = match at {
        Some(cut) => {
            let at = super::replay::state_at(checked, cut)?;
            (trial::list_at(&at), Some(at.point()))
        }
        None => (trial::list(checked)?, None),
    };
    let doc = serde_json::json!({ "trials": all });
    super::replay::emit_at(point, &doc, json, || {
        if all.is_empty() {
            crate::outln!("no trials (open one with `dispatch trial open NAME`)");
        }
        for v in &all {
            crate::outln!("{}", render(v));
        }
    })?;
    Ok(exit::OK)
}
