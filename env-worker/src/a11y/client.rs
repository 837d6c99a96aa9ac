//! The AT-SPI client of a sandbox session (used by the agent, inside the sandbox).

use super::*;
use atspi_common::{CoordType, Interface, ObjectRefOwned};
use atspi_proxies::accessible::AccessibleProxy;
use atspi_proxies::action::ActionProxy;
use atspi_proxies::component::ComponentProxy;
use atspi_proxies::editable_text::EditableTextProxy;
use atspi_proxies::text::TextProxy;
use atspi_proxies::value::ValueProxy;
use futures_util::future::join_all;
use zbus::proxy::CacheProperties;

/// How long one D-Bus call to an application may take.
const CALL_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long connecting to the buses may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const ROOT: &str = "/org/a11y/atspi/accessible/root";
const REGISTRY: &str = "org.a11y.atspi.Registry";

pub(crate) use crate::error::ElementFailure as Failure;

/// A failure and its message.
pub(crate) type Fail = (Failure, String);

/// A connection to a session's accessibility bus.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    conn: zbus::Connection,
}

fn unavailable(e: impl std::fmt::Display) -> Fail {
    (
        Failure::Unavailable,
        format!("the accessibility bus is not available: {e}"),
    )
}

/// A call failed: the element is gone when the application says so (or is gone
/// itself); anything else is an application that does not answer.
fn call_failed(e: zbus::Error) -> Fail {
    let text = e.to_string();
    let gone = [
        "UnknownObject",
        "UnknownMethod",
        "ServiceUnknown",
        "NameHasNoOwner",
        "NoReply",
        "Disconnected",
        "UnknownInterface",
    ]
    .iter()
    .any(|k| text.contains(k));
    if gone {
        (Failure::Gone, "the element no longer exists".into())
    } else {
        (
            Failure::Unavailable,
            format!("the application did not answer: {text}"),
        )
    }
}

impl Client {
    /// Connects through the session bus at `session_address` (asks it for the
    /// accessibility bus's address). Bounded: a bus that does not answer fails it.
    pub(crate) fn connect(session_address: &str) -> Result<Self, Fail> {
        let connect = async {
            let session = zbus::connection::Builder::address(session_address)
                .map_err(unavailable)?
                .method_timeout(CALL_TIMEOUT)
                .build()
                .await
                .map_err(unavailable)?;
            let bus = atspi_proxies::bus::BusProxy::new(&session)
                .await
                .map_err(unavailable)?;
            let address = bus.get_address().await.map_err(unavailable)?;
            let conn = zbus::connection::Builder::address(address.as_str())
                .map_err(unavailable)?
                .method_timeout(CALL_TIMEOUT)
                .build()
                .await
                .map_err(unavailable)?;
            Ok(Self { conn })
        };
        zbus::block_on(async {
            match futures_util::future::select(
                Box::pin(connect),
                Box::pin(async_io::Timer::after(CONNECT_TIMEOUT)),
            )
            .await
            {
                futures_util::future::Either::Left((r, _)) => r,
                futures_util::future::Either::Right(_) => {
                    Err(unavailable("the session bus did not answer in time"))
                }
            }
        })
    }

    async fn proxy<'a, P>(&self, bus: &'a str, path: &'a str) -> zbus::Result<P>
    where
        P: From<zbus::Proxy<'a>> + zbus::proxy::Defaults,
    {
        zbus::proxy::Builder::<P>::new(&self.conn)
            .destination(bus)?
            .path(path)?
            .cache_properties(CacheProperties::No)
            .build()
            .await
    }

    /// Walks every application's tree within `limits`.
    pub(crate) fn tree(&self, limits: &Limits) -> Result<Tree, Fail> {
        let deadline = Instant::now() + Duration::from_millis(limits.timeout_ms);
        zbus::block_on(async {
            let root: AccessibleProxy<'_> =
                self.proxy(REGISTRY, ROOT).await.map_err(unavailable)?;
            let apps = root.get_children().await.map_err(unavailable)?;
            let walks = apps
                .iter()
                .filter_map(|a| Some((a.name_as_str()?, a.path_as_str())))
                .map(|(bus, path)| self.walk_app(bus, path, limits, deadline));
            let mut tree = Tree::default();
            for (mut nodes, notes) in join_all(walks).await {
                if !notes.is_empty() {
                    tree.partial = true;
                    tree.notes.extend(notes);
                }
                let room = (limits.max_nodes as usize).saturating_sub(tree.nodes.len());
                if nodes.len() > room {
                    nodes.truncate(room);
                    tree.partial = true;
                    tree.notes
                        .push(format!("stopped at {} elements", limits.max_nodes));
                }
                let base = tree.nodes.len() as u32;
                for mut n in nodes {
                    n.parent = n.parent.map(|p| p + base);
                    tree.nodes.push(n);
                }
            }
            Ok(tree)
        })
    }

