//! The synthetic generator itself (OpenCV warps, JPEG round trips, DoG detection): built with
//! feature `tracks` only; [`super`] holds the config and documents the method.

use super::{SyntheticConfig, MIN_POSITION_TOLERANCE_PX};
use crate::data::jitter::FrameJitter;
use crate::data::{TrackSet, PATCH_PIXELS};
use anyhow::{bail, Context, Result};
use descl::detect::{detect, DetectorConfig, DetectorKind};
use descl::frame::Frame;
use descl::geometry::mul3;
use descl::image::{load_gray, GrayImage};
use descl::patch::PatchSampler;
use indicatif::{ProgressBar, ProgressStyle};
use opencv::core::{Mat, Size, Vector, BORDER_REFLECT_101};
use opencv::prelude::*;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// 3×3 homography, row-major, x' ~ H x.
pub type Homography = descl::geometry::Mat3;

/// Maps a point through `h`.
pub fn apply(h: &Homography, x: f64, y: f64) -> (f64, f64) {
    let w = h[2][0] * x + h[2][1] * y + h[2][2];
    (
        (h[0][0] * x + h[0][1] * y + h[0][2]) / w,
        (h[1][0] * x + h[1][1] * y + h[1][2]) / w,
    )
}

/// Jacobian of `x ↦ H x` at (x, y): the local affine map of the homography.
pub fn jacobian(h: &Homography, x: f64, y: f64) -> [[f64; 2]; 2] {
    let w = h[2][0] * x + h[2][1] * y + h[2][2];
    let (u, v) = apply(h, x, y);
    [
        [(h[0][0] - u * h[2][0]) / w, (h[0][1] - u * h[2][1]) / w],
        [(h[1][0] - v * h[2][0]) / w, (h[1][1] - v * h[2][1]) / w],
    ]
}

/// Determinant magnitude at or below which a homography counts as singular.
const SINGULAR_DET: f64 = 1e-12;

/// Inverse of a 3×3 matrix (adjugate / determinant, [`descl::geometry::invert3`]).
pub fn invert(h: &Homography) -> Result<Homography> {
    descl::geometry::invert3(h, SINGULAR_DET).context("singular homography")
}

fn mul2(a: &[[f64; 2]; 2], b: &[[f64; 2]; 2]) -> [[f64; 2]; 2] {
    [
        [
            a[0][0] * b[0][0] + a[0][1] * b[1][0],
            a[0][0] * b[0][1] + a[0][1] * b[1][1],
        ],
        [
            a[1][0] * b[0][0] + a[1][1] * b[1][0],
            a[1][0] * b[0][1] + a[1][1] * b[1][1],
        ],
    ]
}

fn inv2(a: &[[f64; 2]; 2]) -> Option<[[f64; 2]; 2]> {
    let det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
    (det.abs() > 1e-12).then(|| {
        [
            [a[1][1] / det, -a[0][1] / det],
            [-a[1][0] / det, a[0][0] / det],
        ]
    })
}

fn rot2(t: f64) -> [[f64; 2]; 2] {
    let (s, c) = t.sin_cos();
    [[c, -s], [s, c]]
}

fn frame_a(f: &Frame) -> [[f64; 2]; 2] {
    f.a.map(|r| r.map(f64::from))
}

/// A random homography of a `w`×`h` image onto a canvas of the same size, centred:
/// T(c) · P · R(θ) · s·[R(φ) diag(t, 1) R(−φ)] · T(−c) with perspective P.
pub fn random_homography<R: Rng>(
    rng: &mut R,
    cfg: &SyntheticConfig,
    w: usize,
    h: usize,
) -> Homography {
    let (cx, cy) = (w as f64 / 2.0, h as f64 / 2.0);
    let theta = rng.gen_range(-1.0..=1.0) * cfg.max_rotation_deg.to_radians();
    let scale = (rng.gen_range(cfg.scale[0].ln()..=cfg.scale[1].ln())).exp();
    let tilt = (rng.gen_range(0.0..=cfg.max_tilt.max(1.0).ln())).exp();
    let phi = rng.gen_range(0.0..std::f64::consts::PI);
    let aff = mul2(
        &rot2(theta),
        &mul2(&rot2(phi), &mul2(&[[tilt, 0.0], [0.0, 1.0]], &rot2(-phi))),
    );
    let half_diag = (cx * cx + cy * cy).sqrt();
    let p = [
        rng.gen_range(-1.0..=1.0) * cfg.max_perspective / half_diag,
        rng.gen_range(-1.0..=1.0) * cfg.max_perspective / half_diag,
    ];
    let centre: Homography = [[1.0, 0.0, -cx], [0.0, 1.0, -cy], [0.0, 0.0, 1.0]];
    let linear: Homography = [
        [scale * aff[0][0], scale * aff[0][1], 0.0],
        [scale * aff[1][0], scale * aff[1][1], 0.0],
        [0.0, 0.0, 1.0],
    ];
    let persp: Homography = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [p[0], p[1], 1.0]];
    let back: Homography = [[1.0, 0.0, cx], [0.0, 1.0, cy], [0.0, 0.0, 1.0]];
    mul3(&back, &mul3(&persp, &mul3(&linear, &centre)))
}

