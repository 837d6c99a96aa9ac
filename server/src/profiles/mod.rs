//! The desktop profile catalog: what runs on an env's display besides Xvfb.
//!
//! The bundled catalog (`server/profiles/catalog.toml`) is compiled in; `--profiles
//! FILE` adds profiles or replaces bundled ones by name. A profile names its session
//! programs, launchable applications (argv, never a shell line), seed files for the
//! home, files shown at system paths (`system_files`), environment, network policy, the
//! user's password, and the Debian package of every program it needs; a host missing
//! one cannot run it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use deskgym_worker::SessionProgram;
use deskgym_worker::which;
use deskgym_worker::{MAX_SYSTEM_FILES, SystemFile, refuse_system_path, system_dir_on_host};
use deskgym_worker::{SandboxConfig, SandboxLimits, SettlePolicy};
use serde::Deserialize;

/// The bundled catalog.
const BUNDLED: &str = include_str!("../../profiles/catalog.toml");
/// The profile of bundled tasks (no sandbox).
pub(crate) const TASKS_PROFILE: &str = "tasks";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    profiles: BTreeMap<String, toml::Table>,
}

/// A file put into every new home of a profile.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedFile {
    /// Path under the home directory.
    path: String,
    /// The file's text.
    #[serde(default)]
    content: Option<String>,
    /// Or: a host file to copy...
    #[serde(default)]
    copy: Option<PathBuf>,
    /// ...with its first occurrence of `[0]` replaced by `[1]`.
    #[serde(default)]
    replace: Option<[String; 2]>,
    /// Permission bits.
    #[serde(default = "default_mode")]
    mode: u32,
    /// Where the profile's home base already has this file, the base's copy stays: a
    /// machine-built home wrote it through the application itself (with the same
    /// settings and its own), and this file stands in for it where there is no base.
    #[serde(default)]
    keep_base: bool,
}

/// A file shown at a system path in every sandbox of a profile, read-only, beside the
/// host's entries of its directory (decision 218): what a task copies from the system
/// of OSWorld's image that this host's system lacks.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SystemFileDef {
    /// Absolute, inside a system tree (`/usr`, `/etc`...), in a directory of this host
    /// with at most 256 entries (each is bound again at every sandbox start).
    path: String,
    /// The file's text.
    content: String,
    /// Permission bits.
    #[serde(default = "default_mode")]
    mode: u32,
}

fn default_mode() -> u32 {
    0o644
}

fn default_password() -> String {
    "password".into()
}

/// One profile as the catalog file states it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileDef {
    description: String,
    #[serde(default)]
    sandbox: bool,
    #[serde(default)]
    network: bool,
    #[serde(default = "default_password")]
    password: String,
    #[serde(default)]
    settle: Option<String>,
    #[serde(default)]
    session: Vec<SessionProgram>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    apps: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    requires: BTreeMap<String, String>,
    #[serde(default)]
    files: Vec<SeedFile>,
    /// Files at system paths (a profile's entry replaces its base's at the same path).
    #[serde(default)]
    system_files: Vec<SystemFileDef>,
    /// Directories created in every new home (relative paths).
    #[serde(default)]
    dirs: Vec<String>,
    /// A home built once per machine by running its applications (their first-start
    /// state), put into every new home before `dirs` and `files`.
    #[serde(default)]
    home_base: Option<HomeBase>,
    /// Its own sandbox limits, in place of the server's.
    #[serde(default)]
    limits: ProfileLimits,
    /// What `launch_app` arguments each app takes: `none` (the default), `paths`,
    /// `urls` or `paths_or_urls`.
    #[serde(default)]
    app_args: BTreeMap<String, AppArgs>,
    /// Whether its sandbox's programs run on a clock the server sets (our preload;
    /// decisions 199, 201): a fork's replicas show apps the original's time at every action.
    #[serde(default)]
    clock: bool,
}

/// Where a profile's machine-built home lies, and what builds it: the files an app
/// writes on its first start depend on this machine's builds (paths, versions, plug-in
/// lists), so they are made here, not shipped in the catalog.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HomeBase {
    /// The built home (absolute).
    dir: PathBuf,
    /// The command that builds it, for the warning when it is not there.
    built_by: String,
}

