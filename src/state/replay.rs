//! Replay to a point: the state as it was after one event, or at one moment. Pure: the events
//! and the cut are arguments; reading them from the journal is `ops::replay`'s job.
//!
//! A cut at a seq folds events 1..=seq. A cut at a time folds the longest prefix whose events
//! all carry a time at or before it: it stops at the first event recorded later, even if an
//! event after that one carries an earlier time (clocks of different hosts may disagree; the
//! journal's order is seq order, and state is a fold in that order, never a sort by time).
//! The state folds from seq 1: a snapshot covers the newest events, not any earlier point.

use chrono::NaiveDateTime;
use serde::Serialize;

use super::State;
use crate::event::ReduceError;
use crate::event::{Envelope, Micros};
use crate::next::Next::JournalVerify;

/// Where to cut the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// After the event with this seq.
    Seq(u64),
    /// After the last event of the prefix recorded at or before this time.
    Time(Micros),
}

/// The forms `--at` accepts, for messages and help.
pub const AT_FORMS: &str = "a seq (42), an RFC 3339 time (2026-12-01T10:30:00Z, \
    2026-12-01T11:30:00+01:00) or a local time YYYY-MM-DD HH:MM[:SS]";

impl Cut {
    /// `42` is a seq; `2026-12-01T10:30:00Z` (RFC 3339, any offset) a time; `2026-12-01 10:30`
    /// or `2026-12-01 10:30:15` (also with `T`, fractions of a second allowed) a time in the
    /// local zone, which `local` converts (it answers `None` for a time the zone skips).
    pub fn parse(
        text: &str,
        local: impl Fn(NaiveDateTime) -> Option<Micros>,
    ) -> Result<Cut, String> {
        let text = text.trim();
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return match text.parse::<u64>() {
                Ok(0) => Err("seq 0 names no event; the first event is seq 1".to_owned()),
                Ok(seq) => Ok(Cut::Seq(seq)),
                Err(_) => Err(format!("seq {text} is out of range")),
            };
        }
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
            return Ok(Cut::Time(Micros(t.timestamp_micros())));
        }
        for form in [
            "%Y-%m-%d %H:%M:%S%.f",
            "%Y-%m-%dT%H:%M:%S%.f",
            "%Y-%m-%d %H:%M",
            "%Y-%m-%dT%H:%M",
        ] {
            if let Ok(t) = NaiveDateTime::parse_from_str(text, form) {
                return local(t)
                    .map(Cut::Time)
                    .ok_or_else(|| format!("{text} does not exist in the local time zone"));
            }
        }
        Err(format!("{text:?} is not {AT_FORMS}"))
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::Seq(seq) => write!(f, "seq {seq}"),
            Cut::Time(t) => write!(f, "{}", t.to_rfc3339()),
        }
    }
}

/// The point a replay stopped at, as `--at` outputs show it (`"at"` in JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Point {
    /// The last event folded.
    pub seq: u64,
    /// Its time.
    pub time: String,
    /// The time views are computed at (an allocation's seconds left, say): the event's time
    /// for a cut at a seq, the time asked for for a cut at a time.
    pub now: String,
}

/// The state after a cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At {
    pub state: State,
    pub seq: u64,
    pub time: Micros,
    pub now: Micros,
}

