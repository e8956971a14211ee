//! `dispatch report`: a trial recorded against the fake Slurm (a pool, three workers: one
//! stopped, one released by reconcile, one forgotten; a failed verdict; hostile text in the
//! note and the reasons), rendered as a page. The page's DOM, as a real headless Chromium
//! builds it, holds every worker and every event about the trial, no injected markup, and the
//! audit's override in red; its screenshot is not blank.
//!
//! Chromium is required: without it the test fails and says how to install it.

mod fake_cli;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use chrono::{Duration, Local};
use fake_cli::Fake;
use serde_json::{json, Value};

const HOSTILE: &str =
    "<script>document.body.innerHTML='owned'</script><img src=x onerror=alert(1)> & \"q\"";

fn ok(fake: &Fake, args: &[&str]) -> Value {
    let (code, out, err) = fake.run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// One start time per process: the allocation's incarnation must not drift between calls.
static STARTED: std::sync::OnceLock<chrono::DateTime<Local>> = std::sync::OnceLock::new();

/// `scontrol --oneliner show job 901`: running, 4 CPUs, 4 GB, owned by root, an hour left.
fn show_job() -> String {
    let fmt = |t: chrono::DateTime<Local>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    format!(
        "JobId=901 JobName=alloc UserId=root(0) GroupId=root(0) Account=dev QOS=normal \
         JobState=RUNNING Reason=None StartTime={s} EndTime={e} Partition=debug NodeList=vm \
         BatchHost=vm NumNodes=1 NumCPUs=4 NumTasks=1 CPUs/Task=4 TRES=cpu=4,mem=4G,node=1 \
         MinMemoryNode=4G\n",
        s = fmt(*STARTED.get_or_init(|| Local::now() - Duration::seconds(60))),
        e = fmt(Local::now() + Duration::seconds(3600)),
    )
}

fn step_row(step: u32, worker: &str) -> String {
    format!("901.{step}|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.{worker}\n")
}

const JOB_ROW: &str = "901|901|RUNNING|debug|dev|normal|root|1|4|vm|59:00|1:00:00|2026-11-29T16:12:52|2026-11-29T17:12:52|None|alloc\n";

fn submit(worker: &str) -> Vec<&str> {
    vec![
        "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--name", worker, "--trial", "t1",
        "--json", "--", "true",
    ]
}

/// The recorded trial. Returns the fake and the submission ids of w1, w2, w3.
fn recorded_trial() -> (Fake, Vec<String>) {
    let fake = Fake::new();
    fake.scenario(json!({"scontrol": [{"stdout": show_job()}]}));
    ok(&fake, &["pool", "attach", "p", "--job", "901", "--json"]);
    ok(&fake, &["trial", "open", "t1", "--note", HOSTILE, "--json"]);
    let both = step_row(0, "w1") + &step_row(1, "w2");
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job()}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": both}],
    }));
    let mut ids = Vec::new();
    for w in ["w1", "w2"] {
        let r = ok(&fake, &submit(w));
        ids.push(r["submission_id"].as_str().unwrap().to_owned());
    }
    // w1 stopped: its step is gone beside its listed job.
    fake.scenario(json!({
        "squeue": [{"match": ["--steps"], "stdout": step_row(1, "w2")}, {"stdout": JOB_ROW}],
        "sacct": [{"stdout": ""}],
        "scancel": [{"stdout": ""}],
    }));
    ok(
        &fake,
        &["pool", "stop-worker", "p", "w1", "--grace", "0", "--json"],
    );
    // w3: srun hangs and no step ever shows: unknown, then forgotten by the operator.
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job()}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": step_row(1, "w2")}, {"stdout": JOB_ROW}],
    }));
    let (code, out, err) = fake.run(&submit("w3"));
    assert_eq!(code, 4, "{out} {err}");
    let events = fake.events();
    let w3 = events
        .iter()
        .rev()
        .find(|e| e["kind"] == "WorkerSubmitIntent")
        .unwrap();
    ids.push(w3["event"]["submission_id"].as_str().unwrap().to_owned());
    ok(&fake, &["forget", "w3", "--reason", HOSTILE, "--json"]);
    // w2: reconcile finds its step gone beside its listed job.
    fake.scenario(json!({
        "squeue": [{"match": ["--steps"], "stdout": ""}, {"stdout": JOB_ROW}],
        "sacct": [{"stdout": ""}],
    }));
    ok(&fake, &["reconcile", "--json"]);
    ok(
        &fake,
        &[
            "trial", "verdict", "t1", "failed", "--reason", HOSTILE, "--json",
        ],
    );
    (fake, ids)
}

