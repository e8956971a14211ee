//! Continuation of `dispatch submit` workers (`--continue N`, issue 37) against the fake Slurm,
//! with the predecessor's own journal written by the test as its supervisor would have: the
//! successor is submitted by `reconcile` only once the predecessor is proven over, with the
//! cause its proof gives, from its publication; once, whatever crashes; never past N; a
//! worker without a checkpoint, or a publication, is refused and recorded.

mod fake_cli;

use dispatch::event::jobs::JobSubmitIntent;
use dispatch::event::pool::WorkerContinued;
use dispatch::event::worker::{CheckpointPublished, PayloadStarted, ResumedFrom};
use dispatch::event::{Event, Sha256Digest, WorkerEvent};
use dispatch::journal::{JournalWriter, Options, Writer};
use dispatch::worker::dirs::WorkerDirs;
use fake_cli::Fake;
use serde_json::{json, Value};
use uuid::Uuid;

fn submit(fake: &Fake, extra: &[&str]) -> Uuid {
    let mut args = vec![
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "long", "--json",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "true"]);
    let (code, out, err) = fake.run(&args);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    r["submission_id"].as_str().unwrap().parse().unwrap()
}

/// What the predecessor's supervisor would have recorded: stopped at its deadline (or not),
/// published (or not), and its state's class.
fn worker_journal(fake: &Fake, id: Uuid, deadline: bool, published: bool, class: &str) -> String {
    let dirs = WorkerDirs::for_job(&fake.state().join("jobs"), id);
    let published_dir = fake
        .state()
        .join("jobs/published")
        .join(format!("long-{id}"))
        .display()
        .to_string();
    let manifest = published.then(|| fake_cli::plant_publication(&published_dir, "long", id));
    fake_cli::supervisor_journal(
        &dirs.evidence,
        deadline,
        manifest.map(|sha| (published_dir.as_str(), sha)),
        class,
    );
    published_dir
}

/// What a continuation's supervisor records before its payload starts: it took up `from`
/// (manifest `sha`), as generation `generation`; then its payload ran.
fn resumed_journal(fake: &Fake, id: Uuid, generation: u32, from: &str, sha: Sha256Digest) {
    let dirs = WorkerDirs::for_job(&fake.state().join("jobs"), id);
    let dir = dispatch::worker::supervisor::journal_dir(&dirs.evidence);
    let w = JournalWriter::<WorkerEvent>::open(&dir, Options::default()).unwrap();
    w.append_one(WorkerEvent::ResumedFrom(ResumedFrom {
        generation,
        from: from.to_owned(),
        manifest_sha256: sha,
        state_from: "state".into(),
        state_files: 1,
        state_bytes: 2,
        head: None,
        took_ms: 3,
    }))
    .unwrap();
    w.append_one(WorkerEvent::PayloadStarted(PayloadStarted { pid: 4242 }))
        .unwrap();
}

fn audit(fake: &Fake) -> (i32, Value) {
    let (code, out, err) = fake.run(&["audit", "--json"]);
    let r = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    (code, r)
}

/// A worker continued once (`--continue 1`): its successor's id, and the publication (its
/// directory and manifest) it was continued from.
fn continued_once(fake: &Fake) -> (Uuid, Uuid, String, Sha256Digest) {
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let first = submit(fake, &["--continue", "1", "--continue-on", "time-limit"]);
    let from = worker_journal(fake, first, true, true, "checkpointed");
    fake.scenario(over_then(77, 78));
    let r = reconcile(fake);
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    let c = &of_kind(fake, "WorkerContinued")[0];
    let second = c["submission_id"].as_str().unwrap().parse().unwrap();
    let sha: String = c["manifest_sha256"].as_str().unwrap().to_owned();
    let sha = Sha256Digest(hex::decode(sha).unwrap().try_into().unwrap());
    (first, second, from, sha)
}

