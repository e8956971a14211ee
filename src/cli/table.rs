//! Human output of the listings (`pool status`, `jobs`, `sessions`): a header row, rows that fit
//! [`WIDTH`] columns (short ids, long cells cut with `…`), `--wide` for full ids and uncut
//! cells. Not stable (docs/cli.md): scripts read `--json`. Pure: every function returns text.

use crate::ops::jobs::JobsReport;
use crate::ops::pool::{AllocationState, NodeView, StatusReport};
use crate::policy::lineage::{Lineage, Standing};
use crate::policy::session::report::{JobEntry, Report};
use unicode_width::UnicodeWidthStr;

/// The width rows are made to fit without `--wide`.
pub const WIDTH: usize = 80;

/// Columns of one table; cells of the `flexible` columns are cut to fit.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// Columns that may be cut to fit.
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

    /// The table, each line indented by `indent` spaces and at most `width` columns wide
    /// (unless `width` is `None`: `--wide`).
    pub fn render(&self, indent: usize, width: Option<usize>) -> String {
        let n = self.headers.len();
        let mut w: Vec<usize> = (0..n)
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| cols(&r[i]))
                    .chain([cols(self.headers[i])])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        if let Some(width) = width {
            let total = |w: &[usize]| indent + w.iter().sum::<usize>() + 2 * (n - 1);
            // One column at a time from the widest flexible column above its floor, so
            // long cells share the cut (ties: the earlier in `flexible`).
            let floor = |i: usize| MIN_FLEXIBLE.max(cols(self.headers[i]));
            while total(&w) > width {
                let widest = self
                    .flexible
                    .iter()
                    .copied()
                    .filter(|&i| w[i] > floor(i))
                    .max_by_key(|&i| (w[i], std::cmp::Reverse(i)));
                match widest {
                    Some(i) => w[i] -= 1,
                    None => break,
                }
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

/// The columns `s` takes on a terminal: two for a wide character (CJK, most emoji), none for a
/// combining or zero-width one.
fn cols(s: &str) -> usize {
    UnicodeWidthStr::width(s)
}

/// `s` cut to at most `width` columns, its end replaced by `…` when cut. The cut falls between
/// characters: a wide character that does not fit is left out whole (`pad` fills the column).
pub fn cut(s: &str, width: usize) -> String {
    if cols(s) <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    // The longest prefix that leaves a column for the `…`.
    let end = s
        .char_indices()
        .map(|(i, c)| i + c.len_utf8())
        .take_while(|&end| cols(&s[..end]) < width)
        .last()
        .unwrap_or(0);
    format!("{}…", &s[..end])
}

/// `s` followed by spaces up to `width` columns (as a terminal shows it, wide characters too).
pub(crate) fn pad(s: &str, width: usize) -> String {
    format!("{s}{}", " ".repeat(width.saturating_sub(cols(s))))
}

/// A line of free text under a row, cut to the width (unless `--wide`).
fn note_line(indent: usize, text: &str, width: Option<usize>) -> String {
    let text = match width {
        Some(w) => cut(text, w.saturating_sub(indent)),
        None => text.to_owned(),
    };
    format!("{}{text}\n", " ".repeat(indent))
}

/// A warning under a row, printed whole: wrapped at spaces to the width (unless `--wide`),
/// each further line indented two more, and never inside a command in backquotes (it is there
/// to be copied).
fn warning_lines(indent: usize, text: &str, width: Option<usize>) -> String {
    let Some(width) = width else {
        return note_line(indent, text, None);
    };
    // Words, a command in backquotes counting as one.
    let mut words: Vec<String> = Vec::new();
    let mut quoted = false;
    for word in text.split(' ') {
        match words.last_mut() {
            Some(last) if quoted => {
                last.push(' ');
                last.push_str(word);
            }
            _ => words.push(word.to_owned()),
        }
        quoted ^= word.matches('`').count() % 2 == 1;
    }
    let mut out = String::new();
    let mut line = String::new();
    for word in words {
        let at = if out.is_empty() { indent } else { indent + 2 };
        if !line.is_empty() && at + cols(&line) + 1 + cols(&word) > width {
            out.push_str(&note_line(at, &line, None));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    let at = if out.is_empty() { indent } else { indent + 2 };
    out.push_str(&note_line(at, &line, None));
    out
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
    } else if mb.is_multiple_of(1024) {
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
    // A creation in flight may hold an allocation: never let it look like nothing.
    let creating = creating_lines(r, wide);
    // Nor a continuation waiting for a pool that is gone.
    let gone = gone_pool_lines(r, wide);
    if r.pools.is_empty() {
        if !creating.is_empty() || !gone.is_empty() {
            return creating + &gone;
        }
        return "no pools; attach one with `dispatch pool attach POOL --job JOBID`\n".to_owned();
    }
    let mut out = creating;
    out.push_str(&pools_table(r, wide));
    out.push_str(&ended_lines(r, wide));
    if r.pools.iter().all(|p| p.workers.is_empty()) {
        return out + &gone;
    }
    out.push('\n');
    out.push_str(&workers_table(r, wide));
    out + &gone
}

/// A warning for each worker of a pool that is gone whose continuation waits: why, and what
/// submits it.
fn gone_pool_lines(r: &StatusReport, wide: bool) -> String {
    let mut out = String::new();
    for g in &r.waiting_for_gone_pools {
        let Some((line, _)) = continuation_line(&g.lineage, wide) else {
            continue;
        };
        out.push_str(&warning_lines(
            0,
            &format!(
                "worker {} of pool {} ({}, generation {}): {line}",
                g.name,
                g.pool,
                id(&g.submission_id, wide),
                g.lineage.generation
            ),
            width(wide),
        ));
    }
    out
}

/// The table of every pool's workers, each row with the lines under it.
fn workers_table(r: &StatusReport, wide: bool) -> String {
    let mut out = String::new();
    let generations = r
        .pools
        .iter()
        .flat_map(|p| &p.workers)
        .any(|w| w.lineage.shown());
    let mut workers = Table::new(
        &with_gen(
            &[
                "POOL", "WORKER", "ID", "STATE", "NODE", "STEP", "CPUS", "MEM",
            ],
            generations,
        ),
        if generations { &[1, 0, 5] } else { &[1, 0, 4] },
    );
    // The lines under each row, by row index, since the table is drawn as a whole; each says
    // whether it may be cut (a path may not: it is there to be copied).
    let mut details: Vec<Vec<(String, Shown)>> = Vec::new();
    for p in &r.pools {
        for w in &p.workers {
            let mut row = vec![
                p.pool.clone(),
                w.name.clone(),
                id(&w.submission_id, wide),
                state_cell(
                    &w.lineage,
                    w.stage.map_or(w.state.as_str(), |s| s.as_str()),
                    w.exit_code,
                    w.exit_signal,
                ),
                w.on_node.clone(),
                w.step_id.clone().unwrap_or_else(|| "-".to_owned()),
                count(u64::from(w.cpus), "CPU"),
                mem(w.mem_mb),
            ];
            if generations {
                row.insert(2, generation_cell(&w.lineage));
            }
            workers.row(row);
            let mut d = worker_details(w.gpus, &w.node, &id(&w.submission_id, wide));
            if let Some(why) = &w.launch_failure {
                d.insert(0, (format!("launch failed: {why}"), Shown::Wrapped));
            }
            d.extend(failure_line(w, wide));
            d.extend(continuation_line(&w.lineage, wide));
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
        for (text, shown) in d {
            out.push_str(&match shown {
                Shown::Cut => note_line(4, text, width(wide)),
                Shown::Wrapped => warning_lines(4, text, width(wide)),
                Shown::Whole => note_line(4, text, None),
            });
        }
    }
    out
}

/// A warning for each pool whose allocation is proven over (how, and when), with the command
/// that forgets it.
fn ended_lines(r: &StatusReport, wide: bool) -> String {
    let mut out = String::new();
    for p in &r.pools {
        let Some(proof) = p.allocation.ended_proof.as_deref() else {
            continue;
        };
        let forget = match p.owner {
            crate::ops::pool::Owner::Created => crate::next::Next::PoolRelease(&p.pool),
            crate::ops::pool::Owner::Attached => crate::next::Next::PoolDetach(&p.pool),
        };
        let ended = p
            .last_end
            .as_ref()
            .map_or_else(|| format!("ended: {proof}"), end_words);
        out.push_str(&warning_lines(
            0,
            &format!("pool {}: {ended}; {forget} forgets it", p.pool),
            width(wide),
        ));
    }
    out
}

/// `allocation 2 (job 123) ended: time-limit, squeue shows job 123 TIMEOUT, TIME`.
fn end_words(e: &crate::ops::pool::EndView) -> String {
    let at = e.at.as_ref().map(|t| format!(", {t}")).unwrap_or_default();
    format!(
        "allocation {} (job {}) ended: {}, {}{at}",
        e.generation, e.job_id, e.cause, e.proof
    )
}

/// The line under a pool whose allocation a renewal replaced: how that one ended (an
/// allocation that is over itself is [`ended_lines`]' warning).
/// Whole, as the renewal line above it: the proof is there to be read.
fn last_end_line<W>(p: &crate::ops::pool::PoolView<W>) -> String {
    match &p.last_end {
        Some(e) if p.allocation.ended_proof.is_none() => {
            format!("  {}: {}\n", p.pool, end_words(e))
        }
        _ => String::new(),
    }
}

/// The notes on `pool create`s in flight, each with the commands that settle it.
fn creating_lines(r: &StatusReport, wide: bool) -> String {
    let mut creating = String::new();
    for c in &r.creating {
        let job = c
            .job_id
            .map_or_else(|| "not known yet".to_owned(), |j| j.to_string());
        creating.push_str(&note_line(
            0,
            &format!(
                "pool {}: being created since {} (job {job}, {})",
                c.pool, c.since, c.job_name
            ),
            width(wide),
        ));
        // Commands are there to be copied: never cut.
        creating.push_str(&note_line(
            4,
            &format!(
                "`dispatch pool create {}` adopts it; `dispatch pool release {}` cancels it",
                c.pool, c.pool
            ),
            None,
        ));
    }
    creating
}

/// The table of pools: one row each.
fn pools_table(r: &StatusReport, wide: bool) -> String {
    let mut pools = Table::new(
        &[
            "POOL", "OWNER", "JOB", "NODE", "STATE", "LEFT", "CPUS", "MEM",
        ],
        &[0, 3],
    );
    for p in &r.pools {
        let a = &p.allocation;
        // `pool status` always sets it; without one the allocation is not known to be over.
        let state = a.state.unwrap_or(AllocationState::Running);
        let left = match state {
            AllocationState::Ended => "-".to_owned(),
            AllocationState::Running => secs(a.seconds_left.unwrap_or(0)),
        };
        pools.row(vec![
            p.pool.clone(),
            if p.releasing {
                "releasing".to_owned()
            } else {
                p.owner.to_string()
            },
            a.job_id.to_string(),
            a.node.clone(),
            if a.preempted.is_some() {
                "preempted".to_owned()
            } else {
                state.to_string()
            },
            left,
            format!("{}/{}", p.reserved.cpus, count(p.capacity.cpus, "CPU")),
            format!("{}/{}", mem(p.reserved.mem_mb), mem(p.capacity.mem_mb)),
        ]);
    }
    let mut out = pools.render(0, width(wide));
    // A pool over several nodes, or with GPUs, is budgeted per node: one line each.
    for p in r.pools.iter() {
        out.push_str(&node_lines(p, wide));
        out.push_str(&renewal_line(p));
        out.push_str(&last_end_line(p));
    }
    for p in r.pools.iter().filter(|p| p.allocation.preempted.is_some()) {
        out.push_str(&warning_lines(
            0,
            &format!(
                "pool {}: {} (Slurm's grace; its workers got SIGTERM)",
                p.pool,
                preempted_until(p.allocation.preempted.as_ref())
            ),
            width(wide),
        ));
    }
    out
}

/// The line under a renewing pool's row: its allocation count, how long it has lived, its
/// bounds and its next allocation.
fn renewal_line<W>(p: &crate::ops::pool::PoolView<W>) -> String {
    let Some(r) = &p.renewal else {
        return String::new();
    };
    let of = r
        .max_allocations
        .map(|m| format!(" of {m}"))
        .unwrap_or_default();
    let until = r
        .until
        .as_ref()
        .map(|u| format!(", until {u}"))
        .unwrap_or_default();
    let next = match (&r.stopped, &r.successor) {
        (Some(why), _) => format!(
            "renewal stopped: {why}; the pool ends with its allocation: {} and {} again with \
             --renew to renew it",
            crate::next::Next::PoolRelease(&p.pool),
            crate::next::Next::PoolCreate(&p.pool)
        ),
        (None, Some(s)) => format!(
            "next: allocation {} ({}{}){}",
            s.generation,
            s.job_id
                .map_or("job not known yet".to_owned(), |j| format!("job {j}")),
            s.slurm
                .as_ref()
                .map(|l| format!(", {}: {}", l.state, l.reason))
                .unwrap_or_default(),
            s.after
                .map(|j| format!(", after job {j}"))
                .unwrap_or_default()
        ),
        (None, None) if r.max_allocations.is_some_and(|m| r.generation >= m) => {
            "no next: this is the last allocation --renew-max allows".to_owned()
        }
        (None, None) => "next: not asked yet".to_owned(),
    };
    let ending = r
        .ending
        .as_ref()
        .map(|x| {
            format!(
                "; allocation {} ended early by dispatch ({}; scancel {})",
                x.job_id,
                x.reason,
                x.answer.as_deref().unwrap_or("not answered yet")
            )
        })
        .unwrap_or_default();
    format!(
        "  {}: allocation {}{of}, alive {} since {}{until}; {next}{ending}\n",
        p.pool,
        r.generation,
        secs(r.alive_s),
        r.alive_since
    )
}

/// The lines under a pool's row over several nodes or with GPUs: each node's budget, whether
/// it was lost, and when Slurm does not show whether a failed node ends the whole allocation.
fn node_lines<W>(p: &crate::ops::pool::PoolView<W>, wide: bool) -> String {
    let mut out = String::new();
    if p.nodes.len() < 2 && p.capacity.gpus == 0 {
        return out;
    }
    for n in &p.nodes {
        let (c, used) = (n.capacity, n.reserved);
        let lost = p.nodes_lost.get(&n.node);
        out.push_str(&warning_lines(
            4,
            &format!(
                "{} on {}: {}/{}, {}/{}, {}/{}{}",
                p.pool,
                n.node,
                used.cpus,
                count(c.cpus, "CPU"),
                mem(used.mem_mb),
                mem(c.mem_mb),
                used.gpus,
                count(c.gpus, "GPU"),
                lost.map(|proof| format!("; lost: {proof}"))
                    .unwrap_or_default()
            ),
            width(wide),
        ));
    }
    if p.nodes.len() > 1 && p.no_kill.is_none() {
        out.push_str(&warning_lines(
            4,
            &format!(
                "{}: Slurm does not show whether job {} has --no-kill; without it a failed node \
                 ends the whole allocation and every worker in it. To lose only the workers of a \
                 failed node, make the allocation with `salloc --no-kill`, or let {} make it",
                p.pool,
                p.allocation.job_id,
                crate::next::Next::PoolCreate(&p.pool)
            ),
            width(wide),
        ));
    }
    out
}

/// The headers of a workers' table, with GEN after WORKER when a generation is shown.
fn with_gen(headers: &[&'static str], generations: bool) -> Vec<&'static str> {
    let mut h = headers.to_vec();
    if generations {
        let at = h.iter().position(|x| *x == "WORKER").map_or(0, |i| i + 1);
        h.insert(at, "GEN");
    }
    h
}

/// A worker's GEN cell: its generation when it is a later one or asked to be continued.
fn generation_cell(l: &Lineage) -> String {
    if l.shown() {
        l.generation.to_string()
    } else {
        "-".to_owned()
    }
}

/// A worker's STATE cell: `continuation due` or `continuation waiting` while its
/// continuation is to be submitted (the line under it says why), else its word and exit.
fn state_cell(l: &Lineage, word: &str, code: Option<i32>, signal: Option<i32>) -> String {
    match l.standing {
        Some(Standing::Due) => "continuation due".to_owned(),
        Some(Standing::Waiting) => "continuation waiting".to_owned(),
        _ => with_exit(word, code, signal),
    }
}

/// The line about a worker's continuation, and how it is shown: why it is due, waits or was
/// refused (whole, wrapped: it ends with what happens next), or which worker continued it.
fn continuation_line(l: &Lineage, wide: bool) -> Option<(String, Shown)> {
    let why = l.why.as_deref().unwrap_or_default();
    let reconcile = crate::next::Next::Reconcile;
    Some(match l.standing? {
        Standing::Due => (
            format!("continuation due: {reconcile} decides it and submits its successor"),
            Shown::Wrapped,
        ),
        Standing::Waiting => (
            format!("{why}; {reconcile} submits it once there is room"),
            Shown::Wrapped,
        ),
        Standing::Refused => (format!("continuation refused: {why}"), Shown::Wrapped),
        Standing::Continued => (
            format!(
                "continued as generation {}: {}",
                l.generation + 1,
                l.successor
                    .map(|s| id(&s.to_string(), wide))
                    .unwrap_or_default()
            ),
            Shown::Cut,
        ),
    })
}

/// A worker's state word and how its payload ended, when that is known: `released, exit 3`,
/// `published, signal 9`.
pub fn with_exit(word: &str, code: Option<i32>, signal: Option<i32>) -> String {
    match (signal, code) {
        (Some(s), _) => format!("{word}, signal {s}"),
        (None, Some(c)) => format!("{word}, exit {c}"),
        (None, None) => word.to_owned(),
    }
}

/// `failed: exit 3`, `interrupted: signal 15`: a payload that did not complete; `None` for
/// one that did, was refused (said elsewhere) or has not ended.
fn payload_failure(
    outcome: Option<crate::policy::node::Outcome>,
    code: Option<i32>,
    signal: Option<i32>,
) -> Option<String> {
    use crate::policy::node::Outcome;
    let outcome = outcome.filter(|o| matches!(o, Outcome::Failed | Outcome::Interrupted))?;
    Some(with_exit(outcome.as_str(), code, signal).replacen(", ", ": ", 1))
}

/// The line under a worker whose payload failed or was interrupted: how, and where to look.
/// Never cut: it ends with the command to copy.
fn failure_line(w: &crate::ops::pool::WorkerView, wide: bool) -> Option<(String, Shown)> {
    let how = payload_failure(w.node.outcome, w.exit_code, w.exit_signal)?;
    Some((
        format!(
            "{how}; `dispatch logs {} --stderr` shows what it said",
            id(&w.submission_id, wide)
        ),
        Shown::Wrapped,
    ))
}

/// How a line under a row is shown at 80 columns.
#[derive(Clone, Copy)]
enum Shown {
    /// Cut with `…` (a detail that the JSON holds whole).
    Cut,
    /// Whole, wrapped: a warning, which ends with what to do.
    Wrapped,
    /// Whole on one line: a path, there to be copied.
    Whole,
}

/// The lines under a worker's row (`id` as the row shows it): what its own journal says,
/// each with how it is shown.
fn worker_details(gpus: u32, n: &NodeView, id: &str) -> Vec<(String, Shown)> {
    let mut d = Vec::new();
    if gpus > 0 || n.step_gpus.is_some() {
        let seen = match (&n.step_gpus, &n.cuda_visible_devices) {
            (Some(s), Some(c)) => format!(": GPU {s} of its node (CUDA_VISIBLE_DEVICES={c})"),
            (Some(s), None) => format!(": GPU {s} of its node"),
            _ => String::new(),
        };
        d.push((
            format!("{}{seen}", count(u64::from(gpus), "GPU")),
            Shown::Cut,
        ));
    }
    if let Some(r) = &n.refusal {
        d.push((
            format!("refused before the payload started: {r}"),
            Shown::Wrapped,
        ));
    }
    if let Some(p) = &n.publication {
        let dir = p.dir.as_deref().map(|d| format!(" in {d}"));
        d.push((
            format!("publication {}{}", p.outcome, dir.unwrap_or_default()),
            Shown::Whole,
        ));
    }
    if let Some(c) = &n.state_class {
        d.push((format!("native state {c}"), Shown::Cut));
    }
    if let Some(j) = n.worker_journal.as_ref().filter(|j| j.reason.is_some()) {
        d.push((
            format!(
                "worker journal {}: {}; not trusted: {} shows it as it is",
                j.status,
                j.reason.as_deref().unwrap_or_default(),
                crate::next::Next::Inspect(&id)
            ),
            Shown::Wrapped,
        ));
    }
    d
}

/// `dispatch jobs`: one row per `dispatch submit` worker; the SLURM column only after
/// `--refresh` (what its listing showed now).
///
/// A job in a preemption's grace shows `preempted, ends at HH:MM:SS` instead of its state.
pub fn jobs(r: &JobsReport, wide: bool) -> String {
    if r.jobs.is_empty() {
        return "no jobs; start a worker as its own job with `dispatch submit`\n".to_owned();
    }
    let refreshed = r.refresh.is_some();
    let generations = r.jobs.iter().any(|j| j.lineage.shown());
    let mut headers = with_gen(&["WORKER", "ID", "JOB", "STATE"], generations);
    if refreshed {
        headers.push("SLURM");
    }
    headers.extend(["CPUS", "MEM", "SUBMITTED"]);
    let slurm = if generations { 5 } else { 4 };
    let mut t = Table::new(&headers, &[0, slurm]);
    for j in &r.jobs {
        let mut row = vec![
            j.worker.clone(),
            id(&j.submission_id, wide),
            j.job_id.map_or_else(|| "-".to_owned(), |n| n.to_string()),
            state_cell(
                &j.lineage,
                j.stage.map_or(j.state.as_str(), |s| s.as_str()),
                j.exit_code,
                j.exit_signal,
            ),
        ];
        if generations {
            row.insert(1, generation_cell(&j.lineage));
        }
        if refreshed {
            row.push(match (&j.slurm_state, &j.reason) {
                _ if j.preempted.is_some() => preempted_until(j.preempted.as_ref()),
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
        out.push_str(&job_lines(j, wide));
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

/// The lines after the jobs table about one worker: its preemption's grace, how it failed,
/// its continuation.
fn job_lines(j: &crate::ops::jobs::JobView, wide: bool) -> String {
    let mut out = String::new();
    if j.preempted.is_some() {
        out.push_str(&warning_lines(
            0,
            &format!(
                "{} {} (Slurm's grace)",
                j.worker,
                preempted_until(j.preempted.as_ref())
            ),
            width(wide),
        ));
    }
    if let Some(f) = &j.failure {
        out.push_str(&note_line(
            0,
            &format!("{} failed: {f}", j.worker),
            width(wide),
        ));
    }
    if let Some(how) = payload_failure(j.outcome, j.exit_code, j.exit_signal) {
        out.push_str(&warning_lines(
            0,
            &format!(
                "{} {how}; `dispatch logs {} --stderr` shows what it said",
                j.worker,
                id(&j.submission_id, wide)
            ),
            width(wide),
        ));
    }
    if let Some((line, shown)) = continuation_line(&j.lineage, wide) {
        let line = format!("{} {line}", j.worker);
        out.push_str(&match shown {
            Shown::Cut => note_line(0, &line, width(wide)),
            _ => warning_lines(0, &line, width(wide)),
        });
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
            match &e.preempted {
                Some(_) => "preempted".to_owned(),
                None => e.state.clone(),
            },
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
    out.push_str(&session_preemptions(r, wide));
    if !r.stale.is_empty() {
        out.push_str("stale sessions (the job is gone; the record is not):\n");
        for s in &r.stale {
            let job = s.job_id.map_or("-".into(), |j| j.to_string());
            // Never cut: the command is there to be copied.
            out.push_str(&format!(
                "  {} -> {job}  {}\n",
                s.session,
                release_hint(&s.mirror, &s.target)
            ));
            if let Some(why) = &s.reason {
                out.push_str(&note_line(4, why, width(wide)));
            }
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

/// The lines after the sessions table about each job in a preemption's grace.
fn session_preemptions(r: &Report, wide: bool) -> String {
    let entries = r.targets.iter().flat_map(|g| &g.jobs).chain(&r.unmatched);
    let mut out = String::new();
    for e in entries.filter(|e| e.preempted.is_some()) {
        let whose = e.session.clone().or_else(|| e.mirror.clone());
        out.push_str(&warning_lines(
            0,
            &format!(
                "job {} ({}): {} (Slurm's grace); the session keeps it until then",
                e.id,
                whose.as_deref().unwrap_or(&e.token),
                preempted_until(e.preempted.as_ref())
            ),
            width(wide),
        ));
    }
    out
}

/// `preempted, ends at 13:30:02`: a job or allocation in a preemption's grace.
pub fn preempted_until(p: Option<&crate::ops::reconcile::Preempted>) -> String {
    p.map(crate::ops::reconcile::Preempted::until)
        .unwrap_or_default()
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
            assert!(cols(line) <= WIDTH, "{line:?}");
        }
        assert!(text.lines().nth(1).unwrap().contains('…'));
        assert!(text.contains("running") && text.contains("queued"));
        let wide = t.render(0, None);
        assert!(wide.contains(&"a".repeat(70)) && !wide.contains('…'));
    }

    /// A wide character takes two columns (a CJK worker name), a combining one none: the
    /// table is measured in columns, not characters, so it still fits and aligns.
    #[test]
    fn wide_characters_are_measured_in_columns() {
        let name = "データ処理-ジョブ";
        assert_eq!((name.chars().count(), cols(name)), (9, 17));
        assert_eq!(cols("cafe\u{301}"), 4);
        assert_eq!(
            cut(name, 6),
            "デー…",
            "cut between characters, within 6 columns"
        );
        assert_eq!(cut(name, 17), name);
        let mut t = Table::new(&["NAME", "STATE", "NOTE"], &[0, 2]);
        t.row(vec![name.repeat(4), "running".into(), "b".repeat(30)]);
        t.row(vec![name.into(), "queued".into(), "-".into()]);
        t.row(vec!["plain".into(), "released".into(), "-".into()]);
        let text = t.render(0, Some(WIDTH));
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines {
            assert!(cols(line) <= WIDTH, "{} columns: {line:?}", cols(line));
        }
        assert!(lines[1].contains('…') && lines[2].contains(name), "{text}");
        // Every row's STATE cell starts in the header's column.
        let at = |line: &str, word: &str| cols(&line[..line.find(word).unwrap()]);
        let column = at(lines[0], "STATE");
        for (line, word) in lines[1..].iter().zip(["running", "queued", "released"]) {
            assert_eq!(at(line, word), column, "{text}");
        }
        assert!(t.render(0, None).contains(&name.repeat(4)));
    }

    /// The reports the golden output is drawn from: every column, long names, a cut note.
    fn samples() -> (StatusReport, JobsReport, Report) {
        use crate::ops::jobs::{JobView, RefreshView};
        use crate::ops::pool::{
            AllocationView, CreatingView, NodeView, Owner, PoolView, PublicationView, Resources,
            WorkerView,
        };
        use crate::state::jobs::JobWorkerState;
        use crate::state::pool::WorkerState;
        let res = |cpus, mem_mb, gpus| Resources { cpus, mem_mb, gpus };
        let alloc = |job: u32, left: Option<i64>, ended: Option<&str>| AllocationView {
            job_id: crate::event::test_job(job),
            node: "n0042.savio4".into(),
            user: "me".into(),
            start_time: "2026-12-01T10:00:00".into(),
            end_time: "2026-12-01T12:00:00".into(),
            cpus: 4,
            mem_mb: 4096,
            partition: "savio4_htc".into(),
            account: "fc_x".into(),
            qos: "normal".into(),
            seconds_left: left,
            state: Some(match ended {
                Some(_) => AllocationState::Ended,
                None => AllocationState::Running,
            }),
            ended_proof: ended.map(str::to_owned),
            preempted: None,
        };
        let worker = |name: &str, id: &str, state: WorkerState, step: Option<&str>| WorkerView {
            name: name.into(),
            submission_id: id.into(),
            state,
            cpus: 1,
            mem_mb: 100,
            on_node: "n0042.savio4".into(),
            gpus: 0,
            step_id: step.map(str::to_owned),
            exit_code: None,
            exit_signal: None,
            launch_failure: None,
            stage: None,
            stdout: None,
            stderr: None,
            lineage: first_generation(),
            node: NodeView::default(),
        };
        let mut published = worker(
            "nightly-regression-suite-with-a-long-name",
            "9f3b2a10-0000-4000-8000-000000000002",
            WorkerState::Released,
            Some("901.1"),
        );
        published.mem_mb = 1536;
        published.gpus = 1;
        published.node.step_gpus = Some("1".into());
        published.node.cuda_visible_devices = Some("0".into());
        published.node.publication = Some(PublicationView {
            outcome: "published".into(),
            dir: Some(
                "/global/scratch/users/me/dispatch/pools/p/published/nightly-regression-suite-with-a-long-name-9f3b2a10".into(),
            ),
            manifest_sha256: None,
            took_ms: Some(12),
        });
        published.node.state_class = Some("sealed".into());
        published.exit_code = Some(0);
        published.node.outcome = Some(crate::policy::node::Outcome::Completed);
        // Exited 3 on its own; its step not yet proven over: what its journal knows is shown.
        let mut failed = worker(
            "w3",
            "3c0ffee0-0000-4000-8000-000000000006",
            WorkerState::Running,
            Some("901.2"),
        );
        failed.exit_code = Some(3);
        failed.stage = Some(crate::ops::pool::Stage::Exited);
        failed.node.outcome = Some(crate::policy::node::Outcome::Failed);
        failed.node.state_class = Some("crash_class_partial".into());
        // A generation 2, and a worker whose continuation waits for room.
        let mut later = worker(
            "w1",
            "0b5e7c1e-8a1f-4a55-9f6e-0d4b8e2a9c11",
            WorkerState::Running,
            Some("901.0"),
        );
        later.lineage.generation = 2;
        later.lineage.continues_left = Some(1);
        let mut waiting = worker(
            "sim",
            "5e1ec7ed-0000-4000-8000-000000000007",
            WorkerState::Released,
            Some("901.3"),
        );
        (waiting.cpus, waiting.mem_mb) = (2, 2048);
        waiting.exit_code = Some(0);
        waiting.lineage.continues_left = Some(3);
        waiting.lineage.standing = Some(Standing::Waiting);
        waiting.lineage.why = Some(
            "continuation waiting for room: pool \"p\" has no node with room for 2 CPUs, 2048 \
             MB and 0 GPUs now (n0042.savio4 1/4 CPUs, 1948/4096 MB, 0/0 GPUs free); stop a \
             worker, ask for less, or wait for room with --wait"
                .into(),
        );
        let status = StatusReport {
            pools: vec![
                PoolView {
                    pool: "p".into(),
                    owner: Owner::Attached,
                    releasing: false,
                    no_kill: None,
                    nodes_lost: Default::default(),
                    allocation: alloc(901, Some(3540), None),
                    capacity: res(4, 4096, 0),
                    reserved: res(1, 100, 0),
                    nodes: Vec::new(),
                    renewal: None,
                    last_end: None,
                    workers: vec![later, published, failed, waiting],
                },
                PoolView {
                    pool: "gpu".into(),
                    owner: Owner::Created,
                    releasing: true,
                    no_kill: None,
                    nodes_lost: [(
                        "g2".to_owned(),
                        "job 902 is listed RUNNING on g1".to_owned(),
                    )]
                    .into(),
                    allocation: alloc(902, None, Some("squeue shows job 902 CANCELLED")),
                    capacity: res(2, 1024, 2),
                    reserved: Resources::default(),
                    nodes: ["g1", "g2"]
                        .map(|node| crate::policy::placement::NodeRoom {
                            node: node.into(),
                            capacity: res(1, 512, 1),
                            reserved: Resources::default(),
                        })
                        .into(),
                    renewal: None,
                    last_end: Some(crate::ops::pool::EndView {
                        generation: 1,
                        job_id: crate::event::test_job(902),
                        cause: "lost".into(),
                        proof: "squeue shows job 902 CANCELLED".into(),
                        at: Some("2026-12-01T10:04:00.000000Z".into()),
                    }),
                    workers: vec![],
                },
            ],
            creating: vec![CreatingView {
                pool: "big".into(),
                job_name: "dispatch-pool-big-1a2b3c4d".into(),
                job_id: None,
                since: "2026-12-01T10:05:00".into(),
                failure: None,
            }],
            waiting_for_gone_pools: Vec::new(),
        };
        let job = |worker: &str, id: &str, job: Option<u32>, state: JobWorkerState| JobView {
            worker: worker.into(),
            submission_id: id.into(),
            job_id: job.map(crate::event::test_job),
            job_name: format!("dispatch-{worker}"),
            state,
            active: true,
            cpus: 2,
            mem_mb: 2048,
            submitted_at: "2026-12-01T09:30:00.000000Z".into(),
            failure: None,
            outcome: None,
            exit_code: None,
            exit_signal: None,
            stage: None,
            slurm_state: None,
            reason: None,
            node: None,
            preempted: None,
            stdout: String::new(),
            stderr: String::new(),
            lineage: first_generation(),
        };
        let mut pending = job(
            "b",
            "d19f3671-0000-4000-8000-000000000003",
            Some(43),
            JobWorkerState::Queued,
        );
        pending.slurm_state = Some("PENDING".into());
        pending.reason = Some("QOSMaxJobsPerUserLimit".into());
        let mut running = job(
            "train-resnet-on-the-big-dataset",
            "77aa0000-0000-4000-8000-000000000004",
            Some(44),
            JobWorkerState::Queued,
        );
        running.cpus = 1;
        running.slurm_state = Some("RUNNING".into());
        running.reason = Some("None".into());
        running.stage = Some(crate::ops::pool::Stage::Published);
        running.exit_code = Some(1);
        running.outcome = Some(crate::policy::node::Outcome::Failed);
        let mut failed = job(
            "bad",
            "8eeca6fd-0000-4000-8000-000000000005",
            None,
            JobWorkerState::Failed,
        );
        failed.active = false;
        failed.failure = Some(
            "sbatch refused the job: \"sbatch: error: Batch job submission failed: Invalid partition name specified\"".into(),
        );
        // Continued once, and its successor, whose end is proven: due.
        let mut continued = job(
            "count",
            "c0a1c0a1-0000-4000-8000-000000000008",
            Some(41),
            JobWorkerState::Released,
        );
        continued.active = false;
        continued.lineage.standing = Some(Standing::Continued);
        continued.lineage.successor = Some("c0a1c0a2-0000-4000-8000-000000000009".parse().unwrap());
        let mut due = job(
            "count",
            "c0a1c0a2-0000-4000-8000-000000000009",
            Some(42),
            JobWorkerState::Released,
        );
        due.active = false;
        due.lineage.generation = 2;
        due.lineage.continues_left = Some(1);
        due.lineage.standing = Some(Standing::Due);
        let jobs = JobsReport {
            jobs: vec![pending, running, failed, due, continued],
            refresh: Some(RefreshView {
                resolved: 0,
                unknown: 0,
                slurm_calls: 1,
            }),
        };
        let entry =
            |id: u32, mirror: Option<&str>, state: &str, flags: Vec<&'static str>| JobEntry {
                job_id: id,
                id: id.to_string(),
                mirror: mirror.map(str::to_owned),
                token: "tok123".into(),
                state: state.into(),
                time_left: Some("11:59:00".into()),
                node: Some("n0042.savio4".into()),
                session: None,
                sessions: vec![],
                flags,
                preempted: None,
            };
        let sessions = Report {
            targets: vec![crate::policy::session::report::TargetGroup {
                target: "savio-htc".into(),
                signature: "savio4_htc/fc_x/normal".into(),
                jobs: vec![
                    entry(4242, Some("sample"), "RUNNING", vec![]),
                    entry(
                        4243,
                        Some("sample"),
                        "RUNNING",
                        vec![crate::policy::session::report::FLAG_REPLACED],
                    ),
                    JobEntry {
                        time_left: Some("0:27".into()),
                        preempted: Some(crate::slurm::Preempted {
                            at: "2026-12-06T13:29:32".into(),
                            ends_at: "2026-12-06T13:30:02".into(),
                        }),
                        ..entry(4244, Some("notebook"), "RUNNING", vec![])
                    },
                ],
            }],
            unmatched: vec![entry(4250, None, "PENDING", vec!["no session record"])],
            stale: vec![crate::policy::session::report::SessionLine {
                session: "doomed--savio-htc".into(),
                mirror: "doomed".into(),
                target: "savio-htc".into(),
                job_id: Some(4100),
                reason: Some("preempted: squeue shows job 4100 PREEMPTED".into()),
            }],
            unknown: vec![],
            errors: vec![],
        };
        (status, jobs, sessions)
    }

    fn first_generation() -> Lineage {
        Lineage {
            generation: 1,
            continues_left: None,
            predecessor: None,
            successor: None,
            standing: None,
            why: None,
        }
    }

    fn drawn(wide: bool) -> String {
        let (status, jobs, sessions) = samples();
        let release = |m: &str, t: &str| format!("`dispatch session release {m} -T {t}`");
        format!(
            "$ dispatch pool status\n{}\n$ dispatch jobs --refresh\n{}\n$ dispatch sessions\n{}",
            pool_status(&status, wide),
            self::jobs(&jobs, wide),
            self::sessions(&sessions, wide, &release)
        )
        // The submission time is shown in local time: the golden file holds a placeholder.
        .replace(&submitted("2026-12-01T09:30:00.000000Z"), "MM-DD HH:MM")
    }

    /// The golden output at 80 columns (tests/golden/tables-80.txt; `UPDATE_GOLDEN=1`
    /// rewrites it): every row fits, and it is exactly what was reviewed.
    #[test]
    fn tables_match_the_golden_output_at_80_columns() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/tables-80.txt");
        let text = drawn(false);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        // Only a command or a path to copy may pass the width.
        let copied = |l: &&str| l.contains("dispatch session release") || l.contains(" in /");
        for line in text.lines().filter(|l| !copied(l)) {
            assert!(cols(line) <= WIDTH, "{} columns: {line:?}", cols(line));
        }
        assert!(!text.contains("1 CPUs"), "{text}");
        assert_eq!(text, std::fs::read_to_string(path).unwrap());
        let wide = drawn(true);
        assert!(
            wide.contains("0b5e7c1e-8a1f-4a55-9f6e-0d4b8e2a9c11"),
            "{wide}"
        );
        assert!(
            wide.contains("nightly-regression-suite-with-a-long-name-9f3b2a10"),
            "{wide}"
        );
        assert!(!wide.contains('…'), "{wide}");
    }
}
