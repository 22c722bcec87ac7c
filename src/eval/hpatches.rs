//! HPatches patch benchmark (Balntas et al., CVPR 2017): the hpatches-release layout and the three
//! tasks — patch verification, image matching and patch retrieval — computed exactly as the
//! official Python code (`hpatches-benchmark/python/utils/{tasks,metrics,results}.py`) does,
//! for float descriptors under L2 and, beyond the official code, binary ones under Hamming.
//!
//! Layout: one folder per sequence holding `ref.png, e1..e5.png, h1..h5.png, t1..t5.png`, each a
//! column of 65×65 gray patches (patch i in rows 65·i … 65·i+64; patch i of every image shows the
//! same scene point). Patches are resized to 32×32 with bilinear interpolation, as HardNet's
//! HPatches extraction script does (`cv2.resize(patch, (32, 32))`), and scaled to [0, 1].

use crate::describe::Descriptors;
use crate::error::{Error, Result};
use crate::eval::distance::{distance, distance_matrix, Metric};
use crate::eval::metrics::{average_precision, roc_auc};
use crate::progress::Progress;
use ndarray::Array3;
use opencv::core::{Mat, MatTraitConst, MatTraitConstManual, Rect, Size};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Side of a patch in the hpatches-release files (65 px).
pub const HPATCHES_PATCH_SIDE: i32 = 65;

/// The 16 patch files of a sequence, in the order descriptors are stored.
pub const IMAGE_NAMES: [&str; 16] = [
    "ref", "e1", "e2", "e3", "e4", "e5", "h1", "h2", "h3", "h4", "h5", "t1", "t2", "t3", "t4", "t5",
];

/// Geometric-noise levels: easy, hard, tough (`tp` in hpatches-benchmark).
pub const DIFFICULTIES: [char; 3] = ['e', 'h', 't'];

/// Side of the patches given to the describers: descl's one patch size (ARCHITECTURE.md
/// "Conventions", Patch).
pub use crate::patch::PATCH_SIZE;

/// Pool sizes (queries + distractors considered) of the retrieval task (`at_ranks` in tasks.py).
pub const RETRIEVAL_POOL_SIZES: [usize; 7] = [100, 500, 1000, 5000, 10000, 15000, 20000];

/// Positives per retrieval query: the same patch in the five images of one difficulty.
const RETRIEVAL_POSITIVES: usize = 5;

/// Share of positives kept by the imbalanced verification protocol (tasks.py: `0.2 * N_pos`).
const VERIFICATION_IMBALANCE: f64 = 0.2;

/// Index into [`IMAGE_NAMES`] of image `k` (1..=5) of difficulty `t`; `k = 0` is `ref`
/// (`id2t` in tasks.py).
fn image_index(t: char, k: usize) -> Option<usize> {
    let base = match t {
        'e' => 1,
        'h' => 6,
        't' => 11,
        _ => return None,
    };
    match k {
        0 => Some(0),
        1..=5 => Some(base + k - 1),
        _ => None,
    }
}

/// Loads one hpatches-release patch file: N×32×32 f32 in [0, 1].
pub fn load_patch_file(path: &Path) -> Result<Array3<f32>> {
    if !path.is_file() {
        return Err(Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        ));
    }
    // Decoded as every image descl reads (`image::load_gray`, no OpenCV imgcodecs); the 8-bit
    // gray file comes back exactly as `imread(IMREAD_GRAYSCALE)` read it (v / 255 rounds to v).
    let img = crate::image::load_gray(path)?.to_mat_u8()?;
    let (w, h) = (img.cols(), img.rows());
    if w != HPATCHES_PATCH_SIDE || h == 0 || h % HPATCHES_PATCH_SIDE != 0 {
        return Err(Error::format(
            path,
            format!("a HPatches patch file is a column of {HPATCHES_PATCH_SIDE}×{HPATCHES_PATCH_SIDE} patches, got {w}×{h} pixels"),
        ));
    }
    let n = (h / HPATCHES_PATCH_SIDE) as usize;
    let side = PATCH_SIZE as i32;
    let mut out = Array3::<f32>::zeros((n, PATCH_SIZE, PATCH_SIZE));
    for i in 0..n {
        let roi = Mat::roi(
            &img,
            Rect::new(
                0,
                i as i32 * HPATCHES_PATCH_SIDE,
                HPATCHES_PATCH_SIDE,
                HPATCHES_PATCH_SIDE,
            ),
        )?;
        let mut small = Mat::default();
        opencv::imgproc::resize(
            &roi,
            &mut small,
            Size::new(side, side),
            0.0,
            0.0,
            opencv::imgproc::INTER_LINEAR,
        )?;
        let data = small.data_typed::<u8>()?;
        for (o, &v) in out.index_axis_mut(ndarray::Axis(0), i).iter_mut().zip(data) {
            *o = f32::from(v) / 255.0;
        }
    }
    Ok(out)
}

