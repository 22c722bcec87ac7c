//! Hostile histories of a folder (issue 44): an extraction killed before its plan, two sets of
//! the same names, hloc files rewritten under their matches, a model change into a
//! `features.h5`, an OpenCV error, a killed run's temporaries. Every consumer refuses (naming
//! the file and the problem) or redoes; none gives a silent wrong result with exit status 0.

mod common;

use common::{descl, run, small_images};
use std::path::{Path, PathBuf};

const NAMES: [&str; 3] = ["0000.png", "0001.png", "0002.png"];
/// SIFT needs no network: the fastest describer.
const SIFT: [&str; 2] = ["-m", "sift"];

/// `descl extract IMGS --out OUT -m sift ARGS...`: (success, stderr).
fn extract(imgs: &Path, out: &Path, args: &[&str]) -> (bool, String) {
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(imgs)
        .arg("--out")
        .arg(out)
        .args(SIFT)
        .args(args));
    (ok, err)
}

/// `descl match --images INPUT --exhaustive --out-dir OUT ARGS...`: (success, stderr).
fn match_set(input: &Path, out: &Path, args: &[&str]) -> (bool, String) {
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(input)
        .arg("--out-dir")
        .arg(out)
        .args(args));
    (ok, err)
}

/// `descl sfm merge --features FEATS --matches M --database DB`: (success, stderr).
fn merge(feats: &Path, m: &Path, db: &Path) -> (bool, String) {
    let (ok, _, err) = run(descl()
        .args(["sfm", "merge", "--features"])
        .arg(feats)
        .arg("--matches")
        .arg(m)
        .arg("--database")
        .arg(db));
    (ok, err)
}

/// `descl extract` of `n` images of `imgs` into `out`, killed (SIGKILL) as soon as its first
/// features file is there: true when it was killed before it finished.
fn killed_extract(imgs: &Path, out: &Path, n: usize) -> bool {
    let mut child = descl()
        .arg("extract")
        .arg(imgs)
        .arg("--out")
        .arg(out)
        .args(SIFT)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let npz = || {
        common::files_in(out)
            .iter()
            .filter(|f| f.ends_with(".npz"))
            .count()
    };
    while npz() == 0 && child.try_wait().unwrap().is_none() {
        assert!(started.elapsed().as_secs() < 120, "no features written");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let _ = child.kill();
    child.wait().unwrap();
    npz() < n
}

/// Case 1: an extraction killed before it finished leaves its plan, so that `descl match`
/// refuses the set for the images it did not reach; a folder without a plan is matched only
/// with settings derived from its files' provenance, and says so.
#[test]
fn an_extraction_killed_before_it_finished_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("{i:04}.png")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let imgs = small_images(dir.path(), &names);
    let feats = dir.path().join("feats");
    if killed_extract(&imgs, &feats, names.len()) {
        let (ok, _, err) = run(descl()
            .args(["match", "--sequential", "1", "--images"])
            .arg(&feats)
            .arg("--out-dir")
            .arg(dir.path().join("m")));
        assert!(!ok, "the features of a killed extraction matched");
        assert!(err.contains("did not finish"), "{err}");
    } else {
        eprintln!(
            "an_extraction_killed_before_it_finished_is_refused: the run ended before the kill"
        );
    }
    let (ok, err) = extract(&imgs, &feats, &["--resume"]);
    assert!(ok, "{err}");
    std::fs::remove_file(feats.join(descl::io::plan::EXTRACT_PLAN_FILE)).unwrap();
    let (ok, _, err) = run(descl()
        .args(["match", "--sequential", "1", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(dir.path().join("m2")));
    assert!(ok, "{err}");
    assert!(
        err.contains("no extract plan") && err.contains("derived"),
        "{err}"
    );
}

/// Cases 1 and 7: a `features.h5` is held to the extract plan beside it, as a folder is:
/// features the plan does not list (another run's) are refused; without a plan, the settings
/// are derived from the features' provenance, and the run says so.
#[cfg(feature = "h5")]
#[test]
fn features_h5_is_held_to_its_extract_plan() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let out = dir.path().join("h5");
    let (ok, err) = extract(&imgs.join(NAMES[0]), &out, &["--format", "h5"]);
    assert!(ok, "{err}");
    let (ok, err) = extract(&imgs.join(NAMES[1]), &out, &["--format", "h5"]);
    assert!(ok, "{err}");
    let h5 = out.join("features.h5");
    let (ok, err) = match_set(&h5, &dir.path().join("m"), &["--format", "h5"]);
    assert!(!ok, "features of two runs matched as one set");
    assert!(
        err.contains("0000.png") && err.contains("does not list"),
        "{err}"
    );
    std::fs::remove_file(out.join(descl::io::plan::EXTRACT_PLAN_FILE)).unwrap();
    let (ok, err) = match_set(&h5, &dir.path().join("m"), &["--format", "h5"]);
    assert!(
        ok && err.contains("no extract plan") && err.contains("derived"),
        "{err}"
    );
}

/// Case 3: two folders of the same file names, extracted as two shards of one folder: the
/// plan records each image's content, and features of the other set's image are refused.
#[test]
fn two_sets_of_the_same_names_are_told_apart_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let a = small_images(&dir.path().join("a"), &NAMES);
    // Other content under the same names (each image's size follows its position).
    let b = small_images(
        &dir.path().join("b"),
        &["x.png", NAMES[0], NAMES[1], NAMES[2]],
    );
    std::fs::remove_file(b.join("x.png")).unwrap();
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&a, &feats, &["--shard", "0/2"]);
    assert!(ok, "{err}");
    // Issue 55: the shard of other images is refused before it replaces the plan; written
    // anyway (the plan removed), the match and the merge refuse the two sets.
    let (ok, err) = extract(&b, &feats, &["--shard", "1/2"]);
    assert!(!ok && err.contains("image_sha256"), "{err}");
    std::fs::remove_file(feats.join(descl::io::plan::EXTRACT_PLAN_FILE)).unwrap();
    let (ok, err) = extract(&b, &feats, &["--shard", "1/2"]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &dir.path().join("m"), &[]);
    assert!(!ok, "two sets' features matched as one");
    assert!(err.contains("another set's image"), "{err}");
    let (ok, err) = merge(&feats, &dir.path().join("empty"), &dir.path().join("x.db"));
    assert!(!ok, "two sets' features merged");
    assert!(err.contains("another set's image"), "{err}");
}

