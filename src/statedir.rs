//! Where dispatch keeps its state, and the checks on it (`trust`: what below it is used).

pub mod trust;

use std::path::{Path, PathBuf};

use trust::{TrustError, Untrusted};

#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("no state directory: set --state-dir, DISPATCH_STATE_DIR, XDG_STATE_HOME or HOME")]
    Unresolvable,
    /// The state directory, or an entry below it, is another user's, writable by others, or a
    /// link (exit 3).
    #[error("{0}")]
    Untrusted(#[from] Untrusted),
    #[error("state directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// An XDG base directory variable, if set to an absolute path: the XDG spec says a relative
/// one is invalid and must be ignored.
pub fn xdg_dir(env: &dyn Fn(&str) -> Option<String>, var: &str) -> Option<PathBuf> {
    env(var).map(PathBuf::from).filter(|p| p.is_absolute())
}

/// `--state-dir`, else `$DISPATCH_STATE_DIR`, else `$XDG_STATE_HOME/dispatch`, else
/// `~/.local/state/dispatch`.
pub fn resolve(
    flag: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, StateDirError> {
    if let Some(p) = flag {
        return Ok(p.to_owned());
    }
    let non_empty = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = non_empty("DISPATCH_STATE_DIR") {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = xdg_dir(env, "XDG_STATE_HOME") {
        return Ok(p.join("dispatch"));
    }
    if let Some(home) = non_empty("HOME") {
        return Ok(PathBuf::from(home).join(".local/state/dispatch"));
    }
    Err(StateDirError::Unresolvable)
}

pub fn journal_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("journal")
}

impl From<TrustError> for StateDirError {
    fn from(e: TrustError) -> StateDirError {
        match e {
            TrustError::Untrusted(u) => StateDirError::Untrusted(u),
            TrustError::Io { path, source } => StateDirError::Io { path, source },
        }
    }
}

/// Refuse a state directory that is another user's or writable by group or others, and any
/// of the entries dispatch creates directly in it ([`trust::TOP_LEVEL`]) that is a link,
/// another user's or writable by others: a few `lstat`s, done by every command before it
/// reads or writes anything. A missing directory passes. What is below those entries is
/// checked where it is opened (the journal's files by the journal, a worker's tree by
/// `WorkerDirs`).
pub fn check(path: &Path) -> Result<Checked, StateDirError> {
    if trust::check_root(path)? {
        for name in trust::TOP_LEVEL {
            trust::check(&path.join(name), trust::Want::Dir)?;
        }
    }
    Ok(Checked(path.to_owned()))
}

/// A state directory that passed [`check`] (or [`prepare`]), and the only way to hold one: a
/// command that takes it cannot run on a directory nobody checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked(PathBuf);

impl Checked {
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Create it owner-only if it is missing, and check what was made ([`prepare`]).
    pub fn prepare(&self) -> Result<(), StateDirError> {
        prepare(&self.0).map(drop)
    }

    pub fn journal_dir(&self) -> PathBuf {
        journal_dir(&self.0)
    }
}

/// A checked state directory is read as the path it is: the check is what holding one proves.
impl std::ops::Deref for Checked {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

/// Check, then create the state directory owner-only if missing (its parents too, as the
/// user's own directories: they are above what dispatch answers for).
pub fn prepare(path: &Path) -> Result<Checked, StateDirError> {
    use std::os::unix::fs::DirBuilderExt;
    check(path)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| StateDirError::Io {
            path: path.to_owned(),
            source,
        })?;
    check(path)
}

/// An environment of fixed variables, for the resolution tests here and in `config`.
#[cfg(test)]
pub(crate) fn fixed_env(
    vars: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_order() {
        let env = fixed_env;
        let all = env(&[
            ("DISPATCH_STATE_DIR", "/a"),
            ("XDG_STATE_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(
            resolve(Some(Path::new("/f")), &all).unwrap(),
            PathBuf::from("/f")
        );
        assert_eq!(resolve(None, &all).unwrap(), PathBuf::from("/a"));
        let xdg = env(&[
            ("DISPATCH_STATE_DIR", ""),
            ("XDG_STATE_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(resolve(None, &xdg).unwrap(), PathBuf::from("/x/dispatch"));
        let relative = env(&[("XDG_STATE_HOME", "x"), ("HOME", "/h")]);
        assert_eq!(
            resolve(None, &relative).unwrap(),
            PathBuf::from("/h/.local/state/dispatch"),
            "a relative XDG_STATE_HOME is ignored"
        );
        let home = env(&[("HOME", "/h")]);
        assert_eq!(
            resolve(None, &home).unwrap(),
            PathBuf::from("/h/.local/state/dispatch")
        );
        assert!(resolve(None, &env(&[])).is_err());
    }
}
