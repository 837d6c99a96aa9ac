//! One desktop: an Xvfb, a client session on it, and either the bundled task app (the
//! `tasks` profile) or a sandbox running a profile's session (every other profile),
//! started and stopped together.

use crate::Point;
use crate::a11y::{Limits, Live, Tree};
use crate::action::Action;
use crate::agent::{Entry, ExecEnd, ExecSpec};
use crate::error::ElementFailure as Failure;
use crate::error::{DesktopError, Result};
use crate::frame::Frame;
use crate::sandbox::{Sandbox, SandboxConfig};
use crate::script;
use crate::script::{ScriptSpec, SetupStep};
use crate::windows::WindowInfo;

/// The task app's widget `id` as the app shows it now.
fn widget(app: &mut TaskApp, id: &str) -> Result<crate::a11y::Node> {
    app.tree()?.take(id)
}

/// Where a pointer action on a widget lands (its centre), if it shows.
fn showing_target(n: &crate::a11y::Node) -> Result<Point> {
    Live::from(n)
        .target()
        .ok_or_else(|| DesktopError::element(Failure::Gone, "the element is not showing"))
}

fn no_tree() -> DesktopError {
    DesktopError::element(
        Failure::Unavailable,
        "this desktop has no accessibility tree",
    )
}

/// Time bound of one setup command of a declarative task.
const SETUP_STEP_MS: u64 = 60_000;
/// Time bound of a declarative task's checker.
const CHECK_MS: u64 = 10_000;

/// How long a `launch_app` step waits for the application's first window.
pub const LAUNCH_WINDOW_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
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
    /// A profile's sandboxed session instead of the task app (`None`: the task app).
    pub sandbox: Option<SandboxConfig>,
    /// A declarative task on that session: setup at reset, a checker after each step.
    /// Shared: the step path takes a reference count, not a copy of the setup.
    pub script: Option<std::sync::Arc<ScriptSpec>>,
    /// A web task on that session: a page in the browser, scored by the page.
    pub web: Option<std::sync::Arc<crate::web::WebSpec>>,
}

/// The outcome of a reset or step, before capture.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// What the task app reported.
    pub app: AppState,
    /// How the settle wait went.
    pub settle: SettleReport,
}

