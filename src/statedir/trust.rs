//! What dispatch trusts below its state directory: entries the caller owns, that nobody else
//! can write, reached without a symbolic link. Anything else is refused with the path and
//! the command that fixes it; dispatch never changes the user's files to make them fit.
//!
//! Once a directory passes, nobody but its owner (or root) can add, swap or remove entries in
//! it, so checking each directory on the way down, then opening, leaves no window to another
//! user. The judgement (`judge`) is pure; this module's other functions observe with `lstat`.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// What an entry is expected to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    Dir,
    File,
}

impl Want {
    fn noun(self) -> &'static str {
        match self {
            Want::Dir => "directory",
            Want::File => "regular file",
        }
    }
}

/// What `lstat` saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Dir,
    File,
    Symlink,
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub seen: Seen,
    pub uid: u32,
    pub mode: u32,
}

impl Observed {
    pub fn of(m: &std::fs::Metadata) -> Observed {
        let t = m.file_type();
        let seen = if t.is_symlink() {
            Seen::Symlink
        } else if t.is_dir() {
            Seen::Dir
        } else if t.is_file() {
            Seen::File
        } else {
            debug_assert!(
                t.is_fifo() || t.is_socket() || t.is_block_device() || t.is_char_device()
            );
            Seen::Other
        };
        Observed {
            seen,
            uid: m.uid(),
            mode: m.mode() & 0o7777,
        }
    }
}

/// Why an entry below the state directory is not used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error(
        "{} belongs to {}, not to you (uid {me}): dispatch neither reads nor writes \
         what another user could have put in its state directory. If its contents are yours, \
         give it back (as root): `{}`; otherwise move it aside: `{}`",
        path.display(), user_shown(*owner, owner_name.as_deref()), chown(*me, path, *want),
        move_aside(path)
    )]
    Foreign {
        path: PathBuf,
        owner: u32,
        /// The owner's user name, when the system's user database knows it.
        owner_name: Option<String>,
        me: u32,
        want: Want,
    },
    #[error(
        "{} is writable by {} (mode {mode:04o}): another user could change what dispatch \
         trusts. Run `{}`",
        path.display(), writers(*mode), chmod(path, *want)
    )]
    Writable {
        path: PathBuf,
        mode: u32,
        want: Want,
    },
    #[error(
        "{} is a symbolic link to {}: dispatch never follows a link below its state directory. \
         Replace the link by what it points to: `rm {} && mv {} {}`",
        path.display(), target.display(), quote(path), quote(target), quote(path)
    )]
    Symlink { path: PathBuf, target: PathBuf },
    #[error(
        "{} is not a {}: dispatch expects one there. Move it aside: `{}`",
        path.display(), want.noun(), move_aside(path)
    )]
    NotA { path: PathBuf, want: Want },
}

impl Untrusted {
    /// This refusal naming the owner `name` (another user's entry), as the user database
    /// gives it for its uid: [`judge`] sees only the uid.
    pub fn owned_by(self, name: Option<String>) -> Untrusted {
        match self {
            Untrusted::Foreign {
                path,
                owner,
                me,
                want,
                ..
            } => Untrusted::Foreign {
                path,
                owner,
                owner_name: name,
                me,
                want,
            },
            other => other,
        }
    }

    /// [`Untrusted::owned_by`] the name the system's user database gives the owner.
    fn with_owner_named(self) -> Untrusted {
        match &self {
            Untrusted::Foreign { owner, .. } => {
                let name = crate::sys::user_name(*owner);
                self.owned_by(name)
            }
            _ => self,
        }
    }
}

/// A user as dispatch names one: `uid 1001 (alice)`, or `uid 1001` when it has no name.
pub fn user_shown(uid: u32, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("uid {uid} ({name})"),
        None => format!("uid {uid}"),
    }
}

/// An entry could not be looked at (permission denied, say): not a verdict on it.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(transparent)]
    Untrusted(#[from] Untrusted),
    #[error("cannot inspect {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrustError + '_ {
    move |source| TrustError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A path as a shell word: bare when it is only safe characters, else single-quoted.
fn quote(path: &Path) -> String {
    let s = path.display().to_string();
    let safe = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%,".contains(&b));
    if safe {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn chown(me: u32, path: &Path, want: Want) -> String {
    match want {
        Want::Dir => format!("chown -R {me} {}", quote(path)),
        Want::File => format!("chown {me} {}", quote(path)),
    }
}

fn chmod(path: &Path, want: Want) -> String {
    match want {
        Want::Dir => format!("chmod 700 {}", quote(path)),
        Want::File => format!("chmod go-w {}", quote(path)),
    }
}

fn move_aside(path: &Path) -> String {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".untrusted");
    format!("mv {} {}", quote(path), quote(Path::new(&aside)))
}

fn writers(mode: u32) -> &'static str {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "group and others",
        (true, false) => "its group",
        _ => "others",
    }
}

