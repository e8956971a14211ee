//! Named crash points, compiled in, armed only by the `DISPATCH_FAILPOINTS` environment variable
//! (or, in a test that runs dispatch in-process, by [`arm_on_this_thread`]).
//!
//! Syntax: `[worker:]name=action[,...]`, where action is one of
//! - `abort`: `abort(3)` the process at that point (SIGABRT, no unwinding, no destructors);
//! - `exit:N`: `_exit(N)` at once;
//! - `sleep:MS`: sleep for MS milliseconds, then go on;
//! - `panic`: unwind from that point with a [`Crash`] payload, so an in-process test can catch
//!   it (`catch_unwind`), drop every handle the "dead" command held (the journal lock goes with
//!   its writer) and go on as a restarted process on the same state directory;
//! - any of these followed by `@K`: act on the K-th time the point is reached (1-based) only.
//!
//! An item without a prefix arms this process only. An item prefixed `worker:` does not arm this
//! process: it is forwarded, prefix stripped, to the worker steps and batch jobs this process
//! starts (the Slurm driver gives `srun` and `sbatch` exactly [`worker_spec`] as their
//! `DISPATCH_FAILPOINTS`, and removes the variable from every other Slurm command), where the
//! supervisor arms it. So `journal-after-sync=abort@3` crashes the coordinator and never the
//! supervisor's own journal, and `worker:supervisor-before-exit-record=abort` crashes only the
//! supervisor.
//!
//! Every intent/effect boundary calls [`hit`] with its name; `docs/testing.md` lists them.
//! Unset, a failpoint costs two atomic loads.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

pub const ENV: &str = "DISPATCH_FAILPOINTS";

/// The prefix of an item meant for the worker steps this process starts.
pub const WORKER_PREFIX: &str = "worker:";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Abort,
    Exit(i32),
    SleepMs(u64),
    Panic,
}

/// The payload of a `panic` failpoint's unwinding: which point fired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    pub point: String,
}

#[derive(Debug)]
struct Armed {
    action: Action,
    on_hit: Option<u64>,
    hits: AtomicU64,
}

type Table = HashMap<String, Armed>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| match std::env::var(ENV) {
        Ok(spec) => parse(&spec).unwrap_or_else(|e| {
            eprintln!("dispatch: ignoring {ENV}: {e}");
            HashMap::new()
        }),
        Err(_) => HashMap::new(),
    })
}

/// Set once any thread has armed points of its own: until then [`hit`] never looks at them.
static ANY_THREAD_ARMED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static THREAD_TABLE: RefCell<Table> = RefCell::new(HashMap::new());
}

/// Arm `spec` (same syntax, `worker:` items ignored) for this thread only, replacing what this
/// thread had armed; the process-wide table from the environment stays as it is. For tests that
/// run commands in-process, one seed per thread.
pub fn arm_on_this_thread(spec: &str) -> Result<(), String> {
    let t = parse(spec)?;
    ANY_THREAD_ARMED.store(true, Ordering::SeqCst);
    THREAD_TABLE.with(|cell| *cell.borrow_mut() = t);
    Ok(())
}

/// Disarm everything [`arm_on_this_thread`] armed on this thread.
pub fn disarm_on_this_thread() {
    THREAD_TABLE.with(|cell| cell.borrow_mut().clear());
}

fn parse_action(item: &str, action: &str) -> Result<(Action, Option<u64>), String> {
    let (action, on_hit) = match action.split_once('@') {
        Some((a, k)) => {
            let k = k
                .parse()
                .map_err(|_| format!("bad hit count in `{item}`"))?;
            (a, Some(k))
        }
        None => (action, None),
    };
    let action = match action.split_once(':') {
        None if action == "abort" => Action::Abort,
        None if action == "panic" => Action::Panic,
        Some(("exit", n)) => Action::Exit(
            n.parse()
                .map_err(|_| format!("bad exit code in `{item}`"))?,
        ),
        Some(("sleep", ms)) => {
            Action::SleepMs(ms.parse().map_err(|_| format!("bad sleep in `{item}`"))?)
        }
        _ => {
            return Err(format!(
                "unknown action in `{item}` (abort, exit:N, sleep:MS, panic)"
            ))
        }
    };
    Ok((action, on_hit))
}

