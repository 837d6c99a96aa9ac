//! The parts actions share: targets, mouse buttons, key chords.

use deskgym_proto::v1 as pb;
use deskgym_worker::{Button, Point, parse_chord};

use super::Field;
use crate::a11y::{Sel, Slot, parse_ref};
use crate::spec::{Invalid, Screen};

/// Longest key chord in bytes: real chords are a few names joined by `+`
/// (`ctrl+shift+Page_Down` is 20); the bound keeps a hostile chord from holding a
/// step thread (a 4-million-key chord took 5 s) or bloating the error message.
pub(crate) const MAX_CHORD_BYTES: usize = 128;

/// Longest element query name or role, in bytes.
pub(super) const MAX_QUERY_BYTES: usize = 1024;

/// Element targets of one action, filled in by [`target`] as it meets them.
pub(super) type Elements = Vec<(Slot, Sel, String)>;

/// A target in pixels; an element target adds itself to `elements` (resolved when the
/// action runs) and stands in as (0, 0).
pub(super) fn target(
    t: Option<&pb::Target>,
    field: &Field,
    screen: Screen,
    slot: Slot,
    elements: &mut Elements,
) -> Result<Point, Invalid> {
    use pb::target::Kind;
    match t.and_then(|t| t.kind.as_ref()) {
        None => Err(Invalid::new(
            field,
            "target is not set; set point_px, point_norm, element_ref or element",
        )),
        Some(Kind::ElementRef(r)) => {
            let field = field.at("element_ref");
            elements.push((slot, Sel::Ref(parse_ref(r, field.as_str())?), field.into()));
            Ok(Point::default())
        }
        Some(Kind::Element(q)) => {
            elements.push((
                slot,
                query(q, &field.at("element"))?,
                field.at("element").into(),
            ));
            Ok(Point::default())
        }
        Some(Kind::PointPx(p)) => point_px(p, &field.at("point_px"), screen),
        Some(Kind::PointNorm(p)) => point_norm(p, &field.at("point_norm"), screen),
    }
}

/// An element named by role and name.
fn query(q: &pb::ElementQuery, field: &Field) -> Result<Sel, Invalid> {
    if q.name.is_empty() && q.role.trim().is_empty() {
        return Err(Invalid::new(
            field.at("name"),
            "name and role are empty; give the element's name, its role, or both \
             (or use element_ref)",
        ));
    }
    for (f, v) in [("name", &q.name), ("role", &q.role)] {
        if v.len() > MAX_QUERY_BYTES || v.contains('\0') {
            return Err(Invalid::new(
                field.at(f),
                format!("contains a NUL byte or is over {MAX_QUERY_BYTES} bytes"),
            ));
        }
    }
    Ok(Sel::Query {
        role: q.role.trim().to_string(),
        name: q.name.clone(),
    })
}

fn point_px(p: &pb::PointPx, field: &Field, screen: Screen) -> Result<Point, Invalid> {
    let (w, h) = (screen.width as i32, screen.height as i32);
    if p.x < 0 || p.y < 0 || p.x >= w || p.y >= h {
        return Err(Invalid::new(
            field,
            format!(
                "({}, {}) is outside the {w}x{h} screen (0 <= x < {w}, 0 <= y < {h})",
                p.x, p.y
            ),
        ));
    }
    Ok(Point { x: p.x, y: p.y })
}

fn point_norm(p: &pb::PointNorm, field: &Field, screen: Screen) -> Result<Point, Invalid> {
    let (w, h) = (screen.width as i32, screen.height as i32);
    for (axis, v) in [("x", p.x), ("y", p.y)] {
        if !(0.0..=1.0).contains(&v) {
            return Err(Invalid::new(
                field.at(axis),
                format!("{v} is outside [0, 1]"),
            ));
        }
    }
    Ok(Point {
        x: (p.x * f64::from(w - 1)).round() as i32,
        y: (p.y * f64::from(h - 1)).round() as i32,
    })
}

/// A target that may be left out (mouse down and up where the pointer is).
pub(super) fn optional_target(
    t: Option<&pb::Target>,
    field: &Field,
    screen: Screen,
    elements: &mut Elements,
) -> Result<Option<Point>, Invalid> {
    match t {
        Some(t) if t.kind.is_some() => target(Some(t), field, screen, Slot::At, elements).map(Some),
        _ => Ok(None),
    }
}

/// The target of an element verb: an element ref or query, never a point.
pub(super) fn element_only(
    t: Option<&pb::Target>,
    field: &Field,
    screen: Screen,
    elements: &mut Elements,
) -> Result<(), Invalid> {
    use pb::target::Kind;
    match t.and_then(|t| t.kind.as_ref()) {
        Some(Kind::ElementRef(_) | Kind::Element(_)) => {
            target(t, field, screen, Slot::Element, elements).map(|_| ())
        }
        _ => Err(Invalid::new(
            field,
            "this verb acts on an element: set element_ref (or element {role, name})",
        )),
    }
}

pub(super) fn button(raw: i32, field: &Field) -> Result<Button, Invalid> {
    match pb::MouseButton::try_from(raw) {
        Ok(pb::MouseButton::Unspecified | pb::MouseButton::Left) => Ok(Button::Left),
        Ok(pb::MouseButton::Middle) => Ok(Button::Middle),
        Ok(pb::MouseButton::Right) => Ok(Button::Right),
        Err(_) => Err(Invalid::new(field, format!("unknown mouse button {raw}"))),
    }
}

/// A validated key chord (bounded length, every name known).
pub(super) fn chord(keys: &str, field: &Field) -> Result<String, Invalid> {
    if keys.len() > MAX_CHORD_BYTES {
        return Err(Invalid::new(
            field,
            format!(
                "a chord of {} bytes is longer than the limit of {MAX_CHORD_BYTES}",
                keys.len()
            ),
        ));
    }
    parse_chord(keys).map_err(|m| Invalid::new(field, m))?;
    Ok(keys.to_string())
}
