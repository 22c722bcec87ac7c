//! Issue 55's hostile cases: an output that would land on an input photograph or a run plan,
//! images without descriptors in retrieval, an intrinsics file with keys descl cannot honour,
//! a mapping folder of other pictures, hloc's files without an extract plan, two runs of
//! different settings into one folder at once, pair-file names too long for the file system,
//! links counted as images, EXIF focal lengths as COLMAP computes them, NaN features, a match
//! shard of other settings into another run's folder, descriptors of absurd norm, merges that
//! did not say the threshold their pairs were verified at. Each test failed before its fix.

mod common;

use common::{descl, merged, run, small_images};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// [`small_images`] of [`NAMES`] under `dir` and their SIFT features in `dir/feats`.
fn sift_features(dir: &Path) -> (PathBuf, PathBuf) {
    let imgs = small_images(dir, &NAMES);
    let feats = dir.join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    (imgs, feats)
}

/// A uniform picture of `w`×`h` (no keypoint anywhere).
fn blank(path: &Path, w: u32, h: u32) {
    image::GrayImage::from_pixel(w, h, image::Luma([128u8]))
        .save(path)
        .unwrap();
}

/// Critical: `descl sfm IMAGES --database IMAGES/0000.png --overwrite` replaced the photograph
/// with SQLite, and `sfm merge --images IMAGES --database IMAGES/0000.png --overwrite` too; a
/// new database named as an image inside the folder would be read as one of its images.
#[test]
fn no_database_lands_on_an_image_of_the_set() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let victim = imgs.join(NAMES[0]);
    let before = std::fs::read(&victim).unwrap();
    let (feats, m) = (dir.path().join("feats"), dir.path().join("m"));
    std::fs::create_dir_all(&feats).unwrap();
    std::fs::create_dir_all(&m).unwrap();
    let sfm = |db: &Path| {
        run(descl()
            .arg("sfm")
            .arg(&imgs)
            .arg("--database")
            .arg(db)
            .arg("--overwrite")
            .args(SIFT))
    };
    let merge = |db: &Path| {
        run(descl()
            .args(["sfm", "merge", "--overwrite", "--features"])
            .arg(&feats)
            .arg("--matches")
            .arg(&m)
            .arg("--images")
            .arg(&imgs)
            .arg("--database")
            .arg(db))
    };
    for (what, (ok, _, err)) in [("sfm", sfm(&victim)), ("merge", merge(&victim))] {
        assert!(
            !ok && err.contains("is an input") && err.contains(&victim.display().to_string()),
            "{what}: {err}"
        );
    }
    let new_image = imgs.join("db.png");
    for (what, (ok, _, err)) in [("sfm", sfm(&new_image)), ("merge", merge(&new_image))] {
        assert!(
            !ok && err.contains("named as an image inside the image folder"),
            "{what}: {err}"
        );
        assert!(!new_image.exists(), "{what} wrote {}", new_image.display());
    }
    assert_eq!(std::fs::read(&victim).unwrap(), before, "the image changed");
}

/// Low: `descl match A.npz B.npz --out FEATS/descl-extract-plan.json` replaced the folder's
/// plan; `descl pairs --out` into another folder's plan too.
#[test]
fn no_output_replaces_a_run_plan() {
    let dir = tempfile::tempdir().unwrap();
    let (_, feats) = sift_features(dir.path());
    let plan = feats.join(descl::io::plan::EXTRACT_PLAN_FILE);
    let before = std::fs::read(&plan).unwrap();
    let (a, b) = (feats.join("0000.npz"), feats.join("0001.npz"));
    let (ok, _, err) = run(descl().arg("match").arg(&a).arg(&b).arg("--out").arg(&plan));
    assert!(!ok && err.contains("run plan"), "{err}");
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .args(["--exhaustive", "--out"])
        .arg(other.join(descl::io::plan::MATCH_PLAN_FILE)));
    assert!(!ok && err.contains("run plan"), "{err}");
    assert_eq!(std::fs::read(&plan).unwrap(), before);
}

/// High: an image without descriptors (a uniform picture) had an all-zero VLAD vector whose
/// similarity 0 beat every negative one: it was paired with every image and took the real
/// images' neighbours. It is in no retrieval pair now, and the run says which images it left
/// out.
#[test]
fn retrieval_pairs_no_image_without_descriptors() {
    let Some(root) = common::data_root_or_skip("retrieval_pairs_no_image_without_descriptors")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = common::fountain_quartet(&root, dir.path());
    for name in ["blank-a.png", "blank-b.png"] {
        blank(&imgs.join(name), 640, 427);
    }
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &["--max-image-size", "640"]);
    assert!(ok, "{err}");
    let out = dir.path().join("pairs.txt");
    let (ok, stdout, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .args(["--retrieval", "3", "--json", "--out"])
        .arg(&out));
    assert!(ok, "{err}");
    let pairs = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = pairs.lines().collect();
    assert!(
        lines.iter().all(|l| !l.contains("blank")),
        "pairs with an image without descriptors:\n{pairs}"
    );
    // Four real images, three neighbours each: all six real pairs are kept.
    assert_eq!(lines.len(), 6, "{pairs}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        json["images_without_descriptors"],
        serde_json::json!(["blank-a.png", "blank-b.png"]),
        "{stdout}"
    );
    assert!(err.contains("in no retrieval pair"), "{err}");
}

/// High (second round): with SIFT, a checkerboard and noise pictures (descriptors, but none
/// like the photographs') took places in the photographs' retrieval lists. The set-learned
/// codebook makes unrelated images of a small set score below 0 under VLAD's dot product, and
/// a picture sharing no visual word scored 0 above them. Under ASMK's kernel only agreeing
/// words count, so each photograph's neighbours are photographs.
#[test]
fn retrieval_ranks_no_pattern_or_noise_above_the_photographs() {
    let Some(root) =
        common::data_root_or_skip("retrieval_ranks_no_pattern_or_noise_above_the_photographs")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    std::fs::create_dir_all(&imgs).unwrap();
    // Herz-Jesus-P8 at 768 px and 300 keypoints: the hostile round's set of eight photographs
    // of a walk past a façade, few descriptors each.
    let scene = root.join("strecha/Herz-Jesus-P8/images");
    let mut photos = Vec::new();
    for entry in std::fs::read_dir(&scene).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        std::fs::copy(&path, imgs.join(&name)).unwrap();
        photos.push(name);
    }
    photos.sort();
    // A checkerboard of 32-pixel squares and two pictures of uniform noise (a fixed LCG).
    image::GrayImage::from_fn(768, 512, |x, y| {
        image::Luma([if (x / 32 + y / 32) % 2 == 0 { 40 } else { 215 }])
    })
    .save(imgs.join("pattern.png"))
    .unwrap();
    let mut state = 12345u32;
    for name in ["noise-a.png", "noise-b.png"] {
        image::GrayImage::from_fn(768, 512, |_, _| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            image::Luma([(state >> 24) as u8])
        })
        .save(imgs.join(name))
        .unwrap();
    }
    let feats = dir.path().join("feats");
    let (ok, err) = extract(
        &imgs,
        &feats,
        &["--max-image-size", "768", "--max-keypoints", "300"],
    );
    assert!(ok, "{err}");
    let out = dir.path().join("pairs.txt");
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .args(["--retrieval", "3", "--out"])
        .arg(&out));
    assert!(ok, "{err}");
    let pairs = std::fs::read_to_string(&out).unwrap();
    let is_photo = |n: &str| photos.iter().any(|p| p == n);
    // Each of the 3 other pictures brings its own 3 neighbours; no photograph lists one.
    let with_others = pairs
        .lines()
        .filter(|l| l.split(' ').any(|n| !is_photo(n)))
        .count();
    assert!(
        with_others <= 9,
        "{with_others} pairs with the pattern or noise:\n{pairs}"
    );
    // The photographs' sequence neighbours are all kept.
    for w in photos.windows(2) {
        let pair = format!("{} {}", w[0], w[1]);
        assert!(pairs.lines().any(|l| l == pair), "{pair} lost:\n{pairs}");
    }
}

/// Critical (second round): an output path that is not a regular file was replaced by one:
/// as root `--json /dev/null` turned the system's /dev/null into a file, a link to a file was
/// replaced by a file (and a link to a database escaped that database's lock), and a FIFO made
/// every writer wait forever (the picture check opened it). Each is refused at once, naming
/// the path, and left as it was.
#[test]
fn an_output_that_is_a_link_or_a_fifo_is_refused_and_left_alone() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let (_, feats) = sift_features(dir.path());
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let target = dir.path().join("kept.txt");
    std::fs::write(&target, "the user's file\n").unwrap();
    let link = dir.path().join("link.txt");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for (out, needle) in [(&fifo, "not a regular file"), (&link, "a link")] {
        // common::run fails the test if the command is still running after 30 s.
        let (ok, _, err) = run(descl()
            .arg("pairs")
            .arg(&feats)
            .args(["--exhaustive", "--out"])
            .arg(out));
        assert!(!ok && err.contains(needle), "{}: {err}", out.display());
        let (ok, _, err) = run(descl()
            .arg("match")
            .arg(feats.join("0000.npz"))
            .arg(feats.join("0001.npz"))
            .arg("--out")
            .arg(out));
        assert!(!ok && err.contains(needle), "{}: {err}", out.display());
    }
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "the user's file\n"
    );
}

/// High (second round): a flat picture with one SIFT keypoint in a set failed every pair of it
/// ("the ratio test needs at least two" descriptors), and `descl sfm` wrote nothing. Its pairs
/// now have no matches, as those of a picture without keypoints.
#[test]
fn a_picture_with_one_keypoint_fails_no_set() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    // A flat picture with one small pattern (the hostile round's), one SIFT keypoint.
    const PATCH: [[u8; 5]; 5] = [
        [43, 230, 2, 241, 17],
        [206, 117, 32, 249, 109],
        [11, 184, 253, 39, 137],
        [237, 30, 202, 107, 13],
        [53, 219, 182, 226, 138],
    ];
    image::GrayImage::from_fn(512, 341, |x, y| {
        let (px, py) = (x.wrapping_sub(250) as usize, y.wrapping_sub(160) as usize);
        image::Luma([PATCH
            .get(py)
            .and_then(|r| r.get(px))
            .copied()
            .unwrap_or(180)])
    })
    .save(imgs.join("flat.png"))
    .unwrap();
    let feats = dir.path().join("flat-features");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(imgs.join("flat.png"))
        .arg("--out")
        .arg(&feats)
        .args(SIFT));
    assert!(
        ok && err.contains("1 keypoints"),
        "the case needs one keypoint: {err}"
    );
    let db = dir.path().join("set.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .args(SIFT));
    assert!(ok && db.is_file(), "{err}");
    assert!(err.contains("4 images, 6 pairs"), "{err}");
}

/// Critical (second round): `descl match A B --viz IMAGES/C.jpg` replaced the photograph C (an
/// image of the set, not an input of the command) with the drawing, exit 0; `--viz` over a
/// features file replaced it too. `--viz` replaces only a match picture descl drew (its PNG
/// caption); a rerun over its own drawing still works.
#[test]
fn match_viz_replaces_only_its_own_drawing() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, feats) = sift_features(dir.path());
    let viz = |out: &Path| {
        run(descl()
            .arg("match")
            .arg(imgs.join(NAMES[0]))
            .arg(imgs.join(NAMES[1]))
            .args(SIFT)
            .arg("--viz")
            .arg(out))
    };
    // A features file is refused by its name already (no picture is named `.npz`).
    for (victim, why) in [
        (imgs.join(NAMES[2]), "did not draw"),
        (
            feats.join("0002.npz"),
            "named as a features or matches file",
        ),
    ] {
        let before = std::fs::read(&victim).unwrap();
        let (ok, _, err) = viz(&victim);
        assert!(
            !ok && err.contains(why) && err.contains(&victim.display().to_string()),
            "{err}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), before);
    }
    let own = dir.path().join("pair.png");
    for _ in 0..2 {
        let (ok, _, err) = viz(&own);
        assert!(ok, "{err}");
    }
}

/// High (second round): outputs replaced descl's files of another kind with exit 0 and no
/// --overwrite: `match A B --out FEATS/C.npz` a features file, `pairs --out keep.db` a COLMAP
/// database, `sfm --database FEATS/A.npz --overwrite` a features file. Each output now
/// replaces only an earlier output of its own kind (or a file descl does not know, for lists).
#[test]
fn no_output_replaces_a_descl_file_of_another_kind() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, feats) = sift_features(dir.path());
    let (_, db) = sift_database(&dir.path().join("scene"));
    let features = feats.join("0002.npz");
    let kept = [
        (features.clone(), std::fs::read(&features).unwrap()),
        (db.clone(), std::fs::read(&db).unwrap()),
    ];
    let refused = |(ok, _, err): (bool, String, String), what: &str| {
        assert!(!ok && err.contains(what), "{err}");
    };
    let match_out = |out: &Path| {
        run(descl()
            .arg("match")
            .arg(feats.join("0000.npz"))
            .arg(feats.join("0001.npz"))
            .arg("--out")
            .arg(out))
    };
    refused(match_out(&features), "an existing features file");
    refused(match_out(&db), "an existing SQLite database");
    let pairs_out = |out: &Path| {
        run(descl()
            .arg("pairs")
            .arg(&feats)
            .args(["--exhaustive", "--out"])
            .arg(out))
    };
    refused(pairs_out(&db), "an existing SQLite database");
    refused(pairs_out(&features), "is an input of this command");
    refused(
        run(descl()
            .arg("sfm")
            .arg(&imgs)
            .arg("--database")
            .arg(&features)
            .arg("--overwrite")
            .args(SIFT)),
        "a database named as a features or matches file",
    );
    for (path, bytes) in &kept {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{}", path.display());
    }
    // Reruns over their own kind still write: matches over matches, a list over a list.
    let m = dir.path().join("m.npz");
    for _ in 0..2 {
        let (ok, _, err) = match_out(&m);
        assert!(ok, "{err}");
        let (ok, _, err) = pairs_out(&dir.path().join("pairs.txt"));
        assert!(ok, "{err}");
    }
}

/// Low: `descl pairs` on one image reported a share of exhaustive of 0.0 (0 of 0 pairs).
#[test]
fn pairs_of_one_image_are_all_of_exhaustive() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES[..1]);
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let (ok, stdout, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .args(["--exhaustive", "--json", "--out"])
        .arg(dir.path().join("p.txt")));
    assert!(ok, "{err}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        json["share_of_exhaustive"],
        serde_json::json!(1.0),
        "{stdout}"
    );
}

/// The set's images under `dir` and their database (`descl sfm -m sift`): (images, database).
fn sift_database(dir: &Path) -> (PathBuf, PathBuf) {
    let imgs = small_images(dir, &NAMES);
    let db = dir.join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .args(SIFT));
    assert!(ok, "{err}");
    (imgs, db)
}

/// [`sift_database`] in a new temporary folder, or `None` (the test skipped) without colmap.
fn sift_database_or_skip(test: &str) -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if !common::colmap_or_skip(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (imgs, db) = sift_database(dir.path());
    Some((dir, imgs, db))
}

/// `descl sfm map DB --images IMAGES --sparse-dir SPARSE`: (success, stderr).
fn sfm_map(db: &Path, images: &Path, sparse: &Path) -> (bool, String) {
    let (ok, _, err) = run(descl()
        .args(["sfm", "map"])
        .arg(db)
        .arg("--images")
        .arg(images)
        .arg("--sparse-dir")
        .arg(sparse));
    (ok, err)
}

/// Medium: `descl sfm map DB --images DIR` checked only that files of the database's names
/// exist; the same pictures at half size (or others) were mapped, their points coloured
/// wrongly. The camera's width and height are checked against each file's header.
#[test]
fn sfm_map_refuses_images_of_another_size() {
    let Some((dir, imgs, db)) = sift_database_or_skip("sfm_map_refuses_images_of_another_size")
    else {
        return;
    };
    let other = dir.path().join("half");
    std::fs::create_dir(&other).unwrap();
    for name in NAMES {
        let img = image::open(imgs.join(name)).unwrap();
        img.resize(img.width() / 2, img.height() / 2, image::imageops::Triangle)
            .save(other.join(name))
            .unwrap();
    }
    assert_map_refused(&db, &other, "records");
}

