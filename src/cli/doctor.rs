//! `dispatch doctor`: arguments and rendering.

use std::path::{Path, PathBuf};

use clap::Args;

use super::exit::{self, Failure};
use super::output::emit;
use crate::ops::doctor::{self, Options, Report};
use crate::policy::doctor::Status;
use crate::slurm::CliConfig;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Also run a short job step (`srun -N1 -n1 --time=1`) that checks, from a compute node,
    /// that this binary runs there, the state directory is visible and flock works there, and
    /// git is installed
    #[arg(long)]
    pub on_node: bool,
    /// The configured target whose partition, account and QOS the `--on-node` step uses
    /// (default: the cluster's default partition and your default account)
    #[arg(short = 'T', long, value_name = "TARGET", requires = "on_node",
          value_parser = crate::names::arg::label("target"))]
    pub target: Option<String>,
    /// Run at the same time on two login nodes (within the window, default 15 s, at most 600):
    /// report whether each saw the other's flock and exclusive create on this state directory
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "15",
          value_parser = clap::value_parser!(u64).range(1..=600))]
    pub lock_probe: Option<u64>,
    /// Internal: the checks `--on-node` runs on the compute node
    #[arg(long, hide = true, conflicts_with_all = ["on_node", "target"])]
    pub node_probe: bool,
    /// Internal: the marker the host left in the state directory, for the node to find
    #[arg(long, hide = true, requires = "node_probe", value_parser = crate::names::arg::path_name("marker"))]
    pub marker: Option<String>,
}

/// The config as `dispatch doctor` sees it: a file that does not parse is a finding here, not a
/// usage error.
fn load_config(
    flag: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(PathBuf, crate::config::Config)>, String> {
    let Some(path) = crate::config::resolve(flag, env) else {
        return Ok(None);
    };
    if !path.exists() {
        return match flag {
            Some(_) => Err(format!("config file {} does not exist", path.display())),
            None => Ok(None),
        };
    }
    crate::config::Config::load(&path)
        .map(|c| Some((path, c)))
        .map_err(|e| e.to_string())
}

pub struct Context<'a> {
    pub state_dir: PathBuf,
    pub config_flag: Option<&'a Path>,
    pub slurm: CliConfig,
    pub json: bool,
}

pub async fn run(args: &DoctorArgs, ctx: Context<'_>) -> Result<u8, Failure> {
    let state_dir = std::path::absolute(&ctx.state_dir).unwrap_or(ctx.state_dir.clone());
    let report = if args.node_probe {
        doctor::node_probe(&state_dir, args.marker.as_deref()).await
    } else {
        let env = |k: &str| std::env::var(k).ok();
        let config = load_config(ctx.config_flag, &env);
        if let (Some(t), Ok(cfg)) = (&args.target, &config) {
            let known = cfg.as_ref().is_some_and(|(_, c)| c.targets.contains_key(t));
            if !known {
                return Err(Failure::new(
                    exit::USAGE,
                    format!(
                        "no target {} in the config; name one of its [targets.…] or drop -T",
                        crate::names::short(t)
                    ),
                ));
            }
        }
        let exe = std::env::current_exe().map_err(|e| {
            Failure::new(
                exit::FAILED,
                format!("cannot find the dispatch executable: {e}"),
            )
        })?;
        let opts = Options {
            state_dir,
            config,
            target: args.target.clone(),
            on_node: args.on_node,
            lock_probe: args.lock_probe.map(std::time::Duration::from_secs),
            exe,
            slurm: ctx.slurm,
        };
        doctor::run(&opts).await
    };
    emit(ctx.json, &report, || render(&report))?;
    Ok(if report.ready { exit::OK } else { exit::FAILED })
}

fn render(report: &Report) {
    for c in &report.checks {
        let mark = match c.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        crate::outln!("{mark}  {}: {}", c.name, c.seen);
        if let Some(todo) = &c.todo {
            crate::outln!("      → {todo}");
        }
    }
    let (warns, fails) = report
        .checks
        .iter()
        .fold((0, 0), |(w, f), c| match c.status {
            Status::Warn => (w + 1, f),
            Status::Fail => (w, f + 1),
            Status::Ok => (w, f),
        });
    if report.ready {
        crate::outln!("ready ({warns} warning(s))");
    } else {
        crate::outln!("not ready: {fails} check(s) failed, {warns} warning(s)");
    }
}