/// One split of `splits.json`: the test sequences (and training ones, where the split has them).
#[derive(Debug, Clone, serde::Deserialize, Serialize)]
pub struct Split {
    pub name: String,
    pub test: Vec<String>,
    #[serde(default)]
    pub train: Vec<String>,
}

/// Reads hpatches-benchmark's `splits.json` (split name → [`Split`]).
pub fn load_splits(path: &Path) -> Result<BTreeMap<String, Split>> {
    let text = super::read_dataset_text(path)?;
    serde_json::from_str(&text)
        .map_err(|e| Error::format(path, format!("not a HPatches splits file: {e}")))
}

/// Descriptors of the 16 images of each sequence (order of [`IMAGE_NAMES`]).
pub type SequenceDescriptors = BTreeMap<String, Vec<Descriptors>>;

/// Loads every listed sequence under `root` and describes its 16 patch files with `describe`.
pub fn describe_sequences(
    root: &Path,
    sequences: &[String],
    describe: &mut dyn FnMut(&Array3<f32>) -> Result<Descriptors>,
    progress: &dyn Progress,
) -> Result<SequenceDescriptors> {
    let mut out = SequenceDescriptors::new();
    progress.set_length((sequences.len() * IMAGE_NAMES.len()) as u64);
    for seq in sequences {
        let mut per_image = Vec::with_capacity(IMAGE_NAMES.len());
        for name in IMAGE_NAMES {
            let path = root.join(seq).join(format!("{name}.png"));
            let patches = load_patch_file(&path)?;
            if let Some(first) = per_image.first() {
                let first: &Descriptors = first;
                if first.len() != patches.shape()[0] {
                    return Err(Error::format(
                        &path,
                        format!(
                            "{} patches, but ref.png of this sequence has {}",
                            patches.shape()[0],
                            first.len()
                        ),
                    ));
                }
            }
            per_image.push(describe(&patches)?);
            progress.inc(1);
        }
        out.insert(seq.clone(), per_image);
    }
    Ok(out)
}

/// A verification pair (`verif_*_split-X.csv` row `s1,t1,idx1,s2,t2,idx2`): image ids `t` are 0
/// for `ref` and k ∈ 1..5 for image k of the difficulty under evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct VerificationPair {
    pub s1: String,
    pub t1: usize,
    pub idx1: usize,
    pub s2: String,
    pub t2: usize,
    pub idx2: usize,
}

fn csv_lines(path: &Path, header: &str) -> Result<Vec<Vec<String>>> {
    let text = super::read_dataset_text(path)?;
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.trim() == header => {}
        other => {
            return Err(Error::format(
                path,
                format!(
                    "expected the header `{header}`, found `{}`",
                    other.unwrap_or("")
                ),
            ))
        }
    }
    let ncols = header.split(',').count();
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<String> = line.split(',').map(|c| c.trim().to_string()).collect();
        if cols.len() != ncols {
            return Err(Error::format(
                path,
                format!("line {}: {} columns, expected {ncols}", i + 2, cols.len()),
            ));
        }
        rows.push(cols);
    }
    Ok(rows)
}

fn parse_index(path: &Path, line: usize, v: &str) -> Result<usize> {
    v.parse()
        .map_err(|_| Error::format(path, format!("line {}: `{v}` is not an index", line + 2)))
}

