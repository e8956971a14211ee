//! `dispatch sessions`: one `squeue --me`, folded with the journal's sessions by the pure
//! report builder. Read-only.

use super::{Env, OpError};
use crate::policy::session::listing_of;
use crate::policy::session::report::{build, Inputs, Report};
use crate::slurm::{JobQuery, Scheduler};

pub async fn sessions<S: Scheduler>(env: &Env<'_, S>) -> Result<Report, OpError> {
    let state = env.ctx.read_state()?;
    let listing = listing_of(env.ctx.sched.list_jobs(&JobQuery::mine()).await);
    // Tokens map back to configured mirrors first (config order), then to mirrors the
    // journal knows.
    let mut mirrors: Vec<String> = env.config.mirrors.keys().cloned().collect();
    for key in state.sessions.sessions.keys() {
        if !mirrors.contains(&key.mirror) {
            mirrors.push(key.mirror.clone());
        }
    }
    Ok(build(Inputs {
        prefixes: &env.config.session_prefixes(),
        targets: env.targets(),
        mirrors: &mirrors,
        sessions: &state.sessions,
        listing: &listing,
    }))
}
