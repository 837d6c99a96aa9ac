//! A profile's system files in a real sandbox (decision 218): each shows in its
//! directory beside the host's entries (links still links, folders and files the
//! host's), replaces a host file of its name, and nothing there can be written. Needs
//! the `desktop` profile's packages (`scripts/setup.sh --desktop`: Chromium's
//! `/etc/chromium.d`, openbox's link in `/etc/X11`).

mod common;

use std::path::Path;

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::ServerConfig;

/// The host's entries of `dir`, one `name type` line each (`f`, `d`, `l`: as `find
/// -printf '%f %y'` prints them), sorted.
fn host_entries(dir: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e} (needs `scripts/setup.sh --desktop`)"))
        .flatten()
        .map(|e| {
            let t = e.file_type().unwrap();
            let y = if t.is_symlink() {
                'l'
            } else if t.is_dir() {
                'd'
            } else {
                'f'
            };
            format!("{} {y}", e.file_name().to_string_lossy())
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_files_join_the_hosts_directories_read_only() {
    let data = std::env::temp_dir().join(format!("deskgym-sysfiles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    // /etc/X11 holds a link, folders and files on a desktop host; its first file is
    // replaced by the profile's.
    let x11 = host_entries("/etc/X11");
    for y in ['l', 'd', 'f'] {
        assert!(
            x11.iter().any(|e| e.ends_with(&format!(" {y}"))),
            "/etc/X11 lacks an entry of type {y}: {x11:?}"
        );
    }
    let replaced = x11
        .iter()
        .find_map(|e| e.strip_suffix(" f"))
        .unwrap()
        .to_string();
    let catalog = data.join("extra.toml");
    std::fs::write(
        &catalog,
        format!(
            r#"
[profiles.sysfiles]
description = "a sandbox with system files"
sandbox = true
system_files = [
  {{ path = "/usr/share/applications/deskgym-test.desktop", content = "[Desktop Entry]\nName=Test\n" }},
  {{ path = "/etc/chromium.d/deskgym-test", content = "export DESKGYM_TEST=1\n", mode = 0o600 }},
  {{ path = "/etc/X11/deskgym-test", content = "added\n" }},
  {{ path = "/etc/X11/{replaced}", content = "replaced\n" }},
]
"#
        ),
    )
    .unwrap();
    let server = TestServer::start(ServerConfig {
        data_dir: data.join("recordings"),
        profiles: Some(catalog),
        allow_capabilities: vec!["exec".into()],
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = c
        .create_pool(pb::CreatePoolRequest {
            profile: "sysfiles".into(),
            ..desktop_request(1, &["exec"])
        })
        .await
        .expect("a sandboxed pool (needs `scripts/setup.sh --desktop`)")
        .into_inner();
    let env = p.env_ids[0].clone();
    reset(&mut c, &env, 1).await;

    // The files, with their modes, readable by the sandbox's user.
    let r = run(
        &mut c,
        sh(
            &env,
            "cat /usr/share/applications/deskgym-test.desktop /etc/chromium.d/deskgym-test \
             /etc/X11/deskgym-test; stat -c %a /etc/chromium.d/deskgym-test /etc/X11/deskgym-test",
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(
        out(&r),
        "[Desktop Entry]\nName=Test\nexport DESKGYM_TEST=1\nadded\n600\n644"
    );
    let r = run(&mut c, sh(&env, &format!("cat /etc/X11/{replaced}"))).await;
    assert_eq!(out(&r), "replaced", "{r:?}");

    // Each directory: the host's entries as the host has them, and the added files
    // (deskgym's Chromium flags beside the profile's in /etc/chromium.d).
    for (dir, added) in [
        ("/usr/share/applications", &["deskgym-test.desktop"][..]),
        ("/etc/chromium.d", &["deskgym-test", "zz-deskgym"][..]),
        ("/etc/X11", &["deskgym-test"][..]),
    ] {
        let mut want = host_entries(dir);
        want.extend(added.iter().map(|n| format!("{n} f")));
        want.sort();
        let line = format!("find {dir} -mindepth 1 -maxdepth 1 -printf '%f %y\\n' | LC_ALL=C sort");
        let r = run(&mut c, sh(&env, &line)).await;
        assert_eq!(r.exit_code, Some(0), "{r:?}");
        assert_eq!(out(&r), want.join("\n"), "{dir}");
    }
    // A host file there reads as on the host; a link points where the host's does.
    let host_file = host_entries("/usr/share/applications")
        .into_iter()
        .find_map(|e| e.strip_suffix(" f").map(str::to_string))
        .unwrap();
    let path = format!("/usr/share/applications/{host_file}");
    let r = run(&mut c, sh(&env, &format!("cat '{path}'"))).await;
    assert_eq!(r.stdout, std::fs::read(&path).unwrap(), "{path}");
    let link = x11.iter().find_map(|e| e.strip_suffix(" l")).unwrap();
    let r = run(&mut c, sh(&env, &format!("readlink /etc/X11/{link}"))).await;
    let target = std::fs::read_link(Path::new("/etc/X11").join(link)).unwrap();
    assert_eq!(out(&r), target.to_string_lossy());

    // Nothing there can be added, changed, removed or renamed.
    for line in [
        "touch /usr/share/applications/new.desktop",
        "echo x >> /usr/share/applications/deskgym-test.desktop",
        "rm -f /etc/X11/deskgym-test",
        "mv /etc/chromium.d/deskgym-test /etc/chromium.d/moved",
        &format!("echo x > '{path}'"),
    ] {
        let r = run(&mut c, sh(&env, line)).await;
        assert_ne!(r.exit_code, Some(0), "{line}: {r:?}");
    }
    // A copy, as OSWorld's setups make one, is the user's to edit.
    let r = run(
        &mut c,
        sh(
            &env,
            "mkdir -p ~/.local/share/applications && cp /usr/share/applications/deskgym-test.desktop \
             ~/.local/share/applications && sed -i.bak -e 's#Name=Test#& Copy#g' \
             ~/.local/share/applications/deskgym-test.desktop && \
             grep Name= ~/.local/share/applications/deskgym-test.desktop",
        ),
    )
    .await;
    assert_eq!(out(&r), "Name=Test Copy", "{r:?}");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}
