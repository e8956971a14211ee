//! `dispatch journal …`: argument definitions and rendering.

use crate::statedir::Checked;
use std::io::Write;

use clap::Subcommand;

use super::exit::{self, Failure};
use super::output::{self, emit, print_json};
use crate::ops::journal as ops;
use crate::policy::audit::AuditStatus;

#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// Create the state directory and the journal if absent (idempotent)
    #[command(after_help = "Examples:\n  \
        dispatch journal init\n  \
        dispatch --state-dir /scratch/me/dispatch journal init --json")]
    Init,
    /// Classify the journal: exit 0 clean, 1 torn tail (repairable), 5 corrupt or tampered
    #[command(after_help = "Examples:\n  \
        dispatch journal verify\n  \
        dispatch journal verify --json | jq .status")]
    Verify,
    /// Print events (JSON Lines with --json)
    #[command(after_help = "Examples:\n  \
        dispatch journal dump --from 100 --to 120\n  \
        dispatch journal dump --json | jq -c 'select(.kind == \"WorkerSubmitIntent\")'\n  \
        dispatch journal dump --worker w1 --kind WorkerExited --since \"2026-12-01 10:00\"")]
    Dump {
        /// First seq to print
        #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(u64).range(1..))]
        from: Option<u64>,
        /// Last seq to print
        #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(u64).range(1..))]
        to: Option<u64>,
        /// Only events about this worker (by name or submission id)
        #[arg(long, value_parser = crate::names::arg::path_name("worker"))]
        worker: Option<String>,
        /// Only events about this pool or its workers
        #[arg(long, value_parser = crate::names::arg::path_name("pool"))]
        pool: Option<String>,
        /// Only events of this kind (repeatable: any of them), as dump prints kinds
        #[arg(long, value_name = "KIND", value_parser = crate::policy::journal_filter::known_kind)]
        kind: Vec<String>,
        /// Only events recorded at or after TIME (RFC 3339, or YYYY-MM-DD HH:MM[:SS] local)
        #[arg(long, value_name = "TIME", value_parser = super::replay::time_arg)]
        since: Option<crate::event::Micros>,
        /// Only events recorded at or before TIME
        #[arg(long, value_name = "TIME", value_parser = super::replay::time_arg)]
        until: Option<crate::event::Micros>,
    },
    /// Cut a torn tail (kept aside as a file) and record a Recovered event, or merge a forked
    /// journal keeping every event (the segment as it was is kept aside too)
    #[command(after_help = "Examples:\n  \
        dispatch journal verify || dispatch journal repair")]
    Repair,
}

pub fn run(cmd: &JournalCommand, checked: &Checked, json: bool) -> Result<u8, Failure> {
    match cmd {
        JournalCommand::Init => {
            checked.prepare()?;
            let r = ops::init(&checked.journal_dir())?;
            if json {
                print_json(&r)?;
            } else if r.created {
                crate::outln!("created journal {} in {}", r.journal_id, r.path.display());
            } else {
                crate::outln!(
                    "journal {} already exists in {}",
                    r.journal_id,
                    r.path.display()
                );
            }
            Ok(exit::OK)
        }
        JournalCommand::Verify => run_verify(checked, json),
        JournalCommand::Dump {
            from,
            to,
            worker,
            pool,
            kind,
            since,
            until,
        } => {
            let filter = crate::policy::journal_filter::Filter::new(
                worker.clone(),
                pool.clone(),
                kind.clone(),
                *since,
                *until,
            );
            run_dump(checked, *from, *to, filter, json)
        }
        JournalCommand::Repair => run_repair(checked, json),
    }
}