/// `descl sfm map DB --images OTHER` fails naming OTHER's first image and `needle`, and leaves
/// no sparse folder.
fn assert_map_refused(db: &Path, other: &Path, needle: &str) {
    let first = other.join(NAMES[0]).display().to_string();
    assert_refused_before_mapping(db, other, &[&first, needle], "other pictures");
}

/// Medium: other pictures of the same size under the database's names passed the size check
/// and were mapped, their points coloured from the wrong pictures. descl's database records
/// each image's SHA-256 (its features' provenance), and `sfm map` holds the folder to it.
#[test]
fn sfm_map_refuses_other_pictures_of_the_same_size() {
    let Some((dir, imgs, db)) =
        sift_database_or_skip("sfm_map_refuses_other_pictures_of_the_same_size")
    else {
        return;
    };
    // The same folder with the first picture's grey levels inverted: every file of the
    // database's size.
    let other = dir.path().join("inverted");
    std::fs::create_dir(&other).unwrap();
    for name in NAMES {
        std::fs::copy(imgs.join(name), other.join(name)).unwrap();
    }
    let mut inverted = image::open(imgs.join(NAMES[0])).unwrap();
    inverted.invert();
    inverted.save(other.join(NAMES[0])).unwrap();
    assert_map_refused(&db, &other, "SHA-256");
    // The folder the database was made from passes the check (whatever the mapper then makes
    // of three small synthetic pictures).
    let (_, err) = sfm_map(&db, &imgs, &dir.path().join("sparse"));
    assert!(!err.contains("SHA-256"), "{err}");
}

/// Medium: a database whose images have no recorded SHA-256 (COLMAP's own, an older descl's,
/// a removed row) was checked by name and size only, and `sfm map` did not say so.
#[test]
fn sfm_map_says_which_images_it_checked_by_size_only() {
    let Some((dir, imgs, db)) =
        sift_database_or_skip("sfm_map_says_which_images_it_checked_by_size_only")
    else {
        return;
    };
    let conn = rusqlite::Connection::open(&db).unwrap();
    let removed = conn
        .execute(
            "DELETE FROM descl_image_sha256 WHERE image_id = \
             (SELECT image_id FROM images WHERE name = ?1)",
            [NAMES[1]],
        )
        .unwrap();
    assert_eq!(removed, 1);
    drop(conn);
    let (_, err) = sfm_map(&db, &imgs, &dir.path().join("sparse"));
    assert!(
        err.contains("1 of the 3 images")
            && err.contains("checked by name and size only")
            && err.contains(NAMES[1]),
        "{err}"
    );
}

/// Medium (second round): an image row whose camera is not in the database (an edited
/// database) reached the mapper, which failed with a Python traceback (pycolmap) or an abort
/// (COLMAP 3.8). Named before any mapping.
#[test]
fn sfm_map_names_an_image_whose_camera_is_missing() {
    let Some((dir, imgs, db)) =
        sift_database_or_skip("sfm_map_names_an_image_whose_camera_is_missing")
    else {
        return;
    };
    let conn = rusqlite::Connection::open(&db).unwrap();
    // As the sqlite3 shell edits it: without foreign-key enforcement.
    conn.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    conn.execute(
        "UPDATE images SET camera_id = 42 WHERE name = ?1",
        [NAMES[1]],
    )
    .unwrap();
    drop(conn);
    let sparse = dir.path().join("sparse");
    let (ok, err) = sfm_map(&db, &imgs, &sparse);
    assert!(
        !ok && err.contains(NAMES[1]) && err.contains("camera 42"),
        "{err}"
    );
    assert!(!sparse.exists());
}

/// Medium: `descl sfm --camera-params` holds the given cameras, but `descl sfm map` of a
/// database made with them (`sfm merge --camera-params`, or `descl sfm` without
/// --reconstruct) let the mapper refine them unless --hold-intrinsics was given. descl records
/// the given cameras (`descl_given_camera`), and `sfm map` holds them unless told to refine.
#[test]
fn sfm_map_holds_the_cameras_the_user_gave() {
    if !common::colmap_or_skip("sfm_map_holds_the_cameras_the_user_gave") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let given = dir.path().join("given.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&given)
        .args(SIFT)
        .args(["--camera-params", "150,80,60,0"]));
    assert!(ok, "{err}");
    let (_, err) = sfm_map(&given, &imgs, &dir.path().join("given-sparse"));
    assert!(err.contains("held fixed"), "{err}");
    let (_, _, err) = run(descl()
        .args(["sfm", "map"])
        .arg(&given)
        .arg("--images")
        .arg(&imgs)
        .arg("--sparse-dir")
        .arg(dir.path().join("refined-sparse"))
        .arg("--refine-intrinsics"));
    assert!(!err.contains("held fixed"), "{err}");
    // Estimated cameras: refined as before, and --refine-intrinsics has nothing to refine.
    let (estimated_imgs, estimated) = sift_database(&dir.path().join("estimated"));
    let (_, err) = sfm_map(
        &estimated,
        &estimated_imgs,
        &dir.path().join("estimated-sparse"),
    );
    assert!(!err.contains("held fixed"), "{err}");
    let (ok, _, err) = run(descl()
        .args(["sfm", "map"])
        .arg(&estimated)
        .arg("--images")
        .arg(&estimated_imgs)
        .arg("--refine-intrinsics"));
    assert!(!ok && err.contains("no camera of"), "{err}");
}

/// The set's images under `dir` and their database matched without verification
/// (`--geometry none`): a database with no verified pair.
fn unverified_database(dir: &Path) -> (PathBuf, PathBuf) {
    let imgs = small_images(dir, &NAMES);
    let db = dir.join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .args(SIFT)
        .args(["--geometry", "none"]));
    assert!(ok, "{err}");
    (imgs, db)
}

/// Low: `descl sfm map` on a database without a verified pair (matched with `--geometry
/// none`) left an empty sparse folder.
#[test]
fn sfm_map_without_verified_pairs_leaves_no_folder() {
    if !common::colmap_or_skip("sfm_map_without_verified_pairs_leaves_no_folder") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (imgs, db) = unverified_database(dir.path());
    let sparse = dir.path().join("sparse");
    let (ok, err) = sfm_map(&db, &imgs, &sparse);
    assert!(!ok && err.contains("a model needs two"), "{err}");
    assert!(!sparse.exists(), "an empty sparse folder was left");
}

/// The default mapper is pycolmap's, which needs no `colmap`: `descl sfm map` refused every
/// mapping without one ("install COLMAP"), whichever mapper was to map. Now colmap is asked
/// for only by `--mapper colmap` and `--refine`.
#[test]
fn pycolmap_s_mapping_needs_no_colmap() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, db) = unverified_database(dir.path());
    let map = |extra: &[&str]| {
        run(descl()
            .args(["sfm", "map"])
            .arg(&db)
            .arg("--images")
            .arg(&imgs)
            .arg("--sparse-dir")
            .arg(dir.path().join("sparse"))
            .args(extra)
            .env("DESCL_COLMAP", dir.path().join("no-colmap")))
    };
    // pycolmap's mapper (where pycolmap is) gets as far as the database: no verified pair.
    let (ok, _, err) = map(&[]);
    assert!(!ok && !err.contains("no-colmap"), "{err}");
    // COLMAP's mapper, and the refinement, need it and say so.
    for extra in [&["--mapper", "colmap"][..], &["--refine"][..]] {
        let (ok, _, err) = map(extra);
        assert!(!ok && err.contains("no-colmap"), "{extra:?}: {err}");
    }
}

/// Low: `descl sfm --geometry none --reconstruct` did all the work and then failed.
#[test]
fn sfm_reconstruct_without_verification_is_refused_before_work() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let db = dir.path().join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .args(SIFT)
        .args(["--geometry", "none", "--reconstruct"]));
    assert!(
        !ok && err.contains("--geometry none --reconstruct"),
        "{err}"
    );
    assert!(!db.exists(), "the database was written before the refusal");
}

/// Medium: `descl match --images IMAGES --format h5 --out-dir X` wrote no extract plan, so
/// after an image was deleted and the command run again, `descl match --images
/// X/features.h5` matched the removed image's features again.
#[cfg(feature = "h5")]
#[test]
fn an_h5_match_of_images_writes_its_extract_plan() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let out = dir.path().join("h5");
    let h5_match = || {
        run(descl()
            .args(["match", "--exhaustive", "--format", "h5", "--images"])
            .arg(&imgs)
            .arg("--out-dir")
            .arg(&out)
            .args(SIFT))
    };
    let (ok, _, err) = h5_match();
    assert!(ok, "{err}");
    assert!(out.join(descl::io::plan::EXTRACT_PLAN_FILE).is_file());
    std::fs::remove_file(imgs.join(NAMES[2])).unwrap();
    let (ok, _, err) = h5_match();
    assert!(ok, "{err}");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(out.join("features.h5"))
        .arg("--out-dir")
        .arg(dir.path().join("again")));
    assert!(
        !ok,
        "the removed image's features were matched again: {err}"
    );
    assert!(err.contains(NAMES[2]), "{err}");
}

/// Medium (second round): `descl match --images IMAGES --format h5 --out-dir X` into the folder
/// of another model's `descl extract --format h5` was refused (the file holds that model's
/// features), but only after it had replaced X's extract plan with its own and written a match
/// plan: the folder's plan then described features it does not hold. Refused before either.
#[cfg(feature = "h5")]
#[test]
fn a_refused_h5_match_of_images_leaves_the_folder_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let out = dir.path().join("h5");
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&out)
        .args(["--format", "h5"])
        .args(SIFT));
    assert!(ok, "{err}");
    let before = files_with_bytes(&out);
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--format", "h5", "--images"])
        .arg(&imgs)
        .arg("--out-dir")
        .arg(&out)
        .args(["-m", "rootsift"]));
    assert!(
        !ok,
        "rootsift features matched into a folder of SIFT's: {err}"
    );
    assert!(
        err.contains("features.h5") && err.contains("`sift`") && err.contains("another folder"),
        "{err}"
    );
    assert_eq!(files_with_bytes(&out), before, "{err}");
}

/// Every file of `dir` with its bytes.
#[cfg(feature = "h5")]
fn files_with_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p.file_name().unwrap().to_string_lossy().to_string(), bytes)
        })
        .collect();
    files.sort();
    files
}

/// The two commands started together (neither waited for before both are running):
/// (success, stderr) of each.
fn together(a: &mut Command, b: &mut Command) -> [(bool, String); 2] {
    let spawn = |c: &mut Command| {
        c.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (ca, cb) = (spawn(a), spawn(b));
    [ca, cb].map(|c| {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("panicked"), "descl panicked: {err}");
        (out.status.success(), err)
    })
}

/// What two runs of different settings into one folder may do: one refused, naming the
/// other run, or (when one had finished before the other began) both, one after the other.
/// Never both exit 0 with the folder holding a mix: the folder must be a consistent set
/// (`check` succeeds on it).
fn assert_serialised(results: &[(bool, String); 2], check: impl Fn() -> (bool, String)) {
    for (ok, err) in results {
        assert!(
            *ok || err.contains("another descl run with other settings"),
            "refused for another reason: {err}"
        );
    }
    if results.iter().any(|(ok, _)| *ok) {
        let (ok, err) = check();
        assert!(ok, "the folder holds a mix of the two runs: {err}");
    }
}

/// `n` small images `0000.png`, `0001.png`, … under `dir/images` ([`small_images`]).
fn numbered_images(dir: &Path, n: usize) -> PathBuf {
    let names: Vec<String> = (0..n).map(|i| format!("{i:04}.png")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    small_images(dir, &names)
}

/// Twelve numbered images and their npz features in `dir/feats`: the inputs of the concurrent
/// match tests.
fn twelve_images_with_features(dir: &Path) -> (PathBuf, PathBuf) {
    let imgs = numbered_images(dir, 12);
    let feats = dir.join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    (imgs, feats)
}

/// Issue 55, item 6: two `descl extract` runs of different settings into one npz folder, started
/// together, both exited 0 while the folder held a mix (and the last plan); now the second is
/// refused while the first writes. Shards of one run still share the folder.
#[test]
fn two_extractions_of_other_settings_into_one_folder_do_not_both_win() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = numbered_images(dir.path(), 24);
    for round in 0..3 {
        let feats = dir.path().join(format!("feats{round}"));
        let cmd = |keypoints: &str| {
            let mut c = descl();
            c.arg("extract")
                .arg(&imgs)
                .arg("--out")
                .arg(&feats)
                .args(SIFT)
                .args(["--max-keypoints", keypoints]);
            c
        };
        let results = together(&mut cmd("300"), &mut cmd("200"));
        assert_serialised(&results, || {
            let (ok, _, err) = run(descl()
                .args(["match", "--sequential", "1", "--images"])
                .arg(&feats)
                .arg("--out-dir")
                .arg(dir.path().join(format!("m{round}"))));
            (ok, err)
        });
    }
    // Two shards of one run, together: both write.
    let feats = dir.path().join("shards");
    let shard = |i: &str| {
        let mut c = descl();
        c.arg("extract")
            .arg(&imgs)
            .arg("--out")
            .arg(&feats)
            .args(SIFT)
            .args(["--shard", i]);
        c
    };
    let [(ok_a, err_a), (ok_b, err_b)] = together(&mut shard("0/2"), &mut shard("1/2"));
    assert!(ok_a && ok_b, "{err_a}\n{err_b}");
    let (ok, _, err) = run(descl()
        .args(["match", "--sequential", "1", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(dir.path().join("m-shards")));
    assert!(ok, "{err}");
}

/// Issue 55, item 6: the same for two `descl match` runs of different settings into one npz
/// folder: both reported their pairs matched while the folder held the later run's files.
#[test]
fn two_match_runs_of_other_settings_into_one_folder_do_not_both_win() {
    let dir = tempfile::tempdir().unwrap();
    let (_, feats) = twelve_images_with_features(dir.path());
    for round in 0..3 {
        let out = dir.path().join(format!("m{round}"));
        let cmd = |inliers: &str| {
            let mut c = descl();
            c.args(["match", "--exhaustive", "--images"])
                .arg(&feats)
                .arg("--out-dir")
                .arg(&out)
                .args(["--min-inliers", inliers]);
            c
        };
        let results = together(&mut cmd("15"), &mut cmd("16"));
        // A consistent folder merges: every pair file of the plan's settings.
        assert_serialised(&results, || {
            merged(&feats, &out, &dir.path().join(format!("merged{round}.db")))
        });
    }
}

/// Issue 55, item 6: pair files whose names exceed the file system's 255 bytes failed one by
/// one after their matching work; refused before any.
#[test]
fn pair_file_names_too_long_are_refused_before_matching() {
    let dir = tempfile::tempdir().unwrap();
    let long = |c: char| format!("{}.png", c.to_string().repeat(140));
    let (a, b) = (long('a'), long('b'));
    let imgs = small_images(dir.path(), &[a.as_str(), b.as_str()]);
    let out = dir.path().join("m");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&imgs)
        .arg("--out-dir")
        .arg(&out)
        .args(SIFT));
    assert!(!ok, "{err}");
    assert!(err.contains("255") && err.contains("--format h5"), "{err}");
    assert!(!err.contains("matched"), "matching ran first: {err}");
}

/// Low: a link to an image of the set was a second image (matched with itself).
#[test]
fn a_link_to_an_image_of_the_set_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let link = imgs.join("link.png");
    std::os::unix::fs::symlink(imgs.join(NAMES[0]), &link).unwrap();
    let (ok, err) = extract(&imgs, &dir.path().join("feats"), &[]);
    assert!(!ok, "{err}");
    assert!(
        err.contains(&link.display().to_string()) && err.contains("one file"),
        "{err}"
    );
    // Third round (low): a hard link in the folder, and a link given beside its image on the
    // command line, were still taken as two images (the picture matched with itself).
    std::fs::remove_file(&link).unwrap();
    let hard = imgs.join("hard.png");
    std::fs::hard_link(imgs.join(NAMES[1]), &hard).unwrap();
    let (ok, err) = extract(&imgs, &dir.path().join("feats"), &[]);
    assert!(
        !ok && err.contains(&hard.display().to_string()) && err.contains("one file"),
        "{err}"
    );
    std::fs::remove_file(&hard).unwrap();
    let outside = dir.path().join("outside.png");
    std::os::unix::fs::symlink(imgs.join(NAMES[0]), &outside).unwrap();
    let (ok, _, err) = run(descl()
        .arg("extract")
        .arg(imgs.join(NAMES[0]))
        .arg(&outside)
        .arg("--out")
        .arg(dir.path().join("feats"))
        .args(SIFT));
    assert!(
        !ok && err.contains(&outside.display().to_string()) && err.contains("one file"),
        "{err}"
    );
}

