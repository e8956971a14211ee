//! `dispatch report --html`: one self-contained page (inline CSS and SVG; no script, no
//! network, no external font) drawn from `policy::report::Report`.
//!
//! Every string that reaches the page goes through [`Page::text`], which escapes it: names,
//! reasons and notes are anyone's (src/names.rs). [`Page::raw`] takes only `&'static str`,
//! so markup can never be built from data.

use crate::event::trial::Verdict;
use crate::policy::audit::AuditStatus;
use crate::policy::report::{BudgetSeries, Milestone, Report, WorkerTimeline, MARKS};

/// A page being written: markup from literals, data only escaped.
pub struct Page(String);

/// Numbers the page may print as they are.
pub trait Num {
    fn write_to(&self, out: &mut String);
}

macro_rules! int_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn write_to(&self, out: &mut String) {
                out.push_str(&self.to_string());
            }
        }
    )*};
}
int_num!(u32, u64, i64, usize);

impl Num for f64 {
    fn write_to(&self, out: &mut String) {
        let v = if self.is_finite() { *self } else { 0.0 };
        out.push_str(&format!("{v:.1}"));
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

impl Page {
    fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    fn text(&mut self, data: &str) -> &mut Self {
        self.0.push_str(&escape(data));
        self
    }

    fn num(&mut self, n: impl Num) -> &mut Self {
        n.write_to(&mut self.0);
        self
    }

    fn opt(&mut self, data: Option<&str>) -> &mut Self {
        match data {
            Some(d) => self.text(d),
            None => self.raw("<span class=\"none\">—</span>"),
        }
    }
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
    let mut p = Page(String::with_capacity(64 * 1024));
    let subject = r.subject.describe();
    p.raw("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width\">")
        .raw("<title>dispatch report: ")
        .text(&subject)
        .raw("</title>")
        .raw(STYLE)
        .raw("</head><body>\n<h1>dispatch report: ")
        .text(&subject)
        .raw("</h1><p class=\"meta\">")
        .num(r.workers.len())
        .raw(" worker(s); ")
        .num(
            r.events
                .iter()
                .filter(|e| e.source == "coordinator")
                .count(),
        )
        .raw(" of the coordinator journal's ")
        .num(r.journal_events)
        .raw(" event(s) are about it, and ")
        .num(
            r.events
                .iter()
                .filter(|e| e.source != "coordinator")
                .count(),
        )
        .raw(" of its workers' own journals");
    if let Some((from, to)) = &r.span {
        p.raw("; from ").text(from).raw(" to ").text(to);
    }
    p.raw("</p>\n");
    if let Some(v) = &r.verdict {
        p.raw(match v.verdict {
            Verdict::Passed => "<p class=\"verdict-passed\" id=\"verdict\">",
            Verdict::Failed => "<p class=\"verdict-failed\" id=\"verdict\">",
        })
        .raw("verdict <b>")
        .text(v.verdict.as_str())
        .raw("</b> at ")
        .text(&v.at)
        .raw(" (seq ")
        .num(v.seq)
        .raw("): ")
        .text(&v.reason)
        .raw("<br>journal chain head after the verdict: <span class=\"mono\">")
        .opt(v.chain_head.as_deref())
        .raw("</span></p>\n");
    }
    timeline(&mut p, r);
    for series in &r.budget {
        budget(&mut p, series, r.span_us);
    }
    if r.budget.is_empty() {
        p.raw("<h2>Budget</h2><p class=\"meta\">No pool: each worker is its own Slurm job.</p>\n");
    }
    evidence(&mut p, r);
    audit(&mut p, r);
    events(&mut p, r);
    p.raw("</body></html>\n");
    p.0
}

fn timeline(p: &mut Page, r: &Report) {
    p.raw("<h2>Timeline</h2>\n<div class=\"legend\">");
    for what in MARKS {
        p.raw("<span><i style=\"background:")
            .raw(colour(what))
            .raw("\"></i>")
            .raw(label(what))
            .raw("</span>");
    }
    p.raw("<span><i style=\"background:#b42318\"></i>allocation end</span>")
        .raw("<span><i style=\"background:#f79009\"></i>early-shutdown deadline</span></div>\n");
    let Some(span) = r.span_us else {
        p.raw("<p class=\"meta\">Nothing recorded.</p>\n");
        return;
    };
    let height = 30.0 + ROW * r.workers.len().max(1) as f64;
    p.raw("<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"")
        .num(WIDTH)
        .raw("\" height=\"")
        .num(height)
        .raw("\" role=\"img\"><title>timeline per worker</title>\n");
    // Time axis: start and end.
    p.raw("<text x=\"")
        .num(LEFT)
        .raw("\" y=\"14\">")
        .text(&r.span.as_ref().map(|s| s.0.clone()).unwrap_or_default())
        .raw("</text><text text-anchor=\"end\" x=\"")
        .num(WIDTH - RIGHT)
        .raw("\" y=\"14\">")
        .text(&r.span.as_ref().map(|s| s.1.clone()).unwrap_or_default())
        .raw("</text>\n");
    for (i, w) in r.workers.iter().enumerate() {
        worker_row(p, w, i, 30.0 + ROW * i as f64, span);
    }
    p.raw("</svg>\n");
}

fn worker_row(p: &mut Page, w: &WorkerTimeline, index: usize, top: f64, span: (i64, i64)) {
    let mid = top + ROW / 2.0;
    p.raw("<g class=\"worker\" id=\"worker-")
        .num(index)
        .raw("\" data-worker=\"")
        .text(&w.worker)
        .raw("\" data-submission=\"")
        .text(&w.submission_id)
        .raw("\"><text x=\"8\" y=\"")
        .num(mid - 4.0)
        .raw("\">")
        .text(&w.worker)
        .raw("</text><text x=\"8\" y=\"")
        .num(mid + 10.0)
        .raw("\" style=\"fill:#5b6474\">")
        .text(&w.state)
        .raw(" · ")
        .text(w.pool.as_deref().unwrap_or("own job"))
        .text(&placement_label(w))
        .raw("</text>\n");
    if let (Some(first), Some(last)) = (w.marks.first(), w.marks.last()) {
        p.raw("<line x1=\"")
            .num(x_of(first.time_us, span))
            .raw("\" x2=\"")
            .num(x_of(last.time_us, span))
            .raw("\" y1=\"")
            .num(mid)
            .raw("\" y2=\"")
            .num(mid)
            .raw("\" stroke=\"#98a2b3\" stroke-width=\"3\"/>\n");
    }
    worker_limits(p, w, top, span);
    worker_marks(p, w, mid, span);
    p.raw("</g>\n");
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
fn worker_limits(p: &mut Page, w: &WorkerTimeline, top: f64, span: (i64, i64)) {
    let limits = [
        (w.allocation_end_us, "#b42318", "allocation end "),
        (
            w.shutdown_deadline_us,
            "#f79009",
            "early-shutdown deadline ",
        ),
    ];
    for (n, (at, colour, what)) in limits.into_iter().enumerate() {
        let Some(at) = at else { continue };
        let x = x_of(at, span);
        p.raw("<line stroke-dasharray=\"4 3\" stroke-width=\"2\" stroke=\"")
            .raw(colour)
            .raw("\" x1=\"")
            .num(x)
            .raw("\" x2=\"")
            .num(x)
            .raw("\" y1=\"")
            .num(top + 4.0)
            .raw("\" y2=\"")
            .num(top + ROW - 4.0)
            .raw("\"><title>")
            .raw(what)
            .text(&crate::event::Micros(at).to_rfc3339())
            .raw("</title></line>");
        if at > span.1 {
            // Past the last event: said at the right edge, not drawn to scale.
            p.raw("<text x=\"")
                .num(x + 4.0)
                .raw("\" y=\"")
                .num(top + 14.0 + 12.0 * n as f64)
                .raw("\" style=\"fill:")
                .raw(colour)
                .raw("\">")
                .raw(if n == 0 { "end +" } else { "deadline +" })
                .num((at - span.1) / 1_000_000)
                .raw(" s</text>");
        }
        p.raw("\n");
    }
}

/// A worker's milestones on its line, each labelled where a label lane has room.
fn worker_marks(p: &mut Page, w: &WorkerTimeline, mid: f64, span: (i64, i64)) {
    // Two label lanes, above and below the line; a label that fits in neither is left to the
    // mark's tooltip rather than drawn over another.
    let mut lanes = [f64::NEG_INFINITY; 2];
    for m in &w.marks {
        let x = x_of(m.time_us, span);
        let lane = lanes.iter().position(|&last| x - last >= LABEL_PITCH);
        if let Some(l) = lane {
            lanes[l] = x;
        }
        p.raw("<g class=\"mark\" data-what=\"")
            .raw(label(m.what))
            .raw("\" data-seq=\"")
            .num(m.seq)
            .raw("\"><circle r=\"6\" cx=\"")
            .num(x)
            .raw("\" cy=\"")
            .num(mid)
            .raw("\" fill=\"")
            .raw(colour(m.what))
            .raw("\"><title>")
            .raw(label(m.what))
            .raw(" at ")
            .text(&m.time)
            .raw(" (")
            .text(m.source.as_str())
            .raw(" seq ")
            .num(m.seq)
            .raw(")</title></circle>");
        if let Some(l) = lane {
            p.raw("<text text-anchor=\"middle\" x=\"")
                .num(x)
                .raw("\" y=\"")
                .num(if l == 0 { mid - 9.0 } else { mid + 17.0 })
                .raw("\">")
                .raw(label(m.what))
                .raw("</text>");
        }
        p.raw("</g>\n");
    }
}

/// Which reserved amount and capacity a budget line draws.
type Pick = fn(&crate::policy::report::BudgetPoint) -> (u64, u64);

fn budget(p: &mut Page, s: &BudgetSeries, span: Option<(i64, i64)>) {
    const H: f64 = 170.0;
    const TOP: f64 = 20.0;
    const BOTTOM: f64 = 150.0;
    p.raw("<h2>Budget of pool ")
        .text(&s.pool)
        .raw("</h2>\n<div class=\"legend\"><span><i style=\"background:#1570ef\"></i>CPUs reserved</span>")
        .raw("<span><i style=\"background:#7a5af8\"></i>memory reserved</span>")
        .raw("<span><i style=\"background:#b42318\"></i>capacity</span></div>\n");
    let (Some(span), Some(last)) = (span, s.points.last()) else {
        return;
    };
    p.raw("<svg class=\"budget\" data-pool=\"")
        .text(&s.pool)
        .raw("\" xmlns=\"http://www.w3.org/2000/svg\" width=\"")
        .num(WIDTH)
        .raw("\" height=\"")
        .num(H)
        .raw("\" role=\"img\"><title>reserved budget against capacity</title>\n")
        .raw("<line stroke=\"#b42318\" stroke-dasharray=\"6 3\" stroke-width=\"2\" x1=\"")
        .num(LEFT)
        .raw("\" x2=\"")
        .num(WIDTH - RIGHT)
        .raw("\" y1=\"")
        .num(TOP)
        .raw("\" y2=\"")
        .num(TOP)
        .raw("\"/><text x=\"8\" y=\"")
        .num(TOP + 4.0)
        .raw("\">capacity ")
        .num(last.capacity_cpus)
        .raw(" CPUs, ")
        .num(last.capacity_mem_mb)
        .raw(" MB</text><text x=\"8\" y=\"")
        .num(BOTTOM)
        .raw("\">0</text>\n");
    let y_of = |used: u64, cap: u64| {
        let frac = if cap == 0 {
            0.0
        } else {
            (used as f64 / cap as f64).min(1.2)
        };
        BOTTOM - frac * (BOTTOM - TOP)
    };
    let series: [(&'static str, Pick); 2] = [
        ("#1570ef", |b| (b.cpus, b.capacity_cpus)),
        ("#7a5af8", |b| (b.mem_mb, b.capacity_mem_mb)),
    ];
    for (colour, pick) in series {
        p.raw("<path fill=\"none\" stroke-width=\"2\" stroke=\"")
            .raw(colour)
            .raw("\" d=\"");
        let mut previous_y = None;
        for (i, b) in s.points.iter().enumerate() {
            let (used, cap) = pick(b);
            let (x, y) = (x_of(b.time_us, span), y_of(used, cap));
            p.raw(if i == 0 { "M" } else { " H" }).num(x);
            if i == 0 {
                p.raw(" ").num(y);
            } else if previous_y != Some(y) {
                p.raw(" V").num(y);
            }
            previous_y = Some(y);
        }
        p.raw(" H").num(WIDTH - RIGHT).raw("\"/>\n");
    }
    budget_points(p, s, span, &y_of);
    p.raw("</svg>\n");
}

/// A dot per budget change on the CPU line, with what was reserved then as its tooltip.
fn budget_points(p: &mut Page, s: &BudgetSeries, span: (i64, i64), y_of: &dyn Fn(u64, u64) -> f64) {
    for b in &s.points {
        p.raw("<circle r=\"2.5\" fill=\"#1570ef\" cx=\"")
            .num(x_of(b.time_us, span))
            .raw("\" cy=\"")
            .num(y_of(b.cpus, b.capacity_cpus))
            .raw("\"><title>seq ")
            .num(b.seq)
            .raw(" ")
            .text(&b.time)
            .raw(": ")
            .num(b.cpus)
            .raw("/")
            .num(b.capacity_cpus)
            .raw(" CPUs, ")
            .num(b.mem_mb)
            .raw("/")
            .num(b.capacity_mem_mb)
            .raw(" MB</title></circle>");
    }
}

fn evidence(p: &mut Page, r: &Report) {
    p.raw("<h2>Evidence</h2>\n");
    if r.verdict.is_some() {
        p.raw("<p class=\"meta\">As the verdict recorded it; the worker journal head is the one ingested at the verdict.</p>\n");
    }
    p.raw("<table id=\"evidence\"><tr><th>worker</th><th>submission</th><th>state</th><th>outcome</th>")
        .raw("<th>manifest SHA-256</th><th>published directory</th><th>worker journal head (seq)</th></tr>\n");
    for e in &r.evidence {
        p.raw("<tr><td>")
            .text(&e.worker)
            .raw("</td><td class=\"mono\">")
            .text(&e.submission_id)
            .raw("</td><td>")
            .text(&e.state)
            .raw("</td><td>")
            .opt(e.outcome.as_deref())
            .raw("</td><td class=\"mono\">")
            .opt(e.manifest_sha256.as_deref())
            .raw("</td><td class=\"mono\">")
            .opt(e.published_dir.as_deref())
            .raw("</td><td class=\"mono\">")
            .opt(e.worker_journal_head.as_deref());
        if let Some(seq) = e.worker_journal_seq {
            p.raw(" (").num(seq).raw(")");
        }
        p.raw("</td></tr>\n");
    }
    p.raw("</table>\n");
}

fn audit(p: &mut Page, r: &Report) {
    let a = &r.audit;
    p.raw("<h2>Audit</h2>\n<p id=\"audit-status\">whole journal: <span class=\"")
        .raw(if a.status == AuditStatus::Ok {
            "ok"
        } else {
            "bad"
        })
        .raw("\">")
        .text(&a.status.to_string())
        .raw("</span> (journal ")
        .text(a.journal_status.as_str())
        .raw(", ")
        .num(a.violation_count)
        .raw(" violation(s), ")
        .num(a.override_count)
        .raw(" operator override(s))</p>\n");
    if a.findings.is_empty() {
        p.raw("<p class=\"ok\">Nothing the audit found concerns this ")
            .raw(match r.subject {
                crate::policy::report::Subject::Trial(_) => "trial",
                crate::policy::report::Subject::Pool(_) => "pool",
                crate::policy::report::Subject::Worker(_) => "worker",
            })
            .raw(".</p>\n");
        return;
    }
    p.raw("<table id=\"findings\"><tr><th>seq</th><th>finding</th><th>detail</th></tr>\n");
    for f in &a.findings {
        p.raw("<tr class=\"finding bad\"><td>");
        match f.seq {
            Some(seq) => p.num(seq),
            None => p.raw("—"),
        };
        p.raw("</td><td>")
            .text(f.what.as_str())
            .raw("</td><td>")
            .text(&f.detail)
            .raw("</td></tr>\n");
    }
    p.raw("</table>\n");
}

fn events(p: &mut Page, r: &Report) {
    p.raw("<h2>Events</h2>\n<table id=\"events\"><tr><th>seq</th><th>time</th><th>source</th><th>kind</th><th>event</th></tr>\n");
    for e in &r.events {
        p.raw("<tr class=\"event\" data-seq=\"")
            .num(e.seq)
            .raw("\" data-kind=\"")
            .text(e.kind)
            .raw("\"><td>")
            .num(e.seq)
            .raw("</td><td>")
            .text(&e.time)
            .raw("</td><td>")
            .text(&e.source)
            .raw("</td><td>")
            .text(e.kind)
            .raw("</td><td class=\"mono\">")
            .text(&e.summary)
            .raw("</td></tr>\n");
    }
    p.raw("</table>\n");
    if r.events_dropped > 0 {
        p.raw("<p class=\"meta\">")
            .num(r.events_dropped)
            .raw(" more event(s) not shown.</p>\n");
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
