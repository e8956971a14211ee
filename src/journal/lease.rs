//! The journal's cross-host writer lock: a lease file, `WRITER`, that only one process at a time
//! can create.
//!
//! `flock` alone does not exclude a writer on another login node when the state directory sits
//! on Lustre mounted `localflock`, NFS with `local_lock`, or FUSE: each client grants it
//! locally. What those file systems do make atomic across clients is `open(O_CREAT|O_EXCL)` and
//! `rename`, the protocol of git's `index.lock`. So a writer, once it holds `LOCK`'s `flock`
//! (which still orders the writers of one host cheaply), creates `WRITER` exclusively, writes
//! into it who it is (host, boot id, pid namespace, pid, process start time, a random token) and
//! keeps a heartbeat counter in it fresh from a background thread. The lease is released by
//! removing the file.
//!
//! A writer that finds `WRITER` taken waits, saying for whom, and takes it over only on proof
//! that its holder cannot write any more:
//! - the holder is on this host (same host name, boot id and pid namespace) and its pid is gone
//!   or is another process now (start time differs): at once;
//! - otherwise, when the file's bytes have not changed for a whole lease, timed on the waiter's
//!   own monotonic clock (no clocks of two hosts are compared).
//!
//! A takeover renames the stale file aside and checks that what it moved is byte for byte what
//! it judged stale; if not (the holder beat, or another waiter won), it puts it back.
//!
//! What this does not guarantee: a holder frozen for longer than the lease between its last
//! ownership check and its `write(2)` can still write after it was taken over. The writer's tail
//! check before and after each write (writer.rs) turns that into an error instead of a silent
//! fork, and a fork that does reach the disk is classified and merged (journal-format.md §8).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::backoff::Backoff;
use crate::next::Next::JournalVerify;

/// Name of the lease file inside the journal directory.
pub const LEASE_FILE: &str = "WRITER";
/// How long a lease file must stay unchanged before a writer on another host takes it over.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Sets the lease in milliseconds (tests; an operator on a slow file system may raise it).
pub const LEASE_ENV: &str = "DISPATCH_LOCK_LEASE_MS";
/// Replaces this host's identity (host name, boot id, pid namespace) in the lease record. For
/// tests that play two hosts on one machine; never set it in production.
pub const HOST_ID_ENV: &str = "DISPATCH_HOST_ID";
/// How long a command waits for the journal's lock by default (`--wait-lock` sets it).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(120);
/// The shortest lease the setting accepts: heartbeats must be able to keep it.
pub const MIN_LEASE: Duration = Duration::from_millis(200);
/// The first line of every lease file.
const RECORD_MAGIC: &str = "dispatch-writer-lock 1";
/// A lease file is a few hundred bytes; anything longer is read only this far.
const MAX_RECORD_BYTES: usize = 4096;
/// Heartbeats per lease: a holder beats this often so that one missed beat is not staleness.
const BEATS_PER_LEASE: u32 = 6;
/// Digits of the heartbeat counter, fixed so that a beat rewrites the same bytes in place.
const BEAT_DIGITS: usize = 20;

/// How long to wait for the lock and how long a silent lease lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub lease: Duration,
    pub wait: Duration,
}

static WAIT: OnceLock<Duration> = OnceLock::new();

/// Set, once per process, how long writers wait for the lock (the CLI's `--wait-lock`).
pub fn set_wait(wait: Duration) {
    let _ = WAIT.set(wait);
}

impl Settings {
    /// The lease from `DISPATCH_LOCK_LEASE_MS` (at least [`MIN_LEASE`]), the wait from
    /// [`set_wait`], else the defaults.
    pub fn from_env() -> Settings {
        let lease = std::env::var(LEASE_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_LEASE, |ms| Duration::from_millis(ms).max(MIN_LEASE));
        Settings {
            lease,
            wait: WAIT.get().copied().unwrap_or(DEFAULT_WAIT),
        }
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings::from_env()
    }
}

/// Why the lease could not be had or kept.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "the journal in {} is locked by {holder}; waited {waited_s} s (--wait-lock). Nothing was \
         written by this command. Run it again when that command is done, or raise --wait-lock",
        dir.display()
    )]
    Busy {
        dir: PathBuf,
        holder: String,
        waited_s: u64,
    },
    #[error(
        "this command lost the journal's writer lock in {}: {why}. Nothing more is written by it; \
         run it again ({JournalVerify} shows what reached the journal)",
        dir.display()
    )]
    Lost { dir: PathBuf, why: String },
    #[error(
        "cannot take the journal's writer lock: {what} {}: {source}; nothing was written",
        path.display()
    )]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
}