/// Low: an EXIF 35 mm focal length f35 gives f = f35 / 35 · max(width, height), as COLMAP
/// computes it (descl divided by 36: 622.2 px for 35 mm on a 640 px image, COLMAP 640).
#[test]
fn exif_focal_is_colmaps() {
    let Some(root) = common::data_root_or_skip("exif_focal_is_colmaps") else {
        return;
    };
    let src = root.join("strecha/fountain-P11/images/0000.jpg");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f35.jpg");
    std::fs::write(
        &file,
        common::with_exif_focal(&std::fs::read(&src).unwrap(), 35),
    )
    .unwrap();
    let (w, h) = image::image_dimensions(&file).unwrap();
    let k = descl::geometry::Intrinsics::from_exif(&file, w, h)
        .unwrap()
        .unwrap();
    assert_eq!(k.fx, w.max(h) as f64, "{k}");
}

/// Low: a features file with a NaN score was accepted, and a NaN descriptor was refused only
/// at matching by a message that did not name the file.
#[test]
fn nan_features_are_refused_naming_the_file() {
    use descl::io::features::{read_features, write_features};
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES[..1]);
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let good = read_features(&feats.join("0000.npz")).unwrap();
    let poison = |f: &mut descl::features::Features, scores: bool| {
        f.meta.content = None;
        if scores {
            f.scores[0] = f32::NAN;
        } else if let descl::describe::Descriptors::Float(d) = &mut f.descriptors {
            d[[0, 3]] = f32::NAN;
        }
    };
    for (scores, says) in [(true, "score 0"), (false, "descriptor 0")] {
        let mut f = good.clone();
        poison(&mut f, scores);
        let file: PathBuf = dir.path().join(format!("nan-{scores}.npz"));
        write_features(&file, &f).unwrap();
        let e = read_features(&file).unwrap_err().to_string();
        assert!(
            e.contains(says) && e.contains(&file.display().to_string()),
            "{e}"
        );
    }
}

/// Low: `--filter-max-reproj-error 0.0001` was reported as "0 px".
#[test]
fn a_small_filter_is_printed_with_its_digits() {
    use descl::sfm::px_text;
    assert_eq!(px_text(0.0001), "0.0001");
    assert_eq!(px_text(0.0123), "0.0123");
    assert_eq!(px_text(0.5), "0.5");
    assert_eq!(px_text(2.6041666666666665), "2.6");
    assert_eq!(px_text(4.0), "4");
}

/// Low: `descl sfm --reconstruct --overwrite` with the database inside an earlier model (which
/// --overwrite removes before mapping) was refused only after extraction and matching.
#[test]
fn a_database_inside_an_earlier_model_is_refused_before_work() {
    if !common::colmap_or_skip("a_database_inside_an_earlier_model_is_refused_before_work") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let sparse = dir.path().join("sparse");
    let model = sparse.join("0");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("images.bin"), b"").unwrap();
    let db = model.join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .arg("--sparse-dir")
        .arg(&sparse)
        .args(["--reconstruct", "--overwrite"])
        .args(SIFT));
    assert!(!ok && err.contains("inside this earlier model"), "{err}");
    assert!(!db.exists(), "the database was written before the refusal");
}

/// Low: an empty `DESCL_COLMAP` was run as an empty command (an empty `DESCL_PYTHON` counts
/// as unset); `DESCL_COLMAP=/bin/false` failed naming neither the executable nor the database.
#[test]
fn descl_colmap_empty_is_unset_and_a_failure_names_it() {
    if !common::colmap_or_skip("descl_colmap_empty_is_unset_and_a_failure_names_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let db = dir.path().join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .args(SIFT)
        .args(["--geometry", "none"]));
    assert!(ok, "{err}");
    // Colmap is found (then the database has no verified pair to map).
    let (ok, _, err) = run(descl()
        .args(["sfm", "map", "--mapper", "colmap"])
        .arg(&db)
        .arg("--images")
        .arg(&imgs)
        .arg("--sparse-dir")
        .arg(dir.path().join("sparse"))
        .env("DESCL_COLMAP", ""));
    assert!(
        !ok && !err.contains("cannot run") && err.contains("a model needs two"),
        "an empty DESCL_COLMAP: {err}"
    );
    let r = descl::sfm::mapper::colmap::run_colmap(&[
        "feature_importer".as_ref(),
        "--database_path".as_ref(),
        db.as_os_str(),
    ]);
    // The real colmap fails too (no image path), naming the database and executable.
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains(&db.display().to_string()) && e.contains("colmap"),
        "{e}"
    );
}

/// `descl match --images FEATS --exhaustive --out-dir OUT ARGS...`: (success, stderr).
fn match_set(feats: &Path, out: &Path, args: &[&str]) -> (bool, String) {
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(feats)
        .arg("--out-dir")
        .arg(out)
        .args(args));
    (ok, err)
}

/// The features file `from` written again as `to` with its metadata edited by `edit` and its
/// arrays as they were (as an older descl, or a hand, wrote a file: `write_features` would
/// record the identity again).
fn with_meta(from: &Path, to: &Path, edit: impl FnOnce(&mut descl::features::FeatureMeta)) {
    use descl::io::npz::{read_npz, write_npz, NpyArray};
    let mut meta = descl::io::features::read_features_meta(from).unwrap();
    edit(&mut meta);
    let meta = NpyArray::unicode_scalar(&serde_json::to_string(&meta).unwrap());
    let members: Vec<(String, NpyArray)> = read_npz(from)
        .unwrap()
        .into_iter()
        .map(|(n, a)| {
            if n == "meta" {
                (n, meta.clone())
            } else {
                (n, a)
            }
        })
        .collect();
    let named: Vec<(&str, &NpyArray)> = members.iter().map(|(n, a)| (n.as_str(), a)).collect();
    write_npz(std::fs::File::create(to).unwrap(), &named, to).unwrap();
}

/// The pair files of `dir` with their bytes (what a refused run must leave as it was).
fn pair_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    common::files_in(dir)
        .into_iter()
        .filter(|n| n.contains("__"))
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

/// Issue 55: a `descl match` shard of other settings (or a second run with other settings or
/// other features) into a folder holding another run's match plan replaced the plan and
/// exited 0; the mix was found only at merge time, blaming the first shard's files. Now it is
/// refused before any matching, naming the plan file and the way out; the other shards of the
/// same plan, a resume, and a set grown since an `--allow-partial` run still write there.
#[test]
fn a_match_of_other_settings_into_another_runs_folder_is_refused() {
    use descl::io::plan::MATCH_PLAN_FILE;
    let dir = tempfile::tempdir().unwrap();
    let names = ["0000.png", "0001.png", "0002.png", "0003.png"];
    let imgs = small_images(dir.path(), &names);
    let (feats, other, m) = (
        dir.path().join("feats"),
        dir.path().join("other"),
        dir.path().join("m"),
    );
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let (ok, err) = extract(&imgs, &other, &["--max-keypoints", "100"]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &m, &["--shard", "0/2"]);
    assert!(ok, "{err}");
    let after_first = pair_files(&m);
    assert_eq!(after_first.len(), 3, "{err}");
    let plan = m.join(MATCH_PLAN_FILE).display().to_string();
    let refused = |(ok, err): (bool, String), field: &str| {
        assert!(!ok, "a run of other {field} into {plan} exited 0: {err}");
        assert!(
            err.contains(&plan)
                && err.contains(field)
                && err.contains("--overwrite")
                && err.contains("--out-dir"),
            "{err}"
        );
        assert!(!err.contains(" matched,"), "matching ran first: {err}");
        assert_eq!(pair_files(&m), after_first, "a refused run changed {plan}");
    };
    // The second shard with another verification setting, then with other features, then
    // with another threshold.
    refused(
        match_set(&feats, &m, &["--shard", "1/2", "--min-inliers", "16"]),
        "min_inliers",
    );
    refused(match_set(&other, &m, &["--shard", "1/2"]), "features");
    refused(
        match_set(&feats, &m, &["--shard", "1/2", "--threshold", "2"]),
        "threshold_px",
    );
    // The other shard of the same plan, then a resume of the whole run, write there.
    let (ok, err) = match_set(&feats, &m, &["--shard", "1/2"]);
    assert!(ok, "{err}");
    assert_eq!(pair_files(&m).len(), 6);
    let (ok, err) = match_set(&feats, &m, &[]);
    assert!(ok && err.contains("6 already done"), "{err}");
    let merge = |db: &str| {
        run(descl()
            .args(["sfm", "merge", "--features"])
            .arg(&feats)
            .arg("--matches")
            .arg(&m)
            .arg("--database")
            .arg(dir.path().join(db)))
    };
    let (ok, _, err) = merge("a.db");
    assert!(ok, "{err}");
    // A whole run of other settings replaces the plan and matches every pair again (what a
    // shard cannot do: it matches only its share); a shard with --overwrite replaces it too.
    let (ok, err) = match_set(&feats, &m, &["--min-inliers", "16"]);
    assert!(ok && err.contains("6 matched"), "{err}");
    let (ok, _, err) = merge("b.db");
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &m, &["--shard", "0/2", "--overwrite"]);
    assert!(ok, "{err}");
}

/// Issue 55 (second round, medium): a `descl match` shard choosing its pairs another way
/// (`--sequential 1` beside an `--exhaustive` shard, or another pairs file) replaced the
/// folder's match plan and exited 0; the mix was found only at merge time. The plan records
/// how its pairs were chosen (a pairs file by the SHA-256 of its bytes), and such a shard is
/// refused before matching; the same pairs file read from another path is the same run.
#[test]
fn a_match_shard_of_another_pair_selection_is_refused() {
    use descl::io::plan::MATCH_PLAN_FILE;
    let dir = tempfile::tempdir().unwrap();
    let names = ["0000.png", "0001.png", "0002.png", "0003.png"];
    let imgs = small_images(dir.path(), &names);
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let shard = |out: &Path, pairs: &[&str], share: &str| {
        let (ok, _, err) = run(descl()
            .args(["match", "--images"])
            .arg(&feats)
            .arg("--out-dir")
            .arg(out)
            .args(pairs)
            .args(["--shard", share]));
        (ok, err)
    };
    let m = dir.path().join("m");
    let (ok, err) = match_set(&feats, &m, &["--shard", "0/2"]);
    assert!(ok, "{err}");
    let plan = m.join(MATCH_PLAN_FILE).display().to_string();
    let (ok, err) = shard(&m, &["--sequential", "1"], "1/2");
    assert!(
        !ok && err.contains(&plan) && err.contains("selection") && !err.contains(" matched,"),
        "a sequential shard beside an exhaustive one: {err}"
    );
    // Pairs files: the same bytes at two paths are one run; other bytes are another.
    let (a, b, c) = (
        dir.path().join("a.txt"),
        dir.path().join("copy-of-a.txt"),
        dir.path().join("c.txt"),
    );
    std::fs::write(
        &a,
        "0000.png 0001.png\n0001.png 0002.png\n0002.png 0003.png\n",
    )
    .unwrap();
    std::fs::copy(&a, &b).unwrap();
    std::fs::write(&c, "0000.png 0001.png\n0000.png 0003.png\n").unwrap();
    let p = dir.path().join("p");
    let with = |f: &Path| ["--pairs".to_string(), f.display().to_string()];
    let (ok, err) = shard(&p, &with(&a).each_ref().map(String::as_str), "0/2");
    assert!(ok, "{err}");
    let (ok, err) = shard(&p, &with(&c).each_ref().map(String::as_str), "1/2");
    assert!(
        !ok && err.contains("selection"),
        "another pairs file: {err}"
    );
    let (ok, err) = shard(&p, &with(&b).each_ref().map(String::as_str), "1/2");
    assert!(ok, "the same pairs file at another path: {err}");
}

/// Issue 55: descriptors scaled by 1e20 in a features file without provenance gave 0 matches
/// and exit 0 (their squared norms overflow f32 in the matcher's distance expansion); refused
/// on read, naming the file and the row.
#[test]
fn descriptors_of_absurd_norm_are_refused_naming_the_file() {
    use descl::io::features::{read_features, write_features};
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES[..2]);
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let file = feats.join("0001.npz");
    let mut f = read_features(&file).unwrap();
    f.meta.content = None;
    f.meta.provenance = None;
    if let descl::describe::Descriptors::Float(d) = &mut f.descriptors {
        d.mapv_inplace(|v| v * 1e20);
    }
    write_features(&file, &f).unwrap();
    let e = read_features(&file).unwrap_err().to_string();
    assert!(
        e.contains("descriptor 0") && e.contains(&file.display().to_string()),
        "{e}"
    );
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg(feats.join("0000.npz"))
        .arg(&file)
        .arg("--out")
        .arg(dir.path().join("m.npz")));
    assert!(!ok && err.contains(&file.display().to_string()), "{err}");
}

/// Issue 55: `descl sfm merge` of pairs verified at `descl match`'s 1 px did not say so; the
/// mapping policy (and `descl sfm`) verifies at COLMAP's 4 px. The summary and JSON now say the
/// threshold the pairs were verified at, and the summary notes when it is not 4 px.
#[test]
fn merge_says_the_threshold_its_pairs_were_verified_at() {
    let dir = tempfile::tempdir().unwrap();
    let (_, feats) = sift_features(dir.path());
    for (planar, px, noted) in [(false, 1.0, true), (true, 4.0, false)] {
        let m = dir.path().join(format!("m-{planar}"));
        let extra: &[&str] = if planar { &["--planar-check"] } else { &[] };
        let (ok, err) = match_set(&feats, &m, extra);
        assert!(ok, "{err}");
        let (ok, out, err) = run(descl()
            .args(["sfm", "merge", "--json", "--features"])
            .arg(&feats)
            .arg("--matches")
            .arg(&m)
            .arg("--database")
            .arg(dir.path().join(format!("{planar}.db"))));
        assert!(ok, "{err}");
        let s: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(s["verified_at_px"], serde_json::json!([px]), "{out}");
        assert_eq!(
            err.contains(&format!("verified at {px} px")) && err.contains("4 px"),
            noted,
            "{err}"
        );
    }
}

/// Runs `a` until it holds its claim on `out` (its `.descl-run-*` file is there and no run is
/// inside the claims' short lock), freezes it there (SIGSTOP), runs `b` to its end while `a`
/// is alive and claimed, then lets `a` go on: two runs into one folder at once, whatever the
/// machine's speed. Returns (success, stderr) of `a` and of `b`.
fn while_running(a: &mut Command, out: &Path, b: &mut Command) -> [(bool, String); 2] {
    while_running_once(a, out, b, |_| true)
}

