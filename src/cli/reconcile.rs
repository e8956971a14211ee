//! `dispatch reconcile [--watch SECS]`: rendering of what it observed, resolved and left
//! unknown; with `--watch`, the same run again every SECS seconds until SIGINT or SIGTERM, for
//! a terminal multiplexer (docs/operations.md, "Driving reconcile").
//!
//! A signal only sets a flag: the round in flight finishes (its appends are whole) and the
//! command exits 0 before the next. A round that fails says so on stderr (and, with `--json`,
//! as its error document on its line) and the next one comes as planned.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::exit::{self, Failure};
use super::output::{emit, note};
use crate::ops::context::Ctx;
use crate::ops::continuation::ContinueOutcome;
use crate::ops::pool::{CreationOutcome, RenewalOutcome, RenewalReconciled};
use crate::ops::reconcile::{self, ReconcileReport};
use crate::slurm::Scheduler;

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Reconcile again every SECS seconds (10 to 86400) until SIGINT or SIGTERM, which end it
    /// (exit 0) after the round in flight: a summary line a round on stderr, one JSON document
    /// a round (one a line) with --json
    #[arg(long, value_name = "SECS", value_parser = parse_watch_secs)]
    pub watch: Option<u64>,
}

/// Bounds of `--watch SECS`: often enough for renewals and continuations, never a busy loop
/// against the controller.
pub const WATCH_SECS: std::ops::RangeInclusive<u64> = 10..=86_400;

fn parse_watch_secs(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if WATCH_SECS.contains(&n) => Ok(n),
        _ => Err(format!(
            "must be whole seconds from {} to {}, not {s:?}",
            WATCH_SECS.start(),
            WATCH_SECS.end()
        )),
    }
}

pub async fn run<S: Scheduler>(
    args: &ReconcileArgs,
    ctx: &Ctx<S>,
    json: bool,
) -> Result<u8, Failure> {
    match args.watch {
        None => {
            let r = reconcile::reconcile(ctx, None).await?;
            emit(json, &r, || render(&r))?;
            Ok(exit::OK)
        }
        Some(secs) => watch(ctx, Duration::from_secs(secs), json).await,
    }
}

fn render(r: &ReconcileReport) {
    crate::outln!(
        "observed {} worker(s) with {} Slurm call(s); resolved {}, unknown {}",
        r.observed,
        r.slurm_calls,
        r.resolved.len(),
        r.unknown.len()
    );
    for x in &r.resolved {
        crate::outln!(
            "  released {}/{}: {}",
            x.pool.as_deref().unwrap_or("submit"),
            x.worker,
            x.proof
        );
    }
    for x in &r.unknown {
        crate::outln!(
            "  still unknown {}/{} ({}): budget held",
            x.pool.as_deref().unwrap_or("submit"),
            x.worker,
            x.state
        );
        if let Some(why) = &x.why {
            crate::outln!("    {why}");
        }
    }
    for c in &r.creations {
        crate::outln!(
            "  pool create {} ({}): {}: {}",
            c.pool,
            c.job_name,
            c.outcome,
            c.detail
        );
    }
    for c in &r.continued {
        crate::outln!(
            "  continuation {}/{}: {}: {}",
            c.pool.as_deref().unwrap_or("submit"),
            c.worker,
            c.outcome,
            c.detail
        );
    }
    for l in &r.renewals {
        crate::outln!("  {}", renewal_done(l));
    }
}

/// How often the wait between rounds checks for a signal.
const TICK: Duration = Duration::from_millis(100);

