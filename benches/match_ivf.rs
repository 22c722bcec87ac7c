//! The inverted-file matcher (`--matcher ivf`) against the exact one on real features, in the
//! same run: for every pair of a folder of features files (`descl extract --preset sfm`, i.e.
//! `descl sfm`'s 8192-budget features), the exact matcher's and the IVF matcher's mutual + ratio
//! matches at several probe counts. Reports per probe count the time ratio (IVF ÷ exact, summed
//! over the pairs, each timed on the same thread pool) and the agreement: the share of the exact
//! matches the IVF search keeps, and its matches the exact search does not make.
//!
//! `DESCL_IVF_FEATURES=DIR cargo bench -p descl --features full --bench match_ivf`
//! (`DESCL_IVF_PAIRS` caps the pairs, default 28; `DESCL_IVF_ROWS` sets the descriptors per cell). One JSON line on stdout.

use descl::describe::Descriptors;
use descl::io::features::read_features;
use descl::matching::{brute, filters, ivf, MatchConfig};
use std::collections::HashSet;
use std::time::Instant;

const PROBES: [usize; 5] = [2, 4, 8, 16, 32];
const DEFAULT_PAIRS: usize = 28;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::var("DESCL_IVF_FEATURES")
        .map_err(|_| "set DESCL_IVF_FEATURES to a folder of features files")?;
    let max_pairs: usize = std::env::var("DESCL_IVF_PAIRS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_PAIRS);
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "npz"))
        .collect();
    files.sort();
    let feats: Vec<_> = files
        .iter()
        .map(|p| read_features(p))
        .collect::<Result<_, _>>()?;
    let rows_per_list: usize = std::env::var("DESCL_IVF_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ivf::IVF_ROWS_PER_LIST);
    let cfg = MatchConfig::default();
    let mut exact_s = 0.0;
    let mut ivf_s = vec![0.0; PROBES.len()];
    let mut exact_n = 0usize;
    let mut kept = vec![0usize; PROBES.len()];
    let mut extra = vec![0usize; PROBES.len()];
    let mut pairs = 0;
    let mut rows = 0usize;
    'outer: for i in 0..feats.len() {
        for j in i + 1..feats.len() {
            if pairs == max_pairs {
                break 'outer;
            }
            let (Descriptors::Float(a), Descriptors::Float(b)) =
                (&feats[i].descriptors, &feats[j].descriptors)
            else {
                return Err("float descriptors needed".into());
            };
            rows += a.nrows() + b.nrows();
            let t = Instant::now();
            let exact = filters::apply(&brute::nearest_two(a.view(), b.view()), &cfg);
            exact_s += t.elapsed().as_secs_f64();
            let set: HashSet<_> = exact.pairs.iter().copied().collect();
            exact_n += exact.len();
            for (k, &probes) in PROBES.iter().enumerate() {
                let c = ivf::IvfConfig {
                    probes,
                    rows_per_list,
                };
                let t = Instant::now();
                let m = filters::apply(&ivf::nearest_two(a.view(), b.view(), &c), &cfg);
                ivf_s[k] += t.elapsed().as_secs_f64();
                let k_in = m.pairs.iter().filter(|p| set.contains(*p)).count();
                kept[k] += k_in;
                extra[k] += m.len() - k_in;
            }
            pairs += 1;
        }
    }
    let per_probe: Vec<_> = PROBES
        .iter()
        .enumerate()
        .map(|(k, p)| {
            serde_json::json!({
                "probes": p,
                "seconds": ivf_s[k],
                "time_vs_exact": ivf_s[k] / exact_s,
                "exact_matches_kept": kept[k] as f64 / exact_n as f64,
                "matches_not_exact": extra[k] as f64 / exact_n as f64,
            })
        })
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "features": dir,
            "pairs": pairs,
            "rows_per_list": rows_per_list,
            "mean_descriptors_per_image": rows as f64 / (2 * pairs.max(1)) as f64,
            "threads": rayon::current_num_threads(),
            "exact_seconds": exact_s,
            "exact_matches": exact_n,
            "ivf": per_probe,
        })
    );
    Ok(())
}