/// [`while_running`], `a` frozen once `ready` holds of the names in `out` as well.
fn while_running_once(
    a: &mut Command,
    out: &Path,
    b: &mut Command,
    ready: impl Fn(&[String]) -> bool,
) -> [(bool, String); 2] {
    use descl::io::atomic::{CLAIMS_LOCK_FILE, RUN_CLAIM_PREFIX};
    let claimed = || {
        let names = common::files_in(out);
        names.iter().any(|n| n.starts_with(RUN_CLAIM_PREFIX))
            && !names.iter().any(|n| n == CLAIMS_LOCK_FILE)
            && ready(&names)
    };
    let mut first = a
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = first.id().to_string();
    let signal = |s: &str| {
        assert!(Command::new("kill")
            .args([s, &pid])
            .status()
            .unwrap()
            .success())
    };
    loop {
        if claimed() {
            signal("-STOP");
            if claimed() {
                break;
            }
            signal("-CONT");
        }
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first run ended before it was seen holding its claim on {}",
            out.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let (ok_b, _, err_b) = run(b);
    signal("-CONT");
    let done = first.wait_with_output().unwrap();
    let err_a = String::from_utf8_lossy(&done.stderr).into_owned();
    for err in [&err_a, &err_b] {
        assert!(!err.contains("panicked"), "descl panicked: {err}");
    }
    [(done.status.success(), err_a), (ok_b, err_b)]
}

/// Issue 55, item 6 for hloc's files: `descl match --format h5` took no claim on its folder
/// (and wrote the extract plan of its features before any check), so beside a live npz run of
/// other settings in the same folder (a match; an extraction) both exited 0 and the folder
/// held the npz run's files under the h5 run's plan (`sfm merge` then refused the npz run's
/// pair files; `match --images` its features). Now it claims the folder as npz runs do
/// (`io::plan::record_match_plan`, its extract plan written under that claim) and is refused
/// while the other run writes; the other run's results stay whole. Two h5 runs were already
/// serialised by `features.h5`'s lock.
#[cfg(feature = "h5")]
#[test]
fn an_h5_match_beside_a_running_npz_run_does_not_both_win() {
    use descl::io::plan::{EXTRACT_PLAN_FILE, MATCH_PLAN_FILE};
    let dir = tempfile::tempdir().unwrap();
    let (imgs, feats) = twelve_images_with_features(dir.path());
    let h5_match = |out: &Path| {
        let mut c = descl();
        c.args(["match", "--exhaustive", "--format", "h5", "--images"])
            .arg(&imgs)
            .arg("--out-dir")
            .arg(out)
            .args(SIFT)
            .args(["--min-inliers", "16"]);
        c
    };
    let refused = |(ok, err): &(bool, String), out: &Path| {
        assert!(!ok, "an h5 match beside another run exited 0: {err}");
        assert!(
            err.contains("another descl run with other settings")
                && err.contains(&out.display().to_string()),
            "{err}"
        );
    };
    // Beside an npz match of other settings: that run's pair files and plan stay whole.
    let out = dir.path().join("m");
    let mut npz_match = descl();
    npz_match
        .args(["match", "--exhaustive", "--images"])
        .arg(&feats)
        .arg("--out-dir")
        .arg(&out)
        .args(["--min-inliers", "15"]);
    let [(ok, err), b] = while_running(&mut npz_match, &out, &mut h5_match(&out));
    assert!(ok, "{err}");
    refused(&b, &out);
    let (ok, err) = merged(&feats, &out, &dir.path().join("m.db"));
    assert!(ok, "the npz run's results are gone: {err}");
    let plan = std::fs::read_to_string(out.join(MATCH_PLAN_FILE)).unwrap();
    assert!(plan.contains("\"min_inliers\":15"), "{plan}");
    // Beside an npz extraction of other settings: its features stay under its own plan.
    let out = dir.path().join("x");
    let mut npz_extract = descl();
    npz_extract
        .arg("extract")
        .arg(&imgs)
        .arg("--out")
        .arg(&out)
        .args(SIFT)
        .args(["--max-keypoints", "300"]);
    let [(ok, err), b] = while_running(&mut npz_extract, &out, &mut h5_match(&out));
    assert!(ok, "{err}");
    refused(&b, &out);
    assert!(!out.join(MATCH_PLAN_FILE).exists() && !out.join("features.h5").exists());
    let plan = std::fs::read_to_string(out.join(EXTRACT_PLAN_FILE)).unwrap();
    assert!(plan.contains("\"max_keypoints\":300"), "{plan}");
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&out)
        .arg("--out-dir")
        .arg(dir.path().join("mx")));
    assert!(ok, "the npz extraction's features are gone: {err}");
    // Alone, the h5 match writes both plans.
    let out = dir.path().join("h5");
    let (ok, _, err) = run(&mut h5_match(&out));
    assert!(ok, "{err}");
    assert!(out.join(MATCH_PLAN_FILE).is_file() && out.join(EXTRACT_PLAN_FILE).is_file());
}

/// Issue 55, item 6: a second `descl extract` shard with other settings into the folder of a
/// first one replaced the first shard's plan and exited 0; the mix was found only at match or
/// merge time, blaming the first shard's files. It is refused before any work, naming the
/// plan and the differing setting, and leaves the folder as it was; the same run's other
/// shard writes there. (Fixed in 45989cd without a test of its own.)
#[test]
fn an_extract_shard_of_other_settings_is_refused() {
    use descl::io::plan::EXTRACT_PLAN_FILE;
    let dir = tempfile::tempdir().unwrap();
    let names = ["0000.png", "0001.png", "0002.png", "0003.png"];
    let imgs = small_images(dir.path(), &names);
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &["--shard", "0/2", "--max-keypoints", "300"]);
    assert!(ok, "{err}");
    let plan = feats.join(EXTRACT_PLAN_FILE);
    let (before, files_before) = (std::fs::read(&plan).unwrap(), common::files_in(&feats));
    let (ok, err) = extract(&imgs, &feats, &["--shard", "1/2", "--max-keypoints", "200"]);
    assert!(!ok, "a shard of other settings exited 0: {err}");
    assert!(
        err.contains(&plan.display().to_string()) && err.contains("max_keypoints"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&plan).unwrap(),
        before,
        "the plan was replaced"
    );
    assert_eq!(
        common::files_in(&feats),
        files_before,
        "the refused shard wrote"
    );
    let (ok, err) = extract(&imgs, &feats, &["--shard", "1/2", "--max-keypoints", "300"]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &dir.path().join("m"), &[]);
    assert!(ok, "{err}");
}

/// Critical (second hostile round): outputs written over the pictures behind features files,
/// which the command reads but was not given: `pairs FEATS --out IMAGES/0001.png`, `match
/// A.npz B.npz --out IMAGES/0001.png`, `sfm merge --database IMAGES/0001.png --overwrite`
/// without `--images`; and `pairs --reference M --out M/<a matches file>`. Each exited 0 over
/// the file it destroyed. A picture at an output path is refused, and so is a file of the
/// reference run.
#[test]
fn no_list_matches_or_database_lands_on_a_picture_behind_features() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, feats) = sift_features(dir.path());
    let m = dir.path().join("m");
    let (ok, _, err) = run(descl()
        .args(["match", "--images"])
        .arg(&feats)
        .args(["--exhaustive", "--out-dir"])
        .arg(&m));
    assert!(ok, "{err}");
    let victim = imgs.join(NAMES[1]);
    let before = std::fs::read(&victim).unwrap();
    let npz = |name: &str| feats.join(name.replace(".png", ".npz"));
    let cases: Vec<(&str, Command)> = vec![
        ("pairs", {
            let mut c = descl();
            c.arg("pairs")
                .arg(&feats)
                .arg("--exhaustive")
                .arg("--out")
                .arg(&victim);
            c
        }),
        ("match", {
            let mut c = descl();
            c.arg("match")
                .arg(npz(NAMES[0]))
                .arg(npz(NAMES[1]))
                .arg("--out")
                .arg(&victim);
            c
        }),
        ("sfm merge", {
            let mut c = descl();
            c.args(["sfm", "merge", "--features"])
                .arg(&feats)
                .arg("--matches")
                .arg(&m)
                .arg("--database")
                .arg(&victim)
                .arg("--overwrite");
            c
        }),
    ];
    for (what, mut cmd) in cases {
        let (ok, _, err) = run(&mut cmd);
        assert!(!ok, "{what} wrote over the picture: {err}");
        assert!(
            err.contains(&victim.display().to_string()) && err.contains("picture"),
            "{what}: {err}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), before, "{what} changed it");
    }
    // A matches file of the reference run is read by `pairs --reference`.
    let reference_file = std::fs::read_dir(&m)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "npz"))
        .unwrap();
    let kept = std::fs::read(&reference_file).unwrap();
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .args(["--retrieval", "1", "--reference"])
        .arg(&m)
        .arg("--out")
        .arg(&reference_file));
    assert!(!ok, "pairs wrote over its reference: {err}");
    assert!(err.contains("is an input of this command"), "{err}");
    assert_eq!(std::fs::read(&reference_file).unwrap(), kept);
}

/// Critical (second hostile round): `descl bench --json` or `--md` inside a data folder
/// replaced an Oxford image or an HPatches homography file with the report, exit 0, and the
/// next benchmark failed on it. A report path inside a data folder is refused before any work.
#[test]
fn no_bench_report_lands_in_the_benchmark_data() {
    let dir = tempfile::tempdir().unwrap();
    let oxford = dir.path().join("oxford");
    let seq = oxford.join("wall");
    std::fs::create_dir_all(&seq).unwrap();
    let homography = seq.join("H1to2p");
    std::fs::write(&homography, "1 0 0\n0 1 0\n0 0 1\n").unwrap();
    let before = std::fs::read(&homography).unwrap();
    for flag in ["--json", "--md"] {
        let (ok, _, err) = run(descl()
            .args(["bench", "sequences", "-m", "sift", "--oxford"])
            .arg(&oxford)
            .arg("--hpatches-sequences")
            .arg(&oxford)
            .arg(flag)
            .arg(&homography));
        assert!(!ok, "{flag}: {err}");
        assert!(
            err.contains("inside the benchmark data folder"),
            "{flag}: {err}"
        );
        assert_eq!(std::fs::read(&homography).unwrap(), before);
    }
    // Second round (medium): `bench sfm --sfm-keep` wrote databases and models into a scene's
    // images folder. Refused as the reports are.
    let strecha = dir.path().join("strecha");
    let images = strecha.join("scene/images");
    std::fs::create_dir_all(&images).unwrap();
    let (ok, _, err) = run(descl()
        .args(["bench", "sfm", "-m", "sift", "--strecha"])
        .arg(&strecha)
        .arg("--sfm-keep")
        .arg(&images));
    assert!(
        !ok && err.contains("--sfm-keep") && err.contains("inside the benchmark data folder"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&images).unwrap().count(), 0);
}

/// Second round (medium): `descl sfm --random-seed` without --reconstruct was refused as a
/// mapping flag, though it seeds the verification (the database differs by seed); and
/// `--refine-intrinsics` without --reconstruct was ignored without a word. The seed makes a
/// database of its own draw; --refine-intrinsics needs a mapping.
#[test]
fn sfm_flags_without_reconstruct_do_what_they_say_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(dir.path().join("seeded.db"))
        .args(SIFT)
        .args(["--random-seed", "1"]));
    assert!(ok, "{err}");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(dir.path().join("refined.db"))
        .args(SIFT)
        .args(["--camera-params", "150,80,60,0", "--refine-intrinsics"]));
    assert!(
        !ok && err.contains("--refine-intrinsics") && err.contains("--reconstruct"),
        "{err}"
    );
    assert!(!dir.path().join("refined.db").exists());
}

/// Third round (medium): `descl match --images IMAGES --format h5 --out-dir X` into the folder
/// of an npz match run replaced that run's plan and left its pair files beside `matches.h5`;
/// `descl sfm merge` then refused the npz files as "made under other settings", blaming the
/// right files for the wrong plan. A run of one format into a folder of the other's files is
/// refused before it writes anything, in both directions, --overwrite or not.
#[cfg(feature = "h5")]
#[test]
fn a_match_run_of_another_format_leaves_the_folder_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let set_match = |out: &Path, format: &str, extra: &[&str]| {
        run(descl()
            .args(["match", "--exhaustive", "--format", format, "--images"])
            .arg(&imgs)
            .arg("--out-dir")
            .arg(out)
            .args(SIFT)
            .args(extra))
    };
    for (first, second) in [("npz", "h5"), ("h5", "npz")] {
        let out = dir.path().join(format!("{first}-then-{second}"));
        let (ok, _, err) = set_match(&out, first, &[]);
        assert!(ok, "{err}");
        let before = files_with_bytes(&out);
        for extra in [&[][..], &["--overwrite"][..]] {
            let (ok, _, err) = set_match(&out, second, extra);
            assert!(
                !ok,
                "a {second} run into a folder of {first} files succeeded: {err}"
            );
            assert!(
                err.contains(&format!("holds the {first} files of another descl run"))
                    && err.contains("another --out-dir"),
                "{err}"
            );
            assert_eq!(files_with_bytes(&out), before, "{err}");
        }
    }
}

/// Third round (medium): `descl sfm map ... --overwrite` removed earlier model folders whole,
/// so a user's file in one (notes, undistorted pictures) went with it, unnamed. A model folder
/// holding anything the mapper does not write is refused, naming it, and left as it was.
#[test]
fn overwrite_replaces_no_model_folder_holding_files_of_the_user() {
    let Some((dir, imgs, db)) =
        sift_database_or_skip("overwrite_replaces_no_model_folder_holding_files_of_the_user")
    else {
        return;
    };
    let sparse = dir.path().join("sparse");
    let (ok, err) = sfm_map(&db, &imgs, &sparse);
    assert!(ok, "{err}");
    let notes = sparse.join("0").join("notes.txt");
    std::fs::write(&notes, b"precious").unwrap();
    let remap = || {
        run(descl()
            .args(["sfm", "map"])
            .arg(&db)
            .arg("--images")
            .arg(&imgs)
            .arg("--sparse-dir")
            .arg(&sparse)
            .arg("--overwrite"))
    };
    let (ok, _, err) = remap();
    assert!(
        !ok && err.contains("notes.txt") && err.contains("no mapper writes"),
        "{err}"
    );
    assert_eq!(std::fs::read(&notes).unwrap(), b"precious");
    // Without the user's file, the model is the mapper's alone and --overwrite replaces it.
    std::fs::remove_file(&notes).unwrap();
    let (ok, _, err) = remap();
    assert!(ok, "{err}");
}

/// Third round (medium): a folder of two scenes (six fountain-P11 and four Herz-Jesus-P8
/// photographs) gave no model at all: the larger scene's 6 images are fewer than COLMAP's
/// min_model_size rule asks of 10 (8), applied by descl to the largest model so that its
/// fallbacks run, while pycolmap's own pipeline keeps that 6-image model. When no run makes a
/// model the rule's size, the largest one made is kept, with a warning naming the way out.
#[test]
fn a_folder_of_two_scenes_keeps_the_larger_scenes_model() {
    let Some(root) =
        common::data_and_colmap_or_skip("a_folder_of_two_scenes_keeps_the_larger_scenes_model")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    std::fs::create_dir_all(&imgs).unwrap();
    let scenes = [("fountain-P11", "f", 0..6), ("Herz-Jesus-P8", "h", 0..4)];
    for (scene, prefix, range) in scenes {
        for i in range {
            let from = root.join(format!("strecha/{scene}/images/{i:04}.jpg"));
            // 512 px wide (from 3072): seconds, not minutes, and still two sure scenes.
            let small =
                image::open(&from)
                    .unwrap()
                    .resize(512, 512, image::imageops::FilterType::Triangle);
            small
                .save(imgs.join(format!("{prefix}{i:04}.png")))
                .unwrap();
        }
    }
    let sparse = dir.path().join("sparse");
    let (ok, stdout, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(dir.path().join("two.db"))
        .args(["--reconstruct", "--json", "--sparse-dir"])
        .arg(&sparse)
        .args(SIFT));
    assert!(ok, "no model of the larger scene: {err}");
    assert!(
        err.contains("min_model_size") && err.contains("map each scene's images on their own"),
        "{err}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let recon = &json["reconstruction"];
    let registered = recon["registered_images"].as_u64().unwrap();
    assert!(
        (3..8).contains(&registered),
        "the kept model should be one scene's: {recon}"
    );
    assert_eq!(
        recon["below_min_model_size"],
        serde_json::json!(8),
        "{recon}"
    );
    let names: Vec<&str> = recon["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with('f')) || names.iter().all(|n| n.starts_with('h')),
        "one model of two scenes: {names:?}"
    );
}

/// A stand-in for `DESCL_PYTHON` at `dir/name`: it answers descl's pycolmap version check as
/// pycolmap 4.2.1 would, and otherwise runs the shell lines `then` (in place of the mapper).
#[cfg(target_os = "linux")]
fn stand_in_python(dir: &Path, name: &str, then: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\n[ \"$2\" = 'import pycolmap; print(pycolmap.__version__)' ] && {{ echo 4.2.1; exit 0; }}\n{then}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Third round (low): `kill -9` of descl during `descl sfm map` left the mapper (a Python
/// running pycolmap) running on, orphaned, into a staging folder. The mapper's process now
/// dies with descl. Python here is a stand-in that answers the version check as pycolmap
/// 4.2.1 would and otherwise records its pid and sleeps, so that descl is killed
/// while its mapper certainly runs.
#[cfg(target_os = "linux")]
#[test]
fn a_killed_descl_leaves_no_mapper_running() {
    let Some((dir, imgs, db)) = sift_database_or_skip("a_killed_descl_leaves_no_mapper_running")
    else {
        return;
    };
    let pid_file = dir.path().join("mapper.pid");
    let python = stand_in_python(
        dir.path(),
        "python",
        &format!("echo $$ > {}\nexec sleep 120", pid_file.display()),
    );
    let mut descl_run = descl()
        .args(["sfm", "map"])
        .arg(&db)
        .arg("--images")
        .arg(&imgs)
        .arg("--sparse-dir")
        .arg(dir.path().join("sparse"))
        .args(["--mapper", "pycolmap"])
        .env("DESCL_PYTHON", &python)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !pid_file.exists()
        || std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .is_empty()
    {
        assert!(started.elapsed().as_secs() < 60, "the mapper never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mapper = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    descl_run.kill().unwrap();
    descl_run.wait().unwrap();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{mapper}/stat"))
            .is_ok_and(|s| s.split(' ').nth(2).is_none_or(|state| state != "Z"))
    };
    let killed = std::time::Instant::now();
    while alive() && killed.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let still = alive();
    if still {
        let _ = Command::new("kill").args(["-9", &mapper]).status();
    }
    assert!(
        !still,
        "the mapper (pid {mapper}) ran on after descl was killed"
    );
}

/// Third round (low): `descl extract IMAGES --out F` replaced files in F that are no features
/// files (a user's numpy archive, a text file named `0001.npz`), exit 0. Refused before any
/// work, the folder left as it was; a features file cut short is still extracted again.
#[test]
fn extract_replaces_no_file_that_is_not_a_features_file() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let out = dir.path().join("feats");
    std::fs::create_dir_all(&out).unwrap();
    let stem = |n: &str| n.trim_end_matches(".png").to_string();
    let notes = out.join(format!("{}.npz", stem(NAMES[1])));
    std::fs::write(&notes, b"my notes").unwrap();
    let (ok, err) = extract(&imgs, &out, &[]);
    assert!(!ok && err.contains(&notes.display().to_string()), "{err}");
    assert_eq!(std::fs::read(&notes).unwrap(), b"my notes");
    assert_eq!(common::files_in(&out).len(), 1, "{err}");
    std::fs::remove_file(&notes).unwrap();
    let (ok, err) = extract(&imgs, &out, &[]);
    assert!(ok, "{err}");
    let cut = out.join(format!("{}.npz", stem(NAMES[2])));
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let (ok, err) = extract(&imgs, &out, &["--resume"]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&cut).unwrap(), bytes);
}

/// Third round (low): `descl match --images` of a folder holding `a.jpg` and `a.png` blamed
/// "image names containing `__`"; the cause, one stem for two images, is named.
#[test]
fn two_images_of_one_stem_are_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    std::fs::copy(imgs.join(NAMES[0]), imgs.join("0000.jpg")).unwrap();
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--images"])
        .arg(&imgs)
        .arg("--out-dir")
        .arg(dir.path().join("m"))
        .args(SIFT));
    assert!(
        !ok && !err.contains("containing `__`")
            && err.contains("0000.jpg")
            && err.contains("0000.png"),
        "{err}"
    );
}