/// Downscales `img` (area interpolation) so the longer side is at most `max_side`.
fn limit_size(img: GrayImage, max_side: usize) -> Result<GrayImage> {
    let long = img.width.max(img.height);
    if long <= max_side {
        return Ok(img);
    }
    let f = max_side as f64 / long as f64;
    let size = Size::new(
        (img.width as f64 * f).round() as i32,
        (img.height as f64 * f).round() as i32,
    );
    let mut out = Mat::default();
    opencv::imgproc::resize(
        &img.to_mat_f32()?,
        &mut out,
        size,
        0.0,
        0.0,
        opencv::imgproc::INTER_AREA,
    )?;
    Ok(GrayImage::from_mat_f32(&out)?)
}

/// Gamma, contrast/brightness, blur, noise and a JPEG round trip, each drawn from `cfg`.
fn photometric<R: Rng>(rng: &mut R, cfg: &SyntheticConfig, img: GrayImage) -> Result<GrayImage> {
    let gamma = rng.gen_range(cfg.gamma[0].ln()..=cfg.gamma[1].ln()).exp() as f32;
    let contrast = rng.gen_range(cfg.contrast[0]..=cfg.contrast[1]) as f32;
    let brightness = rng.gen_range(-cfg.brightness..=cfg.brightness) as f32;
    let mut img = img;
    for v in img.data.iter_mut() {
        *v = ((v.clamp(0.0, 1.0).powf(gamma) - 0.5) * contrast + 0.5 + brightness).clamp(0.0, 1.0);
    }
    if rng.gen_bool(cfg.blur_prob) {
        let sigma = rng.gen_range(0.3..=cfg.max_blur_sigma.max(0.3));
        let mut out = Mat::default();
        opencv::imgproc::gaussian_blur(
            &img.to_mat_f32()?,
            &mut out,
            Size::new(0, 0),
            sigma,
            sigma,
            BORDER_REFLECT_101,
        )?;
        img = GrayImage::from_mat_f32(&out)?;
    }
    let noise = rng.gen_range(0.0..=cfg.max_noise);
    if noise > 0.0 {
        let normal = Normal::new(0.0, noise).context("noise σ")?;
        for v in img.data.iter_mut() {
            *v = (*v + normal.sample(rng) as f32).clamp(0.0, 1.0);
        }
    }
    if rng.gen_bool(cfg.jpeg_prob) {
        let quality = rng.gen_range(cfg.jpeg_quality[0]..=cfg.jpeg_quality[1]);
        let bytes: Vec<u8> = img.data.iter().map(|v| (v * 255.0).round() as u8).collect();
        let m = Mat::new_rows_cols_with_data(img.height as i32, img.width as i32, &bytes)?
            .try_clone()?;
        let mut buf = Vector::<u8>::new();
        let params = Vector::<i32>::from_slice(&[opencv::imgcodecs::IMWRITE_JPEG_QUALITY, quality]);
        opencv::imgcodecs::imencode(".jpg", &m, &mut buf, &params)?;
        let dec = opencv::imgcodecs::imdecode(&buf, opencv::imgcodecs::IMREAD_GRAYSCALE)?;
        let data = dec
            .data_typed::<u8>()?
            .iter()
            .map(|&b| b as f32 / 255.0)
            .collect();
        img = GrayImage {
            width: img.width,
            height: img.height,
            data,
        };
    }
    Ok(img)
}

/// Rotation angle (radians) and scale of the 2×2 map `m`'s closest similarity.
fn similarity_of(m: &[[f64; 2]; 2]) -> (f64, f64) {
    let angle = (m[1][0] - m[0][1]).atan2(m[0][0] + m[1][1]);
    let scale = (m[0][0] * m[1][1] - m[0][1] * m[1][0]).abs().sqrt();
    (angle, scale)
}

