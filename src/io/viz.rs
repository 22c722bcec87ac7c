//! Match pictures as hloc's `plot_matches` and kornia's `draw_LAF_matches` draw them: the two
//! images side by side (A left, B right), a line per match ending in a dot on each keypoint,
//! inliers green and outliers red, and a caption band below, written as PNG.
//!
//! Legibility (issue 45): a verified pair has a few outliers among hundreds of inliers, and six
//! thin red lines under two hundred green ones on a red-stone facade are lost. So inliers are
//! drawn first, thin and translucent (the image shows through a dense bundle; their dots stay
//! opaque), and outliers on top of every inlier, thicker, each inside a dark outline
//! ([`OUTLINE`]) that shows on any background.
//!
//! The caption says what the picture shows and what made it ([`CaptionSettings`]): the
//! geometry model, the estimator and its threshold, the inlier and outlier counts and how many
//! of each are drawn; then the describer, the detector with each image's keypoint count, and the
//! matcher with its filters. Its lines are wrapped to the picture's width and also stored in
//! the PNG's `Description` text chunk, where image viewers and tools read it as text.
//!
//! Why a bounded number: a pair of 838 matches drawn whole is a green band in which no match
//! can be followed. By default at most [`DEFAULT_MAX_DRAWN`] matches are drawn, chosen
//! deterministically and evenly over the match list (descl's matches follow image A's
//! keypoints, which are sorted by detector response, so the sample spans strong and weak
//! keypoints alike, and it keeps the share of outliers); the caption says how many of how many
//! are shown. [`VizOptions::all`] draws every match.

use crate::draw::{dot, font, line, line_blended};
use crate::error::{Error, Result};
use crate::features::Features;
use crate::geometry::ModelKind;
use crate::io::atomic::write_bytes_atomic;
use crate::matching::two_view::{Matcher, PairConfig, PairResult};
use image::{Rgb, RgbImage};
use std::path::Path;

/// Inlier colour (green) and outlier colour (red).
pub const INLIER: Rgb<u8> = Rgb([40, 220, 40]);
pub const OUTLIER: Rgb<u8> = Rgb([255, 40, 40]);
/// The dark outline around every outlier line and dot.
pub const OUTLINE: Rgb<u8> = Rgb([16, 16, 16]);
/// Colour for matches without verification.
pub const UNVERIFIED: Rgb<u8> = Rgb([255, 200, 0]);
/// Opacity of inlier (and unverified) lines: 200 of them over an image stay lines over the
/// image, not a green sheet; outliers and every dot are opaque.
pub const INLIER_ALPHA: f32 = 0.6;
/// Caption band: background and text.
const CAPTION_BACKGROUND: Rgb<u8> = Rgb([255, 255, 255]);
const CAPTION_INK: Rgb<u8> = Rgb([0, 0, 0]);
/// The PNG text chunk holding the caption (a keyword the PNG specification defines).
pub const CAPTION_KEYWORD: &str = "Description";

/// The largest match picture [`read_caption`] reads: two images of COLMAP's largest side
/// (3200 px) side by side, stored uncompressed, are 62 MB.
pub const MAX_PICTURE_BYTES: u64 = 256 << 20;

/// Matches drawn by default (hloc's visualisations and kornia's examples draw a few hundred).
pub const DEFAULT_MAX_DRAWN: usize = 200;

/// Canvas width per step of line thickness and text size: a picture of two 1536-px images is
/// drawn with 3-px inlier lines and 4× text (28-px capitals), one of two 741-px images (the
/// example pair) with 1-px lines and 2× text (14-px capitals), so both stay readable when shown
/// at screen size.
const PIXELS_PER_STROKE_STEP: u32 = 2400;
const PIXELS_PER_TEXT_SCALE: u32 = 700;

/// The estimator every verification runs (`geometry`: OpenCV's USAC MAGSAC).
const ESTIMATOR: &str = "MAGSAC";

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

