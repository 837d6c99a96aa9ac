//! Web tasks: a page in the session's browser, driven over DevTools and scored by the
//! page itself (MiniWoB++'s `core.js`). The family's files: the page (`page`, with its
//! input, DOM reading and scoring rules), the DevTools client (`cdp`) and the runner
//! (here).

use std::sync::Arc;

use super::DesktopConfig;
use crate::Point;
use crate::a11y::{Limits, Live, Tree};
use crate::action::Action;
use crate::error::{DesktopError, Result};
use crate::runner::{Ctx, Outcome, Runner, Session, session_methods};
use crate::sandbox::SandboxConfig;
use crate::x11::XSession;

mod cdp;
mod page;

use page::Page;
pub use page::{Clock, Reward, WebSpec};

/// A page and the session whose browser shows it. Fields drop in order: the page
/// before the sandbox that runs its browser.
pub(crate) struct WebRunner {
    page: Option<Page>,
    session: Session,
    spec: Arc<WebSpec>,
    size: (u32, u32),
}

impl WebRunner {
    /// Starts the session and opens the page. The X pointer becomes this session's
    /// (`grab_pointer`): the page's input comes through DevTools.
    pub(crate) fn start(
        config: &SandboxConfig,
        spec: Arc<WebSpec>,
        desktop: &DesktopConfig,
        display: u32,
        x: &mut XSession,
    ) -> Result<Self> {
        let session = Session::start(config, display)?;
        x.grab_pointer()?;
        let size = (desktop.width, desktop.height);
        let page = Page::open(
            session.sandbox_unchanged()?,
            Arc::clone(&spec),
            size.0,
            size.1,
        )?;
        Ok(Self {
            page: Some(page),
            session,
            spec,
            size,
        })
    }

    fn page(&mut self) -> Result<&mut Page> {
        self.page
            .as_mut()
            .ok_or(DesktopError::App("no page".into()))
    }
}

impl Runner for WebRunner {
    fn reset(&mut self, cx: Ctx<'_>, seed: u64) -> Result<Outcome> {
        // The browser and its sandbox stay up (the page starts its next episode) unless
        // something else ran in the sandbox (exec, files): then both start anew.
        if self.session.used() || self.page.is_none() {
            self.page = None;
            self.session.touch();
            self.session.restart_if_used(cx.display)?;
            let (w, h) = self.size;
            self.page = Some(Page::open(
                self.session.sandbox_unchanged()?,
                Arc::clone(&self.spec),
                w,
                h,
            )?);
        }
        let app = self.page()?.reset(seed)?;
        let settle = cx.x.settle(cx.settle)?;
        Ok(Outcome { app, settle })
    }

    fn step(&mut self, cx: Ctx<'_>, action: &Action) -> Result<Outcome> {
        let app = self.page()?.step(action)?;
        let settle = cx.x.settle(cx.settle)?;
        Ok(Outcome { app, settle })
    }

    fn pointer(&self, _: &XSession) -> Point {
        self.page
            .as_ref()
            .map_or_else(Point::default, Page::pointer)
    }

    fn tree(&mut self, limits: &Limits) -> Result<Tree> {
        self.page()?.tree(limits)
    }

    fn live(&mut self, id: &str) -> Result<Live> {
        self.page()?.live(id)
    }

    session_methods!(session);
}
