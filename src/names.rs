//! The two rules every name a user or a config gives dispatch must pass, checked once at the
//! edge (the CLI's argument parser, the config loader) and again where a name becomes a path.
//!
//! - A **path name** (pool, worker, trial, asset) becomes a directory and a Slurm step name:
//!   1 to 64 characters of `[A-Za-z0-9._-]`, not starting with `.` (hidden, `..`) or `-` (an
//!   option to every tool it is handed to).
//! - A **label** (a session's mirror, a target) is free text that is only ever quoted or
//!   sanitized, never a path: at most 256 bytes of UTF-8, no control character (a newline
//!   ends a script's comment line, a tab or ESC garbles a terminal), not starting with `-`.
//!
//! Refusals never echo a hostile value whole: they show a short escaped prefix and the length
//! (`short`), so a 10 kB name gives a message of one line.

use std::fmt::Write as _;

pub const MAX_PATH_NAME: usize = 64;
pub const MAX_LABEL_BYTES: usize = 256;
/// Characters of a refused value shown in a message.
const SHOWN_CHARS: usize = 40;

/// A pool, worker, trial or asset name.
pub fn check_path_name(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_PATH_NAME
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        return Ok(());
    }
    Err(format!(
        "{what} name {} must be 1 to {MAX_PATH_NAME} characters of [A-Za-z0-9._-], not \
         starting with '.' or '-'",
        short(name)
    ))
}

/// A mirror or target name.
pub fn check_label(what: &str, name: &str) -> Result<(), String> {
    let refuse = |why: &str| Err(format!("{what} name {} {why}", short(name)));
    if name.is_empty() {
        return refuse("is empty");
    }
    if name.len() > MAX_LABEL_BYTES {
        return refuse(&format!("is longer than {MAX_LABEL_BYTES} bytes"));
    }
    check_no_control(&format!("{what} name"), name)?;
    if name.starts_with('-') {
        return refuse("starts with '-'");
    }
    Ok(())
}

/// No control character in a value that a config gives (a path, a pin): such a value is
/// never what the person meant, and a newline in it breaks every line-based format.
pub fn check_no_control(what: &str, value: &str) -> Result<(), String> {
    if value.chars().any(char::is_control) {
        return Err(format!(
            "{what} {} contains a control character (newline, tab, escape, ...)",
            short(value)
        ));
    }
    Ok(())
}

/// `value` quoted and escaped for a message, cut to its first 40 characters with its length
/// when longer.
pub fn short(value: &str) -> String {
    let count = value.chars().count();
    let mut s = String::from("\"");
    for c in value.chars().take(SHOWN_CHARS) {
        s.extend(c.escape_debug());
    }
    s.push('"');
    if count > SHOWN_CHARS {
        let _ = write!(s, "… ({} bytes)", value.len());
    }
    s
}

/// The clap value parsers for names: they refuse with this module's short messages (clap's
/// own message would print the whole value), and say so for bytes that are not UTF-8.
pub mod arg {
    use clap::builder::TypedValueParser;
    use clap::error::{Error, ErrorKind};

    /// A name of `what` (named in the message), checked by one of this module's rules.
    #[derive(Clone, Copy, Debug)]
    pub struct NameParser {
        what: &'static str,
        check: fn(&str, &str) -> Result<(), String>,
    }

    /// A pool, worker, trial or asset name (`what` names it in the message).
    pub fn path_name(what: &'static str) -> NameParser {
        NameParser {
            what,
            check: super::check_path_name,
        }
    }

    /// A mirror or target name.
    pub fn label(what: &'static str) -> NameParser {
        NameParser {
            what,
            check: super::check_label,
        }
    }

    impl TypedValueParser for NameParser {
        type Value = String;

        fn parse_ref(
            &self,
            cmd: &clap::Command,
            _arg: Option<&clap::Arg>,
            value: &std::ffi::OsStr,
        ) -> Result<String, Error> {
            let what = self.what;
            let refuse = |message: String| {
                Err(Error::raw(ErrorKind::ValueValidation, format!("{message}\n")).with_cmd(cmd))
            };
            let Some(text) = value.to_str() else {
                let lossy = value.to_string_lossy();
                return refuse(format!(
                    "{what} name {} is not valid UTF-8",
                    super::short(&lossy)
                ));
            };
            match (self.check)(what, text) {
                Ok(()) => Ok(text.to_owned()),
                Err(message) => refuse(message),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_names() {
        for good in ["p1", "a.b-c_d", "x-", &"x".repeat(64)] {
            assert!(check_path_name("pool", good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "-rf",
            "a/b",
            "a b",
            "x;y",
            "é",
            "a\nb",
            "$(id)",
            &"x".repeat(65),
        ] {
            assert!(check_path_name("pool", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn labels() {
        for good in [
            "my repo",
            "K/Agg",
            "café",
            "x;rm -rf /",
            "$(id)",
            "`id`",
            "a'b\"c",
        ] {
            assert!(check_label("mirror", good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "m\ntouch PWNED\n#",
            "a\tb",
            "a\rb",
            "\u{1b}[31m",
            "\u{7f}",
            "\u{85}",
            "-m",
            &"x".repeat(257),
        ] {
            assert!(check_label("mirror", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn messages_stay_short_whatever_the_value() {
        let huge = "x".repeat(10_000);
        for m in [
            check_label("mirror", &huge).unwrap_err(),
            check_path_name("worker", &huge).unwrap_err(),
            check_no_control("path", &format!("{huge}\n")).unwrap_err(),
        ] {
            assert!(m.len() < 200, "{} bytes: {m}", m.len());
            assert!(
                m.contains("10000 bytes") || m.contains("10001 bytes"),
                "{m}"
            );
            assert!(!m.contains('\n'), "{m}");
        }
        assert_eq!(short("a\nb"), r#""a\nb""#);
    }
}
