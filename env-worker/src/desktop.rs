//! One desktop: an Xvfb, a client session on it and the task app, started and stopped
//! together.

use crate::Point;
use crate::action::Action;
use crate::error::{DesktopError, Result};
use crate::frame::Frame;
use crate::task_app::{AppState, TaskApp};
use crate::x11::{Settle, SettleReport, XSession};
use crate::xvfb::Xvfb;

/// What a desktop runs and how.
#[derive(Clone, Debug, PartialEq)]
pub struct DesktopConfig {
    /// Bundled task id.
    pub task: String,
    /// Screen width in pixels.
    pub width: u32,
    /// Screen height in pixels.
    pub height: u32,
    /// Settle policy after every action.
    pub settle: Settle,
}

/// The outcome of a reset or step, before capture.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// What the task app reported.
    pub app: AppState,
    /// How the settle wait went.
    pub settle: SettleReport,
}

/// A running desktop. Fields drop in declaration order: app, X session, then Xvfb.
pub struct Desktop {
    app: TaskApp,
    x: XSession,
    xvfb: Xvfb,
    config: DesktopConfig,
}

impl std::fmt::Debug for Desktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desktop")
            .field("display", &self.xvfb.display())
            .field("config", &self.config)
            .finish()
    }
}

impl Desktop {
    /// Starts Xvfb, connects, launches the task app (order matters: each needs the last).
    pub fn start(config: DesktopConfig) -> Result<Self> {
        let xvfb = Xvfb::start(config.width, config.height)?;
        let x = XSession::connect(xvfb.display())?;
        let app = TaskApp::spawn(xvfb.display(), &config.task, config.width, config.height)?;
        Ok(Self {
            app,
            x,
            xvfb,
            config,
        })
    }

    /// The display number.
    pub fn display(&self) -> u32 {
        self.xvfb.display()
    }

    /// Pid of the Xvfb process (tests kill it to simulate a crash).
    pub fn xvfb_pid(&self) -> u32 {
        self.xvfb.pid()
    }

    /// Pid of the task app process.
    pub fn app_pid(&self) -> u32 {
        self.app.pid()
    }

    /// True when captures use MIT-SHM.
    pub fn uses_shm(&self) -> bool {
        self.x.uses_shm()
    }

    /// Pointer position as placed by the last action.
    pub fn pointer(&self) -> Point {
        self.x.pointer()
    }

    /// Fails with [`DesktopError::DisplayGone`] or [`DesktopError::App`] when a part died.
    pub fn check_alive(&mut self) -> Result<()> {
        if !self.xvfb.is_alive() {
            return Err(DesktopError::DisplayGone {
                display: self.xvfb.display(),
                reason: format!("Xvfb exited; it said: {}", self.xvfb.stderr()),
            });
        }
        if !self.app.is_alive() {
            return Err(DesktopError::App("task app exited".into()));
        }
        Ok(())
    }

    /// Starts a new episode: releases held buttons, parks the pointer, lays out `seed`.
    pub fn reset(&mut self, seed: u64) -> Result<Outcome> {
        self.check_alive()?;
        self.x.release_all()?;
        let app = self.app.reset(seed)?;
        let settle = self.x.settle(self.config.settle)?;
        Ok(Outcome { app, settle })
    }

    /// Performs one action, lets the app handle it, and waits for the screen to settle.
    pub fn step(&mut self, action: &Action) -> Result<Outcome> {
        if let Action::TypeText(t) = action
            && t.is_empty()
        {
            return Err(DesktopError::invalid("type_text.text", "text is empty"));
        }
        self.check_alive()?;
        self.x.perform(action)?;
        let app = self.app.sync()?;
        let settle = self.x.settle(self.config.settle)?;
        Ok(Outcome { app, settle })
    }

    /// Captures the screen.
    pub fn capture(&mut self) -> Result<Frame> {
        self.x.capture()
    }
}
