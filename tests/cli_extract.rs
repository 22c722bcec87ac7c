//! `descl extract` and `descl models` end to end: the real binary on real and synthetic images.

mod common;

use common::{descl, files_in, gray_image, linear_model, run};
use descl::describe::Descriptors;
use descl::io::features::read_features;

fn assert_consistent_unit_rows(path: &std::path::Path) -> usize {
    let f = read_features(path).unwrap();
    let n = f.frames.len();
    assert_eq!((f.scores.len(), f.descriptors.len()), (n, n));
    assert!(f
        .frames
        .iter()
        .all(|fr| fr.to_row().iter().all(|v| v.is_finite())));
    assert!(
        f.scores.windows(2).all(|w| w[0] >= w[1]),
        "scores not sorted descending"
    );
    match &f.descriptors {
        Descriptors::Float(d) => {
            assert_eq!(d.ncols(), 128);
            for row in d.rows() {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
                assert!((norm - 1.0).abs() < 1e-4, "row norm {norm}");
            }
        }
        Descriptors::Binary(_) => {}
    }
    n
}

#[test]
fn extract_real_image_with_the_default_model() {
    let Some(data) = common::data_root_or_skip("extract_real_image") else {
        return;
    };
    if common::default_model_or_skip("extract_real_image_with_the_default_model").is_none() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let img = data.join("oxford/graf/img1.png");
    let (ok, stdout, stderr) = run(descl()
        .arg("extract")
        .arg(&img)
        .arg("--out")
        .arg(out.path())
        .args(["--max-keypoints", "500", "--json"]));
    assert!(ok, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["model"], descl::model::DEFAULT_MODEL);
    assert_eq!(summary["failed"], 0);
    let npz = out.path().join("img1.npz");
    assert_eq!(
        summary["images"][0]["output"].as_str().unwrap(),
        npz.display().to_string()
    );
    let n = assert_consistent_unit_rows(&npz);
    assert!(n > 100 && n <= 500, "{n} keypoints");
    assert_eq!(summary["images"][0]["keypoints"], n);
    let meta = read_features(&npz).unwrap().meta;
    let card = descl::model::resolve(descl::model::DEFAULT_MODEL)
        .unwrap()
        .card
        .unwrap()
        .0;
    assert_eq!(meta.model_sha256.as_deref(), Some(card.sha256.as_str()));
    assert_eq!(
        (meta.image_width, meta.image_height, meta.detector.as_str()),
        (800, 640, "dog")
    );
}

#[test]
fn extract_folder_with_a_model_path_and_a_bad_image() {
    if !common::ort_or_skip("extract_folder") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    gray_image(160, 120, false)
        .save(images.join("a.png"))
        .unwrap();
    gray_image(200, 150, false)
        .save(images.join("b.jpg"))
        .unwrap();
    std::fs::write(images.join("c.png"), b"not a png").unwrap();
    std::fs::write(images.join("notes.txt"), b"ignored: not an image extension").unwrap();
    let model = linear_model(dir.path());
    let out = dir.path().join("out"); // created by extract
    let (ok, stdout, stderr) = run(descl()
        .arg("extract")
        .arg(&images)
        .arg("--out")
        .arg(&out)
        .arg("--model")
        .arg(&model)
        .arg("--json"));
    assert!(!ok, "a bad image must make the exit status non-zero");
    assert!(stderr.contains("c.png"), "{stderr}");
    assert_eq!(
        files_in(&out),
        vec!["a.npz", "b.npz"],
        "the good images are still written, nothing else"
    );
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["failed"], 1);
    assert_eq!(summary["images"].as_array().unwrap().len(), 3);
    for name in ["a.npz", "b.npz"] {
        let n = assert_consistent_unit_rows(&out.join(name));
        assert!(n > 0, "{name}: no keypoints on a textured image");
    }
    // Each image's `seconds` is its share of the work, so they sum to the extractor's stage
    // time (they summed to ~5× the wall time when each counted its wait in the pipeline).
    let stages = &summary["seconds"]["stages"];
    let work = stages["decode_detect"].as_f64().unwrap() + stages["describe"].as_f64().unwrap();
    let images: f64 = summary["images"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["seconds"].as_f64())
        .sum();
    // Slack for the clock reads around each share: 10 ms on these millisecond stages (the
    // check is against a ~5x over-count, not a timing).
    assert!(images > 0.0 && images <= work * 1.01 + 0.01, "{summary}");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let total = summary["seconds"]["total"].as_f64().unwrap();
    assert!(work <= total * (threads + 1.0), "{summary}");
    assert_eq!(
        read_features(&out.join("a.npz")).unwrap().meta.model,
        model.display().to_string()
    );
}

