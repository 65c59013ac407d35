//! The vision encoder: packed RGB frames in, visual tokens `[T, N, hidden]` out.
//!
//! Normalisation happens here (the graph takes normalised `pixel_values`): a 256-entry table per
//! channel turns `(v/255 - mean) / std` into one lookup. Cameras share runs (`run_shared`,
//! docs/ARCHITECTURE.md, "Batching across cameras"): each caller normalises its frames into its own
//! buffer, which a run takes as it is when it holds that caller's frames alone. With
//! `vision_batch_frames = 1` every call runs on its own from one buffer kept between calls.

use super::error::EngineError;
use super::manifest::{ClipSpec, Manifest, VisionLayout};
use super::stats::EngineStats;
use ort::session::Session;
use ort::value::TensorRef;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const MODEL: &str = "vision encoder";

/// Visual tokens of a batch of frames, frame-major: `[frames, tokens_per_frame, hidden]`.
#[derive(Clone, PartialEq)]
pub struct VisualTokens {
    frames: usize,
    tokens_per_frame: usize,
    hidden: usize,
    data: Vec<f32>,
}

impl std::fmt::Debug for VisualTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A frame is thousands of floats; say its shape instead.
        write!(
            f,
            "VisualTokens [{} x {} x {}]",
            self.frames, self.tokens_per_frame, self.hidden
        )
    }
}

impl VisualTokens {
    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Tokens per frame: `(height / 28) * (width / 28)` for patch 14, merge 2.
    pub fn tokens_per_frame(&self) -> usize {
        self.tokens_per_frame
    }

    /// Width of one token (the decoder's hidden size).
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// `[frames, tokens_per_frame, hidden]`.
    pub fn shape(&self) -> [usize; 3] {
        [self.frames, self.tokens_per_frame, self.hidden]
    }

    /// All tokens, frame-major, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// One frame's tokens, `tokens_per_frame * hidden` floats in raster order of the merged grid.
    pub fn frame(&self, i: usize) -> &[f32] {
        let n = self.tokens_per_frame * self.hidden;
        &self.data[i * n..(i + 1) * n]
    }

    /// One token of one frame.
    pub fn token(&self, frame: usize, token: usize) -> &[f32] {
        let start = (frame * self.tokens_per_frame + token) * self.hidden;
        &self.data[start..start + self.hidden]
    }

    /// Takes the buffer.
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }
}

struct State {
    session: Session,
    /// Planar `[T, 3, H, W]` input, reused across calls.
    pixels: Vec<f32>,
}

/// One caller's frames waiting for an encoder run (cross-camera batching).
struct Request {
    id: u64,
    size: (usize, usize),
    frames: usize,
    /// Normalised planar input of all its frames.
    pixels: Vec<f32>,
    /// Frames already run, and their features so far.
    done: usize,
    out: Vec<f32>,
}

/// Requests of every camera, and whether one caller is running a batch for all.
#[derive(Default)]
struct Queue {
    next_id: u64,
    pending: VecDeque<Request>,
    finished: HashMap<u64, Result<Vec<f32>, String>>,
    leading: bool,
    /// Who encoded lately (thread, when): a run waits for others only when there are others.
    callers: Vec<(std::thread::ThreadId, Instant)>,
}

/// Callers seen within this long count as cameras that may join a run.
const CALLERS_WINDOW: Duration = Duration::from_secs(2);

/// How much a batch took from the queue.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchCounts {
    /// Encoder runs.
    pub runs: u64,
    /// Frames in them.
    pub frames: u64,
    /// Runs that held frames of more than one caller.
    pub shared_runs: u64,
}

/// The vision encoder session with its normalisation.
pub struct VisionEncoder {
    state: Mutex<State>,
    queue: Mutex<Queue>,
    ready: Condvar,
    /// How long a run waits for other cameras' frames to join it.
    batch_wait: Duration,
    counts: Mutex<BatchCounts>,
    lut: [[f32; 256]; 3],
    input: String,
    output: String,
    /// `images` layout: the mask input and the square side (`None`: the `frames` layout).
    images: Option<(String, u32)>,
    /// `clips` layout: the clip and the square side.
    clips: Option<(ClipSpec, u32)>,
    token_px: u32,
    hidden: usize,
    max_batch: usize,
    stats: Arc<EngineStats>,
}

