//! The tensor contract (docs/ENGINES.md, "Model directories"), checked against what each ONNX file
//! declares.
//!
//! Checked when a session is created, before any run, so a model exported with the wrong names,
//! dtypes or head counts fails with the first mismatch spelled out instead of a shape error deep in
//! a decode step.

use super::error::EngineError;
use super::manifest::{Manifest, TextSpec, VisionLayout};
use super::provider::ModelRole;
use ort::session::Session;
use ort::value::{TensorElementType, ValueType};
use std::path::Path;

/// One expected dimension.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dim {
    /// Dynamic; the name is only for messages.
    Any(&'static str),
    /// Must be this size when the file fixes it (a dynamic dimension is accepted).
    Is(i64, &'static str),
}

/// One expected input or output.
#[derive(Debug, Clone)]
pub(crate) struct TensorSpec {
    pub name: String,
    pub ty: TensorElementType,
    pub dims: Vec<Dim>,
}

impl TensorSpec {
    fn new(name: &str, ty: TensorElementType, dims: &[Dim]) -> TensorSpec {
        TensorSpec {
            name: name.to_string(),
            ty,
            dims: dims.to_vec(),
        }
    }

    fn describe(&self) -> String {
        let dims: Vec<String> = self
            .dims
            .iter()
            .map(|d| match d {
                Dim::Any(n) => (*n).to_string(),
                Dim::Is(v, _) => v.to_string(),
            })
            .collect();
        format!("{} [{}]", self.ty, dims.join(", "))
    }
}

/// Expected (inputs, outputs) of one model.
pub(crate) fn expected(m: &Manifest, role: ModelRole) -> (Vec<TensorSpec>, Vec<TensorSpec>) {
    use Dim::{Any, Is};
    use TensorElementType::{Bool, Float32, Int64};
    let t = &m.text;
    let hidden = Is(i64::from(t.hidden_size), "hidden size");
    match role {
        ModelRole::VisionEncoder if m.vision.layout == VisionLayout::Images => {
            // `validate` made sure both are set for this layout.
            let side = i64::from(m.vision.image_size.unwrap_or(0));
            let mask = m.vision.pixel_mask.as_deref().unwrap_or_default();
            (
                vec![
                    TensorSpec::new(
                        &m.vision.input,
                        Float32,
                        &[
                            Any("batch"),
                            Any("images"),
                            Is(3, "channels"),
                            Is(side, "image size"),
                            Is(side, "image size"),
                        ],
                    ),
                    TensorSpec::new(
                        mask,
                        Bool,
                        &[
                            Any("batch"),
                            Any("images"),
                            Is(side, "image size"),
                            Is(side, "image size"),
                        ],
                    ),
                ],
                vec![TensorSpec::new(
                    &m.vision.output,
                    Float32,
                    &[Any("images x tokens"), hidden],
                )],
            )
        }
        ModelRole::VisionEncoder if m.vision.layout == VisionLayout::Clips => {
            // `validate` made sure the side and the clip are set for this layout.
            let side = i64::from(m.vision.image_size.unwrap_or(0));
            let frames = i64::from(m.vision.clip_frames.unwrap_or(0));
            let tokens = i64::from(m.vision.clip_tokens.unwrap_or(0));
            (
                vec![TensorSpec::new(
                    &m.vision.input,
                    Float32,
                    &[
                        Any("clips"),
                        Is(frames, "frames per clip"),
                        Is(3, "channels"),
                        Is(side, "image size"),
                        Is(side, "image size"),
                    ],
                )],
                vec![TensorSpec::new(
                    &m.vision.output,
                    Float32,
                    &[Any("clips"), Is(tokens, "tokens per clip"), hidden],
                )],
            )
        }
        ModelRole::VisionEncoder => (
            vec![TensorSpec::new(
                &m.vision.input,
                Float32,
                &[
                    Any("frames"),
                    Is(3, "channels"),
                    Any("height"),
                    Any("width"),
                ],
            )],
            vec![TensorSpec::new(
                &m.vision.output,
                Float32,
                &[Any("frames"), Any("tokens"), hidden],
            )],
        ),
        ModelRole::EmbedTokens => (
            vec![TensorSpec::new(
                &t.input_ids,
                Int64,
                &[Any("batch"), Any("sequence")],
            )],
            vec![TensorSpec::new(
                &t.inputs_embeds,
                Float32,
                &[Any("batch"), Any("sequence"), hidden],
            )],
        ),
        ModelRole::Decoder => {
            let kv = Is(i64::from(t.num_kv_heads), "kv heads");
            let hd = Is(i64::from(t.head_dim), "head dim");
            let mut inputs = vec![
                TensorSpec::new(
                    &t.inputs_embeds,
                    Float32,
                    &[Any("batch"), Any("sequence"), hidden],
                ),
                TensorSpec::new(&t.attention_mask, Int64, &[Any("batch"), Any("total")]),
                TensorSpec::new(&t.position_ids, Int64, &[Any("batch"), Any("sequence")]),
            ];
            let mut outputs = vec![TensorSpec::new(
                &t.logits,
                Float32,
                &[
                    Any("batch"),
                    Any("sequence"),
                    Is(i64::from(t.vocab_size), "vocab size"),
                ],
            )];
            for i in 0..t.num_layers {
                for pattern in [&t.past_key, &t.past_value] {
                    inputs.push(TensorSpec::new(
                        &TextSpec::layer_name(pattern, i),
                        Float32,
                        &[Any("batch"), kv, Any("past"), hd],
                    ));
                }
                for pattern in [&t.present_key, &t.present_value] {
                    outputs.push(TensorSpec::new(
                        &TextSpec::layer_name(pattern, i),
                        Float32,
                        &[Any("batch"), kv, Any("total"), hd],
                    ));
                }
            }
            (inputs, outputs)
        }
    }
}

/// Checks a session's declared inputs and outputs; the first mismatch is the error.
pub(crate) fn check(
    session: &Session,
    m: &Manifest,
    role: ModelRole,
    file: &Path,
) -> Result<(), EngineError> {
    let (inputs, outputs) = expected(m, role);
    let declared_in: Vec<(&str, &ValueType)> = session
        .inputs()
        .iter()
        .map(|o| (o.name(), o.dtype()))
        .collect();
    let declared_out: Vec<(&str, &ValueType)> = session
        .outputs()
        .iter()
        .map(|o| (o.name(), o.dtype()))
        .collect();
    check_side(file, "input", &declared_in, &inputs)?;
    check_side(file, "output", &declared_out, &outputs)?;
    // An input the contract does not know could not be fed; an extra output is only computed.
    if let Some((name, ty)) = declared_in
        .iter()
        .find(|(n, _)| !inputs.iter().any(|s| s.name == *n))
    {
        return Err(EngineError::Contract {
            file: file.to_path_buf(),
            tensor: (*name).to_string(),
            expected: format!(
                "no such input (the manifest implies exactly: {})",
                inputs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            found: format!("an input {ty}"),
        });
    }
    Ok(())
}

fn check_side(
    file: &Path,
    side: &str,
    declared: &[(&str, &ValueType)],
    expected: &[TensorSpec],
) -> Result<(), EngineError> {
    let mismatch = |tensor: &str, expected: String, found: String| EngineError::Contract {
        file: file.to_path_buf(),
        tensor: tensor.to_string(),
        expected,
        found,
    };
    for spec in expected {
        let Some((_, ty)) = declared.iter().find(|(n, _)| *n == spec.name) else {
            let names: Vec<&str> = declared.iter().map(|(n, _)| *n).collect();
            return Err(mismatch(
                &spec.name,
                format!("an {side} {}", spec.describe()),
                format!("no such {side} (the file's {side}s: {})", names.join(", ")),
            ));
        };
        let (Some(found_ty), Some(shape)) = (ty.tensor_type(), ty.tensor_shape()) else {
            return Err(mismatch(
                &spec.name,
                format!("a tensor {}", spec.describe()),
                format!("{ty}"),
            ));
        };
        if found_ty != spec.ty {
            return Err(mismatch(
                &spec.name,
                format!("element type {} ({})", spec.ty, spec.describe()),
                format!("element type {found_ty} ({ty})"),
            ));
        }
        if shape.len() != spec.dims.len() {
            return Err(mismatch(
                &spec.name,
                format!("rank {} ({})", spec.dims.len(), spec.describe()),
                format!("rank {} ({ty})", shape.len()),
            ));
        }
        for (i, (dim, found)) in spec.dims.iter().zip(shape.iter()).enumerate() {
            if let Dim::Is(want, what) = dim
                && *found >= 0
                && found != want
            {
                return Err(mismatch(
                    &spec.name,
                    format!("dimension {i} ({what}) = {want} ({})", spec.describe()),
                    format!("{found} ({ty})"),
                ));
            }
        }
    }
    Ok(())
}
