//! axstream (`../shared/seeds/axstream-spec.txt`): a model's text stream as actions.
//!
//! The model writes narration, then a fence of JSON lines; each line inside the fence
//! runs the moment its newline arrives, while the model is still generating. The
//! newline is the commit signal: a line cut by the end of the stream never runs.
//!
//! Three parts: [`Framer`] splits text into fence lines, [`parse`] turns a line into an
//! [`Op`] over the wire's own `Action`, and [`drive`] runs a `Drive` stream on one env
//! through the same validation and step path as `Step`, so an axstream action and the
//! same `Step` behave identically (element targets resolve when the line runs).

use std::collections::VecDeque;
use std::time::Instant;

use deskgym_proto::v1 as pb;
use tokio::sync::mpsc;
use tonic::Status;

use crate::auth::Principal;
use crate::calls::Calls;
use crate::env::{Call, Geometry, ObsOptions};
use crate::pool::PoolError;
use crate::spec::Invalid;

mod lines;

use lines::{ECHO, Framed, Framer, MAX_CHUNK, MAX_LINE, Op, parse};

/// Reports queued towards a slow client before execution waits for it.
const QUEUE: usize = 64;
/// Held risky actions kept for a confirmation (the oldest is forgotten first).
const HELD: usize = 16;

/// Where a burst stands.
#[derive(Default)]
struct Burst {
    number: u32,
    /// Set when a line ended the burst early: the status and reason of the rest.
    halted: Option<(pb::LineStatus, String)>,
}

/// Runs a `Drive` stream. `first` was validated by the caller (env, policy, options).
pub(crate) struct Driver {
    svc: Calls,
    who: Principal,
    env_id: String,
    apps: Vec<String>,
    allow_risky: bool,
    encoding: i32,
    observe: ObsOptions,
    started: Instant,
    framer: Framer,
    burst: Burst,
    /// The line of a `done`: everything after it is skipped.
    done_at: Option<u32>,
    /// The line of the `observe` that ended the model's turn: every line after it is
    /// skipped until a message starts the next turn.
    observed_at: Option<u32>,
    /// Held risky actions by line, for `confirm`.
    held: VecDeque<(u32, pb::Action)>,
    /// The last observation's frame (geometry, delivered size): `{"x","y"}` targets are
    /// its pixels.
    frame: Option<(Geometry, (u32, u32))>,
}

/// The response stream of `Drive`.
pub(crate) type Outbound = tokio_stream::wrappers::ReceiverStream<Result<pb::DriveEvent, Status>>;

impl Driver {
    /// Validates the first message and prepares a driver.
    pub(crate) fn new(
        svc: Calls,
        who: Principal,
        first: &pb::DriveRequest,
        observe: ObsOptions,
    ) -> Result<Self, PoolError> {
        let env = svc.manager().env(&first.env_id, &who)?;
        let allow_risky = match pb::RiskPolicy::try_from(first.risky) {
            Ok(p) => p == pb::RiskPolicy::Allow,
            Err(_) => {
                return Err(Invalid::new(
                    "risky",
                    format!(
                        "unknown policy {}; 0: hold risky actions, 1: allow them",
                        first.risky
                    ),
                )
                .into());
            }
        };
        Ok(Self {
            apps: env.pool.spec.profile.apps.keys().cloned().collect(),
            env_id: first.env_id.clone(),
            svc,
            who,
            allow_risky,
            encoding: first.encoding,
            observe,
            started: Instant::now(),
            framer: Framer::default(),
            burst: Burst::default(),
            done_at: None,
            observed_at: None,
            held: VecDeque::new(),
            frame: None,
        })
    }