fn io(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> LeaseError {
    let path = path.to_owned();
    move |source| LeaseError::Io { path, what, source }
}

/// Who a lease file says holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: String,
    pub host: String,
    pub boot: String,
    pub pidns: String,
    pub pid: u32,
    pub start_ticks: u64,
    pub since_micros: i64,
    pub lease_ms: u64,
    pub beat: u64,
}

impl Holder {
    /// The record as its file holds it: one `key value` per line, the counter last and of fixed
    /// width so that a heartbeat overwrites it in place.
    pub fn render(&self) -> Vec<u8> {
        format!(
            "{RECORD_MAGIC}\ntoken {}\nhost {}\nboot {}\npidns {}\npid {}\nstart {}\nsince {}\n\
             lease_ms {}\nbeat {:0width$}\n",
            self.token,
            self.host,
            self.boot,
            self.pidns,
            self.pid,
            self.start_ticks,
            self.since_micros,
            self.lease_ms,
            self.beat,
            width = BEAT_DIGITS
        )
        .into_bytes()
    }

    /// Where the counter's digits start in [`Holder::render`]'s bytes.
    fn beat_offset(rendered: &[u8]) -> usize {
        rendered.len() - 1 - BEAT_DIGITS
    }

    pub fn parse(bytes: &[u8]) -> Option<Holder> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != RECORD_MAGIC {
            return None;
        }
        let mut field = |key: &str| -> Option<String> {
            let line = lines.next()?;
            let value = line.strip_prefix(key)?.strip_prefix(' ')?;
            Some(value.to_owned())
        };
        Some(Holder {
            token: field("token")?,
            host: field("host")?,
            boot: field("boot")?,
            pidns: field("pidns")?,
            pid: field("pid")?.parse().ok()?,
            start_ticks: field("start")?.parse().ok()?,
            since_micros: field("since")?.parse().ok()?,
            lease_ms: field("lease_ms")?.parse().ok()?,
            beat: field("beat")?.parse().ok()?,
        })
    }

    /// "pid 123 on host h (since 2026-12-02T05:00:00Z)", for the messages of a waiting writer.
    pub fn describe(&self) -> String {
        let since = chrono::DateTime::from_timestamp_micros(self.since_micros)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(|| "an unknown time".to_owned());
        format!("pid {} on host {} (since {since})", self.pid, self.host)
    }

    fn same_host_as(&self, me: &Identity) -> bool {
        self.host == me.host && self.boot == me.boot && self.pidns == me.pidns
    }
}

/// This process, as a lease record names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub host: String,
    pub boot: String,
    pub pidns: String,
    pub pid: u32,
    pub start_ticks: u64,
}

