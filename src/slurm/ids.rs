//! Slurm job and step identifiers.
//!
//! Grammar accepted (what squeue `%i`, sacct `JobID`, scontrol and sbatch print):
//! ```text
//! id    := job ( '.' step )?
//! job   := N                      plain job            123
//!        | N '_' N                array element        123_4
//!        | N '_[' tasks ']'       pending array rest   123_[1-5%2]
//!        | N '+' N                het-job component    123+0
//! step  := N | 'batch' | 'extern' | 'interactive'
//! tasks := item ( ',' item )* ( '%' N )?      item := N | N '-' N
//! ```
//! Numbers are ASCII digits without leading zeros, so `Display` round-trips exactly.
//! Only [`JobId`] (a plain, non-zero job number) may be adopted or cancelled as a job.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::digits::{parse_u32_canonical, DigitsError};
use super::error::{ParseError, Parsed};

/// Longest id text we try to parse; Slurm ids are a few dozen bytes.
pub const MAX_ID_TEXT: usize = 4096;

/// Slurm reserves the top of the u32 range for the named steps (batch, extern, ...).
const MAX_NUMBERED_STEP: u32 = 0xFFFF_FFEF;

/// A plain job id: ASCII digits, non-zero, no array or het suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct JobId(u32);

impl JobId {
    /// `None` for 0, which Slurm never assigns.
    pub fn new(value: u32) -> Option<JobId> {
        (value != 0).then_some(JobId(value))
    }

    pub fn get(self) -> u32 {
        self.0
    }

    /// Parses a plain job id; anything else (arrays, het jobs, steps, whitespace) is an error.
    pub fn parse(s: &str) -> Result<JobId, ParseError> {
        let n = number(s, Parsed::JobId, s)?;
        JobId::new(n).ok_or_else(|| ParseError::new(Parsed::JobId, s, "job id 0 is not valid"))
    }
}

impl TryFrom<u32> for JobId {
    type Error = String;
    fn try_from(v: u32) -> Result<Self, String> {
        JobId::new(v).ok_or_else(|| "job id 0 is not valid".to_owned())
    }
}

impl From<JobId> for u32 {
    fn from(id: JobId) -> u32 {
        id.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for JobId {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        JobId::parse(s)
    }
}

/// The part after the `.` of a step id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StepKind {
    Numbered(u32),
    Batch,
    Extern,
    Interactive,
}

impl StepKind {
    pub fn parse(s: &str) -> Result<StepKind, ParseError> {
        match s {
            "batch" => Ok(StepKind::Batch),
            "extern" => Ok(StepKind::Extern),
            "interactive" => Ok(StepKind::Interactive),
            _ => {
                let n = number(s, Parsed::StepId, s)?;
                if n > MAX_NUMBERED_STEP {
                    return Err(ParseError::new(
                        Parsed::StepId,
                        s,
                        "step number in Slurm's reserved range",
                    ));
                }
                Ok(StepKind::Numbered(n))
            }
        }
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepKind::Numbered(n) => write!(f, "{n}"),
            StepKind::Batch => f.write_str("batch"),
            StepKind::Extern => f.write_str("extern"),
            StepKind::Interactive => f.write_str("interactive"),
        }
    }
}

/// A step of a plain job: what `scancel J.S` addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StepId {
    pub job: JobId,
    pub step: StepKind,
}

impl StepId {
    pub fn new(job: JobId, step: StepKind) -> StepId {
        StepId { job, step }
    }

    /// Parses `J.S` where J is a plain job id.
    pub fn parse(s: &str) -> Result<StepId, ParseError> {
        let id = SlurmId::parse(s).map_err(|e| e.within(Parsed::StepId, s))?;
        id.as_step()
            .ok_or_else(|| ParseError::new(Parsed::StepId, s, "not a step of a plain job"))
    }
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.job, self.step)
    }
}

impl FromStr for StepId {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        StepId::parse(s)
    }
}

/// One item of a pending array's task list: `4` or `1-5` (start <= end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskRange {
    start: u32,
    end: u32,
}

impl TaskRange {
    pub fn new(start: u32, end: u32) -> Option<TaskRange> {
        (start <= end).then_some(TaskRange { start, end })
    }
}

