//! The calls the RPC layer and the axstream driver both make: a step or a reset
//! validated and started on the step pool, and the capability checks. Below the service
//! (`service/`) and the driver (`axstream/`), so neither reaches into the other.

use std::sync::Arc;

use deskgym_proto::v1 as pb;

use crate::a11y::TreeOpts;
use crate::auth::Principal;
use crate::convert;
use crate::env::{Call, ObsOptions};
use crate::frame_cache::parse_hashes;
use crate::pool::{EnvJob, PoolError, PoolManager};
use crate::ring::{Ring, Rings};
use crate::spec::Invalid;
use deskgym_datasets::Actor;

/// Steps, resets and grant checks over a [`PoolManager`].
#[derive(Debug, Clone)]
pub(crate) struct Calls {
    mgr: Arc<PoolManager>,
    /// Frame rings requests may name (`frame_ring`).
    rings: Arc<Rings>,
}

impl Calls {
    /// Calls on `mgr`'s envs, with no frame rings.
    pub(crate) fn new(mgr: Arc<PoolManager>) -> Self {
        Self::with_rings(mgr, Arc::new(Rings::new(false)))
    }

    /// Calls on `mgr`'s envs whose frames may go into `rings`.
    pub(crate) fn with_rings(mgr: Arc<PoolManager>, rings: Arc<Rings>) -> Self {
        Self { mgr, rings }
    }

    /// The rings requests may name.
    pub(crate) fn rings(&self) -> &Arc<Rings> {
        &self.rings
    }

    /// The ring a request names in `field` (0: none), which must be the env owner's.
    pub(crate) fn ring(
        &self,
        id: u64,
        env: &crate::env::Env,
        field: &str,
    ) -> Result<Option<Arc<Ring>>, Invalid> {
        if id == 0 {
            return Ok(None);
        }
        self.rings.get(id, &env.pool.owner, field).map(Some)
    }

    /// What an observation should carry: the encoding, the frames the caller holds
    /// (`own` hashes under `field`, `shared` ones), the tree asked for.
    pub(crate) fn opts(
        &self,
        field: &str,
        encoding: i32,
        own: &[String],
        shared: &[u128],
        tree: Option<&pb::TreeRequest>,
    ) -> Result<ObsOptions, Invalid> {
        let mut known = parse_hashes(field, own, self.mgr.limits().max_if_none_match)?;
        known.extend_from_slice(shared);
        // `field` names the request's if_none_match; its tree field is beside it.
        let tree_field = format!("{}tree", field.trim_end_matches("if_none_match"));
        let tree = TreeOpts::parse(tree, &tree_field)?;
        Ok(ObsOptions {
            encoding,
            known,
            tree,
            ..Default::default()
        })
    }

    /// The manager the service runs on.
    pub(crate) fn manager(&self) -> &Arc<PoolManager> {
        &self.mgr
    }

    /// One step: validate, run on the step pool. Returns a receiver so a batch can start
    /// every item before awaiting any.
    pub(crate) fn start_step(
        &self,
        item: pb::StepRequest,
        field: &str,
        shared: &[u128],
        who: &Principal,
    ) -> Result<EnvJob<pb::StepResult>, PoolError> {
        let env = self.mgr.env(&item.env_id, who)?;
        self.start_step_on(env, item, field, shared, Actor::Agent)
    }

    /// A person's step at the console: only on an env `who` holds (renewing the hold),
    /// through the same validation and step path as an agent's, recorded as human.
    pub(crate) fn start_human_step(
        &self,
        item: pb::StepRequest,
        who: &Principal,
    ) -> Result<EnvJob<pb::StepResult>, PoolError> {
        let env = self.held_by(&item.env_id, who)?;
        self.start_step_on(env, item, "", &[], Actor::Human)
    }

    /// `who`'s env `env_id` if `who` holds it at the console (the hold renewed).
    fn held_by(&self, env_id: &str, who: &Principal) -> Result<Arc<crate::env::Env>, PoolError> {
        let env = self.mgr.env_of(env_id, who)?;
        if env.control.holder().as_deref() != Some(&*who.name) {
            return Err(PoolError::NotHeld {
                env: env.id.clone(),
            });
        }
        let _ = env.control.take(&who.name);
        Ok(env)
    }

