//! Homography sequences and Strecha cameras on the real dev data: loaders, homography
//! normalisation (leuven), pair counts, and the ground-truth relative pose checked against
//! OpenCV SIFT matches (epipolar error).

use descl::eval::{metrics, pose, sequences};
use opencv::core::{KeyPoint, Mat, Vector};
use opencv::prelude::*;

fn data() -> Option<std::path::PathBuf> {
    match descl::data::data_root() {
        Some(root) => Some(root),
        None if std::env::var_os("CI").is_some() => panic!("CI must have ../shared/data"),
        None => {
            eprintln!("skipping: no ../shared/data (set DESCL_DATA)");
            None
        }
    }
}

#[test]
fn loads_all_dev_sequences_with_normalised_homographies() {
    let Some(root) = data() else { return };
    let mut pairs = 0;
    for sub in ["oxford", "hpatches-sequences"] {
        for dir in sequences::list_sequences(&root.join(sub)).unwrap() {
            let s = sequences::load_sequence(&dir).unwrap();
            assert_eq!(s.images.len(), 6);
            for (k, h) in s.homographies.iter().enumerate() {
                assert_eq!(h[2][2], 1.0);
                // The centre of image 1 lands inside (or near) image k+2.
                let (w, ht) = image::image_dimensions(&s.images[0]).unwrap();
                let (w2, h2) = image::image_dimensions(&s.images[k + 1]).unwrap();
                let (x, y) =
                    metrics::apply_homography(h, f64::from(w) / 2.0, f64::from(ht) / 2.0).unwrap();
                assert!(
                    x > -0.25 * f64::from(w2) && x < 1.25 * f64::from(w2),
                    "{} H1to{}: x {x}",
                    s.name,
                    k + 2
                );
                assert!(
                    y > -0.25 * f64::from(h2) && y < 1.25 * f64::from(h2),
                    "{} H1to{}: y {y}",
                    s.name,
                    k + 2
                );
                pairs += 1;
            }
        }
    }
    assert_eq!(pairs, 35);
    // leuven is an illumination sequence: once normalised, its homographies are near identity
    // (the raw H1to5p has H[2][2] = −0.576).
    let leuven = sequences::load_sequence(&root.join("oxford/leuven")).unwrap();
    let h = leuven.homographies[3];
    assert!(
        (h[0][0] - 1.0).abs() < 0.01 && (h[1][1] - 1.0).abs() < 0.01,
        "{h:?}"
    );
}

#[test]
fn homography_file_errors_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("H1to2p");
    std::fs::write(&f, "1 0 0 0 1 0 0 0").unwrap();
    assert!(sequences::read_homography(&f)
        .unwrap_err()
        .to_string()
        .contains("H1to2p"));
    std::fs::write(&f, "1 0 0 0 1 0 0 0 0").unwrap();
    assert!(sequences::read_homography(&f)
        .unwrap_err()
        .to_string()
        .contains("H1to2p"));
}

fn sift(path: &std::path::Path) -> (Vector<KeyPoint>, Mat) {
    let img = descl::image::load_gray(path).unwrap().to_mat_u8().unwrap();
    let mut det = opencv::features2d::SIFT::create(2000, 3, 0.04, 10.0, 1.6).unwrap();
    let mut kps = Vector::new();
    let mut desc = Mat::default();
    det.detect_and_compute(&img, &Mat::default(), &mut kps, &mut desc, false)
        .unwrap();
    (kps, desc)
}

#[test]
fn strecha_ground_truth_agrees_with_sift_matches() {
    let Some(root) = data() else { return };
    let mut total = 0;
    for scene in ["fountain-P11", "Herz-Jesus-P8"] {
        let s = pose::load_scene(&root.join("strecha").join(scene)).unwrap();
        assert_eq!(s.images.len(), s.cameras.len());
        total += pose::pairs(s.images.len()).len();
    }
    assert_eq!(total, 32);
    let s = pose::load_scene(&root.join("strecha/fountain-P11")).unwrap();
    let (a, b) = (&s.cameras[0], &s.cameras[1]);
    assert_eq!((a.width, a.height), (1536, 1024));
    let (r, t) = pose::relative_pose(a, b);
    // F = K_b^-T [t]x R K_a^-1, applied as the epipolar line of each SIFT match.
    let inv = |k: &[[f64; 3]; 3]| {
        let (fx, fy, cx, cy) = (k[0][0], k[1][1], k[0][2], k[1][2]);
        [
            [1.0 / fx, 0.0, -cx / fx],
            [0.0, 1.0 / fy, -cy / fy],
            [0.0, 0.0, 1.0],
        ]
    };
    let tx = [[0.0, -t[2], t[1]], [t[2], 0.0, -t[0]], [-t[1], t[0], 0.0]];
    let mul = |p: &[[f64; 3]; 3], q: &[[f64; 3]; 3]| {
        let mut c = [[0.0; 3]; 3];
        for i in 0..3 {
            for j in 0..3 {
                c[i][j] = (0..3).map(|k| p[i][k] * q[k][j]).sum();
            }
        }
        c
    };
    let kb = inv(&b.k);
    let kbt = [
        [kb[0][0], kb[1][0], kb[2][0]],
        [kb[0][1], kb[1][1], kb[2][1]],
        [kb[0][2], kb[1][2], kb[2][2]],
    ];
    let f = mul(&mul(&kbt, &mul(&tx, &r)), &inv(&a.k));
    let (ka, da) = sift(&s.images[0]);
    let (kb2, db) = sift(&s.images[1]);
    let matcher = opencv::features2d::BFMatcher::new(opencv::core::NORM_L2, true).unwrap();
    let mut m = Vector::new();
    matcher
        .train_match(&da, &db, &mut m, &Mat::default())
        .unwrap();
    let mut errs: Vec<f64> = m
        .iter()
        .map(|dm| {
            let p = ka.get(dm.query_idx as usize).unwrap().pt();
            let q = kb2.get(dm.train_idx as usize).unwrap().pt();
            let (x, y) = (f64::from(p.x), f64::from(p.y));
            let l = [0, 1, 2].map(|i| f[i][0] * x + f[i][1] * y + f[i][2]);
            (l[0] * f64::from(q.x) + l[1] * f64::from(q.y) + l[2]).abs()
                / (l[0] * l[0] + l[1] * l[1]).sqrt()
        })
        .collect();
    errs.sort_by(f64::total_cmp);
    let median = errs[errs.len() / 2];
    eprintln!(
        "fountain 0000-0001: {} SIFT matches, median epipolar error {median:.3} px",
        errs.len()
    );
    assert!(
        errs.len() > 200 && median < 1.0,
        "median epipolar error {median}"
    );
}