impl fmt::Display for TaskRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start)
        } else {
            write!(f, "{}-{}", self.start, self.end)
        }
    }
}

/// The bracketed task list of a pending array, e.g. `1-5%2` in `123_[1-5%2]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArrayTasks {
    ranges: Vec<TaskRange>,
    throttle: Option<u32>,
}

impl ArrayTasks {
    /// `None` when `ranges` is empty (Slurm never prints `123_[]`).
    pub fn new(ranges: Vec<TaskRange>, throttle: Option<u32>) -> Option<ArrayTasks> {
        (!ranges.is_empty()).then_some(ArrayTasks { ranges, throttle })
    }

    fn parse(inner: &str, whole: &str) -> Result<ArrayTasks, ParseError> {
        let (list, throttle) = match inner.split_once('%') {
            Some((list, t)) => (list, Some(number(t, Parsed::SlurmId, whole)?)),
            None => (inner, None),
        };
        let mut ranges = Vec::new();
        for item in list.split(',') {
            let range = match item.split_once('-') {
                Some((a, b)) => {
                    let a = number(a, Parsed::SlurmId, whole)?;
                    let b = number(b, Parsed::SlurmId, whole)?;
                    TaskRange::new(a, b).ok_or_else(|| {
                        ParseError::new(Parsed::SlurmId, whole, "array range runs backwards")
                    })?
                }
                None => {
                    let n = number(item, Parsed::SlurmId, whole)?;
                    TaskRange { start: n, end: n }
                }
            };
            ranges.push(range);
        }
        // split(',') always yields at least one item, and each item became a range.
        debug_assert!(!ranges.is_empty());
        Ok(ArrayTasks { ranges, throttle })
    }
}

impl fmt::Display for ArrayTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        if let Some(t) = self.throttle {
            write!(f, "%{t}")?;
        }
        Ok(())
    }
}

/// The job part of a [`SlurmId`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JobRef {
    Plain(JobId),
    ArrayTask { array: JobId, task: u32 },
    ArrayPending { array: JobId, tasks: ArrayTasks },
    HetComponent { leader: JobId, offset: u32 },
}

impl JobRef {
    /// The job number printed before any suffix.
    pub fn base(&self) -> JobId {
        match self {
            JobRef::Plain(j) => *j,
            JobRef::ArrayTask { array, .. } | JobRef::ArrayPending { array, .. } => *array,
            JobRef::HetComponent { leader, .. } => *leader,
        }
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobRef::Plain(j) => write!(f, "{j}"),
            JobRef::ArrayTask { array, task } => write!(f, "{array}_{task}"),
            JobRef::ArrayPending { array, tasks } => write!(f, "{array}_[{tasks}]"),
            JobRef::HetComponent { leader, offset } => write!(f, "{leader}+{offset}"),
        }
    }
}

/// Any job or step id Slurm prints.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlurmId {
    job: JobRef,
    step: Option<StepKind>,
}

impl SlurmId {
    /// `None` for a step of a pending array remainder, which Slurm cannot have.
    pub fn new(job: JobRef, step: Option<StepKind>) -> Option<SlurmId> {
        if step.is_some() && matches!(job, JobRef::ArrayPending { .. }) {
            return None;
        }
        Some(SlurmId { job, step })
    }

    pub fn job(&self) -> &JobRef {
        &self.job
    }

    pub fn step(&self) -> Option<StepKind> {
        self.step
    }

    /// The plain job id, only when this *is* a plain job (no array/het suffix, no step).
    /// Sessions adopt only these.
    pub fn as_plain(&self) -> Option<JobId> {
        match (&self.job, self.step) {
            (JobRef::Plain(j), None) => Some(*j),
            _ => None,
        }
    }

    /// `J.S` when this is a step of a plain job.
    pub fn as_step(&self) -> Option<StepId> {
        match (&self.job, self.step) {
            (JobRef::Plain(job), Some(step)) => Some(StepId { job: *job, step }),
            _ => None,
        }
    }

