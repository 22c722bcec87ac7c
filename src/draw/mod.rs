//! Pixel drawing on RGB canvases, shared by the match pictures (`io::viz`) and the benchmark
//! plots (`eval::plot`) so that there is one line rasteriser: integer Bresenham between the
//! rounded end points, clipped to the canvas, with a square brush for thick lines (opaque, or
//! translucent: [`line_blended`]), filled dots, and the built-in bitmap font ([`font`]).
//! Neither caller needs anti-aliasing, and the image crate has no line drawing of its own. It
//! lives outside `eval` because the users' match pictures draw text too, and the users' path
//! never imports `eval`.

pub mod font;

use image::{Rgb, RgbImage};

/// Sets pixel (x, y) when it lies on the canvas; coordinates off the canvas are ignored.
pub fn put(img: &mut RgbImage, x: i64, y: i64, c: Rgb<u8>) {
    if x >= 0 && y >= 0 && (x as u32) < img.width() && (y as u32) < img.height() {
        img.put_pixel(x as u32, y as u32, c);
    }
}

/// A line from (x0, y0) to (x1, y1) (pixel coordinates, rounded to the nearest pixel) drawn
/// by Bresenham's algorithm with a square brush of side `thickness` (odd values centre it; 1
/// is the plain 1-px line), clipped to the canvas. Non-finite end points draw nothing. The
/// segment is clipped before it is rasterised, so the steps are bounded by the canvas whatever
/// the end points (a keypoint at 1e30 px would otherwise take 10^18 steps).
pub fn line(img: &mut RgbImage, p0: (f64, f64), p1: (f64, f64), c: Rgb<u8>, thickness: u32) {
    let size = img.dimensions();
    walk(size, p0, p1, thickness, |x, y| put(img, x, y, c));
}

/// [`line`] drawn translucent: every pixel it covers becomes `alpha`·c + (1 − `alpha`)·(the
/// pixel under it), once however often the brush passes over it, so a dense bundle of lines
/// leaves the image beneath visible. `alpha` is clamped to [0, 1].
pub fn line_blended(
    img: &mut RgbImage,
    p0: (f64, f64),
    p1: (f64, f64),
    c: Rgb<u8>,
    thickness: u32,
    alpha: f32,
) {
    let mut covered = Vec::new();
    walk(img.dimensions(), p0, p1, thickness, |x, y| {
        if x >= 0 && y >= 0 && (x as u32) < img.width() && (y as u32) < img.height() {
            covered.push((x as u32, y as u32));
        }
    });
    covered.sort_unstable();
    covered.dedup();
    for (x, y) in covered {
        let under = *img.get_pixel(x, y);
        img.put_pixel(x, y, mix(under, c, alpha));
    }
}

/// `alpha`·`over` + (1 − `alpha`)·`under`, per channel, rounded; `alpha` clamped to [0, 1].
pub fn mix(under: Rgb<u8>, over: Rgb<u8>, alpha: f32) -> Rgb<u8> {
    let a = alpha.clamp(0.0, 1.0);
    Rgb(std::array::from_fn(|i| {
        (a * f32::from(over.0[i]) + (1.0 - a) * f32::from(under.0[i])).round() as u8
    }))
}

/// The pixels of [`line`] on a canvas of `(width, height)`, handed to `f` (pixels under the
/// brush's overlap more than once, pixels just off the canvas possibly too).
fn walk(
    (width, height): (u32, u32),
    (x0, y0): (f64, f64),
    (x1, y1): (f64, f64),
    thickness: u32,
    mut f: impl FnMut(i64, i64),
) {
    if ![x0, y0, x1, y1].iter().all(|v| v.is_finite()) {
        return;
    }
    let half = i64::from(thickness / 2);
    // The canvas grown by the brush and a pixel of rounding: nothing beyond it can ink a pixel.
    let pad = half as f64 + 1.0;
    let window = (-pad, -pad, f64::from(width) + pad, f64::from(height) + pad);
    let Some(((x0, y0), (x1, y1))) = clip((x0, y0), (x1, y1), window) else {
        return;
    };
    let (mut x, mut y) = (x0.round() as i64, y0.round() as i64);
    let (xe, ye) = (x1.round() as i64, y1.round() as i64);
    let (dx, dy) = ((xe - x).abs(), -(ye - y).abs());
    let (sx, sy) = (if x < xe { 1 } else { -1 }, if y < ye { 1 } else { -1 });
    let mut err = dx + dy;
    loop {
        for by in -half..=half {
            for bx in -half..=half {
                f(x + bx, y + by);
            }
        }
        if x == xe && y == ye {
            break;
        }
        let e2 = 2 * err;
        if e2 >= dy {
            err += dy;
            x += sx;
        }
        if e2 <= dx {
            err += dx;
            y += sy;
        }
    }
}

/// A filled disc of radius `r` px centred on (x, y) (rounded to the nearest pixel), clipped to
/// the canvas; a non-finite centre draws nothing.
pub fn dot(img: &mut RgbImage, (x, y): (f64, f64), r: u32, c: Rgb<u8>) {
    if !(x.is_finite() && y.is_finite()) {
        return;
    }
    let (cx, cy, r) = (x.round() as i64, y.round() as i64, i64::from(r));
    for dy in -r..=r {
        for dx in -r..=r {
            if dx * dx + dy * dy <= r * r {
                put(img, cx + dx, cy + dy, c);
            }
        }
    }
}

