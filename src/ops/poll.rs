//! The one way `ops` waits between looks at Slurm or at a file: pauses that double up to a
//! ceiling (`backoff`), never past the wait's budget, on tokio's clock (the one the
//! simulation drives; see `context.rs`). A caller decides what to look at and when to give
//! up; this only keeps the time.

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;

#[derive(Debug)]
pub struct Poller {
    started: Instant,
    backoff: Backoff,
    budget: Option<Duration>,
}

impl Poller {
    /// Pauses `first`, 2×, … up to `max`, for as long as the caller looks.
    pub fn new(first: Duration, max: Duration) -> Poller {
        Poller {
            started: Instant::now(),
            backoff: Backoff::new(first, max),
            budget: None,
        }
    }

    /// The same, over at most `budget` from now.
    pub fn within(first: Duration, max: Duration, budget: Duration) -> Poller {
        Poller {
            budget: Some(budget),
            ..Poller::new(first, max)
        }
    }

    /// How long since the wait began.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// What is left of the budget (`Duration::MAX` without one).
    pub fn left(&self) -> Duration {
        self.budget
            .map_or(Duration::MAX, |b| b.saturating_sub(self.elapsed()))
    }

    /// The budget is spent.
    pub fn expired(&self) -> bool {
        self.left().is_zero()
    }

    /// Sleep the next pause, never past the budget.
    pub async fn pause(&mut self) {
        self.pause_at_most(Duration::MAX).await;
    }

    /// Sleep the next pause, never past the budget nor past `cap` (another deadline the
    /// caller keeps).
    pub async fn pause_at_most(&mut self, cap: Duration) {
        let pause = self.backoff.next_delay().min(self.left()).min(cap);
        tokio::time::sleep(pause).await;
    }

    /// The next pause, for a caller that spends it looking at something else meanwhile.
    pub fn next_pause(&mut self) -> Duration {
        self.backoff.next_delay()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_double_and_stop_at_the_budget() {
        let ms = Duration::from_millis;
        let mut p = Poller::within(ms(10), ms(40), ms(100));
        let mut slept = Vec::new();
        while !p.expired() {
            let before = Instant::now();
            p.pause().await;
            slept.push(before.elapsed());
        }
        assert_eq!(
            slept,
            [ms(10), ms(20), ms(40), ms(30)],
            "the last is what was left"
        );
        assert_eq!(p.elapsed(), ms(100));
        let mut unbounded = Poller::new(ms(5), ms(5));
        assert_eq!(unbounded.left(), Duration::MAX);
        let before = Instant::now();
        unbounded.pause_at_most(ms(2)).await;
        assert_eq!(before.elapsed(), ms(2));
    }
}
