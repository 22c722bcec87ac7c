//! Inference throughput (patches per second) per batch size and precision, of a network under
//! libtorch ([`measure`]) or of an ONNX model under descl's own ONNX Runtime engine
//! ([`measure_onnx`], the path `descl extract` describes through). Both run where `descl`
//! itself cannot start: a GPU host with libtorch or an ONNX Runtime library but no OpenCV.
//! Random patches in [0, 1]; warm-up passes per batch size keep cuDNN's algorithm search and
//! allocator growth out of the timing; every timed pass ends with the descriptors on the host,
//! as a user's would be (a device synchronisation).

use crate::net::{Net, INPUT_SIZE};
use anyhow::{bail, Result};
use descl::model::Engine;
use ndarray::Array3;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// Warm-up passes per batch size before timing.
pub const WARMUP_PASSES: usize = 3;

/// One measured configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRow {
    pub batch: usize,
    /// "f32" or "f16".
    pub precision: &'static str,
    pub passes: usize,
    pub seconds: f64,
    pub patches_per_s: f64,
}

/// Times `net` on random batches of each size in `batches` for about `seconds` each; in
/// half precision (weights and input cast to f16) when `half` is set.
pub fn measure(
    net: &mut Net,
    device: Device,
    batches: &[usize],
    half: bool,
    seconds: f64,
) -> Result<Vec<ThroughputRow>> {
    let _guard = tch::no_grad_guard();
    if device.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(true);
    }
    let kind = if half {
        net.vs.half();
        Kind::Half
    } else {
        Kind::Float
    };
    let mut rows = Vec::with_capacity(batches.len());
    for &batch in batches {
        let x = Tensor::f_rand([batch as i64, 1, INPUT_SIZE, INPUT_SIZE], (kind, device))?;
        for _ in 0..WARMUP_PASSES {
            let _ = net.forward_t(&x, false)?.f_to_device(Device::Cpu)?;
        }
        let start = Instant::now();
        let mut passes = 0;
        while passes == 0 || start.elapsed().as_secs_f64() < seconds {
            let _ = net.forward_t(&x, false)?.f_to_device(Device::Cpu)?;
            passes += 1;
        }
        let elapsed = start.elapsed().as_secs_f64();
        rows.push(ThroughputRow {
            batch,
            precision: if half { "f16" } else { "f32" },
            passes,
            seconds: elapsed,
            patches_per_s: (passes * batch) as f64 / elapsed,
        });
    }
    Ok(rows)
}

/// Times descl's ONNX Runtime engine (`Engine::describe`, which runs at most
/// [`descl::model::engine::MAX_CHUNK`] patches per session call) on random batches of each size
/// in `batches` for about `seconds` each.
pub fn measure_onnx(
    engine: &Engine,
    batches: &[usize],
    seconds: f64,
) -> Result<Vec<ThroughputRow>> {
    let side = INPUT_SIZE as usize;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut rows = Vec::with_capacity(batches.len());
    for &batch in batches {
        let patches = Array3::from_shape_simple_fn((batch, side, side), || rng.gen::<f32>());
        let run = || -> Result<()> {
            let out = engine.describe(patches.view())?;
            if out.len() != batch {
                bail!("{batch} patches gave {} descriptors", out.len());
            }
            Ok(())
        };
        for _ in 0..WARMUP_PASSES {
            run()?;
        }
        let start = Instant::now();
        let mut passes = 0;
        while passes == 0 || start.elapsed().as_secs_f64() < seconds {
            run()?;
            passes += 1;
        }
        let elapsed = start.elapsed().as_secs_f64();
        rows.push(ThroughputRow {
            batch,
            precision: "f32",
            passes,
            seconds: elapsed,
            patches_per_s: (passes * batch) as f64 / elapsed,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Arch;

    #[test]
    fn onnx_engine_counts_every_patch_of_every_pass() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.onnx");
        let net = Net::new(Arch::Tfeat, 0.25, Device::Cpu).unwrap();
        crate::onnx::export(&net, &path, "throughput test", 6.0).unwrap();
        let engine = Engine::load(&path, descl::model::Device::Cpu).unwrap();
        let rows = measure_onnx(&engine, &[3, 5], 0.01).unwrap();
        assert_eq!(rows.len(), 2);
        for (row, batch) in rows.iter().zip([3, 5]) {
            assert_eq!(row.batch, batch);
            assert!(row.passes >= 1);
            let expected = (row.passes * batch) as f64 / row.seconds;
            assert!((row.patches_per_s - expected).abs() <= 1e-9 * expected);
        }
    }

    #[test]
    fn counts_every_patch_of_every_pass() {
        let mut net = Net::new(Arch::Tfeat, 0.25, Device::Cpu).unwrap();
        let rows = measure(&mut net, Device::Cpu, &[4, 8], false, 0.01).unwrap();
        assert_eq!(rows.len(), 2);
        for (row, batch) in rows.iter().zip([4, 8]) {
            assert_eq!(row.batch, batch);
            assert!(row.passes >= 1);
            let expected = (row.passes * batch) as f64 / row.seconds;
            assert!((row.patches_per_s - expected).abs() <= 1e-9 * expected);
        }
    }
}