/// What made the matches of a picture, for its caption.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CaptionSettings {
    /// The describer: a model's name, `sift` or `rootsift` (both images': "A / B" if they
    /// differ).
    pub describer: String,
    /// The detector (likewise).
    pub detector: String,
    /// Keypoints in A and in B.
    pub keypoints: [usize; 2],
    /// The matcher and its filters, in words ("exact matcher, mutual, ratio 0.8").
    pub matching: String,
    /// The geometry verified and the estimator's threshold in pixels; None: not verified.
    pub geometry: Option<(ModelKind, f64)>,
    /// Why verification found no model (then every match counts as an outlier).
    pub no_model: Option<String>,
}

impl CaptionSettings {
    /// The settings of a pair matched by `match_pair(fa, fb, cfg)` into `r`.
    pub fn of(fa: &Features, fb: &Features, cfg: &PairConfig, r: &PairResult) -> Self {
        let both = |a: &str, b: &str| {
            if a == b {
                a.to_string()
            } else {
                format!("{a} / {b}")
            }
        };
        let v = r.verification.as_ref();
        CaptionSettings {
            describer: both(&fa.meta.model, &fb.meta.model),
            detector: both(&fa.meta.detector, &fb.meta.detector),
            keypoints: [fa.frames.len(), fb.frames.len()],
            matching: matching_words(cfg),
            geometry: v.map(|v| (v.kind, cfg.ransac.threshold_px)),
            no_model: v
                .filter(|v| v.model.is_none())
                .map(|v| v.reason.clone().unwrap_or_else(|| "none found".into())),
        }
    }
}

/// The matcher and its filters in words: "exact matcher, mutual, ratio 0.8".
pub fn matching_words(cfg: &PairConfig) -> String {
    let m = &cfg.matching;
    let mut words = vec![format!("{} matcher", cfg.matcher.name())];
    if cfg.matcher == Matcher::Guided {
        words.push(format!("radius {} px", cfg.guided_radius));
    }
    if m.mutual {
        words.push("mutual".into());
    }
    if let Some(r) = m.ratio {
        words.push(format!("ratio {r}"));
    }
    if let Some(d) = m.max_distance {
        words.push(format!("max distance {d}"));
    }
    if let Some(g) = m.min_gap {
        words.push(format!("min gap {g}"));
    }
    if let Some(k) = m.top_k {
        words.push(format!("top {k}"));
    }
    words.join(", ")
}

/// The geometry model's name in a caption.
fn model_words(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Homography => "homography",
        ModelKind::Fundamental => "fundamental matrix",
        ModelKind::Essential => "essential matrix",
    }
}

/// How many matches a picture has and draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub matches: usize,
    /// Inliers among them; None: not verified.
    pub inliers: Option<usize>,
    pub drawn: usize,
    /// Outliers among the drawn (0 when not verified).
    pub drawn_outliers: usize,
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The caption's lines before wrapping: what the picture shows (the geometry, the counts),
/// then what made the matches.
pub fn caption_lines(s: &CaptionSettings, c: &Counts) -> Vec<String> {
    let drawn = if c.drawn == c.matches {
        "all drawn".to_string()
    } else {
        format!("{} drawn", c.drawn)
    };
    let matches = plural(c.matches, "match", "matches");
    let shown = match (s.geometry, c.inliers) {
        (Some((kind, px)), Some(inliers)) => {
            let how = format!("{}, {ESTIMATOR} at {px} px", model_words(kind));
            match &s.no_model {
                Some(why) => format!("{how}: no model ({why}); {matches}, {drawn}"),
                None => format!(
                    "{how}: {}, {} of {matches}; {drawn} ({})",
                    plural(inliers, "inlier", "inliers"),
                    plural(c.matches - inliers, "outlier", "outliers"),
                    plural(c.drawn_outliers, "outlier", "outliers"),
                ),
            }
        }
        _ => format!("not verified: {matches}, {drawn}"),
    };
    let made = format!(
        "{} on {} keypoints ({} in A, {} in B), {}",
        s.describer, s.detector, s.keypoints[0], s.keypoints[1], s.matching
    );
    vec![shown, made]
}

