//! Bearer-token authentication as a tonic interceptor, and the principals tokens name.
//!
//! Every pool, env and checkpoint belongs to the principal that created it; another
//! principal gets NOT_FOUND for it (no existence leak). The principals come from the
//! token file ([`crate::config::parse_token_file`]); a quota left out defaults to the
//! server's limit divided by the number of principals, so by default no principal can
//! exhaust what the others are owed.

use std::sync::Arc;

use deskgym_datasets::DiskShare;
use tonic::{Request, Status};

use crate::config::{Limits, PrincipalSpec};
use crate::unlock::UnlockPolicy;

/// Who is calling, and what they may hold. Travels in request extensions.
#[derive(Clone, Debug)]
pub(crate) struct Principal {
    /// Name from the token file (`local` when the server has no token).
    pub name: Arc<str>,
    /// Most desktops (envs and warm spares) this principal may hold at once.
    pub max_desktops: u32,
    /// Most checkpoints this principal may hold at once.
    pub max_checkpoints: u32,
    /// Most checkpoint bytes (action logs) this principal may hold at once.
    pub max_checkpoint_bytes: u64,
    /// Most desktop pixels (width x height summed) this principal may hold at once.
    pub max_pixels: u64,
    /// Most screencasts (console live views included) this principal may watch at once.
    pub max_screencasts: u32,
    /// Most desktop operations of its envs queued or running on the step threads.
    pub max_threads: u32,
    /// Most MiB its recordings (finished and live bundles) may hold on the data dir.
    pub max_recording_mb: u64,
    /// The account of that share, one per principal, cloned into every request and
    /// every recorder it starts: recordings are admitted against it and charge it as
    /// they grow, so all of them stop at one cap between them.
    pub recording: Arc<DiskShare>,
    /// Most bytes its artifacts and unfinished uploads may hold in the artifact store.
    pub max_artifact_bytes: u64,
    /// Its frame-cache scope: its own name, or the sharing group the token file puts
    /// it in. Frames are deduplicated within a scope only, so no principal's cache
    /// hits or encode times depend on what a principal outside its group showed.
    pub cache_scope: Arc<str>,
    /// What it may unlock on its envs without asking anyone (`Unlock`).
    pub unlock: Arc<UnlockPolicy>,
    /// What it may ask a controller for (a call needing it waits for the answer).
    pub ask: Arc<UnlockPolicy>,
}

impl Principal {
    /// The one principal of a server without tokens: loopback callers, server limits.
    pub(crate) fn local(limits: &Limits) -> Self {
        let name: Arc<str> = Arc::from("local");
        Self {
            cache_scope: name.clone(),
            name,
            max_desktops: limits.max_envs,
            max_checkpoints: limits.max_checkpoints,
            max_checkpoint_bytes: limits.max_checkpoint_bytes,
            max_pixels: limits.max_total_pixels,
            max_screencasts: limits.max_screencasts,
            // The one principal queues as far as the server does.
            max_threads: limits.max_queued_ops,
            max_recording_mb: limits.max_recording_mb,
            recording: disk_share(limits.max_recording_mb),
            unlock: Arc::default(),
            ask: Arc::default(),
            max_artifact_bytes: limits.max_artifact_mb.saturating_mul(1 << 20),
        }
    }
}

/// The account of a recording share of `mb` MiB.
fn disk_share(mb: u64) -> Arc<DiskShare> {
    Arc::new(DiskShare::new(mb.saturating_mul(1 << 20)))
}

/// Checks `authorization: Bearer <token>` on every request when tokens are configured,
/// and attaches the caller's [`Principal`] to the request.
#[derive(Clone, Debug)]
pub(crate) struct Auth {
    /// (token, principal) pairs; empty: no authentication, everyone is `local`.
    tokens: Arc<[(Arc<[u8]>, Principal)]>,
    /// The token file's `@metrics` token: when set, the only token `/metrics` takes.
    metrics: Option<Arc<[u8]>>,
    local: Principal,
}

