//! The boundary verbs a pool may be granted: exec, files, clipboard, windows.

use super::*;

impl Env {
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
        self.pool.record(|| {
            let argv: Vec<String> = spec
                .argv
                .iter()
                .take(16)
                .map(|a| crate::spec::quote(a))
                .collect();
            record::event(
                "exec",
                &self.id,
                serde_json::json!({
                    "argv": argv, "exit_code": r.end.exit_code, "signal": r.end.signal,
                    "timed_out": r.end.timed_out, "duration_ms": r.end.duration_ms,
                    "stdout_bytes": r.end.stdout_len.max(streamed[1]),
                    "stderr_bytes": r.end.stderr_len.max(streamed[0]),
                    "streamed": sink_used,
                }),
            )
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
            self.pool.record(|| {
                record::event(
                    op,
                    &self.id,
                    serde_json::json!({
                        "path": crate::spec::quote(path),
                        "code": r.as_ref().err().map_or("OK", |e| e.code_name()),
                    }),
                )
            });
            r
        })
    }

    /// Blocking: the desktop's clipboard, read (`None`) or set.
    pub(crate) fn clipboard(&self, set: Option<&str>) -> Result<String, EnvError> {
        let Some(text) = set else {
            return self.on_desktop(|d| Ok(d.clipboard()?));
        };
        self.on_desktop(|d| Ok(d.set_clipboard(text)?))?;
        self.pool.record(|| {
            record::event(
                "set_clipboard",
                &self.id,
                serde_json::json!({"bytes": text.len()}),
            )
        });
        Ok(text.to_string())
    }

    /// Blocking: the desktop's top-level windows.
    pub(crate) fn windows(&self) -> Result<Vec<WindowInfo>, EnvError> {
        self.on_desktop(|d| Ok(d.windows()?))
    }
}
