//! The facts about the multi-node dev cluster that multi-node pools with GPUs rely on (issue
//! 23), proven against the real cluster: 3 nodes × 4 CPUs × 2 fake GPUs, started with
//! `tools/slurm-dev-cluster [--slurm V] start --nodes 3`. Never skipped: without it every test
//! fails and says to start it. Each test holds the cluster's lock exclusively (the tests take
//! every GPU and fail a node) and cancels its jobs, also on failure.
//!
//! Run with `cargo test --test multinode_cluster` (against the 24.11 cluster:
//! `PATH=/var/lib/dispatch-slurm-24.11/bin:$PATH cargo test --test multinode_cluster`).

mod multinode;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use multinode::{output, script, text, Cluster, Job};
use support::unique_name;

const STEP_BOUND: Duration = Duration::from_secs(60);

#[test]
fn a_three_node_allocation_shows_each_nodes_cpus_memory_and_gpus() {
    let c = Cluster::require();
    assert_eq!(c.nodes.len(), 3, "{:?}", c.nodes);
    let per_node_mem = (c.mem_mb / 4).to_string();
    let gres = format!("--gres=gpu:{}", c.gpus);
    let ntasks = format!("--ntasks-per-node={}", c.cpus);
    let job = c.salloc(
        &unique_name("mn-alloc"),
        &["-N3", &ntasks, &format!("--mem={per_node_mem}"), &gres],
    );
    let placement = job.placement();
    let nodes: Vec<&String> = placement.keys().collect();
    assert_eq!(nodes, c.nodes.iter().collect::<Vec<_>>(), "{placement:?}");
    let all_cpus = format!("0-{}", c.cpus - 1);
    let all_gpus = format!("gpu:fake:{}(IDX:0-{})", c.gpus, c.gpus - 1);
    for (node, (cpus, mem, gres)) in &placement {
        assert_eq!(cpus, &all_cpus, "{node}: {placement:?}");
        assert_eq!(mem, &per_node_mem, "{node}: {placement:?}");
        assert_eq!(gres, &all_gpus, "{node}: {placement:?}");
    }
}

/// What a step on node2 sees: `hostname SLURMD_NODENAME SLURM_STEP_GPUS CUDA_VISIBLE_DEVICES`
/// (`-` when unset). With `--rendezvous DIR`, it first writes its GPUs into DIR and waits (20 s
/// at most) until two steps have: so it succeeds only if two such steps run at once.
fn step_on_node2(c: &Cluster, job: u32, gres: Option<&str>, rendezvous: Option<&str>) -> String {
    let report =
        r#"echo "$(hostname) $SLURMD_NODENAME ${SLURM_STEP_GPUS:--} ${CUDA_VISIBLE_DEVICES:--}""#;
    let script = match rendezvous {
        Some(dir) => format!(
            "echo \"$SLURM_STEP_GPUS\" >{dir}/step.$SLURM_STEP_ID; n=0; \
             until [ $(ls {dir} | wc -l) -ge 2 ]; do n=$((n+1)); [ $n -lt 200 ] || exit 7; sleep 0.1; done; {report}"
        ),
        None => report.to_owned(),
    };
    let job = job.to_string();
    let mut args = vec![
        "--jobid",
        &job,
        "-N1",
        "-n1",
        "-w",
        "node2",
        "--exact",
        "-c1",
        "--mem=100",
        "-t",
        "1",
    ];
    if let Some(g) = gres {
        args.push(g);
    }
    args.extend(["sh", "-c", &script]);
    let out = output(c.slurm("srun", &args), STEP_BOUND);
    assert!(
        out.status.success(),
        "srun {args:?} failed ({}; exit 7: the two steps did not run at once): {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout).trim().to_owned()
}

#[test]
fn concurrent_one_gpu_steps_on_a_node_get_different_gpus_and_gres_none_gets_none() {
    let c = Cluster::require();
    let ntasks = format!("--ntasks-per-node={}", c.cpus);
    let gres = format!("--gres=gpu:{}", c.gpus);
    let job = c.salloc(
        &unique_name("mn-gpus"),
        &["-N3", &ntasks, "--mem=2000", &gres],
    );
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let dir_s = dir.path().to_str().unwrap().to_owned();

    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| step_on_node2(&c, job.id, Some("--gres=gpu:1"), Some(&dir_s)));
        let b = s.spawn(|| step_on_node2(&c, job.id, Some("--gres=gpu:1"), Some(&dir_s)));
        (a.join().unwrap(), b.join().unwrap())
    });
    let fields = |line: &str| line.split(' ').map(str::to_owned).collect::<Vec<_>>();
    let (fa, fb) = (fields(&a), fields(&b));
    for f in [&fa, &fb] {
        assert_eq!(
            &f[..2],
            ["node2", "node2"],
            "hostname, SLURMD_NODENAME: {a:?} {b:?}"
        );
        assert_eq!(
            f[2], f[3],
            "SLURM_STEP_GPUS = CUDA_VISIBLE_DEVICES: {a:?} {b:?}"
        );
        assert!(
            matches!(f[2].as_str(), "0" | "1"),
            "one GPU each: {a:?} {b:?}"
        );
    }
    assert_ne!(
        fa[2], fb[2],
        "two concurrent steps got the same GPU: {a:?} {b:?}"
    );

    let none = step_on_node2(&c, job.id, Some("--gres=none"), None);
    assert_eq!(none, "node2 node2 - -", "a --gres=none step sees no GPU");
    // The trap: a step that asks for no GRES gets every GPU of the job on its node.
    let every = (0..c.gpus)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let inherited = step_on_node2(&c, job.id, None, None);
    assert_eq!(
        inherited,
        format!("node2 node2 {every} {every}"),
        "a step without --gres"
    );
}

/// Revives the node however the test ends, so the cluster stays usable for the next test.
struct Revive<'a>(&'a str);

impl Drop for Revive<'_> {
    fn drop(&mut self) {
        let out = output(script(&["node-revive", self.0]), Duration::from_secs(120));
        if !out.status.success() {
            eprintln!("could not revive {}: {}", self.0, text(&out.stderr));
        }
    }
}

