//! Boundary powers asked for at run time (ACI's `unlock`): what a principal may unlock
//! without asking anyone (the operator's policy), the host scopes of `net.egress`, and
//! an env's live grants.
//!
//! A pool's capabilities (CreatePool) hold for its whole life; an unlock holds one
//! power on one env until Relock, the env's next reset, or the env's end. The policy is
//! the operator's: `--allow-unlock` for every principal, `unlock=` words in the token
//! file for one (which then replace the server's list for it). Powers the policy says
//! to ask for wait in [`asks`] for the env's principal to answer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::capability::Capability;
use crate::invalid::{Invalid, quote};
use crate::sync::lock;

mod asks;

pub(crate) use asks::*;

/// Most hosts one `net.egress` scope (or policy entry) names.
pub(crate) const MAX_SCOPE: usize = 32;
/// Longest `reason`, in bytes.
pub(crate) const MAX_REASON: usize = 1024;

/// A power one env can be given for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Power {
    /// One of the pool capabilities that a grant may also give per env.
    Cap(Capability),
    /// Outbound connections to the scoped hosts through the env's egress proxy.
    Egress,
}

impl Power {
    /// Every power, as the wire spells them (errors list them so).
    pub(crate) const NAMES: [&'static str; 5] = ["exec", "files", "clipboard", "windows", EGRESS];

    /// The power the wire spells `name`, if any.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            EGRESS => Some(Self::Egress),
            "exec" => Some(Self::Cap(Capability::Exec)),
            "files" => Some(Self::Cap(Capability::Files)),
            "clipboard" => Some(Self::Cap(Capability::Clipboard)),
            "windows" => Some(Self::Cap(Capability::Windows)),
            _ => None,
        }
    }

    /// The wire spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Cap(c) => c.as_str(),
            Self::Egress => EGRESS,
        }
    }
}

/// The wire name of the egress power.
pub(crate) const EGRESS: &str = "net.egress";

/// One host of a `net.egress` scope: a name (`pypi.org`), or a suffix (`.pythonhosted.org`,
/// also written `*.pythonhosted.org`) that matches every name below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Host {
    /// Lower case, without the suffix's leading dot.
    name: String,
    /// Matches names below `name` (not `name` itself).
    suffix: bool,
}

