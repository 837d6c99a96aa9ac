//! Reading a bundle back for a replay: its episodes, one episode's steps in order, and
//! a frame's PNG by hash. Rows come out as JSON, the shape a viewer wants; a bundle
//! still being written is read as far as its complete chunks go.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, TimestampMillisecondType, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use serde_json::{Value, json};

/// Why a bundle could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Not a bundle (no manifest), or gone.
    #[error("{0} is not a readable .skn bundle: {1}")]
    NotABundle(String, String),
    /// A table chunk could not be read.
    #[error("{0}: {1}")]
    Table(String, String),
}

/// Where a frame is: the chunk and the row in it.
type FrameIndex = HashMap<String, (PathBuf, usize)>;

/// A bundle opened for reading (cheap; its frame index is built on the first frame).
#[derive(Debug)]
pub struct Bundle {
    dir: PathBuf,
    frames: Mutex<Option<FrameIndex>>,
}

impl Bundle {
    /// Opens the bundle at `dir` (its manifest must read).
    pub fn open(dir: &Path) -> Result<Self, ReplayError> {
        crate::read_manifest(dir)
            .map_err(|e| ReplayError::NotABundle(dir.display().to_string(), e.to_string()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            frames: Mutex::new(None),
        })
    }

    /// The bundle's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every ended episode, oldest first: id, env, task, instruction, seed, length,
    /// return, success, termination, start (Unix ms), video file.
    pub fn episodes(&self) -> Result<Vec<Value>, ReplayError> {
        let mut out = Vec::new();
        for b in self.batches("episodes")? {
            let s = |n: &str| b.column_by_name(n).map(|c| c.as_string::<i32>().clone());
            let (id, env, task, instr, term) = (
                s("episode_id"),
                s("env_id"),
                s("task"),
                s("instruction"),
                s("termination"),
            );
            let (Some(id), Some(env), Some(task), Some(instr), Some(term)) =
                (id, env, task, instr, term)
            else {
                return Err(self.bad("episodes", "a column is missing"));
            };
            let seed = col::<UInt64Type>(&b, "seed");
            let len = col::<UInt32Type>(&b, "length");
            let ret = col::<Float64Type>(&b, "episode_return");
            let start = col::<TimestampMillisecondType>(&b, "start_time");
            let success = b.column_by_name("success").map(|c| c.as_boolean().clone());
            let video = s("video_file");
            for i in 0..b.num_rows() {
                out.push(json!({
                    "episode_id": id.value(i),
                    "env_id": env.value(i),
                    "task": task.value(i),
                    "instruction": instr.value(i),
                    "seed": seed.as_ref().map(|c| c.value(i)),
                    "length": len.as_ref().map(|c| c.value(i)),
                    "episode_return": ret.as_ref().map(|c| c.value(i)),
                    "success": success.as_ref().map(|c| c.value(i)),
                    "termination": term.value(i),
                    "start_ms": start.as_ref().map(|c| c.value(i)),
                    "video_file": video.as_ref().filter(|c| c.is_valid(i)).map(|c| c.value(i)),
                }));
            }
        }
        out.sort_by_key(|e| e["start_ms"].as_i64().unwrap_or(0));
        Ok(out)
    }

    /// The steps of `episode_id` in order: index, action (JSON), actor, reward, ends,
    /// frame hashes before and after, error, start (Unix ms).
    pub fn steps(&self, episode_id: &str) -> Result<Vec<Value>, ReplayError> {
        let mut out = Vec::new();
        for b in self.batches("steps")? {
            let s = |n: &str| b.column_by_name(n).map(|c| c.as_string::<i32>().clone());
            let (Some(ep), Some(action), Some(before)) =
                (s("episode_id"), s("action_json"), s("frame_hash_before"))
            else {
                return Err(self.bad("steps", "a column is missing"));
            };
            let (after, err, actor) = (s("frame_hash_after"), s("error_code"), s("actor"));
            let idx = col::<UInt32Type>(&b, "step_index");
            let rew = col::<Float64Type>(&b, "reward");
            let t0 = col::<TimestampMillisecondType>(&b, "t_start");
            let term = b
                .column_by_name("terminated")
                .map(|c| c.as_boolean().clone());
            let trunc = b
                .column_by_name("truncated")
                .map(|c| c.as_boolean().clone());
            let opt = |c: &Option<arrow_array::StringArray>, i: usize| {
                c.as_ref()
                    .filter(|c| c.is_valid(i))
                    .map(|c| c.value(i).to_string())
            };
            for i in (0..b.num_rows()).filter(|&i| ep.value(i) == episode_id) {
                out.push(json!({
                    "step": idx.as_ref().map(|c| c.value(i)),
                    "action": serde_json::from_str::<Value>(action.value(i)).unwrap_or(Value::Null),
                    "actor": opt(&actor, i).unwrap_or_else(|| "agent".into()),
                    "reward": rew.as_ref().map(|c| c.value(i)),
                    "terminated": term.as_ref().map(|c| c.value(i)),
                    "truncated": trunc.as_ref().map(|c| c.value(i)),
                    "frame_hash_before": before.value(i),
                    "frame_hash_after": opt(&after, i),
                    "error_code": opt(&err, i),
                    "t_start_ms": t0.as_ref().map(|c| c.value(i)),
                }));
            }
        }
        out.sort_by_key(|s| s["step"].as_u64().unwrap_or(0));
        Ok(out)
    }

