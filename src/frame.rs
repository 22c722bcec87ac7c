//! Local affine frames: the geometric output of every detector and the input of the patch sampler.

use serde::{Deserialize, Serialize};

/// A local affine frame: centre `(x, y)` in pixels (OpenCV convention: pixel centres at integer
/// coordinates) and a 2×2 matrix `a` (row-major) mapping the patch square [-1, 1]² to image
/// offsets: an image point is `(x, y) + a · (u, v)` for patch coordinates `(u, v)`.
/// `a` includes the measurement-region magnification (DoG: `a = m·σ·R(angle)`, see
/// ARCHITECTURE.md "Conventions").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    pub x: f32,
    pub y: f32,
    pub a: [[f32; 2]; 2],
}

impl Frame {
    /// The 6 numbers stored per frame in features files and COLMAP keypoints: x, y, a11, a12, a21, a22.
    pub fn to_row(&self) -> [f32; 6] {
        [
            self.x,
            self.y,
            self.a[0][0],
            self.a[0][1],
            self.a[1][0],
            self.a[1][1],
        ]
    }

    /// Inverse of [`Frame::to_row`].
    pub fn from_row(r: [f32; 6]) -> Self {
        Frame {
            x: r[0],
            y: r[1],
            a: [[r[2], r[3]], [r[4], r[5]]],
        }
    }

    /// The frame's scale: sqrt(|det a|), the radius in pixels of a circle of equal area.
    pub fn scale(&self) -> f32 {
        (self.a[0][0] * self.a[1][1] - self.a[0][1] * self.a[1][0])
            .abs()
            .sqrt()
    }
}

/// One detected frame with the detector's response (used to rank and cap keypoints).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    pub frame: Frame,
    pub score: f32,
}
