//! Harris-Affine detector (Mikolajczyk & Schmid, "Scale & affine invariant interest point
//! detectors", IJCV 2004), in Rust.
//!
//! 1. Multi-scale Harris: at integration scales σ_I = σ₀·ξⁿ with differentiation scale
//!    σ_D = s·σ_I, the scale-normalised second moment matrix
//!    μ = σ_D² · g(σ_I) ∗ [[L_x², L_xL_y], [L_xL_y, L_y²]] (eq. 2) and the Harris measure
//!    R = det μ − α·trace² μ (eq. 3); spatial 3×3 maxima above a threshold.
//! 2. Characteristic scale (Harris-Laplace, §3.1): keep a point at level n only if the
//!    scale-normalised Laplacian |σ_I²(L_xx + L_yy)| (eq. 4) is larger there than at levels n±1.
//! 3. Affine shape adaptation (§3.2, eq. 7–9): sample the region in the frame normalised by the
//!    current U, measure μ there, update U ← U·μ^(−½) (det U = 1), re-localise at the Harris
//!    maximum, until the isotropy λ_min/λ_max > 0.95; too elongated or not converged is rejected.
//! 4. Orientation: dominant gradient direction in the normalised region (36-bin histogram as
//!    Lowe 2004 §5), so the frame `a = m·σ_I·U·R(θ)` is fully covariant.
//!
//! Scale levels are computed on the Gaussian pyramid octave where σ_D spans a few pixels, and
//! normalised windows are sampled from the pyramid level keeping the step ≤ 1 px, so the cost
//! does not grow with the scale.

use crate::frame::{Detection, Frame};
use crate::image::{gaussian_kernel, reflect101, GrayImage};
use rayon::prelude::*;

/// Harris α (eq. 3; the paper uses 0.04–0.06).
pub const HARRIS_ALPHA: f32 = 0.06;
/// s in σ_D = s·σ_I (paper: 0.7, i.e. integration = differentiation / 0.7).
pub const DIFFERENTIATION_RATIO: f32 = 0.7;
/// ξ, the ratio between successive integration scales (paper: 1.4). The characteristic scale
/// is the level where the normalised Laplacian peaks, without interpolation, so the step bounds
/// the scale error: at 1.2 the mean Oxford repeatability was 37.1 %, at 1.1 40.8 % (with the
/// adaptation of [`ADAPT_DIFFERENTIATION_RATIO`] below, 44.2 %; VLFeat, which interpolates,
/// 45.2 %; docs/BENCHMARKS.md).
pub const SCALE_STEP: f32 = 1.1;
/// σ₀, the first integration scale in pixels.
pub const FIRST_INTEGRATION_SCALE: f32 = 2.0;
/// Largest integration scale as a fraction of the image's smaller side.
const MAX_SCALE_FRACTION: f32 = 1.0 / 16.0;
/// Harris threshold for [0,1] images: the 1000 of Mikolajczyk's binaries on 8-bit images
/// divided by 255⁴.
pub const HARRIS_THRESHOLD: f32 = 1000.0 / (255.0 * 255.0 * 255.0 * 255.0);
/// Minimum |scale-normalised Laplacian| at the characteristic scale ([0,1] intensities).
pub const LAPLACIAN_THRESHOLD: f32 = 0.01;
/// s = σ_D/σ_I inside the shape adaptation's normalised window: the paper's lower bound (§3.2,
/// s ∈ [0.5, 0.75]). With 0.7 there (the detection's ratio) the adapted regions came out
/// elongated (median axis ratio 2.2–2.6 on frontal Oxford images, VLFeat's 1.5–1.65) and
/// unstable between views.
pub const ADAPT_DIFFERENTIATION_RATIO: f32 = 0.5;
/// Integration σ of the adaptation's second moment matrix, in units of σ_I: 1.5 σ_I = 3 σ_D,
/// VLFeat's integration-to-derivation ratio (`VL_COVDET_AA_RELATIVE_INTEGRATION_SIGMA` 3 /
/// `VL_COVDET_AA_RELATIVE_DERIVATIVE_SIGMA` 1): a wider average than the edge right at the
/// corner, so μ measures the region's shape rather than its strongest edge.
pub const ADAPT_INTEGRATION_RATIO: f32 = 1.5;
/// Shape adaptation has converged when λ_min/λ_max of μ in the normalised frame exceeds this
/// (paper §3.2: 0.95).
pub const ISOTROPY_CONVERGED: f32 = 0.95;
/// Iteration cap of the shape adaptation.
pub const MAX_ADAPT_ITERATIONS: usize = 12;
/// Regions whose U has singular-value ratio above this are rejected as too elongated.
pub const MAX_ELONGATION: f32 = 6.0;
/// Window pixels per σ_I in the normalised frame.
const WIN_SIGMA_I: f32 = 4.0;
/// Orientation histogram bins (Lowe 2004 §5: 36).
const ORI_BINS: usize = 36;
/// Gaussian weight of the orientation histogram, in units of σ_I (Lowe: 1.5σ).
const ORI_SIGMA_FACTOR: f32 = 1.5;
/// When the caller caps the keypoints at N, only the 3N strongest Harris-Laplace points are
/// shape-adapted (adaptation rejects some; the rest would be cut anyway).
const CANDIDATE_FACTOR: usize = 3;
/// Blur already present in an image at level 0 (as Lowe assumes for camera images), in px.
const CAMERA_BLUR: f32 = 0.5;

