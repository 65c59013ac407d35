//! Tokenizer speed on the real Qwen2.5/Qwen3 vocabulary (engines/qwen/tokenizer.json, 11 MB).
//!
//! `cargo bench --bench tokenizer` after `engines/qwen/fetch.sh .venv/bin/python` and
//! `.venv/bin/python engines/qwen/tokenize_reference.py` (the parity fixture supplies the strings;
//! `tokenize_reference.py --bench` times Hugging Face `tokenizers` on the same ones). One thread.
//!
//! - `qwen/load`: `Tokenizer::from_file`, read + parse + tables.
//! - `qwen/encode_10k/{parse,as_text}`: all fixture strings, bytes per second, word cache warm
//!   (as in a running engine, and as HF's BPE cache is after its first pass).
//! - `qwen/encode_10k_cold/parse`: the same on a freshly loaded tokenizer (empty word cache).

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use edgevlm::engine::{SpecialText, Tokenizer};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn tokenizer_path() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("engines/qwen/tokenizer.json");
    assert!(
        path.is_file(),
        "{} is missing: run engines/qwen/fetch.sh .venv/bin/python",
        path.display()
    );
    path
}

fn texts() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/qwen-tokenizer/reference.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run .venv/bin/python engines/qwen/tokenize_reference.py",
            path.display()
        )
    });
    text.lines()
        .skip(1)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a fixture line");
            v["text"].as_str().expect("a text").to_string()
        })
        .collect()
}

fn encode_all(tok: &Tokenizer, texts: &[String], mode: SpecialText) -> usize {
    let mut ids = Vec::new();
    let mut n = 0;
    for t in texts {
        ids.clear();
        tok.encode_into(t, mode, &mut ids);
        n += ids.len();
    }
    n
}

fn qwen(c: &mut Criterion) {
    let path = tokenizer_path();
    let texts = texts();
    let bytes: usize = texts.iter().map(String::len).sum();
    let mut g = c.benchmark_group("qwen");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("load", |b| {
        b.iter(|| Tokenizer::from_file(black_box(&path)).unwrap())
    });
    let tok = Tokenizer::from_file(&path).unwrap();
    g.throughput(Throughput::Bytes(bytes as u64));
    for (name, mode) in [
        ("parse", SpecialText::Parse),
        ("as_text", SpecialText::AsText),
    ] {
        g.bench_function(format!("encode_10k/{name}"), |b| {
            b.iter(|| encode_all(&tok, black_box(&texts), mode))
        });
    }
    g.bench_function("encode_10k_cold/parse", |b| {
        b.iter_batched(
            || Tokenizer::from_file(&path).unwrap(),
            |tok| encode_all(&tok, black_box(&texts), SpecialText::Parse),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, qwen);
criterion_main!(benches);