/// Every event the page must show: about a worker of the trial, the trial, or its pool.
fn expected_events(fake: &Fake, ids: &[String]) -> BTreeSet<(u64, String)> {
    fake.events()
        .iter()
        .filter(|e| {
            let sid = e["event"]["submission_id"].as_str();
            sid.is_some_and(|s| ids.iter().any(|i| i == s))
                || e["event"]["trial"] == "t1"
                    && (e["kind"] == "TrialOpened" || e["kind"] == "TrialJudged")
                || e["event"]["pool"] == "p" && e["kind"] == "PoolAttached"
        })
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn chromium() -> String {
    for name in ["chromium", "chromium-browser"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if found {
            return name.to_owned();
        }
    }
    panic!(
        "chromium is not installed: this test renders the report in a real headless browser. \
         Install it with `apt-get install -y --no-install-recommends chromium` (tools/test does)"
    );
}

/// Run headless Chromium on `page` with `what` (`--dump-dom` or `--screenshot=…`).
fn run_chromium(page: &Path, what: &str) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1200,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(what)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium {what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Distinct colours and non-white pixels of a PNG, decoded by python3 (stdlib zlib).
fn png_stats(png: &Path) -> (usize, usize, usize) {
    const DECODE: &str = r#"
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
pos, idat, w, h, ctype = 8, b'', 0, 0, 0
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR':
        w, h, depth, ctype, _, _, interlace = struct.unpack('>IIBBBBB', body)
        assert depth == 8 and interlace == 0 and ctype in (2, 6), (depth, ctype, interlace)
    elif kind == b'IDAT':
        idat += body
    pos += 12 + n
bpp = 4 if ctype == 6 else 3
raw, stride = zlib.decompress(idat), w * bpp
prev, colours, inked, i = bytearray(stride), set(), 0, 0
for y in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + ((a + b) >> 1)) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        px = bytes(line[x:x + 3])
        colours.add(px)
        if px != b'\xff\xff\xff': inked += 1
    prev = line
print(len(colours), inked, w * h)
"#;
    let out = Command::new("python3")
        .args(["-c", DECODE])
        .arg(png)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let n: Vec<usize> = text
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    (n[0], n[1], n[2])
}

#[test]
fn a_recorded_trial_renders_as_a_page_with_every_worker_and_event() {
    let (fake, ids) = recorded_trial();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("t1.html");
    let page_arg = page.to_str().unwrap();
    fake.forget_calls();
    let r = ok(
        &fake,
        &["report", "--trial", "t1", "--html", page_arg, "--json"],
    );
    assert!(
        fake.calls().is_empty(),
        "report called Slurm: {:?}",
        fake.calls()
    );

    // The data.
    let workers: Vec<&str> = r["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker"].as_str().unwrap())
        .collect();
    assert_eq!(workers, ["w1", "w2", "w3"], "{r}");
    let marks = |i: usize| -> Vec<String> {
        r["workers"][i]["marks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["what"].as_str().unwrap().to_owned())
            .collect()
    };
    for what in ["submitted", "launched", "running", "stop_asked", "released"] {
        assert!(marks(0).contains(&what.to_owned()), "w1: {:?}", marks(0));
    }
    assert!(
        marks(1).contains(&"released".to_owned()),
        "w2: {:?}",
        marks(1)
    );
    assert!(
        marks(2).contains(&"forgotten".to_owned()),
        "w3: {:?}",
        marks(2)
    );
    assert!(r["workers"][0]["allocation_end"].is_string(), "{r}");
    assert!(r["workers"][0]["shutdown_deadline"].is_string(), "{r}");
    assert_eq!(r["verdict"]["verdict"], "failed");
    assert_eq!(r["verdict"]["chain_head"].as_str().unwrap().len(), 64);
    assert_eq!(r["evidence"].as_array().unwrap().len(), 3);
    let budget = &r["budget"][0];
    assert_eq!(budget["pool"], "p");
    let peak = budget["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cpus"].as_u64().unwrap())
        .max();
    assert_eq!(peak, Some(2), "w1 and w2 held a CPU each at once: {budget}");
    let findings = r["audit"]["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["what"] == "override"),
        "the forget is an override the page shows: {r}"
    );
    let expected = expected_events(&fake, &ids);
    let listed: BTreeSet<(u64, String)> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "coordinator")
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(listed, expected);

    // The page: self-contained, and escaped.
    let html = std::fs::read_to_string(&page).unwrap();
    for banned in ["<script", "http://", "https://", "@import", "url("] {
        let outside_svg_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(
            !outside_svg_ns.contains(banned),
            "the page holds {banned:?}: it must be self-contained and escaped"
        );
    }

    // The DOM a real browser built from it.
    let dom = String::from_utf8(run_chromium(&page, "--dump-dom").stdout).unwrap();
    // Had the hostile script run, the body would be the word "owned" and nothing else.
    assert!(dom.contains("id=\"events\""), "injected markup ran: {dom}");
    assert!(!dom.contains("<script"), "injected markup parsed: {dom}");
    assert!(!dom.contains("<img"), "injected markup parsed: {dom}");
    assert!(
        dom.contains("&lt;script&gt;"),
        "the hostile text is shown as text"
    );
    for (w, id) in ["w1", "w2", "w3"].iter().zip(&ids) {
        assert!(
            dom.contains(&format!("data-worker=\"{w}\" data-submission=\"{id}\"")),
            "no timeline row for {w}"
        );
    }
    for (seq, kind) in &expected {
        assert!(
            dom.contains(&format!(
                "class=\"event\" data-seq=\"{seq}\" data-kind=\"{kind}\""
            )),
            "event {seq} {kind} is not on the page"
        );
    }
    assert!(
        dom.contains("class=\"finding bad\""),
        "the override is not in red"
    );
    assert!(dom.contains("id=\"verdict\""));

    // Its picture.
    let png = dir.path().join("t1.png");
    run_chromium(&page, &format!("--screenshot={}", png.display()));
    if let Some(keep) = std::env::var_os("REPORT_KEEP_DIR") {
        std::fs::copy(&page, Path::new(&keep).join("t1.html")).unwrap();
        std::fs::copy(&png, Path::new(&keep).join("t1.png")).unwrap();
    }
    let (colours, inked, pixels) = png_stats(&png);
    eprintln!("screenshot: {colours} colours, {inked} of {pixels} pixels not white");
    assert_eq!(pixels, 1200 * 900);
    assert!(
        colours > 50,
        "a blank-looking screenshot: {colours} colours"
    );
    assert!(
        inked > pixels / 50,
        "a blank-looking screenshot: {inked} non-white pixels"
    );
}