    /// Reads the client's messages and answers on a channel until either side ends.
    pub(crate) fn run(
        mut self,
        first: pb::DriveRequest,
        mut inbound: tonic::Streaming<pb::DriveRequest>,
        mut closing: tokio::sync::watch::Receiver<bool>,
    ) -> Outbound {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            let mut msg = Some(first);
            while let Some(m) = msg.take() {
                if let Err(status) = self.message(&m, &tx).await {
                    let _ = tx.send(Err(status)).await;
                    return;
                }
                tokio::select! {
                    next = inbound.message() => match next {
                        Ok(Some(m)) => msg = Some(m),
                        Ok(None) => break,
                        Err(_) => return, // the client went away: nobody to answer
                    },
                    _ = closing.changed() => {
                        let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                        return;
                    }
                }
            }
            // The stream ended: a line without its newline never runs.
            if let Some(cut) = self.framer.pending() {
                let (line, burst) = self.framer.next_line();
                let mut r = self.report(line, burst, cut);
                r.status = pb::LineStatus::Skipped as i32;
                r.reason = "cut: the stream ended before its newline".into();
                let _ = send(&tx, r).await;
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }

    async fn message(
        &mut self,
        m: &pb::DriveRequest,
        tx: &mpsc::Sender<Result<pb::DriveEvent, Status>>,
    ) -> Result<(), Status> {
        if m.text.len() > MAX_CHUNK {
            return Err(Invalid::new(
                "text",
                format!(
                    "{} bytes in one message is over {MAX_CHUNK}; send the text in smaller chunks",
                    m.text.len()
                ),
            )
            .into());
        }
        let received = self.ms();
        if m.turn {
            self.observed_at = None;
        }
        for &line in &m.confirm {
            let report = self.confirm(line).await;
            if !send(tx, report).await {
                return Ok(());
            }
        }
        for framed in self.framer.push(&m.text) {
            let report = self.line(framed, received).await;
            if !send(tx, report).await {
                return Ok(());
            }
        }
        if m.ack != 0 {
            let ack = pb::DriveEvent {
                kind: Some(pb::drive_event::Kind::Ack(m.ack)),
            };
            let _ = tx.send(Ok(ack)).await;
        }
        Ok(())
    }

    fn ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    fn report(&self, line: u32, burst: u32, text: &str) -> pb::LineReport {
        pb::LineReport {
            line,
            burst,
            text: text.chars().take(ECHO).collect(),
            ..Default::default()
        }
    }

    /// Runs one fence line and reports it.
    async fn line(&mut self, f: Framed, received: f64) -> pb::LineReport {
        use pb::LineStatus as S;
        if f.burst != self.burst.number {
            self.burst = Burst {
                number: f.burst,
                halted: None,
            };
        }
        let text = f.text.as_deref().unwrap_or("");
        let mut r = self.report(f.line, f.burst, text);
        r.received_ms = received;
        let apps: Vec<&str> = self.apps.iter().map(String::as_str).collect();
        let parsed = match &f.text {
            None => Err(format!("a line over {MAX_LINE} bytes")),
            Some(t) => parse(t, &apps),
        };
        let op = match parsed {
            Ok(op) => op,
            Err(why) => {
                r.status = S::Skipped as i32;
                r.reason = why;
                return r;
            }
        };
        r.op = op.name().into();
        if let Op::Act { name, .. } | Op::Refused { name, .. } = &op {
            r.action = name.clone();
        }
        if let Some(done) = self.done_at {
            r.status = S::Skipped as i32;
            r.reason = format!("the task ended at done on line {done}");
            return r;
        }
        if let Some(at) = self.observed_at {
            r.status = S::Skipped as i32;
            r.reason = format!(
                "the turn ended at observe on line {at}; the next response starts with `turn`"
            );
            return r;
        }
        if let Some((status, why)) = &self.burst.halted {
            r.status = *status as i32;
            r.reason = why.clone();
            return r;
        }
        r.started_ms = self.ms();
        match op {
            Op::Act { action, risky, .. } => self.act(&mut r, f.line, action, risky).await,
            Op::Refused { code, why, .. } => {
                // A well-formed action this env cannot run (`open` of an app it lacks):
                // what follows was planned on it.
                r.status = S::Failed as i32;
                r.code = code as i32;
                r.reason = why.clone();
                self.halt(S::Aborted, format!("line {} failed: {why}", f.line));
            }
            Op::Assert(t) => self.assert(&mut r, f.line, t).await,
            Op::Observe => match self.observe().await {
                Ok(obs) => {
                    r.status = S::Executed as i32;
                    self.frame = obs.display.as_ref().map(|g| {
                        let s = g.source_rect.unwrap_or_default();
                        let geometry = Geometry {
                            screen: (g.screen_width, g.screen_height),
                            source: [s.x, s.y, s.width, s.height].map(|v| v.max(0) as u32),
                        };
                        (geometry, (g.delivered_width, g.delivered_height))
                    });
                    r.observation = Some(obs);
                    self.observed_at = Some(f.line);
                }
                Err(e) => self.failed(&mut r, e),
            },
            Op::Done { success, reason } => match self.done(success, reason.clone()).await {
                Ok(info) => {
                    r.status = S::Executed as i32;
                    r.info = Some(info);
                    r.done_status = if success { "success" } else { "failure" }.into();
                    r.done_reason = reason;
                    self.done_at = Some(f.line);
                }
                Err(e) => self.failed(&mut r, e),
            },
        }
        r.finished_ms = self.ms();
        r
    }

    /// Runs an act line: put on the screen, held when risky and the policy says so.
    async fn act(
        &mut self,
        r: &mut pb::LineReport,
        line: u32,
        mut action: pb::Action,
        risky: bool,
    ) {
        use pb::LineStatus as S;
        if let Err(why) = self.to_screen(&mut action) {
            r.status = S::Skipped as i32;
            r.code = tonic::Code::InvalidArgument as i32;
            r.reason = why;
        } else if risky && !self.allow_risky {
            r.status = S::Held as i32;
            r.reason = format!(
                "a risky action; the policy holds risky actions (confirm line {} to run it)",
                line
            );
            if self.held.len() == HELD {
                self.held.pop_front();
            }
            self.held.push_back((line, action));
            self.halt(S::Aborted, format!("line {} (risky) was held", line));
        } else {
            let ran = self.step(action).await;
            self.stepped(r, ran);
        }
    }

    /// Runs an assert line: its target must resolve, or the burst aborts.
    async fn assert(&mut self, r: &mut pb::LineReport, line: u32, mut t: pb::Target) {
        use pb::LineStatus as S;
        let located = match self.target_to_screen(&mut t) {
            Ok(()) => self.locate(t).await,
            Err(why) => Err(Invalid::new("target", why).into()),
        };
        if let Err(e) = located {
            // The spec's barrier: whatever kept the target from resolving (an
            // off-screen point too), the burst aborts.
            let s = Status::from(e);
            r.status = S::Failed as i32;
            r.code = s.code() as i32;
            r.reason = s.message().to_string();
            self.halt(
                S::Aborted,
                format!("line {} (assert) did not resolve: {}", line, s.message()),
            );
        } else {
            r.status = S::Executed as i32;
        }
    }

    /// Fills an act's report from its step.
    fn stepped(&mut self, r: &mut pb::LineReport, ran: Result<pb::StepResult, PoolError>) {
        match ran {
            Ok(mut result) => {
                result.observation = None;
                if let Some(reset) = result.reset.as_mut() {
                    reset.observation = None;
                }
                r.status = pb::LineStatus::Executed as i32;
                r.result = Some(result);
            }
            Err(e) => self.failed(r, e),
        }
    }

    /// Runs the risky action held on `line` (a confirmation): its second report.
    async fn confirm(&mut self, line: u32) -> pb::LineReport {
        let burst = self.burst.number;
        let mut r = self.report(line, burst, "");
        r.op = "act".into();
        r.received_ms = self.ms();
        let Some(i) = self.held.iter().position(|(l, _)| *l == line) else {
            r.status = pb::LineStatus::Skipped as i32;
            r.reason = format!("no held action on line {line} to confirm");
            return r;
        };
        let Some((_, action)) = self.held.remove(i) else {
            return r;
        };
        r.started_ms = self.ms();
        if let Some(done) = self.done_at {
            r.status = pb::LineStatus::Skipped as i32;
            r.reason = format!("the task ended at done on line {done}");
        } else {
            let ran = self.step(action).await;
            self.stepped(&mut r, ran);
            // A confirmation stands alone: it never aborts the stream's next burst.
            self.burst.halted = None;
        }
        r.finished_ms = self.ms();
        r
    }

    /// Maps an action's pixel targets from the last observation's frame to the screen.
    fn to_screen(&self, action: &mut pb::Action) -> Result<(), String> {
        use pb::action::Verb;
        let targets: Vec<&mut pb::Target> = match action.verb.as_mut() {
            Some(Verb::Click(v)) => v.target.iter_mut().collect(),
            Some(Verb::DoubleClick(v)) => v.target.iter_mut().collect(),
            Some(Verb::RightClick(v)) => v.target.iter_mut().collect(),
            Some(Verb::Move(v)) => v.target.iter_mut().collect(),
            Some(Verb::Scroll(v)) => v.target.iter_mut().collect(),
            Some(Verb::Drag(v)) => v.from.iter_mut().chain(v.to.iter_mut()).collect(),
            Some(Verb::SetValue(v)) => v.target.iter_mut().collect(),
            Some(Verb::InvokeAction(v)) => v.target.iter_mut().collect(),
            _ => Vec::new(),
        };
        targets
            .into_iter()
            .try_for_each(|t| self.target_to_screen(t))
    }

    /// A `{"x","y"}` target as a pixel of the last observation's frame, on the screen
    /// (ACI: `source + floor(p * source / delivered)`).
    fn target_to_screen(&self, t: &mut pb::Target) -> Result<(), String> {
        let (Some((g, (dw, dh))), Some(pb::target::Kind::PointPx(p))) =
            (self.frame, t.kind.as_mut())
        else {
            return Ok(());
        };
        if p.x < 0 || p.y < 0 || p.x as u32 >= dw || p.y as u32 >= dh {
            return Err(format!(
                "({}, {}) is outside the {dw}x{dh} frame of the last observation",
                p.x, p.y
            ));
        }
        let [sx, sy, sw, sh] = g.source.map(u64::from);
        p.x = (sx + p.x as u64 * sw / u64::from(dw)) as i32;
        p.y = (sy + p.y as u64 * sh / u64::from(dh)) as i32;
        Ok(())
    }

    fn halt(&mut self, status: pb::LineStatus, why: String) {
        self.burst.halted = Some((status, why));
    }

    /// A line that ran and failed: an invalid action is skipped (the stream goes on, as
    /// the spec drops invalid lines); anything else fails and aborts the burst.
    fn failed(&mut self, r: &mut pb::LineReport, e: PoolError) {
        let s = Status::from(e);
        r.code = s.code() as i32;
        r.reason = s.message().to_string();
        if s.code() == tonic::Code::InvalidArgument {
            r.status = pb::LineStatus::Skipped as i32;
        } else {
            r.status = pb::LineStatus::Failed as i32;
            self.halt(
                pb::LineStatus::Aborted,
                format!("line {} failed: {}", r.line, s.message()),
            );
        }
    }

    async fn step(&self, action: pb::Action) -> Result<pb::StepResult, PoolError> {
        let item = pb::StepRequest {
            env_id: self.env_id.clone(),
            action: Some(action),
            // The frame is not returned; raw costs no encode.
            encoding: pb::ImageEncoding::RawRgb as i32,
            ..Default::default()
        };
        self.svc
            .start_step(item, &crate::checked::Field::root(), &[], &self.who)?
            .finish()
            .await
    }

    async fn locate(&self, t: pb::Target) -> Result<(), PoolError> {
        let mgr = self.svc.manager();
        let env = mgr.env(&self.env_id, &self.who)?;
        let planned = crate::checked::locate(Some(&t), env.pool.spec.screen)?;
        mgr.on_env(&env, Call::Observe, mgr.op_timeout(), move |e, _| {
            e.locate(&planned)
        })?
        .finish()
        .await
    }

    async fn observe(&self) -> Result<pb::Observation, PoolError> {
        let mgr = self.svc.manager();
        let env = mgr.env(&self.env_id, &self.who)?;
        let mut opts = self.observe.clone();
        opts.encoding = self.encoding;
        mgr.on_env(&env, Call::Observe, mgr.op_timeout(), move |e, cache| {
            e.observe(cache, &opts).map(crate::convert::observation)
        })?
        .finish()
        .await
    }

    async fn done(&self, success: bool, reason: String) -> Result<pb::StepInfo, PoolError> {
        let mgr = self.svc.manager();
        let env = mgr.env(&self.env_id, &self.who)?;
        mgr.on_env(&env, Call::Observe, mgr.op_timeout(), move |e, _| {
            e.agent_done(success, &reason)
                .map(crate::convert::step_info)
        })?
        .finish()
        .await
    }
}

/// Sends a report; false when the client is gone.
async fn send(tx: &mpsc::Sender<Result<pb::DriveEvent, Status>>, r: pb::LineReport) -> bool {
    tx.send(Ok(pb::DriveEvent {
        kind: Some(pb::drive_event::Kind::Line(r)),
    }))
    .await
    .is_ok()
}

#[cfg(test)]
mod tests;
