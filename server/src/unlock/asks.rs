//! Capability requests (ACI's `capability_required`): a call that needs a power the
//! operator says to ask for waits here, per env, for its principal's answer or the
//! timeout; each request has a token, and the answers and endings are remembered so a
//! late answer is told so (decision 193).

use super::*;

/// Most capability requests one env may have waiting at once: each holds a call open,
/// so a caller cannot pile them up without bound.
pub(crate) const MAX_PENDING_ASKS: usize = 16;

/// Ended requests an env remembers, so a late or second answer is told it came too
/// late (FAILED_PRECONDITION) rather than that the token never existed.
const MAX_DECIDED: usize = 256;

/// Numbers capability requests server-wide.
static NEXT_ASK: AtomicU64 = AtomicU64::new(1);

/// True when `token` has the shape of a capability request's token (`c<n>`).
pub(crate) fn is_ask_token(token: &str) -> bool {
    numbered(token, 'c')
}

/// Who waits on a capability request: the grant it leads to differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asker {
    /// An Unlock: its own call makes the grant (and starts an egress proxy) and answers
    /// with it, as for a grant the policy gave.
    Unlock,
    /// A call that needs the power (Exec, PutFile...): the answer makes the grant, so
    /// every call waiting for the same power goes on with it.
    Action,
}

/// How a capability request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A controller allowed it.
    Allowed {
        /// The principal that answered.
        by: String,
        /// The scope granted (net.egress: the request's, or narrower).
        scope: Vec<Host>,
        /// The grant the answer made (an action's request).
        grant: Option<String>,
    },
    /// A controller refused it.
    Denied {
        /// The principal that answered.
        by: String,
        /// Its reason (may be empty).
        reason: String,
    },
    /// Nobody answered in time.
    TimedOut,
    /// It ended unanswered: `reset`, `closed`, `shutdown`, or `withdrawn` (every call
    /// waiting on it went away).
    Ended(&'static str),
}

impl Answer {
    /// The `capability_decision` event's `decision`.
    pub(crate) fn decision(&self) -> &'static str {
        match self {
            Self::Allowed { .. } => "allowed",
            Self::Denied { .. } => "denied",
            Self::TimedOut => "timed_out",
            Self::Ended(why) => why,
        }
    }

    /// How a later answer is told the request ended.
    fn outcome(&self) -> &'static str {
        match self {
            Self::Allowed { .. } => "allowed already",
            Self::Denied { .. } => "refused already",
            Self::TimedOut => "timed out",
            Self::Ended("reset") => "cancelled by a reset",
            Self::Ended("withdrawn") => "withdrawn by its caller",
            Self::Ended(_) => "cancelled",
        }
    }
}

/// A capability request waiting for an answer.
#[derive(Debug)]
pub(crate) struct Ask {
    /// What AnswerCapability names it by.
    pub(crate) token: String,
    /// The power asked for.
    pub(crate) power: Power,
    /// net.egress: the hosts asked for.
    pub(crate) scope: Vec<Host>,
    /// Why (Unlock's reason, or the call's need).
    pub(crate) reason: String,
    /// The call that waits (`Unlock`, `Exec`...).
    pub(crate) action: &'static str,
    /// Who waits, and so who makes the grant.
    pub(crate) asker: Asker,
    /// When it times out.
    pub(crate) deadline: tokio::time::Instant,
    /// The answer, to every call waiting on it.
    tx: tokio::sync::watch::Sender<Option<Answer>>,
}

impl Ask {
    /// Tells every call waiting on it.
    pub(crate) fn settle(self, answer: Answer) {
        // Fails only when every waiter went away: nobody to tell.
        let _ = self.tx.send(Some(answer));
    }

    /// The scope as the wire spells it.
    pub(crate) fn scope_text(&self) -> Vec<String> {
        self.scope.iter().map(ToString::to_string).collect()
    }
}

/// A call's side of a request: its token, and where the answer arrives.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// The request's token.
    pub(crate) token: String,
    /// True when this call opened the request (and so logs `capability_required`);
    /// false when it joined one already waiting for the same power.
    pub(crate) opened: bool,
    /// When the request times out.
    pub(crate) deadline: tokio::time::Instant,
    /// The answer, once given.
    pub(crate) rx: tokio::sync::watch::Receiver<Option<Answer>>,
}

/// A request to open, as its caller describes it.
#[derive(Clone, Debug)]
pub(crate) struct NewAsk {
    /// The power.
    pub(crate) power: Power,
    /// Its scope (net.egress).
    pub(crate) scope: Vec<Host>,
    /// Why.
    pub(crate) reason: String,
    /// The call that waits.
    pub(crate) action: &'static str,
    /// Who waits.
    pub(crate) asker: Asker,
}

/// One waiting request as `EnvInfo.pending_capabilities` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    /// Its token.
    pub(crate) token: String,
    /// The power.
    pub(crate) power: Power,
    /// The scope, as the wire spells it.
    pub(crate) scope: Vec<String>,
    /// Why.
    pub(crate) reason: String,
    /// The call that waits.
    pub(crate) action: &'static str,
    /// Milliseconds before it times out.
    pub(crate) left_ms: u64,
}

/// An env's capability requests: those waiting, and the last ones that ended.
#[derive(Debug, Default)]
pub(crate) struct Asks(Mutex<AskBook>);

