//! GetCapabilities: what this server offers and to whom.

use super::*;

impl DeskgymService {
    pub(super) async fn do_get_capabilities(
        &self,
        req: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        let l = self.mgr.limits();
        let who = principal(&req)?;
        Ok(Response::new(pb::Capabilities {
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: "deskgym.v1".into(),
            verbs: VERBS.iter().map(|v| v.to_string()).collect(),
            targets: ["point_px", "point_norm", "element_ref", "element"]
                .map(String::from)
                .to_vec(),
            encodings: vec![
                pb::ImageEncoding::RawRgb as i32,
                pb::ImageEncoding::Png as i32,
                pb::ImageEncoding::Jpeg as i32,
            ],
            tasks: self
                .mgr
                .policy()
                .tasks
                .iter()
                .map(|t| pb::TaskInfo {
                    id: t.id.clone(),
                    description: t.description.clone(),
                    default_max_steps: t.default_max_steps,
                    profile: t.profile.clone(),
                    any_profile: t.any_profile,
                })
                .collect(),
            profiles: self
                .mgr
                .policy()
                .catalog
                .iter()
                .map(|p| pb::ProfileInfo {
                    name: p.name.clone(),
                    description: p.description.clone(),
                    available: p.available(),
                    missing_packages: p.missing.clone(),
                    apps: p.apps.keys().cloned().collect(),
                    network: p.network,
                    snapshot_kind: p.snapshot_kind().into(),
                })
                .collect(),
            allowed_capabilities: self.mgr.policy().allow.clone(),
            unlockable: who.unlock.describe(),
            ask: Some(pb::CapabilityAsk {
                askable: who.ask.describe(),
                timeout_ms: u32::try_from(self.mgr.policy().ask_timeout.as_millis())
                    .unwrap_or(u32::MAX),
            }),
            observe_after_act: true,
            binary_frames: true,
            capacity: Some({
                let used = self.mgr.usage();
                let free = pb::Capacity {
                    envs_in_use: used.desktops,
                    envs_free: l.max_envs.saturating_sub(used.desktops),
                    pixels_in_use: used.pixels,
                    pixels_free: l.max_total_pixels.saturating_sub(used.pixels),
                };
                if self.mgr.policy().tenants {
                    // A principal's own use, and what it may still take (its quota,
                    // within what is free): never the other tenants' figures.
                    let own = self.mgr.usage_of(&who.name);
                    pb::Capacity {
                        envs_in_use: own.desktops,
                        envs_free: who
                            .max_desktops
                            .saturating_sub(own.desktops)
                            .min(free.envs_free),
                        pixels_in_use: own.pixels,
                        pixels_free: who
                            .max_pixels
                            .saturating_sub(own.pixels)
                            .min(free.pixels_free),
                    }
                } else {
                    free
                }
            }),
            limits: Some(pb::Limits {
                max_envs: l.max_envs,
                max_batch: l.max_batch,
                max_screen_side: l.max_screen_side,
                min_screen_side: l.min_screen_side,
                max_settle_ms: l.max_settle_ms,
                max_text_len: l.max_text_len,
                max_wait_ms: l.max_wait_ms,
                max_checkpoints: l.max_checkpoints,
                max_if_none_match: l.max_if_none_match,
                frame_cache_bytes: l.frame_cache_bytes,
                max_chord_bytes: MAX_CHORD_BYTES as u32,
                max_checkpoint_bytes: l.max_checkpoint_bytes,
                max_frames_reply_bytes: l.max_frames_reply_bytes,
                max_total_pixels: l.max_total_pixels,
                op_timeout_ms: u32::try_from(l.op_timeout.as_millis()).unwrap_or(u32::MAX),
                max_exec_ms: l.max_exec_ms,
                max_exec_output: l.max_exec_output,
                max_exec_stdin: l.max_exec_stdin,
                max_file_bytes: l.max_file_bytes,
                max_list_entries: l.max_list_entries,
                max_screencasts: l.max_screencasts,
                max_recording_mb: l.max_recording_mb,
                max_parked: l.max_parked,
                shares: Some(pb::Shares {
                    desktops: who.max_desktops,
                    checkpoints: who.max_checkpoints,
                    pixels: who.max_pixels,
                    screencasts: who.max_screencasts,
                    threads: who.max_threads,
                    recording_mb: who.max_recording_mb,
                }),
                tree: Some(pb::TreeLimits {
                    max_bytes: l.max_tree_bytes,
                    max_entries: l.max_tree_entries,
                    max_depth: l.max_tree_depth,
                }),
                artifacts: Some(pb::ArtifactLimits {
                    max_bytes: l.max_artifact_mb.saturating_mul(1 << 20),
                    share_bytes: who.max_artifact_bytes,
                    used_bytes: self.artifacts.used(&who).unwrap_or(0),
                    max_chunk_bytes: l.max_artifact_chunk,
                }),
                sandbox: Some(pb::SandboxLimits {
                    memory_mb: l.sandbox_memory_mb,
                    memory_bound: deskgym_worker::memory_bound().name().into(),
                    disk_mb: l.sandbox_disk_mb,
                    open_files: l.sandbox_open_files,
                    processes: l.max_sandbox_processes,
                }),
            }),
        }))
    }
}
