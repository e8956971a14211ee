//! docs/tutorial.md's outputs are what the commands print (issue 36 item 15): every fenced block
//! with `$ ` command lines is run, line by line, in one bash on the real dev cluster (the one
//! whose client commands come first on `PATH`), with `HOME` a fresh directory, and each
//! command's output (stdout and stderr together) is compared with the lines the tutorial shows
//! under it.
//!
//! What varies from run to run is compared by its place, not its value: job ids (learned where a
//! line says `job N` or `allocation N`, then matched wherever they appear, `N.S` included),
//! submission ids (and their 8-hex short forms), timestamps and durations such as `29m 56s`;
//! runs of spaces count as one (table columns follow the ids' widths). The job ids and submission
//! ids the tutorial shows are replaced by this run's in the later command lines (`--job N`,
//! `cat …/workers/<id>/…`). The test `HOME` is shown as `/home/me`, and the dev cluster's
//! partition, account and node as the tutorial's `<partition>`, `<account>` and `n0041` (the
//! command lines get the cluster's).
//!
//! Not run: a block that an `<!-- unchecked: why -->` line precedes, and `cargo install` lines.
//! The `toml` block is written to `$HOME/.config/dispatch/config.toml` before the first command.
//! What salloc and dispatch say while they wait for resources (`salloc: Pending job
//! allocation …`, `dispatch: job N of … is PENDING; waited …`) is left out of the output.
//!
//! `DISPATCH_BLESS=1 cargo test --test tutorial` rewrites the checked blocks with what this run
//! printed (after another change altered an output), instead of comparing; see docs/testing.md.

mod real_cluster;
mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

const END: &str = "@@dispatch-tutorial-end";
const COMMAND_LIMIT: Duration = Duration::from_secs(600);

fn tutorial_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tutorial.md")
}

/// One `$ ` line of a checked block and the lines shown under it.
#[derive(Debug, Clone)]
struct Step {
    command: String,
    shown: Vec<String>,
}

/// A checked block: the range of its lines (between the fences) in the file, and its steps.
#[derive(Debug)]
struct Block {
    lines: std::ops::Range<usize>,
    steps: Vec<Step>,
}

/// The checked blocks of the tutorial, and its `toml` block.
fn parse(doc: &str) -> (Vec<Block>, String) {
    let lines: Vec<&str> = doc.lines().collect();
    let (mut blocks, mut toml, mut i) = (Vec::new(), String::new(), 0);
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i + 1;
        let end = start + lines[start..].iter().position(|l| *l == "```").unwrap();
        let body = &lines[start..end];
        let unchecked = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| l.starts_with("<!-- unchecked:"));
        if lang == "toml" {
            toml = body.join("\n") + "\n";
        } else if !unchecked && body.iter().any(|l| l.starts_with("$ ")) {
            blocks.push(Block {
                lines: start..end,
                steps: steps_of(body),
            });
        }
        i = end + 1;
    }
    (blocks, toml)
}

fn steps_of(body: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in body {
        match line.strip_prefix("$ ") {
            Some(command) => steps.push(Step {
                command: command.to_owned(),
                shown: Vec::new(),
            }),
            None => steps
                .last_mut()
                .expect("a checked block starts with a `$ ` line")
                .shown
                .push((*line).to_owned()),
        }
    }
    steps
}

/// The ids one side (the tutorial, or this run) has shown so far, in order of first appearance:
/// the n-th job id of one side stands for the n-th of the other.
#[derive(Default)]
struct Ids {
    jobs: Vec<String>,
    uuids: Vec<String>,
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit() && !c.is_ascii_uppercase(),
        })
}

/// `text` with every whole-word `word` (a job id: also before `.S`) replaced by `by`; a `word`
/// that begins or ends with a space needs no boundary there.
fn replace_word(text: &str, word: &str, by: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        let bounded = |c: Option<char>, edge: Option<char>| {
            [c, edge]
                .iter()
                .any(|c| c.is_none_or(|c| !c.is_ascii_alphanumeric()))
        };
        out.push_str(&rest[..at]);
        let whole = bounded(before, word.chars().next()) && bounded(after, word.chars().last());
        out.push_str(if whole { by } else { word });
        rest = &rest[at + word.len()..];
    }
    out + rest
}

