//! Usage errors that say what to type instead of only what was wrong.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;

use super::{hint, Cli};

/// The tip for a usage error, when there is one to give: a word clap did not expect that
/// begins a command to run, on a command that takes one only after `--` (`pool submit`,
/// `submit`, `session launch`, `session attach`). Clap alone says "unexpected argument
/// 'echo' found", which names neither the `--` nor where it goes (issue 36 item 8).
pub fn tip(args: &[OsString], error: &clap::Error) -> Option<String> {
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(word)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_str().map(str::to_owned))
        .collect::<Option<_>>()?;
    if words.iter().any(|w| w == "--") {
        return None;
    }
    // The first place where a `--` makes the line parse, or leaves only a missing flag.
    let fixed = (1..words.len())
        .filter(|&i| words[i] == *word)
        .find_map(|i| {
            let mut fixed = words.clone();
            fixed.insert(i, "--".to_owned());
            match Cli::try_parse_from(&fixed) {
                Ok(_) => Some(fixed),
                Err(e) if e.kind() == ErrorKind::MissingRequiredArgument => Some(fixed),
                Err(_) => None,
            }
        })?;
    Some(format!(
        "the command to run goes after `--`: {}",
        hint::typed_line(&fixed[1..])
    ))
}

/// Clap's error with the tip shown where clap shows its own.
pub fn with_tip(mut error: clap::Error, tip: &str) -> clap::Error {
    error.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![tip.to_owned().into()]),
    );
    error
}