/// `dispatch journal repair`: cut a torn tail, or merge a fork.
fn run_repair(checked: &Checked, json: bool) -> Result<u8, Failure> {
    let dir = checked.journal_dir();
    let r = ops::repair(&dir)?;
    if json {
        print_json(&r)?;
    } else if let Some(m) = &r.merged {
        crate::outln!(
            "merged a fork: {} events of {} branches that forked after seq {} now follow \
             the JournalMerged event, each with its own id; {} as it was is kept in {}",
            m.events,
            m.branches.len(),
            m.common_seq,
            m.segment,
            m.saved_as
        );
    } else if let Some(rec) = &r.recovered {
        crate::outln!(
            "cut {} bytes at {} offset {} ({}); kept them in {}",
            rec.length,
            rec.segment,
            rec.offset,
            rec.reason,
            rec.saved_as
        );
    } else {
        crate::outln!("the journal is clean; nothing to repair");
    }
    Ok(exit::OK)
}

/// `dispatch journal verify`: exit 0 clean, 1 a torn tail, 5 damage (a fork too).
fn run_verify(checked: &Checked, json: bool) -> Result<u8, Failure> {
    let dir = checked.journal_dir();
    let r = ops::verify(&dir)?;
    emit(json, &r, || {
        crate::outln!(
            "{}: {} events, last seq {}, head {}",
            r.status,
            r.events,
            r.last_seq,
            r.head
        );
        if let Some(d) = &r.damage {
            crate::outln!(
                "damage: {} at {} offset {} ({} bytes)",
                d.reason,
                d.segment,
                d.offset,
                d.bytes
            );
            if let Some(fork) = &r.fork {
                for b in &fork.branches {
                    crate::outln!(
                        "branch: after seq {}, seq {}..{} ({} events) from offset {}, tip {}",
                        b.forked_after_seq,
                        b.first_seq,
                        b.last_seq,
                        b.events,
                        b.first_offset,
                        b.tip
                    );
                }
            }
            match r.status {
                crate::journal::Status::TornTail => {
                    crate::outln!("next: `dispatch journal repair` cuts the torn tail (any write does it too)")
                }
                crate::journal::Status::Forked => crate::outln!(
                    "next: `dispatch journal repair` merges the branches keeping every event \
                     (dispatch refuses to write until then)"
                ),
                _ => crate::outln!(
                    "next: dispatch refuses to write; keep a copy of {} and inspect the damage",
                    dir.display()
                ),
            }
        }
    })?;
    Ok(match r.status {
        crate::journal::Status::Clean => exit::OK,
        crate::journal::Status::TornTail => exit::FAILED,
        _ => exit::DAMAGED,
    })
}

