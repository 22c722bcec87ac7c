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
use descl::provenance::FeaturesId;
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

/// The verified pairs of a reference run, as indices into `names`. Every matches file must
/// index the features of this set (the identities it records, `ids` of the inputs): matches of
/// other images or other features under the same names would make the recall meaningless.
fn verified_pairs(
    dir: &Path,
    names: &[String],
    ids: &[FeaturesId],
) -> anyhow::Result<(usize, Vec<(usize, usize)>)> {
    let files = npz_files(dir, true)?;
    anyhow::ensure!(
        !files.is_empty(),
        "{}: no matches files (.npz of `descl match --out-dir`; a matches.h5 is not read here)",
        dir.display()
    );
    let mut verified = Vec::new();
    for f in &files {
        let m = read_matches(f)?;
        let index = |side: &str| {
            find_input(names, side)
                .with_context(|| format!("{}: {side} is not in the set", f.display()))
        };
        let sides = m.meta.side_names();
        let (a, b) = (index(&sides[0])?, index(&sides[1])?);
        for (i, recorded) in [(a, &m.meta.features_a), (b, &m.meta.features_b)] {
            let Some(recorded) = recorded else {
                anyhow::bail!(
                    "{}: records no identity of the features it matched, so it cannot be told to be of this set's features; match the set again (descl match --exhaustive --images …)",
                    f.display()
                );
            };
            anyhow::ensure!(
                *recorded == ids[i],
                "{}: matches other features of {} than this set's ({} keypoints recorded, the set's file has others or other descriptors): the reference run was made from another extraction; match this set's features for it",
                f.display(),
                names[i],
                recorded.keypoints
            );
        }
        if m.model.is_none() {
            continue;
        }
        verified.push((a.min(b), a.max(b)));
    }
    verified.sort_unstable();
    verified.dedup();
    Ok((files.len(), verified))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mode = args.pairs.mode(None)?;
    let set = checked_inputs(&args)?;
    let inputs = &set.inputs;
    let names: Vec<String> = inputs.iter().map(|i| i.name.clone()).collect();
    let loader = FeatureLoader::new(&args.describe);
    let bar = Bar::new(true);
    // Retrieval reads every image's features twice (codebook sample, then aggregation).
    bar.start("features", 2 * inputs.len() as u64);
    // The images without descriptors, which retrieval pairs with none (reported below).
    let without = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let descriptors = |i: usize| {
        let d = loader.load(&inputs[i].path).map(|f| f.descriptors);
        if d.as_ref().is_ok_and(|d| d.is_empty()) {
            without.lock().map(|mut w| w.insert(i)).unwrap_or_default();
        }
        bar.inc(1);
        d
    };
    let started = std::time::Instant::now();
    let pairs = make_pairs(&mode, &names, Some(&descriptors))?;
    let seconds = started.elapsed().as_secs_f64();
    bar.finish();
    // The reference is checked before the pairs file is written: a refused run writes nothing.
    let reference = match &args.reference {
        Some(dir) => {
            // Each input's identity once (a reference run has a file per pair).
            let ids = (0..inputs.len())
                .map(|i| Ok(loader.load(&inputs[i].path)?.id()))
                .collect::<anyhow::Result<Vec<_>>>()?;
            Some(reference_recall(dir, &names, &pairs, &ids)?)
        }
        None => None,
    };
    // The pairs file records nothing of the features it was chosen from: a set that another
    // run replaced while it was read is refused here (descl::io::snapshot).
    set.read.check_unchanged(&args.dir)?;
    write_pairs_file(&args.out, &names, &pairs)?;
    let n = inputs.len();
    let exhaustive = n * n.saturating_sub(1) / 2;
    // All of exhaustive's pairs when it has none (a set of one image).
    let share = match exhaustive {
        0 => 1.0,
        e => pairs.len() as f64 / e as f64,
    };
    let without = images_without_descriptors(without, &names, mode.needs_features());
    let mut summary = serde_json::json!({
        "pairs_file": args.out,
        "images": n,
        "pairs": pairs.len(),
        "share_of_exhaustive": share,
        "images_without_descriptors": without,
        "seconds": seconds,
    });
    eprintln!(
        "{}: {} pairs of {n} images ({:.1}% of exhaustive) in {seconds:.1} s",
        args.out.display(),
        pairs.len(),
        100.0 * share
    );
    if let Some(r) = reference {
        summary["reference"] = r;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}

/// The names of the images without descriptors (indices in `without`), with a warning when
/// the pairs came from them (`retrieval`): those images are in no retrieval pair.
fn images_without_descriptors(
    without: std::sync::Mutex<std::collections::BTreeSet<usize>>,
    names: &[String],
    retrieval: bool,
) -> Vec<&str> {
    let without: Vec<&str> = without
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|i| names[i].as_str())
        .collect();
    if retrieval && !without.is_empty() {
        eprintln!(
            "warning: {} images without descriptors (blank or uniform?) are in no retrieval pair: {}",
            without.len(),
            descl::io::plan::listing(&without)
        );
    }
    without
}

