//! Is a worker that asked to be continued (`--continue N`) continued, and why: pure. A
//! continuation needs a proven end (the caller only asks once `WorkerTerminal`/`JobTerminal`
//! landed), a cause proven by Slurm (the terminal state in the proof, a node the pool lost, the
//! allocation's end) or by the worker's own journal (SIGTERM at its early-shutdown deadline, a
//! checkpoint declared after a clean finish), never guessed from timing; a cause the user asked
//! for; a continuation left; a state it may resume from; and a verified publication. A worker a
//! user stopped, or whose trial was judged, is never continued.

use std::fmt;

use super::node::StateClass;

crate::words! {
    /// Why a worker's run ended, as far as a continuation is concerned.
    pub enum Cause {
        /// Slurm's `TIMEOUT`, or the early-shutdown deadline the supervisor signalled.
        TimeLimit => "time-limit",
        /// Slurm's `PREEMPTED`.
        Preempted => "preempted",
        /// Slurm's `NODE_FAIL`, or the worker's node was lost from its pool.
        NodeFailure => "node-failure",
        /// The job or allocation ended otherwise while the worker ran (`CANCELLED` by someone
        /// else, `BOOT_FAIL`, `DEADLINE`, the pool's allocation over).
        Lost => "lost",
        /// The payload declared a checkpoint and exited 0 on its own: it asked for more.
        Checkpoint => "checkpoint",
    }
}

impl Cause {
    pub const ALL: [Cause; 5] = [
        Cause::TimeLimit,
        Cause::Preempted,
        Cause::NodeFailure,
        Cause::Lost,
        Cause::Checkpoint,
    ];

    pub fn parse(word: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.as_str() == word)
    }
}

/// What is known of one ended worker that asked to be continued.
#[derive(Clone, Debug, Default)]
pub struct Ended {
    /// The proof that ended it (`WorkerTerminal.proof`, `JobTerminal.proof`).
    pub terminal_proof: String,
    /// The proof that its pool lost its node (`PoolNodeLost`).
    pub node_lost: Option<String>,
    /// The proof that its pool's allocation is over (`PoolAllocationEnded`).
    pub allocation_ended: Option<String>,
    /// Its journal records SIGTERM at its early-shutdown deadline (`ShutdownSignalled`,
    /// reason `deadline`).
    pub deadline_signalled: bool,
    /// Its journal records a checkpoint declared (`CheckpointDeclared`, kind 220).
    pub checkpoint_declared: bool,
    /// Its journal records its supervisor's end (`SupervisorFinished`).
    pub supervisor_finished: bool,
    /// Its journal records a SIGTERM from outside (a stop, a preemption, a job's end):
    /// forwarded to the payload (`ShutdownSignalled`, reason `forwarded`), or received after
    /// Slurm's TERM to the whole step had ended the payload (`WorkerReport::term_from_outside`).
    pub term_from_outside: bool,
    /// Its native state's class, from its journal's cleanup record.
    pub state_class: Option<StateClass>,
    /// Its verified publication: the directory and the manifest's digest (`Published`).
    pub published: Option<(String, String)>,
    /// The newest checkpoint it published while running (`CheckpointPublished`): the
    /// directory and the manifest's digest. What it resumes from when its end published
    /// nothing it may resume from (a node that failed took its supervisor with it).
    pub saved: Option<(String, String)>,
    /// A user stopped it (`pool stop-worker`, `dispatch stop`).
    pub stopped: bool,
    /// The trial it joined was judged.
    pub trial_judged: bool,
    /// It ran as a step of a pool's allocation, which outlives it, and that allocation is
    /// still recorded as the pool's, not over and not being released (a `dispatch submit` job
    /// ends with its worker; a released pool's end is the release's).
    pub allocation_runs: bool,
}

