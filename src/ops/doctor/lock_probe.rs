//! `dispatch doctor --lock-probe`: run at the same time on two login nodes against one state
//! directory, it tells whether `flock` and `O_CREAT|O_EXCL` through one reach the other.
//!
//! Each participant takes the exclusive `flock` of `<state>/.doctor-lock-probe/flock` if it can
//! and tries to create `…/excl` exclusively, then writes a marker saying which it got, and keeps
//! both for its whole window while it reads the others' markers. A peer whose marker it reads was
//! inside its own window then, holding what it says it got: two holders of the flock at once, or
//! two creators of `excl`, prove the lock does not reach between them.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::policy::doctor::lock_probe::{LockProbeSeen, Participant};

/// The probe's directory inside the state directory.
pub const PROBE_DIR: &str = ".doctor-lock-probe";
/// How often the markers are read during the window.
const POLL: Duration = Duration::from_millis(200);
/// Markers older than this are a killed probe's and are removed.
const STALE_AFTER: Duration = Duration::from_secs(600);
/// Bound on the markers read: a probe is a few hosts.
const MAX_PEERS: usize = 64;

/// Take part for `window`, then say what this host saw. Errors are the probe's own I/O.
pub fn run(state_dir: &Path, window: Duration) -> Result<LockProbeSeen, String> {
    let dir = state_dir.join(PROBE_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    remove_stale(&dir);
    let lock =
        open(&dir.join("flock"), false).map_err(|e| format!("{}/flock: {e}", dir.display()))?;
    let got_flock = lock.try_lock().is_ok();
    let id = crate::journal::lease::Identity::current();
    let token = uuid::Uuid::new_v4().to_string();
    let excl_path = dir.join("excl");
    let created_excl = match open(&excl_path, true) {
        Ok(mut f) => {
            let _ = f.write_all(token.as_bytes());
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(format!("{}: {e}", excl_path.display())),
    };
    let me = Participant {
        host: id.host,
        pid: id.pid,
        token,
        got_flock,
        created_excl,
    };
    let marker = dir.join(format!("peer-{}.json", me.token));
    let written = write_marker(&marker, &me);
    let peers = written.map(|()| watch(&dir, &me, window));
    // The creator removes `excl` before its marker, so a peer that reads the marker knows the
    // file was there.
    if created_excl {
        let _ = std::fs::remove_file(&excl_path);
    }
    let _ = std::fs::remove_file(&marker);
    drop(lock);
    Ok(LockProbeSeen {
        me,
        peers: peers?,
        window_s: window.as_secs(),
    })
}

fn open(path: &Path, exclusive: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    if exclusive {
        o.create_new(true);
    } else {
        o.create(true).truncate(false);
    }
    o.open(path)
}

fn write_marker(path: &Path, me: &Participant) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let body = serde_json::to_vec(me).map_err(|e| e.to_string())?;
    std::fs::write(&tmp, body)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Read the others' markers every [`POLL`] until the window ends; the last word of each.
fn watch(dir: &Path, me: &Participant, window: Duration) -> Vec<Participant> {
    let until = Instant::now() + window;
    let mut seen: Vec<Participant> = Vec::new();
    loop {
        for p in markers(dir).into_iter().filter(|p| p.token != me.token) {
            match seen.iter().position(|s| s.token == p.token) {
                Some(i) => seen[i] = p,
                None if seen.len() < MAX_PEERS => seen.push(p),
                None => {}
            }
        }
        let now = Instant::now();
        if now >= until {
            return seen;
        }
        std::thread::sleep(POLL.min(until - now));
    }
}

fn markers(dir: &Path) -> Vec<Participant> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_marker(p.as_path()))
        .take(MAX_PEERS)
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect()
}

fn is_marker(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("peer-") && n.ends_with(".json"))
}

/// A killed probe's marker or `excl` would mislead the next one.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        let old = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_AFTER);
        let named = is_marker(&path) || path.file_name().is_some_and(|n| n == "excl");
        if old && named {
            let _ = std::fs::remove_file(&path);
        }
    }
}