/// Third round (low): a pairs list, a database or a match picture named `*.npz` inside a
/// features folder was written, exit 0, and the next run over the folder failed on it as a
/// features file. Every output of another kind named `.npz` is refused before any work.
#[test]
fn no_output_of_another_kind_is_named_as_a_features_file() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, feats) = sift_features(dir.path());
    let before = common::files_in(&feats);
    let a = feats.join("0000.npz");
    let b = feats.join("0001.npz");
    let cases: [(&str, Vec<std::ffi::OsString>); 3] = [
        (
            "list",
            vec![
                "pairs".into(),
                feats.clone().into(),
                "--exhaustive".into(),
                "--out".into(),
                feats.join("x.npz").into(),
            ],
        ),
        (
            "match picture",
            vec![
                "match".into(),
                a.clone().into(),
                b.clone().into(),
                "--viz".into(),
                feats.join("z.npz").into(),
            ],
        ),
        (
            "database",
            vec![
                "sfm".into(),
                imgs.clone().into(),
                "-m".into(),
                "sift".into(),
                "--database".into(),
                feats.join("w.npz").into(),
            ],
        ),
    ];
    for (what, args) in cases {
        let (ok, _, err) = run(descl().args(&args));
        assert!(
            !ok && err.contains(what) && err.contains(".npz"),
            "{what}: {err}"
        );
        assert_eq!(common::files_in(&feats), before, "{what}: {err}");
    }
}

/// Third round (high): a database camera with a NaN or 1e-4 px focal length (an edited
/// database, another tool's; the 1e-4 also through `--cameras-file`) sent pycolmap's mapper
/// into a search that did not end, and a negative focal length was held and "mapped". Every
/// database camera is checked as `--camera-params` is before mapping, and a focal length
/// outside 0.04–100 × the image's longer side is refused wherever it is given.
#[test]
fn a_camera_that_cannot_be_right_is_refused_before_mapping() {
    let Some((dir, imgs, db)) =
        sift_database_or_skip("a_camera_that_cannot_be_right_is_refused_before_mapping")
    else {
        return;
    };
    let f64_blob = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    for (what, params) in [
        ("NaN", [f64::NAN, 80.0, 60.0, 0.0]),
        ("1e-4", [1e-4, 80.0, 60.0, 0.0]),
        ("negative", [-500.0, 80.0, 60.0, 0.0]),
        ("principal point", [200.0, 5000.0, -160.0, 0.0]),
    ] {
        let edited = dir.path().join(format!("{what}.db"));
        std::fs::copy(&db, &edited).unwrap();
        let conn = rusqlite::Connection::open(&edited).unwrap();
        conn.execute(
            "UPDATE cameras SET params = ?1, prior_focal_length = 1 WHERE camera_id = 1",
            [f64_blob(&params)],
        )
        .unwrap();
        drop(conn);
        let sparse = dir.path().join(format!("{what}-sparse"));
        let started = std::time::Instant::now();
        let (ok, err) = sfm_map(&edited, &imgs, &sparse);
        assert!(
            !ok && err.contains("camera 1") && err.contains(&edited.display().to_string()),
            "{what}: {err}"
        );
        assert!(
            started.elapsed().as_secs() < 30,
            "{what}: not refused before mapping"
        );
        assert!(!sparse.exists(), "{what}: {err}");
    }
    let cameras = dir.path().join("cameras.txt");
    let lines: String = NAMES
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let f = if i == 1 {
                "1e-4".to_string()
            } else {
                "200".to_string()
            };
            format!(
                "{n} SIMPLE_RADIAL {} 120 {f} {} 60 0\n",
                160 + 16 * i,
                80 + 8 * i
            )
        })
        .collect();
    std::fs::write(&cameras, lines).unwrap();
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(dir.path().join("typo.db"))
        .arg("--cameras-file")
        .arg(&cameras)
        .args(SIFT));
    assert!(!ok && err.contains("focal length of 0.0001"), "{err}");
    assert!(!dir.path().join("typo.db").exists());
}

/// Third round (medium): `descl bench pose` scored images of another size than their
/// ground-truth cameras' (480×320 copies against K for 1536×1024) as AUC 0.0, exit 0. The
/// image's size is checked against the camera file's, naming both.
#[test]
fn bench_pose_refuses_images_of_another_size_than_their_cameras() {
    let Some(root) = common::data_root_or_skip("bench_pose_refuses_images_of_another_size") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let scene = dir.path().join("strecha").join("small");
    std::fs::create_dir_all(scene.join("images")).unwrap();
    std::fs::create_dir_all(scene.join("cameras")).unwrap();
    for name in ["0000.jpg", "0001.jpg"] {
        let from = root.join("strecha/fountain-P11");
        image::open(from.join("images").join(name))
            .unwrap()
            .resize(480, 480, image::imageops::FilterType::Triangle)
            .save(scene.join("images").join(name))
            .unwrap();
        let camera = format!("{name}.camera");
        std::fs::copy(
            from.join("cameras").join(&camera),
            scene.join("cameras").join(&camera),
        )
        .unwrap();
    }
    let (ok, _, err) = run(descl()
        .args(["bench", "pose", "-m", "sift", "--strecha"])
        .arg(dir.path().join("strecha")));
    assert!(
        !ok && err.contains("0000.jpg.camera") && err.contains("1536×1024"),
        "{err}"
    );
}

/// Third round (medium): `descl sfm map --overwrite` removed the earlier model before its
/// mapper ran, so a run that failed, or was killed, left neither the earlier model nor a new
/// one. The earlier model is set aside until the new one is in place: a failed run puts it
/// back, and the next run puts back what a killed one set aside.
#[cfg(target_os = "linux")]
#[test]
fn an_overwrite_that_fails_or_is_killed_keeps_the_earlier_model() {
    let Some((dir, imgs, db)) =
        sift_database_or_skip("an_overwrite_that_fails_or_is_killed_keeps_the_earlier_model")
    else {
        return;
    };
    let sparse = dir.path().join("sparse");
    let (ok, err) = sfm_map(&db, &imgs, &sparse);
    assert!(ok, "{err}");
    let model = || {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(sparse.join("0"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        files.sort();
        files
    };
    let before = model();
    // A Python that passes pycolmap's version check, then fails (or sleeps, to be killed).
    let python = |name: &str, then: &str| stand_in_python(dir.path(), name, then);
    let overwrite = |python: &Path| {
        let mut cmd = descl();
        cmd.args(["sfm", "map"])
            .arg(&db)
            .arg("--images")
            .arg(&imgs)
            .arg("--sparse-dir")
            .arg(&sparse)
            .args(["--mapper", "pycolmap", "--overwrite"])
            .env("DESCL_PYTHON", python);
        cmd
    };
    let failing = python("failing", "echo 'mapper crashed' >&2; exit 1");
    let (ok, _, err) = run(&mut overwrite(&failing));
    assert!(!ok && err.contains("mapper crashed"), "{err}");
    assert_eq!(
        model(),
        before,
        "a failed --overwrite lost the earlier model: {err}"
    );
    let started = dir.path().join("started");
    let sleeping = python(
        "sleeping",
        &format!("touch {}; exec sleep 120", started.display()),
    );
    let mut child = overwrite(&sleeping)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !started.exists() {
        assert!(t.elapsed().as_secs() < 60, "the mapper never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!sparse.join("0").exists(), "the model was not set aside");
    // The next run puts it back, and (without --overwrite) refuses to map over it.
    let (ok, err) = sfm_map(&db, &imgs, &sparse);
    assert!(!ok && err.contains("earlier run"), "{err}");
    assert_eq!(model(), before, "{err}");
}

/// The features file of `feats` that the process `pid` holds open now, if any (its name).
#[cfg(target_os = "linux")]
fn open_features_file(pid: u32, feats: &Path) -> Option<String> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .find(|target| target.parent() == Some(feats) && target.extension() == Some("npz".as_ref()))
        .and_then(|target| Some(target.file_name()?.to_string_lossy().into_owned()))
}

/// Issue 55, the long state-machine run's seed 630840: a `pairs --retrieval` beside an
/// `extract` of other settings into its features folder read some files of the one extraction
/// and some of the other (retrieval reads each file twice: codebook, then aggregation), and
/// wrote pairs of a set that no extraction made, exit 0. A pairs file records nothing of the
/// features it was chosen from, so the run now checks that nothing it read changed meanwhile
/// (`descl::io::snapshot`) and writes nothing. Made deterministic here: the run is stopped
/// while it holds a features file open, that file is replaced (by a rename, as every writer of
/// descl replaces one) with another extraction's, and the run goes on.
#[cfg(target_os = "linux")]
#[test]
fn pairs_read_across_a_replaced_features_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (feats, other) = two_extractions(dir.path(), false);
    let out = dir.path().join("pairs.txt");
    let mut pairs = descl();
    pairs
        .arg("pairs")
        .arg(&feats)
        .args(["--retrieval", "3", "--out"])
        .arg(&out);
    assert_refused_across_a_replacement(&mut pairs, &feats, &other, Some(&out));
}

/// Hostile round of 9628fb4, H-1: `match --images FEATS` reads features files again where the
/// set is larger than --max-resident-images; an extraction of another set replacing them
/// meanwhile gave pair files of two sets, and both runs exited 0. The match checks its
/// snapshot of the set after the run and fails, naming the file (the pair files it wrote
/// record the features they used, so the next run redoes the stale ones).
#[cfg(target_os = "linux")]
#[test]
fn match_read_across_a_replaced_features_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (feats, other) = two_extractions(dir.path(), true);
    let mut matches = descl();
    matches
        .args(["match", "--images"])
        .arg(&feats)
        .args([
            "--sequential",
            "2",
            "--max-resident-images",
            "2",
            "--out-dir",
        ])
        .arg(dir.path().join("m"));
    assert_refused_across_a_replacement(&mut matches, &feats, &other, None);
}

/// The pictures of `imgs` mirrored, under their names in `into` (made): another set of the
/// same names and sizes.
fn mirrored_pictures(imgs: &Path, into: &Path) -> PathBuf {
    std::fs::create_dir(into).unwrap();
    for entry in std::fs::read_dir(imgs).unwrap() {
        let path = entry.unwrap().path();
        image::open(&path)
            .unwrap()
            .fliph()
            .save(into.join(path.file_name().unwrap()))
            .unwrap();
    }
    into.to_path_buf()
}

/// [`twelve_images_with_features`] in `dir/feats`, and the same settings' features of their
/// mirrored pictures in `dir/other`: two features sets of one set's names.
fn two_features_sets_of_one_names(dir: &Path) -> (PathBuf, PathBuf) {
    let (imgs, feats) = twelve_images_with_features(dir);
    let mirrored = mirrored_pictures(&imgs, &dir.join("mirrored"));
    let other = dir.join("other");
    let (ok, err) = extract(&mirrored, &other, &[]);
    assert!(ok, "{err}");
    (feats, other)
}

/// 40 images extracted into `feats` (1000 keypoints) and again into `other`: with 60
/// keypoints, or with `other_pictures` with the same settings from the pictures mirrored
/// (another set of the same names, as the hostile round's).
fn two_extractions(dir: &Path, other_pictures: bool) -> (PathBuf, PathBuf) {
    let imgs = numbered_images(dir, 40);
    let mirrored = mirrored_pictures(&imgs, &dir.join("mirrored"));
    let (feats, other) = (dir.join("feats"), dir.join("other"));
    let (ok, err) = extract(&imgs, &feats, &["--max-keypoints", "1000"]);
    assert!(ok, "{err}");
    let (ok, err) = if other_pictures {
        extract(&mirrored, &other, &["--max-keypoints", "1000"])
    } else {
        extract(&imgs, &other, &["--max-keypoints", "60"])
    };
    assert!(ok, "{err}");
    (feats, other)
}

/// Runs `cmd` until it is caught 3 times holding a features file of `feats` open: stopped
/// there, that file replaced (by a rename, as every writer of descl replaces one) with
/// `other`'s, and the run let go on. Each time it must fail naming the file, with no `out`
/// written; the file is put back for the next attempt.
fn assert_refused_across_a_replacement(
    cmd: &mut Command,
    feats: &Path,
    other: &Path,
    out: Option<&Path>,
) {
    let dir = feats.parent().unwrap();
    let mut caught = 0;
    for _ in 0..50 {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let signal = |s: &str| {
            let pid = pid.to_string();
            assert!(Command::new("kill")
                .args([s, &pid])
                .status()
                .unwrap()
                .success())
        };
        let open = loop {
            if let Some(name) = open_features_file(pid, feats) {
                signal("-STOP");
                break Some(name);
            }
            if child.try_wait().unwrap().is_some() {
                break None;
            }
        };
        let Some(name) = open else {
            // Finished between two looks: a run that read nothing replaced; try again.
            if let Some(out) = out {
                let _ = std::fs::remove_file(out);
            }
            continue;
        };
        let kept = dir.join("kept.npz");
        std::fs::copy(feats.join(&name), &kept).unwrap();
        let replacement = dir.join("replacement.npz");
        std::fs::copy(other.join(&name), &replacement).unwrap();
        std::fs::rename(&replacement, feats.join(&name)).unwrap();
        signal("-CONT");
        let done = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(
            !done.status.success() && err.contains(&name),
            "read {name} across its replacement and exited {:?}: {err}",
            done.status
        );
        if let Some(out) = out {
            assert!(!out.exists(), "a refused run wrote {}", out.display());
        }
        std::fs::rename(&kept, feats.join(&name)).unwrap();
        caught += 1;
        if caught == 3 {
            return;
        }
    }
    panic!("caught holding a features file open only {caught} times of 50");
}

/// Hostile round of 4aa9455, F14: `pairs --out` replaced any existing file that was not of a
/// kind descl protects (the user's notes, a ground-truth camera file), exit 0; and so did
/// `bench --json/--md` (a README, another program's JSON). Now each replaces only an earlier
/// output of its kind, and refuses before any work.
#[test]
fn a_pairs_list_or_report_replaces_only_its_own_kind() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "my important notes\n").unwrap();
    let pairs = |out: &Path| {
        run(descl()
            .arg("pairs")
            .arg(&imgs)
            .args(["--exhaustive", "--out"])
            .arg(out))
    };
    let (ok, _, err) = pairs(&notes);
    assert!(!ok && err.contains("notes.txt"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "my important notes\n"
    );
    // Two words a line (hostile round of 3fe5bfb, F4): a to-do list, another set's pairs.
    for (name, text) in [
        ("todo.txt", "buy milk\ncall mom\n"),
        ("other.txt", "x.jpg y.jpg\n"),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let (ok, _, err) = pairs(&file);
        assert!(!ok && err.contains(name), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    }
    // An earlier pairs list is replaced (a rerun).
    let out = dir.path().join("pairs.txt");
    for _ in 0..2 {
        let (ok, _, err) = pairs(&out);
        assert!(ok, "{err}");
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 3);
    for (flag, name, text) in [
        ("--md", "README.md", "# my project\n"),
        ("--json", "p.json", "{\"precious\": 1}"),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let data = dir.path().join("strecha");
        std::fs::create_dir_all(&data).unwrap();
        let (ok, _, err) = run(descl()
            .args(["bench", "-m", "sift", "--strecha"])
            .arg(&data)
            .arg(flag)
            .arg(&file));
        assert!(!ok && err.contains(name), "{flag}: {err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    }
}

/// Hostile round of 4aa9455, F1 and F2: `sfm map` held no lock on the database it maps, so
/// `sfm merge --overwrite` (and `sfm --reconstruct --overwrite`, which also did all its
/// extraction and matching first) replaced the database under a running map; the map exited 0
/// with the model of the old database beside the new one. The map now shares a read lock on
/// its database for its whole run: a writer of the database is refused, before any work and
/// leaving it as it was, while another map of the same database still runs beside it.
#[cfg(target_os = "linux")]
#[test]
fn no_run_replaces_the_database_a_map_is_reading() {
    let Some((dir, imgs, db)) =
        sift_database_or_skip("no_run_replaces_the_database_a_map_is_reading")
    else {
        return;
    };
    let (feats, m) = (dir.path().join("feats"), dir.path().join("m"));
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&feats, &m, &[]);
    assert!(ok, "{err}");
    let before = std::fs::read(&db).unwrap();
    let started = dir.path().join("started");
    let sleeping = stand_in_python(
        dir.path(),
        "sleeping",
        &format!("touch {}; exec sleep 120", started.display()),
    );
    let map = |python: &Path, sparse: &str| {
        let mut cmd = descl();
        cmd.args(["sfm", "map"])
            .arg(&db)
            .arg("--images")
            .arg(&imgs)
            .arg("--sparse-dir")
            .arg(dir.path().join(sparse))
            .args(["--mapper", "pycolmap"])
            .env("DESCL_PYTHON", python);
        cmd
    };
    let failing = stand_in_python(dir.path(), "failing", "echo 'mapper crashed' >&2; exit 1");
    let mut mapping = map(&sleeping, "sparse")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !started.exists() {
        assert!(t.elapsed().as_secs() < 60, "the mapper never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let reconstruct = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .args(["--overwrite", "--reconstruct"])
        .args(SIFT)
        .env("DESCL_PYTHON", &failing));
    let merge = run(descl()
        .args(["sfm", "merge", "--overwrite", "--features"])
        .arg(&feats)
        .arg("--matches")
        .arg(&m)
        .arg("--database")
        .arg(&db));
    for (what, (ok, _, err)) in [("sfm --reconstruct", reconstruct), ("merge", merge)] {
        assert!(
            !ok && err.contains("another descl run is writing or reading"),
            "{what}: {err}"
        );
        assert!(
            !err.contains("keypoints"),
            "{what} worked before refusing: {err}"
        );
        assert_eq!(
            std::fs::read(&db).unwrap(),
            before,
            "{what} replaced the database"
        );
    }
    // Another map of the same database shares it (its stand-in mapper fails at once).
    let (ok, _, err) = run(&mut map(&failing, "sparse2"));
    assert!(!ok && err.contains("mapper crashed"), "{err}");
    mapping.kill().unwrap();
    mapping.wait().unwrap();
    // With the map gone, the merge replaces the database.
    let (ok, _, err) = run(descl()
        .args(["sfm", "merge", "--overwrite", "--features"])
        .arg(&feats)
        .arg("--matches")
        .arg(&m)
        .arg("--database")
        .arg(&db));
    assert!(ok, "{err}");
}

/// Hostile round of 4aa9455, F11: an empty pairs file (a retrieval script that wrote nothing)
/// gave `match` "0 pairs: 0 matched" and `sfm` a database without pairs, both exit 0. Refused
/// now, naming the file, before any work.
#[test]
fn an_empty_pairs_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let pairs = dir.path().join("pairs.txt");
    std::fs::write(&pairs, "# only a comment\n\n").unwrap();
    let (ok, _, err) = run(descl()
        .args(["match", "--images"])
        .arg(&imgs)
        .arg("--pairs")
        .arg(&pairs)
        .arg("--out-dir")
        .arg(dir.path().join("m"))
        .args(SIFT));
    assert!(
        !ok && err.contains("pairs.txt") && err.contains("no pairs"),
        "{err}"
    );
    let db = dir.path().join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .arg("--pairs")
        .arg(&pairs)
        .args(SIFT));
    assert!(!ok && err.contains("no pairs"), "{err}");
    assert!(
        !err.contains("keypoints"),
        "refused after extraction: {err}"
    );
    assert!(!db.exists());
}

/// Hostile round of 4aa9455, F13: `match --intrinsics` took a principal point far outside the
/// image or a focal length of 1e30 ("0 inliers", exit 0) that `sfm --camera-params` refuses.
/// Now checked as the mapping's cameras are, naming the image.
#[test]
fn match_intrinsics_that_cannot_be_the_camera_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let matched = |k: &str| {
        run(descl()
            .arg("match")
            .arg(imgs.join(NAMES[0]))
            .arg(imgs.join(NAMES[1]))
            .args(["--intrinsics", k, "--out"])
            .arg(dir.path().join("m.npz"))
            .args(SIFT))
    };
    for (k, needle) in [
        ("576,576,5000,-3000", "principal point"),
        ("1e30,1e30,80,60", "focal length"),
        ("0.5,0.5,80,60", "focal length"),
    ] {
        let (ok, _, err) = matched(k);
        assert!(
            !ok && err.contains(needle) && err.contains(NAMES[0]),
            "{k}: {err}"
        );
    }
    let (ok, _, err) = matched("200,200,80,60");
    assert!(ok, "{err}");
}

