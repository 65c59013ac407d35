//! SmolVLM2's video prompt against transformers' own `SmolVLMProcessor`: the text and the ids of
//! every case engines/smolvlm2/prompt_reference.py wrote (frame counts in words, `MM:SS` frame
//! times past an hour, durations with and without the video's, non-ASCII questions), with the
//! tiny model's byte-level BPE and SmolVLM2's special tokens (scripts/test.sh makes the fixture).

use edgevlm::engine::Tokenizer;
use edgevlm::family::smolvlm2;
use edgevlm::generate::render::FrameSlot;
use std::path::Path;

#[test]
fn video_prompts_give_the_processors_text_and_ids() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/smolvlm2-prompt");
    let cases = dir.join("cases.json");
    let text = std::fs::read_to_string(&cases).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run .venv-export/bin/python engines/smolvlm2/prompt_reference.py",
            cases.display()
        )
    });
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    let image = tokenizer
        .added_token_id(smolvlm2::IMAGE_PLACEHOLDER)
        .expect("the fixture's tokenizer has <image>");
    let seq = json["image_seq_len"].as_u64().unwrap() as usize;
    assert_eq!(seq, smolvlm2::IMAGE_SEQ_LEN);
    let cases = json["cases"].as_array().unwrap();
    assert!(cases.len() >= 4);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let frames: Vec<FrameSlot> = case["times"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| FrameSlot {
                time_secs: t.as_f64().unwrap(),
                kept: seq,
            })
            .collect();
        let r = smolvlm2::video_prompt(
            &frames,
            case["duration"].as_f64(),
            case["question"].as_str().unwrap(),
        )
        .unwrap();
        assert_eq!(r.text(), case["text"].as_str().unwrap(), "{name}: text");
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(r.token_ids(&tokenizer, image), want, "{name}: ids");
        assert_eq!(r.visual_tokens(), frames.len() * seq, "{name}");
    }
}
