//! HPatches patch benchmark: the loader on the real release file and on files written here in the
//! exact layout, and the three tasks on tiny descriptor sets whose results are computed by hand.

use descl::describe::Descriptors;
use descl::eval::hpatches::{self, SequenceDescriptors, VerificationPair, IMAGE_NAMES};
use descl::eval::metrics::{average_precision, roc_auc};
use descl::progress::Silent;
use ndarray::{Array2, Array3};
use std::path::Path;

fn data_file(rel: &str) -> Option<std::path::PathBuf> {
    match descl::data::data_root() {
        Some(root) => Some(root.join(rel)),
        None if std::env::var_os("CI").is_some() => panic!("CI must have ../shared/data"),
        None => {
            eprintln!("skipping: no ../shared/data (set DESCL_DATA)");
            None
        }
    }
}

/// OpenCV's INTER_LINEAR geometry: source coordinate (d + 0.5)·scale − 0.5, clamped at borders.
fn bilinear_reference(
    img: &image::GrayImage,
    top: u32,
    side: u32,
    out: usize,
    i: usize,
    j: usize,
) -> f32 {
    let scale = side as f32 / out as f32;
    let sample = |v: f32| -> (u32, u32, f32) {
        let s = ((v + 0.5) * scale - 0.5).max(0.0);
        let s0 = (s.floor() as u32).min(side - 1);
        let s1 = (s0 + 1).min(side - 1);
        (s0, s1, s - s0 as f32)
    };
    let (y0, y1, fy) = sample(i as f32);
    let (x0, x1, fx) = sample(j as f32);
    let p = |x: u32, y: u32| f32::from(img.get_pixel(x, top + y)[0]);
    let v = (1.0 - fy) * ((1.0 - fx) * p(x0, y0) + fx * p(x1, y0))
        + fy * ((1.0 - fx) * p(x0, y1) + fx * p(x1, y1));
    v / 255.0
}

#[test]
fn loads_the_real_release_file() {
    let Some(path) = data_file("hpatches-patches/v_graffiti/ref.png") else {
        return;
    };
    let patches = hpatches::load_patch_file(&path).unwrap();
    assert_eq!(patches.shape(), &[1123, 32, 32]);
    // Independent check of patch order and resampling: a hand-written bilinear resize.
    let img = image::open(&path).unwrap().to_luma8();
    let mut worst = 0f32;
    for n in [0usize, 1, 561, 1122] {
        for (i, j) in [(0, 0), (5, 17), (16, 16), (31, 31), (20, 3)] {
            let r = bilinear_reference(&img, 65 * n as u32, 65, 32, i, j);
            worst = worst.max((r - patches[[n, i, j]]).abs());
        }
    }
    // OpenCV's fixed-point weights round to within about one grey level.
    assert!(worst <= 1.5 / 255.0, "worst difference {worst}");
    assert!(patches.iter().all(|v| (0.0..=1.0).contains(v)));
}

#[test]
fn loader_rejects_wrong_layouts() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("ref.png");
    image::GrayImage::new(64, 130).save(&bad).unwrap();
    let e = hpatches::load_patch_file(&bad).unwrap_err().to_string();
    assert!(e.contains("ref.png") && e.contains("65"), "{e}");
    let missing = hpatches::load_patch_file(&dir.path().join("nope.png"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("nope.png"), "{missing}");
}

/// Writes one sequence in the release layout: patch i of every image is filled with grey value
/// `base + i`, so a mean-intensity "descriptor" recovers it.
fn write_sequence(root: &Path, name: &str, n: usize, base: u8) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for img in IMAGE_NAMES {
        let mut im = image::GrayImage::new(65, 65 * n as u32);
        for (_, y, p) in im.enumerate_pixels_mut() {
            p[0] = base + (y / 65) as u8;
        }
        im.save(dir.join(format!("{img}.png"))).unwrap();
    }
}