/// May dispatch use this entry? `target` is the link's target, for the message.
pub fn judge(
    path: &Path,
    o: &Observed,
    me: u32,
    want: Want,
    target: impl FnOnce() -> PathBuf,
) -> Result<(), Untrusted> {
    let path = path.to_owned();
    let kind_ok = matches!(
        (o.seen, want),
        (Seen::Dir, Want::Dir) | (Seen::File, Want::File)
    );
    if o.seen == Seen::Symlink {
        Err(Untrusted::Symlink {
            path,
            target: target(),
        })
    } else if !kind_ok {
        Err(Untrusted::NotA { path, want })
    } else if o.uid != me {
        Err(Untrusted::Foreign {
            path,
            owner: o.uid,
            owner_name: None,
            me,
            want,
        })
    } else if o.mode & 0o022 != 0 {
        Err(Untrusted::Writable {
            path,
            mode: o.mode,
            want,
        })
    } else {
        Ok(())
    }
}

/// [`judge`] what `lstat` returned for `path`, as the caller.
pub fn judge_metadata(path: &Path, m: &std::fs::Metadata, want: Want) -> Result<(), Untrusted> {
    judge(path, &Observed::of(m), crate::sys::geteuid(), want, || {
        std::fs::read_link(path).unwrap_or_else(|_| PathBuf::from("?"))
    })
    .map_err(Untrusted::with_owner_named)
}

/// Check one entry without following it. `Ok(false)`: it does not exist.
pub fn check(path: &Path, want: Want) -> Result<bool, TrustError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            judge_metadata(path, &m, want)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

