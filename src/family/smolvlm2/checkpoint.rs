//! The manifest of a SmolVLM2 model directory as a user downloads it from the hub
//! (`HuggingFaceTB/SmolVLM2-256M-Video-Instruct`, `-500M-`): `config.json`, the processor's
//! settings, `tokenizer.json` and the published ONNX files under `onnx/` (docs/ENGINES.md,
//! "SmolVLM2"). `edgevlm engines init DIR` writes it; nothing is exported or converted.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The three graphs, by manifest key and published file stem.
const GRAPHS: [(&str, &str); 3] = [
    ("vision_encoder", "vision_encoder"),
    ("embed_tokens", "embed_tokens"),
    ("decoder", "decoder_model_merged"),
];

/// The special tokens the manifest names, by key and literal.
const SPECIAL: [(&str, &str); 7] = [
    ("endoftext", "<|endoftext|>"),
    ("im_start", "<|im_start|>"),
    ("im_end", "<|im_end|>"),
    ("image", super::IMAGE_PLACEHOLDER),
    ("end_of_utterance", super::END_OF_UTTERANCE),
    ("fake_token_around_image", super::FAKE_TOKEN_AROUND_IMAGE),
    ("global_image", super::GLOBAL_IMAGE),
];

/// One JSON file of the checkpoint, for lookups that name the file and key when they fail.
struct Json {
    file: PathBuf,
    value: Value,
}

impl Json {
    fn read(file: PathBuf) -> Result<Json, String> {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
        let value = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not JSON: {e}", file.display()))?;
        Ok(Json { file, value })
    }

    /// The value at a dotted path, if any.
    fn get(&self, path: &str) -> Option<&Value> {
        path.split('.').try_fold(&self.value, |v, k| v.get(k))
    }

    fn missing(&self, path: &str, what: &str) -> String {
        format!("{}: {path}: expected {what}", self.file.display())
    }

    fn uint(&self, path: &str) -> Result<u64, String> {
        self.get(path)
            .and_then(Value::as_u64)
            .ok_or_else(|| self.missing(path, "a non-negative integer"))
    }

    fn float(&self, path: &str) -> Result<f64, String> {
        self.get(path)
            .and_then(Value::as_f64)
            .ok_or_else(|| self.missing(path, "a number"))
    }

    fn triple(&self, path: &str) -> Result<[f64; 3], String> {
        let v = self.get(path).and_then(Value::as_array);
        match v.map(|a| a.iter().map(Value::as_f64).collect::<Option<Vec<_>>>()) {
            Some(Some(a)) if a.len() == 3 => Ok([a[0], a[1], a[2]]),
            _ => Err(self.missing(path, "three numbers")),
        }
    }
}

/// The video processor's settings: from `processor_config.json`'s `video_processor` (as
/// transformers 5 saves a processor), else `video_preprocessor_config.json`, else the image
/// processor's `preprocessor_config.json` (the published repositories').
fn processor(dir: &Path) -> Result<(Json, String), String> {
    let nested = dir.join("processor_config.json");
    if nested.exists() {
        let j = Json::read(nested)?;
        if j.get("video_processor").is_some() {
            return Ok((j, "video_processor.".into()));
        }
    }
    for name in ["video_preprocessor_config.json", "preprocessor_config.json"] {
        let file = dir.join(name);
        if file.exists() {
            return Ok((Json::read(file)?, String::new()));
        }
    }
    Err(format!(
        "{}: no processor settings (processor_config.json with a video_processor, \
         video_preprocessor_config.json or preprocessor_config.json)",
        dir.display()
    ))
}

/// The ids of SmolVLM2's special tokens in `tokenizer.json`'s added tokens.
fn special_ids(tokenizer: &Json) -> Result<BTreeMap<&'static str, u64>, String> {
    let added = tokenizer
        .get("added_tokens")
        .and_then(Value::as_array)
        .ok_or_else(|| tokenizer.missing("added_tokens", "a list"))?;
    let mut ids = BTreeMap::new();
    for (key, literal) in SPECIAL {
        let id = added
            .iter()
            .find(|t| t.get("content").and_then(Value::as_str) == Some(literal))
            .and_then(|t| t.get("id"))
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                format!(
                    "{}: no added token {literal} (SmolVLM2's tokenizer has it)",
                    tokenizer.file.display()
                )
            })?;
        ids.insert(key, id);
    }
    Ok(ids)
}

fn sha256(path: &Path) -> Result<String, String> {
    crate::engine::sha256_file(path).map_err(|e| e.to_string())
}