#[test]
fn describes_sequences_written_in_the_release_layout() {
    let dir = tempfile::tempdir().unwrap();
    write_sequence(dir.path(), "v_a", 3, 10);
    write_sequence(dir.path(), "i_b", 2, 200);
    let calls = std::cell::Cell::new(0);
    let mut describe = |p: &Array3<f32>| -> descl::Result<Descriptors> {
        calls.set(calls.get() + 1);
        let n = p.shape()[0];
        Ok(Descriptors::Float(Array2::from_shape_fn(
            (n, 1),
            |(i, _)| p.index_axis(ndarray::Axis(0), i).mean().unwrap_or(0.0) * 255.0,
        )))
    };
    let seqs = vec!["v_a".to_string(), "i_b".to_string()];
    let d = hpatches::describe_sequences(dir.path(), &seqs, &mut describe, &Silent).unwrap();
    assert_eq!(calls.get(), 32);
    let Descriptors::Float(t5) = &d["v_a"][15] else {
        panic!()
    };
    assert_eq!(t5.nrows(), 3);
    assert!((t5[[2, 0]] - 12.0).abs() < 1e-3, "{}", t5[[2, 0]]);
    let Descriptors::Float(r) = &d["i_b"][0] else {
        panic!()
    };
    assert!((r[[1, 0]] - 201.0).abs() < 1e-3);
    // A sequence whose images disagree on the patch count is an error naming the file.
    image::GrayImage::new(65, 65)
        .save(dir.path().join("v_a").join("h2.png"))
        .unwrap();
    let e = hpatches::describe_sequences(dir.path(), &seqs, &mut describe, &Silent)
        .unwrap_err()
        .to_string();
    assert!(e.contains("h2.png"), "{e}");
}

fn float(v: &[f32]) -> Descriptors {
    Descriptors::Float(Array2::from_shape_vec((v.len(), 1), v.to_vec()).unwrap())
}

#[test]
fn matching_task_by_hand() {
    // v_x: ref = [0, 10]; all images [1, 9] (both correct, AP 1) except
    //   e1 = [9, 1]: both nearest neighbours wrong → AP 0;
    //   e2 = [7, 100]: row 0 → col 0 correct at 7, row 1 → col 0 wrong at 3:
    //        ranks wrong, correct: recall 0,0,½; precision 1,ε,½ → AP = ½·(ε+½)/2 = 0.125.
    // i_y: every image equals ref → AP 1.
    let mut v = vec![float(&[0.0, 10.0])];
    for name in &IMAGE_NAMES[1..] {
        v.push(match *name {
            "e1" => float(&[9.0, 1.0]),
            "e2" => float(&[7.0, 100.0]),
            _ => float(&[1.0, 9.0]),
        });
    }
    let i = vec![float(&[0.0, 10.0]); 16];
    let mut d = SequenceDescriptors::new();
    d.insert("v_x".into(), v);
    d.insert("i_y".into(), i);
    let r = hpatches::matching(&d, &["v_x".to_string(), "i_y".to_string()], &Silent).unwrap();
    let e = &r.per_sequence["v_x"]["e"];
    assert_eq!(e[0], 0.0);
    assert!((e[1] - 0.125).abs() < 1e-9, "{e:?}");
    assert_eq!(&e[2..], &[1.0, 1.0, 1.0]);
    // e: v = 100·(0 + 0.125 + 3)/5 = 62.5; h, t: 100; avg_v = 87.5, avg_i = 100, mAP = 93.75.
    assert!((r.per_difficulty["e"]["v"] - 62.5).abs() < 1e-6);
    assert!((r.avg_v.unwrap() - 87.5).abs() < 1e-6);
    assert!((r.map - 93.75).abs() < 1e-6, "{}", r.map);
}

fn pair(s1: &str, t1: usize, i1: usize, s2: &str, t2: usize, i2: usize) -> VerificationPair {
    VerificationPair {
        s1: s1.into(),
        t1,
        idx1: i1,
        s2: s2.into(),
        t2,
        idx2: i2,
    }
}

