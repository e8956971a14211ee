//! Shared rendering helpers.

use std::io::Write;

use super::exit::{self, Failure};

static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `-q`: only errors on stderr from now on.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, std::sync::atomic::Ordering::Relaxed);
}

/// A warning or progress line on stderr (never stdout), unless `-q` was given.
pub fn note(line: &str) {
    if !QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("dispatch: {line}");
    }
}

/// Each of `warnings` as a [`note`].
pub fn warn(warnings: &[String]) {
    for w in warnings {
        note(&format!("warning: {w}"));
    }
}

/// Print exactly one JSON document on stdout.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    // Through a buffer of its own: stdout's line buffer holds 1 KiB, and a document of
    // thousands of workers (one line) would be written 1 KiB at a time, each piece searched
    // for a newline. (std's BufWriter measured as fast as a hand-made chunk buffer, or faster:
    // 0.79-1.02x on 200k workers' JSON.)
    let mut out = std::io::BufWriter::with_capacity(JSON_BUFFER, std::io::stdout().lock());
    match serde_json::to_writer(&mut out, value) {
        Err(e) if e.is_io() => stdout_failed(e.into()),
        Err(e) => return Err(Failure::new(exit::FAILED, e.to_string())),
        Ok(()) => {}
    }
    if let Err(e) = writeln!(out).and_then(|()| out.flush()) {
        stdout_failed(e);
    }
    Ok(())
}

/// `--json`: `value` as one JSON document; else what `human` prints.
pub fn emit(
    json: bool,
    value: &impl serde::Serialize,
    human: impl FnOnce(),
) -> Result<(), Failure> {
    if json {
        return print_json(value);
    }
    human();
    Ok(())
}

/// How much of a JSON document is written to stdout at a time.
const JSON_BUFFER: usize = 64 * 1024;

/// Write to stdout what `print!` would; see [`outln!`](crate::outln).
pub fn write_out(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        stdout_failed(e);
    }
}

/// Output is written once the command's work is recorded, so a reader that went away
/// (`dispatch pool status | head`) ends the command quietly with success, as `cat` would;
/// any other write error is said on stderr and exits 1.
pub fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(i32::from(exit::OK));
    }
    eprintln!("dispatch: cannot write to stdout: {e}");
    std::process::exit(i32::from(exit::FAILED));
}

/// `println!` for command output: a closed stdout ends the command quietly instead of
/// panicking (exit 101).
#[macro_export]
macro_rules! outln {
    () => { $crate::cli::output::write_out(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::cli::output::write_out(format_args!($($arg)*), true) };
}

/// `print!` for command output; see [`outln!`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::output::write_out(format_args!($($arg)*), false) };
}
