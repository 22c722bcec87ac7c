//! Patches per second of `Engine::describe` (chunking, output checks, L2 normalisation or bit
//! packing) against a bare ONNX Runtime session running the same model on the same pre-made
//! patches in the same chunks. Goal: describe keeps ≥ 90 % of the raw session's rate.
//!
//! `cargo bench -p descl --bench describe` (uses the default model, or `DESCL_BENCH_MODEL`
//! = a model name or .onnx path).

use criterion::{Criterion, Throughput};
use descl::model::engine::{ort_environment, MAX_CHUNK};
use descl::model::{resolve, Device, Engine, DEFAULT_MODEL};
use descl::patch::PATCH_SIZE;
use ndarray::Array3;
use ort::session::Session;
use ort::value::TensorRef;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Patches per measured call: four full chunks.
const N_PATCHES: usize = 4 * MAX_CHUNK;
/// Interleaved repetitions of the final ratio measurement.
const RATIO_REPS: usize = 9;

fn patches() -> Array3<f32> {
    let mut s = 12345u64;
    Array3::from_shape_simple_fn((N_PATCHES, PATCH_SIZE, PATCH_SIZE), || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 40) as f32 / (1u64 << 24) as f32
    })
}

/// The raw peer: one ort session, same chunks, outputs copied out and nothing else.
fn raw_run(session: &mut Session, flat: &[f32], out: &mut Vec<f32>) {
    out.clear();
    let per_patch = PATCH_SIZE * PATCH_SIZE;
    for chunk in flat.chunks(MAX_CHUNK * per_patch) {
        let m = chunk.len() / per_patch;
        let t =
            TensorRef::from_array_view(([m, 1, PATCH_SIZE, PATCH_SIZE], chunk)).expect("tensor");
        let outputs = session.run(ort::inputs![t]).expect("run");
        let (_, data) = outputs[0].try_extract_tensor::<f32>().expect("extract");
        out.extend_from_slice(data);
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let name = std::env::var("DESCL_BENCH_MODEL").unwrap_or_else(|_| DEFAULT_MODEL.to_string());
    let model = match resolve(&name) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("describe bench skipped: model `{name}` unavailable: {e}");
            return;
        }
    };
    let engine = Engine::load_resolved(&model, Device::Cpu).expect("engine");
    let env = ort_environment().expect("ONNX Runtime");
    let mut session = Session::builder(&env)
        .expect("builder")
        .commit_from_file(&model.onnx)
        .expect("session");
    let patches = patches();
    let flat = patches.as_slice().expect("contiguous");
    let mut raw_out = Vec::new();

    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("describe");
        g.throughput(Throughput::Elements(N_PATCHES as u64));
        g.bench_function("engine_describe", |b| {
            b.iter(|| black_box(engine.describe(patches.view()).expect("describe")))
        });
        g.bench_function("raw_ort_session", |b| {
            b.iter(|| raw_run(&mut session, black_box(flat), &mut raw_out))
        });
        g.finish();
    }
    c.final_summary();

    // Interleaved runs, alternating which side goes first, so both see the same machine load;
    // the minimum is the least noisy estimate of each side's own cost on a busy machine.
    let (mut t_engine, mut t_raw) = (Vec::new(), Vec::new());
    for rep in 0..RATIO_REPS {
        for side in [rep % 2, 1 - rep % 2] {
            let t = Instant::now();
            if side == 0 {
                black_box(engine.describe(patches.view()).expect("describe"));
                t_engine.push(t.elapsed());
            } else {
                raw_run(&mut session, flat, &mut raw_out);
                t_raw.push(t.elapsed());
            }
        }
    }
    let rate = |t: Duration| N_PATCHES as f64 / t.as_secs_f64();
    let min = |v: &[Duration]| v.iter().copied().min().unwrap_or_default();
    let (me, mr) = (min(&t_engine), min(&t_raw));
    let (de, dr) = (median(t_engine), median(t_raw));
    println!(
        "describe: {:.0} patches/s, raw ORT session: {:.0} patches/s (best of {RATIO_REPS}): ratio {:.1} % \
         (medians: {:.1} %; goal ≥ 90 %)",
        rate(me),
        rate(mr),
        100.0 * rate(me) / rate(mr),
        100.0 * rate(de) / rate(dr)
    );
}
