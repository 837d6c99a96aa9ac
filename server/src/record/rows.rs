//! The rows of a recording: steps, episodes, frames and lifecycle events turned into
//! the `deskgym-datasets` writer's records.

use deskgym_datasets::{EpisodeRow, FrameRecord, Record, StepRow};
use deskgym_worker::Action;
use serde_json::json;

/// An event record.
pub(crate) fn event(kind: &str, env_id: &str, payload: serde_json::Value) -> Record {
    Record::Event {
        kind: kind.into(),
        env_id: env_id.into(),
        payload,
    }
}

/// A frame record (the writer stores each distinct hash once).
/// (The writer also appends frames of an episode to that episode's video.)
pub(crate) fn frame(
    hash: &str,
    width: u32,
    height: u32,
    rgb: bytes::Bytes,
    env_id: &str,
    episode_id: Option<&str>,
) -> Record {
    Record::Frame(FrameRecord {
        hash: hash.into(),
        width,
        height,
        rgb,
        env_id: env_id.into(),
        episode_id: episode_id.map(Into::into),
    })
}

/// The typed action columns of a step row, filled by name.
#[derive(Default)]
struct ActionCols {
    x: Option<i32>,
    y: Option<i32>,
    to_x: Option<i32>,
    to_y: Option<i32>,
    text: Option<String>,
    keys: Option<String>,
}

impl ActionCols {
    /// A point's columns.
    fn at(p: deskgym_worker::Point) -> Self {
        Self {
            x: Some(p.x),
            y: Some(p.y),
            ..Self::default()
        }
    }

    fn text(t: &str) -> Self {
        Self {
            text: Some(t.into()),
            ..Self::default()
        }
    }

    fn keys(k: &str) -> Self {
        Self {
            keys: Some(k.into()),
            ..Self::default()
        }
    }
}

/// The `action` event: what a step is about to run (element targets resolved), before
/// it reaches the desktop; `step_index` is the index it will have.
pub(crate) fn action_event(
    episode_id: &str,
    step_index: u32,
    actor: deskgym_datasets::Actor,
    action: &Action,
    frame_before: u128,
) -> serde_json::Value {
    json!({
        "episode_id": episode_id, "step_index": step_index, "actor": actor.as_str(),
        "action": action_value(action),
        "frame_hash_before": deskgym_worker::hash_hex(frame_before),
    })
}

/// What one step did: built once by `Env::step`, turned into the steps table's row
/// here and into the console's feed by the env, so the two never disagree.
#[derive(Debug)]
pub(crate) struct StepReport<'a> {
    /// The episode the step belongs to.
    pub episode_id: String,
    /// The episode's number in the env (1, 2, ...).
    pub episode: u64,
    /// The env that stepped.
    pub env_id: &'a str,
    /// The step's index: the one it has (applied) or would have had (refused).
    pub step_index: u32,
    /// What ran, element targets resolved.
    pub action: &'a Action,
    /// Who chose it.
    pub actor: deskgym_datasets::Actor,
    /// When it started, in the recorder's clock.
    pub t_start_ms: i64,
    /// The frame on screen before it.
    pub frame_before: u128,
    /// How it ended.
    pub outcome: StepOutcome,
}

/// How a step ended.
#[derive(Debug)]
pub(crate) enum StepOutcome {
    /// It failed with this error (its code name and text).
    Failed {
        code: &'static str,
        message: String,
        /// Its latency so far, in milliseconds.
        latency_ms: f64,
    },
    /// It ran: its reward and end flags, the frame after it.
    Ran {
        reward: f64,
        terminated: bool,
        truncated: bool,
        frame_after: u128,
        settle_ms: f64,
        latency_ms: f64,
    },
}

