//! One owner per allocation: which journal holds a pool's allocation, as Slurm itself says it.
//!
//! Two state directories (two login nodes, two users of one account) must never book the same
//! CPUs twice. A journal that holds an allocation as a pool writes a mark into the job's
//! `Comment` (its owner may set it: `scontrol update JobId=J Comment=…`, or salloc's
//! `--comment` for a pool dispatch creates), and every attach and submit reads it back from
//! `scontrol show job`, which they ask anyway (`policy::pool::check_holder` and
//! `check_still_held` decide on it). The mark is one whitespace-free token,
//! `dispatch-pool/<journal id>/<host>/<pool>`, beside whatever else the comment says.
//!
//! Slurm has no compare-and-set on a comment: two attaches that read an unmarked job at the
//! same moment can both mark it, the last one winning. Each attach therefore reads the mark
//! back after setting it, and each later submit checks it again, so the loser of such a race
//! refuses from its next command on.

use uuid::Uuid;

/// The first part of the mark's token.
pub const MARK_PREFIX: &str = "dispatch-pool/";

/// The longest comment dispatch writes: the user's text is kept only up to this, so a mark
/// never fails for a comment that grew elsewhere.
pub const MAX_COMMENT_BYTES: usize = 1024;

/// A journal's claim on an allocation, as written in the job's comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub journal_id: Uuid,
    /// The host that wrote the mark (which login node to go to), made safe for a token.
    pub host: String,
    pub pool: String,
}

impl Holder {
    pub fn new(journal_id: Uuid, host: &str, pool: &str) -> Holder {
        let safe = |s: &str| -> String {
            let t: String = s
                .chars()
                .take(64)
                .map(|c| match c {
                    'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '-' | '_' => c,
                    _ => '_',
                })
                .collect();
            if t.is_empty() {
                "unknown".to_owned()
            } else {
                t
            }
        };
        Holder {
            journal_id,
            host: safe(host),
            pool: safe(pool),
        }
    }

    /// The mark's token.
    pub fn mark(&self) -> String {
        format!(
            "{MARK_PREFIX}{}/{}/{}",
            self.journal_id, self.host, self.pool
        )
    }

    /// The first well-formed mark in `comment`, if any.
    pub fn in_comment(comment: &str) -> Option<Holder> {
        comment.split_whitespace().find_map(parse_mark)
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pool {:?} of journal {} (marked from host {})",
            self.pool, self.journal_id, self.host
        )
    }
}

fn parse_mark(token: &str) -> Option<Holder> {
    let rest = token.strip_prefix(MARK_PREFIX)?;
    let mut parts = rest.splitn(3, '/');
    let journal_id = Uuid::parse_str(parts.next()?).ok()?;
    let host = parts.next().filter(|h| !h.is_empty())?;
    let pool = parts.next().filter(|p| !p.is_empty() && !p.contains('/'))?;
    Some(Holder {
        journal_id,
        host: host.to_owned(),
        pool: pool.to_owned(),
    })
}

/// `comment` without any dispatch mark, the rest of its words kept in order.
pub fn unmarked(comment: &str) -> String {
    let kept: Vec<&str> = comment
        .split_whitespace()
        .filter(|t| !t.starts_with(MARK_PREFIX))
        .collect();
    truncate(kept.join(" "), MAX_COMMENT_BYTES)
}

/// `comment` with `holder`'s mark in place of any mark it had, the user's words kept first.
pub fn marked(comment: &str, holder: &Holder) -> String {
    let mark = holder.mark();
    let rest = unmarked(comment);
    let room = MAX_COMMENT_BYTES.saturating_sub(mark.len() + 1);
    let rest = truncate(rest, room);
    let rest = rest.trim_end();
    if rest.is_empty() {
        mark
    } else {
        format!("{rest} {mark}")
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    fn holder(n: u128) -> Holder {
        Holder::new(Uuid::from_u128(n), "login1.cluster", "p")
    }

    #[test]
    fn a_mark_reads_back_from_a_comment_with_other_words() {
        let h = holder(7);
        let c = marked("keep this  text", &h);
        assert_eq!(c, format!("keep this text {}", h.mark()));
        assert_eq!(Holder::in_comment(&c), Some(h.clone()));
        assert_eq!(unmarked(&c), "keep this text");
        // Re-marking replaces, never stacks.
        let other = holder(8);
        let c2 = marked(&c, &other);
        assert_eq!(Holder::in_comment(&c2), Some(other));
        assert_eq!(c2.matches(MARK_PREFIX).count(), 1);
        assert_eq!(marked("", &h), h.mark());
    }

    #[test]
    fn malformed_marks_are_no_marks() {
        for c in [
            "dispatch-pool/",
            "dispatch-pool/not-a-uuid/h/p",
            "dispatch-pool/00000000-0000-0000-0000-000000000007//p",
            "dispatch-pool/00000000-0000-0000-0000-000000000007/h/",
            "dispatch-pool/00000000-0000-0000-0000-000000000007/h/p/q",
            "xdispatch-pool/00000000-0000-0000-0000-000000000007/h/p",
        ] {
            assert_eq!(Holder::in_comment(c), None, "{c}");
        }
    }

    #[test]
    fn hosts_and_pools_are_made_token_safe() {
        let h = Holder::new(Uuid::nil(), "a b/c", "");
        assert_eq!((h.host.as_str(), h.pool.as_str()), ("a_b_c", "unknown"));
        assert_eq!(Holder::in_comment(&h.mark()), Some(h));
    }

    quickcheck! {
        /// Whatever the user's comment, marking keeps it under the cap, reads back as the
        /// holder, and unmarking gives back the user's words.
        fn prop_mark_round_trips(comment: String, journal: u128) -> bool {
            let h = holder(journal);
            let c = marked(&comment, &h);
            c.len() <= MAX_COMMENT_BYTES
                && Holder::in_comment(&c).as_ref() == Some(&h)
                && unmarked(&c)
                    == truncate(unmarked(&comment), MAX_COMMENT_BYTES - h.mark().len() - 1).trim_end()
        }
    }
}
