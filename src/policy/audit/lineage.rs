//! The audit's rules over a worker's lineage (issue 37): the generations of one worker, each a
//! submission that continues the one before (`WorkerContinued`, in its intent's commit).
//!
//! While the journal is replayed: one generation live at a time (`continued-while-live`: the
//! successor's intent after its predecessor's proven end, in journal order), each continuation
//! asked for and within N (`continued-unasked`), generations one apart (`generation-skipped`).
//! After the replay, from the worker journals `ops::audit` reads: each generation resumed from
//! a verified publication of the one before (`resumed-unverified`): the receipt's published
//! directory and manifest are the predecessor's own `Published` record, and the successor's
//! `ResumedFrom` names that same manifest. Every message names the worker, both generations
//! (with their submission ids) and what to look at next.

use uuid::Uuid;

use super::{Auditor, Budget};
use crate::event::pool::{ContinuationAsked, WorkerContinued};
use crate::event::worker::ResumedFrom;
use crate::event::{Envelope, Sha256Digest};
use crate::next::Next;

/// What the audit keeps of a worker in a lineage.
#[derive(Debug, Default)]
pub(super) struct Lineage {
    generation: u32,
    asked: Option<ContinuationAsked>,
    /// Its predecessor's continuations left, when it continued one.
    predecessor_left: Option<u32>,
    /// The N its lineage's first generation asked (`--continue N`).
    first_asked: Option<u32>,
    /// The successor that continued it, until that successor is proven never created.
    continued: Option<Uuid>,
}

/// A submission as its intent recorded it.
#[derive(Debug)]
pub(super) struct Submitted {
    seq: u64,
    worker: String,
    pool: Option<String>,
}

/// A continuation as the journal recorded it: what `ops::audit` reads both generations' own
/// journals for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The `WorkerContinued`'s seq.
    pub seq: u64,
    pub worker: String,
    /// The successor's generation.
    pub generation: u32,
    pub predecessor: Uuid,
    /// `None`: a `dispatch submit` worker (its own job).
    pub predecessor_pool: Option<String>,
    pub successor: Uuid,
    pub successor_pool: Option<String>,
    pub published_dir: Option<String>,
    pub manifest_sha256: Option<Sha256Digest>,
}

/// What one generation's own journal says, as `ops::audit` read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerationJournal {
    /// Where it is, for the message.
    pub path: String,
    /// It could not be read (damaged, not ours): why.
    pub unreadable: Option<String>,
    /// Its `Published` record: the directory and its manifest's SHA-256.
    pub published: Option<(String, Sha256Digest)>,
    /// Its newest `CheckpointPublished` (a checkpoint published while it ran), likewise.
    pub saved: Option<(String, Sha256Digest)>,
    pub resumed: Option<ResumedFrom>,
    /// Its payload started (or ended): a continuation must have taken up its predecessor's
    /// work before that.
    pub payload_started: bool,
}

const KIND: &str = "WorkerContinued";

/// The first 16 hex digits of a manifest's SHA-256, as messages show it.
fn short(sha: &Sha256Digest) -> String {
    hex::encode(&sha.0[..8])
}

impl Auditor {
    /// The intent of submission `id`, by the worker `worker` (in `pool`, or its own job).
    pub(super) fn submitted_as(
        &mut self,
        env: &Envelope,
        id: Uuid,
        worker: &str,
        pool: Option<&str>,
    ) {
        self.submitted.entry(id).or_insert_with(|| Submitted {
            seq: env.seq,
            worker: worker.to_owned(),
            pool: pool.map(str::to_owned),
        });
    }

    /// Where submission `id`'s budget was released (by proof, a definite failure or an
    /// override), if it was.
    fn released_at(&self, id: &Uuid) -> Option<u64> {
        let budget = self
            .workers
            .get(id)
            .map(|(_, b)| *b)
            .or(self.jobs.get(id).copied());
        match budget {
            Some(Budget::Released { seq }) => Some(seq),
            _ => None,
        }
    }

    fn name_of(&self, id: &Uuid) -> String {
        self.submitted
            .get(id)
            .map_or_else(|| id.to_string(), |s| s.worker.clone())
    }

    /// Submission `id` definitely failed, nothing of it created: if it continued a worker, that
    /// worker may be continued again (its first successor never ran beside a second).
    pub(super) fn never_created(&mut self, id: Uuid) {
        for l in self.continuations.values_mut() {
            if l.continued == Some(id) {
                l.continued = None;
            }
        }
    }