impl At {
    pub fn point(&self) -> Point {
        Point {
            seq: self.seq,
            time: self.time.to_rfc3339(),
            now: self.now.to_rfc3339(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CutError {
    #[error("the journal has no event {seq}: its last is {last}; {JournalVerify} shows it")]
    BeyondEnd { seq: u64, last: u64 },
    #[error("the journal holds no event at or before {time}: its first is at {first}")]
    BeforeStart { time: String, first: String },
    #[error("the journal holds no event")]
    Empty,
    #[error(transparent)]
    Reduce(#[from] ReduceError),
}

/// A fold that takes events one at a time until the cut.
#[derive(Debug)]
pub struct Replay {
    cut: Cut,
    state: State,
    last: Option<(u64, Micros)>,
    first_time: Option<Micros>,
    last_seen: u64,
    past: bool,
}

impl Replay {
    pub fn new(cut: Cut) -> Replay {
        Replay {
            cut,
            state: State::default(),
            last: None,
            first_time: None,
            last_seen: 0,
            past: false,
        }
    }

    /// Fold `env` if it lies before the cut; returns whether it did. Once an event lies past
    /// the cut, no later one is folded.
    pub fn offer(&mut self, env: &Envelope) -> Result<bool, ReduceError> {
        self.last_seen = env.seq;
        self.first_time.get_or_insert(env.time);
        self.past = self.past
            || match self.cut {
                Cut::Seq(seq) => env.seq > seq,
                Cut::Time(t) => env.time > t,
            };
        if self.past {
            return Ok(false);
        }
        self.state.apply(env)?;
        self.last = Some((env.seq, env.time));
        Ok(true)
    }

    /// Whether every later event lies past the cut too (a reader may stop).
    pub fn is_past(&self) -> bool {
        self.past
    }

    pub fn finish(self) -> Result<At, CutError> {
        match (self.cut, self.last) {
            (Cut::Seq(seq), Some((last, time))) if last == seq => Ok(At {
                state: self.state,
                seq,
                time,
                now: time,
            }),
            (Cut::Seq(seq), _) => Err(CutError::BeyondEnd {
                seq,
                last: self.last_seen,
            }),
            (Cut::Time(t), Some((seq, time))) => Ok(At {
                state: self.state,
                seq,
                time,
                now: t,
            }),
            (Cut::Time(t), None) => Err(match self.first_time {
                Some(first) => CutError::BeforeStart {
                    time: t.to_rfc3339(),
                    first: first.to_rfc3339(),
                },
                None => CutError::Empty,
            }),
        }
    }
}

/// The state after `cut`, folded from the first of `events` (which must start at seq 1).
pub fn state_at<'e>(
    events: impl IntoIterator<Item = &'e Envelope>,
    cut: Cut,
) -> Result<At, CutError> {
    let mut replay = Replay::new(cut);
    for env in events {
        replay.offer(env)?;
        if replay.is_past() {
            break;
        }
    }
    replay.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{test_envelope, Event, Genesis};
    use uuid::Uuid;

    fn utc(t: NaiveDateTime) -> Option<Micros> {
        Some(Micros(t.and_utc().timestamp_micros()))
    }

    #[test]
    fn parses_every_documented_form() {
        let at = |s| Cut::parse(s, utc);
        assert_eq!(at("42"), Ok(Cut::Seq(42)));
        let ten_thirty = Micros::from_secs(1_796_121_000);
        assert_eq!(at("2026-12-01T10:30:00Z"), Ok(Cut::Time(ten_thirty)));
        assert_eq!(at("2026-12-01T11:30:00+01:00"), Ok(Cut::Time(ten_thirty)));
        assert_eq!(at("2026-12-01 10:30"), Ok(Cut::Time(ten_thirty)));
        assert_eq!(at("2026-12-01 10:30:00"), Ok(Cut::Time(ten_thirty)));
        assert_eq!(at("2026-12-01T10:30"), Ok(Cut::Time(ten_thirty)));
        assert_eq!(
            at("2026-12-01 10:30:00.5"),
            Ok(Cut::Time(Micros(ten_thirty.0 + 500_000)))
        );
        for bad in [
            "0",
            "",
            "yesterday",
            "2026-12-01",
            "-3",
            "99999999999999999999999",
        ] {
            assert!(at(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(Cut::parse("2026-03-29 02:30", |_| None).is_err());
    }

    fn journal(times: &[i64]) -> Vec<Envelope> {
        times
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let mut env = test_envelope(
                    i as u64 + 1,
                    Event::Genesis(Genesis {
                        journal_id: Uuid::from_u128(1),
                        format_version: 1,
                    }),
                );
                env.time = Micros::from_secs(t);
                env
            })
            .collect()
    }

    #[test]
    fn a_time_cut_stops_at_the_first_later_event() {
        let events = journal(&[10, 20, 30, 25, 40]);
        let at = state_at(&events, Cut::Time(Micros::from_secs(27))).unwrap();
        // Event 4 (time 25) follows event 3 (time 30, past the cut): not folded.
        assert_eq!((at.seq, at.state.events), (2, 2));
        assert_eq!(at.now, Micros::from_secs(27));
        let at = state_at(&events, Cut::Time(Micros::from_secs(99))).unwrap();
        assert_eq!(at.seq, 5);
        assert_eq!(
            state_at(&events, Cut::Time(Micros::from_secs(5))),
            Err(CutError::BeforeStart {
                time: Micros::from_secs(5).to_rfc3339(),
                first: Micros::from_secs(10).to_rfc3339()
            })
        );
    }

    #[test]
    fn a_seq_cut_folds_exactly_that_prefix() {
        let events = journal(&[10, 20, 30]);
        let at = state_at(&events, Cut::Seq(2)).unwrap();
        assert_eq!(
            (at.seq, at.state.events, at.now),
            (2, 2, Micros::from_secs(20))
        );
        assert_eq!(
            state_at(&events, Cut::Seq(4)),
            Err(CutError::BeyondEnd { seq: 4, last: 3 })
        );
        assert_eq!(state_at(&[], Cut::Time(Micros(0))), Err(CutError::Empty));
    }
}
