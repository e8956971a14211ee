//! `dispatch report --html`: one self-contained page (inline CSS and SVG; no script, no
//! network, no external font) drawn from `policy::report::Report`.
//!
//! The page is written with maud's `html!`: markup comes only from its literals. Every data
//! string is spliced as `Text`, which escapes it with [`escape`]: names, reasons and notes are
//! anyone's (src/names.rs). Whatever else is spliced maud escapes itself. Only the stylesheet
//! (a literal) and maud's own output closed as an SVG self-closing tag (`closed`) go in as
//! `PreEscaped`.

use maud::{html, Markup, PreEscaped, Render, DOCTYPE};

use crate::policy::audit::AuditStatus;
use crate::policy::report::{
    BudgetPoint, BudgetSeries, ChainRow, EventLine, Milestone, Report, Subject, WorkerTimeline,
    MARKS,
};

/// Data on the page: escaped by dispatch's rules ([`escape`]), which are stricter than maud's
/// (maud leaves `'` and control characters as they are).
struct Text<T>(T);

impl<T: AsRef<str>> Render for Text<T> {
    fn render_to(&self, out: &mut String) {
        out.push_str(&escape(self.0.as_ref()));
    }
}

/// A coordinate or size as the page prints it: one decimal, a non-finite one as 0.0.
struct Num(f64);

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = if self.0.is_finite() { self.0 } else { 0.0 };
        write!(f, "{v:.1}")
    }
}

/// `s` with `& < > " '` escaped, safe in text and in quoted attributes alike.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters have no business on a page; show them, do not pass them.
            c if c.is_control() && c != '\n' && c != '\t' => {
                out.push_str(&format!("\\u{{{:x}}}", u32::from(c)))
            }
            c => out.push(c),
        }
    }
    out
}

/// Data that may be missing: escaped, or a grey dash.
fn opt(data: Option<&str>) -> Markup {
    html! {
        @match data {
            Some(d) => (Text(d)),
            None => span.none { "—" },
        }
    }
}

/// An empty SVG element in its self-closing form (`<line …/>`), which maud does not write:
/// `element` is maud's void form (`<line …>`), closed in place.
fn closed(element: Markup) -> Markup {
    let mut s = element.into_string();
    s.pop();
    s.push_str("/>");
    PreEscaped(s)
}

/// A legend entry: a dot of `colour`, then `label`.
fn legend(colour: &str, label: &str) -> Markup {
    html! { span { i style={ "background:" (colour) } {} (label) } }
}

/// A table's header row.
fn header(names: &[&str]) -> Markup {
    html! { tr { @for name in names { th { (name) } } } "\n" }
}

