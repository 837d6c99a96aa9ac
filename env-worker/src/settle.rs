//! Every settle policy in one place: how the server knows the screen is final after an
//! action. The bundled task app acknowledges its drawing (`Sync`); a web page
//! acknowledges its input and its frame's presentation over DevTools (`Browser`, the
//! page side in `web/rules.rs`); any other app is judged by XDamage falling quiet
//! (`Damage`). Whatever the signal, the wait ends on an X quiet window
//! ([`Settle::window`]) that `x11::XSession::settle` measures; which policy a pool gets
//! is the server's choice (its `spec.rs`), from the task and the profile.

use std::time::Duration;

/// How the server knows the screen is final after an action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SettlePolicy {
    /// The app acknowledges after drawing (the bundled tasks): after its answer and one
    /// X round trip the frame is final, so nothing is waited for. Exact.
    Sync,
    /// XDamage quiet window: wait until no damage for `settle_ms` (at most
    /// `settle_max_ms`). For apps that cannot acknowledge.
    #[default]
    Damage,
    /// A web page acknowledges the input (DevTools) and the browser presents the frame
    /// committed after it; then a short quiet window for the browser's X requests to
    /// land. Web tasks only.
    Browser,
}

impl SettlePolicy {
    /// The stored and wire name (`"sync"`, `"damage"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Damage => "damage",
            Self::Browser => "browser",
        }
    }
}

/// After a browser presented its frame, the pixels are still on their way through the
/// browser's own X connection: a short quiet window lets them land.
pub(crate) const BROWSER_QUIET_MS: u32 = 3;

/// How long a `Damage` settle waits for an app to start drawing its answer to a key
/// before the quiet window may end it. A terminal's echo goes through the shell and
/// the terminal's next frame (60 Hz): measured, 64 of 64 key steps into gnome-terminal
/// ended their 10 ms quiet window before the echo was drawn. A key that draws nothing
/// costs this bound.
pub(crate) const ANSWER_WAIT: Duration = Duration::from_millis(100);

/// How the screen is judged quiet after an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// Which signal ends the wait.
    pub policy: SettlePolicy,
    /// Quiet window in milliseconds (0: drain pending damage and return). `Damage` only.
    pub settle_ms: u32,
    /// Cap on the whole wait in milliseconds. `Damage` only.
    pub settle_max_ms: u32,
}

impl Default for Settle {
    fn default() -> Self {
        Self {
            policy: SettlePolicy::Damage,
            settle_ms: 10,
            settle_max_ms: 2000,
        }
    }
}

/// What a settle wait did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SettleReport {
    /// The policy that ran.
    pub policy: SettlePolicy,
    /// Milliseconds spent.
    pub waited_ms: f64,
    /// True when the quiet window was reached before the cap.
    pub quiesced: bool,
    /// DamageNotify events seen.
    pub damage_events: u32,
}

impl Settle {
    /// How long to wait for the first drawing after `action` before the quiet window
    /// may end the settle ([`ANSWER_WAIT`] for keys under `Damage`; the other policies
    /// have the app's own acknowledgement).
    pub(crate) fn answer_wait(&self, action: &crate::action::Action) -> Duration {
        if self.policy == SettlePolicy::Damage && action.answered_by_drawing() {
            ANSWER_WAIT.min(Duration::from_millis(self.settle_max_ms.into()))
        } else {
            Duration::ZERO
        }
    }

    /// The X quiet window this policy ends on, and the cap on the whole wait (never
    /// shorter than the window).
    pub fn window(&self) -> (Duration, Duration) {
        let quiet_ms = match self.policy {
            // The app already acknowledged: one round trip drains its damage.
            SettlePolicy::Sync => 0,
            SettlePolicy::Browser => BROWSER_QUIET_MS,
            SettlePolicy::Damage => self.settle_ms,
        };
        (
            Duration::from_millis(u64::from(quiet_ms)),
            Duration::from_millis(u64::from(self.settle_max_ms.max(quiet_ms))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_has_its_window() {
        let ms = Duration::from_millis;
        let damage = Settle::default();
        assert_eq!(damage.window(), (ms(10), ms(2000)));
        let sync = Settle {
            policy: SettlePolicy::Sync,
            ..damage
        };
        assert_eq!(sync.window(), (ms(0), ms(2000)));
        let browser = Settle {
            policy: SettlePolicy::Browser,
            settle_max_ms: 0,
            ..damage
        };
        // The cap is never shorter than the window.
        assert_eq!(browser.window(), (ms(3), ms(3)));
        assert_eq!(SettlePolicy::Browser.name(), "browser");
    }

    #[test]
    fn keys_wait_for_their_answer_under_damage_only() {
        use crate::action::Action;
        let damage = Settle::default();
        let key = Action::Key("a".into());
        assert_eq!(damage.answer_wait(&key), ANSWER_WAIT);
        assert_eq!(
            damage.answer_wait(&Action::TypeText("hi".into())),
            ANSWER_WAIT
        );
        // A bare modifier draws nothing; a click is not a key.
        assert_eq!(
            damage.answer_wait(&Action::Key("Shift".into())),
            Duration::ZERO
        );
        assert_eq!(damage.answer_wait(&Action::Noop), Duration::ZERO);
        // The app acknowledges under the other policies; the cap bounds the wait.
        for policy in [SettlePolicy::Sync, SettlePolicy::Browser] {
            assert_eq!(
                Settle { policy, ..damage }.answer_wait(&key),
                Duration::ZERO
            );
        }
        let short = Settle {
            settle_max_ms: 40,
            ..damage
        };
        assert_eq!(short.answer_wait(&key), Duration::from_millis(40));
    }
}