/// `text` with job id `job` replaced by `by` where it stands as one: after `job `,
/// `allocation ` or `step `, as a step's `J.S`, or as a table cell (two spaces before or after),
/// so that a small id is not taken for the `4` of `4 CPUs`.
fn replace_job_id(text: &str, job: &str, by: &str) -> String {
    let marked = replace_word(text, job, "\u{0}");
    let mut out = String::new();
    for (i, piece) in marked.split('\u{0}').enumerate() {
        if i > 0 {
            let next = piece.chars().next();
            let is_job = ["job ", "allocation ", "step ", "  "]
                .iter()
                .any(|p| out.ends_with(p))
                || piece.starts_with("  ")
                || (piece.starts_with('.') && piece[1..].starts_with(|c: char| c.is_ascii_digit()))
                || next.is_none() && out.ends_with(' ');
            out.push_str(if is_job { by } else { job });
        }
        out.push_str(piece);
    }
    out
}

impl Ids {
    /// Learn the job ids and submission ids `line` shows.
    fn learn(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2) {
            let id = pair[1].trim_end_matches([',', ':', ';', ')']);
            if matches!(pair[0], "job" | "allocation")
                && !id.is_empty()
                && id.chars().all(|c| c.is_ascii_digit())
                && !self.jobs.iter().any(|j| j == id)
            {
                self.jobs.push(id.to_owned());
            }
        }
        for (at, _) in line.char_indices() {
            if let Some(candidate) = line.get(at..at + 36) {
                if is_uuid(candidate) && !self.uuids.iter().any(|u| u == candidate) {
                    self.uuids.push(candidate.to_owned());
                }
            }
        }
    }

    /// `line` with the ids it knows written as `<job N>` / `<id N>`, times and durations as
    /// `<time>` / `<duration>`, and runs of spaces as one.
    fn normalize(&self, line: &str) -> String {
        let mut text = line.to_owned();
        for (n, uuid) in self.uuids.iter().enumerate() {
            text = text.replace(uuid.as_str(), &format!("<id {n}>"));
            text = replace_word(&text, &uuid[..8], &format!("<id {n}>"));
        }
        for (n, job) in self.jobs.iter().enumerate() {
            text = replace_job_id(&text, job, &format!("<job {n}>"));
        }
        text.split_whitespace()
            .map(volatile)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A word that is a time (`2026-12-01T10:12:52.000000Z`), a time left (`00:29:59`) or a
/// duration (`56s`, `29m`) as such; any other word as it is.
fn volatile(word: &str) -> String {
    let core = word.trim_end_matches([',', ')', ';']);
    let clock = core.len() == 8
        && core.char_indices().all(|(i, c)| {
            if i % 3 == 2 {
                c == ':'
            } else {
                c.is_ascii_digit()
            }
        });
    let digits_then = |suffixes: &[char]| {
        core.len() > 1
            && core.ends_with(suffixes)
            && core[..core.len() - 1].chars().all(|c| c.is_ascii_digit())
    };
    let timestamp = core.len() >= 19
        && core.as_bytes()[4] == b'-'
        && core.as_bytes()[10] == b'T'
        && core[..4].chars().all(|c| c.is_ascii_digit());
    if timestamp {
        "<time>".to_owned()
    } else if clock {
        "<clock>".to_owned()
    } else if digits_then(&['s', 'm', 'h', 'd']) {
        "<duration>".to_owned()
    } else {
        word.to_owned()
    }
}

/// `command` with the tutorial's ids replaced by this run's (the n-th for the n-th).
fn with_run_ids(command: &str, shown: &Ids, run: &Ids) -> String {
    let mut text = command.to_owned();
    for (ours, theirs) in shown.uuids.iter().zip(&run.uuids) {
        text = text.replace(ours.as_str(), theirs);
        text = replace_word(&text, &ours[..8], &theirs[..8]);
    }
    for (ours, theirs) in shown.jobs.iter().zip(&run.jobs) {
        text = replace_word(&text, ours, theirs);
    }
    text
}

/// The tutorial's stand-ins for the cluster's partition, account and node, with the dev
/// cluster's values (its default partition, the account every test uses, its one node).
struct Placeholders(Vec<(&'static str, String)>);

impl Placeholders {
    fn of_cluster() -> Placeholders {
        let out = Command::new("sinfo")
            .args(["-h", "-N", "-o", "%N"])
            .output()
            .expect("run sinfo");
        let node = String::from_utf8_lossy(&out.stdout);
        let node = node.lines().next().expect("sinfo lists a node").trim();
        Placeholders(vec![
            ("<partition>", "debug".to_owned()),
            ("<account>", "dev".to_owned()),
            ("n0041", node.to_owned()),
        ])
    }

    fn to_cluster(&self, command: &str) -> String {
        self.0
            .iter()
            .fold(command.to_owned(), |text, (shown, real)| {
                text.replace(shown, real)
            })
    }

    /// `line` with the cluster's values as the tutorial shows them; in a table, a longer
    /// stand-in takes its room from the spaces after it, so the columns stay where they were.
    fn to_shown(&self, line: &str) -> String {
        self.0.iter().fold(line.to_owned(), |text, (shown, real)| {
            let grow = shown.len().saturating_sub(real.len());
            let padded = format!("{real}{}", " ".repeat(grow + 1));
            let text = replace_word(&text, &padded, &format!("{shown} "));
            replace_word(&text, real, shown)
        })
    }
}

/// What salloc and dispatch say while they wait for resources (a busy shared cluster, or a
/// job a moment from starting), which the tutorial leaves out.
fn is_wait_chatter(line: &str) -> bool {
    let salloc = [
        "salloc: Pending job allocation",
        "salloc: job ",
        "salloc: Waiting for resource",
    ]
    .iter()
    .any(|p| line.starts_with(p))
        || (line.starts_with("salloc: Nodes ") && line.ends_with("are ready for job"));
    let dispatch = line.starts_with("dispatch: waiting for the allocation of pool ")
        || (line.starts_with("dispatch: job ")
            && (line.contains("; waited ") || line.contains(" runs on ")));
    salloc || dispatch
}

/// One bash, fed one command at a time, its stdout and stderr read as one stream of lines.
struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Shell {
    fn start(home: &Path) -> Shell {
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_dispatch")).parent().unwrap();
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .current_dir(home)
            .env_clear()
            .envs([("HOME", home.to_str().unwrap()), ("PATH", &path)])
            .envs([("LANG", "C.UTF-8"), ("USER", "root"), ("TERM", "dumb")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start bash");
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "exec 2>&1").unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Shell {
            child,
            stdin,
            lines,
        }
    }

    /// Run `command`; its output lines (and its exit code).
    fn run(&mut self, command: &str) -> (Vec<String>, i32) {
        writeln!(self.stdin, "{command}\necho \"{END} $?\"").unwrap();
        let deadline = Instant::now() + COMMAND_LIMIT;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("`{command}` gave no end in {COMMAND_LIMIT:?}: {e}"));
            if let Some(code) = line.strip_prefix(END) {
                return (out, code.trim().parse().unwrap());
            }
            out.push(line);
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Cancels, when the test ends however it ends, every job this run's outputs named: the
/// tutorial gives each back itself, this is for a run cut short.
struct CancelOnDrop(Vec<String>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let _ = Command::new("scancel").args(&self.0).status();
        }
    }
}

/// Waits the tutorial leaves to the reader: `pool status --refresh` shows w1 released, so w1
/// must have published and its step must be over first.
fn wait_before(shell: &mut Shell, command: &str, run: &Ids) {
    if !command.starts_with("dispatch pool status --refresh") {
        return;
    }
    let job = &run.jobs[0];
    let ready = format!(
        "ls -d \"$DISPATCH_STATE_DIR\"/pools/p/published/w1-* >/dev/null 2>&1 \
         && ! squeue -h --steps -j {job} -o %i | grep -qx '{job}\\.0'"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while shell.run(&ready).1 != 0 {
        assert!(
            Instant::now() < deadline,
            "w1 did not publish and end within 120 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every step of the checked blocks run in order: for each, the lines it printed (the test
/// `HOME` shown as `/home/me`) and the command as run.
fn run_tutorial(blocks: &[Block], toml: &str, jobs: &mut CancelOnDrop) -> Vec<Vec<Step>> {
    let home_parent = tempfile::tempdir().unwrap();
    let home = home_parent.path().join("home/me");
    std::fs::create_dir_all(home.join(".config/dispatch")).unwrap();
    let places = Placeholders::of_cluster();
    let config = places.to_cluster(toml);
    std::fs::write(home.join(".config/dispatch/config.toml"), config).unwrap();
    let home_text = home.to_str().unwrap().to_owned();
    let mut shell = Shell::start(&home);
    let (mut shown, mut run) = (Ids::default(), Ids::default());
    let mut ran = Vec::new();
    for block in blocks {
        let mut steps = Vec::new();
        for step in &block.steps {
            let command = with_run_ids(&step.command, &shown, &run);
            let out = if command.starts_with("cargo install ") {
                Vec::new()
            } else {
                wait_before(&mut shell, &command, &run);
                shell.run(&places.to_cluster(&command)).0
            };
            let out: Vec<String> = out
                .iter()
                .filter(|l| !is_wait_chatter(l))
                .map(|l| places.to_shown(&l.replace(&home_text, "/home/me")))
                .collect();
            step.shown.iter().for_each(|l| shown.learn(l));
            out.iter().for_each(|l| run.learn(l));
            jobs.0.clone_from(&run.jobs);
            steps.push(Step {
                command,
                shown: out,
            });
        }
        ran.push(steps);
    }
    ran
}

/// Where the tutorial and the run differ, step by step (the two normalized side by side).
fn differences(blocks: &[Block], ran: &[Vec<Step>]) -> Vec<String> {
    let (mut shown, mut run) = (Ids::default(), Ids::default());
    let mut found = Vec::new();
    for (block, steps) in blocks.iter().zip(ran) {
        for (doc, got) in block.steps.iter().zip(steps) {
            doc.shown.iter().for_each(|l| shown.learn(l));
            got.shown.iter().for_each(|l| run.learn(l));
            let want: Vec<String> = doc.shown.iter().map(|l| shown.normalize(l)).collect();
            let have: Vec<String> = got.shown.iter().map(|l| run.normalize(l)).collect();
            if want != have {
                found.push(format!(
                    "$ {}\n  the tutorial shows:\n    {}\n  it printed:\n    {}",
                    doc.command,
                    doc.shown.join("\n    "),
                    got.shown.join("\n    ")
                ));
            }
        }
    }
    found
}

/// The tutorial with each checked block's lines replaced by what this run printed.
fn blessed(doc: &str, blocks: &[Block], ran: &[Vec<Step>]) -> String {
    let mut lines: Vec<String> = doc.lines().map(str::to_owned).collect();
    for (block, steps) in blocks.iter().zip(ran).rev() {
        let new: Vec<String> = steps
            .iter()
            .flat_map(|s| std::iter::once(format!("$ {}", s.command)).chain(s.shown.clone()))
            .collect();
        lines.splice(block.lines.clone(), new);
    }
    lines.join("\n") + "\n"
}

#[test]
fn the_tutorial_shows_what_the_commands_print() {
    let _lock = real_cluster::require_cluster();
    let doc = std::fs::read_to_string(tutorial_path()).unwrap();
    let (blocks, toml) = parse(&doc);
    let commands: BTreeSet<&str> = blocks
        .iter()
        .flat_map(|b| &b.steps)
        .map(|s| s.command.as_str())
        .collect();
    for needed in [
        "dispatch pool attach",
        "dispatch pool submit",
        "dispatch sessions",
    ] {
        assert!(
            commands.iter().any(|c| c.starts_with(needed)),
            "no checked block runs `{needed}`: {commands:?}"
        );
    }
    assert!(!toml.is_empty(), "the tutorial shows no config (```toml)");
    let mut jobs = CancelOnDrop(Vec::new());
    let ran = run_tutorial(&blocks, &toml, &mut jobs);
    if std::env::var_os("DISPATCH_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(tutorial_path(), blessed(&doc, &blocks, &ran)).unwrap();
        eprintln!("DISPATCH_BLESS=1: rewrote {}", tutorial_path().display());
        return;
    }
    let found = differences(&blocks, &ran);
    assert!(
        found.is_empty(),
        "docs/tutorial.md shows what the commands no longer print (DISPATCH_BLESS=1 cargo test \
         --test tutorial rewrites it; docs/testing.md):\n\n{}",
        found.join("\n\n")
    );
}