fn items(spec: &str) -> impl Iterator<Item = &str> {
    spec.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// The points this process arms: every item without the `worker:` prefix (those with it are
/// checked too, so a typo fails wherever it is written).
fn parse(spec: &str) -> Result<Table, String> {
    let mut out = HashMap::new();
    for item in items(spec) {
        let forwarded = item.strip_prefix(WORKER_PREFIX);
        let (name, action) = forwarded
            .unwrap_or(item)
            .split_once('=')
            .ok_or_else(|| format!("`{item}` is not name=action"))?;
        let (action, on_hit) = parse_action(item, action)?;
        if forwarded.is_none() {
            out.insert(
                name.to_owned(),
                Armed {
                    action,
                    on_hit,
                    hits: AtomicU64::new(0),
                },
            );
        }
    }
    Ok(out)
}

/// The `worker:` items of `spec`, prefix stripped and comma-joined; `None` when there are none.
pub fn forwarded(spec: &str) -> Option<String> {
    let fwd: Vec<&str> = items(spec)
        .filter_map(|i| i.strip_prefix(WORKER_PREFIX))
        .collect();
    (!fwd.is_empty()).then(|| fwd.join(","))
}

/// What the worker steps and batch jobs this process starts get as their `DISPATCH_FAILPOINTS`:
/// the `worker:` items of this process's own, prefix stripped.
pub fn worker_spec() -> Option<String> {
    std::env::var(ENV).ok().as_deref().and_then(forwarded)
}

/// Count a hit of `armed` and say whether it acts now.
fn fires(armed: &Armed) -> bool {
    let n = armed.hits.fetch_add(1, Ordering::SeqCst) + 1;
    armed.on_hit.is_none_or(|k| k == n)
}

/// Pass a named crash point.
pub fn hit(name: &str) {
    if ANY_THREAD_ARMED.load(Ordering::Relaxed) {
        let local = THREAD_TABLE.with(|cell| cell.borrow().get(name).map(|a| (fires(a), a.action)));
        if let Some((true, action)) = local {
            act(name, action);
        }
    }
    if let Some(armed) = table().get(name).filter(|a| fires(a)) {
        act(name, armed.action);
    }
}

fn act(name: &str, action: Action) {
    match action {
        Action::Abort => {
            eprintln!("dispatch: failpoint {name}: abort");
            std::process::abort();
        }
        Action::Exit(code) => {
            eprintln!("dispatch: failpoint {name}: exit {code}");
            // Skipping destructors is the point.
            crate::sys::exit_now(code)
        }
        Action::SleepMs(ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
        Action::Panic => std::panic::panic_any(Crash {
            point: name.to_owned(),
        }),
    }
}

/// Is this point armed? Lets a caller do work only a failpoint needs (a half write, say).
pub fn armed(name: &str) -> bool {
    (ANY_THREAD_ARMED.load(Ordering::Relaxed)
        && THREAD_TABLE.with(|cell| cell.borrow().contains_key(name)))
        || table().contains_key(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_actions_and_counts() {
        let t = parse("a=abort, b=exit:3@2,c=sleep:10,d=panic").unwrap();
        assert_eq!(t["a"].action, Action::Abort);
        assert_eq!((t["b"].action, t["b"].on_hit), (Action::Exit(3), Some(2)));
        assert_eq!(t["c"].action, Action::SleepMs(10));
        assert_eq!(t["d"].action, Action::Panic);
        assert!(parse("a").is_err());
        assert!(parse("a=boom").is_err());
        assert!(parse("a=exit:x").is_err());
        assert!(
            parse("worker:a=boom").is_err(),
            "forwarded items are checked"
        );
    }

    #[test]
    fn worker_items_are_forwarded_and_never_armed_here() {
        let spec = "journal-after-sync=abort@3, worker:supervisor-before-exit-record=abort,\
                    worker:journal-torn-write=exit:7";
        let own = parse(spec).unwrap();
        assert_eq!(own.keys().collect::<Vec<_>>(), ["journal-after-sync"]);
        assert_eq!(
            forwarded(spec).as_deref(),
            Some("supervisor-before-exit-record=abort,journal-torn-write=exit:7")
        );
        assert_eq!(forwarded("journal-after-sync=abort"), None);
        assert_eq!(forwarded(""), None);
    }

    #[test]
    fn a_panic_point_unwinds_with_its_name_on_this_thread_only() {
        arm_on_this_thread("sim-test-point=panic@2").unwrap();
        hit("sim-test-point");
        assert!(armed("sim-test-point"));
        let r = std::panic::catch_unwind(|| hit("sim-test-point"));
        let payload = r.expect_err("the second hit unwinds");
        assert_eq!(
            payload.downcast_ref::<Crash>(),
            Some(&Crash {
                point: "sim-test-point".to_owned()
            })
        );
        hit("sim-test-point");
        std::thread::spawn(|| {
            assert!(!armed("sim-test-point"), "armed on another thread");
            hit("sim-test-point");
        })
        .join()
        .unwrap();
        disarm_on_this_thread();
        assert!(!armed("sim-test-point"));
    }
}