    /// One application, level by level: every element of a level is read at once
    /// (the calls pipeline on the bus). Returns its nodes in depth-first order and
    /// why it stopped early, if it did.
    async fn walk_app(
        &self,
        bus: &str,
        path: &str,
        limits: &Limits,
        deadline: Instant,
    ) -> (Vec<Node>, Vec<String>) {
        // Breadth-first read; `kids` records each node's children by index.
        let mut nodes: Vec<Node> = Vec::new();
        let mut kids: Vec<Vec<usize>> = Vec::new();
        let mut level: Vec<(Option<usize>, String, String)> =
            vec![(None, bus.to_string(), path.to_string())];
        let mut notes = Vec::new();
        let mut depth = 0;
        while !level.is_empty() {
            if nodes.len() + level.len() > limits.max_nodes as usize {
                notes.push(format!("{bus}: stopped at {} elements", limits.max_nodes));
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let read = {
                let reads = join_all(level.iter().map(|(_, b, p)| self.read(b, p, limits)));
                match futures_util::future::select(
                    Box::pin(reads),
                    Box::pin(async_io::Timer::after(left)),
                )
                .await
                {
                    futures_util::future::Either::Left((read, _)) => Some(read),
                    futures_util::future::Either::Right(_) => None,
                }
            };
            let Some(read) = read else {
                notes.push(format!(
                    "{bus}: the walk's {} ms deadline passed at depth {depth}",
                    limits.timeout_ms
                ));
                break;
            };
            let mut next = Vec::new();
            let mut silent = 0;
            for ((parent, _, _), r) in level.iter().zip(read) {
                let (node, children) = match r {
                    Ok(r) => r,
                    // Gone between its parent's reading and its own: not in the tree.
                    Err(Failure::Gone) => continue,
                    Err(_) => {
                        silent += 1;
                        continue;
                    }
                };
                let i = nodes.len();
                nodes.push(node);
                kids.push(Vec::new());
                if let Some(p) = parent {
                    kids[*p].push(i);
                }
                if depth < limits.max_depth {
                    next.extend(
                        children
                            .into_iter()
                            .take(limits.max_children as usize)
                            .map(|(b, p)| (Some(i), b, p)),
                    );
                }
            }
            if silent > 0 {
                notes.push(format!(
                    "{bus}: {silent} element(s) at depth {depth} did not answer (is the application busy or stopped?)"
                ));
            }
            level = next;
            depth += 1;
        }
        (depth_first(nodes, &kids), notes)
    }

    /// Reads one element: its node and its children's identities, or why not
    /// ([`Failure::Gone`]: it vanished; otherwise it did not answer). The walk goes on
    /// without it.
    async fn read(
        &self,
        bus: &str,
        path: &str,
        limits: &Limits,
    ) -> Result<(Node, Vec<(String, String)>), Failure> {
        let acc: AccessibleProxy<'_> = self.proxy(bus, path).await.map_err(|e| call_failed(e).0)?;
        // The calls of one element go out together (they pipeline on the bus). Its
        // children are counted first: GetChildren makes the application list them all,
        // and a spreadsheet's table has millions (Calc answered one GetChildren for
        // over a minute, its main thread taken from everything else).
        let (role, name, description, states, ifaces, count, attrs) = futures_util::join!(
            acc.get_role_name(),
            acc.name(),
            acc.description(),
            acc.get_state(),
            acc.get_interfaces(),
            acc.child_count(),
            acc.get_attributes(),
        );
        let ifaces = ifaces.map_err(|e| call_failed(e).0)?;
        let mut node = Node {
            id: format!("{bus}{path}"),
            role: role.map_err(|e| call_failed(e).0)?,
            name: name.unwrap_or_default(),
            description: description.unwrap_or_default(),
            states: states
                .map(|s| s.iter().map(state_name).collect())
                .unwrap_or_default(),
            editable: ifaces.contains(Interface::EditableText),
            image: ifaces.contains(Interface::Image),
            selection: ifaces.contains(Interface::Selection),
            ..Default::default()
        };
        let mut attrs: Vec<(String, String)> = attrs.unwrap_or_default().into_iter().collect();
        attrs.sort();
        node.attributes = attrs;
        // An element that does not say its count is listed whole, as before.
        let count = count.ok().and_then(|n| u32::try_from(n).ok());
        let (children, bounds, actions, value, text) = futures_util::join!(
            async {
                if count == Some(0) {
                    Vec::new()
                } else if count.is_none_or(|n| n <= limits.max_children) {
                    acc.get_children()
                        .await
                        .map(|v| refs(&v))
                        .unwrap_or_default()
                } else {
                    // As OSWorld's walk does (MAX_WIDTH): the first ones, by index.
                    let first = join_all(
                        (0..limits.max_children as i32).map(|i| acc.get_child_at_index(i)),
                    );
                    let first: Vec<ObjectRefOwned> =
                        first.await.into_iter().filter_map(Result::ok).collect();
                    refs(&first)
                }
            },
            async {
                if !ifaces.contains(Interface::Component) {
                    return None;
                }
                let c: ComponentProxy<'_> = self.proxy(bus, path).await.ok()?;
                let (x, y, w, h) = c.get_extents(CoordType::Screen).await.ok()?;
                Some([x, y, w, h])
            },
            async {
                if !ifaces.contains(Interface::Action) {
                    return Vec::new();
                }
                let Ok(a) = self.proxy::<ActionProxy<'_>>(bus, path).await else {
                    return Vec::new();
                };
                // Names through GetName (what pyatspi's getName returns: "click");
                // GetActions carries localized names, often empty.
                let actions = a.get_actions().await.unwrap_or_default();
                let names = join_all((0..actions.len()).map(|i| a.get_name(i as i32))).await;
                actions
                    .into_iter()
                    .zip(names)
                    .map(|(act, name)| ElementAction {
                        name: name.ok().filter(|n| !n.is_empty()).unwrap_or(act.name),
                        description: act.description,
                        key_binding: act.keybinding,
                    })
                    .collect()
            },
            async {
                if !ifaces.contains(Interface::Value) {
                    return None;
                }
                let v: ValueProxy<'_> = self.proxy(bus, path).await.ok()?;
                let (c, lo, hi, st) = futures_util::join!(
                    v.current_value(),
                    v.minimum_value(),
                    v.maximum_value(),
                    v.minimum_increment()
                );
                let finite = |r: zbus::Result<f64>| r.ok().filter(|x| x.is_finite());
                Some(ValueInfo {
                    current: finite(c)?,
                    min: finite(lo),
                    max: finite(hi),
                    step: finite(st),
                })
            },
            async {
                if !ifaces.contains(Interface::Text) {
                    return None;
                }
                let t: TextProxy<'_> = self.proxy(bus, path).await.ok()?;
                let n = t.character_count().await.ok()?;
                // Characters, not bytes: cap by the byte budget (a char is >= 1 byte).
                let end = n.clamp(0, limits.max_text as i32);
                let s = t.get_text(0, end).await.ok()?;
                Some(cap(
                    s.replace(['\u{fffc}', '\u{fffd}'], ""),
                    limits.max_text,
                ))
            },
        );
        node.bounds = bounds;
        node.actions = actions;
        node.value = value;
        node.text = text;
        Ok((node, children))
    }