#[test]
fn a_killed_node_is_down_within_seconds_the_others_run_on_and_revive_brings_it_back() {
    let c = Cluster::require();
    let survivor = c.salloc(
        &unique_name("mn-survivor"),
        &["-N2", "-w", "node[1-2]", "--mem=100"],
    );
    let victim = c.salloc(
        &unique_name("mn-victim"),
        &["-N1", "-w", "node3", "--mem=100"],
    );
    let revive = Revive("node3");
    let t0 = Instant::now();
    let out = output(script(&["node-kill", "node3"]), Duration::from_secs(60));
    assert!(out.status.success(), "node-kill: {}", text(&out.stderr));

    // Not responding at the first failed ping (which takes up to MessageTimeout to fail), DOWN
    // after SlurmdTimeout without an answer.
    let bound = Duration::from_secs(3 * c.slurmd_timeout + 2 * c.msg_timeout);
    let mut not_responding = None;
    let down = loop {
        let st = c.node_state("node3");
        if st.contains("NOT_RESPONDING") && not_responding.is_none() {
            not_responding = Some(t0.elapsed());
        }
        if st.starts_with("DOWN") {
            break t0.elapsed();
        }
        assert!(
            t0.elapsed() < bound,
            "node3 not DOWN {bound:?} after its slurmd was killed: {st}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("node3: NOT_RESPONDING after {not_responding:?}, DOWN after {down:?}");
    let squeue = |id: u32| {
        let out = output(
            c.slurm("squeue", &["-h", "-o", "%T", "-j", &id.to_string()]),
            STEP_BOUND,
        );
        text(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        squeue(survivor.id),
        "RUNNING",
        "the job on the other nodes runs on"
    );
    assert_ne!(squeue(victim.id), "RUNNING", "the job on the killed node");
    for n in ["node1", "node2"] {
        assert!(!c.node_state(n).contains("DOWN"), "{n} stayed up");
    }

    drop(revive);
    assert_eq!(c.node_state("node3"), "IDLE", "after node-revive");
    let out = output(
        c.slurm(
            "srun",
            &[
                "-N1", "-w", "node3", "--mem=10", "-t", "1", "-I30", "hostname",
            ],
        ),
        STEP_BOUND,
    );
    assert_eq!(text(&out.stdout).trim(), "node3", "{}", text(&out.stderr));
}

/// Issue 23: `srun` without a GRES request inherits every GPU of the job (`SLURM_STEP_GPUS`
/// and `CUDA_VISIBLE_DEVICES` list them all), so every pool worker on a GPU allocation got
/// every GPU. A worker that asked for no GPU is started with `--gres=none` and sees none.
#[test]
fn a_pool_worker_on_a_gpu_allocation_sees_no_gpu_it_did_not_ask_for() {
    let c = Cluster::require();
    let gres = format!("--gres=gpu:{}", c.gpus);
    let job = c.salloc(
        &unique_name("mn-pool-gpu"),
        &["-N1", "-w", &c.nodes[1], "-c", "2", "--mem=1000", &gres],
    );
    let state = tempfile::tempdir().unwrap();
    let dispatch = |args: &[&str]| {
        let mut cmd = c.dispatch(state.path());
        cmd.args(args);
        output(cmd, STEP_BOUND)
    };
    let attached = dispatch(&["pool", "attach", "p", "--job", &job.id.to_string()]);
    assert!(attached.status.success(), "{}", text(&attached.stderr));
    let report = r#"echo "gpus=${SLURM_STEP_GPUS:-none} cuda=${CUDA_VISIBLE_DEVICES:-none}""#;
    let submitted = dispatch(&[
        "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--name", "w", "--", "sh", "-c",
        report,
    ]);
    assert!(submitted.status.success(), "{}", text(&submitted.stderr));
    let deadline = Instant::now() + STEP_BOUND;
    let seen = loop {
        let logs = text(&dispatch(&["logs", "w"]).stdout);
        if logs.contains("gpus=") {
            break logs;
        }
        assert!(Instant::now() < deadline, "the worker printed nothing");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(seen.trim(), "gpus=none cuda=none");
}

/// Issue 23: a pool over 3 nodes × 4 CPUs × 2 GPUs takes 6 one-GPU workers and 6 CPU-only
/// workers at once. Each runs on the node its receipt names (the payload's own
/// `SLURMD_NODENAME`), no GPU index is shared by two live workers on one node (the step's own
/// `SLURM_STEP_GPUS`, as its supervisor recorded it and as the payload printed it), CPU-only
/// workers see no GPU, and every node's budget is exactly full: a 7th GPU worker and a 13th
/// worker are refused with each node's free figures, and nothing of theirs is journaled.
#[test]
fn a_pool_over_three_nodes_places_gpu_and_cpu_workers_per_node_and_never_shares_a_gpu() {
    let c = Cluster::require();
    let per_node_gpus = format!("--gres=gpu:{}", c.gpus);
    let ntasks = format!("--ntasks-per-node={}", c.cpus);
    let job = c.salloc(
        &unique_name("mn-pool"),
        &["-N3", &ntasks, "--mem=2000", &per_node_gpus],
    );
    let state = tempfile::tempdir().unwrap();
    let go = tempfile::tempdir_in("/tmp").unwrap();
    let go_file = go.path().join("go");
    let dispatch = |args: &[&str]| {
        let mut cmd = c.dispatch(state.path());
        cmd.args(args);
        output(cmd, STEP_BOUND)
    };
    let attached = dispatch(&["pool", "attach", "p", "--job", &job.id.to_string()]);
    assert!(attached.status.success(), "{}", text(&attached.stderr));
    // Each payload says where it runs and what it sees, then waits for the go file.
    let payload = format!(
        r#"echo "$SLURMD_NODENAME ${{SLURM_STEP_GPUS:-none}} ${{CUDA_VISIBLE_DEVICES:-none}}"; n=0; until [ -e {} ]; do n=$((n+1)); [ $n -lt 900 ] || exit 9; sleep 0.2; done"#,
        go_file.display()
    );
    let submit = |name: &str, gpus: &str| {
        dispatch(&[
            "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--gpus", gpus, "--name", name,
            "--json", "--", "sh", "-c", &payload,
        ])
    };
    let gpu_workers: Vec<String> = (0..6).map(|i| format!("g{i}")).collect();
    let cpu_workers: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    for (names, gpus) in [(&gpu_workers, "1"), (&cpu_workers, "0")] {
        for name in names {
            let out = submit(name, gpus);
            assert!(
                out.status.success(),
                "{name}: {}; the srun clients said: {}",
                text(&out.stderr),
                srun_logs(state.path())
            );
        }
    }

    // Every node is full: its 4 CPUs and 2 GPUs are reserved, and nothing more fits.
    for (name, gpus) in [("g6", "1"), ("c6", "0")] {
        let refused = submit(name, gpus);
        assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stderr));
        let err = text(&refused.stderr);
        assert!(err.contains("no node with room"), "{err}");
        for n in &c.nodes {
            assert!(err.contains(&format!("{n} 0/4 CPUs")), "{err}");
        }
    }
    let status = || -> serde_json::Value {
        let out = dispatch(&["pool", "status", "p", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let doc = status();
    let pool = &doc["pools"][0];
    for n in pool["nodes"].as_array().unwrap() {
        assert_eq!(n["capacity"]["cpus"], 4, "{n}");
        assert_eq!(n["capacity"]["gpus"], 2, "{n}");
        assert_eq!(n["reserved"]["cpus"], 4, "{n}");
        assert_eq!(n["reserved"]["gpus"], 2, "{n}");
    }

    // What each payload printed, once all have printed it (they run at once).
    let deadline = Instant::now() + STEP_BOUND;
    let printed = |name: &str| text(&dispatch(&["logs", name]).stdout).trim().to_owned();
    let seen: BTreeMap<String, String> = loop {
        let seen: BTreeMap<String, String> = gpu_workers
            .iter()
            .chain(&cpu_workers)
            .map(|w| (w.clone(), printed(w)))
            .collect();
        if seen.values().all(|s| !s.is_empty()) {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "not every worker printed: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let doc = status();
    let workers = doc["pools"][0]["workers"].as_array().unwrap().clone();
    let mut gpus_in_use = std::collections::BTreeSet::new();
    for w in &workers {
        let name = w["name"].as_str().unwrap();
        let fields: Vec<&str> = seen[name].split(' ').collect();
        assert_eq!(fields.len(), 3, "{name}: {:?}", seen[name]);
        assert_eq!(
            fields[0], w["node"],
            "{name} runs on the node it was journaled for: {w}"
        );
        assert_eq!(w["state"], "running", "{w}");
        if name.starts_with('g') {
            assert_eq!(w["gpus"], 1, "{w}");
            assert_eq!(w["step_gpus"], fields[1], "the supervisor's record: {w}");
            assert!(matches!(fields[1], "0" | "1"), "{name}: {:?}", seen[name]);
            assert!(
                gpus_in_use.insert((fields[0].to_owned(), fields[1].to_owned())),
                "GPU {} of {} is held by two live workers: {seen:?}",
                fields[1],
                fields[0]
            );
        } else {
            assert_eq!(
                fields[1..],
                ["none", "none"],
                "{name} sees no GPU: {seen:?}"
            );
            assert_eq!(w["step_gpus"], serde_json::Value::Null, "{w}");
        }
    }
    assert_eq!(gpus_in_use.len(), 6, "{seen:?}");
    let per_node = |prefix: char| {
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for w in workers
            .iter()
            .filter(|w| w["name"].as_str().unwrap().starts_with(prefix))
        {
            *count
                .entry(w["node"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        count
    };
    let two_each: BTreeMap<String, usize> = c.nodes.iter().map(|n| (n.clone(), 2)).collect();
    assert_eq!(per_node('g'), two_each, "GPU workers per node");
    assert_eq!(per_node('c'), two_each, "CPU-only workers per node");

    // A 7th GPU worker with --wait waits for a GPU as for a CPU: it starts once g0 is stopped,
    // on g0's node, with the GPU g0 held.
    let waiter = {
        let mut cmd = c.dispatch(state.path());
        cmd.args([
            "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--gpus", "1", "--name", "g6",
            "--wait", "--json", "--", "sh", "-c", &payload,
        ]);
        std::thread::spawn(move || output(cmd, STEP_BOUND))
    };
    let queued_deadline = Instant::now() + STEP_BOUND;
    let queue = state.path().join("pools/p/queue");
    let queued = || {
        std::fs::read_dir(&queue).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("t-"))
        })
    };
    while !queued() {
        assert!(
            Instant::now() < queued_deadline,
            "g6 never showed as waiting"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let g0 = workers.iter().find(|w| w["name"] == "g0").unwrap();
    let stopped = dispatch(&["pool", "stop-worker", "p", "g0", "--grace", "1"]);
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    let waited = waiter.join().unwrap();
    assert!(waited.status.success(), "g6: {}", text(&waited.stderr));
    let placed: serde_json::Value = serde_json::from_slice(&waited.stdout).unwrap();
    assert_eq!(placed["node"], g0["node"], "{placed}");
    let deadline = Instant::now() + STEP_BOUND;
    let g6_seen = loop {
        let seen = printed("g6");
        if !seen.is_empty() {
            break seen;
        }
        assert!(Instant::now() < deadline, "g6 never printed");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(
        g6_seen, seen["g0"],
        "g6 runs where g0 ran and holds the GPU g0 held"
    );

    // They end; reconcile proves each step over and releases every budget.
    std::fs::write(&go_file, b"").unwrap();
    let deadline = Instant::now() + STEP_BOUND;
    loop {
        let out = dispatch(&["reconcile", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let doc = status();
        let pool = &doc["pools"][0];
        if pool["reserved"]["cpus"] == 0 {
            assert_eq!(pool["reserved"]["gpus"], 0, "{pool}");
            break;
        }
        assert!(Instant::now() < deadline, "budget still held: {pool}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let audit = dispatch(&["audit", "--json"]);
    assert!(audit.status.success(), "{}", text(&audit.stdout));

    // The report says where each worker ran and which GPU its step got, page and JSON alike.
    let page = state.path().join("report.html");
    let page_arg = page.to_str().unwrap();
    let report = dispatch(&["report", "--pool", "p", "--json", "--html", page_arg]);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    for (name, printed) in &seen {
        let w = doc["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["worker"] == name.as_str())
            .unwrap();
        let fields: Vec<&str> = printed.split(' ').collect();
        assert_eq!(w["node"], fields[0], "{w}");
        let label = if name.starts_with('g') {
            assert_eq!(
                (&w["gpus"], &w["step_gpus"]),
                (&1.into(), &fields[1].into()),
                "{w}"
            );
            format!(" · p · {} · GPU {}</text>", fields[0], fields[1])
        } else {
            assert_eq!(
                (&w["gpus"], &w["step_gpus"]),
                (&0.into(), &serde_json::Value::Null)
            );
            format!(" · p · {}</text>", fields[0])
        };
        assert!(
            html.contains(&label),
            "{name}: {label:?} is not on the page"
        );
    }
}

/// Every worker's srun client log under a state directory, for a failure's message.
fn srun_logs(state: &std::path::Path) -> String {
    let mut said = String::new();
    let workers = state.join("pools/p/workers");
    for entry in std::fs::read_dir(&workers).into_iter().flatten().flatten() {
        let log = entry.path().join("evidence/srun-client.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        said.push_str(&format!("\n{}: {}", log.display(), text.trim()));
    }
    said
}

/// How a test fails node3.
#[derive(Clone, Copy)]
enum NodeFailure {
    /// Its slurmd and everything in its namespace SIGKILLed.
    Killed,
    /// `scontrol update NodeName=node3 State=DOWN`.
    SetDown,
}

fn fail_node3(c: &Cluster, how: NodeFailure) {
    fail_node(c, "node3", how)
}

fn fail_node(c: &Cluster, node: &str, how: NodeFailure) {
    let out = match how {
        NodeFailure::Killed => output(script(&["node-kill", node]), Duration::from_secs(60)),
        NodeFailure::SetDown => output(
            c.slurm(
                "scontrol",
                &[
                    "update",
                    &format!("NodeName={node}"),
                    "State=DOWN",
                    "Reason=dispatch-test",
                ],
            ),
            STEP_BOUND,
        ),
    };
    assert!(
        out.status.success(),
        "failing {node}: {}",
        text(&out.stderr)
    );
}

#[test]
fn a_killed_node_ends_only_its_workers_in_a_no_kill_pool() {
    a_dead_node_ends_only_its_workers_in_a_no_kill_pool(NodeFailure::Killed);
}

#[test]
fn a_node_set_down_ends_only_its_workers_in_a_no_kill_pool() {
    a_dead_node_ends_only_its_workers_in_a_no_kill_pool(NodeFailure::SetDown);
}

/// Issue 23: a pool made over 3 nodes is made with `--no-kill`; when one node fails, the
/// workers on the other nodes run on, the worker on the failed node is released only once
/// Slurm shows the node gone from the job and its step gone or listed only there (its proof
/// says the node failed), the node's capacity leaves the pool, and the audit is clean.
fn a_dead_node_ends_only_its_workers_in_a_no_kill_pool(how: NodeFailure) {
    let c = Cluster::require();
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("config.toml");
    std::fs::write(&config, "job_name_prefix = \"dispatch-mn-\"\n").unwrap();
    let go = tempfile::tempdir_in("/tmp").unwrap();
    let go_file = go.path().join("go");
    let dispatch = |args: &[&str]| {
        let mut cmd = c.dispatch(state.path());
        cmd.arg("--config").arg(&config).args(args);
        output(cmd, Duration::from_secs(150))
    };
    let json = |out: &std::process::Output| -> serde_json::Value {
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let created = dispatch(&[
        "pool",
        "create",
        "p",
        "--nodes",
        "3",
        "--cpus",
        "2",
        "--mem",
        "500M",
        "--gpus-per-node",
        "1",
        "--time",
        "10:00",
        "--wait",
        "60",
        "--json",
    ]);
    let job = json(&created)["allocation"]["job_id"].as_u64().unwrap();
    // Whatever happens below, the allocation ends with the test.
    let _cancel = multinode::Job {
        cluster: &c,
        id: job as u32,
    };
    let payload = format!(
        "n=0; until [ -e {} ]; do n=$((n+1)); [ $n -lt 1500 ] || exit 9; sleep 0.2; done",
        go_file.display()
    );
    // w3, on the node that fails, asks for no GPU and to be submitted again once.
    for (name, node, gpus, resubmits) in [
        ("w1", "node1", "1", "0"),
        ("w2", "node2", "1", "0"),
        ("w3", "node3", "0", "1"),
    ] {
        json(&dispatch(&[
            "pool",
            "submit",
            "p",
            "--cpus",
            "1",
            "--mem",
            "100M",
            "--gpus",
            gpus,
            "--node",
            node,
            "--resubmit-on-node-failure",
            resubmits,
            "--name",
            name,
            "--json",
            "--",
            "sh",
            "-c",
            &payload,
        ]));
    }
    let status = || json(&dispatch(&["pool", "status", "p", "--json"]));
    assert_eq!(status()["pools"][0]["no_kill"], true);

    let revive = Revive("node3");
    fail_node3(&c, how);
    // Reconcile until the worker on node3 is released; never before Slurm shows it.
    let deadline =
        Instant::now() + Duration::from_secs(3 * c.slurmd_timeout + 2 * c.msg_timeout + 30);
    let mut resolved = Vec::new();
    let mut resubmitted = Vec::new();
    let proof = loop {
        let r = json(&dispatch(&["reconcile", "--json"]));
        resolved.extend(r["resolved"].as_array().unwrap().iter().cloned());
        if let Some(rs) = r["resubmitted"].as_array() {
            resubmitted.extend(rs.iter().cloned());
        }
        if let Some(w3) = resolved.iter().find(|r| r["worker"] == "w3") {
            break w3["proof"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "w3 not released: {}", status());
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        proof.starts_with("ended by the failure of node node3: "),
        "{proof}"
    );
    assert!(
        resolved.iter().all(|r| r["worker"] == "w3"),
        "only the dead node's worker ends: {resolved:?}"
    );
    // The run that released w3 submitted it again, on a node the job still holds.
    assert_eq!(resubmitted.len(), 1, "{resubmitted:?}");
    let again = &resubmitted[0];
    assert_eq!(again["worker"], "w3", "{again}");
    assert_eq!(again["outcome"], "submitted", "{again}");
    let old_w3 = resolved.iter().find(|r| r["worker"] == "w3").unwrap();
    assert_eq!(again["replaces"], old_w3["submission_id"], "{again}");
    let doc = status();
    let pool = &doc["pools"][0];
    assert!(pool["nodes_lost"]["node3"].is_string(), "{pool}");
    for w in pool["workers"].as_array().unwrap() {
        let replacement = w["submission_id"] == again["submission_id"];
        let ended = w["name"] == "w3" && !replacement;
        assert_eq!(
            w["state"],
            if ended { "released" } else { "running" },
            "{w}"
        );
        if replacement {
            assert_ne!(w["node"], "node3", "{w}");
        }
    }
    // node3's capacity left the pool: a worker that must run there can never fit.
    let refused = dispatch(&[
        "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--node", "node3", "--", "true",
    ]);
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("can never fit"),
        "{}",
        text(&refused.stderr)
    );

    // The others finish and publish; the pool is released; the audit is clean.
    std::fs::write(&go_file, b"").unwrap();
    let deadline = Instant::now() + STEP_BOUND;
    loop {
        json(&dispatch(&["reconcile", "--json"]));
        if status()["pools"][0]["reserved"]["cpus"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "budget still held: {}", status());
        std::thread::sleep(Duration::from_millis(500));
    }
    json(&dispatch(&["pool", "release", "p", "--json"]));
    let audit = dispatch(&["audit", "--json"]);
    assert!(audit.status.success(), "{}", text(&audit.stdout));
    drop(revive);
}

/// Issue 23: an attached allocation made without `--no-kill` ends whole when one of its nodes
/// is set DOWN (`scontrol update NodeName=… State=DOWN`): reconcile proves every worker over
/// with it, on every node, and nothing is left holding budget.
#[test]
fn without_no_kill_a_downed_node_ends_the_allocation_and_every_worker_is_proven_over() {
    let c = Cluster::require();
    let job = c.salloc(&unique_name("mn-kill"), &["-N3", "-c2", "--mem=500"]);
    let state = tempfile::tempdir().unwrap();
    let dispatch = |args: &[&str]| {
        let mut cmd = c.dispatch(state.path());
        cmd.args(args);
        output(cmd, STEP_BOUND)
    };
    let ok = |out: std::process::Output| -> serde_json::Value {
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    };
    ok(dispatch(&[
        "pool",
        "attach",
        "p",
        "--job",
        &job.id.to_string(),
        "--json",
    ]));
    let status = ok(dispatch(&["pool", "status", "p", "--json"]));
    assert_eq!(
        status["pools"][0]["no_kill"],
        serde_json::Value::Null,
        "attached: not known"
    );
    for (name, node) in [("w1", "node1"), ("w2", "node2"), ("w3", "node3")] {
        ok(dispatch(&[
            "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--node", node, "--name", name,
            "--json", "--", "sleep", "600",
        ]));
    }
    let revive = Revive("node3");
    fail_node3(&c, NodeFailure::SetDown);
    let deadline = Instant::now() + STEP_BOUND;
    let doc = loop {
        ok(dispatch(&["reconcile", "--json"]));
        let doc = ok(dispatch(&["pool", "status", "p", "--json"]));
        let pool = &doc["pools"][0];
        if pool["reserved"]["cpus"] == 0 && pool["allocation"]["state"] == "ended" {
            break doc;
        }
        assert!(Instant::now() < deadline, "budget still held: {doc}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let pool = &doc["pools"][0];
    assert_eq!(pool["allocation"]["state"], "ended", "{pool}");
    for w in pool["workers"].as_array().unwrap() {
        assert_eq!(w["state"], "released", "{w}");
    }
    let audit = dispatch(&["audit", "--json"]);
    assert!(audit.status.success(), "{}", text(&audit.stdout));
    drop(revive);
}

/// Issue 23: `pool submit` on a 3-node pool killed at every intent/effect boundary, then
/// `dispatch reconcile`: every step that runs is on the node its worker's receipt names
/// (`WorkerPlaced`, in the commit of the intent), never on one the journal does not know.
#[test]
fn a_multi_node_submit_killed_at_every_boundary_never_runs_a_step_on_an_unjournaled_node() {
    let c = Cluster::require();
    let gres = format!("--gres=gpu:{}", c.gpus);
    let job = c.salloc(
        &unique_name("mn-crash"),
        &[
            "-N3",
            &format!("--ntasks-per-node={}", c.cpus),
            "--mem=2000",
            &gres,
        ],
    );
    let state = tempfile::tempdir().unwrap();
    let dispatch = |failpoint: Option<&str>, args: &[&str]| {
        let mut cmd = c.dispatch(state.path());
        cmd.args(args);
        if let Some(fp) = failpoint {
            let spec = match fp.split_once('@') {
                Some((name, k)) => format!("{name}=abort@{k}"),
                None => format!("{fp}=abort"),
            };
            cmd.env("DISPATCH_FAILPOINTS", spec);
        }
        output(cmd, STEP_BOUND)
    };
    let attached = dispatch(None, &["pool", "attach", "p", "--job", &job.id.to_string()]);
    assert!(attached.status.success(), "{}", text(&attached.stderr));
    let failpoints = [
        "pool-submit-after-intent",
        "pool-submit-before-launch",
        "pool-submit-after-launch",
        "journal-before-sync@2",
    ];
    let mut steps_seen = 0;
    for (i, fp) in failpoints.iter().enumerate() {
        let name = format!("w{i}");
        let crashed = dispatch(
            Some(fp),
            &[
                "pool", "submit", "p", "--cpus", "2", "--mem", "100M", "--gpus", "1", "--name",
                &name, "--", "sleep", "300",
            ],
        );
        assert_eq!(
            crashed.status.code(),
            None,
            "{fp} did not fire: {}",
            text(&crashed.stderr)
        );
        let r = dispatch(None, &["reconcile", "--json"]);
        assert!(r.status.success(), "{}", text(&r.stderr));

        // Where the journal placed each worker.
        let dump = dispatch(None, &["journal", "dump", "--json"]);
        let mut worker_of = BTreeMap::new();
        let mut node_of = BTreeMap::new();
        for line in text(&dump.stdout).lines() {
            let e: serde_json::Value = serde_json::from_str(line).unwrap();
            let id = e["event"]["submission_id"].as_str().map(str::to_owned);
            match (e["kind"].as_str(), id) {
                (Some("WorkerSubmitIntent"), Some(id)) => {
                    worker_of.insert(id, e["event"]["worker"].as_str().unwrap().to_owned());
                }
                (Some("WorkerPlaced"), Some(id)) => {
                    node_of.insert(id, e["event"]["node"].as_str().unwrap().to_owned());
                }
                _ => {}
            }
        }
        assert_eq!(worker_of.len(), i + 1, "one intent per submit");
        assert_eq!(
            worker_of.keys().collect::<Vec<_>>(),
            node_of.keys().collect::<Vec<_>>(),
            "every intent has its node in the same commit"
        );
        let placed: BTreeMap<String, String> = worker_of
            .iter()
            .map(|(id, w)| (format!("p.{w}"), node_of[id].clone()))
            .collect();
        let steps = output(
            c.slurm(
                "squeue",
                &["-h", "-s", "-j", &job.id.to_string(), "-o", "%j %N"],
            ),
            STEP_BOUND,
        );
        steps_seen = 0;
        for line in text(&steps.stdout).lines().filter(|l| l.starts_with("p.")) {
            let (step, node) = line.split_once(' ').unwrap();
            assert_eq!(
                placed.get(step).map(String::as_str),
                Some(node.trim()),
                "after {fp}: step {step} runs on {node}, the journal placed {placed:?}"
            );
            steps_seen += 1;
        }
    }
    // The two workers whose srun ran before their submit was killed (after the launch, and
    // before the launch's outcome was synced) run, each on its node: the checks above saw
    // steps, not an empty listing.
    assert_eq!(steps_seen, 2, "steps listed at the end");
    let audit = dispatch(None, &["audit", "--json"]);
    assert!(audit.status.success(), "{}", text(&audit.stdout));
}

/// `scontrol show job J`'s `KEY=value` fields.
fn show_job(c: &Cluster, job: u32) -> BTreeMap<String, String> {
    let out = output(
        c.slurm("scontrol", &["show", "job", "-o", &job.to_string()]),
        STEP_BOUND,
    );
    text(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `sacct -n -P -j J -o JobID,State,ExitCode`: state and exit code by job or step id.
fn sacct_states(c: &Cluster, job: u32) -> BTreeMap<String, (String, String)> {
    let out = output(
        c.slurm(
            "sacct",
            &[
                "-n",
                "-P",
                "-j",
                &job.to_string(),
                "-o",
                "JobID,State,ExitCode",
            ],
        ),
        STEP_BOUND,
    );
    text(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('|');
            Some((
                f.next()?.to_owned(),
                (f.next()?.to_owned(), f.next()?.to_owned()),
            ))
        })
        .collect()
}

/// Preemption on this cluster (`tools/slurm-dev-cluster … preempt on` when `status` says it is
/// off; left on: other tests may rely on it, and nothing changes for a job while no `high` job
/// waits for its resources). Returns the QOS normal's GraceTime.
fn preemption_on() -> Duration {
    let status = output(script(&["preempt", "status"]), STEP_BOUND);
    let said = if status.status.success() {
        text(&status.stdout)
    } else {
        let on = output(script(&["preempt", "on"]), Duration::from_secs(120));
        assert!(
            on.status.success(),
            "preempt on: {}{}",
            text(&on.stdout),
            text(&on.stderr)
        );
        text(&on.stdout)
    };
    let grace = said
        .split_whitespace()
        .find_map(|w| w.strip_prefix("GraceTime="))
        .map(|v| v.trim_end_matches(';'))
        .unwrap_or_else(|| panic!("no GraceTime in {said:?}"));
    let secs = grace
        .split(':')
        .try_fold(0u64, |acc, p| p.parse::<u64>().map(|n| acc * 60 + n))
        .unwrap_or_else(|e| panic!("GraceTime={grace}: {e}"));
    assert!(secs > 0, "a preempted job gets some grace: {said}");
    Duration::from_secs(secs)
}

/// A child process killed (and reaped) when dropped, also when the test panics.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Issue 38: what dispatch will rely on when a pool's allocation is preempted, with the dev
/// cluster's preemption on (QOS `high` preempts `normal`, PreemptMode=CANCEL, GraceTime on
/// `normal`). A `high` job that needs node3 preempts the `normal` salloc allocation holding it
/// (`--exclusive`, so no other job can be the one preempted): the step gets SIGTERM at once;
/// during the grace `scontrol` shows the job RUNNING with `PreemptTime` set and `EndTime` =
/// `PreemptTime` + GraceTime; at the end the job is PREEMPTED in `scontrol` (with `PreemptTime`)
/// and in sacct, the step ended as its trap chose (COMPLETED 0:0), and the `high` job ran.
#[test]
fn a_high_job_preempts_a_normal_allocation_its_step_gets_term_and_it_ends_preempted() {
    let c = Cluster::require();
    let grace = preemption_on();
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let d = dir.path().display();
    let normal = c.salloc(
        &unique_name("mn-preempted"),
        &[
            "-q",
            "normal",
            "-N1",
            "-w",
            "node3",
            "--exclusive",
            "--mem=1000",
        ],
    );
    let trap = format!(
        "trap 'echo TERM >{d}/term; sleep 1; exit 0' TERM; echo up >{d}/up; \
         while :; do sleep 0.2; done"
    );
    let job_id = normal.id.to_string();
    let step_args = [
        "--jobid",
        &job_id,
        "-n1",
        "-c1",
        "--mem=100",
        "sh",
        "-c",
        &trap,
    ];
    let step = c
        .slurm("srun", &step_args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(KillOnDrop)
        .expect("start srun");
    let up = dir.path().join("up");
    wait_for("the step started", STEP_BOUND, || up.exists());

    let name = unique_name("mn-preemptor");
    let sbatch = [
        "--parsable",
        "-q",
        "high",
        "-w",
        "node3",
        "-c1",
        "--mem=100",
        "-t",
        "2",
        "-o",
        "/dev/null",
        "-J",
        &name,
        "--wrap",
        "true",
    ];
    let out = output(c.slurm("sbatch", &sbatch), STEP_BOUND);
    let high = Job {
        cluster: &c,
        id: text(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("sbatch {sbatch:?}: {e}: {}", text(&out.stderr))),
    };
    let term = dir.path().join("term");
    wait_for("the step's SIGTERM", Duration::from_secs(30), || {
        term.exists()
    });

    let during = show_job(&c, normal.id);
    let time = |fields: &BTreeMap<String, String>, key: &str| {
        let v = &fields[key];
        chrono::NaiveDateTime::parse_from_str(v, "%Y-%m-%dT%H:%M:%S")
            .unwrap_or_else(|e| panic!("{key}={v}: {e} ({fields:?})"))
    };
    assert_eq!(during["JobState"], "RUNNING", "in its grace: {during:?}");
    let grace_left = time(&during, "EndTime") - time(&during, "PreemptTime");
    assert_eq!(
        grace_left.num_seconds() as u64,
        grace.as_secs(),
        "EndTime = PreemptTime + GraceTime: {during:?}"
    );

    let bound = grace + Duration::from_secs(120);
    wait_for("sacct shows the job PREEMPTED", bound, || {
        sacct_states(&c, normal.id)
            .get(&job_id)
            .map(|s| s.0.as_str())
            == Some("PREEMPTED")
    });
    let after = show_job(&c, normal.id);
    assert_eq!(after["JobState"], "PREEMPTED", "{after:?}");
    assert!(after["PreemptTime"] != "None", "{after:?}");
    let step_state = sacct_states(&c, normal.id);
    assert_eq!(
        step_state.get(&format!("{job_id}.0")),
        Some(&("COMPLETED".to_owned(), "0:0".to_owned())),
        "the step ended as its TERM trap chose: {step_state:?}"
    );
    wait_for("the high job ran and ended", bound, || {
        sacct_states(&c, high.id)
            .get(&high.id.to_string())
            .map(|s| s.0.as_str())
            == Some("COMPLETED")
    });
    drop(step);
    let left = output(
        c.slurm(
            "squeue",
            &["-h", "-j", &format!("{job_id},{}", high.id), "-o", "%i %T"],
        ),
        STEP_BOUND,
    );
    let left = text(&left.stdout);
    assert!(
        left.lines()
            .all(|l| l.ends_with("PREEMPTED") || l.ends_with("COMPLETED")),
        "no job of this test is left pending or running: {left}"
    );
}

/// Issue 36's pool: 2 nodes × 4 CPUs with both GPUs (`salloc -N2 --gres=gpu:2 -c 4 --mem
/// 4000`), attached as `p`; `cpu1` (1 CPU) was started while `gpu1` (1 CPU, 1 GPU) ran, and
/// gpu1's step has ended since (its core is free again): a 2-CPU step on node1 now gets cores
/// 0 and 2. The node
/// declares 4 cores on a host of 2 CPUs, and slurmd folds the step's cores onto the real CPUs
/// (0 and 2 are both CPU 0): on 22.05, binding the task to cores then failed after the step
/// was created ("Unable to layout tasks on given cpus").
struct Issue36<'c> {
    job: multinode::Job<'c>,
    state: tempfile::TempDir,
    /// Directories put first on PATH for dispatch (a wrapper of srun).
    path_first: Vec<std::path::PathBuf>,
}

impl<'c> Issue36<'c> {
    fn new(c: &'c Cluster) -> Issue36<'c> {
        let gres = format!("--gres=gpu:{}", c.gpus);
        let job = c.salloc(
            &unique_name("mn-issue36"),
            &["-N2", &gres, "-c", &c.cpus.to_string(), "--mem", "4000"],
        );
        let s = Issue36 {
            job,
            state: tempfile::tempdir().unwrap(),
            path_first: Vec::new(),
        };
        let attached = s.dispatch(&["pool", "attach", "p", "--job", &s.job.id.to_string()]);
        assert!(attached.status.success(), "{}", text(&attached.stderr));
        s
    }

    fn dispatch(&self, args: &[&str]) -> std::process::Output {
        let c = self.job.cluster;
        let mut cmd = c.dispatch(self.state.path());
        let mut path = self.path_first.clone();
        path.push(c.env["SLURM_DEV_MULTI_BIN"].clone().into());
        path.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        cmd.env("PATH", std::env::join_paths(path).unwrap());
        cmd.args(args);
        output(cmd, STEP_BOUND)
    }

    fn submit(&self, name: &str, cpus: &str, mem: &str, gpus: &str, payload: &str) -> Output {
        self.dispatch(&[
            "pool", "submit", "p", "--cpus", cpus, "--mem", mem, "--gpus", gpus, "--name", name,
            "--", "sh", "-c", payload,
        ])
    }

    /// gpu1 (on core 0) and cpu1 (on core 1) running, then gpu1's step over: node1's free
    /// cores are 0, 2 and 3, and Slurm gives a 2-CPU step the first two.
    fn cpu1_beside_gpu1_then_gpu1_over(&self) {
        let go = tempfile::tempdir_in("/tmp").unwrap();
        let go_file = go.path().join("go");
        let gpu1 = format!(
            "n=0; until [ -e {} ]; do n=$((n+1)); [ $n -lt 600 ] || exit 9; sleep 0.1; done; \
             echo gpu1 ran",
            go_file.display()
        );
        let ran = self.submit("gpu1", "1", "100M", "1", &gpu1);
        assert!(ran.status.success(), "gpu1: {}", text(&ran.stderr));
        let cpu1 = self.submit("cpu1", "1", "100M", "0", "echo cpu1 ran; sleep 120");
        assert!(cpu1.status.success(), "cpu1: {}", text(&cpu1.stderr));
        std::fs::write(&go_file, "").unwrap();
        let c = self.job.cluster;
        let deadline = Instant::now() + STEP_BOUND;
        loop {
            let steps = output(
                c.slurm(
                    "squeue",
                    &["-h", "-s", "-j", &self.job.id.to_string(), "-o", "%j"],
                ),
                STEP_BOUND,
            );
            if steps.status.success() && !text(&steps.stdout).contains("p.gpu1") {
                break;
            }
            assert!(Instant::now() < deadline, "gpu1's step did not end");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.dispatch(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }
}

use std::process::Output;

/// Issue 36: where placement finds room for a 2-CPU worker beside two 1-CPU ones, Slurm lays
/// it out too: `pool submit` exits 0 and the payload runs and prints (on 22.05, before the
/// step asked `--cpu-bind=none`, slurmd refused its layout and it never ran).
#[test]
fn a_two_cpu_worker_runs_where_placement_found_room_beside_one_cpu_workers() {
    let c = Cluster::require();
    let s = Issue36::new(&c);
    s.cpu1_beside_gpu1_then_gpu1_over();
    let long = s.submit("long", "2", "1G", "0", "echo long ran on $SLURMD_NODENAME");
    assert!(
        long.status.success(),
        "long: {}; the srun clients said: {}",
        text(&long.stderr),
        srun_logs(s.state.path())
    );
    let deadline = Instant::now() + STEP_BOUND;
    loop {
        let logs = text(&s.dispatch(&["logs", "long"]).stdout);
        if logs.contains("long ran on node1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "long printed nothing; the srun clients said: {}",
            srun_logs(s.state.path())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Issue 36: a step the controller created and slurmd refused to launch is a launch failure in
/// srun's own words, not a running step. The refusal is Slurm's own: a wrapper of srun first on
/// PATH asks long's step to bind its task to CPU 3, which the step does not have (the hosts of
/// the dev cluster have 2 CPUs), and slurmd refuses the launch after the step was created
/// ("Task launch for StepId=J.S failed on node node1: Unable to satisfy cpu bind request", on
/// 22.05 and 24.11 alike). `pool submit` exits 1 with those words; the journal has a definite
/// `WorkerLaunchFailed` and no step observed for it; `pool status`, `logs`, `inspect` and
/// `report` show the words.
#[test]
fn a_launch_slurm_refused_after_creating_the_step_fails_the_submit_in_sruns_words() {
    let c = Cluster::require();
    let mut s = Issue36::new(&c);
    let wrapper = tempfile::tempdir_in("/tmp").unwrap();
    let real = format!("{}/srun", c.env["SLURM_DEV_MULTI_BIN"]);
    let script = format!(
        "#!/bin/sh\n\
         long=\n\
         for a; do case $a in --job-name=p.long) long=1;; esac; done\n\
         [ -n \"$long\" ] || exec '{real}' \"$@\"\n\
         for a; do shift; case $a in --cpu-bind=*) ;; *) set -- \"$@\" \"$a\";; esac; done\n\
         exec '{real}' --cpu-bind=map_cpu:3 \"$@\"\n"
    );
    let srun = wrapper.path().join("srun");
    std::fs::write(&srun, script).unwrap();
    std::fs::set_permissions(&srun, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    s.path_first.push(wrapper.path().to_owned());
    s.cpu1_beside_gpu1_then_gpu1_over();

    let long = s.submit("long", "2", "1G", "0", "echo long ran");
    let err = text(&long.stderr);
    let words = "failed on node node1: Unable to satisfy cpu bind request";
    assert_eq!(
        long.status.code(),
        Some(1),
        "{err}; stdout: {}",
        text(&long.stdout)
    );
    assert!(
        err.contains("Task launch for StepId=") && err.contains(words),
        "{err}"
    );

    // The journal: a definite launch failure, and no step observed, for long.
    let dump = s.dispatch(&["journal", "dump", "--json"]);
    let events: Vec<serde_json::Value> = text(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let id = events
        .iter()
        .find(|e| e["kind"] == "WorkerSubmitIntent" && e["event"]["worker"] == "long")
        .map(|e| e["event"]["submission_id"].clone())
        .expect("long's intent");
    let about: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"]["submission_id"] == id)
        .collect();
    let kinds: Vec<&str> = about.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(!kinds.contains(&"WorkerStepObserved"), "{kinds:?}");
    let failed = about
        .iter()
        .find(|e| e["kind"] == "WorkerLaunchFailed")
        .unwrap_or_else(|| panic!("no WorkerLaunchFailed: {kinds:?}"));
    assert_eq!(failed["event"]["definite"], true, "{failed}");
    assert!(
        failed["event"]["reason"].as_str().unwrap().contains(words),
        "{failed}"
    );

    // Every view says it, in srun's words.
    let status = s.json(&["pool", "status", "p", "--json"]);
    let workers = status["pools"][0]["workers"].as_array().unwrap();
    let view = workers.iter().find(|w| w["name"] == "long").unwrap();
    assert_eq!(view["state"], "failed", "{view}");
    assert!(
        view["launch_failure"].as_str().unwrap().contains(words),
        "{view}"
    );
    let cpu1 = workers.iter().find(|w| w["name"] == "cpu1").unwrap();
    assert_eq!(cpu1["state"], "running", "{cpu1}");
    let table = text(&s.dispatch(&["pool", "status", "p", "--wide"]).stdout);
    assert!(
        table.contains("launch failed: ") && table.contains(words),
        "{table}"
    );
    let logs = s.dispatch(&["logs", "long"]);
    assert!(
        text(&logs.stderr).contains("never ran") && text(&logs.stderr).contains(words),
        "{}",
        text(&logs.stderr)
    );
    let inspect = s.json(&["inspect", "long", "--json"]);
    assert!(
        inspect["launch_failure"].as_str().unwrap().contains(words),
        "{inspect}"
    );
    let report = s.dispatch(&["report", "--pool", "p"]);
    let report = text(&report.stdout);
    assert!(
        report.contains("launch failed: ") && report.contains(words),
        "{report}"
    );
    let line = report
        .lines()
        .find(|l| l.trim_start().starts_with("long "))
        .unwrap();
    assert!(
        line.contains("failed") && !line.contains("running"),
        "{report}"
    );
    let audit = s.dispatch(&["audit", "--json"]);
    assert!(audit.status.success(), "{}", text(&audit.stdout));
}

/// The payload of the pool continuation tests: counts in its native state every 0.1 s, and
/// notes at its start its generation, the count it starts from and its node (`starts`); on
/// SIGTERM saves the count and declares a checkpoint. `$STOP_AT`, when set, is a count at
/// which its first generation saves, declares a checkpoint and exits 0 on its own; `$SAVE_AT`,
/// a count at which its first generation saves and asks for a checkpoint while it runs
/// (`DISPATCH_CHECKPOINT_NOW`), then counts on once it is taken.
const COUNTER: &str = r#"f="$DISPATCH_STATE_DIR/count"
n=$(cat "$f" 2>/dev/null || echo 0)
echo "$DISPATCH_GENERATION $n $(hostname)" >> "$DISPATCH_STATE_DIR/starts"
trap 'echo $n > "$f"; touch "$DISPATCH_CHECKPOINT"; exit 0' TERM
while :; do
  n=$((n + 1)); sleep 0.1
  if [ "$DISPATCH_GENERATION" = 1 ] && [ "$n" = "${STOP_AT:-}" ]; then
    echo $n > "$f"; touch "$DISPATCH_CHECKPOINT"; exit 0
  fi
  if [ "$DISPATCH_GENERATION" = 1 ] && [ "$n" = "${SAVE_AT:-}" ]; then
    echo $n > "$f"; touch "$DISPATCH_CHECKPOINT_NOW"
    while [ -e "$DISPATCH_CHECKPOINT_NOW" ]; do sleep 0.05; done
  fi
done"#;

/// A pool `p` made over the 3 nodes (`--no-kill`), its allocation cancelled when dropped.
struct NodePool<'c> {
    c: &'c Cluster,
    state: tempfile::TempDir,
    config: std::path::PathBuf,
    /// The node `submit_counter` puts its workers on.
    node: String,
    _job: multinode::Job<'c>,
}

impl<'c> NodePool<'c> {
    fn create(c: &'c Cluster) -> NodePool<'c> {
        Self::create_with(c, &["--nodes", "3", "--cpus", "4"])
    }

    /// `pool create p` with `sizes`, 500M, ten minutes, and `extra`; workers go on node3, or
    /// on the one node of a one-node pool.
    fn create_with(c: &'c Cluster, sizes: &[&str]) -> NodePool<'c> {
        let state = tempfile::tempdir().unwrap();
        let config = state.path().join("config.toml");
        std::fs::write(&config, "job_name_prefix = \"dispatch-mn-\"\n").unwrap();
        let mut cmd = c.dispatch(state.path());
        cmd.arg("--config")
            .arg(&config)
            .args(["pool", "create", "p"]);
        cmd.args(sizes)
            .args(["--mem", "500M", "--time", "10:00", "--wait", "60", "--json"]);
        let created = output(cmd, Duration::from_secs(150));
        assert!(created.status.success(), "{}", text(&created.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&created.stdout).unwrap();
        let id = doc["allocation"]["job_id"].as_u64().unwrap() as u32;
        let node = match doc["allocation"]["node"].as_str() {
            Some(one) if !one.contains('[') && !one.contains(',') => one.to_owned(),
            _ => "node3".to_owned(),
        };
        NodePool {
            c,
            state,
            config,
            node,
            _job: multinode::Job { cluster: c, id },
        }
    }

    fn dispatch(&self, args: &[&str]) -> Output {
        let mut cmd = self.c.dispatch(self.state.path());
        cmd.arg("--config").arg(&self.config).args(args);
        output(cmd, Duration::from_secs(150))
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.dispatch(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// `pool submit p` of COUNTER on the pool's node (`env` before it): its submission id.
    fn submit_counter(&self, name: &str, asks: &[&str], env: &[&str]) -> String {
        let mut args = vec![
            "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--node", &self.node, "--name",
            name, "--json",
        ];
        args.extend_from_slice(asks);
        args.extend_from_slice(&["--grace", "3", "--", "env"]);
        args.extend_from_slice(env);
        args.extend_from_slice(&["sh", "-c", COUNTER]);
        self.json(&args)["submission_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// A worker's native state directory.
    fn state_of(&self, id: &str) -> std::path::PathBuf {
        dispatch::worker::dirs::WorkerDirs::of(self.state.path(), Some("p"), id.parse().unwrap())
            .state
    }

    /// Wait until the worker journal of `id` shows `what`.
    fn wait_journal(
        &self,
        id: &str,
        what: &str,
        shows: impl Fn(&dispatch::worker::report::WorkerReport) -> bool,
    ) {
        let evidence = dispatch::worker::dirs::WorkerDirs::of(
            self.state.path(),
            Some("p"),
            id.parse().unwrap(),
        )
        .evidence;
        wait_for(what, STEP_BOUND, || {
            dispatch::worker::report::read(&evidence)
                .ok()
                .flatten()
                .is_some_and(|r| shows(&r))
        });
    }

    /// What a worker noted at each start: (generation, count, node) a line.
    fn starts(&self, id: &str) -> String {
        std::fs::read_to_string(self.state_of(id).join("starts")).unwrap_or_default()
    }

    /// `reconcile` until `done` says what it collected is complete: every run's `continued`
    /// and `resubmitted` lines.
    fn reconcile_until(
        &self,
        bound: Duration,
        mut done: impl FnMut(&[serde_json::Value], &[serde_json::Value]) -> bool,
    ) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
        let deadline = Instant::now() + bound;
        let (mut continued, mut resubmitted) = (Vec::new(), Vec::new());
        while !done(&continued, &resubmitted) {
            let r = self.json(&["reconcile", "--json"]);
            continued.extend(r["continued"].as_array().into_iter().flatten().cloned());
            resubmitted.extend(r["resubmitted"].as_array().into_iter().flatten().cloned());
            assert!(
                Instant::now() < deadline,
                "not decided in time: {r}; {}",
                srun_logs(self.state.path())
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        (continued, resubmitted)
    }

    /// The worker of that submission in `pool status p`.
    fn status_of(&self, id: &str) -> serde_json::Value {
        let doc = self.json(&["pool", "status", "p", "--json"]);
        doc["pools"][0]["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["submission_id"] == id)
            .unwrap_or_else(|| panic!("{id} not in pool status: {doc}"))
            .clone()
    }

    /// Release the pool; the audit is clean.
    fn release_and_audit(&self) {
        self.json(&["pool", "release", "p", "--json"]);
        let audit = self.dispatch(&["audit", "--json"]);
        assert!(
            audit.status.success(),
            "{}{}",
            text(&audit.stdout),
            text(&audit.stderr)
        );
    }
}

/// The predecessor ids of `lines` (`continued`'s `predecessor`, `resubmitted`'s `replaces`),
/// sorted.
fn sorted_ids<'a>(lines: &'a [serde_json::Value], key: &str) -> Vec<&'a str> {
    let mut ids: Vec<&str> = lines.iter().map(|l| l[key].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids
}

/// Issue 37 in a pool whose node fails. Slurm (22.05 and 24.11) kills the steps of a node set
/// DOWN (`scontrol`, its slurmd alive) at once, without a SIGTERM ("Killing JobId=J StepId=S
/// due to failed node"; `srun: error: Node failure on node3`): a payload there never
/// checkpoints and its supervisor never publishes. So a counter on node3 that asked `--continue
/// 1 --continue-on node-failure` is proven over by the node's failure and its continuation is
/// refused, once, saying why; one that asked both that and `--resubmit-on-node-failure 1` is
/// then submitted again from scratch on a surviving node, as is one that asked only to be
/// resubmitted (`docs/cli.md`); one that asked for a checkpoint while it ran
/// (`DISPATCH_CHECKPOINT_NOW`) is continued from it on a surviving node; the audit is clean.
#[test]
fn a_worker_killed_with_its_node_is_not_continued_and_one_that_asked_is_resubmitted() {
    let c = Cluster::require();
    let p = NodePool::create(&c);
    let continue_on_node_failure = ["--continue", "1", "--continue-on", "node-failure"];
    let saver = p.submit_counter("saver", &continue_on_node_failure, &["SAVE_AT=10"]);
    let counter = p.submit_counter("counter", &continue_on_node_failure, &[]);
    let both = p.submit_counter(
        "both",
        &[
            &continue_on_node_failure[..],
            &["--resubmit-on-node-failure", "1"],
        ]
        .concat(),
        &[],
    );
    let again = p.submit_counter("again", &["--resubmit-on-node-failure", "1"], &[]);
    let started = [&counter, &both, &again];
    wait_for("the workers to start", STEP_BOUND, || {
        started.iter().all(|id| !p.starts(id).is_empty())
    });
    p.wait_journal(&saver, "the saver's checkpoint", |r| r.saved.is_some());
    std::thread::sleep(Duration::from_secs(1));

    let revive = Revive("node3");
    let t0 = Instant::now();
    fail_node3(&c, NodeFailure::SetDown);
    let bound = Duration::from_secs(3 * c.slurmd_timeout + 2 * c.msg_timeout + 30);
    let (continued, resubmitted) = p.reconcile_until(bound, |c, r| c.len() >= 3 && r.len() >= 2);
    eprintln!("decided {:?} after node3 was set DOWN", t0.elapsed());
    // Decided once each, never again.
    p.json(&["reconcile", "--json"]);
    let r = p.json(&["reconcile", "--json"]);
    assert!(
        r["continued"].is_null() && r["resubmitted"].is_null(),
        "{r}"
    );

    // No SIGTERM reached node3's payloads: none saved its count.
    for id in started {
        assert!(
            !p.state_of(id).join("count").exists(),
            "a payload on the node set DOWN got SIGTERM: revisit this test"
        );
    }
    let (saved, continued): (Vec<_>, Vec<_>) = continued
        .into_iter()
        .partition(|line| line["predecessor"] == saver.as_str());
    for line in &continued {
        assert_eq!(line["outcome"], "refused", "{line}");
        let detail = line["detail"].as_str().unwrap();
        assert!(
            detail.contains("its supervisor did not finish"),
            "the refusal says why: {line}"
        );
    }
    // The one that saved a checkpoint while it ran goes on from it, elsewhere.
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert_eq!(saved[0]["outcome"], "continued", "{saved:?}");
    let successor = saved[0]["submission_id"].as_str().unwrap();
    wait_for("the saver's successor to start", STEP_BOUND, || {
        p.starts(successor).lines().count() == 2
    });
    let starts = p.starts(successor);
    let lines: Vec<Vec<&str>> = starts.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines[0], ["1", "0", "node3"], "{starts}");
    assert_eq!(lines[1][..2], ["2", "10"], "{starts}");
    assert_ne!(lines[1][2], "node3", "{starts}");
    let mut want = vec![counter.as_str(), both.as_str()];
    want.sort_unstable();
    assert_eq!(sorted_ids(&continued, "predecessor"), want, "{continued:?}");
    let mut want = vec![both.as_str(), again.as_str()];
    want.sort_unstable();
    assert_eq!(
        sorted_ids(&resubmitted, "replaces"),
        want,
        "{resubmitted:?}"
    );

    // The replacements start from scratch, on a surviving node, and run.
    for line in &resubmitted {
        assert_eq!(line["outcome"], "submitted", "{line}");
        let id = line["submission_id"].as_str().unwrap();
        wait_for("a replacement to start", STEP_BOUND, || {
            !p.starts(id).is_empty()
        });
        let starts = p.starts(id);
        assert_eq!(starts.lines().count(), 1, "{starts}");
        assert!(starts.starts_with("1 0 node"), "from scratch: {starts}");
        assert!(!starts.contains("node3"), "{starts}");
        let w = p.status_of(id);
        assert_eq!(w["state"], "running", "{w}");
        assert!(matches!(w["node"].as_str(), Some("node1" | "node2")), "{w}");
    }
    for id in started {
        assert_eq!(p.status_of(id)["state"], "released");
    }
    // The worker that asked both is replaced with its whole request: the continuation it never
    // used is asked again, and the one that asked only a resubmission asks none.
    let dump = p.dispatch(&["journal", "dump", "--json"]);
    let asked: Vec<serde_json::Value> = text(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == "ContinuationAsked")
        .map(|e| e["event"].clone())
        .collect();
    for line in &resubmitted {
        let id = line["submission_id"].as_str().unwrap();
        let again: Vec<_> = asked.iter().filter(|a| a["submission_id"] == id).collect();
        if line["replaces"] == both.as_str() {
            assert_eq!(again.len(), 1, "{asked:?}");
            assert_eq!(again[0]["continues_left"], 1, "{again:?}");
            assert_eq!(again[0]["causes"], serde_json::json!(["node-failure"]));
        } else {
            assert!(again.is_empty(), "{again:?}");
        }
    }
    p.release_and_audit();
    drop(revive);
}

/// Issue 37 in a pool whose node fails after its worker checkpointed: a counter on node3 that
/// asked `--continue 1 --continue-on checkpoint` declares a checkpoint and exits 0 on its own,
/// its supervisor publishes, and then, before any `reconcile`, node3 is set DOWN. The next
/// `reconcile` records the node's loss and the worker's end together; its own journal proves
/// it ended on its own before, so the cause is its checkpoint, not the node's failure, and it
/// is continued on a surviving node from that checkpoint: generation 2, counting on from the
/// count it saved.
#[test]
fn a_worker_that_checkpointed_before_its_node_failed_is_continued_on_a_surviving_node() {
    let c = Cluster::require();
    let p = NodePool::create(&c);
    let counter = p.submit_counter(
        "counter",
        &["--continue", "1", "--continue-on", "checkpoint"],
        &["STOP_AT=20"],
    );
    p.wait_journal(&counter, "its supervisor to finish", |r| {
        r.finished.is_some()
    });

    let revive = Revive("node3");
    let t0 = Instant::now();
    fail_node3(&c, NodeFailure::SetDown);
    let bound = Duration::from_secs(3 * c.slurmd_timeout + 2 * c.msg_timeout + 30);
    let (continued, _) = p.reconcile_until(bound, |c, _| !c.is_empty());
    eprintln!("decided {:?} after node3 was set DOWN", t0.elapsed());
    assert_eq!(continued.len(), 1, "{continued:?}");
    let line = &continued[0];
    assert_eq!(line["outcome"], "continued", "{line}");
    assert_eq!(line["predecessor"], counter.as_str(), "{line}");
    assert_eq!(line["generation"], 2, "{line}");
    let successor = line["submission_id"].as_str().unwrap().to_owned();
    let dump = p.dispatch(&["journal", "dump", "--json"]);
    let receipt = text(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["kind"] == "WorkerContinued")
        .expect("a WorkerContinued receipt");
    assert_eq!(receipt["event"]["cause"], "checkpoint", "{receipt}");
    assert_eq!(receipt["event"]["from_crash_class"], false, "{receipt}");

    // The successor runs on a surviving node, from the count its predecessor saved.
    wait_for("the successor to start", STEP_BOUND, || {
        p.starts(&successor).lines().count() == 2
    });
    let starts = p.starts(&successor);
    let lines: Vec<Vec<&str>> = starts.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines[0], ["1", "0", "node3"], "{starts}");
    assert_eq!(lines[1][..2], ["2", "20"], "{starts}");
    assert_ne!(lines[1][2], "node3", "{starts}");
    let w = p.status_of(&successor);
    assert_eq!(w["state"], "running", "{w}");
    assert!(matches!(w["node"].as_str(), Some("node1" | "node2")), "{w}");
    assert_eq!(p.status_of(&counter)["state"], "released");
    p.release_and_audit();
    drop(revive);
}

/// The counter of tests/continuation_real.rs: counts in its native state every 0.1 s; on
/// SIGTERM saves the count, appends what this generation counted, declares a checkpoint and
/// exits 0. It ignores a second TERM: Slurm signals every process of the batch step, and the
/// supervisor forwards its own TERM to the payload too.
const PREEMPT_COUNTER: &str = r#"f="$DISPATCH_STATE_DIR/count"
n=$(cat "$f" 2>/dev/null || echo 0)
start=$n
trap 'trap "" TERM; echo $n > "$f"; echo $((n - start)) >> "$DISPATCH_STATE_DIR/counted"; touch "$DISPATCH_CHECKPOINT"; exit 0' TERM
while :; do n=$((n + 1)); sleep 0.1; done"#;

/// A PREEMPT_COUNTER worker's asks: continued once if preempted, with an early shutdown short
/// enough for the grace (30 s here).
const CONTINUED_IF_PREEMPTED: [&str; 12] = [
    "--continue",
    "1",
    "--continue-on",
    "preempted",
    "--grace",
    "3",
    "--publication-timeout",
    "3",
    "--native-state-budget",
    "2",
    "--cleanup-budget",
    "2",
];

/// An `sbatch -q high` job that needs all of `node` (`--exclusive`), so it preempts the job
/// there (`name`: its job name); cancelled when dropped.
fn preempt_node<'c>(c: &'c Cluster, node: &str, name: &str) -> Job<'c> {
    let sbatch = [
        "--parsable",
        "-q",
        "high",
        "-w",
        node,
        "--exclusive",
        "--mem=1000",
        "-t",
        "3",
        "-o",
        "/dev/null",
        "-J",
        name,
        "--wrap",
        "sleep 300",
    ];
    let out = output(c.slurm("sbatch", &sbatch), STEP_BOUND);
    Job {
        cluster: c,
        id: text(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("sbatch {sbatch:?}: {e}: {}", text(&out.stderr))),
    }
}

/// A PREEMPT_COUNTER stopped in its second generation (native state `dir`): each generation
/// counted, and the count it saved last is the sum (`inspect`: what a failure shows).
fn assert_counted_in_two_generations(dir: &std::path::Path, inspect: &str) {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let counted: Vec<u64> = read("counted")
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counted.len(), 2, "{counted:?}: {inspect}");
    assert!(counted.iter().all(|n| *n > 0), "{counted:?}");
    assert_eq!(
        read("count").trim().parse::<u64>().unwrap(),
        counted.iter().sum::<u64>(),
        "{counted:?}"
    );
}

/// dispatch on this cluster with `state`: the parsed JSON of its stdout (`--json` given by
/// the caller), after checking it succeeded.
fn dispatch_json(c: &Cluster, state: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut cmd = c.dispatch(state);
    cmd.args(args);
    let out = output(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "dispatch {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_str(text(&out.stdout).trim())
        .unwrap_or_else(|e| panic!("dispatch {args:?}: {e}: {}", text(&out.stdout)))
}

fn journal_events(c: &Cluster, state: &std::path::Path, kind: &str) -> Vec<serde_json::Value> {
    let mut cmd = c.dispatch(state);
    cmd.args(["journal", "dump", "--json"]);
    let out = output(cmd, STEP_BOUND);
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == kind)
        .map(|e| e["event"].clone())
        .collect()
}

/// Issue 38, item 3: a `dispatch submit` counter in QOS `normal` (the default here) that asked
/// `--continue 1 --continue-on preempted` is preempted by a `high` job that needs its whole
/// node. In the grace `jobs --refresh` shows it "preempted, ends at …" (Slurm's `PreemptTime`
/// and pulled-forward `EndTime`); its proven end (`JobTerminal`) names Slurm's `PREEMPTED`;
/// once the `high` job is gone, reconcile continues it with the cause `preempted`, and
/// generation 2 resumes the count from generation 1's checkpoint. A batch job's shell gets
/// Slurm's TERM only when the grace ends (its steps get it at once), with KillWait before the
/// KILL: the supervisor forwards it and the payload checkpoints then. Every job made here is
/// cancelled, also on failure.
#[test]
fn a_preempted_submit_job_shows_its_grace_ends_preempted_and_is_continued_with_that_cause() {
    let c = Cluster::require();
    let grace = preemption_on();
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let state = tmp.path().join("state");
    let worker = unique_name("mn-preempted-counter");
    let submitted = dispatch_json(
        &c,
        &state,
        &[
            &["submit", "--cpus", "1", "--mem", "100M", "--time", "10"][..],
            &CONTINUED_IF_PREEMPTED,
            &[
                "--name",
                &worker,
                "--json",
                "--",
                "sh",
                "-c",
                PREEMPT_COUNTER,
            ],
        ]
        .concat(),
    );
    let first = Job {
        cluster: &c,
        id: submitted["job_id"].as_u64().expect("a job id") as u32,
    };
    // Running, on a node, and counting for a while.
    let mut node = String::new();
    wait_for("the counter's job runs", Duration::from_secs(60), || {
        let r = dispatch_json(&c, &state, &["jobs", "--refresh", "--json"]);
        let j = &r["jobs"][0];
        node = j["node"].as_str().unwrap_or_default().to_owned();
        j["slurm_state"] == "RUNNING" && !node.is_empty()
    });
    std::thread::sleep(Duration::from_secs(3));

    let high = preempt_node(&c, &node, &unique_name("mn-preemptor"));
    // In the grace: still RUNNING to Slurm, shown preempted with its end.
    let mut shown = serde_json::Value::Null;
    let t0 = Instant::now();
    while shown["preempted"].is_null() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "jobs --refresh shows no grace: {shown}; scontrol: {:?}; high job: {:?}",
            show_job(&c, first.id),
            show_job(&c, high.id)
        );
        let r = dispatch_json(&c, &state, &["jobs", "--refresh", "--json"]);
        shown = r["jobs"][0].clone();
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(shown["slurm_state"], "RUNNING", "{shown}");
    assert_eq!(shown["active"], true, "{shown}");
    let during = show_job(&c, first.id);
    assert_eq!(
        shown["preempted"]["at"],
        during["PreemptTime"].as_str(),
        "{during:?}"
    );
    assert_eq!(
        shown["preempted"]["ends_at"],
        during["EndTime"].as_str(),
        "{during:?}"
    );
    let mut cmd = c.dispatch(&state);
    cmd.args(["jobs", "--refresh"]);
    let table = text(&output(cmd, STEP_BOUND).stdout);
    assert!(table.contains("preempted, ends at"), "{table}");
    assert!(
        journal_events(&c, &state, "JobTerminal").is_empty(),
        "nothing is proven over in the grace"
    );

    // Killed at the grace's end: PREEMPTED is the proof; the high job is cancelled before the
    // continuation is decided.
    wait_for(
        "Slurm shows the job PREEMPTED",
        grace + Duration::from_secs(90),
        || show_job(&c, first.id).get("JobState").map(String::as_str) == Some("PREEMPTED"),
    );
    drop(high);
    let mut report = serde_json::Value::Null;
    wait_for("reconcile continues it", Duration::from_secs(90), || {
        report = dispatch_json(&c, &state, &["reconcile", "--json"]);
        !journal_events(&c, &state, "WorkerContinued").is_empty()
    });
    let terminal = journal_events(&c, &state, "JobTerminal");
    assert!(
        terminal[0]["proof"].as_str().unwrap().contains("PREEMPTED"),
        "{terminal:?}"
    );
    let continued = journal_events(&c, &state, "WorkerContinued");
    assert_eq!(continued[0]["cause"], "preempted", "{continued:?} {report}");
    assert!(
        continued[0]["proof"]
            .as_str()
            .unwrap()
            .contains("PREEMPTED"),
        "{continued:?}"
    );
    let second_id: uuid::Uuid = continued[0]["submission_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let second_job = journal_events(&c, &state, "JobSubmitted")
        .into_iter()
        .find(|e| e["submission_id"] == second_id.to_string())
        .and_then(|e| e["job_id"].as_u64())
        .expect("generation 2's job");
    let _second = Job {
        cluster: &c,
        id: second_job as u32,
    };

    // Generation 2 counts on from generation 1's checkpoint; stopped, the count is the sum.
    let dirs = dispatch::worker::dirs::WorkerDirs::for_job(&state.join("jobs"), second_id);
    wait_for("generation 2 runs", Duration::from_secs(60), || {
        let r = dispatch_json(&c, &state, &["jobs", "--refresh", "--json"]);
        r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["submission_id"] == second_id.to_string() && j["slurm_state"] == "RUNNING")
    });
    std::thread::sleep(Duration::from_secs(3));
    let mut cmd = c.dispatch(&state);
    cmd.args(["stop", &worker, "--grace", "5"]);
    let stopped = output(cmd, Duration::from_secs(120));
    assert!(stopped.status.success(), "{}", text(&stopped.stderr));
    let mut cmd = c.dispatch(&state);
    cmd.args(["inspect", &second_id.to_string()]);
    let inspect = text(&output(cmd, STEP_BOUND).stdout);
    assert_counted_in_two_generations(&dirs.state, &inspect);
    drop(first);
}

/// Issue 38: a renewing pool's whole allocation lost (its one node set DOWN, no `--no-kill`):
/// Slurm's proof of the end is recorded, the next allocation asked for at once (no dependency
/// on a job proven over) and granted on a surviving node, and the worker that checkpointed
/// while running goes on there from its saved count. The cause is Slurm's: `node-failure`
/// (`NODE_FAIL`), the word `--continue-on` takes; "lost" is only for an end Slurm named no cause
/// of.
#[test]
fn a_renewing_pool_whose_allocation_is_lost_goes_on_in_its_next_allocation_elsewhere() {
    let c = Cluster::require();
    let p = NodePool::create_with(&c, &["--cpus", "2", "--renew", "--renew-max", "2"]);
    let counter = p.submit_counter("counter", &["--continue", "1"], &["SAVE_AT=20"]);
    p.wait_journal(&counter, "its checkpoint", |r| r.saved.is_some());

    let lost = p.node.clone();
    let revive = Revive(&lost);
    fail_node(&c, &lost, NodeFailure::SetDown);
    let bound = Duration::from_secs(3 * c.slurmd_timeout + 2 * c.msg_timeout + 60);
    let (continued, _) =
        p.reconcile_until(bound, |c, _| c.iter().any(|l| l["outcome"] == "continued"));
    let line = continued
        .iter()
        .find(|l| l["outcome"] == "continued")
        .unwrap();
    assert_eq!(line["predecessor"], counter.as_str(), "{line}");
    assert_eq!(line["generation"], 2, "{line}");
    let successor = line["submission_id"].as_str().unwrap().to_owned();
    let dump = p.dispatch(&["journal", "dump", "--json"]);
    let events: Vec<serde_json::Value> = text(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let renewed = events
        .iter()
        .find(|e| e["kind"] == "PoolRenewed")
        .expect("a PoolRenewed");
    assert_eq!(renewed["event"]["cause"], "node-failure", "{renewed}");
    assert!(
        renewed["event"]["proof"]
            .as_str()
            .unwrap()
            .contains("NODE_FAIL"),
        "{renewed}"
    );
    assert!(
        !renewed["event"]["proof"].as_str().unwrap().is_empty(),
        "{renewed}"
    );
    let next_job = renewed["event"]["allocation"]["job_id"].as_u64().unwrap() as u32;
    let _next = multinode::Job {
        cluster: &c,
        id: next_job,
    };
    // The successor runs on a surviving node, from the count its predecessor saved.
    wait_for("the successor to start", STEP_BOUND, || {
        p.starts(&successor).lines().count() == 2
    });
    let starts = p.starts(&successor);
    let lines: Vec<Vec<&str>> = starts.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines[0][..2], ["1", "0"], "{starts}");
    assert_eq!(lines[1][0], "2", "{starts}");
    // From its checkpoint at 20, or from a later one if Slurm's end let it save again (22.05
    // once signalled the step as the job ended): never less, never more than it counted.
    let resumed: u64 = lines[1][1].parse().unwrap();
    let counted: u64 = std::fs::read_to_string(p.state_of(&counter).join("count"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        (20..=counted).contains(&resumed),
        "{starts}; counted {counted}"
    );
    assert_ne!(lines[1][2], lost, "{starts}");
    let status = p.json(&["pool", "status", "p", "--json"]);
    assert_eq!(status["pools"][0]["renewal"]["generation"], 2, "{status}");
    assert_eq!(
        status["pools"][0]["allocation"]["job_id"], next_job,
        "{status}"
    );
    p.release_and_audit();
    drop(revive);
}

/// Every job of this cluster whose name starts with the prefix (a pool's allocations, the successor
/// a renewal asked for included) is cancelled when dropped, also when the test panics.
struct JobsNamed<'c>(&'c Cluster, String);

impl Drop for JobsNamed<'_> {
    fn drop(&mut self) {
        let listed = output(
            self.0.slurm("squeue", &["--me", "-h", "-o", "%A|%j"]),
            STEP_BOUND,
        );
        let ids: Vec<String> = text(&listed.stdout)
            .lines()
            .filter_map(|l| l.split_once('|'))
            .filter(|(_, name)| name.starts_with(&self.1))
            .map(|(id, _)| id.to_owned())
            .collect();
        if !ids.is_empty() {
            let mut c = self.0.slurm("scancel", &[]);
            c.args(&ids);
            crate::support::run_bounded(&mut c, Duration::from_secs(30));
        }
    }
}

/// Issue 38's done-when "a `high` job preempts the pool's allocation": a pool created with
/// `--renew` on node3 (all its CPUs), holding a counter (PREEMPT_COUNTER) that asked `--continue
/// 1 --continue-on preempted`, is preempted by a `high` job that needs node3. `reconcile`, run
/// every few seconds as scrontab would: in the grace `pool status --refresh` shows the
/// allocation preempted and the worker checkpoints (its supervisor finishes while Slurm still
/// shows the allocation RUNNING); nothing is continued into the dying allocation; the end is
/// recorded with Slurm's `PREEMPTED`; the next allocation is asked for (no dependency: the last
/// is proven over) and waits while the `high` job holds node3; once that is cancelled it becomes
/// the pool's (generation 2, cause `preempted`) and the counter goes on there from the count it
/// saved. `inspect` shows both generations; the audit is clean.
#[test]
fn a_high_job_preempts_a_renewing_pool_and_its_worker_goes_on_in_the_next_allocation() {
    let c = Cluster::require();
    let grace = preemption_on();
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let state = tmp.path().join("state");
    let prefix = format!("dispatch-mnrp{}-", std::process::id() % 100_000);
    let config = tmp.path().join("config.toml");
    std::fs::write(&config, format!("job_name_prefix = \"{prefix}\"\n")).unwrap();
    let _jobs = JobsNamed(&c, prefix.clone());
    let cfg = config.to_str().unwrap();
    let d = |args: &[&str]| dispatch_json(&c, &state, &[&["--config", cfg], args].concat());
    let cpus = c.cpus.to_string();
    let created = d(&[
        "pool",
        "create",
        "rp",
        "--nodelist",
        "node3",
        "--cpus",
        &cpus,
        "--mem",
        "500M",
        "--time",
        "10",
        "--wait",
        "60",
        "--renew",
        "--json",
    ]);
    let first = created["allocation"]["job_id"].as_u64().unwrap();
    let worker = d(&[
        &[
            "pool", "submit", "rp", "--cpus", "1", "--mem", "100M", "--name", "counter",
        ][..],
        &CONTINUED_IF_PREEMPTED,
        &["--json", "--", "sh", "-c", PREEMPT_COUNTER],
    ]
    .concat());
    let first_id = worker["submission_id"].as_str().unwrap().to_owned();
    let dirs_of =
        |id: &str| dispatch::worker::dirs::WorkerDirs::of(&state, Some("rp"), id.parse().unwrap());
    let journal_of = |id: &str| {
        dispatch::worker::report::read(&dirs_of(id).evidence)
            .ok()
            .flatten()
    };
    wait_for("the counter starts", STEP_BOUND, || {
        journal_of(&first_id).is_some_and(|r| r.started.is_some())
    });
    std::thread::sleep(Duration::from_secs(3));

    let high = preempt_node(&c, "node3", &format!("{prefix}preemptor"));

    // In the grace: shown preempted; the worker checkpoints while Slurm still runs the job.
    let t0 = Instant::now();
    let mut preempted = serde_json::Value::Null;
    while preempted.is_null() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no grace shown");
        let s = d(&["pool", "status", "rp", "--refresh", "--json"]);
        preempted = s["pools"][0]["allocation"]["preempted"].clone();
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_for("the worker checkpoints in the grace", grace, || {
        journal_of(&first_id).is_some_and(|r| r.checkpoint.is_some() && r.finished.is_some())
    });
    let during = show_job(&c, first as u32);
    assert_eq!(during["JobState"], "RUNNING", "in its grace: {during:?}");
    assert_eq!(
        preempted["ends_at"],
        during["EndTime"].as_str(),
        "{during:?}"
    );
    let r = d(&["reconcile", "--json"]);
    let decided = |kind: &str| journal_events(&c, &state, kind);
    assert!(
        decided("WorkerContinued").is_empty() && decided("ContinuationRefused").is_empty(),
        "nothing is decided while the allocation is in its grace: {r}"
    );

    // Killed at the grace's end: recorded with Slurm's proof, the next one asked for at once.
    let mut asked = Vec::new();
    wait_for(
        "the next allocation is asked for",
        grace + Duration::from_secs(90),
        || {
            let r = d(&["reconcile", "--json"]);
            asked.extend(
                r["renewals"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|l| l["outcome"] == "asked")
                    .cloned(),
            );
            !asked.is_empty()
        },
    );
    let ended = journal_events(&c, &state, "PoolAllocationEnded");
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert!(
        ended[0]["proof"].as_str().unwrap().contains("PREEMPTED"),
        "{ended:?}"
    );
    let second = asked[0]["job_id"].as_u64().unwrap();
    assert_ne!(second, first);
    let intent = journal_events(&c, &state, "PoolRenewalIntent");
    assert!(
        intent[0]["after"].is_null(),
        "no dependency on a job proven over: {intent:?}"
    );
    // It waits while the high job holds node3; so does the counter's continuation.
    let r = d(&["reconcile", "--json"]);
    assert_eq!(r["renewals"][0]["outcome"], "waiting", "{r}");
    assert!(decided("WorkerContinued").is_empty(), "{r}");

    drop(high);
    let mut continued = Vec::new();
    let mut renewed = Vec::new();
    let t1 = Instant::now();
    while continued.is_empty() {
        let r = d(&["reconcile", "--json"]);
        assert!(
            t1.elapsed() < Duration::from_secs(90),
            "not renewed and continued: {r}; {}",
            d(&["pool", "status", "rp", "--refresh", "--json"])
        );
        let lines = |key: &str, outcome: &str| -> Vec<serde_json::Value> {
            r[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|l| l["outcome"] == outcome)
                .cloned()
                .collect()
        };
        renewed.extend(lines("renewals", "renewed"));
        continued.extend(lines("continued", "continued"));
        std::thread::sleep(Duration::from_secs(2));
    }
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    assert_eq!(renewed[0]["job_id"], second, "{renewed:?}");
    let made = journal_events(&c, &state, "PoolRenewed");
    assert_eq!(made[0]["cause"], "preempted", "{made:?}");
    assert!(
        made[0]["proof"].as_str().unwrap().contains("PREEMPTED"),
        "{made:?}"
    );
    let receipts = journal_events(&c, &state, "WorkerContinued");
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!(receipts[0]["cause"], "preempted", "{receipts:?}");
    let second_id = continued[0]["submission_id"].as_str().unwrap().to_owned();

    // Generation 2 runs in the new allocation and counts on from the saved count.
    let status = d(&["pool", "status", "rp", "--json"]);
    let p = &status["pools"][0];
    assert_eq!(p["allocation"]["job_id"], second, "{p}");
    assert_eq!(p["renewal"]["generation"], 2, "{p}");
    let w = p["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["submission_id"] == second_id.as_str())
        .unwrap_or_else(|| panic!("{second_id} not in {p}"));
    assert_eq!(w["generation"], 2, "{w}");
    wait_for("generation 2 starts", STEP_BOUND, || {
        journal_of(&second_id).is_some_and(|r| r.started.is_some())
    });
    std::thread::sleep(Duration::from_secs(3));
    d(&[
        "pool",
        "stop-worker",
        "rp",
        "counter",
        "--grace",
        "5",
        "--json",
    ]);
    let mut cmd = c.dispatch(&state);
    cmd.args(["inspect", &second_id, "--json"]);
    let inspect = text(&output(cmd, STEP_BOUND).stdout);
    assert_counted_in_two_generations(&dirs_of(&second_id).state, &inspect);
    let chain = &serde_json::from_str::<serde_json::Value>(&inspect).unwrap()["chain"];
    assert_eq!(chain[1]["generation"], 2, "{chain}");
    assert_eq!(chain[1]["continued_after"], "preempted", "{chain}");
    let released = d(&["pool", "release", "rp", "--json"]);
    assert_eq!(released["job_id"], second, "{released}");
    let mut cmd = c.dispatch(&state);
    cmd.args(["audit", "--json"]);
    let audit = output(cmd, STEP_BOUND);
    assert!(audit.status.success(), "{}", text(&audit.stdout));
}

/// dispatch's `session …` on this cluster with the config `tmp/config.toml` and the session
/// files under `tmp/cache`: its exit status, stdout and stderr.
fn session_cmd(c: &Cluster, tmp: &std::path::Path, args: &[&str]) -> std::process::Output {
    let config = tmp.join("config.toml");
    let mut cmd = c.dispatch(&tmp.join("state"));
    cmd.arg("--config").arg(&config).args(args);
    cmd.env("XDG_CACHE_HOME", tmp.join("cache"));
    output(cmd, Duration::from_secs(120))
}

/// As [`session_cmd`], which must succeed: its JSON document (`--json` given by the caller),
/// and its stderr.
fn session_json(c: &Cluster, tmp: &std::path::Path, args: &[&str]) -> (serde_json::Value, String) {
    let out = session_cmd(c, tmp, args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "dispatch {args:?}: {stdout}{stderr}");
    let doc = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("dispatch {args:?}: {e}: {stdout}"));
    (doc, stderr)
}

/// Issue 38, item 3 for sessions: a session's batch job in QOS `normal` (the target pins it)
/// is preempted by a `high` job that needs its whole node. In the grace `sessions` shows it
/// preempted with Slurm's `PreemptTime` and `EndTime`, and a launch keeps it (reused, never a
/// second job beside it) saying when it ends. Once Slurm shows it PREEMPTED, the next launch
/// records its end as `preempted` with squeue's words (`SessionCleared`) and submits a new
/// job, which runs on another node. Every job made here is cancelled, also on failure.
#[test]
fn a_preempted_session_job_is_kept_in_its_grace_and_its_end_recorded_preempted() {
    let c = Cluster::require();
    let grace = preemption_on();
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let prefix = unique_name("mn-sess");
    let prefix = format!("{prefix}-");
    std::fs::write(
        tmp.path().join("config.toml"),
        format!(
            "job_name_prefix = \"{prefix}\"\n\n[targets.dbg]\npartition = \"debug\"\n\
             account = \"dev\"\nqos = \"normal\"\ntime = \"00:10:00\"\nmem = \"100M\"\n\
             confined = true\n"
        ),
    )
    .unwrap();
    let name = format!("{prefix}m");
    let launch = [
        "--json",
        "session",
        "launch",
        "m",
        "-T",
        "dbg",
        "--detached",
    ];
    let (first, _) = session_json(&c, tmp.path(), &launch);
    let first_job = Job {
        cluster: &c,
        id: first["job_id"].as_u64().expect("a job id") as u32,
    };
    let node = first["node"].as_str().expect("its node").to_owned();

    let high = preempt_node(&c, &node, &unique_name("mn-sess-preemptor"));
    let mut entry = serde_json::Value::Null;
    let t0 = Instant::now();
    while entry["preempted"].is_null() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "sessions shows no grace: {entry}; scontrol: {:?}; high job: {:?}",
            show_job(&c, first_job.id),
            show_job(&c, high.id)
        );
        std::thread::sleep(Duration::from_millis(500));
        let (r, _) = session_json(&c, tmp.path(), &["--json", "sessions"]);
        entry = r["targets"][0]["jobs"][0].clone();
    }
    let during = show_job(&c, first_job.id);
    assert_eq!(entry["job_id"], first_job.id, "{entry}");
    assert_eq!(entry["preempted"]["at"], during["PreemptTime"].as_str());
    assert_eq!(entry["preempted"]["ends_at"], during["EndTime"].as_str());
    let table = text(&session_cmd(&c, tmp.path(), &["sessions"]).stdout);
    assert!(table.contains("preempted, ends at"), "{table}");
    // Live in its grace: kept, no second job, and the launch says until when.
    let (kept, said) = session_json(&c, tmp.path(), &launch);
    assert_eq!(kept["action"], "reused", "{kept}");
    assert_eq!(kept["job_id"], first_job.id, "{kept}");
    assert_eq!(kept["preempted"], entry["preempted"], "{kept}");
    assert!(said.contains("preempted, ends at"), "{said}");

    wait_for(
        "Slurm shows the session's job PREEMPTED",
        grace + Duration::from_secs(90),
        || {
            show_job(&c, first_job.id)
                .get("JobState")
                .map(String::as_str)
                == Some("PREEMPTED")
        },
    );
    let (next, said) = session_json(&c, tmp.path(), &launch);
    let next_job = Job {
        cluster: &c,
        id: next["job_id"].as_u64().expect("a new job") as u32,
    };
    assert_ne!(next_job.id, first_job.id);
    assert_eq!(next["action"], "submitted", "{next}");
    assert_eq!(next["ended"]["cause"], "preempted", "{next} {said}");
    let proof = format!("squeue shows job {} PREEMPTED", first_job.id);
    assert_eq!(next["ended"]["proof"], proof.as_str(), "{next}");
    let cleared = journal_events(&c, &tmp.path().join("state"), "SessionCleared");
    assert_eq!(
        cleared
            .iter()
            .map(|e| e["reason"].clone())
            .collect::<Vec<_>>(),
        [serde_json::Value::from(format!("preempted: {proof}"))],
        "{cleared:?}"
    );
    assert_ne!(
        next["node"],
        node.as_str(),
        "{next}: the high job holds {node}"
    );
    let out = session_cmd(
        &c,
        tmp.path(),
        &["session", "release", "m", "-T", "dbg", "--yes"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    drop(high);
    let listed = output(
        c.slurm(
            "squeue",
            &[
                "-h",
                "-t",
                "PENDING,RUNNING",
                "--name",
                &name,
                "-o",
                "%i %T",
            ],
        ),
        STEP_BOUND,
    );
    assert!(
        text(&listed.stdout).trim().is_empty(),
        "{}",
        text(&listed.stdout)
    );
}
