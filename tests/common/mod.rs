//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod onnx;

use std::path::PathBuf;

/// The shared data root, or None (with a message) when it is absent on a user's checkout.
/// In CI (`CI` set) missing data is a failure.
pub fn data_root_or_skip(test: &str) -> Option<PathBuf> {
    match descl::data::data_root() {
        Some(p) => Some(p),
        None if std::env::var_os("CI").is_some() => panic!("{test}: shared data missing in CI"),
        None => {
            eprintln!("{test}: skipped, no shared data (set DESCL_DATA)");
            None
        }
    }
}

/// Whether `colmap` runs (scripts/setup installs it; in CI its absence is a failure).
pub fn colmap_or_skip(test: &str) -> bool {
    let ok = descl::sfm::mapper::colmap_available();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: colmap not installed in CI (scripts/setup installs it)"
        );
        eprintln!("{test}: skipped, colmap not installed");
    }
    ok
}

/// The shared data root when both it and `colmap` are there (see [`data_root_or_skip`] and
/// [`colmap_or_skip`]: in CI a missing one is a failure).
pub fn data_and_colmap_or_skip(test: &str) -> Option<PathBuf> {
    let root = data_root_or_skip(test)?;
    colmap_or_skip(test).then_some(root)
}

/// Four neighbouring fountain-P11 images (0003–0006) copied into `dir/images`: a set that
/// `descl sfm` reconstructs in seconds. Returns that folder.
pub fn fountain_quartet(root: &std::path::Path, dir: &std::path::Path) -> PathBuf {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    for name in ["0003.jpg", "0004.jpg", "0005.jpg", "0006.jpg"] {
        std::fs::copy(
            root.join("strecha/fountain-P11/images").join(name),
            images.join(name),
        )
        .unwrap();
    }
    images
}

/// The default model: it is committed in models/, so a failure to resolve it fails the test.
pub fn default_model_or_skip(test: &str) -> Option<descl::model::ResolvedModel> {
    match descl::model::resolve(descl::model::DEFAULT_MODEL) {
        Ok(m) => Some(m),
        Err(e) => panic!("{test}: default model unavailable: {e}"),
    }
}

/// Whether the ONNX Runtime library can be found (it is installed by scripts/setup).
pub fn ort_or_skip(test: &str) -> bool {
    match descl::model::engine::find_ort_library() {
        Ok(_) => true,
        Err(e) if std::env::var_os("CI").is_some() => panic!("{test}: {e}"),
        Err(e) => {
            eprintln!("{test}: skipped, {e}");
            false
        }
    }
}

/// A `descl` command (the binary under test).
pub fn descl() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_descl"))
}

/// Runs a command, returning (success, stdout, stderr); fails the test on a panic message.
pub fn run(cmd: &mut std::process::Command) -> (bool, String, String) {
    let out = cmd.output().expect("spawn descl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "descl panicked: {stderr}");
    (out.status.success(), stdout, stderr)
}

/// [`run`] that fails the test (killing the command) when it runs longer than `limit`: for
/// inputs that could make a command hang (a FIFO, a device).
pub fn run_within(
    cmd: &mut std::process::Command,
    limit: std::time::Duration,
) -> (bool, String, String) {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn descl");
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait for descl").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("descl output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "descl panicked: {stderr}");
    (out.status.success(), stdout, stderr)
}

/// Runs `descl extract INPUT --out OUT ARGS...`, returning (success, stdout, stderr).
#[allow(dead_code)] // not every test binary extracts
pub fn extract(
    input: &std::path::Path,
    out: &std::path::Path,
    args: &[&str],
) -> (bool, String, String) {
    run(descl()
        .arg("extract")
        .arg(input)
        .arg("--out")
        .arg(out)
        .args(args))
}

/// Deterministic values in [0, 1) (a 64-bit LCG, Knuth's MMIX constants).
pub fn lcg_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// Writes an uncarded 128-d float model (a fixed random linear map) into `dir`.
pub fn linear_model(dir: &std::path::Path) -> PathBuf {
    let w: Vec<f32> = lcg_values(1024 * 128, 99).iter().map(|v| v - 0.5).collect();
    let p = dir.join("linear128.onnx");
    std::fs::write(&p, onnx::linear(&w, 128)).unwrap();
    p
}

