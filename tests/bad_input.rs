//! Every kind of bad input gets a clear error naming the culprit, a non-zero exit status, no
//! panic, and no output file (not even a partial or temporary one).

mod common;

use common::onnx::{identity, Dim};
use common::{descl, files_in, gray_image, linear_model, run};
use std::path::{Path, PathBuf};

/// Runs `descl extract INPUT --out <empty dir> --model MODEL`, expects failure with every
/// `expect` string on stderr and an output folder left empty.
fn expect_failure(input: &Path, model: &Path, expect: &[&str]) {
    let out = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = run(descl()
        .arg("extract")
        .arg(input)
        .arg("--out")
        .arg(out.path())
        .arg("--model")
        .arg(model));
    assert!(!ok, "{} should fail", input.display());
    for e in expect {
        assert!(stderr.contains(e), "expected {e:?} in: {stderr}");
    }
    assert!(
        files_in(out.path()).is_empty(),
        "output left behind: {:?}",
        files_in(out.path())
    );
}

/// PNG CRC-32 (ISO 3309, reflected polynomial 0xEDB88320) over chunk type and data.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in bytes {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Appends a PNG chunk: length, type, data, CRC of type and data.
fn png_chunk(v: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    let mut chunk = kind.to_vec();
    chunk.extend_from_slice(data);
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(&chunk);
    v.extend_from_slice(&crc32(&chunk).to_be_bytes());
}

/// A small PNG file whose header claims `w`×`h` 8-bit gray pixels (its one IDAT holds a few
/// bytes, far from the data such an image needs).
fn png_claiming(w: u32, h: u32) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 0, 0, 0, 0]); // bit depth 8, gray, deflate, filter 0, no interlace
    png_chunk(&mut v, b"IHDR", &ihdr);
    png_chunk(
        &mut v,
        b"IDAT",
        &[0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01],
    );
    png_chunk(&mut v, b"IEND", &[]);
    v
}

struct Setup {
    dir: tempfile::TempDir,
    model: PathBuf,
}