/// `text` broken at blanks into lines of at most `width` px at `scale`; a word longer than
/// the width stays whole on a line of its own.
pub fn wrap(text: &str, width: i64, scale: u32) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let candidate = if current.is_empty() {
            word.to_string()
        } else {
            format!("{current} {word}")
        };
        if current.is_empty() || font::text_width(&candidate, scale) <= width {
            current = candidate;
        } else {
            lines.push(std::mem::replace(&mut current, word.to_string()));
        }
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

/// Indices of the matches drawn out of `n`: all when `max` is None or ≥ n, else `max` indices
/// evenly spread over 0..n (the centre of each of `max` equal strata), increasing.
pub fn sample_indices(n: usize, max: Option<usize>) -> Vec<usize> {
    match max {
        Some(m) if m < n => (0..m).map(|i| (2 * i + 1) * n / (2 * m)).collect(),
        _ => (0..n).collect(),
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

/// Line widths and dot radii of a picture `width` px wide: one unit below
/// [`PIXELS_PER_STROKE_STEP`], one more per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Strokes {
    inlier: u32,
    inlier_dot: u32,
    outlier: u32,
    outlier_dot: u32,
    /// The outline's width on each side of an outlier line or dot.
    outline: u32,
}

impl Strokes {
    fn of(width: u32) -> Self {
        let u = 1 + width / PIXELS_PER_STROKE_STEP;
        Strokes {
            inlier: 2 * u - 1,
            inlier_dot: u + 1,
            outlier: 2 * u + 1,
            outlier_dot: u + 2,
            outline: u,
        }
    }
}

/// A rendered match picture and its caption's lines (as drawn, wrapped; the colour legend
/// aside).
#[derive(Debug, Clone, PartialEq)]
pub struct MatchPicture {
    pub image: RgbImage,
    pub caption: Vec<String>,
}

/// The side-by-side picture of `points` (`[xa, ya, xb, yb]` in each image's pixels) with
/// `inliers` flags (None: all drawn as unverified), the matches chosen by `opts`, and the
/// caption band below the images, written from `settings`.
pub fn render(
    a: &RgbImage,
    b: &RgbImage,
    points: &[[f32; 4]],
    inliers: Option<&[bool]>,
    opts: &VizOptions,
    settings: &CaptionSettings,
) -> MatchPicture {
    let w = a.width() + b.width();
    let images_h = a.height().max(b.height());
    let is_inlier = |k: usize| inliers.map(|f| f.get(k).copied().unwrap_or(false));
    let drawn = sample_indices(points.len(), opts.max_drawn);
    let counts = Counts {
        matches: points.len(),
        inliers: inliers.map(|f| f.iter().take(points.len()).filter(|&&x| x).count()),
        drawn: drawn.len(),
        drawn_outliers: drawn
            .iter()
            .filter(|&&k| is_inlier(k) == Some(false))
            .count(),
    };

    // The caption's layout first: its height sets the canvas's.
    let text_scale = (w / PIXELS_PER_TEXT_SCALE).max(1);
    let glyph_h = font::GLYPH_HEIGHT as u32 * text_scale;
    let margin = glyph_h / 2 + 2;
    let leading = glyph_h / 2;
    let text_w = i64::from(w) - 2 * i64::from(margin);
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
    let lines: Vec<String> = caption_lines(settings, &counts)
        .iter()
        .flat_map(|l| wrap(l, text_w, text_scale))
        .collect();
    // The legend at the right of the first line, or on a line of its own where it does not fit.
    let legend_beside = lines
        .first()
        .is_some_and(|l| font::text_width(l, text_scale) + gap + legend_w <= text_w);
    let rows = lines.len() as u32 + u32::from(!legend_beside);
    let band = rows * glyph_h + rows.saturating_sub(1) * leading + 2 * margin;
    let mut canvas = RgbImage::from_pixel(w, images_h + band, CAPTION_BACKGROUND);
    image::imageops::replace(&mut canvas, a, 0, 0);
    image::imageops::replace(&mut canvas, b, i64::from(a.width()), 0);

    let off = f64::from(a.width());
    let st = Strokes::of(w);
    let ends = |k: usize| {
        let p = points[k].map(f64::from);
        ((p[0], p[1]), (p[2] + off, p[3]))
    };
    // Inliers (or unverified) first, translucent lines, opaque dots.
    for &k in drawn.iter().filter(|&&k| is_inlier(k) != Some(false)) {
        let colour = if is_inlier(k).is_some() {
            INLIER
        } else {
            UNVERIFIED
        };
        let (pa, pb) = ends(k);
        line_blended(&mut canvas, pa, pb, colour, st.inlier, INLIER_ALPHA);
        dot(&mut canvas, pa, st.inlier_dot, colour);
        dot(&mut canvas, pb, st.inlier_dot, colour);
    }
    // Then outliers over every inlier: all outlines, then all cores (an outline never cuts
    // another outlier).
    let outliers: Vec<usize> = drawn
        .iter()
        .copied()
        .filter(|&k| is_inlier(k) == Some(false))
        .collect();
    for &k in &outliers {
        let (pa, pb) = ends(k);
        line(&mut canvas, pa, pb, OUTLINE, st.outlier + 2 * st.outline);
        dot(&mut canvas, pa, st.outlier_dot + st.outline, OUTLINE);
        dot(&mut canvas, pb, st.outlier_dot + st.outline, OUTLINE);
    }
    for &k in &outliers {
        let (pa, pb) = ends(k);
        line(&mut canvas, pa, pb, OUTLIER, st.outlier);
        dot(&mut canvas, pa, st.outlier_dot, OUTLIER);
        dot(&mut canvas, pb, st.outlier_dot, OUTLIER);
    }

    // The caption, left-aligned, the legend right-aligned on the first row or on its own.
    let row_y = |r: u32| i64::from(images_h + margin + r * (glyph_h + leading));
    for (r, text) in lines.iter().enumerate() {
        let y = row_y(r as u32);
        font::text(
            &mut canvas,
            i64::from(margin),
            y,
            text,
            CAPTION_INK,
            text_scale,
        );
    }
    let (mut x, y) = if legend_beside {
        (i64::from(w) - i64::from(margin) - legend_w, row_y(0))
    } else {
        (i64::from(margin), row_y(lines.len() as u32))
    };
    for (label, colour) in legend {
        let outlined = *colour == OUTLIER;
        for dy in 0..swatch {
            for dx in 0..swatch {
                let edge =
                    dx.min(dy).min(swatch - 1 - dx).min(swatch - 1 - dy) < i64::from(st.outline);
                let c = if outlined && edge { OUTLINE } else { *colour };
                crate::draw::put(&mut canvas, x + dx, y + dy, c);
            }
        }
        x += swatch + gap;
        font::text(&mut canvas, x, y, label, CAPTION_INK, text_scale);
        x += font::text_width(label, text_scale) + gap;
    }
    MatchPicture {
        image: canvas,
        caption: lines,
    }
}

/// `picture` as PNG bytes, its caption's lines in the `Description` text chunk.
pub fn png_bytes(picture: &MatchPicture, out: &Path) -> Result<Vec<u8>> {
    let err = |e: &dyn std::fmt::Display| Error::Image {
        path: out.into(),
        reason: e.to_string(),
    };
    let img = &picture.image;
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, img.width(), img.height());
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder
        .add_itxt_chunk(CAPTION_KEYWORD.into(), picture.caption.join("\n"))
        .map_err(|e| err(&e))?;
    let mut writer = encoder.write_header().map_err(|e| err(&e))?;
    writer.write_image_data(img.as_raw()).map_err(|e| err(&e))?;
    writer.finish().map_err(|e| err(&e))?;
    Ok(bytes)
}