/// The part of the segment from `p` to `q` inside the rectangle `(xmin, ymin, xmax, ymax)`
/// (Liang-Barsky), or None when it misses it.
fn clip(
    (x0, y0): (f64, f64),
    (x1, y1): (f64, f64),
    (xmin, ymin, xmax, ymax): (f64, f64, f64, f64),
) -> Option<((f64, f64), (f64, f64))> {
    let (dx, dy) = (x1 - x0, y1 - y0);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (p, q) in [
        (-dx, x0 - xmin),
        (dx, xmax - x0),
        (-dy, y0 - ymin),
        (dy, ymax - y0),
    ] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
        } else {
            let t = q / p;
            if p < 0.0 {
                t0 = t0.max(t);
            } else {
                t1 = t1.min(t);
            }
        }
    }
    // Clamped: with end points near 1e30 the interpolation loses every digit of the canvas
    // scale, and the steps must stay bounded by the window whatever the rounding.
    let at = |t: f64| {
        (
            (x0 + t * dx).clamp(xmin, xmax),
            (y0 + t * dy).clamp(ymin, ymax),
        )
    };
    (t0 <= t1).then(|| (at(t0), at(t1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INK: Rgb<u8> = Rgb([255, 0, 0]);

    fn inked(img: &RgbImage) -> usize {
        img.pixels().filter(|p| **p == INK).count()
    }

    #[test]
    fn absurd_end_points_are_clipped_not_walked() {
        // Unclipped, each of these lines is ~10^18 Bresenham steps (issue 24: `--viz` hung).
        let mut img = RgbImage::new(20, 10);
        line(&mut img, (0.0, 5.0), (1e30, 5.0), INK, 1);
        assert!((0..20).all(|x| *img.get_pixel(x, 5) == INK));
        assert_eq!(inked(&img), 20);
        let mut img = RgbImage::new(20, 20);
        line(&mut img, (-1e6, -1e6), (1e6, 1e6), INK, 1);
        assert!((0..20).all(|i| *img.get_pixel(i, i) == INK));
        assert_eq!(inked(&img), 20);
        // At 1e30 the clipped ends are rounded beyond the canvas scale: bounded, not exact.
        let mut img = RgbImage::new(20, 20);
        line(&mut img, (-1e30, -1e30), (1e30, 1e30), INK, 3);
        line(&mut img, (3.0, 4.0), (-1e30, 1e30), INK, 1);
        let mut img = RgbImage::new(20, 20);
        line(&mut img, (1e30, -1e30), (1e30, 1e30), INK, 1);
        assert_eq!(inked(&img), 0);
    }

    #[test]
    fn thin_line_is_connected_and_ends_where_asked() {
        let mut img = RgbImage::new(20, 20);
        line(&mut img, (0.0, 0.0), (19.0, 7.0), INK, 1);
        for x in 0..20 {
            assert_eq!((0..20).filter(|&y| *img.get_pixel(x, y) == INK).count(), 1);
        }
        assert_eq!(*img.get_pixel(0, 0), INK);
        assert_eq!(*img.get_pixel(19, 7), INK);
    }

    #[test]
    fn thick_line_is_a_band_and_clipping_is_silent() {
        let mut img = RgbImage::new(10, 10);
        line(&mut img, (1.0, 5.0), (8.0, 5.0), INK, 3);
        assert_eq!(inked(&img), 3 * 10);
        let mut img = RgbImage::new(10, 10);
        line(&mut img, (-20.0, -18.0), (30.0, 32.0), INK, 3);
        line(&mut img, (f64::NAN, 0.0), (3.0, 3.0), INK, 1);
        assert!(inked(&img) > 0);
    }

    #[test]
    fn blended_line_mixes_each_pixel_once() {
        let grey = Rgb([100, 100, 100]);
        let mut img = RgbImage::from_pixel(12, 12, grey);
        // A thick diagonal: the square brush passes most pixels several times.
        line_blended(&mut img, (1.0, 1.0), (10.0, 10.0), INK, 3, 0.5);
        let once = mix(grey, INK, 0.5);
        assert_eq!(once, Rgb([178, 50, 50]));
        let mut thick = RgbImage::from_pixel(12, 12, grey);
        line(&mut thick, (1.0, 1.0), (10.0, 10.0), INK, 3);
        for (x, y, p) in img.enumerate_pixels() {
            let expected = if *thick.get_pixel(x, y) == INK {
                once
            } else {
                grey
            };
            assert_eq!(*p, expected, "({x}, {y})");
        }
        assert_eq!(mix(grey, INK, 2.0), INK);
        assert_eq!(mix(grey, INK, -1.0), grey);
    }

    #[test]
    fn dots_are_discs() {
        let mut img = RgbImage::new(10, 10);
        dot(&mut img, (4.0, 4.0), 1, INK);
        assert_eq!(inked(&img), 5);
        dot(&mut img, (4.0, 4.0), 2, INK);
        assert_eq!(inked(&img), 13);
        dot(&mut img, (f64::NAN, 1.0), 2, INK);
        // Clipped at the corner: (0, 0), (1, 0) and (0, 1) remain.
        dot(&mut img, (0.0, 0.0), 1, INK);
        assert_eq!(inked(&img), 16);
    }
}
