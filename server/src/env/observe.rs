//! What an env shows: the observation of a call (frame through the cache, tree),
//! element targets resolved against the live tree, screenshots.

use super::*;

/// What a viewer's last frame was made from: the screen's hash and the source rectangle.
pub(crate) type WatchKey = (u128, [u32; 4]);

/// The longest an Observe waits for a quiet screen, whatever it asked.
const MAX_OBSERVE_SETTLE_MS: u32 = 5000;

impl Env {
    /// Builds the wire observation of a whole-screen capture through the fleet cache:
    /// pixels only when the client does not hold this frame already.
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
        self.record_frame(hash, width, height, &raw.bytes, episode);
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
        let geometry = Geometry::whole(width, height);
        Ok(Obs {
            frame: bytes,
            not_modified,
            ..Obs::meta(enc, (width, height, hash), pointer, settle, geometry)
        })
    }

    /// Hands a whole-screen frame to the recorder, which shares the buffer and stores
    /// each distinct frame once, on its thread.
    fn record_frame(
        &self,
        hash: u128,
        width: u32,
        height: u32,
        raw: &Bytes,
        episode: Option<&str>,
    ) {
        self.pool.record(|| {
            record::frame(
                &deskgym_worker::hash_hex(hash),
                width,
                height,
                raw.clone(),
                &self.id,
                episode,
            )
        });
    }

    /// The observation of a step whose caller asked for a shape other than the whole
    /// screen (observe-after-act): the whole frame is recorded as usual, the shaped one
    /// delivered. When the shape cannot be cut (no focused window, the window gone), the
    /// whole screen is delivered and the reason returned beside it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn shaped_observation(
        &self,
        d: &mut Box<dyn Desktop>,
        cache: &FrameCache,
        full: Frame,
        pointer: Point,
        settle: SettleReport,
        enc: pb::ImageEncoding,
        opts: &ObsOptions,
        episode: Option<&str>,
    ) -> Result<(Obs, Option<String>), EnvError> {
        if opts.shape.is_whole() {
            let obs = self.observation(cache, full, pointer, settle, enc, &opts.known, episode)?;
            return Ok((obs, None));
        }
        match Self::source(d, &full, &opts.shape) {
            Ok(geometry) => {
                let (pointer_settle, known) = ((pointer, settle), &opts.known);
                let obs = self.shaped(&full, geometry, &opts.shape, enc, known, pointer_settle)?;
                let raw = Bytes::from(full.rgb);
                self.record_frame(full.hash, full.width, full.height, &raw, episode);
                Ok((obs, None))
            }
            Err(e) => {
                let why = EnvError::from(e).to_string();
                let obs =
                    self.observation(cache, full, pointer, settle, enc, &opts.known, episode)?;
                Ok((obs, Some(why)))
            }
        }
    }

    /// Where `shape` lies on the screen: the whole of it, or a window clipped to it.
    pub(super) fn source(
        d: &mut Box<dyn Desktop>,
        full: &Frame,
        shape: &Shape,
    ) -> Result<Geometry, DesktopError> {
        let screen = (full.width, full.height);
        let Some(which) = shape.window else {
            return Ok(Geometry::whole(full.width, full.height));
        };
        let ws = d.windows()?;
        let w = match which {
            None => ws
                .iter()
                .find(|w| w.focused)
                .ok_or_else(|| DesktopError::Exec("no window is focused on this desktop".into()))?,
            Some(id) => ws.iter().find(|w| w.id == id).ok_or_else(|| {
                DesktopError::invalid(
                    "window",
                    format!("no window {id:#x} on this desktop; ListWindows gives the live ones"),
                )
            })?,
        };
        let source = full
            .visible(w.x, w.y, w.width, w.height)
            .ok_or_else(|| DesktopError::Exec(format!("window {:#x} is off screen", w.id)))?;
        Ok(Geometry { screen, source })
    }

    /// The shaped frame of `full` at `geometry`, scaled and encoded, outside the frame
    /// cache (`not_modified` when the client holds it). The env keeps the last one: an
    /// agent that looks again at an unchanged screen pays no crop, scale or encode.
    fn shaped(
        &self,
        full: &Frame,
        geometry: Geometry,
        shape: &Shape,
        enc: pb::ImageEncoding,
        known: &[u128],
        (pointer, settle): (Point, SettleReport),
    ) -> Result<Obs, EnvError> {
        let quality = match shape.jpeg_quality {
            0 => crate::encode::JPEG_QUALITY,
            q => q,
        };
        let key = (
            full.hash,
            geometry.source,
            shape.max_long_edge,
            enc as i32,
            quality,
        );
        let mut memo = lock(&self.shaped_memo);
        let (dims, bytes) = match memo.as_ref().filter(|m| m.key == key) {
            Some(m) => (m.dims, m.bytes.clone()),
            None => {
                let [x, y, w, h] = geometry.source;
                let cut = if geometry.source == [0, 0, full.width, full.height] {
                    full.clone()
                } else {
                    full.crop(x as i32, y as i32, w, h)
                        .ok_or(EnvError::Bug("a source rectangle off its frame"))?
                };
                let frame = cut.downscale(shape.max_long_edge);
                let dims = (frame.width, frame.height, frame.hash);
                let bytes = Bytes::from(crate::encode::encode_with(frame, enc, quality)?);
                *memo = Some(ShapedMemo {
                    key,
                    dims,
                    bytes: bytes.clone(),
                });
                (dims, bytes)
            }
        };
        let not_modified = known.contains(&dims.2);
        Ok(Obs {
            frame: if not_modified { Bytes::new() } else { bytes },
            not_modified,
            ..Obs::meta(enc, dims, pointer, settle, geometry)
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

    /// Reads the tree an observation asked for into `obs` (see [`Self::read_tree`]) and
    /// shows it to the console; a read that fails is handled like any failed desktop
    /// call ([`Self::on_error`]) and returned. The one rule for Reset, Step and Observe,
    /// so the three cannot drift apart.
    pub(super) fn attach_tree(
        &self,
        s: &mut EnvState,
        opts: &TreeOpts,
        obs: &mut Obs,
    ) -> Result<(), EnvError> {
        let d = s
            .desktop
            .as_mut()
            .ok_or(EnvError::Bug("desktop vanished"))?;
        match Self::read_tree(d, &mut s.refs, opts) {
            Ok(tree) => {
                self.control.saw_tree(&tree);
                obs.tree = Some(tree);
                Ok(())
            }
            Err(e) => {
                self.on_error(s, &e);
                Err(e)
            }
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

    /// Blocking: a capture without acting (shaped by `opts.shape`: a window, scaled).
    pub(crate) fn observe(&self, cache: &FrameCache, opts: &ObsOptions) -> Result<Obs, EnvError> {
        let _running = self.enter();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut s = lock(&self.state);
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        let captured = d.check_alive().and_then(|_| {
            let settle = if opts.settle_ms == 0 {
                SettleReport {
                    quiesced: true,
                    ..Default::default()
                }
            } else {
                d.quiesce(opts.settle_ms, MAX_OBSERVE_SETTLE_MS)?
            };
            Ok((d.capture()?, d.pointer(), settle))
        });
        match captured {
            Ok((frame, pointer, settle)) => {
                let mut obs = if opts.shape.is_whole() {
                    self.observation(cache, frame, pointer, settle, enc, &opts.known, None)?
                } else {
                    let geometry = Self::source(d, &frame, &opts.shape)?;
                    let (shape, known) = (&opts.shape, &opts.known);
                    self.shaped(&frame, geometry, shape, enc, known, (pointer, settle))?
                };
                if let Some(t) = &opts.tree {
                    self.attach_tree(&mut s, t, &mut obs)?;
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

    /// Blocking: a screenshot shaped by `shape` (a window, scaled down, a JPEG
    /// quality). Bypasses the frame cache (the quality is not part of its key); a hash in
    /// `known` comes back `not_modified`.
    pub(crate) fn screenshot(
        &self,
        shape: Shape,
        encoding: i32,
        known: &[u128],
    ) -> Result<Obs, EnvError> {
        let enc = encoding_or(&self.pool.spec, encoding)?;
        let (full, geometry, pointer) = self.on_desktop(|d| {
            let shot = (|| {
                d.check_alive()?;
                let full = d.capture()?;
                let geometry = Self::source(d, &full, &shape)?;
                Ok::<_, DesktopError>((full, geometry, d.pointer()))
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
        // Scaled and encoded after the env's state is released.
        let settle = SettleReport {
            quiesced: true,
            ..Default::default()
        };
        self.shaped(&full, geometry, &shape, enc, known, (pointer, settle))
    }

    /// Blocking: a viewer's frame (a screencast) shaped by `shape` and JPEG-encoded,
    /// without acting, recording, or touching the frame cache: `None` when the screen
    /// and the source rectangle are what `last` says (the key of the last frame made).
    /// The state lock is held only for the capture.
    pub(crate) fn watch(
        &self,
        shape: &Shape,
        last: Option<WatchKey>,
    ) -> Result<(WatchKey, Option<Obs>), EnvError> {
        let (key, cut) = self.watch_pixels(shape, last)?;
        let Some((cut, geometry, pointer)) = cut else {
            return Ok((key, None));
        };
        let quality = match shape.jpeg_quality {
            0 => crate::encode::JPEG_QUALITY,
            q => q,
        };
        let dims = (cut.width, cut.height, cut.hash);
        let jpeg = crate::encode::encode_with(cut, pb::ImageEncoding::Jpeg, quality)?;
        let settle = SettleReport::default();
        let obs = Obs {
            frame: Bytes::from(jpeg),
            ..Obs::meta(pb::ImageEncoding::Jpeg, dims, pointer, settle, geometry)
        };
        Ok((key, Some(obs)))
    }

    /// Blocking: [`Self::watch`]'s pixels before any encoding (an H.264 screencast
    /// encodes them itself): the shaped frame, where it comes from, and the pointer;
    /// `None` when nothing changed since `last`.
    pub(crate) fn watch_pixels(
        &self,
        shape: &Shape,
        last: Option<WatchKey>,
    ) -> Result<(WatchKey, Option<Watched>), EnvError> {
        let (full, geometry, pointer) = {
            let mut s = lock(&self.state);
            let d = s.desktop.as_mut().ok_or_else(|| EnvError::NoDesktop {
                env: self.id.clone(),
            })?;
            d.check_alive()?;
            let full = d.capture()?;
            let geometry = Self::source(d, &full, shape)?;
            (full, geometry, d.pointer())
        };
        let key = (full.hash, geometry.source);
        if last == Some(key) {
            return Ok((key, None));
        }
        let [x, y, w, h] = geometry.source;
        let cut = full
            .crop(x as i32, y as i32, w, h)
            .ok_or(EnvError::Bug("a source rectangle off its frame"))?
            .downscale(shape.max_long_edge);
        Ok((key, Some((cut, geometry, pointer))))
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

/// A watched frame: the shaped pixels, where they come from, and the pointer.
pub(crate) type Watched = (Frame, Geometry, Point);

impl Obs {
    /// An observation's description without its pixels (empty until set).
    pub(crate) fn meta(
        encoding: pb::ImageEncoding,
        (width, height, hash): (u32, u32, u128),
        pointer: Point,
        settle: SettleReport,
        geometry: Geometry,
    ) -> Obs {
        Obs {
            frame: Bytes::new(),
            encoding,
            width,
            height,
            hash,
            pointer,
            settle,
            not_modified: false,
            tree: None,
            geometry,
        }
    }
}
