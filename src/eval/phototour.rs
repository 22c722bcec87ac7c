//! UBC PhotoTour (Brown, Hua & Winder, PAMI 2011; Liberty, Notre Dame, Yosemite) in its release
//! format, and the FPR at 95 % recall on its 100k test pairs.
//!
//! A dataset folder holds `patchesNNNN.bmp` sheets (1024×1024, 16×16 patches of 64×64, row-major:
//! patch k of a sheet is at row k / 16, column k % 16; sheet s holds patches 256·s …),
//! `info.txt` (one line per patch: `3D-point-id unused`) and `m50_100000_100000_0.txt` (one line
//! per test pair: `patch1 point1 unused patch2 point2 unused`; a pair matches when the point ids
//! are equal). Patches are resized 64 → 32 with area averaging (an exact 2×2 box filter).

use crate::describe::Descriptors;
use crate::error::{Error, Result};
use crate::eval::distance::{distance, Metric};
use crate::eval::metrics::{fpr_at_recall, roc_curve, UBC_RECALL};
use crate::progress::Progress;
use ndarray::Array3;
use opencv::core::{Mat, MatTraitConst, MatTraitConstManual, Rect, Size};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Side of a sheet in pixels.
pub const SHEET_SIDE: i32 = 1024;
/// Side of a patch in a sheet.
pub const UBC_PATCH_SIDE: i32 = 64;
/// Patches per sheet row (and column).
pub const PATCHES_PER_ROW: usize = 16;
/// Patches per sheet.
pub const PATCHES_PER_SHEET: usize = PATCHES_PER_ROW * PATCHES_PER_ROW;
/// The standard test-pair file of each dataset.
pub const TEST_PAIRS_FILE: &str = "m50_100000_100000_0.txt";
/// Side of the patches given to the describers (descl's one patch size, as OpenCV's `int`).
const OUT_SIDE: i32 = crate::patch::PATCH_SIZE as i32;

/// The three datasets, in the order of the standard table.
pub const DATASETS: [&str; 3] = ["liberty", "notredame", "yosemite"];

/// The file name of sheet `s`.
pub fn sheet_name(s: usize) -> String {
    format!("patches{s:04}.bmp")
}

/// Reads `info.txt`: the 3D point id of every patch.
pub fn read_info(path: &Path) -> Result<Vec<u64>> {
    let text = super::read_dataset_text(path)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let first = l.split_whitespace().next().unwrap_or("");
            first.parse().map_err(|_| {
                Error::format(
                    path,
                    format!("line {}: `{l}` does not start with a point id", i + 1),
                )
            })
        })
        .collect()
}

/// One test pair: two patch ids and whether they show the same 3D point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UbcPair {
    pub patch1: usize,
    pub patch2: usize,
    pub matching: bool,
}

/// Reads a `m50_*.txt` pair file (6 columns: patch1 point1 unused patch2 point2 unused).
pub fn read_pairs(path: &Path) -> Result<Vec<UbcPair>> {
    let text = super::read_dataset_text(path)?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let c: Vec<&str> = l.split_whitespace().collect();
        if c.is_empty() {
            continue;
        }
        if c.len() != 6 {
            return Err(Error::format(
                path,
                format!("line {}: {} columns, expected 6", i + 1, c.len()),
            ));
        }
        let num = |s: &str| -> Result<u64> {
            s.parse()
                .map_err(|_| Error::format(path, format!("line {}: `{s}` is not a number", i + 1)))
        };
        out.push(UbcPair {
            patch1: num(c[0])? as usize,
            patch2: num(c[3])? as usize,
            matching: num(c[1])? == num(c[4])?,
        });
    }
    Ok(out)
}

/// Loads the patches `ids` (sorted, unique) of sheet `sheet`, resized to 32×32 in [0, 1].
fn load_sheet_patches(dir: &Path, sheet: usize, ids: &[usize]) -> Result<Array3<f32>> {
    let path = dir.join(sheet_name(sheet));
    if !path.is_file() {
        return Err(Error::io(
            &path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        ));
    }
    // Decoded as every image descl reads (`image::load_gray`, no OpenCV imgcodecs); the sheets'
    // 8-bit gray pixels come back exactly (v / 255 rounds to v in `to_mat_u8`).
    let img = crate::image::load_gray(&path)?.to_mat_u8()?;
    if img.cols() != SHEET_SIDE || img.rows() != SHEET_SIDE {
        return Err(Error::format(
            &path,
            format!(
                "a PhotoTour sheet is {SHEET_SIDE}×{SHEET_SIDE}, got {}×{}",
                img.cols(),
                img.rows()
            ),
        ));
    }
    let s = OUT_SIDE as usize;
    let mut out = Array3::<f32>::zeros((ids.len(), s, s));
    for (o, &id) in ids.iter().enumerate() {
        let k = id % PATCHES_PER_SHEET;
        let (row, col) = ((k / PATCHES_PER_ROW) as i32, (k % PATCHES_PER_ROW) as i32);
        let roi = Mat::roi(
            &img,
            Rect::new(
                col * UBC_PATCH_SIDE,
                row * UBC_PATCH_SIDE,
                UBC_PATCH_SIDE,
                UBC_PATCH_SIDE,
            ),
        )?;
        let mut small = Mat::default();
        opencv::imgproc::resize(
            &roi,
            &mut small,
            Size::new(OUT_SIDE, OUT_SIDE),
            0.0,
            0.0,
            opencv::imgproc::INTER_AREA,
        )?;
        for (d, &v) in out
            .index_axis_mut(ndarray::Axis(0), o)
            .iter_mut()
            .zip(small.data_typed::<u8>()?)
        {
            *d = f32::from(v) / 255.0;
        }
    }
    Ok(out)
}

