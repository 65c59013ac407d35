//! edgevlm against transformers' own VideoLLaMA3, on the same decoded RGB frames.
//!
//! The oracle is `engines/videollama3/parity.py`: transformers' `VideoLlama3Processor` and
//! `VideoLlama3ForConditionalGeneration` on a reduced checkpoint with seeded random weights
//! (`engines/videollama3/reduced.py`: the real architecture and the real Qwen tokenizer), exported
//! to the engine contract by `engines/videollama3/export.py`. `scripts/test.sh` builds all three
//! under `target/videollama3-reduced/` before the cargo tests (`scripts/videollama3-parity.sh`).
//!
//! Each clip goes through edgevlm's own stages, as a camera's frames do: the processor's geometry
//! rule, edgevlm's resize, the encoder's normalisation, DiffFP (reference mode), the prompt
//! renderers and tokenizer, the ONNX vision encoder, prefill and greedy decoding, and the live
//! cache (frame by frame, then a fork for the question).
//!
//! Tolerances (docs/ENGINES.md, "Parity with transformers (run in CI)"): pixels, masks, prompt
//! ids and tokens must be identical; features and logits agree within 1e-5 x max(1, max |value|). At every
//! decoding step the test also checks that this limit is under half the oracle's top-2 logit
//! margin, so agreeing logits imply the same greedy choice (and a failing step is a real
//! difference, not a near tie).

use edgevlm::config::ProcessorGeometry;
use edgevlm::engine::{EngineOptions, Engines, ProcessorSpec};
use edgevlm::family::videollama3;
use edgevlm::generate::render::{self, FrameSlot, Role};
use edgevlm::generate::{GenerateOptions, Generator, KvCache, Prompt};
use edgevlm::ingest::{Resizer, TOKEN_PX, processor_geometry};
use edgevlm::memory::{FrameEncoder, LiveCache, LiveOptions, MemoryFrame};
use edgevlm::prune::{PruneParams, Pruner};
use edgevlm::ring::{Frame, TokenMask};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const TOLERANCE: f32 = 1e-5;

fn root() -> PathBuf {
    std::env::var_os("EDGEVLM_VIDEOLLAMA3_PARITY")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/videollama3-reduced"))
}

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    frames: usize,
    source_width: u32,
    source_height: u32,
    width: u32,
    height: u32,
    tokens_per_frame: usize,
    hidden: usize,
    vocab: usize,
    timestamps: Vec<f64>,
    mask: String,
    kept: Vec<usize>,
    system: String,
    question: String,
    follow_up: String,
    offline_text: String,
    offline_ids: Vec<u32>,
    offline_tokens: Vec<u32>,
    followup_ids: Vec<u32>,
    followup_tokens: Vec<u32>,
    stream_ids: Vec<u32>,
    stream_tokens: Vec<u32>,
    new_tokens: usize,
}

struct Fixture {
    engines: Arc<Engines>,
    cases: Vec<(Case, PathBuf)>,
}

fn fixture() -> Fixture {
    let root = root();
    let index = root.join("parity/index.json");
    let names: Vec<String> = match std::fs::read_to_string(&index) {
        Ok(t) => serde_json::from_str(&t).expect("index.json"),
        Err(e) => panic!(
            "{}: {e}. The VideoLLaMA3 parity fixtures are built by scripts/videollama3-parity.sh \
             (scripts/test.sh runs it): the reduced checkpoint, its export and the transformers oracle",
            index.display()
        ),
    };
    let cases = names
        .iter()
        .map(|n| {
            let dir = root.join("parity").join(n);
            let text = std::fs::read_to_string(dir.join("case.json")).expect("case.json");
            (serde_json::from_str(&text).expect("case.json parses"), dir)
        })
        .collect();
    let engines =
        Engines::load(&EngineOptions::cpu(root.join("model"))).expect("exported model loads");
    Fixture {
        engines: Arc::new(engines),
        cases,
    }
}

fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Max |a - b| and max |b|.
fn max_diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let mut d = 0f32;
    let mut m = 0f32;
    for (x, y) in a.iter().zip(b) {
        d = d.max((x - y).abs());
        m = m.max(y.abs());
    }
    (d, m)
}

fn assert_close(what: &str, got: &[f32], want: &[f32]) -> f32 {
    let (d, m) = max_diff(got, want);
    let limit = TOLERANCE * m.max(1.0);
    assert!(
        d <= limit,
        "{what}: max |diff| {d:e} over {limit:e} (max |value| {m})"
    );
    d
}

