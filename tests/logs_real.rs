//! `dispatch logs -f` of a pool worker on the real dev cluster (`tools/slurm-dev-cluster
//! start`): it prints what the worker's step writes as it writes it, and ends by itself once
//! the worker's own journal records the payload's exit. Never skipped.

mod real_cluster;
mod support;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use real_cluster::{dispatch, dispatch_cmd, json, require_cluster, Allocation};

#[test]
fn logs_follow_prints_a_pool_workers_output_until_its_payload_exits() {
    let _cluster = require_cluster();
    let alloc = Allocation::salloc(
        "dispatch-logs-follow",
        &["-c", "2", "--mem", "1G", "--time", "20"],
    );
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();
    let attached = dispatch(sd, &["pool", "attach", "p", "--job", &alloc.id.to_string()]);
    assert_eq!(attached.code, 0, "{}", attached.stderr);
    let submitted = dispatch(
        sd,
        &[
            "pool",
            "submit",
            "p",
            "--cpus",
            "1",
            "--mem",
            "100M",
            "--name",
            "w",
            "--json",
            "--",
            "sh",
            "-c",
            "echo one; sleep 3; echo two; echo oops >&2",
        ],
    );
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    let id = json(&submitted.stdout)["submission_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let started = Instant::now();
    let mut child = dispatch_cmd(sd, &["logs", "w", "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("logs -f did not end after the payload exited");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = started.elapsed();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status:?}: {err}");
    let (one, two) = (out.find("one\n"), out.find("two\n"));
    assert!(one.is_some() && two > one, "{out:?}");
    assert!(err.contains("exited with code 0"), "{err}");
    eprintln!("logs -f ended {took:?} after it started");

    let errors = dispatch(sd, &["logs", &id[..8], "--stderr"]);
    assert_eq!(errors.code, 0, "{}", errors.stderr);
    assert!(errors.stdout.contains("oops\n"), "{:?}", errors.stdout);
}
