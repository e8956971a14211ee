//! Multi-node pool benchmarks (`cargo bench --bench multinode`), each reported against a limit
//! measured in the same run:
//! - `pool submit` of a trivial worker on a 3-node pool (the real multi-node dev cluster of the
//!   Slurm on `PATH`, `tools/slurm-dev-cluster --nodes 3`) vs the bare step launch it wraps on
//!   the same node, `srun --jobid=J --nodes=1 --nodelist=NODE --exact -n1 -c1 --mem=10M true`:
//!   medians, target 1.1x;
//! - placement from 1 to 64 nodes: `pool submit --dry-run` against the fake Slurm, on a pool
//!   whose every node but the last is full (so placement looks at all of them), wall time
//!   (target: flat), and the placement decision alone, in-process.
//!
//! `DISPATCH_BENCH_QUICK=1` does fewer rounds.

#[path = "timing/mod.rs"]
mod timing;
use timing::{median, run_ok};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use chrono::TimeZone;
use dispatch::event::pool::*;
use dispatch::event::{Event, Micros};
use dispatch::journal::{Options, Writer};
use dispatch::policy::placement;
use dispatch::policy::pool::{AllocationFacts, Nodes};
use dispatch::slurm::{JobId, NodeShare};
use dispatch::state::pool::{Pools, Resources};
use uuid::Uuid;

const JOB: u32 = 900;
const CPUS_PER_NODE: u32 = 4;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The multi-node dev cluster's client environment (`SLURM_CONF`, its commands' directory).
fn cluster_env() -> (String, String) {
    let version = Command::new("scontrol")
        .arg("--version")
        .output()
        .expect("scontrol");
    let version = String::from_utf8_lossy(&version.stdout);
    let release: String = version
        .split_whitespace()
        .nth(1)
        .map(|v| v.split('.').take(2).collect::<Vec<_>>().join("."))
        .expect("scontrol --version");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/slurm-dev-cluster");
    let out = Command::new(script)
        .args(["--slurm", &release, "--nodes", "3", "env"])
        .output()
        .expect("slurm-dev-cluster env");
    assert!(
        out.status.success(),
        "start the multi-node cluster: tools/slurm-dev-cluster --slurm {release} start --nodes 3"
    );
    let env = String::from_utf8_lossy(&out.stdout).into_owned();
    let get = |k: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {env}"))
            .to_owned()
    };
    (get("SLURM_CONF"), get("SLURM_DEV_MULTI_BIN"))
}

fn in_cluster(program: impl AsRef<std::ffi::OsStr>, (conf, bin): &(String, String)) -> Command {
    let mut c = Command::new(program);
    c.env("SLURM_CONF", conf).env(
        "PATH",
        format!("{bin}:{}", std::env::var("PATH").unwrap_or_default()),
    );
    c
}

/// The bare step launch and `pool submit`, alternated, on node2 of a 3-node pool.
fn submit_vs_bare(rounds: usize) -> (Duration, Duration) {
    let env = cluster_env();
    let out = in_cluster("salloc", &env)
        .args([
            "--no-shell",
            "--immediate=30",
            "-t",
            "10",
            "-N3",
            "--ntasks-per-node=4",
        ])
        .args(["--mem=2000", "-J", "dispatch-bench-multinode"])
        .output()
        .expect("salloc");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let job: u32 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("salloc: Granted job allocation "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("salloc: {stderr}"));
    struct Cancel<'a>(u32, &'a (String, String));
    impl Drop for Cancel<'_> {
        fn drop(&mut self) {
            let _ = in_cluster("scancel", self.1)
                .arg(self.0.to_string())
                .status();
        }
    }
    let _cancel = Cancel(job, &env);
    let state = tempfile::tempdir().unwrap();
    let dispatch = || {
        let mut c = in_cluster(env!("CARGO_BIN_EXE_dispatch"), &env);
        c.arg("--state-dir").arg(state.path());
        c
    };
    run_ok(dispatch().args(["pool", "attach", "b", "--job", &job.to_string()]));
    let (mut bare, mut submit) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        bare.push(run_ok(in_cluster("srun", &env).args([
            &format!("--jobid={job}"),
            "--nodes=1",
            "--nodelist=node2",
            "--exact",
            "-n1",
            "-c1",
            "--mem=10M",
            "true",
        ])));
        submit.push(run_ok(dispatch().args([
            "pool",
            "submit",
            "b",
            "--cpus",
            "1",
            "--mem",
            "10M",
            "--node",
            "node2",
            "--name",
            &format!("w{i}"),
            "--",
            "true",
        ])));
        // Release it, so that node2 never fills up.
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let out = dispatch().args(["reconcile", "--json"]).output().unwrap();
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let done = r["resolved"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x["worker"] == format!("w{i}")));
            if done {
                break;
            }
            assert!(Instant::now() < until, "w{i} was not released");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    (median(bare), median(submit))
}