/// An honest chain passes `audit`; a successor whose `ResumedFrom` names another manifest than
/// its predecessor published, or a generation past N, fails it, naming the worker, the
/// generations and what to look at.
#[test]
fn audit_passes_an_honest_chain_and_names_a_tampered_one() {
    let fake = Fake::new();
    let (_, second, from, sha) = continued_once(&fake);
    resumed_journal(&fake, second, 2, &from, sha);
    let (code, r) = audit(&fake);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "ok");

    // The successor's own journal says it took up another manifest.
    let tampered = Fake::new();
    let (first_t, second_t, from_t, _) = continued_once(&tampered);
    resumed_journal(&tampered, second_t, 2, &from_t, Sha256Digest([0x5a; 32]));
    let (code, r) = audit(&tampered);
    assert_eq!(code, 1, "{r}");
    let v = &r["rules"]["violations"][0];
    assert_eq!(v["rule"], "resumed-unverified", "{r}");
    assert_eq!(v["kind"], "WorkerContinued");
    let detail = v["detail"].as_str().unwrap();
    for said in [
        format!("worker long: generation 2 ({second_t})"),
        format!("generation 1 ({first_t})"),
        "records ResumedFrom".to_owned(),
        "manifest 5a5a5a5a5a5a5a5a".to_owned(),
        "`dispatch inspect long`".to_owned(),
    ] {
        assert!(detail.contains(&said), "{said}: {detail}");
    }

    // A third generation past N = 1, appended after the second's proven end.
    worker_journal(&fake, second, true, true, "checkpointed");
    fake.scenario(over_then(78, 79));
    reconcile(&fake);
    let third = Uuid::from_u128(3);
    let (intent, mut receipt) = (second_intent(&fake, second, third), None);
    for e in fake.events() {
        if e["kind"] == "WorkerContinued" {
            receipt = Some(e["event"].clone());
        }
    }
    let mut receipt: WorkerContinued = serde_json::from_value(receipt.unwrap()).unwrap();
    (
        receipt.submission_id,
        receipt.predecessor,
        receipt.generation,
    ) = (third, second, 3);
    let w = Writer::open(&fake.state().join("journal"), Options::default()).unwrap();
    w.append(vec![intent, Event::WorkerContinued(receipt)])
        .unwrap();
    drop(w);
    let (code, r) = audit(&fake);
    assert_eq!(code, 1, "{r}");
    let v = &r["rules"]["violations"][0];
    assert_eq!(v["rule"], "continued-unasked", "{r}");
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!(
            "worker long: generation 3 ({third}) after generation 2 ({second}): past N: the \
             lineage asked 1 continuation(s) and had none left"
        )),
        "{detail}"
    );
}

/// The second generation's intent again, as a third submission `id`'s.
fn second_intent(fake: &Fake, second: Uuid, id: Uuid) -> Event {
    let body = fake
        .events()
        .into_iter()
        .find(|e| {
            e["kind"] == "JobSubmitIntent" && e["event"]["submission_id"] == second.to_string()
        })
        .unwrap()["event"]
        .clone();
    let mut intent: JobSubmitIntent = serde_json::from_value(body).unwrap();
    intent.submission_id = id;
    Event::JobSubmitIntent(intent)
}

/// Job `job` is over, the next sbatch answers `next`.
fn over_then(job: u32, next: u32) -> Value {
    json!({
        "squeue": [{"match": [format!("--jobs={job}")], "stderr": "slurm_load_jobs error: Invalid job id specified\n", "exit": 1}],
        "sbatch": [{"stdout": format!("{next}\n")}],
    })
}

/// The successor's sbatch arguments.
fn successor_sbatch(fake: &Fake) -> Vec<String> {
    fake.calls()
        .into_iter()
        .find(|(c, _)| c == "sbatch")
        .expect("the successor's sbatch")
        .1
}

/// The value the successor's sbatch gave `flag`.
fn successor_flag(fake: &Fake, flag: &str) -> Option<String> {
    let sbatch = successor_sbatch(fake);
    let i = sbatch.iter().position(|a| a == flag)?;
    sbatch.get(i + 1).cloned()
}

fn of_kind(fake: &Fake, kind: &str) -> Vec<Value> {
    fake.events()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .map(|e| e["event"].clone())
        .collect()
}

fn reconcile(fake: &Fake) -> Value {
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).unwrap()
}