/// Loads patches by id (any order, repeats allowed): N×32×32 in [0, 1]. Used by tests and tools;
/// the benchmark itself describes sheet by sheet ([`evaluate`]).
pub fn load_patches(dir: &Path, ids: &[usize]) -> Result<Array3<f32>> {
    let s = OUT_SIDE as usize;
    let mut out = Array3::<f32>::zeros((ids.len(), s, s));
    let mut by_sheet: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for (o, &id) in ids.iter().enumerate() {
        by_sheet
            .entry(id / PATCHES_PER_SHEET)
            .or_default()
            .push((o, id));
    }
    for (sheet, items) in by_sheet {
        let sheet_ids: Vec<usize> = items.iter().map(|&(_, id)| id).collect();
        let p = load_sheet_patches(dir, sheet, &sheet_ids)?;
        for (k, &(o, _)) in items.iter().enumerate() {
            out.index_axis_mut(ndarray::Axis(0), o)
                .assign(&p.index_axis(ndarray::Axis(0), k));
        }
    }
    Ok(out)
}

/// Result on one dataset's test pairs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhotoTourResult {
    pub dataset: String,
    pub metric: Metric,
    pub pairs: usize,
    /// False positive rate (%) at 95 % recall.
    pub fpr95: f64,
    /// ROC curve (FPR, TPR), thinned to at most [`ROC_POINTS`] points for plots.
    pub roc: Vec<(f64, f64)>,
}

/// Points kept of the ROC curve in reports.
pub const ROC_POINTS: usize = 200;

/// Describes the patches of the test pairs of dataset folder `dir` sheet by sheet (memory stays
/// at one sheet of patches) and computes the FPR at 95 % recall.
pub fn evaluate(
    dir: &Path,
    pairs_file: &Path,
    describe: &mut dyn FnMut(&Array3<f32>) -> Result<Descriptors>,
    progress: &dyn Progress,
) -> Result<PhotoTourResult> {
    let info = read_info(&dir.join("info.txt"))?;
    let pairs = read_pairs(pairs_file)?;
    if pairs.is_empty() {
        return Err(Error::format(pairs_file, "no pairs"));
    }
    if let Some(p) = pairs
        .iter()
        .find(|p| p.patch1 >= info.len() || p.patch2 >= info.len())
    {
        return Err(Error::format(
            pairs_file,
            format!(
                "patch {} is beyond the {} patches of info.txt",
                p.patch1.max(p.patch2),
                info.len()
            ),
        ));
    }
    let mut needed: Vec<usize> = pairs.iter().flat_map(|p| [p.patch1, p.patch2]).collect();
    needed.sort_unstable();
    needed.dedup();
    let mut by_sheet: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for id in needed {
        by_sheet.entry(id / PATCHES_PER_SHEET).or_default().push(id);
    }
    progress.set_length(by_sheet.len() as u64);
    // patch id → (chunk, row)
    let mut location: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut chunks: Vec<Descriptors> = Vec::new();
    for (sheet, ids) in &by_sheet {
        let patches = load_sheet_patches(dir, *sheet, ids)?;
        let d = describe(&patches)?;
        if d.len() != ids.len() {
            return Err(Error::InvalidInput(format!(
                "{} descriptors for {} patches",
                d.len(),
                ids.len()
            )));
        }
        for (row, &id) in ids.iter().enumerate() {
            location.insert(id, (chunks.len(), row));
        }
        chunks.push(d);
        progress.inc(1);
    }
    let metric = chunks.first().map(Metric::of).unwrap_or(Metric::L2);
    let mut dist = Vec::with_capacity(pairs.len());
    let mut labels = Vec::with_capacity(pairs.len());
    for p in &pairs {
        let (c1, r1) = location[&p.patch1];
        let (c2, r2) = location[&p.patch2];
        dist.push(distance(&chunks[c1], r1, &chunks[c2], r2)?);
        labels.push(p.matching);
    }
    let fpr95 = 100.0 * fpr_at_recall(&dist, &labels, UBC_RECALL)?;
    let full = roc_curve(&dist, &labels)?;
    let step = full.len().div_ceil(ROC_POINTS).max(1);
    let mut roc: Vec<(f64, f64)> = full.iter().step_by(step).copied().collect();
    if let Some(&last) = full.last() {
        if roc.last() != Some(&last) {
            roc.push(last);
        }
    }
    let dataset = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    Ok(PhotoTourResult {
        dataset,
        metric,
        pairs: pairs.len(),
        fpr95,
        roc,
    })
}