/// The state directory itself, which may be a link the user made (the check is of what it
/// points to); links are refused only below it. `Ok(false)`: it does not exist.
pub fn check_root(path: &Path) -> Result<bool, TrustError> {
    match std::fs::metadata(path) {
        Ok(m) => {
            judge(
                path,
                &Observed::of(&m),
                crate::sys::geteuid(),
                Want::Dir,
                PathBuf::new,
            )
            .map_err(Untrusted::with_owner_named)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

/// The directories from `base` (exclusive) down to `path`, in order.
fn steps_below<'a>(base: &'a Path, path: &'a Path) -> impl Iterator<Item = PathBuf> + 'a {
    let rest = path.strip_prefix(base).unwrap_or_else(|_| {
        panic!(
            "{} is not below the state directory {}",
            path.display(),
            base.display()
        )
    });
    assert!(
        rest.components().all(|c| matches!(c, Component::Normal(_))),
        "{} climbs out of {}",
        path.display(),
        base.display()
    );
    let mut at = base.to_owned();
    rest.components().map(move |c| {
        at.push(c);
        at.clone()
    })
}

/// Check every directory from below `base` down to `path` (inclusive), stopping at the first
/// that does not exist (`Ok(false)`: nothing below it to open).
pub fn check_below(base: &Path, path: &Path) -> Result<bool, TrustError> {
    for step in steps_below(base, path) {
        if !check(&step, Want::Dir)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Create the directories from below `base` down to `path`, owner-only, one at a time, and
/// check each one that is there already. Never follows a link on the way.
pub fn create_below(base: &Path, path: &Path) -> Result<(), TrustError> {
    for step in steps_below(base, path) {
        if check(&step, Want::Dir)? {
            continue;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&step) {
            Ok(()) => {}
            // Made meanwhile (by ourselves, as only we can write its parent): judge it.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(&step)(e)),
        }
        check(&step, Want::Dir)?;
    }
    Ok(())
}

/// A journal directory and every entry in it (segments, snapshots, `LOCK`, saved tails):
/// a handful of `lstat`s. `Ok(false)`: there is no directory.
pub fn check_journal(dir: &Path) -> Result<bool, TrustError> {
    if !check(dir, Want::Dir)? {
        return Ok(false);
    }
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        // `DirEntry::metadata` does not follow a link.
        let m = match entry.metadata() {
            Ok(m) => m,
            // Gone since the listing (the writer renamed its checkpoint's temporary file, or
            // a repair moved a tail aside): nothing left to trust or refuse.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&path)(e)),
        };
        judge_metadata(&path, &m, Want::File)?;
    }
    Ok(true)
}

/// The entries directly in the state directory that dispatch creates and later trusts.
pub const TOP_LEVEL: [&str; 5] = ["journal", "assets", "pools", "jobs", "sessions"];

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(seen: Seen, uid: u32, mode: u32, want: Want) -> Result<(), Untrusted> {
        let o = Observed { seen, uid, mode };
        judge(Path::new("/s/x y"), &o, 1000, want, || "/elsewhere".into())
    }

    #[test]
    fn only_our_own_unshared_entries_of_the_right_kind_pass() {
        for (seen, uid, mode, want, ok) in [
            (Seen::Dir, 1000, 0o700, Want::Dir, true),
            (Seen::Dir, 1000, 0o755, Want::Dir, true),
            (Seen::File, 1000, 0o444, Want::File, true),
            (Seen::File, 1000, 0o600, Want::File, true),
            (Seen::Dir, 0, 0o700, Want::Dir, false),
            (Seen::Dir, 1000, 0o770, Want::Dir, false),
            (Seen::Dir, 1000, 0o1777, Want::Dir, false),
            (Seen::File, 1000, 0o602, Want::File, false),
            (Seen::File, 1000, 0o600, Want::Dir, false),
            (Seen::Dir, 1000, 0o700, Want::File, false),
            (Seen::Other, 1000, 0o600, Want::File, false),
            (Seen::Symlink, 1000, 0o777, Want::File, false),
            (Seen::Symlink, 1000, 0o777, Want::Dir, false),
        ] {
            let v = verdict(seen, uid, mode, want);
            assert_eq!(v.is_ok(), ok, "{seen:?} {uid} {mode:o} as {want:?}");
        }
    }

    #[test]
    fn every_refusal_names_the_path_and_its_fix() {
        for (seen, uid, mode, want, fix) in [
            (Seen::Dir, 0, 0o700, Want::Dir, "`chown -R 1000 '/s/x y'`"),
            (Seen::File, 0, 0o600, Want::File, "`chown 1000 '/s/x y'`"),
            (Seen::Dir, 1000, 0o777, Want::Dir, "`chmod 700 '/s/x y'`"),
            (Seen::File, 1000, 0o620, Want::File, "`chmod go-w '/s/x y'`"),
            (
                Seen::Symlink,
                1000,
                0o777,
                Want::Dir,
                "`rm '/s/x y' && mv /elsewhere '/s/x y'`",
            ),
            (
                Seen::Other,
                1000,
                0o600,
                Want::File,
                "`mv '/s/x y' '/s/x y.untrusted'`",
            ),
        ] {
            let message = verdict(seen, uid, mode, want).unwrap_err().to_string();
            assert!(message.starts_with("/s/x y "), "{message}");
            assert!(message.contains(fix), "{message} lacks {fix}");
        }
    }

    #[test]
    fn quoting_survives_a_quote() {
        assert_eq!(quote(Path::new("/a/b-c.d")), "/a/b-c.d");
        assert_eq!(quote(Path::new("/a/it's")), r"'/a/it'\''s'");
    }

    #[test]
    fn creation_below_refuses_a_link_and_creates_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let base = t.path();
        let deep = base.join("pools/p/workers/w");
        create_below(base, &deep).unwrap();
        for step in steps_below(base, &deep) {
            let m = std::fs::symlink_metadata(&step).unwrap();
            assert_eq!(m.permissions().mode() & 0o777, 0o700, "{}", step.display());
        }
        assert!(check_below(base, &deep).unwrap());
        assert!(!check_below(base, &base.join("pools/q/workers")).unwrap());

        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), base.join("jobs")).unwrap();
        let err = create_below(base, &base.join("jobs/j/evidence")).unwrap_err();
        assert!(
            matches!(err, TrustError::Untrusted(Untrusted::Symlink { .. })),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(check_below(base, &base.join("jobs/j")).is_err());
    }

    #[test]
    #[should_panic(expected = "climbs out of")]
    fn a_path_that_climbs_out_is_a_bug() {
        let _ = check_below(Path::new("/s"), Path::new("/s/pools/../../etc"));
    }
}