    pub fn parse(s: &str) -> Result<SlurmId, ParseError> {
        if s.len() > MAX_ID_TEXT {
            return Err(ParseError::new(Parsed::SlurmId, s, "id text too long"));
        }
        let (job_text, step) = match s.split_once('.') {
            Some((j, st)) => (
                j,
                Some(StepKind::parse(st).map_err(|e| e.within(Parsed::SlurmId, s))?),
            ),
            None => (s, None),
        };
        let job = if let Some((base, rest)) = job_text.split_once('_') {
            let array = job_number(base, s)?;
            if let Some(inner) = rest.strip_prefix('[') {
                let inner = inner
                    .strip_suffix(']')
                    .ok_or_else(|| ParseError::new(Parsed::SlurmId, s, "unclosed '['"))?;
                JobRef::ArrayPending {
                    array,
                    tasks: ArrayTasks::parse(inner, s)?,
                }
            } else {
                JobRef::ArrayTask {
                    array,
                    task: number(rest, Parsed::SlurmId, s)?,
                }
            }
        } else if let Some((base, offset)) = job_text.split_once('+') {
            JobRef::HetComponent {
                leader: job_number(base, s)?,
                offset: number(offset, Parsed::SlurmId, s)?,
            }
        } else {
            JobRef::Plain(job_number(job_text, s)?)
        };
        SlurmId::new(job, step).ok_or_else(|| {
            ParseError::new(
                Parsed::SlurmId,
                s,
                "a pending array range cannot have a step",
            )
        })
    }
}

impl fmt::Display for SlurmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.job)?;
        if let Some(step) = self.step {
            write!(f, ".{step}")?;
        }
        Ok(())
    }
}

/// Serialized as the text Slurm prints.
impl Serialize for SlurmId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SlurmId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        SlurmId::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl FromStr for SlurmId {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        SlurmId::parse(s)
    }
}

fn number(text: &str, what: Parsed, whole: &str) -> Result<u32, ParseError> {
    parse_u32_canonical(text).map_err(|e: DigitsError| {
        let reason = if text == whole {
            e.reason().to_owned()
        } else {
            format!("{:?}: {}", text, e.reason())
        };
        ParseError::new(what, whole, reason)
    })
}