fn setup(test: &str) -> Option<Setup> {
    if !common::ort_or_skip(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = linear_model(dir.path());
    Some(Setup { dir, model })
}

impl Setup {
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
    fn encoded(&self, format: image::ImageFormat) -> Vec<u8> {
        let mut buf = std::io::Cursor::new(Vec::new());
        gray_image(256, 192, false)
            .write_to(&mut buf, format)
            .unwrap();
        buf.into_inner()
    }
}

#[test]
fn png_crc_matches_the_standard_check_value() {
    assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
}

#[test]
fn missing_empty_and_non_image_files() {
    let Some(s) = setup("missing_empty_and_non_image_files") else {
        return;
    };
    expect_failure(
        &s.dir.path().join("nope.png"),
        &s.model,
        &["nope.png", "no such file"],
    );
    expect_failure(&s.file("empty.jpg", b""), &s.model, &["empty.jpg", "empty"]);
    expect_failure(
        &s.file("notes.png", b"just some text, not pixels\n"),
        &s.model,
        &["notes.png", "not an image"],
    );
}

#[test]
fn truncated_jpeg_and_png() {
    let Some(s) = setup("truncated_jpeg_and_png") else {
        return;
    };
    for (name, format) in [
        ("cut.jpg", image::ImageFormat::Jpeg),
        ("cut.png", image::ImageFormat::Png),
    ] {
        let full = s.encoded(format);
        let cut = s.file(name, &full[..full.len() / 2]);
        expect_failure(&cut, &s.model, &[name]);
    }
}

#[test]
fn tiny_and_huge_images() {
    let Some(s) = setup("tiny_and_huge_images") else {
        return;
    };
    let one = s.dir.path().join("one.png");
    image::GrayImage::from_pixel(1, 1, image::Luma([7]))
        .save(&one)
        .unwrap();
    expect_failure(&one, &s.model, &["one.png", "1×1"]);
    let huge = s.file("huge.png", &png_claiming(100_000, 100_000));
    expect_failure(&huge, &s.model, &["huge.png", "100000×100000"]);
}

#[test]
fn unreadable_and_mismatched_models() {
    let Some(s) = setup("unreadable_and_mismatched_models") else {
        return;
    };
    let img = s.dir.path().join("ok.png");
    gray_image(96, 96, false).save(&img).unwrap();
    let garbage = s.file("garbage.onnx", b"\x08\x01garbage that is not a model");
    expect_failure(
        &img,
        &garbage,
        &["garbage.onnx", "not a loadable ONNX model"],
    );
    expect_failure(&img, &s.dir.path().join("absent.onnx"), &["absent.onnx"]);
    let n = Dim::Sym("N");
    let wrong_out = s.file(
        "wrong_out.onnx",
        &identity(
            &[n, Dim::Fixed(1), Dim::Fixed(32), Dim::Fixed(32)],
            &[n, Dim::Fixed(1), Dim::Fixed(32), Dim::Fixed(32)],
        ),
    );
    expect_failure(&img, &wrong_out, &["wrong_out.onnx", "expected [N, D]"]);
    let wrong_in = s.file(
        "wrong_in.onnx",
        &identity(
            &[n, Dim::Fixed(3), Dim::Fixed(32), Dim::Fixed(32)],
            &[n, Dim::Fixed(3), Dim::Fixed(32), Dim::Fixed(32)],
        ),
    );
    expect_failure(&img, &wrong_in, &["wrong_in.onnx", "[N, 1, 32, 32]"]);

    // A card whose SHA-256 is not the file's: the model was replaced.
    let carded = s.file("carded.onnx", &std::fs::read(&s.model).unwrap());
    let card = serde_json::json!({
        "name": "carded", "file": "carded.onnx", "sha256": "0".repeat(64), "architecture": "linear",
        "input": {"size": 32, "range": [0.0, 1.0]}, "output": {"dim": 128, "kind": "float"},
        "patch": {"size": 32, "magnification": 6.0}
    });
    s.file("carded.json", card.to_string().as_bytes());
    expect_failure(&img, &carded, &["carded.onnx", "SHA-256"]);
    // An unknown model name.
    let out = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = common::extract(&img, out.path(), &["--model", "no-such-model"]);
    assert!(!ok && stderr.contains("no-such-model"), "{stderr}");
}

#[test]
fn unwritable_output_folder() {
    let Some(s) = setup("unwritable_output_folder") else {
        return;
    };
    let img = s.dir.path().join("ok.png");
    gray_image(96, 96, false).save(&img).unwrap();
    let a_file = s.file("plain-file", b"x");
    for out in [a_file.clone(), a_file.join("sub")] {
        let (ok, _, stderr) = run(descl()
            .arg("extract")
            .arg(&img)
            .arg("--out")
            .arg(&out)
            .arg("--model")
            .arg(&s.model));
        assert!(
            !ok && stderr.contains(&out.display().to_string()),
            "{stderr}"
        );
    }
    // A read-only folder (only meaningful when not running as root, who may write anyway).
    use std::os::unix::fs::PermissionsExt;
    let ro = s.dir.path().join("readonly");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("probe"), b"x").is_ok() {
        eprintln!("unwritable_output_folder: running as root, read-only folder case skipped");
        return;
    }
    let (ok, _, stderr) = run(descl()
        .arg("extract")
        .arg(&img)
        .arg("--out")
        .arg(&ro)
        .arg("--model")
        .arg(&s.model));
    assert!(!ok && stderr.contains("ok.npz"), "{stderr}");
    assert!(files_in(&ro).is_empty());
}

#[test]
fn missing_onnx_runtime_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ok.png");
    gray_image(96, 96, false).save(&img).unwrap();
    let model = linear_model(dir.path());
    let not_a_library = dir.path().join("libonnxruntime.so");
    std::fs::write(&not_a_library, b"not a shared object").unwrap();
    for lib in [dir.path().join("absent/libonnxruntime.so"), not_a_library] {
        let out = dir.path().join("out");
        let (ok, _, stderr) = run(descl()
            .arg("extract")
            .arg(&img)
            .arg("--out")
            .arg(&out)
            .arg("--model")
            .arg(&model)
            .env("ORT_DYLIB_PATH", &lib));
        assert!(!ok, "extract without ONNX Runtime must fail");
        assert!(
            stderr.contains("scripts/setup") && stderr.contains(&lib.display().to_string()),
            "{stderr}"
        );
        assert!(files_in(&out).is_empty());
    }
}