    /// What an element is now (bounds and states), or [`Failure::Gone`].
    pub(crate) fn live(&self, id: &str) -> Result<Live, Fail> {
        let (bus, path) = split_id(id).ok_or((Failure::Gone, "not an element".into()))?;
        zbus::block_on(async {
            let acc: AccessibleProxy<'_> = self.proxy(bus, path).await.map_err(call_failed)?;
            let states = acc.get_state().await.map_err(call_failed)?;
            let states: Vec<String> = states.iter().map(state_name).collect();
            if states.iter().any(|s| s == "defunct") {
                return Err((Failure::Gone, "the element no longer exists".into()));
            }
            let ifaces = acc.get_interfaces().await.map_err(call_failed)?;
            let bounds = if ifaces.contains(Interface::Component) {
                let c: ComponentProxy<'_> = self.proxy(bus, path).await.map_err(call_failed)?;
                let (x, y, w, h) = c
                    .get_extents(CoordType::Screen)
                    .await
                    .map_err(call_failed)?;
                Some([x, y, w, h])
            } else {
                None
            };
            Ok(Live { bounds, states })
        })
    }

    /// Performs the element's action `name` (its first action when empty).
    pub(crate) fn invoke(&self, id: &str, name: &str) -> Result<(), Fail> {
        let (bus, path) = split_id(id).ok_or((Failure::Gone, "not an element".into()))?;
        zbus::block_on(async {
            let a: ActionProxy<'_> = self.proxy(bus, path).await.map_err(call_failed)?;
            let actions = a.get_actions().await.map_err(|e| {
                let (kind, msg) = call_failed(e);
                if kind == Failure::Gone {
                    (kind, msg)
                } else {
                    (Failure::Unsupported, "the element has no actions".into())
                }
            })?;
            let names: Vec<String> = join_all((0..actions.len()).map(|i| a.get_name(i as i32)))
                .await
                .into_iter()
                .zip(&actions)
                .map(|(n, act)| n.ok().filter(|n| !n.is_empty()).unwrap_or(act.name.clone()))
                .collect();
            let index = if name.is_empty() {
                (!names.is_empty()).then_some(0)
            } else {
                names.iter().position(|n| n.eq_ignore_ascii_case(name))
            };
            let Some(index) = index else {
                return Err((
                    Failure::Unsupported,
                    format!("the element has no action {name:?}; it offers {names:?}"),
                ));
            };
            let done = a.do_action(index as i32).await.map_err(call_failed)?;
            if done {
                Ok(())
            } else {
                Err((
                    Failure::Unsupported,
                    format!("the application refused action {:?}", names[index]),
                ))
            }
        })
    }

