//! What sbatch and salloc print when they create a job.

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

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    fn id(n: u32) -> JobId {
        JobId::new(n).unwrap()
    }

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

    quickcheck! {
        fn prop_never_panics(s: String) -> bool {
            let _ = parse_sbatch_parsable(&s);
            let _ = parse_salloc(&s);
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