fn top2_margin(logits: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &x in logits {
        if x > a {
            b = a;
            a = x;
        } else if x > b {
            b = x;
        }
    }
    a - b
}

fn processor(f: &Fixture) -> ProcessorGeometry {
    let p: ProcessorSpec = f
        .engines
        .manifest()
        .vision
        .processor
        .expect("the export writes [vision.processor]");
    p.geometry()
}

/// The clip's source frames resized by edgevlm to `width` x `height`.
fn resized(case: &Case, dir: &Path) -> Vec<Vec<u8>> {
    let src = std::fs::read(dir.join("frames.rgb")).expect("frames.rgb");
    let (sw, sh) = (case.source_width, case.source_height);
    let frame_len = (sw * sh * 3) as usize;
    assert_eq!(src.len(), frame_len * case.frames);
    let mut r = Resizer::new(sw, sh, case.width, case.height).expect("resizer");
    src.chunks_exact(frame_len)
        .map(|f| {
            let mut out = vec![0u8; r.dst_len()];
            r.resize(f, (sw * 3) as usize, &mut out).expect("resize");
            out
        })
        .collect()
}

/// DiffFP masks of the frames, reference mode, as the camera task computes them.
fn masks(case: &Case, frames: &[Vec<u8>]) -> Vec<TokenMask> {
    let mut pruner = Pruner::new(
        case.width as usize,
        case.height as usize,
        PruneParams::default(),
    )
    .expect("pruner");
    frames
        .iter()
        .map(|f| {
            let d = pruner.push(f, (case.width * 3) as usize).expect("prune");
            let keep: Box<[bool]> = d.keep().into();
            TokenMask {
                kept: d.kept(),
                key_frame: d.key_frame(),
                identical: d.identical(),
                threshold: d.threshold_used(),
                keep,
            }
        })
        .collect()
}

fn mask_bits(masks: &[TokenMask]) -> String {
    masks
        .iter()
        .flat_map(|m| m.keep.iter().map(|k| if *k { '1' } else { '0' }))
        .collect()
}

/// The frames through edgevlm's encoder stage: every token's features, then the kept ones.
fn memory_frames(
    f: &Fixture,
    case: &Case,
    frames: &[Vec<u8>],
    masks: &[TokenMask],
) -> Vec<Arc<MemoryFrame>> {
    let camera: Arc<str> = Arc::from(case.name.as_str());
    let ring: Vec<Arc<Frame>> = frames
        .iter()
        .zip(masks)
        .enumerate()
        .map(|(i, (rgb, m))| {
            Arc::new(Frame {
                camera: camera.clone(),
                seq: i as u64,
                pts: Duration::from_secs_f64(case.timestamps[i]),
                wall_time: SystemTime::UNIX_EPOCH + Duration::from_secs(i as u64),
                width: case.width,
                height: case.height,
                rgb: rgb.clone().into_boxed_slice(),
                tokens: Some(m.clone()),
            })
        })
        .collect();
    // One frame at a time, as frames arrive (identical frames reuse the previous output).
    let mut encoder = FrameEncoder::new();
    ring.iter()
        .map(|fr| {
            let mut out = encoder
                .encode(f.engines.vision(), std::slice::from_ref(fr))
                .expect("encode");
            Arc::new(out.remove(0))
        })
        .collect()
}

fn greedy_options(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        stop_tokens: Some(Vec::new()),
        ..GenerateOptions::default()
    }
}

