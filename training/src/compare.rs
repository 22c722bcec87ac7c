//! Comparing training methods over seeds: per-method mean ± sd of `descl bench` numbers and an
//! exact one-sided Mann-Whitney test against the baseline, as AdaSample reports its comparisons.
//! Small samples (3–5 seeds) make the normal approximation meaningless, so p is the exact
//! permutation probability. The report is read through descl's own [`BenchReport`], so a change
//! of its shape is a compile error here, not a silently missing number.

use anyhow::{bail, Context, Result};
use descl::eval::report::{BenchReport, ALL_SEQUENCES};
use serde::Serialize;
use std::path::Path;

/// Mann-Whitney U of `a` against `b`: the number of pairs (a_i, b_j) with a_i > b_j, ties
/// counting one half.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .flat_map(|&x| b.iter().map(move |&y| (x, y)))
        .map(|(x, y)| {
            if x > y {
                1.0
            } else if x == y {
                0.5
            } else {
                0.0
            }
        })
        .sum()
}

/// Largest pooled sample the exact enumeration accepts (2^20 splits).
pub const MAX_POOLED: usize = 20;

/// Exact one-sided p = P(U ≥ U_observed) when every split of the pooled values into groups of
/// |a| and |b| is equally likely (H0: the method changes nothing); None above [`MAX_POOLED`].
pub fn mann_whitney_p_greater(a: &[f64], b: &[f64]) -> Option<f64> {
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    if pooled.len() > MAX_POOLED {
        return None;
    }
    let observed = mann_whitney_u(a, b);
    let (mut at_least, mut splits) = (0u64, 0u64);
    // Every |a|-subset of the pooled indices as a bit mask.
    for mask in (0u64..1 << pooled.len()).filter(|m| m.count_ones() as usize == a.len()) {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for (i, &v) in pooled.iter().enumerate() {
            if mask >> i & 1 == 1 {
                x.push(v)
            } else {
                y.push(v)
            }
        }
        splits += 1;
        // Tolerance for the half-counted ties.
        if mann_whitney_u(&x, &y) >= observed - 1e-9 {
            at_least += 1;
        }
    }
    Some(at_least as f64 / splits.max(1) as f64)
}

/// The headline numbers of one model in a `descl bench --json` report.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct BenchNumbers {
    /// Dev homography pairs (HPatches + Oxford): MMA at 3 px, %.
    pub mma3: f64,
    /// Homography accuracy at 3 px corner error, %.
    pub homography3: f64,
    /// Strecha relative pose AUC at 10°, %.
    pub pose_auc10: f64,
}

/// Tolerance when looking a threshold up in a report's (threshold, value) list.
const THRESHOLD_TOLERANCE: f64 = 1e-9;

/// The value at `threshold` of a (threshold, value) list.
fn at(list: &[(f64, f64)], threshold: f64) -> Option<f64> {
    list.iter()
        .find(|(t, _)| (t - threshold).abs() < THRESHOLD_TOLERANCE)
        .map(|&(_, v)| v)
}

/// Reads a `descl bench --json` report.
pub fn read_report(path: &Path) -> Result<BenchReport> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a JSON bench report", path.display()))
}

/// Reads `model`'s numbers from a bench report (its combined "all" sequence group).
pub fn bench_numbers(report: &BenchReport, model: &str, path: &Path) -> Result<BenchNumbers> {
    let all = report
        .sequences
        .get(model)
        .and_then(|groups| groups.get(ALL_SEQUENCES))
        .map(|group| &group.summary);
    let missing = |what: &str| {
        format!(
            "{}: no {what} for `{model}` (run `descl bench sequences pose -m {model} ...`)",
            path.display()
        )
    };
    Ok(BenchNumbers {
        mma3: all
            .and_then(|s| at(&s.mma, 3.0))
            .with_context(|| missing("sequences MMA@3"))?,
        homography3: all
            .and_then(|s| at(&s.homography_accuracy, 3.0))
            .with_context(|| missing("homography accuracy"))?,
        pose_auc10: report
            .pose
            .get(model)
            .and_then(|p| at(&p.auc, 10.0))
            .with_context(|| missing("pose AUC@10"))?,
    })
}