/// What the user asked (`ContinuationAsked`).
#[derive(Clone, Debug)]
pub struct Asked {
    pub continues_left: u32,
    pub causes: Vec<Cause>,
    pub crashed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Continue {
        cause: Cause,
        /// The words that prove the cause.
        proof: String,
        from_crash_class: bool,
        /// From the newest checkpoint published while it ran (`Ended::saved`), not from
        /// the publication at its end.
        from_saved: bool,
    },
    /// Not continued, and why; not decided again.
    Refuse(String),
    /// Not decided yet, and why: Slurm has not yet proven why it ended. Decided by a later
    /// `reconcile`.
    Wait(String),
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Continue { cause, proof, .. } => write!(f, "continued: {cause} ({proof})"),
            Decision::Refuse(why) => write!(f, "not continued: {why}"),
            Decision::Wait(why) => write!(f, "not decided yet: {why}"),
        }
    }
}

/// The Slurm job states a proof names (`… shows job 7 TIMEOUT`), last one first.
pub fn slurm_states(proof: &str) -> impl Iterator<Item = &str> {
    proof
        .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|w| w.len() > 2)
        .rev()
}

/// Whether a proof names no Slurm state at all (squeue's "Invalid job id": proven gone, but
/// not how it ended).
pub fn names_no_state(proof: &str) -> bool {
    slurm_states(proof).next().is_none()
}

/// A cause Slurm's own state word proves, if the proof names one.
pub fn cause_in(proof: &str) -> Option<Cause> {
    slurm_states(proof).find_map(|s| match s {
        "TIMEOUT" => Some(Cause::TimeLimit),
        "PREEMPTED" => Some(Cause::Preempted),
        "NODE_FAIL" => Some(Cause::NodeFailure),
        _ => None,
    })
}

/// A job ended otherwise than by its own finish or the causes above.
fn lost_in(proof: &str) -> bool {
    slurm_states(proof).any(|s| matches!(s, "CANCELLED" | "BOOT_FAIL" | "DEADLINE" | "REVOKED"))
}

/// Why it ended, with the words that prove it: Slurm's proof first, then its own journal's.
/// A run whose supervisor finished without a SIGTERM from outside ended on its own: its node's
/// loss or its allocation's end, even when recorded with its end, came after (Slurm kills a
/// failed node's steps outright, supervisor and all).
pub fn cause(e: &Ended) -> Option<(Cause, String)> {
    let on_its_own = e.supervisor_finished && !e.term_from_outside;
    if let Some(p) = e.node_lost.as_ref().filter(|_| !on_its_own) {
        return Some((Cause::NodeFailure, p.clone()));
    }
    if let Some(c) = cause_in(&e.terminal_proof) {
        return Some((c, e.terminal_proof.clone()));
    }
    if let Some(p) = e.allocation_ended.as_ref().filter(|_| !on_its_own) {
        return Some((cause_in(p).unwrap_or(Cause::Lost), p.clone()));
    }
    if e.deadline_signalled {
        return Some((
            Cause::TimeLimit,
            format!(
                "its journal records SIGTERM at its early-shutdown deadline; {}",
                e.terminal_proof
            ),
        ));
    }
    if lost_in(&e.terminal_proof) {
        return Some((Cause::Lost, e.terminal_proof.clone()));
    }
    if e.checkpoint_declared {
        return Some((
            Cause::Checkpoint,
            format!(
                "its journal records a checkpoint declared after a clean finish; {}",
                e.terminal_proof
            ),
        ));
    }
    None
}

/// Is the ended worker continued?
pub fn decide(e: &Ended, asked: &Asked) -> Decision {
    let refuse = |why: String| Decision::Refuse(why);
    if e.stopped {
        return refuse("a user stopped it".to_owned());
    }
    if e.trial_judged {
        return refuse("its trial was judged".to_owned());
    }
    if let Some(why) = cause_not_proven_yet(e) {
        return Decision::Wait(why);
    }
    let Some((cause, proof)) = cause(e) else {
        return refuse(format!(
            "its end proves no cause a continuation is for ({})",
            e.terminal_proof
        ));
    };
    if !asked.causes.contains(&cause) {
        return refuse(format!(
            "it ended by {cause} ({proof}), a cause not asked for"
        ));
    }
    if asked.continues_left == 0 {
        return refuse("no continuation is left".to_owned());
    }
    let from_end = from_its_end(e, asked);
    let (from_crash_class, from_saved) = match from_end {
        Ok(false) => (false, false),
        // A checkpoint the payload declared is preferred to a crash-class state.
        _ if e.saved.is_some() => (false, true),
        Ok(true) => (true, false),
        Err(why) => return refuse(why),
    };
    Decision::Continue {
        cause,
        proof,
        from_crash_class,
        from_saved,
    }
}

