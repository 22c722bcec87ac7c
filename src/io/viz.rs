//! Match pictures as hloc's `plot_matches` and kornia's `draw_LAF_matches` draw them: the two
//! images side by side (A left, B right), a line per match ending in a dot on each keypoint,
//! inliers green and outliers red (outliers drawn first so inliers stay visible), and a caption
//! band below with the counts and the colour legend, written as PNG.
//!
//! Why a bounded number: a pair of 838 matches drawn whole is a green band in which no match
//! can be followed. By default at most [`DEFAULT_MAX_DRAWN`] matches are drawn, chosen
//! deterministically and evenly over the match list (descl's matches follow image A's
//! keypoints, which are sorted by detector response, so the sample spans strong and weak
//! keypoints alike); the caption says how many of how many are shown. [`VizOptions::all`]
//! draws every match.

use crate::draw::{dot, font, line};
use crate::error::{Error, Result};
use crate::io::atomic::write_bytes_atomic;
use image::{Rgb, RgbImage};
use std::path::Path;

/// Inlier colour (green) and outlier colour (red).
pub const INLIER: Rgb<u8> = Rgb([40, 220, 40]);
pub const OUTLIER: Rgb<u8> = Rgb([230, 40, 40]);
/// Colour for matches without verification.
pub const UNVERIFIED: Rgb<u8> = Rgb([255, 200, 0]);
/// Caption band: background and text.
const CAPTION_BACKGROUND: Rgb<u8> = Rgb([255, 255, 255]);
const CAPTION_INK: Rgb<u8> = Rgb([0, 0, 0]);

/// Matches drawn by default (hloc's visualisations and kornia's examples draw a few hundred).
pub const DEFAULT_MAX_DRAWN: usize = 200;

/// Canvas width per step of line thickness and text size: a picture of two 1536-px images is
/// drawn with 3-px lines and 4× text, one of two 640-px images with 1-px lines and 1× text, so
/// both stay readable when shown at screen size.
const PIXELS_PER_STROKE_STEP: u32 = 2400;
const PIXELS_PER_TEXT_SCALE: u32 = 700;

/// What a match picture draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VizOptions {
    /// Matches drawn at most (an even, deterministic sample of the list); None: all.
    pub max_drawn: Option<usize>,
}

impl Default for VizOptions {
    fn default() -> Self {
        VizOptions {
            max_drawn: Some(DEFAULT_MAX_DRAWN),
        }
    }
}

impl VizOptions {
    /// Every match drawn.
    pub fn all() -> Self {
        VizOptions { max_drawn: None }
    }
}

/// Indices of the matches drawn out of `n`: all when `max` is None or ≥ n, else `max` indices
/// evenly spread over 0..n (the centre of each of `max` equal strata), increasing.
pub fn sample_indices(n: usize, max: Option<usize>) -> Vec<usize> {
    match max {
        Some(m) if m < n => (0..m).map(|i| (2 * i + 1) * n / (2 * m)).collect(),
        _ => (0..n).collect(),
    }
}

/// The caption: "N matches, K inliers, D drawn" (without verification: "N matches (not
/// verified), D drawn").
pub fn caption(matches: usize, inliers: Option<usize>, drawn: usize) -> String {
    let m = if matches == 1 { "match" } else { "matches" };
    match inliers {
        Some(k) => format!("{matches} {m}, {k} inliers, {drawn} drawn"),
        None => format!("{matches} {m} (not verified), {drawn} drawn"),
    }
}

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
    line(
        img,
        (f64::from(x0), f64::from(y0)),
        (f64::from(x1), f64::from(y1)),
        c,
        1,
    );
}

