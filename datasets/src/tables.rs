//! The four tables of a `.skn` bundle: rows, Arrow schemas, and rows → record batches.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, StringBuilder,
    TimestampMillisecondBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch, StructArray};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// One step of an episode.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepRow {
    /// `<env_id>/<episode number>`.
    pub episode_id: String,
    /// The env.
    pub env_id: String,
    /// 1-based index of the step in its episode.
    pub step_index: u32,
    /// When the step started (Unix ms).
    pub t_start_ms: i64,
    /// When it finished (Unix ms).
    pub t_end_ms: i64,
    /// Action verb (`click`, `type_text`, ...).
    pub verb: String,
    /// Pointer x, for pointer verbs (drag: the start).
    pub x: Option<i32>,
    /// Pointer y.
    pub y: Option<i32>,
    /// Drag end x.
    pub to_x: Option<i32>,
    /// Drag end y.
    pub to_y: Option<i32>,
    /// Typed text.
    pub text: Option<String>,
    /// Key chord.
    pub keys: Option<String>,
    /// The whole action as JSON.
    pub action_json: String,
    /// Reward of the step.
    pub reward: f64,
    /// The episode terminated here.
    pub terminated: bool,
    /// The episode was truncated here.
    pub truncated: bool,
    /// Frame hash before the action.
    pub frame_hash_before: String,
    /// Frame hash after (none when the step failed).
    pub frame_hash_after: Option<String>,
    /// Settle wait.
    pub settle_ms: f64,
    /// Server time of the step.
    pub latency_ms: f64,
    /// gRPC code name when the step failed.
    pub error_code: Option<String>,
    /// Who chose the action: an agent, or a person through the console.
    pub actor: Actor,
}

/// Who chose a step's action (the `actor` column).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Actor {
    /// A program through the API (the usual case).
    #[default]
    Agent,
    /// A person at the console (take-over or a demonstration).
    Human,
}

impl Actor {
    /// The column's value: `agent` or `human`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Human => "human",
        }
    }
}

/// One episode, written when it ends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EpisodeRow {
    /// `<env_id>/<episode number>`.
    pub episode_id: String,
    /// The env.
    pub env_id: String,
    /// Task id.
    pub task: String,
    /// Instruction.
    pub instruction: String,
    /// Seed.
    pub seed: u64,
    /// Number of steps.
    pub length: u32,
    /// Sum of rewards.
    pub ret: f64,
    /// The task was solved.
    pub success: bool,
    /// Why it ended: success, failure, max_steps, env_crash, closed, reset.
    pub termination: String,
    /// Start (Unix ms).
    pub start_ms: i64,
    /// End (Unix ms).
    pub end_ms: i64,
    /// The episode's MP4, relative to the bundle.
    pub video_file: Option<String>,
    /// Where the episode starts in its video (seconds).
    pub video_start_s: Option<f64>,
    /// Where it ends.
    pub video_end_s: Option<f64>,
}

/// One entry of the event log.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct EventRow {
    /// Order of the event in the run.
    pub seq: u64,
    /// When (Unix ms).
    pub time_ms: i64,
    /// Kind: pool_created, env_started, reset, step, error, env_crash, ...
    pub kind: String,
    /// The env, if any.
    pub env_id: String,
    /// Details as JSON.
    pub payload: String,
}

/// One distinct frame, stored once whatever its number of occurrences.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FrameRow {
    /// 32-hex-char XXH3-128 hash.
    pub frame_hash: String,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// PNG bytes.
    pub png: Vec<u8>,
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
}

/// Schema of `steps`.
pub(crate) fn steps_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("episode_id", DataType::Utf8, false),
        Field::new("env_id", DataType::Utf8, false),
        Field::new("step_index", DataType::UInt32, false),
        Field::new("t_start", ts(), false),
        Field::new("t_end", ts(), false),
        Field::new("action_verb", DataType::Utf8, false),
        Field::new("action_x", DataType::Int32, true),
        Field::new("action_y", DataType::Int32, true),
        Field::new("action_to_x", DataType::Int32, true),
        Field::new("action_to_y", DataType::Int32, true),
        Field::new("action_text", DataType::Utf8, true),
        Field::new("action_keys", DataType::Utf8, true),
        Field::new("action_json", DataType::Utf8, false),
        Field::new("reward", DataType::Float64, false),
        Field::new("terminated", DataType::Boolean, false),
        Field::new("truncated", DataType::Boolean, false),
        Field::new("frame_hash_before", DataType::Utf8, false),
        Field::new("frame_hash_after", DataType::Utf8, true),
        Field::new("settle_ms", DataType::Float64, false),
        Field::new("latency_ms", DataType::Float64, false),
        Field::new("error_code", DataType::Utf8, true),
        // Added after the first bundles: a reader treats a bundle without it as all agent.
        Field::new("actor", DataType::Utf8, false),
    ]))
}

