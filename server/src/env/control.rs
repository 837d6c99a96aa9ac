//! Who drives an env (its agent, or a person who took it over at the console) and what
//! it did lately, for the console: a short summary the fleet page reads without waiting
//! for the call in flight, and a feed of steps and resets for viewers of the env page.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::sync::lock;

/// How long a take-over lasts without a sign of life from its console (an action or a
/// renewal): a closed browser tab gives the env back to its agent within this.
pub(crate) const HOLD_LEASE: Duration = Duration::from_secs(30);

/// Feed entries a slow console viewer may be behind before it misses some.
const FEED_QUEUE: usize = 64;

/// A person's hold on an env.
#[derive(Debug, Clone)]
struct Hold {
    by: Arc<str>,
    until: Instant,
}

/// Where an env's episode stands, as the fleet page shows it (`idle`, `running`, `done`,
/// `failed` on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RunState {
    /// Never reset.
    #[default]
    Idle,
    /// An episode is under way.
    Running,
    /// The episode terminated or was truncated.
    Done,
    /// The last call failed.
    Failed,
}

/// What the fleet page shows of an env, kept current by its steps and resets.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Summary {
    /// Episodes started so far (0: never reset).
    pub episode: u64,
    /// Steps in the current episode.
    pub step: u32,
    /// The last step's reward.
    pub last_reward: f64,
    /// The current episode's return so far.
    pub episode_return: f64,
    /// Where the env's episode stands.
    pub state: RunState,
    /// The current episode's instruction.
    pub instruction: String,
}

/// An env's driver and feed (see the module docs).
#[derive(Debug)]
pub(crate) struct Control {
    hold: Mutex<Option<Hold>>,
    feed: broadcast::Sender<Arc<str>>,
    summary: Mutex<Summary>,
    /// The elements of the last tree read on the env while a console watched it.
    tree: Mutex<Option<Arc<serde_json::Value>>>,
}

impl Default for Control {
    fn default() -> Self {
        Self {
            hold: Mutex::new(None),
            feed: broadcast::channel(FEED_QUEUE).0,
            summary: Mutex::new(Summary {
                state: RunState::Idle,
                ..Summary::default()
            }),
            tree: Mutex::new(None),
        }
    }
}

impl Control {
    /// The person holding the env now, if any (an expired lease holds nothing).
    pub(crate) fn holder(&self) -> Option<Arc<str>> {
        let mut hold = lock(&self.hold);
        match &*hold {
            Some(h) if h.until > Instant::now() => Some(h.by.clone()),
            Some(_) => {
                *hold = None;
                None
            }
            None => None,
        }
    }

    /// Takes the env for `by` (or renews `by`'s lease). Returns the other holder when
    /// someone else has it.
    pub(crate) fn take(&self, by: &Arc<str>) -> Result<bool, Arc<str>> {
        let now = Instant::now();
        let mut hold = lock(&self.hold);
        let fresh = match &*hold {
            Some(h) if h.until > now && h.by != *by => return Err(h.by.clone()),
            Some(h) => h.until <= now,
            None => true,
        };
        *hold = Some(Hold {
            by: by.clone(),
            until: now + HOLD_LEASE,
        });
        Ok(fresh)
    }

    /// Gives the env back to its agent if `by` holds it; true when it did.
    pub(crate) fn release(&self, by: &str) -> bool {
        let mut hold = lock(&self.hold);
        let mine = hold
            .as_ref()
            .is_some_and(|h| &*h.by == by && h.until > Instant::now());
        if mine {
            *hold = None;
        }
        mine
    }

    /// A receiver of the feed's entries from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.feed.subscribe()
    }

    /// The fleet page's view of the env.
    pub(crate) fn summary(&self) -> Summary {
        lock(&self.summary).clone()
    }

    /// Keeps the elements of a tree just read, for the console (only while one
    /// watches: the agent's path pays nothing otherwise).
    pub(crate) fn saw_tree(&self, tree: &deskgym_proto::v1::AccessibilityTree) {
        if self.feed.receiver_count() == 0 || tree.elements.is_empty() {
            return;
        }
        *lock(&self.tree) = Some(Arc::new(tree_json(tree)));
    }

    /// The last tree [`Self::saw_tree`] kept.
    pub(crate) fn last_tree(&self) -> Option<Arc<serde_json::Value>> {
        lock(&self.tree).clone()
    }

    /// Updates the summary, and sends `entry` (built only when someone watches).
    pub(crate) fn tell(
        &self,
        update: impl FnOnce(&mut Summary),
        entry: impl FnOnce() -> serde_json::Value,
    ) {
        update(&mut lock(&self.summary));
        if self.feed.receiver_count() > 0 {
            let _ = self.feed.send(Arc::from(entry().to_string()));
        }
    }
}

/// A tree as the console lists it: each element's ref, role, name, depth and bounds.
fn tree_json(tree: &deskgym_proto::v1::AccessibilityTree) -> serde_json::Value {
    let elements: Vec<_> = tree
        .elements
        .iter()
        .map(|e| {
            let b = e.bounds.unwrap_or_default();
            serde_json::json!({
                "ref": e.r#ref, "role": e.role, "name": e.name, "depth": e.depth,
                "bounds": [b.x, b.y, b.width, b.height],
            })
        })
        .collect();
    serde_json::json!({ "revision": tree.revision, "elements": elements })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_states_keep_their_wire_spelling() {
        let spelled: Vec<serde_json::Value> = [
            RunState::Idle,
            RunState::Running,
            RunState::Done,
            RunState::Failed,
        ]
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .collect();
        assert_eq!(spelled, ["idle", "running", "done", "failed"]);
        assert_eq!(Control::default().summary().state, RunState::Idle);
    }

    #[test]
    fn one_holder_at_a_time_and_release_only_by_it() {
        let c = Control::default();
        let (ann, bob): (Arc<str>, Arc<str>) = (Arc::from("ann"), Arc::from("bob"));
        assert_eq!(c.take(&ann), Ok(true));
        assert_eq!(c.take(&ann), Ok(false), "a renewal is not a fresh take");
        assert_eq!(c.take(&bob), Err(ann.clone()));
        assert!(!c.release("bob"));
        assert_eq!(c.holder(), Some(ann.clone()));
        assert!(c.release("ann"));
        assert_eq!(c.holder(), None);
        assert_eq!(c.take(&bob), Ok(true));
    }

    #[test]
    fn an_expired_hold_holds_nothing() {
        let c = Control::default();
        let ann: Arc<str> = Arc::from("ann");
        c.take(&ann).unwrap();
        lock(&c.hold).as_mut().unwrap().until = Instant::now();
        assert_eq!(c.holder(), None);
        assert!(!c.release("ann"));
        assert_eq!(c.take(&Arc::from("bob")), Ok(true));
    }

    #[test]
    fn the_feed_is_built_only_for_listeners() {
        let c = Control::default();
        let mut built = false;
        c.tell(
            |s| s.step = 1,
            || {
                built = true;
                serde_json::json!({})
            },
        );
        assert!(!built);
        let mut rx = c.subscribe();
        c.tell(|s| s.step = 2, || serde_json::json!({"step": 2}));
        assert_eq!(&*rx.try_recv().unwrap(), r#"{"step":2}"#);
        assert_eq!(c.summary().step, 2);
    }
}
