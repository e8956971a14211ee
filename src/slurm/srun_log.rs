//! What a detached `srun` says on its own stderr (the worker's `srun-client.log`): the step
//! the controller created for it, or that the controller refused to create one.
//!
//! Both lines come from srun after the controller answered its step-create request, so each is
//! the controller's word relayed: `launching StepId=J.S` (printed with `--verbose`, Slurm 22.05
//! and 24.11 alike) names a step that exists or existed; `Unable to create step` is a definite
//! refusal.

use super::ids::JobId;

/// The step number srun announced for job `job` (`srun: launching StepId=J.S on host N, …`).
/// A step of another job, a heterogeneous component (`J.S+C`) or anything malformed is not
/// taken.
pub fn launched_step(log: &str, job: JobId) -> Option<u32> {
    log.lines().find_map(|line| {
        let rest = line.split_once("launching StepId=")?.1;
        let id = rest.split_whitespace().next()?;
        let (j, s) = id.split_once('.')?;
        let step: u32 = s.parse().ok()?;
        // `parse` accepts a sign; a step number is plain digits.
        (s.bytes().all(|b| b.is_ascii_digit()) && j == job.get().to_string()).then_some(step)
    })
}

/// srun's line saying the controller would not create the step, trimmed.
pub fn step_refused(log: &str) -> Option<&str> {
    log.lines()
        .find(|l| l.contains("Unable to create step"))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u32) -> JobId {
        JobId::new(n).unwrap()
    }

    /// As Slurm 22.05 and 24.11 print it with `--verbose` (the dev clusters, 3 nodes).
    const VERBOSE: &str = "srun: defined options\n\
        srun: jobid               : 209\n\
        srun: jobid 209: nodes(3):`node[1-3]', cpu counts: 4(x3)\n\
        srun: launch/slurm: launch_p_step_launch: CpuBindType=(null type)\n\
        srun: launching StepId=209.11 on host node2, 1 tasks: 0\n\
        srun: launch/slurm: _task_start: Node node2, 1 tasks started\n";

    #[test]
    fn the_announced_step_of_the_job_is_read() {
        assert_eq!(launched_step(VERBOSE, job(209)), Some(11));
        assert_eq!(launched_step(VERBOSE, job(20)), None, "another job's step");
        assert_eq!(launched_step("srun: defined options\n", job(209)), None);
    }

    #[test]
    fn a_malformed_or_heterogeneous_step_is_not_taken() {
        for line in [
            "srun: launching StepId=209.+1 on host n",
            "srun: launching StepId=209.1+0 on host n",
            "srun: launching StepId=209 on host n",
            "srun: launching StepId=209.x on host n",
            "srun: launching StepId=",
        ] {
            assert_eq!(launched_step(line, job(209)), None, "{line}");
        }
    }

    #[test]
    fn a_refusal_is_the_line_that_says_so() {
        let log = "srun: defined options\n  srun: error: Unable to create step for job 9: \
                   Requested nodes are busy  \n";
        assert_eq!(
            step_refused(log),
            Some("srun: error: Unable to create step for job 9: Requested nodes are busy")
        );
        assert_eq!(step_refused(VERBOSE), None);
    }
}