/// One scale level computed on one pyramid octave.
struct ScaleLevel {
    sigma_i: f32,
    octave: usize,
    harris: GrayImage,
    laplacian: GrayImage,
}

/// Blur already present in each pyramid level, in that level's pixels: level 0 has the camera
/// blur; `pyrDown`'s [1 4 6 4 1]/16 adds variance 1 (source px) before halving.
fn inherent_blur(levels: usize) -> Vec<f32> {
    let mut s = vec![CAMERA_BLUR];
    for _ in 1..levels {
        let p = s[s.len() - 1];
        s.push(((p * p + 1.0) / 4.0).sqrt());
    }
    s
}

/// Blurs `img` (which already carries blur `have`) to a total blur `want` (same pixel units).
fn blur_to(img: &GrayImage, want: f32, have: f32) -> GrayImage {
    img.gaussian_blur((want * want - have * have).max(0.0).sqrt())
}

/// Central differences with mirrored borders.
fn gradients(l: &GrayImage) -> (Vec<f32>, Vec<f32>) {
    let (w, h) = (l.width, l.height);
    let mut gx = vec![0.0; w * h];
    let mut gy = vec![0.0; w * h];
    for y in 0..h {
        let ym = reflect101(y as isize - 1, h);
        let yp = reflect101(y as isize + 1, h);
        for x in 0..w {
            let xm = reflect101(x as isize - 1, w);
            let xp = reflect101(x as isize + 1, w);
            gx[y * w + x] = 0.5 * (l.get(xp, y) - l.get(xm, y));
            gy[y * w + x] = 0.5 * (l.get(x, yp) - l.get(x, ym));
        }
    }
    (gx, gy)
}

