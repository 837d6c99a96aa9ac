//! A table's rows buffered between rolls, and staging them as one Parquet chunk.

use super::*;

/// One table's rows since the last roll.
pub(super) struct Table<R> {
    name: &'static str,
    rows: Vec<R>,
    /// About how many bytes the rows take (what rolls by size).
    pub(super) bytes: usize,
    to_batch: fn(&[R]) -> Result<RecordBatch, arrow_schema::ArrowError>,
}

impl<R> Table<R> {
    pub(super) fn new(
        name: &'static str,
        to_batch: fn(&[R]) -> Result<RecordBatch, arrow_schema::ArrowError>,
    ) -> Self {
        Self {
            name,
            rows: Vec::new(),
            bytes: 0,
            to_batch,
        }
    }

    pub(super) fn push(&mut self, row: R, bytes: usize) {
        self.rows.push(row);
        self.bytes += bytes;
    }

    /// Writes the buffered rows as chunk `part` under a temporary name, fsynced but
    /// not yet visible; `None` when there are no rows. A failed write leaves no file.
    pub(super) fn stage(&self, dir: &Path, part: u64) -> Result<Option<Staged>, RecordError> {
        if self.rows.is_empty() {
            return Ok(None);
        }
        let batch = (self.to_batch)(&self.rows).map_err(|e| RecordError::Parquet(e.to_string()))?;
        let rel = format!("{}/part-{part:05}.parquet", self.name);
        let path = dir.join(&rel);
        let tmp = tmp_of(&path);
        let write = || {
            let file = File::create(&tmp).map_err(io(&tmp))?;
            // Schema metadata also goes into the Parquet footer's key/value pairs:
            // readers such as Hugging Face `datasets` look there (for the frames'
            // Image feature).
            let kv: Vec<parquet::file::metadata::KeyValue> = batch
                .schema()
                .metadata()
                .iter()
                .map(|(k, v)| parquet::file::metadata::KeyValue::new(k.clone(), v.clone()))
                .collect();
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .set_key_value_metadata((!kv.is_empty()).then_some(kv))
                .build();
            let pq = |e: parquet::errors::ParquetError| RecordError::Parquet(e.to_string());
            let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(pq)?;
            w.write(&batch).map_err(pq)?;
            let file = w.into_inner().map_err(pq)?;
            file.sync_all().map_err(io(&tmp))
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(Some(Staged { tmp, path, rel }))
    }

    pub(super) fn clear(&mut self) {
        self.rows.clear();
        self.bytes = 0;
    }
}

/// A chunk written and fsynced under its temporary name, waiting to be published.
pub(super) struct Staged {
    pub(super) tmp: PathBuf,
    pub(super) path: PathBuf,
    /// Path relative to the bundle, as the manifest lists it.
    pub(super) rel: String,
}