const STYLE: &str = "<style>
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d5dd}
.meta{color:#5b6474;font-size:13px;margin:0}
table{border-collapse:collapse;font-size:12px;width:100%}
th,td{border:1px solid #d0d5dd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eef1f6} td.mono,span.mono{font-family:ui-monospace,monospace;word-break:break-all}
.bad{color:#b42318;font-weight:600} .finding{background:#fde8e7}
.ok{color:#067647;font-weight:600} .none{color:#98a2b3}
.verdict-passed{background:#dcfae6;padding:6px 10px;border-left:4px solid #067647}
.verdict-failed{background:#fde8e7;padding:6px 10px;border-left:4px solid #b42318}
svg{background:#fbfcfe;border:1px solid #e4e7ec} svg text{font-size:11px;fill:#1d2330}
.legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px;vertical-align:-1px}
</style>";

fn colour(what: Milestone) -> &'static str {
    match what {
        Milestone::Submitted => "#667085",
        Milestone::Launched => "#1570ef",
        Milestone::Running => "#079455",
        Milestone::StopAsked => "#ef6820",
        Milestone::Exited => "#7a5af8",
        Milestone::Published => "#0e9384",
        Milestone::Released => "#06aed4",
        Milestone::Failed => "#d92d20",
        Milestone::Forgotten => "#dd2590",
    }
}

/// A milestone as the page says it: its word, but `stop asked` in two.
fn label(what: Milestone) -> &'static str {
    match what {
        Milestone::StopAsked => "stop asked",
        other => other.as_str(),
    }
}

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 200.0;
const RIGHT: f64 = 110.0;
const ROW: f64 = 56.0;
/// Horizontal room one mark's label takes.
const LABEL_PITCH: f64 = 62.0;

/// The x of time `t` on a chart spanning `span`; past the right edge is clamped to it.
fn x_of(t: i64, span: (i64, i64)) -> f64 {
    let (t0, t1) = span;
    let width = (t1 - t0).max(1) as f64;
    let frac = ((t - t0) as f64 / width).clamp(0.0, 1.0);
    LEFT + frac * (WIDTH - LEFT - RIGHT)
}

pub fn render(r: &Report) -> String {
    let subject = Text(r.subject.describe());
    let about = |coordinator: bool| {
        let from = |e: &&EventLine| (e.source == "coordinator") == coordinator;
        r.events.iter().filter(from).count()
    };
    html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width";
                title { "dispatch report: " (subject) }
                (PreEscaped(STYLE))
            }
            body {
                "\n"
                h1 { "dispatch report: " (subject) }
                p.meta {
                    (r.chains.len()) " worker(s); " (about(true))
                    " of the coordinator journal's " (r.journal_events)
                    " event(s) are about it, and " (about(false)) " of its workers' own journals"
                    @if let Some((from, to)) = &r.span { "; from " (Text(from)) " to " (Text(to)) }
                }
                "\n"
                @if let Some(v) = &r.verdict {
                    p class={ "verdict-" (v.verdict.as_str()) } id="verdict" {
                        "verdict " b { (v.verdict.as_str()) } " at " (Text(&v.at))
                        " (seq " (v.seq) "): " (Text(&v.reason)) br;
                        "journal chain head after the verdict: "
                        span.mono { (opt(v.chain_head.as_deref())) }
                    }
                    "\n"
                }
                (timeline(r))
                @for series in &r.budget { (budget(series, r.span_us)) }
                @if r.budget.is_empty() {
                    h2 { "Budget" }
                    p.meta { "No pool: each worker is its own Slurm job." }
                    "\n"
                }
                (evidence(r))
                (audit(r))
                (events(r))
            }
        }
        "\n"
    }
    .into_string()
}

fn timeline(r: &Report) -> Markup {
    let (from, to) = r
        .span
        .as_ref()
        .map_or(("", ""), |(f, t)| (f.as_str(), t.as_str()));
    html! {
        h2 { "Timeline" } "\n"
        div.legend {
            @for what in MARKS { (legend(colour(what), label(what))) }
            (legend("#b42318", "allocation end"))
            (legend("#f79009", "early-shutdown deadline"))
        }
        "\n"
        @if let Some(span) = r.span_us {
            svg #timeline xmlns="http://www.w3.org/2000/svg" width=(Num(WIDTH))
                height=(Num(30.0 + ROW * r.chains.len().max(1) as f64)) role="img" {
                title { "timeline per worker" } "\n"
                // Time axis: start and end.
                text x=(Num(LEFT)) y="14" { (Text(from)) }
                text text-anchor="end" x=(Num(WIDTH - RIGHT)) y="14" { (Text(to)) } "\n"
                @for (i, row) in r.chains.iter().enumerate() {
                    @let top = 30.0 + ROW * i as f64;
                    @match generations(r, row).as_slice() {
                        [w] => (worker_row(w, i, top, span)),
                        chain => (chain_row(row, chain, i, top, span)),
                    }
                }
            }
            "\n"
        } @else {
            p.meta { "Nothing recorded." } "\n"
        }
    }
}

fn worker_row(w: &WorkerTimeline, index: usize, top: f64, span: (i64, i64)) -> Markup {
    let mid = top + ROW / 2.0;
    html! {
        g.worker id={ "worker-" (index) } data-worker=(Text(&w.worker))
            data-submission=(Text(&w.submission_id)) {
            @if let Some(why) = &w.launch_failure {
                title { "launch failed: " (Text(why)) }
            }
            text x="8" y=(Num(mid - 4.0)) { (Text(&w.worker)) }
            text x="8" y=(Num(mid + 10.0)) style="fill:#5b6474" {
                (Text(&w.state)) " · " (Text(w.pool.as_deref().unwrap_or("own job")))
                (Text(placement_label(w)))
            }
            "\n"
            @if let (Some(first), Some(last)) = (w.marks.first(), w.marks.last()) {
                (closed(html! {
                    line x1=(Num(x_of(first.time_us, span))) x2=(Num(x_of(last.time_us, span)))
                        y1=(Num(mid)) y2=(Num(mid)) stroke="#98a2b3" stroke-width="3";
                }))
                "\n"
            }
            (worker_limits(w, top, span))
            (worker_marks(w, mid, span, &mut [f64::NEG_INFINITY; 2]))
        }
        "\n"
    }
}

/// The items of a row's generations, in order.
fn generations<'a>(r: &'a Report, row: &ChainRow) -> Vec<&'a WorkerTimeline> {
    row.generations
        .iter()
        .filter_map(|id| r.workers.iter().find(|w| &w.submission_id == id))
        .collect()
}

