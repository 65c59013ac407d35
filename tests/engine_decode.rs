//! The decoder and the generation loop on the tiny model (engines/tiny/generate.py) with real
//! ONNX Runtime sessions: incremental decoding against full recomputation, cache forks, greedy and
//! seeded sampling, stop conditions, streamed text, the context limit, and the per-stage engine
//! counters.

mod engine_common;

use edgevlm::engine::{EngineStatsSnapshot, Engines, LogitRows, SpecialText};
use edgevlm::generate::{
    GenerateError, GenerateOptions, Generator, Prompt, Sampling, StopReason, Temperature, TopP,
    Truncation,
};
use engine_common::max_abs_diff;
use std::sync::Arc;

/// Logits of incremental decoding may differ from one long prefill only by float reassociation
/// (different matmul shapes): 1e-4 absolute, on logits of magnitude ~1-10 (the bound
/// engines/tiny/check.py uses for ONNX Runtime in Python).
const LOGIT_TOLERANCE: f32 = 1e-4;

/// A chat prompt with two frames of visual tokens interleaved with text, in VideoLLaMA3's offline
/// format (docs/REFERENCE.md §1c).
fn video_prompt(g: &Generator) -> (Vec<f32>, Vec<f32>) {
    let vision = g.engines().vision();
    let a = engine_common::frame(56, 56, 1);
    let b = engine_common::frame(56, 56, 2);
    let tokens = vision.encode(&[&a, &b], 56, 56).unwrap();
    (tokens.frame(0).to_vec(), tokens.frame(1).to_vec())
}

fn chat<'a>(
    m: &'a edgevlm::engine::Manifest,
    f0: &'a [f32],
    f1: &'a [f32],
    question: &'a str,
) -> Prompt<'a> {
    let c = &m.chat_template;
    let mut p = Prompt::new();
    p.text(format!(
        "{}{}{}",
        c.system_prefix, c.default_system, c.turn_end
    ))
    .text(c.user_prefix.as_str())
    .text("Time 0.0s:")
    .visual(f0)
    .text(",Time 1.0s:")
    .visual(f1)
    .text("\n")
    .untrusted_text(question)
    .text(c.turn_end.as_str())
    .text(c.assistant_prefix.as_str());
    p
}

#[test]
fn incremental_decoding_gives_the_logits_of_one_full_recomputation() {
    let g = engine_common::generator();
    let (f0, f1) = video_prompt(&g);
    let m = g.engines().manifest().clone();
    let (embeds, n) = g
        .embed_prompt(&chat(&m, &f0, &f1, "What is the cat doing?"))
        .unwrap();
    let hidden = m.text.hidden_size as usize;
    let vocab = m.text.vocab_size as usize;
    let decoder = g.engines().decoder();
    let positions: Vec<i64> = (0..n as i64).collect();
    let full = decoder
        .forward(
            &decoder.empty_cache().unwrap(),
            &embeds,
            &positions,
            LogitRows::All,
        )
        .unwrap();
    assert_eq!(full.rows, n);

    // Prefill n-9, then a chunk of 3, then 6 single steps, each returning every row.
    let mut cuts = vec![0, n - 9, n - 6];
    cuts.extend(n - 5..=n);
    let mut cache = decoder.empty_cache().unwrap();
    let mut worst = 0f32;
    for w in cuts.windows(2) {
        let (s, e) = (w[0], w[1]);
        let out = decoder
            .forward(
                &cache,
                &embeds[s * hidden..e * hidden],
                &positions[s..e],
                LogitRows::All,
            )
            .unwrap();
        assert_eq!(out.present.len(), e);
        let d = max_abs_diff(&out.logits, &full.logits[s * vocab..e * vocab]);
        worst = worst.max(d);
        cache = out.present;
    }
    eprintln!("incremental vs full: max abs logit difference {worst:e} over {n} positions");
    assert!(
        worst <= LOGIT_TOLERANCE,
        "incremental logits differ from the full run by {worst:e}"
    );
    let scale = full.logits.iter().fold(0f32, |a, x| a.max(x.abs()));
    assert!(scale > 0.5, "logits are suspiciously flat ({scale})");

    // The generator's chunked prefill (chunks of 4) lands on the same last-row logits.
    let mut opts = engine_common::options(&engine_common::tiny_dir());
    opts.engine.prefill_chunk_tokens = 4;
    let chunked = Generator::new(Arc::new(Engines::load(&opts).unwrap()));
    let p = chunked
        .prefill(
            &chunked.empty_cache().unwrap(),
            &chat(&m, &f0, &f1, "What is the cat doing?"),
        )
        .unwrap();
    assert_eq!(p.tokens, n);
    let d = max_abs_diff(&p.logits, &full.logits[(n - 1) * vocab..]);
    assert!(d <= LOGIT_TOLERANCE, "chunked prefill differs by {d:e}");
}