    /// The event log in order (`seq`): seq, time (Unix ms), kind, env id, payload (the
    /// JSON object). `env_id`: only that env's events (and not the pool's own).
    pub fn events(&self, env_id: Option<&str>) -> Result<Vec<Value>, ReplayError> {
        let mut out = Vec::new();
        for b in self.batches("events")? {
            let s = |n: &str| b.column_by_name(n).map(|c| c.as_string::<i32>().clone());
            let (Some(kind), Some(env), Some(payload)) = (s("kind"), s("env_id"), s("payload"))
            else {
                return Err(self.bad("events", "a column is missing"));
            };
            let seq = col::<UInt64Type>(&b, "seq");
            let time = col::<TimestampMillisecondType>(&b, "time");
            for i in (0..b.num_rows()).filter(|&i| env_id.is_none_or(|e| env.value(i) == e)) {
                out.push(json!({
                    "seq": seq.as_ref().map(|c| c.value(i)),
                    "time_ms": time.as_ref().map(|c| c.value(i)),
                    "kind": kind.value(i),
                    "env_id": env.value(i),
                    "payload": serde_json::from_str::<Value>(payload.value(i)).unwrap_or(Value::Null),
                }));
            }
        }
        out.sort_by_key(|e| e["seq"].as_u64().unwrap_or(0));
        Ok(out)
    }

    /// The PNG of the frame `hash`, if the bundle holds it. The index of frames is
    /// built once (hashes only); a frame it lacks rebuilds it once, for a bundle still
    /// being written.
    pub fn frame_png(&self, hash: &str) -> Result<Option<Vec<u8>>, ReplayError> {
        let mut index = self.frames.lock().unwrap_or_else(|p| p.into_inner());
        let found = index.as_ref().and_then(|i| i.get(hash).cloned());
        let at = match found {
            Some(at) => Some(at),
            None => {
                *index = Some(self.index_frames()?);
                index.as_ref().and_then(|i| i.get(hash).cloned())
            }
        };
        drop(index);
        let Some((path, row)) = at else {
            return Ok(None);
        };
        let read = || -> Result<Option<Vec<u8>>, String> {
            let f = std::fs::File::open(&path).map_err(|e| e.to_string())?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(f).map_err(|e| e.to_string())?;
            let image = builder
                .schema()
                .index_of("image")
                .map_err(|e| e.to_string())?;
            let mask = ProjectionMask::roots(builder.parquet_schema(), [image]);
            let selection =
                RowSelection::from(vec![RowSelector::skip(row), RowSelector::select(1)]);
            let reader = builder
                .with_projection(mask)
                .with_row_selection(selection)
                .build()
                .map_err(|e| e.to_string())?;
            for b in reader {
                let b = b.map_err(|e| e.to_string())?;
                if b.num_rows() == 0 {
                    continue;
                }
                let img = b.column(0).as_struct();
                let bytes = img
                    .column_by_name("bytes")
                    .ok_or("the image column has no bytes")?
                    .as_binary::<i32>();
                return Ok(bytes.is_valid(0).then(|| bytes.value(0).to_vec()));
            }
            Ok(None)
        };
        read().map_err(|e| ReplayError::Table(path.display().to_string(), e))
    }

    fn index_frames(&self) -> Result<FrameIndex, ReplayError> {
        let mut index = HashMap::new();
        for path in self.chunks("frames")? {
            let f = std::fs::File::open(&path).map_err(|e| self.bad("frames", &e.to_string()))?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(f)
                .map_err(|e| self.bad("frames", &e.to_string()))?;
            let Ok(col) = builder.schema().index_of("frame_hash") else {
                return Err(self.bad("frames", "no frame_hash column"));
            };
            let mask = ProjectionMask::roots(builder.parquet_schema(), [col]);
            let reader = builder
                .with_projection(mask)
                .build()
                .map_err(|e| self.bad("frames", &e.to_string()))?;
            let mut row = 0;
            for b in reader {
                let b = b.map_err(|e| self.bad("frames", &e.to_string()))?;
                let hashes = b.column(0).as_string::<i32>();
                for i in 0..b.num_rows() {
                    index.insert(hashes.value(i).to_string(), (path.clone(), row + i));
                }
                row += b.num_rows();
            }
        }
        Ok(index)
    }

    /// The complete chunks of `table`, in order.
    fn chunks(&self, table: &str) -> Result<Vec<PathBuf>, ReplayError> {
        let dir = self.dir.join(table);
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(d) => d
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
                .collect(),
            // No chunk written yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(self.bad(table, &e.to_string())),
        };
        paths.sort();
        Ok(paths)
    }

    /// Every batch of `table`.
    fn batches(&self, table: &str) -> Result<Vec<RecordBatch>, ReplayError> {
        let mut out = Vec::new();
        for path in self.chunks(table)? {
            let f = std::fs::File::open(&path).map_err(|e| self.bad(table, &e.to_string()))?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(f)
                .and_then(|b| b.build())
                .map_err(|e| self.bad(table, &e.to_string()))?;
            for b in reader {
                out.push(b.map_err(|e| self.bad(table, &e.to_string()))?);
            }
        }
        Ok(out)
    }

    fn bad(&self, table: &str, why: &str) -> ReplayError {
        ReplayError::Table(format!("{}/{table}", self.dir.display()), why.to_string())
    }
}

/// A primitive column by name, when present with that type.
fn col<T: arrow_array::types::ArrowPrimitiveType>(
    b: &RecordBatch,
    name: &str,
) -> Option<arrow_array::PrimitiveArray<T>> {
    b.column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<T>().cloned())
}
