//! A watermark made on purpose (`event::watermark`). A submission whose sbatch or salloc gave
//! no answer is proven never created only by a listing that lacks its name and lists a job
//! given out after it settled; a user with no other job has no such job, and the submission
//! would stay unknown for ever. So the command that needs one makes it: intent, a tiny held
//! `sbatch` named `<prefix>watermark-<8 hex>` (held: it never runs or uses anything), its id
//! journaled, `scancel` at once. A beacon whose cancel did not answer stays in the state until
//! a later one does (`sweep`): its `--deadline` removes it on Slurm 24.11, but 22.05 keeps a
//! held job past its deadline.

use std::time::Duration;

use uuid::Uuid;

use crate::event::watermark::*;
use crate::event::Event;
use crate::event::Micros;
use crate::failpoint;
use crate::ops::context::Ctx;
use crate::ops::error::OpError;
use crate::ops::submit::job_name;
use crate::policy::reconcile::settled_at;
use crate::slurm::CancelTarget;
use crate::slurm::{
    BatchPayload, BatchRequest, JobId, JobName, ScancelSaid, Scheduler, SlurmDuration,
};
use crate::state::State;

/// How long a beacon Slurm was not told to cancel may stay in the queue (Slurm's
/// `--deadline`); it must be past its one-minute time limit or sbatch refuses it.
pub const BEACON_DEADLINE_S: u32 = 180;

/// The held beacon's sbatch: one minute, no output, `--hold` and a deadline.
fn beacon_request(name: JobName) -> BatchRequest {
    let mut r = BatchRequest::new(name, BatchPayload::Wrap("true".to_owned()));
    r.placement.time = Some(SlurmDuration::from_secs(60));
    r.output = Some("/dev/null".into());
    r.extra = vec![
        "--hold".to_owned(),
        "--no-requeue".to_owned(),
        format!("--deadline=now+{BEACON_DEADLINE_S}"),
    ];
    r
}

/// Make a watermark job under the job name prefix `prefix`: the job's id, given out after
/// this call began; or why none was made (exit 4 when one may exist: a later sweep cancels
/// it by name).
pub async fn make<S: Scheduler>(ctx: &Ctx<S>, prefix: &str) -> Result<JobId, OpError> {
    // Session commands make watermarks too and never reconcile: whoever makes one first
    // cancels what earlier ones left.
    sweep(ctx, &ctx.load()?.state, ctx.now()).await?;
    let beacon_id = Uuid::new_v4();
    let name = JobName::new(job_name(prefix, "watermark", beacon_id))
        .map_err(|e| OpError::Usage(format!("no watermark job can be named: {e}")))?;
    ctx.append(Event::WatermarkIntent(WatermarkIntent {
        beacon_id,
        job_name: name.as_str().to_owned(),
        sbatch_limit_s: u32::try_from(ctx.sched.longest_call().as_secs_f64().ceil() as u64)
            .unwrap_or(u32::MAX),
    }))?;
    failpoint::hit("watermark-after-intent");
    let job = match ctx.sched.submit_batch(&beacon_request(name.clone())).await {
        Ok(s) => s.job_id,
        Err(e) => {
            let definite = e.nothing_happened();
            ctx.append(Event::WatermarkFailed(WatermarkFailed {
                beacon_id,
                definite,
                reason: e.to_string(),
            }))?;
            let said = format!("the watermark job {name} could not be made ({e})");
            return Err(if definite {
                OpError::Failed(said)
            } else {
                OpError::Unknown(said)
            });
        }
    };
    ctx.append(Event::WatermarkMade(WatermarkMade {
        beacon_id,
        job_id: job,
    }))?;
    failpoint::hit("watermark-after-made");
    cancel(ctx, beacon_id, CancelTarget::Job(job)).await?;
    Ok(job)
}

/// `scancel` the beacons an earlier command may have left in the queue (killed, or no
/// answer from Slurm), each once: by id when sbatch gave one, else by name once its sbatch
/// cannot still be running. `state` as the caller loaded it; `now` the time.
pub async fn sweep<S: Scheduler>(ctx: &Ctx<S>, state: &State, now: Micros) -> Result<(), OpError> {
    for b in &state.watermarks.beacons {
        let target = match b.job_id {
            Some(job) => CancelTarget::Job(job),
            None if now.0
                >= settled_at(b.since, Duration::from_secs(b.sbatch_limit_s.into())).0 =>
            {
                match JobName::new(&b.job_name) {
                    Ok(name) => CancelTarget::MineNamed(name),
                    Err(_) => continue,
                }
            }
            // Its sbatch may still be running: a cancel by name now could miss it.
            None => continue,
        };
        cancel(ctx, b.beacon_id, target).await?;
    }
    Ok(())
}

/// `scancel` of beacon `beacon_id` (`target`: its id, or its name), and what it answered
/// (`WatermarkCancelled`).
async fn cancel<S: Scheduler>(
    ctx: &Ctx<S>,
    beacon_id: Uuid,
    target: CancelTarget,
) -> Result<(), OpError> {
    let (job_id, answer) = match &target {
        CancelTarget::Job(job) => (Some(*job), ctx.sched.cancel_job(*job).await),
        CancelTarget::MineNamed(name) => (None, ctx.sched.cancel_by_name(name).await),
        other => unreachable!("a beacon is cancelled by id or name, not {other:?}"),
    };
    let said = format!(
        "scancel {}",
        target.argv().join(" ".as_ref()).to_string_lossy()
    );
    let (answered, reason) = match answer {
        // "Invalid job id": already gone (its deadline, or MinJobAge after a cancel).
        Ok(r) => (
            r.status.success() || r.said == ScancelSaid::InvalidJobId,
            format!("{said}: {:?}", r.said),
        ),
        Err(e) => (false, format!("{said}: {e}")),
    };
    ctx.append(Event::WatermarkCancelled(WatermarkCancelled {
        beacon_id,
        job_id,
        answered,
        reason,
    }))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_beacon_is_held_short_and_removed_by_its_deadline() {
        let name = JobName::new("u-watermark-0123abcd").unwrap();
        let argv: Vec<String> = beacon_request(name)
            .argv()
            .unwrap()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        for needed in [
            "--hold",
            "--job-name=u-watermark-0123abcd",
            "--time=00:01:00",
            "--wrap=true",
        ] {
            assert!(argv.iter().any(|a| a == needed), "{needed} in {argv:?}");
        }
        assert!(argv.contains(&format!("--deadline=now+{BEACON_DEADLINE_S}")));
        // sbatch refuses a deadline before the time limit ends.
        const { assert!(BEACON_DEADLINE_S > 60) };
    }
}