impl StepReport<'_> {
    /// The `ack` event: how the step ended (the steps table's row, as an event).
    pub(crate) fn ack_event(&self) -> serde_json::Value {
        let base = json!({"episode_id": self.episode_id, "step_index": self.step_index});
        let mut j = match &self.outcome {
            StepOutcome::Failed {
                code,
                message,
                latency_ms,
            } => json!({"ok": false, "code": code, "message": message, "latency_ms": latency_ms}),
            StepOutcome::Ran {
                reward,
                terminated,
                truncated,
                frame_after,
                settle_ms,
                latency_ms,
            } => json!({
                "ok": true, "reward": reward, "terminated": terminated, "truncated": truncated,
                "frame_hash": deskgym_worker::hash_hex(*frame_after), "settle_ms": settle_ms,
                "latency_ms": latency_ms,
            }),
        };
        if let (Some(o), serde_json::Value::Object(b)) = (j.as_object_mut(), base) {
            o.extend(b);
        }
        j
    }

    /// The steps table's row (its end time read now).
    pub(crate) fn row(&self) -> StepRow {
        let base = StepRow {
            episode_id: self.episode_id.clone(),
            env_id: self.env_id.to_string(),
            step_index: self.step_index,
            t_start_ms: self.t_start_ms,
            t_end_ms: deskgym_datasets::unix_ms(),
            frame_hash_before: deskgym_worker::hash_hex(self.frame_before),
            actor: self.actor,
            ..step_row(self.action)
        };
        match &self.outcome {
            StepOutcome::Failed {
                code, latency_ms, ..
            } => StepRow {
                error_code: Some(code.to_string()),
                latency_ms: *latency_ms,
                ..base
            },
            StepOutcome::Ran {
                reward,
                terminated,
                truncated,
                frame_after,
                settle_ms,
                latency_ms,
            } => StepRow {
                reward: *reward,
                terminated: *terminated,
                truncated: *truncated,
                frame_hash_after: Some(deskgym_worker::hash_hex(*frame_after)),
                settle_ms: *settle_ms,
                latency_ms: *latency_ms,
                ..base
            },
        }
    }
}

/// An action as its JSON form (the steps table's `action_json`, the `action` event's
/// and the console feed's `action`).
pub(crate) fn action_value(action: &Action) -> serde_json::Value {
    action_parts(action).2
}

/// An action as typed columns plus JSON.
pub(crate) fn step_row(action: &Action) -> StepRow {
    let (verb, cols, j) = action_parts(action);
    let ActionCols {
        x,
        y,
        to_x,
        to_y,
        text,
        keys,
    } = cols;
    StepRow {
        verb: verb.into(),
        x,
        y,
        to_x,
        to_y,
        text,
        keys,
        action_json: j.to_string(),
        ..Default::default()
    }
}

/// An action's verb, typed columns and JSON form.
fn action_parts(action: &Action) -> (&'static str, ActionCols, serde_json::Value) {
    let none = ActionCols::default;
    let (verb, cols, extra) = match action {
        Action::Click { at, button, count } => (
            "click",
            ActionCols::at(*at),
            json!({"button": button.name(), "count": count}),
        ),
        Action::Move { to } => ("move", ActionCols::at(*to), json!({})),
        Action::Scroll { at, dx, dy } => {
            ("scroll", ActionCols::at(*at), json!({"dx": dx, "dy": dy}))
        }
        Action::Drag {
            from,
            to,
            button,
            duration_ms,
            modifiers,
        } => (
            "drag",
            ActionCols {
                to_x: Some(to.x),
                to_y: Some(to.y),
                keys: (!modifiers.is_empty()).then(|| modifiers.clone()),
                ..ActionCols::at(*from)
            },
            json!({"button": button.name(), "duration_ms": duration_ms}),
        ),
        Action::MouseDown { at, button } | Action::MouseUp { at, button } => (
            if matches!(action, Action::MouseDown { .. }) {
                "mouse_down"
            } else {
                "mouse_up"
            },
            at.map_or_else(none, ActionCols::at),
            json!({"button": button.name()}),
        ),
        Action::TypeText(t) => ("type_text", ActionCols::text(t), json!({})),
        Action::KeyDown(k) | Action::KeyUp(k) => (
            if matches!(action, Action::KeyDown(_)) {
                "key_down"
            } else {
                "key_up"
            },
            ActionCols::keys(k),
            json!({}),
        ),
        Action::Key(k) => ("key", ActionCols::keys(k), json!({})),
        Action::Wait(ms) => ("wait", none(), json!({"ms": ms})),
        Action::Noop => ("noop", none(), json!({})),
        Action::LaunchApp(argv) => ("launch_app", none(), json!({"argv": argv})),
        Action::ActivateWindow(w) | Action::CloseWindow(w) => (
            if matches!(action, Action::ActivateWindow(_)) {
                "activate_window"
            } else {
                "close_window"
            },
            none(),
            json!({"window": w}),
        ),
        Action::ActivateApp(app) => ("activate_window", none(), json!({"app": app})),
        Action::MoveWindow { window, x, y } => (
            "move_window",
            ActionCols::at(deskgym_worker::Point { x: *x, y: *y }),
            json!({"window": window}),
        ),
        Action::InvokeAction { element, action } => (
            "invoke_action",
            none(),
            json!({"element": element, "action": action}),
        ),
        Action::SetValue { element, value } => (
            "set_value",
            ActionCols::text(value),
            json!({"element": element}),
        ),
        Action::ResizeWindow {
            window,
            width,
            height,
        } => (
            "resize_window",
            none(),
            json!({"window": window, "width": width, "height": height}),
        ),
    };
    let mut j = json!({"verb": verb, "x": cols.x, "y": cols.y, "to_x": cols.to_x,
        "to_y": cols.to_y, "text": cols.text, "keys": cols.keys});
    if let (Some(o), serde_json::Value::Object(e)) = (j.as_object_mut(), extra) {
        o.extend(e);
        o.retain(|_, v| !v.is_null());
    }
    (verb, cols, j)
}

