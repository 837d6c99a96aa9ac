//! The catalog: its profiles, the arguments `launch_app` takes, and the bundled launches.

use super::*;

#[test]
fn launch_arguments_are_paths_or_urls_never_flags_or_other_schemes() {
    use AppArgs::{Paths, PathsOrUrls, Urls};
    for (takes, arg) in [
        (Paths, "/home/user/a.odt"),
        (Paths, "notes.txt"),
        (Paths, "dir/with:colon/x"),
        (Urls, "https://example.org/?q=1"),
        (Urls, "about:blank"),
        (PathsOrUrls, "file:///home/user/x.html"),
        (PathsOrUrls, "/tmp/page.html"),
    ] {
        assert_eq!(takes.refuses(arg), None, "{takes:?} {arg}");
    }
    for (takes, arg) in [
        (AppArgs::None, "/home/user"),
        (Paths, "-e"),
        (Paths, "--"),
        (Paths, "macro:///Standard.Module1.Main"),
        (Paths, "vnd.sun.star.script:x"),
        (Paths, "https://example.org"),
        (Urls, "/home/user/x"),
        (Urls, "javascript:alert(1)"),
        (PathsOrUrls, "--renderer-cmd-prefix=sh"),
        (PathsOrUrls, "chrome://settings"),
        (PathsOrUrls, "a\nb"),
        (PathsOrUrls, ""),
    ] {
        assert!(takes.refuses(arg).is_some(), "{takes:?} {arg:?} was taken");
    }
    let c = Catalog::load(None).unwrap();
    let desktop = c.get("desktop").unwrap();
    assert!(!desktop.app_args.contains_key("terminal"));
    assert_eq!(desktop.app_args.get("editor"), Some(&Paths));
}

#[test]
fn the_bundled_catalog_loads_with_tasks_and_desktop() {
    let c = Catalog::load(None).unwrap();
    let tasks = c.get(TASKS_PROFILE).unwrap();
    assert!(!tasks.sandboxed());
    assert!(
        tasks.available(),
        "the tasks profile needs nothing: {:?}",
        tasks.missing
    );
    let desktop = c.get("desktop").unwrap();
    assert!(desktop.sandboxed());
    assert!(desktop.apps.contains_key("terminal"));
    assert!(!desktop.network);
    // The bundled sandboxed profiles run on the clock a fork replays (decision 201).
    for name in ["desktop", "osworld", "web"] {
        let p = c.get(name).unwrap();
        assert!(p.sandbox.as_ref().is_some_and(|s| s.clock), "{name}");
    }
}

#[test]
fn every_bundled_chromium_runs_without_smooth_scrolling_or_partial_swap() {
    // A launch is an app's argv (`"chromium", ...`) or a seed script's command
    // (`chromium --...`, continued over lines ending in `\`).
    let lines: Vec<&str> = BUNDLED.lines().collect();
    let mut launches = 0;
    for (i, line) in lines.iter().enumerate() {
        if !(line.contains("[\"chromium\",")
            || line.trim_start().starts_with("chromium --")
            || line.contains("-f chromium "))
        {
            continue;
        }
        let mut command = line.to_string();
        let mut j = i;
        while command.trim_end().ends_with('\\') && j + 1 < lines.len() {
            j += 1;
            command.push_str(lines[j]);
        }
        // No smooth scrolling (decision 189) and no partial swap (decision 216).
        for flag in ["--disable-smooth-scrolling", "--ui-disable-partial-swap"] {
            assert!(
                command.contains(flag),
                "line {}: {flag} missing from {command}",
                i + 1
            );
        }
        launches += 1;
    }
    assert!(
        launches >= 4,
        "found {launches} Chromium launches in the catalog"
    );
}