/// True when the frame's patch square, mapped into the source photo, lies inside it.
fn inside_source(f: &Frame, to_source: &Homography, w: usize, h: usize) -> bool {
    [(-1.0, -1.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)]
        .iter()
        .all(|&(u, v)| {
            let x = f.x as f64 + f.a[0][0] as f64 * u + f.a[0][1] as f64 * v;
            let y = f.y as f64 + f.a[1][0] as f64 * u + f.a[1][1] as f64 * v;
            let (sx, sy) = apply(to_source, x, y);
            sx >= 0.0 && sy >= 0.0 && sx <= (w - 1) as f64 && sy <= (h - 1) as f64
        })
}

/// Adds HPatches-style jitter to a frame: rotation, isotropic scale, shift ([`FrameJitter`]).
fn jitter<R: Rng>(rng: &mut R, cfg: &SyntheticConfig, f: &Frame) -> Result<Frame> {
    FrameJitter {
        rotation_deg: cfg.jitter_rotation_deg,
        scale: cfg.jitter_scale,
        shift: cfg.jitter_shift,
    }
    .apply(rng, f)
}

/// Tracks of one view group: for each class, one frame per view.
pub fn match_tracks(
    cfg: &SyntheticConfig,
    homographies: &[Homography],
    frames: &[Vec<Frame>],
    source_size: (usize, usize),
) -> Result<Vec<Vec<Frame>>> {
    let inverses: Vec<Homography> = homographies.iter().map(invert).collect::<Result<_>>()?;
    let mut used: Vec<Vec<bool>> = frames.iter().map(|f| vec![false; f.len()]).collect();
    let mut tracks = Vec::new();
    let angle_tol = cfg.angle_tolerance_deg.to_radians();
    'anchor: for f0 in &frames[0] {
        if !inside_source(f0, &inverses[0], source_size.0, source_size.1) {
            continue;
        }
        let (sx, sy) = apply(&inverses[0], f0.x as f64, f0.y as f64);
        let j0_inv = inv2(&jacobian(&homographies[0], sx, sy)).context("degenerate view")?;
        let mut track = vec![*f0];
        let mut picks = Vec::new();
        for v in 1..frames.len() {
            let (px, py) = apply(&homographies[v], sx, sy);
            let a_pred = mul2(
                &mul2(&jacobian(&homographies[v], sx, sy), &j0_inv),
                &frame_a(f0),
            );
            let (_, pred_scale) = similarity_of(&a_pred);
            let tol = (cfg.position_tolerance * pred_scale).max(MIN_POSITION_TOLERANCE_PX);
            let mut best: Option<(f64, usize)> = None;
            for (i, f) in frames[v].iter().enumerate() {
                if used[v][i] {
                    continue;
                }
                let d = ((f.x as f64 - px).powi(2) + (f.y as f64 - py).powi(2)).sqrt();
                if d > tol {
                    continue;
                }
                let Some(fa_inv) = inv2(&frame_a(f)) else {
                    continue;
                };
                let (angle, scale) = similarity_of(&mul2(&fa_inv, &a_pred));
                if angle.abs() > angle_tol
                    || scale > cfg.scale_tolerance
                    || scale < 1.0 / cfg.scale_tolerance
                {
                    continue;
                }
                if best.is_none_or(|(bd, _)| d < bd) {
                    best = Some((d, i));
                }
            }
            let Some((_, i)) = best else { continue 'anchor };
            if !inside_source(&frames[v][i], &inverses[v], source_size.0, source_size.1) {
                continue 'anchor;
            }
            picks.push((v, i));
            track.push(frames[v][i]);
        }
        for (v, i) in picks {
            used[v][i] = true;
        }
        tracks.push(track);
    }
    Ok(tracks)
}

/// The photos under `dir` (.jpg/.jpeg/.png, recursive, sorted).
pub fn list_images(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in
            std::fs::read_dir(&d).with_context(|| format!("{}: cannot list", d.display()))?
        {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "jpg" | "jpeg" | "png"))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// One view group of one photo → its classes' patches (classes × views × 1024).