/// Why a pool worker's cause is not proven yet, if it is not: a SIGTERM from outside ended it
/// (a preemption's grace, its allocation's end, a cancel) while its allocation, which outlives
/// it, is not proven over, and nothing else names the cause. Slurm's reason is proven with the
/// allocation's end (or a node lost), never guessed: until then it is not decided.
fn cause_not_proven_yet(e: &Ended) -> Option<String> {
    let named = e.node_lost.is_some()
        || e.allocation_ended.is_some()
        || e.deadline_signalled
        || cause_in(&e.terminal_proof).is_some();
    (e.allocation_runs && e.term_from_outside && !named).then(|| {
        "a SIGTERM from outside ended it while its pool's allocation still runs: decided once \
         Slurm proves why (the allocation's end, or its node lost)"
            .to_owned()
    })
}

/// May it resume from what its end published: `Ok(from_crash_class)`, or why not.
fn from_its_end(e: &Ended, asked: &Asked) -> Result<bool, String> {
    let from_crash_class = match e.state_class {
        Some(StateClass::Checkpointed) => false,
        Some(StateClass::Sealed) if e.checkpoint_declared => false,
        Some(StateClass::CrashClassPartial) if asked.crashed => true,
        Some(class) => {
            return Err(format!(
                "its native state is {}, not a checkpoint{}",
                class.as_str(),
                if class == StateClass::CrashClassPartial {
                    " (--continue-crashed allows it)"
                } else {
                    ""
                }
            ))
        }
        // Killed with its step (Slurm kills a failed node's steps at once, without a SIGTERM),
        // or never started: nothing of its state was checkpointed, hashed or published at its
        // end.
        None if !e.supervisor_finished => {
            return Err(
                "its supervisor did not finish (killed with its step, or never started): no \
                 checkpoint was declared at its end, nothing was published, and it published \
                 no checkpoint while it ran ($DISPATCH_CHECKPOINT_NOW)"
                    .to_owned(),
            )
        }
        None => return Err("no state class is recorded in its journal".to_owned()),
    };
    if e.published.is_none() {
        return Err("no verified publication: its journal records none".to_owned());
    }
    Ok(from_crash_class)
}

