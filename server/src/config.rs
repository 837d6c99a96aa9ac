//! Server configuration and limits.

use std::time::Duration;

/// Limits checked up front, before any desktop is started or any input is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most envs alive at once across all pools.
    pub max_envs: u32,
    /// Most items in one StepBatch.
    pub max_batch: u32,
    /// Largest screen side in pixels.
    pub max_screen_side: u32,
    /// Smallest screen side in pixels (the task layouts need room).
    pub min_screen_side: u32,
    /// Largest settle cap in milliseconds.
    pub max_settle_ms: u32,
    /// Longest `type_text` in characters.
    pub max_text_len: u32,
    /// Longest `wait` in milliseconds.
    pub max_wait_ms: u32,
    /// Most checkpoints held at once.
    pub max_checkpoints: u32,
    /// Most hashes in one `if_none_match` list (and in one GetFrames).
    pub max_if_none_match: u32,
    /// Byte budget of the fleet frame cache.
    pub frame_cache_bytes: u64,
    /// Byte budget of all checkpoints held (their action logs), server-wide.
    pub max_checkpoint_bytes: u64,
    /// Most frame bytes one GetFrames reply may carry.
    pub max_frames_reply_bytes: u64,
    /// Most pixels of all desktops alive at once (each Xvfb holds its framebuffer).
    pub max_total_pixels: u64,
    /// Time bound of one blocking operation on a desktop (a restore's replay gets this
    /// per 64 replayed actions). Past it the call answers DEADLINE_EXCEEDED and the
    /// desktop's processes are killed, so the stuck thread is freed and the next
    /// Reset restarts the env.
    pub op_timeout: Duration,
    /// Most blocking jobs admitted (queued or running) at once; beyond it calls answer
    /// RESOURCE_EXHAUSTED instead of waiting in an unbounded queue.
    pub max_queued_ops: u32,
    /// Longest time bound an `Exec` may ask for.
    pub max_exec_ms: u32,
    /// Bytes of stdout (and of stderr) an `Exec` returns; the rest is cut and flagged.
    pub max_exec_output: u32,
    /// Most bytes of stdin one `Exec` may carry.
    pub max_exec_stdin: u32,
    /// Most processes a sandbox's user may run at once (fork bombs stop there).
    pub max_sandbox_processes: u32,
    /// Most memory one sandbox may use, in MiB (a profile may set its own).
    pub sandbox_memory_mb: u64,
    /// Size of a sandbox's home and of its `/tmp`, each, in MiB (tmpfs; counted as
    /// memory where a cgroup bounds it).
    pub sandbox_disk_mb: u64,
    /// Most open files per sandboxed process.
    pub sandbox_open_files: u64,
    /// Most bytes one PutFile writes, and one GetFile returns (call again from the next
    /// offset for more).
    pub max_file_bytes: u64,
    /// Most entries one ListDirectory returns.
    pub max_list_entries: u32,
    /// Most Screencast streams open at once.
    pub max_screencasts: u32,
    /// Most MiB all recordings on the data dir may hold, shared out per principal
    /// (`recording_mb=` in the token file): a recording is refused once its
    /// principal's bundles hold its share, and one running stops at the share.
    pub max_recording_mb: u64,
    /// Most bytes of all files of one PutDir or GetDir.
    pub max_tree_bytes: u64,
    /// Most entries (files and directories) of one PutDir or GetDir.
    pub max_tree_entries: u32,
    /// Most levels below a PutDir's or GetDir's root.
    pub max_tree_depth: u32,
    /// Most MiB the artifact store may hold, shared out per principal
    /// (`artifact_mb=` in the token file): an upload past its principal's share is
    /// refused. Counted per reference: an artifact two principals hold counts for each.
    pub max_artifact_mb: u64,
    /// Most data bytes in one ArtifactChunk or TreeEntry (under gRPC's 4 MiB message).
    pub max_artifact_chunk: u32,
    /// Most parked replicas held at once (desktops kept at checkpoints' states so a
    /// fork replays nothing, or only the steps since an earlier checkpoint); 0 turns
    /// parking off. Each is a whole desktop, counted in `max_envs` and its owner's
    /// quota, and the first to go when a pool or fork needs the room.
    pub max_parked: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_envs: 64,
            max_batch: 256,
            max_screen_side: 4096,
            min_screen_side: 64,
            max_settle_ms: 10_000,
            max_text_len: 1_000,
            max_wait_ms: 10_000,
            max_checkpoints: 1_024,
            max_if_none_match: 64,
            frame_cache_bytes: 512 << 20,
            max_checkpoint_bytes: 256 << 20,
            max_frames_reply_bytes: 256 << 20,
            // 64 desktops at 1920x1080.
            max_total_pixels: 64 * 1920 * 1080,
            op_timeout: Duration::from_secs(60),
            max_queued_ops: 1024,
            max_exec_ms: 600_000,
            max_exec_output: 256 << 10,
            max_exec_stdin: 4 << 20,
            max_sandbox_processes: 512,
            sandbox_memory_mb: 4096,
            sandbox_disk_mb: 2048,
            sandbox_open_files: 4096,
            max_file_bytes: 64 << 20,
            max_list_entries: 10_000,
            max_screencasts: 8,
            max_recording_mb: 65_536,
            max_tree_bytes: 1 << 30,
            max_tree_entries: 100_000,
            max_tree_depth: 32,
            max_artifact_mb: 16_384,
            max_artifact_chunk: 2 << 20,
            max_parked: 8,
        }
    }
}