fn build_level(img: &GrayImage, inh: f32, octave: usize, sigma_i: f32) -> ScaleLevel {
    let k = (1u32 << octave) as f32;
    let (sd, si) = (DIFFERENTIATION_RATIO * sigma_i / k, sigma_i / k);
    let (w, h) = (img.width, img.height);
    let ld = blur_to(img, sd, inh);
    let (gx, gy) = gradients(&ld);
    let prod = |f: &dyn Fn(usize) -> f32| {
        GrayImage {
            width: w,
            height: h,
            data: (0..w * h).map(f).collect(),
        }
        .gaussian_blur(si)
    };
    let xx = prod(&|i| gx[i] * gx[i]);
    let xy = prod(&|i| gx[i] * gy[i]);
    let yy = prod(&|i| gy[i] * gy[i]);
    let n2 = sd * sd;
    let harris = (0..w * h)
        .map(|i| {
            let (a, b, c) = (xx.data[i] * n2, xy.data[i] * n2, yy.data[i] * n2);
            a * c - b * b - HARRIS_ALPHA * (a + c) * (a + c)
        })
        .collect();
    let li = blur_to(img, si, inh);
    let mut lap = vec![0.0; w * h];
    for y in 0..h {
        let ym = reflect101(y as isize - 1, h);
        let yp = reflect101(y as isize + 1, h);
        for x in 0..w {
            let xm = reflect101(x as isize - 1, w);
            let xp = reflect101(x as isize + 1, w);
            let c = li.get(x, y);
            lap[y * w + x] =
                si * si * (li.get(xp, y) + li.get(xm, y) + li.get(x, yp) + li.get(x, ym) - 4.0 * c);
        }
    }
    ScaleLevel {
        sigma_i,
        octave,
        harris: GrayImage {
            width: w,
            height: h,
            data: harris,
        },
        laplacian: GrayImage {
            width: w,
            height: h,
            data: lap,
        },
    }
}

/// A Harris-Laplace point before shape adaptation (level-0 pixel coordinates).
#[derive(Debug, Clone, Copy)]
struct Candidate {
    x: f32,
    y: f32,
    sigma_i: f32,
    score: f32,
}

/// Offset of a parabola's vertex through (−1, a), (0, b), (1, c), clamped to [−½, ½].
fn parabola_peak(a: f32, b: f32, c: f32) -> f32 {
    let d = a - 2.0 * b + c;
    if d.abs() < 1e-20 {
        0.0
    } else {
        (0.5 * (a - c) / d).clamp(-0.5, 0.5)
    }
}

fn harris_laplace(levels: &[ScaleLevel]) -> Vec<Candidate> {
    let mut out = Vec::new();
    for n in 1..levels.len().saturating_sub(1) {
        let lv = &levels[n];
        let r = &lv.harris;
        let k = (1u32 << lv.octave) as f32;
        let found: Vec<Candidate> = (1..r.height.saturating_sub(1))
            .into_par_iter()
            .flat_map_iter(|y| {
                let mut row = Vec::new();
                for x in 1..r.width - 1 {
                    let v = r.get(x, y);
                    if v <= HARRIS_THRESHOLD {
                        continue;
                    }
                    let mut is_max = true;
                    'n: for dy in -1isize..=1 {
                        for dx in -1isize..=1 {
                            if (dx, dy) != (0, 0) {
                                let u =
                                    r.get((x as isize + dx) as usize, (y as isize + dy) as usize);
                                if u > v || (u == v && (dy, dx) < (0, 0)) {
                                    is_max = false;
                                    break 'n;
                                }
                            }
                        }
                    }
                    if !is_max {
                        continue;
                    }
                    let lap = lv.laplacian.get(x, y).abs();
                    if lap < LAPLACIAN_THRESHOLD {
                        continue;
                    }
                    let ox = parabola_peak(r.get(x - 1, y), v, r.get(x + 1, y));
                    let oy = parabola_peak(r.get(x, y - 1), v, r.get(x, y + 1));
                    let (x0, y0) = ((x as f32 + ox) * k, (y as f32 + oy) * k);
                    let at = |l: &ScaleLevel| {
                        let kk = (1u32 << l.octave) as f32;
                        l.laplacian.bilinear(x0 / kk, y0 / kk).abs()
                    };
                    if lap > at(&levels[n - 1]) && lap > at(&levels[n + 1]) {
                        row.push(Candidate {
                            x: x0,
                            y: y0,
                            sigma_i: lv.sigma_i,
                            score: v,
                        });
                    }
                }
                row
            })
            .collect();
        out.extend(found);
    }
    out
}

