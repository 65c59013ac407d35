//! Apollo's clip path on the CPU, on the tiny Apollo-shaped model (engines/apollo/generate.py,
//! random weights; the "Measure" section of the model families issue): the clip encoder's frames
//! per second, prefill tokens per second, the decode step, and the time to the first token of a
//! question over 60 frames (15 clips of 4), re-encoded or from a live camera's cache.
//!
//! ```text
//! scripts/setup.sh           # generates engines/apollo/model
//! cargo bench --bench apollo
//! ```
//!
//! `EDGEVLM_APOLLO_DIR` names another clips model directory; `EDGEVLM_BENCH_THREADS` the intra-op
//! threads (default 1). A plain harness timing a few repetitions each (the median, and the
//! fastest), as `benches/smolvlm2.rs`.
//!
//! - `clips/1`, `clips/4`: one and four clips of 4 frames through the clip encoder.
//! - `ttft/60`: a question over 60 frames at 2 fps as a request with no live cache answers it:
//!   the 15 clips encoded, Apollo's video prompt (its header, 15 clip lines of 32 tokens), prefill
//!   from an empty cache, the first token; `prefill/60` that prefill alone, `decode_step/60` one
//!   step after it.
//! - `memory/60`: the same question asked of a live camera's cache (the family's live format, the
//!   clips prefilled as they came, untimed here): fork, the question's prefill, the first token;
//!   `append/60`, what each new clip's line costs the camera's cache, its encoding not counted.

mod common;

use common::{median_and_fastest, ms};

use edgevlm::engine::{EngineOptions, Engines};
use edgevlm::family::apollo::{self, ApolloVideo, ClipSlot, ConfigNumber};
use edgevlm::generate::render::Role;
use edgevlm::generate::{GenerateOptions, Generator};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FRAMES: usize = 60;
const QUESTION: &str = "What changed in the last 10 seconds?";