    /// Sets an element's text (EditableText) or number (Value).
    pub(crate) fn set_value(&self, id: &str, value: &str) -> Result<(), Fail> {
        let (bus, path) = split_id(id).ok_or((Failure::Gone, "not an element".into()))?;
        zbus::block_on(async {
            let acc: AccessibleProxy<'_> = self.proxy(bus, path).await.map_err(call_failed)?;
            let ifaces = acc.get_interfaces().await.map_err(call_failed)?;
            if ifaces.contains(Interface::EditableText) {
                let t: EditableTextProxy<'_> = self.proxy(bus, path).await.map_err(call_failed)?;
                return match t.set_text_contents(value).await.map_err(call_failed)? {
                    true => Ok(()),
                    false => Err((
                        Failure::Unsupported,
                        "the application refused the text (read-only?)".into(),
                    )),
                };
            }
            if ifaces.contains(Interface::Value) {
                let number: f64 = value.trim().parse().map_err(|_| {
                    (
                        Failure::Unsupported,
                        format!("the element takes a number, not {value:?}"),
                    )
                })?;
                let v: ValueProxy<'_> = self.proxy(bus, path).await.map_err(call_failed)?;
                return v.set_current_value(number).await.map_err(call_failed);
            }
            Err((
                Failure::Unsupported,
                "the element has no editable text or value".into(),
            ))
        })
    }
}

fn refs(v: &[ObjectRefOwned]) -> Vec<(String, String)> {
    v.iter()
        .filter_map(|c| Some((c.name_as_str()?.to_string(), c.path_as_str().to_string())))
        .collect()
}

/// Cuts a string to at most `max` bytes on a character boundary.
fn cap(mut s: String, max: u32) -> String {
    let mut end = (max as usize).min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s
}

/// Reorders a breadth-first read into depth-first order with parent indexes.
fn depth_first(nodes: Vec<Node>, kids: &[Vec<usize>]) -> Vec<Node> {
    let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    if slots.is_empty() {
        return out;
    }
    // (breadth-first index, parent's depth-first index)
    let mut stack = vec![(0usize, None::<u32>)];
    while let Some((i, parent)) = stack.pop() {
        let Some(mut n) = slots[i].take() else {
            continue;
        };
        n.parent = parent;
        let me = out.len() as u32;
        out.push(n);
        stack.extend(kids[i].iter().rev().map(|&c| (c, Some(me))));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breadth_first_reads_come_out_depth_first() {
        let n = |id: &str| Node {
            id: id.into(),
            ..Default::default()
        };
        // a -> (b -> d, c)
        let nodes = vec![n("a"), n("b"), n("c"), n("d")];
        let kids = vec![vec![1, 2], vec![3], vec![], vec![]];
        let out = depth_first(nodes, &kids);
        let ids: Vec<_> = out.iter().map(|n| (n.id.as_str(), n.parent)).collect();
        assert_eq!(
            ids,
            [("a", None), ("b", Some(0)), ("d", Some(1)), ("c", Some(0))]
        );
    }

    #[test]
    fn text_caps_on_a_char_boundary() {
        assert_eq!(cap("héllo".into(), 2), "h");
        assert_eq!(cap("abc".into(), 10), "abc");
    }
}