fn render_group(cfg: &SyntheticConfig, source: &GrayImage, seed: u64) -> Result<Vec<Vec<f32>>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut homographies = Vec::new();
    let mut images = Vec::new();
    let mut frames = Vec::new();
    for _ in 0..cfg.views {
        let h = random_homography(&mut rng, cfg, source.width, source.height);
        let view = photometric(&mut rng, cfg, source.warp_perspective(&h)?)?;
        let detector = DetectorConfig {
            kind: DetectorKind::Dog,
            max_keypoints: cfg.max_keypoints,
            magnification: cfg.magnification as f32,
            ..DetectorConfig::default()
        };
        frames.push(
            detect(&view, &detector)?
                .into_iter()
                .map(|d| d.frame)
                .collect::<Vec<_>>(),
        );
        homographies.push(h);
        images.push(view);
    }
    let tracks = match_tracks(cfg, &homographies, &frames, (source.width, source.height))?;
    let mut per_view: Vec<Vec<Frame>> = vec![Vec::with_capacity(tracks.len()); cfg.views];
    for t in &tracks {
        for (v, f) in t.iter().enumerate() {
            per_view[v].push(jitter(&mut rng, cfg, f)?);
        }
    }
    let patches: Vec<Vec<f32>> = images
        .iter()
        .zip(&per_view)
        .map(|(img, fr)| PatchSampler::new(img).sample(fr).iter().copied().collect())
        .collect();
    Ok((0..tracks.len())
        .map(|c| {
            patches
                .iter()
                .flat_map(|p| p[c * PATCH_PIXELS..(c + 1) * PATCH_PIXELS].iter().copied())
                .collect()
        })
        .collect())
}

/// Generates the track set (deterministic for a given config; parallel over photos × groups).
pub fn generate(cfg: &SyntheticConfig) -> Result<TrackSet> {
    if cfg.views < 2 {
        bail!("synthetic tracks need views ≥ 2");
    }
    let dir = match &cfg.images {
        Some(d) => d.clone(),
        None => descl::data::data_root()
            .context("no data folder (set DESCL_DATA)")?
            .join("train"),
    };
    let photos: Vec<PathBuf> = list_images(&dir)?
        .into_iter()
        .filter(|p| {
            let top = p
                .strip_prefix(&dir)
                .ok()
                .and_then(|r| r.components().next());
            !top.is_some_and(|c| cfg.exclude.iter().any(|e| c.as_os_str() == e.as_str()))
        })
        .collect();
    if let Some(missing) = cfg.exclude.iter().find(|e| !dir.join(e).is_dir()) {
        bail!(
            "{}: excluded folder {missing:?} does not exist",
            dir.display()
        );
    }
    if photos.is_empty() {
        bail!("{}: no training photos", dir.display());
    }
    let sources: Vec<GrayImage> = photos
        .iter()
        .map(|p| {
            let img = load_gray(p)?;
            limit_size(img, cfg.max_side)
        })
        .collect::<Result<_>>()?;
    let jobs: Vec<(usize, usize)> = (0..sources.len())
        .flat_map(|i| (0..cfg.groups).map(move |g| (i, g)))
        .collect();
    let bar = ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "tracks [{elapsed_precise}<{eta_precise}] {bar:40} {pos}/{len} view groups",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // Each group is quantised to u8 as soon as it is rendered, so memory stays at the file size.
    let groups: Vec<TrackSet> = jobs
        .par_iter()
        .map(|&(i, g)| {
            let seed = cfg.seed ^ ((i as u64) << 32 | g as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let classes = render_group(cfg, &sources[i], seed)
                .with_context(|| format!("{}", photos[i].display()))?;
            let mut set = TrackSet::new(cfg.views, cfg.magnification, serde_json::Value::Null);
            for class in &classes {
                let views: Vec<&[f32]> = class.chunks(PATCH_PIXELS).collect();
                set.push_class(&views)?;
            }
            bar.inc(1);
            Ok(set)
        })
        .collect::<Result<_>>()?;
    bar.finish();
    let root = descl::data::data_root();
    let names: Vec<String> = photos
        .iter()
        .map(|p| {
            root.as_ref()
                .and_then(|r| p.strip_prefix(r).ok())
                .unwrap_or(p)
                .display()
                .to_string()
        })
        .collect();
    let mut set = TrackSet::new(
        cfg.views,
        cfg.magnification,
        serde_json::json!({
            "generator": "synthetic",
            "config": cfg,
            "frames": crate::data::TRACK_FRAMES,
            "photos": names,
        }),
    );
    for group in groups {
        set.header.classes += group.header.classes;
        set.pixels.extend_from_slice(&group.pixels);
    }
    Ok(set)
}
