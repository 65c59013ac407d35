//! GPU SAD backend (feature `prune-cuda`): cudarc + NVRTC, loaded at run time, probed before use.
//!
//! Only SADs are computed here; decisions stay in the shared CPU code, so GPU and CPU masks
//! are identical as long as the integer SADs are (parity tests in `tests/gpu_parity.rs`).
//!
//! cudarc with `dynamic-loading` panics (it does not return `Err`) when libcuda or libnvrtc is
//! missing, so [`probe`] checks `is_culib_present` for both libraries first and runs the whole
//! initialisation inside `catch_unwind` as a second line of defence. (With `panic = "abort"`
//! only the first line holds.)

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};

use super::cpu::PrevFrame;
use super::error::PruneError;
use super::grid::BlockGrid;

/// One thread block per (token block, frame pair): threads stride over the block's bytes,
/// accumulate |cur - prev| in u32, then reduce with warp shuffles. Slot 0 of `frames` is the
/// previous frame of the batch; pair `f` compares slot `f + 1` with slot `f`. All frames are
/// packed (`row_bytes` per row). Byte loads keep the kernel valid for any block side; the
/// transfer of the frames dominates anyway.
const KERNEL: &str = r#"
extern "C" __global__ void block_sad(
    const unsigned char* __restrict__ frames,
    unsigned int* __restrict__ sads,
    unsigned long long frame_bytes,
    unsigned long long row_bytes,
    unsigned int block,
    unsigned int cols,
    unsigned int tokens)
{
    const unsigned int token = blockIdx.x;
    const unsigned int pair = blockIdx.y;
    const unsigned int by = token / cols;
    const unsigned int bx = token - by * cols;
    const unsigned int brb = block * 3u;
    const unsigned long long origin =
        (unsigned long long)by * block * row_bytes + (unsigned long long)bx * brb;
    const unsigned char* prev = frames + (unsigned long long)pair * frame_bytes + origin;
    const unsigned char* cur = prev + frame_bytes;
    const unsigned int n = brb * block;
    unsigned int acc = 0;
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
        const unsigned int r = i / brb;
        const unsigned int c = i - r * brb;
        const unsigned long long off = (unsigned long long)r * row_bytes + c;
        const int a = cur[off];
        const int b = prev[off];
        acc += (unsigned int)(a > b ? a - b : b - a);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    __shared__ unsigned int warp_sums[32];
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned int warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        unsigned int v = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0u;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) sads[(unsigned long long)pair * tokens + token] = v;
    }
}
"#;

/// Threads per thread block (a multiple of 32, at most 1024).
const THREADS: u32 = 128;

/// Largest batch: the frame-pair index is the grid's y dimension.
pub(crate) const MAX_BATCH: usize = 65_535;

/// A CUDA device with the SAD kernel compiled and loaded (once per process is enough).
pub(crate) struct GpuContext {
    ctx: Arc<CudaContext>,
    func: CudaFunction,
    description: String,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuContext")
            .field("device", &self.description)
            .finish()
    }
}

impl GpuContext {
    /// Human-readable device description, e.g. "device 0: NVIDIA H200, sm_90".
    pub(crate) fn description(&self) -> &str {
        &self.description
    }
}

/// Probe for a usable GPU and compile the kernel; `Err` says why not (never panics when the
/// CUDA libraries are absent).
pub(crate) fn probe() -> Result<Arc<GpuContext>, String> {
    // SAFETY: these only try to dlopen the libraries by name and drop the handles.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("CUDA driver library (libcuda) not found".into());
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("NVRTC library (libnvrtc) not found".into());
    }
    match catch_unwind(AssertUnwindSafe(init)) {
        Ok(result) => result.map(Arc::new),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            Err(format!("CUDA initialisation panicked: {what}"))
        }
    }
}

/// Context on device 0, kernel compiled by NVRTC and loaded.
fn init() -> Result<GpuContext, String> {
    let count = CudaContext::device_count().map_err(|e| format!("CUDA driver error: {e}"))?;
    if count < 1 {
        return Err("no CUDA device".into());
    }
    let ctx = CudaContext::new(0).map_err(|e| format!("cannot open CUDA device 0: {e}"))?;
    let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
    let (major, minor) = ctx.compute_capability().unwrap_or((0, 0));
    let ptx = cudarc::nvrtc::compile_ptx(KERNEL)
        .map_err(|e| format!("NVRTC failed to compile the SAD kernel: {e}"))?;
    let module = ctx
        .load_module(ptx)
        .map_err(|e| format!("cannot load the SAD kernel: {e}"))?;
    let func = module
        .load_function("block_sad")
        .map_err(|e| format!("SAD kernel not found in module: {e}"))?;
    Ok(GpuContext {
        ctx,
        func,
        description: format!("device 0: {name}, sm_{major}{minor}"),
    })
}

