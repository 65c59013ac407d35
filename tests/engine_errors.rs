//! The documented errors (docs/ENGINES.md, "Errors") on broken copies of the tiny model and broken
//! ONNX Runtime installations: each names what is wrong and where, and none panics.

mod engine_common;

use edgevlm::engine::{EngineError, EngineOptions, Engines, ErrorKind, ProviderKind, check_dir};
use std::path::{Path, PathBuf};

fn load(dir: &Path) -> Result<Engines, EngineError> {
    Engines::load(&engine_common::options(dir))
}

fn edit_manifest(dir: &Path, from: &str, to: &str) {
    let path = dir.join("manifest.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "manifest has no `{from}`");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
}

fn contract(err: EngineError) -> (PathBuf, String, String, String) {
    match err {
        EngineError::Contract {
            file,
            tensor,
            expected,
            found,
        } => (file, tensor, expected, found),
        other => panic!("expected a contract mismatch, got: {other}"),
    }
}

#[test]
fn a_missing_onnx_runtime_library_says_what_to_install_instead_of_panicking() {
    let mut opts = engine_common::options(&engine_common::tiny_dir());
    opts.engine.onnxruntime_library = Some(PathBuf::from("/nonexistent/libonnxruntime.so.1.32.0"));
    let err = Engines::load(&opts).unwrap_err();
    assert!(matches!(err, EngineError::LibraryNotFound { .. }), "{err}");
    assert_eq!(err.kind(), ErrorKind::Setup);
    let msg = err.to_string();
    for part in [
        "ONNX Runtime library not found",
        "engine.onnxruntime_library = /nonexistent/libonnxruntime.so.1.32.0: no such file",
        "scripts/setup.sh",
        "pip install onnxruntime",
    ] {
        assert!(msg.contains(part), "missing `{part}` in: {msg}");
    }
}

#[test]
fn a_file_that_is_not_onnx_runtime_is_refused_before_ort_loads_it() {
    let dir = engine_common::tiny_copy("notort");
    let fake = dir.join("libonnxruntime.so.1.32.0");
    std::fs::write(&fake, b"not a shared library").unwrap();
    let mut opts = engine_common::options(&engine_common::tiny_dir());
    opts.engine.onnxruntime_library = Some(fake.clone());
    let err = Engines::load(&opts).unwrap_err();
    assert!(matches!(err, EngineError::LibraryUnusable { .. }), "{err}");
    assert!(err.to_string().contains("it cannot be opened"), "{err}");

    // A real shared library that is not ONNX Runtime.
    let other = [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "/lib/aarch64-linux-gnu/libz.so.1",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    if let Some(lib) = other {
        opts.engine.onnxruntime_library = Some(lib);
        let err = Engines::load(&opts).unwrap_err().to_string();
        assert!(err.contains("does not export OrtGetApiBase"), "{err}");
    }
}

#[test]
fn a_manifest_that_disagrees_with_the_decoder_names_file_tensor_expected_and_found() {
    let dir = engine_common::tiny_copy("kvheads");
    edit_manifest(&dir, "num_kv_heads = 2", "num_kv_heads = 4");
    let (file, tensor, expected, found) = contract(load(&dir).unwrap_err());
    assert_eq!(file, dir.join("decoder_model_merged.onnx"));
    assert_eq!(tensor, "past_key_values.0.key");
    assert!(
        expected.starts_with("dimension 1 (kv heads) = 4"),
        "{expected}"
    );
    assert!(found.starts_with("2 (Tensor<f32>("), "{found}");
}

#[test]
fn contract_mismatches_are_reported_for_each_kind_of_difference() {
    // Hidden size: the first model checked (the vision encoder) already disagrees.
    let dir = engine_common::tiny_copy("hidden");
    edit_manifest(&dir, "hidden_size = 64", "hidden_size = 32");
    let (file, tensor, expected, _) = contract(load(&dir).unwrap_err());
    assert_eq!(file, dir.join("vision_encoder.onnx"));
    assert_eq!(tensor, "visual_tokens");
    assert!(
        expected.starts_with("dimension 2 (hidden size) = 32"),
        "{expected}"
    );

    // A renamed output.
    let dir = engine_common::tiny_copy("logits");
    edit_manifest(&dir, "logits = \"logits\"", "logits = \"lm_logits\"");
    let (_, tensor, expected, found) = contract(load(&dir).unwrap_err());
    assert_eq!(tensor, "lm_logits");
    assert!(
        expected.starts_with("an output f32 [batch, sequence, 512]"),
        "{expected}"
    );
    assert!(
        found.starts_with("no such output (the file's outputs: logits,"),
        "{found}"
    );

    // More layers than the file has: the missing cache input.
    let dir = engine_common::tiny_copy("layers3");
    edit_manifest(&dir, "num_layers = 2", "num_layers = 3");
    let (_, tensor, _, found) = contract(load(&dir).unwrap_err());
    assert_eq!(tensor, "past_key_values.2.key");
    assert!(found.starts_with("no such input"), "{found}");

    // Fewer layers: an input the runtime would not feed.
    let dir = engine_common::tiny_copy("layers1");
    edit_manifest(&dir, "num_layers = 2", "num_layers = 1");
    let (_, tensor, expected, found) = contract(load(&dir).unwrap_err());
    assert_eq!(tensor, "past_key_values.1.key");
    assert!(expected.starts_with("no such input"), "{expected}");
    assert!(found.starts_with("an input Tensor<f32>"), "{found}");

    // A different element type: the mask named after the float embeddings input.
    let dir = engine_common::tiny_copy("dtype");
    edit_manifest(
        &dir,
        "attention_mask = \"attention_mask\"",
        "attention_mask = \"inputs_embeds\"",
    );
    let (file, tensor, expected, found) = contract(load(&dir).unwrap_err());
    assert_eq!(file, dir.join("decoder_model_merged.onnx"));
    assert_eq!(tensor, "inputs_embeds");
    assert!(expected.starts_with("element type i64"), "{expected}");
    assert!(found.starts_with("element type f32"), "{found}");
}

#[test]
fn corrupt_or_truncated_model_files_are_clear_errors() {
    let dir = engine_common::tiny_copy("trunc");
    let decoder = dir.join("decoder_model_merged.onnx");
    let bytes = std::fs::read(&decoder).unwrap();
    std::fs::write(&decoder, &bytes[..bytes.len() / 2]).unwrap();
    let err = load(&dir).unwrap_err();
    match &err {
        EngineError::CorruptModel {
            file, size_bytes, ..
        } => {
            assert_eq!(file, &decoder);
            assert_eq!(*size_bytes as usize, bytes.len() / 2);
        }
        other => panic!("expected CorruptModel, got {other}"),
    }
    assert!(err.to_string().contains("corrupt or truncated"), "{err}");

    // `engines check` verifies the manifest's checksums first, which catches any truncation.
    let err = check_dir(&engine_common::options(&dir)).unwrap_err();
    assert!(matches!(err, EngineError::Checksum { .. }), "{err}");
    assert!(
        err.to_string().contains("differs from manifest.toml's"),
        "{err}"
    );

    std::fs::write(&decoder, b"").unwrap();
    let err = load(&dir).unwrap_err().to_string();
    assert!(err.contains("the file is empty"), "{err}");

    std::fs::write(&decoder, vec![0xA5u8; 4096]).unwrap();
    let err = load(&dir).unwrap_err();
    assert!(matches!(err, EngineError::CorruptModel { .. }), "{err}");
}

#[test]
fn missing_files_and_bad_manifests_name_the_key() {
    let dir = engine_common::tiny_copy("missing");
    std::fs::remove_file(dir.join("embed_tokens.onnx")).unwrap();
    let err = load(&dir).unwrap_err().to_string();
    assert!(
        err.ends_with(
            "embed_tokens.onnx: missing (named by [files] embed_tokens in manifest.toml)"
        ),
        "{err}"
    );

    let cases = [
        (
            "num_kv_heads = 2",
            "num_kv_heads = 3",
            "text.num_kv_heads: must divide text.num_heads (4), got 3",
        ),
        (
            "dtype = \"float32\"",
            "dtype = \"float16\"",
            "text.dtype: only \"float32\"",
        ),
        (
            "family = \"tiny\"",
            "family = \"llama\"",
            "unknown variant `llama`",
        ),
        ("[files]", "colour = 1\n[files]", "unknown field `colour`"),
        (
            "im_end = 508",
            "im_end = 900",
            "special_tokens: id 900 of <|im_end|> is outside text.vocab_size (512)",
        ),
    ];
    for (from, to, expect) in cases {
        let dir = engine_common::tiny_copy("manifest");
        edit_manifest(&dir, from, to);
        let err = load(&dir).unwrap_err();
        assert!(matches!(err, EngineError::Manifest { .. }), "{err}");
        assert!(err.to_string().contains(expect), "`{to}`: {err}");
    }

    let err = load(Path::new("/nonexistent/model"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("manifest.toml: not found") && err.contains("scripts/setup.sh"),
        "{err}"
    );
}

#[test]
fn a_tokenizer_that_disagrees_with_the_manifest_is_refused() {
    let dir = engine_common::tiny_copy("tokids");
    edit_manifest(&dir, "im_end = 508", "im_end = 507");
    let err = load(&dir).unwrap_err();
    assert!(matches!(err, EngineError::Tokenizer { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("<|im_end|> is id 508, but manifest.toml [special_tokens] says 507"),
        "{err}"
    );
}

#[test]
fn a_gpu_provider_that_cannot_be_used_is_an_error_naming_it_not_a_cpu_fallback() {
    for provider in [ProviderKind::Cuda, ProviderKind::TensorRt] {
        let opts: EngineOptions =
            engine_common::options(&engine_common::tiny_dir()).with_provider(provider);
        let err = Engines::load(&opts).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&format!("`{}`", provider.name())), "{msg}");
        if provider.is_built() {
            // The CPU-only PyPI wheel has neither provider.
            assert!(
                matches!(err, EngineError::ProviderUnavailable { .. }),
                "{msg}"
            );
            assert!(msg.contains("onnxruntime-gpu"), "{msg}");
        } else {
            assert!(matches!(err, EngineError::ProviderNotBuilt { .. }), "{msg}");
            assert!(msg.contains("--features gpu"), "{msg}");
        }
    }
}