/// Names with a count.
type Counts = Vec<(String, usize)>;

/// The keypoint count of each image of a `features.h5`, and each pair group of a
/// `matches.h5` with the length of its `matches0`.
#[cfg(feature = "h5")]
fn h5_contents(dir: &Path) -> (Counts, Counts) {
    let features = dir.join("features.h5");
    let names = descl::io::hloc::list_features(&features).unwrap();
    let kp = names
        .iter()
        .map(|n| {
            let f = descl::io::hloc::read_features(&features, n).unwrap();
            (n.clone(), f.frames.len())
        })
        .collect();
    let m = common::h5_open(&dir.join("matches.h5"));
    let mut pairs = Vec::new();
    for a in m.member_names().unwrap() {
        let g = m.group(&a).unwrap();
        for b in g.member_names().unwrap() {
            let n = g.dataset(&format!("{b}/matches0")).unwrap().size();
            pairs.push((format!("{a}/{b}"), n));
        }
    }
    (kp, pairs)
}

/// Case 2: a rerun with other features into the same `matches.h5` leaves no pair group of the
/// earlier run over features it replaced.
#[cfg(feature = "h5")]
#[test]
fn matches_h5_keeps_no_pairs_over_replaced_features() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let (ha, hb) = (dir.path().join("ha"), dir.path().join("hb"));
    for (out, k) in [(&ha, "60"), (&hb, "40")] {
        let (ok, err) = extract(&imgs, out, &["--format", "h5", "--max-keypoints", k]);
        assert!(ok, "{err}");
    }
    let m = dir.path().join("m");
    let (ok, err) = match_set(&ha.join("features.h5"), &m, &["--format", "h5"]);
    assert!(ok, "{err}");
    let pairs = dir.path().join("pairs.txt");
    std::fs::write(&pairs, format!("{} {}\n", NAMES[0], NAMES[1])).unwrap();
    let (ok, _, err) = run(descl()
        .args(["match", "--format", "h5", "--pairs"])
        .arg(&pairs)
        .arg("--images")
        .arg(hb.join("features.h5"))
        .arg("--out-dir")
        .arg(&m));
    assert!(ok, "{err}");
    let (kp, pairs) = h5_contents(&m);
    let count = |name: &str| kp.iter().find(|(n, _)| n == name).map(|(_, k)| *k);
    for (key, len) in &pairs {
        let a = key.split('/').next().unwrap();
        assert_eq!(Some(*len), count(a), "{key} indexes other features: {kp:?}");
    }
    assert!(!pairs.is_empty());
}