/// Everything `run` needs besides the listener.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Limits.
    pub limits: Limits,
    /// Principals and their bearer tokens (see `parse_token_file`); when any is set every
    /// deskgym RPC must carry `authorization: Bearer <token>`, and objects belong to
    /// the principal that created them. Required when listening beyond loopback.
    pub principals: Vec<PrincipalSpec>,
    /// Threads of the blocking pool that drives desktops. Steps mostly wait on X and on
    /// settle timers, so this is sized by concurrency, not by cores.
    pub step_threads: usize,
    /// Pools untouched for this long are closed (a dropped client must not leak envs).
    /// `None` disables reaping.
    pub idle_timeout: Option<Duration>,
    /// Where recordings (`<run>.skn` bundles) are written; clients only name runs.
    pub data_dir: std::path::PathBuf,
    /// Roll recording chunks at about this many buffered bytes.
    pub record_roll_bytes: usize,
    /// Roll recording chunks at least this often.
    pub record_roll_every: Duration,
    /// What a recording does when its writer falls behind.
    pub record_overflow: deskgym_datasets::Overflow,
    /// Records queued per recording before the overflow policy applies.
    pub record_queue: usize,
    /// How long a `block` send waits for a stalled writer before it drops (once per
    /// stall; see `deskgym_datasets::BLOCK_LIMIT`).
    pub record_block_limit: Duration,
    /// Frames per second of per-episode H.264 videos in recordings; `None`: no video.
    pub record_video_fps: Option<u32>,
    /// Elide repeated frames in recorded videos (variable frame rate): cheaper, but the
    /// videos no longer hold one frame per step (the LeRobot export then leaves them
    /// out and keeps the images).
    pub record_video_variable_rate: bool,
    /// What a desktop is: real (Xvfb, apps, sandboxes) or fake (in memory).
    pub backend: BackendKind,
    /// A profile catalog (TOML) that adds to or overrides the bundled one.
    pub profiles: Option<std::path::PathBuf>,
    /// A directory of declarative task files (`*.toml`) added to the bundled tasks.
    pub tasks_dir: Option<std::path::PathBuf>,
    /// The installed `miniwob` package (its `html/miniwob/*.html` become the
    /// `miniwob/<name>` tasks); `None`: no such tasks ([`crate::find_miniwob`] finds
    /// the package the way the binary does).
    pub miniwob_dir: Option<std::path::PathBuf>,
    /// Capabilities pools may be granted ("exec", ...); anything else is
    /// PERMISSION_DENIED. Empty: none (the default: boundary verbs are opt-in).
    pub allow_capabilities: Vec<String>,
    /// What every principal may unlock on its envs at run time (`Unlock`) unless its
    /// token-file line says `unlock=`: power names (`exec`, `files`, `clipboard`,
    /// `windows`), `net.egress` (any host) or `net.egress:HOST,.SUFFIX,...`. Empty: no
    /// unlock is granted (the default).
    pub allow_unlock: Vec<String>,
    /// What every principal may ask a controller for unless its token-file line says
    /// `ask=`: entries as `allow_unlock` spells them. A call that needs such a power
    /// (an Unlock of it, or a verb of it on an env without it) emits a
    /// `capability_required` event and waits for AnswerCapability. Empty: nothing is
    /// asked (the default); what neither list holds is refused at once.
    pub ask_unlock: Vec<String>,
    /// How long such a call waits for an answer before it is refused.
    pub ask_timeout: Duration,
    /// An unfinished artifact upload nobody has written to for this long is removed
    /// and its bytes released from its principal's share. `None`: kept until
    /// DeleteArtifact.
    pub upload_idle: Option<Duration>,
    /// Names the egress proxy of a `net.egress` unlock resolves to these addresses
    /// instead of asking DNS (and may reach although they are private): a mirror on the
    /// operator's network, a test host.
    pub egress_hosts: Vec<(String, std::net::IpAddr)>,
    /// Host paths masked inside every sandbox besides the data dir (the token file).
    pub sandbox_hide: Vec<std::path::PathBuf>,
    /// Caps on open connections and their idle timeout.
    pub connections: crate::conn::ConnLimits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            principals: Vec::new(),
            step_threads: 64,
            idle_timeout: Some(Duration::from_secs(600)),
            data_dir: "deskgym-data".into(),
            record_roll_bytes: 64 << 20,
            record_roll_every: Duration::from_secs(30),
            record_overflow: deskgym_datasets::Overflow::Block,
            record_queue: 4096,
            record_block_limit: deskgym_datasets::BLOCK_LIMIT,
            record_video_fps: Some(10),
            record_video_variable_rate: false,
            connections: crate::conn::ConnLimits::default(),
            backend: BackendKind::Real,
            profiles: None,
            tasks_dir: None,
            miniwob_dir: None,
            allow_capabilities: Vec::new(),
            allow_unlock: Vec::new(),
            ask_unlock: Vec::new(),
            ask_timeout: Duration::from_secs(60),
            upload_idle: Some(Duration::from_secs(24 * 3600)),
            egress_hosts: Vec::new(),
            sandbox_hide: Vec::new(),
        }
    }
}