/// The manifest text for the SmolVLM2 directory `dir`; `variant` picks published files such as
/// `onnx/decoder_model_merged_q4.onnx` (`q4`). Every problem names its file and key.
pub fn manifest(dir: &Path, variant: Option<&str>) -> Result<String, String> {
    let config = Json::read(dir.join("config.json"))?;
    match config.get("model_type").and_then(Value::as_str) {
        Some("smolvlm") => {}
        other => {
            return Err(format!(
                "{}: model_type: expected \"smolvlm\" (SmolVLM2), got {}",
                config.file.display(),
                other.map_or("none".into(), |s| format!("{s:?}"))
            ));
        }
    }
    let (proc, at) = processor(dir)?;
    let tokenizer = Json::read(dir.join("tokenizer.json"))?;
    let ids = special_ids(&tokenizer)?;

    let patch = config.uint("vision_config.patch_size")?;
    let scale = config.uint("scale_factor")?;
    let image_size = proc.uint(&format!("{at}max_image_size.longest_edge"))?;
    let encoder_side = config.uint("vision_config.image_size")?;
    if image_size != encoder_side {
        return Err(format!(
            "{}: {at}max_image_size.longest_edge is {image_size}, but the vision encoder of {} \
             takes {encoder_side} (vision_config.image_size)",
            proc.file.display(),
            config.file.display()
        ));
    }
    let image_id = config.uint("image_token_id")?;
    if image_id != ids["image"] {
        return Err(format!(
            "{}: image_token_id {image_id} is not the tokenizer's <image> ({})",
            config.file.display(),
            ids["image"]
        ));
    }
    let mean = proc.triple(&format!("{at}image_mean"))?;
    let std = proc.triple(&format!("{at}image_std"))?;
    let hidden = config.uint("text_config.hidden_size")?;
    let heads = config.uint("text_config.num_attention_heads")?;
    let head_dim = match config.get("text_config.head_dim").and_then(Value::as_u64) {
        Some(d) => d,
        None if heads > 0 => hidden / heads,
        None => return Err(config.missing("text_config.num_attention_heads", "> 0")),
    };
    // transformers 5 keeps the rotary settings under `rope_parameters`; earlier ones at the top.
    let rope_theta = config
        .float("text_config.rope_parameters.rope_theta")
        .or_else(|_| config.float("text_config.rope_theta"))?;

    let suffix = variant.map_or(String::new(), |v| format!("_{v}"));
    let mut files = Vec::new();
    for (key, stem) in GRAPHS {
        let rel = format!("onnx/{stem}{suffix}.onnx");
        if !dir.join(&rel).is_file() {
            return Err(format!(
                "{}: not found (the published ONNX files are under onnx/; --variant picks \
                 suffixed ones such as onnx/{stem}_q4.onnx)",
                dir.join(&rel).display()
            ));
        }
        files.push((key, rel));
    }

    let mut m = String::new();
    let _ = writeln!(
        m,
        "# Written by `edgevlm engines init` from {}/config.json and its processor and tokenizer\n\
         # files; the ONNX files are the published ones, unchanged.\nfamily = \"smolvlm2\"\n\n[files]",
        dir.display()
    );
    for (key, rel) in &files {
        let _ = writeln!(m, "{key} = \"{rel}\"");
    }
    let _ = writeln!(m, "tokenizer = \"tokenizer.json\"\n");
    let _ = writeln!(
        m,
        "[vision]\nlayout = \"images\"\nimage_size = {image_size}\npatch_size = {patch}\n\
         merge_size = {scale}\nmean = [{}, {}, {}]\nstd = [{}, {}, {}]\ninput = \"pixel_values\"\n\
         pixel_mask = \"pixel_attention_mask\"\noutput = \"image_features\"\n\
         encoder_hidden_size = {}\nencoder_layers = {}\nencoder_heads = {}\n",
        mean[0],
        mean[1],
        mean[2],
        std[0],
        std[1],
        std[2],
        config.uint("vision_config.hidden_size")?,
        config.uint("vision_config.num_hidden_layers")?,
        config.uint("vision_config.num_attention_heads")?,
    );
    let _ = writeln!(
        m,
        "[text]\nhidden_size = {hidden}\nnum_layers = {}\nnum_heads = {heads}\nnum_kv_heads = {}\n\
         head_dim = {head_dim}\nintermediate_size = {}\nvocab_size = {}\nmax_context = {}\n\
         rope_theta = {rope_theta:?}\nrms_norm_eps = {:?}\ndtype = \"float32\"\n\
         input_ids = \"input_ids\"\ninputs_embeds = \"inputs_embeds\"\n\
         attention_mask = \"attention_mask\"\nposition_ids = \"position_ids\"\n\
         past_key = \"past_key_values.{{i}}.key\"\npast_value = \"past_key_values.{{i}}.value\"\n\
         present_key = \"present.{{i}}.key\"\npresent_value = \"present.{{i}}.value\"\n\
         logits = \"logits\"\n",
        config.uint("text_config.num_hidden_layers")?,
        config.uint("text_config.num_key_value_heads")?,
        config.uint("text_config.intermediate_size")?,
        config.uint("text_config.vocab_size")?,
        config.uint("text_config.max_position_embeddings")?,
        config.float("text_config.rms_norm_eps")?,
    );
    let _ = writeln!(m, "[special_tokens]");
    for (key, _) in SPECIAL {
        let _ = writeln!(m, "{key} = {}", ids[key]);
    }
    let _ = writeln!(
        m,
        "\n[chat_template]\nsystem_prefix = \"<|im_start|>System:\"\n\
         user_prefix = \"<|im_start|>User:\"\nassistant_prefix = \"Assistant:\"\n\
         turn_end = \"<end_of_utterance>\\n\"\ndefault_system = \"\"\n\
         # Each frame carries its time (`Frame from MM:SS:`), as in SmolVLM2's video prompt.\n\
         stream_timestamps = true\n"
    );
    let _ = writeln!(
        m,
        "[generator]\nscript = \"edgevlm engines init\"\nscript_version = \"1\"\nsource = {:?}\n\n\
         [generator.sha256]",
        dir.display().to_string()
    );
    // Checksums of the graphs and of their external weight files (`*.onnx_data`, `*.onnx.data`).
    let mut sums = BTreeMap::new();
    for (_, rel) in &files {
        sums.insert(rel.clone(), sha256(&dir.join(rel))?);
        for data in [format!("{rel}_data"), format!("{rel}.data")] {
            if dir.join(&data).is_file() {
                sums.insert(data.clone(), sha256(&dir.join(&data))?);
            }
        }
    }
    sums.insert(
        "tokenizer.json".into(),
        sha256(&dir.join("tokenizer.json"))?,
    );
    for (name, sum) in sums {
        let _ = writeln!(m, "{name:?} = \"{sum}\"");
    }
    Ok(m)
}
