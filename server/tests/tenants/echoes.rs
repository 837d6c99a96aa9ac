//! Reproduction 5: console errors echoed client strings whole (300 characters back).
//! Every console route and every RPC that takes a string is called with a
//! 300-character value in it; no answer may carry more than 64 characters of it.

use deskgym_proto::v1 as pb;
use deskgym_server::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::shares::{fake, small_pool};
use super::{Client, as_};

/// The hostile value, and what may never come back: 65 of its characters in a row.
fn long() -> String {
    "Z".repeat(300)
}

fn assert_bounded(what: &str, text: &str) {
    assert!(
        !text.contains(&"Z".repeat(65)) && !text.contains(&"0".repeat(65)),
        "{what} echoed the client's value: {}",
        &text[..text.len().min(400)]
    );
}

/// `method path` with `body`, acting (the console header) as `token`: the reply.
async fn call(
    at: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    token: &str,
) -> String {
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\n\
         x-deskgym-console: 1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    // A live view that opened streams on: its head is enough.
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(2), s.read_to_end(&mut reply)).await;
    String::from_utf8_lossy(&reply).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_error_echoes_more_than_64_characters_of_a_client_string() {
    let mut f = fake("alice: aaa\n", Limits::default(), "127.0.0.1:0").await;
    let p =
        f.c.create_pool(as_("aaa", small_pool(1)))
            .await
            .unwrap()
            .into_inner();
    let env = p.env_ids[0].clone();
    let z = long();
    let num = format!("1{}", "0".repeat(299));
    let routes: Vec<(&str, String, String)> = vec![
        ("GET", format!("/env/{z}"), String::new()),
        ("GET", format!("/api/envs/{z}"), String::new()),
        ("GET", format!("/api/envs/{z}/thumb.jpg"), String::new()),
        ("GET", format!("/api/envs/{z}/live"), String::new()),
        (
            "GET",
            format!("/api/envs/{env}/live?codec={z}"),
            String::new(),
        ),
        (
            "GET",
            format!("/api/envs/{env}/live?fps={num}"),
            String::new(),
        ),
        (
            "GET",
            format!("/api/envs/{env}/live?max_long_edge={num}"),
            String::new(),
        ),
        ("GET", format!("/api/envs/{z}/feed"), String::new()),
        ("GET", format!("/api/envs/{z}/tree"), String::new()),
        ("POST", format!("/api/envs/{z}/takeover"), String::new()),
        ("POST", format!("/api/envs/{z}/release"), String::new()),
        ("POST", format!("/api/envs/{z}/act"), String::new()),
        ("POST", format!("/api/envs/{z}/reset"), String::new()),
        (
            "POST",
            "/api/login".into(),
            format!("{{\"token\": \"{z}\"}}"),
        ),
        (
            "POST",
            "/api/demos".into(),
            format!("{{\"task\": \"{z}\"}}"),
        ),
        ("POST", format!("/api/demos/{z}/finish"), String::new()),
        ("GET", format!("/api/runs/{z}/episodes"), String::new()),
        (
            "GET",
            format!("/api/runs/{z}/steps?episode={z}"),
            String::new(),
        ),
        ("GET", format!("/api/runs/{z}/frames/{z}"), String::new()),
        (
            "GET",
            format!("/api/runs/{z}/frames/{}", "0".repeat(32)),
            String::new(),
        ),
        ("GET", format!("/{z}"), String::new()),
    ];
    for (method, path, body) in &routes {
        let reply = call(f.console, method, path, body, "aaa").await;
        assert_bounded(&format!("{method} {}", &path[..path.len().min(40)]), &reply);
    }
    // The held env's act route, with a hostile action body.
    call(
        f.console,
        "POST",
        &format!("/api/envs/{env}/takeover"),
        "",
        "aaa",
    )
    .await;
    for body in [
        format!("{{\"verb\": \"{z}\"}}"),
        format!("{{\"verb\": \"key\", \"key\": \"{z}\"}}"),
        format!("{{\"verb\": \"type_text\", \"text\": 1, \"{z}\": 2}}"),
    ] {
        let reply = call(
            f.console,
            "POST",
            &format!("/api/envs/{env}/act"),
            &body,
            "aaa",
        )
        .await;
        assert_bounded("POST act", &reply);
    }
    rpcs(&mut f.c, &env, &z).await;
    f.stop().await;
}