/// Everything about an episode the episodes table needs, filled in as it runs.
#[derive(Clone, Debug, Default)]
pub(crate) struct EpisodeLog {
    /// `<env_id>/<episode number>`.
    pub episode_id: String,
    /// Unix ms at reset.
    pub start_ms: i64,
    /// Sum of rewards.
    pub ret: f64,
}

/// The row for an episode that ended with `termination`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn episode_row(
    log: &EpisodeLog,
    env_id: &str,
    task: &str,
    instruction: &str,
    seed: u64,
    length: u32,
    termination: &str,
) -> Record {
    Record::Episode(EpisodeRow {
        episode_id: log.episode_id.clone(),
        env_id: env_id.into(),
        task: task.into(),
        instruction: instruction.into(),
        seed,
        length,
        ret: log.ret,
        success: termination == "success",
        termination: termination.into(),
        start_ms: log.start_ms,
        end_ms: deskgym_datasets::unix_ms(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use deskgym_worker::{Button, Point};

    #[test]
    fn a_step_report_becomes_one_row_whichever_way_the_step_ended() {
        let action = Action::Key("ctrl+s".into());
        let report = |outcome| StepReport {
            episode_id: "ep".into(),
            episode: 2,
            env_id: "env-1",
            step_index: 7,
            action: &action,
            actor: deskgym_datasets::Actor::Human,
            t_start_ms: 5,
            frame_before: 1,
            outcome,
        };
        let failed = report(StepOutcome::Failed {
            code: "UNAVAILABLE",
            message: "gone".into(),
            latency_ms: 3.0,
        })
        .row();
        assert_eq!(
            (
                failed.error_code.as_deref(),
                failed.frame_hash_after,
                failed.step_index
            ),
            (Some("UNAVAILABLE"), None, 7)
        );
        assert_eq!(
            (failed.verb.as_str(), failed.keys.as_deref()),
            ("key", Some("ctrl+s"))
        );
        let ran = report(StepOutcome::Ran {
            reward: 1.0,
            terminated: true,
            truncated: false,
            frame_after: 2,
            settle_ms: 4.0,
            latency_ms: 6.0,
        })
        .row();
        assert_eq!(
            (ran.error_code, ran.reward, ran.terminated, ran.latency_ms),
            (None, 1.0, true, 6.0)
        );
        assert_eq!(ran.frame_hash_after, Some(deskgym_worker::hash_hex(2)));
        assert_eq!(ran.frame_hash_before, deskgym_worker::hash_hex(1));
        assert!(ran.t_end_ms >= ran.t_start_ms && ran.actor == deskgym_datasets::Actor::Human);
    }

    #[test]
    fn step_rows_put_each_action_in_its_columns() {
        let drag = step_row(&Action::Drag {
            from: Point { x: 1, y: 2 },
            to: Point { x: 3, y: 4 },
            button: Button::Left,
            duration_ms: 50,
            modifiers: "shift".into(),
        });
        assert_eq!(
            (
                drag.x,
                drag.y,
                drag.to_x,
                drag.to_y,
                drag.keys.as_deref(),
                drag.text
            ),
            (Some(1), Some(2), Some(3), Some(4), Some("shift"), None)
        );
        let j: serde_json::Value = serde_json::from_str(&drag.action_json).unwrap();
        assert_eq!(
            j,
            json!({"verb": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4, "keys": "shift",
                   "button": "left", "duration_ms": 50})
        );
        let up = step_row(&Action::MouseUp {
            at: None,
            button: Button::Right,
        });
        assert_eq!((up.verb.as_str(), up.x, up.y), ("mouse_up", None, None));
        assert_eq!(up.action_json, r#"{"button":"right","verb":"mouse_up"}"#);
        let set = step_row(&Action::SetValue {
            element: "e7".into(),
            value: "hi".into(),
        });
        assert_eq!((set.text.as_deref(), set.keys), (Some("hi"), None));
        let moved = step_row(&Action::MoveWindow {
            window: 9,
            x: -5,
            y: 6,
        });
        assert_eq!((moved.x, moved.y, moved.to_x), (Some(-5), Some(6), None));
    }
}
