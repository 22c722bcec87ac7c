//! Quick MMA@3 check on the dev homography pairs (5 Oxford + 2 HPatches sequences, pairs 1→k):
//! DoG top-2048 per image, patches with magnification 6, descriptors from safetensors weights
//! (tch forward), mutual nearest neighbours, correct when the reprojection error < 3 px.
//! A one-off sanity check for a trained model against the official TFeat — the project's
//! benchmark (`descl bench`) is the reference harness.
//!
//! cargo run -p descl-training --example quick_mma -- tfeat:W1.safetensors tfeat:W2.safetensors

use anyhow::{Context, Result};
use descl::detect::{detect, DetectorConfig};
use descl::patch::PatchSampler;
use descl_training::net::{Arch, Net};
use descl_training::train::describe;
use tch::Device;

const MAX_KEYPOINTS: usize = 2048;
const MAGNIFICATION: f32 = 6.0;
const THRESHOLD_PX: f64 = 3.0;

fn read_h(path: &std::path::Path) -> Result<[[f64; 3]; 3]> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|t| t.parse())
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(v.len() == 9, "{}: not a 3×3 matrix", path.display());
    Ok([[v[0], v[1], v[2]], [v[3], v[4], v[5]], [v[6], v[7], v[8]]])
}

fn main() -> Result<()> {
    let root = descl::data::data_root().context("no data folder")?;
    let models: Vec<(String, Net)> = std::env::args()
        .skip(1)
        .map(|a| {
            let (arch, path) = a
                .split_once(':')
                .context("arguments are ARCH[@WIDTH]:WEIGHTS")?;
            let (arch, width) = match arch.split_once('@') {
                Some((a, w)) => (a, w.parse()?),
                None => (arch, 1.0),
            };
            Ok((
                a.clone(),
                Net::load(
                    Arch::parse(arch)?,
                    width,
                    std::path::Path::new(path),
                    Device::Cpu,
                )?,
            ))
        })
        .collect::<Result<_>>()?;
    let mut seqs = Vec::new();
    for s in ["graf", "boat", "bikes", "leuven", "wall"] {
        let d = root.join("oxford").join(s);
        seqs.push((
            s.to_string(),
            (1..=6)
                .map(|k| d.join(format!("img{k}.png")))
                .collect::<Vec<_>>(),
            (2..=6)
                .map(|k| d.join(format!("H1to{k}p")))
                .collect::<Vec<_>>(),
        ));
    }
    for s in ["v_graffiti", "v_wormhole"] {
        let d = root.join("hpatches-sequences").join(s);
        seqs.push((
            s.to_string(),
            (1..=6).map(|k| d.join(format!("{k}.ppm"))).collect(),
            (2..=6).map(|k| d.join(format!("H_1_{k}"))).collect(),
        ));
    }
    let mut sums = vec![0.0; models.len()];
    let mut pairs = 0usize;
    for (name, images, hs) in &seqs {
        let feats: Vec<_> = images
            .iter()
            .map(|p| -> Result<_> {
                let img = descl::image::load_gray(p)?;
                let cfg = DetectorConfig {
                    max_keypoints: MAX_KEYPOINTS,
                    magnification: MAGNIFICATION,
                    ..DetectorConfig::default()
                };
                let fr: Vec<_> = detect(&img, &cfg)?.into_iter().map(|d| d.frame).collect();
                let patches: Vec<f32> = PatchSampler::new(&img)
                    .sample(&fr)
                    .iter()
                    .copied()
                    .collect();
                Ok((fr, patches))
            })
            .collect::<Result<_>>()?;
        // Descriptors once per image and model.
        let descs: Vec<Vec<tch::Tensor>> = models
            .iter()
            .map(|(_, net)| {
                feats
                    .iter()
                    .map(|(_, p)| describe(net, p, Device::Cpu))
                    .collect::<Result<_>>()
            })
            .collect::<Result<_>>()?;
        let mut line = format!("{name:12}");
        for (k, hpath) in hs.iter().enumerate() {
            let h = read_h(hpath)?;
            let f1 = &feats[0].0;
            let f2 = &feats[k + 1].0;
            for (m, d) in descs.iter().enumerate() {
                let dist = descl_training::loss::hardnet::distance_matrix(&d[0], &d[k + 1]);
                let nn12 = Vec::<i64>::try_from(dist.argmin(1, false))?;
                let nn21 = Vec::<i64>::try_from(dist.argmin(0, false))?;
                let (mut matches, mut correct) = (0usize, 0usize);
                for (i, &j) in nn12.iter().enumerate() {
                    if nn21[j as usize] as usize != i {
                        continue;
                    }
                    matches += 1;
                    let (x, y) = (f1[i].x as f64, f1[i].y as f64);
                    let w = h[2][0] * x + h[2][1] * y + h[2][2];
                    let u = (h[0][0] * x + h[0][1] * y + h[0][2]) / w;
                    let v = (h[1][0] * x + h[1][1] * y + h[1][2]) / w;
                    let e = ((u - f2[j as usize].x as f64).powi(2)
                        + (v - f2[j as usize].y as f64).powi(2))
                    .sqrt();
                    if e < THRESHOLD_PX {
                        correct += 1;
                    }
                }
                let mma = if matches > 0 {
                    correct as f64 / matches as f64
                } else {
                    0.0
                };
                sums[m] += mma;
                line += &format!(" {:.3}", mma);
            }
            pairs += 1;
            line += " |";
        }
        eprintln!("{line}");
    }
    let result: serde_json::Map<String, serde_json::Value> = models
        .iter()
        .zip(&sums)
        .map(|((n, _), s)| (n.clone(), serde_json::json!(s / (pairs as f64))))
        .collect();
    println!(
        "{}",
        serde_json::json!({"pairs": pairs, "mma_at_3": result})
    );
    Ok(())
}
