//! Ellipse overlap error and detector repeatability (Mikolajczyk et al. 2005, "A comparison of
//! affine region detectors", IJCV, §4.1), computed on a raster grid as the official
//! `repeatability.m` / `c_eoverlap` do.
//!
//! A frame's region is the ellipse it maps the unit disc to: {c + a·u : |u| ≤ 1}, i.e.
//! (x − c)ᵀ Σ⁻¹ (x − c) ≤ 1 with Σ = a·aᵀ. A region of image 2 is compared in image 1 after
//! mapping it by the local affinity of H⁻¹ at its centre. Both ellipses are scaled by the factor
//! that gives the first one a radius of [`NORMALISED_RADIUS`] px (so the error does not favour
//! large regions), and the overlap error ε = 1 − |R₁ ∩ R₂| / |R₁ ∪ R₂| is counted on a 1-px grid.

use crate::error::{Error, Result};
use crate::frame::Frame;
use rayon::prelude::*;

/// Radius (px) the reference region is normalised to before rasterising (paper §4.1).
pub const NORMALISED_RADIUS: f64 = 30.0;
/// Overlap error under which two regions correspond (paper: 40 %).
pub const DEFAULT_OVERLAP_THRESHOLD: f64 = 0.4;

/// A 3×3 homography, row-major, mapping image-1 points to image 2 (x₂ ~ H x₁).
pub type Homography = crate::geometry::Mat3;

/// An elliptic region: centre and Σ, the region being (x − c)ᵀ Σ⁻¹ (x − c) ≤ 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ellipse {
    pub cx: f64,
    pub cy: f64,
    pub sigma: [[f64; 2]; 2],
}

impl Ellipse {
    /// The region of a frame: the image of the unit disc under `a` (Σ = a·aᵀ).
    pub fn from_frame(f: &Frame) -> Self {
        let a = f.a.map(|r| r.map(f64::from));
        Ellipse {
            cx: f.x as f64,
            cy: f.y as f64,
            sigma: [
                [
                    a[0][0] * a[0][0] + a[0][1] * a[0][1],
                    a[0][0] * a[1][0] + a[0][1] * a[1][1],
                ],
                [
                    a[0][0] * a[1][0] + a[0][1] * a[1][1],
                    a[1][0] * a[1][0] + a[1][1] * a[1][1],
                ],
            ],
        }
    }

    /// A circle of radius `r` at (cx, cy).
    pub fn circle(cx: f64, cy: f64, r: f64) -> Self {
        Ellipse {
            cx,
            cy,
            sigma: [[r * r, 0.0], [0.0, r * r]],
        }
    }

    /// Radius of the circle of equal area: det(Σ)^¼.
    pub fn radius(&self) -> f64 {
        det2(&self.sigma).abs().sqrt().sqrt()
    }

    /// The region mapped through `h`: centre by `h`, shape by its Jacobian J there (Σ' = JΣJᵀ).
    /// None where the centre maps to infinity.
    pub fn map(&self, h: &Homography) -> Option<Ellipse> {
        let (x, y) = (self.cx, self.cy);
        let w = h[2][0] * x + h[2][1] * y + h[2][2];
        if w.abs() < 1e-12 {
            return None;
        }
        let u = (h[0][0] * x + h[0][1] * y + h[0][2]) / w;
        let v = (h[1][0] * x + h[1][1] * y + h[1][2]) / w;
        let j = [
            [(h[0][0] - u * h[2][0]) / w, (h[0][1] - u * h[2][1]) / w],
            [(h[1][0] - v * h[2][0]) / w, (h[1][1] - v * h[2][1]) / w],
        ];
        let js = mul2(&j, &self.sigma);
        let jt = [[j[0][0], j[1][0]], [j[0][1], j[1][1]]];
        Some(Ellipse {
            cx: u,
            cy: v,
            sigma: mul2(&js, &jt),
        })
    }

    /// Half extents of the axis-aligned bounding box: (√Σxx, √Σyy).
    fn half_extent(&self) -> (f64, f64) {
        (
            self.sigma[0][0].max(0.0).sqrt(),
            self.sigma[1][1].max(0.0).sqrt(),
        )
    }

