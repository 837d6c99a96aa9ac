//! Recovery: closing out a bundle a crashed writer left open (staged rolls rolled
//! forward when committed, discarded otherwise).

use super::*;

/// After a crash: discards unclosed chunks (`*.tmp`), counts them in the manifest as
/// `lost_chunks`, and marks the bundle `crashed`. A bundle that was closed cleanly is
/// left alone. Returns the manifest as it now stands.
pub fn recover(dir: &Path) -> Result<Manifest, RecordError> {
    roll_forward(dir)?;
    let mut m = read_manifest(dir)?;
    if m.status != "open" {
        return Ok(m);
    }
    let mut lost = 0;
    // An unfinished video has no index: not a chunk, but not readable either.
    if let Ok(entries) = std::fs::read_dir(dir.join("videos")) {
        for e in entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
    for t in TABLES {
        let Ok(entries) = std::fs::read_dir(dir.join(t)) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().ends_with(".tmp") {
                lost += 1;
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    // Rows buffered in memory at the crash are gone too; at least one chunk's worth.
    m.lost_chunks += lost.max(1);
    m.status = "crashed".into();
    m.updated_at_ms = unix_ms();
    write_atomic(&dir.join("manifest.json"), &m.to_json()?)?;
    Ok(m)
}

/// Finishes a roll that crashed after its commit record (the staged manifest) was
/// written: its chunks are complete, so they are renamed into place with it. A staged
/// manifest that does not parse was cut short by the crash: that roll never happened.
fn roll_forward(dir: &Path) -> Result<(), RecordError> {
    let manifest = dir.join("manifest.json");
    let staged = tmp_of(&manifest);
    let Ok(text) = std::fs::read(&staged) else {
        return Ok(());
    };
    let Ok(m) = serde_json::from_slice::<Manifest>(&text) else {
        return std::fs::remove_file(&staged).map_err(io(&staged));
    };
    for rel in m.files.values().flatten() {
        let path = dir.join(rel);
        let tmp = tmp_of(&path);
        if !path.exists() && tmp.exists() {
            std::fs::rename(&tmp, &path).map_err(io(&path))?;
            sync_dir(&path)?;
        }
    }
    std::fs::rename(&staged, &manifest).map_err(io(&manifest))?;
    sync_dir(&manifest)
}
