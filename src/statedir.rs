//! Where dispatch keeps its state, and the checks on it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::journal::writer::create_private_dir;
use crate::journal::JournalError;

#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("no state directory: set --state-dir, DISPATCH_STATE_DIR, XDG_STATE_HOME or HOME")]
    Unresolvable,
    #[error(
        "state directory {} is owned by uid {owner}, not by you (uid {me}); dispatch refuses to use it. \
         Pass --state-dir with a directory of your own",
        path.display()
    )]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
    #[error("state directory {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Journal(#[from] JournalError),
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

/// Refuse a state directory owned by someone else. A missing directory passes.
pub fn check_owner(path: &Path) -> Result<(), StateDirError> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match std::fs::metadata(path) {
        Ok(m) if m.uid() != me => Err(StateDirError::NotOwned {
            path: path.to_owned(),
            owner: m.uid(),
            me,
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StateDirError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Check ownership, then create the state directory owner-only if missing.
pub fn prepare(path: &Path) -> Result<(), StateDirError> {
    check_owner(path)?;
    create_private_dir(path)?;
    check_owner(path)
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