impl std::fmt::Debug for VisionEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisionEncoder")
            .field("token_px", &self.token_px)
            .field("hidden", &self.hidden)
            .field("max_batch", &self.max_batch)
            .finish_non_exhaustive()
    }
}

impl VisionEncoder {
    pub(crate) fn new(
        session: Session,
        m: &Manifest,
        max_batch: usize,
        batch_wait: Duration,
        stats: Arc<EngineStats>,
    ) -> VisionEncoder {
        let mut lut = [[0f32; 256]; 3];
        for (c, table) in lut.iter_mut().enumerate() {
            for (v, x) in table.iter_mut().enumerate() {
                // transformers' fused rescale + normalise, in f32: `(v - mean * 255) / (std * 255)`
                // (its `rescale_and_normalize`), so the values are bit-identical to the processor's
                // (tests/videollama3_parity.rs).
                let (mean, std) = (m.vision.mean[c] * 255.0, m.vision.std[c] * 255.0);
                *x = (v as f32 - mean) / std;
            }
        }
        VisionEncoder {
            state: Mutex::new(State {
                session,
                pixels: Vec::new(),
            }),
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            batch_wait,
            counts: Mutex::new(BatchCounts::default()),
            lut,
            input: m.vision.input.clone(),
            output: m.vision.output.clone(),
            images: match (m.vision.layout, &m.vision.pixel_mask, m.vision.image_size) {
                (VisionLayout::Images, Some(mask), Some(side)) => Some((mask.clone(), side)),
                _ => None,
            },
            clips: m.vision.clip().zip(m.vision.image_size),
            token_px: m.vision.token_px(),
            hidden: m.text.hidden_size as usize,
            max_batch: max_batch.max(1),
            stats,
        }
    }

    /// Pixels per token side (28): width and height must be multiples of it.
    pub fn token_px(&self) -> u32 {
        self.token_px
    }

    /// Width of one visual token's features (the LLM's hidden size).
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// The clip of a `clips` model: [`encode`](Self::encode) then takes whole clips of frames
    /// and gives one item of `tokens` per clip.
    pub fn clip(&self) -> Option<ClipSpec> {
        self.clips.map(|(c, _)| c)
    }

    /// Frames per encoder run; longer inputs are encoded in several runs.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Writes one packed RGB frame (`width * height * 3` bytes) as the graph's normalised planar
    /// input, `[3, height, width]` floats into `out` (which must hold `3 * width * height`).
    pub fn normalize_into(&self, frame: &[u8], out: &mut [f32]) {
        let plane = frame.len() / 3;
        let (r, gb) = out[..3 * plane].split_at_mut(plane);
        let (g, b) = gb.split_at_mut(plane);
        for (i, px) in frame.chunks_exact(3).enumerate() {
            r[i] = self.lut[0][px[0] as usize];
            g[i] = self.lut[1][px[1] as usize];
            b[i] = self.lut[2][px[2] as usize];
        }
    }

    /// Encodes packed RGB frames (`width * height * 3` bytes each, rows unpadded) of one geometry.
    pub fn encode(
        &self,
        frames: &[&[u8]],
        width: u32,
        height: u32,
    ) -> Result<VisualTokens, EngineError> {
        let px = self.token_px;
        if width == 0 || height == 0 || !width.is_multiple_of(px) || !height.is_multiple_of(px) {
            return Err(EngineError::input(
                MODEL,
                format!(
                    "frame size {width}x{height} is not a positive multiple of {px} on both sides"
                ),
            ));
        }
        if let Some((_, side)) = &self.images
            && (width != *side || height != *side)
        {
            return Err(EngineError::input(
                MODEL,
                format!(
                    "frame size {width}x{height}: this encoder takes {side}x{side} images \
                     (vision.image_size)"
                ),
            ));
        }
        if frames.is_empty() {
            return Err(EngineError::input(MODEL, "no frames to encode"));
        }
        if let Some((clip, side)) = self.clips {
            return self.encode_clips(frames, width, height, clip, side);
        }
        let (w, h) = (width as usize, height as usize);
        let frame_bytes = w * h * 3;
        if let Some((i, f)) = frames
            .iter()
            .enumerate()
            .find(|(_, f)| f.len() != frame_bytes)
        {
            return Err(EngineError::input(
                MODEL,
                format!(
                    "frame {i} has {} bytes; {width}x{height} packed RGB is {frame_bytes}",
                    f.len()
                ),
            ));
        }
        let tokens = (w / px as usize) * (h / px as usize);
        let per_frame = tokens * self.hidden;
        let data = if self.max_batch == 1 {
            self.run_alone(frames, w, h, tokens)?
        } else {
            self.run_shared(frames, w, h)?
        };
        debug_assert_eq!(data.len(), frames.len() * per_frame);
        Ok(VisualTokens {
            frames: frames.len(),
            tokens_per_frame: tokens,
            hidden: self.hidden,
            data,
        })
    }