#[test]
fn verification_task_by_hand() {
    // Image k ≥ 1 of difficulty e/h/t is ref + 1/2/3 (1-D descriptors).
    let reference = [0.0, 2.0, 20.0, 30.0, 40.0];
    let mk = |base: f32| {
        let mut v = vec![float(&reference.map(|x| x + base))];
        for off in [1.0, 2.0, 3.0] {
            for _ in 0..5 {
                v.push(float(&reference.map(|x| x + base + off)));
            }
        }
        v
    };
    let mut d = SequenceDescriptors::new();
    d.insert("v_x".into(), mk(0.0));
    d.insert("i_y".into(), mk(100.0));
    let pos: Vec<_> = (0..5)
        .map(|i| pair("v_x", if i < 2 { 0 } else { 1 }, i, "v_x", 2, i))
        .collect();
    let intra: Vec<_> = (0..5)
        .map(|i| pair("v_x", 1, i, "v_x", 0, (i + 1) % 5))
        .collect();
    let inter: Vec<_> = (0..5).map(|i| pair("v_x", 0, i, "i_y", 0, i)).collect();
    let p = Path::new("pairs.csv");
    let r = hpatches::verification(&d, (p, &pos), (p, &intra), (p, &inter)).unwrap();
    // Difficulty e (offset 1): positives ref–e2 = 1, 1 then e1–e2 = 0, 0, 0;
    // intra e1[i] vs ref[i+1]: |1−2|, |3−20|, |21−30|, |31−40|, |41−0| = 1, 17, 9, 9, 41.
    let d_pos = [1.0, 1.0, 0.0, 0.0, 0.0];
    let d_intra = [1.0, 17.0, 9.0, 9.0, 41.0];
    let mut dist: Vec<f64> = d_intra.to_vec();
    dist.extend(d_pos);
    let labels: Vec<bool> = (0..10).map(|i| i >= 5).collect();
    let e = &r.per_difficulty["e"];
    assert!((e.intra.balanced_auc - roc_auc(&dist, &labels).unwrap()).abs() < 1e-12);
    // Imbalanced: the 5 negatives and the first int(0.2·5) = 1 positive (distance 1, tied with
    // the first negative, which comes first): ranks neg, pos, … → AP = ½·(ε + ½)·1 = 0.25.
    assert!(
        (e.intra.imbalanced_ap - 0.25).abs() < 1e-9,
        "{}",
        e.intra.imbalanced_ap
    );
    assert!(
        (e.intra.imbalanced_ap - average_precision(&dist[..6], &labels[..6], None).unwrap()).abs()
            < 1e-12
    );
    // Balanced AUC by hand: ranked 0p 0p 0p 1n 1p 1p 9n 9n 17n 41n → tpr reaches 0.6 before the
    // first negative, 1.0 after it: area = 0.2·0.6... computed as trapezoids over fpr steps:
    // fpr 0→0.2 with tpr 0.6 (the tie order puts the negative first) → 0.2·0.6, then 0.8·1.0.
    assert!(
        (e.intra.balanced_auc - (0.2 * 0.6 + 0.8)).abs() < 1e-9,
        "{}",
        e.intra.balanced_auc
    );
    // Inter negatives are ≥ 100 away: perfect separation.
    assert!((e.inter.balanced_auc - 1.0).abs() < 1e-12);
    assert!(r.map > 0.0 && r.map <= 100.0);
    // Unequal pair files are refused, naming the file.
    let short = Path::new("verif_neg_intra_split-a.csv");
    let e = hpatches::verification(&d, (p, &pos), (short, &intra[..4]), (p, &inter))
        .unwrap_err()
        .to_string();
    assert!(e.contains("verif_neg_intra_split-a.csv"), "{e}");
}

