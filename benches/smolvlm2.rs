//! SmolVLM2 on the CPU at the published 256M model's size (random weights; the "Measure" section of
//! the model families issue): vision encoder frames per second, prefill tokens per second, the
//! decode step, and the time to the first token of a question over 60 frames.
//!
//! ```text
//! .venv-export/bin/python engines/smolvlm2/reduced.py --shape 256m --out target/smolvlm2-256m
//! target/release/edgevlm engines init target/smolvlm2-256m
//! cargo bench --bench smolvlm2
//! ```
//!
//! `EDGEVLM_SMOLVLM2_DIR` names another directory (a real download after `engines init`);
//! `EDGEVLM_BENCH_THREADS` the intra-op threads (default 1). Runs of tens of seconds, so a plain
//! harness timing a few repetitions each (the median, and the fastest: on a shared machine
//! contention only adds time), not criterion.
//!
//! - `vision/1`, `vision/4`: one and four 512x512 frames through the vision encoder.
//! - `ttft/60`: a question over 60 frames at 1 fps, as a request with no live cache has to answer
//!   it: the vision encoder on the 60 frames, the family's video prompt (60 x 64 image tokens),
//!   prefill from an empty cache, the first token.
//! - `prefill/60`: the prefill part of it alone (features already encoded), as tokens per second.
//! - `decode_step/60`: one greedy step after that prompt.
//! - `memory/60`: the same question asked of a live camera's cache (the family's live format,
//!   `family::smolvlm2`: the 60 frames were encoded and prefilled as they arrived, untimed here):
//!   fork, the question's prefill, the first token; and `append/60`, what each new frame costs the
//!   camera's cache (its item prefilled after 60 frames), not counting its encoding (`vision/1`).

mod common;

use common::{median_and_fastest, ms};

use edgevlm::engine::{EngineOptions, Engines};
use edgevlm::family::smolvlm2;
use edgevlm::generate::render::{FrameSlot, Role};
use edgevlm::generate::{GenerateOptions, Generator};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FRAMES: usize = 60;
const QUESTION: &str = "What changed in the last 10 seconds?";

