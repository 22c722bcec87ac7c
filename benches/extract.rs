//! Extraction speed against OpenCV SIFT, measured in one run on the same images (issue 14):
//!
//! 1. **per image**: descl's `Extractor::extract` (decode → DoG → patches → network) against
//!    OpenCV's `SIFT::detectAndCompute` with the same keypoint budget (its image decoded by
//!    `image::load_gray`, descl's decoder: descl links no OpenCV imgcodecs; until issue 25
//!    OpenCV's `imread(GRAYSCALE)`),
//!    alternating image by image; descl's time split into its stages (decode, detect, sample
//!    patches, network) by running them one by one;
//! 2. **folder**: images/s of descl's sequential path (`extract` on one image after another),
//!    of the pipelined folder path (`Extractor::extract_each`, what `descl extract DIR` runs)
//!    and of OpenCV SIFT over the same folder, alternating whole passes; the pipelined
//!    features are checked equal to the sequential ones.
//!
//! `cargo bench -p descl --bench extract` (release profile). Environment: `DESCL_DATA` (the
//! Strecha sets under `strecha/*/images`), `DESCL_BENCH_MODEL` (default: the default model;
//! `sift` and `rootsift` work too), `DESCL_BENCH_REPS` (passes, default 3). Prints a JSON
//! report and a markdown table; ratios are the point, not absolute seconds.

use descl::describe::Pending;
use descl::detect::{DetectorConfig, DEFAULT_MAX_KEYPOINTS};
use descl::model::{Device, DEFAULT_MODEL};
use descl::patch::PatchSampler;
use descl::pipeline::{Extractor, ExtractorConfig, COLMAP_MAX_IMAGE_SIZE};
use descl::progress::Silent;
use opencv::core::{Mat, Vector};
use opencv::prelude::*;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Default, Clone, Serialize)]
struct Stages {
    decode_s: f64,
    detect_s: f64,
    sample_s: f64,
    network_s: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    model: String,
    images: usize,
    max_keypoints: usize,
    keypoints_per_image: f64,
    threads: usize,
    /// Median over passes of the mean per-image seconds.
    per_image_descl_s: f64,
    per_image_opencv_sift_s: f64,
    /// descl / OpenCV (target ≤ 1.3).
    per_image_ratio: f64,
    /// Mean per-image seconds of each stage run alone (one pass).
    stages: Stages,
    folder_sequential_images_per_s: f64,
    folder_pipelined_images_per_s: f64,
    folder_opencv_sift_images_per_s: f64,
    /// pipelined / sequential (target ≥ 1.3).
    pipelined_vs_sequential: f64,
    /// pipelined / OpenCV (target ≥ 1.0).
    pipelined_vs_opencv: f64,
    pipelined_equals_sequential: bool,
}

fn data_root() -> PathBuf {
    std::env::var_os("DESCL_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")))
}

