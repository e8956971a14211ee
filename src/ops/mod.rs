//! One function per command: lock, load, decide, append intent, act, append outcome.
//! Ops return typed reports; the CLI renders them.

pub mod asset;
pub mod asset_files;
pub mod audit;
pub mod context;
pub mod continuation;
pub mod doctor;
pub mod error;
pub mod facts;
pub mod forget;
pub mod inspect;
pub mod jobs;
pub mod journal;
pub mod logs;
pub mod poll;
pub mod pool;
pub mod reconcile;
pub mod replay;
pub mod report;
pub mod session;
pub mod spec;
pub mod submit;
pub mod successor;
pub mod trial;
pub mod watermark;
