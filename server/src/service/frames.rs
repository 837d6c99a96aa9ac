//! Frames: GetFrames (the frame cache's blobs by hash, for their owners), GetCacheStats
//! and AttachFrames (a shared-memory ring for a local client).

use super::*;

impl DeskgymService {
    pub(super) async fn do_get_frames(
        &self,
        req: Request<pb::GetFramesRequest>,
    ) -> Result<Response<pb::GetFramesResponse>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let parsed = checked::hashes(
            &Field::named("hashes"),
            &req.hashes,
            self.mgr.limits().max_if_none_match,
        )?;
        let mut hashes: Vec<(String, u128)> = req.hashes.iter().cloned().zip(parsed).collect();
        // A frame asked for twice is sent once.
        let mut seen = HashSet::with_capacity(hashes.len());
        hashes.retain(|(_, h)| seen.insert(*h));
        let max_bytes = self.mgr.limits().max_frames_reply_bytes;
        let enc = match pb::ImageEncoding::try_from(req.encoding) {
            Ok(pb::ImageEncoding::Unspecified) => pb::ImageEncoding::RawRgb,
            Ok(e) => e,
            Err(_) => {
                return Err(
                    Invalid::new("encoding", format!("unknown encoding {}", req.encoding)).into(),
                );
            }
        };
        let mgr = self.mgr.clone();
        let frames = PoolManager::join(self.mgr.spawn(move || {
            let mut frames = Vec::with_capacity(hashes.len());
            let mut missing = Vec::new();
            let mut bytes = 0u64;
            for (hex, h) in hashes {
                match mgr.cache.get(h, enc, &who.name)? {
                    Some(b) => {
                        bytes = bytes.saturating_add(b.bytes.len() as u64);
                        if bytes > max_bytes {
                            return Err(PoolError::Limit(format!(
                                "these frames exceed max_frames_reply_bytes={max_bytes}; \
                                 ask for fewer per call"
                            )));
                        }
                        frames.push(pb::Observation {
                            frame: b.bytes,
                            encoding: enc as i32,
                            width: b.width,
                            height: b.height,
                            frame_hash: hex,
                            ..Default::default()
                        });
                    }
                    None => missing.push(hex),
                }
            }
            if !missing.is_empty() {
                return Err(PoolError::FramesMissing(missing.join(", ")));
            }
            Ok(frames)
        }))
        .await?;
        Ok(Response::new(pb::GetFramesResponse { frames }))
    }
}

impl DeskgymService {
    pub(super) async fn do_get_cache_stats(
        &self,
        req: Request<pb::GetCacheStatsRequest>,
    ) -> Result<Response<pb::CacheStats>, Status> {
        let who = principal(&req)?;
        // On a server with tokens a principal sees its own counters, never the fleet's.
        Ok(Response::new(if self.mgr.policy().tenants {
            self.mgr.cache.stats_of(&who.name)
        } else {
            self.mgr.cache.stats()
        }))
    }

    pub(super) async fn do_attach_frames(
        &self,
        req: Request<pb::AttachFramesRequest>,
    ) -> Result<Response<pb::AttachFramesResponse>, Status> {
        let who = principal(&req)?;
        let ring = self.calls.rings().attach(&who.name, req.get_ref())?;
        Ok(Response::new(ring))
    }
}
