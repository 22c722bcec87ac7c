//! Image decoding to gray f32 in [0, 1] with size limits, Gaussian smoothing and the Gaussian
//! pyramid the patch sampler and the detectors share.
//!
//! Gray is ITU-R BT.601 luma (0.299 R + 0.587 G + 0.114 B), the conversion OpenCV's
//! `imread(..., IMREAD_GRAYSCALE)` and `cvtColor(RGB2GRAY)` use, so descl's DoG keypoints agree
//! with an OpenCV/Python pipeline on the same file.

use crate::error::{Error, Result};
use image::{DynamicImage, ImageReader, Limits};
#[cfg(feature = "full")]
use opencv::prelude::*;
use std::io::{Cursor, Read};
use std::path::Path;

/// Smallest accepted width and height in pixels: below this no detector finds anything stable
/// and a 32×32 patch would be mostly border.
pub const MIN_IMAGE_SIDE: usize = 16;

/// Largest accepted pixel count (width × height), checked from the header before decoding so a
/// hostile or mistaken huge image never allocates: 64 megapixels (e.g. 8192 × 8192).
pub const MAX_IMAGE_PIXELS: u64 = 64 * 1024 * 1024;

/// BT.601 luma weights (R, G, B).
pub const LUMA_BT601: [f32; 3] = [0.299, 0.587, 0.114];

/// A gray image, row-major, values in [0, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct GrayImage {
    pub width: usize,
    pub height: usize,
    pub data: Vec<f32>,
}