fn share(name: String) -> NodeShare {
    NodeShare {
        name,
        cpus: CPUS_PER_NODE,
        mem_mb: 8000,
        gpus: vec![0, 1],
    }
}

/// The journal of pool `p` on job [`JOB`] over `nodes` nodes, every node but the last full.
fn full_pool_events(nodes: u32, start: Micros) -> Vec<Event> {
    let job = JobId::new(JOB).unwrap();
    let mut events = vec![
        Event::PoolAttached(PoolAttached {
            pool: "p".into(),
            allocation: Allocation {
                job_id: job,
                node: format!("n[1-{nodes}]"),
                user: "root".into(),
                start_time: start,
                end_time: Micros::from_secs(start.secs() + 3600),
                cpus: CPUS_PER_NODE * nodes,
                mem_mb: 8000 * u64::from(nodes),
                partition: "debug".into(),
                account: "dev".into(),
                qos: "normal".into(),
            },
        }),
        Event::PoolNodes(PoolNodes {
            pool: "p".into(),
            job_id: job,
            nodes: (1..=nodes).map(|n| share(format!("n{n}"))).collect(),
        }),
    ];
    for node in 1..nodes {
        for k in 0..CPUS_PER_NODE {
            let id = Uuid::from_u128(u128::from(node * 100 + k));
            events.push(Event::WorkerSubmitIntent(WorkerSubmitIntent {
                pool: "p".into(),
                worker: format!("w{node}-{k}"),
                submission_id: id,
                cpus: 1,
                mem_mb: 10,
                publication_timeout_s: 30,
                command: vec!["true".into()],
            }));
            events.push(Event::WorkerPlaced(WorkerPlaced {
                submission_id: id,
                node: format!("n{node}"),
                gpus: 0,
            }));
        }
    }
    events
}

/// `scontrol --oneliner --details show job` of that allocation, as the fake Slurm answers.
fn show_job(nodes: u32, start: Micros) -> String {
    let local = |m: Micros| {
        chrono::Local
            .timestamp_opt(m.secs(), 0)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    format!(
        "JobId={JOB} JobName=alloc UserId=root(0) Account=dev QOS=normal JobState=RUNNING \
         StartTime={} EndTime={} Partition=debug NodeList=n[1-{nodes}] NumNodes={nodes} \
         NumCPUs={} TRES=cpu={},mem={}M,node={nodes} JOB_GRES=gpu:fake:{} Nodes=n[1-{nodes}] \
         CPU_IDs=0-3 Mem=8000 GRES=gpu:fake:2(IDX:0-1) MinCPUsNode=4 Command=(null)\n",
        local(start),
        local(Micros::from_secs(start.secs() + 3600)),
        CPUS_PER_NODE * nodes,
        CPUS_PER_NODE * nodes,
        8000 * nodes,
        2 * nodes
    )
}

/// Median wall time of `pool submit --dry-run` (fake Slurm) on a pool of `nodes` nodes whose
/// free node is the last.
fn dry_run_placement(nodes: u32, rounds: usize) -> Duration {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let start = Micros::from_secs(Micros::now().secs() - 60);
    let w = Writer::open(&state.join("journal"), Options::default()).unwrap();
    w.append(full_pool_events(nodes, start)).unwrap();
    drop(w);
    let scenario = serde_json::json!({"scontrol": [{"stdout": show_job(nodes, start)}]});
    std::fs::write(tmp.path().join("s.json"), scenario.to_string()).unwrap();
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/fake-slurm/bin");
    let times = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
                .arg("--state-dir")
                .arg(&state)
                .args([
                    "pool", "submit", "p", "--cpus", "1", "--mem", "10M", "--gpus", "1",
                ])
                .args(["--dry-run", "--json", "--", "true"])
                .env("PATH", format!("{}:/usr/bin:/bin", fake.display()))
                .env("FAKE_SLURM_SCENARIO", tmp.path().join("s.json"))
                .output()
                .unwrap();
            let took = t.elapsed();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(plan["node"], format!("n{nodes}"), "{plan}");
            took
        })
        .collect();
    median(times)
}