/// Case 8: `--format h5 --resume` with another model starts the file again when the run
/// replaces all of it, and is refused before any work when it would not.
#[cfg(feature = "h5")]
#[test]
fn an_h5_extract_of_another_model_redoes_or_refuses_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let out = dir.path().join("h5");
    let (ok, err) = extract(&imgs, &out, &["--format", "h5"]);
    assert!(ok, "{err}");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&out)
        .args(["--format", "h5", "--resume", "-m", "rootsift"]));
    assert!(ok, "{err}");
    let features = out.join("features.h5");
    for name in NAMES {
        let f = descl::io::hloc::read_features(&features, name).unwrap();
        assert_eq!(f.meta.model, "rootsift");
    }
    // One image of the other model's run: the other two would stay.
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(imgs.join(NAMES[0]))
        .arg("--out")
        .arg(&out)
        .args(["--format", "h5", "-m", "sift"]));
    assert!(!ok, "two models in one features.h5");
    assert!(
        err.contains("does not replace") && !err.contains("keypoints →"),
        "{err}"
    );
}

/// Case 9: OpenCV's out-of-memory error (here under a limit on the address space) names the
/// image it was working on.
#[test]
fn an_opencv_error_names_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let big: PathBuf = dir.path().join("big.png");
    common::gray_image(6000, 6000, false).save(&big).unwrap();
    let exe = env!("CARGO_BIN_EXE_descl");
    let (ok, _, err) = run(std::process::Command::new("sh").arg("-c").arg(format!(
        "ulimit -v 3000000; exec '{exe}' extract '{}' --out '{}' -m sift --max-image-size 0",
        big.display(),
        dir.path().join("out").display()
    )));
    assert!(!ok);
    if !err.contains("Insufficient memory") {
        eprintln!("an_opencv_error_names_the_image: skipped, no OpenCV allocation failure: {err}");
        return;
    }
    let line = err.lines().find(|l| l.contains("OpenCV")).unwrap();
    assert!(line.contains("big.png"), "{err}");
}

/// `descl sfm --single-camera --geometry essential` over images whose EXIF focal lengths
/// differ: the one camera holds the first image's, so a pair verified with another image's
/// EXIF would be CALIBRATED beside a camera that does not hold its intrinsics (exit 0 before).
/// Refused, naming the image and both intrinsics; nothing is written.
#[test]
fn single_camera_over_two_exif_focal_lengths_is_refused() {
    let Some(root) = common::data_root_or_skip("single_camera_over_two_exif_focal_lengths") else {
        return;
    };
    let src = root.join("strecha/fountain-P11/images");
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    std::fs::create_dir(&imgs).unwrap();
    for (name, f35) in [("0000.jpg", 35), ("0001.jpg", 50)] {
        let jpeg = std::fs::read(src.join(name)).unwrap();
        std::fs::write(imgs.join(name), common::with_exif_focal(&jpeg, f35)).unwrap();
    }
    let db = dir.path().join("db.db");
    let sfm = |extra: &[&str]| {
        run(descl()
            .arg("sfm")
            .arg(&imgs)
            .arg("--database")
            .arg(&db)
            .args(SIFT)
            .args(["--max-keypoints", "500", "--max-image-size", "640"])
            .args(["--geometry", "essential"])
            .args(extra))
    };
    let (ok, _, err) = sfm(&["--single-camera"]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("0001.jpg") && err.contains("but its camera holds"),
        "{err}"
    );
    assert!(!db.exists(), "nothing is written");
    // One camera per image holds each image's own: the pair is verified with E and stored
    // as COLMAP labels such a pair (CALIBRATED, or planar-or-panoramic when one homography
    // explains its inliers, as on this facade), never as F's UNCALIBRATED.
    let (ok, _, err) = sfm(&[]);
    assert!(ok, "{err}");
    use descl::io::colmap::TwoViewConfig;
    let config = common::two_view_column(&db, "config");
    assert!(
        config == [TwoViewConfig::Calibrated as i64]
            || config == [TwoViewConfig::PlanarOrPanoramic as i64],
        "{config:?} {err}"
    );
}

