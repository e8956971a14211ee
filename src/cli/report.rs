//! `dispatch report (--trial T | --pool P | --worker W) [--html FILE]`: offline.

use std::path::{Path, PathBuf};

use super::exit::{self, Failure};
use super::output::emit;
use crate::policy::report::{Report, Subject};

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("subject").required(true).args(["trial", "pool", "worker"])))]
pub struct ReportArgs {
    /// A trial: its workers, verdict and evidence
    #[arg(long, value_name = "TRIAL", value_parser = crate::names::arg::path_name("trial"))]
    pub trial: Option<String>,
    /// A pool: every worker it ever had, and its budget over time
    #[arg(long, value_name = "POOL", value_parser = crate::names::arg::path_name("pool"))]
    pub pool: Option<String>,
    /// A worker, by name (every submission of that name) or submission id
    #[arg(long, value_name = "WORKER", value_parser = crate::names::arg::path_name("worker"))]
    pub worker: Option<String>,
    /// Write the page to FILE (self-contained HTML: no script, no network)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

impl ReportArgs {
    fn subject(&self) -> Subject {
        match (&self.trial, &self.pool, &self.worker) {
            (Some(t), _, _) => Subject::Trial(t.clone()),
            (_, Some(p), _) => Subject::Pool(p.clone()),
            (_, _, Some(w)) => Subject::Worker(w.clone()),
            _ => unreachable!("clap requires one of --trial, --pool, --worker"),
        }
    }
}

/// Write `page` to `path` whole or not at all: a temporary file beside it, then a rename.
fn write_page(path: &Path, page: &str) -> Result<(), Failure> {
    let failed = |e: std::io::Error| {
        Failure::new(
            exit::FAILED,
            format!("cannot write the report to {}: {e}", path.display()),
        )
    };
    let name = path.file_name().ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            format!("--html {} names no file", path.display()),
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    std::fs::write(&tmp, page).map_err(failed)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        failed(e)
    })
}

pub fn run(
    args: &ReportArgs,
    checked: &crate::statedir::Checked,
    json: bool,
) -> Result<u8, Failure> {
    let r = crate::ops::report::report(checked, args.subject())?;
    if let Some(path) = &args.html {
        write_page(path, &super::report_html::render(&r))?;
    }
    emit(json, &r, || {
        crate::out!("{}", render_text(&r, args.html.as_deref()))
    })?;
    // The page of a damaged journal is written (forensics needs it most then), but the
    // command does not answer success over it: 5, as `audit` does.
    if r.audit.status == crate::policy::audit::AuditStatus::Damaged {
        super::output::note(
            "the journal is damaged: the report covers it up to the damage. \
             Run `dispatch journal verify` to see where",
        );
        return Ok(exit::DAMAGED);
    }
    Ok(exit::OK)
}

fn render_text(r: &Report, html: Option<&Path>) -> String {
    let mut s = format!(
        "{}: {} worker(s), {} event(s); audit {}\n",
        r.subject.describe(),
        r.chains.len(),
        r.events.len(),
        r.audit.status
    );
    if let Some(v) = &r.verdict {
        s.push_str(&format!(
            "verdict {} at {}: {}\n",
            v.verdict.as_str(),
            v.at,
            v.reason
        ));
    }
    for w in &r.workers {
        let marks: Vec<&str> = w.marks.iter().map(|m| m.what.as_str()).collect();
        s.push_str(&format!(
            "  {:<20} {:<10} {}\n",
            w.worker,
            w.state,
            marks.join(" → ")
        ));
        if let Some(why) = &w.launch_failure {
            s.push_str(&format!("  {:<20} launch failed: {why}\n", ""));
        }
        let g = &w.segment;
        if g.generation > 1 || g.continued_as.is_some() {
            let ended = g
                .ended_by
                .as_deref()
                .map_or(String::new(), |cause| format!(", continued after {cause}"));
            s.push_str(&format!(
                "  {:<20} generation {} of {}{ended}\n",
                "", g.generation, g.chain
            ));
        }
    }
    for f in &r.audit.findings {
        s.push_str(&format!("  audit {}: {}\n", f.what, f.detail));
    }
    if let Some(path) = html {
        s.push_str(&format!("wrote {}\n", path.display()));
    }
    s
}