/// A reader that closes the pipe early (`descl models --json | head -1`) ends descl quietly
/// with success: it used to panic ("failed printing to stdout: Broken pipe", exit 101).
#[test]
fn a_closed_stdout_is_not_a_panic() {
    for args in [&["models", "--json"][..], &["models"][..]] {
        let mut child = common::descl()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before descl writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Numeric flags out of range are usage errors (exit 2) when the flags are parsed, with a
/// plain message: never per image or pair after the work, leaving a database or a plan.
#[test]
fn bad_numeric_arguments_are_refused_before_any_work() {
    let Some(data) = common::data_root_or_skip("bad_numeric_arguments") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("imgs");
    std::fs::create_dir(&imgs).unwrap();
    for name in ["a.png", "b.png"] {
        std::fs::copy(data.join("oxford/graf/img1.png"), imgs.join(name)).unwrap();
    }
    let refused = |cmd: &mut std::process::Command, expect: &str| {
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains(expect) && !err.contains("RansacConfig"),
            "{cmd:?}: {err}"
        );
    };
    let db = dir.path().join("t.db");
    for (flag, value, expect) in [
        (
            "--threshold",
            "0",
            "RANSAC threshold must be a positive number",
        ),
        ("--threshold", "NaN", "RANSAC threshold"),
        ("--threshold", "inf", "RANSAC threshold"),
        (
            "--confidence",
            "2",
            "RANSAC confidence must be between 0 and 1",
        ),
        (
            "--max-iters",
            "0",
            "RANSAC iteration cap must be at least 1",
        ),
        (
            "--contrast-threshold",
            "NaN",
            "contrast threshold must be a finite number",
        ),
    ] {
        refused(
            descl()
                .arg("sfm")
                .arg(&imgs)
                .arg("--database")
                .arg(&db)
                .args(["-m", "sift", flag, value]),
            expect,
        );
        assert!(!db.exists(), "{flag} {value}: {db:?} left");
    }
    let pm = dir.path().join("pm");
    refused(
        descl()
            .args(["match", "--exhaustive", "-m", "sift", "--images"])
            .arg(&imgs)
            .arg("--out-dir")
            .arg(&pm)
            .args(["--threshold", "0"]),
        "RANSAC threshold",
    );
    assert!(!pm.exists(), "{:?}", files_in(&pm));
    let out = dir.path().join("out");
    refused(
        descl()
            .arg("extract")
            .arg(&imgs)
            .arg("--out")
            .arg(&out)
            .args(["-m", "sift", "--contrast-threshold", "inf"]),
        "contrast threshold must be a finite number ≥ 0, got inf",
    );
    assert!(!out.exists());
}

/// `--max-image-size` below the smallest image side the pipeline reads (16 px) shrank every
/// image to a few pixels and gave empty or meaningless features with exit 0: it is a usage
/// error (exit 2) when the flags are parsed, in every command that extracts; 0 (never shrink)
/// and 16 still run.
#[test]
fn max_image_size_below_the_smallest_image_side_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("imgs");
    std::fs::create_dir(&imgs).unwrap();
    for name in ["a.png", "b.png"] {
        gray_image(96, 64, false).save(imgs.join(name)).unwrap();
    }
    let min = descl::image::MIN_IMAGE_SIDE;
    let expect = format!("max image size must be 0 (never shrink) or at least {min} pixels");
    let out = dir.path().join("out");
    let db = dir.path().join("t.db");
    for value in ["1", "8", &(min - 1).to_string()] {
        for cmd in [
            descl()
                .arg("extract")
                .arg(&imgs)
                .arg("--out")
                .arg(&out)
                .args(["-m", "sift"]),
            descl()
                .args(["match", "--exhaustive", "-m", "sift", "--images"])
                .arg(&imgs)
                .arg("--out-dir")
                .arg(&out),
            descl()
                .arg("sfm")
                .arg(&imgs)
                .arg("--database")
                .arg(&db)
                .args(["-m", "sift"]),
        ] {
            let o = cmd.args(["--max-image-size", value]).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{cmd:?}: {err}");
            assert!(
                err.contains(&expect) && err.contains(value),
                "{cmd:?}: {err}"
            );
            assert!(!out.exists() && !db.exists(), "{cmd:?} left an output");
        }
    }
    for value in ["0", &min.to_string()] {
        let out = dir.path().join(format!("out-{value}"));
        let (ok, _, err) = run(descl()
            .arg("extract")
            .arg(&imgs)
            .arg("--out")
            .arg(&out)
            .args(["-m", "sift", "--max-image-size", value]));
        assert!(ok, "--max-image-size {value}: {err}");
    }
}

/// A COLMAP `images.bin` of `(name, quaternion, translation)` poses (no 2-D points) and an
/// empty `points3D.bin` in `dir`: a model as `colmap mapper` writes it.
fn write_colmap_model(dir: &Path, poses: &[(&str, [f64; 4], [f64; 3])]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut b = (poses.len() as u64).to_le_bytes().to_vec();
    for (id, (name, q, t)) in poses.iter().enumerate() {
        b.extend((id as u32 + 1).to_le_bytes());
        for v in q.iter().chain(t) {
            b.extend(v.to_le_bytes());
        }
        b.extend(1u32.to_le_bytes());
        b.extend(name.as_bytes());
        b.push(0);
        b.extend(0u64.to_le_bytes());
    }
    std::fs::write(dir.join("images.bin"), b).unwrap();
    std::fs::write(dir.join("points3D.bin"), 0u64.to_le_bytes()).unwrap();
}