/// The name a killed run's temporary of `target` (a file name) has: `.descl-tmp-`, the target's
/// name, `-` and random characters (`descl::io::atomic`).
fn killed_temporary(target: &str) -> String {
    format!("{}{target}-k1ll3d", descl::io::atomic::TMP_PREFIX)
}

/// Writes `names` under `dir` (a killed run's half-written files: a few bytes).
fn plant(dir: &Path, names: &[String]) {
    for n in names {
        std::fs::write(dir.join(n), b"half").unwrap();
    }
}

/// Hidden files of every folder under `dir`, relative to it, sorted.
fn hidden_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            out.extend(
                hidden_files(&e.path())
                    .into_iter()
                    .map(|f| format!("{name}/{f}")),
            );
        } else if name.starts_with('.') {
            out.push(name);
        }
    }
    out.sort();
    out
}

/// Issue 44: the temporaries that a killed `descl extract --out DIR` / `descl match --out-dir
/// DIR` left (features files in the image tree's folders, pair files, the run plan) are removed
/// by the next run into the folder, once no other run is writing there; those of other outputs
/// (a COLMAP database's) and other files are left alone, and the outputs are those of a run
/// into a clean folder.
#[test]
fn a_killed_runs_temporaries_in_an_npz_folder_are_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    std::fs::create_dir(imgs.join("sub")).unwrap();
    std::fs::rename(imgs.join(NAMES[2]), imgs.join("sub").join(NAMES[2])).unwrap();
    let (feats, fresh) = (dir.path().join("feats"), dir.path().join("fresh"));
    std::fs::create_dir_all(feats.join("sub")).unwrap();
    let killed = [
        killed_temporary("0000.npz"),
        format!("sub/{}", killed_temporary("0002.npz")),
        killed_temporary(descl::io::plan::EXTRACT_PLAN_FILE),
    ];
    let foreign = [
        killed_temporary("scene.db"),
        ".descl-tmp-other".to_string(),
        "keep.tmp".to_string(),
    ];
    plant(&feats, &killed);
    plant(&feats, &foreign);
    // Another run writing into the folder (holding its lock shared): nothing is removed.
    let lock = std::fs::File::create(feats.join(descl::io::atomic::FOLDER_LOCK_FILE)).unwrap();
    lock.lock_shared().unwrap();
    let (ok, err) = extract(&imgs.join(NAMES[0]), &feats, &[]);
    assert!(ok, "{err}");
    for f in killed.iter().chain(&foreign) {
        assert!(
            feats.join(f).exists(),
            "{f} removed while another run wrote"
        );
    }
    drop(lock);
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let (ok, err) = extract(&imgs, &fresh, &[]);
    assert!(ok, "{err}");
    // The lock file went with the last run to leave.
    let mut expected: Vec<String> = foreign
        .iter()
        .filter(|f| f.starts_with('.'))
        .cloned()
        .collect();
    expected.sort();
    assert_eq!(hidden_files(&feats), expected);
    assert_eq!(hidden_files(&fresh), Vec::<String>::new());
    let mut fresh_files = common::files_in(&fresh);
    fresh_files.extend(foreign.iter().cloned());
    fresh_files.sort();
    assert_eq!(common::files_in(&feats), fresh_files);
    for stem in ["0000.npz", "0001.npz", "sub/0002.npz"] {
        let (a, b) = (
            descl::io::features::read_features(&feats.join(stem)).unwrap(),
            descl::io::features::read_features(&fresh.join(stem)).unwrap(),
        );
        assert_eq!(
            (a.frames, a.descriptors),
            (b.frames, b.descriptors),
            "{stem}"
        );
    }

    let (m, m_fresh) = (dir.path().join("m"), dir.path().join("m_fresh"));
    std::fs::create_dir(&m).unwrap();
    let killed = [
        killed_temporary("0000__0001.npz"),
        killed_temporary(descl::io::plan::MATCH_PLAN_FILE),
    ];
    let foreign = [killed_temporary("matches.h5"), "keep.tmp".to_string()];
    plant(&m, &killed);
    plant(&m, &foreign);
    for out in [&m, &m_fresh] {
        let (ok, err) = match_set(&feats, out, &[]);
        assert!(ok, "{err}");
    }
    let mut fresh_files = common::files_in(&m_fresh);
    fresh_files.extend(foreign.iter().cloned());
    fresh_files.sort();
    assert_eq!(common::files_in(&m), fresh_files);
    for f in common::files_in(&m_fresh) {
        let (a, b) = (
            descl::io::matches::read_matches(&m.join(&f)).unwrap(),
            descl::io::matches::read_matches(&m_fresh.join(&f)).unwrap(),
        );
        assert_eq!((a.pairs, a.inliers), (b.pairs, b.inliers), "{f}");
    }
}