/// What the server's desktops are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// Xvfb displays running the task's apps, sandboxed where the profile says.
    #[default]
    Real,
    /// In-memory desktops for fast client tests: no X, no sandbox, no apps; the bundled
    /// tasks' logic with deterministic frames drawn from their scene (other tasks show a
    /// blank episode). Same RPCs, same validation, same pools and quotas.
    Fake,
}

/// One line of a token file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrincipalSpec {
    /// Name (letters, digits, `_`, `-`, `.`).
    pub name: String,
    /// Its bearer token (never logged).
    pub token: String,
    /// Desktop quota; `None`: the server's `max_envs` / number of principals.
    pub desktops: Option<u32>,
    /// Checkpoint quota; `None`: the server's `max_checkpoints` / number of principals.
    pub checkpoints: Option<u32>,
    /// Share of desktop pixels (width x height summed); `None`: the server's
    /// `max_total_pixels` / number of principals.
    pub pixels: Option<u64>,
    /// Share of screencast slots (console live views included); `None`: the server's
    /// `max_screencasts` / number of principals (at least 1).
    pub screencasts: Option<u32>,
    /// Share of the step threads (desktop operations queued or running at once);
    /// `None`: the server's `step_threads` / number of principals (at least 1).
    pub threads: Option<u32>,
    /// Share of recording disk in MiB (its bundles on the data dir, finished and
    /// live); `None`: the server's `max_recording_mb` / number of principals.
    pub recording_mb: Option<u64>,
    /// Share of the artifact store in MiB (its artifacts and unfinished uploads);
    /// `None`: the server's `max_artifact_mb` / number of principals.
    pub artifact_mb: Option<u64>,
    /// The frame-cache sharing group (`share=NAME`): principals of one group dedup
    /// each other's frames (and so may time each other's screens); `None`: a group
    /// of its own.
    pub share: Option<String>,
    /// What it may unlock (`unlock=ENTRY`, one word per entry, as `--allow-unlock`
    /// takes them); `None`: the server's `--allow-unlock` list.
    pub unlock: Option<Vec<String>>,
    /// What it may ask a controller for (`ask=ENTRY`, as `--ask-unlock` takes them);
    /// `None`: the server's `--ask-unlock` list.
    pub ask: Option<Vec<String>>,
    /// The `@metrics: TOKEN` line: a token that reads `/metrics` and nothing else
    /// (no principal of this name exists).
    pub metrics_only: bool,
}

impl PrincipalSpec {
    /// A principal with no quota or group of its own (every share the server's default):
    /// what a bare token file and a token line without `key=value` words both mean, so
    /// a field added to the spec gets its default in one place.
    fn bare(name: &str, token: &str, metrics_only: bool) -> Self {
        Self {
            name: name.into(),
            token: token.into(),
            desktops: None,
            checkpoints: None,
            pixels: None,
            screencasts: None,
            threads: None,
            recording_mb: None,
            artifact_mb: None,
            share: None,
            unlock: None,
            ask: None,
            metrics_only,
        }
    }
}

/// The name of the token-file line that holds the metrics token (`@` is no
/// principal name's letter, so it names no principal).
pub(crate) const METRICS_LINE: &str = "@metrics";

