//! The calls the RPC layer, the axstream driver and the console make: a step or a
//! reset checked ([`crate::checked`]) and started on the step pool, and grant checks. Below the service
//! (`service/`) and the driver (`axstream/`), so neither reaches into the other.

use std::sync::Arc;

use deskgym_proto::v1 as pb;

use crate::auth::Principal;
use crate::capability::Capability;
use crate::checked::{self, Field, On};
use crate::convert;
use crate::env::{Call, Env};
use crate::pool::{EnvJob, PoolError, PoolManager};
use crate::ring::Rings;
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

    /// What checking a request against `env` needs (the batch's `shared` frames).
    fn on<'a>(&'a self, env: &'a Env, shared: &'a [u128]) -> On<'a> {
        On {
            env,
            limits: self.mgr.limits(),
            rings: &self.rings,
            shared,
        }
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
        at: &Field,
        shared: &[u128],
        who: &Principal,
    ) -> Result<EnvJob<pb::StepResult>, PoolError> {
        let env = self.mgr.env(&item.env_id, who)?;
        self.start_step_on(env, item, at, shared, Actor::Agent)
    }

    /// A person's step at the console: only on an env `who` holds (renewing the hold),
    /// through the same validation and step path as an agent's, recorded as human.
    pub(crate) fn start_human_step(
        &self,
        item: pb::StepRequest,
        who: &Principal,
    ) -> Result<EnvJob<pb::StepResult>, PoolError> {
        let env = self.held_by(&item.env_id, who)?;
        self.start_step_on(env, item, &Field::root(), &[], Actor::Human)
    }

    /// `who`'s env `env_id` if `who` holds it at the console (the hold renewed).
    fn held_by(&self, env_id: &str, who: &Principal) -> Result<Arc<Env>, PoolError> {
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
        env: Arc<Env>,
        item: pb::StepRequest,
        at: &Field,
        shared: &[u128],
        actor: Actor,
    ) -> Result<EnvJob<pb::StepResult>, PoolError> {
        let mut cmd = checked::step(&item, at, &self.on(&env, shared))?;
        cmd.action.actor = actor;
        self.mgr
            .on_env(&env, Call::Step, self.mgr.op_timeout(), move |e, cache| {
                let stepped = e.step(cache, &cmd.action, &cmd.opts, cmd.autoreset)?;
                let mut r = convert::step_result(stepped);
                if let Some(ring) = &cmd.ring {
                    crate::ring::deliver_step(ring, &mut r);
                }
                Ok(r)
            })
    }

    pub(crate) fn start_reset(
        &self,
        r: pb::ResetRequest,
        at: &Field,
        shared: &[u128],
        who: &Principal,
    ) -> Result<EnvJob<pb::ResetResponse>, PoolError> {
        let env = self.mgr.env(&r.env_id, who)?;
        self.start_reset_on(env, r, at, shared)
    }

    /// A person's reset at the console (a demonstration's next episode), on an env
    /// `who` holds.
    pub(crate) fn start_human_reset(
        &self,
        r: pb::ResetRequest,
        who: &Principal,
    ) -> Result<EnvJob<pb::ResetResponse>, PoolError> {
        let env = self.held_by(&r.env_id, who)?;
        self.start_reset_on(env, r, &Field::root(), &[])
    }

    fn start_reset_on(
        &self,
        env: Arc<Env>,
        r: pb::ResetRequest,
        at: &Field,
        shared: &[u128],
    ) -> Result<EnvJob<pb::ResetResponse>, PoolError> {
        let cmd = checked::reset(&r, at, &self.on(&env, shared))?;
        self.mgr
            .on_env(&env, Call::Reset, self.mgr.op_timeout(), move |e, cache| {
                let mut out = convert::reset_response(e.reset(cache, r.seed, &cmd.opts)?);
                if let (Some(ring), Some(o)) = (&cmd.ring, out.observation.as_mut()) {
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
        capability: Capability,
    ) -> Result<Arc<Env>, PoolError> {
        let env = self.mgr.env(env_id, who)?;
        if let Err(e) = checked::grant(&env, capability) {
            // A refused power is a permission decision: the env's log keeps it.
            env.event("permission", || {
                serde_json::json!({"capability": capability.as_str(), "decision": "denied",
                    "by": "pool grant"})
            });
            return Err(e);
        }
        Ok(env)
    }
}
