//! Decisions about assets: may a name be bound, may a worker use an asset. Pure.

use crate::state::asset::{Asset, AssetKind, AssetState, Assets, ASSETS_KEPT};

/// Why an asset operation is refused (exit 3). Each says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssetRefusal {
    #[error(
        "asset {name:?} already exists ({kind}, sha256 {sha256}); assets are immutable: \
         choose another name"
    )]
    NameTaken {
        name: String,
        kind: &'static str,
        sha256: String,
    },
    #[error(
        "there are already {ASSETS_KEPT} assets, the most dispatch keeps; use one of them \
         (`dispatch asset list`)"
    )]
    Full,
    #[error(
        "no asset {name:?}; `dispatch asset list` lists them, `dispatch asset add-{kind} \
         {name} …` adds one"
    )]
    Unknown { name: String, kind: &'static str },
    #[error("no asset {name:?}; `dispatch asset list` lists them")]
    NoSuchAsset { name: String },
    #[error("asset {name:?} is a {actual} asset, not a {wanted} one; pass it as --{actual}")]
    WrongKind {
        name: String,
        actual: &'static str,
        wanted: &'static str,
    },
    #[error(
        "asset {name:?}: its file {file} {problem}; nothing was submitted. Run \
         `dispatch asset verify {name}`"
    )]
    FileChanged {
        name: String,
        file: String,
        problem: String,
    },
}

/// What adding a name must do first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddPlan {
    /// An earlier add of this name wrote its intent and died: record that it failed.
    pub abandon_pending: bool,
}

/// May `name` be bound now? Called with the journal lock held, under which every add writes
/// both its intent and its outcome, so a pending intent seen here belongs to a dead process.
pub fn check_add(assets: &Assets, name: &str) -> Result<AddPlan, AssetRefusal> {
    match assets.by_name.get(name) {
        Some(a) if a.state == AssetState::Ready => Err(AssetRefusal::NameTaken {
            name: name.to_owned(),
            kind: a.record.kind.as_str(),
            sha256: hex::encode(a.record.sha256.0),
        }),
        Some(_) => Ok(AddPlan {
            abandon_pending: true,
        }),
        None if assets.by_name.len() >= ASSETS_KEPT => Err(AssetRefusal::Full),
        None => Ok(AddPlan {
            abandon_pending: false,
        }),
    }
}

/// What `pool submit` sees of an asset's file without reading it: is it a regular file, and
/// its size. Hashing a multi-gigabyte image at every submit would cost more than the check is
/// worth here; the receiving node recomputes the SHA-256 before the payload starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileSeen {
    Missing,
    NotAFile,
    File { bytes: u64 },
}

/// May a worker be submitted with `name` as its `wanted` asset?
pub fn check_use<'a>(
    assets: &'a Assets,
    name: &str,
    wanted: AssetKind,
    seen: impl FnOnce(&Asset) -> FileSeen,
) -> Result<&'a Asset, AssetRefusal> {
    let a = assets.ready(name).ok_or_else(|| AssetRefusal::Unknown {
        name: name.to_owned(),
        kind: wanted.as_str(),
    })?;
    if a.record.kind != wanted {
        return Err(AssetRefusal::WrongKind {
            name: name.to_owned(),
            actual: a.record.kind.as_str(),
            wanted: wanted.as_str(),
        });
    }
    let problem = match seen(a) {
        FileSeen::File { bytes } if bytes == a.record.bytes => return Ok(a),
        FileSeen::File { bytes } => {
            format!("has {bytes} bytes, not the {} recorded", a.record.bytes)
        }
        FileSeen::Missing => "is missing".to_owned(),
        FileSeen::NotAFile => "is not a regular file".to_owned(),
    };
    Err(AssetRefusal::FileChanged {
        name: name.to_owned(),
        file: a.record.file.clone(),
        problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Micros, Sha256Digest};
    use crate::state::asset::*;

    fn with(name: &str, kind: AssetKind, ready: bool) -> Assets {
        let mut a = Assets::default();
        a.intent(
            Micros(0),
            &AssetAddIntent {
                asset: AssetRecord {
                    name: name.into(),
                    kind,
                    sha256: Sha256Digest([1; 32]),
                    bytes: 10,
                    file: "assets/x".into(),
                    commit: None,
                    tree_files: None,
                    tree_bytes: None,
                },
                origin: "/o".into(),
                rev: None,
            },
        );
        if ready {
            a.added(&AssetAdded {
                name: name.into(),
                sha256: Sha256Digest([1; 32]),
            });
        }
        a
    }

    #[test]
    fn names_bind_once_and_a_dead_add_is_abandoned() {
        assert_eq!(
            check_add(&Assets::default(), "s"),
            Ok(AddPlan {
                abandon_pending: false
            })
        );
        assert!(matches!(
            check_add(&with("s", AssetKind::Source, true), "s"),
            Err(AssetRefusal::NameTaken { .. })
        ));
        assert_eq!(
            check_add(&with("s", AssetKind::Source, false), "s"),
            Ok(AddPlan {
                abandon_pending: true
            })
        );
    }

    #[test]
    fn use_checks_kind_readiness_and_the_file() {
        let a = with("img", AssetKind::Image, true);
        let ok = |_: &Asset| FileSeen::File { bytes: 10 };
        assert!(check_use(&a, "img", AssetKind::Image, ok).is_ok());
        assert!(matches!(
            check_use(&a, "img", AssetKind::Source, ok),
            Err(AssetRefusal::WrongKind { .. })
        ));
        assert!(matches!(
            check_use(&a, "nope", AssetKind::Image, ok),
            Err(AssetRefusal::Unknown { .. })
        ));
        let pending = with("img", AssetKind::Image, false);
        assert!(matches!(
            check_use(&pending, "img", AssetKind::Image, ok),
            Err(AssetRefusal::Unknown { .. })
        ));
        for seen in [
            FileSeen::Missing,
            FileSeen::NotAFile,
            FileSeen::File { bytes: 11 },
        ] {
            let r = check_use(&a, "img", AssetKind::Image, |_| seen);
            assert!(
                matches!(r, Err(AssetRefusal::FileChanged { .. })),
                "{seen:?}"
            );
        }
    }
}
