//! The boundary verbs a pool may be granted: exec, files, clipboard, windows.

use super::*;

impl Env {
    /// Ends every power unlocked on this env (`why`: `reset`, `closed`), each recorded.
    pub(crate) fn relock_all(&self, why: &'static str) {
        for g in self.unlocks.take_all() {
            self.record_relock(&g, why);
        }
    }

    /// Records the end of grant `g` (`why`: `relock`, `reset`, `closed`).
    pub(crate) fn record_relock(&self, g: &crate::unlock::Grant, why: &'static str) {
        self.event("relock", || {
            serde_json::json!({
                "grant_id": g.id, "capability": g.power.as_str(), "why": why,
            })
        });
    }

    /// Records a capability request just opened (`capability_required`): what a
    /// controller watching the env answers.
    pub(crate) fn record_ask(
        &self,
        token: &str,
        ask: &crate::unlock::NewAsk,
        principal: &str,
        timeout: std::time::Duration,
    ) {
        self.event("capability_required", || {
            let scope: Vec<String> = ask.scope.iter().map(ToString::to_string).collect();
            serde_json::json!({
                "token": token, "capability": ask.power.as_str(), "scope": scope,
                "reason": crate::spec::quote(&ask.reason), "action": ask.action,
                "principal": principal,
                "timeout_ms": u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            })
        });
    }

    /// Records how capability request `ask` ended (`capability_decision`).
    pub(crate) fn record_decision(&self, ask: &crate::unlock::Ask, answer: &crate::unlock::Answer) {
        use crate::unlock::Answer;
        let (by, scope, grant, reason) = match answer {
            Answer::Allowed { by, scope, grant } => (
                by.as_str(),
                scope.iter().map(ToString::to_string).collect(),
                grant.as_deref().unwrap_or(""),
                "",
            ),
            Answer::Denied { by, reason } => (by.as_str(), ask.scope_text(), "", reason.as_str()),
            Answer::TimedOut => ("timeout", ask.scope_text(), "", ""),
            Answer::Ended(why) => (*why, ask.scope_text(), "", ""),
        };
        self.event("capability_decision", || {
            serde_json::json!({
                "token": ask.token, "capability": ask.power.as_str(), "scope": scope,
                "action": ask.action, "decision": answer.decision(), "by": by,
                "grant_id": grant, "reason": crate::spec::quote(reason),
            })
        });
    }

    /// Ends every capability request waiting on this env unanswered (`why`: `reset`,
    /// `closed`), each recorded; their callers are told.
    pub(crate) fn end_asks(&self, why: &'static str) {
        let answer = crate::unlock::Answer::Ended(why);
        for ask in self.asks.end_all(&answer) {
            self.record_decision(&ask, &answer);
            ask.settle(answer.clone());
        }
    }

    /// Blocking: runs `f` on the env's live desktop (NO_DESKTOP without one); a failure
    /// is handled like any other (a dead desktop is let go). A verb with nothing for
    /// the event log calls it straight from its handler (docs/adding-a-verb.md).
    pub(crate) fn on_desktop<T>(
        &self,
        f: impl FnOnce(&mut Box<dyn Desktop>) -> Result<T, EnvError>,
    ) -> Result<T, EnvError> {
        let _running = self.enter();
        let mut s = lock(&self.state);
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        f(d).inspect_err(|err| self.on_error(&mut s, err))
    }

    /// Blocking: runs a command in the env's sandbox and waits for it (with `sink`, its
    /// output goes there as it comes); the command and how it ended go to the event log.
    pub(crate) fn exec(
        &self,
        spec: &ExecSpec,
        stdin: &[u8],
        sink: Option<deskgym_worker::Sink<'_>>,
    ) -> Result<Executed, EnvError> {
        let sink_used = sink.is_some();
        // Bytes streamed per channel (stderr, stdout), for the event log.
        let mut streamed = [0usize; 2];
        let r = match sink {
            None => self
                .on_desktop(|d| Ok(d.check_alive().and_then(|()| d.exec(spec, stdin, None))?))?,
            Some(sink) => {
                let mut counting = |stdout: bool, data: &[u8]| {
                    streamed[usize::from(stdout)] += data.len();
                    sink(stdout, data);
                };
                self.on_desktop(|d| {
                    Ok(d.check_alive()
                        .and_then(|()| d.exec(spec, stdin, Some(&mut counting)))?)
                })?
            }
        };
        self.event("exec", || {
            let argv: Vec<String> = spec
                .argv
                .iter()
                .take(16)
                .map(|a| crate::spec::quote(a))
                .collect();
            serde_json::json!({
                "argv": argv, "exit_code": r.end.exit_code, "signal": r.end.signal,
                "timed_out": r.end.timed_out, "duration_ms": r.end.duration_ms,
                "stdout_bytes": r.end.stdout_len.max(streamed[1]),
                "stderr_bytes": r.end.stderr_len.max(streamed[0]),
                "streamed": sink_used,
            })
        });
        Ok(r)
    }

    /// Blocking: a file request (`op` on `path`) on the env's sandbox; it goes to the
    /// event log with its outcome.
    pub(crate) fn files<T>(
        &self,
        op: &'static str,
        path: &str,
        f: impl FnOnce(&mut Box<dyn Desktop>) -> deskgym_worker::Result<T>,
    ) -> Result<T, EnvError> {
        self.on_desktop(|d| {
            let r = f(d).map_err(EnvError::from);
            self.event(op, || {
                serde_json::json!({
                    "path": crate::spec::quote(path),
                    "code": r.as_ref().err().map_or("OK", |e| e.code_name()),
                })
            });
            r
        })
    }

    /// An artifact stored for this env's run: its address and size go to the event log
    /// (never its bytes; a recording refers to the store). Takes no flight: it touches
    /// no desktop.
    pub(crate) fn record_artifact(&self, sha256: &str, size: u64, name: &str) {
        self.event("artifact", || {
            serde_json::json!({
                // The name as given (UploadArtifact bounds it at 256 bytes).
                "sha256": sha256, "size": size, "name": name,
            })
        });
    }

    /// Blocking: the desktop's clipboard, read (`None`) or set.
    pub(crate) fn clipboard(&self, set: Option<&str>) -> Result<String, EnvError> {
        let Some(text) = set else {
            return self.on_desktop(|d| Ok(d.clipboard()?));
        };
        self.on_desktop(|d| Ok(d.set_clipboard(text)?))?;
        self.event("set_clipboard", || serde_json::json!({"bytes": text.len()}));
        Ok(text.to_string())
    }

    /// Blocking: the desktop's top-level windows.
    pub(crate) fn windows(&self) -> Result<Vec<WindowInfo>, EnvError> {
        self.on_desktop(|d| Ok(d.windows()?))
    }
}
