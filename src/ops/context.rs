//! What every operation needs: where state lives, who is asking, how to reach Slurm, the clock.

use std::path::{Path, PathBuf};

use chrono::{Local, NaiveDateTime, TimeZone};

use super::error::OpError;
use crate::event::Micros;
use crate::journal::{self, Loaded, Options, Writer};
use crate::slurm::Scheduler;

pub struct Ctx<S: Scheduler> {
    pub state_dir: PathBuf,
    pub sched: S,
    /// The Unix user name of the caller: the owner every allocation must have.
    pub caller: String,
    /// The dispatch executable that worker steps run (`dispatch worker run`).
    pub exe: PathBuf,
}

impl<S: Scheduler> Ctx<S> {
    pub fn journal_dir(&self) -> PathBuf {
        crate::statedir::journal_dir(&self.state_dir)
    }

    /// Take the journal's writer lock (creating the journal if needed) and load state.
    pub fn lock_and_load(&self) -> Result<(Writer, Loaded), OpError> {
        crate::statedir::prepare(&self.state_dir)?;
        let writer = Writer::open(&self.journal_dir(), Options::default())?;
        // Whatever the command, the temporary files of asset adds that were killed go.
        super::asset::sweep_dead_temps(&super::asset::assets_dir(&self.state_dir));
        let loaded = journal::load(&self.journal_dir())?;
        // Every writing command, offline ones included, keeps the replay tail bounded: past
        // `SNAPSHOT_EVERY` events since the newest snapshot it writes one (optional work).
        if let Err(e) = journal::reader::snapshot_if_due(&self.journal_dir(), &loaded) {
            tracing::warn!("snapshot not written (optional): {e}");
        }
        Ok((writer, loaded))
    }

    /// Load state without the lock (read-only commands).
    pub fn load(&self) -> Result<Loaded, OpError> {
        crate::statedir::check(&self.state_dir)?;
        Ok(journal::load(&self.journal_dir())?)
    }

    pub fn now(&self) -> Micros {
        Micros::now()
    }

    pub fn pools_dir(&self) -> PathBuf {
        self.state_dir.join("pools")
    }
}

/// Write a snapshot if one is due. Optional work: a failure is a warning, never an error.
pub fn snapshot_quietly(journal_dir: &Path) {
    match journal::load(journal_dir) {
        Ok(loaded) => {
            if let Err(e) = journal::reader::snapshot_if_due(journal_dir, &loaded) {
                tracing::warn!("snapshot not written (optional): {e}");
            }
        }
        Err(e) => tracing::warn!("snapshot not written (optional): {e}"),
    }
}

/// A Slurm wall-clock time (cluster local time) as microseconds since the epoch.
pub fn local_to_micros(t: NaiveDateTime) -> Option<Micros> {
    Local
        .from_local_datetime(&t)
        .earliest()
        .map(|dt| Micros(dt.timestamp_micros()))
}

/// Microseconds since the epoch as a Slurm wall-clock time (for `sacct --starttime`).
pub fn micros_to_local(t: Micros) -> NaiveDateTime {
    Local
        .timestamp_micros(t.0)
        .earliest()
        .map(|dt| dt.naive_local())
        .unwrap_or_default()
}

/// How long a stop waits, after its final cancel, for proof that the thing is over.
pub const STOP_PROOF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Ask `prove` every quarter second (or `within`, if shorter) until it gives a proof or `within`
/// has passed. Used by the stops: TERM, then proof within the grace; else cancel, then proof
/// within [`STOP_PROOF_TIMEOUT`].
pub async fn await_proof<F, Fut>(within: std::time::Duration, mut prove: F) -> Option<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    const POLL: std::time::Duration = std::time::Duration::from_millis(250);
    // The runtime's clock, not std's: the same in production, and a test runtime with paused
    // time (tests/simulation.rs) runs these waits without waiting.
    let until = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(POLL.min(within)).await;
        if let Some(proof) = prove().await {
            return Some(proof);
        }
    }
    None
}