impl Auth {
    /// An interceptor for `principals` (none: every caller is `local` with the server's
    /// limits), with default quotas derived from the server limits; `unlock` is what a
    /// principal may unlock and `ask` what it may ask a controller for, unless its own
    /// line says.
    pub(crate) fn new(
        principals: &[PrincipalSpec],
        limits: &Limits,
        step_threads: usize,
        unlock: &UnlockPolicy,
        ask: &UnlockPolicy,
    ) -> Self {
        let server_unlock = Arc::new(unlock.clone());
        let server_ask = Arc::new(ask.clone());
        let threads = u32::try_from(step_threads).unwrap_or(u32::MAX);
        let metrics = principals
            .iter()
            .find(|p| p.metrics_only)
            .map(|p| Arc::from(p.token.as_bytes()));
        let principals: Vec<&PrincipalSpec> =
            principals.iter().filter(|p| !p.metrics_only).collect();
        let n = u32::try_from(principals.len()).unwrap_or(u32::MAX).max(1);
        let tokens = principals
            .iter()
            .map(|p| {
                let name: Arc<str> = Arc::from(p.name.as_str());
                // A group name and a principal name never meet: `=` is in neither.
                let cache_scope = p
                    .share
                    .as_deref()
                    .map_or_else(|| name.clone(), |g| Arc::from(format!("={g}")));
                // Checked when the token file was read; a bad entry refuses all.
                let unlock = p.unlock.as_ref().map_or_else(
                    || server_unlock.clone(),
                    |u| Arc::new(UnlockPolicy::parse(u).unwrap_or_default()),
                );
                let ask = p.ask.as_ref().map_or_else(
                    || server_ask.clone(),
                    |u| Arc::new(UnlockPolicy::parse(u).unwrap_or_default()),
                );
                let recording_mb = p
                    .recording_mb
                    .unwrap_or(limits.max_recording_mb / u64::from(n));
                (
                    Arc::from(p.token.as_bytes()),
                    Principal {
                        name,
                        max_desktops: p.desktops.unwrap_or((limits.max_envs / n).max(1)),
                        max_checkpoints: p
                            .checkpoints
                            .unwrap_or((limits.max_checkpoints / n).max(1)),
                        max_checkpoint_bytes: limits.max_checkpoint_bytes / u64::from(n),
                        max_pixels: p.pixels.unwrap_or(limits.max_total_pixels / u64::from(n)),
                        max_screencasts: p
                            .screencasts
                            .unwrap_or((limits.max_screencasts / n).max(1)),
                        max_threads: p.threads.unwrap_or((threads / n).max(1)),
                        max_recording_mb: recording_mb,
                        recording: disk_share(recording_mb),
                        max_artifact_bytes: p
                            .artifact_mb
                            .unwrap_or(limits.max_artifact_mb / u64::from(n))
                            .saturating_mul(1 << 20),
                        cache_scope,
                        unlock,
                        ask,
                    },
                )
            })
            .collect();
        Self {
            tokens,
            metrics,
            local: Principal {
                unlock: server_unlock,
                ask: server_ask,
                ..Principal::local(limits)
            },
        }
    }

    /// Whether `token` may read `/metrics` (the server-wide figures the operator
    /// publishes): the `@metrics` token when the file has one, else any principal's.
    /// Always true on a server without tokens (which serves metrics on loopback only).
    pub(crate) fn may_scrape(&self, token: Option<&str>) -> bool {
        if self.tokens.is_empty() && self.metrics.is_none() {
            return true;
        }
        let Some(got) = token else { return false };
        match &self.metrics {
            Some(m) => constant_time_eq(got.as_bytes(), m),
            None => self.principal_for(Some(got)).is_ok(),
        }
    }

    /// True when callers must present a token.
    pub(crate) fn required(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The interceptor body: pass (with the principal attached) or UNAUTHENTICATED.
    /// Never logs a token.
    pub(crate) fn check(&self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let got = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let who = self.principal_for(got)?;
        req.extensions_mut().insert(who);
        Ok(req)
    }

    /// Whose `token` is (any caller is `local` on a server without tokens). Used by the
    /// interceptor and by the console (bearer header or cookie). Never logs a token.
    pub(crate) fn principal_for(&self, token: Option<&str>) -> Result<Principal, AuthError> {
        if self.tokens.is_empty() {
            return Ok(self.local.clone());
        }
        let got = token.ok_or(AuthError::MissingToken)?;
        // Every token is compared (no early exit), each in constant time.
        let mut found = None;
        for (token, who) in self.tokens.iter() {
            if constant_time_eq(got.as_bytes(), token) {
                found = Some(who.clone());
            }
        }
        found.ok_or(AuthError::WrongToken)
    }
}

/// Why a request has no principal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum AuthError {
    /// No bearer token on a server that requires one.
    #[error("missing `authorization: Bearer <token>` metadata")]
    MissingToken,
    /// A token that no principal holds (never echoed back).
    #[error("wrong bearer token")]
    WrongToken,
    /// A request that bypassed the interceptor: a bug.
    #[error("request without a principal")]
    NoPrincipal,
}

/// The caller of a request (the interceptor always attaches one).
pub(crate) fn principal<T>(req: &Request<T>) -> Result<Principal, AuthError> {
    req.extensions()
        .get::<Principal>()
        .cloned()
        .ok_or(AuthError::NoPrincipal)
}

