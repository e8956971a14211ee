//! Torn-tail repair: the bytes after the last whole commit are saved beside the segment, then
//! cut; a repair that stopped before recording itself is found again by its saved file.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::error::JournalError;
use super::files::{fsync_dir, io_err};
use super::scan;
use crate::event::{self, Recovered};
use crate::failpoint;

/// A repair that cut the tail and then stopped before appending its `Recovered` event leaves the
/// saved tail `<segment>.torn-<len>-…` with `len` equal to the segment's length (a recorded
/// repair appends after the cut, so the segment grows past it). Returns the event to append.
pub(crate) fn unrecorded_repair(
    segment: &Path,
    len: u64,
) -> Result<Option<Recovered>, JournalError> {
    let dir = segment.parent().expect("segments live in a directory");
    let name = segment
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("segment");
    let prefix = format!("{name}.torn-{len}-");
    let entries = std::fs::read_dir(dir).map_err(io_err(dir, "list journal directory"))?;
    for entry in entries {
        let entry = entry.map_err(io_err(dir, "list journal directory"))?;
        let Some(saved_as) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !saved_as.starts_with(&prefix) {
            continue;
        }
        let tail = std::fs::read(entry.path()).map_err(io_err(&entry.path(), "read saved tail"))?;
        return Ok(Some(Recovered {
            segment: name.to_owned(),
            offset: len,
            length: tail.len() as u64,
            sha256: event::Sha256Digest(Sha256::digest(&tail).into()),
            saved_as,
            reason: "recorded by a later open: the repair that cut this tail stopped before recording it"
                .to_owned(),
        }));
    }
    Ok(None)
}

/// Cut the torn tail of `segment` at `valid_len`: keep the cut bytes in a file beside it, then
/// truncate and fsync. Returns the `Recovered` event to append.
pub(crate) fn cut_torn_tail(
    segment: &Path,
    valid_len: u64,
    damage: &scan::Damage,
) -> Result<Recovered, JournalError> {
    let bytes = std::fs::read(segment).map_err(io_err(segment, "read segment"))?;
    assert!(
        valid_len as usize <= bytes.len(),
        "the valid prefix lies inside the file"
    );
    let tail = &bytes[valid_len as usize..];
    let sha: [u8; 32] = Sha256::digest(tail).into();
    let dir = segment.parent().expect("segments live in a directory");
    let name = segment
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("segment");
    let saved_as = format!("{name}.torn-{valid_len}-{}", hex::encode(&sha[..6]));
    let saved_path = dir.join(&saved_as);
    let mut f = super::files::private_file()
        .open(&saved_path)
        .map_err(io_err(&saved_path, "save torn tail"))?;
    f.write_all(tail)
        .map_err(io_err(&saved_path, "save torn tail"))?;
    f.sync_all()
        .map_err(io_err(&saved_path, "fsync torn tail"))?;
    fsync_dir(dir)?;
    failpoint::hit("journal-repair-before-truncate");
    let seg = OpenOptions::new()
        .write(true)
        .open(segment)
        .map_err(io_err(segment, "open segment for repair"))?;
    seg.set_len(valid_len)
        .map_err(io_err(segment, "truncate torn tail"))?;
    seg.sync_all().map_err(io_err(segment, "fsync segment"))?;
    Ok(Recovered {
        segment: name.to_owned(),
        offset: valid_len,
        length: tail.len() as u64,
        sha256: event::Sha256Digest(sha),
        saved_as,
        reason: damage.reason.clone(),
    })
}