/// Hostile round of 4aa9455, F12: an extract shard of other images into a folder, refused as
/// another plan's, first warned that it replaced the folder's plan (which it did not). The
/// warning now comes only once the plan is replaced.
#[test]
fn a_refused_extract_warns_of_no_plan_it_did_not_replace() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let others = small_images(&dir.path().join("others"), &["a.png", "b.png"]);
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &["--shard", "0/2"]);
    assert!(ok, "{err}");
    let (ok, err) = extract(&others, &feats, &["--shard", "1/2"]);
    assert!(!ok, "{err}");
    assert!(!err.contains("warning"), "{err}");
    // A whole run of other images replaces the plan, and says so.
    let (ok, err) = extract(&others, &feats, &[]);
    assert!(
        ok && err.contains("warning") && err.contains("listed"),
        "{err}"
    );
}

/// The peak resident memory (kB) of `cmd` run to its end, read from `/proc` while it runs.
#[cfg(target_os = "linux")]
fn peak_memory_kb(cmd: &mut Command) -> (bool, u64, String) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        let hwm = std::fs::read_to_string(&status)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .unwrap_or(0);
        peak = peak.max(hwm);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), peak, err)
}

/// Hostile round of 4aa9455, F9: a 65 KB PNG of 8190² black pixels takes 2.7 GB to extract
/// (its decoded pixels, SIFT's scale space on the 3200² work image), and every worker took one
/// at once: a folder of them asked for 2.7 GB × the core count. The images in flight now share
/// a budget of the machine's memory (`descl::memory`); here one that holds a single such image.
#[cfg(target_os = "linux")]
#[test]
fn a_folder_of_pixel_bombs_stays_within_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("bombs");
    std::fs::create_dir_all(&imgs).unwrap();
    let bomb = image::GrayImage::new(8190, 8190);
    for name in ["a.png", "b.png"] {
        bomb.save(imgs.join(name)).unwrap();
    }
    drop(bomb);
    let single = descl::memory::extraction_bytes(8190, 8190, 3200, 3200) / 1024;
    let (ok, peak, err) = peak_memory_kb(
        descl()
            .arg("extract")
            .arg(&imgs)
            .arg("--out")
            .arg(dir.path().join("feats"))
            .args(SIFT)
            .env(
                descl::memory::MEMORY_BUDGET_ENV,
                (single / 1024).to_string(),
            ),
    );
    assert!(ok, "{err}");
    // One image's estimate, and the process's own memory (the estimate bounds the image's).
    assert!(
        peak < single + 400 * 1024,
        "{peak} kB at peak for two images of {single} kB each under a budget of one"
    );
}

/// Hostile round of c29952d, H4: `sfm map` on a database whose keypoints of one image were
/// infinite or 1e30 did not end (pycolmap's mapper searched on), and one NaN keypoint gave a
/// model of "mean reprojection error NaN px" with exit 0. Keypoints are now checked before
/// mapping as the cameras are: finite, inside their image, a blob of their rows.
#[test]
fn keypoints_no_mapper_can_use_are_refused_before_mapping() {
    let Some((_dir, imgs, db)) =
        sift_database_or_skip("keypoints_no_mapper_can_use_are_refused_before_mapping")
    else {
        return;
    };
    for (what, edit) in [
        ("inf", "every y"),
        ("far", "every x"),
        ("nan", "one x"),
        ("short", "blob"),
    ] {
        let edited = edited_database(&db, what, |conn| {
            let (rows, data): (i64, Vec<u8>) = conn
                .query_row(
                    "SELECT rows, data FROM keypoints WHERE image_id = 2",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            let mut values: Vec<f32> = data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            match what {
                "inf" => values
                    .chunks_exact_mut(6)
                    .for_each(|k| k[1] = f32::INFINITY),
                "far" => values.chunks_exact_mut(6).for_each(|k| k[0] = 1e30),
                "nan" => values[6 * (rows as usize / 2)] = f32::NAN,
                _ => values.truncate(values.len() - 3),
            }
            let blob: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            conn.execute("UPDATE keypoints SET data = ?1 WHERE image_id = 2", [blob])
                .unwrap();
        });
        let named = edited.display().to_string();
        assert_refused_before_mapping(
            &edited,
            &imgs,
            &[&named, NAMES[1]],
            &format!("{what} ({edit})"),
        );
    }
}

/// A copy of the database `db` beside it, named `what`.db, edited by `edit`.
fn edited_database(db: &Path, what: &str, edit: impl FnOnce(&rusqlite::Connection)) -> PathBuf {
    let edited = db.with_file_name(format!("{what}.db"));
    std::fs::copy(db, &edited).unwrap();
    edit(&rusqlite::Connection::open(&edited).unwrap());
    edited
}

/// `descl sfm map DB --images IMAGES` fails before any mapping (within 30 s), naming each of
/// `needles`, and leaves no sparse folder.
fn assert_refused_before_mapping(db: &Path, imgs: &Path, needles: &[&str], case: &str) {
    let sparse = imgs.with_file_name(format!(
        "{}-{}.sparse",
        db.file_stem().unwrap().to_string_lossy(),
        imgs.file_name().unwrap().to_string_lossy()
    ));
    let started = std::time::Instant::now();
    let (ok, err) = sfm_map(db, imgs, &sparse);
    assert!(
        !ok && needles.iter().all(|n| err.contains(n)),
        "{case}: {err}"
    );
    assert!(
        started.elapsed().as_secs() < 30,
        "{case}: not refused before mapping"
    );
    assert!(!sparse.exists(), "{case}: {err}");
}

/// Hostile round of 3fe5bfb, F3: `sfm map` handed the mapper verified pairs whose inlier
/// indices lie past their images' keypoints, a blob cut short, or a pair of an image the
/// database lacks; COLMAP and pycolmap read them without bounds checks. They are refused before
/// mapping, naming the database and the pair.
#[test]
fn pairs_indexing_keypoints_no_image_has_are_refused_before_mapping() {
    let Some((_dir, imgs, db)) =
        sift_database_or_skip("pairs_indexing_keypoints_no_image_has_are_refused_before_mapping")
    else {
        return;
    };
    for what in ["past", "short", "orphan", "reversed"] {
        let edited = edited_database(&db, what, |conn| {
            let (pair, rows, mut data): (i64, i64, Vec<u8>) = conn
                .query_row(
                    "SELECT pair_id, rows, data FROM two_view_geometries WHERE rows > 0 LIMIT 1",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap();
            let (sql, value) = match what {
                "past" => {
                    let last = 8 * (rows as usize - 1);
                    data[last..last + 4].copy_from_slice(&1_000_000u32.to_le_bytes());
                    ("data", rusqlite::types::Value::Blob(data))
                }
                "short" => {
                    data.truncate(data.len() - 8);
                    ("data", rusqlite::types::Value::Blob(data))
                }
                "orphan" => (
                    "pair_id",
                    rusqlite::types::Value::Integer(descl::io::colmap::pair_id(1, 99)),
                ),
                // Hostile round of 9628fb4, M-3: the ids of the pair swapped, (b, a).
                _ => {
                    let (a, b) = descl::io::colmap::image_ids(pair);
                    (
                        "pair_id",
                        rusqlite::types::Value::Integer(b * descl::io::colmap::MAX_NUM_IMAGES + a),
                    )
                }
            };
            conn.execute(
                &format!("UPDATE two_view_geometries SET {sql} = ?1 WHERE pair_id = ?2"),
                rusqlite::params![value, pair],
            )
            .unwrap();
        });
        let named = edited.display().to_string();
        assert_refused_before_mapping(&edited, &imgs, &[&named, "two_view_geometries"], what);
    }
}

/// Hostile round of 3fe5bfb, F5: one command's two outputs naming one file (`match --out X
/// --viz X`, `bench --json X --md X`, `sfm --database X --sparse-dir X`) exited 0 with the
/// second written over the first. They are refused before any work, naming both flags, and
/// nothing is written.
#[test]
fn one_command_refuses_two_outputs_naming_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, feats) = sift_features(dir.path());
    let both = dir.path().join("both.png");
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg(feats.join("0000.npz"))
        .arg(feats.join("0001.npz"))
        .arg("--out")
        .arg(&both)
        .arg("--viz")
        .arg(dir.path().join(".").join("both.png")));
    assert!(
        !ok && err.contains("--out") && err.contains("--viz") && err.contains("name one file"),
        "{err}"
    );
    assert!(!both.exists(), "{err}");

    let oxford = dir.path().join("oxford");
    std::fs::create_dir_all(oxford.join("wall")).unwrap();
    let report = dir.path().join("report");
    let (ok, _, err) = run(descl()
        .args(["bench", "sequences", "-m", "sift", "--oxford"])
        .arg(&oxford)
        .arg("--hpatches-sequences")
        .arg(&oxford)
        .arg("--json")
        .arg(&report)
        .arg("--md")
        .arg(&report));
    assert!(
        !ok && err.contains("--json") && err.contains("--md") && err.contains("name one file"),
        "{err}"
    );
    assert!(!report.exists(), "{err}");

    let db = dir.path().join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .args(SIFT)
        .arg("--database")
        .arg(&db)
        .arg("--reconstruct")
        .arg("--sparse-dir")
        .arg(&db));
    assert!(
        !ok && err.contains("--database") && err.contains("--sparse-dir"),
        "{err}"
    );
    assert!(!db.exists(), "{err}");
}