/// A profile's own sandbox limits (the server's flags where unset).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileLimits {
    /// Memory, MiB.
    pub(crate) memory_mb: Option<u64>,
    /// Home and `/tmp` size, each, MiB.
    pub(crate) disk_mb: Option<u64>,
    /// Open files per process.
    pub(crate) open_files: Option<u64>,
}

/// The arguments `launch_app` may add to an app's catalog argv. Never flags: an
/// argument that starts with `-` is refused (a flag can run a command: a terminal's
/// `--`, a browser's `--renderer-cmd-prefix`), and so is a URL of any other scheme
/// (LibreOffice's `macro:` and `vnd.sun.star.script:` run code).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AppArgs {
    /// No arguments.
    #[default]
    None,
    /// File paths (absolute or relative to the home).
    Paths,
    /// `http`, `https`, `file` or `about` URLs.
    Urls,
    /// Either.
    PathsOrUrls,
    /// Anything but NUL: a program launched under the `exec` grant (ACI's `launch_app`
    /// of a PATH name or absolute path, whose arguments go verbatim).
    Verbatim,
}

impl AppArgs {
    /// Why `arg` is refused, or `None` when this app takes it.
    pub(crate) fn refuses(self, arg: &str) -> Option<&'static str> {
        const SCHEMES: [&str; 4] = ["http://", "https://", "file://", "about:"];
        let lower = arg.to_ascii_lowercase();
        let is_url = SCHEMES.iter().any(|s| lower.starts_with(s));
        // Any other `scheme:` is a URL this policy does not allow.
        let other_scheme = !is_url
            && lower.split_once(':').is_some_and(|(s, _)| {
                !s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b))
            });
        if self == Self::Verbatim {
            return arg.contains('\0').then_some("holds a NUL");
        }
        if arg.starts_with('-') {
            return Some("is a flag; launch_app takes no flags (running commands is exec's)");
        }
        if arg.is_empty() || arg.contains(['\0', '\n']) {
            return Some("is empty or holds a NUL or newline");
        }
        match self {
            Self::None => Some("is not taken: this app takes no arguments"),
            Self::Paths if is_url || other_scheme => Some("is a URL; this app takes file paths"),
            Self::Urls if !is_url => Some("is not an http, https, file or about URL"),
            Self::PathsOrUrls if other_scheme => {
                Some("is a URL of a scheme other than http, https, file, about")
            }
            _ => None,
        }
    }
}

/// A profile of the catalog, checked against this host.
#[derive(Debug)]
pub(crate) struct Profile {
    /// Its name.
    pub(crate) name: String,
    /// One line for users.
    pub(crate) description: String,
    /// Debian packages this host lacks for it (empty: it can run).
    pub(crate) missing: Vec<String>,
    /// Launchable applications: name -> argv.
    pub(crate) apps: BTreeMap<String, Vec<String>>,
    /// What arguments `launch_app` may add to each app (unlisted: none).
    pub(crate) app_args: BTreeMap<String, AppArgs>,
    /// Its own sandbox limits.
    limits: ProfileLimits,
    /// Its settle policy when it runs a sandboxed session (not the task app).
    pub(crate) settle: Option<SettlePolicy>,
    /// Whether its sandboxes may reach the network.
    pub(crate) network: bool,
    /// What its desktops run (`None`: the bundled task app, no sandbox).
    sandbox: Option<SandboxConfig>,
}