fn frame(i: usize) -> Vec<u8> {
    // A moving square over a gradient with noise: content does not change the work.
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
    let mut out = vec![0u8; 512 * 512 * 3];
    for (p, px) in out.chunks_exact_mut(3).enumerate() {
        let (x, y) = (p % 512, p / 512);
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let inside = (x + 512 - 8 * i) % 512 < 64 && (200..264).contains(&y);
        let base = if inside { 240 } else { (x / 2) as u8 };
        px[0] = base.wrapping_add((state & 7) as u8);
        px[1] = if inside { 240 } else { (y / 2) as u8 };
        px[2] = 90;
    }
    out
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it with no argument: nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dir = std::env::var_os("EDGEVLM_SMOLVLM2_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/smolvlm2-256m"));
    if !dir.join("manifest.toml").is_file() {
        eprintln!(
            "{}: no manifest.toml; make the model first (see benches/smolvlm2.rs)",
            dir.display()
        );
        return;
    }
    let mut opts = EngineOptions::cpu(&dir);
    opts.engine.threads = common::threads() as u32;
    let engines = Arc::new(Engines::load(&opts).expect("the model loads"));
    let generator = Generator::new(Arc::clone(&engines));
    let m = engines.manifest();
    let hidden = m.text.hidden_size as usize;
    let dev = common::device();
    println!(
        "{}: vision {} wide x {} layers, text {} wide x {} layers, vocab {}; {dev}",
        dir.display(),
        m.vision.encoder_hidden_size.unwrap_or(0),
        m.vision.encoder_layers.unwrap_or(0),
        m.text.hidden_size,
        m.text.num_layers,
        m.text.vocab_size
    );
    let frames: Vec<Vec<u8>> = (0..FRAMES).map(frame).collect();
    let vision = engines.vision();

    for n in [1usize, 4] {
        let refs: Vec<&[u8]> = frames[..n].iter().map(Vec::as_slice).collect();
        let _ = vision.encode(&refs, 512, 512).expect("encode");
        let times: Vec<Duration> = (0..3)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(vision.encode(&refs, 512, 512).expect("encode"));
                t.elapsed()
            })
            .collect();
        let (median, best) = median_and_fastest(times);
        println!(
            "{dev}/vision/{n}: median {:.0} ms ({:.2} frames/s), fastest {:.0} ms",
            ms(median),
            n as f64 / median.as_secs_f64(),
            ms(best)
        );
    }

    let slots: Vec<FrameSlot> = (0..FRAMES)
        .map(|i| FrameSlot {
            time_secs: i as f64,
            kept: smolvlm2::IMAGE_SEQ_LEN,
        })
        .collect();
    let rendered = smolvlm2::video_prompt(&slots, None, QUESTION).expect("prompt");
    let q = common::question_from_scratch(&generator, &rendered, FRAMES, 2, || {
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        vision.encode(&refs, 512, 512).expect("encode")
    });
    let tokens = q.prompt_tokens;
    let (ttft, prefill, step) = (q.ttft, q.prefill, q.step);
    let (t_med, t_best) = median_and_fastest(ttft);
    let (p_med, p_best) = median_and_fastest(prefill);
    let (s_med, _) = median_and_fastest(step);
    println!(
        "{dev}/ttft/{FRAMES}: median {:.1} s, fastest {:.1} s ({tokens} prompt tokens)",
        t_med.as_secs_f64(),
        t_best.as_secs_f64()
    );
    println!(
        "{dev}/prefill/{FRAMES}: median {:.1} s ({:.0} tokens/s), fastest {:.1} s",
        p_med.as_secs_f64(),
        tokens as f64 / p_med.as_secs_f64(),
        p_best.as_secs_f64()
    );
    println!(
        "{dev}/decode_step/{FRAMES}: {:.0} ms at {} positions",
        ms(s_med),
        tokens + 1
    );

    let one = GenerateOptions {
        max_new_tokens: 2,
        ..GenerateOptions::default()
    };

    // A live camera's cache: the prefix, then each frame's item, as `memory::live` appends them.
    let format = edgevlm::family::stream(m.family).expect("a streaming family");
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let features = vision.encode(&refs, 512, 512).expect("encode");
    let prefix = format.prefix(None);
    let mut live = generator
        .prefill(
            &generator.empty_cache().expect("cache"),
            &prefix.prompt(&[], hidden).expect("prefix"),
        )
        .expect("prefill")
        .cache;
    let item = |i: usize| {
        format
            .frame(smolvlm2::IMAGE_SEQ_LEN, Some(i as f64))
            .expect("item")
    };
    for i in 0..FRAMES {
        let r = item(i);
        let p = r.prompt(&[features.frame(i)], hidden).expect("rows");
        live = generator.prefill(&live, &p).expect("prefill").cache;
    }
    let ask = format.ask(Role::User, QUESTION);
    let ask_prompt = ask.prompt(&[], hidden).expect("ask");
    let mut memory = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let base = live.fork();
        let mut d = generator.start(&base, &ask_prompt, &one).expect("prefill");
        let first = d.next_token().expect("decode").expect("a token");
        memory.push(t.elapsed());
        std::hint::black_box(first.id);
    }
    let (m_med, m_best) = median_and_fastest(memory);
    println!(
        "{dev}/memory/{FRAMES}: median {:.0} ms, fastest {:.0} ms to the first token from a cache of \
         {} positions ({:.0}x the re-encoding request's median)",
        ms(m_med),
        ms(m_best),
        live.len(),
        t_med.as_secs_f64() / m_med.as_secs_f64()
    );
    let next = item(FRAMES);
    let next_prompt = next.prompt(&[features.frame(0)], hidden).expect("rows");
    let append: Vec<Duration> = (0..3)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(generator.prefill(&live, &next_prompt).expect("prefill"));
            t.elapsed()
        })
        .collect();
    let (a_med, _) = median_and_fastest(append);
    println!(
        "{dev}/append/{FRAMES}: median {:.0} ms per new frame's item ({} positions) after {FRAMES} frames",
        ms(a_med),
        next.token_ids(engines.tokenizer(), m.special_tokens.image)
            .len()
    );
}
