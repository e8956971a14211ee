//! The batch script a confined session's sbatch runs, and the shell quoting it needs.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::event::session::SessionKey;
use crate::journal::JournalError;

/// One shell word that the shell reads back as exactly `s`.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// What the job runs: the command, or (without one) a keeper that holds the allocation until
/// its time limit or `session release`, for `session attach` to step into.
///
/// No value reaches the script as code: the comment names only the job's token and the
/// sanitized target (a name's newline would end a comment line), and every other value is one
/// single-quoted word, including in the message of a failed `cd` (inside double quotes the
/// shell would expand `$(...)`).
pub fn body(key: &SessionKey, workdir: Option<&Path>, command: &[String]) -> String {
    use crate::config::sanitize_token;
    let mut s = String::from("#!/bin/bash\n");
    s.push_str(&format!(
        "# dispatch session {}--{}; written by dispatch on each submit\n",
        sanitize_token(&key.mirror),
        sanitize_token(&key.target)
    ));
    s.push_str("set -u\n");
    if let Some(dir) = workdir {
        let d = shell_quote(&dir.to_string_lossy());
        s.push_str(&format!(
            "cd -- {d} || {{ printf 'DISPATCH: cd %s failed\\n' {d} >&2; exit 1; }}\n"
        ));
    }
    if command.is_empty() {
        s.push_str("exec sleep infinity\n");
    } else {
        let words: Vec<String> = command.iter().map(|w| shell_quote(w)).collect();
        s.push_str(&format!("exec {}\n", words.join(" ")));
    }
    s
}

/// Paths of a session's script and Slurm log (`%j` is Slurm's, left literal), under
/// `config::session_files_dir`.
pub fn paths(dir: &Path, token: &str, target: &str) -> (PathBuf, PathBuf) {
    let target = crate::config::sanitize_token(target);
    (
        dir.join("scripts")
            .join(format!("job-{token}--{target}.sh")),
        dir.join("logs").join(format!("job-{token}-%j.out")),
    )
}

/// Where the salloc of an unconfined launch writes its messages (`Pending job allocation N`,
/// then `Granted …`): it runs on in the background after the launch returns the job id.
pub fn salloc_log(dir: &Path, token: &str, target: &str) -> PathBuf {
    let target = crate::config::sanitize_token(target);
    dir.join("logs")
        .join(format!("salloc-{token}--{target}.log"))
}

/// Create the directory a log goes in (owner-only), and check nobody else can write in it.
pub fn stage_log_dir(log: &Path) -> Result<(), crate::ops::error::OpError> {
    stage_dirs(&[log])
}

fn stage_dirs(paths: &[&Path]) -> Result<(), crate::ops::error::OpError> {
    for dir in paths.iter().filter_map(|p| p.parent()) {
        crate::journal::files::create_private_dir(dir)?;
        crate::statedir::trust::check(dir, crate::statedir::trust::Want::Dir)
            .map_err(|e| crate::ops::error::OpError::StateDir(e.into()))?;
    }
    Ok(())
}

