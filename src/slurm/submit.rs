//! What sbatch and salloc print when they create a job, and when they definitely did not.

use serde::{Deserialize, Serialize};

use super::error::{ParseError, Parsed};
use super::ids::JobId;

/// `sbatch --parsable` accepted a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    pub job_id: JobId,
    /// The cluster name of `id;cluster` (federation / multi-cluster), if printed.
    pub cluster: Option<String>,
}

/// Parses `sbatch --parsable` stdout: the last non-empty line is `id` or `id;cluster`.
/// Earlier lines (site banners, warnings) are ignored.
pub fn parse_sbatch_parsable(stdout: &str) -> Result<Submitted, ParseError> {
    let err = |reason: &str| ParseError::new(Parsed::SbatchOutput, stdout, reason);
    let last = stdout
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .ok_or_else(|| err("no output"))?;
    let (id, cluster) = match last.split_once(';') {
        Some((id, cluster)) => {
            let cluster = cluster.trim();
            if cluster.is_empty() || cluster.contains(';') {
                return Err(err("bad cluster part after ';'"));
            }
            (id.trim(), Some(cluster.to_owned()))
        }
        None => (last, None),
    };
    let job_id = JobId::parse(id).map_err(|e| e.within(Parsed::SbatchOutput, stdout))?;
    Ok(Submitted { job_id, cluster })
}

/// The job ids salloc mentioned on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SallocReport {
    /// From `Granted job allocation N`: the allocation exists and is ours.
    pub granted: Option<JobId>,
    /// From `Pending job allocation N`: a job was queued (and may still exist if salloc
    /// was killed before it could cancel it).
    pub pending: Option<JobId>,
}

impl SallocReport {
    /// Any job id salloc mentioned.
    pub fn job(&self) -> Option<JobId> {
        self.granted.or(self.pending)
    }
}

const GRANTED: &str = "Granted job allocation ";
const PENDING: &str = "Pending job allocation ";

/// Parses salloc's stderr. Conflicting ids (two different grants, or a grant for
/// another job than the pending one) are an error, never a guess.
pub fn parse_salloc(stderr: &str) -> Result<SallocReport, ParseError> {
    let mut report = SallocReport::default();
    for line in stderr.lines() {
        for (phrase, slot) in [
            (GRANTED, &mut report.granted),
            (PENDING, &mut report.pending),
        ] {
            if let Some(pos) = line.find(phrase) {
                let rest = &line[pos + phrase.len()..];
                let token = rest.split_whitespace().next().unwrap_or("");
                let id = JobId::parse(token).map_err(|e| e.within(Parsed::SallocOutput, stderr))?;
                if slot.is_some_and(|old| old != id) {
                    return Err(ParseError::new(
                        Parsed::SallocOutput,
                        stderr,
                        "two different job ids",
                    ));
                }
                *slot = Some(id);
            }
        }
    }
    if let (Some(g), Some(p)) = (report.granted, report.pending) {
        if g != p {
            return Err(ParseError::new(
                Parsed::SallocOutput,
                stderr,
                "granted and pending job ids differ",
            ));
        }
    }
    Ok(report)
}

/// The words with which Slurm refuses a job it did not create. Each is the whole message of
/// one stderr line after `PROGRAM: error: ` and an optional `Batch job submission failed: `
/// (sbatch) or `Job submit/allocate failed: ` (salloc). Recorded from the dev cluster
/// (Slurm 22.05, `tests/fixtures/slurm/real-{sbatch,salloc}-refused-*`) unless marked.
/// A message not in this table leaves the outcome unknown: only words we have seen mean
/// "nothing was created".
pub const REFUSALS: &[&str] = &[
    // `--partition=nope`, and a partition in the wrong case (`DEBUG` for `debug`).
    "Invalid partition name specified",
    // `--mem=999999G`: the first line names the cause, the second the controller's verdict.
    "Memory specification can not be satisfied",
    "Requested node configuration is not available",
    // `--constraint=nope`
    "Invalid feature specification",
    // `--nodelist=nonode`
    "Invalid node name specified",
    // `--gres=gpu:1` on a cluster without GRES (the client refuses before sending).
    "Invalid generic resource (gres) specification",
    // `--time=bad` (the client's option parser; exit 255).
    "Invalid --time specification",
    // Not reproducible here (the dev cluster has AccountingStorageEnforce=none, so it accepts
    // any account and QOS): Slurm's own texts for ESLURM_INVALID_ACCOUNT and
    // ESLURM_INVALID_QOS, as sites report them verbatim after `Batch job submission failed: `.
    "Invalid account or account/partition combination specified",
    "Invalid qos specification",
];

