//! Issue 38 item 2 on the real cluster: a pool created with `--time 3 --renew-max 2`, no
//! workers. `reconcile`, run every few seconds as a user's scrontab or `--watch` would, asks
//! for the second allocation before the first ends (`--dependency=afterany`), and makes it the
//! pool's only once the first is proven over: Slurm starts it no earlier than the first ended
//! (sacct), `pool status` shows generation 2, and `pool release` ends it with proof.

mod real_cluster;
mod support;

use std::time::{Duration, Instant};

use real_cluster::{
    assert_started_after_end, cancel_jobs_named, create_renewing_pool, dispatch_with_config, json,
    release_with_proof_then_audit, require_cluster, Run,
};

const PREFIX: &str = "dtrn-";

struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        cancel_jobs_named(&self.0);
    }
}

fn run(sd: &std::path::Path, config: &std::path::Path, args: &[&str]) -> Run {
    dispatch_with_config(sd, config, args)
}

#[test]
fn a_renewing_pool_gets_its_second_allocation_only_after_the_first_is_over() {
    let _cluster = require_cluster();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("job_name_prefix = \"{PREFIX}\"\n")).unwrap();
    let sd = dir.path().join("state");
    let pool = format!("rn{}", std::process::id() % 100_000);
    let _cleanup = Cleanup(format!("{PREFIX}pool-{pool}-"));
    let first = create_renewing_pool(&sd, &config, &pool);

    // Reconcile every 5 s until the pool is on its second allocation (the first's 3 minutes,
    // and a margin for Slurm's scheduling and the end's proof).
    let deadline = Instant::now() + Duration::from_secs(330);
    let mut asked = Vec::new();
    let second = loop {
        assert!(Instant::now() < deadline, "not renewed in time: {asked:?}");
        let r = run(&sd, &config, &["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let r = json(&r.stdout);
        let line = r["renewals"].get(0).cloned().unwrap_or_default();
        if line["outcome"] == "asked" {
            asked.push(line["job_id"].as_u64().unwrap());
        }
        if line["outcome"] == "renewed" {
            break line["job_id"].as_u64().unwrap();
        }
        std::thread::sleep(Duration::from_secs(5));
    };
    assert_eq!(asked, vec![second], "one successor, asked once");
    let status = json(&run(&sd, &config, &["pool", "status", &pool, "--json"]).stdout);
    let p = &status["pools"][0];
    assert_eq!(p["allocation"]["job_id"], second, "{p}");
    assert_eq!(p["renewal"]["generation"], 2, "{p}");
    // Slurm started the second no earlier than the first ended.
    assert_started_after_end(second, first);
    release_with_proof_then_audit(&sd, &config, &pool, second);
}