/// A numpy archive of `members` (float arrays of 4 values) at `path`, as another tool writes.
fn numpy_archive(path: &Path, members: &[&str]) {
    use descl::io::npz::{write_npz, NpyArray, NpyData};
    let array = NpyArray {
        shape: vec![4],
        data: NpyData::F32(vec![0.0, 1.0, 2.0, 3.0]),
    };
    let arrays: Vec<(&str, &NpyArray)> = members.iter().map(|m| (*m, &array)).collect();
    write_npz(std::fs::File::create(path).unwrap(), &arrays, path).unwrap();
}

/// Hostile round of c29952d, H2: `match --out` replaced another tool's archive holding a
/// `matches` array (SuperGlue's `*_matches.npz`: keypoints0, keypoints1, matches,
/// match_confidence), and `match --out-dir` any archive named as a pair file, exit 0. Only
/// descl's own matches file (all its arrays) is replaced now; the others are refused, naming
/// the file.
#[test]
fn match_replaces_no_archive_of_another_tool() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let superglue = dir.path().join("sg_matches.npz");
    numpy_archive(
        &superglue,
        &["keypoints0", "keypoints1", "matches", "match_confidence"],
    );
    let kept = std::fs::read(&superglue).unwrap();
    let (ok, _, err) = run(descl()
        .arg("match")
        .arg(imgs.join(NAMES[0]))
        .arg(imgs.join(NAMES[1]))
        .arg("--out")
        .arg(&superglue)
        .args(SIFT));
    assert!(!ok && err.contains("sg_matches.npz"), "{err}");
    assert_eq!(std::fs::read(&superglue).unwrap(), kept);
    // In an --out-dir, under a pair file's name.
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    let m = dir.path().join("m");
    std::fs::create_dir_all(&m).unwrap();
    let foreign = m.join("0000__0001.npz");
    numpy_archive(&foreign, &["weights"]);
    let kept = std::fs::read(&foreign).unwrap();
    let (ok, err) = match_set(&feats, &m, &[]);
    assert!(!ok && err.contains("0000__0001.npz"), "{err}");
    assert_eq!(std::fs::read(&foreign).unwrap(), kept);
    // descl's own matches file is replaced by a rerun, an unverified pair's too (no inliers
    // or model arrays: taken for another tool's by the first fix, hostile round of 3fe5bfb,
    // F10).
    let unverified = dir.path().join("unverified.npz");
    for _ in 0..2 {
        let (ok, _, err) = run(descl()
            .arg("match")
            .arg(feats.join("0000.npz"))
            .arg(feats.join("0001.npz"))
            .args(["--geometry", "none", "--out"])
            .arg(&unverified));
        assert!(ok, "{err}");
    }
    std::fs::remove_file(&foreign).unwrap();
    for _ in 0..2 {
        let (ok, err) = match_set(&feats, &m, &["--overwrite"]);
        assert!(ok, "{err}");
    }
}

/// Hostile round of c29952d, H3: `match --format h5` wrote into a `matches.h5` that hloc's
/// own matcher made (pair groups without descl's provenance), replacing the user's pairs as
/// "stale results", exit 0; `features.h5` of another tool's was already refused. Now refused,
/// naming the file, and the file is left as it was.
#[cfg(feature = "h5")]
#[test]
fn an_h5_match_writes_into_no_matches_file_of_another_tool() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let out = dir.path().join("hloc");
    let (ok, err) = extract(&imgs, &out, &["--format", "h5"]);
    assert!(ok, "{err}");
    let matches = out.join("matches.h5");
    {
        let file = hdf5_metno::File::create(&matches).unwrap();
        let pair = file
            .create_group(NAMES[0])
            .unwrap()
            .create_group(NAMES[1])
            .unwrap();
        pair.new_dataset_builder()
            .with_data(&[-1i16; 10])
            .create("matches0")
            .unwrap();
    }
    let kept = std::fs::read(&matches).unwrap();
    let (ok, _, err) = run(descl()
        .args(["match", "--exhaustive", "--format", "h5", "--images"])
        .arg(out.join("features.h5"))
        .arg("--out-dir")
        .arg(&out));
    assert!(
        !ok && err.contains("matches.h5") && err.contains("descl did not write"),
        "{err}"
    );
    assert_eq!(std::fs::read(&matches).unwrap(), kept);
    // Without it, the run writes its own, and a rerun continues it.
    std::fs::remove_file(&matches).unwrap();
    for _ in 0..2 {
        let (ok, _, err) = run(descl()
            .args(["match", "--exhaustive", "--format", "h5", "--images"])
            .arg(out.join("features.h5"))
            .arg("--out-dir")
            .arg(&out));
        assert!(ok, "{err}");
    }
}

/// Hostile round of c29952d, M4: an EXIF `FocalLengthIn35mmFilm` of 1 (or 60 000) gave a
/// 13.7 px (822 857 px) focal length written as known, which `sfm map` then refused in the
/// database `sfm` wrote. Such an EXIF is no knowledge now: as if absent (COLMAP's prior).
#[test]
fn an_exif_focal_no_camera_has_is_ignored() {
    let Some(root) = common::data_root_or_skip("an_exif_focal_no_camera_has_is_ignored") else {
        return;
    };
    let src = std::fs::read(root.join("strecha/fountain-P11/images/0000.jpg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (f35, known) in [(1, false), (60_000, false), (35, true)] {
        let file = dir.path().join(format!("f{f35}.jpg"));
        std::fs::write(&file, common::with_exif_focal(&src, f35)).unwrap();
        let (w, h) = image::image_dimensions(&file).unwrap();
        let k = descl::geometry::Intrinsics::from_exif(&file, w, h).unwrap();
        assert_eq!(k.is_some(), known, "{f35}: {k:?}");
    }
}

/// Hostile round of c29952d, L1: a cameras file saved with a UTF-8 byte-order mark lost its
/// first image ("no camera for the image 0000.png"). Every text file is read past one now.
#[test]
fn a_cameras_file_with_a_byte_order_mark_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let lines: String = NAMES
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let w = 160 + 16 * i;
            format!(
                "{n} SIMPLE_RADIAL {w} 120 {} {} 60 0\n",
                1.2 * w as f64,
                w / 2
            )
        })
        .collect();
    let cameras = dir.path().join("cameras.txt");
    std::fs::write(&cameras, format!("\u{feff}{lines}")).unwrap();
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(dir.path().join("scene.db"))
        .arg("--cameras-file")
        .arg(&cameras)
        .args(SIFT));
    assert!(ok, "{err}");
}

/// Hostile round of c29952d, M5: `sfm map --hold-intrinsics` held COLMAP's guessed focal
/// lengths (prior_focal_length 0) without a word, and the cameras came out 10× worse. It says
/// so now.
#[test]
fn holding_guessed_cameras_is_said() {
    let Some((dir, imgs, db)) = sift_database_or_skip("holding_guessed_cameras_is_said") else {
        return;
    };
    let (_, _, err) = run(descl()
        .args(["sfm", "map"])
        .arg(&db)
        .arg("--images")
        .arg(&imgs)
        .arg("--sparse-dir")
        .arg(dir.path().join("sparse"))
        .arg("--hold-intrinsics"));
    assert!(
        err.contains("--hold-intrinsics holds 3 cameras") && err.contains("a guess"),
        "{err}"
    );
}

/// Round 1 of issue 55, M2: `descl sfm --cameras-file` checked each image's camera only after
/// that image's extraction, so a file without a line for one image failed after the whole
/// set's work, its error among the others'. The cameras are checked against the images'
/// headers before any extraction now: the run fails on the missing line alone, and an image
/// that could not be decoded (a PNG cut after its header) is never reached.
#[test]
fn a_cameras_file_is_checked_before_any_extraction() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let cut = std::fs::read(imgs.join(NAMES[0])).unwrap();
    std::fs::write(imgs.join("0003.png"), &cut[..cut.len() / 2]).unwrap();
    let line = |n: &str| {
        let (w, h) = image::image_dimensions(imgs.join(n)).unwrap();
        format!(
            "{n} SIMPLE_RADIAL {w} {h} {} {} {} 0\n",
            1.2 * w as f64,
            w / 2,
            h / 2
        )
    };
    let cameras = dir.path().join("cameras.txt");
    std::fs::write(
        &cameras,
        [NAMES[0], NAMES[1], "0003.png"].map(line).concat(),
    )
    .unwrap();
    let db = dir.path().join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .arg("--cameras-file")
        .arg(&cameras)
        .args(SIFT));
    assert!(!ok, "{err}");
    assert!(
        err.contains("no camera for the image 0002.png") && !err.contains("0003.png"),
        "{err}"
    );
    assert!(!db.exists(), "{err}");
}

/// Hostile round of 564787c, H1: `match --images A/features.h5 --format h5 --out-dir B`
/// (or `--images A_IMAGES`), B holding another extraction of other pictures, replaced B's
/// `features.h5` with exit 0 and left B's extract plan naming the pictures that were gone; a
/// later `extract --resume` into B made a file of both sets. Refused now without
/// `--overwrite`; with it, B's plan names the features B holds.
#[cfg(feature = "h5")]
#[test]
fn match_h5_replaces_no_other_extraction_without_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    // Other pictures of the same names: each mirrored.
    let others = dir.path().join("others");
    std::fs::create_dir(&others).unwrap();
    for name in NAMES {
        image::open(imgs.join(name))
            .unwrap()
            .fliph()
            .save(others.join(name))
            .unwrap();
    }
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for (set, out) in [(&others, &a), (&imgs, &b)] {
        let (ok, err) = extract(set, out, &["--format", "h5"]);
        assert!(ok, "{err}");
    }
    let features = b.join("features.h5");
    let kept = std::fs::read(&features).unwrap();
    let matched = |input: &Path, overwrite: bool| {
        let mut cmd = descl();
        cmd.args(["match", "--images"])
            .arg(input)
            .args(["--exhaustive", "--format", "h5", "--out-dir"])
            .arg(&b);
        if input.is_dir() {
            cmd.args(SIFT);
        }
        if overwrite {
            cmd.arg("--overwrite");
        }
        run(&mut cmd)
    };
    for input in [a.join("features.h5"), others.clone()] {
        let (ok, _, err) = matched(&input, false);
        assert!(
            !ok && err.contains("another extraction") && err.contains("--overwrite"),
            "{}: {err}",
            input.display()
        );
        assert_eq!(std::fs::read(&features).unwrap(), kept, "{err}");
    }
    let (ok, _, err) = matched(&a.join("features.h5"), true);
    assert!(ok, "{err}");
    let plan = |d: &Path| std::fs::read(d.join("descl-extract-plan.json")).unwrap();
    assert_eq!(plan(&b), plan(&a));
    // The folder is whole again: its features match as a set.
    let (ok, _, err) = run(descl()
        .args(["match", "--images"])
        .arg(&features)
        .args(["--exhaustive", "--format", "h5", "--out-dir"])
        .arg(dir.path().join("c")));
    assert!(ok, "{err}");
}

/// Hostile round of 564787c, M2: `pairs --pairs q.txt --out q.txt` rewrote its own input
/// list (its comments and repeats gone), exit 0. The list is an input, refused as one.
#[test]
fn pairs_writes_not_over_its_own_pairs_list() {
    let dir = tempfile::tempdir().unwrap();
    let (_, feats) = sift_features(dir.path());
    let list = dir.path().join("q.txt");
    let text = "0000.png 0001.png\n# my notes\n0001.png 0000.png\n";
    std::fs::write(&list, text).unwrap();
    let (ok, _, err) = run(descl()
        .arg("pairs")
        .arg(&feats)
        .arg("--pairs")
        .arg(&list)
        .arg("--out")
        .arg(&list));
    assert!(!ok && err.contains("is an input of this command"), "{err}");
    assert_eq!(std::fs::read_to_string(&list).unwrap(), text);
}

/// Hostile round of 564787c, M4: a database camera of a model id COLMAP does not have (99)
/// reached the mapper: a pycolmap traceback, or COLMAP's abort. Refused before mapping.
#[test]
fn a_camera_model_colmap_lacks_is_refused_before_mapping() {
    let Some((_dir, imgs, db)) =
        sift_database_or_skip("a_camera_model_colmap_lacks_is_refused_before_mapping")
    else {
        return;
    };
    let edited = edited_database(&db, "model99", |conn| {
        conn.execute("UPDATE cameras SET model = 99 WHERE camera_id = 1", [])
            .unwrap();
    });
    let named = edited.display().to_string();
    assert_refused_before_mapping(&edited, &imgs, &[&named, "camera model 99"], "model 99");
}

/// Hostile round of 564787c, M1: `sfm --reconstruct --sparse-dir FILE/sp` (a folder below a
/// file) failed only after the extraction, the matching and the database: refused before any
/// work now, with no database written.
#[test]
fn a_models_folder_that_cannot_be_made_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES);
    let file = dir.path().join("afile.txt");
    std::fs::write(&file, "notes").unwrap();
    let db = dir.path().join("scene.db");
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .args(SIFT)
        .arg("--database")
        .arg(&db)
        .arg("--reconstruct")
        .arg("--sparse-dir")
        .arg(file.join("sp")));
    assert!(
        !ok && err.contains("cannot be made there") && err.contains("is not a folder"),
        "{err}"
    );
    assert!(!db.exists(), "{err}");
}

/// Runs `cmd`, and `after` its start renames a file of `bytes` over `file` (as an editor or
/// rsync replaces one); its output once it ends.
fn replaced_during(
    cmd: &mut Command,
    after: std::time::Duration,
    bytes: &[u8],
    file: &Path,
) -> std::process::Output {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let mut replacement = file.as_os_str().to_owned();
    replacement.push(".replacement");
    std::fs::write(&replacement, bytes).unwrap();
    std::fs::rename(&replacement, file).unwrap();
    child.wait_with_output().unwrap()
}

/// Hostile round of 83bb825, C-1 (critical): `extract` (and `sfm`, through the same extractor)
/// decoded an image, detected and described it, and only then read the file again to hash it.
/// A picture put in its place meanwhile (an editor's or rsync's rename) had its hash recorded
/// beside the features of the one decoded, exit 0; `extract --resume`, match, merge and
/// `sfm map`'s image check then took those features as the new picture's. Now the bytes decoded
/// are the bytes hashed. The mirrored picture is renamed over the image at twelve moments
/// spread over a run's length; whatever a run wrote must be the features of the picture whose
/// hash it records.
#[test]
fn features_record_the_hash_of_the_picture_they_were_extracted_from() {
    let dir = tempfile::tempdir().unwrap();
    let (imgs, mirrored) = (dir.path().join("images"), dir.path().join("mirrored"));
    for folder in [&imgs, &mirrored] {
        std::fs::create_dir(folder).unwrap();
    }
    // Large enough that detecting and describing it takes most of a run.
    let picture = common::gray_image(1600, 1200, false);
    picture.save(imgs.join("x.png")).unwrap();
    image::imageops::flip_horizontal(&picture)
        .save(mirrored.join("x.png"))
        .unwrap();
    let (clean, clean_mirrored) = (dir.path().join("clean"), dir.path().join("clean-mirrored"));
    let started = std::time::Instant::now();
    let (ok, err) = extract(&imgs, &clean, &[]);
    assert!(ok, "{err}");
    let run_length = started.elapsed();
    let (ok, err) = extract(&mirrored, &clean_mirrored, &[]);
    assert!(ok, "{err}");
    let frames = |npz: &Path| descl::io::features::read_features(npz).unwrap().frames;
    let (frames_of_x, frames_of_mirrored) = (
        frames(&clean.join("x.npz")),
        frames(&clean_mirrored.join("x.npz")),
    );
    assert_ne!(frames_of_x, frames_of_mirrored);
    let sha = |p: &Path| descl::identity::sha256_bytes(&std::fs::read(p).unwrap());
    let (sha_of_x, sha_of_mirrored) = (sha(&imgs.join("x.png")), sha(&mirrored.join("x.png")));
    let out = dir.path().join("out");
    const MOMENTS: u32 = 12;
    for k in 1..=MOMENTS {
        let _ = std::fs::remove_dir_all(&out);
        let done = replaced_during(
            descl()
                .arg("extract")
                .arg(&imgs)
                .arg("--out")
                .arg(&out)
                .args(SIFT),
            run_length * k / MOMENTS,
            &std::fs::read(mirrored.join("x.png")).unwrap(),
            &imgs.join("x.png"),
        );
        let err = String::from_utf8_lossy(&done.stderr);
        if let Ok(written) = descl::io::features::read_features(&out.join("x.npz")) {
            let recorded = written
                .meta
                .provenance
                .as_ref()
                .and_then(|p| p.image_sha256.clone())
                .unwrap_or_default();
            let truth = match recorded {
                r if r == sha_of_x => &frames_of_x,
                r if r == sha_of_mirrored => &frames_of_mirrored,
                r => panic!("moment {k}: x.npz records the hash {r} of neither picture: {err}"),
            };
            assert!(
                written.frames == *truth,
                "moment {k}/{MOMENTS}: the features of one picture recorded with the hash of the other (exit {:?}): {err}",
                done.status
            );
        }
        picture.save(imgs.join("x.png")).unwrap();
    }
}