#[test]
fn a_job_stopped_at_its_deadline_with_a_checkpoint_is_continued_once_and_the_chain_stops_at_n() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let first = submit(&fake, &["--continue", "1", "--continue-on", "time-limit"]);
    let asked = of_kind(&fake, "ContinuationAsked");
    assert_eq!(asked[0]["continues_left"], 1, "{asked:?}");
    assert_eq!(asked[0]["causes"], json!(["time-limit"]));
    assert_eq!(of_kind(&fake, "JobRequest")[0]["time_s"], 600);

    // Not over yet: nothing is continued, whatever its journal says.
    let from = worker_journal(&fake, first, true, true, "checkpointed");
    fake.scenario(json!({"squeue": [{"match": ["--jobs=77"], "stdout": "77|77|RUNNING|debug|dev|normal|root|1|1|vm|4:00|5:00|2026-11-29T17:00:00|2026-11-29T17:05:00|None|x\n"}]}));
    let r = reconcile(&fake);
    assert!(r.get("continued").is_none(), "{r}");
    assert!(!fake.programs().contains(&"sbatch".to_owned()));

    fake.scenario(over_then(77, 78));
    let r = reconcile(&fake);
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    assert_eq!(r["continued"][0]["generation"], 2);
    let continued = of_kind(&fake, "WorkerContinued");
    assert_eq!(continued.len(), 1);
    let c = &continued[0];
    assert_eq!(c["predecessor"], first.to_string());
    assert_eq!(c["cause"], "time-limit");
    assert!(
        c["proof"]
            .as_str()
            .unwrap()
            .contains("early-shutdown deadline"),
        "{c}"
    );
    assert_eq!(c["published_dir"], from.as_str());
    assert_eq!(c["from_crash_class"], false);
    // The successor's job resumes from the predecessor's publication, as generation 2, with
    // the same name and request; it was submitted only after the proof was recorded.
    let sbatch = successor_sbatch(&fake);
    let after = |flag: &str| successor_flag(&fake, flag);
    assert_eq!(after("--resume-from").as_ref(), Some(&from));
    assert_eq!(after("--generation").as_deref(), Some("2"));
    assert!(after("--resume-state-from")
        .unwrap()
        .contains(&first.to_string()));
    assert!(sbatch.contains(&"--time=00:10:00".to_owned()), "{sbatch:?}");
    let kinds = fake.kinds();
    let terminal = kinds.iter().position(|k| k == "JobTerminal").unwrap();
    let successor = kinds.iter().rposition(|k| k == "JobSubmitIntent").unwrap();
    assert!(terminal < successor, "{kinds:?}");
    // One continuation was asked: the successor asks none.
    assert_eq!(of_kind(&fake, "ContinuationAsked").len(), 1);
    // `inspect` shows the chain, from either generation.
    for key in [first.to_string(), "long".to_owned()] {
        let (code, out, err) = fake.run(&["inspect", &key, "--json"]);
        assert_eq!(code, 0, "{err}");
        let chain = &serde_json::from_str::<Value>(out.trim()).unwrap()["chain"];
        assert_eq!(chain[0]["generation"], 1, "{chain}");
        assert_eq!(chain[0]["job_id"], 77);
        assert_eq!(chain[1]["generation"], 2);
        assert_eq!(chain[1]["job_id"], 78);
        assert_eq!(chain[1]["continued_after"], "time-limit");
        assert_eq!(chain[1]["resumed_from"], from.as_str());
    }
    let (_, text, _) = fake.run(&["inspect", "long"]);
    assert!(text.contains("generation 2: submission"), "{text}");

    // The successor ends the same way: its chain stops at N, and nothing is submitted again.
    let second: Uuid = c["submission_id"].as_str().unwrap().parse().unwrap();
    worker_journal(&fake, second, true, true, "checkpointed");
    fake.scenario(over_then(78, 79));
    let r = reconcile(&fake);
    assert!(r.get("continued").is_none(), "{r}");
    let r = reconcile(&fake);
    assert!(r.get("continued").is_none(), "{r}");
    assert!(!fake.programs().contains(&"sbatch".to_owned()));
    assert_eq!(of_kind(&fake, "WorkerContinued").len(), 1);
}