/// Schema of `episodes`.
pub(crate) fn episodes_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("episode_id", DataType::Utf8, false),
        Field::new("env_id", DataType::Utf8, false),
        Field::new("task", DataType::Utf8, false),
        Field::new("instruction", DataType::Utf8, false),
        Field::new("seed", DataType::UInt64, false),
        Field::new("length", DataType::UInt32, false),
        // Not `return`: a reserved word in SQL, which DuckDB users would have to quote.
        Field::new("episode_return", DataType::Float64, false),
        Field::new("success", DataType::Boolean, false),
        Field::new("termination", DataType::Utf8, false),
        Field::new("start_time", ts(), false),
        Field::new("end_time", ts(), false),
        Field::new("video_file", DataType::Utf8, true),
        Field::new("video_start_s", DataType::Float64, true),
        Field::new("video_end_s", DataType::Float64, true),
    ]))
}

/// Schema of `events`.
pub(crate) fn events_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("seq", DataType::UInt64, false),
        Field::new("time", ts(), false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("env_id", DataType::Utf8, false),
        Field::new("payload", DataType::Utf8, false),
    ]))
}

fn image_fields() -> Fields {
    Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ])
}

/// Schema of `frames`: `image` is `struct<bytes: binary, path: string>`, the layout
/// Hugging Face `datasets` decodes as an `Image` feature; the `huggingface` metadata
/// says so, so `load_dataset("parquet", ...)` on the chunks yields images directly.
pub(crate) fn frames_schema() -> SchemaRef {
    let features = r#"{"info": {"features": {"frame_hash": {"dtype": "string", "_type": "Value"}, "width": {"dtype": "uint32", "_type": "Value"}, "height": {"dtype": "uint32", "_type": "Value"}, "image": {"_type": "Image"}}}}"#;
    let metadata =
        std::collections::HashMap::from([("huggingface".to_string(), features.to_string())]);
    Arc::new(Schema::new_with_metadata(
        vec![
            Field::new("frame_hash", DataType::Utf8, false),
            Field::new("width", DataType::UInt32, false),
            Field::new("height", DataType::UInt32, false),
            // Nullable, as the `Image` feature declares it (datasets compares the fields).
            Field::new("image", DataType::Struct(image_fields()), true),
        ],
        metadata,
    ))
}

fn batch(schema: SchemaRef, cols: Vec<ArrayRef>) -> Result<RecordBatch, ArrowError> {
    RecordBatch::try_new(schema, cols)
}