/// One round every `every` (start to start) until SIGINT or SIGTERM.
async fn watch<S: Scheduler>(ctx: &Ctx<S>, every: Duration, json: bool) -> Result<u8, Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Only a flag, never an exit: a round is never cut short in the middle of an append.
        if let Err(e) = signal_hook::flag::register(signal, stop.clone()) {
            return Err(Failure::new(
                exit::FAILED,
                format!("cannot handle SIGINT and SIGTERM for --watch: {e}"),
            ));
        }
    }
    let mut round = 0u64;
    loop {
        let started = tokio::time::Instant::now();
        round += 1;
        let next = chrono::Local::now() + every;
        let next = format!("next round at {}", next.format("%H:%M:%S"));
        match reconcile::reconcile(ctx, None).await {
            Ok(r) => {
                if json {
                    super::output::print_json(&r)?;
                } else {
                    render(&r);
                }
                note(&format!("reconcile round {round}: {}; {next}", summary(&r)));
            }
            Err(e) => {
                let failure = Failure::from(e);
                if json {
                    super::output::print_json(&failure.document())?;
                }
                note(&format!(
                    "reconcile round {round} failed (exit {}): {}; {next}",
                    failure.code, failure.message
                ));
            }
        }
        while started.elapsed() < every {
            if stop.load(Ordering::Relaxed) {
                return Ok(exit::OK);
            }
            tokio::time::sleep(TICK.min(every.saturating_sub(started.elapsed()))).await;
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(exit::OK);
        }
    }
}

/// What one round did, and what the next is due to try again, on one line.
pub fn summary(r: &ReconcileReport) -> String {
    let count =
        |outcome: ContinueOutcome| r.continued.iter().filter(|c| c.outcome == outcome).count();
    let mut due = Vec::new();
    if !r.unknown.is_empty() {
        due.push(format!("{} worker(s) still unknown", r.unknown.len()));
    }
    let waiting = count(ContinueOutcome::Waiting) + count(ContinueOutcome::Unknown);
    if waiting > 0 {
        due.push(format!("{waiting} continuation(s) waiting"));
    }
    let creating = r
        .creations
        .iter()
        .filter(|c| {
            !matches!(
                c.outcome,
                CreationOutcome::Attached | CreationOutcome::Ended
            )
        })
        .count();
    if creating > 0 {
        due.push(format!("{creating} pool create(s) in flight"));
    }
    due.extend(r.renewals.iter().filter_map(renewal_due));
    let due = if due.is_empty() {
        "nothing due".to_owned()
    } else {
        format!("due: {}", due.join(", "))
    };
    let renewed = r
        .renewals
        .iter()
        .filter(|l| l.outcome == RenewalOutcome::Renewed)
        .count();
    let renewed = match renewed {
        0 => String::new(),
        n => format!(", renewed {n} pool(s)"),
    };
    format!(
        "observed {}, resolved {}, continued {}, resubmitted {}{renewed} with {} Slurm call(s); \
         {due}",
        r.observed,
        r.resolved.len(),
        count(ContinueOutcome::Continued),
        r.resubmitted.len(),
        r.slurm_calls
    )
}

/// `pool P: allocation G WHAT[ (job J[, STATE: REASON])]`: a renewing pool's next allocation,
/// as `--watch`'s summary and the plain output both name it.
fn next_allocation(l: &RenewalReconciled, what: &str, with_job: bool) -> String {
    let listed = l
        .slurm
        .as_ref()
        .map(|s| match s.reason.as_str() {
            "" | "None" => format!(", {}", s.state),
            reason => format!(", {}: {reason}", s.state),
        })
        .unwrap_or_default();
    let job = l
        .job_id
        .filter(|_| with_job)
        .map(|j| format!(" (job {j}{listed})"))
        .unwrap_or_default();
    format!("pool {}: allocation {} {what}{job}", l.pool, l.generation)
}

/// What a renewing pool waits for next, as `--watch` says it after each round: nothing for a
/// pool just renewed or whose renewal is over.
fn renewal_due(l: &RenewalReconciled) -> Option<String> {
    let (what, with_job) = match l.outcome {
        RenewalOutcome::Renewed | RenewalOutcome::Stopped => return None,
        RenewalOutcome::NotDue => (l.detail.as_str(), false),
        RenewalOutcome::Asked | RenewalOutcome::Waiting => ("waited for", true),
        RenewalOutcome::EndedEarly => {
            return Some(format!(
                "{}: {}",
                next_allocation(l, "follows", true),
                l.detail
            ))
        }
        RenewalOutcome::Failed => ("to be asked for again", false),
        RenewalOutcome::Unknown => ("unknown", true),
    };
    Some(next_allocation(l, what, with_job))
}