#[test]
fn a_worker_without_a_checkpoint_or_publication_is_refused_and_recorded() {
    for (class, published, crashed, expect) in [
        ("crash_class_partial", true, false, "crash_class_partial"),
        ("checkpointed", false, false, "no verified publication"),
        ("sealed", true, false, "sealed"),
        ("crash_class_partial", true, true, ""),
    ] {
        let fake = Fake::new();
        fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
        let mut flags = vec!["--continue", "2"];
        if crashed {
            flags.push("--continue-crashed");
        }
        let first = submit(&fake, &flags);
        worker_journal(&fake, first, true, published, class);
        fake.scenario(over_then(77, 78));
        let r = reconcile(&fake);
        let refused = of_kind(&fake, "ContinuationRefused");
        if expect.is_empty() {
            assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
            let c = &of_kind(&fake, "WorkerContinued")[0];
            assert_eq!(c["from_crash_class"], true, "{c}");
            assert!(refused.is_empty());
        } else {
            assert_eq!(r["continued"][0]["outcome"], "refused", "{class}: {r}");
            let reason = refused[0]["reason"].as_str().unwrap();
            assert!(reason.contains(expect), "{class}: {reason}");
            assert_eq!(refused[0]["predecessor"], first.to_string());
            assert!(!fake.programs().contains(&"sbatch".to_owned()));
            // Recorded once, and not decided again.
            let r = reconcile(&fake);
            assert!(r.get("continued").is_none(), "{r}");
        }
    }
}

/// `dispatch jobs` (JSON and table) of the worker of submission `id`; no Slurm call.
fn jobs_row(fake: &Fake, id: Uuid) -> (Value, String) {
    fake.scenario(json!({}));
    let (code, out, err) = fake.run(&["jobs", "--json"]);
    assert_eq!(code, 0, "{err}");
    let (_, text, _) = fake.run(&["jobs"]);
    assert!(fake.calls().is_empty(), "jobs asked Slurm");
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "{line:?} passes 80 columns");
    }
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    let row = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["submission_id"] == id.to_string())
        .cloned()
        .unwrap_or_else(|| panic!("no job {id}: {r}"));
    (row, text)
}

/// Issue 37: `jobs` shows a worker whose continuation is due (its end proven, its successor
/// not yet submitted), then each generation with its lineage; a refusal with its reason.
#[test]
fn jobs_shows_a_due_continuation_each_generation_and_a_refusal() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let first = submit(&fake, &["--continue", "2"]);
    let (row, text) = jobs_row(&fake, first);
    assert_eq!(
        (&row["generation"], &row["continues_left"]),
        (&json!(1), &json!(2)),
        "{row}"
    );
    assert!(text.contains("GEN"), "{text}");
    worker_journal(&fake, first, true, true, "checkpointed");
    fake.scenario(over_then(77, 78));
    fake.crash("continue-before-submit", &["reconcile", "--json"]);
    let (row, text) = jobs_row(&fake, first);
    assert_eq!(
        (&row["state"], &row["continuation"]),
        (&json!("released"), &json!("due")),
        "{row}"
    );
    assert_eq!(row["continuation_why"], Value::Null);
    assert!(text.contains("continuation due"), "{text}");

    fake.scenario(over_then(77, 78));
    let r = reconcile(&fake);
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    let second: Uuid = r["continued"][0]["submission_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let (row, text) = jobs_row(&fake, second);
    assert_eq!(
        (&row["generation"], &row["continues_left"]),
        (&json!(2), &json!(1)),
        "{row}"
    );
    assert_eq!(row["predecessor"], first.to_string());
    let (row, _) = jobs_row(&fake, first);
    assert_eq!(
        (&row["continuation"], &row["successor"]),
        (&json!("continued"), &json!(second.to_string())),
        "{row}"
    );
    assert!(text.contains("continued as generation 2"), "{text}");

    // The second ends without a publication: refused, and the reason is shown.
    worker_journal(&fake, second, true, false, "checkpointed");
    fake.scenario(over_then(78, 79));
    reconcile(&fake);
    let (row, text) = jobs_row(&fake, second);
    assert_eq!(row["continuation"], "refused", "{row}");
    let why = row["continuation_why"].as_str().unwrap();
    assert_eq!(
        why,
        of_kind(&fake, "ContinuationRefused")[0]["reason"],
        "{row}"
    );
    assert!(
        text.contains("continuation refused: no verified publication"),
        "{text}"
    );
}

