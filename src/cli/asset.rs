//! `dispatch asset …`: argument definitions and rendering.

use std::path::PathBuf;

use clap::Subcommand;

use super::exit::{self, Failure};
use super::output::{emit, print_json};
use crate::ops::asset::{self as ops, AddRequest, AssetView};
use crate::ops::context::Ctx;
use crate::slurm::Scheduler;

#[derive(Debug, Subcommand)]
pub enum AssetCommand {
    /// Make an immutable source asset: a git bundle of REPO's commit REV and its history
    #[command(after_help = "Examples:\n  \
        dispatch asset add-source src ~/code/project\n  \
        dispatch asset add-source src-v2 ~/code/project --rev v2.0")]
    AddSource {
        /// The asset's name (bound once to its contents)
        #[arg(value_parser = crate::names::arg::path_name("asset"))]
        name: String,
        /// The git repository to bundle (not modified)
        repo: PathBuf,
        /// The commit to pin (a branch, tag or commit; default HEAD)
        #[arg(long)]
        rev: Option<String>,
    },
    /// Make an immutable image asset (an Apptainer .sif, say) from a copy of FILE
    #[command(after_help = "Examples:\n  \
        dispatch asset add-image py311 ~/images/python-3.11.sif")]
    AddImage {
        /// The asset's name (bound once to its contents)
        #[arg(value_parser = crate::names::arg::path_name("asset"))]
        name: String,
        /// The image file to copy
        file: PathBuf,
    },
    /// List the assets, with their SHA-256 identities
    #[command(after_help = "Examples:\n  \
        dispatch asset list\n  \
        dispatch asset list --json | jq -r '.assets[].name'")]
    List,
    /// Recompute assets' SHA-256 (all, or the NAMEs given): exit 0 when all match, 1 when any
    /// is changed, missing or unreadable
    #[command(after_help = "Examples:\n  \
        dispatch asset verify\n  \
        dispatch asset verify src py311")]
    Verify {
        /// Assets to check (default: every asset)
        #[arg(value_parser = crate::names::arg::path_name("asset"))]
        names: Vec<String>,
    },
}

fn print_asset(a: &AssetView) {
    crate::outln!(
        "{:<20} {:<6} {:<8} {} {:>12} bytes{}",
        a.name,
        a.kind.as_str(),
        a.state.as_str(),
        a.sha256,
        a.bytes,
        a.commit
            .as_deref()
            .map(|c| format!("  commit {c}"))
            .unwrap_or_default()
    );
}

pub fn run<S: Scheduler>(cmd: &AssetCommand, ctx: &Ctx<S>, json: bool) -> Result<u8, Failure> {
    let add = |name: &str, req: AddRequest| -> Result<u8, Failure> {
        let a = ops::add(ctx, name, &req)?;
        emit(json, &a, || print_asset(&a))?;
        Ok(exit::OK)
    };
    match cmd {
        AssetCommand::AddSource { name, repo, rev } => add(
            name,
            AddRequest::Source {
                repo: repo.clone(),
                rev: rev.clone(),
            },
        ),
        AssetCommand::AddImage { name, file } => {
            add(name, AddRequest::Image { file: file.clone() })
        }
        AssetCommand::List => {
            let r = ops::list(ctx)?;
            if json {
                print_json(&r)?;
            } else if r.assets.is_empty() {
                crate::outln!("no assets; add one with `dispatch asset add-source` or `add-image`");
            } else {
                r.assets.iter().for_each(print_asset);
            }
            Ok(exit::OK)
        }
        AssetCommand::Verify { names } => {
            let r = ops::verify(ctx, names)?;
            emit(json, &r, || {
                for v in &r.assets {
                    crate::outln!("{:<20} {:<10} {}", v.name, v.status, v.file);
                }
            })?;
            if r.ok {
                Ok(exit::OK)
            } else {
                if !json {
                    eprintln!(
                        "dispatch: some assets do not match their recorded SHA-256; workers that \
                         use them are refused on their node. Add a fresh asset under a new name"
                    );
                }
                Ok(exit::FAILED)
            }
        }
    }
}
