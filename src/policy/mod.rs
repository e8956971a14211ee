//! Pure decisions: they take state, observations and time as arguments and return a verdict.

pub mod pool;
pub mod reconcile;
pub mod session;