/// The causes of `--continue-on` (comma-separated words), or every cause.
pub fn parse_causes(words: Option<&str>) -> Result<Vec<Cause>, String> {
    let Some(words) = words else {
        return Ok(Cause::ALL.to_vec());
    };
    let mut causes = Vec::new();
    for w in words.split(',').map(str::trim) {
        let c = Cause::parse(w).ok_or_else(|| {
            format!(
                "--continue-on: {w:?} is not a cause (one of {})",
                Cause::ALL.map(Cause::as_str).join(", ")
            )
        })?;
        if !causes.contains(&c) {
            causes.push(c);
        }
    }
    Ok(causes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    fn checkpointed(proof: &str) -> Ended {
        Ended {
            terminal_proof: proof.to_owned(),
            state_class: Some(StateClass::Checkpointed),
            published: Some(("/p/w-1".into(), "ab".into())),
            ..Ended::default()
        }
    }

    fn all(left: u32) -> Asked {
        Asked {
            continues_left: left,
            causes: Cause::ALL.to_vec(),
            crashed: false,
        }
    }

    fn crashed_allowed() -> Asked {
        Asked {
            crashed: true,
            ..all(1)
        }
    }

    #[test]
    fn each_cause_is_read_from_its_proof() {
        let of = |e: &Ended| cause(e).map(|c| c.0);
        assert_eq!(
            of(&checkpointed("squeue shows job 7 TIMEOUT")),
            Some(Cause::TimeLimit)
        );
        assert_eq!(
            of(&checkpointed("accounting shows job 7 PREEMPTED")),
            Some(Cause::Preempted)
        );
        assert_eq!(
            of(&checkpointed("squeue shows job 7 NODE_FAIL")),
            Some(Cause::NodeFailure)
        );
        assert_eq!(
            of(&checkpointed("squeue shows job 7 CANCELLED")),
            Some(Cause::Lost)
        );
        assert_eq!(of(&checkpointed("squeue shows job 7 COMPLETED")), None);
        let mut e = checkpointed("squeue shows job 7 COMPLETED");
        e.deadline_signalled = true;
        assert_eq!(of(&e), Some(Cause::TimeLimit));
        e.deadline_signalled = false;
        e.checkpoint_declared = true;
        assert_eq!(of(&e), Some(Cause::Checkpoint));
        e.allocation_ended = Some("squeue shows job 9 PREEMPTED".into());
        assert_eq!(of(&e), Some(Cause::Preempted));
        e.allocation_ended = Some("job 9: Invalid job id".into());
        assert_eq!(of(&e), Some(Cause::Lost));
        e.node_lost = Some("job 9 is listed RUNNING on n1 and no longer on n2".into());
        assert_eq!(of(&e), Some(Cause::NodeFailure));
    }

    #[test]
    fn a_crash_class_state_is_continued_only_when_allowed_and_said() {
        let mut e = checkpointed("squeue shows job 7 TIMEOUT");
        e.state_class = Some(StateClass::CrashClassPartial);
        assert!(matches!(decide(&e, &all(1)), Decision::Refuse(_)));
        let allowed = crashed_allowed();
        assert!(matches!(
            decide(&e, &allowed),
            Decision::Continue {
                from_crash_class: true,
                ..
            }
        ));
        e.state_class = Some(StateClass::Sealed);
        assert!(matches!(decide(&e, &allowed), Decision::Refuse(_)));
        e.checkpoint_declared = true;
        assert!(matches!(
            decide(&e, &all(1)),
            Decision::Continue {
                from_crash_class: false,
                ..
            }
        ));
    }

    #[test]
    fn a_run_with_nothing_of_its_end_resumes_from_the_checkpoint_it_saved_while_running() {
        let mut e = Ended {
            terminal_proof: "released: its pool lost node n3".into(),
            node_lost: Some("job 9 is listed RUNNING on n1 and no longer on n3".into()),
            ..Ended::default()
        };
        assert!(matches!(decide(&e, &all(1)), Decision::Refuse(_)));
        e.saved = Some(("/p/w-1-checkpoint-2".into(), "ab".into()));
        assert_eq!(
            decide(&e, &all(1)),
            Decision::Continue {
                cause: Cause::NodeFailure,
                proof: "job 9 is listed RUNNING on n1 and no longer on n3".into(),
                from_crash_class: false,
                from_saved: true,
            }
        );
        // A crash-class end, allowed, still yields to the checkpoint the payload declared.
        e.state_class = Some(StateClass::CrashClassPartial);
        e.published = Some(("/p/w-1".into(), "cd".into()));
        assert!(matches!(
            decide(&e, &crashed_allowed()),
            Decision::Continue {
                from_saved: true,
                from_crash_class: false,
                ..
            }
        ));
        // A checkpoint at its end is newer than any saved while it ran.
        e.state_class = Some(StateClass::Checkpointed);
        assert!(matches!(
            decide(&e, &all(1)),
            Decision::Continue {
                from_saved: false,
                ..
            }
        ));
    }

    fn ended_from(bits: u16, which: u8) -> Ended {
        let proofs = [
            "squeue shows job 7 TIMEOUT",
            "squeue shows job 7 PREEMPTED",
            "squeue shows job 7 NODE_FAIL",
            "squeue shows job 7 COMPLETED",
            "squeue shows job 7 CANCELLED",
            "job 7: Invalid job id",
        ];
        let classes = [
            None,
            Some(StateClass::Sealed),
            Some(StateClass::CrashClassPartial),
            Some(StateClass::Checkpointed),
            Some(StateClass::Empty),
        ];
        let bit = |n: u16| bits & (1 << n) != 0;
        Ended {
            terminal_proof: proofs[usize::from(which) % proofs.len()].to_owned(),
            node_lost: bit(0).then(|| "node n2 lost".to_owned()),
            allocation_ended: bit(1).then(|| "squeue shows job 9 TIMEOUT".to_owned()),
            deadline_signalled: bit(2),
            checkpoint_declared: bit(3),
            supervisor_finished: bit(7),
            term_from_outside: bit(9),
            state_class: classes[usize::from(bits >> 8) % classes.len()],
            published: bit(4).then(|| ("/p".to_owned(), "00".to_owned())),
            saved: bit(11).then(|| ("/p-checkpoint-1".to_owned(), "01".to_owned())),
            stopped: bit(5),
            trial_judged: bit(6),
            allocation_runs: bit(10),
        }
    }

    quickcheck! {
        /// A continuation needs every condition: not stopped, no trial judged, a cause proven
        /// and asked for, a continuation left, a checkpoint (or, allowed, a crash-class state,
        /// said so), a publication.
        fn prop_continued_only_with_every_condition(bits: u16, which: u8, left: u8, mask: u8, crashed: bool) -> bool {
            let e = ended_from(bits, which);
            let causes: Vec<Cause> = Cause::ALL.into_iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c).collect();
            let asked = Asked { continues_left: u32::from(left % 3), causes: causes.clone(), crashed };
            match decide(&e, &asked) {
                Decision::Continue { cause: c, from_crash_class, from_saved, .. } => {
                    let ok_class = match e.state_class {
                        Some(StateClass::Checkpointed) => !from_crash_class,
                        Some(StateClass::Sealed) => e.checkpoint_declared && !from_crash_class,
                        Some(StateClass::CrashClassPartial) => crashed && from_crash_class,
                        _ => false,
                    };
                    // From its end's publication, or else from a checkpoint it saved while
                    // running (never a crash-class state then).
                    let ok_from = if from_saved {
                        e.saved.is_some() && !from_crash_class
                    } else {
                        ok_class && e.published.is_some()
                    };
                    !e.stopped && !e.trial_judged && causes.contains(&c) && asked.continues_left > 0
                        && ok_from && cause(&e).map(|x| x.0) == Some(c)
                }
                Decision::Refuse(_) | Decision::Wait(_) => true,
            }
        }

        /// A pool worker a SIGTERM from outside ended is decided only once Slurm names why
        /// (its end's state, its node lost, its allocation's end) or its own deadline does:
        /// until then it waits, and its cause is never the fallback `checkpoint`.
        fn prop_a_term_from_outside_in_a_pool_waits_for_slurms_word(bits: u16, which: u8) -> bool {
            let mut e = ended_from(bits, which);
            (e.allocation_runs, e.term_from_outside) = (true, true);
            let named = e.node_lost.is_some() || e.allocation_ended.is_some()
                || e.deadline_signalled || cause_in(&e.terminal_proof).is_some();
            match decide(&e, &all(1)) {
                Decision::Continue { cause, .. } => named && cause != Cause::Checkpoint,
                Decision::Wait(_) => !named && !e.stopped && !e.trial_judged,
                Decision::Refuse(_) => named || e.stopped || e.trial_judged,
            }
        }

        /// A run that only finished (COMPLETED, nothing in its journal, no node or allocation
        /// lost) is never continued: no cause is guessed.
        fn prop_no_cause_is_guessed(bits: u16, left: u8) -> bool {
            let mut e = ended_from(bits, 3);
            e.node_lost = None;
            e.allocation_ended = None;
            e.deadline_signalled = false;
            e.checkpoint_declared = false;
            !matches!(decide(&e, &all(u32::from(left))), Decision::Continue { .. })
        }
    }

    /// The 24.11 CI failure of stop 42: a pool worker Slurm TERMed in a preemption's grace
    /// saved, declared a checkpoint and exited 0; a `reconcile` that did not see the grace (the
    /// job listed COMPLETING as the grace ended) decided it before the allocation's end was
    /// recorded, and its cause came out `checkpoint` ("after a clean finish"), refused. Its
    /// cause is Slurm's, proven with the allocation's end: until then it waits, undecided.
    #[test]
    fn a_pool_worker_termed_from_outside_waits_for_its_allocations_end() {
        let mut e = Ended {
            checkpoint_declared: true,
            supervisor_finished: true,
            term_from_outside: true,
            allocation_runs: true,
            ..checkpointed("job 394 is listed RUNNING and step 0, seen before, is absent")
        };
        let asked = Asked {
            causes: vec![Cause::Preempted],
            ..all(1)
        };
        match decide(&e, &asked) {
            Decision::Wait(why) => assert!(why.contains("allocation"), "{why}"),
            other => panic!("decided before Slurm proved why: {other:?}"),
        }
        e.allocation_ended = Some("squeue shows job 394 PREEMPTED".into());
        assert!(matches!(
            decide(&e, &asked),
            Decision::Continue {
                cause: Cause::Preempted,
                ..
            }
        ));
        // A `dispatch submit` job ends with its worker (its own end's proof names the cause),
        // and a released pool's end is the release's: decided as before.
        e.allocation_ended = None;
        e.allocation_runs = false;
        assert!(!matches!(decide(&e, &asked), Decision::Wait(_)));
    }

    /// A checkpointed run on node n3, which its pool lost.
    fn on_lost_node() -> Ended {
        Ended {
            node_lost: Some("job 9 is listed RUNNING on n1,n2 and no longer on n3".into()),
            ..checkpointed("ended by the failure of node n3: job 9 is listed RUNNING")
        }
    }

    /// A run that checkpointed and ended on its own before its node failed (both recorded by
    /// one `reconcile`) ended by its checkpoint; one whose supervisor got a TERM from outside,
    /// or did not finish, by its node's failure.
    #[test]
    fn a_run_that_ended_on_its_own_is_not_ended_by_its_nodes_later_failure() {
        let mut e = on_lost_node();
        e.checkpoint_declared = true;
        e.supervisor_finished = true;
        let of = |e: &Ended| cause(e).map(|c| c.0);
        assert_eq!(of(&e), Some(Cause::Checkpoint));
        e.allocation_ended = Some("squeue shows job 9 TIMEOUT".into());
        assert_eq!(
            of(&e),
            Some(Cause::Checkpoint),
            "nor by its allocation's end"
        );
        e.term_from_outside = true;
        assert_eq!(of(&e), Some(Cause::NodeFailure));
        e.term_from_outside = false;
        e.supervisor_finished = false;
        assert_eq!(of(&e), Some(Cause::NodeFailure));
    }

    /// Issue 38's early end: a worker stopped at its early-shutdown deadline, its supervisor
    /// finished, is continued for the time limit even when its pool's allocation is then
    /// recorded over by dispatch's own cancel (CANCELLED): it ended on its own, before it.
    #[test]
    fn a_worker_stopped_at_its_deadline_stays_time_limit_when_its_allocation_is_cancelled() {
        let e = Ended {
            terminal_proof: "job 7 is listed RUNNING and step 0, seen before, is absent".into(),
            allocation_ended: Some("squeue shows job 7 CANCELLED".into()),
            deadline_signalled: true,
            supervisor_finished: true,
            ..Ended::default()
        };
        let (c, proof) = cause(&e).unwrap();
        assert_eq!(c, Cause::TimeLimit);
        assert!(proof.contains("early-shutdown deadline"), "{proof}");
    }

    /// A worker killed with its node (its supervisor too) is refused saying so.
    #[test]
    fn a_worker_whose_supervisor_did_not_finish_is_refused_saying_so() {
        let mut e = on_lost_node();
        e.state_class = None;
        e.published = None;
        let Decision::Refuse(why) = decide(&e, &all(1)) else {
            panic!("continued without a checkpoint");
        };
        assert!(why.starts_with("its supervisor did not finish"), "{why}");
        (e.supervisor_finished, e.term_from_outside) = (true, true);
        assert_eq!(
            decide(&e, &all(1)),
            Decision::Refuse("no state class is recorded in its journal".into())
        );
    }

    #[test]
    fn causes_parse_from_words() {
        assert_eq!(parse_causes(None).unwrap().len(), 5);
        assert_eq!(
            parse_causes(Some("time-limit,preempted,time-limit")).unwrap(),
            [Cause::TimeLimit, Cause::Preempted]
        );
        assert!(parse_causes(Some("timeout")).is_err());
    }
}