#[test]
fn blank_image_gives_empty_outputs_of_the_right_shapes() {
    if !common::ort_or_skip("blank_image") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("blank.png");
    gray_image(64, 48, true).save(&img).unwrap();
    let model = linear_model(dir.path());
    let (ok, _, stderr) = run(descl()
        .arg("extract")
        .arg(&img)
        .arg("--out")
        .arg(dir.path())
        .arg("--model")
        .arg(&model));
    assert!(ok, "{stderr}");
    let f = read_features(&dir.path().join("blank.npz")).unwrap();
    assert!(f.frames.is_empty() && f.scores.is_empty());
    match f.descriptors {
        Descriptors::Float(d) => assert_eq!(d.dim(), (0, 128)),
        Descriptors::Binary(_) => panic!("float model gave binary descriptors"),
    }
    assert_eq!((f.meta.image_width, f.meta.image_height), (64, 48));
}

#[test]
fn cuda_device_fails_clearly_without_cuda() {
    if !common::ort_or_skip("cuda_device") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.png");
    gray_image(64, 64, false).save(&img).unwrap();
    let model = linear_model(dir.path());
    let out = dir.path().join("out");
    let (ok, _, stderr) = run(descl()
        .arg("extract")
        .arg(&img)
        .arg("--out")
        .arg(&out)
        .arg("--model")
        .arg(&model)
        .args(["--device", "cuda"]));
    if ok {
        eprintln!("CUDA is available here: --device cuda ran");
        return;
    }
    assert!(
        stderr.contains("CUDA") && stderr.contains("--device cpu"),
        "{stderr}"
    );
    assert!(files_in(&out).is_empty(), "no output after a device error");
    let (ok, _, stderr) = run(descl()
        .arg("extract")
        .arg(&img)
        .arg("--out")
        .arg(&out)
        .arg("--model")
        .arg(&model)
        .args(["--device", "auto"]));
    assert!(ok && stderr.contains("warning"), "{stderr}");
    assert_eq!(files_in(&out), vec!["a.npz"]);
}