    fn start_step_on(
        &self,
        env: Arc<crate::env::Env>,
        item: pb::StepRequest,
        field: &str,
        shared: &[u128],
        actor: Actor,
    ) -> Result<EnvJob<pb::StepResult>, PoolError> {
        if let Some(capability) = convert::capability_of(item.action.as_ref()) {
            check_grant(&env, capability)?;
        }
        let profile = &env.pool.spec.profile;
        let widened = program_launch(&env, item.action.as_ref())?;
        let (apps, app_args) = match &widened {
            Some((apps, args)) => (apps, args),
            None => (&profile.apps, &profile.app_args),
        };
        let mut action = convert::action(
            item.action.as_ref(),
            env.pool.spec.screen,
            self.mgr.limits(),
            apps,
            app_args,
        )?;
        action.actor = actor;
        let mut opts = self.opts(
            &format!("{field}if_none_match"),
            item.encoding,
            &item.if_none_match,
            shared,
            item.tree.as_ref(),
        )?;
        if let Some(o) = &item.observe {
            opts.shape = convert::shape(
                &format!("{field}observe."),
                o.scope,
                o.window,
                o.max_long_edge,
                o.jpeg_quality,
            )?;
        }
        let ring = self.ring(item.frame_ring, &env, &format!("{field}frame_ring"))?;
        self.mgr
            .on_env(&env, Call::Step, self.mgr.op_timeout(), move |e, cache| {
                let mut r = convert::step_result(e.step(cache, &action, &opts, item.autoreset)?);
                if let Some(ring) = &ring {
                    crate::ring::deliver_step(ring, &mut r);
                }
                Ok(r)
            })
    }

    pub(crate) fn start_reset(
        &self,
        r: pb::ResetRequest,
        field: &str,
        shared: &[u128],
        who: &Principal,
    ) -> Result<EnvJob<pb::ResetResponse>, PoolError> {
        let env = self.mgr.env(&r.env_id, who)?;
        self.start_reset_on(env, r, field, shared)
    }

    /// A person's reset at the console (a demonstration's next episode), on an env
    /// `who` holds.
    pub(crate) fn start_human_reset(
        &self,
        r: pb::ResetRequest,
        who: &Principal,
    ) -> Result<EnvJob<pb::ResetResponse>, PoolError> {
        let env = self.held_by(&r.env_id, who)?;
        self.start_reset_on(env, r, "", &[])
    }

    fn start_reset_on(
        &self,
        env: Arc<crate::env::Env>,
        r: pb::ResetRequest,
        field: &str,
        shared: &[u128],
    ) -> Result<EnvJob<pb::ResetResponse>, PoolError> {
        let opts = self.opts(
            &format!("{field}if_none_match"),
            r.encoding,
            &r.if_none_match,
            shared,
            r.tree.as_ref(),
        )?;
        let ring = self.ring(r.frame_ring, &env, &format!("{field}frame_ring"))?;
        self.mgr
            .on_env(&env, Call::Reset, self.mgr.op_timeout(), move |e, cache| {
                let mut out = convert::reset_response(e.reset(cache, r.seed, &opts)?);
                if let (Some(ring), Some(o)) = (&ring, out.observation.as_mut()) {
                    ring.deliver(o);
                }
                Ok(out)
            })
    }
    /// One of `who`'s envs, whose pool was granted `capability`.
    pub(crate) fn granted(
        &self,
        env_id: &str,
        who: &Principal,
        capability: &'static str,
    ) -> Result<Arc<crate::env::Env>, PoolError> {
        let env = self.mgr.env(env_id, who)?;
        check_grant(&env, capability)?;
        Ok(env)
    }
}

/// PERMISSION_DENIED unless the env's pool was granted `capability`.
/// The catalog a `launch_app` of a program outside the profile's catalog runs against:
/// ACI's PATH name or absolute path, arguments verbatim. Starting any program is what
/// `exec` grants, so only a pool holding it gets this; `None` for any other action.
type Catalog = (
    std::collections::BTreeMap<String, Vec<String>>,
    std::collections::BTreeMap<String, crate::profiles::AppArgs>,
);

fn program_launch(
    env: &crate::env::Env,
    action: Option<&pb::Action>,
) -> Result<Option<Catalog>, PoolError> {
    let Some(pb::action::Verb::LaunchApp(l)) = action.and_then(|a| a.verb.as_ref()) else {
        return Ok(None);
    };
    let profile = &env.pool.spec.profile;
    if profile.apps.contains_key(&l.app) || check_grant(env, "exec").is_err() {
        // A catalog app, or no grant: the catalog's own rules (and its error) apply.
        return Ok(None);
    }
    let p = &l.app;
    let bare = !p.is_empty() && !p.contains('/') && !p.starts_with('-');
    if !(bare || p.starts_with('/')) || p.contains('\0') || p.len() > 4096 {
        return Err(Invalid::new(
            "action.launch_app.app",
            format!(
                "{} is neither an app of the profile, a program name on PATH nor an absolute path",
                crate::spec::quote(p)
            ),
        )
        .into());
    }
    let mut apps = profile.apps.clone();
    let mut args = profile.app_args.clone();
    apps.insert(p.clone(), vec![p.clone()]);
    args.insert(p.clone(), crate::profiles::AppArgs::Verbatim);
    Ok(Some((apps, args)))
}

fn check_grant(env: &crate::env::Env, capability: &'static str) -> Result<(), PoolError> {
    if env.pool.spec.capabilities.iter().any(|c| c == capability) {
        Ok(())
    } else {
        Err(PoolError::NotGranted {
            env: env.id.clone(),
            capability,
        })
    }
}
