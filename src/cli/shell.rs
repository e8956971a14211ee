//! `dispatch completions SHELL` and `dispatch man [DIR]`: generated from the same clap tree
//! the parser uses, so they cannot drift from it (docs/cli.md, "completions", "man").

use std::path::Path;

use clap::CommandFactory;

use super::exit::{self, Failure};

/// The shells `dispatch completions` writes a script for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Print the completion script for `shell` on stdout.
pub fn completions(shell: Shell) -> Result<u8, Failure> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut super::Cli::command(), "dispatch", &mut script);
    crate::out!("{}", String::from_utf8_lossy(&script));
    Ok(exit::OK)
}

/// Write `dispatch.1` and one `dispatch-<command>.1` per subcommand into `dir`, or print
/// `dispatch.1` on stdout when no directory is given.
pub fn man(dir: Option<&Path>) -> Result<u8, Failure> {
    let cmd = super::Cli::command();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd)
            .render(&mut page)
            .map_err(|e| Failure::new(exit::FAILED, format!("cannot render the man page: {e}")))?;
        crate::out!("{}", String::from_utf8_lossy(&page));
        return Ok(exit::OK);
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        Failure::new(
            exit::FAILED,
            format!("cannot create {}: {e}", dir.display()),
        )
    })?;
    clap_mangen::generate_to(cmd, dir).map_err(|e| {
        Failure::new(
            exit::FAILED,
            format!("cannot write the man pages into {}: {e}", dir.display()),
        )
    })?;
    crate::outln!("man pages written to {}", dir.display());
    Ok(exit::OK)
}