/// A Strecha `.camera` file: K, no distortion, camera-to-world R, centre C, size.
fn strecha_camera(r: [[f64; 3]; 3], c: [f64; 3]) -> String {
    let row = |v: [f64; 3]| format!("{} {} {}\n", v[0], v[1], v[2]);
    format!(
        "1000 0 320\n0 1000 240\n0 0 1\n0 0 0\n{}{}{}{}640 480\n",
        row(r[0]),
        row(r[1]),
        row(r[2]),
        row(c)
    )
}

/// `descl sfm evaluate` scored a model whose poses were NaN (its errors NaN, printed as
/// numbers) and took Strecha cameras holding NaN or inf as ground truth. Each is refused,
/// naming the file and the problem; the same model and cameras with finite values score 0.
#[test]
fn non_finite_poses_and_ground_truth_are_refused_by_sfm_evaluate() {
    let dir = tempfile::tempdir().unwrap();
    let scene = dir.path().join("scene");
    let cameras = scene.join("cameras");
    std::fs::create_dir_all(&cameras).unwrap();
    const I: [[f64; 3]; 3] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    let centres = [
        [0.0, 0.0, 0.0],
        [1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
    ];
    let names = ["0000.jpg", "0001.jpg", "0002.jpg", "0003.jpg"];
    let write_cameras = |bad: Option<(usize, [[f64; 3]; 3], [f64; 3])>| {
        for (k, (name, c)) in names.iter().zip(centres).enumerate() {
            let (r, c) = match bad {
                Some((b, r, c)) if b == k => (r, c),
                _ => (I, c),
            };
            std::fs::write(cameras.join(format!("{name}.camera")), strecha_camera(r, c)).unwrap();
        }
    };
    // Identity rotations: t = −C.
    let poses = |bad: Option<(usize, [f64; 4], [f64; 3])>| -> Vec<(&str, [f64; 4], [f64; 3])> {
        names
            .iter()
            .zip(centres)
            .enumerate()
            .map(|(k, (name, c))| match bad {
                Some((b, q, t)) if b == k => (*name, q, t),
                _ => (*name, [1.0, 0.0, 0.0, 0.0], c.map(|v| -v)),
            })
            .collect()
    };
    let evaluate = |model: &Path| {
        run(descl()
            .args(["sfm", "evaluate"])
            .arg(model)
            .arg("--strecha")
            .arg(&scene)
            .arg("--json"))
    };
    write_cameras(None);
    let good = dir.path().join("good");
    write_colmap_model(&good, &poses(None));
    let (ok, stdout, stderr) = evaluate(&good);
    assert!(ok, "{stderr}");
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(j["registered"], 4, "{j}");
    assert!(j["median_centre_error"].as_f64().unwrap() < 1e-9, "{j}");

    let nan = f64::NAN;
    for (case, bad, expect) in [
        (
            "nan-quaternion",
            (1, [nan, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0]),
            "not finite",
        ),
        (
            "inf-translation",
            (2, [1.0, 0.0, 0.0, 0.0], [0.0, f64::INFINITY, 0.0]),
            "not finite",
        ),
        (
            "zero-quaternion",
            (3, [0.0; 4], [0.0, 0.0, -1.0]),
            "norm zero",
        ),
    ] {
        let model = dir.path().join(case);
        write_colmap_model(&model, &poses(Some(bad)));
        let (ok, _, stderr) = evaluate(&model);
        let file = model.join("images.bin").display().to_string();
        assert!(
            !ok && stderr.contains(&file)
                && stderr.contains(names[bad.0])
                && stderr.contains(expect),
            "{case}: {stderr}"
        );
    }

    let mut nan_r = I;
    nan_r[1][1] = nan;
    for (bad, expect) in [
        ((1, nan_r, centres[1]), "R (line 5–7) holds NaN"),
        (
            (2, I, [0.0, f64::NEG_INFINITY, 0.0]),
            "camera centre (line 8) holds -inf",
        ),
    ] {
        write_cameras(Some(bad));
        let (ok, _, stderr) = evaluate(&good);
        let file = cameras
            .join(format!("{}.camera", names[bad.0]))
            .display()
            .to_string();
        assert!(
            !ok && stderr.contains(&file) && stderr.contains(expect),
            "{expect}: {stderr}"
        );
    }
}