    /// Σ⁻¹ (None if degenerate).
    fn inverse(&self) -> Option<[[f64; 2]; 2]> {
        let d = det2(&self.sigma);
        if !(d.is_finite() && d > 0.0) {
            return None;
        }
        let s = &self.sigma;
        Some([[s[1][1] / d, -s[0][1] / d], [-s[1][0] / d, s[0][0] / d]])
    }

    fn scaled(&self, k: f64) -> Ellipse {
        Ellipse {
            cx: self.cx * k,
            cy: self.cy * k,
            sigma: self.sigma.map(|r| r.map(|v| v * k * k)),
        }
    }
}

fn det2(m: &[[f64; 2]; 2]) -> f64 {
    m[0][0] * m[1][1] - m[0][1] * m[1][0]
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

/// Determinant magnitude at or below which a homography counts as singular.
const SINGULAR_DET: f64 = 1e-15;

/// Inverse of a homography (adjugate / determinant, [`crate::geometry::invert3`]).
pub fn invert_homography(h: &Homography) -> Result<Homography> {
    crate::geometry::invert3(h, SINGULAR_DET)
        .ok_or_else(|| Error::InvalidInput(format!("singular homography {h:?}")))
}

/// Overlap error 1 − |E₁ ∩ E₂| / |E₁ ∪ E₂| after scaling both so that `e1` has radius
/// [`NORMALISED_RADIUS`], counted on a 1-px grid over the union's bounding box. Degenerate
/// ellipses give 1.
pub fn overlap_error(e1: &Ellipse, e2: &Ellipse) -> f64 {
    let r1 = e1.radius();
    if !(r1.is_finite() && r1 > 0.0) {
        return 1.0;
    }
    let k = NORMALISED_RADIUS / r1;
    let (a, b) = (e1.scaled(k), e2.scaled(k));
    let (Some(ia), Some(ib)) = (a.inverse(), b.inverse()) else {
        return 1.0;
    };
    let (ax, ay) = a.half_extent();
    let (bx, by) = b.half_extent();
    let x0 = (a.cx - ax).min(b.cx - bx).floor();
    let x1 = (a.cx + ax).max(b.cx + bx).ceil();
    let y0 = (a.cy - ay).min(b.cy - by).floor();
    let y1 = (a.cy + ay).max(b.cy + by).ceil();
    let inside = |e: &Ellipse, m: &[[f64; 2]; 2], x: f64, y: f64| {
        let (dx, dy) = (x - e.cx, y - e.cy);
        m[0][0] * dx * dx + (m[0][1] + m[1][0]) * dx * dy + m[1][1] * dy * dy <= 1.0
    };
    let (mut inter, mut union) = (0u64, 0u64);
    let mut y = y0;
    while y <= y1 {
        let mut x = x0;
        while x <= x1 {
            let (pa, pb) = (inside(&a, &ia, x, y), inside(&b, &ib, x, y));
            inter += (pa && pb) as u64;
            union += (pa || pb) as u64;
            x += 1.0;
        }
        y += 1.0;
    }
    if union == 0 {
        1.0
    } else {
        1.0 - inter as f64 / union as f64
    }
}

/// Lower bound of the overlap error from the areas alone: 1 − min(area)/max(area).
fn area_bound(e1: &Ellipse, e2: &Ellipse) -> f64 {
    let (a1, a2) = (det2(&e1.sigma).abs().sqrt(), det2(&e2.sigma).abs().sqrt());
    if a1 <= 0.0 || a2 <= 0.0 {
        return 1.0;
    }
    1.0 - a1.min(a2) / a1.max(a2)
}

/// Repeatability of two detections under a ground-truth homography.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Repeatability {
    /// correspondences / min(n1, n2).
    pub repeatability: f64,
    /// One-to-one region correspondences with overlap error below the threshold.
    pub correspondences: usize,
    /// Regions of image 1 whose centre maps inside image 2.
    pub n1: usize,
    /// Regions of image 2 whose centre maps inside image 1.
    pub n2: usize,
    /// (index in frames1, index in frames2, overlap error) of each correspondence.
    pub matches: Vec<(usize, usize, f64)>,
}

