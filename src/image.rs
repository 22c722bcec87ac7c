//! Image decoding to gray f32 (to be completed: loading, limits, pyramid).

/// A gray image, row-major, values in [0, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct GrayImage {
    pub width: usize,
    pub height: usize,
    pub data: Vec<f32>,
}
