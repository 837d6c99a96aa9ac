//! What a person does at the console: log in, take an env over, act on it, release it.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use deskgym_proto::v1 as pb;
use serde_json::json;

use super::{COOKIE, Console, EnvOf, Refusal};
use crate::invalid::quote;

/// `POST /api/login {"token": ...}`: checks the token and keeps it in an HttpOnly,
/// SameSite=Strict cookie for the console's later requests.
pub(super) async fn login(
    State(c): State<Console>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<serde_json::Value>,
) -> Result<Response, Refusal> {
    let token = body.get("token").and_then(|t| t.as_str()).unwrap_or("");
    // A cookie value holds no `;`, `,`, quote, backslash or space: such a token (never
    // echoed) logs in through the Authorization header instead.
    if !token
        .bytes()
        .all(|b| b.is_ascii_graphic() && !b";,\"\\".contains(&b))
    {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "this token cannot be kept in a cookie (it holds a space, `;`, `,`, a quote or a \
             backslash); send it as `authorization: Bearer <token>` instead"
                .into(),
        ));
    }
    let mut h = headers.clone();
    h.insert(
        header::AUTHORIZATION,
        format!("Bearer {token}")
            .parse()
            .map_err(|_| Refusal(StatusCode::BAD_REQUEST, "a token is printable ASCII".into()))?,
    );
    let who = c.who_acting(&h)?;
    // Checked above: the cookie carries the token as it is.
    let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
    Ok((
        [(header::SET_COOKIE, cookie)],
        axum::Json(json!({ "principal": &*who.name })),
    )
        .into_response())
}

/// `POST /api/envs/{id}/takeover`: the caller drives the env until they release it (or
/// their lease runs out); its agent's calls answer FAILED_PRECONDITION `human_control`
/// meanwhile. Calling again renews the lease.
pub(super) async fn take_over(
    State(c): State<Console>,
    EnvOf { who, env: e }: EnvOf<true>,
) -> Result<Response, Refusal> {
    let id = &e.id;
    match e.control.take(&who.name) {
        Err(other) => Err(Refusal(
            StatusCode::CONFLICT,
            format!("env {id} is already held by {other} at the console"),
        )),
        Ok(fresh) => {
            if fresh {
                note(&e, "takeover", &who.name);
                // The tree beside the screen, read now, inside this call: the person
                // acts on what they see, and no read of the console's outlives a call.
                if let Err(Refusal(_, why)) = c.read_tree(&e).await {
                    tracing::info!(env = %e.id, %why, "no tree at take-over");
                }
            }
            Ok(axum::Json(json!({
                "held_by": &*who.name,
                "lease_s": crate::env::HOLD_LEASE.as_secs(),
            }))
            .into_response())
        }
    }
}

/// `POST /api/envs/{id}/release`: gives the env back to its agent as it is now.
pub(super) async fn release(EnvOf { who, env: e }: EnvOf<true>) -> Result<Response, Refusal> {
    let id = &e.id;
    if !e.control.release(&who.name) {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!("env {id} is not held by {} (nothing to release)", who.name),
        ));
    }
    note(&e, "release", &who.name);
    Ok(axum::Json(json!({ "held_by": null })).into_response())
}

/// A take-over or a release: in the log, the pool's event log and the env's feed.
pub(super) fn note(e: &crate::env::Env, kind: &str, by: &str) {
    tracing::info!(env = %e.id, by, kind, "console");
    e.event(kind, || json!({ "by": by }));
    e.control.tell(|_| {}, || json!({ "kind": kind, "by": by }));
}

/// A person's action, as the console's page sends it (screen pixels).
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "verb", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum HumanAction {
    /// A click (`button`: left, right or middle; `count` 1..=3).
    Click {
        x: i32,
        y: i32,
        #[serde(default)]
        button: Option<String>,
        #[serde(default)]
        count: Option<u32>,
    },
    /// A drag with the left button.
    Drag {
        x: i32,
        y: i32,
        to_x: i32,
        to_y: i32,
    },
    /// Wheel clicks at a point (positive `dy` scrolls down).
    Scroll {
        x: i32,
        y: i32,
        #[serde(default)]
        dx: i32,
        #[serde(default)]
        dy: i32,
    },
    /// Text typed as it is.
    TypeText { text: String },
    /// A key chord (`ctrl+a`, `Return`).
    Key { keys: String },
}

