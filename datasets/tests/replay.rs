//! A bundle written by the recorder, read back for a replay: episodes, steps in order
//! with their actors, frames by hash (PNG, pixel for pixel), across chunks.

mod common;

use deskgym_datasets::Bundle;
use deskgym_datasets::{Actor, EpisodeRow, FrameRecord, Record, StepRow};

#[test]
fn a_recorded_episode_reads_back_in_order_with_its_frames() {
    // Every record rolls a chunk: the reader must follow frames across chunks.
    let (d, r) = common::recorder("replay", 1);
    let bundle = d.join("run.skn");
    let rgb = |v: u8| bytes::Bytes::from(vec![v; 4 * 2 * 3]);
    let hash = |v: u8| format!("{v:032x}");
    for v in 0..4u8 {
        r.send(Record::Frame(FrameRecord {
            hash: hash(v),
            width: 4,
            height: 2,
            rgb: rgb(v * 60),
            env_id: "e".into(),
            episode_id: Some("e/1".into()),
        }));
    }
    // Written out of order, the second by a person.
    for i in [3u32, 1, 2] {
        r.send(Record::Step(StepRow {
            episode_id: "e/1".into(),
            env_id: "e".into(),
            step_index: i,
            action_json: format!(r#"{{"verb":"click","x":{i},"y":0}}"#),
            frame_hash_before: hash(i as u8 - 1),
            frame_hash_after: Some(hash(i as u8)),
            actor: if i == 2 { Actor::Human } else { Actor::Agent },
            ..Default::default()
        }));
    }
    r.send(Record::Step(StepRow {
        episode_id: "other/1".into(),
        step_index: 1,
        action_json: "{}".into(),
        ..Default::default()
    }));
    r.send(Record::Episode(EpisodeRow {
        episode_id: "e/1".into(),
        env_id: "e".into(),
        task: "click-target".into(),
        length: 3,
        termination: "success".into(),
        ..Default::default()
    }));
    r.close().unwrap();

    let b = Bundle::open(&bundle).unwrap();
    let eps = b.episodes().unwrap();
    assert_eq!(eps.len(), 1);
    assert_eq!(
        (eps[0]["episode_id"].as_str(), eps[0]["length"].as_u64()),
        (Some("e/1"), Some(3))
    );
    let steps = b.steps("e/1").unwrap();
    let order: Vec<_> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(order, [1, 2, 3]);
    let actors: Vec<_> = steps.iter().map(|s| s["actor"].as_str().unwrap()).collect();
    assert_eq!(actors, ["agent", "human", "agent"]);
    assert_eq!(steps[1]["action"]["x"], 2);
    for v in 0..4u8 {
        let png = b.frame_png(&hash(v)).unwrap().expect("a recorded frame");
        let img = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = img.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (4, 2));
        assert!(
            buf[..info.buffer_size()].iter().all(|&p| p == v * 60),
            "frame {v}"
        );
    }
    assert!(b.frame_png(&hash(9)).unwrap().is_none());
    assert!(
        Bundle::open(&d).is_err(),
        "a directory without a manifest is no bundle"
    );
    let _ = std::fs::remove_dir_all(&d);
}