/// One method's seeds.
#[derive(Debug, Clone, Serialize)]
pub struct MethodRow {
    pub method: String,
    pub models: Vec<String>,
    pub runs: Vec<BenchNumbers>,
    pub mean: BenchNumbers,
    /// Sample standard deviation (n − 1); zero for one seed.
    pub sd: BenchNumbers,
    /// Against the baseline (the first method) on MMA@3: U, its maximum |a|·|b|, one-sided p.
    pub mann_whitney_mma3: Option<(f64, f64, f64)>,
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// Rows for `groups` = [(method, [model names])]; the first group is the baseline.
pub fn compare(
    report: &BenchReport,
    path: &Path,
    groups: &[(String, Vec<String>)],
) -> Result<Vec<MethodRow>> {
    let mut rows: Vec<MethodRow> = Vec::new();
    for (method, models) in groups {
        if models.is_empty() {
            bail!("method {method}: no models");
        }
        let runs = models
            .iter()
            .map(|m| bench_numbers(report, m, path))
            .collect::<Result<Vec<_>>>()?;
        let pick = |f: fn(&BenchNumbers) -> f64| mean_sd(&runs.iter().map(f).collect::<Vec<_>>());
        let (m1, s1) = pick(|r| r.mma3);
        let (m2, s2) = pick(|r| r.homography3);
        let (m3, s3) = pick(|r| r.pose_auc10);
        let mann_whitney_mma3 = rows.first().and_then(|base| {
            let a: Vec<f64> = runs.iter().map(|r| r.mma3).collect();
            let b: Vec<f64> = base.runs.iter().map(|r| r.mma3).collect();
            let p = mann_whitney_p_greater(&a, &b)?;
            Some((mann_whitney_u(&a, &b), (a.len() * b.len()) as f64, p))
        });
        rows.push(MethodRow {
            method: method.clone(),
            models: models.clone(),
            runs,
            mean: BenchNumbers {
                mma3: m1,
                homography3: m2,
                pose_auc10: m3,
            },
            sd: BenchNumbers {
                mma3: s1,
                homography3: s2,
                pose_auc10: s3,
            },
            mann_whitney_mma3,
        });
    }
    Ok(rows)
}

/// The comparison as a markdown table.
pub fn markdown(rows: &[MethodRow]) -> String {
    let mut s = String::from(
        "| method | seeds | MMA@3 (%) | H acc@3px (%) | pose AUC@10 (%) | vs baseline: U, one-sided p |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let pm = |m: f64, sd: f64| {
            if r.runs.len() > 1 {
                format!("{m:.2} ± {sd:.2}")
            } else {
                format!("{m:.2}")
            }
        };
        let test = r.mann_whitney_mma3.map_or("–".to_string(), |(u, max, p)| {
            format!("U = {u}/{max}, p = {p:.3}")
        });
        s += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.method,
            r.runs.len(),
            pm(r.mean.mma3, r.sd.mma3),
            pm(r.mean.homography3, r.sd.homography3),
            pm(r.mean.pose_auc10, r.sd.pose_auc10),
            test
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u_counts_wins_and_half_ties() {
        assert_eq!(mann_whitney_u(&[3.0, 4.0], &[1.0, 3.0]), 3.5);
        assert_eq!(mann_whitney_u(&[1.0], &[2.0]), 0.0);
    }

    #[test]
    fn exact_p_matches_hand_counted_splits() {
        // 3 vs 3: C(6,3) = 20 splits; complete separation is 1 of them.
        assert!(
            (mann_whitney_p_greater(&[4.0, 5.0, 6.0], &[1.0, 2.0, 3.0]).unwrap() - 0.05).abs()
                < 1e-12
        );
        // U = 8 of 9: the splits with U ≥ 8 are {4,5,6} (U = 9) and {3,5,6} (U = 8): 2/20.
        assert!(
            (mann_whitney_p_greater(&[3.0, 5.0, 6.0], &[1.0, 2.0, 4.0]).unwrap() - 0.10).abs()
                < 1e-12
        );
        // 4 vs 4 complete separation: 1/C(8,4) = 1/70.
        let p = mann_whitney_p_greater(&[5.0, 6.0, 7.0, 8.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!((p - 1.0 / 70.0).abs() < 1e-12);
        // Beyond the enumeration's reach there is no exact p.
        assert_eq!(mann_whitney_p_greater(&[0.0; 11], &[1.0; 10]), None);
        // The reverse direction is the other tail: p = 1.
        assert_eq!(
            mann_whitney_p_greater(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]),
            Some(1.0)
        );
    }

    /// A complete bench report (as `descl bench --json` writes one) with only sequences and pose.
    fn report_json(sequences: serde_json::Value, pose: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "descl_version": "0", "command": "descl bench", "unix_time": 0,
            "machine": {"cpu": "c", "logical_cpus": 1, "os": "o"},
            "settings": {"detector": "dog", "max_keypoints": 2048, "magnification": 6.0,
                "matcher": "m", "homography_ransac": "h", "pose_ransac": "p"},
            "methods": [], "sequences": sequences, "pose": pose, "matching_score": {},
            "hpatches": {}, "phototour": {},
            "timing": {"images": 0, "detect_s": 0.0, "keypoints": 0, "per_method": {}},
            "matcher_speed": null
        })
    }