#[test]
fn models_lists_cards_with_the_default_marked() {
    let dir = tempfile::tempdir().unwrap();
    let onnx = dir.path().join("m1.onnx");
    std::fs::write(&onnx, b"weights").unwrap();
    let card = serde_json::json!({
        "name": "m1", "file": "m1.onnx", "sha256": descl::model::card::sha256_file(&onnx).unwrap(),
        "architecture": "l2net", "input": {"size": 32, "range": [0.0, 1.0]},
        "output": {"dim": 256, "kind": "binary"}, "patch": {"size": 32, "magnification": 6.0},
        "training": {"method": "cdf"}, "metrics": {"dev": {"command": "descl bench x", "mma@3": 0.5}}
    });
    std::fs::write(dir.path().join("m1.json"), card.to_string()).unwrap();
    std::fs::write(
        dir.path().join("m1-run.json"),
        r#"{"net": "l2net", "seed": 1}"#,
    )
    .unwrap(); // a training config, not a card
    let (ok, stdout, stderr) = run(descl()
        .args(["models", "--json"])
        .env("DESCL_MODELS", dir.path()));
    assert!(ok, "{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["name"], "m1");
    assert_eq!(list[0]["kind"], "binary");
    assert_eq!(list[0]["default"], false);
    assert_eq!(list[0]["training_method"], "cdf");
    assert_eq!(list[0]["metrics"]["dev.mma@3"], 0.5);
    let (ok, stdout, _) = run(descl().arg("models").env("DESCL_MODELS", dir.path()));
    assert!(
        ok && stdout.contains("m1") && stdout.contains("cdf") && stdout.contains("dev.mma@3=0.5"),
        "{stdout}"
    );

    // One broken card: the others are still listed, the broken one named, the exit non-zero.
    std::fs::write(
        dir.path().join("broken.json"),
        br#"{"sha256": "x", "architecture": 3}"#,
    )
    .unwrap();
    let (ok, stdout, stderr) = run(descl()
        .args(["models", "--json"])
        .env("DESCL_MODELS", dir.path()));
    assert!(!ok && stderr.contains("broken.json"), "{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
}

/// `descl models` lines its columns up whatever the names' lengths (a 40-character name
/// pushed the rest of its row right of the others').
#[test]
fn models_columns_line_up_with_long_names() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["m1", "a-model-name-of-forty-characters-exactly"] {
        let onnx = dir.path().join(format!("{name}.onnx"));
        std::fs::write(&onnx, b"weights").unwrap();
        let card = serde_json::json!({
            "name": name, "file": format!("{name}.onnx"),
            "sha256": descl::model::card::sha256_file(&onnx).unwrap(),
            "architecture": "l2net", "input": {"size": 32, "range": [0.0, 1.0]},
            "output": {"dim": 128, "kind": "float"}, "patch": {"size": 32, "magnification": 6.0},
            "training": {"method": "hardnet"}
        });
        std::fs::write(dir.path().join(format!("{name}.json")), card.to_string()).unwrap();
    }
    let (ok, stdout, stderr) = run(descl().arg("models").env("DESCL_MODELS", dir.path()));
    assert!(ok, "{stderr}");
    let columns: Vec<usize> = stdout.lines().filter_map(|l| l.find(" l2net ")).collect();
    assert_eq!(columns.len(), 2, "{stdout}");
    assert_eq!(columns[0], columns[1], "{stdout}");
}

/// `-m sift` and `-m rootsift` run through the same describe path as the models: same frames,
/// and RootSIFT is SIFT L1-normalised and square-rooted (Arandjelović & Zisserman 2012), row by
/// row, which ties the two outputs together independently of the code that computes either.
#[test]
fn extract_with_sift_and_rootsift() {
    let Some(data) = common::data_root_or_skip("extract_with_sift_and_rootsift") else {
        return;
    };
    let img = data.join("oxford/graf/img1.png");
    let features = |method: &str| {
        let out = tempfile::tempdir().unwrap();
        let (ok, stdout, stderr) = run(descl()
            .arg("extract")
            .arg(&img)
            .arg("--out")
            .arg(out.path())
            .args(["-m", method, "--max-keypoints", "300", "--json"]));
        assert!(ok, "{stderr}");
        let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        // Method names are case-insensitive and recorded in lower case.
        assert_eq!(summary["model"], method.to_ascii_lowercase());
        let f = read_features(&out.path().join("img1.npz")).unwrap();
        assert_eq!(f.meta.model, method.to_ascii_lowercase());
        assert_consistent_unit_rows(&out.path().join("img1.npz"));
        f
    };
    let (sift, root) = (features("sift"), features("RootSIFT"));
    assert_eq!(sift.frames, root.frames, "one detector, the same frames");
    assert!(sift.frames.len() > 100);
    let (Descriptors::Float(s), Descriptors::Float(r)) = (&sift.descriptors, &root.descriptors)
    else {
        panic!("SIFT descriptors are float");
    };
    for (srow, rrow) in s.rows().into_iter().zip(r.rows()) {
        let l1: f32 = srow.iter().sum();
        for (x, y) in srow.iter().zip(rrow) {
            assert!(
                *y >= 0.0 && (x / l1 - y * y).abs() < 1e-5,
                "{x} / {l1} vs {y}²"
            );
        }
    }
}

/// `--max-image-size`: a larger image is detected shrunk (COLMAP's recipe) and its keypoints come
/// back in the original image's pixels.
#[test]
fn large_images_are_shrunk_and_keypoints_mapped_back() {
    let Some(data) = common::data_root_or_skip("large_images_are_shrunk") else {
        return;
    };
    let img = data.join("oxford/graf/img1.png"); // 800 × 640
    let extract = |max: &str| {
        let out = tempfile::tempdir().unwrap();
        let (ok, _, stderr) = run(descl()
            .arg("extract")
            .arg(&img)
            .arg("--out")
            .arg(out.path())
            .args([
                "-m",
                "sift",
                "--max-keypoints",
                "0",
                "--max-image-size",
                max,
            ]));
        assert!(ok, "{stderr}");
        read_features(&out.path().join("img1.npz")).unwrap()
    };
    let (full, half) = (extract("0"), extract("400"));
    assert_eq!((half.meta.image_width, half.meta.image_height), (800, 640));
    assert!(half.frames.len() > 100 && half.frames.len() < full.frames.len());
    let max_x = half.frames.iter().map(|f| f.x).fold(0.0f32, f32::max);
    let max_y = half.frames.iter().map(|f| f.y).fold(0.0f32, f32::max);
    assert!(
        max_x > 500.0 && max_x < 800.0 && max_y > 400.0 && max_y < 640.0,
        "{max_x} {max_y}"
    );
    // Most keypoints found at half resolution lie within 2 px of a full-resolution keypoint:
    // the mapping back is right to within the detector's own localisation.
    let near = half
        .frames
        .iter()
        .filter(|h| {
            full.frames
                .iter()
                .any(|f| (f.x - h.x).powi(2) + (f.y - h.y).powi(2) < 4.0)
        })
        .count();
    assert!(
        near * 10 > half.frames.len() * 7,
        "{near} of {} near a full-resolution keypoint",
        half.frames.len()
    );
}

/// `--format h5`: hloc's features.h5 in --out, continued by a second run; a damaged existing
/// file and a second model are refused with the file named, the existing file left as it was.
#[cfg(feature = "h5")]
#[test]
fn extract_h5_continues_refuses_damage_and_mixed_models() {
    let dir = tempfile::tempdir().unwrap();
    let model = linear_model(dir.path());
    let (a, b) = (dir.path().join("a.png"), dir.path().join("b.png"));
    gray_image(200, 160, false).save(&a).unwrap();
    gray_image(160, 200, false).save(&b).unwrap();
    let out = dir.path().join("h5");
    let m = model.to_str().unwrap();
    for img in [&a, &b] {
        let (ok, _, err) = common::extract(img, &out, &["-m", m, "--format", "h5"]);
        assert!(ok, "{err}");
    }
    assert_eq!(
        files_in(&out),
        vec!["features.h5"],
        "temporaries or locks left"
    );
    let file = common::h5_open(&out.join("features.h5"));
    assert_eq!(file.member_names().unwrap(), vec!["a.png", "b.png"]);
    let kp = file.dataset("b.png/keypoints").unwrap();
    let d = file.dataset("b.png/descriptors").unwrap();
    assert_eq!(d.shape(), vec![128, kp.shape()[0]]);
    drop((kp, d, file));

    // Another model into the same file.
    let (ok, _, err) = common::extract(&a, &out, &["-m", "sift", "--format", "h5"]);
    assert!(
        !ok && err.contains("features.h5") && err.contains("another folder"),
        "{err}"
    );

    // A file that is not HDF5 where features.h5 should be.
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("features.h5"), b"not an HDF5 file").unwrap();
    let (ok, _, err) = common::extract(&a, &bad, &["-m", m, "--format", "h5"]);
    assert!(!ok && err.contains("features.h5"), "{err}");
    assert_eq!(
        std::fs::read(bad.join("features.h5")).unwrap(),
        b"not an HDF5 file"
    );
    assert_eq!(
        files_in(&bad),
        vec!["features.h5"],
        "temporaries or locks left"
    );
}