    /// The continuations seen, in journal order: `ops::audit` reads both generations' own
    /// journals for each and hands them to [`Auditor::resumed`].
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// `continued-while-live`, `continued-unasked`, `generation-skipped`.
    pub(super) fn continued(&mut self, env: &Envelope, e: &WorkerContinued) {
        let worker = self.name_of(&e.predecessor);
        let before = self.continuations.entry(e.predecessor).or_default();
        let generation = before.generation.max(1);
        let pair = format!(
            "worker {worker}: generation {} ({}) after generation {generation} ({})",
            e.generation, e.submission_id, e.predecessor
        );
        let look = format!(
            "{} shows the chain, {} the receipts",
            Next::Inspect(&worker),
            Next::JournalDump(Some(&KIND))
        );
        self.one_live_at_a_time(env, e, &pair, &look);
        self.asked_for(env, e, &pair, &look);
        if e.generation != generation + 1 {
            self.flag(
                env,
                "generation-skipped",
                format!("{pair}: not one generation apart; {look}"),
            );
        }
        let pool = |id: &Uuid| self.submitted.get(id).and_then(|s| s.pool.clone());
        let link = Link {
            seq: env.seq,
            worker,
            generation: e.generation,
            predecessor: e.predecessor,
            predecessor_pool: pool(&e.predecessor),
            successor: e.submission_id,
            successor_pool: pool(&e.submission_id),
            published_dir: e.published_dir.clone(),
            manifest_sha256: e.manifest_sha256,
        };
        self.links.push(link);
    }

    /// `continued-while-live`: the successor's intent comes after its predecessor's proven end.
    fn one_live_at_a_time(&mut self, env: &Envelope, e: &WorkerContinued, pair: &str, look: &str) {
        let intent = self
            .submitted
            .get(&e.submission_id)
            .map_or(env.seq, |s| s.seq);
        let why = match self.released_at(&e.predecessor) {
            Some(end) if end < intent => return,
            Some(end) => format!(
                "its intent (seq {intent}) came before the proven end of the generation it \
                 continues (seq {end}): two generations were live at once"
            ),
            None => format!(
                "no proven end of the generation it continues (JobTerminal, WorkerTerminal or a \
                 release with proof) before its intent (seq {intent})"
            ),
        };
        self.flag(
            env,
            "continued-while-live",
            format!("{pair}: {why}; {look}"),
        );
    }

    /// `continued-unasked`: the predecessor asked for this continuation (`ContinuationAsked`),
    /// had one left of N, for this cause, from a crash-class state only if allowed; and it is
    /// continued once.
    fn asked_for(&mut self, env: &Envelope, e: &WorkerContinued, pair: &str, look: &str) {
        let before = self.continuations.entry(e.predecessor).or_default();
        let (asked, n) = (before.asked.clone(), before.first_asked);
        let twice = before.continued.replace(e.submission_id).is_some();
        let why = match &asked {
            _ if twice => Some("its predecessor was already continued".to_owned()),
            // A successor asks what is left of N; with none left it asks nothing.
            None
            | Some(ContinuationAsked {
                continues_left: 0, ..
            }) if n.is_some() => Some(format!(
                "past N: the lineage asked {} continuation(s) and had none left",
                n.unwrap_or_default()
            )),
            None => Some("its predecessor asked for no continuation".to_owned()),
            Some(a) if a.continues_left == 0 => {
                Some("its predecessor had no continuation left".to_owned())
            }
            Some(a) if !a.causes.contains(&e.cause) => Some(format!(
                "its predecessor did not ask to be continued after {} (asked: {})",
                e.cause,
                a.causes.join(", ")
            )),
            Some(a) if e.from_crash_class && !a.crashed => Some(
                "it resumes from a crash-class state, and --continue-crashed was not asked"
                    .to_owned(),
            ),
            Some(_) => None,
        };
        if let Some(why) = why {
            self.flag(env, "continued-unasked", format!("{pair}: {why}; {look}"));
        }
        let next = self.continuations.entry(e.submission_id).or_default();
        next.generation = e.generation;
        next.predecessor_left = asked.map(|a| a.continues_left);
        next.first_asked = n;
    }

