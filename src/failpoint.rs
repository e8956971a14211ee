//! Named crash points, compiled in, armed only by the `DISPATCH_FAILPOINTS` environment variable.
//!
//! Syntax: `name=action[,name=action...]`, where action is one of
//! - `abort`: `abort(3)` the process at that point (SIGABRT, no unwinding, no destructors);
//! - `exit:N`: `_exit(N)` at once;
//! - `sleep:MS`: sleep for MS milliseconds, then go on;
//! - any of these followed by `@K`: act on the K-th time the point is reached (1-based) only.
//!
//! Every intent/effect boundary calls [`hit`] with its name; `ARCHITECTURE.md` lists them.
//! Unset, a failpoint costs one atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub const ENV: &str = "DISPATCH_FAILPOINTS";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Abort,
    Exit(i32),
    SleepMs(u64),
}

#[derive(Debug)]
struct Armed {
    action: Action,
    on_hit: Option<u64>,
    hits: AtomicU64,
}

fn table() -> &'static HashMap<String, Armed> {
    static TABLE: OnceLock<HashMap<String, Armed>> = OnceLock::new();
    TABLE.get_or_init(|| match std::env::var(ENV) {
        Ok(spec) => parse(&spec).unwrap_or_else(|e| {
            eprintln!("dispatch: ignoring {ENV}: {e}");
            HashMap::new()
        }),
        Err(_) => HashMap::new(),
    })
}

fn parse(spec: &str) -> Result<HashMap<String, Armed>, String> {
    let mut out = HashMap::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, action) = item
            .split_once('=')
            .ok_or_else(|| format!("`{item}` is not name=action"))?;
        let (action, on_hit) = match action.split_once('@') {
            Some((a, k)) => (
                a,
                Some(
                    k.parse::<u64>()
                        .map_err(|_| format!("bad hit count in `{item}`"))?,
                ),
            ),
            None => (action, None),
        };
        let action = match action.split_once(':') {
            None if action == "abort" => Action::Abort,
            Some(("exit", n)) => Action::Exit(
                n.parse()
                    .map_err(|_| format!("bad exit code in `{item}`"))?,
            ),
            Some(("sleep", ms)) => {
                Action::SleepMs(ms.parse().map_err(|_| format!("bad sleep in `{item}`"))?)
            }
            _ => {
                return Err(format!(
                    "unknown action in `{item}` (abort, exit:N, sleep:MS)"
                ))
            }
        };
        out.insert(
            name.to_owned(),
            Armed {
                action,
                on_hit,
                hits: AtomicU64::new(0),
            },
        );
    }
    Ok(out)
}

/// Pass a named crash point.
pub fn hit(name: &str) {
    let table = table();
    if table.is_empty() {
        return;
    }
    let Some(armed) = table.get(name) else {
        return;
    };
    let n = armed.hits.fetch_add(1, Ordering::SeqCst) + 1;
    if armed.on_hit.is_some_and(|k| k != n) {
        return;
    }
    match armed.action {
        Action::Abort => {
            eprintln!("dispatch: failpoint {name}: abort");
            std::process::abort();
        }
        Action::Exit(code) => {
            eprintln!("dispatch: failpoint {name}: exit {code}");
            // SAFETY: _exit has no preconditions; skipping destructors is the point.
            unsafe { libc::_exit(code) }
        }
        Action::SleepMs(ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
    }
}

/// Is this point armed? Lets a caller do work only a failpoint needs (a half write, say).
pub fn armed(name: &str) -> bool {
    table().contains_key(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_actions_and_counts() {
        let t = parse("a=abort, b=exit:3@2,c=sleep:10").unwrap();
        assert_eq!(t["a"].action, Action::Abort);
        assert_eq!((t["b"].action, t["b"].on_hit), (Action::Exit(3), Some(2)));
        assert_eq!(t["c"].action, Action::SleepMs(10));
        assert!(parse("a").is_err());
        assert!(parse("a=boom").is_err());
        assert!(parse("a=exit:x").is_err());
    }
}
