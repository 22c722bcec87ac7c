//! PNG plots drawn with the image crate alone (no font or system dependencies): mean matching
//! accuracy against the pixel threshold per method (as in D2-Net / SuperPoint figures), MMA@3
//! against each robustness family's level, and ROC curves for UBC PhotoTour. Text uses the built-in 5×7 bitmap font of [`font`]; lines are
//! [`crate::draw::line`].

use crate::draw::font;

use crate::draw::line;
use crate::error::{Error, Result};
use crate::eval::report::BenchReport;
use image::{Rgb, RgbImage};
use std::path::{Path, PathBuf};

const WIDTH: u32 = 820;
const HEIGHT: u32 = 480;
/// Plot area margins: left, right, top, bottom (px).
const MARGIN: (u32, u32, u32, u32) = (70, 290, 40, 60);
/// Longest legend entry (characters) that fits the right margin.
const LEGEND_CHARS: usize = 20;
/// Text is the 5×7 font scaled by this factor.
const TEXT_SCALE: u32 = 2;
const WHITE: Rgb<u8> = Rgb([255, 255, 255]);
const BLACK: Rgb<u8> = Rgb([0, 0, 0]);
const GRID: Rgb<u8> = Rgb([225, 225, 225]);
/// Line colours (Tableau 10), cycled over methods.
const PALETTE: [[u8; 3]; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

/// A method's name in at most [`LEGEND_CHARS`] characters: without descl's `descl-` prefix, and
/// when still too long its head and tail around `..`, since model names differ at both ends
/// (`hynet-…`, `l2net-…`; `…-s2`, `…-8k`).
fn legend_name(name: &str) -> String {
    let name = name.strip_prefix("descl-").unwrap_or(name);
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= LEGEND_CHARS {
        return name.to_string();
    }
    let keep = LEGEND_CHARS - 2;
    let head: String = chars[..keep / 2].iter().collect();
    let tail: String = chars[chars.len() - (keep - keep / 2)..].iter().collect();
    format!("{head}..{tail}")
}

/// Plot text: the built-in font at [`TEXT_SCALE`].
fn text(img: &mut RgbImage, x: i64, y: i64, s: &str, c: Rgb<u8>) {
    font::text(img, x, y, s, c, TEXT_SCALE);
}

fn text_width(s: &str) -> i64 {
    font::text_width(s, TEXT_SCALE)
}

/// One curve of a plot.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A tick's value as text: no decimals for whole numbers, else one.
pub fn tick_label(v: f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Draws a line plot with axes from `x` = (min, max, tick step) and `y` likewise, the x ticks'
/// text given by `x_tick` ([`tick_label`] for plain numbers, a level's name at its index for
/// the robustness plots).
pub fn line_plot(
    title: &str,
    x_label: &str,
    y_label: &str,
    x: (f64, f64, f64),
    y: (f64, f64, f64),
    series: &[Series],
    x_tick: &dyn Fn(f64) -> String,
) -> RgbImage {
    let mut img = RgbImage::from_pixel(WIDTH, HEIGHT, WHITE);
    let (l, r, t, b) = (
        f64::from(MARGIN.0),
        f64::from(WIDTH - MARGIN.1),
        f64::from(MARGIN.2),
        f64::from(HEIGHT - MARGIN.3),
    );
    let px = |v: f64| l + (v - x.0) / (x.1 - x.0) * (r - l);
    let py = |v: f64| b - (v - y.0) / (y.1 - y.0) * (b - t);
    let ticks = |lo: f64, hi: f64, step: f64| {
        let n = ((hi - lo) / step).round() as i64;
        (0..=n).map(move |i| lo + i as f64 * step)
    };
    for v in ticks(x.0, x.1, x.2) {
        line(&mut img, (px(v), t), (px(v), b), GRID, 1);
        let s = x_tick(v);
        text(
            &mut img,
            px(v) as i64 - text_width(&s) / 2,
            b as i64 + 8,
            &s,
            BLACK,
        );
    }
    for v in ticks(y.0, y.1, y.2) {
        line(&mut img, (l, py(v)), (r, py(v)), GRID, 1);
        let s = tick_label(v);
        text(
            &mut img,
            l as i64 - text_width(&s) - 6,
            py(v) as i64 - 7,
            &s,
            BLACK,
        );
    }
    line(&mut img, (l, b), (r, b), BLACK, 1);
    line(&mut img, (l, t), (l, b), BLACK, 1);
    text(
        &mut img,
        (l + r) as i64 / 2 - text_width(title) / 2,
        10,
        title,
        BLACK,
    );
    text(
        &mut img,
        (l + r) as i64 / 2 - text_width(x_label) / 2,
        HEIGHT as i64 - 24,
        x_label,
        BLACK,
    );
    text(&mut img, 4, t as i64 - 24, y_label, BLACK);
    for (k, s) in series.iter().enumerate() {
        let c = Rgb(PALETTE[k % PALETTE.len()]);
        let clamp = |(u, v): (f64, f64)| (px(u.clamp(x.0, x.1)), py(v.clamp(y.0, y.1)));
        for w in s.points.windows(2) {
            line(&mut img, clamp(w[0]), clamp(w[1]), c, 3);
        }
        let ly = t as i64 + 10 + 24 * k as i64;
        line(
            &mut img,
            (r + 12.0, ly as f64 + 7.0),
            (r + 36.0, ly as f64 + 7.0),
            c,
            3,
        );
        text(&mut img, r as i64 + 42, ly, &legend_name(&s.name), BLACK);
    }
    img
}

fn save(img: &RgbImage, path: &Path) -> Result<()> {
    let mut bytes = Vec::new();
    img.write_to(
        &mut std::io::Cursor::new(&mut bytes),
        image::ImageFormat::Png,
    )
    .map_err(|e| Error::Image {
        path: path.into(),
        reason: e.to_string(),
    })?;
    crate::io::atomic::write_bytes_atomic(path, &bytes)
}

/// Writes the plots a report has data for into `dir`; returns the files written.
pub fn write_plots(report: &BenchReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let groups: Vec<String> = report
        .sequences
        .values()
        .flat_map(|g| g.keys().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for g in groups {
        let series: Vec<Series> = report
            .sequences
            .iter()
            .filter_map(|(m, by)| {
                by.get(&g).map(|x| Series {
                    name: m.clone(),
                    points: x.summary.mma.clone(),
                })
            })
            .collect();
        let n = report
            .sequences
            .values()
            .find_map(|by| by.get(&g))
            .map_or(0, |x| x.summary.pairs);
        let img = line_plot(
            &format!("MMA {g} ({n} pairs)"),
            "threshold (px)",
            "MMA (%)",
            (1.0, 10.0, 1.0),
            (0.0, 100.0, 10.0),
            &series,
            &tick_label,
        );
        let path = dir.join(format!("mma_{g}.png"));
        save(&img, &path)?;
        written.push(path);
    }
    written.extend(robustness_plots(report, dir)?);
    let sets: Vec<String> = report
        .phototour
        .values()
        .flat_map(|v| v.iter().map(|r| r.dataset.clone()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for set in sets {
        let series: Vec<Series> = report
            .phototour
            .iter()
            .filter_map(|(m, rs)| {
                rs.iter().find(|r| r.dataset == set).map(|r| Series {
                    name: m.clone(),
                    points: r.roc.iter().map(|&(f, t)| (100.0 * f, 100.0 * t)).collect(),
                })
            })
            .collect();
        let img = line_plot(
            &format!("ROC UBC {set}"),
            "FPR (%)",
            "TPR (%)",
            (0.0, 100.0, 10.0),
            (0.0, 100.0, 10.0),
            &series,
            &tick_label,
        );
        let path = dir.join(format!("roc_{set}.png"));
        save(&img, &path)?;
        written.push(path);
    }
    Ok(written)
}

/// A y axis (min, max, step 5) holding every value, in whole tens where possible.
fn y_axis(values: impl Iterator<Item = f64>) -> (f64, f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 100.0, 10.0);
    }
    let lo = ((lo / 10.0).floor() * 10.0).clamp(0.0, 90.0);
    let hi = ((hi / 10.0).ceil() * 10.0).clamp(lo + 10.0, 100.0);
    (lo, hi, if hi - lo > 50.0 { 10.0 } else { 5.0 })
}

/// One plot per robustness family (`robustness_FAMILY.png`): MMA@3 per method against the
/// family's levels, mildest first, each level named on the x axis in the font's characters.
fn robustness_plots(report: &BenchReport, dir: &Path) -> Result<Vec<PathBuf>> {
    use crate::eval::robustness::{BLUR, JPEG, ZOOM};
    use crate::eval::sequences::MMA3_INDEX;
    let mut written = Vec::new();
    let Some(first) = report.robustness.values().next() else {
        return Ok(written);
    };
    for (family, f0) in first {
        let names: Vec<String> = f0
            .levels
            .iter()
            .map(|l| match family.as_str() {
                JPEG => format!("Q{}", l.level),
                BLUR => format!("{} PX", l.level),
                ZOOM => format!("{}/{}", l.level, l.rotation_deg.unwrap_or(f64::NAN)),
                _ => format!("{}", l.level),
            })
            .collect();
        let x_label = match family.as_str() {
            JPEG => "JPEG QUALITY",
            BLUR => "GAUSSIAN SIGMA",
            ZOOM => "MAGNIFICATION / ROTATION (DEGREES)",
            _ => "LEVEL",
        };
        let series: Vec<Series> = report
            .robustness
            .iter()
            .filter_map(|(m, fs)| {
                fs.get(family).map(|f| Series {
                    name: m.clone(),
                    points: f
                        .levels
                        .iter()
                        .enumerate()
                        .map(|(i, l)| ((i + 1) as f64, l.summary.mma[MMA3_INDEX].1))
                        .collect(),
                })
            })
            .collect();
        let y = y_axis(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let n = f0.levels.first().map_or(0, |l| l.summary.pairs);
        let img = line_plot(
            &format!("{family} ({n} images)"),
            x_label,
            "MMA@3 (%)",
            (1.0, names.len().max(2) as f64, 1.0),
            y,
            &series,
            &|v| {
                names
                    .get((v.round() as usize).wrapping_sub(1))
                    .cloned()
                    .unwrap_or_default()
            },
        );
        let path = dir.join(format!("robustness_{family}.png"));
        save(&img, &path)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_lines_and_text_where_asked() {
        let s = vec![Series {
            name: "a".into(),
            points: vec![(1.0, 0.0), (10.0, 100.0)],
        }];
        let img = line_plot(
            "T",
            "X",
            "Y",
            (1.0, 10.0, 1.0),
            (0.0, 100.0, 10.0),
            &s,
            &tick_label,
        );
        // The diagonal passes through the middle of the plot area in the first palette colour.
        let (l, r) = (MARGIN.0 as f64, (WIDTH - MARGIN.1) as f64);
        let (t, b) = (MARGIN.2 as f64, (HEIGHT - MARGIN.3) as f64);
        let mid = (
            ((l + r) / 2.0).round() as u32,
            ((t + b) / 2.0).round() as u32,
        );
        assert_eq!(img.get_pixel(mid.0, mid.1), &Rgb(PALETTE[0]));
    }

    #[test]
    fn legend_names_keep_both_ends() {
        assert_eq!(legend_name("rootsift"), "rootsift");
        assert_eq!(legend_name("descl-tfeat-hardnet"), "tfeat-hardnet");
        let a = legend_name("descl-hynet-sdgm-real25all-b1024-s2");
        let b = legend_name("descl-hynet-sdgm-real25all-b1024-s3");
        assert_eq!(a, "hynet-sdg..-b1024-s2");
        assert_ne!(a, b);
        assert!(a.chars().count() <= LEGEND_CHARS);
        assert_eq!(
            legend_name("überlange-modellnamen-mit-umlauten")
                .chars()
                .count(),
            LEGEND_CHARS
        );
    }

    #[test]
    fn y_axis_holds_the_values_in_tens() {
        assert_eq!(y_axis([55.7, 60.2, 84.9].into_iter()), (50.0, 90.0, 5.0));
        assert_eq!(y_axis([37.0, 98.8].into_iter()), (30.0, 100.0, 10.0));
        assert_eq!(y_axis([100.0].into_iter()), (90.0, 100.0, 5.0));
        assert_eq!(y_axis([0.0].into_iter()), (0.0, 10.0, 5.0));
        assert_eq!(y_axis([f64::NAN].into_iter()), (0.0, 100.0, 10.0));
    }
}
