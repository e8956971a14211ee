//! Decisions about assets: may a name be bound, may a worker use an asset. Pure.

use crate::event::asset::{AssetKind, AssetRecord};
use crate::next::Next::{self, AssetList};
use crate::state::asset::{Asset, AssetState, Assets, ASSETS_KEPT};

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
         ({AssetList})"
    )]
    Full,
    #[error(
        "no asset {name:?}; {AssetList} lists them, {} adds one",
        Next::AssetAdd { kind, name }
    )]
    Unknown { name: String, kind: &'static str },
    #[error("no asset {name:?}; {AssetList} lists them")]
    NoSuchAsset { name: String },
    #[error("asset {name:?} is a {actual} asset, not a {wanted} one; pass it as --{actual}")]
    WrongKind {
        name: String,
        actual: &'static str,
        wanted: &'static str,
    },
    #[error(
        "asset {name:?}: its file {file} {problem}; nothing was submitted. Run {}",
        Next::AssetVerify(Some(name))
    )]
    FileChanged {
        name: String,
        file: String,
        problem: String,
    },
}

/// What adding a name must do, decided under the journal lock once the file is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddPlan {
    /// Bind the name. `abandon_pending`: an earlier add of it wrote its intent and died, so
    /// record first that it failed.
    Bind { abandon_pending: bool },
    /// The name is already bound to this very asset: an earlier add of it finished (perhaps
    /// just before its process was killed). Nothing to write; the answer is that asset.
    AlreadyAdded,
}

/// Is `built` the asset `bound` already is? A source is its pinned commit (a commit id names
/// its whole history, whatever bytes the bundle around it has); an image is its SHA-256.
pub fn same_asset(bound: &AssetRecord, built: &AssetRecord) -> bool {
    bound.kind == built.kind
        && match bound.kind {
            AssetKind::Source => bound.commit.is_some() && bound.commit == built.commit,
            AssetKind::Image => bound.sha256 == built.sha256,
        }
}

fn name_taken(a: &Asset) -> AssetRefusal {
    AssetRefusal::NameTaken {
        name: a.record.name.clone(),
        kind: a.record.kind.as_str(),
        sha256: hex::encode(a.record.sha256.0),
    }
}

/// A cheap refusal before anything is built: the name is bound to another kind of asset, or
/// the table is full. Whether a bound name of the same kind is this very asset is only known
/// once it is built ([`plan_add`]).
pub fn check_add(assets: &Assets, name: &str, kind: AssetKind) -> Result<(), AssetRefusal> {
    match assets.by_name.get(name) {
        Some(a) if a.state == AssetState::Ready && a.record.kind != kind => Err(name_taken(a)),
        Some(_) => Ok(()),
        None if assets.by_name.len() >= ASSETS_KEPT => Err(AssetRefusal::Full),
        None => Ok(()),
    }
}

/// May `built` be bound to its name now? Called with the journal lock held, under which every
/// add writes both its intent and its outcome, so a pending intent seen here belongs to a dead
/// process: it is abandoned, whatever identity it named (its file may never have appeared).
/// A name bound to this same asset is a retry of an add that finished: it succeeds, so that
/// running the same add again is right at every point a previous one may have stopped.
pub fn plan_add(assets: &Assets, built: &AssetRecord) -> Result<AddPlan, AssetRefusal> {
    match assets.by_name.get(&built.name) {
        Some(a) if a.state == AssetState::Ready && same_asset(&a.record, built) => {
            Ok(AddPlan::AlreadyAdded)
        }
        Some(a) if a.state == AssetState::Ready => Err(name_taken(a)),
        Some(_) => Ok(AddPlan::Bind {
            abandon_pending: true,
        }),
        None if assets.by_name.len() >= ASSETS_KEPT => Err(AssetRefusal::Full),
        None => Ok(AddPlan::Bind {
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
    use crate::event::asset::*;
    use crate::event::{Micros, Sha256Digest};
    use crate::state::asset::*;

    fn with(name: &str, kind: AssetKind, ready: bool) -> Assets {
        let mut a = Assets::default();
        a.intent(
            Micros(0),
            &AssetAddIntent {
                asset: built(name, kind, 1, None),
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

    fn built(name: &str, kind: AssetKind, sha: u8, commit: Option<&str>) -> AssetRecord {
        AssetRecord {
            name: name.into(),
            kind,
            sha256: Sha256Digest([sha; 32]),
            bytes: 10,
            file: "assets/x".into(),
            commit: commit.map(str::to_owned),
            tree_files: None,
            tree_bytes: None,
        }
    }

    #[test]
    fn names_bind_once_a_dead_add_is_abandoned_and_a_finished_one_is_answered() {
        let none = Assets::default();
        let img = built("s", AssetKind::Image, 1, None);
        assert_eq!(check_add(&none, "s", AssetKind::Image), Ok(()));
        assert_eq!(
            plan_add(&none, &img),
            Ok(AddPlan::Bind {
                abandon_pending: false
            })
        );
        let ready = with("s", AssetKind::Image, true);
        // The same image again: the add that made it finished.
        assert_eq!(plan_add(&ready, &img), Ok(AddPlan::AlreadyAdded));
        // Other contents, or another kind: the name is taken.
        assert!(matches!(
            plan_add(&ready, &built("s", AssetKind::Image, 2, None)),
            Err(AssetRefusal::NameTaken { .. })
        ));
        assert!(matches!(
            check_add(&ready, "s", AssetKind::Source),
            Err(AssetRefusal::NameTaken { .. })
        ));
        assert_eq!(check_add(&ready, "s", AssetKind::Image), Ok(()));
        // A dead add is abandoned whatever identity its intent named.
        let pending = with("s", AssetKind::Image, false);
        for other in [img.clone(), built("s", AssetKind::Source, 9, Some("c"))] {
            assert_eq!(
                plan_add(&pending, &other),
                Ok(AddPlan::Bind {
                    abandon_pending: true
                })
            );
        }
    }

    #[test]
    fn a_source_is_its_commit_and_an_image_its_digest() {
        let source = |sha, commit| built("s", AssetKind::Source, sha, commit);
        let image = |sha| built("i", AssetKind::Image, sha, None);
        let abc = source(1, Some("abc"));
        for (a, b, same) in [
            (&abc, source(2, Some("abc")), true),
            (&abc, source(1, Some("abd")), false),
            (&source(1, None), source(1, None), false),
            (&abc, built("s", AssetKind::Image, 1, Some("abc")), false),
            (&image(1), image(1), true),
            (&image(1), image(3), false),
        ] {
            assert_eq!(same_asset(a, &b), same, "{a:?} ~ {b:?}");
        }
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
