//! What an env shows: the observation of a call (frame through the cache, tree),
//! element targets resolved against the live tree, screenshots.

use super::*;

impl Env {
    /// Builds the wire observation through the fleet cache: pixels only when the client
    /// does not hold this frame already.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn observation(
        &self,
        cache: &FrameCache,
        frame: Frame,
        pointer: Point,
        settle: SettleReport,
        enc: pb::ImageEncoding,
        known: &[u128],
        episode: Option<&str>,
    ) -> Result<Obs, EnvError> {
        let (width, height, hash) = (frame.width, frame.height, frame.hash);
        let raw = Blob::new(width, height, Bytes::from(frame.rgb), &self.pool.owner);
        // The recorder shares the buffer and stores each distinct frame once, on its thread.
        self.pool.record(|| {
            record::frame(
                &deskgym_worker::hash_hex(hash),
                width,
                height,
                raw.bytes.clone(),
                &self.id,
                episode,
            )
        });
        let not_modified = known.contains(&hash);
        let bytes = if not_modified {
            // Keep the raw frame cached for GetFrames; count what was not sent.
            let saved = match enc {
                pb::ImageEncoding::RawRgb | pb::ImageEncoding::Unspecified => {
                    raw.bytes.len() as u64
                }
                e => cache
                    .get(hash, e, &self.pool.owner)?
                    .map_or(0, |b| b.bytes.len() as u64),
            };
            cache.put(hash, raw, pb::ImageEncoding::RawRgb)?;
            cache.record_not_modified(saved, &self.pool.owner);
            Bytes::new()
        } else {
            cache.put(hash, raw, enc)?.bytes
        };
        Ok(Obs {
            frame: bytes,
            encoding: enc,
            width,
            height,
            hash,
            pointer,
            settle,
            not_modified,
            tree: None,
        })
    }

    /// Reads the tree and renders it. A tree that cannot be read (no accessibility bus,
    /// an application that does not answer) comes back partial with the reason: the
    /// step or observation it rides on still succeeds.
    pub(super) fn read_tree(
        d: &mut Box<dyn Desktop>,
        refs: &mut Refs,
        opts: &TreeOpts,
    ) -> Result<pb::AccessibilityTree, EnvError> {
        let started = Instant::now();
        match d.tree(&opts.limits()) {
            Ok(tree) => {
                let reading = refs.assign(&tree);
                let ms = started.elapsed().as_secs_f64() * 1e3;
                Ok(refs.render(&reading, opts, ms))
            }
            Err(e) => match EnvError::from(e) {
                EnvError::Element { message, .. } => Ok(pb::AccessibilityTree {
                    partial: true,
                    partial_reasons: vec![message],
                    capture_ms: started.elapsed().as_secs_f64() * 1e3,
                    ..Default::default()
                }),
                other => Err(other),
            },
        }
    }

    /// Resolves an action's element targets against the live desktop: a ref to the
    /// element it names (gone: `stale_element_ref`), a query to the one element it
    /// matches; a pointer target to the centre of the element's visible bounds.
    pub(super) fn resolve(
        d: &mut Box<dyn Desktop>,
        refs: &mut Refs,
        planned: &Planned,
        screen: (u32, u32),
    ) -> Result<Action, EnvError> {
        let mut action = planned.action.clone();
        let stale = |sel: &Sel, why: &str| EnvError::Element {
            reason: "stale_element_ref",
            message: format!("{sel} {why}; observe the tree again and use a current ref"),
        };
        for (slot, sel, _field) in &planned.elements {
            let id = match sel {
                Sel::Ref(r) => refs
                    .identity(*r)
                    .ok_or_else(|| stale(sel, "is not in the tree (gone, or never seen)"))?
                    .to_string(),
                Sel::Query { role, name } => {
                    let tree = d.tree(&deskgym_worker::TreeLimits::default())?;
                    match a11y::resolve_query(&tree, role, name) {
                        Ok(n) => {
                            refs.ref_of(n);
                            n.id.clone()
                        }
                        Err(QueryMiss::None) => {
                            return Err(EnvError::Element {
                                reason: "element_not_found",
                                message: format!("no element of the live tree matches {sel}"),
                            });
                        }
                        Err(QueryMiss::Many(c)) => {
                            return Err(EnvError::Element {
                                reason: "ambiguous_element",
                                message: format!(
                                    "{} elements match {sel}: {}; name one more precisely or use its ref",
                                    c.len(),
                                    c.join("; ")
                                ),
                            });
                        }
                    }
                }
            };
            let point = if *slot == Slot::Element {
                Point::default()
            } else {
                let live = d.live(&id).map_err(|e| match EnvError::from(e) {
                    EnvError::Element {
                        reason: "stale_element_ref",
                        ..
                    } => stale(sel, "no longer exists"),
                    other => other,
                })?;
                let p = live.target().ok_or_else(|| stale(sel, "is not showing"))?;
                let (w, h) = screen;
                if p.x < 0 || p.y < 0 || p.x as u32 >= w || p.y as u32 >= h {
                    return Err(stale(sel, "is off the screen"));
                }
                p
            };
            a11y::place(&mut action, *slot, point, &id);
        }
        Ok(action)
    }

    /// Blocking: a capture without acting.
    pub(crate) fn observe(&self, cache: &FrameCache, opts: &ObsOptions) -> Result<Obs, EnvError> {
        let _running = self.enter();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut s = lock(&self.state);
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        let captured = d
            .check_alive()
            .and_then(|_| Ok((d.capture()?, d.pointer())));
        match captured {
            Ok((frame, pointer)) => {
                let settle = SettleReport {
                    quiesced: true,
                    ..Default::default()
                };
                let mut obs =
                    self.observation(cache, frame, pointer, settle, enc, &opts.known, None)?;
                if let Some(t) = &opts.tree {
                    let s = &mut *s;
                    let d = s
                        .desktop
                        .as_mut()
                        .ok_or(EnvError::Bug("desktop vanished"))?;
                    match Self::read_tree(d, &mut s.refs, t) {
                        Ok(tree) => obs.tree = Some(tree),
                        Err(e) => {
                            self.on_error(s, &e);
                            return Err(e);
                        }
                    }
                }
                Ok(obs)
            }
            Err(e) => {
                let err = EnvError::from(e);
                self.on_error(&mut s, &err);
                Err(err)
            }
        }
    }

    /// Blocking: resolves an action's element targets against the live desktop without
    /// acting (an axstream `assert`): `Ok` when every target names one showing element.
    pub(crate) fn locate(&self, planned: &Planned) -> Result<(), EnvError> {
        let _running = self.enter();
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        let screen = (self.pool.spec.screen.width, self.pool.spec.screen.height);
        let r = d
            .check_alive()
            .map_err(EnvError::from)
            .and_then(|()| Self::resolve(d, &mut s.refs, planned, screen));
        r.map(drop).inspect_err(|e| self.on_error(s, e))
    }

    /// Blocking: a screenshot of the screen, the active window (`Some(None)`) or one
    /// window (`Some(Some(id))`), scaled down to `max_long_edge` and encoded with
    /// `jpeg_quality` (0: the default). Bypasses the frame cache (the quality is not part
    /// of its key).
    pub(crate) fn screenshot(
        &self,
        window: Option<Option<u32>>,
        max_long_edge: u32,
        encoding: i32,
        jpeg_quality: u8,
    ) -> Result<Obs, EnvError> {
        let enc = encoding_or(&self.pool.spec, encoding)?;
        let (frame, pointer) = self.on_desktop(|d| {
            let shot = (|| {
                d.check_alive()?;
                let full = d.capture()?;
                let frame = match window {
                    None => full,
                    Some(which) => {
                        let ws = d.windows()?;
                        let w = match which {
                            None => ws.iter().find(|w| w.focused).ok_or_else(|| {
                                DesktopError::Exec("no window is focused on this desktop".into())
                            })?,
                            Some(id) => ws.iter().find(|w| w.id == id).ok_or_else(|| {
                                DesktopError::invalid(
                                    "window",
                                    format!(
                                        "no window {id:#x} on this desktop; ListWindows gives \
                                         the live ones"
                                    ),
                                )
                            })?,
                        };
                        full.crop(w.x, w.y, w.width, w.height).ok_or_else(|| {
                            DesktopError::Exec(format!("window {:#x} is off screen", w.id))
                        })?
                    }
                };
                Ok::<_, DesktopError>((frame.downscale(max_long_edge), d.pointer()))
            })();
            shot.map_err(|e| match EnvError::from(e) {
                // A window id is a request field, not an action's.
                EnvError::Invalid(i) => EnvError::Invalid(Invalid::new(
                    i.field.trim_start_matches("action."),
                    i.message,
                )),
                other => other,
            })
        })?;
        // Encoded after the env's state is released.
        let (width, height, hash) = (frame.width, frame.height, frame.hash);
        let bytes = crate::encode::encode_with(frame, enc, jpeg_quality)?;
        Ok(Obs {
            frame: Bytes::from(bytes),
            encoding: enc,
            width,
            height,
            hash,
            pointer,
            tree: None,
            settle: SettleReport {
                quiesced: true,
                ..Default::default()
            },
            not_modified: false,
        })
    }

    /// Captures the screen (the one place a test can make a capture fail).
    pub(super) fn capture(&self, d: &mut Box<dyn Desktop>) -> Result<Frame, DesktopError> {
        #[cfg(test)]
        if self.fail_next_capture.swap(false, Ordering::AcqRel) {
            return Err(DesktopError::X11("injected capture failure".into()));
        }
        d.capture()
    }
}