fn frame(i: usize, side: usize) -> Vec<u8> {
    // A square moving right over a gradient: content does not change the work.
    let mut out = vec![0u8; side * side * 3];
    for (p, px) in out.chunks_exact_mut(3).enumerate() {
        let (x, y) = (p % side, p / side);
        let inside =
            (x + side - 2 * i % side) % side < side / 4 && (side / 3..side / 2).contains(&y);
        px[0] = if inside { 240 } else { (x * 255 / side) as u8 };
        px[1] = if inside { 240 } else { (y * 255 / side) as u8 };
        px[2] = 90;
    }
    out
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it with no argument: nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dir = std::env::var_os("EDGEVLM_APOLLO_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("engines/apollo/model"));
    if !dir.join("manifest.toml").is_file() {
        eprintln!("{}: no manifest.toml; run scripts/setup.sh", dir.display());
        return;
    }
    let mut opts = EngineOptions::cpu(&dir);
    opts.engine.threads = common::threads() as u32;
    let engines = Arc::new(Engines::load(&opts).expect("the model loads"));
    let generator = Generator::new(Arc::clone(&engines));
    let m = engines.manifest();
    let hidden = m.text.hidden_size as usize;
    let vision = engines.vision();
    let clip = vision.clip().expect("a clips model");
    let side = m.vision.image_size.expect("image_size") as usize;
    let per_clip = clip.frames as usize;
    let clips = FRAMES / per_clip;
    let dev = common::device();
    println!(
        "{}: clips of {} frames over {} s -> {} tokens, {side}x{side}; text {} wide x {} layers; {dev}",
        dir.display(),
        clip.frames,
        clip.secs,
        clip.tokens,
        m.text.hidden_size,
        m.text.num_layers,
    );
    let frames: Vec<Vec<u8>> = (0..FRAMES).map(|i| frame(i, side)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let s = side as u32;

    for n in [1usize, 4] {
        let batch = &refs[..n * per_clip];
        let _ = vision.encode(batch, s, s).expect("encode");
        let times: Vec<Duration> = (0..5)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(vision.encode(batch, s, s).expect("encode"));
                t.elapsed()
            })
            .collect();
        let (median, best) = median_and_fastest(times);
        println!(
            "{dev}/clips/{n}: median {:.2} ms ({:.0} frames/s), fastest {:.2} ms",
            ms(median),
            (n * per_clip) as f64 / median.as_secs_f64(),
            ms(best)
        );
    }

    let fps = clip.fps();
    let slots: Vec<ClipSlot> = (0..clips)
        .map(|c| ClipSlot {
            start_secs: (c * per_clip) as f64 / fps,
            end_secs: ((c + 1) * per_clip - 1) as f64 / fps,
            tokens: clip.tokens as usize,
        })
        .collect();
    let rendered = apollo::prompt(
        &ApolloVideo {
            clips: slots.clone(),
            clip_duration: ConfigNumber::Float(clip.secs),
            duration_secs: FRAMES as f64 / fps,
        },
        QUESTION,
    )
    .expect("prompt");
    let q = common::question_from_scratch(&generator, &rendered, clips, 5, || {
        vision.encode(&refs, s, s).expect("encode")
    });
    let tokens = q.prompt_tokens;
    let (ttft, prefill, step) = (q.ttft, q.prefill, q.step);
    let (t_med, t_best) = median_and_fastest(ttft);
    let (p_med, _) = median_and_fastest(prefill);
    let (s_med, _) = median_and_fastest(step);
    println!(
        "{dev}/ttft/{FRAMES}: median {:.1} ms, fastest {:.1} ms ({tokens} prompt tokens, {clips} clips)",
        ms(t_med),
        ms(t_best)
    );
    println!(
        "{dev}/prefill/{FRAMES}: median {:.1} ms ({:.0} tokens/s)",
        ms(p_med),
        tokens as f64 / p_med.as_secs_f64()
    );
    println!(
        "{dev}/decode_step/{FRAMES}: {:.2} ms at {} positions",
        ms(s_med),
        tokens + 1
    );

    let one = GenerateOptions {
        max_new_tokens: 2,
        ..GenerateOptions::default()
    };

    // A live camera's cache: the prefix, then each clip's line, as `memory::live` appends them.
    let format = edgevlm::family::stream(m.family).expect("a streaming family");
    let features = vision.encode(&refs, s, s).expect("encode");
    let mut live = generator
        .prefill(
            &generator.empty_cache().expect("cache"),
            &format.prefix(None).prompt(&[], hidden).expect("prefix"),
        )
        .expect("prefill")
        .cache;
    let item = |c: &ClipSlot| {
        format
            .item(c.tokens, Some((c.start_secs, c.end_secs)))
            .expect("item")
    };
    for (i, c) in slots.iter().enumerate() {
        let r = item(c);
        let p = r.prompt(&[features.frame(i)], hidden).expect("rows");
        live = generator.prefill(&live, &p).expect("prefill").cache;
    }
    let ask = format.ask(Role::User, QUESTION);
    let ask = ask.prompt(&[], hidden).expect("ask");
    let memory: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let base = live.fork();
            let mut d = generator.start(&base, &ask, &one).expect("prefill");
            std::hint::black_box(d.next_token().expect("decode").expect("a token").id);
            t.elapsed()
        })
        .collect();
    let (m_med, m_best) = median_and_fastest(memory);
    println!(
        "{dev}/memory/{FRAMES}: median {:.2} ms, fastest {:.2} ms to the first token from a cache of \
         {} positions ({:.0}x the re-encoding request's median)",
        ms(m_med),
        ms(m_best),
        live.len(),
        t_med.as_secs_f64() / m_med.as_secs_f64()
    );
    let next = ClipSlot {
        start_secs: FRAMES as f64 / fps,
        end_secs: (FRAMES + per_clip - 1) as f64 / fps,
        tokens: clip.tokens as usize,
    };
    let next_item = item(&next);
    let next_prompt = next_item
        .prompt(&[features.frame(0)], hidden)
        .expect("rows");
    let append: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(generator.prefill(&live, &next_prompt).expect("prefill"));
            t.elapsed()
        })
        .collect();
    let (a_med, _) = median_and_fastest(append);
    println!(
        "{dev}/append/{FRAMES}: median {:.2} ms per new clip's line ({} positions) after {clips} clips",
        ms(a_med),
        item(&next)
            .token_ids(engines.tokenizer(), m.special_tokens.image)
            .len()
    );
}