impl Profile {
    /// What a checkpoint of this profile captures, in ACI §5's vocabulary (none |
    /// replay | disk | memory | process): `replay` for every profile, since Restore and
    /// Fork rebuild a state by replaying the episode's action log on a fresh desktop
    /// (decision 185). A profile that snapshots its desktop another way says so here.
    pub(crate) fn snapshot_kind(&self) -> &'static str {
        "replay"
    }

    /// True when this host has every program it needs.
    pub(crate) fn available(&self) -> bool {
        self.missing.is_empty()
    }

    /// The sandbox its desktops run, with `hide` masked inside and the server's
    /// `limits` where the profile sets none of its own (`None`: the task app).
    pub(crate) fn sandbox(&self, hide: &[PathBuf], limits: SandboxLimits) -> Option<SandboxConfig> {
        self.sandbox.clone().map(|mut s| {
            s.hide.extend_from_slice(hide);
            let own = &self.limits;
            s.limits = SandboxLimits {
                memory_mb: own.memory_mb.unwrap_or(limits.memory_mb),
                disk_mb: own.disk_mb.unwrap_or(limits.disk_mb),
                open_files: own.open_files.unwrap_or(limits.open_files),
                processes: limits.processes,
            };
            s
        })
    }

    /// True when its desktops run in a sandbox (where `exec` and friends work).
    pub(crate) fn sandboxed(&self) -> bool {
        self.sandbox.is_some()
    }
}

/// Every profile this server offers.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    profiles: BTreeMap<String, Arc<Profile>>,
    /// Where the home templates were written; removed with the catalog.
    templates: Option<PathBuf>,
}

impl Drop for Catalog {
    fn drop(&mut self) {
        if let Some(t) = &self.templates {
            let _ = std::fs::remove_dir_all(t);
            // The per-process root too, once nothing else is in it.
            if let Some(root) = t.parent() {
                let _ = std::fs::remove_dir(root);
            }
        }
    }
}