type M2 = [[f32; 2]; 2];

fn mul(a: &M2, b: &M2) -> M2 {
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

/// Eigenvalues (ascending) of a symmetric 2×2 matrix.
fn sym_eigenvalues(m: &M2) -> (f32, f32) {
    let t = 0.5 * (m[0][0] + m[1][1]);
    let d = (0.25 * (m[0][0] - m[1][1]).powi(2) + m[0][1] * m[0][1]).sqrt();
    (t - d, t + d)
}

/// M^(−½) of a symmetric positive-definite 2×2 matrix (eigen-decomposition).
fn inv_sqrt(m: &M2) -> Option<M2> {
    let (l1, l2) = sym_eigenvalues(m);
    if !(l1 > 0.0 && l2.is_finite()) {
        return None;
    }
    // eigenvector of l2
    let (vx, vy) = if m[0][1].abs() > 1e-12 * (m[0][0].abs() + m[1][1].abs()) {
        let (vx, vy) = (m[0][1], l2 - m[0][0]);
        let n = (vx * vx + vy * vy).sqrt();
        (vx / n, vy / n)
    } else if m[0][0] >= m[1][1] {
        (1.0, 0.0)
    } else {
        (0.0, 1.0)
    };
    let (a, b) = (1.0 / l2.sqrt(), 1.0 / l1.sqrt());
    // a·v vᵀ + b·w wᵀ with w ⟂ v
    Some([
        [a * vx * vx + b * vy * vy, (a - b) * vx * vy],
        [(a - b) * vx * vy, a * vy * vy + b * vx * vx],
    ])
}

fn singular_values(a: &M2) -> (f32, f32) {
    let s = 0.5 * (a[0][0].powi(2) + a[0][1].powi(2) + a[1][0].powi(2) + a[1][1].powi(2));
    let det = (a[0][0] * a[1][1] - a[0][1] * a[1][0]).abs();
    let r = (s * s - det * det).max(0.0).sqrt();
    ((s - r).max(0.0).sqrt(), (s + r).sqrt())
}

/// A square window of the image sampled in the normalised frame, with derivatives at σ_D.
struct Window {
    size: usize,
    gx: Vec<f32>,
    gy: Vec<f32>,
}

/// Window radius: the orientation histogram's 3·1.5·σ_I = 18 px, and the adaptation's integration
/// Gaussian's 3·1.5·σ_I = 18 px, plus the σ_D blur support.
const WIN_RADIUS: usize = 23;

fn sample_window(pyr: &[GrayImage], inh: &[f32], x: f32, y: f32, sigma_i: f32, u: &M2) -> Window {
    let step = sigma_i / WIN_SIGMA_I;
    let (_, smax) = singular_values(u);
    let img_step = step * smax;
    let level = if img_step > 1.0 {
        (img_step.log2().floor() as usize).min(pyr.len() - 1)
    } else {
        0
    };
    let img = &pyr[level];
    let k = 1.0 / (1u32 << level) as f32;
    let size = 2 * WIN_RADIUS + 1;
    let r = WIN_RADIUS as f32;
    let mut raw = vec![0.0; size * size];
    for i in 0..size {
        let q = (i as f32 - r) * step;
        for j in 0..size {
            let p = (j as f32 - r) * step;
            let xx = x + u[0][0] * p + u[0][1] * q;
            let yy = y + u[1][0] * p + u[1][1] * q;
            raw[i * size + j] = img.bilinear(xx * k, yy * k);
        }
    }
    // blur present in the window (window px), then bring it to σ_D.
    let have = inh[level] / (k * step);
    let want = ADAPT_DIFFERENTIATION_RATIO * WIN_SIGMA_I;
    let sd = (want * want - have * have).max(0.25).sqrt();
    let kern = gaussian_kernel(sd);
    let win = GrayImage {
        width: size,
        height: size,
        data: raw,
    };
    let l = win.convolve_separable_seq(&kern);
    let (gx, gy) = gradients(&l);
    Window { size, gx, gy }
}

/// Second moment matrix in window coordinates at the window centre, integration weights
/// `weights` (a square Gaussian).
fn second_moment(win: &Window, weights: &[f32]) -> M2 {
    let side = (weights.len() as f64).sqrt() as usize;
    let off = win.size / 2 - side / 2;
    let (mut a, mut b, mut d) = (0.0, 0.0, 0.0);
    for (wy, wrow) in weights.chunks_exact(side).enumerate() {
        let base = (off + wy) * win.size + off;
        let gx = &win.gx[base..base + side];
        let gy = &win.gy[base..base + side];
        for ((&wgt, &x), &y) in wrow.iter().zip(gx).zip(gy) {
            a += wgt * x * x;
            b += wgt * x * y;
            d += wgt * y * y;
        }
    }
    [[a, b], [b, d]]
}

fn gaussian_weights_2d(sigma: f32) -> Vec<f32> {
    let k = gaussian_kernel(sigma);
    k.iter()
        .flat_map(|&a| k.iter().map(move |&b| a * b))
        .collect()
}

/// Dominant gradient direction (radians, window coordinates: x right, y down).
fn dominant_orientation(win: &Window) -> f32 {
    let sigma = ORI_SIGMA_FACTOR * WIN_SIGMA_I;
    let rad = (3.0 * sigma).round() as isize;
    let c = (win.size / 2) as isize;
    let mut hist = [0.0f32; ORI_BINS];
    for dy in -rad..=rad {
        for dx in -rad..=rad {
            let r2 = (dx * dx + dy * dy) as f32;
            if r2 > (rad * rad) as f32 {
                continue;
            }
            let (x, y) = ((c + dx) as usize, (c + dy) as usize);
            let (gx, gy) = (win.gx[y * win.size + x], win.gy[y * win.size + x]);
            let mag = (gx * gx + gy * gy).sqrt() * (-r2 / (2.0 * sigma * sigma)).exp();
            let ang = gy.atan2(gx).rem_euclid(std::f32::consts::TAU);
            let bin = ((ang / std::f32::consts::TAU * ORI_BINS as f32) as usize).min(ORI_BINS - 1);
            hist[bin] += mag;
        }
    }
    // two passes of [1 2 1]/4 circular smoothing
    for _ in 0..2 {
        let h0 = hist;
        for i in 0..ORI_BINS {
            hist[i] = 0.25 * h0[(i + ORI_BINS - 1) % ORI_BINS]
                + 0.5 * h0[i]
                + 0.25 * h0[(i + 1) % ORI_BINS];
        }
    }
    let (mut best, mut bv) = (0, f32::MIN);
    for (i, &v) in hist.iter().enumerate() {
        if v > bv {
            best = i;
            bv = v;
        }
    }
    let off = parabola_peak(
        hist[(best + ORI_BINS - 1) % ORI_BINS],
        bv,
        hist[(best + 1) % ORI_BINS],
    );
    (best as f32 + 0.5 + off) / ORI_BINS as f32 * std::f32::consts::TAU
}

/// Why shape adaptation rejected a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reject {
    Degenerate,
    Elongated,
    NotConverged,
}