#[test]
fn a_profile_with_a_missing_program_names_its_package() {
    let dir = std::env::temp_dir().join(format!("deskgym-cat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("extra.toml");
    std::fs::write(
        &file,
        r#"
[profiles.ghost]
description = "needs a program nobody has"
sandbox = true
session = [{ argv = ["deskgym-no-such-program"] }]
requires = { deskgym-no-such-program = "deskgym-ghost-pkg" }
"#,
    )
    .unwrap();
    let c = Catalog::load(Some(&file)).unwrap();
    let g = c.get("ghost").unwrap();
    assert!(!g.available());
    assert!(
        g.missing.contains(&"deskgym-ghost-pkg".to_string()),
        "{:?}",
        g.missing
    );
    // Bundled profiles are still there.
    assert!(c.get("desktop").is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_profile_extends_another_and_cycles_are_refused() {
    let raw = tables(
        r#"
        [profiles.base]
        description = "b"
        sandbox = true
        session = [{ argv = ["a"] }]
        env = { X = "1", Y = "2" }
        [profiles.child]
        extends = "base"
        description = "c"
        session = [{ argv = ["b"] }]
        env = { Y = "3" }
        dirs = ["Desktop"]
        "#,
        "t",
    )
    .unwrap();
    let defs = parse(extend(raw).unwrap(), "t").unwrap();
    let c = &defs["child"];
    assert_eq!(c.description, "c");
    assert!(c.sandbox);
    let argv: Vec<_> = c.session.iter().map(|p| p.argv[0].as_str()).collect();
    assert_eq!(argv, ["a", "b"]);
    assert_eq!(c.env["X"], "1");
    assert_eq!(c.env["Y"], "3");
    assert_eq!(c.dirs, ["Desktop"]);
    for text in [
        "[profiles.a]\nextends = \"b\"\ndescription = \"\"\n[profiles.b]\nextends = \"a\"\ndescription = \"\"",
        "[profiles.a]\nextends = \"nope\"\ndescription = \"\"",
    ] {
        let e = extend(tables(text, "t").unwrap()).unwrap_err();
        assert!(e.contains("extends"), "{e}");
    }
    let e = parse(
        extend(
            tables(
                "[profiles.a]\ndescription = \"\"\nsandbox = true\ndirs = [\"../x\"]",
                "t",
            )
            .unwrap(),
        )
        .unwrap(),
        "t",
    )
    .unwrap_err();
    assert!(e.contains("dir"), "{e}");
}

#[test]
fn a_machine_built_home_goes_under_the_catalogs_files_and_may_be_missing() {
    let dir = std::env::temp_dir().join(format!("deskgym-cat-base-{}", std::process::id()));
    let base = dir.join("built");
    std::fs::create_dir_all(base.join(".config/app")).unwrap();
    std::fs::write(base.join(".config/app/state"), "from the app").unwrap();
    std::fs::write(base.join(".config/app/seeded"), "from the app").unwrap();
    let file = dir.join("extra.toml");
    let profile = |name: &str, at: &Path| {
        format!(
            "[profiles.{name}]\ndescription = \"b\"\nsandbox = true\n\
             home_base = {{ dir = {:?}, built_by = \"make-it\" }}\n\
             files = [{{ path = \".config/app/seeded\", content = \"from the catalog\" }},\n\
             {{ path = \".config/app/state\", content = \"stand-in\", keep_base = true }}]\n",
            at.display().to_string()
        )
    };
    let text = profile("built", &base) + &profile("unbuilt", &dir.join("nowhere"));
    std::fs::write(&file, text).unwrap();
    let c = Catalog::load(Some(&file)).unwrap();
    let home = |n: &str| {
        let p = c.get(n).unwrap();
        assert!(p.available(), "{:?}", p.missing);
        p.sandbox(&[], SandboxLimits::default())
            .unwrap()
            .home_template
            .unwrap()
    };
    let t = home("built");
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(t.join(".config/app/state")), "from the app");
    assert_eq!(read(t.join(".config/app/seeded")), "from the catalog");
    let t = home("unbuilt");
    // A `keep_base` file stands in for the base's where there is none.
    assert_eq!(read(t.join(".config/app/state")), "stand-in");
    assert_eq!(read(t.join(".config/app/seeded")), "from the catalog");
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_catalogs_are_refused_with_a_reason() {
    for (text, why) in [
        (
            "[profiles.tasks]\ndescription='x'\nsandbox=true",
            "must keep profile",
        ),
        (
            "[profiles.a]\ndescription='x'\nsandbox=true\nsession=[{argv=[]}]",
            "empty argv",
        ),
        (
            "[profiles.b]\ndescription='x'\nsandbox=true\nfiles=[{path='../x', content='y'}]",
            "relative path",
        ),
        ("[profiles.C]\ndescription='x'", "lowercase"),
        (
            "[profiles.d]\ndescription='x'\nsandbox=true\nhome_base={dir='rel', built_by='x'}",
            "absolute path",
        ),
        ("[profiles.c]\ndescription='x'\nbogus=1", "unknown field"),
        // System files: plain absolute paths in the system trees, on a sandbox, in a
        // directory small enough to bind again, at most eight.
        (
            "[profiles.e]\ndescription='x'\nsystem_files=[{path='/usr/share/x', content=''}]",
            "need `sandbox = true`",
        ),
        (
            "[profiles.e]\ndescription='x'\nsandbox=true\nsystem_files=[{path='usr/share/x', content=''}]",
            "must be an absolute path",
        ),
        (
            "[profiles.e]\ndescription='x'\nsandbox=true\nsystem_files=[{path='/usr/share/../../home/user/x', content=''}]",
            "no `.`, `..`",
        ),
        (
            "[profiles.e]\ndescription='x'\nsandbox=true\nsystem_files=[{path='/opt/x', content=''}]",
            "inside one of the system trees",
        ),
        (
            "[profiles.e]\ndescription='x'\nsandbox=true\nsystem_files=[{path='/etc/passwd', content=''}]",
            "deskgym's own",
        ),
        (
            "[profiles.e]\ndescription='x'\nsandbox=true\nsystem_files=[{path='/etc/x', content='', mode=0o4755}]",
            "permission bits",
        ),
        (
            "[profiles.e]\ndescription='x'\nsandbox=true\nsystem_files=[{path='/etc/x', text=''}]",
            "unknown field",
        ),
        (
            // Every Debian system has more than 256 programs in /usr/bin.
            "[profiles.e]\ndescription='x'\nsandbox=true\nsystem_files=[{path='/usr/bin/google-chrome-stable', content=''}]",
            "at most 256",
        ),
        (
            &format!(
                "[profiles.e]\ndescription='x'\nsandbox=true\nsystem_files=[{}]",
                (0..9)
                    .map(|i| format!("{{path='/etc/x{i}', content=''}}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            "9 system files; at most 8",
        ),
    ] {
        let dir = std::env::temp_dir().join(format!(
            "deskgym-cat-bad-{}-{}",
            std::process::id(),
            why.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(&f, text).unwrap();
        let e = Catalog::load(Some(&f)).unwrap_err();
        assert!(e.contains(why), "{text}: {e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn osworld_shows_google_chromes_desktop_entry_and_a_profile_replaces_its_bases() {
    let c = Catalog::load(None).unwrap();
    let sandbox = |p: &Profile| p.sandbox(&[], SandboxLimits::default()).unwrap();
    let osworld = sandbox(c.get("osworld").unwrap());
    let entry = osworld
        .system_files
        .iter()
        .find(|f| f.path == Path::new("/usr/share/applications/google-chrome.desktop"))
        .expect("osworld's google-chrome.desktop");
    assert_eq!(entry.mode, 0o644);
    // Launchable here: every Exec line names the home's `google-chrome` (which listens
    // on 1337 already), never Google's /usr/bin path, which no sandbox has.
    let execs: Vec<&str> = entry
        .content
        .lines()
        .filter(|l| l.starts_with("Exec="))
        .collect();
    assert_eq!(
        execs,
        [
            "Exec=google-chrome %U",
            "Exec=google-chrome",
            "Exec=google-chrome --incognito"
        ]
    );
    assert!(entry.content.contains("\nName=Google Chrome\n"));
    assert!(sandbox(c.get("desktop").unwrap()).system_files.is_empty());

    let dir = std::env::temp_dir().join(format!("deskgym-cat-sys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("extra.toml");
    std::fs::write(
        &file,
        r#"
[profiles.base]
description = "b"
sandbox = true
system_files = [
  { path = "/etc/deskgym-test.conf", content = "base" },
  { path = "/usr/share/deskgym-nowhere/x", content = "no such directory here" },
]
[profiles.child]
extends = "base"
description = "c"
system_files = [{ path = "/etc/deskgym-test.conf", content = "child", mode = 0o600 }]
"#,
    )
    .unwrap();
    let c = Catalog::load(Some(&file)).unwrap();
    let files = |n: &str| sandbox(c.get(n).unwrap()).system_files;
    // One file per path, the profile's own over its base's; a directory this host
    // lacks leaves its file out.
    assert_eq!(
        files("child"),
        [SystemFile {
            path: "/etc/deskgym-test.conf".into(),
            mode: 0o600,
            content: "child".into(),
        }]
    );
    assert_eq!(files("base")[0].content, "base");
    assert_eq!(files("base").len(), 1);
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}