fn image_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Image {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// File extensions of the images taken from a folder (case-insensitive): the formats
/// [`load_gray`] decodes.
pub const IMAGE_EXTENSIONS: [&str; 10] = [
    "jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "tif", "tiff", "bmp",
];

/// Whether `path` has one of the [`IMAGE_EXTENSIONS`].
pub fn has_image_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// The image files of `dir` and its folders (by extension; recursive as hloc reads an image
/// folder, hidden entries skipped: [`crate::names::folder_inputs`]), sorted by their names under
/// `dir`; an error naming the folder when it has none.
pub fn list_images(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    Ok(image_inputs(dir)?.into_iter().map(|i| i.path).collect())
}

/// The images of `dir` as a set's inputs, named by their paths under `dir` (`a/0000.jpg`,
/// [`crate::names`]), sorted by name; an error naming the folder when it has none.
pub fn image_inputs(dir: &Path) -> Result<Vec<crate::names::SetInput>> {
    let out = crate::names::folder_inputs(dir, &has_image_extension)?;
    if out.is_empty() {
        return Err(Error::InvalidInput(format!(
            "{}: no images ({}) in this folder or its folders",
            dir.display(),
            IMAGE_EXTENSIONS.join(", ")
        )));
    }
    Ok(out)
}

/// Decodes `path` (jpg, png, ppm/pgm, tiff, bmp; the format is guessed from the content) into a
/// gray image. Rejects with [`Error::Image`] naming the file: missing or unreadable, empty, not an
/// image, truncated, smaller than [`MIN_IMAGE_SIDE`] or larger than [`MAX_IMAGE_PIXELS`].
pub fn load_gray(path: &Path) -> Result<GrayImage> {
    decode_gray(&read_image_file(path)?, path)
}

/// [`load_gray`] and the SHA-256 of the very bytes decoded (lowercase hex): the hash a features
/// file records. Hashing the file in a second read would record a picture put in its place
/// between the two reads beside the features of the one decoded.
pub fn load_gray_hashed(path: &Path) -> Result<(GrayImage, String)> {
    let bytes = read_image_file(path)?;
    let img = decode_gray(&bytes, path)?;
    Ok((img, crate::hash::sha256_bytes(&bytes)))
}

/// The bytes of the image file at `path`, within [`MAX_IMAGE_FILE_BYTES`]; regular files only.
pub fn read_image_file(path: &Path) -> Result<Vec<u8>> {
    let not_found = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => image_err(path, "no such file"),
        _ => Error::io(path, e),
    };
    // No file holding an image within the pixel limit is larger than its raw 16-bit RGBA
    // pixels plus headers: refuse to read more than that into memory.
    // Regular files only: a device (`/dev/zero`) reports length 0 and never ends, a FIFO blocks
    // the open forever. The size is checked again on the bytes actually read.
    let meta = std::fs::metadata(path).map_err(not_found)?;
    if !meta.is_file() {
        return Err(image_err(
            path,
            "not a regular file (a folder, device or FIFO)",
        ));
    }
    let too_large = |len: u64| {
        image_err(
            path,
            format!("file of {len} bytes is larger than any image within the pixel limit ({MAX_IMAGE_FILE_BYTES} bytes)"),
        )
    };
    if meta.len() > MAX_IMAGE_FILE_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(not_found)?
        .take(MAX_IMAGE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > MAX_IMAGE_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Largest file [`load_gray`] reads: [`MAX_IMAGE_PIXELS`] of uncompressed 16-bit RGBA plus 1 MiB.
pub const MAX_IMAGE_FILE_BYTES: u64 = MAX_IMAGE_PIXELS * 8 + (1 << 20);

/// [`load_gray`] on bytes already in memory; `path` only names the source in errors.
pub fn decode_gray(bytes: &[u8], path: &Path) -> Result<GrayImage> {
    if bytes.is_empty() {
        return Err(image_err(path, "empty file"));
    }
    let reader = || -> Result<ImageReader<Cursor<&[u8]>>> {
        let r = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| image_err(path, format!("cannot read: {e}")))?;
        if r.format().is_none() {
            return Err(image_err(path, "not an image (unrecognised format)"));
        }
        Ok(r)
    };
    let (w, h) = reader()?
        .into_dimensions()
        .map_err(|e| image_err(path, format!("cannot read the image header: {e}")))?;
    check_size(path, w as usize, h as usize)?;
    if reader()?.format() == Some(image::ImageFormat::Jpeg) {
        check_jpeg_complete(bytes).map_err(|reason| image_err(path, reason))?;
    }
    let mut r = reader()?;
    let mut limits = Limits::default();
    limits.max_image_width = Some(w);
    limits.max_image_height = Some(h);
    // Largest decoded buffer: 4 channels × 16 bit, plus slack for the decoder's own state.
    limits.max_alloc = Some(MAX_IMAGE_PIXELS * 8 * 2);
    r.limits(limits);
    let img = r
        .decode()
        .map_err(|e| image_err(path, format!("cannot decode (truncated or corrupt?): {e}")))?;
    Ok(to_gray(&img))
}

/// The `image` crate's JPEG decoder fills missing scan data with gray instead of failing, so a
/// truncated JPEG would load silently. This walks the marker segments (ITU-T T.81 §B.1) from SOI
/// through every scan's entropy-coded data (stuffed `FF 00` and `RSTn` skipped) and requires
/// the EOI marker.
fn check_jpeg_complete(b: &[u8]) -> std::result::Result<(), String> {
    const TRUNCATED: &str = "truncated JPEG (the data ends before the end-of-image marker)";
    const SOI: u8 = 0xD8;
    const EOI: u8 = 0xD9;
    const SOS: u8 = 0xDA;
    const TEM: u8 = 0x01;
    const RST: std::ops::RangeInclusive<u8> = 0xD0..=0xD7;
    if b.len() < 4 || b[0] != 0xFF || b[1] != SOI {
        return Err("not a JPEG (no start-of-image marker)".into());
    }
    let mut i = 2;
    loop {
        while i < b.len() && b[i] == 0xFF {
            i += 1; // fill bytes before a marker
        }
        if i >= b.len() {
            return Err(TRUNCATED.into());
        }
        let marker = b[i];
        if b[i - 1] != 0xFF {
            return Err(format!("corrupt JPEG: expected a marker at byte {i}"));
        }
        i += 1;
        if marker == EOI {
            return Ok(());
        }
        if marker == TEM || RST.contains(&marker) {
            continue;
        }
        if i + 2 > b.len() {
            return Err(TRUNCATED.into());
        }
        let len = u16::from_be_bytes([b[i], b[i + 1]]) as usize;
        if len < 2 {
            return Err(format!("corrupt JPEG: segment length {len} at byte {i}"));
        }
        i += len;
        if i > b.len() {
            return Err(TRUNCATED.into());
        }
        if marker == SOS {
            // Entropy-coded data runs to the next marker that is not stuffing or a restart.
            loop {
                while i < b.len() && b[i] != 0xFF {
                    i += 1;
                }
                if i + 1 >= b.len() {
                    return Err(TRUNCATED.into());
                }
                match b[i + 1] {
                    0x00 => i += 2,
                    m if RST.contains(&m) => i += 2,
                    0xFF => i += 1,
                    _ => break,
                }
            }
        }
    }
}

fn check_size(path: &Path, w: usize, h: usize) -> Result<()> {
    if w < MIN_IMAGE_SIDE || h < MIN_IMAGE_SIDE {
        return Err(image_err(
            path,
            format!("image is {w}×{h}, smaller than the minimum {MIN_IMAGE_SIDE}×{MIN_IMAGE_SIDE}"),
        ));
    }
    if (w as u64) * (h as u64) > MAX_IMAGE_PIXELS {
        return Err(image_err(
            path,
            format!(
                "image is {w}×{h} = {} pixels, more than the limit of {MAX_IMAGE_PIXELS}",
                w as u64 * h as u64
            ),
        ));
    }
    Ok(())
}

/// BT.601 gray of any decoded image (alpha ignored; 16-bit and float inputs keep their precision).
fn to_gray(img: &DynamicImage) -> GrayImage {
    let (width, height) = (img.width() as usize, img.height() as usize);
    let data = match img {
        DynamicImage::ImageLuma8(g) => g.as_raw().iter().map(|&v| v as f32 / 255.0).collect(),
        DynamicImage::ImageLumaA8(g) => g
            .as_raw()
            .chunks_exact(2)
            .map(|p| p[0] as f32 / 255.0)
            .collect(),
        DynamicImage::ImageLuma16(g) => g.as_raw().iter().map(|&v| v as f32 / 65535.0).collect(),
        DynamicImage::ImageRgb8(c) => c
            .as_raw()
            .chunks_exact(3)
            .map(|p| luma(p[0] as f32, p[1] as f32, p[2] as f32) / 255.0)
            .collect(),
        _ => img
            .to_rgb32f()
            .as_raw()
            .chunks_exact(3)
            .map(|p| luma(p[0], p[1], p[2]).clamp(0.0, 1.0))
            .collect(),
    };
    GrayImage {
        width,
        height,
        data,
    }
}

fn luma(r: f32, g: f32, b: f32) -> f32 {
    LUMA_BT601[0] * r + LUMA_BT601[1] * g + LUMA_BT601[2] * b
}

/// Binomial 5-tap kernel [1 4 6 4 1]/16 of OpenCV's `pyrDown` (σ ≈ 1 px).
const PYR_KERNEL: [f32; 5] = [1.0 / 16.0, 4.0 / 16.0, 6.0 / 16.0, 4.0 / 16.0, 1.0 / 16.0];

/// Smallest side of the coarsest pyramid level.
pub const PYRAMID_MIN_SIDE: usize = 8;

/// Mirror index with OpenCV's BORDER_REFLECT_101 (`gfedcb|abcdefgh|gfedcba`).
#[inline]
pub(crate) fn reflect101(i: isize, n: usize) -> usize {
    let n = n as isize;
    if n == 1 {
        return 0;
    }
    let period = 2 * (n - 1);
    let mut k = i.rem_euclid(period);
    if k >= n {
        k = period - k;
    }
    k as usize
}

impl GrayImage {
    /// A `width × height` image filled with `value`.
    pub fn filled(width: usize, height: usize, value: f32) -> Self {
        GrayImage {
            width,
            height,
            data: vec![value; width * height],
        }
    }

    /// Builds an image from row-major data; errors if the length does not match.
    pub fn from_vec(width: usize, height: usize, data: Vec<f32>) -> Result<Self> {
        if data.len() != width * height {
            return Err(Error::InvalidInput(format!(
                "gray image {width}×{height} needs {} values, got {}",
                width * height,
                data.len()
            )));
        }
        Ok(GrayImage {
            width,
            height,
            data,
        })
    }

    /// Pixel at column `x`, row `y` (no bounds check beyond the slice's).
    #[inline]
    pub fn get(&self, x: usize, y: usize) -> f32 {
        self.data[y * self.width + x]
    }

    /// Bilinear interpolation at `(x, y)` (pixel centres at integer coordinates), borders
    /// replicated (coordinates clamped to the image).
    #[inline]
    pub fn bilinear(&self, x: f32, y: f32) -> f32 {
        let xm = (self.width - 1) as f32;
        let ym = (self.height - 1) as f32;
        let x = x.clamp(0.0, xm);
        let y = y.clamp(0.0, ym);
        let x0 = x.floor();
        let y0 = y.floor();
        let fx = x - x0;
        let fy = y - y0;
        let x0 = x0 as usize;
        let y0 = y0 as usize;
        let x1 = (x0 + 1).min(self.width - 1);
        let y1 = (y0 + 1).min(self.height - 1);
        let r0 = y0 * self.width;
        let r1 = y1 * self.width;
        let top = self.data[r0 + x0] + fx * (self.data[r0 + x1] - self.data[r0 + x0]);
        let bot = self.data[r1 + x0] + fx * (self.data[r1 + x1] - self.data[r1 + x0]);
        top + fy * (bot - top)
    }

    /// 8-bit copy (round half up, clamped), the input OpenCV's SIFT requires.
    pub fn to_u8(&self) -> Vec<u8> {
        self.data
            .iter()
            .map(|&v| (v * 255.0 + 0.5).clamp(0.0, 255.0) as u8)
            .collect()
    }

    /// An OpenCV `CV_8UC1` matrix with this image (a copy, see [`GrayImage::to_u8`]).
    #[cfg(feature = "full")]
    pub fn to_mat_u8(&self) -> Result<opencv::core::Mat> {
        let bytes = self.to_u8();
        let m = opencv::core::Mat::new_rows_cols_with_data(
            self.height as i32,
            self.width as i32,
            &bytes,
        )?;
        Ok(m.try_clone()?)
    }

    /// An OpenCV `CV_32FC1` matrix with this image (a copy).
    #[cfg(feature = "full")]
    pub fn to_mat_f32(&self) -> Result<opencv::core::Mat> {
        let m = opencv::core::Mat::new_rows_cols_with_data(
            self.height as i32,
            self.width as i32,
            &self.data,
        )?;
        Ok(m.try_clone()?)
    }

    /// Builds an image from an OpenCV `CV_32FC1` matrix.
    #[cfg(feature = "full")]
    pub fn from_mat_f32(m: &opencv::core::Mat) -> Result<Self> {
        let cont = if m.is_continuous() {
            m.try_clone()?
        } else {
            m.clone()
        };
        let data = cont.data_typed::<f32>()?.to_vec();
        GrayImage::from_vec(m.cols() as usize, m.rows() as usize, data)
    }

    /// Separable convolution with a symmetric kernel of odd length, BORDER_REFLECT_101;
    /// rows in parallel (rayon).
    pub fn convolve_separable(&self, kernel: &[f32]) -> GrayImage {
        use rayon::prelude::*;
        let (w, h) = (self.width, self.height);
        let mut tmp = vec![0.0f32; w * h];
        tmp.par_chunks_mut(w)
            .zip(self.data.par_chunks(w))
            .for_each(|(row, src)| convolve_row(src, kernel, row));
        let mut out = vec![0.0f32; w * h];
        out.par_chunks_mut(w)
            .enumerate()
            .for_each(|(y, row)| convolve_column_into(&tmp, w, h, y, kernel, row));
        GrayImage {
            width: w,
            height: h,
            data: out,
        }
    }

    /// [`GrayImage::convolve_separable`] on the calling thread only (for small windows that
    /// are themselves processed in parallel).
    pub fn convolve_separable_seq(&self, kernel: &[f32]) -> GrayImage {
        let (w, h) = (self.width, self.height);
        let mut tmp = vec![0.0f32; w * h];
        for (row, src) in tmp.chunks_mut(w).zip(self.data.chunks(w)) {
            convolve_row(src, kernel, row);
        }
        let mut out = vec![0.0f32; w * h];
        for (y, row) in out.chunks_mut(w).enumerate() {
            convolve_column_into(&tmp, w, h, y, kernel, row);
        }
        GrayImage {
            width: w,
            height: h,
            data: out,
        }
    }

    /// Gaussian blur with standard deviation `sigma` px (separable, kernel radius
    /// ⌈[`GAUSSIAN_RADIUS_SIGMAS`]·σ⌉, normalised);
    /// `sigma ≤ 0` returns a copy.
    pub fn gaussian_blur(&self, sigma: f32) -> GrayImage {
        if sigma <= 0.0 {
            return self.clone();
        }
        self.convolve_separable(&gaussian_kernel(sigma))
    }

    /// Resized to `width`×`height` with area averaging (OpenCV `INTER_AREA`, the right filter
    /// for shrinking).
    #[cfg(feature = "full")]
    pub fn resize_area(&self, width: usize, height: usize) -> Result<GrayImage> {
        let src = self.to_mat_f32()?;
        let mut dst = opencv::core::Mat::default();
        opencv::imgproc::resize(
            &src,
            &mut dst,
            opencv::core::Size::new(width as i32, height as i32),
            0.0,
            0.0,
            opencv::imgproc::INTER_AREA,
        )?;
        GrayImage::from_mat_f32(&dst)
    }

    /// Warped by the homography `h` (row-major, x' ~ h·x, pixel centres at integer coordinates)
    /// onto a canvas of the same size: OpenCV `warpPerspective`, bilinear, `BORDER_REFLECT_101`
    /// where the canvas sees past the image. The one warp of the synthetic training views and
    /// the benchmark's rotation-and-zoom pairs.
    #[cfg(feature = "full")]
    pub fn warp_perspective(&self, h: &[[f64; 3]; 3]) -> Result<GrayImage> {
        let flat: Vec<f64> = h.iter().flatten().copied().collect();
        let m = opencv::core::Mat::new_rows_cols_with_data(3, 3, &flat)?.try_clone()?;
        let mut out = opencv::core::Mat::default();
        opencv::imgproc::warp_perspective(
            &self.to_mat_f32()?,
            &mut out,
            &m,
            opencv::core::Size::new(self.width as i32, self.height as i32),
            opencv::imgproc::INTER_LINEAR,
            opencv::core::BORDER_REFLECT_101,
            opencv::core::Scalar::default(),
        )?;
        GrayImage::from_mat_f32(&out)
    }

    /// One pyramid step as OpenCV's `pyrDown`: blur with [1 4 6 4 1]/16 (BORDER_REFLECT_101) and
    /// keep the even rows and columns, so level-l pixel (i, j) sits at level-0 point
    /// (2^l·j, 2^l·i) — coordinates simply scale by 2^-l with integer pixel centres.
    pub fn pyr_down(&self) -> GrayImage {
        let blurred = self.convolve_separable(&PYR_KERNEL);
        let w2 = self.width.div_ceil(2);
        let h2 = self.height.div_ceil(2);
        let mut data = Vec::with_capacity(w2 * h2);
        for y in 0..h2 {
            let row = &blurred.data[2 * y * self.width..(2 * y + 1) * self.width];
            data.extend((0..w2).map(|x| row[2 * x]));
        }
        GrayImage {
            width: w2,
            height: h2,
            data,
        }
    }

    /// Gaussian pyramid: level 0 is this image, each next level is [`GrayImage::pyr_down`] of
    /// the previous, down to a smallest side of [`PYRAMID_MIN_SIDE`].
    pub fn pyramid(&self) -> Vec<GrayImage> {
        let mut levels = vec![self.clone()];
        while let Some(last) = levels.last() {
            if last.width.div_ceil(2) < PYRAMID_MIN_SIDE
                || last.height.div_ceil(2) < PYRAMID_MIN_SIDE
            {
                break;
            }
            let next = last.pyr_down();
            levels.push(next);
        }
        levels
    }
}

/// One row convolved with `kernel` (odd length), BORDER_REFLECT_101; the interior runs
/// without index mirroring.
fn convolve_row(src: &[f32], kernel: &[f32], out: &mut [f32]) {
    let w = src.len();
    let r = kernel.len() / 2;
    let edge = |x: usize| -> f32 {
        kernel
            .iter()
            .enumerate()
            .map(|(k, &kv)| kv * src[reflect101(x as isize + k as isize - r as isize, w)])
            .sum()
    };
    if w <= 2 * r {
        for (x, o) in out.iter_mut().enumerate() {
            *o = edge(x);
        }
        return;
    }
    for x in 0..r {
        out[x] = edge(x);
        out[w - 1 - x] = edge(w - 1 - x);
    }
    for x in r..w - r {
        out[x] = src[x - r..=x + r]
            .iter()
            .zip(kernel)
            .map(|(a, b)| a * b)
            .sum();
    }
}

/// Row `y` of the column convolution of `tmp` (`w × h`), BORDER_REFLECT_101.
fn convolve_column_into(
    tmp: &[f32],
    w: usize,
    h: usize,
    y: usize,
    kernel: &[f32],
    row: &mut [f32],
) {
    let r = (kernel.len() / 2) as isize;
    for (k, &kv) in kernel.iter().enumerate() {
        let yy = reflect101(y as isize + k as isize - r, h);
        for (o, &s) in row.iter_mut().zip(&tmp[yy * w..(yy + 1) * w]) {
            *o += kv * s;
        }
    }
}

/// Radius of [`gaussian_kernel`] in standard deviations: ⌈3σ⌉ keeps 99.7 % of the Gaussian's
/// mass (the weights are normalised to sum 1).
pub const GAUSSIAN_RADIUS_SIGMAS: f32 = 3.0;

/// Normalised 1-D Gaussian kernel of standard deviation `sigma`, radius
/// ⌈[`GAUSSIAN_RADIUS_SIGMAS`]·σ⌉ (at least 1).
pub fn gaussian_kernel(sigma: f32) -> Vec<f32> {
    let r = ((GAUSSIAN_RADIUS_SIGMAS * sigma).ceil() as usize).max(1);
    let mut k: Vec<f32> = (0..=2 * r)
        .map(|i| (-((i as f32 - r as f32).powi(2)) / (2.0 * sigma * sigma)).exp())
        .collect();
    let s: f32 = k.iter().sum();
    k.iter_mut().for_each(|v| *v /= s);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(w: usize, h: usize) -> GrayImage {
        let data = (0..w * h)
            .map(|i| (((i % w) * 7 + (i / w) * 13) % 256) as f32 / 255.0)
            .collect();
        GrayImage {
            width: w,
            height: h,
            data,
        }
    }

    #[test]
    fn reflect101_matches_opencv_convention() {
        let n = 5;
        let got: Vec<usize> = (-3..8).map(|i| reflect101(i, n)).collect();
        assert_eq!(got, vec![3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1]);
    }

    #[test]
    fn pyr_down_matches_opencv() {
        for (w, h) in [(37, 29), (64, 48)] {
            let img = ramp(w, h);
            let src = img.to_mat_f32().unwrap();
            let mut dst = opencv::core::Mat::default();
            opencv::imgproc::pyr_down_def(&src, &mut dst).unwrap();
            let cv = GrayImage::from_mat_f32(&dst).unwrap();
            let ours = img.pyr_down();
            assert_eq!((ours.width, ours.height), (cv.width, cv.height));
            let maxd = ours
                .data
                .iter()
                .zip(&cv.data)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(maxd < 1e-5, "max diff {maxd}");
        }
    }

    #[test]
    fn gaussian_blur_matches_opencv() {
        let img = ramp(41, 33);
        let sigma = 1.7f32;
        let k = gaussian_kernel(sigma);
        let src = img.to_mat_f32().unwrap();
        let mut dst = opencv::core::Mat::default();
        opencv::imgproc::gaussian_blur(
            &src,
            &mut dst,
            opencv::core::Size::new(k.len() as i32, k.len() as i32),
            sigma as f64,
            sigma as f64,
            opencv::core::BORDER_REFLECT_101,
        )
        .unwrap();
        let cv = GrayImage::from_mat_f32(&dst).unwrap();
        let ours = img.gaussian_blur(sigma);
        let maxd = ours
            .data
            .iter()
            .zip(&cv.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(maxd < 1e-4, "max diff {maxd}");
        assert_eq!(dst.rows(), 33);
    }

    #[test]
    fn bilinear_hand_case() {
        let img = GrayImage::from_vec(2, 2, vec![0.0, 1.0, 2.0, 3.0]).unwrap();
        assert!((img.bilinear(0.5, 0.5) - 1.5).abs() < 1e-6);
        assert!((img.bilinear(0.25, 0.0) - 0.25).abs() < 1e-6);
        // replicated border
        assert!((img.bilinear(-3.0, 5.0) - 2.0).abs() < 1e-6);
    }

    #[test]
    fn pyramid_levels_halve_down_to_min_side() {
        let p = ramp(100, 40).pyramid();
        let sizes: Vec<_> = p.iter().map(|l| (l.width, l.height)).collect();
        assert_eq!(sizes, vec![(100, 40), (50, 20), (25, 10)]);
    }
}