#[test]
fn a_forked_cache_shares_the_parents_tensors_and_decoding_it_leaves_the_parent_unchanged() {
    let g = engine_common::generator();
    let (f0, f1) = video_prompt(&g);
    let m = g.engines().manifest().clone();
    let camera = g
        .prefill(&g.empty_cache().unwrap(), &chat(&m, &f0, &f1, "Describe."))
        .unwrap()
        .cache;
    let before = camera.len();
    let mut probe = Prompt::new();
    probe.text("probe");
    let logits_before = g.prefill(&camera, &probe).unwrap().logits;

    let query = camera.fork();
    assert!(
        query.shares_storage_with(&camera),
        "a fork must not copy the cache"
    );
    let mut q = Prompt::new();
    q.untrusted_text("And then?");
    let answer = g
        .generate(
            &query,
            &q,
            &GenerateOptions {
                max_new_tokens: 12,
                ..Default::default()
            },
            |_| {},
        )
        .unwrap();
    assert!(answer.cache.len() > before);
    assert!(!answer.cache.shares_storage_with(&camera));

    assert_eq!(camera.len(), before);
    assert_eq!(query.len(), before);
    let logits_after = g.prefill(&camera, &probe).unwrap().logits;
    assert_eq!(
        logits_before, logits_after,
        "the parent cache changed under a fork"
    );
}

#[test]
fn greedy_generation_is_deterministic_and_does_not_just_repeat_one_token() {
    let run = || {
        let g = engine_common::generator();
        let (f0, f1) = video_prompt(&g);
        let m = g.engines().manifest().clone();
        let opts = GenerateOptions {
            max_new_tokens: 20,
            stop_tokens: Some(vec![]),
            ..Default::default()
        };
        g.generate(
            &g.empty_cache().unwrap(),
            &chat(&m, &f0, &f1, "What now?"),
            &opts,
            |_| {},
        )
        .unwrap()
    };
    let a = run();
    let b = run();
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.text, b.text);
    assert_eq!(a.tokens.len(), 20);
    assert_eq!(a.stop, StopReason::TokenLimit);
    let distinct: std::collections::HashSet<_> = a.tokens.iter().collect();
    assert!(distinct.len() > 3, "{:?}", a.tokens);
}

#[test]
fn seeded_sampling_is_reproducible_and_the_seed_matters() {
    let g = engine_common::generator();
    let m = g.engines().manifest().clone();
    let (f0, f1) = video_prompt(&g);
    let prompt = chat(&m, &f0, &f1, "Tell me.");
    let cache = g.prefill(&g.empty_cache().unwrap(), &prompt).unwrap();
    let sample = |seed| {
        let opts = GenerateOptions {
            max_new_tokens: 24,
            stop_tokens: Some(vec![]),
            sampling: Sampling::Random {
                temperature: Temperature::new(1.0).unwrap(),
                truncation: Truncation::TopP(TopP::new(0.95).unwrap()),
                seed,
            },
            ..Default::default()
        };
        let mut p = Prompt::new();
        p.text("x");
        g.generate(&cache.cache, &p, &opts, |_| {}).unwrap().tokens
    };
    assert_eq!(sample(42), sample(42));
    assert_ne!(sample(42), sample(43));
}