    /// `generation-skipped`: a successor asks at most one continuation fewer than its
    /// predecessor had left.
    pub(super) fn continuation_asked(&mut self, env: &Envelope, e: &ContinuationAsked) {
        let worker = self.name_of(&e.submission_id);
        let entry = self.continuations.entry(e.submission_id).or_default();
        entry.asked = Some(e.clone());
        match entry.predecessor_left {
            None => {
                entry.first_asked.get_or_insert(e.continues_left);
            }
            Some(left) if e.continues_left >= left => {
                let generation = entry.generation;
                self.flag(
                    env,
                    "generation-skipped",
                    format!(
                        "worker {worker}: generation {generation} ({}) asks {} continuation(s); \
                         the generation before it had {left} left; {} shows the chain",
                        e.submission_id,
                        e.continues_left,
                        Next::Inspect(&worker)
                    ),
                );
            }
            Some(_) => {}
        }
    }

    /// `resumed-unverified`: the continuation `link` did not resume from a verified publication
    /// of its predecessor, as the two generations' own journals (`before`, `after`) say.
    pub fn resumed(&mut self, link: &Link, before: &GenerationJournal, after: &GenerationJournal) {
        let problems = resumption_problems(link, before, after);
        if problems.is_empty() {
            return;
        }
        let detail = format!(
            "worker {}: generation {} ({}) did not resume from a verified publication of \
             generation {} ({}): {}; {} shows the chain, and the worker journals are the evidence",
            link.worker,
            link.generation,
            link.successor,
            link.generation.saturating_sub(1),
            link.predecessor,
            problems.join("; "),
            Next::Inspect(&link.worker)
        );
        self.flag_at(link.seq, KIND, "resumed-unverified", detail);
    }
}

