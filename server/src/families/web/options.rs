//! A web task's `task_options` (reward, clock, step_ms, ready_ms, data_mode, reload)
//! read into the page's spec, every value checked and named in its error.

use std::collections::HashMap;
use std::sync::Arc;

use deskgym_worker::{WebClock as Clock, WebReward as Reward, WebSpec};

use super::{WEB_ROOT, WebPage};
use crate::invalid::{Invalid, quote};
use crate::profiles::Profile;

/// A web task's spec from its page, the profile's browser and the pool's
/// `task_options`.
pub(super) fn web_spec(
    page: &WebPage,
    profile: &Profile,
    options: &HashMap<String, String>,
) -> Result<Arc<WebSpec>, Invalid> {
    let browser = profile.apps.get("chromium").cloned().ok_or_else(|| {
        Invalid::new(
            "profile",
            format!(
                "profile {} has no `chromium` app to show web tasks in",
                profile.name
            ),
        )
    })?;
    let mut spec = WebSpec {
        url: format!("file://{}/{}", WEB_ROOT, page.path),
        browser,
        clock: Clock::Steps { step_ms: 100 },
        reward: Reward::Original,
        ready_ms: 5_000,
        data_mode: "train".into(),
        reload: false,
    };
    let mut real = false;
    let mut step_ms = 100;
    let mut keys: Vec<_> = options.iter().collect();
    keys.sort();
    for (k, v) in keys {
        let bad =
            |why: &str| Invalid::new(format!("task_options.{k}"), format!("{}: {why}", quote(v)));
        let ms = |max: u32| {
            v.parse::<u32>().ok().filter(|n| *n <= max).ok_or_else(|| {
                bad(&format!(
                    "must be a whole number of milliseconds, 0..={max}"
                ))
            })
        };
        match k.as_str() {
            "reward" => {
                spec.reward = match v.as_str() {
                    "original" => Reward::Original,
                    "raw" => Reward::Raw,
                    "binary" => Reward::Binary,
                    _ => return Err(bad("must be original, raw or binary")),
                }
            }
            "clock" => {
                real = match v.as_str() {
                    "steps" => false,
                    "real" => true,
                    _ => return Err(bad("must be steps or real")),
                }
            }
            "step_ms" => step_ms = ms(600_000)?,
            "ready_ms" => spec.ready_ms = ms(60_000)?,
            "reload" => {
                spec.reload = match v.as_str() {
                    "never" => false,
                    "always" => true,
                    _ => return Err(bad("must be never (as MiniWoB++) or always")),
                }
            }
            "data_mode"
                if !v.is_empty()
                    && v.len() <= 32
                    && v.bytes().all(|b| b.is_ascii_alphanumeric()) =>
            {
                spec.data_mode = v.clone();
            }
            "data_mode" => return Err(bad("must be 1..=32 letters or digits (train, test)")),
            _ => {
                return Err(Invalid::new(
                    format!("task_options.{}", quote(k)),
                    "unknown option; miniwob tasks take reward, clock, step_ms, ready_ms, data_mode, reload",
                ));
            }
        }
    }
    spec.clock = if real {
        Clock::Real
    } else {
        Clock::Steps { step_ms }
    };
    Ok(Arc::new(spec))
}