#[test]
fn report_names_what_does_not_exist_and_needs_a_subject() {
    let (fake, _) = recorded_trial();
    for (args, code) in [
        (&["report", "--trial", "nope"][..], 3),
        (&["report", "--pool", "nope"], 3),
        (&["report", "--worker", "nope"], 3),
        (&["report"], 2),
        (&["report", "--trial", "t1", "--pool", "p"], 2),
    ] {
        let (got, _, err) = fake.run(args);
        assert_eq!(got, code, "{args:?}: {err}");
    }
    let pool = ok(&fake, &["report", "--pool", "p", "--json"]);
    assert_eq!(pool["workers"].as_array().unwrap().len(), 3);
    let w1 = ok(&fake, &["report", "--worker", "w1", "--json"]);
    assert_eq!(w1["workers"].as_array().unwrap().len(), 1);
    assert!(w1["verdict"].is_null());
    let (code, text, err) = fake.run(&["report", "--worker", "w2"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("w2") && text.contains("released"), "{text}");
}

/// A damaged journal still gets its page (forensics needs it most then), but the command
/// does not answer success over it: exit 5, as `audit`, with the next command on stderr.
#[test]
fn a_damaged_journal_is_reported_and_exits_5() {
    let (fake, _) = recorded_trial();
    let seg = fake
        .state()
        .join("journal")
        .join(dispatch::journal::segment::file_name(1));
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() * 3 / 4;
    bytes[at] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
    let page = fake.state().join("../damaged.html");
    let page_arg = page.display().to_string();
    let (code, out, err) = fake.run(&["report", "--trial", "t1", "--json", "--html", &page_arg]);
    assert_eq!(code, 5, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["audit"]["status"], "damaged", "{r}");
    assert!(err.contains("dispatch journal verify"), "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("damage"), "the page shows the damage");
}