/// Iterative shape adaptation of one point (eq. 7–9); returns (x, y, U, θ). The point stays at
/// its sub-pixel Harris-Laplace location: re-localising at the Harris maximum of each normalised
/// window (as the paper does) made points drift to neighbouring structures here and cost
/// repeatability.
fn adapt(pyr: &[GrayImage], inh: &[f32], c: &Candidate) -> Result<(f32, f32, M2, f32), Reject> {
    let wi = gaussian_weights_2d(ADAPT_INTEGRATION_RATIO * WIN_SIGMA_I);
    let mut u: M2 = [[1.0, 0.0], [0.0, 1.0]];
    for _ in 0..MAX_ADAPT_ITERATIONS {
        let win = sample_window(pyr, inh, c.x, c.y, c.sigma_i, &u);
        let mu = second_moment(&win, &wi);
        let (l1, l2) = sym_eigenvalues(&mu);
        // NaN-safe: anything but a positive smallest eigenvalue is degenerate.
        if l1.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return Err(Reject::Degenerate);
        }
        if l1 / l2 > ISOTROPY_CONVERGED {
            return Ok((c.x, c.y, u, dominant_orientation(&win)));
        }
        let next = mul(&u, &inv_sqrt(&mu).ok_or(Reject::Degenerate)?);
        let det = (next[0][0] * next[1][1] - next[0][1] * next[1][0])
            .abs()
            .sqrt();
        u = next.map(|r| r.map(|v| v / det));
        let (smin, smax) = singular_values(&u);
        if smin.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            || smax / smin > MAX_ELONGATION
        {
            return Err(Reject::Elongated);
        }
    }
    Err(Reject::NotConverged)
}

