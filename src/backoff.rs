//! Pauses between looks: the first, then twice as long each time up to a ceiling. Pure
//! arithmetic, shared by every wait: `ops::poll` sleeps them on tokio's clock, the journal's
//! lock waits on a thread, `session renew` between failed renewals.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Pauses `first`, 2×, 4×, … capped at `max` (a `max` below `first` is `first`).
    pub fn new(first: Duration, max: Duration) -> Backoff {
        let max = max.max(first);
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The pause to take now; the one after it doubles.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        debug_assert!(self.first <= self.next && self.next <= self.max);
        d
    }

    /// The pause to take now, without doubling the next.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Start again from the first pause (something changed).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_ceiling_and_reset_starts_again() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(10), ms(50));
        let taken: Vec<_> = (0..5).map(|_| b.next_delay()).collect();
        assert_eq!(taken, [ms(10), ms(20), ms(40), ms(50), ms(50)]);
        assert_eq!(b.peek(), ms(50));
        b.reset();
        assert_eq!(b.next_delay(), ms(10));
        assert_eq!(Backoff::new(ms(30), ms(5)).next_delay(), ms(30));
        let mut once = Backoff::new(ms(30), ms(5));
        once.next_delay();
        assert_eq!(
            once.next_delay(),
            ms(30),
            "a max below the first is the first"
        );
    }
}
