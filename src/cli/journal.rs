//! `dispatch journal …`: argument definitions and rendering.

use std::io::Write;
use std::path::Path;

use clap::Subcommand;

use super::exit::{self, Failure};
use super::output::{self, print_json};
use crate::ops::journal as ops;

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
        dispatch journal dump --json | jq -c 'select(.kind == \"WorkerSubmitted\")'")]
    Dump {
        /// First seq to print
        #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(u64).range(1..))]
        from: Option<u64>,
        /// Last seq to print
        #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(u64).range(1..))]
        to: Option<u64>,
    },
    /// Cut a torn tail (kept aside as a file) and record a Recovered event
    #[command(after_help = "Examples:\n  \
        dispatch journal verify || dispatch journal repair")]
    Repair,
}

pub fn run(cmd: &JournalCommand, state_dir: &Path, json: bool) -> Result<u8, Failure> {
    let dir = crate::statedir::journal_dir(state_dir);
    match cmd {
        JournalCommand::Init => {
            crate::statedir::prepare(state_dir)?;
            let r = ops::init(&dir)?;
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
        JournalCommand::Verify => {
            crate::statedir::check(state_dir)?;
            let r = ops::verify(&dir)?;
            if json {
                print_json(&r)?;
            } else {
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
                    match r.kind {
                        crate::journal::Status::TornTail => {
                            crate::outln!("next: `dispatch journal repair` cuts the torn tail (any write does it too)")
                        }
                        _ => crate::outln!(
                            "next: dispatch refuses to write; keep a copy of {} and inspect the damage",
                            dir.display()
                        ),
                    }
                }
            }
            Ok(match r.kind {
                crate::journal::Status::Clean => exit::OK,
                crate::journal::Status::TornTail => exit::FAILED,
                _ => exit::DAMAGED,
            })
        }
        JournalCommand::Dump { from, to } => {
            crate::statedir::check(state_dir)?;
            let from = from.unwrap_or(1);
            let to = to.unwrap_or(u64::MAX);
            if from > to {
                return Err(Failure::new(
                    exit::USAGE,
                    format!("--from {from} is after --to {to}"),
                ));
            }
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let scan = ops::dump(&dir, from, to, |env| {
                let written = if json {
                    serde_json::to_writer(&mut out, &ops::DumpLine::from_envelope(env))
                        .map_err(std::io::Error::from)
                        .and_then(|()| writeln!(out))
                } else {
                    writeln!(
                        out,
                        "{:>8} {} {:<20} {}",
                        env.seq,
                        env.time.to_rfc3339(),
                        env.event.kind_name(),
                        ops::dump_body(&env.event)
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
            if let Some(d) = scan.damage {
                eprintln!(
                    "dispatch: the journal is {} at {} offset {}: {}; events after it are not shown. \
                     Run `dispatch journal verify`",
                    scan.status.as_str(),
                    d.segment,
                    d.offset,
                    d.reason
                );
                return Ok(if scan.status == crate::journal::Status::TornTail {
                    exit::FAILED
                } else {
                    exit::DAMAGED
                });
            }
            Ok(exit::OK)
        }
        JournalCommand::Repair => {
            crate::statedir::check(state_dir)?;
            let r = ops::repair(&dir)?;
            if json {
                print_json(&r)?;
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
    }
}

pub fn run_audit(state_dir: &Path, json: bool) -> Result<u8, Failure> {
    crate::statedir::check(state_dir)?;
    let r = crate::ops::audit::audit(state_dir)?;
    if json {
        print_json(&r)?;
    } else {
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
    }
    Ok(match r.status {
        "ok" => exit::OK,
        "damaged" => exit::DAMAGED,
        _ => exit::FAILED,
    })
}

pub fn run_inspect(state_dir: &Path, key: &str, json: bool) -> Result<u8, Failure> {
    use crate::ops::inspect::{inspect, InspectError};
    crate::statedir::check(state_dir)?;
    let r = match inspect(state_dir, key) {
        Ok(r) => r,
        Err(InspectError::NotFound(_)) => {
            return Err(Failure::new(
                exit::REFUSED,
                format!("{}", InspectError::NotFound(key.to_owned())),
            ))
        }
        Err(InspectError::Journal(e)) => return Err(e.into()),
    };
    if json {
        print_json(&r)?;
        return Ok(exit::OK);
    }
    crate::outln!(
        "worker {} ({}), submission {}: {}",
        r.worker,
        r.pool
            .as_deref()
            .map_or("dispatch submit".to_owned(), |p| format!("pool {p}")),
        r.submission_id,
        r.state
    );
    crate::outln!("coordinator journal:");
    for e in &r.timeline {
        crate::outln!("  {:>8} {} {:<22} {}", e.seq, e.time, e.kind, e.event);
    }
    match &r.worker_journal {
        None => crate::outln!("worker journal: none (the supervisor never started)"),
        Some(w) => {
            crate::outln!("worker journal {} ({}):", w.path, w.status);
            for e in &w.events {
                crate::outln!("  {:>8} {} {:<22} {}", e.seq, e.time, e.kind, e.event);
            }
            if let Some(d) = &w.damage {
                crate::outln!("  damage: {d}");
            }
        }
    }
    Ok(exit::OK)
}
