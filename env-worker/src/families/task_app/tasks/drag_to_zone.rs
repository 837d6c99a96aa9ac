//! `drag-to-zone`: drag the orange square into the green zone.

use super::{
    Area, BAR_HEIGHT, Draw, FontMetrics, GREEN, Handled, Input, ORANGE, Rect, Rng, Task, TaskSpec,
    Widget, place,
};

/// The registry entry.
pub(super) const SPEC: TaskSpec = TaskSpec::bundled(
    "drag-to-zone",
    "Drag the orange square into the green zone.",
    10,
    layout,
);

#[derive(Clone, Debug)]
struct DragToZone {
    item: Rect,
    zone: Rect,
    /// Offset of the grab point inside the item while a drag is on.
    grab: Option<(i32, i32)>,
}

fn layout(rng: &mut Rng, a: Area) -> (String, Box<dyn Task>) {
    let u = a.unit;
    let boxes = place(rng, a.w, a.h, &[(u, u), (u * 3, u * 3)]);
    let task = DragToZone {
        item: boxes[0],
        zone: boxes[1],
        grab: None,
    };
    (
        "Drag the orange square into the green zone.".to_string(),
        Box::new(task),
    )
}

impl Task for DragToZone {
    fn handle(&mut self, input: Input, a: Area) -> Handled {
        match (input, self.grab) {
            (Input::Press { button: 1, x, y }, _) => {
                if self.item.contains(x, y) {
                    self.grab = Some((x - self.item.x, y - self.item.y));
                }
                Handled::NOTHING
            }
            (Input::Motion { x, y }, Some((ox, oy))) => {
                self.item.x = (x - ox).clamp(0, a.w - self.item.w);
                self.item.y = (y - oy).clamp(BAR_HEIGHT, a.h - self.item.h);
                Handled::CHANGED
            }
            (Input::Release { button: 1, .. }, Some(_)) => {
                self.grab = None;
                let (cx, cy) = self.item.center();
                if self.zone.contains(cx, cy) {
                    Handled::finished(1.0)
                } else {
                    Handled::CHANGED
                }
            }
            _ => Handled::NOTHING,
        }
    }

    fn draw(&self, _: FontMetrics, d: &mut Vec<Draw>) {
        let (z, i) = (self.zone, self.item);
        d.push(Draw::Frame {
            x: z.x,
            y: z.y,
            w: z.w,
            h: z.h,
            color: GREEN,
            width: 4,
        });
        d.push(Draw::Rect {
            x: i.x,
            y: i.y,
            w: i.w,
            h: i.h,
            color: ORANGE,
        });
    }

    fn hint(&self) -> Vec<(i32, i32)> {
        vec![self.item.center(), self.zone.center()]
    }

    fn widgets(&self) -> Vec<Widget> {
        vec![
            Widget::new("panel", "green zone", self.zone),
            Widget::new("panel", "orange square", self.item),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::super::Episode;
    use super::*;

    #[test]
    fn drag_into_zone_succeeds() {
        let mut e = Episode::new("drag-to-zone", 11, 1280, 720).unwrap();
        let h = e.hint();
        e.handle(Input::Press {
            button: 1,
            x: h[0].0,
            y: h[0].1,
        });
        e.handle(Input::Motion {
            x: h[1].0,
            y: h[1].1,
        });
        e.handle(Input::Release {
            button: 1,
            x: h[1].0,
            y: h[1].1,
        });
        assert_eq!(e.reward(), 1.0);
    }
}