/// A worker continued across generations (`--continue N`): one row, a segment per generation
/// from its first milestone to its last, each with its marks, limits and a tooltip saying its
/// job, node, start, end, what ended it, its state class and its publication.
fn chain_row(
    row: &ChainRow,
    chain: &[&WorkerTimeline],
    index: usize,
    top: f64,
    span: (i64, i64),
) -> Markup {
    let mid = top + ROW / 2.0;
    let last = chain.last().copied();
    // One pair of label lanes for the whole row: a generation's first label never covers the
    // one before's last.
    let mut lanes = [f64::NEG_INFINITY; 2];
    let segments: Vec<Markup> = chain
        .iter()
        .map(|w| segment(w, top, span, &mut lanes))
        .collect();
    html! {
        g.worker.chain id={ "worker-" (index) } data-worker=(Text(&row.worker))
            data-chain=(Text(&row.chain)) data-generations=(chain.len()) {
            text x="8" y=(Num(mid - 4.0)) { (Text(&row.worker)) " · " (chain.len()) " generations" }
            @if let Some(w) = last {
                text x="8" y=(Num(mid + 10.0)) style="fill:#5b6474" {
                    (Text(&w.state)) " · " (Text(w.pool.as_deref().unwrap_or("own jobs")))
                }
            }
            "\n"
            @for drawn in segments { (drawn) }
        }
        "\n"
    }
}

/// One generation on its lineage's row.
fn segment(w: &WorkerTimeline, top: f64, span: (i64, i64), lanes: &mut [f64; 2]) -> Markup {
    let mid = top + ROW / 2.0;
    let g = &w.segment;
    html! {
        g.generation data-generation=(g.generation) data-submission=(Text(&w.submission_id)) {
            title { (Text(segment_text(w))) }
            @if let (Some(first), Some(last)) = (w.marks.first(), w.marks.last()) {
                @let (x1, x2) = (x_of(first.time_us, span), x_of(last.time_us, span));
                (closed(html! {
                    line x1=(Num(x1)) x2=(Num(x2)) y1=(Num(mid)) y2=(Num(mid))
                        stroke=(if g.generation.is_multiple_of(2) { "#667085" } else { "#98a2b3" })
                        stroke-width="3";
                }))
                (closed(html! {
                    line x1=(Num(x1)) x2=(Num(x1)) y1=(Num(top + 6.0)) y2=(Num(top + ROW - 6.0))
                        stroke="#344054" stroke-width="1";
                }))
                text x=(Num(x1 + 3.0)) y=(Num(top + ROW - 1.0)) style="fill:#344054" {
                    "g" (g.generation)
                }
                "\n"
            }
            (worker_limits(w, top, span))
            (worker_marks(w, mid, span, lanes))
        }
        "\n"
    }
}