fn job_number(text: &str, whole: &str) -> Result<JobId, ParseError> {
    let n = number(text, Parsed::SlurmId, whole)?;
    JobId::new(n).ok_or_else(|| ParseError::new(Parsed::SlurmId, whole, "job id 0 is not valid"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{quickcheck, Arbitrary, Gen};

    fn id(s: &str) -> SlurmId {
        SlurmId::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn every_shape_parses_and_round_trips() {
        for s in [
            "123",
            "123_4",
            "123_[1-5%2]",
            "5_[2,4%1]",
            "6_[1-3]",
            "7_[1-4%1]",
            "123+0",
            "123.4",
            "123.batch",
            "123.extern",
            "123.interactive",
            "4_1.batch",
            "123+1.0",
            "4294967295",
        ] {
            assert_eq!(id(s).to_string(), s);
        }
    }

    #[test]
    fn only_plain_ids_are_plain() {
        assert_eq!(id("123").as_plain(), JobId::new(123));
        for s in ["123_4", "123_[1-5%2]", "123+0", "123.4", "123.batch"] {
            assert_eq!(id(s).as_plain(), None, "{s}");
        }
        assert_eq!(
            id("123.4").as_step(),
            Some(StepId::new(JobId::new(123).unwrap(), StepKind::Numbered(4)))
        );
        assert_eq!(id("4_1.batch").as_step(), None);
    }

    #[test]
    fn refusals() {
        for s in [
            "",
            "0",
            "0123",
            "+1",
            " 1",
            "1 ",
            "12_345_6",
            "١٢٣",
            "１２３",
            "123_",
            "123_[",
            "123_[]",
            "123_[3-1]",
            "123_[1-5%]",
            "123_[1-5].0",
            "123.",
            "123.foo",
            "123.4.5",
            "123+",
            "123+a",
            "abc",
            "4294967296",
            "123.4294967290",
            "Submitted batch job 3",
        ] {
            assert!(SlurmId::parse(s).is_err(), "{s:?} should be refused");
        }
    }

    #[test]
    fn job_id_is_plain_only() {
        assert_eq!(JobId::parse("42").map(JobId::get), Ok(42));
        for s in ["0", "42_1", "42.0", "42+0", "", "4 2", "٤٢"] {
            let e = JobId::parse(s).unwrap_err();
            assert_eq!(e.raw, s);
        }
        assert_eq!("42".parse::<JobId>().unwrap().to_string(), "42");
    }

    #[test]
    fn step_id_parse() {
        let s = StepId::parse("9.1").unwrap();
        assert_eq!(s.to_string(), "9.1");
        assert!(StepId::parse("9").is_err());
        assert!(StepId::parse("9_1.0").is_err());
        assert_eq!(StepId::parse("9.batch").unwrap().step, StepKind::Batch);
    }

    #[test]
    fn slurm_id_serde_as_text() {
        let x = id("5_[2-4%1]");
        assert_eq!(serde_json::to_string(&x).unwrap(), "\"5_[2-4%1]\"");
        assert_eq!(serde_json::from_str::<SlurmId>("\"5_[2-4%1]\"").unwrap(), x);
        assert!(serde_json::from_str::<SlurmId>("\"5_\"").is_err());
    }

    #[test]
    fn job_id_serde_refuses_zero() {
        assert!(serde_json::from_str::<JobId>("0").is_err());
        assert_eq!(serde_json::from_str::<JobId>("7").unwrap().get(), 7);
        assert_eq!(serde_json::to_string(&JobId::new(7).unwrap()).unwrap(), "7");
    }

    #[derive(Clone, Debug)]
    struct AnyId(SlurmId);

    fn nonzero(g: &mut Gen) -> JobId {
        JobId::new(u32::arbitrary(g).max(1)).unwrap()
    }

    impl Arbitrary for AnyId {
        fn arbitrary(g: &mut Gen) -> AnyId {
            let job = match u8::arbitrary(g) % 4 {
                0 => JobRef::Plain(nonzero(g)),
                1 => JobRef::ArrayTask {
                    array: nonzero(g),
                    task: u32::arbitrary(g),
                },
                2 => {
                    let n = usize::arbitrary(g) % 5 + 1;
                    let ranges = (0..n)
                        .map(|_| {
                            let a = u32::arbitrary(g);
                            let b = u32::arbitrary(g);
                            TaskRange::new(a.min(b), a.max(b)).unwrap()
                        })
                        .collect();
                    let throttle = Option::<u32>::arbitrary(g);
                    JobRef::ArrayPending {
                        array: nonzero(g),
                        tasks: ArrayTasks::new(ranges, throttle).unwrap(),
                    }
                }
                _ => JobRef::HetComponent {
                    leader: nonzero(g),
                    offset: u32::arbitrary(g),
                },
            };
            let step = if matches!(job, JobRef::ArrayPending { .. }) {
                None
            } else {
                match u8::arbitrary(g) % 6 {
                    0 => Some(StepKind::Numbered(u32::arbitrary(g) % MAX_NUMBERED_STEP)),
                    1 => Some(StepKind::Batch),
                    2 => Some(StepKind::Extern),
                    3 => Some(StepKind::Interactive),
                    _ => None,
                }
            };
            AnyId(SlurmId::new(job, step).unwrap())
        }
    }

    quickcheck! {
        fn prop_display_parse_round_trip(x: AnyId) -> bool {
            SlurmId::parse(&x.0.to_string()) == Ok(x.0)
        }

        fn prop_job_id_round_trip(n: u32) -> bool {
            match JobId::new(n) {
                Some(j) => JobId::parse(&j.to_string()) == Ok(j),
                None => JobId::parse("0").is_err(),
            }
        }

        fn prop_never_panics(s: String) -> bool {
            let _ = SlurmId::parse(&s);
            let _ = JobId::parse(&s);
            let _ = StepId::parse(&s);
            true
        }

        fn prop_never_panics_on_id_alphabet(picks: Vec<u8>) -> bool {
            const ALPHABET: &[u8] = b"0123456789_[]-%+.,batchextern";
            let s: String = picks.iter().map(|p| ALPHABET[*p as usize % ALPHABET.len()] as char).collect();
            match SlurmId::parse(&s) {
                // Whatever parses prints to a text that parses to the same value.
                Ok(id) => SlurmId::parse(&id.to_string()) == Ok(id),
                Err(e) => e.raw == s,
            }
        }
    }
}