/// Greedy decoding from `prompt` after `cache`, compared step by step with the oracle's logits
/// (`new_tokens + 1` rows); returns the generation's cache and unfed tokens.
fn greedy_matches(
    what: &str,
    generator: &Generator,
    cache: &KvCache,
    prompt: &Prompt<'_>,
    case: &Case,
    logits_file: &Path,
    want_tokens: &[u32],
) -> (KvCache, Vec<u32>, f32) {
    let want = read_f32(logits_file);
    let v = case.vocab;
    assert_eq!(
        want.len(),
        (case.new_tokens + 1) * v,
        "{what}: oracle logits size"
    );
    let mut d = generator
        .start(cache, prompt, &greedy_options(case.new_tokens))
        .expect("prefill");
    let mut worst = 0f32;
    let mut step = 0;
    // A token is fed on the call after it is returned: after `next_token` returns token k, the
    // logits are the ones token k was chosen from, which the oracle recorded as row k.
    while d.next_token().expect("decode").is_some() {
        let reference = &want[step * v..(step + 1) * v];
        let limit = TOLERANCE * reference.iter().fold(1f32, |m, x| m.max(x.abs()));
        let margin = top2_margin(reference);
        assert!(
            2.0 * limit < margin,
            "{} {what} step {step}: the oracle's top-2 margin {margin:e} is within twice the tolerance {limit:e}",
            case.name
        );
        worst = worst.max(assert_close(
            &format!("{} {what} step {step} logits", case.name),
            d.logits(),
            reference,
        ));
        step += 1;
    }
    assert_eq!(step, case.new_tokens, "{what}: tokens generated");
    let g = d.finish();
    // The last token is unfed; the oracle's last row is after it: feed it and compare too.
    let after = generator
        .prefill(&g.cache, Prompt::new().tokens(&g.unfed[..]))
        .expect("feed last");
    worst = worst.max(assert_close(
        &format!("{} {what} logits after the last token", case.name),
        &after.logits,
        &want[case.new_tokens * v..],
    ));
    assert_eq!(g.tokens, want_tokens, "{} {what}: greedy tokens", case.name);
    (g.cache, g.unfed, worst)
}

#[test]
fn geometry_pixels_and_masks_match_the_processor() {
    let f = fixture();
    let p = processor(&f);
    let vision = f.engines.vision();
    let mut shrunk = false;
    for (case, dir) in &f.cases {
        let g = processor_geometry(
            case.source_width,
            case.source_height,
            case.frames as u32,
            &p,
            TOKEN_PX,
        )
        .expect("geometry");
        assert_eq!(
            (g.width, g.height),
            (case.width, case.height),
            "{}: geometry of {} frames of {}x{}",
            case.name,
            case.frames,
            case.source_width,
            case.source_height
        );
        shrunk |= g.tokens() < (p.min_pixels / 784) as u32;
        let frames = resized(case, dir);
        let want = read_f32(&dir.join("pixel_values.f32"));
        let plane = (case.width * case.height * 3) as usize;
        let mut got = vec![0f32; plane];
        for (i, fr) in frames.iter().enumerate() {
            vision.normalize_into(fr, &mut got);
            let w = &want[i * plane..(i + 1) * plane];
            let differing = got
                .iter()
                .zip(w)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differing,
                0,
                "{} frame {i}: {differing} normalised values differ from the processor's (max |diff| {:e})",
                case.name,
                max_diff(&got, w).0
            );
        }
        let m = masks(case, &frames);
        assert_eq!(mask_bits(&m), case.mask, "{}: compression mask", case.name);
        let kept: Vec<usize> = m.iter().map(|m| m.kept).collect();
        assert_eq!(kept, case.kept, "{}: kept tokens per frame", case.name);
    }
    assert!(
        shrunk,
        "one clip must make the processor shrink the frames below min_pixels"
    );
}

#[test]
fn prompt_ids_match_the_processor_offline_and_streaming() {
    let f = fixture();
    let tok = f.engines.tokenizer();
    let st = f.engines.manifest().special_tokens;
    for (case, _) in &f.cases {
        let slots: Vec<FrameSlot> = case
            .timestamps
            .iter()
            .zip(&case.kept)
            .map(|(t, k)| FrameSlot {
                time_secs: *t,
                kept: *k,
            })
            .collect();
        let offline =
            videollama3::offline(&slots, &case.question, Some(&case.system)).expect("render");
        assert_eq!(
            offline.token_ids(tok, st.image),
            case.offline_ids,
            "{}: offline prompt ids",
            case.name
        );
        // The processor's text before expansion has one placeholder per video; expanded, it is ours.
        let ours = offline.text_with(st.image_literal.as_str());
        assert_eq!(
            tok.decode(&case.offline_ids, false),
            ours,
            "{}: offline text",
            case.name
        );
        assert!(
            case.offline_text.contains("<|video_pad|>\n"),
            "{}",
            case.offline_text
        );

        let mut ids = videollama3::stream_prefix(Some(&case.system)).token_ids(tok, st.image);
        for k in &case.kept {
            ids.extend(
                videollama3::stream_frame(*k, None)
                    .expect("frame")
                    .token_ids(tok, st.image),
            );
        }
        ids.extend(videollama3::stream_ask(Role::User, &case.question).token_ids(tok, st.image));
        assert_eq!(ids, case.stream_ids, "{}: streaming prompt ids", case.name);
    }
}