/// What a generation's tooltip says (data: escaped where it is spliced).
fn segment_text(w: &WorkerTimeline) -> String {
    let g = &w.segment;
    let or_dash = |s: Option<&str>| s.unwrap_or("—").to_owned();
    let job = match (&g.job_id, &w.pool) {
        (Some(j), Some(pool)) => format!("allocation {j} of pool {pool}"),
        (Some(j), None) => format!("job {j}"),
        (None, Some(pool)) => format!("pool {pool}"),
        (None, None) => "no job yet".to_owned(),
    };
    let ended = match (&g.ended_by, &g.ended_proof) {
        (Some(cause), Some(proof)) => format!("ended by {cause} ({proof})"),
        _ => format!("{} now", w.state),
    };
    format!(
        "generation {}: submission {}, {job}, node {}, from {} to {}, {ended}, state class {}, \
         published {}",
        g.generation,
        w.submission_id,
        or_dash(w.node.as_deref()),
        or_dash(w.marks.first().map(|m| m.time.as_str())),
        or_dash(w.marks.last().map(|m| m.time.as_str())),
        or_dash(g.state_class.as_deref()),
        or_dash(g.published_dir.as_deref()),
    )
}

/// Where a pool worker ran and the GPUs it held: " · node2 · GPU 1" (its step's indexes when
/// its supervisor recorded them, else how many it reserved), or nothing when not placed.
fn placement_label(w: &WorkerTimeline) -> String {
    let Some(node) = &w.node else {
        return String::new();
    };
    match (&w.step_gpus, w.gpus) {
        (Some(indexes), _) => format!(" · {node} · GPU {indexes}"),
        (None, 0) => format!(" · {node}"),
        (None, n) => format!(" · {node} · {n} GPU"),
    }
}

/// A worker's allocation end and early-shutdown deadline: dashed lines across its row, and
/// one past the last event said at the right edge.
fn worker_limits(w: &WorkerTimeline, top: f64, span: (i64, i64)) -> Markup {
    let limits = [
        (w.allocation_end_us, "#b42318", "allocation end ", "end +"),
        (
            w.shutdown_deadline_us,
            "#f79009",
            "early-shutdown deadline ",
            "deadline +",
        ),
    ];
    html! {
        @for (n, (at, colour, what, past)) in limits.into_iter().enumerate() {
            @if let Some(at) = at {
                @let x = Num(x_of(at, span));
                line stroke-dasharray="4 3" stroke-width="2" stroke=(colour) x1=(x) x2=(x)
                    y1=(Num(top + 4.0)) y2=(Num(top + ROW - 4.0)) {
                    title { (what) (Text(crate::event::Micros(at).to_rfc3339())) }
                }
                @if at > span.1 {
                    // Past the last event: said at the right edge, not drawn to scale.
                    text x=(Num(x.0 + 4.0)) y=(Num(top + 14.0 + 12.0 * n as f64))
                        style={ "fill:" (colour) } {
                        (past) ((at - span.1) / 1_000_000) " s"
                    }
                }
                "\n"
            }
        }
    }
}

/// The first of two label lanes, above and below the line, that has room for a label at `x`
/// (taken for it); a label that fits in neither is left to the mark's tooltip rather than
/// drawn over another.
fn take_lane(lanes: &mut [f64; 2], x: f64) -> Option<usize> {
    let lane = lanes.iter().position(|&last| x - last >= LABEL_PITCH)?;
    lanes[lane] = x;
    Some(lane)
}