impl HumanAction {
    /// The same action on the wire (validated there, as an agent's would be).
    fn to_pb(&self) -> pb::Action {
        use pb::action::Verb;
        let at = |x: i32, y: i32| {
            Some(pb::Target {
                kind: Some(pb::target::Kind::PointPx(pb::PointPx { x, y })),
            })
        };
        let verb = match self {
            Self::Click {
                x,
                y,
                button,
                count,
            } => Verb::Click(pb::Click {
                target: at(*x, *y),
                button: match button.as_deref() {
                    Some("right") => pb::MouseButton::Right,
                    Some("middle") => pb::MouseButton::Middle,
                    _ => pb::MouseButton::Left,
                } as i32,
                count: count.unwrap_or(1),
            }),
            Self::Drag { x, y, to_x, to_y } => Verb::Drag(pb::Drag {
                from: at(*x, *y),
                to: at(*to_x, *to_y),
                ..Default::default()
            }),
            Self::Scroll { x, y, dx, dy } => Verb::Scroll(pb::Scroll {
                target: at(*x, *y),
                dx: *dx,
                dy: *dy,
                pixels: false,
            }),
            Self::TypeText { text } => Verb::TypeText(pb::TypeText { text: text.clone() }),
            Self::Key { keys } => Verb::Key(pb::Key { keys: keys.clone() }),
        };
        pb::Action {
            verb: Some(verb),
            ..Default::default()
        }
    }
}

/// `POST /api/envs/{id}/act`: one action by the person holding the env, through the
/// agents' validation and step path, recorded with actor `human`.
pub(super) async fn act(
    State(c): State<Console>,
    EnvOf { who, env: e }: EnvOf<true>,
    body: Result<axum::Json<HumanAction>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, Refusal> {
    let axum::Json(action) = body.map_err(|e| {
        Refusal(
            StatusCode::BAD_REQUEST,
            format!(
                "{}; an action is JSON such as {{\"verb\": \"click\", \"x\": 10, \"y\": 20}} \
                 (verbs: click, drag, scroll, type_text, key)",
                quote(&e.body_text())
            ),
        )
    })?;
    let item = pb::StepRequest {
        env_id: e.id.clone(),
        action: Some(action.to_pb()),
        // The page watches the live view; the reply needs no pixels (raw skips the encode).
        encoding: pb::ImageEncoding::RawRgb as i32,
        // The tree after the action, for the page's tree (a person's pace allows it).
        tree: Some(pb::TreeRequest {
            enabled: true,
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = c.calls.start_human_step(item, &who)?.finish().await?;
    let info = r.info.unwrap_or_default();
    Ok(axum::Json(json!({
        "reward": r.reward,
        "terminated": r.terminated,
        "truncated": r.truncated,
        "step": info.step_index,
        "frame_hash": r.observation.map(|o| o.frame_hash),
    }))
    .into_response())
}

impl Console {
    /// Reads the env's tree in a call of the console's own (an Observe), for the person
    /// who holds it; the page gets it through [`crate::env::Env`]'s kept tree.
    async fn read_tree(&self, e: &std::sync::Arc<crate::env::Env>) -> Result<(), Refusal> {
        let tree = pb::TreeRequest {
            enabled: true,
            ..Default::default()
        };
        let opts = crate::checked::observation(
            &crate::checked::Field::root(),
            pb::ImageEncoding::RawRgb as i32,
            &[],
            &[],
            Some(&tree),
            self.mgr.limits(),
        )
        .map_err(crate::pool::PoolError::from)?;
        let job = self.mgr.on_env(
            e,
            crate::env::Call::Observe,
            self.mgr.op_timeout(),
            move |env, cache| env.observe(cache, &opts),
        )?;
        job.finish().await?;
        Ok(())
    }
}