impl Host {
    /// Parses one scope entry; the error says what a host entry looks like.
    pub(crate) fn parse(raw: &str) -> Result<Self, String> {
        let lower = raw.trim().to_ascii_lowercase();
        let (suffix, name) = match lower.strip_prefix("*.").or_else(|| lower.strip_prefix('.')) {
            Some(rest) => (true, rest),
            None => (false, lower.as_str()),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        let labels_ok = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !labels_ok {
            return Err(format!(
                "{} is not a host name: give names like \"pypi.org\" or suffixes like \
                 \".pythonhosted.org\" (letters, digits, '-' and dots; no scheme, port, path \
                 or wildcard other than a leading \"*.\")",
                quote(raw)
            ));
        }
        // An address is not a name: scopes name hosts, so an IP literal (which any
        // name could resolve to) never widens one.
        if name.parse::<std::net::IpAddr>().is_ok()
            || name
                .rsplit('.')
                .next()
                .is_some_and(|tld| tld.chars().all(|c| c.is_ascii_digit()))
        {
            return Err(format!(
                "{} is an address: a scope names hosts (\"pypi.org\"), never addresses",
                quote(raw)
            ));
        }
        Ok(Self {
            name: name.to_string(),
            suffix,
        })
    }

    /// True when `host` (a name a client asked the proxy for) is in this entry.
    pub(crate) fn matches(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if self.suffix {
            host.len() > self.name.len()
                && host.ends_with(&self.name)
                && host.as_bytes()[host.len() - self.name.len() - 1] == b'.'
        } else {
            host == self.name
        }
    }

    /// True when every host `other` matches, this matches too (a policy entry covering
    /// a requested one).
    fn covers(&self, other: &Host) -> bool {
        match (self.suffix, other.suffix) {
            (_, false) => self.matches(&other.name),
            (true, true) => other.name == self.name || self.matches(&other.name),
            (false, true) => false,
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.suffix {
            f.write_str(".")?;
        }
        f.write_str(&self.name)
    }
}

/// True when an entry of `scope` matches `host`.
pub(crate) fn in_scope(scope: &[Host], host: &str) -> bool {
    scope.iter().any(|h| h.matches(host))
}

/// A request's `net.egress` scope, checked (for the other powers it must be empty).
pub(crate) fn scope(power: Power, raw: &[String]) -> Result<Vec<Host>, Invalid> {
    match power {
        Power::Cap(c) if !raw.is_empty() => Err(Invalid::new(
            "scope",
            format!(
                "{} takes no scope (it holds for the whole env); scopes are host names of {EGRESS}",
                c.as_str()
            ),
        )),
        Power::Cap(_) => Ok(Vec::new()),
        Power::Egress if raw.is_empty() => Err(Invalid::new(
            "scope",
            format!(
                "{EGRESS} needs a scope: the host names (\"pypi.org\") or suffixes \
                 (\".pythonhosted.org\") the env may reach"
            ),
        )),
        Power::Egress if raw.len() > MAX_SCOPE => Err(Invalid::new(
            "scope",
            format!("{} hosts; at most {MAX_SCOPE}", raw.len()),
        )),
        Power::Egress => raw
            .iter()
            .enumerate()
            .map(|(i, h)| Host::parse(h).map_err(|m| Invalid::new(format!("scope[{i}]"), m)))
            .collect(),
    }
}

/// What a principal may unlock without asking anyone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct UnlockPolicy {
    /// Capabilities it may unlock on its envs.
    caps: Vec<Capability>,
    /// `net.egress`: `None` not at all; an empty list any host; else these hosts.
    egress: Option<Vec<Host>>,
}

impl UnlockPolicy {
    /// Parses the operator's entries: a power's name, or `net.egress:` followed by
    /// comma-separated hosts (`net.egress` alone: any host). The error names the entry.
    pub(crate) fn parse(entries: &[String]) -> Result<Self, String> {
        let mut p = Self::default();
        for e in entries {
            let (name, hosts) = e
                .split_once(':')
                .map_or((e.as_str(), None), |(n, h)| (n, Some(h)));
            let power = Power::parse(name).ok_or_else(|| {
                format!(
                    "unlock entry {}: unknown power; known: {}",
                    quote(e),
                    Power::NAMES.join(", ")
                )
            })?;
            match (power, hosts) {
                (Power::Cap(c), None) => {
                    if !p.caps.contains(&c) {
                        p.caps.push(c);
                    }
                }
                (Power::Cap(c), Some(_)) => {
                    return Err(format!(
                        "unlock entry {}: {} takes no host list",
                        quote(e),
                        c.as_str()
                    ));
                }
                (Power::Egress, None) => p.egress = Some(Vec::new()),
                (Power::Egress, Some(hosts)) => {
                    let parsed = hosts
                        .split(',')
                        .map(Host::parse)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|m| format!("unlock entry {}: {m}", quote(e)))?;
                    match &mut p.egress {
                        // Already any host: a list adds nothing.
                        Some(all) if all.is_empty() => {}
                        Some(list) => list.extend(parsed),
                        None => p.egress = Some(parsed),
                    }
                }
            }
        }
        Ok(p)
    }

    /// Whether `power` with `scope` is within this policy; the error says which part is
    /// not (for the refusal's message).
    pub(crate) fn allows(&self, power: Power, scope: &[Host]) -> Result<(), String> {
        match power {
            Power::Cap(c) if self.caps.contains(&c) => Ok(()),
            Power::Cap(c) => Err(c.as_str().to_string()),
            Power::Egress => match &self.egress {
                None => Err(EGRESS.to_string()),
                Some(any) if any.is_empty() => Ok(()),
                Some(list) => {
                    let outside: Vec<String> = scope
                        .iter()
                        .filter(|h| !list.iter().any(|p| p.covers(h)))
                        .map(Host::to_string)
                        .collect();
                    if outside.is_empty() {
                        Ok(())
                    } else {
                        Err(format!("{EGRESS}:{}", outside.join(",")))
                    }
                }
            },
        }
    }

