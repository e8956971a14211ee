//! The waiting room of `pool submit --wait`: a first-come-first-served queue of tickets on
//! disk, one per waiting submitter of a pool, in `<state>/pools/<pool>/queue/`.
//!
//! A ticket is a file `t-<number>` holding its waiter's pid, numbered one above every ticket present, under a short
//! `flock` on the queue's `LOCK` (so two arrivals never share a number and a later arrival is
//! always behind). Its waiter holds an exclusive `flock` on it from before `LOCK` is released
//! until it leaves, and removes it when it leaves. A ticket whose lock anybody can take has no
//! waiter any more (killed): whoever finds it so removes it. Only the waiter at the head of the
//! queue may take room; the others only watch the queue (a directory listing, no journal read,
//! no Slurm call). The journal's lock is never held while waiting: the queue is not the
//! journal, and the budget is still decided under the journal's lock, right before the
//! receipt, as without `--wait`.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::ops::error::OpError;
use crate::policy::pool::Refusal;
use crate::statedir::trust;

/// At most this many submitters wait for room in one pool.
pub const MAX_WAITING: usize = 1024;

const LOCK: &str = "LOCK";
const PREFIX: &str = "t-";

/// The queue directory of `pool`.
pub fn queue_dir(pools_dir: &Path, pool: &str) -> PathBuf {
    pools_dir.join(pool).join("queue")
}

/// A waiter's place in the queue; leaving (drop) removes it.
#[derive(Debug)]
pub struct Ticket {
    dir: PathBuf,
    number: u64,
    /// Held with an exclusive `flock` for as long as this waiter waits.
    _held: File,
}

fn open_no_follow(path: &Path, create_new: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.read(true).custom_flags(libc::O_NOFOLLOW).mode(0o600);
    if create_new {
        o.write(true).create_new(true);
    }
    o.open(path)
}

fn io_failed(dir: &Path, what: &str, e: std::io::Error) -> OpError {
    OpError::Failed(format!(
        "cannot {what} in the waiting queue {}: {e}; nothing was submitted",
        dir.display()
    ))
}

/// The numbers of the tickets present, ascending.
fn tickets(dir: &Path) -> std::io::Result<Vec<u64>> {
    let mut numbers = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        if let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|n| n.parse::<u64>().ok())
        {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

fn ticket_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{PREFIX}{number:020}"))
}

impl Ticket {
    /// Join the queue of `pool` at its end.
    pub fn take(state_dir: &Path, pools_dir: &Path, pool: &str) -> Result<Ticket, OpError> {
        let dir = queue_dir(pools_dir, pool);
        trust::create_below(state_dir, &dir)?;
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK))
            .and_then(|f| f.lock().map(|()| f))
            .map_err(|e| io_failed(&dir, "take the lock", e))?;
        let present = tickets(&dir).map_err(|e| io_failed(&dir, "list the tickets", e))?;
        if present.len() >= MAX_WAITING {
            return Err(Refusal::TooManyWaiting {
                pool: pool.to_owned(),
                waiting: present.len(),
                limit: MAX_WAITING,
            }
            .into());
        }
        let number = present.last().map_or(1, |n| n + 1);
        // The waiter's pid, for whoever looks (`pool status` does not; a person may).
        let held = open_no_follow(&ticket_path(&dir, number), true)
            .and_then(|f| f.try_lock().map(|()| f).map_err(std::io::Error::from))
            .and_then(|mut f| {
                use std::io::Write;
                writeln!(f, "{}", std::process::id()).map(|()| f)
            })
            .map_err(|e| io_failed(&dir, "create a ticket", e))?;
        drop(lock);
        Ok(Ticket {
            dir,
            number,
            _held: held,
        })
    }

    /// How many live waiters are ahead of this one. Tickets ahead whose waiter is gone (their
    /// lock is free) are removed on the way. Only tickets older than this one are looked at:
    /// each was locked before this one was numbered.
    pub fn ahead(&self) -> Result<usize, OpError> {
        let present =
            tickets(&self.dir).map_err(|e| io_failed(&self.dir, "list the tickets", e))?;
        let mut ahead = 0;
        for n in present.into_iter().take_while(|n| *n < self.number) {
            let path = ticket_path(&self.dir, n);
            let Ok(f) = open_no_follow(&path, false) else {
                continue; // left meanwhile
            };
            if f.try_lock().is_ok() {
                // Nobody holds it: its waiter was killed (or is leaving). Ours to remove.
                let _ = std::fs::remove_file(&path);
            } else {
                ahead += 1;
            }
        }
        Ok(ahead)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Removed while its lock is still held, so nobody takes it for a dead waiter's.
        let _ = std::fs::remove_file(ticket_path(&self.dir, self.number));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let sd = t.path().join("s");
        trust::create_below(t.path(), &sd).unwrap();
        (t, sd)
    }

    #[test]
    fn tickets_are_served_in_arrival_order() {
        let (_t, sd) = state();
        let pools = sd.join("pools");
        let a = Ticket::take(&sd, &pools, "p").unwrap();
        let b = Ticket::take(&sd, &pools, "p").unwrap();
        let c = Ticket::take(&sd, &pools, "p").unwrap();
        assert_eq!(
            (a.ahead().unwrap(), b.ahead().unwrap(), c.ahead().unwrap()),
            (0, 1, 2)
        );
        drop(a);
        assert_eq!((b.ahead().unwrap(), c.ahead().unwrap()), (0, 1));
        // A newcomer queues behind everyone present, whatever left before.
        let d = Ticket::take(&sd, &pools, "p").unwrap();
        assert_eq!(d.ahead().unwrap(), 2);
        // Another pool's queue is its own.
        assert_eq!(Ticket::take(&sd, &pools, "q").unwrap().ahead().unwrap(), 0);
    }

    #[test]
    fn an_unlocked_ticket_ahead_is_a_dead_waiters_and_goes() {
        let (_t, sd) = state();
        let pools = sd.join("pools");
        let dir = queue_dir(&pools, "p");
        trust::create_below(&sd, &dir).unwrap();
        // What a killed waiter leaves: a ticket file nobody holds.
        std::fs::write(ticket_path(&dir, 7), b"").unwrap();
        let b = Ticket::take(&sd, &pools, "p").unwrap();
        assert_eq!(b.number, 8);
        assert_eq!(b.ahead().unwrap(), 0);
        assert_eq!(tickets(&dir).unwrap(), vec![8]);
        drop(b);
        assert!(tickets(&dir).unwrap().is_empty());
    }
}
