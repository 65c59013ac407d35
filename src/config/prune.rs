//! `prune_*` keys of a camera: DiffFP's settings as plain data (the pruner itself is
//! `crate::prune`, which also checks them against a frame size).

use std::fmt;
use std::str::FromStr;

/// How tokens are selected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PruneMode {
    /// VideoLLaMA3's rule, masks identical to the float32 reference.
    #[default]
    Reference,
    /// Ours: threshold raised above the camera's measured noise floor; reported per frame.
    Adaptive,
    /// Keep every token (SADs, scores and `identical` are still computed).
    Off,
}

impl fmt::Display for PruneMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PruneMode::Reference => "reference",
            PruneMode::Adaptive => "adaptive",
            PruneMode::Off => "off",
        })
    }
}

/// A string that names no [`PruneMode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsePruneModeError {
    /// The rejected text.
    pub given: String,
}

impl fmt::Display for ParsePruneModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown prune mode {:?}: expected reference, adaptive or off",
            self.given
        )
    }
}

impl std::error::Error for ParsePruneModeError {}

impl FromStr for PruneMode {
    type Err = ParsePruneModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [PruneMode::Reference, PruneMode::Adaptive, PruneMode::Off]
            .into_iter()
            .find(|m| s.eq_ignore_ascii_case(&m.to_string()))
            .ok_or_else(|| ParsePruneModeError {
                given: s.to_string(),
            })
    }
}

/// Pruning parameters; `Default` gives the reference values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PruneParams {
    /// Selection mode.
    pub mode: PruneMode,
    /// Reference threshold on `d = 255 * mean|Δx|` (0.1; keep iff strictly greater).
    pub threshold: f32,
    /// Tokens forced per frame when fewer pass (1; the first ones in raster order).
    pub min_tokens: usize,
    /// ViT patch side in pixels (14).
    pub patch: usize,
    /// Spatial merge factor (2): a token covers `patch * merge` pixels square.
    pub merge: usize,
}

impl Default for PruneParams {
    fn default() -> Self {
        PruneParams {
            mode: PruneMode::Reference,
            threshold: 0.1,
            min_tokens: 1,
            patch: 14,
            merge: 2,
        }
    }
}