/// Rows → a `steps` batch.
pub(crate) fn steps_batch(rows: &[StepRow]) -> Result<RecordBatch, ArrowError> {
    let (mut ep, mut env, mut idx) = (
        StringBuilder::new(),
        StringBuilder::new(),
        UInt32Builder::new(),
    );
    let (mut t0, mut t1) = (
        TimestampMillisecondBuilder::new(),
        TimestampMillisecondBuilder::new(),
    );
    let mut verb = StringBuilder::new();
    let (mut x, mut y, mut tx, mut ty) = (
        Int32Builder::new(),
        Int32Builder::new(),
        Int32Builder::new(),
        Int32Builder::new(),
    );
    let (mut text, mut keys, mut json) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let (mut rew, mut term, mut trunc) = (
        Float64Builder::new(),
        BooleanBuilder::new(),
        BooleanBuilder::new(),
    );
    let (mut hb, mut ha) = (StringBuilder::new(), StringBuilder::new());
    let (mut settle, mut lat, mut err, mut actor) = (
        Float64Builder::new(),
        Float64Builder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    for r in rows {
        ep.append_value(&r.episode_id);
        env.append_value(&r.env_id);
        idx.append_value(r.step_index);
        t0.append_value(r.t_start_ms);
        t1.append_value(r.t_end_ms);
        verb.append_value(&r.verb);
        x.append_option(r.x);
        y.append_option(r.y);
        tx.append_option(r.to_x);
        ty.append_option(r.to_y);
        text.append_option(r.text.as_deref());
        keys.append_option(r.keys.as_deref());
        json.append_value(&r.action_json);
        rew.append_value(r.reward);
        term.append_value(r.terminated);
        trunc.append_value(r.truncated);
        hb.append_value(&r.frame_hash_before);
        ha.append_option(r.frame_hash_after.as_deref());
        settle.append_value(r.settle_ms);
        lat.append_value(r.latency_ms);
        err.append_option(r.error_code.as_deref());
        actor.append_value(r.actor.as_str());
    }
    batch(
        steps_schema(),
        vec![
            Arc::new(ep.finish()),
            Arc::new(env.finish()),
            Arc::new(idx.finish()),
            Arc::new(t0.finish().with_timezone("UTC")),
            Arc::new(t1.finish().with_timezone("UTC")),
            Arc::new(verb.finish()),
            Arc::new(x.finish()),
            Arc::new(y.finish()),
            Arc::new(tx.finish()),
            Arc::new(ty.finish()),
            Arc::new(text.finish()),
            Arc::new(keys.finish()),
            Arc::new(json.finish()),
            Arc::new(rew.finish()),
            Arc::new(term.finish()),
            Arc::new(trunc.finish()),
            Arc::new(hb.finish()),
            Arc::new(ha.finish()),
            Arc::new(settle.finish()),
            Arc::new(lat.finish()),
            Arc::new(err.finish()),
            Arc::new(actor.finish()),
        ],
    )
}

/// Rows → an `episodes` batch.
pub(crate) fn episodes_batch(rows: &[EpisodeRow]) -> Result<RecordBatch, ArrowError> {
    let (mut ep, mut env, mut task, mut instr) = (
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
        StringBuilder::new(),
    );
    let (mut seed, mut len, mut ret) = (
        UInt64Builder::new(),
        UInt32Builder::new(),
        Float64Builder::new(),
    );
    let (mut ok, mut why) = (BooleanBuilder::new(), StringBuilder::new());
    let (mut t0, mut t1) = (
        TimestampMillisecondBuilder::new(),
        TimestampMillisecondBuilder::new(),
    );
    let (mut vf, mut vs, mut ve) = (
        StringBuilder::new(),
        Float64Builder::new(),
        Float64Builder::new(),
    );
    for r in rows {
        ep.append_value(&r.episode_id);
        env.append_value(&r.env_id);
        task.append_value(&r.task);
        instr.append_value(&r.instruction);
        seed.append_value(r.seed);
        len.append_value(r.length);
        ret.append_value(r.ret);
        ok.append_value(r.success);
        why.append_value(&r.termination);
        t0.append_value(r.start_ms);
        t1.append_value(r.end_ms);
        vf.append_option(r.video_file.as_deref());
        vs.append_option(r.video_start_s);
        ve.append_option(r.video_end_s);
    }
    batch(
        episodes_schema(),
        vec![
            Arc::new(ep.finish()),
            Arc::new(env.finish()),
            Arc::new(task.finish()),
            Arc::new(instr.finish()),
            Arc::new(seed.finish()),
            Arc::new(len.finish()),
            Arc::new(ret.finish()),
            Arc::new(ok.finish()),
            Arc::new(why.finish()),
            Arc::new(t0.finish().with_timezone("UTC")),
            Arc::new(t1.finish().with_timezone("UTC")),
            Arc::new(vf.finish()),
            Arc::new(vs.finish()),
            Arc::new(ve.finish()),
        ],
    )
}

/// Rows → an `events` batch.
pub(crate) fn events_batch(rows: &[EventRow]) -> Result<RecordBatch, ArrowError> {
    let (mut seq, mut t, mut kind) = (
        UInt64Builder::new(),
        TimestampMillisecondBuilder::new(),
        StringBuilder::new(),
    );
    let (mut env, mut payload) = (StringBuilder::new(), StringBuilder::new());
    for r in rows {
        seq.append_value(r.seq);
        t.append_value(r.time_ms);
        kind.append_value(&r.kind);
        env.append_value(&r.env_id);
        payload.append_value(&r.payload);
    }
    batch(
        events_schema(),
        vec![
            Arc::new(seq.finish()),
            Arc::new(t.finish().with_timezone("UTC")),
            Arc::new(kind.finish()),
            Arc::new(env.finish()),
            Arc::new(payload.finish()),
        ],
    )
}

/// Rows → a `frames` batch.
pub(crate) fn frames_batch(rows: &[FrameRow]) -> Result<RecordBatch, ArrowError> {
    let (mut hash, mut w, mut h) = (
        StringBuilder::new(),
        UInt32Builder::new(),
        UInt32Builder::new(),
    );
    let (mut bytes, mut path) = (BinaryBuilder::new(), StringBuilder::new());
    for r in rows {
        hash.append_value(&r.frame_hash);
        w.append_value(r.width);
        h.append_value(r.height);
        bytes.append_value(&r.png);
        path.append_null();
    }
    let image = StructArray::try_new(
        image_fields(),
        vec![Arc::new(bytes.finish()), Arc::new(path.finish())],
        None,
    )?;
    batch(
        frames_schema(),
        vec![
            Arc::new(hash.finish()),
            Arc::new(w.finish()),
            Arc::new(h.finish()),
            Arc::new(image),
        ],
    )
}