/// A w×h 8-bit gray image: smooth blobs and edges (DoG finds keypoints) or, if `flat`, uniform.
pub fn gray_image(w: u32, h: u32, flat: bool) -> image::GrayImage {
    image::GrayImage::from_fn(w, h, |x, y| {
        if flat {
            return image::Luma([128]);
        }
        let (fx, fy) = (x as f32, y as f32);
        let blobs = ((fx / 9.0).sin() * (fy / 7.0).cos() * 90.0) as i32;
        let squares = if ((x / 24) + (y / 24)) % 2 == 0 {
            40
        } else {
            -40
        };
        image::Luma([(128 + blobs + squares).clamp(0, 255) as u8])
    })
}

/// Files in `dir` (names), sorted; the run plans that `descl extract` and `descl match` record
/// beside their outputs aside (tests/provenance_cli.rs checks them).
pub fn files_in(dir: &std::path::Path) -> Vec<String> {
    let plans = [
        descl::io::plan::EXTRACT_PLAN_FILE,
        descl::io::plan::MATCH_PLAN_FILE,
    ];
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !plans.contains(&n.as_str()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The tables of a COLMAP database and the columns that descl writes (compared by tests).
pub const COLMAP_TABLES: [(&str, &str); 6] = [
    (
        "cameras",
        "camera_id, model, width, height, params, prior_focal_length",
    ),
    ("images", "image_id, name, camera_id"),
    ("keypoints", "image_id, rows, cols, data"),
    ("descriptors", "image_id, rows, cols, data"),
    ("matches", "pair_id, rows, cols, data"),
    (
        "two_view_geometries",
        "pair_id, rows, cols, data, config, F, E, H, qvec, tvec",
    ),
];

/// Every row of `table` (the given columns, as text or hex), in key order.
pub fn db_rows(db: &std::path::Path, table: &str, cols: &str) -> Vec<String> {
    let c = rusqlite::Connection::open(db).unwrap();
    let n = cols.split(',').count();
    let mut s = c
        .prepare(&format!("SELECT {cols} FROM {table} ORDER BY 1"))
        .unwrap();
    s.query_map([], |r| {
        Ok((0..n)
            .map(|i| match r.get_ref(i).unwrap() {
                rusqlite::types::ValueRef::Blob(b) => format!("{b:02x?}"),
                v => format!("{v:?}"),
            })
            .collect::<Vec<_>>()
            .join("|"))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// One integer column of COLMAP's `two_view_geometries` table, one value per verified pair in
/// pair order: `rows` (the inlier count) or `config` (the two-view configuration).
pub fn two_view_column(db: &std::path::Path, column: &str) -> Vec<i64> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut s = c
        .prepare(&format!(
            "SELECT {column} FROM two_view_geometries ORDER BY pair_id"
        ))
        .unwrap_or_else(|e| panic!("{}: two_view_geometries.{column}: {e}", db.display()));
    s.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Asserts that two COLMAP databases hold the same rows in every table descl writes; a
/// difference is reported by table, key and the first characters of both rows.
pub fn assert_same_databases(a: &std::path::Path, b: &std::path::Path) {
    for (table, cols) in COLMAP_TABLES {
        let (ra, rb) = (db_rows(a, table, cols), db_rows(b, table, cols));
        assert_eq!(ra.len(), rb.len(), "{table}: row counts");
        for (x, y) in ra.iter().zip(&rb) {
            if x != y {
                let at = x.chars().zip(y.chars()).take_while(|(p, q)| p == q).count();
                let cut = |s: &str| {
                    s.chars()
                        .skip(at.saturating_sub(40))
                        .take(160)
                        .collect::<String>()
                };
                panic!(
                    "{table}: rows differ from character {at}:\n  {}\n  {}\n(row starts {})",
                    cut(x),
                    cut(y),
                    x.chars().take(40).collect::<String>()
                );
            }
        }
    }
}

/// Opens an HDF5 file of a test's output for reading, without HDF5's file lock.
///
/// Why: HDF5 opens files without `O_CLOEXEC` and locks them with `flock`. A `descl` process that
/// another test of the same binary spawns while this process holds the file open inherits the
/// descriptor, and with it the lock, for its whole run; a later `descl` on the file then fails
/// with "unable to lock file" (a flaky CI failure seen on `foreign_features_h5_is_refused`).
#[cfg(feature = "h5")]
pub fn h5_open(path: &std::path::Path) -> hdf5_metno::File {
    hdf5_metno::File::with_options()
        .with_fapl(|p| p.file_locking(false))
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Creates an HDF5 file in a test without HDF5's file lock (see [`h5_open`]).
#[cfg(feature = "h5")]
pub fn h5_create(path: &std::path::Path) -> hdf5_metno::File {
    hdf5_metno::File::with_options()
        .with_fapl(|p| p.file_locking(false))
        .create(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Small images `names` (DoG finds keypoints in each, no two alike) in `dir/images`.
#[allow(dead_code)] // not every test binary extracts
pub fn small_images(dir: &std::path::Path, names: &[&str]) -> std::path::PathBuf {
    let imgs = dir.join("images");
    std::fs::create_dir_all(&imgs).unwrap();
    for (i, name) in names.iter().enumerate() {
        gray_image(160 + 16 * i as u32, 120, false)
            .save(imgs.join(name))
            .unwrap();
    }
    imgs
}

/// `descl extract` of `names` (images of `imgs`) into `out` with `args`; it must succeed.
#[allow(dead_code)] // not every test binary extracts
pub fn extract_images(
    imgs: &std::path::Path,
    names: &[&str],
    out: &std::path::Path,
    args: &[&str],
) {
    let (ok, _, err) = run(descl()
        .arg("extract")
        .args(names.iter().map(|n| imgs.join(n)))
        .arg("--out")
        .arg(out)
        .args(args));
    assert!(ok, "{err}");
}

/// `jpeg` with an APP1 EXIF segment after its SOI marker whose Exif IFD holds
/// `FocalLengthIn35mmFilm` = `f35` (a little-endian TIFF: IFD0 with the Exif pointer, then the
/// Exif IFD with the one tag).
pub fn with_exif_focal(jpeg: &[u8], f35: u16) -> Vec<u8> {
    let mut tiff = b"II*\0".to_vec();
    tiff.extend(8u32.to_le_bytes());
    tiff.extend(1u16.to_le_bytes());
    tiff.extend([0x69, 0x87, 4, 0]);
    tiff.extend(1u32.to_le_bytes());
    tiff.extend(26u32.to_le_bytes());
    tiff.extend(0u32.to_le_bytes());
    tiff.extend(1u16.to_le_bytes());
    tiff.extend([0x05, 0xA4, 3, 0]);
    tiff.extend(1u32.to_le_bytes());
    tiff.extend(u32::from(f35).to_le_bytes());
    tiff.extend(0u32.to_le_bytes());
    let mut app1 = b"Exif\0\0".to_vec();
    app1.extend(tiff);
    assert_eq!(&jpeg[..2], [0xFF, 0xD8], "not a JPEG");
    let mut out = jpeg[..2].to_vec();
    out.extend([0xFF, 0xE1]);
    out.extend((app1.len() as u16 + 2).to_be_bytes());
    out.extend(app1);
    out.extend(&jpeg[2..]);
    out
}

/// `descl sfm merge --features FEATS --matches MATCHES --database DB`: (success, stderr).
pub fn merged(
    feats: &std::path::Path,
    matches: &std::path::Path,
    db: &std::path::Path,
) -> (bool, String) {
    let (ok, _, err) = run(descl()
        .args(["sfm", "merge", "--features"])
        .arg(feats)
        .arg("--matches")
        .arg(matches)
        .arg("--database")
        .arg(db));
    (ok, err)
}
