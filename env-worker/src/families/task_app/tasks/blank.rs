//! `blank`: no goal. On the `tasks` profile an empty screen; on any other profile the
//! session as it starts. Reward 0, never terminates (max_steps truncates): for agents
//! and tools that bring their own goal.

use super::{Area, Draw, FontMetrics, Handled, Input, Rng, Task, TaskSpec};

/// The registry entry.
pub(super) const SPEC: TaskSpec = TaskSpec {
    // Its logic needs no app of its own.
    any_profile: true,
    ..TaskSpec::bundled(
        "blank",
        "No goal: reward 0, never terminates. Runs on every profile.",
        1000,
        layout,
    )
};

#[derive(Clone, Debug)]
struct Blank;

fn layout(_: &mut Rng, _: Area) -> (String, Box<dyn Task>) {
    (String::new(), Box::new(Blank))
}

impl Task for Blank {
    fn handle(&mut self, _: Input, _: Area) -> Handled {
        Handled::NOTHING
    }

    fn draw(&self, _: FontMetrics, _: &mut Vec<Draw>) {}

    fn hint(&self) -> Vec<(i32, i32)> {
        Vec::new()
    }
}