/// What this run did about a renewing pool, as the plain output says it: the next allocation
/// asked, waited for, adopted (with how the last one ended), failed, or the renewal stopped.
fn renewal_done(l: &RenewalReconciled) -> String {
    let what = match l.outcome {
        RenewalOutcome::NotDue => return next_allocation(l, &l.detail, false),
        RenewalOutcome::Stopped => {
            return format!("pool {}: renewal stopped: {}", l.pool, l.detail)
        }
        RenewalOutcome::Asked => "asked",
        RenewalOutcome::Waiting => "waited for",
        RenewalOutcome::Renewed => "adopted",
        RenewalOutcome::EndedEarly => "follows",
        RenewalOutcome::Failed => "failed",
        RenewalOutcome::Unknown => "unknown",
    };
    format!("{}: {}", next_allocation(l, what, true), l.detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::pool::SuccessorListed;

    #[test]
    fn watch_takes_ten_seconds_to_a_day() {
        assert_eq!(parse_watch_secs("10"), Ok(10));
        assert_eq!(parse_watch_secs("86400"), Ok(86_400));
        assert!(parse_watch_secs("9").is_err());
        assert!(parse_watch_secs("86401").is_err());
        assert!(parse_watch_secs("1m").is_err());
    }

    fn renewal(outcome: RenewalOutcome, job: Option<u32>, detail: &str) -> RenewalReconciled {
        RenewalReconciled {
            pool: "p".into(),
            generation: 2,
            outcome,
            job_id: job.and_then(crate::slurm::JobId::new),
            detail: detail.into(),
            slurm: (outcome == RenewalOutcome::Waiting).then(|| SuccessorListed {
                state: "PENDING".into(),
                reason: "Dependency".into(),
            }),
        }
    }

    #[test]
    fn a_round_names_each_renewal_due_next_and_counts_the_renewed() {
        let r = ReconcileReport {
            renewals: vec![
                renewal(
                    RenewalOutcome::NotDue,
                    None,
                    "asked for from 2026-12-06T18:00:00+00:00",
                ),
                renewal(RenewalOutcome::Waiting, Some(42), "PENDING (Dependency)"),
                renewal(RenewalOutcome::Renewed, Some(43), "adopted"),
            ],
            ..ReconcileReport::default()
        };
        assert_eq!(
            summary(&r),
            "observed 0, resolved 0, continued 0, resubmitted 0, renewed 1 pool(s) with 0 Slurm \
             call(s); due: pool p: allocation 2 asked for from 2026-12-06T18:00:00+00:00, pool \
             p: allocation 2 waited for (job 42, PENDING: Dependency)"
        );
    }

    /// The plain output's line of each outcome names the next allocation as `--watch` does.
    #[test]
    fn the_plain_output_says_what_became_of_each_renewal() {
        let said = |outcome, job, detail| renewal_done(&renewal(outcome, job, detail));
        assert_eq!(
            said(RenewalOutcome::NotDue, None, "asked for from T"),
            "pool p: allocation 2 asked for from T"
        );
        assert_eq!(
            said(
                RenewalOutcome::Waiting,
                Some(42),
                "allocation 42 is PENDING (Dependency)"
            ),
            "pool p: allocation 2 waited for (job 42, PENDING: Dependency): allocation 42 is \
             PENDING (Dependency)"
        );
        assert_eq!(
            said(RenewalOutcome::Failed, Some(42), "allocation 42 ended"),
            "pool p: allocation 2 failed (job 42): allocation 42 ended"
        );
        assert_eq!(
            said(RenewalOutcome::Unknown, None, "not found yet"),
            "pool p: allocation 2 unknown: not found yet"
        );
        assert_eq!(
            said(RenewalOutcome::Stopped, None, "the bound"),
            "pool p: renewal stopped: the bound"
        );
    }

    #[test]
    fn a_quiet_round_says_nothing_is_due() {
        let r = ReconcileReport::default();
        assert_eq!(
            summary(&r),
            "observed 0, resolved 0, continued 0, resubmitted 0 with 0 Slurm call(s); nothing due"
        );
    }
}