    /// The `clips` layout: whole clips of `clip.frames` frames, one run for all of them (no
    /// batching across cameras: a clip is already a batch of frames).
    fn encode_clips(
        &self,
        frames: &[&[u8]],
        width: u32,
        height: u32,
        clip: ClipSpec,
        side: u32,
    ) -> Result<VisualTokens, EngineError> {
        if width != side || height != side {
            return Err(EngineError::input(
                MODEL,
                format!(
                    "frame size {width}x{height}: this encoder takes {side}x{side} frames \
                     (vision.image_size)"
                ),
            ));
        }
        let per_clip = clip.frames as usize;
        if !frames.len().is_multiple_of(per_clip) {
            return Err(EngineError::input(
                MODEL,
                format!(
                    "{} frames are not whole clips of {per_clip} (vision.clip_frames)",
                    frames.len()
                ),
            ));
        }
        let plane = 3 * (side as usize) * (side as usize);
        if let Some((i, f)) = frames.iter().enumerate().find(|(_, f)| f.len() != plane) {
            return Err(EngineError::input(
                MODEL,
                format!(
                    "frame {i} has {} bytes; {side}x{side} packed RGB is {plane}",
                    f.len()
                ),
            ));
        }
        let clips = frames.len() / per_clip;
        let tokens = clip.tokens as usize;
        let mut data = Vec::with_capacity(clips * tokens * self.hidden);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let State { session, pixels } = &mut *state;
        pixels.resize(frames.len() * plane, 0.0);
        for (frame, out) in frames.iter().zip(pixels.chunks_exact_mut(plane)) {
            self.normalize_into(frame, out);
        }
        let s = side as usize;
        self.run_session(session, &pixels[..], clips, s, s, tokens, &mut data)?;
        self.count(frames.len(), false);
        Ok(VisualTokens {
            frames: clips,
            tokens_per_frame: tokens,
            hidden: self.hidden,
            data,
        })
    }