/// Renders the match picture of images `a` and `b` and writes it to `out` (PNG) atomically.
pub fn write_match_picture(
    a: &Path,
    b: &Path,
    points: &[[f32; 4]],
    inliers: Option<&[bool]>,
    opts: &VizOptions,
    settings: &CaptionSettings,
    out: &Path,
) -> Result<()> {
    let picture = render(
        &load_rgb(a)?,
        &load_rgb(b)?,
        points,
        inliers,
        opts,
        settings,
    );
    write_bytes_atomic(out, &png_bytes(&picture, out)?)
}

/// Refuses a `--viz` path that holds anything but a match picture descl drew (a PNG with its
/// caption, [`read_caption`]): the drawing replaces the file, and a photograph there (one of
/// the set's images not given to this command, any JPEG), a features file or a database would
/// be destroyed with exit 0 (issue 55). Checked with the other output checks
/// ([`crate::io::atomic::check_writable_picture`]); nothing there passes.
pub fn check_replaceable_drawing(path: &Path) -> Result<()> {
    crate::io::atomic::check_not_named_as_npz(path, "match picture")?;
    crate::io::atomic::check_writable_picture(path)?;
    if !path.is_file() {
        return Ok(());
    }
    let ours = read_caption(path).ok().flatten().is_some();
    if ours {
        return Ok(());
    }
    let what = crate::io::atomic::picture_kind(path)
        .map_or("a file".to_string(), |k| format!("an existing {k} picture"));
    Err(Error::InvalidInput(format!(
        "{}: {what} that descl did not draw (no descl caption); --viz replaces only a match picture of its own, so choose another path or remove the file",
        path.display()
    )))
}