impl Identity {
    pub fn current() -> Identity {
        let pid = std::process::id();
        let (host, boot, pidns) = match std::env::var(HOST_ID_ENV) {
            Ok(id) if !id.trim().is_empty() => (id.trim().to_owned(), "set".into(), "set".into()),
            _ => (
                crate::event::host::current_host(),
                read_trimmed("/proc/sys/kernel/random/boot_id"),
                std::fs::read_link("/proc/self/ns/pid")
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
        };
        Identity {
            host: sanitize(&host),
            boot: sanitize(&boot),
            pidns: sanitize(&pidns),
            pid,
            start_ticks: process_start_ticks(pid).unwrap_or(0),
        }
    }
}

/// A record is one value per line: no line breaks or spaces inside a value.
fn sanitize(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .take(255)
        .collect();
    if clean.is_empty() {
        "unknown".to_owned()
    } else {
        clean
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Field 22 of `/proc/PID/stat`: when the process started, in clock ticks since boot. With the
/// pid it names one process for the life of the boot (a pid alone is reused).
fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the holder, on this host, is provably unable to write: its process is gone, or its
/// pid now names a process that started at another time.
fn dead_on_this_host(holder: &Holder) -> bool {
    match process_start_ticks(holder.pid) {
        None => !Path::new(&format!("/proc/{}", holder.pid)).exists(),
        Some(ticks) => ticks != holder.start_ticks,
    }
}

/// The lease a writer holds: the lease file is its until dropped.
pub struct Lease {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    beater: Option<JoinHandle<()>>,
}

struct Shared {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    /// The lease file's (device, inode), for the one-`stat` check before each write.
    file_id: (u64, u64),
    record: std::sync::Mutex<Holder>,
    /// Set by the heartbeat once it finds the file is no longer ours.
    lost: AtomicBool,
    lease: Duration,
}

impl Lease {
    /// Take the lease of the journal in `dir`, waiting up to `settings.wait` and saying on
    /// stderr (tracing) whom it waits for.
    pub fn acquire(dir: &Path, settings: Settings) -> Result<Lease, LeaseError> {
        let me = Identity::current();
        let token = Uuid::new_v4().to_string();
        let path = dir.join(LEASE_FILE);
        let mut wait = Waiting::new(settings);
        loop {
            if let Some(file) = create_exclusive(&path)? {
                return Lease::start(dir, path, file, &me, token, settings.lease);
            }
            match wait.observe(&path, &me)? {
                Verdict::Gone => continue,
                Verdict::Stale(bytes, why) => {
                    take_over(dir, &path, &bytes, &token, &why)?;
                }
                Verdict::Held(holder) => wait.pause(dir, &holder)?,
            }
        }
    }

    fn start(
        dir: &Path,
        path: PathBuf,
        mut file: File,
        me: &Identity,
        token: String,
        lease: Duration,
    ) -> Result<Lease, LeaseError> {
        let record = Holder {
            token,
            host: me.host.clone(),
            boot: me.boot.clone(),
            pidns: me.pidns.clone(),
            pid: me.pid,
            start_ticks: me.start_ticks,
            since_micros: crate::event::Micros::now().0,
            lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
            beat: 0,
        };
        let bytes = record.render();
        assert!(bytes.len() <= MAX_RECORD_BYTES, "a lease record is small");
        // Seen by a waiter on another client only once it reached the server.
        let written = file
            .write_all(&bytes)
            .and_then(|()| file.sync_data())
            .map_err(io(&path, "write"));
        if let Err(e) = written {
            // A lease file without its record would cost the next writer a whole lease.
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        let meta = file.metadata().map_err(io(&path, "examine lease"))?;
        let file_id = (meta.dev(), meta.ino());
        let shared = Arc::new(Shared {
            dir: dir.to_owned(),
            path,
            file,
            file_id,
            record: std::sync::Mutex::new(record),
            lost: AtomicBool::new(false),
            lease,
        });
        let (stop, stopped) = mpsc::channel();
        let beating = Arc::clone(&shared);
        let beater = std::thread::Builder::new()
            .name("journal-lease".into())
            .spawn(move || beating.beat_until(&stopped))
            .map_err(io(dir, "start lease heartbeat"))?;
        Ok(Lease {
            shared,
            stop: Some(stop),
            beater: Some(beater),
        })
    }

    /// Check that the lease file is still this writer's: a writer calls this before each write.
    pub fn check(&self) -> Result<(), LeaseError> {
        self.shared.check()
    }

    pub fn holder(&self) -> Holder {
        self.shared.lock_record().clone()
    }
}

impl Shared {
    fn lock_record(&self) -> std::sync::MutexGuard<'_, Holder> {
        self.record.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check(&self) -> Result<(), LeaseError> {
        let lost = |why: String| LeaseError::Lost {
            dir: self.dir.clone(),
            why,
        };
        // Once the heartbeat found the file another's, the lease stays lost even if the file
        // comes back: a takeover may have written meanwhile.
        let was_lost = self.lost.load(Ordering::Acquire);
        // The common case in one `stat`: the file at the name is the one this writer made (a
        // takeover renames it away first, so another file or none is there).
        if !was_lost {
            if let Ok(m) = std::fs::symlink_metadata(&self.path) {
                if (m.dev(), m.ino()) == self.file_id {
                    return Ok(());
                }
            }
        }
        // Else read it: a file system whose inode numbers move may still show our token.
        let token = self.lock_record().token.clone();
        match read_record(&self.path) {
            Ok(Some(bytes)) => match Holder::parse(&bytes) {
                Some(h) if h.token == token && !was_lost => Ok(()),
                Some(h) if h.token == token => Err(lost(
                    "its heartbeat once found the lease file replaced".into(),
                )),
                Some(h) => Err(lost(format!(
                    "{} took it over, its lease having gone stale",
                    h.describe()
                ))),
                None => Err(lost("the lease file holds another record".into())),
            },
            Ok(None) => Err(lost("the lease file is gone".into())),
            Err(e) => Err(lost(format!("the lease file cannot be read ({e})"))),
        }
    }

    /// Rewrite the counter every lease/[`BEATS_PER_LEASE`] until told to stop or the file is no
    /// longer ours.
    fn beat_until(&self, stopped: &mpsc::Receiver<()>) {
        let every = self.lease / BEATS_PER_LEASE;
        loop {
            match stopped.recv_timeout(every) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            if self.check().is_err() {
                self.lost.store(true, Ordering::Release);
                return;
            }
            let bytes = {
                let mut record = self.lock_record();
                record.beat += 1;
                record.render()
            };
            let at = Holder::beat_offset(&bytes);
            let written = self
                .file
                .write_all_at(&bytes[at..], at as u64)
                .and_then(|()| self.file.sync_data());
            if let Err(e) = written {
                tracing::warn!("journal lease heartbeat not written: {e}");
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(beater) = self.beater.take() {
            let _ = beater.join();
        }
        if self.shared.check().is_err() {
            // Not ours any more: the file there is another writer's.
            return;
        }
        let mine = self.shared.lock_record().render();
        let token = self.shared.lock_record().token.clone();
        if let Err(e) = remove_if_same(&self.shared.path, &mine, &token) {
            tracing::warn!(
                "the journal lease {} was not removed ({e}); the next writer takes it over",
                self.shared.path.display()
            );
        }
    }
}

/// `Some(file)` when this call created the lease file, `None` when it exists already.
fn create_exclusive(path: &Path) -> Result<Option<File>, LeaseError> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(io(path, "create lease")(e)),
    }
}

/// The lease file's bytes (at most [`MAX_RECORD_BYTES`]), `None` if there is none.
fn read_record(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::with_capacity(512);
    file.take(MAX_RECORD_BYTES as u64).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

enum Verdict {
    /// The lease file vanished between the create and the look: try again at once.
    Gone,
    /// Proven stale: these bytes, and why.
    Stale(Vec<u8>, String),
    Held(Option<Holder>),
}

/// A waiter's memory of what it saw, on its own clock.
struct Waiting {
    settings: Settings,
    began: Instant,
    seen: Option<(Vec<u8>, Instant)>,
    pauses: Backoff,
    told: Option<Instant>,
}

impl Waiting {
    fn new(settings: Settings) -> Waiting {
        Waiting {
            settings,
            began: Instant::now(),
            seen: None,
            pauses: lock_pauses(),
            told: None,
        }
    }

    fn observe(&mut self, path: &Path, me: &Identity) -> Result<Verdict, LeaseError> {
        let Some(bytes) = read_record(path).map_err(io(path, "read lease"))? else {
            return Ok(Verdict::Gone);
        };
        let holder = Holder::parse(&bytes);
        if let Some(h) = holder.as_ref().filter(|h| h.same_host_as(me)) {
            if dead_on_this_host(h) {
                let why = format!("{} is no longer running", h.describe());
                return Ok(Verdict::Stale(bytes, why));
            }
        }
        let now = Instant::now();
        let unchanged_since = match &self.seen {
            Some((before, since)) if *before == bytes => *since,
            _ => now,
        };
        self.seen = Some((bytes.clone(), unchanged_since));
        // The longer of the two leases: the holder's own, and ours.
        let lease = holder.as_ref().map_or(self.settings.lease, |h| {
            Duration::from_millis(h.lease_ms).max(self.settings.lease)
        });
        if now.duration_since(unchanged_since) >= lease {
            let who = holder.map_or_else(|| "a writer".to_owned(), |h| h.describe());
            let why = format!(
                "{who} has not renewed its lease for {} s",
                lease.as_secs_f64().round()
            );
            return Ok(Verdict::Stale(bytes, why));
        }
        Ok(Verdict::Held(holder))
    }

    /// Sleep a little (1 ms doubling to 50 ms), or give up once the wait is over. Says whom it
    /// waits for after a second, then every ten.
    fn pause(&mut self, dir: &Path, holder: &Option<Holder>) -> Result<(), LeaseError> {
        let waited = self.began.elapsed();
        let who = holder
            .as_ref()
            .map_or_else(|| "a writer starting up".to_owned(), Holder::describe);
        if waited >= self.settings.wait {
            return Err(LeaseError::Busy {
                dir: dir.to_owned(),
                holder: who,
                waited_s: waited.as_secs(),
            });
        }
        let due = match self.told {
            None => waited >= Duration::from_secs(1),
            Some(at) => at.elapsed() >= Duration::from_secs(10),
        };
        if due {
            self.told = Some(Instant::now());
            tracing::warn!(
                "waiting for the journal's writer lock in {}, held by {who} (a writer on another \
                 host is taken over once its lease of {} s goes silent; giving up after {} s: \
                 --wait-lock)",
                dir.display(),
                self.settings.lease.as_secs(),
                self.settings.wait.as_secs()
            );
        }
        std::thread::sleep(self.pauses.next_delay().min(self.settings.wait - waited));
        Ok(())
    }
}

/// Remove a stale lease file, but only the one judged stale: move it aside (atomic), compare,
/// and put it back if what moved is not what was judged.
fn take_over(
    dir: &Path,
    path: &Path,
    stale: &[u8],
    token: &str,
    why: &str,
) -> Result<(), LeaseError> {
    let aside = dir.join(format!("{LEASE_FILE}.stale-{token}"));
    match std::fs::rename(path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(path, "move a stale lease aside")(e)),
    }
    let moved = read_record(&aside).map_err(io(&aside, "read lease"))?;
    if moved.as_deref() == Some(stale) {
        std::fs::remove_file(&aside).map_err(io(&aside, "remove stale lease"))?;
        tracing::warn!(
            "took over the journal's writer lock in {}: {why}",
            dir.display()
        );
    } else {
        // Another waiter won, or the holder beat after all: it is theirs.
        std::fs::rename(&aside, path).map_err(io(path, "put a live lease back"))?;
    }
    Ok(())
}

/// Remove our own lease file the same careful way: move it aside, and put back what is not ours.
fn remove_if_same(path: &Path, _mine: &[u8], token: &str) -> std::io::Result<()> {
    let aside = path.with_file_name(format!("{LEASE_FILE}.release-{token}"));
    match std::fs::rename(path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    let moved = read_record(&aside)?;
    match moved.as_deref().and_then(Holder::parse) {
        Some(h) if h.token == token => std::fs::remove_file(&aside),
        _ => std::fs::rename(&aside, path),
    }
}

/// The pauses of a wait for the journal's locks: 1 ms, doubling to 50 ms (a writer holds them
/// for milliseconds).
pub(super) fn lock_pauses() -> Backoff {
    Backoff::new(Duration::from_millis(1), Duration::from_millis(50))
}

/// Wait (up to `max`) until no writer holds the lease, for readers that want a quiet journal
/// (`journal verify`). `false` if one still does; a lease whose holder died on this host is free.
pub fn wait_until_free(dir: &Path, max: Duration) -> bool {
    let path = dir.join(LEASE_FILE);
    let until = Instant::now() + max;
    let mut pauses = lock_pauses();
    let me = Identity::current();
    while let Ok(Some(bytes)) = read_record(&path) {
        let dead =
            Holder::parse(&bytes).is_some_and(|h| h.same_host_as(&me) && dead_on_this_host(&h));
        if dead {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(pauses.next_delay());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder() -> Holder {
        Holder {
            token: Uuid::nil().to_string(),
            host: "login1".into(),
            boot: "b".into(),
            pidns: "pid:[1]".into(),
            pid: 42,
            start_ticks: 7,
            since_micros: 1_700_000_000_000_000,
            lease_ms: 30_000,
            beat: 3,
        }
    }

    #[test]
    fn a_record_reads_back_and_its_beat_is_rewritten_in_place() {
        let h = holder();
        let bytes = h.render();
        assert_eq!(Holder::parse(&bytes), Some(h.clone()));
        let next = Holder { beat: 4, ..h }.render();
        let at = Holder::beat_offset(&bytes);
        assert_eq!(bytes.len(), next.len());
        assert_eq!(bytes[..at], next[..at], "a beat changes only the counter");
        assert!(Holder::parse(b"").is_none());
        assert!(Holder::parse(&bytes[..bytes.len() / 2]).is_none());
    }

    /// A lease no heartbeat misses however loaded the machine, for tests of a live holder.
    fn live() -> Settings {
        Settings {
            lease: Duration::from_secs(3),
            wait: Duration::from_secs(10),
        }
    }

    fn fast() -> Settings {
        Settings {
            lease: Duration::from_millis(300),
            wait: Duration::from_secs(5),
        }
    }

    #[test]
    fn a_second_writer_waits_then_gets_the_lease_when_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = Lease::acquire(dir.path(), live()).unwrap();
        let d = dir.path().to_owned();
        let second = std::thread::spawn(move || {
            let t = Instant::now();
            let l = Lease::acquire(&d, live()).unwrap();
            (t.elapsed(), l.holder().token)
        });
        std::thread::sleep(Duration::from_millis(700));
        first.check().unwrap();
        let first_token = first.holder().token;
        drop(first);
        let (waited, token) = second.join().unwrap();
        assert!(
            waited >= Duration::from_millis(600),
            "{waited:?}: the live one beat"
        );
        assert_ne!(token, first_token);
        assert!(!dir.path().join(LEASE_FILE).exists(), "released on drop");
    }

    #[test]
    fn a_dead_holder_on_this_host_is_taken_over_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let me = Identity::current();
        // A pid that ran once and is gone (a child we waited for).
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let mut child = child;
        child.wait().unwrap();
        let dead = Holder {
            host: me.host.clone(),
            boot: me.boot.clone(),
            pidns: me.pidns.clone(),
            pid,
            lease_ms: 3_600_000,
            ..holder()
        };
        std::fs::write(dir.path().join(LEASE_FILE), dead.render()).unwrap();
        let t = Instant::now();
        let lease = Lease::acquire(dir.path(), fast()).unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(250),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(lease.holder().pid, std::process::id());
    }

    #[test]
    fn a_silent_holder_elsewhere_is_taken_over_after_its_lease_and_then_knows_it() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = Holder {
            host: "another-host".into(),
            lease_ms: 300,
            ..holder()
        };
        std::fs::write(dir.path().join(LEASE_FILE), elsewhere.render()).unwrap();
        let t = Instant::now();
        let lease = Lease::acquire(dir.path(), fast()).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
        lease.check().unwrap();
        // And a holder whose file was replaced learns it before it writes.
        let mut usurped = holder();
        usurped.token = Uuid::new_v4().to_string();
        // As a takeover does it: the old file moved away, a new one made.
        std::fs::remove_file(dir.path().join(LEASE_FILE)).unwrap();
        std::fs::write(dir.path().join(LEASE_FILE), usurped.render()).unwrap();
        assert!(matches!(lease.check(), Err(LeaseError::Lost { .. })));
        drop(lease);
        assert_eq!(
            std::fs::read(dir.path().join(LEASE_FILE)).unwrap(),
            usurped.render(),
            "another's lease is never removed"
        );
    }

    #[test]
    fn a_live_holder_elsewhere_makes_the_waiter_give_up_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let _held = Lease::acquire(dir.path(), fast()).unwrap();
        // A wait shorter than the lease: whatever the machine's load does to the heartbeat,
        // the waiter gives up before it could call the holder silent.
        let settings = Settings {
            lease: Duration::from_secs(3),
            wait: Duration::from_millis(900),
        };
        // Another host's view: our own live process is not "on its host".
        let e = std::thread::scope(|s| {
            s.spawn(|| {
                let mut wait = Waiting::new(settings);
                let me = Identity {
                    host: "elsewhere".into(),
                    ..Identity::current()
                };
                loop {
                    match wait.observe(&dir.path().join(LEASE_FILE), &me).unwrap() {
                        Verdict::Held(h) => {
                            if let Err(e) = wait.pause(dir.path(), &h) {
                                return e;
                            }
                        }
                        Verdict::Gone | Verdict::Stale(..) => panic!("the holder beats"),
                    }
                }
            })
            .join()
            .unwrap()
        });
        let msg = e.to_string();
        assert!(matches!(e, LeaseError::Busy { .. }), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
    }
}