#[test]
fn a_cause_not_asked_for_or_a_finish_without_a_cause_is_not_continued() {
    for (flags, deadline, expect) in [
        (
            vec!["--continue", "2", "--continue-on", "preempted"],
            true,
            "not asked",
        ),
        (vec!["--continue", "2"], false, "no cause"),
    ] {
        let fake = Fake::new();
        fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
        let first = submit(&fake, &flags);
        worker_journal(&fake, first, deadline, true, "checkpointed");
        fake.scenario(over_then(77, 78));
        reconcile(&fake);
        let refused = of_kind(&fake, "ContinuationRefused");
        assert!(
            refused[0]["reason"].as_str().unwrap().contains(expect),
            "{refused:?}"
        );
    }
}

/// kill -9 at each boundary of a continuation, then `reconcile`: exactly one successor.
#[test]
fn a_crash_at_each_continuation_boundary_gives_exactly_one_successor() {
    // "submit-after-intent" (the successor's receipt without its sbatch) has its own test:
    // its successor is proven never created only after its sbatch's limit has passed.
    for fp in ["continue-before-submit", "continue-after-submit"] {
        let fake = Fake::new();
        fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
        let first = submit(&fake, &["--continue", "3"]);
        worker_journal(&fake, first, true, true, "checkpointed");
        fake.scenario(over_then(77, 78));
        fake.crash(fp, &["reconcile", "--json"]);
        let before = fake.programs().iter().filter(|c| *c == "sbatch").count();
        // The next reconcile: the successor's job (if sbatch ran) is listed running.
        let name = of_kind(&fake, "JobNamed")
            .last()
            .map(|n| n["job_name"].as_str().unwrap().to_owned())
            .unwrap();
        fake.scenario(json!({
            "squeue": [
                {"match": ["--jobs=77"], "stderr": "slurm_load_jobs error: Invalid job id specified\n", "exit": 1},
                {"match": ["--me"], "stdout": if before == 1 { format!("78|78|RUNNING|debug|dev|normal|root|1|1|vm|4:00|5:00|2026-11-29T17:00:00|2026-11-29T17:05:00|None|{name}\n") } else { String::new() }},
                {"match": ["--jobs=78"], "stdout": format!("78|78|RUNNING|debug|dev|normal|root|1|1|vm|4:00|5:00|2026-11-29T17:00:00|2026-11-29T17:05:00|None|{name}\n")},
            ],
            "sacct": [{"stdout": ""}],
            "sbatch": [{"stdout": "78\n"}],
        }));
        reconcile(&fake);
        reconcile(&fake);
        let after = fake.programs().iter().filter(|c| *c == "sbatch").count();
        let continued = of_kind(&fake, "WorkerContinued");
        assert_eq!(continued.len(), 1, "{fp}: {continued:?}");
        assert_eq!(continued[0]["predecessor"], first.to_string());
        assert_eq!(before + after, 1, "{fp}: one successor job");
    }
}