/// Issue 44: `--format h5` removes a killed run's temporaries of `features.h5` (under that
/// file's lock) and of the run plan (under the folder's), and leaves other files alone.
#[cfg(feature = "h5")]
#[test]
fn a_killed_runs_temporaries_in_an_h5_folder_are_removed_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let out = dir.path().join("h5");
    std::fs::create_dir(&out).unwrap();
    let killed = [
        killed_temporary("features.h5"),
        killed_temporary(descl::io::plan::EXTRACT_PLAN_FILE),
    ];
    let foreign = [killed_temporary("scene.db"), "keep.tmp".to_string()];
    plant(&out, &killed);
    plant(&out, &foreign);
    let (ok, err) = extract(&imgs, &out, &["--format", "h5"]);
    assert!(ok, "{err}");
    let mut expected = vec!["features.h5".to_string()];
    expected.extend(foreign.iter().cloned());
    expected.sort();
    assert_eq!(common::files_in(&out), expected);
    let features = out.join("features.h5");
    let names = descl::io::hloc::list_features(&features).unwrap();
    assert_eq!(names, NAMES);
    for n in &names {
        let f = descl::io::hloc::read_features(&features, n).unwrap();
        assert!(!f.frames.is_empty(), "{n}");
    }
}

/// An output "folder" that is a file: refused before any work, naming it once and saying what it
/// is (it said "output folder f: f: File exists").
#[test]
fn an_output_folder_that_is_a_file_is_refused_naming_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let file = dir.path().join("f");
    std::fs::write(&file, b"not a folder").unwrap();
    let f = file.display().to_string();
    let (ok, err) = extract(&imgs, &file, &[]);
    assert!(!ok, "{err}");
    assert!(
        err.contains(&format!("{f}: exists and is not a folder")),
        "{err}"
    );
    assert_eq!(err.matches(&f).count(), 1, "{err}");
    for format in ["npz", "h5"] {
        let (ok, err) = extract(&imgs, &file, &["--format", format]);
        assert!(!ok && err.contains("exists and is not a folder"), "{err}");
    }
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &file, &[]);
    assert!(!ok, "{err}");
    assert!(
        err.contains(&format!("{f}: exists and is not a folder")),
        "{err}"
    );
    assert_eq!(err.matches(&f).count(), 1, "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"not a folder");
}

/// An image replaced after its features were extracted and matched: a `descl match` into the
/// folder where its pairs are already done refused nothing ("3 already done", exit 0) while a
/// fresh match failed those pairs (the state machine's seed 5112). Now every consumer of the
/// set refuses before any work, naming the image, the features file and both hashes; features
/// whose image is not there at all still match (features travel without their images).
#[test]
fn a_replaced_image_is_refused_even_when_its_pairs_are_done() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let (feats, m) = (dir.path().join("feats"), dir.path().join("m"));
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &m, &[]);
    assert!(ok, "{err}");
    let before = std::fs::read_dir(&m).unwrap().count();
    // 0001.png replaced by another picture of the same size.
    let replaced = imgs.join(NAMES[1]);
    common::gray_image(176, 120, true).save(&replaced).unwrap();
    let (ok, err) = match_set(&feats, &m, &[]);
    assert!(!ok, "a match over a replaced image succeeded: {err}");
    assert!(
        err.contains(&replaced.display().to_string())
            && err.contains("0001.npz")
            && err.contains("is not the image"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&m).unwrap().count(), before);
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .args(["--retrieval", "1", "--out"])
        .arg(dir.path().join("pairs.txt")));
    assert!(!ok && err.contains("is not the image"), "{err}");
    // The image gone: nothing to check against, the features alone are matched.
    std::fs::remove_file(&replaced).unwrap();
    let (ok, err) = match_set(&feats, &dir.path().join("m2"), &[]);
    assert!(ok, "{err}");
}

