//! Unlock, Relock and AnswerCapability: boundary powers asked for per env, decided by
//! the operator's policy for the caller or, where the policy says to ask, by a
//! controller answering the `capability_required` event while the call waits; each
//! request and decision recorded.

use super::*;
use crate::env::Env;
use crate::unlock::{self, Answer, Asker, Grant, NewAsk, Power, UnlockError};

/// How long the agent may take to open the egress proxy's listener.
const LISTEN_BOUND: Duration = Duration::from_secs(10);

/// A call's wait for an answer. Dropped before the answer (its caller went away), it
/// ends the request if no other call waits on it, so a controller's later answer is
/// told it was withdrawn and the env's bound on waiting requests is not used up.
struct Waiting<'a> {
    env: &'a Env,
    token: String,
    rx: Option<tokio::sync::watch::Receiver<Option<Answer>>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // Ours first: the request counts as unwatched once every receiver is gone.
        drop(self.rx.take());
        let answer = Answer::Ended("withdrawn");
        if let Some(ask) = self.env.asks.end(&self.token, &answer, true) {
            self.env.record_decision(&ask, &answer);
            ask.settle(answer);
        }
    }
}

impl DeskgymService {
    pub(super) async fn do_unlock(
        &self,
        req: Request<pb::UnlockRequest>,
    ) -> Result<Response<pb::UnlockResponse>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self.mgr.env(&r.env_id, &who)?;
        let power = Power::parse(&r.capability).ok_or_else(|| {
            let why = if Capability::parse(&r.capability).is_some() {
                "is granted per pool only (CreatePool.capabilities)".to_string()
            } else {
                "is no power".to_string()
            };
            Invalid::new(
                "capability",
                format!(
                    "{} {why}; Unlock takes: {}",
                    quote(&r.capability),
                    Power::NAMES.join(", ")
                ),
            )
        })?;
        let mut scope = unlock::scope(power, &r.scope)?;
        check_reason(&r.reason)?;
        // The request and its decision, one event: what was asked, by whom, why, and
        // who decided (the policy, or a controller answering request `token`).
        let record = |scope: &[unlock::Host],
                      decision: &str,
                      by: &str,
                      token: &str,
                      grant: &str,
                      message: &str| {
            let scope_text: Vec<String> = scope.iter().map(ToString::to_string).collect();
            env.event("unlock", || {
                serde_json::json!({
                    "capability": power.as_str(), "scope": scope_text,
                    "reason": quote(&r.reason), "principal": &*who.name,
                    "decision": decision, "by": by, "token": token, "grant_id": grant,
                    "message": message,
                })
            });
        };
        let asked = match who.unlock.allows(power, &scope) {
            Ok(()) => false,
            Err(_) if who.ask.allows(power, &scope).is_ok() => true,
            Err(wanted) => {
                let e = UnlockError::Denied {
                    principal: who.name.to_string(),
                    env: env.id.clone(),
                    wanted,
                };
                record(&scope, "denied", "policy", "", "", &e.to_string());
                return Err(PoolError::from(e).into());
            }
        };
        // A power the env cannot hold is refused before anyone is asked for it.
        self.holdable(&env, power)?;
        let (mut by, mut token) = ("policy", String::new());
        if asked {
            let new = NewAsk {
                power,
                scope: scope.clone(),
                reason: r.reason.clone(),
                action: "Unlock",
                asker: Asker::Unlock,
            };
            match self.ask(&env, &who, &new).await {
                Ok((t, granted)) => (scope, by, token) = (granted, "controller", t),
                Err((t, e)) => {
                    record(&scope, "denied", "controller", &t, "", &e.to_string());
                    return Err(e.into());
                }
            }
            // Another grant may have come while this one waited.
            self.holdable(&env, power)?;
        }
        let proxy = if power == Power::Egress {
            Some(self.start_proxy(&env, &scope).await?)
        } else {
            None
        };
        let id = unlock::grant_id();
        record(&scope, "granted", by, &token, &id, "");
        let port = proxy.as_ref().map(|p| p.0);
        env.unlocks.add(Grant {
            id: id.clone(),
            power,
            proxy,
        });
        Ok(Response::new(pb::UnlockResponse {
            grant_id: id,
            capability: power.as_str().to_string(),
            scope: scope.iter().map(ToString::to_string).collect(),
            proxy: port.map_or_else(String::new, |p| format!("http://127.0.0.1:{p}")),
        }))
    }

    /// FAILED_PRECONDITION when `env` cannot hold `power` now: no sandbox; for
    /// `net.egress`, a pool that reaches every host already, or an egress grant held.
    fn holdable(&self, env: &Env, power: Power) -> Result<(), PoolError> {
        let unsupported = |why: String| {
            PoolError::from(UnlockError::Unsupported {
                env: env.id.clone(),
                power: power.as_str(),
                why,
            })
        };
        let spec = &env.pool.spec;
        if !spec.profile.sandboxed() {
            return Err(unsupported(format!(
                "its profile {} runs the bundled task app without a sandbox (ask for profile \
                 \"desktop\")",
                spec.profile.name
            )));
        }
        if power != Power::Egress {
            return Ok(());
        }
        if spec.capabilities.contains(&Capability::Network) {
            return Err(unsupported(
                "its pool holds the `network` capability: it reaches every host already".into(),
            ));
        }
        if env.unlocks.proxy_port().is_some() {
            return Err(unsupported(
                "it holds a net.egress grant already: Relock it first, then Unlock the \
                 whole scope"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Starts `env`'s egress proxy for `scope`: its port inside the env, and its task.
    async fn start_proxy(
        &self,
        env: &Arc<Env>,
        scope: &[unlock::Host],
    ) -> Result<(u16, tokio::task::AbortHandle), PoolError> {
        let unsupported = |why: String| UnlockError::Unsupported {
            env: env.id.clone(),
            power: Power::Egress.as_str(),
            why,
        };
        let at = env.clone();
        let listener = tokio::task::spawn_blocking(move || {
            let peer = at.agent_socket()?;
            // Never "the desktop died": the agent is the tenant's, and its failing to
            // open a port refuses this grant only.
            peer.listen(LISTEN_BOUND).map_err(|e| match e {
                deskgym_worker::DesktopError::Limit(m) => crate::env::EnvError::Limit(m),
                e => crate::env::EnvError::Refused(format!(
                    "the egress proxy could not open a port in the desktop: {e}"
                )),
            })
        })
        .await
        .map_err(|e| PoolError::Internal(format!("egress listener: {e}")))?
        .map_err(|e| match e {
            crate::env::EnvError::Refused(m) => unsupported(m).into(),
            e => PoolError::from(e),
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| PoolError::Internal(e.to_string()))?
            .port();
        // Weak: the env holds the grant that holds this proxy.
        let weak = Arc::downgrade(env);
        let task = crate::egress::serve(
            listener,
            scope.to_vec(),
            self.mgr.policy().egress_hosts.clone(),
            move |d| {
                if let Some(env) = weak.upgrade() {
                    env.event("egress", || {
                        serde_json::json!({
                            "host": d.host, "port": d.port,
                            "allowed": d.refused.is_none(), "refused": d.refused,
                        })
                    });
                }
            },
        )
        .map_err(|e| PoolError::Internal(format!("egress proxy: {e}")))?;
        Ok((port, task))
    }

    /// One of `who`'s envs that may use `capability` now: by its pool's grant or an
    /// unlock, or, when the caller's ask policy lists the power, by a controller's
    /// answer to the request this call (`action`) opens (or joins) and waits for. An
    /// allowed request leaves a grant on the env, as an Unlock would.
    pub(super) async fn granted(
        &self,
        env_id: &str,
        who: &Principal,
        capability: Capability,
        action: &'static str,
    ) -> Result<Arc<Env>, PoolError> {
        let env = self.mgr.env(env_id, who)?;
        let power = Power::Cap(capability);
        let askable = checked::grant(&env, capability).is_err()
            && Power::parse(capability.as_str()) == Some(power)
            && env.pool.spec.profile.sandboxed()
            && who.ask.allows(power, &[]).is_ok();
        if !askable {
            return self.calls.granted(env_id, who, capability);
        }
        let new = NewAsk {
            power,
            scope: Vec::new(),
            reason: format!("{action} needs {capability}"),
            action,
            asker: Asker::Action,
        };
        self.ask(&env, who, &new).await.map_err(|(_, e)| e)?;
        Ok(env)
    }

    /// Opens (or joins) a capability request on `env`, logs it (`capability_required`)
    /// and waits off the step pool until a controller answers, the request times out,
    /// or the env resets or closes. Returns the token and the scope granted, or the
    /// token and why not.
    async fn ask(
        &self,
        env: &Env,
        who: &Principal,
        new: &NewAsk,
    ) -> Result<(String, Vec<unlock::Host>), (String, PoolError)> {
        let timeout = self.mgr.policy().ask_timeout;
        let power = new.power;
        let waiter = env.asks.open(new, timeout).map_err(|max| {
            let e = UnlockError::TooMany {
                env: env.id.clone(),
                max,
            };
            (String::new(), e.into())
        })?;
        let token = waiter.token.clone();
        if waiter.opened {
            env.record_ask(&token, new, &who.name, timeout);
        }
        let answer = self.wait_answer(env, waiter).await;
        let (env_id, power) = (env.id.clone(), power.as_str());
        let e = match answer {
            Answer::Allowed { scope, .. } => return Ok((token, scope)),
            Answer::Denied { by, reason } => UnlockError::Refused {
                env: env_id,
                power,
                token: token.clone(),
                by: format!("principal {by}"),
                reason: if reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", quote(&reason))
                },
            },
            Answer::TimedOut => UnlockError::TimedOut {
                env: env_id,
                power,
                token: token.clone(),
                secs: format!("{:.1}", timeout.as_secs_f64()),
            },
            Answer::Ended("reset") => UnlockError::Reset {
                env: env_id,
                power,
                token: token.clone(),
            },
            Answer::Ended("shutdown") => UnlockError::ShuttingDown {
                token: token.clone(),
            },
            Answer::Ended(_) => UnlockError::Closed {
                env: env_id,
                power,
                token: token.clone(),
            },
        };
        Err((token, e.into()))
    }

    /// Waits for request `waiter`'s answer; at its deadline, ends it as timed out
    /// (recorded once, by whichever waiting call gets there first).
    async fn wait_answer(&self, env: &Env, waiter: unlock::Waiter) -> Answer {
        let mut waiting = Waiting {
            env,
            token: waiter.token,
            rx: Some(waiter.rx),
        };
        let mut deadline = Some(waiter.deadline);
        let mut closing = self.closing.clone();
        loop {
            let Some(rx) = waiting.rx.as_mut() else {
                return Answer::Ended("closed");
            };
            if let Some(a) = rx.borrow_and_update().clone() {
                return a;
            }
            let expired = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = rx.changed() => {
                    // The request was dropped unanswered: only its env's end does that.
                    if changed.is_err() {
                        return Answer::Ended("closed");
                    }
                }
                () = expired => {
                    deadline = None;
                    let answer = Answer::TimedOut;
                    if let Some(ask) = env.asks.end(&waiting.token, &answer, false) {
                        env.record_decision(&ask, &answer);
                        ask.settle(answer);
                    }
                    // Next turn reads the timeout, or an answer that came just before.
                }
                _ = closing.wait_for(|c| *c) => return Answer::Ended("shutdown"),
            }
        }
    }

    pub(super) async fn do_answer_capability(
        &self,
        req: Request<pb::AnswerCapabilityRequest>,
    ) -> Result<Response<pb::AnswerCapabilityResponse>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        // The env's principal answers, whoever drives the env now (a person at the
        // console too).
        let env = self.mgr.env_of(&r.env_id, &who)?;
        if !unlock::is_ask_token(&r.token) {
            return Err(Invalid::new(
                "token",
                format!(
                    "{} is not a capability request's token (a `capability_required` \
                     event's `token`, like \"c12\")",
                    quote(&r.token)
                ),
            )
            .into());
        }
        check_reason(&r.reason)?;
        if !r.allow && !r.scope.is_empty() {
            return Err(
                Invalid::new("scope", "a refusal grants nothing: leave scope empty").into(),
            );
        }
        let by = who.name.to_string();
        let answered = env.asks.answer(&r.token, |ask| {
            if !r.allow {
                return Ok(Answer::Denied {
                    by: by.clone(),
                    reason: r.reason.clone(),
                });
            }
            let scope = if r.scope.is_empty() {
                ask.scope.clone()
            } else {
                let narrow = unlock::scope(ask.power, &r.scope)?;
                if !unlock::within(&ask.scope, &narrow) {
                    return Err(Invalid::new(
                        "scope",
                        format!(
                            "reaches beyond the request's scope [{}]: an answer may narrow \
                             a scope, never widen it",
                            ask.scope_text().join(", ")
                        ),
                    ));
                }
                narrow
            };
            Ok(Answer::Allowed {
                by: by.clone(),
                scope,
                grant: None,
            })
        });
        let (ask, mut answer) = match answered {
            Ok(Ok(pair)) => pair,
            Ok(Err(invalid)) => return Err(invalid.into()),
            Err(None) => {
                return Err(PoolError::from(UnlockError::UnknownToken {
                    env: env.id.clone(),
                    token: r.token,
                })
                .into());
            }
            Err(Some(outcome)) => {
                return Err(PoolError::from(UnlockError::Decided {
                    env: env.id.clone(),
                    token: r.token,
                    outcome,
                })
                .into());
            }
        };
        // From here on nothing awaits: the request is out of the env's book, and a
        // cancelled call must not leave its callers unanswered.
        if let (Answer::Allowed { grant, .. }, Asker::Action) = (&mut answer, ask.asker) {
            // A call's request: the grant is made here, once, for every call waiting
            // on it, and recorded as an Unlock's is.
            let id = unlock::grant_id();
            env.event("unlock", || {
                serde_json::json!({
                    "capability": ask.power.as_str(), "scope": [],
                    "reason": quote(&ask.reason), "principal": &*who.name,
                    "decision": "granted", "by": "controller", "token": ask.token,
                    "grant_id": id, "message": "",
                })
            });
            env.unlocks.add(Grant {
                id: id.clone(),
                power: ask.power,
                proxy: None,
            });
            *grant = Some(id);
        }
        env.record_decision(&ask, &answer);
        let reply = match &answer {
            Answer::Allowed { scope, grant, .. } => pb::AnswerCapabilityResponse {
                capability: ask.power.as_str().into(),
                scope: scope.iter().map(ToString::to_string).collect(),
                grant_id: grant.clone().unwrap_or_default(),
            },
            _ => pb::AnswerCapabilityResponse {
                capability: ask.power.as_str().into(),
                ..Default::default()
            },
        };
        ask.settle(answer);
        Ok(Response::new(reply))
    }

    pub(super) async fn do_relock(
        &self,
        req: Request<pb::RelockRequest>,
    ) -> Result<Response<pb::RelockResponse>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self.mgr.env(&r.env_id, &who)?;
        if !unlock::is_grant_id(&r.grant_id) {
            return Err(Invalid::new(
                "grant_id",
                format!(
                    "{} is not a grant id (UnlockResponse.grant_id, like \"u12\")",
                    quote(&r.grant_id)
                ),
            )
            .into());
        }
        let released = match env.unlocks.remove(&r.grant_id) {
            Some(g) => {
                env.record_relock(&g, "relock");
                true
            }
            None => false,
        };
        Ok(Response::new(pb::RelockResponse { released }))
    }
}

/// A `reason` within its bound.
fn check_reason(reason: &str) -> Result<(), Invalid> {
    if reason.len() > unlock::MAX_REASON {
        return Err(Invalid::new(
            "reason",
            format!("{} bytes; at most {}", reason.len(), unlock::MAX_REASON),
        ));
    }
    Ok(())
}
