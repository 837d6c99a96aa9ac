//! MiniWoB++'s reward processors and the DevTools key table.

use super::input::{key_def, modifier_bit};
use super::*;

#[test]
fn reward_processors_match_miniwob() {
    let s = Score {
        done: true,
        env_reward: 0.8,
        raw_reward: 1.0,
        reason: None,
    };
    assert_eq!(s.reward(Reward::Original), 0.8);
    assert_eq!(s.reward(Reward::Raw), 1.0);
    assert_eq!(s.reward(Reward::Binary), 1.0);
    let partial = Score {
        raw_reward: 0.5,
        ..s.clone()
    };
    assert_eq!(partial.reward(Reward::Binary), -1.0);
    let running = Score::default();
    assert_eq!(running.reward(Reward::Binary), 0.0);
}

#[test]
fn keys_have_dom_names() {
    let enter = key_def(keys::RETURN).unwrap();
    assert_eq!((enter.key.as_str(), enter.vk), ("Enter", 13));
    let a = key_def(u32::from('a')).unwrap();
    assert_eq!(
        (a.code.as_str(), a.vk, a.text.as_deref()),
        ("KeyA", 65, Some("a"))
    );
    assert!(key_def(0x0100_00e9).is_none());
    assert_eq!(modifier_bit(0xffe3) | modifier_bit(0xffe1), 10);
}

#[test]
fn keypad_and_function_keys_are_webdrivers() {
    // As WebDriver's `<Numpad5>`, `<NumpadAdd>`, `<NumpadEnter>` and `<F12>` send them.
    let five = key_def(0xffb5).unwrap();
    assert_eq!(
        (
            five.key.as_str(),
            five.code.as_str(),
            five.vk,
            five.text.as_deref()
        ),
        ("5", "Numpad5", 101, Some("5"))
    );
    let add = key_def(0xffab).unwrap();
    assert_eq!((add.code.as_str(), add.vk), ("NumpadAdd", 107));
    let enter = key_def(0xff8d).unwrap();
    assert_eq!(
        (enter.key.as_str(), enter.code.as_str()),
        ("Enter", "NumpadEnter")
    );
    let f12 = key_def(0xffc9).unwrap();
    assert_eq!((f12.key.as_str(), f12.vk, f12.text), ("F12", 123, None));
}

#[test]
fn a_chord_with_a_key_the_page_cannot_take_sends_nothing_and_holds_nothing() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let cdp = super::super::cdp::peer(move |ws| {
        // Everything that arrives until the page side closes, each answered.
        while let Ok(m) = ws.read() {
            let Ok(t) = m.to_text() else { continue };
            let v: Value = serde_json::from_str(t).unwrap_or_default();
            log.lock().unwrap().push(t.to_string());
            let _ = ws.send(tungstenite::Message::text(
                json!({"id": v["id"], "result": {}}).to_string(),
            ));
        }
    });
    let spec = WebSpec {
        url: "file:///nowhere".into(),
        browser: Vec::new(),
        clock: Clock::Steps { step_ms: 100 },
        reward: Reward::Original,
        ready_ms: 1_000,
        data_mode: "train".into(),
        reload: false,
    };
    let mut page = Page {
        cdp,
        spec: Arc::new(spec),
        steps: 0,
        pointer: Point::default(),
        held: Vec::new(),
        loaded: true,
    };
    let e = page.step(&Action::Key("shift+F13".into())).unwrap_err();
    assert!(e.to_string().contains("no DOM key"), "{e}");
    assert!(page.held.is_empty(), "shift stayed held: {:?}", page.held);
    drop(page);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        seen.lock().unwrap().is_empty(),
        "sent: {:?}",
        seen.lock().unwrap()
    );
}
