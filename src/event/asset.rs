//! Asset events: a source bundle or image added, and the assets a worker is bound to.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::Sha256Digest;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AssetKind {
    /// A git bundle of one pinned commit and its history.
    Source,
    /// An opaque file, such as an Apptainer image.
    Image,
}

impl AssetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AssetKind::Source => "source",
            AssetKind::Image => "image",
        }
    }
}

/// An asset's identity and where its file is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetRecord {
    pub name: String,
    pub kind: AssetKind,
    pub sha256: Sha256Digest,
    pub bytes: u64,
    /// The file, relative to the state directory (`assets/<sha256>.<ext>`).
    pub file: String,
    /// Source assets: the pinned commit (full hex object id).
    pub commit: Option<String>,
    /// Source assets: files and bytes of the pinned commit's tree (what a checkout needs).
    pub tree_files: Option<u64>,
    pub tree_bytes: Option<u64>,
}

/// The file is prepared under a temporary name; it is about to be put in place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetAddIntent {
    pub asset: AssetRecord,
    /// Where it came from: the repository or the file given.
    pub origin: String,
    pub rev: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetAdded {
    pub name: String,
    pub sha256: Sha256Digest,
}

/// The add did not happen (or its process died before saying so); the name is free again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetAddFailed {
    pub name: String,
    pub reason: String,
}

/// Which assets a worker uses: written in the same commit as its submission intent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerAssetsBound {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub assets: Vec<AssetRecord>,
}
