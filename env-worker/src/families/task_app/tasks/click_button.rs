//! `click-button`: click the button the instruction names; a wrong button ends the
//! episode with 0.

use super::{
    Area, BLACK, BUTTON, Draw, FontMetrics, GRAY, Handled, Input, Rect, Rng, Task, TaskSpec,
    Widget, place, text_y,
};

/// The registry entry.
pub(super) const SPEC: TaskSpec = TaskSpec::bundled(
    "click-button",
    "Click the button whose label the instruction names; a wrong button ends the episode.",
    10,
    layout,
);

const LABELS: &[&str] = &[
    "Submit", "Cancel", "OK", "Next", "Back", "Save", "Delete", "Open", "Close", "Help", "Yes",
    "No", "Retry", "Apply", "Reset", "Search",
];

#[derive(Clone, Debug)]
struct ClickButton {
    buttons: Vec<(Rect, &'static str)>,
    answer: usize,
}

fn layout(rng: &mut Rng, a: Area) -> (String, Box<dyn Task>) {
    let n = rng.range(3, 6) as usize;
    let mut labels: Vec<&'static str> = Vec::with_capacity(n);
    while labels.len() < n {
        let l = LABELS[rng.range(0, LABELS.len() as i32) as usize];
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    let sizes = vec![(a.unit * 2 + 20, a.unit); n];
    let boxes = place(rng, a.w, a.h, &sizes);
    let answer = rng.range(0, n as i32) as usize;
    let instruction = format!("Click the button labelled \"{}\".", labels[answer]);
    let task = ClickButton {
        buttons: boxes.into_iter().zip(labels).collect(),
        answer,
    };
    (instruction, Box::new(task))
}

impl Task for ClickButton {
    fn handle(&mut self, input: Input, _: Area) -> Handled {
        let Input::Press { button: 1, x, y } = input else {
            return Handled::NOTHING;
        };
        match self.buttons.iter().position(|(b, _)| b.contains(x, y)) {
            Some(i) => Handled::finished(if i == self.answer { 1.0 } else { 0.0 }),
            None => Handled::NOTHING,
        }
    }

    fn draw(&self, font: FontMetrics, d: &mut Vec<Draw>) {
        for (b, label) in &self.buttons {
            d.push(Draw::Rect {
                x: b.x,
                y: b.y,
                w: b.w,
                h: b.h,
                color: BUTTON,
            });
            d.push(Draw::Frame {
                x: b.x,
                y: b.y,
                w: b.w,
                h: b.h,
                color: GRAY,
                width: 2,
            });
            let tw = font.char_width * label.len() as i32;
            d.push(Draw::Text {
                x: b.x + (b.w - tw) / 2,
                y: text_y(font, b.y, b.h),
                text: (*label).to_string(),
                fg: BLACK,
                bg: BUTTON,
            });
        }
    }

    fn hint(&self) -> Vec<(i32, i32)> {
        vec![self.buttons[self.answer].0.center()]
    }

    fn widgets(&self) -> Vec<Widget> {
        self.buttons
            .iter()
            .map(|(b, label)| Widget::new("push button", *label, *b))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: Area = Area {
        w: 640,
        h: 480,
        unit: 40,
    };

    #[test]
    fn wrong_button_ends_with_zero() {
        let press = |(x, y): (i32, i32)| Input::Press { button: 1, x, y };
        for seed in 0..20 {
            let (_, t) = layout(&mut Rng::new(seed), AREA);
            let right = t.clone().handle(press(t.hint()[0]), AREA);
            assert_eq!(right.finished, Some(1.0));
            let wrong = t.clone().handle(press(other_button(&*t)), AREA);
            assert_eq!(wrong.finished, Some(0.0));
        }
    }

    /// The centre of a button that is not the answer, found by probing the scene.
    fn other_button(t: &dyn Task) -> (i32, i32) {
        let mut d = Vec::new();
        t.draw(super::super::tests::FONT, &mut d);
        let answer = t.hint()[0];
        d.iter()
            .find_map(|op| match op {
                Draw::Rect { x, y, w, h, color } if *color == BUTTON => {
                    let c = (x + w / 2, y + h / 2);
                    (c != answer).then_some(c)
                }
                _ => None,
            })
            .expect("at least two buttons")
    }
}