/// Reads a verification pair file (`verif_pos_split-X.csv`, `verif_neg_intra_…`, `verif_neg_inter_…`).
pub fn read_verification_pairs(path: &Path) -> Result<Vec<VerificationPair>> {
    csv_lines(path, "s1,t1,idx1,s2,t2,idx2")?
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Ok(VerificationPair {
                s1: c[0].clone(),
                t1: parse_index(path, i, &c[1])?,
                idx1: parse_index(path, i, &c[2])?,
                s2: c[3].clone(),
                t2: parse_index(path, i, &c[4])?,
                idx2: parse_index(path, i, &c[5])?,
            })
        })
        .collect()
}

/// Reads a retrieval list (`retr_queries_split-X.csv`, `retr_distractors_split-X.csv`): (sequence, patch index).
pub fn read_patch_list(path: &Path) -> Result<Vec<(String, usize)>> {
    csv_lines(path, "s,idx")?
        .iter()
        .enumerate()
        .map(|(i, c)| Ok((c[0].clone(), parse_index(path, i, &c[1])?)))
        .collect()
}

/// The distance of a descriptor set: L2 for float, Hamming for binary (L2 when empty).
fn metric_of(descr: &SequenceDescriptors) -> Metric {
    descr
        .values()
        .next()
        .and_then(|v| v.first())
        .map(Metric::of)
        .unwrap_or(Metric::L2)
}

fn lookup<'a>(
    descr: &'a SequenceDescriptors,
    seq: &str,
    image: usize,
    idx: usize,
    src: &Path,
) -> Result<&'a Descriptors> {
    let d = descr
        .get(seq)
        .and_then(|v| v.get(image))
        .ok_or_else(|| Error::format(src, format!("sequence `{seq}` was not loaded")))?;
    if idx >= d.len() {
        return Err(Error::format(
            src,
            format!(
                "patch {idx} of `{seq}` does not exist ({} patches)",
                d.len()
            ),
        ));
    }
    Ok(d)
}

/// Distances of verification pairs for difficulty `t`.
fn verification_distances(
    descr: &SequenceDescriptors,
    pairs: &[VerificationPair],
    t: char,
    src: &Path,
) -> Result<Vec<f64>> {
    pairs
        .par_iter()
        .map(|p| {
            let i1 = image_index(t, p.t1)
                .ok_or_else(|| Error::format(src, format!("image id {} not in 0..5", p.t1)))?;
            let i2 = image_index(t, p.t2)
                .ok_or_else(|| Error::format(src, format!("image id {} not in 0..5", p.t2)))?;
            let a = lookup(descr, &p.s1, i1, p.idx1, src)?;
            let b = lookup(descr, &p.s2, i2, p.idx2, src)?;
            distance(a, p.idx1, b, p.idx2)
        })
        .collect()
}

/// Verification scores of one negative kind: ROC AUC on all pairs ("balanced") and AP with only
/// the first 20 % of the positives ("imbalanced"), both in [0, 1].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerificationScores {
    pub balanced_auc: f64,
    pub imbalanced_ap: f64,
}

/// Verification result of one difficulty.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerificationDifficulty {
    pub intra: VerificationScores,
    pub inter: VerificationScores,
}

/// Verification task result; `map` is the published "verification mAP" (hpatches `results.py`:
/// mean of the six imbalanced APs, in %).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerificationResult {
    pub metric: Metric,
    pub per_difficulty: BTreeMap<String, VerificationDifficulty>,
    pub map: f64,
    pub mean_balanced_auc: f64,
}

