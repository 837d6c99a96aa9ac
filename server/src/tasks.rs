//! Every task the server can run, in one registry: each family's tasks
//! (`crate::families`: the bundled tasks, declarative TOML tasks, the `miniwob/<name>`
//! web pages) loaded once at start, found by id, and the error for an id that is none
//! of them.

use std::path::Path;
use std::sync::Arc;

pub(crate) use crate::families::TaskDef;
use crate::invalid::{Invalid, quote};
use crate::profiles::Catalog;

/// Every task of this server.
#[derive(Debug)]
pub(crate) struct Tasks {
    all: Vec<Arc<TaskDef>>,
}

impl Default for Tasks {
    fn default() -> Self {
        Self {
            all: crate::families::bundled_tasks(),
        }
    }
}

impl Tasks {
    /// Every family's tasks: the bundled ones, every `*.toml` of `dir` (checked against
    /// `profiles`), and the MiniWoB++ pages of the `miniwob` package at `miniwob` when
    /// the catalog has the `web` profile.
    pub(crate) fn load(
        dir: Option<&Path>,
        miniwob: Option<&Path>,
        profiles: &Catalog,
    ) -> Result<Self, String> {
        Ok(Self {
            all: crate::families::load(dir, miniwob, profiles)?,
        })
    }

    /// The error for `asked`, an id of no task: the ids closest to it, every task a
    /// family lists, and what the others add (how many web pages there are).
    pub(crate) fn unknown(&self, asked: &str) -> Invalid {
        let close = self.close_to(asked);
        let known: Vec<_> = self
            .all
            .iter()
            .filter(|t| t.family.rules().listed())
            .map(|t| t.id.as_str())
            .collect();
        let close = if close.is_empty() {
            String::new()
        } else {
            format!(" (did you mean {}?)", close.join(", "))
        };
        let note = crate::families::unknown_note(&self.all, asked);
        Invalid::new(
            "task",
            format!(
                "unknown task {}{close}. Known tasks: {}{note}",
                quote(asked),
                known.join(", ")
            ),
        )
    }

    /// A task by id.
    pub(crate) fn get(&self, id: &str) -> Option<&Arc<TaskDef>> {
        self.all.iter().find(|t| t.id == id)
    }

    /// Up to five known ids closest to a mistyped `id` (edit distance), for the error.
    pub(crate) fn close_to(&self, id: &str) -> Vec<&str> {
        let mut scored: Vec<(usize, &str)> = self
            .all
            .iter()
            .map(|t| (edit_distance(id, &t.id), t.id.as_str()))
            .filter(|(d, t)| *d <= (t.len() / 3).max(3))
            .collect();
        scored.sort();
        scored.into_iter().take(5).map(|(_, t)| t).collect()
    }

    /// Every task, bundled first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<TaskDef>> {
        self.all.iter()
    }
}

/// Levenshtein distance (ids are short; quadratic is fine).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::families::TaskFamily;
    use deskgym_worker::SetupStep;

    #[test]
    fn bundled_tasks_load_with_their_apps_resolved() {
        let profiles = Catalog::load(None).unwrap();
        let tasks = Tasks::load(None, None, &profiles).unwrap();
        assert!(matches!(
            tasks.get("click-target").unwrap().family,
            TaskFamily::Bundled
        ));
        let t = tasks.get("desktop/editor-save").unwrap();
        let TaskFamily::Script(s) = &t.family else {
            panic!("{t:?} is not a declarative task")
        };
        assert!(
            s.setup
                .iter()
                .any(|st| matches!(st, SetupStep::Launch(argv) if argv[0] == "mousepad")),
            "{s:?}"
        );
        assert_eq!(
            tasks
                .iter()
                .filter(|t| t.id.starts_with("desktop/"))
                .count(),
            5
        );
    }

    #[test]
    fn miniwob_pages_become_tasks_and_typos_find_them() {
        let profiles = Catalog::load(None).unwrap();
        let dir = std::env::temp_dir().join(format!("deskgym-miniwob-{}", std::process::id()));
        let pages = dir.join("html").join("miniwob");
        std::fs::create_dir_all(&pages).unwrap();
        for p in ["click-button.html", "click-checkboxes.html", "notes.txt"] {
            std::fs::write(pages.join(p), "").unwrap();
        }
        let tasks = Tasks::load(None, Some(&dir), &profiles).unwrap();
        let t = tasks.get("miniwob/click-button").unwrap();
        assert_eq!(t.profile, "web");
        assert_eq!(t.screen, Some((160, 210)));
        let TaskFamily::Web(page) = &t.family else {
            panic!("{t:?} is not a web task")
        };
        assert_eq!(page.path, "miniwob/click-button.html");
        assert!(tasks.get("miniwob/notes").is_none());
        assert_eq!(
            tasks.close_to("miniwob/click-buton")[0],
            "miniwob/click-button"
        );
        assert!(tasks.close_to("zzzzzzzzzzzzzzzzzzzzzzzzzz").is_empty());
        let e = Tasks::load(None, Some(&dir.join("nope")), &profiles).unwrap_err();
        assert!(e.contains("html/miniwob"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_task_files_say_why() {
        let profiles = Catalog::load(None).unwrap();
        let dir = std::env::temp_dir().join(format!("deskgym-tasks-{}", std::process::id()));
        for (text, why) in [
            (
                "[[task]]\nid='x'\nprofile='moon'\ninstruction='i'\ncheck='true'",
                "unknown profile",
            ),
            (
                "[[task]]\nid='x'\nprofile='tasks'\ninstruction='i'\ncheck='true'",
                "no sandbox",
            ),
            (
                "[[task]]\nid='x'\nprofile='desktop'\ninstruction='i'\ncheck='true'\nsetup=[{launch='nope'}]",
                "no app",
            ),
            (
                "[[task]]\nid='x'\nprofile='desktop'\ninstruction='i'\ncheck='true'\nsetup=[{exec='a', file='b'}]",
                "exactly one",
            ),
            (
                "[[task]]\nid='click-target'\nprofile='desktop'\ninstruction='i'\ncheck='true'",
                "twice",
            ),
            (
                "[[task]]\nid='Bad Id'\nprofile='desktop'\ninstruction='i'\ncheck='true'",
                "lowercase",
            ),
        ] {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("t.toml"), text).unwrap();
            let e = Tasks::load(Some(&dir), None, &profiles).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