/// A worker's milestones on its line, each labelled where a label lane (of its row) has room.
fn worker_marks(w: &WorkerTimeline, mid: f64, span: (i64, i64), lanes: &mut [f64; 2]) -> Markup {
    html! {
        @for m in &w.marks {
            @let x = x_of(m.time_us, span);
            g.mark data-what=(label(m.what)) data-seq=(m.seq) {
                circle r="6" cx=(Num(x)) cy=(Num(mid)) fill=(colour(m.what)) {
                    title {
                        (label(m.what)) " at " (Text(&m.time)) " (" (Text(m.source.as_str()))
                        " seq " (m.seq) ")"
                    }
                }
                @if let Some(l) = take_lane(lanes, x) {
                    text text-anchor="middle" x=(Num(x))
                        y=(Num(if l == 0 { mid - 9.0 } else { mid + 17.0 })) { (label(m.what)) }
                }
            }
            "\n"
        }
    }
}

/// A budget chart's height, and the y of its capacity line and of zero.
const H: f64 = 170.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 150.0;

/// The y of `used` out of `cap` on a budget chart, at most 120 % of it.
fn y_of(used: u64, cap: u64) -> f64 {
    let frac = if cap == 0 {
        0.0
    } else {
        (used as f64 / cap as f64).min(1.2)
    };
    BOTTOM - frac * (BOTTOM - TOP)
}

/// Which reserved amount and capacity a budget line draws.
type Pick = fn(&BudgetPoint) -> (u64, u64);

fn budget(s: &BudgetSeries, span: Option<(i64, i64)>) -> Markup {
    let series: [(&'static str, Pick); 2] = [
        ("#1570ef", |b| (b.cpus, b.capacity_cpus)),
        ("#7a5af8", |b| (b.mem_mb, b.capacity_mem_mb)),
    ];
    html! {
        h2 { "Budget of pool " (Text(&s.pool)) } "\n"
        div.legend {
            (legend("#1570ef", "CPUs reserved"))
            (legend("#7a5af8", "memory reserved"))
            (legend("#b42318", "capacity"))
        }
        "\n"
        @if let (Some(span), Some(last)) = (span, s.points.last()) {
            svg.budget data-pool=(Text(&s.pool)) xmlns="http://www.w3.org/2000/svg"
                width=(Num(WIDTH)) height=(Num(H)) role="img" {
                title { "reserved budget against capacity" } "\n"
                (closed(html! {
                    line stroke="#b42318" stroke-dasharray="6 3" stroke-width="2" x1=(Num(LEFT))
                        x2=(Num(WIDTH - RIGHT)) y1=(Num(TOP)) y2=(Num(TOP));
                }))
                text x="8" y=(Num(TOP + 4.0)) {
                    "capacity " (last.capacity_cpus) " CPUs, " (last.capacity_mem_mb) " MB"
                }
                text x="8" y=(Num(BOTTOM)) { "0" } "\n"
                @for (colour, pick) in series {
                    (closed(html! {
                        path fill="none" stroke-width="2" stroke=(colour) d=(steps(s, span, pick));
                    }))
                    "\n"
                }
                // A dot per budget change on the CPU line, with what was reserved then as its
                // tooltip.
                @for b in &s.points {
                    circle r="2.5" fill="#1570ef" cx=(Num(x_of(b.time_us, span)))
                        cy=(Num(y_of(b.cpus, b.capacity_cpus))) {
                        title {
                            "seq " (b.seq) " " (Text(&b.time)) ": " (b.cpus) "/" (b.capacity_cpus)
                            " CPUs, " (b.mem_mb) "/" (b.capacity_mem_mb) " MB"
                        }
                    }
                }
            }
            "\n"
        }
    }
}

/// A budget line as SVG path data: a step across to each point, up or down to its level
/// when that changed, and on to the right edge.
fn steps(s: &BudgetSeries, span: (i64, i64), pick: Pick) -> String {
    let mut previous_y = None;
    let mut d: String = s
        .points
        .iter()
        .map(|b| {
            let (used, cap) = pick(b);
            let (x, y) = (Num(x_of(b.time_us, span)), y_of(used, cap));
            match previous_y.replace(y) {
                None => format!("M{x} {}", Num(y)),
                Some(p) if p == y => format!(" H{x}"),
                Some(_) => format!(" H{x} V{}", Num(y)),
            }
        })
        .collect();
    d.push_str(&format!(" H{}", Num(WIDTH - RIGHT)));
    d
}

fn evidence(r: &Report) -> Markup {
    html! {
        h2 { "Evidence" } "\n"
        @if r.verdict.is_some() {
            p.meta {
                "As the verdict recorded it; the worker journal head is the one ingested at the verdict."
            }
            "\n"
        }
        table #evidence {
            (header(&[
                "worker",
                "submission",
                "state",
                "outcome",
                "manifest SHA-256",
                "published directory",
                "worker journal head (seq)",
            ]))
            @for e in &r.evidence {
                tr {
                    td { (Text(&e.worker)) }
                    td.mono { (Text(&e.submission_id)) }
                    td { (Text(&e.state)) }
                    td {
                        (opt(e.outcome.as_deref()))
                        @if let Some(code) = e.exit_code { " (exit " (code) ")" }
                        @if let Some(signal) = e.exit_signal { " (signal " (signal) ")" }
                    }
                    td.mono { (opt(e.manifest_sha256.as_deref())) }
                    td.mono { (opt(e.published_dir.as_deref())) }
                    td.mono {
                        (opt(e.worker_journal_head.as_deref()))
                        @if let Some(seq) = e.worker_journal_seq { " (" (seq) ")" }
                    }
                }
                "\n"
            }
        }
        "\n"
    }
}