/// Per-pruner GPU buffers: `max_batch + 1` packed frame slots and one SAD per token and pair.
pub(crate) struct CudaSad {
    gpu: Arc<GpuContext>,
    stream: Arc<CudaStream>,
    geom: BlockGrid,
    max_batch: usize,
    frames: CudaSlice<u8>,
    sads: CudaSlice<u32>,
    staging: Vec<u8>,
    host_sads: Vec<u32>,
}

impl std::fmt::Debug for CudaSad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaSad")
            .field("device", &self.gpu.description)
            .field("max_batch", &self.max_batch)
            .finish_non_exhaustive()
    }
}

/// Driver error as a [`PruneError`] naming the step that failed.
fn gpu_err(step: &str, e: impl std::fmt::Display) -> PruneError {
    PruneError::Gpu {
        message: format!("{step}: {e}"),
    }
}

impl CudaSad {
    /// Allocate device buffers for batches of up to `max_batch` frames of `geom`.
    pub(crate) fn new(
        gpu: &Arc<GpuContext>,
        geom: &BlockGrid,
        max_batch: usize,
    ) -> Result<Self, PruneError> {
        if max_batch == 0 || max_batch > MAX_BATCH {
            return Err(PruneError::BatchTooLarge {
                frames: max_batch,
                max_batch: MAX_BATCH,
            });
        }
        let stream = gpu
            .ctx
            .new_stream()
            .map_err(|e| gpu_err("create stream", e))?;
        let frame_bytes = geom.frame_bytes();
        let frames = stream
            .alloc_zeros::<u8>((max_batch + 1) * frame_bytes)
            .map_err(|e| gpu_err("allocate frame buffer", e))?;
        let sads = stream
            .alloc_zeros::<u32>(max_batch * geom.tokens())
            .map_err(|e| gpu_err("allocate SAD buffer", e))?;
        Ok(CudaSad {
            gpu: Arc::clone(gpu),
            stream,
            geom: *geom,
            max_batch,
            frames,
            sads,
            staging: vec![0; frame_bytes],
            host_sads: vec![0; max_batch * geom.tokens()],
        })
    }

    /// Largest batch accepted by [`CudaSad::sads`].
    pub(crate) fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// SADs of each frame against its predecessor (`prev` for the first): `frames.len() *
    /// tokens` values, frame-major. Frames are validated by the caller. Host uploads are from
    /// pageable memory, so each returns once its source is staged and the reused host buffer
    /// can be overwritten right away.
    pub(crate) fn sads(
        &mut self,
        prev: &PrevFrame,
        frames: &[&[u8]],
        stride: usize,
    ) -> Result<&[u32], PruneError> {
        let n = frames.len();
        if n > self.max_batch {
            return Err(PruneError::BatchTooLarge {
                frames: n,
                max_batch: self.max_batch,
            });
        }
        let fb = self.geom.frame_bytes();
        let rb = self.geom.row_bytes();
        {
            // The CPU keeps the previous frame in aligned slots; the kernel wants it packed.
            prev.unpack_into(&mut self.staging);
            let mut slot = self.frames.slice_mut(0..fb);
            self.stream
                .memcpy_htod(&self.staging, &mut slot)
                .map_err(|e| gpu_err("upload previous frame", e))?;
        }
        for (i, frame) in frames.iter().enumerate() {
            let src: &[u8] = if stride == rb {
                &frame[..fb]
            } else {
                // Padded rows: pack into one reusable host frame before the upload.
                for (y, dst) in self.staging.chunks_exact_mut(rb).enumerate() {
                    dst.copy_from_slice(&frame[y * stride..y * stride + rb]);
                }
                &self.staging
            };
            let mut slot = self.frames.slice_mut((i + 1) * fb..(i + 2) * fb);
            self.stream
                .memcpy_htod(src, &mut slot)
                .map_err(|e| gpu_err("upload frame", e))?;
        }
        let tokens = self.geom.tokens();
        let cfg = LaunchConfig {
            grid_dim: (tokens as u32, n as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (frame_bytes, row_bytes) = (fb as u64, rb as u64);
        let (block, cols, tokens_u32) = (
            self.geom.block() as u32,
            self.geom.cols() as u32,
            tokens as u32,
        );
        let mut launch = self.stream.launch_builder(&self.gpu.func);
        launch
            .arg(&self.frames)
            .arg(&mut self.sads)
            .arg(&frame_bytes)
            .arg(&row_bytes)
            .arg(&block)
            .arg(&cols)
            .arg(&tokens_u32);
        // SAFETY: the argument list matches `block_sad`'s signature, the grid covers `n` pairs
        // of `tokens` blocks inside buffers sized for `max_batch >= n`.
        unsafe { launch.launch(cfg) }.map_err(|e| gpu_err("launch SAD kernel", e))?;
        let out = &mut self.host_sads[..n * tokens];
        self.stream
            .memcpy_dtoh(&self.sads.slice(0..n * tokens), out)
            .map_err(|e| gpu_err("download SADs", e))?;
        self.stream
            .synchronize()
            .map_err(|e| gpu_err("synchronise", e))?;
        Ok(&self.host_sads[..n * tokens])
    }
}
