//! Inference throughput of a network under libtorch (patches per second), per batch size and
//! precision: the GPU figures of the speed issue where ONNX Runtime's CUDA provider cannot be
//! installed (its wheel is larger than what a lent GPU host can be sent). Random patches in
//! [0, 1]; a warm-up pass per batch size keeps cuDNN's algorithm search and allocator growth out
//! of the timing; every timed pass ends in a device synchronisation (the output is copied to the
//! host, as a user's descriptors would be).

use crate::net::{Net, INPUT_SIZE};
use anyhow::Result;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Arch;

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