/// Hostile round of 83bb825, H-1 (high): a match plan recorded the features' settings and the
/// inputs' names, not which features they were: two features folders of one set's file names
/// and settings (other pictures) passed for shards of one run. Shards from the two folders
/// into one `--out-dir`, without `--overwrite`, and two whole runs at once, all exited 0 and
/// left a mix of the two sets' pair files. The plan now names each input's content
/// (`MatchPlan::input_ids`): the second shard is refused before any matching, and the second
/// of two runs at once while the first writes.
#[test]
fn match_shards_or_runs_of_two_features_sets_of_one_names_do_not_mix() {
    use descl::io::plan::MATCH_PLAN_FILE;
    let dir = tempfile::tempdir().unwrap();
    let (feats, other) = two_features_sets_of_one_names(dir.path());
    let m = dir.path().join("m");
    let (ok, err) = match_set(&feats, &m, &["--shard", "0/2"]);
    assert!(ok, "{err}");
    let before = pair_files(&m);
    let (ok, err) = match_set(&other, &m, &["--shard", "1/2"]);
    assert!(
        !ok && err.contains(&m.join(MATCH_PLAN_FILE).display().to_string())
            && err.contains("content of 0000.png"),
        "a shard over another features set of the same names: {err}"
    );
    assert_eq!(pair_files(&m), before, "a refused shard changed the folder");
    let (ok, err) = match_set(&feats, &m, &["--shard", "1/2"]);
    assert!(ok, "the other shard of the same features: {err}");
    // Two whole runs at once (the second run whole while the first, frozen after its first
    // pair files, is alive): the second is refused, and the folder merges with the first's
    // features.
    for round in 0..3 {
        let out = dir.path().join(format!("together{round}"));
        let cmd = |features: &Path| {
            let mut c = descl();
            c.args(["match", "--exhaustive", "--images"])
                .arg(features)
                .arg("--out-dir")
                .arg(&out);
            c
        };
        let some_pairs = |names: &[String]| names.iter().filter(|n| n.contains("__")).count() >= 2;
        let results = while_running_once(&mut cmd(&feats), &out, &mut cmd(&other), some_pairs);
        assert_serialised(&results, || {
            let db = |name: &str| dir.path().join(format!("{name}{round}.db"));
            let (a, b) = (
                merged(&feats, &out, &db("feats")),
                merged(&other, &out, &db("other")),
            );
            (a.0 || b.0, format!("{}\n{}", a.1, b.1))
        });
    }
}

/// Hostile round of 8827b8d, H-2 (high): the intrinsics given to `match` (an essential
/// matrix's) were not in the match plan: shards with other `--intrinsics` into one folder, and
/// two whole runs at once, all exited 0 over a mix of pair files verified with either. The plan
/// records the camera (`MatchPlan::camera`): the other shard is refused before any matching,
/// and the second run while the first writes.
#[test]
fn match_shards_or_runs_of_other_intrinsics_do_not_mix() {
    use descl::io::plan::MATCH_PLAN_FILE;
    let dir = tempfile::tempdir().unwrap();
    let (_, feats) = twelve_images_with_features(dir.path());
    let essential = |k: &str| ["--geometry", "essential", "--intrinsics", k].map(String::from);
    let (a, b) = (essential("200,200,100,60"), essential("300,300,110,60"));
    let args = |v: &[String], more: &[&str]| -> Vec<String> {
        v.iter()
            .cloned()
            .chain(more.iter().map(|s| s.to_string()))
            .collect()
    };
    let m = dir.path().join("m");
    let with = |v: Vec<String>| v;
    let run_shard = |v: Vec<String>| {
        match_set(
            &feats,
            &m,
            &v.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    let (ok, err) = run_shard(with(args(&a, &["--shard", "0/2"])));
    assert!(ok, "{err}");
    let before = pair_files(&m);
    let (ok, err) = run_shard(with(args(&b, &["--shard", "1/2"])));
    assert!(
        !ok && err.contains(&m.join(MATCH_PLAN_FILE).display().to_string())
            && err.contains("camera"),
        "a shard of other intrinsics: {err}"
    );
    assert_eq!(pair_files(&m), before, "a refused shard changed the folder");
    let (ok, err) = run_shard(with(args(&a, &["--shard", "1/2"])));
    assert!(ok, "the other shard of the same intrinsics: {err}");
    for round in 0..3 {
        let out = dir.path().join(format!("together{round}"));
        let cmd = |k: &[String]| {
            let mut c = descl();
            c.args(["match", "--exhaustive", "--images"])
                .arg(&feats)
                .arg("--out-dir")
                .arg(&out)
                .args(k);
            c
        };
        let some_pairs = |names: &[String]| names.iter().filter(|n| n.contains("__")).count() >= 2;
        let results = while_running_once(&mut cmd(&a), &out, &mut cmd(&b), some_pairs);
        assert_serialised(&results, || {
            merged(&feats, &out, &dir.path().join(format!("merged{round}.db")))
        });
    }
}

/// Hostile round of 8827b8d, H-3 (high): features files that record no identity of their
/// own (an older descl's) went unidentified in the match plan, so shards over two such
/// folders of one set's names mixed as before the H-1 fix. Their identity is now computed.
#[test]
fn features_without_a_recorded_identity_are_identified_in_the_plan() {
    use descl::io::plan::{EXTRACT_PLAN_FILE, MATCH_PLAN_FILE};
    let dir = tempfile::tempdir().unwrap();
    let (feats, other) = two_features_sets_of_one_names(dir.path());
    // Each folder as an older descl wrote it: no `content` in the files' metadata.
    let stripped = |from: &Path, to: &str| {
        let to = dir.path().join(to);
        std::fs::create_dir(&to).unwrap();
        std::fs::copy(from.join(EXTRACT_PLAN_FILE), to.join(EXTRACT_PLAN_FILE)).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            if path.extension() == Some("npz".as_ref()) {
                with_meta(&path, &to.join(path.file_name().unwrap()), |m| {
                    m.content = None
                });
            }
        }
        to
    };
    let (old_feats, old_other) = (stripped(&feats, "old-feats"), stripped(&other, "old-other"));
    assert!(
        descl::io::features::read_features_meta(&old_feats.join("0000.npz"))
            .unwrap()
            .content
            .is_none()
    );
    let m = dir.path().join("m");
    let (ok, err) = match_set(&old_feats, &m, &["--shard", "0/2"]);
    assert!(ok, "{err}");
    let (ok, err) = match_set(&old_other, &m, &["--shard", "1/2"]);
    assert!(
        !ok && err.contains(&m.join(MATCH_PLAN_FILE).display().to_string())
            && err.contains("content of 0000.png"),
        "a shard over another features set without recorded identities: {err}"
    );
    let (ok, err) = match_set(&old_feats, &m, &["--shard", "1/2"]);
    assert!(ok, "the other shard of the same features: {err}");
}

/// Hostile round of 8827b8d, H-1 (high): `descl sfm` read an image's EXIF focal length in a
/// read of its own, after extraction: a picture renamed over the image during the run gave the
/// database the old picture's features and hash with the new one's focal length, marked as
/// known, and `--reconstruct` mapped with it, exit 0. The EXIF is now read from bytes held to
/// the hash the features record (`Intrinsics::from_exif_of`): the run fails naming the file,
/// or the database's camera is that of the picture its features are of. The same pixels with
/// another EXIF focal length are renamed over the image at twelve moments of a run.
#[test]
fn a_database_camera_is_of_the_picture_its_features_are_of() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    std::fs::create_dir(&imgs).unwrap();
    let mut jpeg = Vec::new();
    image::DynamicImage::ImageLuma8(common::gray_image(1600, 1200, false))
        .write_to(
            &mut std::io::Cursor::new(&mut jpeg),
            image::ImageFormat::Jpeg,
        )
        .unwrap();
    let (short, long) = (
        common::with_exif_focal(&jpeg, 24),
        common::with_exif_focal(&jpeg, 100),
    );
    let focal = |f35: f64| f35 / 35.0 * 1600.0;
    let sha = descl::identity::sha256_bytes;
    let x = imgs.join("x.jpg");
    std::fs::write(&x, &short).unwrap();
    let db = dir.path().join("db.db");
    let started = std::time::Instant::now();
    let (ok, _, err) = run(descl()
        .arg("sfm")
        .arg(&imgs)
        .arg("--database")
        .arg(&db)
        .args(SIFT));
    assert!(ok, "{err}");
    let run_length = started.elapsed();
    let camera_and_hash = || {
        let c = rusqlite::Connection::open(&db).unwrap();
        let params: Vec<u8> = c
            .query_row("SELECT params FROM cameras", [], |r| r.get(0))
            .unwrap();
        let hash: String = c
            .query_row("SELECT image_sha256 FROM descl_image_sha256", [], |r| {
                r.get(0)
            })
            .unwrap();
        (f64::from_le_bytes(params[..8].try_into().unwrap()), hash)
    };
    let (f, hash) = camera_and_hash();
    assert!(
        (f - focal(24.0)).abs() < 1e-6 && hash == sha(&short),
        "{f} {hash}"
    );
    const MOMENTS: u32 = 12;
    for k in 1..=MOMENTS {
        std::fs::write(&x, &short).unwrap();
        let done = replaced_during(
            descl()
                .arg("sfm")
                .arg(&imgs)
                .arg("--database")
                .arg(&db)
                .arg("--overwrite")
                .args(SIFT),
            run_length * k / MOMENTS,
            &long,
            &x,
        );
        let err = String::from_utf8_lossy(&done.stderr);
        if !done.status.success() {
            assert!(err.contains("x.jpg"), "moment {k}: {err}");
            continue;
        }
        let (f, hash) = camera_and_hash();
        let wanted = if hash == sha(&short) {
            focal(24.0)
        } else {
            focal(100.0)
        };
        assert!(
            (f - wanted).abs() < 1e-6,
            "moment {k}/{MOMENTS}: the database holds the features of one picture with the focal length {f} of the other: {err}"
        );
    }
}

/// Hostile round of c619326, H-1 (high): `match --geometry essential` takes each image's camera
/// from its EXIF; over features that record no SHA-256 of their image (an older descl's, made
/// by hand) nothing held the EXIF read to the picture the features are of, so an EXIF edited
/// between two shards of one plan (same pixels, same features) gave pair files verified with
/// two focal lengths of one image, both exit 0. Such features are refused for an essential
/// matrix from EXIF, naming the file and the way out (the camera given); other geometries and
/// given intrinsics still match them.
#[test]
fn an_essential_matrix_from_exif_needs_features_held_to_their_image() {
    use descl::io::plan::EXTRACT_PLAN_FILE;
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("images");
    std::fs::create_dir(&imgs).unwrap();
    for (i, name) in ["0000.jpg", "0001.jpg", "0002.jpg"].iter().enumerate() {
        let mut jpeg = Vec::new();
        image::DynamicImage::ImageLuma8(common::gray_image(320 + 16 * i as u32, 240, false))
            .write_to(
                &mut std::io::Cursor::new(&mut jpeg),
                image::ImageFormat::Jpeg,
            )
            .unwrap();
        std::fs::write(imgs.join(name), common::with_exif_focal(&jpeg, 24)).unwrap();
    }
    let feats = dir.path().join("feats");
    let (ok, err) = extract(&imgs, &feats, &[]);
    assert!(ok, "{err}");
    // The folder as features that record no image hash.
    let old = dir.path().join("old");
    std::fs::create_dir(&old).unwrap();
    std::fs::copy(feats.join(EXTRACT_PLAN_FILE), old.join(EXTRACT_PLAN_FILE)).unwrap();
    for name in ["0000.npz", "0001.npz", "0002.npz"] {
        with_meta(&feats.join(name), &old.join(name), |m| {
            m.provenance.as_mut().unwrap().image_sha256 = None
        });
    }
    let matched = |features: &Path, out: &str, args: &[&str]| {
        match_set(features, &dir.path().join(out), args)
    };
    let essential = ["--geometry", "essential"];
    let (ok, err) = matched(&feats, "m-recorded", &essential);
    assert!(ok, "features held to their images: {err}");
    let (ok, err) = matched(&old, "m-old", &essential);
    assert!(
        !ok && err.contains("0000.npz") && err.contains("--intrinsics"),
        "an essential matrix from the EXIF of images not held to their features: {err}"
    );
    let (ok, err) = matched(
        &old,
        "m-given",
        &[&essential[..], &["--intrinsics", "300,300,160,120"]].concat(),
    );
    assert!(ok, "the camera given: {err}");
    let (ok, err) = matched(&old, "m-fundamental", &["--geometry", "fundamental"]);
    assert!(ok, "a geometry that uses no camera: {err}");
}

/// Hostile round of 8b8c880, H-1 (high): a model given as a file was hashed in one read
/// (`model::resolve`) and loaded in another (`Engine::load_with`): a file replaced between the
/// two (an exporter's or rsync's rename as a job starts) gave features of one model recorded
/// under the other's SHA-256, exit 0, and `extract --resume` kept them. The bytes loaded are
/// now held to the hash resolved. Two models of one architecture are renamed over `x.onnx`
/// in turn every 2 ms while twelve extractions start; each run fails naming the file, or
/// writes the descriptors of the model whose hash it records.
#[test]
fn features_record_the_hash_of_the_model_that_described_them() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let dir = tempfile::tempdir().unwrap();
    let imgs = small_images(dir.path(), &NAMES[..1]);
    let mdl = dir.path().join("mdl");
    std::fs::create_dir(&mdl).unwrap();
    let (a, b) = (mdl.join("a.onnx"), mdl.join("b.onnx"));
    std::fs::copy(models.join("descl-l2net-w0.5-hardnet-mix.onnx"), &a).unwrap();
    std::fs::copy(models.join("descl-l2net-w0.5-real25-pj.onnx"), &b).unwrap();
    let x = mdl.join("x.onnx");
    let extract_with = |model: &Path, out: &Path| {
        descl()
            .arg("extract")
            .arg(&imgs)
            .arg("--out")
            .arg(out)
            .arg("-m")
            .arg(model)
            .args(["--max-keypoints", "100"])
            .output()
            .unwrap()
    };
    let features = |out: &Path| descl::io::features::read_features(&out.join("0000.npz")).unwrap();
    let clean = |model: &Path, name: &str| {
        let out = dir.path().join(name);
        assert!(extract_with(model, &out).status.success());
        let f = features(&out);
        (f.meta.model_sha256.clone().unwrap(), f.descriptors)
    };
    let (sha_a, desc_a) = clean(&a, "clean-a");
    let (sha_b, desc_b) = clean(&b, "clean-b");
    assert_ne!(desc_a, desc_b);
    std::fs::copy(&a, &x).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, a, b, x, tmp) = (
            stop.clone(),
            a.clone(),
            b.clone(),
            x.clone(),
            mdl.join("swap.tmp"),
        );
        std::thread::spawn(move || {
            let mut k = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::copy(if k.is_multiple_of(2) { &b } else { &a }, &tmp).unwrap();
                std::fs::rename(&tmp, &x).unwrap();
                k += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let mut mixed = Vec::new();
    for k in 0..12 {
        let out = dir.path().join(format!("out{k}"));
        let done = extract_with(&x, &out);
        if !done.status.success() {
            continue;
        }
        let f = features(&out);
        let recorded = f.meta.model_sha256.clone().unwrap_or_default();
        let truth = if recorded == sha_a {
            &desc_a
        } else if recorded == sha_b {
            &desc_b
        } else {
            panic!("run {k}: the hash {recorded} of neither model")
        };
        if f.descriptors != *truth {
            mixed.push(k);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(
        mixed.is_empty(),
        "runs {mixed:?} recorded one model's hash beside the other's descriptors"
    );
}
