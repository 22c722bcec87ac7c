//! `descl pairs DIR --out pairs.txt`: choose the pairs of a set once (exhaustive, sequential,
//! retrieval from descl's own descriptors, or their union) and write them as hloc's / COLMAP's
//! pairs file, for `descl match --pairs` and `descl sfm --pairs` — on a cluster, every match
//! shard then reads the same list. With `--reference MATCHES_DIR` it also measures pair recall:
//! the share of the pairs that an (exhaustive) run verified which these pairs keep.

use super::args::{set_inputs, DescribeArgs, FeatureLoader, PairArgs};
use super::progress::Bar;
use anyhow::Context;
use descl::image_set::Load;
use descl::io::matches::read_matches;
use descl::io::npz_folder::npz_files;
use descl::matching::pairs::{check_pairs_file_names, find_input, make_pairs, write_pairs_file};
use descl::progress::Progress;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Folder of .npz features files (`descl extract`), or of images (extracted here).
    dir: PathBuf,
    /// Pairs file to write: `nameA nameB` per line, image names.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    #[command(flatten)]
    pairs: PairArgs,
    /// Matches files of a reference run (`descl match --exhaustive --out-dir DIR`): report the
    /// share of its verified pairs (a model with ≥ --min-inliers) that the chosen pairs keep.
    #[arg(long, value_name = "DIR")]
    reference: Option<PathBuf>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// With a folder of features files whose extract plan lists images that have no file yet,
    /// or that has no plan and files that record no provenance: take the files there are
    /// instead of refusing.
    #[arg(long)]
    allow_partial: bool,
    #[command(flatten)]
    describe: DescribeArgs,
}

/// The verified pairs of a reference run, as indices into `names`.
fn verified_pairs(dir: &Path, names: &[String]) -> anyhow::Result<(usize, Vec<(usize, usize)>)> {
    let files = npz_files(dir, true)?;
    anyhow::ensure!(!files.is_empty(), "{}: no matches files", dir.display());
    let mut verified = Vec::new();
    for f in &files {
        let m = read_matches(f)?;
        if m.model.is_none() {
            continue;
        }
        let index = |side: &str| {
            find_input(names, side)
                .with_context(|| format!("{}: {side} is not in the set", f.display()))
        };
        let sides = m.meta.side_names();
        let (a, b) = (index(&sides[0])?, index(&sides[1])?);
        verified.push((a.min(b), a.max(b)));
    }
    verified.sort_unstable();
    verified.dedup();
    Ok((files.len(), verified))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mode = args.pairs.mode(None)?;
    descl::io::atomic::check_writable(&args.out)?;
    let set = set_inputs(&args.dir, args.allow_partial)?;
    args.describe.refuse_for_features(set.made.as_ref())?;
    let inputs = set.inputs;
    let names: Vec<String> = inputs.iter().map(|i| i.name.clone()).collect();
    // Checked before any work: the file must read back as the same names in descl and hloc.
    check_pairs_file_names(&names)?;
    let loader = FeatureLoader::new(&args.describe);
    let bar = Bar::new(true);
    // Retrieval reads every image's features twice (codebook sample, then aggregation).
    bar.start("features", 2 * inputs.len() as u64);
    let descriptors = |i: usize| {
        let d = loader.load(&inputs[i].path).map(|f| f.descriptors);
        bar.inc(1);
        d
    };
    let started = std::time::Instant::now();
    let pairs = make_pairs(&mode, &names, Some(&descriptors))?;
    let seconds = started.elapsed().as_secs_f64();
    bar.finish();
    write_pairs_file(&args.out, &names, &pairs)?;
    let n = inputs.len();
    let all = n * n.saturating_sub(1) / 2;
    let mut summary = serde_json::json!({
        "pairs_file": args.out,
        "images": n,
        "pairs": pairs.len(),
        "share_of_exhaustive": pairs.len() as f64 / all.max(1) as f64,
        "seconds": seconds,
    });
    eprintln!(
        "{}: {} pairs of {n} images ({:.1}% of exhaustive) in {seconds:.1} s",
        args.out.display(),
        pairs.len(),
        100.0 * pairs.len() as f64 / all.max(1) as f64
    );
    if let Some(dir) = &args.reference {
        summary["reference"] = reference_recall(dir, &names, &pairs)?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}

/// The recall of `pairs` against the verified pairs of the reference run in `dir`, printed
/// and as the summary's `reference`.
fn reference_recall(
    dir: &Path,
    names: &[String],
    pairs: &[(usize, usize)],
) -> anyhow::Result<serde_json::Value> {
    let (matched, verified) = verified_pairs(dir, names)?;
    let recall = descl::retrieval::pair_recall(pairs, &verified);
    eprintln!(
        "recall: {:.1}% of the {} pairs verified among {matched} in {}",
        100.0 * recall,
        verified.len(),
        dir.display()
    );
    Ok(serde_json::json!({
        "matched_pairs": matched,
        "verified_pairs": verified.len(),
        "recall": recall,
    }))
}