/// The placement decision alone (each node's room, then the first that fits), in-process.
fn placement_alone(nodes: u32) -> Duration {
    let start = Micros::from_secs(1_800_000_000);
    let mut pools = Pools::default();
    for e in full_pool_events(nodes, start) {
        match e {
            Event::PoolAttached(e) => pools.attach(start, &e),
            Event::PoolNodes(e) => pools.nodes(&e),
            Event::WorkerSubmitIntent(e) => pools.submit(start, &e),
            Event::WorkerPlaced(e) => pools.placed(&e),
            _ => unreachable!(),
        }
    }
    let pool = &pools.pools["p"];
    let facts = AllocationFacts {
        job_id: pool.allocation.job_id,
        state: "RUNNING".into(),
        user: "root".into(),
        nodes: Nodes::Several(pool.allocation.node.clone()),
        start_time: Some(start),
        end_time: Some(pool.allocation.end_time),
        cpus: pool.allocation.cpus,
        mem_mb: pool.allocation.mem_mb,
        partition: "debug".into(),
        account: "dev".into(),
        qos: "normal".into(),
        comment: String::new(),
        shares: pool.node_shares(),
    };
    let need = Resources {
        cpus: 1,
        mem_mb: 10,
        gpus: 1,
    };
    const CALLS: u32 = 2000;
    let t = Instant::now();
    for _ in 0..CALLS {
        let rooms = placement::node_rooms(pool, &facts.live_shares());
        let node = placement::place(&rooms, need, None).unwrap();
        assert_eq!(node.len(), format!("n{nodes}").len());
    }
    t.elapsed() / CALLS
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var_os("DISPATCH_BENCH_QUICK").is_some();
    let rounds = if quick { 3 } else { 11 };
    let (bare, submit) = submit_vs_bare(rounds);
    let ratio = submit.as_secs_f64() / bare.as_secs_f64();
    println!(
        "3-node pool, trivial worker on node2 (median of {rounds}): bare srun -N1 -w --exact {:.1} ms   \
         pool submit {:.1} ms   ratio {ratio:.2}x (target <= 1.10x)",
        ms(bare),
        ms(submit)
    );
    let mut flat = Vec::new();
    for nodes in [1u32, 8, 64] {
        let dry = dry_run_placement(nodes, if quick { 3 } else { 9 });
        let alone = placement_alone(nodes);
        println!(
            "  {nodes:>3} nodes: pool submit --dry-run (fake Slurm) {:.1} ms   placement alone {:.1} us",
            ms(dry),
            alone.as_secs_f64() * 1e6
        );
        flat.push(serde_json::json!({
            "nodes": nodes,
            "dry_run_ms": ms(dry),
            "placement_us": alone.as_secs_f64() * 1e6,
        }));
    }
    let first = flat[0]["dry_run_ms"].as_f64().unwrap();
    let last = flat[2]["dry_run_ms"].as_f64().unwrap();
    println!(
        "{}",
        serde_json::json!({
            "bench": "pool-multinode",
            "submit_over_bare": ratio,
            "bare_ms": ms(bare),
            "submit_ms": ms(submit),
            "dry_run_64_over_1": last / first,
            "placement": flat,
        })
    );
}