    /// The policy as the operator writes it (`GetCapabilities.unlockable`).
    pub(crate) fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self.caps.iter().map(|c| c.as_str().to_string()).collect();
        match &self.egress {
            None => {}
            Some(any) if any.is_empty() => out.push(EGRESS.into()),
            Some(list) => out.push(format!(
                "{EGRESS}:{}",
                list.iter()
                    .map(Host::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        }
        out
    }
}

/// Why an Unlock was not granted (PERMISSION_DENIED or FAILED_PRECONDITION).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum UnlockError {
    /// The operator's policy for the caller does not include it.
    #[error(
        "principal {principal} may not unlock {wanted} on env {env}: the operator's policy \
         does not allow it (the operator lists it with --allow-unlock {wanted}, or \
         unlock={wanted} on the principal's token-file line; or with --ask-unlock {wanted} \
         / ask={wanted} to have a controller answer each request)"
    )]
    Denied {
        /// The caller.
        principal: String,
        /// The env.
        env: String,
        /// The smallest policy entry that would allow the request.
        wanted: String,
    },
    /// The env cannot hold the power (no sandbox, already unrestricted network).
    #[error("env {env} cannot unlock {power}: {why}")]
    Unsupported {
        /// The env.
        env: String,
        /// The power.
        power: &'static str,
        /// Why, and what to do instead.
        why: String,
    },
    /// A controller refused the request (AnswerCapability with `allow: false`).
    #[error(
        "{by} refused capability request {token} ({power} on env {env}){reason}; the \
         operator can grant it without asking (--allow-unlock {power}, or unlock={power} \
         on the token-file line)"
    )]
    Refused {
        /// The env.
        env: String,
        /// The power asked for.
        power: &'static str,
        /// The request's token.
        token: String,
        /// The principal that answered.
        by: String,
        /// `: ` and the answer's reason, or nothing.
        reason: String,
    },
    /// No controller answered within `--ask-timeout-s`.
    #[error(
        "no controller answered capability request {token} ({power} on env {env}) within \
         {secs} s, so it is refused: answer `capability_required` events with \
         AnswerCapability (Python: Session.on_capability_required), or have the operator \
         grant it without asking (--allow-unlock {power}, or unlock={power} on the \
         token-file line)"
    )]
    TimedOut {
        /// The env.
        env: String,
        /// The power asked for.
        power: &'static str,
        /// The request's token.
        token: String,
        /// The bound, in seconds.
        secs: String,
    },
    /// The env was reset while the request waited: its powers would have ended anyway.
    #[error(
        "env {env} was reset while capability request {token} ({power}) waited for an \
         answer; call again on the new episode"
    )]
    Reset {
        /// The env.
        env: String,
        /// The power asked for.
        power: &'static str,
        /// The request's token.
        token: String,
    },
    /// The env closed while the request waited.
    #[error(
        "env {env} closed while capability request {token} ({power}) waited for an answer \
         (its pool was closed or reaped)"
    )]
    Closed {
        /// The env.
        env: String,
        /// The power asked for.
        power: &'static str,
        /// The request's token.
        token: String,
    },
    /// The server shuts down while the request waited.
    #[error("the server is shutting down: capability request {token} was not answered")]
    ShuttingDown {
        /// The request's token.
        token: String,
    },
    /// An AnswerCapability for a token the env never had waiting.
    #[error(
        "no capability request {} on env {env} (give a `capability_required` event's \
         token; EnvInfo.pending_capabilities lists those waiting)",
        quote(token)
    )]
    UnknownToken {
        /// The env.
        env: String,
        /// The token given.
        token: String,
    },
    /// An AnswerCapability for a request that no longer waits.
    #[error("capability request {token} on env {env} no longer waits: it was {outcome}")]
    Decided {
        /// The env.
        env: String,
        /// The token given.
        token: String,
        /// How it ended (`allowed already`, `timed out`, `cancelled by a reset`...).
        outcome: &'static str,
    },
    /// Too many requests wait on one env.
    #[error(
        "{max} capability requests on env {env} wait for an answer already: answer them \
         (AnswerCapability) or let them time out first"
    )]
    TooMany {
        /// The env.
        env: String,
        /// The bound.
        max: usize,
    },
}

/// Numbers grant ids server-wide.
static NEXT_GRANT: AtomicU64 = AtomicU64::new(1);

