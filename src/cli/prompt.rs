//! `edgevlm prompt`: a family's prompt for typed timestamps and kept-token counts, as text
//! (docs/REFERENCE.md §1c and §2).

use edgevlm::family::apollo::{self, ApolloVideo, ClipSlot, ConfigNumber};
use edgevlm::family::{Family, smolvlm2, videollama3};
use edgevlm::generate::render::{FrameSlot, Message, RenderError, Role};

/// The arguments of `edgevlm prompt`, as typed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CliArgs<'a> {
    /// `videollama3`, `apollo` or `tiny`.
    pub family: &'a str,
    /// Comma-separated seconds.
    pub timestamps: &'a str,
    /// Comma-separated kept-token counts, one per timestamp.
    pub kept: Option<&'a str>,
    /// The question.
    pub question: &'a str,
    /// `offline` or `stream`.
    pub format: &'a str,
    /// Apollo's `clip_duration` as stored (`2` or `2.0`).
    pub clip_duration: &'a str,
    /// Apollo's video duration.
    pub duration_secs: Option<f64>,
}

/// Why `edgevlm prompt` refused its arguments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum CliError {
    /// Not a known family (the message names the known ones).
    #[error("{0}")]
    Family(String),
    /// Not a known format, or stream for a family without one.
    #[error("unknown format {0:?}: expected offline or stream (stream: videollama3 and tiny only)")]
    Format(String),
    /// A list item is not a number.
    #[error("--{list}: item {index} ({item:?}) is not {expected}")]
    Item {
        /// `timestamps` or `kept`.
        list: &'static str,
        /// Item index.
        index: usize,
        /// The item.
        item: String,
        /// What it should be.
        expected: &'static str,
    },
    /// `--kept` and `--timestamps` differ in length.
    #[error("--kept has {kept} values but --timestamps has {timestamps}: give one per timestamp")]
    Lengths {
        /// Timestamps given.
        timestamps: usize,
        /// Kept counts given.
        kept: usize,
    },
    /// `--clip-duration` is not a number.
    #[error("--clip-duration {0:?} is not a number")]
    ClipDuration(String),
    /// The inputs do not make a prompt.
    #[error(transparent)]
    Render(#[from] RenderError),
}

fn parse_list<T: std::str::FromStr>(
    text: &str,
    list: &'static str,
    expected: &'static str,
) -> Result<Vec<T>, CliError> {
    text.split(',')
        .enumerate()
        .map(|(index, item)| {
            item.trim().parse().map_err(|_| CliError::Item {
                list,
                index,
                item: item.to_owned(),
                expected,
            })
        })
        .collect()
}

/// `edgevlm prompt`: the rendered text for the arguments.
pub(crate) fn render_cli(a: &CliArgs<'_>) -> Result<String, CliError> {
    let family: Family = a.family.parse().map_err(CliError::Family)?;
    let stream = match a.format {
        "offline" => false,
        "stream" if edgevlm::family::stream(family).is_ok() => true,
        other => return Err(CliError::Format(other.to_owned())),
    };
    let times: Vec<f64> = parse_list(a.timestamps, "timestamps", "a number of seconds")?;
    let default_kept = match family {
        Family::Tiny | Family::Videollama3 => 1,
        Family::Apollo => 32,
        Family::Smolvlm2 => smolvlm2::IMAGE_SEQ_LEN,
    };
    let kept: Vec<usize> = match a.kept {
        Some(k) => parse_list(k, "kept", "a token count (0, 1, 2, …)")?,
        None => vec![default_kept; times.len()],
    };
    if kept.len() != times.len() {
        return Err(CliError::Lengths {
            timestamps: times.len(),
            kept: kept.len(),
        });
    }
    // Frames for the families that take them (Apollo takes clips).
    let frames: Vec<FrameSlot> = times
        .iter()
        .zip(&kept)
        .map(|(&time_secs, &kept)| FrameSlot { time_secs, kept })
        .collect();
    let rendered = match family {
        Family::Tiny | Family::Videollama3 => {
            if stream {
                let after = times.iter().copied().fold(0.0, f64::max);
                let question = Message {
                    role: Role::User,
                    text: a.question.to_owned(),
                    time_secs: after,
                };
                videollama3::stream(&frames, &[question], Some(videollama3::SYSTEM))?
            } else {
                videollama3::offline(&frames, a.question, Some(videollama3::SYSTEM))?
            }
        }
        Family::Smolvlm2 | Family::Apollo if stream => {
            // What a live camera's cache holds, then the question (`family::smolvlm2`,
            // `family::apollo`: a clip's line ends at its last frame, 3/4 of a clip on).
            let clip_secs = if family == Family::Apollo {
                a.clip_duration
                    .parse::<f64>()
                    .map_err(|_| CliError::ClipDuration(a.clip_duration.to_owned()))?
            } else {
                0.0
            };
            let f =
                edgevlm::family::stream(family).map_err(|_| CliError::Format("stream".into()))?;
            let mut text = f.prefix(None).text();
            for fr in &frames {
                let end = fr.time_secs + clip_secs * 0.75;
                text.push_str(&f.item(fr.kept, Some((fr.time_secs, end)))?.text());
            }
            text.push_str(&f.ask(Role::User, a.question).text());
            return Ok(text);
        }
        Family::Smolvlm2 => smolvlm2::video_prompt(&frames, a.duration_secs, a.question)?,
        Family::Apollo => {
            let clip_duration = match a.clip_duration.parse::<i64>() {
                Ok(i) => ConfigNumber::Int(i),
                Err(_) => ConfigNumber::Float(
                    a.clip_duration
                        .parse()
                        .map_err(|_| CliError::ClipDuration(a.clip_duration.to_owned()))?,
                ),
            };
            let clip_secs = match clip_duration {
                ConfigNumber::Int(i) => i as f64,
                ConfigNumber::Float(x) => x,
            };
            let clips: Vec<ClipSlot> = times
                .iter()
                .zip(&kept)
                .map(|(&start_secs, &tokens)| ClipSlot {
                    start_secs,
                    // 4 frames at 4 / clip_duration fps: the last is 3/4 of a clip after the first.
                    end_secs: start_secs + clip_secs * 0.75,
                    tokens,
                })
                .collect();
            let duration_secs = a
                .duration_secs
                .unwrap_or_else(|| times.last().copied().unwrap_or(0.0) + clip_secs);
            apollo::prompt(
                &ApolloVideo {
                    clips,
                    clip_duration,
                    duration_secs,
                },
                a.question,
            )?
        }
    };
    Ok(rendered.text())
}
