//! Match pictures: the two images side by side (A left, B right), a line per match, inliers
//! green and outliers red (outliers drawn first so inliers stay visible), written as PNG.

use crate::error::{Error, Result};
use crate::io::atomic::write_bytes_atomic;
use image::{Rgb, RgbImage};
use std::path::Path;

/// Inlier colour (green) and outlier colour (red).
pub const INLIER: Rgb<u8> = Rgb([40, 220, 40]);
pub const OUTLIER: Rgb<u8> = Rgb([230, 40, 40]);
/// Colour for matches without verification.
pub const UNVERIFIED: Rgb<u8> = Rgb([255, 200, 0]);

fn load_rgb(path: &Path) -> Result<RgbImage> {
    Ok(image::open(path)
        .map_err(|e| Error::Image {
            path: path.into(),
            reason: e.to_string(),
        })?
        .to_rgb8())
}

/// Draws a 1-px line (Bresenham between the rounded end points), clipped to the canvas;
/// non-finite end points draw nothing. The rasteriser is [`crate::draw::line`].
pub fn draw_line(img: &mut RgbImage, (x0, y0): (f32, f32), (x1, y1): (f32, f32), c: Rgb<u8>) {
    crate::draw::line(
        img,
        (f64::from(x0), f64::from(y0)),
        (f64::from(x1), f64::from(y1)),
        c,
        1,
    );
}

/// The side-by-side picture of `points` (`[xa, ya, xb, yb]` in each image's pixels) with
/// `inliers` flags (None: all drawn as unverified).
pub fn render(
    a: &RgbImage,
    b: &RgbImage,
    points: &[[f32; 4]],
    inliers: Option<&[bool]>,
) -> RgbImage {
    let (w, h) = (a.width() + b.width(), a.height().max(b.height()));
    let mut canvas = RgbImage::new(w, h);
    image::imageops::replace(&mut canvas, a, 0, 0);
    image::imageops::replace(&mut canvas, b, a.width() as i64, 0);
    let off = a.width() as f32;
    for pass in [false, true] {
        for (k, p) in points.iter().enumerate() {
            let inlier = inliers.map(|f| f.get(k).copied().unwrap_or(false));
            let colour = match inlier {
                None => UNVERIFIED,
                Some(true) => INLIER,
                Some(false) => OUTLIER,
            };
            // Pass 0 draws outliers (and unverified), pass 1 inliers on top.
            if pass == (inlier == Some(true)) {
                draw_line(&mut canvas, (p[0], p[1]), (p[2] + off, p[3]), colour);
            }
        }
    }
    canvas
}

/// Renders the match picture of images `a` and `b` and writes it to `out` (PNG) atomically.
pub fn write_match_picture(
    a: &Path,
    b: &Path,
    points: &[[f32; 4]],
    inliers: Option<&[bool]>,
    out: &Path,
) -> Result<()> {
    let canvas = render(&load_rgb(a)?, &load_rgb(b)?, points, inliers);
    let mut bytes = std::io::Cursor::new(Vec::new());
    canvas
        .write_to(&mut bytes, image::ImageFormat::Png)
        .map_err(|e| Error::Image {
            path: out.into(),
            reason: e.to_string(),
        })?;
    write_bytes_atomic(out, &bytes.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_right_colours_and_ends() {
        let a = RgbImage::from_pixel(10, 8, Rgb([0, 0, 0]));
        let b = RgbImage::from_pixel(12, 6, Rgb([0, 0, 0]));
        let pts = [[1.0, 1.0, 2.0, 1.0], [1.0, 5.0, 3.0, 5.0]];
        let img = render(&a, &b, &pts, Some(&[true, false]));
        assert_eq!(img.dimensions(), (22, 8));
        // Horizontal inlier from (1,1) to (12,1): every pixel green.
        for x in 1..=12 {
            assert_eq!(*img.get_pixel(x, 1), INLIER);
        }
        assert_eq!(*img.get_pixel(13, 1), Rgb([0, 0, 0]));
        assert_eq!(*img.get_pixel(1, 5), OUTLIER);
        assert_eq!(*img.get_pixel(13, 5), OUTLIER);
    }

    #[test]
    fn diagonal_line_is_connected() {
        let mut img = RgbImage::new(20, 20);
        draw_line(&mut img, (0.0, 0.0), (19.0, 7.0), INLIER);
        for x in 0..20 {
            assert!(
                (0..20).any(|y| *img.get_pixel(x, y) == INLIER),
                "gap at x = {x}"
            );
        }
        draw_line(&mut img, (-5.0, f32::NAN), (3.0, 3.0), OUTLIER); // ignored, no panic
    }
}
