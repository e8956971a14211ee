//! What a detached `srun` says on its own stderr (the worker's `srun-client.log`): the step
//! the controller created for it, or that the controller refused to create one.
//!
//! Both lines come from srun after the controller answered its step-create request, so each is
//! the controller's word relayed: `launching StepId=J.S` (printed with `--verbose`, Slurm 22.05
//! and 24.11 alike) names a step that exists or existed; `Unable to create step` is a definite
//! refusal.
//!
//! The announcement is not the step running: the controller created the step, and srun then
//! asks each node's slurmd to launch its task. srun says how that went, in the same log:
//! `_task_start: Node N, 1 tasks started` (with `--verbose`), or
//! `Task launch for StepId=J.S failed on node N: REASON` and `Application launch failed:
//! REASON`, after slurmd's own words relayed (`JobId=J failed to distribute tasks …`).
//! Seen on the dev clusters, 22.05 and 24.11 alike.

use super::ids::JobId;

/// What srun's lines say a failed launch of its step looks like: the words of slurmd's refusal
/// as srun relays them and srun's own summary (none of them is printed for a launch that
/// succeeded).
const LAUNCH_FAILURE_MARKS: &[&str] = &[
    "Application launch failed",
    "Unable to layout tasks",
    "failed to distribute tasks",
];

/// At most this many of srun's error lines make up the words a launch failure is recorded
/// with (each bounded too): the refusal comes in two to four lines.
const LAUNCH_FAILURE_LINES: usize = 4;
const LAUNCH_FAILURE_LINE_CHARS: usize = 300;

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

/// srun's word that slurmd started the step's tasks (`_task_start: Node N, K tasks started`).
pub fn tasks_started(log: &str) -> bool {
    log.lines()
        .any(|l| l.contains("_task_start:") && l.contains("tasks started"))
}

/// srun's own words that the launch of step `step` of `job`, which the controller created for
/// it, failed: its error lines after the step's announcement, once one of them is `Task launch
/// for StepId=J.S failed` for that very step or another mark of a failed launch
/// ([`LAUNCH_FAILURE_MARKS`]). Each line trimmed and without srun's prefix, joined by `; `.
/// `None` when the log does not announce that step, or says nothing of a failed launch.
pub fn launch_refused(log: &str, job: JobId, step: u32) -> Option<String> {
    let announced = format!("launching StepId={job}.{step} ");
    let named = format!("Task launch for StepId={job}.{step} failed");
    let (_, after) = log.split_once(&announced)?;
    let errors: Vec<&str> = after
        .lines()
        .filter_map(|l| l.trim().strip_prefix("srun: error: "))
        .map(str::trim)
        .collect();
    let failed = errors
        .iter()
        .any(|l| l.contains(&named) || LAUNCH_FAILURE_MARKS.iter().any(|m| l.contains(m)));
    failed.then(|| {
        errors
            .iter()
            .take(LAUNCH_FAILURE_LINES)
            .map(|l| {
                l.chars()
                    .take(LAUNCH_FAILURE_LINE_CHARS)
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("; ")
    })
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

    /// Issue 36, as Slurm 22.05 printed it on the 3-node dev cluster: the step was created
    /// and announced, then slurmd refused to lay out its task.
    const LAYOUT_REFUSED: &str = "srun: defined options\n\
        srun: jobid 16: nodes(2):`node[1-2]', cpu counts: 4(x2)\n\
        srun: launch/slurm: launch_p_step_launch: CpuBindType=(null type)\n\
        srun: launching StepId=16.2 on host node1, 1 tasks: 0\n\
        srun: route/default: init: route default plugin loaded\n\
        srun: error: JobId=16 failed to distribute tasks (bind_type:cores,mask_cpu,one_thread) - this should never happen\n\
        srun: error: Task launch for StepId=16.2 failed on node node1: Unable to layout tasks on given cpus\n\
        srun: error: Application launch failed: Unable to layout tasks on given cpus\n\
        srun: Job step aborted\n";

    #[test]
    fn a_launch_slurmd_refused_is_read_in_sruns_words() {
        let words = launch_refused(LAYOUT_REFUSED, job(16), 2).unwrap();
        assert_eq!(
            words,
            "JobId=16 failed to distribute tasks (bind_type:cores,mask_cpu,one_thread) - this \
             should never happen; Task launch for StepId=16.2 failed on node node1: Unable to \
             layout tasks on given cpus; Application launch failed: Unable to layout tasks on \
             given cpus"
        );
        assert!(!tasks_started(LAYOUT_REFUSED));
        // Another step, another job, or a log that announces none: not this step's failure.
        assert_eq!(launch_refused(LAYOUT_REFUSED, job(16), 1), None);
        assert_eq!(launch_refused(LAYOUT_REFUSED, job(1), 2), None);
        let unannounced = LAYOUT_REFUSED.replace("launching StepId=16.2 ", "");
        assert_eq!(launch_refused(&unannounced, job(16), 2), None);
    }

    #[test]
    fn a_started_launch_or_a_tasks_own_error_is_no_launch_failure() {
        assert!(tasks_started(VERBOSE));
        assert_eq!(launch_refused(VERBOSE, job(209), 11), None);
        // The task ran and failed: srun's error line is about the task, not the launch.
        let exited = format!("{VERBOSE}srun: error: node2: task 0: Exited with exit code 2\n");
        assert_eq!(launch_refused(&exited, job(209), 11), None);
        // The bind refusal of 22.05 and 24.11 (a CPU outside the step), in its own words.
        let bind = "srun: launching StepId=7.0 on host node1, 1 tasks: 0\n\
            srun: error: CPU binding outside of job step allocation, allocated CPUs are: 0x3.\n\
            srun: error: Task launch for StepId=7.0 failed on node node1: Unable to satisfy cpu bind request\n";
        assert!(launch_refused(bind, job(7), 0).unwrap().ends_with(
            "Task launch for StepId=7.0 failed on node node1: Unable to satisfy cpu bind request"
        ));
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
