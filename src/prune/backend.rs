//! Choice of where batch SADs are computed: the GPU when built with `cuda` and one is usable,
//! the CPU otherwise. The choice comes back as a value the caller logs once; nothing here logs.

use std::fmt;
#[cfg(feature = "prune-cuda")]
use std::sync::Arc;

/// Which engine computes SADs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// Portable CPU code (always available).
    Cpu,
    /// CUDA kernel compiled with NVRTC (feature `prune-cuda`, GPU present).
    Cuda,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        })
    }
}

/// The backend picked by [`Backend::select`] and why; `Display` is the one log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendChoice {
    /// The engine chosen.
    pub kind: BackendKind,
    /// Why: the GPU's description, or why the CPU is used.
    pub reason: String,
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DiffFP SAD backend: {} ({})", self.kind, self.reason)
    }
}

/// A SAD engine handle, cheap to clone and share between the pruners of all cameras.
#[derive(Clone, Debug)]
pub struct Backend {
    inner: Inner,
}

#[derive(Clone, Debug)]
enum Inner {
    Cpu,
    #[cfg(feature = "prune-cuda")]
    Cuda(Arc<super::cuda::GpuContext>),
}

impl Backend {
    /// The CPU engine.
    pub fn cpu() -> Self {
        Backend { inner: Inner::Cpu }
    }

    /// Probe once at start: the GPU if `prefer_gpu`, the `cuda` feature and a usable device
    /// allow it, else the CPU; the [`BackendChoice`] says which and why.
    pub fn select(prefer_gpu: bool) -> (Backend, BackendChoice) {
        let cpu = |reason: &str| {
            (
                Backend::cpu(),
                BackendChoice {
                    kind: BackendKind::Cpu,
                    reason: reason.into(),
                },
            )
        };
        if !prefer_gpu {
            return cpu("GPU not requested");
        }
        #[cfg(feature = "prune-cuda")]
        {
            match super::cuda::probe() {
                Ok(gpu) => {
                    let reason = gpu.description().to_string();
                    (
                        Backend {
                            inner: Inner::Cuda(gpu),
                        },
                        BackendChoice {
                            kind: BackendKind::Cuda,
                            reason,
                        },
                    )
                }
                Err(why) => cpu(&why),
            }
        }
        #[cfg(not(feature = "prune-cuda"))]
        {
            cpu("built without the `cuda` feature")
        }
    }

    /// Which engine this is.
    pub fn kind(&self) -> BackendKind {
        match self.inner {
            Inner::Cpu => BackendKind::Cpu,
            #[cfg(feature = "prune-cuda")]
            Inner::Cuda(_) => BackendKind::Cuda,
        }
    }

    /// The GPU context, when this is the CUDA engine.
    #[cfg(feature = "prune-cuda")]
    pub(crate) fn gpu(&self) -> Option<&Arc<super::cuda::GpuContext>> {
        match &self.inner {
            Inner::Cuda(g) => Some(g),
            Inner::Cpu => None,
        }
    }
}