#[test]
fn vision_tokens_and_greedy_decoding_match_transformers_offline_and_in_a_follow_up() {
    let f = fixture();
    let generator = Generator::new(f.engines.clone());
    let tok = f.engines.tokenizer();
    let mut worst = (0f32, 0f32);
    for (case, dir) in &f.cases {
        let frames = resized(case, dir);
        let m = masks(case, &frames);
        let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        let tokens = f
            .engines
            .vision()
            .encode(&refs, case.width, case.height)
            .expect("encode");
        assert_eq!(
            tokens.shape(),
            [case.frames, case.tokens_per_frame, case.hidden]
        );
        let d = assert_close(
            &format!("{} vision tokens", case.name),
            tokens.as_slice(),
            &read_f32(&dir.join("vision.f32")),
        );
        worst.0 = worst.0.max(d);
        let mem = memory_frames(&f, case, &frames, &m);
        let slots: Vec<FrameSlot> = mem
            .iter()
            .zip(&case.timestamps)
            .map(|(fr, t)| FrameSlot {
                time_secs: *t,
                kept: fr.kept(),
            })
            .collect();
        let rows: Vec<&[f32]> = mem.iter().map(|fr| &fr.tokens[..]).collect();
        let offline =
            videollama3::offline(&slots, &case.question, Some(&case.system)).expect("render");
        let prompt = offline.prompt(&rows, case.hidden).expect("prompt");
        let empty = generator.empty_cache().expect("cache");
        let (cache, unfed, d) = greedy_matches(
            "offline",
            &generator,
            &empty,
            &prompt,
            case,
            &dir.join("offline_logits.f32"),
            &case.offline_tokens,
        );
        worst.1 = worst.1.max(d);

        // The follow-up, as a conversation continues: the unfed last token, the turn's close,
        // then the next question; the oracle's ids for that text are ours too.
        let close = render::template_text("<|im_end|>\n");
        let ask = videollama3::stream_ask(Role::User, &case.follow_up);
        let mut follow_ids = close.token_ids(tok, 0);
        follow_ids.extend(ask.token_ids(tok, 0));
        assert_eq!(
            follow_ids, case.followup_ids,
            "{}: follow-up ids",
            case.name
        );
        let mut p = Prompt::new();
        p.tokens(&unfed[..]);
        p.extend(close.prompt(&[], case.hidden).expect("close"));
        p.extend(ask.prompt(&[], case.hidden).expect("ask"));
        let (_, _, d) = greedy_matches(
            "follow-up",
            &generator,
            &cache,
            &p,
            case,
            &dir.join("followup_logits.f32"),
            &case.followup_tokens,
        );
        worst.1 = worst.1.max(d);
    }
    eprintln!(
        "max |diff|: vision tokens {:e}, logits {:e}",
        worst.0, worst.1
    );
}

#[test]
fn the_live_cache_frame_by_frame_then_a_fork_matches_one_shot_generate() {
    let f = fixture();
    let generator = Generator::new(f.engines.clone());
    for (case, dir) in &f.cases {
        let frames = resized(case, dir);
        let m = masks(case, &frames);
        let mem = memory_frames(&f, case, &frames, &m);
        let mut live = LiveCache::new(
            &generator,
            LiveOptions {
                system: Some(case.system.clone()),
                budget: 8192,
                slack: 0.25,
                window_frames: case.frames,
                policy: Default::default(),
            },
        )
        .expect("live cache");
        for i in 0..mem.len() {
            let rebuilt = live
                .append(&generator, &mem[..=i], &mem[i..=i])
                .expect("append");
            assert_eq!(
                rebuilt, None,
                "{}: frame {i} was appended, not rebuilt",
                case.name
            );
        }
        assert_eq!(live.frames(), case.frames);
        let view = live.view();
        let fork = view.cache.fork();
        let ask = videollama3::stream_ask(Role::User, &case.question);
        let prompt = ask.prompt(&[], case.hidden).expect("ask");
        greedy_matches(
            "live",
            &generator,
            &fork,
            &prompt,
            case,
            &dir.join("stream_logits.f32"),
            &case.stream_tokens,
        );
        // The fork left the live cache as it was.
        assert_eq!(live.cache().len(), view.cache.len());
    }
}