    /// Runs, encoder runs that held frames of several callers, and frames, so far.
    pub fn batch_counts(&self) -> BatchCounts {
        *self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes `frames` in runs of at most `max_batch` frames, holding the session throughout.
    fn run_alone(
        &self,
        frames: &[&[u8]],
        w: usize,
        h: usize,
        tokens: usize,
    ) -> Result<Vec<f32>, EngineError> {
        let plane = w * h;
        let mut data = Vec::with_capacity(frames.len() * tokens * self.hidden);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let State { session, pixels } = &mut *state;
        for batch in frames.chunks(self.max_batch) {
            pixels.resize(batch.len() * 3 * plane, 0.0);
            for (frame, out) in batch.iter().zip(pixels.chunks_exact_mut(3 * plane)) {
                self.normalize_into(frame, out);
            }
            self.run_session(session, &pixels[..], batch.len(), w, h, tokens, &mut data)?;
            self.count(batch.len(), false);
        }
        Ok(data)
    }

    /// Cross-camera batching: the frames join a queue every camera shares; whoever finds no run
    /// in progress runs one for everybody, after waiting up to `batch_wait` for the batch to
    /// fill. A run takes the first request's geometry and gives every waiting request of that
    /// geometry a share of `max_batch` (what is left in queue order); what a run leaves of its
    /// requests goes to the back of the queue, so a camera with a backlog cannot hold the others
    /// back for more than one run, whatever their geometry.
    fn run_shared(&self, frames: &[&[u8]], w: usize, h: usize) -> Result<Vec<f32>, EngineError> {
        let plane = w * h;
        // Normalised outside any lock, by the caller's own thread.
        let mut pixels = vec![0.0f32; frames.len() * 3 * plane];
        for (frame, out) in frames.iter().zip(pixels.chunks_exact_mut(3 * plane)) {
            self.normalize_into(frame, out);
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let (me, now) = (std::thread::current().id(), Instant::now());
        q.callers
            .retain(|(t, at)| *t != me && now.duration_since(*at) < CALLERS_WINDOW);
        q.callers.push((me, now));
        let id = q.next_id;
        q.next_id += 1;
        q.pending.push_back(Request {
            id,
            size: (w, h),
            frames: frames.len(),
            pixels,
            done: 0,
            out: Vec::new(),
        });
        self.ready.notify_all();
        loop {
            if let Some(result) = q.finished.remove(&id) {
                return result.map_err(|e| EngineError::run(MODEL, e));
            }
            if q.leading {
                q = self.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            } else {
                q.leading = true;
                q = self.lead(q);
            }
        }
    }

    /// One batched run for the queue (the caller leads; the guard comes back with `leading` off).
    fn lead<'a>(
        &'a self,
        mut q: std::sync::MutexGuard<'a, Queue>,
    ) -> std::sync::MutexGuard<'a, Queue> {
        let waiting = |q: &Queue| -> usize {
            let Some(head) = q.pending.front() else {
                return 0;
            };
            q.pending
                .iter()
                .filter(|r| r.size == head.size)
                .map(|r| r.frames - r.done)
                .sum()
        };
        // Alone (one camera lately), a wait would only add latency.
        let deadline = Instant::now() + self.batch_wait;
        // Nor is there anything to wait for once every recent camera has a request in.
        while q.callers.len() > 1
            && q.pending.len() < q.callers.len()
            && waiting(&q) < self.max_batch
        {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            q = self
                .ready
                .wait_timeout(q, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        // The batch: the oldest request's geometry, a fair share each, then arrival order.
        let Some(size) = q.pending.front().map(|r| r.size) else {
            q.leading = false;
            return q;
        };
        let same: Vec<usize> = (0..q.pending.len())
            .filter(|&i| q.pending[i].size == size)
            .collect();
        let share = (self.max_batch / same.len()).max(1);
        let mut take = vec![0usize; q.pending.len()];
        let mut room = self.max_batch;
        for &i in &same {
            let n = (q.pending[i].frames - q.pending[i].done)
                .min(share)
                .min(room);
            take[i] = n;
            room -= n;
        }
        for &i in &same {
            let n = (q.pending[i].frames - q.pending[i].done - take[i]).min(room);
            take[i] += n;
            room -= n;
        }
        let (w, h) = size;
        let plane = 3 * w * h;
        let frames: usize = take.iter().sum();
        let mut parts = Vec::new();
        let whole = take
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, _)| i)
            .collect::<Vec<_>>();
        let input = match whole[..] {
            // One caller's whole request: its buffer as it is, no copy.
            [i] if q.pending[i].done == 0 && take[i] == q.pending[i].frames => {
                parts.push((q.pending[i].id, take[i]));
                std::mem::take(&mut q.pending[i].pixels)
            }
            _ => {
                let mut input = Vec::with_capacity(frames * plane);
                for &i in &whole {
                    let (r, n) = (&q.pending[i], take[i]);
                    input.extend_from_slice(&r.pixels[r.done * plane..(r.done + n) * plane]);
                    parts.push((r.id, n));
                }
                input
            }
        };
        drop(q);
        let tokens = (w / self.token_px as usize) * (h / self.token_px as usize);
        let mut out = Vec::with_capacity(frames * tokens * self.hidden);
        let result = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            self.run_session(&mut state.session, &input, frames, w, h, tokens, &mut out)
        };
        self.count(frames, parts.len() > 1);
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let per_frame = tokens * self.hidden;
        let served_ids: Vec<u64> = parts.iter().map(|(id, _)| *id).collect();
        let mut at = 0;
        for (id, n) in parts {
            let Some(i) = q.pending.iter().position(|r| r.id == id) else {
                continue;
            };
            let complete = match &result {
                Ok(()) => {
                    let r = &mut q.pending[i];
                    r.out
                        .extend_from_slice(&out[at * per_frame..(at + n) * per_frame]);
                    r.done += n;
                    at += n;
                    r.done == r.frames
                }
                Err(_) => true,
            };
            if complete && let Some(r) = q.pending.remove(i) {
                let value = match &result {
                    Ok(()) => Ok(r.out),
                    Err(e) => Err(e.to_string()),
                };
                q.finished.insert(r.id, value);
            }
        }
        // Round robin: what this run left of its requests goes behind the others, so the next
        // run starts with the oldest request it did not serve (another geometry included).
        let mut served = Vec::new();
        for id in &served_ids {
            if let Some(i) = q.pending.iter().position(|r| r.id == *id)
                && let Some(r) = q.pending.remove(i)
            {
                served.push(r);
            }
        }
        q.pending.extend(served);
        q.leading = false;
        self.ready.notify_all();
        q
    }

    /// One session run over `n` normalised frames in `input`; appends their features to `data`.
    #[allow(clippy::too_many_arguments)]
    fn run_session(
        &self,
        session: &mut Session,
        input: &[f32],
        n: usize,
        w: usize,
        h: usize,
        tokens: usize,
        data: &mut Vec<f32>,
    ) -> Result<(), EngineError> {
        // Normalisation is excluded: the stage time is what the provider costs.
        let started = Instant::now();
        let outputs = match &self.images {
            None if self.clips.is_some() => {
                let f = self.clips.map_or(1, |(c, _)| c.frames as usize);
                let value = TensorRef::from_array_view(([n, f, 3, h, w], input))
                    .map_err(|e| EngineError::run(MODEL, e))?;
                session.run(ort::inputs![self.input.as_str() => value])
            }
            None => {
                // Borrowed: ONNX Runtime reads the buffer in place on the CPU.
                let value = TensorRef::from_array_view(([n, 3, h, w], input))
                    .map_err(|e| EngineError::run(MODEL, e))?;
                session.run(ort::inputs![self.input.as_str() => value])
            }
            Some((mask_name, _)) => {
                // One batch of `n` images, every pixel real (frames are never padded).
                let value = TensorRef::from_array_view(([1, n, 3, h, w], input))
                    .map_err(|e| EngineError::run(MODEL, e))?;
                let mask = vec![true; n * h * w];
                let mask = TensorRef::from_array_view(([1, n, h, w], &mask[..]))
                    .map_err(|e| EngineError::run(MODEL, e))?;
                session.run(ort::inputs![
                    self.input.as_str() => value,
                    mask_name.as_str() => mask
                ])
            }
        }
        .map_err(|e| EngineError::run(MODEL, e))?;
        let value = outputs
            .get(&self.output)
            .ok_or_else(|| EngineError::run(MODEL, format!("no output `{}`", self.output)))?;
        let (out_shape, out) = value
            .try_extract_tensor::<f32>()
            .map_err(|e| EngineError::run(MODEL, e))?;
        let want = [n as i64, tokens as i64, self.hidden as i64];
        let matches = match self.images {
            None => **out_shape == want,
            Some(_) => **out_shape == [want[0] * want[1], want[2]],
        };
        if !matches {
            return Err(EngineError::run(
                MODEL,
                format!(
                    "output `{}` has shape {out_shape}, expected {want:?} for {w}x{h}",
                    self.output
                ),
            ));
        }
        data.extend_from_slice(out);
        // Frames, whatever the layout: a clip counts its frames.
        let frames = n * self.clips.map_or(1, |(c, _)| c.frames as usize);
        self.stats.record_vision(frames, started.elapsed());
        Ok(())
    }

    fn count(&self, frames: usize, shared: bool) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.runs += 1;
        c.frames += frames as u64;
        c.shared_runs += u64::from(shared);
    }
}