/// Drops a detection whose region nearly equals a stronger one's (centre closer than 0.3 of
/// the radius, region matrices within 20 %): several scale levels often converge to one region.
fn dedup(dets: Vec<Detection>) -> Vec<Detection> {
    let sigma = |f: &Frame| {
        let a = f.a;
        [
            a[0][0] * a[0][0] + a[0][1] * a[0][1],
            a[0][0] * a[1][0] + a[0][1] * a[1][1],
            a[1][0] * a[1][0] + a[1][1] * a[1][1],
        ]
    };
    let cell = 8.0f32;
    let mut grid: std::collections::HashMap<(i32, i32), Vec<usize>> = Default::default();
    let mut kept: Vec<Detection> = Vec::with_capacity(dets.len());
    for d in dets {
        let (gx, gy) = (
            (d.frame.x / cell).floor() as i32,
            (d.frame.y / cell).floor() as i32,
        );
        let s = sigma(&d.frame);
        let r = d.frame.scale();
        let dup = (-1..=1).any(|oy| {
            (-1..=1).any(|ox| {
                grid.get(&(gx + ox, gy + oy)).is_some_and(|v| {
                    v.iter().any(|&k| {
                        let e = &kept[k].frame;
                        let t = sigma(e);
                        let diff = ((s[0] - t[0]).powi(2)
                            + 2.0 * (s[1] - t[1]).powi(2)
                            + (s[2] - t[2]).powi(2))
                        .sqrt();
                        let norm = (t[0].powi(2) + 2.0 * t[1].powi(2) + t[2].powi(2)).sqrt();
                        (d.frame.x - e.x).hypot(d.frame.y - e.y) < 0.3 * r.min(e.scale())
                            && diff < 0.2 * norm
                    })
                })
            })
        });
        if !dup {
            grid.entry((gx, gy)).or_default().push(kept.len());
            kept.push(d);
        }
    }
    kept
}