/// The set's inputs, checked before any work: their settings against the flags, their names
/// as a pairs file holds them, and the pairs file's path against the files the set is read
/// from (a features file, the plan, a file of the `--reference` run's folder).
fn checked_inputs(args: &Args) -> anyhow::Result<super::args::InputSet> {
    let set = set_inputs(&args.dir, args.allow_partial)?;
    let plan = args.dir.join(descl::io::plan::EXTRACT_PLAN_FILE);
    let read = set.inputs.iter().map(|i| i.path.clone());
    let reference: Vec<PathBuf> = args
        .reference
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    // An input first (the message names it), then what no output may replace. `--pairs` is
    // one: `pairs --pairs q.txt --out q.txt` rewrote the user's list (hostile round of
    // 564787c, M2).
    descl::io::atomic::check_not_an_input(
        &args.out,
        read.chain([plan, args.dir.clone()])
            .chain(reference)
            .chain(args.pairs.pairs.clone()),
    )?;
    descl::io::atomic::check_writable(&args.out, descl::io::atomic::OutputKind::PairsList)?;
    args.describe.refuse_for_features(set.made.as_ref())?;
    let names: Vec<String> = set.inputs.iter().map(|i| i.name.clone()).collect();
    // The file must read back as the same names in descl and hloc.
    check_pairs_file_names(&names)?;
    check_replaces_a_pairs_list_of(&args.out, &names)?;
    Ok(set)
}

/// Refuses an existing `out` that is not a pairs list of this set's images (every line two of
/// `names`, as `--pairs` reads it): a file of two words a line (a to-do list, key and value,
/// another set's pairs) was replaced, exit 0 (hostile round of 3fe5bfb, F4). An empty file
/// may be replaced.
fn check_replaces_a_pairs_list_of(out: &Path, names: &[String]) -> anyhow::Result<()> {
    if !std::fs::metadata(out).is_ok_and(|m| m.is_file() && m.len() > 0) {
        return Ok(());
    }
    let mode = descl::matching::pairs::PairMode::File(out.to_path_buf());
    if let Err(why) = make_pairs(&mode, names, None) {
        anyhow::bail!(
            "{}: an existing file that is not a pairs list of this set's images ({why}); descl pairs replaces only its own pairs lists, so choose another --out (or remove the file)",
            out.display()
        );
    }
    Ok(())
}

/// The recall of `pairs` against the verified pairs of the reference run in `dir`, printed
/// and as the summary's `reference`.
fn reference_recall(
    dir: &Path,
    names: &[String],
    pairs: &[(usize, usize)],
    ids: &[FeaturesId],
) -> anyhow::Result<serde_json::Value> {
    let (matched, verified) = verified_pairs(dir, names, ids)?;
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