fn images() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for set in ["fountain-P11", "Herz-Jesus-P8"] {
        let dir = data_root().join("strecha").join(set).join("images");
        out.extend(descl::image::list_images(&dir).expect("Strecha images (DESCL_DATA)"));
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn opencv_sift(path: &std::path::Path, max_keypoints: usize) -> usize {
    // Decoded by descl's own decoder, as descl's side is: descl links no OpenCV imgcodecs.
    let img = descl::image::load_gray(path)
        .and_then(|g| g.to_mat_u8())
        .expect("decode");
    let mut sift = opencv::features2d::SIFT::create(
        max_keypoints as i32,
        descl::detect::dog::SIFT_OCTAVE_LAYERS,
        descl::detect::DEFAULT_CONTRAST_THRESHOLD as f64,
        descl::detect::dog::SIFT_EDGE_THRESHOLD,
        descl::detect::dog::SIFT_SIGMA,
    )
    .expect("SIFT");
    let mut kps = Vector::new();
    let mut desc = Mat::default();
    sift.detect_and_compute(&img, &Mat::default(), &mut kps, &mut desc, false)
        .expect("detectAndCompute");
    kps.len()
}

/// Each stage of one image alone, in order, seconds.
fn stages(x: &Extractor, path: &std::path::Path) -> Stages {
    let t = Instant::now();
    let img = descl::image::load_gray(path).expect("decode");
    let decode_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let det = descl::detect::detect(&img, x.detector()).expect("detect");
    let detect_s = t.elapsed().as_secs_f64();
    let frames: Vec<_> = det.iter().map(|d| d.frame).collect();
    let t = Instant::now();
    let sampler = PatchSampler::new(&img);
    let pending = x
        .describer()
        .prepare_frames(&img, Some(&sampler), &frames, x.detector().magnification)
        .expect("sample");
    let sample_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let n = match &pending {
        Pending::Patches(p) => p.shape()[0],
        Pending::Done(d) => d.len(),
    };
    let d = x.describer().finish(vec![pending]).expect("network");
    assert_eq!(d[0].len(), n);
    Stages {
        decode_s,
        detect_s,
        sample_s,
        network_s: t.elapsed().as_secs_f64(),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let model = std::env::var("DESCL_BENCH_MODEL").unwrap_or_else(|_| DEFAULT_MODEL.into());
    let reps: usize = std::env::var("DESCL_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let max_keypoints = DEFAULT_MAX_KEYPOINTS;
    let x = Extractor::new(ExtractorConfig {
        model: model.clone(),
        device: Device::Cpu,
        detector: DetectorConfig {
            max_keypoints,
            ..DetectorConfig::default()
        },
        max_image_size: COLMAP_MAX_IMAGE_SIZE,
    })
    .expect("extractor");
    let paths = images();
    let n = paths.len() as f64;
    // Warm-up: page cache, ORT's first-run allocations, OpenCV's thread pool.
    let first = x.extract(&paths[0]).expect("extract");
    opencv_sift(&paths[0], max_keypoints);

    // 1. Per image, alternating descl and OpenCV image by image.
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut keypoints = 0usize;
    for _ in 0..reps {
        let (mut a, mut b) = (0.0, 0.0);
        keypoints = 0;
        for p in &paths {
            let t = Instant::now();
            keypoints += x.extract(p).expect("extract").frames.len();
            a += t.elapsed().as_secs_f64();
            let t = Instant::now();
            opencv_sift(p, max_keypoints);
            b += t.elapsed().as_secs_f64();
        }
        ours.push(a / n);
        theirs.push(b / n);
    }
    let mut stage_sum = Stages::default();
    for p in &paths {
        let s = stages(&x, p);
        stage_sum.decode_s += s.decode_s / n;
        stage_sum.detect_s += s.detect_s / n;
        stage_sum.sample_s += s.sample_s / n;
        stage_sum.network_s += s.network_s / n;
    }

    // 2. Folder passes, alternating.
    let (mut seq, mut pipe, mut cv) = (Vec::new(), Vec::new(), Vec::new());
    let mut equal = true;
    for _ in 0..reps {
        let t = Instant::now();
        let sequential: Vec<_> = paths
            .iter()
            .map(|p| x.extract(p).expect("extract"))
            .collect();
        seq.push(n / t.elapsed().as_secs_f64());
        let t = Instant::now();
        let mut pipelined = Vec::new();
        x.extract_each(&paths, &Silent, |_, r, _| {
            pipelined.push(r.expect("extract"))
        });
        pipe.push(n / t.elapsed().as_secs_f64());
        equal &= pipelined == sequential;
        let t = Instant::now();
        for p in &paths {
            opencv_sift(p, max_keypoints);
        }
        cv.push(n / t.elapsed().as_secs_f64());
    }
    let (per_d, per_o) = (median(ours), median(theirs));
    let (s, p, c) = (median(seq), median(pipe), median(cv));
    let report = Report {
        model: first.meta.model.clone(),
        images: paths.len(),
        max_keypoints,
        keypoints_per_image: keypoints as f64 / n,
        threads: rayon::current_num_threads(),
        per_image_descl_s: per_d,
        per_image_opencv_sift_s: per_o,
        per_image_ratio: per_d / per_o,
        stages: stage_sum.clone(),
        folder_sequential_images_per_s: s,
        folder_pipelined_images_per_s: p,
        folder_opencv_sift_images_per_s: c,
        pipelined_vs_sequential: p / s,
        pipelined_vs_opencv: p / c,
        pipelined_equals_sequential: equal,
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("report JSON")
    );
    println!("\n| measure | descl | OpenCV SIFT | ratio |\n|---|---|---|---|");
    println!(
        "| per image (s), {} images, {:.0} keypoints | {per_d:.3} | {per_o:.3} | {:.2}× |",
        paths.len(),
        report.keypoints_per_image,
        report.per_image_ratio
    );
    println!(
        "| stages (s): decode / detect / sample / network | {:.3} / {:.3} / {:.3} / {:.3} | | |",
        stage_sum.decode_s, stage_sum.detect_s, stage_sum.sample_s, stage_sum.network_s
    );
    println!(
        "| folder, sequential (images/s) | {s:.2} | {c:.2} | {:.2}× |",
        s / c
    );
    println!(
        "| folder, pipelined (images/s) | {p:.2} | {c:.2} | {:.2}× (vs sequential {:.2}×) |",
        p / c,
        p / s
    );
    assert!(equal, "pipelined features differ from the sequential path");
}
