//! `edgevlm prune`: DiffFP masks of a clip as JSON lines, for inspection and parity checks.

use super::{Decision, PruneParams, Pruner};
use std::io::{Read, Write};
use std::path::Path;

/// One JSON line: `{"frame":i,"grid":[rows,cols],"kept":n,"keep":"0110…",…}`, in that order.
pub fn json_line(frame: usize, d: &Decision) -> String {
    let (rows, cols) = d.grid();
    let threshold = d.threshold_used();
    // f32's shortest display ("0.1"), not its f64 widening ("0.10000000149011612"); JSON has no
    // infinity, so `off` mode reports null.
    let threshold = if threshold.is_finite() {
        threshold.to_string()
    } else {
        "null".into()
    };
    format!(
        "{{\"frame\":{frame},\"grid\":[{rows},{cols}],\"kept\":{},\"keep\":\"{}\",\"key_frame\":{},\"identical\":{},\"threshold\":{threshold}}}",
        d.kept(),
        d.mask_string(),
        d.key_frame(),
        d.identical(),
    )
}

/// Prunes consecutive packed RGB24 frames of `width` x `height` read from `path`, writing one
/// line per frame to `out`. Returns the number of frames; a file that ends inside a frame, an
/// unreadable file or a bad size is an error whose message says which.
pub fn raw_file(
    path: &Path,
    width: usize,
    height: usize,
    params: PruneParams,
    out: &mut impl Write,
) -> Result<usize, String> {
    let mut pruner = Pruner::new(width, height, params).map_err(|e| e.to_string())?;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let frame_bytes = width * height * 3;
    let mut buf = vec![0u8; frame_bytes];
    let mut frames = 0;
    loop {
        let got = read_full(&mut reader, &mut buf)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        if got == 0 {
            break;
        }
        if got < frame_bytes {
            return Err(format!(
                "{}: {frames} whole frame(s), then {got} bytes: the file is not a whole number of \
                 {width}x{height} RGB24 frames ({frame_bytes} bytes each)",
                path.display()
            ));
        }
        let d = pruner.push(&buf, width * 3).map_err(|e| e.to_string())?;
        writeln!(out, "{}", json_line(frames, d)).map_err(|e| format!("writing output: {e}"))?;
        frames += 1;
    }
    if frames == 0 {
        return Err(format!("{} holds no frame", path.display()));
    }
    Ok(frames)
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