/// The verification task (`eval_verification`): negatives then positives, labels 0/1, distances
/// as scores; the positive, intra and inter files must have equal lengths, as the official code
/// assumes.
pub fn verification(
    descr: &SequenceDescriptors,
    pos: (&Path, &[VerificationPair]),
    neg_intra: (&Path, &[VerificationPair]),
    neg_inter: (&Path, &[VerificationPair]),
) -> Result<VerificationResult> {
    for neg in [neg_intra, neg_inter] {
        if neg.1.len() != pos.1.len() {
            return Err(Error::format(
                neg.0,
                format!(
                    "{} pairs but the positive file has {}: the protocol pairs them one to one",
                    neg.1.len(),
                    pos.1.len()
                ),
            ));
        }
    }
    let metric = metric_of(descr);
    let n_pos = pos.1.len();
    let n_imbalanced = n_pos + (n_pos as f64 * VERIFICATION_IMBALANCE) as usize;
    let mut labels = vec![false; n_pos];
    labels.extend(std::iter::repeat_n(true, n_pos));
    let mut per_difficulty = BTreeMap::new();
    let (mut sum_ap, mut sum_auc) = (0.0, 0.0);
    for t in DIFFICULTIES {
        let d_pos = verification_distances(descr, pos.1, t, pos.0)?;
        let scores = |neg: (&Path, &[VerificationPair])| -> Result<VerificationScores> {
            let mut d = verification_distances(descr, neg.1, t, neg.0)?;
            d.extend_from_slice(&d_pos);
            Ok(VerificationScores {
                balanced_auc: roc_auc(&d, &labels)?,
                imbalanced_ap: average_precision(
                    &d[..n_imbalanced],
                    &labels[..n_imbalanced],
                    None,
                )?,
            })
        };
        let r = VerificationDifficulty {
            intra: scores(neg_intra)?,
            inter: scores(neg_inter)?,
        };
        sum_ap += r.intra.imbalanced_ap + r.inter.imbalanced_ap;
        sum_auc += r.intra.balanced_auc + r.inter.balanced_auc;
        per_difficulty.insert(t.to_string(), r);
    }
    let cases = (2 * DIFFICULTIES.len()) as f64;
    Ok(VerificationResult {
        metric,
        per_difficulty,
        map: 100.0 * sum_ap / cases,
        mean_balanced_auc: 100.0 * sum_auc / cases,
    })
}

/// Matching task result (`DescriptorMatchingResult`): mAP in % per difficulty for viewpoint (`v_`)
/// and illumination (`i_`) sequences; `map` = mean of the viewpoint and illumination averages.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MatchingResult {
    pub metric: Metric,
    /// difficulty → {"v": mAP, "i": mAP}.
    pub per_difficulty: BTreeMap<String, BTreeMap<String, f64>>,
    pub avg_v: Option<f64>,
    pub avg_i: Option<f64>,
    pub map: f64,
    /// sequence → difficulty → AP of each of the 5 images.
    pub per_sequence: BTreeMap<String, BTreeMap<String, Vec<f64>>>,
}

/// AP of matching `reference` against `target` (`eval_matching`): nearest neighbour of each
/// reference patch (first minimum on ties, `np.argmin`), correct if it is the same index,
/// ranked by its distance, recall over all reference patches.
pub fn matching_ap(reference: &Descriptors, target: &Descriptors) -> Result<f64> {
    let d = distance_matrix(reference, target)?;
    let n = d.nrows();
    let mut nn_dist = Vec::with_capacity(n);
    let mut correct = Vec::with_capacity(n);
    for (i, row) in d.outer_iter().enumerate() {
        let mut best = (0usize, f32::INFINITY);
        for (j, &v) in row.iter().enumerate() {
            if v < best.1 {
                best = (j, v);
            }
        }
        nn_dist.push(f64::from(best.1));
        correct.push(best.0 == i);
    }
    average_precision(&nn_dist, &correct, Some(n))
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The matching task over the `test` sequences of a split.
pub fn matching(
    descr: &SequenceDescriptors,
    test: &[String],
    progress: &dyn Progress,
) -> Result<MatchingResult> {
    progress.set_length(test.len() as u64);
    let mut per_sequence = BTreeMap::new();
    let metric = metric_of(descr);
    for seq in test {
        let images = descr.get(seq).ok_or_else(|| {
            Error::InvalidInput(format!("HPatches sequence `{seq}` was not loaded"))
        })?;
        let mut per_t = BTreeMap::new();
        for t in DIFFICULTIES {
            let aps = (1..=5)
                .into_par_iter()
                .map(|k| {
                    let idx = image_index(t, k).unwrap_or(0);
                    matching_ap(&images[0], &images[idx])
                })
                .collect::<Result<Vec<f64>>>()?;
            per_t.insert(t.to_string(), aps);
        }
        per_sequence.insert(seq.clone(), per_t);
        progress.inc(1);
    }
    let mut per_difficulty = BTreeMap::new();
    let (mut v_means, mut i_means) = (Vec::new(), Vec::new());
    for t in DIFFICULTIES {
        let mut groups = BTreeMap::new();
        for kind in ["v", "i"] {
            let seq_means: Vec<f64> = per_sequence
                .iter()
                .filter(|(name, _)| name.starts_with(&format!("{kind}_")))
                .filter_map(|(_, r)| r.get(&t.to_string()).and_then(|aps| mean(aps)))
                .collect();
            if let Some(m) = mean(&seq_means) {
                groups.insert(kind.to_string(), 100.0 * m);
                if kind == "v" {
                    v_means.push(100.0 * m)
                } else {
                    i_means.push(100.0 * m)
                }
            }
        }
        per_difficulty.insert(t.to_string(), groups);
    }
    let (avg_v, avg_i) = (mean(&v_means), mean(&i_means));
    let map = mean(&[avg_v, avg_i].into_iter().flatten().collect::<Vec<_>>()).unwrap_or(0.0);
    Ok(MatchingResult {
        metric,
        per_difficulty,
        avg_v,
        avg_i,
        map,
        per_sequence,
    })
}

/// Retrieval task result (`DescriptorRetrievalResult`): mAP in % per difficulty and pool size;
/// per difficulty the mean over pool sizes; `map` the mean over difficulties.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetrievalResult {
    pub metric: Metric,
    pub queries: usize,
    pub distractors: usize,
    /// difficulty → pool size → mAP (%).
    pub per_pool: BTreeMap<String, BTreeMap<usize, f64>>,
    pub per_difficulty: BTreeMap<String, f64>,
    pub map: f64,
}