/// Small images in `dir/images`, extracted into `dir/feats` and matched (all pairs, `args`)
/// into `dir/m`: (images, features, matches).
fn extracted_and_matched(dir: &Path, args: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
    let imgs = small_images(dir, &NAMES);
    let (feats, m) = (dir.join("feats"), dir.join("m"));
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &m, args);
    assert!(ok, "{err}");
    (imgs, feats, m)
}

/// The hostile review of 2026-11-28, finding 1: `descl pairs` over two files that record one
/// image (a features file copied over another's; two extractions in subfolders) wrote an image
/// paired with itself and repeated pairs, exit 0. Refused, naming both files, as `match` does.
#[test]
fn pairs_refuses_two_files_of_one_image() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let feats = dir.path().join("feats");
    for sub in ["a", "b"] {
        let (ok, err) = extract(&imgs, &feats.join(sub), &[]);
        assert!(ok, "{err}");
    }
    let out = dir.path().join("pairs.txt");
    let pairs = |input: &Path, extra: &[&str]| {
        run(descl()
            .arg("pairs")
            .arg(input)
            .args(["--exhaustive", "--out"])
            .arg(&out)
            .args(extra))
    };
    let (ok, _, err) = pairs(&feats, &["--allow-partial"]);
    assert!(!ok && err.contains("two inputs named"), "{err}");
    assert!(!out.exists());
    let one = feats.join("a");
    std::fs::copy(one.join("0000.npz"), one.join("0001.npz")).unwrap();
    let (ok, _, err) = pairs(&one, &["--allow-partial"]);
    assert!(
        !ok && err.contains("0000.npz") && err.contains("0001.npz"),
        "{err}"
    );
    assert!(!out.exists());
}

/// Finding 2: `descl pairs --reference` scored the pairs against matches of other images
/// under the same names (exit 0, a meaningless recall). The matches must index this set's
/// features; a refused run writes no pairs file.
#[test]
fn pairs_reference_must_match_this_sets_features() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let (fa, fb) = (dir.path().join("fa"), dir.path().join("fb"));
    let (ok, err) = extract(&imgs, &fa, &[]);
    assert!(ok, "{err}");
    let (ok, err) = extract(&imgs, &fb, &["--max-keypoints", "50"]);
    assert!(ok, "{err}");
    let (ma, mb) = (dir.path().join("ma"), dir.path().join("mb"));
    for (f, m) in [(&fa, &ma), (&fb, &mb)] {
        let (ok, err) = match_set(f, m, &[]);
        assert!(ok, "{err}");
    }
    let out = dir.path().join("pairs.txt");
    let pairs = |reference: &Path| {
        run(descl()
            .arg("pairs")
            .arg(&fa)
            .args(["--sequential", "1", "--out"])
            .arg(&out)
            .arg("--reference")
            .arg(reference))
    };
    let (ok, _, err) = pairs(&mb);
    assert!(
        !ok && err.contains("mb") && err.contains("other features"),
        "{err}"
    );
    assert!(!out.exists(), "a refused run wrote its pairs file");
    let (ok, _, err) = pairs(&ma);
    assert!(ok && out.exists(), "{err}");
}