/// Parses a token file: one bare token (principal `default`), or one principal per line
/// (blank lines and `#` comments ignored). The error names the line, never a token.
///
/// ```text
/// # name: token [desktops=N] [checkpoints=N] [pixels=N] [screencasts=N] [threads=N]
/// #   [recording_mb=N] [artifact_mb=N] [share=GROUP] [unlock=POWER[:HOSTS]]...
/// #   [ask=POWER[:HOSTS]]...
/// alice: 3f1c...e9 desktops=16 share=lab unlock=exec unlock=net.egress:pypi.org,.pythonhosted.org ask=files
/// bob:   77ab...02 desktops=8 checkpoints=100 share=lab
/// @metrics: 5d2e...41
/// ```
pub fn parse_token_file(text: &str) -> Result<Vec<PrincipalSpec>, String> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if let [(_, only)] = lines.as_slice()
        && !only.contains(':')
        && !only.contains(char::is_whitespace)
    {
        return Ok(vec![PrincipalSpec::bare("default", only, false)]);
    }
    let mut out: Vec<PrincipalSpec> = Vec::new();
    for (n, line) in lines {
        let (name, rest) = line.split_once(':').ok_or_else(|| {
            format!("line {n}: expected `name: token [desktops=N] [checkpoints=N]`")
        })?;
        let name = name.trim();
        let metrics_only = name == METRICS_LINE;
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
        if !metrics_only && !plain {
            return Err(format!(
                "line {n}: a principal name is letters, digits, '_', '-', '.'"
            ));
        }
        let mut words = rest.split_whitespace();
        let token = words
            .next()
            .ok_or_else(|| format!("line {n}: principal {name} has no token"))?;
        let mut spec = PrincipalSpec::bare(name, token, metrics_only);
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("line {n}: expected key=value after the token"))?;
            if metrics_only {
                return Err(format!("line {n}: the metrics token takes no quota"));
            }
            if k == "share" {
                if v.is_empty()
                    || !v
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
                {
                    return Err(format!(
                        "line {n}: a sharing group is letters, digits, '_', '-', '.'"
                    ));
                }
                spec.share = Some(v.to_string());
                continue;
            }
            if k == "unlock" || k == "ask" {
                crate::unlock::UnlockPolicy::parse(&[v.to_string()])
                    .map_err(|e| format!("line {n}: {k}: {e}"))?;
                let list = if k == "ask" {
                    &mut spec.ask
                } else {
                    &mut spec.unlock
                };
                list.get_or_insert_with(Vec::new).push(v.to_string());
                continue;
            }
            let v: u64 = v
                .parse()
                .map_err(|_| format!("line {n}: {k} must be a non-negative integer"))?;
            let small =
                || u32::try_from(v).map_err(|_| format!("line {n}: {k} is at most {}", u32::MAX));
            match k {
                "desktops" => spec.desktops = Some(small()?),
                "checkpoints" => spec.checkpoints = Some(small()?),
                "screencasts" => spec.screencasts = Some(small()?),
                "threads" => spec.threads = Some(small()?),
                "pixels" => spec.pixels = Some(v),
                "recording_mb" => spec.recording_mb = Some(v),
                "artifact_mb" => spec.artifact_mb = Some(v),
                _ => {
                    return Err(format!(
                        "line {n}: unknown quota {k:?} (desktops, checkpoints, pixels, \
                         screencasts, threads, recording_mb, artifact_mb, share, unlock, ask)"
                    ));
                }
            }
        }
        if out.iter().any(|p| p.name == spec.name) {
            return Err(format!("line {n}: principal {name} appears twice"));
        }
        if out.iter().any(|p| p.token == spec.token) {
            return Err(format!("line {n}: two principals share a token"));
        }
        out.push(spec);
    }
    if out.iter().all(|p| p.metrics_only) {
        return Err("the token file names no principal".into());
    }
    Ok(out)
}

/// Parses an `--egress-hosts` file: `NAME ADDRESS...` per line, as `/etc/hosts` has them
/// the other way round (blank lines and `#` comments ignored). The error names the line.
pub fn parse_egress_hosts(text: &str) -> Result<Vec<(String, std::net::IpAddr)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default();
        crate::unlock::Host::parse(name).map_err(|e| format!("line {}: {e}", i + 1))?;
        let mut any = false;
        for w in words {
            let ip = w
                .parse()
                .map_err(|_| format!("line {}: {w:?} is not an IP address", i + 1))?;
            out.push((name.to_ascii_lowercase(), ip));
            any = true;
        }
        if !any {
            return Err(format!("line {}: expected `NAME ADDRESS...`", i + 1));
        }
    }
    Ok(out)
}