fn audit(r: &Report) -> Markup {
    let a = &r.audit;
    let status = if a.status == AuditStatus::Ok {
        "ok"
    } else {
        "bad"
    };
    let subject = match r.subject {
        Subject::Trial(_) => "trial",
        Subject::Pool(_) => "pool",
        Subject::Worker(_) => "worker",
    };
    html! {
        h2 { "Audit" } "\n"
        p #audit-status {
            "whole journal: " span class=(status) { (Text(a.status.to_string())) }
            " (journal " (Text(a.journal_status.as_str())) ", " (a.violation_count)
            " violation(s), " (a.override_count) " operator override(s))"
        }
        "\n"
        @if a.findings.is_empty() {
            p.ok { "Nothing the audit found concerns this " (subject) "." } "\n"
        } @else {
            table #findings {
                (header(&["seq", "finding", "detail"]))
                @for f in &a.findings {
                    tr.finding.bad {
                        td { @match f.seq { Some(seq) => (seq), None => "—" } }
                        td { (Text(f.what.as_str())) }
                        td { (Text(&f.detail)) }
                    }
                    "\n"
                }
            }
            "\n"
        }
    }
}

fn events(r: &Report) -> Markup {
    html! {
        h2 { "Events" } "\n"
        table #events {
            (header(&["seq", "time", "source", "kind", "event"]))
            @for e in &r.events {
                tr.event data-seq=(e.seq) data-kind=(Text(e.kind)) {
                    td { (e.seq) }
                    td { (Text(&e.time)) }
                    td { (Text(&e.source)) }
                    td { (Text(e.kind)) }
                    td.mono { (Text(&e.summary)) }
                }
                "\n"
            }
        }
        "\n"
        @if r.events_dropped > 0 {
            p.meta { (r.events_dropped) " more event(s) not shown." } "\n"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placed_worker_is_labelled_with_its_node_and_gpus() {
        let mut w = WorkerTimeline {
            worker: "w".into(),
            submission_id: "s".into(),
            pool: Some("p".into()),
            state: "running".into(),
            cpus: 1,
            mem_mb: 100,
            ..WorkerTimeline::default()
        };
        assert_eq!(placement_label(&w), "");
        w.node = Some("node2".into());
        assert_eq!(placement_label(&w), " · node2");
        w.gpus = 2;
        assert_eq!(placement_label(&w), " · node2 · 2 GPU");
        w.step_gpus = Some("0,1".into());
        assert_eq!(placement_label(&w), " · node2 · GPU 0,1");
    }

    /// Issue 36: a launch Slurm refused says so, in srun's words, on the worker's row.
    #[test]
    fn a_launch_failure_is_told_on_its_row() {
        let mut w = WorkerTimeline {
            worker: "long".into(),
            state: "failed".into(),
            ..WorkerTimeline::default()
        };
        let quiet = worker_row(&w, 0, 0.0, (0, 1)).into_string();
        assert!(!quiet.contains("launch failed"), "{quiet}");
        w.launch_failure = Some("srun: Unable to layout tasks on given cpus <1>".into());
        let row = worker_row(&w, 0, 0.0, (0, 1)).into_string();
        assert!(
            row.contains("<title>launch failed: srun: Unable to layout tasks on given cpus &lt;1&gt;</title>"),
            "{row}"
        );
    }

    /// Issue 37: a worker continued across generations is one row, a segment per generation.
    #[test]
    fn a_chain_is_one_row_with_a_segment_per_generation() {
        use crate::policy::report::{Mark, MarkSource, Segment};
        let mark = |what, t: i64| Mark {
            what,
            source: MarkSource::Coordinator,
            seq: t as u64,
            time: format!("t{t}"),
            time_us: t,
        };
        let generation = |n: u32, id: &str, marks: Vec<Mark>| WorkerTimeline {
            worker: "long".into(),
            submission_id: id.into(),
            state: "released".into(),
            marks,
            segment: Segment {
                chain: "a".into(),
                generation: n,
                job_id: crate::slurm::JobId::new(76 + n),
                ended_by: (n == 1).then(|| "time-limit".into()),
                ended_proof: (n == 1).then(|| "squeue shows job 77 TIMEOUT".into()),
                state_class: Some("checkpointed".into()),
                published_dir: Some(format!("/p/long-{id}")),
                ..Segment::default()
            },
            ..WorkerTimeline::default()
        };
        let chain = [
            generation(
                1,
                "a",
                vec![mark(Milestone::Submitted, 0), mark(Milestone::Released, 40)],
            ),
            generation(
                2,
                "b",
                vec![mark(Milestone::Submitted, 50), mark(Milestone::Running, 90)],
            ),
        ];
        let row = ChainRow {
            chain: "a".into(),
            worker: "long".into(),
            generations: vec!["a".into(), "b".into()],
        };
        let drawn = chain_row(&row, &[&chain[0], &chain[1]], 0, 30.0, (0, 100)).into_string();
        assert_eq!(
            drawn.matches("<g class=\"generation\"").count(),
            2,
            "{drawn}"
        );
        assert!(drawn.contains("data-generations=\"2\""), "{drawn}");
        assert!(drawn.contains(">long · 2 generations<"), "{drawn}");
        assert!(
            drawn.contains(
                "<title>generation 1: submission a, job 77, node —, from t0 to t40, ended by \
                 time-limit (squeue shows job 77 TIMEOUT), state class checkpointed, published \
                 /p/long-a</title>"
            ),
            "{drawn}"
        );
        assert!(drawn.contains("released now, state class"), "{drawn}");
        // In a page: one row for the two generations.
        let r = Report {
            subject: Subject::Worker("long".into()),
            span: Some(("t0".into(), "t90".into())),
            span_us: Some((0, 100)),
            journal_events: 9,
            workers: chain.to_vec(),
            chains: vec![row],
            workers_truncated: false,
            budget: vec![],
            events: vec![],
            events_dropped: 0,
            evidence: vec![],
            verdict: None,
            audit: crate::policy::report::AuditSection {
                status: AuditStatus::Ok,
                journal_status: crate::journal::Status::Clean,
                violation_count: 0,
                override_count: 0,
                findings: vec![],
            },
        };
        let page = render(&r);
        assert_eq!(page.matches("<g class=\"worker").count(), 1, "{page}");
    }

    #[test]
    fn escape_leaves_no_markup() {
        let hostile = "<script>alert('x')</script>\"&\u{7}";
        let e = escape(hostile);
        assert!(!e.contains('<') && !e.contains('>') && !e.contains('"') && !e.contains('\''));
        assert_eq!(
            e,
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;\\u{7}"
        );
    }
}