/// Finding 3: flags of set runs given to a single pair (`--out-dir`, `--format h5`, `--shard`,
/// …) were ignored, exit 0, no output written. Usage errors.
#[test]
fn a_single_pair_refuses_the_flags_of_set_runs() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let (a, b) = (imgs.join(NAMES[0]), imgs.join(NAMES[1]));
    for flags in [
        vec!["--out-dir", "m"],
        vec!["--format", "h5"],
        vec!["--shard", "0/2"],
        vec!["--allow-partial"],
        vec!["--max-resident-images", "5"],
    ] {
        let (ok, _, err) = run(descl()
            .current_dir(dir.path())
            .arg("match")
            .arg(&a)
            .arg(&b)
            .args(SIFT)
            .args(&flags));
        assert!(!ok && err.contains(flags[0]), "{flags:?}: {err}");
    }
    assert!(!dir.path().join("m").exists());
}

/// Finding 4: an output path that is one of the command's inputs destroyed it, exit 0 (a pairs
/// file over a features file or the plan, matches over a features file, --viz over the
/// photo, a database over a features file with --overwrite). Refused; the input unchanged.
#[test]
fn no_output_overwrites_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, feats, m) = extracted_and_matched(dir.path(), &[]);
    let victims = [
        feats.join("0000.npz"),
        feats.join("descl-extract-plan.json"),
        imgs.join(NAMES[1]),
    ];
    let before: Vec<Vec<u8>> = victims.iter().map(|v| std::fs::read(v).unwrap()).collect();
    let refused = |cmd: &mut std::process::Command, what: &str| {
        let (ok, _, err) = run(cmd);
        // A plan's name is refused as such (issue 55), before it is looked for among inputs;
        // a picture descl did not draw is refused to --viz whatever it is.
        let refused = err.contains("is an input")
            || err.contains("name of the run plan")
            || err.contains("did not draw");
        assert!(!ok && refused, "{what}: {err}");
    };
    for v in &victims[..2] {
        refused(
            descl()
                .arg("pairs")
                .arg(&feats)
                .args(["--exhaustive", "--out"])
                .arg(v),
            "pairs --out",
        );
    }
    let (a, b) = (feats.join("0000.npz"), feats.join("0001.npz"));
    refused(
        descl().arg("match").arg(&a).arg(&b).arg("--out").arg(&a),
        "match --out",
    );
    refused(
        descl()
            .arg("match")
            .arg(&a)
            .arg(&b)
            .arg("--viz")
            .arg(&victims[2]),
        "match --viz over the picture",
    );
    refused(
        descl()
            .args(["sfm", "merge", "--overwrite", "--features"])
            .arg(&feats)
            .arg("--matches")
            .arg(&m)
            .arg("--database")
            .arg(&a),
        "merge --database",
    );
    for (v, b) in victims.iter().zip(&before) {
        assert_eq!(&std::fs::read(v).unwrap(), b, "{} changed", v.display());
    }
}

/// Findings 5 and 7: a mistyped input path replaced the set's plan before failing (the good
/// set was then refused as "not listed"); a hidden file given by name was extracted, and then
/// never found by the set commands ("run it again with --resume", which cannot help). Both
/// refused before anything is written.
#[test]
fn extract_checks_named_inputs_before_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let plan = feats.join("descl-extract-plan.json");
    let before = std::fs::read(&plan).unwrap();
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(imgs.join(NAMES[0]))
        .arg(imgs.join("missing.png"))
        .arg("--out")
        .arg(&feats)
        .args(SIFT));
    assert!(!ok && err.contains("missing.png"), "{err}");
    assert_eq!(std::fs::read(&plan).unwrap(), before, "the plan changed");
    let hidden = imgs.join(".h.png");
    std::fs::copy(imgs.join(NAMES[2]), &hidden).unwrap();
    let out = dir.path().join("f2");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(imgs.join(NAMES[0]))
        .arg(&hidden)
        .arg("--out")
        .arg(&out)
        .args(SIFT));
    assert!(
        !ok && err.contains(".h.png") && err.contains("hidden"),
        "{err}"
    );
    assert!(!out.join(".h.npz").exists());
    let (ok, err) = match_set(&feats, &dir.path().join("m"), &[]);
    assert!(ok, "the set still matches: {err}");
}