/// A fresh grant id (`u<n>`).
pub(crate) fn grant_id() -> String {
    format!("u{}", NEXT_GRANT.fetch_add(1, Ordering::Relaxed))
}

/// True when `id` has the shape of a grant id.
pub(crate) fn is_grant_id(id: &str) -> bool {
    numbered(id, 'u')
}

/// True when `id` is `prefix` and a server-wide number (grant ids, request tokens).
fn numbered(id: &str, prefix: char) -> bool {
    id.strip_prefix(prefix)
        .is_some_and(|n| !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A power an env holds now. Dropping it ends the power (its egress proxy stops).
#[derive(Debug)]
pub(crate) struct Grant {
    /// Its id (Relock takes it).
    pub(crate) id: String,
    /// The power.
    pub(crate) power: Power,
    /// `net.egress`: the proxy's port on the env's loopback, and its task.
    pub(crate) proxy: Option<(u16, tokio::task::AbortHandle)>,
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some((_, task)) = &self.proxy {
            task.abort();
        }
    }
}

/// The powers an env holds now.
#[derive(Debug, Default)]
pub(crate) struct Grants(Mutex<Vec<Grant>>);

impl Grants {
    /// True while a grant gives `capability`.
    pub(crate) fn holds(&self, capability: Capability) -> bool {
        lock(&self.0)
            .iter()
            .any(|g| g.power == Power::Cap(capability))
    }

    /// The port of the env's egress proxy, while a `net.egress` grant holds.
    pub(crate) fn proxy_port(&self) -> Option<u16> {
        lock(&self.0)
            .iter()
            .find_map(|g| g.proxy.as_ref().map(|p| p.0))
    }

    /// Adds a grant.
    pub(crate) fn add(&self, g: Grant) {
        lock(&self.0).push(g);
    }

    /// Ends grant `id`, returning it (dropped by the caller after recording).
    pub(crate) fn remove(&self, id: &str) -> Option<Grant> {
        let mut all = lock(&self.0);
        let i = all.iter().position(|g| g.id == id)?;
        Some(all.remove(i))
    }

    /// Ends every grant (a reset, the env's end).
    pub(crate) fn take_all(&self) -> Vec<Grant> {
        std::mem::take(&mut *lock(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(raw: &[&str]) -> Vec<Host> {
        raw.iter().map(|h| Host::parse(h).unwrap()).collect()
    }

    #[test]
    fn hosts_parse_match_and_refuse_addresses() {
        let exact = Host::parse("PyPI.org").unwrap();
        assert!(exact.matches("pypi.org") && exact.matches("pypi.org."));
        assert!(!exact.matches("evil-pypi.org") && !exact.matches("x.pypi.org"));
        let below = Host::parse("*.pythonhosted.org").unwrap();
        assert_eq!(below, Host::parse(".pythonhosted.org").unwrap());
        assert!(below.matches("files.pythonhosted.org"));
        assert!(!below.matches("pythonhosted.org") && !below.matches("xpythonhosted.org"));
        for bad in [
            "",
            "*",
            "1.2.3.4",
            "::1",
            "[::1]",
            "a..b",
            "http://x.org",
            "x.org:80",
            "-a.org",
            "a_b.org",
            "10.0.0.010",
        ] {
            assert!(Host::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_policy_allows_what_it_lists_and_no_more() {
        let p = UnlockPolicy::parse(&[
            "exec".into(),
            "net.egress:pypi.org,.pythonhosted.org".into(),
        ])
        .unwrap();
        assert!(p.allows(Power::Cap(Capability::Exec), &[]).is_ok());
        assert_eq!(
            p.allows(Power::Cap(Capability::Files), &[]).unwrap_err(),
            "files"
        );
        assert!(
            p.allows(
                Power::Egress,
                &hosts(&["pypi.org", "files.pythonhosted.org"])
            )
            .is_ok()
        );
        assert!(
            p.allows(Power::Egress, &hosts(&[".a.pythonhosted.org"]))
                .is_ok()
        );
        assert_eq!(
            p.allows(Power::Egress, &hosts(&["pypi.org", "evil.org", ".org"]))
                .unwrap_err(),
            "net.egress:evil.org,.org"
        );
        assert_eq!(
            p.describe(),
            ["exec", "net.egress:pypi.org,.pythonhosted.org"]
        );
        let any = UnlockPolicy::parse(&["net.egress".into()]).unwrap();
        assert!(
            any.allows(Power::Egress, &hosts(&["anything.example"]))
                .is_ok()
        );
        assert!(
            UnlockPolicy::default()
                .allows(Power::Egress, &hosts(&["a.org"]))
                .is_err()
        );
        for bad in [
            "network",
            "exec:x.org",
            "net.egress:",
            "net.egress:1.2.3.4",
            "launch_app",
        ] {
            assert!(UnlockPolicy::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
    }

    fn exec_ask(asker: Asker) -> NewAsk {
        NewAsk {
            power: Power::Cap(Capability::Exec),
            scope: Vec::new(),
            reason: "r".into(),
            action: "Exec",
            asker,
        }
    }

    #[tokio::test]
    async fn calls_needing_one_power_share_one_request_and_a_late_answer_is_told_so() {
        let asks = Asks::default();
        let t = std::time::Duration::from_secs(60);
        let first = asks.open(&exec_ask(Asker::Action), t).unwrap();
        let second = asks.open(&exec_ask(Asker::Action), t).unwrap();
        assert!(first.opened && !second.opened);
        assert_eq!(first.token, second.token);
        assert!(is_ask_token(&first.token) && !is_ask_token("c") && !is_ask_token("u1"));
        // An Unlock's request is its own (it makes its own grant).
        let own = asks.open(&exec_ask(Asker::Unlock), t).unwrap();
        assert_ne!(own.token, first.token);
        assert_eq!(asks.pending().len(), 2);
        let denied = Answer::Denied {
            by: "alice".into(),
            reason: String::new(),
        };
        let (ask, answer) = asks
            .answer::<()>(&first.token, |_| Ok(denied.clone()))
            .unwrap()
            .unwrap();
        ask.settle(answer);
        for w in [first, second] {
            assert_eq!(*w.rx.borrow(), Some(denied.clone()));
        }
        let again = asks.answer::<()>(&own.token, |_| Ok(Answer::TimedOut));
        assert!(again.is_ok());
        assert_eq!(
            asks.answer::<()>(&own.token, |_| Ok(Answer::TimedOut))
                .unwrap_err(),
            Some("timed out")
        );
        assert_eq!(
            asks.answer::<()>("c0", |_| Ok(Answer::TimedOut))
                .unwrap_err(),
            None
        );
    }

    #[tokio::test]
    async fn an_env_bounds_its_waiting_requests_and_a_withdrawn_one_frees_its_place() {
        let asks = Asks::default();
        let t = std::time::Duration::from_secs(60);
        let mut held: Vec<Waiter> = (0..MAX_PENDING_ASKS)
            .map(|_| asks.open(&exec_ask(Asker::Unlock), t).unwrap())
            .collect();
        assert_eq!(
            asks.open(&exec_ask(Asker::Unlock), t).unwrap_err(),
            MAX_PENDING_ASKS
        );
        let w = held.pop().unwrap();
        let gone = Answer::Ended("withdrawn");
        // Still watched: not withdrawn.
        assert!(asks.end(&w.token, &gone, true).is_none());
        let token = w.token.clone();
        drop(w);
        assert!(asks.end(&token, &gone, true).is_some());
        assert!(asks.open(&exec_ask(Asker::Unlock), t).is_ok());
        assert_eq!(
            asks.end_all(&Answer::Ended("reset")).len(),
            MAX_PENDING_ASKS
        );
        assert!(asks.pending().is_empty());
    }

    #[test]
    fn request_scopes_are_checked() {
        assert!(scope(Power::Cap(Capability::Exec), &[]).unwrap().is_empty());
        assert_eq!(
            scope(Power::Cap(Capability::Exec), &["a.org".into()])
                .unwrap_err()
                .field,
            "scope"
        );
        assert_eq!(scope(Power::Egress, &[]).unwrap_err().field, "scope");
        assert_eq!(
            scope(Power::Egress, &["a.org".into(), "1.1.1.1".into()])
                .unwrap_err()
                .field,
            "scope[1]"
        );
        assert!(is_grant_id(&grant_id()) && !is_grant_id("u") && !is_grant_id("x1"));
    }
}
