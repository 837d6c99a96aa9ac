//! A profile's sandboxed session, as the families that run one share it: started,
//! restarted to its initial state when something ran in it, and driven as a person
//! would (X input, apps launched, elements through AT-SPI).

use crate::action::Action;
use crate::clock::DesktopClock;
use crate::error::{DesktopError, Result};
use crate::sandbox::{Sandbox, SandboxConfig};
use crate::x11::XSession;

/// How long a `launch_app` step waits for the application's first window.
pub(crate) const LAUNCH_WINDOW_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A sandbox running a profile's session.
pub(crate) struct Session {
    /// `None` only after a restart failed (every request then fails, and so does
    /// [`Session::check_alive`]: the desktop is restarted).
    sandbox: Option<Sandbox>,
    /// The profile's config, with the clock's directory and environment added.
    config: SandboxConfig,
    /// As started: nothing ran in it since (a reset need not restart it).
    fresh: bool,
    /// The clock its programs run on, where the profile asks for one (the same
    /// directory across restarts).
    clock: Option<DesktopClock>,
}

impl Session {
    /// Starts the session on `display`.
    pub(crate) fn start(config: &SandboxConfig, display: u32) -> Result<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut config = config.clone();
        let clock = if config.clock {
            let root = crate::sandbox::sandboxes_root();
            std::fs::create_dir_all(&root)?;
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let clock = DesktopClock::create(&root.join(format!("clock-{display}-{n}")))?;
            config
                .shares
                .push((clock.dir().to_path_buf(), crate::clock::INSIDE.to_string()));
            config.env.extend(crate::clock::env());
            Some(clock)
        } else {
            None
        };
        Ok(Self {
            sandbox: Some(Sandbox::start(display, &config)?),
            config,
            fresh: true,
            clock,
        })
    }

    /// The clock its programs run on, if the profile gives them one.
    pub(crate) fn clock(&mut self) -> Option<&mut DesktopClock> {
        self.clock.as_mut()
    }

    /// What the clock reads now (ms since the epoch), if there is one.
    pub(crate) fn clock_ms(&self) -> Option<u64> {
        self.clock.as_ref().map(DesktopClock::now_ms)
    }

    /// Where a session's reset parks the pointer: mid-screen, off the corners where
    /// pyautogui's fail-safe (as OSWorld-style agents call it) would refuse to act.
    pub(crate) fn park(cx: &super::Ctx<'_>) -> crate::Point {
        crate::Point {
            x: cx.width as i32 / 2,
            y: cx.height as i32 / 2,
        }
    }

    /// True when a reset restarts it: something ran in it since it started.
    pub(crate) fn used(&self) -> bool {
        !self.fresh
    }

    /// Back to the profile's initial state when used: every program ended, the home
    /// copied again from its seed, the session started anew. True when it restarted.
    pub(crate) fn restart_if_used(&mut self, display: u32) -> Result<bool> {
        if self.fresh && self.sandbox.is_some() {
            if let Some(c) = self.clock.as_mut() {
                c.on_start()?;
            }
            return Ok(false);
        }
        // The old sandbox ends before the new one starts (same display, same names),
        // and the new one's programs start on the clock its episode asks for.
        self.sandbox = None;
        if let Some(c) = self.clock.as_mut() {
            c.on_start()?;
        }
        self.sandbox = Some(Sandbox::start(display, &self.config)?);
        self.fresh = true;
        Ok(true)
    }

    /// The sandbox, for a request that may change it (a reset then restarts it).
    pub(crate) fn sandbox(&mut self) -> Result<&Sandbox> {
        self.fresh = false;
        self.sandbox_unchanged()
    }

    /// The sandbox, for a request that only reads.
    pub(crate) fn sandbox_unchanged(&self) -> Result<&Sandbox> {
        self.sandbox
            .as_ref()
            .ok_or_else(|| DesktopError::App("the sandbox is not running".into()))
    }

    /// Marks the session used (the clipboard was set, say).
    pub(crate) fn touch(&mut self) {
        self.fresh = false;
    }

    /// Fails when the sandbox exited.
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if self.sandbox.as_mut().is_some_and(Sandbox::is_alive) {
            Ok(())
        } else {
            Err(DesktopError::App("the sandbox exited".into()))
        }
    }

    /// The pid of the sandbox (killing it ends every program in it).
    pub(crate) fn pid(&self) -> u32 {
        self.sandbox.as_ref().map_or(0, Sandbox::pid)
    }

    /// Performs a person's action: X input, an app launched (its window waited for),
    /// an element's action or value through AT-SPI.
    pub(crate) fn act(&mut self, x: &mut XSession, action: &Action) -> Result<()> {
        self.fresh = false;
        match action {
            Action::LaunchApp(argv) => self.launch_and_wait(x, argv),
            Action::InvokeAction { element, action } => {
                self.sandbox()?.a11y_invoke(element, action)
            }
            Action::SetValue { element, value } => self.sandbox()?.a11y_set_value(element, value),
            _ => x.perform(action),
        }
    }

    /// [`Self::act`], then waits for the screen to settle; after a key, for the app's
    /// answer first ([`crate::Settle::answer_wait`]).
    pub(crate) fn act_settled(
        &mut self,
        x: &mut XSession,
        settle: crate::Settle,
        action: &Action,
    ) -> Result<crate::SettleReport> {
        self.act(x, action)?;
        x.settle_responding(settle, settle.answer_wait(action))
    }

    /// Launches a program and waits (at most [`LAUNCH_WINDOW_WAIT`]) for a new top-level
    /// window, so the step that launches an app observes it. An app that shows no new
    /// window (a second instance handing over to the first) just takes the full wait.
    pub(crate) fn launch_and_wait(&mut self, x: &mut XSession, argv: &[String]) -> Result<()> {
        let before = x.window_ids()?;
        self.sandbox()?.launch(argv)?;
        let deadline = std::time::Instant::now() + LAUNCH_WINDOW_WAIT;
        while std::time::Instant::now() < deadline {
            if x.window_ids()?.iter().any(|w| !before.contains(w)) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(())
    }

    /// The session's accessibility tree (AT-SPI).
    pub(crate) fn tree(&self, limits: &crate::a11y::Limits) -> Result<crate::a11y::Tree> {
        self.sandbox_unchanged()?.a11y_tree(limits)
    }

    /// What an element of the session is now.
    pub(crate) fn live(&self, id: &str) -> Result<crate::a11y::Live> {
        self.sandbox_unchanged()?.a11y_live(id)
    }
}