impl Catalog {
    /// The bundled catalog, extended or overridden by `extra` (a TOML file).
    pub(crate) fn load(extra: Option<&Path>) -> Result<Self, String> {
        let mut tables = tables(BUNDLED, "the bundled catalog")?;
        let mut what = "the bundled catalog".to_string();
        if let Some(path) = extra {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            what = path.display().to_string();
            tables.extend(self::tables(&text, &what)?);
        }
        let defs = parse(extend(tables)?, &what)?;
        if defs.get(TASKS_PROFILE).is_none_or(|d| d.sandbox) {
            return Err(format!(
                "the catalog must keep profile `{TASKS_PROFILE}` without a sandbox"
            ));
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let templates = deskgym_worker::sandboxes_root().join(format!(
            "templates-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut profiles = BTreeMap::new();
        for (name, def) in defs {
            let p = build(&name, def, &templates)?;
            profiles.insert(name, Arc::new(p));
        }
        Ok(Self {
            profiles,
            templates: Some(templates),
        })
    }

    /// A profile by name.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Profile>> {
        self.profiles.get(name)
    }

    /// Every profile, by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Profile>> {
        self.profiles.values()
    }
}

fn tables(text: &str, what: &str) -> Result<BTreeMap<String, toml::Table>, String> {
    let file: CatalogFile =
        toml::from_str(text).map_err(|e| format!("{what} is not a valid profile catalog: {e}"))?;
    Ok(file.profiles)
}

/// A relative path that stays inside the home (no `..`, not absolute).
fn inside_home(path: &str) -> bool {
    let p = Path::new(path);
    !path.is_empty()
        && !p.is_absolute()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Resolves `extends = "base"`: the base's fields, then the profile's own on top (its
/// tables `env`, `apps`, `requires` merge key by key; its lists `session`, `files`,
/// `dirs`, `system_files` come after the base's; anything else replaces). Bases may
/// extend in turn.
fn extend(
    mut tables: BTreeMap<String, toml::Table>,
) -> Result<BTreeMap<String, toml::Table>, String> {
    fn resolve(
        name: &str,
        raw: &BTreeMap<String, toml::Table>,
        depth: usize,
    ) -> Result<toml::Table, String> {
        let mut own = raw[name].clone();
        let Some(base) = own.remove("extends") else {
            return Ok(own);
        };
        let base = base
            .as_str()
            .filter(|b| raw.contains_key(*b) && *b != name)
            .ok_or_else(|| format!("profile {name}: `extends` must name another profile"))?;
        if depth > 8 {
            return Err(format!("profile {name}: `extends` goes in a circle"));
        }
        let mut merged = resolve(base, raw, depth + 1)?;
        for (k, v) in own {
            match (merged.get_mut(&k), v) {
                (Some(toml::Value::Table(b)), toml::Value::Table(o)) => b.extend(o),
                (Some(toml::Value::Array(b)), toml::Value::Array(o)) => b.extend(o),
                (_, v) => {
                    merged.insert(k, v);
                }
            }
        }
        Ok(merged)
    }
    let raw = tables.clone();
    for (name, t) in tables.iter_mut() {
        *t = resolve(name, &raw, 0)?;
    }
    Ok(tables)
}

fn parse(
    tables: BTreeMap<String, toml::Table>,
    what: &str,
) -> Result<BTreeMap<String, ProfileDef>, String> {
    let mut defs = BTreeMap::new();
    for (name, t) in tables {
        let mut def: ProfileDef = toml::Value::Table(t)
            .try_into()
            .map_err(|e| format!("{what}: profile {name}: {e}"))?;
        // The merged list holds the base's files first: the last at a path wins.
        let mut seen = BTreeSet::new();
        def.system_files.reverse();
        def.system_files.retain(|f| seen.insert(f.path.clone()));
        def.system_files.reverse();
        defs.insert(name, def);
    }
    for (name, def) in &defs {
        let ok_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok_name {
            return Err(format!(
                "{what}: profile name {name:?} must be lowercase letters, digits and '-'"
            ));
        }
        let argvs = def.session.iter().map(|p| &p.argv).chain(def.apps.values());
        if argvs.into_iter().any(|a| a.is_empty()) {
            return Err(format!("{what}: profile {name}: an empty argv"));
        }
        if !def.sandbox
            && (!def.session.is_empty()
                || !def.apps.is_empty()
                || !def.files.is_empty()
                || !def.system_files.is_empty()
                || def.home_base.is_some())
        {
            return Err(format!(
                "{what}: profile {name}: session, apps, files, system_files and home_base need \
                 `sandbox = true`"
            ));
        }
        if def.system_files.len() > MAX_SYSTEM_FILES {
            return Err(format!(
                "{what}: profile {name}: {} system files; at most {MAX_SYSTEM_FILES}",
                def.system_files.len()
            ));
        }
        for f in &def.system_files {
            if let Some(why) = refuse_system_path(&f.path, f.mode) {
                return Err(format!(
                    "{what}: profile {name}: system file {:?} {why}",
                    f.path
                ));
            }
        }
        if let Some(b) = &def.home_base
            && !b.dir.is_absolute()
        {
            return Err(format!(
                "{what}: profile {name}: home_base.dir {:?} must be an absolute path",
                b.dir
            ));
        }
        for d in &def.dirs {
            if !inside_home(d) {
                return Err(format!(
                    "{what}: profile {name}: dir {d:?} needs a relative path inside the home"
                ));
            }
        }
        for f in &def.files {
            if !inside_home(&f.path) || f.content.is_some() == f.copy.is_some() {
                return Err(format!(
                    "{what}: profile {name}: file {:?} needs a relative path inside the home \
                     and exactly one of `content` and `copy`",
                    f.path
                ));
            }
        }
        if let Some(s) = &def.settle
            && !matches!(s.as_str(), "damage" | "sync" | "browser")
        {
            return Err(format!(
                "{what}: profile {name}: settle {s:?} is not `damage`, `sync` or `browser`"
            ));
        }
    }
    Ok(defs)
}

/// Checks a profile against this host and writes its home template.
fn build(name: &str, def: ProfileDef, templates: &Path) -> Result<Profile, String> {
    // Every program it starts, with the package that brings it (a program not listed in
    // `requires` is its own package name).
    let mut needed: BTreeMap<String, String> = def.requires.clone();
    if def.sandbox {
        needed.entry("bwrap".into()).or_insert("bubblewrap".into());
    }
    for argv in def.session.iter().map(|p| &p.argv).chain(def.apps.values()) {
        needed
            .entry(argv[0].clone())
            .or_insert_with(|| argv[0].clone());
    }
    let mut missing: Vec<String> = needed
        .iter()
        // Programs a seed file provides (google-chrome) are there once the home is.
        .filter(|(prog, _)| {
            !def.files
                .iter()
                .any(|f| f.path.ends_with(&format!("/{prog}")))
        })
        .filter(|(prog, _)| which(prog).is_none())
        .map(|(_, pkg)| pkg.clone())
        .collect();
    missing.sort();
    missing.dedup();
    let sandbox = if def.sandbox {
        let system_files = system_files(name, &def.system_files)?;
        let dir = templates.join(name);
        if missing.is_empty() {
            let base = def.home_base.as_ref().and_then(|b| {
                let there = b.dir.is_dir();
                if !there {
                    // The profile still runs, on its catalog files alone: a home without
                    // the apps' first-start state, which some tasks notice.
                    tracing::warn!(
                        profile = name,
                        "{} is missing: its homes lack the applications' first-start \
                         state; build it with `{}`",
                        b.dir.display(),
                        b.built_by
                    );
                }
                there.then_some(b.dir.as_path())
            });
            write_template(&dir, base, &def.files, &def.dirs)
                .map_err(|e| format!("profile {name}: {e}"))?;
        }
        Some(SandboxConfig {
            session: def.session.clone(),
            env: def.env.clone().into_iter().collect(),
            network: def.network,
            home_template: Some(dir),
            home_modes: def.files.iter().map(|f| (f.path.clone(), f.mode)).collect(),
            hide: Vec::new(),
            password: def.password.clone(),
            limits: SandboxLimits::default(),
            shares: Vec::new(),
            clock: def.clock,
            system_files,
        })
    } else {
        None
    };
    Ok(Profile {
        name: name.to_string(),
        description: def.description,
        missing,
        apps: def.apps,
        app_args: def.app_args,
        limits: def.limits,
        settle: def.settle.as_deref().map(|s| match s {
            "sync" => SettlePolicy::Sync,
            "browser" => SettlePolicy::Browser,
            _ => SettlePolicy::Damage,
        }),
        network: def.network,
        sandbox,
    })
}

/// A profile's system files as this host can show them: one whose directory the host
/// lacks is left out (the profile runs without it, as without a home base); one whose
/// directory is a link, too big to bind again, or a directory itself is refused.
fn system_files(name: &str, defs: &[SystemFileDef]) -> Result<Vec<SystemFile>, String> {
    let mut out = Vec::new();
    for f in defs {
        let path = PathBuf::from(&f.path);
        match system_dir_on_host(&path) {
            Ok(true) => out.push(SystemFile {
                path,
                mode: f.mode,
                content: f.content.clone(),
            }),
            Ok(false) => tracing::warn!(
                profile = name,
                "system file {}: its directory is not on this host; the profile's sandboxes \
                 go without it",
                f.path
            ),
            Err(why) => return Err(format!("profile {name}: system file {:?} {why}", f.path)),
        }
    }
    Ok(out)
}

fn write_template(
    dir: &Path,
    base: Option<&Path>,
    files: &[SeedFile],
    dirs: &[String],
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if let Some(base) = base {
        copy_base(base, dir).map_err(|e| format!("home base {}: {e}", base.display()))?;
    }
    for d in dirs {
        let path = dir.join(d);
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for f in files {
        let path = dir.join(&f.path);
        if f.keep_base && base.is_some() && path.exists() {
            continue;
        }
        let text = match (&f.content, &f.copy) {
            (Some(c), _) => c.clone(),
            (None, Some(src)) => {
                let t = std::fs::read_to_string(src)
                    .map_err(|e| format!("seed file {}: {e}", src.display()))?;
                match &f.replace {
                    Some([from, to]) => t.replacen(from.as_str(), to, 1),
                    None => t,
                }
            }
            (None, None) => String::new(),
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        // Readable by every sandbox's user, which copies it into its home with the
        // file's own mode (`home_modes`).
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode | 0o444))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Copies a machine-built home into a template: files and folders readable by every
/// sandbox's user (each copies it into its own home), links as links, nothing else.
fn copy_base(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let meta = std::fs::symlink_metadata(&src)?;
        let mode = meta.permissions().mode() & 0o7777;
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if meta.is_dir() {
            std::fs::create_dir_all(&dst)?;
            copy_base(&src, &dst)?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode | 0o755))?;
        } else if meta.is_file() {
            std::fs::copy(&src, &dst)?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode | 0o444))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