/// Words that mean the conversation with the controller broke: whatever else stderr says,
/// the controller may have acted (a lost reply to an accepted submission looks like this).
const TRANSPORT: &[&str] = &[
    "socket timed out",
    "unable to contact slurm controller",
    "connection timed out",
    "connection refused",
    "connect failure",
    "zero bytes were transmitted",
    "communication connection failure",
    "temporarily unable",
    "transport endpoint",
    "insane message length",
    "resource temporarily unavailable",
];

const FAILED_PREFIXES: [&str; 2] = [
    "Batch job submission failed: ",
    "Job submit/allocate failed: ",
];

/// The refusal in `sbatch --test-only`'s answer: it says the controller's verdict as
/// `allocation failure: <text>` (22.05 and 24.11 here: `allocation failure: Requested node
/// configuration is not available` for `--mem=999999G`, `allocation failure: Invalid partition
/// name specified` for `--partition=nope`), not as `sbatch: error: …`. Only the texts of
/// [`REFUSALS`] count.
pub fn test_only_refusal(stderr: &str) -> Option<&'static str> {
    stderr.lines().find_map(|line| {
        let message = line.trim().strip_prefix("allocation failure: ")?.trim();
        REFUSALS.iter().copied().find(|r| *r == message)
    })
}

/// The recognised refusal in a failed sbatch/salloc answer, if it is one: a line saying a
/// phrase of [`REFUSALS`], no job id anywhere (stdout blank, no `Pending`/`Granted job
/// allocation N`, no `Submitted batch job`), and no word of a broken conversation. The
/// caller checks that the program exited non-zero on its own (not killed, not timed out).
pub fn refusal_phrase(stdout: &str, stderr: &str) -> Option<&'static str> {
    if !stdout.trim().is_empty() || stderr.contains("Submitted batch job") {
        return None;
    }
    if !matches!(parse_salloc(stderr), Ok(r) if r.job().is_none()) {
        return None;
    }
    let lower = stderr.to_lowercase();
    if TRANSPORT.iter().any(|t| lower.contains(t)) {
        return None;
    }
    stderr.lines().find_map(|line| {
        let (_, message) = line.split_once(": error: ")?;
        let message = FAILED_PREFIXES
            .iter()
            .find_map(|p| message.strip_prefix(p))
            .unwrap_or(message)
            .trim();
        REFUSALS.iter().copied().find(|r| *r == message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> JobId {
        JobId::new(n).unwrap()
    }

    #[test]
    fn a_test_only_refusal_is_read_from_its_allocation_failure_line() {
        for (stderr, refusal) in [
            (
                "allocation failure: Requested node configuration is not available\n",
                Some("Requested node configuration is not available"),
            ),
            (
                "sbatch: error: invalid partition specified: nope\nallocation failure: Invalid partition name specified\n",
                Some("Invalid partition name specified"),
            ),
            ("allocation failure: Socket timed out\n", None),
            ("sbatch: Job 3 to start at 2026-12-01T10:00:00 using 1 processors on nodes vm in partition debug\n", None),
        ] {
            assert_eq!(test_only_refusal(stderr), refusal, "{stderr:?}");
        }
    }
    use quickcheck::quickcheck;

    #[test]
    fn sbatch_cases() {
        let ok = |s: &str| parse_sbatch_parsable(s).unwrap();
        assert_eq!(ok("12345").job_id, id(12345));
        assert_eq!(ok("12345\n").job_id, id(12345));
        assert_eq!(ok("12345;brc").cluster.as_deref(), Some("brc"));
        assert_eq!(ok("12345;brc").job_id, id(12345));
        assert_eq!(ok("Note: maintenance Sunday\n12345\n\n").job_id, id(12345));
        for bad in [
            "",
            "\n",
            "sbatch: error: nonsense",
            "Submitted batch job 3",
            "12_345",
            "+12",
            "١٢",
            "12;",
            "12;a;b",
            "0",
            "12345 extra",
        ] {
            let e = parse_sbatch_parsable(bad).expect_err(bad);
            assert_eq!(e.raw, bad, "raw text kept");
        }
    }

    #[test]
    fn salloc_cases() {
        let granted = parse_salloc("salloc: Granted job allocation 1\n").unwrap();
        assert_eq!(granted.granted, Some(id(1)));
        let waited = parse_salloc(
            "salloc: Pending job allocation 4\nsalloc: job 4 queued and waiting for resources\n\
             salloc: job 4 has been allocated resources\nsalloc: Granted job allocation 4\n",
        )
        .unwrap();
        assert_eq!(
            waited,
            SallocReport {
                granted: Some(id(4)),
                pending: Some(id(4))
            }
        );
        let aborted = parse_salloc(
            "salloc: Pending job allocation 102\nsalloc: job 102 queued and waiting for resources\n\
             salloc: Job aborted due to signal\n",
        )
        .unwrap();
        assert_eq!(aborted.granted, None);
        assert_eq!(aborted.job(), Some(id(102)));
        assert_eq!(
            parse_salloc("salloc: error: Memory specification can not be satisfied\n").unwrap(),
            SallocReport::default()
        );
        for bad in [
            "salloc: Granted job allocation x",
            "salloc: Granted job allocation ",
            "salloc: Granted job allocation 1\nsalloc: Granted job allocation 2",
            "salloc: Pending job allocation 1\nsalloc: Granted job allocation 2",
            "salloc: Granted job allocation ١",
        ] {
            assert_eq!(parse_salloc(bad).unwrap_err().raw, bad);
        }
    }

    #[test]
    fn refusals() {
        let refused = |stderr: &str| refusal_phrase("", stderr);
        for (stderr, phrase) in [
            (
                "sbatch: error: invalid partition specified: nope\n\
                 sbatch: error: Batch job submission failed: Invalid partition name specified\n",
                "Invalid partition name specified",
            ),
            (
                "salloc: error: Memory specification can not be satisfied\n\
                 salloc: error: Job submit/allocate failed: Requested node configuration is not available\n",
                "Memory specification can not be satisfied",
            ),
            ("sbatch: error: Invalid --time specification\n", "Invalid --time specification"),
        ] {
            assert_eq!(refused(stderr), Some(phrase), "{stderr:?}");
        }
        for unknown in [
            "",
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n",
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
            "sbatch: error: Batch job submission failed: Something new\n",
            // The phrase without the `error:` framing, or with more words after it.
            "Invalid partition name specified\n",
            "sbatch: error: Batch job submission failed: Invalid partition name specified, maybe\n",
            // A job was queued before the refusal: it may exist.
            "salloc: Pending job allocation 7\nsalloc: error: Job submit/allocate failed: \
             Invalid partition name specified\n",
            // A transport failure anywhere makes it unknown.
            "sbatch: error: Socket timed out on send/recv operation\n\
             sbatch: error: Batch job submission failed: Invalid partition name specified\n",
            "sbatch: Submitted batch job 5\nsbatch: error: Invalid node name specified\n",
        ] {
            assert_eq!(refused(unknown), None, "{unknown:?}");
        }
        let stderr = "sbatch: error: Batch job submission failed: Invalid node name specified\n";
        assert_eq!(refusal_phrase("77\n", stderr), None, "a job id was printed");
    }

    quickcheck! {
        fn prop_never_panics(s: String) -> bool {
            let _ = parse_sbatch_parsable(&s);
            let _ = parse_salloc(&s);
            let _ = refusal_phrase(&s, &s);
            true
        }
        fn prop_sbatch_round_trip(n: u32) -> bool {
            match JobId::new(n) {
                Some(j) => parse_sbatch_parsable(&format!("{j}\n")).map(|s| s.job_id) == Ok(j),
                None => true,
            }
        }
    }
}
