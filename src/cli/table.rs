//! Human output of the listings (`pool status`, `jobs`, `sessions`): a header row, rows that fit
//! [`WIDTH`] columns (short ids, long cells cut with `…`), `--wide` for full ids and uncut
//! cells. Not stable (docs/cli.md): scripts read `--json`. Pure: every function returns text.

use crate::ops::jobs::JobsReport;
use crate::ops::pool::StatusReport;
use crate::policy::session::report::{JobEntry, Report};

/// The width rows are made to fit without `--wide`.
pub const WIDTH: usize = 80;

/// Columns of one table; cells are cut to fit from the `flexible` column first.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// Columns that may be cut, in the order they give up width.
    flexible: Vec<usize>,
}

/// The shortest a flexible column is cut to.
const MIN_FLEXIBLE: usize = 6;

impl Table {
    pub fn new(headers: &[&'static str], flexible: &[usize]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
            flexible: flexible.to_vec(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.headers.len(), "one cell per column");
        self.rows.push(cells);
    }

    /// The table, each line indented by `indent` spaces and at most `width` characters long
    /// (unless `width` is `None`: `--wide`).
    pub fn render(&self, indent: usize, width: Option<usize>) -> String {
        let n = self.headers.len();
        let mut w: Vec<usize> = (0..n)
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| chars(&r[i]))
                    .chain([chars(self.headers[i])])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        if let Some(width) = width {
            let total = |w: &[usize]| indent + w.iter().sum::<usize>() + 2 * (n - 1);
            for &i in &self.flexible {
                let over = total(&w).saturating_sub(width);
                if over == 0 {
                    break;
                }
                let floor = MIN_FLEXIBLE.max(chars(self.headers[i])).min(w[i]);
                w[i] -= over.min(w[i] - floor);
            }
        }
        let mut out = String::new();
        let line = |cells: Vec<&str>, out: &mut String| {
            let mut s = " ".repeat(indent);
            for (i, c) in cells.iter().enumerate() {
                if i > 0 {
                    s.push_str("  ");
                }
                s.push_str(&pad(&cut(c, w[i]), w[i]));
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(self.headers.clone(), &mut out);
        for r in &self.rows {
            line(r.iter().map(String::as_str).collect(), &mut out);
        }
        out
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// `s` cut to `width` characters, its end replaced by `…` when cut.
pub fn cut(s: &str, width: usize) -> String {
    if chars(s) <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut t: String = s.chars().take(width - 1).collect();
    t.push('…');
    t
}

fn pad(s: &str, width: usize) -> String {
    format!("{s}{}", " ".repeat(width.saturating_sub(chars(s))))
}

/// A line of free text under a row, cut to the width (unless `--wide`).
fn note_line(indent: usize, text: &str, width: Option<usize>) -> String {
    let text = match width {
        Some(w) => cut(text, w.saturating_sub(indent)),
        None => text.to_owned(),
    };
    format!("{}{text}\n", " ".repeat(indent))
}

/// `1 CPU`, `4 CPUs`.
pub fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Megabytes as people read them: `512 MB`, `4 GB`, `1.5 GB`.
pub fn mem(mb: u64) -> String {
    if mb < 1024 {
        format!("{mb} MB")
    } else if mb % 1024 == 0 {
        format!("{} GB", mb / 1024)
    } else {
        format!("{:.1} GB", mb as f64 / 1024.0)
    }
}

/// Seconds as the two largest units: `45s`, `12m 5s`, `3h 20m`, `2d 4h`.
pub fn secs(s: i64) -> String {
    let s = s.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

/// The first 8 hex digits of a UUID (what `dispatch logs` and `inspect` accept), or all of it
/// with `--wide`.
pub fn id(uuid: &str, wide: bool) -> String {
    if wide {
        uuid.to_owned()
    } else {
        uuid.chars().take(8).collect()
    }
}

fn width(wide: bool) -> Option<usize> {
    (!wide).then_some(WIDTH)
}

/// `pool status`: one table of pools, then one of their workers with what each worker's own
/// journal says under its row.
pub fn pool_status(r: &StatusReport, wide: bool) -> String {
    if r.pools.is_empty() {
        return "no pools; attach one with `dispatch pool attach POOL --job JOBID`\n".to_owned();
    }
    let mut pools = Table::new(
        &["POOL", "JOB", "NODE", "STATE", "LEFT", "CPUS", "MEM"],
        &[0, 2],
    );
    for p in &r.pools {
        let a = &p.allocation;
        let (state, left) = match (&a.ended_proof, a.seconds_left) {
            (Some(_), _) => ("ended", "-".to_owned()),
            (None, left) => ("running", secs(left.unwrap_or(0))),
        };
        pools.row(vec![
            p.pool.clone(),
            a.job_id.to_string(),
            a.node.clone(),
            state.to_owned(),
            left,
            format!("{}/{}", p.reserved.cpus, count(p.capacity.cpus, "CPU")),
            format!("{}/{}", mem(p.reserved.mem_mb), mem(p.capacity.mem_mb)),
        ]);
    }
    let mut out = pools.render(0, width(wide));
    for p in r
        .pools
        .iter()
        .filter(|p| p.allocation.ended_proof.is_some())
    {
        let proof = p.allocation.ended_proof.as_deref().unwrap_or_default();
        out.push_str(&note_line(
            0,
            &format!("pool {} ended: {proof}", p.pool),
            width(wide),
        ));
    }
    if r.pools.iter().all(|p| p.workers.is_empty()) {
        return out;
    }
    out.push('\n');
    let mut workers = Table::new(
        &["POOL", "WORKER", "ID", "STATE", "STEP", "CPUS", "MEM"],
        &[1, 0],
    );
    // The lines under each row, by row index, since the table is drawn as a whole.
    let mut details: Vec<Vec<String>> = Vec::new();
    for p in &r.pools {
        for w in &p.workers {
            workers.row(vec![
                p.pool.clone(),
                w.name.clone(),
                id(&w.submission_id, wide),
                w.state.to_owned(),
                w.step_id.clone().unwrap_or_else(|| "-".to_owned()),
                count(u64::from(w.cpus), "CPU"),
                mem(w.mem_mb),
            ]);
            let n = &w.node;
            let mut d = Vec::new();
            if let Some(r) = &n.refusal {
                d.push(format!("refused before the payload started: {r}"));
            }
            if let Some(p) = &n.publication {
                d.push(format!(
                    "publication {}{}",
                    p.outcome,
                    p.dir
                        .as_deref()
                        .map(|d| format!(" in {d}"))
                        .unwrap_or_default()
                ));
            }
            if let Some(c) = &n.state_class {
                d.push(format!("native state {c}"));
            }
            if let Some(j) = n.worker_journal.as_ref().filter(|j| j.reason.is_some()) {
                d.push(format!(
                    "worker journal {}: {}; not trusted",
                    j.status,
                    j.reason.as_deref().unwrap_or_default()
                ));
            }
            details.push(d);
        }
    }
    let drawn = workers.render(0, width(wide));
    let mut lines = drawn.lines();
    out.push_str(lines.next().unwrap_or_default());
    out.push('\n');
    for (row, d) in lines.zip(&details) {
        out.push_str(row);
        out.push('\n');
        for text in d {
            out.push_str(&note_line(4, text, width(wide)));
        }
    }
    out
}

/// `dispatch jobs`: one row per `dispatch submit` worker; the SLURM column only after
/// `--refresh` (what its listing showed now).
pub fn jobs(r: &JobsReport, wide: bool) -> String {
    if r.jobs.is_empty() {
        return "no jobs; start a worker as its own job with `dispatch submit`\n".to_owned();
    }
    let refreshed = r.refresh.is_some();
    let mut headers = vec!["WORKER", "ID", "JOB", "STATE"];
    if refreshed {
        headers.push("SLURM");
    }
    headers.extend(["CPUS", "MEM", "SUBMITTED"]);
    let mut t = Table::new(&headers, &[0, 4]);
    for j in &r.jobs {
        let mut row = vec![
            j.worker.clone(),
            id(&j.submission_id, wide),
            j.job_id.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            j.state.to_owned(),
        ];
        if refreshed {
            row.push(match (&j.slurm_state, &j.reason) {
                (Some(s), Some(why)) if why != "None" => format!("{s} ({why})"),
                (Some(s), _) => s.clone(),
                (None, _) => "-".to_owned(),
            });
        }
        row.extend([
            count(u64::from(j.cpus), "CPU"),
            mem(j.mem_mb),
            submitted(&j.submitted_at),
        ]);
        t.row(row);
    }
    let mut out = t.render(0, width(wide));
    for j in &r.jobs {
        if let Some(f) = &j.failure {
            out.push_str(&note_line(
                0,
                &format!("{} failed: {f}", j.worker),
                width(wide),
            ));
        }
    }
    if let Some(x) = &r.refresh {
        out.push_str(&format!(
            "refreshed with {}: resolved {}, unknown {}\n",
            count(x.slurm_calls, "Slurm call"),
            x.resolved,
            x.unknown
        ));
    }
    out
}

/// An RFC 3339 time as `MM-DD HH:MM` in local time (`--json` has the full time).
fn submitted(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%m-%d %H:%M")
                .to_string()
        })
        .unwrap_or_else(|_| rfc3339.to_owned())
}

/// `dispatch sessions`: every session job with its target, then stale and unknown sessions.
pub fn sessions(r: &Report, wide: bool, release_hint: &dyn Fn(&str, &str) -> String) -> String {
    let mut t = Table::new(
        &["TARGET", "MIRROR", "JOB", "STATE", "LEFT", "NODE", "FLAGS"],
        &[6, 1, 0, 5],
    );
    let row = |target: &str, e: &JobEntry| {
        vec![
            target.to_owned(),
            e.mirror.clone().unwrap_or_else(|| e.token.clone()),
            e.id.clone(),
            e.state.clone(),
            e.time_left.clone().unwrap_or_else(|| "-".to_owned()),
            e.node.clone().unwrap_or_else(|| "-".to_owned()),
            e.flags.join(","),
        ]
    };
    for g in &r.targets {
        for e in &g.jobs {
            t.row(row(&g.target, e));
        }
    }
    for e in &r.unmatched {
        t.row(row("(none)", e));
    }
    let mut out = if r.targets.iter().all(|g| g.jobs.is_empty()) && r.unmatched.is_empty() {
        "No dispatch session jobs found.\n".to_owned()
    } else {
        t.render(0, width(wide))
    };
    if !r.stale.is_empty() {
        out.push_str("stale sessions (the job is gone; the record is not):\n");
        for s in &r.stale {
            let job = s.job_id.map_or("-".into(), |j| j.to_string());
            out.push_str(&note_line(
                2,
                &format!(
                    "{} -> {job}  {}",
                    s.session,
                    release_hint(&s.mirror, &s.target)
                ),
                width(wide),
            ));
        }
    }
    if !r.unknown.is_empty() {
        out.push_str("sessions whose job cannot be told (never called stale):\n");
        for s in &r.unknown {
            let job = s.job_id.map_or("-".into(), |j| j.to_string());
            out.push_str(&note_line(
                2,
                &format!(
                    "{} -> {job}  {}",
                    s.session,
                    s.reason.as_deref().unwrap_or("")
                ),
                width(wide),
            ));
        }
    }
    for e in &r.errors {
        out.push_str(&format!("! {e}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_sizes_read_as_people_write_them() {
        assert_eq!(count(1, "CPU"), "1 CPU");
        assert_eq!(count(0, "CPU"), "0 CPUs");
        assert_eq!(count(4, "CPU"), "4 CPUs");
        assert_eq!(mem(100), "100 MB");
        assert_eq!(mem(4096), "4 GB");
        assert_eq!(mem(1536), "1.5 GB");
        assert_eq!(secs(-3), "0s");
        assert_eq!(secs(59), "59s");
        assert_eq!(secs(3599), "59m 59s");
        assert_eq!(secs(3600 * 5 + 120), "5h 2m");
        assert_eq!(secs(86400 * 2 + 3600), "2d 1h");
        assert_eq!(
            id("0b5e7c1e-8a1f-4a55-9f6e-0d4b8e2a9c11", false),
            "0b5e7c1e"
        );
    }

    #[test]
    fn a_table_fits_its_width_by_cutting_the_flexible_columns() {
        let mut t = Table::new(&["NAME", "STATE", "NOTE"], &[0, 2]);
        t.row(vec!["a".repeat(70), "running".into(), "b".repeat(30)]);
        t.row(vec!["short".into(), "queued".into(), "-".into()]);
        let text = t.render(0, Some(WIDTH));
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?}");
        }
        assert!(text.lines().nth(1).unwrap().contains('…'));
        assert!(text.contains("running") && text.contains("queued"));
        let wide = t.render(0, None);
        assert!(wide.contains(&"a".repeat(70)) && !wide.contains('…'));
    }
}
