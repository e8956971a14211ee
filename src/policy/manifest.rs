//! The manifest of a published directory: the SHA-256 of every file in it. Pure: building,
//! parsing and comparing manifests; hashing the files is `worker::publish`'s job.

use serde::{Deserialize, Serialize};

/// The manifest's file name, at the top of a published directory. It lists every other file.
pub const MANIFEST_NAME: &str = "MANIFEST.json";
pub const MANIFEST_FORMAT: u32 = 1;
/// A manifest listing more files than this is refused when read.
pub const MAX_MANIFEST_FILES: usize = 200_000;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Entry {
    /// Relative, `/`-separated, without `.` or `..` components.
    pub path: String,
    pub bytes: u64,
    /// Lowercase hex.
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub worker: String,
    pub submission_id: String,
    /// The commit the checkout started from, when the worker had a source asset.
    pub pinned_commit: Option<String>,
    /// The checkout's HEAD when it was published.
    pub head_commit: Option<String>,
    /// Sorted by path.
    pub files: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest is not valid JSON of format {MANIFEST_FORMAT}: {0}")]
    Malformed(String),
    #[error("the manifest lists an unsafe path {0:?}")]
    UnsafePath(String),
    #[error("the manifest lists {0} files, above the limit of {MAX_MANIFEST_FILES}")]
    TooLarge(usize),
}

/// Is `path` relative and free of components that could leave the directory?
pub fn safe_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

impl Manifest {
    pub fn new(
        worker: &str,
        submission_id: &str,
        pinned_commit: Option<String>,
        head_commit: Option<String>,
        mut files: Vec<Entry>,
    ) -> Manifest {
        files.sort();
        Manifest {
            format: MANIFEST_FORMAT,
            worker: worker.to_owned(),
            submission_id: submission_id.to_owned(),
            pinned_commit,
            head_commit,
            files,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = serde_json::to_vec_pretty(self).expect("a manifest always serializes");
        b.push(b'\n');
        b
    }

    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let m: Manifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Malformed(e.to_string()))?;
        if m.format != MANIFEST_FORMAT {
            return Err(ManifestError::Malformed(format!("format {}", m.format)));
        }
        if m.files.len() > MAX_MANIFEST_FILES {
            return Err(ManifestError::TooLarge(m.files.len()));
        }
        if let Some(bad) = m.files.iter().find(|e| !safe_relative(&e.path)) {
            return Err(ManifestError::UnsafePath(bad.path.clone()));
        }
        Ok(m)
    }

    /// Compare with the files actually present (the manifest itself excluded). Returns every
    /// difference: a missing file, an unlisted one, or one whose size or hash differs.
    pub fn differences(&self, mut present: Vec<Entry>) -> Vec<String> {
        present.sort();
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < self.files.len() || j < present.len() {
            match (self.files.get(i), present.get(j)) {
                (Some(a), Some(b)) if a.path == b.path => {
                    if a.bytes != b.bytes || a.sha256 != b.sha256 {
                        out.push(format!(
                            "{}: listed as {} bytes sha256 {}, found {} bytes sha256 {}",
                            a.path, a.bytes, a.sha256, b.bytes, b.sha256
                        ));
                    }
                    i += 1;
                    j += 1;
                }
                (Some(a), b) if b.is_none_or(|b| a.path < b.path) => {
                    out.push(format!("{}: listed but missing", a.path));
                    i += 1;
                }
                (_, Some(b)) => {
                    out.push(format!("{}: present but not listed", b.path));
                    j += 1;
                }
                (None, None) => unreachable!("the loop condition"),
                (Some(_), None) => unreachable!("handled by the guard above"),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(path: &str, bytes: u64, sha: &str) -> Entry {
        Entry {
            path: path.into(),
            bytes,
            sha256: sha.into(),
        }
    }

    #[test]
    fn round_trips_sorted() {
        let m = Manifest::new(
            "w",
            "id",
            Some("abc".into()),
            None,
            vec![e("z", 1, "aa"), e("a/b", 2, "bb")],
        );
        assert_eq!(m.files[0].path, "a/b");
        assert_eq!(Manifest::parse(&m.to_bytes()).unwrap(), m);
    }

    #[test]
    fn differences_name_every_mismatch() {
        let m = Manifest::new(
            "w",
            "id",
            None,
            None,
            vec![e("a", 1, "aa"), e("b", 2, "bb"), e("c", 3, "cc")],
        );
        assert!(m
            .differences(vec![e("c", 3, "cc"), e("a", 1, "aa"), e("b", 2, "bb")])
            .is_empty());
        let d = m.differences(vec![e("a", 1, "xx"), e("c", 3, "cc"), e("d", 4, "dd")]);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].starts_with("a: listed as"));
        assert_eq!(d[1], "b: listed but missing");
        assert_eq!(d[2], "d: present but not listed");
        assert_eq!(m.differences(vec![]).len(), 3);
    }

    #[test]
    fn unsafe_or_malformed_manifests_are_refused() {
        for bad in ["/etc/passwd", "../x", "a/../b", "a//b", "./a", ""] {
            assert!(!safe_relative(bad), "{bad:?}");
            let m = Manifest::new("w", "id", None, None, vec![e(bad, 1, "aa")]);
            assert!(Manifest::parse(&m.to_bytes()).is_err(), "{bad:?}");
        }
        assert!(safe_relative("evidence/journal/segment-00000001.djl"));
        assert!(matches!(
            Manifest::parse(b"{}"),
            Err(ManifestError::Malformed(_))
        ));
    }
}