#[derive(Debug, Default)]
struct AskBook {
    pending: Vec<Ask>,
    /// Tokens that ended, and how, oldest first (at most [`MAX_DECIDED`]).
    decided: std::collections::VecDeque<(String, &'static str)>,
}

impl AskBook {
    /// Takes request `token` out, noting how it ended.
    fn remove(&mut self, token: &str, answer: &Answer) -> Option<Ask> {
        let i = self.pending.iter().position(|a| a.token == token)?;
        let ask = self.pending.remove(i);
        self.note(ask.token.clone(), answer);
        Some(ask)
    }

    fn note(&mut self, token: String, answer: &Answer) {
        if self.decided.len() == MAX_DECIDED {
            self.decided.pop_front();
        }
        self.decided.push_back((token, answer.outcome()));
    }
}

impl Asks {
    /// Opens a request waiting `timeout` at most; a call needing a power that another
    /// call's request waits for already joins that one (one question to the controller
    /// per power). `Err(max)`: too many wait already.
    pub(crate) fn open(&self, new: &NewAsk, timeout: std::time::Duration) -> Result<Waiter, usize> {
        let mut book = lock(&self.0);
        if new.asker == Asker::Action
            && let Some(a) = book
                .pending
                .iter()
                .find(|a| a.asker == Asker::Action && a.power == new.power)
        {
            return Ok(Waiter {
                token: a.token.clone(),
                opened: false,
                deadline: a.deadline,
                rx: a.tx.subscribe(),
            });
        }
        if book.pending.len() >= MAX_PENDING_ASKS {
            return Err(MAX_PENDING_ASKS);
        }
        let (tx, rx) = tokio::sync::watch::channel(None);
        let token = format!("c{}", NEXT_ASK.fetch_add(1, Ordering::Relaxed));
        let deadline = tokio::time::Instant::now() + timeout;
        book.pending.push(Ask {
            token: token.clone(),
            power: new.power,
            scope: new.scope.clone(),
            reason: new.reason.clone(),
            action: new.action,
            asker: new.asker,
            deadline,
            tx,
        });
        Ok(Waiter {
            token,
            opened: true,
            deadline,
            rx,
        })
    }

    /// Takes request `token` out to answer it: `decide` checks the answer against the
    /// request (a narrowed scope) and says what it is; the caller then settles it.
    /// `Err(None)`: no such token; `Err(Some(outcome))`: it ended already.
    pub(crate) fn answer<E>(
        &self,
        token: &str,
        decide: impl FnOnce(&Ask) -> Result<Answer, E>,
    ) -> Result<Result<(Ask, Answer), E>, Option<&'static str>> {
        let mut book = lock(&self.0);
        let Some(ask) = book.pending.iter().find(|a| a.token == token) else {
            return Err(book
                .decided
                .iter()
                .rev()
                .find(|(t, _)| t == token)
                .map(|(_, o)| *o));
        };
        Ok(decide(ask).map(|answer| {
            let ask = book.remove(token, &answer);
            // Found under the same lock just above.
            (ask.expect("a pending request"), answer)
        }))
    }

    /// Ends request `token` unanswered (timed out, withdrawn) if it still waits and,
    /// with `only_unwatched`, no call waits on it any more.
    pub(crate) fn end(&self, token: &str, answer: &Answer, only_unwatched: bool) -> Option<Ask> {
        let mut book = lock(&self.0);
        let watched = book
            .pending
            .iter()
            .find(|a| a.token == token)
            .is_some_and(|a| a.tx.receiver_count() > 0);
        if only_unwatched && watched {
            return None;
        }
        book.remove(token, answer)
    }

    /// Ends every waiting request (a reset, the env's end).
    pub(crate) fn end_all(&self, answer: &Answer) -> Vec<Ask> {
        let mut book = lock(&self.0);
        let all = std::mem::take(&mut book.pending);
        for a in &all {
            book.note(a.token.clone(), answer);
        }
        all
    }

    /// The requests waiting now, oldest first.
    pub(crate) fn pending(&self) -> Vec<Pending> {
        let now = tokio::time::Instant::now();
        lock(&self.0)
            .pending
            .iter()
            .map(|a| Pending {
                token: a.token.clone(),
                power: a.power,
                scope: a.scope_text(),
                reason: a.reason.clone(),
                action: a.action,
                left_ms: u64::try_from(a.deadline.saturating_duration_since(now).as_millis())
                    .unwrap_or(u64::MAX),
            })
            .collect()
    }
}

/// True when every host of `narrow` is within `wide` (an answer's scope within its
/// request's).
pub(crate) fn within(wide: &[Host], narrow: &[Host]) -> bool {
    narrow.iter().all(|h| wide.iter().any(|w| w.covers(h)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(raw: &[&str]) -> Vec<Host> {
        raw.iter().map(|h| Host::parse(h).unwrap()).collect()
    }

    #[test]
    fn an_answer_may_narrow_a_scope_never_widen_it() {
        let wide = hosts(&["a.test", ".b.test"]);
        assert!(within(&wide, &hosts(&["a.test", "x.b.test", ".c.b.test"])));
        assert!(!within(&wide, &hosts(&["b.test"])));
        assert!(!within(&wide, &hosts(&[".test"])));
    }
}
