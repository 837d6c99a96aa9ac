//! The artifact channel against the real server: the content-addressed store (dedup,
//! privacy between principals, chunk checksums, resumable uploads, shares) and directory
//! trees in and out of a sandboxed desktop (modes kept, symlinks never followed, bounds).
//! The tree test needs the `desktop` profile's packages (`scripts/setup.sh --desktop`).

mod common;

use std::time::Duration;

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::ServerConfig;
use sha2::Digest;
use tonic::Code;

fn sha(data: &[u8]) -> String {
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An upload's messages: `data` from `offset` in `step`-byte chunks, the first naming
/// the upload, the last (when `last`) ending it with the whole content's hash.
fn chunks(
    id: &str,
    whole: &[u8],
    offset: usize,
    step: usize,
    last: bool,
) -> Vec<pb::ArtifactChunk> {
    let mut out = Vec::new();
    let mut at = offset;
    loop {
        let end = (at + step).min(whole.len());
        let data = whole[at..end].to_vec();
        let is_last = last && end == whole.len();
        out.push(pb::ArtifactChunk {
            upload_id: if out.is_empty() {
                id.into()
            } else {
                String::new()
            },
            offset: at as u64,
            crc32: crc32fast::hash(&data),
            data,
            last: is_last,
            sha256: if is_last { sha(whole) } else { String::new() },
            ..Default::default()
        });
        at = end;
        if at == whole.len() {
            return out;
        }
    }
}

async fn upload(
    c: &mut Client,
    token: &str,
    msgs: Vec<pb::ArtifactChunk>,
) -> Result<pb::Artifact, tonic::Status> {
    c.upload_artifact(as_(token, tokio_stream::iter(msgs)))
        .await
        .map(|r| r.into_inner())
}

async fn download(c: &mut Client, token: &str, sha: &str) -> Result<Vec<u8>, tonic::Status> {
    let req = pb::DownloadArtifactRequest {
        sha256: sha.into(),
        offset: 0,
    };
    let mut s = c.download_artifact(as_(token, req)).await?.into_inner();
    let mut out = Vec::new();
    while let Some(m) = s.message().await? {
        assert_eq!(crc32fast::hash(&m.data), m.crc32, "a chunk's checksum");
        assert_eq!(m.offset as usize, out.len());
        out.extend_from_slice(&m.data);
    }
    Ok(out)
}

async fn held(c: &mut Client, token: &str, id: &str) -> u64 {
    let req = pb::ArtifactUploadStatusRequest {
        upload_id: id.into(),
    };
    c.artifact_upload_status(as_(token, req))
        .await
        .unwrap()
        .into_inner()
        .offset
}

// spec: aci:6.artifacts-store aci:6.artifacts-resume
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_are_stored_once_private_checked_and_resumable() {
    let data = std::env::temp_dir().join(format!("deskgym-artifacts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = TestServer::start(ServerConfig {
        data_dir: data.clone(),
        principals: deskgym_server::parse_token_file("alice: aaa artifact_mb=1\nbob: bbb\n")
            .unwrap(),
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();

    // Stored, addressed by the SHA-256 of the content, read back chunk-checked.
    let a = upload(
        &mut c,
        "aaa",
        chunks("first-upload", &body, 0, 100_000, true),
    )
    .await
    .unwrap();
    assert_eq!((a.sha256.clone(), a.size), (sha(&body), body.len() as u64));
    assert_eq!(download(&mut c, "aaa", &a.sha256).await.unwrap(), body);

    // Bob cannot read Alice's artifact by its hash: NOT_FOUND, word for word as for a
    // hash nobody stored.
    let other = download(&mut c, "bbb", &a.sha256).await.unwrap_err();
    let unknown = download(&mut c, "bbb", &sha(b"nobody")).await.unwrap_err();
    assert_eq!(
        (other.code(), unknown.code()),
        (Code::NotFound, Code::NotFound)
    );
    assert_eq!(
        other.message().replace(&a.sha256, "X"),
        unknown.message().replace(&sha(b"nobody"), "X")
    );
    // Once he uploads the same bytes himself they are his too, stored once.
    let b = upload(
        &mut c,
        "bbb",
        chunks("bobs-upload", &body, 0, 64 << 10, true),
    )
    .await
    .unwrap();
    assert_eq!(b.sha256, a.sha256);
    let blobs = std::fs::read_dir(data.join("artifacts/blobs"))
        .unwrap()
        .count();
    assert_eq!(blobs, 1);

    // A damaged chunk is DATA_LOSS; what came before it is held and the upload resumes.
    let other_body: Vec<u8> = body.iter().rev().copied().collect();
    let mut msgs = chunks("resumable-1", &other_body, 0, 100_000, true);
    msgs[1].crc32 ^= 1;
    let e = upload(&mut c, "aaa", msgs).await.unwrap_err();
    assert_eq!(e.code(), Code::DataLoss, "{e:?}");
    assert!(e.message().contains("offset 100000"), "{}", e.message());
    assert_eq!(held(&mut c, "aaa", "resumable-1").await, 100_000);
    // Resuming past what is held is refused with the offset to use.
    let e = upload(
        &mut c,
        "aaa",
        chunks("resumable-1", &other_body, 200_000, 100_000, true),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("100000"), "{}", e.message());
    // A call cut before its last chunk keeps what it sent.
    let mut msgs = chunks("resumable-1", &other_body, 100_000, 100_000, true);
    msgs.pop();
    let e = upload(&mut c, "aaa", msgs).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(held(&mut c, "aaa", "resumable-1").await, 200_000);
    let r = upload(
        &mut c,
        "aaa",
        chunks("resumable-1", &other_body, 200_000, 100_000, true),
    )
    .await
    .unwrap();
    assert_eq!(r.sha256, sha(&other_body));
    assert_eq!(
        download(&mut c, "aaa", &r.sha256).await.unwrap(),
        other_body
    );
    // Bob's id space is his own: Alice's unfinished uploads are not his.
    assert_eq!(held(&mut c, "bbb", "resumable-1").await, 0);

    // A declared hash that is not the content's: DATA_LOSS, nothing stored.
    let mut msgs = chunks("wrong-hash", b"abc", 0, 10, true);
    msgs[0].sha256 = sha(b"abd");
    let e = upload(&mut c, "aaa", msgs).await.unwrap_err();
    assert_eq!(e.code(), Code::DataLoss);
    assert!(download(&mut c, "aaa", &sha(b"abc")).await.is_err());

    // Alice's share is 1 MiB; she holds 600 000 bytes.
    let caps = c
        .get_capabilities(as_("aaa", pb::GetCapabilitiesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let art = caps.limits.unwrap().artifacts.unwrap();
    assert_eq!((art.share_bytes, art.used_bytes), (1 << 20, 600_000));
    let big = vec![7u8; 600_000];
    let e = upload(&mut c, "aaa", chunks("too-big-1", &big, 0, 100_000, true))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(e.message().contains("DeleteArtifact"), "{}", e.message());
    // Deleting the unfinished upload and an artifact frees the share; the upload fits.
    let del = |sha256: &str, upload_id: &str| pb::DeleteArtifactRequest {
        sha256: sha256.into(),
        upload_id: upload_id.into(),
    };
    let freed = c
        .delete_artifact(as_("aaa", del("", "too-big-1")))
        .await
        .unwrap()
        .into_inner()
        .freed_bytes;
    assert_eq!(freed, 400_000);
    c.delete_artifact(as_("aaa", del(&a.sha256, "")))
        .await
        .unwrap();
    upload(&mut c, "aaa", chunks("fits-now-1", &big, 0, 100_000, true))
        .await
        .unwrap();
    // Bob still reads the content Alice deleted her reference to.
    assert_eq!(download(&mut c, "bbb", &a.sha256).await.unwrap(), body);
    let e = c
        .delete_artifact(as_("aaa", del(&a.sha256, "")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

// spec: aci:6.artifacts-resume
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_nobody_resumes_is_swept_and_its_share_released() {
    let data = std::env::temp_dir().join(format!("deskgym-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = TestServer::start(ServerConfig {
        data_dir: data.clone(),
        principals: deskgym_server::parse_token_file("alice: aaa artifact_mb=1\n").unwrap(),
        // Long enough that the first calls below see the cut upload still held.
        upload_idle: Some(Duration::from_secs(5)),
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    // 600 KB cut before its end: held, and more than the rest of Alice's 1 MiB share.
    let body: Vec<u8> = (0..700_000u32).map(|i| (i % 253) as u8).collect();
    let mut msgs = chunks("left-behind", &body, 0, 100_000, true);
    msgs.truncate(6);
    let e = upload(&mut c, "aaa", msgs).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(held(&mut c, "aaa", "left-behind").await, 600_000);
    let big: Vec<u8> = vec![1; 600_000];
    let e = upload(&mut c, "aaa", chunks("second-one", &big, 0, 100_000, true))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    let _ = c
        .delete_artifact(as_(
            "aaa",
            pb::DeleteArtifactRequest {
                upload_id: "second-one".into(),
                ..Default::default()
            },
        ))
        .await;
    // Nobody resumes it: a sweep (every 1.25 s here) removes it once 5 s idle; the
    // wait is bounded only so that a server that never sweeps fails the test.
    let mut left = 600_000;
    for _ in 0..300 {
        left = held(&mut c, "aaa", "left-behind").await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(left, 0, "the abandoned upload was never swept");
    // Its bytes went back to the share: the same 600 KB now fit.
    let r = upload(&mut c, "aaa", chunks("second-two", &big, 0, 100_000, true))
        .await
        .unwrap();
    assert_eq!(r.size, 600_000);

    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

fn entry(kind: pb::TreeEntryKind, path: &str, mode: u32, size: u64, data: &[u8]) -> pb::TreeEntry {
    pb::TreeEntry {
        kind: kind as i32,
        path: path.into(),
        mode,
        size,
        data: data.to_vec().into(),
        crc32: crc32fast::hash(data),
        ..Default::default()
    }
}

// spec: aci:6.artifacts-tree
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_go_in_and_out_with_their_modes_and_bounds() {
    use pb::TreeEntryKind as K;
    let data = std::env::temp_dir().join(format!("deskgym-trees-{}", std::process::id()));
    let server = TestServer::start(ServerConfig {
        data_dir: data.join("recordings"),
        allow_capabilities: vec!["files".into(), "exec".into()],
        limits: deskgym_server::Limits {
            max_tree_depth: 3,
            ..Default::default()
        },
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = desktop_pool(&mut c, 1, &["files", "exec"]).await;
    let env = p.env_ids[0].clone();
    reset(&mut c, &env, 1).await;

    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 239) as u8).collect();
    let root = pb::TreeEntry {
        kind: K::Root as i32,
        env_id: env.clone(),
        path: "work/task".into(),
        ..Default::default()
    };
    let mut msgs = vec![
        root.clone(),
        entry(K::Dir, "bin", 0o750, 0, b""),
        entry(K::File, "bin/run.sh", 0o755, 10, b"#!/bin/sh\n"),
        entry(K::Dir, "ro", 0o555, 0, b""),
        entry(K::File, "ro/frozen", 0o444, 5, b"fixed"),
        entry(K::File, "empty", 0o600, 0, b""),
        entry(K::File, "big.bin", 0o644, big.len() as u64, &big[..1 << 20]),
    ];
    for piece in big[1 << 20..].chunks(1 << 20) {
        msgs.push(entry(K::Data, "", 0, 0, piece));
    }
    let put = c
        .put_dir(tokio_stream::iter(msgs.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((put.files, put.dirs), (4, 2));
    assert_eq!(put.bytes, 15 + big.len() as u64);
    assert_eq!(put.path, "/home/user/work/task");
    // Seen from inside: the modes as sent, not the umask's.
    let seen = run(
        &mut c,
        sh(&env, "cd work/task && stat -c '%a %n' bin bin/run.sh ro ro/frozen empty big.bin && sha256sum big.bin && ./bin/run.sh && echo ran"),
    )
    .await;
    assert_eq!(
        out(&seen),
        format!(
            "750 bin\n755 bin/run.sh\n555 ro\n444 ro/frozen\n600 empty\n644 big.bin\n{}  big.bin\nran",
            sha(&big)
        )
    );

    // A symlink out of the tree is left out, never followed.
    run(
        &mut c,
        sh(
            &env,
            "ln -s /etc/passwd work/task/passwd && ln -s bin work/task/bin-link",
        ),
    )
    .await;
    let mut s = c
        .get_dir(pb::GetDirRequest {
            env_id: env.clone(),
            path: "work/task".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut got: Vec<pb::TreeEntry> = Vec::new();
    while let Some(m) = s.message().await.unwrap() {
        assert_eq!(crc32fast::hash(&m.data), m.crc32);
        got.push(m);
    }
    assert_eq!(got[0].kind, K::Root as i32);
    assert_eq!(got[0].path, "/home/user/work/task");
    let end = got.last().unwrap();
    assert_eq!(end.kind, K::End as i32);
    assert_eq!(end.skipped, ["bin-link", "passwd"]);
    assert_eq!((end.entries, end.size), (6, 15 + big.len() as u64));
    let modes: Vec<(String, u32)> = got
        .iter()
        .filter(|m| m.kind == K::Dir as i32 || m.kind == K::File as i32)
        .map(|m| (m.path.clone(), m.mode))
        .collect();
    for (path, mode) in [
        ("bin", 0o750),
        ("bin/run.sh", 0o755),
        ("ro", 0o555),
        ("ro/frozen", 0o444),
    ] {
        assert!(
            modes.contains(&(path.to_string(), mode)),
            "{path}: {modes:?}"
        );
    }
    let at = got.iter().position(|m| m.path == "big.bin").unwrap();
    let back: Vec<u8> = got[at..]
        .iter()
        .take_while(|m| {
            m.kind != K::End as i32 && (m.path == "big.bin" || m.kind == K::Data as i32)
        })
        .flat_map(|m| m.data.to_vec())
        .collect();
    assert_eq!(back, big);

    // Hostile trees: escapes, a damaged chunk, too deep, bytes beyond a file's size.
    let bad = |m: pb::TreeEntry| vec![root.clone(), m];
    for path in ["../escape", "/etc/x", "a/../../x", "a//b"] {
        let e = c
            .put_dir(tokio_stream::iter(bad(entry(
                K::File,
                path,
                0o644,
                1,
                b"x",
            ))))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{path}: {e:?}");
        assert!(e.message().contains("path"), "{}", e.message());
    }
    let mut damaged = entry(K::File, "f", 0o644, 1, b"x");
    damaged.crc32 ^= 1;
    let e = c
        .put_dir(tokio_stream::iter(bad(damaged)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::DataLoss);
    let e = c
        .put_dir(tokio_stream::iter(bad(entry(
            K::Dir,
            "a/b/c/d",
            0o755,
            0,
            b"",
        ))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(e.message().contains("max_tree_depth=3"), "{}", e.message());
    let e = c
        .put_dir(tokio_stream::iter(bad(entry(
            K::File,
            "f",
            0o644,
            1,
            b"xy",
        ))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .put_dir(tokio_stream::iter(vec![pb::TreeEntry {
            path: "/etc".into(),
            ..root.clone()
        }]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    // A tree deeper than the bound is refused before any file goes out.
    run(&mut c, sh(&env, "mkdir -p work/deep/a/b/c/d")).await;
    let mut s = c
        .get_dir(pb::GetDirRequest {
            env_id: env.clone(),
            path: "work/deep".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let e = s.message().await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}
