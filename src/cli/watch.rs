//! `--watch [SECS]` (`pool status`, `jobs`): draw one look again and again. On a terminal the
//! screen is cleared and redrawn; elsewhere each look follows the last; with `--json` each
//! look is one JSON document on one line. Ctrl-C (or SIGTERM) ends it quietly (exit 0) after the
//! current look; a second Ctrl-C ends it at once. A closed stdout ends it at the next write.

use std::future::Future;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::exit::{self, Failure};
use super::output::note;

/// The default interval of `--watch` without a value.
pub const DEFAULT_SECS: u64 = 5;
/// The shortest interval between two looks that ask Slurm (`--refresh`): polite to the
/// controller whatever the user asks for.
pub const MIN_REFRESH_SECS: u64 = 5;
/// How often the wait between looks checks for Ctrl-C.
const TICK: Duration = Duration::from_millis(100);

/// The `--watch [SECS]` flag: 1 to 3600 seconds, 5 without a value.
pub fn parse_secs(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if (1..=3600).contains(&n) => Ok(n),
        _ => Err(format!("must be whole seconds from 1 to 3600, not {s:?}")),
    }
}

/// The interval to use: what was asked, but never below [`MIN_REFRESH_SECS`] when every look
/// asks Slurm (said once on stderr when raised).
pub fn interval(asked: u64, refresh: bool) -> Duration {
    if refresh && asked < MIN_REFRESH_SECS {
        note(&format!(
            "--watch {asked} with --refresh asks Slurm every {MIN_REFRESH_SECS} s at most; \
             watching every {MIN_REFRESH_SECS} s"
        ));
        return Duration::from_secs(MIN_REFRESH_SECS);
    }
    Duration::from_secs(asked)
}

/// Run `look` every `every` (measured from the start of one look to the start of the next),
/// printing what it returns: human text, or (with `json`) one JSON document that is printed on
/// one line. `title` heads each redraw on a terminal.
pub async fn watch<F, Fut>(
    every: Duration,
    json: bool,
    title: &str,
    mut look: F,
) -> Result<u8, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<String, Failure>>,
{
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registered first: a second signal, once the flag is set, exits at once.
        let registered =
            signal_hook::flag::register_conditional_shutdown(signal, 130, stop.clone())
                .and_then(|_| signal_hook::flag::register(signal, stop.clone()));
        if let Err(e) = registered {
            return Err(Failure::new(
                exit::FAILED,
                format!("cannot handle Ctrl-C for --watch: {e}"),
            ));
        }
    }
    let redraw = !json && std::io::stdout().is_terminal();
    loop {
        let started = tokio::time::Instant::now();
        let text = look().await?;
        if stop.load(Ordering::Relaxed) {
            return Ok(exit::OK);
        }
        if json {
            crate::outln!("{}", text.trim_end());
        } else if redraw {
            let now = chrono::Local::now().format("%Y-%m-%d %H:%M:%S");
            // Home, clear the screen, then the whole look in one write.
            crate::out!(
                "\x1b[H\x1b[2Jevery {} s: {title}    {now}\n\n{text}",
                every.as_secs()
            );
        } else {
            crate::out!("{text}\n");
        }
        while started.elapsed() < every {
            if stop.load(Ordering::Relaxed) {
                return Ok(exit::OK);
            }
            tokio::time::sleep(TICK.min(every.saturating_sub(started.elapsed()))).await;
        }
    }
}

/// What a listing command (`pool status`, `jobs`) was asked for around its look.
pub struct Show<'a> {
    pub watch: Option<u64>,
    pub refresh: bool,
    pub json: bool,
    pub title: &'a str,
}

/// Print one look (`render`ed, or its one JSON document), or with `--watch` look again and
/// again as [`watch`] does.
pub async fn show<R, F, Fut>(
    s: Show<'_>,
    mut look: F,
    render: impl Fn(&R) -> String,
) -> Result<u8, Failure>
where
    R: serde::Serialize,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R, Failure>>,
{
    let Some(secs) = s.watch else {
        let r = look().await?;
        super::output::emit(s.json, &r, || crate::out!("{}", render(&r)))?;
        return Ok(exit::OK);
    };
    let json = s.json;
    let render = &render;
    watch(interval(secs, s.refresh), json, s.title, || {
        let next = look();
        async move {
            let r = next.await?;
            if json {
                json_line(&r)
            } else {
                Ok(render(&r))
            }
        }
    })
    .await
}

/// One line of JSON for a look.
pub fn json_line(value: &impl serde::Serialize) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|e| Failure::new(exit::FAILED, e.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_watch_that_asks_slurm_never_goes_below_five_seconds() {
        use std::time::Duration;
        assert_eq!(super::interval(1, true), Duration::from_secs(5));
        assert_eq!(super::interval(1, false), Duration::from_secs(1));
        assert_eq!(super::interval(30, true), Duration::from_secs(30));
        assert!(super::parse_secs("0").is_err());
        assert!(super::parse_secs("3601").is_err());
        assert_eq!(super::parse_secs("7"), Ok(7));
    }
}