/// `dispatch journal dump`: the events from seq `from` to `to` that pass `filter`, one a line.
fn run_dump(
    checked: &Checked,
    from: Option<u64>,
    to: Option<u64>,
    mut filter: crate::policy::journal_filter::Filter,
    json: bool,
) -> Result<u8, Failure> {
    let dir = &checked.journal_dir();
    let from = from.unwrap_or(1);
    let to = to.unwrap_or(u64::MAX);
    if from > to {
        return Err(Failure::new(
            exit::USAGE,
            format!("--from {from} is after --to {to}"),
        ));
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let scan = ops::dump_filtered(dir, from, to, &mut filter, |env| {
        let written = if json {
            serde_json::to_writer(&mut out, &ops::DumpLine::from_envelope(env))
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
        } else {
            let (kind, body) = ops::named_body(env);
            writeln!(
                out,
                "{:>8} {} {:<22} {}",
                env.seq,
                short_time(&env.time.to_rfc3339()),
                kind,
                readable(&body)
            )
        };
        if let Err(e) = written {
            output::stdout_failed(e);
        }
        Ok(())
    })?;
    if let Err(e) = out.flush() {
        output::stdout_failed(e);
    }
    if let Some(d) = scan.damage() {
        eprintln!(
            "dispatch: the journal is {} at {} offset {}: {}; events after it are not shown. \
             Run `dispatch journal verify`",
            scan.status().as_str(),
            d.segment,
            d.offset,
            d.reason
        );
        return Ok(if scan.status() == crate::journal::Status::TornTail {
            exit::FAILED
        } else {
            exit::DAMAGED
        });
    }
    if let Some(worker) = filter.worker_never_named() {
        let not_found = crate::ops::inspect::InspectError::NotFound(worker.to_owned());
        return Err(Failure::new(exit::REFUSED, not_found.to_string()));
    }
    Ok(exit::OK)
}

pub fn run_audit(checked: &Checked, json: bool) -> Result<u8, Failure> {
    let r = crate::ops::audit::audit(checked)?;
    emit(json, &r, || {
        crate::outln!(
            "audit: {} ({} events, journal {}, head {})",
            r.status,
            r.journal.events,
            r.journal.status,
            r.journal.head
        );
        if let Some(e) = &r.reducers.error {
            crate::outln!("  reducers stopped: {e}");
        }
        if let Some(f) = &r.rules {
            print_audit_rules(f);
        }
        if let Some(s) = &r.snapshot {
            match (s.seq, s.agrees) {
                (Some(seq), true) => {
                    crate::outln!("  snapshot at seq {seq} agrees with the full replay")
                }
                (Some(seq), false) => {
                    crate::outln!("  snapshot at seq {seq} DISAGREES with the full replay")
                }
                (None, _) => crate::outln!(
                    "  no snapshot used{}",
                    s.rejected
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ),
            }
        }
        crate::outln!(
            "  evidence: {} published director{} checked, {} failed",
            r.evidence.checked,
            if r.evidence.checked == 1 { "y" } else { "ies" },
            r.evidence.failed.len()
        );
        for f in &r.evidence.failed {
            crate::outln!("    {}: {}", f.dir, f.problems.join("; "));
        }
    })?;
    Ok(match r.status {
        AuditStatus::Ok => exit::OK,
        AuditStatus::Damaged => exit::DAMAGED,
        AuditStatus::Violations => exit::FAILED,
    })
}

/// The audit's rule findings: violations, then operator overrides.
fn print_audit_rules(f: &crate::policy::audit::Findings) {
    crate::outln!(
        "  rules: {} violation(s); {} submission(s) still hold budget",
        f.violation_count,
        f.held
    );
    for v in &f.violations {
        crate::outln!("    seq {} {}: {} ({})", v.seq, v.kind, v.rule, v.detail);
    }
    if f.override_count > 0 {
        crate::outln!(
            "  operator overrides (decisions, not proof): {}",
            f.override_count
        );
    }
    for o in &f.overrides {
        crate::outln!(
            "    seq {} {}: {} by {}: {}",
            o.seq,
            o.kind,
            o.subject,
            o.user,
            o.reason
        );
    }
    for m in &f.merges {
        crate::outln!(
            "  merge at seq {}: {} branches forked after seq {}; their {} events follow as seq \
             {}..{} (the segment as it was: {}); {} repeat(s) there only the merge explains, \
             kept as evidence, changing nothing",
            m.seq,
            m.branches,
            m.common_seq,
            m.events,
            m.seq + 1,
            m.seq + m.events,
            m.saved_as,
            m.explained_count
        );
        for v in &m.explained {
            crate::outln!("    seq {} {}: {} ({})", v.seq, v.kind, v.rule, v.detail);
        }
    }
}

/// `dispatch inspect WORKER [--at SEQ|TIME]`.
pub fn run_inspect(
    checked: &Checked,
    key: &str,
    at: Option<crate::state::replay::Cut>,
    json: bool,
) -> Result<u8, Failure> {
    use crate::ops::inspect::{inspect, inspect_at, InspectError};
    let at = at
        .map(|cut| super::replay::state_at(checked, cut))
        .transpose()?;
    let inspected = match &at {
        Some(at) => inspect_at(checked, key, at),
        None => inspect(checked, key),
    };
    let r = match inspected {
        Ok(r) => r,
        Err(InspectError::NotFound(_)) => {
            return Err(Failure::new(
                exit::REFUSED,
                format!("{}", InspectError::NotFound(key.to_owned())),
            ))
        }
        Err(InspectError::Journal(e)) => return Err(e.into()),
    };
    super::replay::emit_at(at.map(|a| a.point()), &r, json, || {
        let outcome = r.outcome.map(|o| format!(" ({o})")).unwrap_or_default();
        crate::outln!(
            "worker {} ({}), submission {}: {}{outcome}",
            r.worker,
            r.pool
                .as_deref()
                .map_or("dispatch submit".to_owned(), |p| format!("pool {p}")),
            r.submission_id,
            super::table::with_exit(&r.state, r.exit_code, r.exit_signal)
        );
        if let Some(why) = &r.launch_failure {
            crate::outln!("launch failed: {why}");
        }
        crate::outln!(
            "output: {} (stderr: {}; `dispatch logs`)",
            r.stdout,
            r.stderr
        );
        print_chain(&r.chain);
        crate::outln!("coordinator journal:");
        for e in &r.timeline {
            print_entry(e);
        }
        match &r.worker_journal {
            None => crate::outln!("worker journal: none (the supervisor never started)"),
            Some(w) => {
                crate::outln!("worker journal {} ({}):", w.path, w.status);
                for e in &w.events {
                    print_entry(e);
                }
                if let Some(d) = &w.damage {
                    crate::outln!("  damage: {d}");
                }
            }
        }
    })?;
    Ok(exit::OK)
}

/// A worker's lineage, one line per generation.
fn print_chain(chain: &[crate::ops::inspect::Link]) {
    for l in chain {
        crate::outln!(
            "generation {}: submission {}{}{}{}",
            l.generation,
            l.submission_id,
            l.job_id.map_or(String::new(), |j| format!(", job {j}")),
            l.state
                .as_deref()
                .map_or(String::new(), |s| format!(", {s}")),
            l.continued_after
                .as_deref()
                .map_or(String::new(), |c| format!(
                    ", continued after {c} ({}) from {}{}",
                    l.proof.as_deref().unwrap_or(""),
                    l.resumed_from.as_deref().unwrap_or("?"),
                    if l.from_crash_class {
                        ", a crash-class state"
                    } else {
                        ""
                    }
                )),
        );
    }
}

/// One event of `inspect`'s timelines as a readable line.
fn print_entry(e: &crate::ops::inspect::Entry) {
    crate::outln!(
        "  {:>8} {} {:<22} {}",
        e.seq,
        short_time(&e.time),
        e.kind,
        readable(&e.event)
    );
}

/// Characters of one value a readable event line shows; `--json` has the whole event.
pub const READABLE_VALUE_CHARS: usize = 64;

/// `2026-12-01T10:30:00.123456Z` as `2026-12-01 10:30:00.123Z`: milliseconds are enough to
/// read by; `--json` keeps the microseconds.
fn short_time(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(11..23)) {
        (Some(day), Some(clock)) if rfc3339.ends_with('Z') => format!("{day} {clock}Z"),
        _ => rfc3339.to_owned(),
    }
}