    #[test]
    fn reads_a_bench_report_and_compares() {
        let seq = |m: f64| {
            serde_json::json!({"all": {"pairs": [], "summary": {
                "pairs": 3, "mean_keypoints": 0.0, "mean_matches": 0.0, "mean_correct_3px": 0.0,
                "mma": [[1.0, m - 10.0], [2.0, m - 5.0], [3.0, m]],
                "homography_accuracy": [[1.0, 10.0], [3.0, 60.0], [5.0, 80.0]]}}})
        };
        let pose = serde_json::json!({"pairs": 1, "maa10": 0.0, "details": [
            {"scene": "s", "i": 0, "j": 1, "matches": 0, "inliers": 0, "error_deg": null}],
            "auc": [[5.0, 90.0], [10.0, 95.0], [20.0, 97.0]]});
        let report: BenchReport = serde_json::from_value(report_json(
            serde_json::json!({"a1": seq(50.0), "a2": seq(52.0), "b1": seq(53.0), "b2": seq(54.0)}),
            serde_json::json!({"a1": pose, "a2": pose, "b1": pose, "b2": pose}),
        ))
        .unwrap();
        // A failed pose (error written as null) reads back as infinite.
        assert_eq!(report.pose["a1"].details[0].error_deg, f64::INFINITY);
        let groups = vec![
            ("base".to_string(), vec!["a1".to_string(), "a2".to_string()]),
            ("new".to_string(), vec!["b1".to_string(), "b2".to_string()]),
        ];
        let rows = compare(&report, Path::new("r.json"), &groups).unwrap();
        assert_eq!(rows[0].mean.mma3, 51.0);
        assert!((rows[0].sd.mma3 - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(rows[1].mean.homography3, 60.0);
        assert_eq!(rows[1].mean.pose_auc10, 95.0);
        // 2 vs 2, complete separation: U = 4 of 4, p = 1/C(4,2).
        let (u, max, p) = rows[1].mann_whitney_mma3.unwrap();
        assert_eq!((u, max), (4.0, 4.0));
        assert!((p - 1.0 / 6.0).abs() < 1e-12);
        assert!(rows[0].mann_whitney_mma3.is_none());
        let missing = vec![("x".to_string(), vec!["nope".to_string()])];
        let err = compare(&report, Path::new("r.json"), &missing).unwrap_err();
        assert!(format!("{err:#}").contains("r.json") && format!("{err:#}").contains("nope"));
    }

    #[test]
    fn the_shipped_comparison_is_reproduced_from_its_report() {
        // docs/bench/methods-2026-11-22.{json,compare.json}, grouped as
        // training/configs/compare/README.md does.
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bench");
        let report = read_report(&docs.join("methods-2026-11-22.json")).unwrap();
        let seeds = |m: &str| {
            let mut v = vec![format!("descl-tfeat-{m}")];
            v.extend((2..=4).map(|s| format!("descl-tfeat-{m}-s{s}")));
            v
        };
        let one = |m: &str| vec![format!("descl-tfeat-{m}")];
        let groups = vec![
            ("hardnet".to_string(), seeds("hardnet")),
            ("sdgm".to_string(), seeds("sdgm")),
            ("cdf".to_string(), one("cdf")),
            ("adasample".to_string(), one("adasample")),
            ("active".to_string(), one("active")),
            ("cdf-binary256".to_string(), one("cdf-binary256")),
        ];
        let rows = compare(&report, Path::new("r.json"), &groups).unwrap();
        // Compared as text: every number to the last digit (parsing the expected file back
        // could be one ulp off, serde_json's default float parser is not exactly rounded).
        let expected =
            std::fs::read_to_string(docs.join("methods-2026-11-22.compare.json")).unwrap();
        assert_eq!(
            serde_json::to_string_pretty(&rows).unwrap(),
            expected.trim_end()
        );
    }
}