/// Harris-Affine detections of `img` (unsorted beyond de-duplication order), frames
/// `a = m·σ_I·U·R(θ)`. `max_keypoints` > 0 bounds the work (see [`CANDIDATE_FACTOR`]).
pub fn detect_harris_affine(
    img: &GrayImage,
    magnification: f32,
    max_keypoints: usize,
) -> Vec<Detection> {
    let pyr = img.pyramid();
    let inh = inherent_blur(pyr.len());
    let max_sigma = MAX_SCALE_FRACTION * img.width.min(img.height) as f32;
    let mut levels = Vec::new();
    let mut sigma_i = FIRST_INTEGRATION_SCALE;
    while sigma_i <= max_sigma.max(FIRST_INTEGRATION_SCALE * SCALE_STEP * SCALE_STEP) {
        // octave where σ_D spans 1.5–3 px
        let sd = DIFFERENTIATION_RATIO * sigma_i;
        let octave = ((sd / 1.5).log2().floor().max(0.0) as usize).min(pyr.len() - 1);
        levels.push(build_level(&pyr[octave], inh[octave], octave, sigma_i));
        sigma_i *= SCALE_STEP;
    }
    let mut cands = harris_laplace(&levels);
    cands.sort_by(|a, b| b.score.total_cmp(&a.score));
    if max_keypoints > 0 {
        cands.truncate(max_keypoints * CANDIDATE_FACTOR);
    }
    let dets: Vec<Detection> = cands
        .par_iter()
        .filter_map(|c| {
            let (x, y, u, theta) = adapt(&pyr, &inh, c).ok()?;
            let inside =
                x >= 0.0 && y >= 0.0 && x <= (img.width - 1) as f32 && y <= (img.height - 1) as f32;
            if !inside {
                return None;
            }
            let (s, co) = theta.sin_cos();
            let rot = [[co, -s], [s, co]];
            let k = magnification * c.sigma_i;
            let a = mul(&u, &rot).map(|r| r.map(|v| v * k));
            Some(Detection {
                frame: Frame { x, y, a },
                score: c.score,
            })
        })
        .collect();
    dedup(dets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inv_sqrt_hand_case() {
        let m = [[4.0, 1.0], [1.0, 3.0]];
        let r = inv_sqrt(&m).unwrap();
        // r·m·r = I
        let p = mul(&mul(&r, &m), &r);
        assert!(
            (p[0][0] - 1.0).abs() < 1e-5 && p[0][1].abs() < 1e-5 && (p[1][1] - 1.0).abs() < 1e-5
        );
        let d = inv_sqrt(&[[9.0, 0.0], [0.0, 0.25]]).unwrap();
        assert!((d[0][0] - 1.0 / 3.0).abs() < 1e-6 && (d[1][1] - 2.0).abs() < 1e-6);
    }

    #[test]
    fn inherent_blur_recursion() {
        let s = inherent_blur(3);
        assert!((s[1] - (1.25f32 / 4.0).sqrt()).abs() < 1e-6);
    }

    /// A blurred ellipse blob: the adapted shape must recover the ellipse's axes ratio and
    /// direction (the fixed point of eq. 9 makes the region isotropic in the normalised frame).
    #[test]
    fn shape_adaptation_recovers_an_anisotropic_blob() {
        let (w, h) = (201, 201);
        let (cx, cy) = (100.0f32, 100.0f32);
        // ellipse with axes 24 (at 30°) and 8
        let (s, c) = 30f32.to_radians().sin_cos();
        let data = (0..w * h)
            .map(|i| {
                let (x, y) = ((i % w) as f32 - cx, (i / w) as f32 - cy);
                let (p, q) = (c * x + s * y, -s * x + c * y);
                let r2 = (p / 24.0).powi(2) + (q / 8.0).powi(2);
                0.2 + 0.6 * (-r2 * 2.0).exp()
            })
            .collect();
        let img = GrayImage::from_vec(w, h, data).unwrap();
        let pyr = img.pyramid();
        let inh = inherent_blur(pyr.len());
        let cand = Candidate {
            x: cx + 1.0,
            y: cy - 1.0,
            sigma_i: 9.0,
            score: 1.0,
        };
        let (x, y, u, _) = adapt(&pyr, &inh, &cand).expect("adaptation converges");
        assert!((x - cx).hypot(y - cy) < 1.5, "{x},{y}");
        let (smin, smax) = singular_values(&u);
        let ratio = smax / smin;
        assert!((ratio - 3.0).abs() < 0.45, "axis ratio {ratio}");
        // direction of the long axis: eigenvector of U Uᵀ
        let uu = mul(&u, &[[u[0][0], u[1][0]], [u[0][1], u[1][1]]]);
        let ang = 0.5 * (2.0 * uu[0][1]).atan2(uu[0][0] - uu[1][1]);
        assert!(
            (ang.to_degrees() - 30.0).abs() < 5.0,
            "{}",
            ang.to_degrees()
        );
    }
}