#[test]
fn generation_stops_on_a_stop_token_or_the_token_limit_and_says_what_was_not_fed() {
    let g = engine_common::generator();
    let mut p = Prompt::new();
    p.text("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
    let empty = g.empty_cache().unwrap();
    let free = g
        .generate(
            &empty,
            &p,
            &GenerateOptions {
                max_new_tokens: 10,
                stop_tokens: Some(vec![]),
                ..Default::default()
            },
            |_| {},
        )
        .unwrap();
    assert_eq!(free.stop, StopReason::TokenLimit);
    assert_eq!(free.unfed, vec![*free.tokens.last().unwrap()]);
    assert_eq!(free.cache.len(), free.prompt_tokens + 9);

    // Stop on the first token that greedy decoding produces for the third time it is new.
    let k = (0..free.tokens.len())
        .find(|&i| i >= 2 && !free.tokens[..i].contains(&free.tokens[i]))
        .expect("a new token after two");
    let stop = free.tokens[k];
    let stopped = g
        .generate(
            &empty,
            &p,
            &GenerateOptions {
                max_new_tokens: 10,
                stop_tokens: Some(vec![stop]),
                ..Default::default()
            },
            |_| {},
        )
        .unwrap();
    assert_eq!(stopped.stop, StopReason::EndOfTurn(stop));
    assert_eq!(stopped.tokens, free.tokens[..k]);
    assert_eq!(stopped.unfed, vec![stop]);
    assert_eq!(stopped.cache.len(), stopped.prompt_tokens + k);

    let none = g
        .generate(
            &empty,
            &p,
            &GenerateOptions {
                max_new_tokens: 0,
                ..Default::default()
            },
            |_| {},
        )
        .unwrap();
    assert!(none.tokens.is_empty() && none.stop == StopReason::TokenLimit);
}

#[test]
fn streamed_deltas_add_up_to_the_final_text() {
    let g = engine_common::generator();
    let mut p = Prompt::new();
    p.text("<|im_start|>user\nsay something<|im_end|>\n<|im_start|>assistant\n");
    let mut streamed = String::new();
    let out = g
        .generate(
            &g.empty_cache().unwrap(),
            &p,
            &GenerateOptions {
                max_new_tokens: 40,
                stop_tokens: Some(vec![]),
                ..Default::default()
            },
            |d| streamed.push_str(d),
        )
        .unwrap();
    assert_eq!(streamed, out.text);
    assert!(out.first_token_time.is_some());
}

#[test]
fn the_context_limit_refuses_a_prompt_and_ends_a_generation() {
    let dir = engine_common::tiny_copy("ctx");
    let manifest = std::fs::read_to_string(dir.join("manifest.toml")).unwrap();
    std::fs::write(
        dir.join("manifest.toml"),
        manifest.replace("max_context = 4096", "max_context = 32"),
    )
    .unwrap();
    let g = Generator::new(Arc::new(
        Engines::load(&engine_common::options(&dir)).unwrap(),
    ));
    let empty = g.empty_cache().unwrap();
    let ids: Vec<u32> = (0..40).map(|i| 40 + i).collect();
    let mut long = Prompt::new();
    long.tokens(&ids[..]);
    match g.prefill(&empty, &long) {
        Err(GenerateError::ContextFull {
            cached: 0,
            new: 40,
            max: 32,
        }) => {}
        other => panic!("expected ContextFull, got {other:?}"),
    }
    let mut short = Prompt::new();
    short.tokens(&ids[..28]);
    let out = g
        .generate(
            &empty,
            &short,
            &GenerateOptions {
                max_new_tokens: 100,
                stop_tokens: Some(vec![]),
                ..Default::default()
            },
            |_| {},
        )
        .unwrap();
    assert_eq!(out.stop, StopReason::ContextFull);
    assert_eq!(out.cache.len(), 32);
    assert_eq!(out.tokens.len(), 5);
}

#[test]
fn engine_stats_count_every_run_its_items_and_its_time() {
    let mut opts = engine_common::options(&engine_common::tiny_dir());
    opts.engine.vision_batch_frames = 2;
    let engines = Engines::load(&opts).unwrap();
    assert_eq!(engines.stats(), EngineStatsSnapshot::default());

    // Three frames in batches of two: two encoder runs.
    let frames: Vec<Vec<u8>> = (0..3).map(|i| engine_common::frame(56, 56, i)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let visual = engines.vision().encode(&refs, 56, 56).unwrap();
    let after_vision = engines.stats();
    assert_eq!(
        (after_vision.vision_runs, after_vision.vision_frames),
        (2, 3)
    );
    assert!(after_vision.vision_seconds > 0.0);
    assert_eq!(after_vision.embed_runs + after_vision.prefill_runs, 0);

    // A prefill of text and one frame's tokens, then three decode steps.
    let ids = engines
        .tokenizer()
        .encode("What is the cat doing?", SpecialText::AsText);
    let mut embeds = engines.embedder().embed(&ids).unwrap();
    embeds.extend_from_slice(visual.frame(0));
    let n = ids.len() + visual.tokens_per_frame();
    let positions: Vec<i64> = (0..n as i64).collect();
    let decoder = engines.decoder();
    let mut cache = decoder
        .forward(
            &decoder.empty_cache().unwrap(),
            &embeds,
            &positions,
            LogitRows::Last,
        )
        .unwrap()
        .present;
    let steps = 3;
    let mut one = Vec::new();
    for pos in n..n + steps {
        one.clear();
        engines.embedder().embed_into(&ids[..1], &mut one).unwrap();
        cache = decoder
            .forward(&cache, &one, &[pos as i64], LogitRows::Last)
            .unwrap()
            .present;
    }

    let s = engines.stats();
    assert_eq!((s.vision_runs, s.vision_frames), (2, 3));
    assert_eq!(s.vision_seconds, after_vision.vision_seconds);
    assert_eq!(
        (s.embed_runs, s.embed_tokens),
        (1 + steps as u64, (ids.len() + steps) as u64)
    );
    assert_eq!((s.prefill_runs, s.prefill_tokens), (1, n as u64));
    assert_eq!(s.decode_steps, steps as u64);
    assert!(s.embed_seconds > 0.0, "{s:?}");
    assert!(s.prefill_seconds > 0.0, "{s:?}");
    assert!(s.decode_seconds > 0.0, "{s:?}");

    // A refused run is not work done.
    assert!(decoder.forward(&cache, &one, &[], LogitRows::Last).is_err());
    assert_eq!(engines.stats(), s);
}