/// kill -9 between the successor's receipt (its `WorkerContinued`) and its sbatch: once a
/// `reconcile` proves that successor never created, the predecessor is due again and the next
/// decision submits exactly one successor job, under a second `WorkerContinued`.
#[test]
fn a_successor_receipt_without_its_sbatch_is_continued_again_once_proven_never_created() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let first = submit(&fake, &["--continue", "3"]);
    worker_journal(&fake, first, true, true, "checkpointed");
    fake.scenario(over_then(77, 78));
    fake.crash("submit-after-intent", &["reconcile", "--json"]);
    assert_eq!(fake.programs().iter().filter(|c| *c == "sbatch").count(), 0);
    let named = of_kind(&fake, "JobNamed").last().cloned().unwrap();
    let lost = named["job_name"].as_str().unwrap().to_owned();
    let limit_s = named["sbatch_limit_s"].as_u64().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(limit_s + 31));
    // A newer job of the user's is listed and the lost name is not: never created.
    let other = "90|90|RUNNING|debug|dev|normal|root|1|1|vm|4:00|5:00|2026-11-29T17:00:00|2026-11-29T17:05:00|None|someone-else\n";
    fake.scenario(json!({
        "squeue": [
            {"match": ["--jobs=77"], "stderr": "slurm_load_jobs error: Invalid job id specified\n", "exit": 1},
            {"match": ["--me"], "stdout": other},
        ],
        "sacct": [{"stdout": ""}],
        "sbatch": [
            {"match": ["--hold"], "stdout": "89\n"},
            {"stdout": "78\n"},
        ],
        "scancel": [{"stdout": ""}],
    }));
    reconcile(&fake);
    // A watermark beacon (held, cancelled at once) may prove it; it is no successor.
    let sbatch = (fake.calls().into_iter())
        .filter(|(c, argv)| c == "sbatch" && !argv.iter().any(|a| a == "--hold"));
    let sbatch: Vec<Vec<String>> = sbatch.map(|(_, argv)| argv).collect();
    assert_eq!(sbatch.len(), 1, "exactly one successor job: {sbatch:?}");
    let name = of_kind(&fake, "JobNamed").last().cloned().unwrap()["job_name"]
        .as_str()
        .unwrap()
        .to_owned();
    let running = format!("78|78|RUNNING|debug|dev|normal|root|1|1|vm|4:00|5:00|2026-11-29T17:00:00|2026-11-29T17:05:00|None|{name}\n");
    fake.scenario(json!({
        "squeue": [
            {"match": ["--jobs=77"], "stderr": "slurm_load_jobs error: Invalid job id specified\n", "exit": 1},
            {"match": ["--me"], "stdout": running.clone()},
            {"match": ["--jobs=78"], "stdout": running},
        ],
        "sacct": [{"stdout": ""}],
    }));
    reconcile(&fake);
    let failed = of_kind(&fake, "JobSubmitFailed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0]["reason"].as_str().unwrap().contains(&lost),
        "{failed:?}"
    );
    let continued = of_kind(&fake, "WorkerContinued");
    assert_eq!(continued.len(), 2, "decided again: {continued:?}");
    assert_eq!(continued[1]["predecessor"], first.to_string());
    assert_eq!(continued[1]["generation"], 2);
    assert!(
        !fake.programs().iter().any(|c| c == "sbatch"),
        "no second successor job"
    );
    let submitted = of_kind(&fake, "JobSubmitted");
    assert_eq!(submitted.len(), 2, "the first's job 77, the successor's 78");
}

#[test]
fn a_refusal_crash_leaves_it_to_be_decided_again() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let first = submit(&fake, &["--continue", "1"]);
    worker_journal(&fake, first, true, false, "checkpointed");
    fake.scenario(over_then(77, 78));
    fake.crash("continue-before-refusal", &["reconcile", "--json"]);
    assert!(of_kind(&fake, "ContinuationRefused").is_empty());
    fake.scenario(over_then(77, 78));
    reconcile(&fake);
    reconcile(&fake);
    assert_eq!(of_kind(&fake, "ContinuationRefused").len(), 1);
}

#[test]
fn the_continue_flags_are_checked_by_the_parser() {
    let fake = Fake::new();
    fake.scenario(json!({}));
    for bad in [
        vec!["--continue", "2", "--continue-on", "timeout"],
        vec!["--continue-on", "preempted"],
        vec!["--continue-crashed"],
    ] {
        let mut args = vec!["submit", "--cpus", "1", "--mem", "100M", "--time", "10"];
        args.extend_from_slice(&bad);
        args.extend_from_slice(&["--", "true"]);
        let (code, _, err) = fake.run(&args);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
    assert!(fake.calls().is_empty());
}

/// A job its node failure ended (squeue: `NODE_FAIL`) left nothing of its end in its journal
/// (the node took its supervisor with it), only the checkpoints its payload asked for while it
/// ran: it is continued from the newest, its state from that checkpoint's own copy.
#[test]
fn a_job_a_node_failure_ended_resumes_from_the_checkpoint_it_saved_while_running() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let first = submit(&fake, &["--continue", "1", "--continue-on", "node-failure"]);
    let dirs = WorkerDirs::for_job(&fake.state().join("jobs"), first);
    let w = JournalWriter::<WorkerEvent>::open(
        &dispatch::worker::supervisor::journal_dir(&dirs.evidence),
        Options::default(),
    )
    .unwrap();
    let saved = fake
        .state()
        .join("jobs/published")
        .join(format!("long-{first}-checkpoint-2"));
    std::fs::create_dir_all(saved.join("state")).unwrap();
    for n in 1..=2 {
        w.append_one(WorkerEvent::CheckpointPublished(CheckpointPublished {
            number: n,
            dir: saved.display().to_string().replace("-2", &format!("-{n}")),
            manifest_sha256: Sha256Digest([n as u8; 32]),
            files: 1,
            bytes: 2,
            took_ms: 3,
            removed: None,
        }))
        .unwrap();
    }
    fake.scenario(json!({
        "squeue": [{"match": ["--jobs=77"], "stdout": "77|77|NODE_FAIL|debug|dev|normal|root|1|1|vm|4:00|5:00|2026-11-29T17:00:00|2026-11-29T17:05:00|None|x\n"}],
        "sbatch": [{"stdout": "78\n"}],
    }));
    let r = reconcile(&fake);
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    let c = &of_kind(&fake, "WorkerContinued")[0];
    assert_eq!(c["cause"], "node-failure", "{c}");
    assert_eq!(c["from_crash_class"], false, "{c}");
    assert_eq!(c["published_dir"], saved.display().to_string(), "{c}");
    assert_eq!(
        successor_flag(&fake, "--resume-state-from"),
        Some(saved.join("state").display().to_string())
    );
}