#[test]
fn retrieval_task_by_hand() {
    // Query v_x #0 (ref 0). Its positives for difficulty e are e1..e5 #0 = 0.5, 1.5, 2.5, 3.5, 4.5
    // (h, t: all 0.1 → AP 1 when no distractor is closer). Distractors (ref patches):
    // v_x #1 (masked: own sequence), i_y #0 = 2.0, i_y #1 = 50.
    let mut v = vec![float(&[0.0, 2.0])];
    for k in 0..5 {
        v.push(float(&[0.5 + k as f32, 9.0]));
    }
    for _ in 0..10 {
        v.push(float(&[0.1, 9.0]));
    }
    let mut d = SequenceDescriptors::new();
    d.insert("v_x".into(), v);
    d.insert("i_y".into(), vec![float(&[2.0, 50.0]); 16]);
    let q = vec![("v_x".to_string(), 0)];
    let dl = vec![
        ("v_x".to_string(), 1),
        ("i_y".to_string(), 0),
        ("i_y".to_string(), 1),
    ];
    let p = Path::new("retr.csv");
    let r = hpatches::retrieval(&d, (p, &q), (p, &dl), &Silent).unwrap();
    // e: ranked 0.5p 1.5p 2.0n 2.5p 3.5p 4.5p 50n: positive ranks 1,2,4,5,6:
    // AP = (1/5)·[(1+1)/2 + (1+1)/2 + (2/3+3/4)/2 + (3/4+4/5)/2 + (4/5+5/6)/2]
    let ap =
        (1.0 + 1.0 + (2.0 / 3.0 + 0.75) / 2.0 + (0.75 + 0.8) / 2.0 + (0.8 + 5.0 / 6.0) / 2.0) / 5.0;
    for pool in hpatches::RETRIEVAL_POOL_SIZES {
        assert!(
            (r.per_pool["e"][&pool] - 100.0 * ap).abs() < 1e-9,
            "{pool}: {}",
            r.per_pool["e"][&pool]
        );
        assert!((r.per_pool["h"][&pool] - 100.0).abs() < 1e-9);
    }
    assert!((r.map - (100.0 * ap + 200.0) / 3.0).abs() < 1e-9);
    // An unknown sequence in a list is an error naming the file.
    let bad = vec![("v_nope".to_string(), 0)];
    let e = hpatches::retrieval(
        &d,
        (Path::new("retr_queries_split-a.csv"), &bad),
        (p, &dl),
        &Silent,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("retr_queries_split-a.csv") && e.contains("v_nope"),
        "{e}"
    );
}

#[test]
fn reads_the_real_task_files() {
    let Some(dir) = data_file("hpatches-tasks") else {
        return;
    };
    let splits = hpatches::load_splits(&dir.join("splits.json")).unwrap();
    assert_eq!(splits["a"].test.len(), 40);
    assert_eq!(splits["full"].test.len(), 116);
    let q = hpatches::read_patch_list(&dir.join("retr_queries_split-a.csv")).unwrap();
    let d = hpatches::read_patch_list(&dir.join("retr_distractors_split-a.csv")).unwrap();
    assert_eq!((q.len(), d.len()), (10000, 20000));
    assert_eq!(q[0], ("v_birdwoman".to_string(), 3));
    // Every query and distractor of split a comes from its test sequences.
    assert!(q
        .iter()
        .chain(&d)
        .all(|(s, _)| splits["a"].test.contains(s)));
    // Verification pair files in the exact format (header s1,t1,idx1,s2,t2,idx2).
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("verif_pos_split-a.csv");
    std::fs::write(
        &f,
        "s1,t1,idx1,s2,t2,idx2\nv_a,0,12,v_a,3,12\ni_b,4,7,i_b,1,7\n",
    )
    .unwrap();
    let pairs = hpatches::read_verification_pairs(&f).unwrap();
    assert_eq!(pairs[1], pair("i_b", 4, 7, "i_b", 1, 7));
    std::fs::write(&f, "s1,t1,idx1,s2,t2\nv_a,0,12,v_a,3\n").unwrap();
    assert!(hpatches::read_verification_pairs(&f)
        .unwrap_err()
        .to_string()
        .contains("verif_pos_split-a.csv"));
}