/// What is wrong with a continuation's publication, each said in a few words (none: sound).
pub fn resumption_problems(
    link: &Link,
    before: &GenerationJournal,
    after: &GenerationJournal,
) -> Vec<String> {
    let (g, p) = (link.generation, link.generation.saturating_sub(1));
    let mut problems = Vec::new();
    let (Some(dir), Some(sha)) = (&link.published_dir, &link.manifest_sha256) else {
        return vec![format!(
            "its receipt (seq {}) names no publication",
            link.seq
        )];
    };
    let names =
        |x: &Option<(String, Sha256Digest)>| x.as_ref().is_some_and(|(d, s)| d == dir && s == sha);
    match (
        &before.unreadable,
        before.published.as_ref().or(before.saved.as_ref()),
    ) {
        (Some(why), _) => problems.push(format!(
            "generation {p}'s worker journal {} cannot be read: {why}",
            before.path
        )),
        (None, None) => problems.push(format!(
            "generation {p}'s worker journal {} records no Published nor CheckpointPublished",
            before.path
        )),
        (None, Some((d, s))) if !names(&before.published) && !names(&before.saved) => problems
            .push(format!(
                "generation {p} published {d} (manifest {}), its receipt names {dir} \
                 (manifest {})",
                short(s),
                short(sha)
            )),
        (None, Some(_)) => {}
    }
    match (&after.unreadable, &after.resumed) {
        (Some(why), _) => problems.push(format!(
            "generation {g}'s worker journal {} cannot be read: {why}",
            after.path
        )),
        (None, Some(r)) if &r.from != dir || &r.manifest_sha256 != sha || r.generation != g => {
            problems.push(format!(
                "generation {g}'s worker journal {} records ResumedFrom {} (manifest {}, \
                 generation {}), not {dir} (manifest {}, generation {g}) as its receipt says",
                after.path,
                r.from,
                short(&r.manifest_sha256),
                r.generation,
                short(sha)
            ))
        }
        (None, None) if after.payload_started => problems.push(format!(
            "generation {g}'s payload started with no ResumedFrom in its worker journal {}",
            after.path
        )),
        _ => {}
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::super::tests::{attach, intent, rules, run, terminal};
    use super::*;
    use crate::event::pool::*;
    use crate::event::Event;

    fn asked(id: u128, left: u32) -> Event {
        Event::ContinuationAsked(ContinuationAsked {
            submission_id: Uuid::from_u128(id),
            continues_left: left,
            causes: vec!["time-limit".into()],
            crashed: false,
        })
    }

    fn continued(id: u128, predecessor: u128, generation: u32, cause: &str) -> Event {
        Event::WorkerContinued(WorkerContinued {
            submission_id: Uuid::from_u128(id),
            predecessor: Uuid::from_u128(predecessor),
            generation,
            cause: cause.into(),
            proof: "squeue shows job 7 TIMEOUT".into(),
            published_dir: None,
            manifest_sha256: None,
            from_crash_class: false,
        })
    }

    #[test]
    fn a_lineage_is_one_generation_at_a_time_each_asked_for() {
        let good = run(vec![
            attach(),
            intent(1),
            asked(1, 2),
            terminal(1, "squeue shows job 1 TIMEOUT"),
            intent(2),
            continued(2, 1, 2, "time-limit"),
            asked(2, 1),
        ]);
        assert_eq!(rules(&good), Vec::<&str>::new());
        let bad = run(vec![
            attach(),
            intent(1),
            asked(1, 1),
            intent(2),
            continued(2, 1, 2, "time-limit"),
            asked(2, 1),
            terminal(1, "gone"),
            intent(3),
            continued(3, 1, 3, "preempted"),
        ]);
        assert_eq!(
            rules(&bad),
            [
                "continued-while-live",
                "generation-skipped",
                "continued-unasked",
                "generation-skipped",
            ]
        );
    }

    /// A successor proven never created (nothing of it ran) lets its predecessor be continued
    /// again; two successors that could both have run are still flagged.
    #[test]
    fn a_second_successor_is_allowed_only_after_the_first_was_proven_never_created() {
        let lost_then_again = |failed: Option<bool>| {
            let mut events = vec![
                attach(),
                intent(1),
                asked(1, 2),
                terminal(1, "squeue shows job 1 TIMEOUT"),
                intent(2),
                continued(2, 1, 2, "time-limit"),
                asked(2, 1),
            ];
            events.extend(failed.map(|definite| {
                Event::WorkerLaunchFailed(WorkerLaunchFailed {
                    submission_id: Uuid::from_u128(2),
                    definite,
                    reason: "no step of it ever ran".into(),
                })
            }));
            events.extend([intent(3), continued(3, 1, 2, "time-limit"), asked(3, 1)]);
            run(events)
        };
        assert_eq!(rules(&lost_then_again(Some(true))), Vec::<&str>::new());
        assert_eq!(rules(&lost_then_again(Some(false))), ["continued-unasked"]);
        let both = lost_then_again(None);
        assert_eq!(rules(&both), ["continued-unasked"]);
        assert!(details(&both)[0].contains("already continued"));
    }

    fn details(f: &super::super::Findings) -> Vec<&str> {
        f.violations.iter().map(|v| v.detail.as_str()).collect()
    }

    #[test]
    fn a_successor_submitted_before_its_predecessor_s_proven_end_is_two_generations_live() {
        // The receipt comes after the end, but the intent before it: the audit of old passed it.
        let f = run(vec![
            attach(),
            intent(1),
            asked(1, 2),
            intent(2),
            terminal(1, "squeue shows job 1 TIMEOUT"),
            continued(2, 1, 2, "time-limit"),
        ]);
        assert_eq!(rules(&f), ["continued-while-live"]);
        let d = details(&f)[0];
        let (one, two) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert!(
            d.starts_with(&format!(
                "worker w: generation 2 ({two}) after generation 1 ({one}): its intent (seq 4) \
                 came before the proven end"
            )),
            "{d}"
        );
        assert!(d.contains("`dispatch inspect w` shows the chain"), "{d}");
    }

    #[test]
    fn a_generation_past_n_or_for_a_cause_or_state_not_asked_names_the_worker_and_why() {
        let past_n = run(vec![
            attach(),
            intent(1),
            asked(1, 1),
            terminal(1, "gone"),
            intent(2),
            continued(2, 1, 2, "time-limit"),
            asked(2, 0),
            terminal(2, "gone"),
            intent(3),
            continued(3, 2, 3, "time-limit"),
        ]);
        assert_eq!(rules(&past_n), ["continued-unasked"]);
        let d = details(&past_n)[0];
        assert!(d.starts_with("worker w: generation 3 ("), "{d}");
        assert!(
            d.contains("after generation 2 (") && d.contains("past N: the lineage asked 1"),
            "{d}"
        );
        let crashed = |cause: &str| {
            let mut c = continued(2, 1, 2, cause);
            if let Event::WorkerContinued(c) = &mut c {
                c.from_crash_class = true;
            }
            run(vec![
                attach(),
                intent(1),
                asked(1, 3),
                terminal(1, "gone"),
                intent(2),
                c,
            ])
        };
        let d = crashed("preempted").violations[0].detail.clone();
        assert!(
            d.contains("did not ask to be continued after preempted (asked: time-limit)"),
            "{d}"
        );
        let d = crashed("time-limit").violations[0].detail.clone();
        assert!(d.contains("--continue-crashed was not asked"), "{d}");
    }

    fn link() -> Link {
        Link {
            seq: 6,
            worker: "w".into(),
            generation: 2,
            predecessor: Uuid::from_u128(1),
            predecessor_pool: None,
            successor: Uuid::from_u128(2),
            successor_pool: None,
            published_dir: Some("/s/jobs/published/w-1".into()),
            manifest_sha256: Some(Sha256Digest([0x11; 32])),
        }
    }

    fn published(sha: u8) -> GenerationJournal {
        GenerationJournal {
            path: "/s/jobs/1/evidence/journal".into(),
            published: Some(("/s/jobs/published/w-1".into(), Sha256Digest([sha; 32]))),
            ..GenerationJournal::default()
        }
    }

    fn resumed(sha: u8, generation: u32) -> GenerationJournal {
        GenerationJournal {
            path: "/s/jobs/2/evidence/journal".into(),
            resumed: Some(ResumedFrom {
                generation,
                from: "/s/jobs/published/w-1".into(),
                manifest_sha256: Sha256Digest([sha; 32]),
                state_from: "/s/jobs/1/state".into(),
                state_files: 1,
                state_bytes: 2,
                head: None,
                took_ms: 3,
            }),
            payload_started: true,
            ..GenerationJournal::default()
        }
    }

    #[test]
    fn a_continuation_resumes_from_the_publication_its_predecessor_recorded() {
        let problems = |before: &GenerationJournal, after: &GenerationJournal| {
            resumption_problems(&link(), before, after)
        };
        assert_eq!(
            problems(&published(0x11), &resumed(0x11, 2)),
            Vec::<String>::new()
        );
        // Not started yet (or refused before its payload): nothing to take up yet.
        let waiting = GenerationJournal::default();
        assert_eq!(problems(&published(0x11), &waiting), Vec::<String>::new());
        let p = problems(&published(0x11), &resumed(0x22, 2));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("records ResumedFrom /s/jobs/published/w-1 (manifest 2222222222222222")
                && p[0].contains("not /s/jobs/published/w-1 (manifest 1111111111111111"),
            "{p:?}"
        );
        let p = problems(&published(0x11), &resumed(0x11, 3));
        assert!(p[0].contains("generation 3), not"), "{p:?}");
        let p = problems(&published(0x33), &resumed(0x11, 2));
        assert!(
            p[0].starts_with("generation 1 published /s/jobs/published/w-1 (manifest 3333"),
            "{p:?}"
        );
        let silent = GenerationJournal {
            path: "/s/jobs/1/evidence/journal".into(),
            ..GenerationJournal::default()
        };
        let p = problems(&silent, &resumed(0x11, 2));
        assert_eq!(
            p,
            [
                "generation 1's worker journal /s/jobs/1/evidence/journal records no Published \
                 nor CheckpointPublished"
            ]
        );
        // A checkpoint it published while it ran (a node failure took its end with it).
        let saved = |sha: u8| GenerationJournal {
            saved: published(sha).published,
            ..silent.clone()
        };
        assert_eq!(
            problems(&saved(0x11), &resumed(0x11, 2)),
            Vec::<String>::new()
        );
        let p = problems(&saved(0x33), &resumed(0x11, 2));
        assert!(p[0].contains("(manifest 3333"), "{p:?}");
        let started_bare = GenerationJournal {
            payload_started: true,
            ..GenerationJournal::default()
        };
        let p = problems(&published(0x11), &started_bare);
        assert!(
            p[0].contains("payload started with no ResumedFrom"),
            "{p:?}"
        );
        let mut bare = link();
        bare.manifest_sha256 = None;
        let p = resumption_problems(&bare, &published(0x11), &resumed(0x11, 2));
        assert_eq!(p, ["its receipt (seq 6) names no publication"]);
    }

    #[test]
    fn an_unverified_resumption_is_a_violation_at_its_receipt() {
        let mut a = Auditor::default();
        a.resumed(&link(), &published(0x11), &resumed(0x11, 2));
        a.resumed(&link(), &published(0x11), &resumed(0x22, 2));
        let f = a.finish();
        assert_eq!(f.violation_count, 1);
        let v = &f.violations[0];
        assert_eq!(
            (v.seq, v.kind, v.rule),
            (6, "WorkerContinued", "resumed-unverified")
        );
        assert!(
            v.detail.starts_with(&format!(
                "worker w: generation 2 ({}) did not resume from a verified publication of \
                 generation 1 ({}): generation 2's worker journal",
                Uuid::from_u128(2),
                Uuid::from_u128(1)
            )),
            "{}",
            v.detail
        );
        assert!(v.detail.contains("`dispatch inspect w`"), "{}", v.detail);
    }
}