/// Issue 38, item 3: a job Slurm lists `PREEMPTED` is proven over by that listing, and the
/// continuation's cause is `preempted` from that proof (its journal records no deadline: the
/// SIGTERM was Slurm's), so a worker that asked only for `preempted` is continued.
#[test]
fn a_job_slurm_lists_preempted_is_continued_with_the_cause_preempted() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let first = submit(&fake, &["--continue", "1", "--continue-on", "preempted"]);
    worker_journal(&fake, first, false, true, "checkpointed");
    fake.scenario(json!({
        "squeue": [{"match": ["--jobs=77"], "stdout": "77|77|PREEMPTED|debug|dev|normal|root|1|1|vm|0:00|10:00|2026-11-29T17:00:00|2026-11-29T17:01:30|None|x\n"}],
        "sbatch": [{"stdout": "78\n"}],
    }));
    let r = reconcile(&fake);
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    let terminal = of_kind(&fake, "JobTerminal");
    assert!(
        terminal[0]["proof"].as_str().unwrap().contains("PREEMPTED"),
        "{terminal:?}"
    );
    let continued = of_kind(&fake, "WorkerContinued");
    assert_eq!(continued[0]["cause"], "preempted", "{continued:?}");
}

/// Issue 38, item 4: `reconcile --watch 10 --json` reconciles every 10 s, one JSON document a
/// round on its own line and a summary line a round on stderr; the second round continues the
/// job proven over since the first; SIGTERM ends it after the round in flight, exit 0.
#[test]
fn reconcile_watch_runs_a_round_every_secs_and_sigterm_ends_it_with_exit_0() {
    use std::io::{BufRead, BufReader};
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let first = submit(&fake, &["--continue", "1", "--continue-on", "time-limit"]);
    fake.scenario(json!({"squeue": [{"match": ["--jobs=77"], "stdout": "77|77|RUNNING|debug|dev|normal|root|1|1|vm|4:00|5:00|2026-11-29T17:00:00|2026-11-29T17:05:00|None|x\n"}]}));
    let mut child = fake
        .command(&["reconcile", "--watch", "10", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let t0 = std::time::Instant::now();
    let round1: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(round1["observed"], 1, "{round1}");
    assert!(round1.get("continued").is_none(), "{round1}");
    worker_journal(&fake, first, true, true, "checkpointed");
    fake.scenario(over_then(77, 78));
    let round2: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let between = t0.elapsed();
    assert!(between >= std::time::Duration::from_secs(9), "{between:?}");
    assert_eq!(round2["continued"][0]["outcome"], "continued", "{round2}");
    // SIGTERM while it waits for round 3: it ends before that round, with success.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(rest.is_empty(), "no third round: {rest:?}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let summaries: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("dispatch: reconcile round "))
        .collect();
    assert_eq!(summaries.len(), 2, "{err}");
    assert!(summaries[1].contains("continued 1"), "{err}");
    assert!(summaries[1].contains("next round at"), "{err}");
    assert_eq!(of_kind(&fake, "WorkerContinued").len(), 1);
}

/// Issue 38, item 3: in a preemption's grace Slurm lists the job `RUNNING` with its end pulled
/// forward; `jobs --refresh` then asks `scontrol show job` (only then) and shows it
/// "preempted, ends at …" from `PreemptTime` and `EndTime`, holding its budget; a job whose end
/// is its start plus its limit costs no such call.
#[test]
fn jobs_refresh_shows_a_job_in_its_preemption_grace() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    submit(&fake, &["--continue", "1", "--continue-on", "preempted"]);
    let listed = |end: &str| {
        format!("77|77|RUNNING|debug|dev|normal|root|1|1|vm|9:00|10:00|2026-11-29T17:00:00|{end}|None|x\n")
    };
    let shown = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/slurm/notes-scontrol-show-job-running-alloc.stdout"
    ))
    .unwrap()
    .replace("JobId=1 ", "JobId=77 ")
    .replace(
        "EndTime=2026-11-29T16:22:52",
        "EndTime=2026-11-29T17:01:30 PreemptEligibleTime=2026-11-29T17:00:00 PreemptTime=2026-11-29T17:01:00",
    );
    fake.scenario(json!({
        "squeue": [{"match": ["--jobs=77"], "stdout": listed("2026-11-29T17:01:30")}],
        "scontrol": [{"stdout": shown}],
    }));
    let (code, out, err) = fake.run(&["jobs", "--refresh", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        r["jobs"][0]["preempted"],
        json!({"at": "2026-11-29T17:01:00", "ends_at": "2026-11-29T17:01:30"}),
        "{r}"
    );
    assert_eq!(r["jobs"][0]["active"], true);
    let (code, out, err) = fake.run(&["jobs", "--refresh", "--wide"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("preempted, ends at 17:01:30"), "{out}");

    fake.scenario(json!({
        "squeue": [{"match": ["--jobs=77"], "stdout": listed("2026-11-29T17:10:00")}],
    }));
    let (code, out, err) = fake.run(&["jobs", "--refresh", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["jobs"][0]["preempted"], Value::Null, "{r}");
    assert!(!fake.programs().contains(&"scontrol".to_owned()));
}

/// The report's timeline shows the chain as one worker: one row, a segment per generation;
/// each submission keeps its own item, with its generation and what ended it.
#[test]
fn the_report_draws_a_continued_worker_as_one_row() {
    let fake = Fake::new();
    let (first, second, from, sha) = continued_once(&fake);
    resumed_journal(&fake, second, 2, &from, sha);
    let page = fake.dir.path().join("report.html");
    let page_arg = page.display().to_string();
    for key in [first.to_string(), "long".to_owned(), second.to_string()] {
        let (code, out, err) =
            fake.run(&["report", "--worker", &key, "--json", "--html", &page_arg]);
        assert_eq!(code, 0, "{err}");
        let r: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(
            r["chains"],
            json!([{"chain": first.to_string(), "worker": "long",
                    "generations": [first.to_string(), second.to_string()]}]),
            "{key}"
        );
        let item = |id: Uuid| {
            r["workers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["submission_id"] == id.to_string())
                .unwrap()
                .clone()
        };
        let (one, two) = (item(first), item(second));
        assert_eq!(
            (one["generation"].clone(), two["generation"].clone()),
            (json!(1), json!(2))
        );
        assert_eq!(
            (one["job_id"].clone(), two["job_id"].clone()),
            (json!(77), json!(78))
        );
        assert_eq!(one["chain"], two["chain"]);
        assert_eq!(one["ended_by"], "time-limit");
        assert_eq!(one["continued_as"], second.to_string());
        assert_eq!(one["state_class"], "checkpointed");
        assert_eq!(one["published_dir"], from.as_str());
        assert_eq!(two["resumed_from"], from.as_str());
        assert_eq!(two["ended_by"], Value::Null);
        let html = std::fs::read_to_string(&page).unwrap();
        assert_eq!(html.matches("<g class=\"worker").count(), 1, "{html}");
        assert_eq!(html.matches("<g class=\"generation\"").count(), 2, "{html}");
        assert!(html.contains("long · 2 generations"), "{html}");
        assert!(html.contains("generation 1: submission"), "{html}");
    }
}
