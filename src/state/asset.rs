//! Assets: immutable source bundles and images that workers share, identified by SHA-256.
//!
//! An asset's file is prepared in a temporary name first, so its identity is known before the
//! intent is written; the intent names the identity, the outcome confirms the file is in place.
//! A name is bound to one identity for good: an asset is never modified or replaced.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::asset::{AssetAddFailed, AssetAddIntent, AssetAdded, AssetRecord};
use crate::event::Micros;

/// How many assets the reduced state holds; adding more is refused.
pub const ASSETS_KEPT: usize = 1024;

state_words! {
    pub enum AssetState {
        /// Intent without outcome: the file may or may not be in place.
        Pending => "pending",
        Ready => "ready",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Asset {
    pub record: AssetRecord,
    pub origin: String,
    pub rev: Option<String>,
    pub state: AssetState,
    pub added_at: Micros,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assets {
    pub by_name: BTreeMap<String, Asset>,
}

impl Assets {
    pub fn intent(&mut self, time: Micros, e: &AssetAddIntent) {
        // The policy refuses a bound name and a full table before the intent is written; a
        // journal edited to break that keeps the first binding rather than guess.
        if self.by_name.contains_key(&e.asset.name) || self.by_name.len() >= ASSETS_KEPT {
            return;
        }
        self.by_name.insert(
            e.asset.name.clone(),
            Asset {
                record: e.asset.clone(),
                origin: e.origin.clone(),
                rev: e.rev.clone(),
                state: AssetState::Pending,
                added_at: time,
            },
        );
    }

    pub fn added(&mut self, e: &AssetAdded) {
        if let Some(a) = self.by_name.get_mut(&e.name) {
            if a.record.sha256 == e.sha256 {
                a.state = AssetState::Ready;
            }
        }
    }

    pub fn failed(&mut self, e: &AssetAddFailed) {
        if self
            .by_name
            .get(&e.name)
            .is_some_and(|a| a.state == AssetState::Pending)
        {
            self.by_name.remove(&e.name);
        }
    }

    pub fn ready(&self, name: &str) -> Option<&Asset> {
        self.by_name
            .get(name)
            .filter(|a| a.state == AssetState::Ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::asset::*;
    use crate::event::Sha256Digest;

    fn record(name: &str, byte: u8) -> AssetRecord {
        AssetRecord {
            name: name.into(),
            kind: AssetKind::Image,
            sha256: Sha256Digest([byte; 32]),
            bytes: 1,
            file: "assets/x.image".into(),
            commit: None,
            tree_files: None,
            tree_bytes: None,
        }
    }

    fn intent(name: &str, byte: u8) -> AssetAddIntent {
        AssetAddIntent {
            asset: record(name, byte),
            origin: "/f".into(),
            rev: None,
        }
    }

    #[test]
    fn a_name_is_bound_once_and_only_a_pending_add_can_fail() {
        let mut a = Assets::default();
        a.intent(Micros(1), &intent("img", 1));
        assert_eq!(a.by_name["img"].state, AssetState::Pending);
        assert!(a.ready("img").is_none());
        // An outcome for another identity confirms nothing.
        a.added(&AssetAdded {
            name: "img".into(),
            sha256: Sha256Digest([2; 32]),
        });
        assert!(a.ready("img").is_none());
        a.added(&AssetAdded {
            name: "img".into(),
            sha256: Sha256Digest([1; 32]),
        });
        assert!(a.ready("img").is_some());
        // A second intent for a bound name changes nothing; a failure cannot unbind it.
        a.intent(Micros(2), &intent("img", 3));
        a.failed(&AssetAddFailed {
            name: "img".into(),
            reason: "x".into(),
        });
        assert_eq!(a.ready("img").unwrap().record.sha256, Sha256Digest([1; 32]));

        a.intent(Micros(3), &intent("other", 4));
        a.failed(&AssetAddFailed {
            name: "other".into(),
            reason: "x".into(),
        });
        assert!(!a.by_name.contains_key("other"));
    }
}