/// Repeatability (paper §4.1): only regions in the part of the scene both images see count
/// (centres mapping inside the other image, sizes `(width, height)`); every region of image 2
/// is mapped into image 1 by H⁻¹'s local affinity; pairs with overlap error < `threshold` are
/// matched one-to-one, smallest error first; repeatability = matches / min(n1, n2).
pub fn repeatability(
    frames1: &[Frame],
    frames2: &[Frame],
    h: &Homography,
    size1: (usize, usize),
    size2: (usize, usize),
    threshold: f64,
) -> Result<Repeatability> {
    let hinv = invert_homography(h)?;
    let inside = |x: f64, y: f64, (w, hgt): (usize, usize)| {
        x >= 0.0 && y >= 0.0 && x <= (w - 1) as f64 && y <= (hgt - 1) as f64
    };
    // Regions of image 1 in the common part, in image 1.
    let r1: Vec<(usize, Ellipse)> = frames1
        .iter()
        .enumerate()
        .map(|(i, f)| (i, Ellipse::from_frame(f)))
        .filter(|(_, e)| e.map(h).is_some_and(|m| inside(m.cx, m.cy, size2)))
        .collect();
    // Regions of image 2 in the common part, mapped into image 1.
    let r2: Vec<(usize, Ellipse)> = frames2
        .iter()
        .enumerate()
        .filter_map(|(j, f)| Ellipse::from_frame(f).map(&hinv).map(|e| (j, e)))
        .filter(|(_, e)| inside(e.cx, e.cy, size1))
        .collect();
    let (n1, n2) = (r1.len(), r2.len());
    let mut pairs: Vec<(usize, usize, f64)> = r1
        .par_iter()
        .flat_map_iter(|(i, e1)| {
            let (ax, ay) = e1.half_extent();
            r2.iter().filter_map(move |(j, e2)| {
                let (bx, by) = e2.half_extent();
                let overlap_box =
                    (e1.cx - e2.cx).abs() <= ax + bx && (e1.cy - e2.cy).abs() <= ay + by;
                if !overlap_box || area_bound(e1, e2) >= threshold {
                    return None;
                }
                let err = overlap_error(e1, e2);
                (err < threshold).then_some((*i, *j, err))
            })
        })
        .collect();
    pairs.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    let mut used1 = vec![false; frames1.len()];
    let mut used2 = vec![false; frames2.len()];
    let mut matches = Vec::new();
    for (i, j, e) in pairs {
        if !used1[i] && !used2[j] {
            used1[i] = true;
            used2[j] = true;
            matches.push((i, j, e));
        }
    }
    let denom = n1.min(n2);
    Ok(Repeatability {
        repeatability: if denom == 0 {
            0.0
        } else {
            matches.len() as f64 / denom as f64
        },
        correspondences: matches.len(),
        n1,
        n2,
        matches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_cases() {
        let c = Ellipse::circle(10.0, 20.0, 5.0);
        assert_eq!(overlap_error(&c, &c), 0.0);
        assert_eq!(overlap_error(&c, &Ellipse::circle(100.0, 20.0, 5.0)), 1.0);
        // concentric r and 2r: 1 − r²/(2r)² = 0.75 (raster error well under 1 %)
        let e = overlap_error(&c, &Ellipse::circle(10.0, 20.0, 10.0));
        assert!((e - 0.75).abs() < 0.01, "{e}");
        // Two unit-area-equal circles offset by one radius: lens area formula.
        // intersection = 2r²acos(d/2r) − (d/2)√(4r²−d²), d = r.
        let r = 1.0f64;
        let lens = 2.0 * r * r * (0.5f64).acos() - 0.5 * (3.0f64).sqrt();
        let want = 1.0 - lens / (2.0 * std::f64::consts::PI - lens);
        let got = overlap_error(
            &Ellipse::circle(0.0, 0.0, 4.0),
            &Ellipse::circle(4.0, 0.0, 4.0),
        );
        assert!((got - want).abs() < 0.01, "{got} vs {want}");
        // An ellipse vs the circle of the same area rotated 90°: axes 2:1
        let el = Ellipse {
            cx: 0.0,
            cy: 0.0,
            sigma: [[4.0, 0.0], [0.0, 1.0]],
        };
        let er = Ellipse {
            cx: 0.0,
            cy: 0.0,
            sigma: [[1.0, 0.0], [0.0, 4.0]],
        };
        // intersection of x²/4+y² ≤ 1 and x²+y²/4 ≤ 1: 4·atan(1/2)·2 = 8 atan(1/2) (area), each π·2
        let inter = 8.0 * (0.5f64).atan();
        let want = 1.0 - inter / (4.0 * std::f64::consts::PI - inter);
        let got = overlap_error(&el, &er);
        assert!((got - want).abs() < 0.01, "{got} vs {want}");
    }

    #[test]
    fn frame_ellipse_and_mapping() {
        let f = Frame {
            x: 5.0,
            y: 6.0,
            a: [[3.0, 0.0], [0.0, 3.0]],
        };
        let e = Ellipse::from_frame(&f);
        assert!((e.radius() - 3.0).abs() < 1e-12);
        // rotating the frame does not change its region
        let (s, c) = 0.3f32.sin_cos();
        let g = Frame {
            a: [[3.0 * c, -3.0 * s], [3.0 * s, 3.0 * c]],
            ..f
        };
        assert!(overlap_error(&e, &Ellipse::from_frame(&g)) < 1e-9);
        // affine H: scale 2 + shift
        let h = [[2.0, 0.0, 1.0], [0.0, 2.0, -1.0], [0.0, 0.0, 1.0]];
        let m = e.map(&h).unwrap();
        assert_eq!((m.cx, m.cy), (11.0, 11.0));
        assert!((m.radius() - 6.0).abs() < 1e-12);
        let hi = invert_homography(&h).unwrap();
        let back = m.map(&hi).unwrap();
        assert!((back.cx - 5.0).abs() < 1e-12 && (back.radius() - 3.0).abs() < 1e-12);
    }

    #[test]
    fn repeatability_of_mapped_frames() {
        let h = [[1.1, 0.1, 3.0], [-0.05, 0.9, 2.0], [1e-4, 0.0, 1.0]];
        let f1: Vec<Frame> = (0..50)
            .map(|i| Frame {
                x: 20.0 + (i % 10) as f32 * 15.0,
                y: 20.0 + (i / 10) as f32 * 15.0,
                a: [[4.0, 1.0], [0.0, 3.0]],
            })
            .collect();
        // image 2 frames: exact maps of the first 30, plus junk far away
        let mut f2: Vec<Frame> = f1[..30]
            .iter()
            .map(|f| {
                let e = Ellipse::from_frame(f).map(&h).unwrap();
                // a frame whose region is Σ: a = chol(Σ)
                let l11 = e.sigma[0][0].sqrt();
                let l21 = e.sigma[1][0] / l11;
                let l22 = (e.sigma[1][1] - l21 * l21).sqrt();
                Frame {
                    x: e.cx as f32,
                    y: e.cy as f32,
                    a: [[l11 as f32, 0.0], [l21 as f32, l22 as f32]],
                }
            })
            .collect();
        f2.push(Frame {
            x: 150.0,
            y: 5.0,
            a: [[2.0, 0.0], [0.0, 2.0]],
        });
        let r = repeatability(
            &f1,
            &f2,
            &h,
            (300, 300),
            (300, 300),
            DEFAULT_OVERLAP_THRESHOLD,
        )
        .unwrap();
        assert_eq!(r.correspondences, 30);
        assert!(r.matches.iter().all(|&(i, j, e)| i == j && e < 0.05));
        assert_eq!(r.n2, 31);
        assert!((r.repeatability - 30.0 / 31.0).abs() < 1e-12);
    }
}
