//! A profile's session with no task (`blank` on a profile): no goal, reward 0, never
//! terminates; a reset brings the session back to its initial state.

use crate::action::Action;
use crate::error::Result;
use crate::runner::{AppState, Ctx, Outcome, Runner, Session, session_methods};
use crate::sandbox::SandboxConfig;

/// A session and nothing else.
pub(crate) struct BlankRunner {
    session: Session,
}

impl BlankRunner {
    /// Starts the profile's session on `display`.
    pub(crate) fn start(config: &SandboxConfig, display: u32) -> Result<Self> {
        Ok(Self {
            session: Session::start(config, display)?,
        })
    }
}

impl Runner for BlankRunner {
    fn reset(&mut self, cx: Ctx<'_>, _seed: u64) -> Result<Outcome> {
        cx.x.release_all(Session::park(&cx))?;
        self.session.restart_if_used(cx.display)?;
        let settle = cx.x.settle(cx.settle)?;
        Ok(Outcome {
            app: AppState::idle(),
            settle,
        })
    }

    fn step(&mut self, cx: Ctx<'_>, action: &Action) -> Result<Outcome> {
        let settle = self.session.act_settled(cx.x, cx.settle, action)?;
        Ok(Outcome {
            app: AppState::idle(),
            settle,
        })
    }

    session_methods!(session, acts);
}