/// The side-by-side picture of `points` (`[xa, ya, xb, yb]` in each image's pixels) with
/// `inliers` flags (None: all drawn as unverified), the matches chosen by `opts`, and the
/// caption band below the images.
pub fn render(
    a: &RgbImage,
    b: &RgbImage,
    points: &[[f32; 4]],
    inliers: Option<&[bool]>,
    opts: &VizOptions,
) -> RgbImage {
    let w = a.width() + b.width();
    let images_h = a.height().max(b.height());
    let text_scale = (w / PIXELS_PER_TEXT_SCALE).max(1);
    let glyph_h = font::GLYPH_HEIGHT as u32 * text_scale;
    let margin = glyph_h / 2 + 2;
    let band = glyph_h + 2 * margin;
    let mut canvas = RgbImage::from_pixel(w, images_h + band, CAPTION_BACKGROUND);
    image::imageops::replace(&mut canvas, a, 0, 0);
    image::imageops::replace(&mut canvas, b, i64::from(a.width()), 0);
    let off = f64::from(a.width());
    let stroke = 1 + 2 * (w / PIXELS_PER_STROKE_STEP);
    let radius = stroke + 1;
    let is_inlier = |k: usize| inliers.map(|f| f.get(k).copied().unwrap_or(false));
    let drawn = sample_indices(points.len(), opts.max_drawn);
    for pass in [false, true] {
        for &k in &drawn {
            let inlier = is_inlier(k);
            // Pass 0 draws outliers (and unverified), pass 1 inliers on top.
            if pass != (inlier == Some(true)) {
                continue;
            }
            let colour = match inlier {
                None => UNVERIFIED,
                Some(true) => INLIER,
                Some(false) => OUTLIER,
            };
            let p = points[k].map(f64::from);
            let (pa, pb) = ((p[0], p[1]), (p[2] + off, p[3]));
            line(&mut canvas, pa, pb, colour, stroke);
            dot(&mut canvas, pa, radius, colour);
            dot(&mut canvas, pb, radius, colour);
        }
    }
    // Caption: counts on the left, the colour legend on the right.
    let n_inliers = inliers.map(|f| f.iter().take(points.len()).filter(|&&x| x).count());
    let text = caption(points.len(), n_inliers, drawn.len());
    let y = i64::from(images_h + margin);
    font::text(
        &mut canvas,
        i64::from(margin),
        y,
        &text,
        CAPTION_INK,
        text_scale,
    );
    let legend: &[(&str, Rgb<u8>)] = match inliers {
        Some(_) => &[("inlier", INLIER), ("outlier", OUTLIER)],
        None => &[("unverified", UNVERIFIED)],
    };
    let swatch = i64::from(glyph_h);
    let gap = font::text_width(" ", text_scale);
    let legend_w: i64 = legend
        .iter()
        .map(|(s, _)| swatch + gap + font::text_width(s, text_scale) + gap)
        .sum();
    let mut x = i64::from(w) - i64::from(margin) - legend_w;
    // The legend only where it does not run into the counts.
    if x > i64::from(margin) + font::text_width(&text, text_scale) + gap {
        for (label, colour) in legend {
            for dy in 0..swatch {
                for dx in 0..swatch {
                    crate::draw::put(&mut canvas, x + dx, y + dy, *colour);
                }
            }
            x += swatch + gap;
            font::text(&mut canvas, x, y, label, CAPTION_INK, text_scale);
            x += font::text_width(label, text_scale) + gap;
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
    opts: &VizOptions,
    out: &Path,
) -> Result<()> {
    let canvas = render(&load_rgb(a)?, &load_rgb(b)?, points, inliers, opts);
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

    const BLACK: Rgb<u8> = Rgb([0, 0, 0]);

    fn count(img: &RgbImage, c: Rgb<u8>, rows: std::ops::Range<u32>) -> usize {
        img.enumerate_pixels()
            .filter(|(_, y, p)| rows.contains(y) && **p == c)
            .count()
    }

    #[test]
    fn lines_have_the_right_colours_and_ends() {
        let a = RgbImage::from_pixel(10, 8, BLACK);
        let b = RgbImage::from_pixel(12, 6, BLACK);
        let pts = [[1.0, 1.0, 2.0, 1.0], [1.0, 5.0, 3.0, 5.0]];
        let img = render(&a, &b, &pts, Some(&[true, false]), &VizOptions::default());
        // Images on top, the caption band (white) below.
        assert_eq!(img.width(), 22);
        assert!(img.height() > 8);
        assert_eq!(*img.get_pixel(0, img.height() - 1), CAPTION_BACKGROUND);
        // Horizontal inlier from (1,1) to (12,1): every pixel green, dots at both ends.
        for x in 1..=12 {
            assert_eq!(*img.get_pixel(x, 1), INLIER);
        }
        assert_eq!(*img.get_pixel(12, 3), INLIER, "dot of radius 2 at (12, 1)");
        assert_eq!(*img.get_pixel(15, 1), BLACK);
        assert_eq!(*img.get_pixel(1, 5), OUTLIER);
        assert_eq!(*img.get_pixel(13, 5), OUTLIER);
        // Without verification: one colour.
        let img = render(&a, &b, &pts, None, &VizOptions::all());
        assert_eq!(*img.get_pixel(5, 1), UNVERIFIED);
        assert_eq!(*img.get_pixel(5, 5), UNVERIFIED);
    }

    #[test]
    fn at_most_max_drawn_matches_and_a_caption() {
        // 50 horizontal matches on rows 2, 4, …, 100; every third an outlier.
        let a = RgbImage::from_pixel(60, 104, BLACK);
        let b = RgbImage::from_pixel(60, 104, BLACK);
        let pts: Vec<[f32; 4]> = (0..50)
            .map(|i| {
                let y = 2.0 + 2.0 * i as f32;
                [5.0, y, 50.0, y]
            })
            .collect();
        let flags: Vec<bool> = (0..50).map(|i| i % 3 != 0).collect();
        let drawn_rows = |img: &RgbImage| {
            (0..104)
                .filter(|&y| {
                    [INLIER, OUTLIER].contains(img.get_pixel(30, y))
                        && [INLIER, OUTLIER].contains(img.get_pixel(90, y))
                })
                .count()
        };
        let few = render(
            &a,
            &b,
            &pts,
            Some(&flags),
            &VizOptions {
                max_drawn: Some(10),
            },
        );
        let all = render(&a, &b, &pts, Some(&flags), &VizOptions::all());
        assert_eq!(drawn_rows(&few), 10);
        assert_eq!(drawn_rows(&all), 50);
        assert!(count(&all, OUTLIER, 0..104) > 0 && count(&few, OUTLIER, 0..104) > 0);
        // The caption band holds text (black on white) below the images.
        assert!(count(&few, CAPTION_INK, 104..few.height()) > 20);
        assert_eq!(
            caption(50, Some(33), 10),
            "50 matches, 33 inliers, 10 drawn"
        );
        assert_eq!(caption(1, None, 1), "1 match (not verified), 1 drawn");
        // Same input, same picture.
        assert_eq!(
            few,
            render(
                &a,
                &b,
                &pts,
                Some(&flags),
                &VizOptions {
                    max_drawn: Some(10)
                }
            )
        );
    }

    #[test]
    fn sample_is_even_distinct_and_bounded() {
        assert_eq!(sample_indices(5, Some(200)), vec![0, 1, 2, 3, 4]);
        assert_eq!(sample_indices(5, None), vec![0, 1, 2, 3, 4]);
        assert_eq!(sample_indices(10, Some(2)), vec![2, 7]);
        let s = sample_indices(838, Some(200));
        assert_eq!(s.len(), 200);
        assert!(s.windows(2).all(|w| w[0] < w[1]) && *s.last().unwrap() < 838);
        assert!(sample_indices(0, Some(3)).is_empty());
        assert!(sample_indices(7, Some(0)).is_empty());
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