/// Compares without an early exit, so timing does not reveal how much of a guess matched.
/// (The length is not secret: tokens have a fixed length.)
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_token_file;

    fn req(header: Option<&str>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(h) = header {
            r.metadata_mut().insert("authorization", h.parse().unwrap());
        }
        r
    }

    fn single(token: &str) -> Auth {
        Auth::new(
            &parse_token_file(token).unwrap(),
            &Limits::default(),
            64,
            &UnlockPolicy::default(),
            &UnlockPolicy::default(),
        )
    }

    #[test]
    fn token_is_checked() {
        let a = single("s3cret");
        let ok = a.check(req(Some("Bearer s3cret"))).unwrap();
        assert_eq!(&*principal(&ok).unwrap().name, "default");
        assert_eq!(
            a.check(req(Some("Bearer s3creT"))).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            a.check(req(Some("s3cret"))).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            a.check(req(None)).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        let open = Auth::new(
            &[],
            &Limits::default(),
            64,
            &UnlockPolicy::default(),
            &UnlockPolicy::default(),
        );
        assert_eq!(
            &*principal(&open.check(req(None)).unwrap()).unwrap().name,
            "local"
        );
    }

    #[test]
    fn principals_and_quotas_parse() {
        let p =
            parse_token_file("# team\nalice: aaa desktops=3\n\nbob: bbb checkpoints=7\n").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].desktops, p[0].checkpoints), (Some(3), None));
        let a = Auth::new(
            &p,
            &Limits::default(),
            64,
            &UnlockPolicy::default(),
            &UnlockPolicy::default(),
        );
        let bob = principal(&a.check(req(Some("Bearer bbb"))).unwrap()).unwrap();
        // Left out: the server's limit split between the principals.
        assert_eq!(
            (&*bob.name, bob.max_desktops, bob.max_checkpoints),
            ("bob", 32, 7)
        );
        let unknown = parse_token_file("alice: aaa quota=3").unwrap_err();
        assert!(unknown.contains("recording_mb"), "{unknown}");
        for bad in [
            "alice: aaa\nalice: bbb",
            "alice: aaa\nbob: aaa",
            "alice aaa bbb",
            "alice: aaa quota=3",
            "al ice: aaa",
            ": aaa",
            "",
        ] {
            let e = parse_token_file(bad).unwrap_err();
            assert!(
                !e.contains("aaa") && !e.contains("bbb"),
                "a token leaked: {e}"
            );
        }
    }

    #[test]
    fn ask_words_replace_the_servers_ask_list_for_their_principal() {
        let p = parse_token_file("alice: aaa ask=files ask=net.egress:.test\nbob: bbb\n").unwrap();
        let server_ask = UnlockPolicy::parse(&["exec".into()]).unwrap();
        let a = Auth::new(
            &p,
            &Limits::default(),
            64,
            &UnlockPolicy::default(),
            &server_ask,
        );
        let who =
            |t: &str| principal(&a.check(req(Some(&format!("Bearer {t}")))).unwrap()).unwrap();
        assert_eq!(who("aaa").ask.describe(), ["files", "net.egress:.test"]);
        assert_eq!(who("bbb").ask.describe(), ["exec"]);
        assert!(
            who("aaa").unlock.describe().is_empty(),
            "asking is not unlocking"
        );
        let e = parse_token_file("alice: aaa ask=sudo").unwrap_err();
        assert!(
            e.contains("line 1: ask:") && e.contains("unknown power"),
            "{e}"
        );
    }

    #[test]
    fn shares_groups_and_the_metrics_token_parse() {
        let p = parse_token_file(
            "alice: aaa pixels=1000 screencasts=2 recording_mb=5 share=lab\nbob: bbb share=lab\n\
             carol: ccc\n@metrics: mmm\n",
        )
        .unwrap();
        let a = Auth::new(
            &p,
            &Limits::default(),
            64,
            &UnlockPolicy::default(),
            &UnlockPolicy::default(),
        );
        let who =
            |t: &str| principal(&a.check(req(Some(&format!("Bearer {t}")))).unwrap()).unwrap();
        let (alice, bob, carol) = (who("aaa"), who("bbb"), who("ccc"));
        assert_eq!((alice.max_pixels, alice.max_screencasts), (1000, 2));
        assert_eq!(
            (alice.max_recording_mb, alice.recording.cap_bytes()),
            (5, 5 << 20)
        );
        // One account per principal, whichever request carries it.
        assert!(Arc::ptr_eq(&alice.recording, &who("aaa").recording));
        assert_eq!(alice.cache_scope, bob.cache_scope);
        assert_eq!(&*carol.cache_scope, "carol");
        // Left out: the server's limit split between the three principals.
        let l = Limits::default();
        assert_eq!(carol.max_pixels, l.max_total_pixels / 3);
        assert_eq!(carol.max_recording_mb, l.max_recording_mb / 3);
        assert!(a.check(req(Some("Bearer mmm"))).is_err());
        assert!(a.may_scrape(Some("mmm")) && !a.may_scrape(Some("aaa")) && !a.may_scrape(None));
        for bad in [
            "@metrics: mmm",
            "alice: aaa share=",
            "alice: aaa share=a/b",
            "@metrics: m desktops=1\nalice: aaa",
        ] {
            assert!(parse_token_file(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn constant_time_eq_is_eq() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