/// The caption a PNG written by [`write_match_picture`] stores (its `Description` text
/// chunk), one string per line; None when it has none.
pub fn read_caption(png_file: &Path) -> Result<Option<Vec<String>>> {
    let bytes = crate::io::bounded::read_bytes(png_file, MAX_PICTURE_BYTES, "match picture")?;
    let err = |e: &dyn std::fmt::Display| Error::Image {
        path: png_file.into(),
        reason: e.to_string(),
    };
    let reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .map_err(|e| err(&e))?;
    for chunk in &reader.info().utf8_text {
        if chunk.keyword == CAPTION_KEYWORD {
            let text = chunk.get_text().map_err(|e| err(&e))?;
            return Ok(Some(text.lines().map(str::to_string).collect()));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLACK: Rgb<u8> = Rgb([0, 0, 0]);
    const GREY: Rgb<u8> = Rgb([128, 128, 128]);

    fn count(img: &RgbImage, c: Rgb<u8>, rows: std::ops::Range<u32>) -> usize {
        img.enumerate_pixels()
            .filter(|(_, y, p)| rows.contains(y) && **p == c)
            .count()
    }

    fn settings() -> CaptionSettings {
        CaptionSettings {
            describer: "descl-test-model".into(),
            detector: "dog".into(),
            keypoints: [2048, 1990],
            matching: "exact matcher, mutual, ratio 0.8".into(),
            geometry: Some((ModelKind::Fundamental, 1.0)),
            no_model: None,
        }
    }

    fn pic(
        a: &RgbImage,
        b: &RgbImage,
        pts: &[[f32; 4]],
        flags: Option<&[bool]>,
        opts: &VizOptions,
    ) -> RgbImage {
        render(a, b, pts, flags, opts, &settings()).image
    }

    #[test]
    fn lines_have_the_right_colours_and_ends() {
        let a = RgbImage::from_pixel(10, 8, BLACK);
        let b = RgbImage::from_pixel(12, 6, BLACK);
        let pts = [[1.0, 1.0, 2.0, 1.0], [1.0, 5.0, 3.0, 5.0]];
        let img = pic(&a, &b, &pts, Some(&[true, false]), &VizOptions::default());
        // Images on top, the caption band (white) below.
        assert_eq!(img.width(), 22);
        assert!(img.height() > 8);
        assert_eq!(*img.get_pixel(0, img.height() - 1), CAPTION_BACKGROUND);
        // Horizontal inlier from (1,1) to (12,1): translucent over black, opaque dots at the
        // ends (radius 2).
        let translucent = crate::draw::mix(BLACK, INLIER, INLIER_ALPHA);
        for x in 4..=9 {
            assert_eq!(*img.get_pixel(x, 1), translucent, "x = {x}");
        }
        assert_eq!(*img.get_pixel(12, 1), INLIER);
        assert_eq!(*img.get_pixel(14, 1), INLIER, "dot of radius 2 at (12, 1)");
        assert_eq!(*img.get_pixel(15, 1), BLACK);
        // The outlier (1,5)–(13,5): a 3-px red core, a 1-px dark outline above and below.
        assert_eq!(*img.get_pixel(7, 5), OUTLIER);
        assert_eq!(*img.get_pixel(7, 4), OUTLIER);
        assert_eq!(*img.get_pixel(7, 6), OUTLIER);
        assert_eq!(*img.get_pixel(13, 5), OUTLIER);
        assert_eq!(*img.get_pixel(7, 7), OUTLINE);
        // Without verification: one colour.
        let img = pic(&a, &b, &pts, None, &VizOptions::all());
        assert_eq!(*img.get_pixel(1, 1), UNVERIFIED);
        assert_eq!(
            *img.get_pixel(6, 5),
            crate::draw::mix(BLACK, UNVERIFIED, INLIER_ALPHA)
        );
    }

    #[test]
    fn outliers_are_drawn_over_inliers_inside_a_dark_outline() {
        // A vertical outlier listed first, then horizontal inliers crossing it on a grey image
        // (and one running along it): wherever they meet the outlier is on top, outlined.
        let a = RgbImage::from_pixel(40, 40, GREY);
        let b = RgbImage::from_pixel(40, 40, GREY);
        let mut pts = vec![[20.0, 2.0, 0.0, 37.0]]; // A (20, 2) → canvas (40, 37)
        for y in [10.0, 20.0, 30.0] {
            pts.push([2.0, y, 37.0, y]);
        }
        let mut flags = vec![false];
        flags.extend([true; 3]);
        let img = pic(&a, &b, &pts, Some(&flags), &VizOptions::all());
        let inlier_px = crate::draw::mix(GREY, INLIER, INLIER_ALPHA);
        // The outlier runs from (20, 2) to (40, 37): at row 20 it sits near x = 20 + 18·20/35.
        let mut crossings = 0;
        for y in [10u32, 20, 30] {
            let row: Vec<Rgb<u8>> = (0..80).map(|x| *img.get_pixel(x, y)).collect();
            // The inlier's translucent green left and right of the outlier…
            assert_eq!(row[8], inlier_px, "row {y}");
            assert_eq!(row[60], inlier_px, "row {y}");
            // …interrupted by a run dark | red | dark where the outlier crosses it.
            let first_red = row.iter().position(|p| *p == OUTLIER).unwrap();
            let last_red = row.iter().rposition(|p| *p == OUTLIER).unwrap();
            assert_eq!(
                row[first_red - 1],
                OUTLINE,
                "row {y}: outline before the red"
            );
            assert_eq!(row[last_red + 1], OUTLINE, "row {y}: outline after the red");
            assert!(last_red - first_red >= 2, "row {y}: a 3-px core");
            crossings += 1;
        }
        assert_eq!(crossings, 3);
        // Order in the list does not matter: the outlier last draws the same picture.
        let mut rev_pts = pts.clone();
        rev_pts.rotate_left(1);
        let mut rev_flags = flags.clone();
        rev_flags.rotate_left(1);
        assert_eq!(
            img,
            pic(&a, &b, &rev_pts, Some(&rev_flags), &VizOptions::all())
        );
    }

    #[test]
    fn at_most_max_drawn_matches_and_a_caption() {
        // 50 horizontal matches on rows 4, 12, …, 396 (apart by more than an outlined outlier's
        // 7 px); every third an outlier.
        let a = RgbImage::from_pixel(300, 400, BLACK);
        let b = RgbImage::from_pixel(300, 400, BLACK);
        let pts: Vec<[f32; 4]> = (0..50)
            .map(|i| {
                let y = 4.0 + 8.0 * i as f32;
                [5.0, y, 290.0, y]
            })
            .collect();
        let flags: Vec<bool> = (0..50).map(|i| i % 3 != 0).collect();
        let inlier_px = crate::draw::mix(BLACK, INLIER, INLIER_ALPHA);
        let drawn_rows = |img: &RgbImage| {
            (0..50u32)
                .filter(|i| {
                    let y = 4 + 8 * i;
                    [inlier_px, OUTLIER].contains(img.get_pixel(150, y))
                        && [inlier_px, OUTLIER].contains(img.get_pixel(450, y))
                })
                .count()
        };
        let ten = VizOptions {
            max_drawn: Some(10),
        };
        let few = render(&a, &b, &pts, Some(&flags), &ten, &settings());
        let all = pic(&a, &b, &pts, Some(&flags), &VizOptions::all());
        assert_eq!(drawn_rows(&few.image), 10);
        assert_eq!(drawn_rows(&all), 50);
        // 17 outliers, 3-px red cores each (counted between the dots).
        let red = (20..580)
            .flat_map(|x| (0..400).map(move |y| (x, y)))
            .filter(|&(x, y)| *all.get_pixel(x, y) == OUTLIER)
            .count();
        assert_eq!(red, 17 * 3 * 560);
        assert!(count(&few.image, OUTLIER, 0..400) > 0);
        // The caption band holds text (black on white) below the images.
        assert!(count(&few.image, CAPTION_INK, 400..few.image.height()) > 20);
        // Of the 10 drawn (indices 2, 7, 12, …, 47), 3 are outliers (12, 27, 42). The lines are
        // wrapped to the 600-px picture (1× text), so compare them joined.
        assert_eq!(
            few.caption.join(" "),
            "fundamental matrix, MAGSAC at 1 px: 33 inliers, 17 outliers of 50 matches; 10 \
             drawn (3 outliers) descl-test-model on dog keypoints (2048 in A, 1990 \
             in B), exact matcher, mutual, ratio 0.8"
        );
        // Same input, same picture.
        assert_eq!(few, render(&a, &b, &pts, Some(&flags), &ten, &settings()));
    }

    #[test]
    fn the_caption_is_written_from_the_settings() {
        let counts = Counts {
            matches: 1,
            inliers: None,
            drawn: 1,
            drawn_outliers: 0,
        };
        let mut s = settings();
        s.geometry = None;
        assert_eq!(
            caption_lines(&s, &counts)[0],
            "not verified: 1 match, all drawn"
        );
        s.geometry = Some((ModelKind::Homography, 2.5));
        s.no_model = Some("too few matches (1 < 4)".into());
        let counts = Counts {
            inliers: Some(0),
            drawn_outliers: 1,
            ..counts
        };
        assert_eq!(
            caption_lines(&s, &counts)[0],
            "homography, MAGSAC at 2.5 px: no model (too few matches (1 < 4)); 1 match, all drawn"
        );
        let cfg = PairConfig {
            matcher: Matcher::Guided,
            ..PairConfig::default()
        };
        assert_eq!(
            matching_words(&cfg),
            format!(
                "guided matcher, radius {} px, mutual, ratio 0.8",
                cfg.guided_radius
            )
        );
        // The font has every character the captions write (a missing one is drawn as a box).
        let mut all = settings();
        all.matching = matching_words(&PairConfig {
            matcher: Matcher::Guided,
            matching: crate::matching::filters::MatchConfig {
                max_distance: Some(0.5),
                min_gap: Some(3.0),
                top_k: Some(9),
                ..Default::default()
            },
            ..PairConfig::default()
        });
        let counts = Counts {
            matches: 30,
            inliers: Some(20),
            drawn: 10,
            drawn_outliers: 3,
        };
        // The reasons `geometry::verify` gives.
        let reasons = [
            "too few matches for a homography model: 3 < 4",
            "ransac found no essential model",
            "12 inliers, fewer than the 15 a model needs",
        ];
        for no_model in std::iter::once(None).chain(reasons.map(|r| Some(r.to_string()))) {
            for geometry in [None, Some((ModelKind::Essential, 0.75))] {
                let s = CaptionSettings {
                    no_model: no_model.clone(),
                    geometry,
                    ..all.clone()
                };
                for line in caption_lines(&s, &counts) {
                    let missing: Vec<char> =
                        line.chars().filter(|&c| font::glyph(c).is_none()).collect();
                    assert!(missing.is_empty(), "{missing:?} in {line:?}");
                }
            }
        }
        // Another setting draws another caption.
        let a = RgbImage::from_pixel(700, 40, GREY);
        let pts = [[5.0, 5.0, 6.0, 6.0]];
        let draw =
            |s: &CaptionSettings| render(&a, &a, &pts, Some(&[true]), &VizOptions::all(), s).image;
        let one = draw(&settings());
        let mut other = settings();
        other.geometry = Some((ModelKind::Fundamental, 3.0));
        let two = draw(&other);
        assert_eq!(one.dimensions(), two.dimensions());
        let differing_rows: Vec<u32> = (0..one.height())
            .filter(|&y| (0..one.width()).any(|x| one.get_pixel(x, y) != two.get_pixel(x, y)))
            .collect();
        assert!(!differing_rows.is_empty() && differing_rows.iter().all(|&y| y >= 40));
    }

    #[test]
    fn long_lines_wrap_and_the_legend_moves_below() {
        assert_eq!(
            wrap("aa bb cc", font::text_width("aa bb", 1), 1),
            vec!["aa bb", "cc"]
        );
        assert_eq!(wrap("toolongword x", 6, 1), vec!["toolongword", "x"]);
        // A narrow pair: every line fits the width, the legend has a row of its own.
        let a = RgbImage::from_pixel(150, 40, GREY);
        let p = render(
            &a,
            &a,
            &[[5.0, 5.0, 6.0, 6.0]],
            Some(&[false]),
            &VizOptions::all(),
            &settings(),
        );
        assert!(p.caption.len() > 3, "{:?}", p.caption);
        assert!(p
            .caption
            .iter()
            .all(|l| font::text_width(l, 1) <= 300 - 2 * 5));
        // Each line a row of 7-px text, and one more for the legend.
        assert!(p.image.height() >= 40 + (p.caption.len() as u32 + 1) * 7);
    }

    #[test]
    fn the_png_carries_its_caption() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.png");
        RgbImage::from_pixel(30, 20, GREY).save(&a).unwrap();
        let out = dir.path().join("m.png");
        let pts = [[1.0, 1.0, 2.0, 2.0], [3.0, 3.0, 4.0, 4.0]];
        let s = settings();
        write_match_picture(
            &a,
            &a,
            &pts,
            Some(&[true, false]),
            &VizOptions::all(),
            &s,
            &out,
        )
        .unwrap();
        let caption = read_caption(&out).unwrap().unwrap();
        let expected = render(
            &image::open(&a).unwrap().to_rgb8(),
            &image::open(&a).unwrap().to_rgb8(),
            &pts,
            Some(&[true, false]),
            &VizOptions::all(),
            &s,
        );
        assert_eq!(caption, expected.caption);
        assert!(
            caption.join(" ").contains("1 outlier of 2 matches"),
            "{caption:?}"
        );
        assert_eq!(image::open(&out).unwrap().to_rgb8(), expected.image);
        // A PNG without one.
        assert_eq!(read_caption(&a).unwrap(), None);
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