/// Finding 6: after an image is deleted and the set extracted again into the same
/// `features.h5`, the deleted image's group stays and `descl match` refuses it, with advice
/// ("extract the whole set", "delete the file") that cannot help. The refusal now names the
/// group and how to remove it. Finding 8: a folder holding only a features.h5 is pointed at
/// the file.
#[cfg(feature = "h5")]
#[test]
fn an_h5_group_of_a_removed_image_is_refused_with_a_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let out = dir.path().join("out");
    let (ok, err) = extract(&imgs, &out, &["--format", "h5"]);
    assert!(ok, "{err}");
    std::fs::remove_file(imgs.join(NAMES[2])).unwrap();
    let (ok, err) = extract(&imgs, &out, &["--format", "h5"]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&out.join("features.h5"), &out, &["--format", "h5"]);
    assert!(
        !ok && err.contains("remove the group \"0002.png\"") && err.contains("features.h5"),
        "{err}"
    );
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&out)
        .args(["--exhaustive", "--out"])
        .arg(dir.path().join("p.txt")));
    assert!(!ok && err.contains("give the file"), "{err}");
}

/// Finding 8: a single pair's matches file (`descl match A B --out`) in a set's matches folder
/// was refused by the merge as "m/x.npz:  has no features file in feats" (an empty name). The
/// refusal now says what the file is and what to merge instead.
#[test]
fn a_merge_names_a_single_pairs_matches_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_, feats, m) = extracted_and_matched(dir.path(), &["--planar-check"]);
    let pair = m.join("0000__0001.npz");
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg(feats.join("0001.npz"))
        .arg(feats.join("0000.npz"))
        .arg("--planar-check")
        .arg("--out")
        .arg(&pair));
    assert!(ok, "{err}");
    let (ok, err) = merge(&feats, &m, &dir.path().join("x.db"));
    assert!(
        !ok && err.contains("0000__0001.npz") && err.contains("single pair"),
        "{err}"
    );
}

/// Finding 9: `sfm merge --hloc` took --single-camera and --camera-model and did nothing with
/// them (hloc's files hold no cameras). Usage errors.
#[cfg(feature = "h5")]
#[test]
fn merge_to_hloc_refuses_camera_flags() {
    let dir = tempfile::tempdir().unwrap();
    for flags in [vec!["--single-camera"], vec!["--camera-model", "PINHOLE"]] {
        let (ok, _, err) = run(descl()
            .args(["sfm", "merge", "--features"])
            .arg(dir.path().join("f"))
            .arg("--matches")
            .arg(dir.path().join("m"))
            .arg("--hloc")
            .arg(dir.path().join("h"))
            .args(&flags));
        assert!(
            !ok && err.contains(flags[0]) && err.contains("--hloc"),
            "{flags:?}: {err}"
        );
        assert!(!dir.path().join("h").exists());
    }
}

/// The state machine's seed 48453 (issue 44): an image deleted with its features file after
/// the set was matched, the set extracted again (`--resume`) and matched again (exit 0) left
/// the deleted image's pair files in the matches folder, where a from-scratch run writes none
/// (and `sfm merge` then refused the folder). The match removes them; pair files of the set's
/// own images from another pair list stay.
#[test]
fn a_set_match_removes_the_pairs_of_a_deleted_image() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, feats, m) = extracted_and_matched(dir.path(), &[]);
    let pair_files = || {
        let mut f: Vec<String> = common::files_in(&m)
            .into_iter()
            .filter(|f| f.contains("__") && f.ends_with(".npz"))
            .collect();
        f.sort();
        f
    };
    assert_eq!(
        pair_files(),
        ["0000__0001.npz", "0000__0002.npz", "0001__0002.npz"]
    );
    // Another pair list over the same images keeps the pairs it does not list.
    let (ok, _, err) = run(descl()
        .args(["match", "--sequential", "1", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&m));
    assert!(ok, "{err}");
    assert_eq!(pair_files().len(), 3, "{err}");
    std::fs::remove_file(imgs.join(NAMES[2])).unwrap();
    std::fs::remove_file(feats.join("0002.npz")).unwrap();
    let (ok, err) = extract(&imgs, &feats, &["--resume"]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &m, &[]);
    assert!(ok, "{err}");
    assert_eq!(pair_files(), ["0000__0001.npz"], "{err}");
    let (ok, err) = merge(&feats, &m, &dir.path().join("db.db"));
    assert!(ok, "the merge refused the matches folder: {err}");
}
