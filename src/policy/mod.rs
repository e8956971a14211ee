//! Pure decisions: they take state, observations and time as arguments and return a verdict.

pub mod asset;
pub mod audit;
pub mod doctor;
pub mod forget;
pub mod holder;
pub mod journal_filter;
pub mod manifest;
pub mod node;
pub mod placement;
pub mod pool;
pub mod pool_create;
pub mod reconcile;
pub mod report;
pub mod session;
pub mod trial;
