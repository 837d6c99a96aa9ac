//! `click-target`: click the red circle among distractor squares. A miss does nothing.

use super::{
    Area, BLUE, Draw, FontMetrics, Handled, Input, RED, Rect, Rng, Task, TaskSpec, Widget, place,
};

/// The registry entry.
pub(super) const SPEC: TaskSpec = TaskSpec::bundled(
    "click-target",
    "Click the red circle among distractor squares.",
    10,
    layout,
);

#[derive(Clone, Debug)]
struct ClickTarget {
    /// Centre and radius.
    target: (i32, i32, i32),
    distractors: Vec<Rect>,
}

fn layout(rng: &mut Rng, a: Area) -> (String, Box<dyn Task>) {
    let r = rng.range(a.unit / 2, a.unit);
    let mut sizes = vec![(2 * r, 2 * r)];
    let n = rng.range(2, 5) as usize;
    for _ in 0..n {
        let s = rng.range(a.unit / 2, a.unit * 3 / 2);
        sizes.push((s, s));
    }
    let boxes = place(rng, a.w, a.h, &sizes);
    let (cx, cy) = boxes[0].center();
    let task = ClickTarget {
        target: (cx, cy, r),
        distractors: boxes[1..].to_vec(),
    };
    ("Click the red circle.".to_string(), Box::new(task))
}

impl Task for ClickTarget {
    fn handle(&mut self, input: Input, _: Area) -> Handled {
        let Input::Press { button: 1, x, y } = input else {
            return Handled::NOTHING;
        };
        let (cx, cy, r) = self.target;
        let (dx, dy) = ((x - cx) as i64, (y - cy) as i64);
        if dx * dx + dy * dy <= (r as i64) * (r as i64) {
            Handled::finished(1.0)
        } else {
            Handled::NOTHING
        }
    }

    fn draw(&self, _: FontMetrics, d: &mut Vec<Draw>) {
        for b in &self.distractors {
            d.push(Draw::Rect {
                x: b.x,
                y: b.y,
                w: b.w,
                h: b.h,
                color: BLUE,
            });
        }
        let (cx, cy, r) = self.target;
        d.push(Draw::Circle {
            cx,
            cy,
            r,
            color: RED,
        });
    }

    fn hint(&self) -> Vec<(i32, i32)> {
        vec![(self.target.0, self.target.1)]
    }

    fn widgets(&self) -> Vec<Widget> {
        let (cx, cy, r) = self.target;
        let circle = Rect {
            x: cx - r,
            y: cy - r,
            w: 2 * r,
            h: 2 * r,
        };
        let mut w: Vec<Widget> = self
            .distractors
            .iter()
            .map(|b| Widget::new("panel", "blue square", *b))
            .collect();
        w.push(Widget::new("panel", "red circle", circle));
        w
    }
}

#[cfg(test)]
mod tests {
    use super::super::Episode;
    use super::*;

    #[test]
    fn rewards_only_a_hit() {
        let mut e = Episode::new("click-target", 3, 640, 480).unwrap();
        assert!(!e.handle(Input::Press {
            button: 1,
            x: 0,
            y: 0
        }));
        assert!(!e.done());
        let (x, y) = e.hint()[0];
        e.handle(Input::Press { button: 1, x, y });
        assert!(e.done());
        assert_eq!(e.reward(), 1.0);
    }
}