/// Write the script atomically (temp file, fsync, rename), owner-only and executable, and
/// create the log directory. A failure here happens before any job exists.
///
/// Both directories must be ours and writable by nobody else (exit 3 otherwise): whoever can
/// write in `scripts/` could swap the script Slurm runs as us.
pub fn stage(script: &Path, log: &Path, body: &str) -> Result<(), crate::ops::error::OpError> {
    let io = |path: &Path, what: &str| {
        let path = path.to_owned();
        let what = what.to_owned();
        move |source| JournalError::Io { path, what, source }
    };
    stage_dirs(&[script, log])?;
    let tmp = script.with_extension(format!("sh.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o700)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io(&tmp, "write batch script"))?;
        f.write_all(body.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io(&tmp, "write batch script"))?;
        std::fs::rename(&tmp, script).map_err(io(script, "install batch script"))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("sleep"), "sleep");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$(id)"), "'$(id)'");
    }

    #[test]
    fn the_script_runs_the_command_word_for_word() {
        let key = SessionKey::new("K Agg", "htc");
        let b = body(
            &key,
            Some(Path::new("/src/k agg")),
            &["python3".into(), "-c".into(), "print('hi')".into()],
        );
        assert!(b.starts_with("#!/bin/bash\n"), "{b}");
        assert!(b.contains("cd -- '/src/k agg' ||"), "{b}");
        assert!(
            b.ends_with("exec python3 -c 'print('\\''hi'\\'')'\n"),
            "{b}"
        );
        assert!(body(&key, None, &[]).ends_with("exec sleep infinity\n"));
        let (script, log) = paths(Path::new("/c"), "K_Agg", "a/b");
        assert_eq!(script, Path::new("/c/scripts/job-K_Agg--a_b.sh"));
        assert_eq!(log, Path::new("/c/logs/job-K_Agg-%j.out"));
    }

    /// Values that would run `touch MARK` if any reached the shell as code, in every quoting
    /// context a script can have (comment, bare word, single and double quotes, backticks).
    fn hostile(mark: &Path) -> Vec<String> {
        let m = mark.display();
        vec![
            format!("m\ntouch {m}\n#"),
            format!("m\rtouch {m}\n"),
            format!("$(touch {m})"),
            format!("`touch {m}`"),
            format!("x; touch {m}"),
            format!("x' ; touch {m}; '"),
            format!("x\" ; touch {m}; \""),
            format!("x\\' ; touch {m} #"),
            format!("-x && touch {m}"),
            format!("${{IFS}}$(touch {m})"),
            format!("{}$(touch {m})", "y".repeat(10_000)),
        ]
    }

    #[test]
    fn no_value_in_a_script_ever_runs_as_code() {
        let tmp = tempfile::tempdir().unwrap();
        let mark = tmp.path().join("PWNED");
        let argv_out = tmp.path().join("argv");
        let mut runs = 0;
        for value in hostile(&mark) {
            for place in ["mirror", "target", "workdir", "command"] {
                let (mirror, target) = match place {
                    "mirror" => (value.as_str(), "t"),
                    "target" => ("m", value.as_str()),
                    _ => ("m", "t"),
                };
                let key = SessionKey::new(mirror, target);
                let workdir = match place {
                    "workdir" => tmp.path().join(&value),
                    _ => tmp.path().to_owned(),
                };
                // The command prints its arguments NUL-separated, so we see they arrive whole.
                let printer = format!("printf '%s\\0' \"$@\" > {}", argv_out.display());
                let mut command = vec!["bash".into(), "-c".into(), printer, "argv0".into()];
                if place == "command" {
                    command.push(value.clone());
                }
                let script = tmp.path().join("job.sh");
                std::fs::write(&script, body(&key, Some(&workdir), &command)).unwrap();
                let _ = std::fs::remove_file(&argv_out);
                let out = std::process::Command::new("bash")
                    .arg(&script)
                    .current_dir(tmp.path())
                    .output()
                    .unwrap();
                runs += 1;
                assert!(!mark.exists(), "{place} {value:?} ran as code");
                if place == "workdir" {
                    // That directory does not exist: the script must stop, saying so.
                    assert_eq!(out.status.code(), Some(1), "{place} {value:?}");
                    assert!(String::from_utf8_lossy(&out.stderr).contains("DISPATCH: cd"));
                    continue;
                }
                assert!(out.status.success(), "{place} {value:?}: {out:?}");
                let seen = std::fs::read(&argv_out).unwrap();
                // printf applies its format once even without arguments.
                let want = if place == "command" {
                    format!("{value}\0")
                } else {
                    "\0".to_owned()
                };
                assert_eq!(String::from_utf8_lossy(&seen), want, "{place} {value:?}");
            }
        }
        assert_eq!(runs, 44);
    }

    #[test]
    fn a_script_directory_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let (script, log) = paths(tmp.path(), "m", "t");
        stage(&script, &log, "#!/bin/bash\n").unwrap();
        let scripts = script.parent().unwrap();
        std::fs::set_permissions(scripts, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = stage(&script, &log, "#!/bin/bash\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains(&scripts.display().to_string()), "{e}");
        assert!(e.contains("chmod 700"), "{e}");
    }
}