/// Every RPC that takes a string, with the long value in each string field.
async fn rpcs(c: &mut Client, env: &str, z: &str) {
    let s = || z.to_string();
    macro_rules! each {
        ($($name:literal => $call:expr),* $(,)?) => {
            $(
                if let Err(e) = $call.await {
                    assert_bounded($name, e.message());
                }
            )*
        };
    }
    let mut c2 = c.clone();
    let step = |env: String| pb::StepRequest {
        env_id: env,
        action: Some(pb::Action {
            verb: Some(pb::action::Verb::TypeText(pb::TypeText {
                text: z.repeat(1000),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    each! {
        "CreatePool.task" => c.create_pool(as_("aaa", pb::CreatePoolRequest { task: s(), num_envs: 1, ..Default::default() })),
        "CreatePool.profile" => c.create_pool(as_("aaa", pb::CreatePoolRequest { profile: s(), ..small_pool(1) })),
        "CreatePool.record" => c.create_pool(as_("aaa", pb::CreatePoolRequest { record: s(), ..small_pool(1) })),
        "CreatePool.capabilities" => c.create_pool(as_("aaa", pb::CreatePoolRequest { capabilities: vec![s()], ..small_pool(1) })),
        "CreatePool.task_options" => c.create_pool(as_("aaa", pb::CreatePoolRequest { task_options: [(s(), s())].into(), ..small_pool(1) })),
        "ClosePool" => c.close_pool(as_("aaa", pb::ClosePoolRequest { pool_id: s() })),
        "Reset" => c.reset(as_("aaa", pb::ResetRequest { env_id: s(), ..Default::default() })),
        "Step.env_id" => c.step(as_("aaa", step(s()))),
        "Step.text" => c2.step(as_("aaa", step(env.to_string()))),
        "Observe" => c.observe(as_("aaa", pb::ObserveRequest { env_id: s(), if_none_match: vec![s()], ..Default::default() })),
        "GetFrames" => c.get_frames(as_("aaa", pb::GetFramesRequest { hashes: vec![s()], ..Default::default() })),
        "Save" => c.save(as_("aaa", pb::SaveRequest { env_id: s(), ..Default::default() })),
        "Restore" => c.restore(as_("aaa", pb::RestoreRequest { env_id: env.to_string(), checkpoint_id: s(), ..Default::default() })),
        "Fork" => c.fork(as_("aaa", pb::ForkRequest { checkpoint_id: s(), ..Default::default() })),
        "ListCheckpoints" => c.list_checkpoints(as_("aaa", pb::ListCheckpointsRequest { pool_id: s() })),
        "DeleteCheckpoint" => c.delete_checkpoint(as_("aaa", pb::DeleteCheckpointRequest { checkpoint_id: s() })),
        "KeepAlive" => c.keep_alive(as_("aaa", pb::KeepAliveRequest { pool_ids: vec![s()] })),
        "Exec" => c.exec(as_("aaa", pb::ExecRequest { env_id: s(), shell: s(), ..Default::default() })),
        "Screencast" => c.screencast(as_("aaa", pb::ScreencastRequest { env_id: s(), ..Default::default() })),
        "ListWindows" => c.list_windows(as_("aaa", pb::ListWindowsRequest { env_id: s() })),
        "GetFile" => c.get_file(as_("aaa", pb::GetFileRequest { env_id: env.to_string(), path: s(), offset: 0 })),
        "ListDirectory" => c.list_directory(as_("aaa", pb::ListDirectoryRequest { env_id: env.to_string(), path: s(), ..Default::default() })),
        "GetClipboard" => c.get_clipboard(as_("aaa", pb::GetClipboardRequest { env_id: s() })),
        "SetClipboard" => c.set_clipboard(as_("aaa", pb::SetClipboardRequest { env_id: s(), text: s() })),
        "Screenshot" => c.screenshot(as_("aaa", pb::ScreenshotRequest { env_id: s(), if_none_match: vec![s()], ..Default::default() })),
        "GetRecordingFile" => c.get_recording_file(as_("aaa", pb::GetRecordingFileRequest { run: s(), path: s(), ..Default::default() })),
        "DeleteRecording" => c.delete_recording(as_("aaa", pb::DeleteRecordingRequest { run: s() })),
    }
}