/// AP of one retrieval query when only the positives' ranks matter: the hpatches `pr` AP
/// ((prec(r−1) + prec(r))/2 per positive at rank r, divided by the number of positives).
fn ap_from_ranks(ranks: &mut [usize]) -> f64 {
    const SMALL: f64 = 1e-10;
    ranks.sort_unstable();
    let p = ranks.len() as f64;
    let mut sum = 0.0;
    for (i, &r) in ranks.iter().enumerate() {
        let prec = |tp: f64, k: f64| tp.max(SMALL) / k.max(SMALL);
        sum += (prec(i as f64, (r - 1) as f64) + prec((i + 1) as f64, r as f64)) / 2.0;
    }
    sum / p
}

/// The retrieval task (`eval_retrieval`): each query (a `ref` patch) is ranked against its five
/// positives (the same patch in images 1–5 of a difficulty) followed by the distractors (`ref`
/// patches) that are not from its own sequence, in file order; the pool of size k keeps the
/// first k entries. Ties rank the positives first (the official stable sort on `hstack(pos, distr)`).
///
/// Longer than most functions on purpose: it follows the official `eval_retrieval` step by step
/// (lookups, own-sequence mask, ranking, AP per pool size) so the two read side by side.
pub fn retrieval(
    descr: &SequenceDescriptors,
    queries: (&Path, &[(String, usize)]),
    distractors: (&Path, &[(String, usize)]),
    progress: &dyn Progress,
) -> Result<RetrievalResult> {
    let metric = metric_of(descr);
    for (src, list) in [queries, distractors] {
        for (s, idx) in list {
            lookup(descr, s, 0, *idx, src)?;
        }
    }
    // Distractor sequence ids, to mask a query's own sequence.
    let mut seq_ids: HashMap<&str, usize> = HashMap::new();
    for (s, _) in distractors.1.iter().chain(queries.1) {
        let n = seq_ids.len();
        seq_ids.entry(s.as_str()).or_insert(n);
    }
    let distr_seq: Vec<usize> = distractors
        .1
        .iter()
        .map(|(s, _)| seq_ids[s.as_str()])
        .collect();
    progress.set_length(queries.1.len() as u64);
    // aps[q][t][pool]
    let aps: Vec<Vec<Vec<f64>>> = queries
        .1
        .par_iter()
        .map(|(qs, qi)| {
            let images = &descr[qs];
            let reference = &images[0];
            // Positive distances per difficulty (5 each).
            let mut pos = Vec::with_capacity(DIFFICULTIES.len());
            for t in DIFFICULTIES {
                let mut d = Vec::with_capacity(RETRIEVAL_POSITIVES);
                for k in 1..=RETRIEVAL_POSITIVES {
                    let idx = image_index(t, k).unwrap_or(0);
                    d.push(distance(reference, *qi, &images[idx], *qi)?);
                }
                pos.push(d);
            }
            // Count, per positive, the distractors strictly closer, pool by pool.
            let own = seq_ids[qs.as_str()];
            let mut closer = vec![[0usize; RETRIEVAL_POSITIVES]; DIFFICULTIES.len()];
            let mut result =
                vec![Vec::with_capacity(RETRIEVAL_POOL_SIZES.len()); DIFFICULTIES.len()];
            let mut included = 0usize;
            let mut pools = RETRIEVAL_POOL_SIZES.iter().peekable();
            let record = |closer: &[[usize; RETRIEVAL_POSITIVES]], result: &mut Vec<Vec<f64>>| {
                for (ti, p) in pos.iter().enumerate() {
                    let mut ranks: Vec<usize> = (0..RETRIEVAL_POSITIVES)
                        .map(|j| {
                            let pos_before = (0..RETRIEVAL_POSITIVES)
                                .filter(|&m| p[m] < p[j] || (p[m] == p[j] && m < j))
                                .count();
                            pos_before + closer[ti][j] + 1
                        })
                        .collect();
                    result[ti].push(ap_from_ranks(&mut ranks));
                }
            };
            for (k, (ds, di)) in distractors.1.iter().enumerate() {
                if distr_seq[k] == own {
                    continue;
                }
                while let Some(&&pool) = pools.peek() {
                    if included + RETRIEVAL_POSITIVES >= pool {
                        record(&closer, &mut result);
                        pools.next();
                    } else {
                        break;
                    }
                }
                if pools.peek().is_none() {
                    break;
                }
                let dd = distance(reference, *qi, &descr[ds][0], *di)?;
                for (ti, p) in pos.iter().enumerate() {
                    for j in 0..RETRIEVAL_POSITIVES {
                        if dd < p[j] {
                            closer[ti][j] += 1;
                        }
                    }
                }
                included += 1;
            }
            // Pools larger than the available distractors keep them all (numpy slicing).
            while pools.next().is_some() {
                record(&closer, &mut result);
            }
            progress.inc(1);
            Ok(result)
        })
        .collect::<Result<_>>()?;
    let mut per_pool = BTreeMap::new();
    let mut per_difficulty = BTreeMap::new();
    for (ti, t) in DIFFICULTIES.iter().enumerate() {
        let mut pools = BTreeMap::new();
        for (pi, &pool) in RETRIEVAL_POOL_SIZES.iter().enumerate() {
            let v: Vec<f64> = aps.iter().map(|q| q[ti][pi]).collect();
            pools.insert(pool, 100.0 * mean(&v).unwrap_or(0.0));
        }
        let m = pools.values().sum::<f64>() / pools.len() as f64;
        per_pool.insert(t.to_string(), pools);
        per_difficulty.insert(t.to_string(), m);
    }
    let map = per_difficulty.values().sum::<f64>() / per_difficulty.len() as f64;
    Ok(RetrievalResult {
        metric,
        queries: queries.1.len(),
        distractors: distractors.1.len(),
        per_pool,
        per_difficulty,
        map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::metrics::average_precision;

    #[test]
    fn image_ids_follow_id2t() {
        assert_eq!(image_index('e', 0), Some(0));
        assert_eq!(IMAGE_NAMES[image_index('h', 3).unwrap()], "h3");
        assert_eq!(IMAGE_NAMES[image_index('t', 5).unwrap()], "t5");
        assert_eq!(image_index('x', 1), None);
        assert_eq!(image_index('e', 6), None);
    }

    #[test]
    fn rank_ap_equals_full_ap() {
        // Positives at ranks 1, 3, 4 of 6 entries.
        let d = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6];
        let l = [true, false, true, true, false, false];
        let full = average_precision(&d, &l, None).unwrap();
        let fast = ap_from_ranks(&mut [4, 1, 3]);
        assert!((full - fast).abs() < 1e-12, "{full} {fast}");
    }
}