/// An event's body as one readable line: `key=value` pairs, a plain string bare, anything else
/// as compact JSON, each value cut at [`READABLE_VALUE_CHARS`] (with `…`).
fn readable(body: &serde_json::Value) -> String {
    let cut = |text: String| {
        if text.chars().count() <= READABLE_VALUE_CHARS {
            return text;
        }
        let mut s: String = text.chars().take(READABLE_VALUE_CHARS - 1).collect();
        s.push('…');
        s
    };
    let value = |v: &serde_json::Value| match v {
        serde_json::Value::String(s)
            if !s.is_empty()
                && s.chars()
                    .all(|c| !c.is_whitespace() && !c.is_control() && c != '"') =>
        {
            cut(s.clone())
        }
        other => cut(other.to_string()),
    };
    match body {
        serde_json::Value::Object(map) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k}={}", value(v)))
            .collect::<Vec<_>>()
            .join(" "),
        other => value(other),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn an_event_reads_as_one_short_line() {
        let body = json!({
            "pool": "p", "worker": "w 1", "cpus": 2, "step": null,
            "command": ["python", "train.py"], "note": "x".repeat(500),
        });
        let line = super::readable(&body);
        assert_eq!(
            line,
            format!(
                "command=[\"python\",\"train.py\"] cpus=2 note={}… pool=p worker=\"w 1\"",
                "x".repeat(63)
            )
        );
        assert_eq!(
            super::short_time("2026-12-01T10:30:00.123456Z"),
            "2026-12-01 10:30:00.123Z"
        );
    }
}