/// A build without the cargo feature `h5` (the default: no libhdf5 in the closure) refuses
/// `--format h5` with an error naming the feature and how to get it, before writing anything.
#[cfg(not(feature = "h5"))]
#[test]
fn extract_h5_without_the_feature_names_it_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model = linear_model(dir.path());
    let a = dir.path().join("a.png");
    gray_image(200, 160, false).save(&a).unwrap();
    let out = dir.path().join("h5");
    let (ok, _, err) =
        common::extract(&a, &out, &["-m", model.to_str().unwrap(), "--format", "h5"]);
    assert!(!ok, "--format h5 succeeded without the h5 feature");
    assert!(
        err.contains("--features h5") && err.contains(&*out.to_string_lossy()),
        "{err}"
    );
    // The command it suggests works from this repository: no registry serves `descl` (issue
    // 57), while `--path .` is this crate, whose manifest has the feature.
    assert!(
        err.contains("`cargo install --path . --features h5`") && !err.contains("install descl"),
        "{err}"
    );
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"),
    )
    .unwrap();
    assert!(
        manifest.contains("name = \"descl\"") && manifest.contains("\nh5 = "),
        "{manifest}"
    );
    assert!(!out.exists(), "output folder created by a refused run");
}

/// An installed layout (`<prefix>/bin/descl`, as the bundle of `scripts/bundle`): the models are
/// found in `<prefix>/share/descl/models` and ONNX Runtime in `<prefix>/lib/` before the source
/// tree's, from the executable's own path; without that folder the source tree's models.
#[test]
fn installed_layout_finds_models_and_ort_beside_the_executable() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("prefix");
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // A copy, not a symlink: the executable's path is its resolved path.
    let exe = bin.join("descl");
    std::fs::copy(env!("CARGO_BIN_EXE_descl"), &exe).unwrap();
    let models = |cmd: &mut std::process::Command| {
        let (ok, stdout, err) = run(cmd
            .args(["models", "--json"])
            .env_remove(descl::model::MODELS_ENV));
        assert!(ok, "{err}");
        let list: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
        list.iter()
            .map(|m| m["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };

    // No share/descl/models beside it: the source tree's models (all of them).
    let repo_models = models(&mut std::process::Command::new(&exe));
    assert!(repo_models.len() > 1, "{repo_models:?}");
    assert!(repo_models.iter().any(|n| n == descl::model::DEFAULT_MODEL));

    // With it: only what is there.
    let shipped = prefix.join("share/descl/models");
    std::fs::create_dir_all(&shipped).unwrap();
    let src = descl::model::resolve(descl::model::DEFAULT_MODEL).unwrap();
    let (card_path, onnx) = (&src.card.as_ref().unwrap().1, &src.onnx);
    for p in [card_path, onnx] {
        std::fs::copy(p, shipped.join(p.file_name().unwrap())).unwrap();
    }
    assert_eq!(
        models(&mut std::process::Command::new(&exe)),
        vec![descl::model::DEFAULT_MODEL.to_string()]
    );

    // ONNX Runtime: <prefix>/lib/libonnxruntime.so is tried before the source tree's; a file
    // there that is no library is named in the error (the source tree's would have loaded).
    std::fs::create_dir_all(prefix.join("lib")).unwrap();
    let fake = prefix.join("lib/libonnxruntime.so");
    std::fs::write(&fake, b"not a shared library").unwrap();
    let img = dir.path().join("a.png");
    gray_image(200, 160, false).save(&img).unwrap();
    let (ok, _, err) = run(std::process::Command::new(&exe)
        .args(["extract", img.to_str().unwrap(), "--out"])
        .arg(dir.path().join("out"))
        .env_remove(descl::model::engine::ORT_DYLIB_ENV)
        .env_remove(descl::model::MODELS_ENV));
    let fake = fake.canonicalize().unwrap();
    assert!(
        !ok && err.contains(&*fake.to_string_lossy()),
        "expected an error naming {}: {err}",
        fake.display()
    );
}

/// clap prints doc comments verbatim: `--preset`'s help once showed rustdoc links
/// ("[`DEFAULT_MAX_KEYPOINTS`]", "[`descl::sfm::sfm_detector`]") instead of the numbers. Every
/// subcommand's help is plain text, and the presets state the numbers the library uses.
#[test]
fn help_texts_are_plain_words_with_the_presets_numbers() {
    let help = |args: &[&str]| {
        let (ok, stdout, stderr) = run(descl().args(args).arg("--help"));
        assert!(ok, "{args:?} --help: {stderr}");
        stdout
    };
    for args in [
        &["extract"][..],
        &["match"],
        &["pairs"],
        &["sfm"],
        &["sfm", "merge"],
        &["sfm", "evaluate"],
        &["bench"],
        &["models"],
    ] {
        let text = help(args);
        assert!(
            !text.contains("[`") && !text.contains("`]"),
            "{args:?} --help shows rustdoc link syntax:\n{text}"
        );
    }
    let extract = help(&["extract"]);
    // clap's long help lists a ValueEnum's variants as "- NAME: doc", then a blank line.
    let preset = &extract[extract.find("--preset").expect("--preset in the help")..];
    let variant = |name: &str| {
        let from = &preset[preset.find(&format!("- {name}:")).expect(name)..];
        from[..from.find("\n\n").unwrap_or(from.len())].to_string()
    };
    let (matching, sfm) = (variant("match"), variant("sfm"));
    let matching = &matching[..matching.find("- sfm:").unwrap_or(matching.len())];
    let sfm_detector = descl::sfm::sfm_detector();
    for (text, numbers) in [
        (
            matching,
            [
                descl::detect::DEFAULT_MAX_KEYPOINTS.to_string(),
                descl::detect::DEFAULT_CONTRAST_THRESHOLD.to_string(),
            ],
        ),
        (
            sfm.as_str(),
            [
                sfm_detector.max_keypoints.to_string(),
                sfm_detector.contrast_threshold.to_string(),
            ],
        ),
    ] {
        for n in numbers {
            assert!(text.contains(&n), "{n} not in {text:?}\n{extract}");
        }
    }
    // Defaults the help states in words (the flags have none in clap, so that a flag given is
    // told from one left out).
    for default in [
        format!(
            "[default: {}]",
            descl::detect::DetectorConfig::default().kind
        ),
        format!("[default: {}]", descl::pipeline::COLMAP_MAX_IMAGE_SIZE),
    ] {
        assert!(extract.contains(&default), "{default} not in\n{extract}");
    }
}