/// A running desktop. Fields drop in declaration order: app or sandbox, X session,
/// then Xvfb.
pub struct Desktop {
    /// The web task's page (dropped before the sandbox that runs its browser).
    page: Option<crate::web::Page>,
    app: Option<TaskApp>,
    sandbox: Option<Sandbox>,
    /// The sandbox is as started: nothing ran in it since (a reset need not restart it).
    fresh: bool,
    /// The running episode's seed (setup and checker commands see it).
    seed: u64,
    /// The thread owning the CLIPBOARD after a `set_clipboard`.
    clipboard: Option<crate::clipboard::Owner>,
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
        let (app, sandbox) = match &config.sandbox {
            None => (
                Some(TaskApp::spawn(
                    xvfb.display(),
                    &config.task,
                    config.width,
                    config.height,
                )?),
                None,
            ),
            Some(cfg) => (None, Some(Sandbox::start(xvfb.display(), cfg)?)),
        };
        let mut x = x;
        let page = match (&config.web, &sandbox) {
            (Some(spec), Some(sb)) => {
                x.grab_pointer()?;
                Some(crate::web::Page::open(
                    sb,
                    spec.clone(),
                    config.width,
                    config.height,
                )?)
            }
            _ => None,
        };
        Ok(Self {
            page,
            app,
            fresh: true,
            seed: 0,
            clipboard: None,
            sandbox,
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

    /// Pid of the task app, or of the sandbox (killing it ends every program in it).
    pub fn app_pid(&self) -> u32 {
        match (&self.app, &self.sandbox) {
            (Some(a), _) => a.pid(),
            (None, Some(s)) => s.pid(),
            (None, None) => 0,
        }
    }

    /// The sandbox agent's socket, for connections that outlive one call (a port
    /// tunnel: [`crate::agent::Request::Connect`]); `None` without a sandbox. It
    /// changes when a reset restarts the sandbox.
    pub fn agent_socket(&self) -> Option<crate::sandbox::AgentPeer> {
        self.sandbox.as_ref().map(Sandbox::agent)
    }

    /// True when a reset would restart the sandbox (something ran in it since it
    /// started); the task app and a fresh sandbox reset in place.
    pub fn restarts_to_reset(&self) -> bool {
        self.sandbox.is_some() && !self.fresh
    }

    /// True when captures use MIT-SHM.
    pub fn uses_shm(&self) -> bool {
        self.x.uses_shm()
    }

    /// Pointer position as placed by the last action.
    pub fn pointer(&self) -> Point {
        match &self.page {
            Some(page) => page.pointer(),
            None => self.x.pointer(),
        }
    }

    /// Fails with [`DesktopError::DisplayGone`] or [`DesktopError::App`] when a part died.
    pub fn check_alive(&mut self) -> Result<()> {
        if !self.xvfb.is_alive() {
            return Err(DesktopError::DisplayGone {
                display: self.xvfb.display(),
                reason: format!("Xvfb exited; it said: {}", self.xvfb.stderr()),
            });
        }
        if self.app.as_mut().is_some_and(|a| !a.is_alive()) {
            return Err(DesktopError::App("task app exited".into()));
        }
        if self.sandbox.as_mut().is_some_and(|s| !s.is_alive()) {
            return Err(DesktopError::App("the sandbox exited".into()));
        }
        Ok(())
    }

    /// Starts a new episode: releases held buttons, parks the pointer, lays out `seed`.
    pub fn reset(&mut self, seed: u64) -> Result<Outcome> {
        self.check_alive()?;
        // The bundled tasks park the pointer at the origin (their layouts were made so);
        // a session parks it mid-screen, off the corners where pyautogui's fail-safe
        // (as OSWorld-style agents call it) would refuse to act.
        let park = if self.sandbox.is_some() {
            Point {
                x: self.config.width as i32 / 2,
                y: self.config.height as i32 / 2,
            }
        } else {
            Point::default()
        };
        if let (Some(spec), Some(cfg)) = (self.config.web.clone(), &self.config.sandbox) {
            // The browser and its sandbox stay up (the page starts its next episode)
            // unless something else ran in the sandbox (exec, files): then both start
            // anew. No X input: the page's comes through DevTools (and the X pointer
            // is this session's, see `grab_pointer`).
            if !self.fresh || self.page.is_none() {
                self.page = None;
                self.clipboard = None;
                self.sandbox = None;
                let sb = Sandbox::start(self.xvfb.display(), cfg)?;
                let (w, h) = (self.config.width, self.config.height);
                self.page = Some(crate::web::Page::open(&sb, spec, w, h)?);
                self.sandbox = Some(sb);
                self.fresh = true;
            }
            self.seed = seed;
            let page = self
                .page
                .as_mut()
                .ok_or(DesktopError::App("no page".into()))?;
            let app = page.reset(seed)?;
            let settle = self.x.settle(self.config.settle)?;
            return Ok(Outcome { app, settle });
        }
        self.x.release_all(park)?;
        let app = match (&mut self.app, &self.config.sandbox) {
            (Some(a), _) => a.reset(seed)?,
            (None, Some(cfg)) => {
                // Back to the profile's initial state: every program ended, the home
                // copied again from its seed, the session started anew.
                if !self.fresh {
                    // Our clipboard text goes too: the initial state has none.
                    self.clipboard = None;
                    self.sandbox = None;
                    self.sandbox = Some(Sandbox::start(self.xvfb.display(), cfg)?);
                    self.fresh = true;
                }
                self.seed = seed;
                match self.config.script.clone() {
                    Some(script) => {
                        self.set_up(&script)?;
                        AppState {
                            instruction: script.instruction.clone(),
                            ..AppState::idle()
                        }
                    }
                    None => AppState::idle(),
                }
            }
            (None, None) => AppState::idle(),
        };
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
        if let Some(page) = self.page.as_mut() {
            let app = page.step(action)?;
            let settle = self.x.settle(self.config.settle)?;
            return Ok(Outcome { app, settle });
        }
        self.fresh = false;
        match action {
            Action::LaunchApp(argv) => self.launch_and_wait(argv)?,
            Action::InvokeAction { element, action } => self.invoke(element, action)?,
            Action::SetValue { element, value } => self.set_value(element, value)?,
            _ => self.x.perform(action)?,
        }
        let app = match &mut self.app {
            Some(a) => Some(a.sync()?),
            None => None,
        };
        let settle = self.x.settle(self.config.settle)?;
        let app = match (app, self.config.script.clone()) {
            (Some(a), _) => a,
            (None, Some(script)) => self.check(&script)?,
            (None, None) => AppState::idle(),
        };
        Ok(Outcome { app, settle })
    }

    /// A shell line in the sandbox with the episode's seed in its environment.
    fn run_line(&mut self, line: &str, timeout_ms: u64) -> Result<(ExecEnd, Vec<u8>, Vec<u8>)> {
        let spec = ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), line.into()],
            env: script::seed_env(self.seed),
            timeout_ms,
            max_output: 64 << 10,
            ..Default::default()
        };
        self.exec(&spec, &[])
    }

    /// Runs a declarative task's setup; a failing step fails the reset (the task's fault:
    /// FAILED_PRECONDITION with the step's stderr, not a dead desktop).
    fn set_up(&mut self, script: &ScriptSpec) -> Result<()> {
        for (i, step) in script.setup.iter().enumerate() {
            match step {
                SetupStep::Exec(line) => {
                    let (end, _, err) = self.run_line(line, SETUP_STEP_MS)?;
                    if end.exit_code != Some(0) {
                        return Err(DesktopError::Exec(format!(
                            "setup step {i} ({line:?}) failed ({}): {}",
                            end.exit_code
                                .map_or_else(|| "killed".to_string(), |c| format!("exit {c}")),
                            String::from_utf8_lossy(&err).trim()
                        )));
                    }
                }
                SetupStep::Launch(argv) => self.launch_and_wait(argv)?,
                SetupStep::File { path, content } => {
                    self.write_file(path, 0, 0o644, content.as_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Runs the checker: the reward so far and whether the episode ended.
    fn check(&mut self, script: &ScriptSpec) -> Result<AppState> {
        let (end, out, _) = self.run_line(&script.check, CHECK_MS)?;
        let (reward, done) = script::judge(script.reward, end.exit_code, &out);
        Ok(AppState {
            reward,
            done,
            instruction: script.instruction.clone(),
            extra: Vec::new(),
        })
    }

    /// The accessibility tree: AT-SPI in a sandboxed session, the task app's widgets
    /// otherwise.
    pub fn tree(&mut self, limits: &Limits) -> Result<Tree> {
        self.check_alive()?;
        if let Some(page) = self.page.as_mut() {
            return page.tree(limits);
        }
        match (&mut self.app, &self.sandbox) {
            (Some(app), _) => app.tree(),
            (None, Some(sb)) => sb.a11y_tree(limits),
            (None, None) => Err(no_tree()),
        }
    }

    /// What an element is now: where it is and whether it shows.
    pub fn live(&mut self, id: &str) -> Result<Live> {
        self.check_alive()?;
        if let Some(page) = self.page.as_mut() {
            return page.live(id);
        }
        match (&mut self.app, &self.sandbox) {
            (Some(app), _) => widget(app, id).map(|n| Live::from(&n)),
            (None, Some(sb)) => sb.a11y_live(id),
            (None, None) => Err(no_tree()),
        }
    }

    /// Performs an element's action. The task app's widgets have one, `click`, done
    /// with the pointer (the app reads only X input).
    fn invoke(&mut self, id: &str, action: &str) -> Result<()> {
        let Some(app) = self.app.as_mut() else {
            return self.sandbox()?.a11y_invoke(id, action);
        };
        if !(action.is_empty() || action.eq_ignore_ascii_case("click")) {
            return Err(DesktopError::element(
                Failure::Unsupported,
                format!("the element has no action {action:?}; it offers [\"click\"]"),
            ));
        }
        let at = showing_target(&widget(app, id)?)?;
        self.x.perform(&Action::Click {
            at,
            button: crate::Button::Left,
            count: 1,
        })
    }

    /// Sets an element's value. The task app's text field takes it as a human would:
    /// a click, a backspace per character, the new text.
    fn set_value(&mut self, id: &str, value: &str) -> Result<()> {
        let Some(app) = self.app.as_mut() else {
            return self.sandbox()?.a11y_set_value(id, value);
        };
        let node = widget(app, id)?;
        if !node.editable {
            return Err(DesktopError::element(
                Failure::Unsupported,
                "the element has no editable text or value",
            ));
        }
        let old = node.text.as_deref().unwrap_or("").chars().count();
        let at = showing_target(&node)?;
        self.x.perform(&Action::Click {
            at,
            button: crate::Button::Left,
            count: 1,
        })?;
        for _ in 0..old {
            self.x.perform(&Action::Key("BackSpace".into()))?;
        }
        if !value.is_empty() {
            self.x.perform(&Action::TypeText(value.into()))?;
        }
        Ok(())
    }

    /// Captures the screen.
    pub fn capture(&mut self) -> Result<Frame> {
        self.x.capture()
    }

    /// The sandbox, for a request that may change it (a reset then restarts it).
    fn sandbox(&mut self) -> Result<&Sandbox> {
        self.fresh = false;
        self.sandbox_unchanged()
    }

    /// The sandbox, for a request that only reads.
    fn sandbox_unchanged(&mut self) -> Result<&Sandbox> {
        self.check_alive()?;
        self.sandbox.as_ref().ok_or_else(|| {
            DesktopError::Exec("this desktop has no sandbox (the `tasks` profile)".into())
        })
    }

    /// Runs a command in the sandbox as `user` and waits for it.
    pub fn exec(&mut self, spec: &ExecSpec, stdin: &[u8]) -> Result<(ExecEnd, Vec<u8>, Vec<u8>)> {
        self.sandbox()?.exec(spec, stdin)
    }

    /// Starts a program in the sandbox, detached; its pid inside the sandbox.
    pub fn launch(&mut self, argv: &[String]) -> Result<u32> {
        self.sandbox()?.launch(argv)
    }

    /// Launches a program and waits (at most [`LAUNCH_WINDOW_WAIT`]) for a new top-level
    /// window, so the step that launches an app observes it. An app that shows no new
    /// window (a second instance handing over to the first) just takes the full wait.
    fn launch_and_wait(&mut self, argv: &[String]) -> Result<()> {
        let before = self.x.window_ids()?;
        self.launch(argv)?;
        let deadline = std::time::Instant::now() + LAUNCH_WINDOW_WAIT;
        while std::time::Instant::now() < deadline {
            if self.x.window_ids()?.iter().any(|w| !before.contains(w)) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(())
    }

    /// Reads part of a file in the sandbox: (file size, data, eof).
    pub fn read_file(&mut self, path: &str, offset: u64, max: u64) -> Result<(u64, Vec<u8>, bool)> {
        self.sandbox_unchanged()?.read_file(path, offset, max)
    }

    /// Writes a file in the sandbox; its size after.
    pub fn write_file(&mut self, path: &str, offset: u64, mode: u32, data: &[u8]) -> Result<u64> {
        self.sandbox()?.write_file(path, offset, mode, data)
    }

    /// Lists a directory in the sandbox.
    pub fn list_dir(
        &mut self,
        path: &str,
        depth: u32,
        max: usize,
    ) -> Result<(String, Vec<Entry>, bool)> {
        self.sandbox_unchanged()?.list_dir(path, depth, max)
    }

    /// The CLIPBOARD as text.
    pub fn clipboard(&mut self) -> Result<String> {
        self.check_alive()?;
        crate::clipboard::get(self.xvfb.display())
    }

    /// Makes `text` the CLIPBOARD (a thread of ours owns it and serves pastes).
    pub fn set_clipboard(&mut self, text: &str) -> Result<()> {
        self.check_alive()?;
        self.fresh = false;
        // The previous owner thread stops; the new one takes the selection.
        self.clipboard = Some(crate::clipboard::set(self.xvfb.display(), text)?);
        Ok(())
    }

    /// The top-level windows, through the window manager.
    pub fn windows(&mut self) -> Result<Vec<WindowInfo>> {
        self.check_alive()?;
        self.x.windows()
    }
}
