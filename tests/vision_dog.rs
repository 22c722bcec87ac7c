//! DoG detection (OpenCV SIFT) on real images: orientation convention under a known rotation,
//! caps and ordering, and SIFT descriptors on frames against OpenCV's detectAndCompute.

mod vision_common;

use descl::detect::dog::{frame_from_keypoint, sift_descriptors};
use descl::detect::{detect, DetectorConfig};
use descl::image::{load_gray, GrayImage};
use opencv::core::{KeyPoint, Mat, Vector};
use opencv::prelude::*;

/// Crop of graf img1 (keeps the test fast).
fn graf_crop() -> Option<GrayImage> {
    let root = vision_common::data_root("vision_dog")?;
    let img = load_gray(&root.join("oxford/graf/img1.png")).unwrap();
    let (w, h) = (321, 241); // odd sides: the rotation keeps even pixels even, so pyramids match
    let data = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .map(|(x, y)| img.get(x + 200, y + 150))
        .collect();
    Some(GrayImage::from_vec(w, h, data).unwrap())
}

/// Rotates by +90° in image coordinates (clockwise on screen): new(x', y') = old(y', h−1−x'),
/// i.e. old (x, y) → new (h−1−y, x), Jacobian R(+90°).
fn rot90(img: &GrayImage) -> GrayImage {
    let (w, h) = (img.width, img.height);
    let mut out = vec![0.0; w * h];
    for yn in 0..w {
        for xn in 0..h {
            out[yn * h + xn] = img.get(yn, h - 1 - xn);
        }
    }
    GrayImage::from_vec(h, w, out).unwrap()
}

fn angle_diff(a: f32, b: f32) -> f32 {
    let d = (a - b).rem_euclid(360.0);
    d.min(360.0 - d)
}

#[test]
fn dog_orientation_follows_a_known_rotation() {
    let Some(img) = graf_crop() else { return };
    let cfg = DetectorConfig::default();
    let d0 = detect(&img, &cfg).unwrap();
    let d1 = detect(&rot90(&img), &cfg).unwrap();
    assert!(d0.len() > 100, "only {} keypoints", d0.len());
    let h = img.height as f32;
    let ang = |f: &descl::frame::Frame| f.a[1][0].atan2(f.a[0][0]).to_degrees();
    let mut errs = Vec::new();
    for d in &d0 {
        let (xe, ye) = (h - 1.0 - d.frame.y, d.frame.x);
        let want = ang(&d.frame) + 90.0;
        // 1 px: the pyramids of the two images sample different pixels from octave 1 on.
        let best = d1
            .iter()
            .filter(|e| {
                (e.frame.x - xe).hypot(e.frame.y - ye) < 1.0
                    && (e.frame.scale() / d.frame.scale() - 1.0).abs() < 0.05
            })
            .map(|e| angle_diff(ang(&e.frame), want))
            .fold(f32::INFINITY, f32::min);
        if best.is_finite() {
            errs.push(best);
        }
    }
    let found = errs.len() as f32 / d0.len() as f32;
    errs.sort_by(f32::total_cmp);
    let median = errs[errs.len() / 2];
    let good = errs.iter().filter(|&&e| e < 5.0).count() as f32 / errs.len() as f32;
    eprintln!(
        "rot90: {} kps, re-found {:.1}%, median angle error {median:.3}°, <5°: {:.1}%",
        d0.len(),
        100.0 * found,
        100.0 * good
    );
    assert!(found > 0.7, "re-found only {found}");
    assert!(median < 1.0 && good > 0.9, "median {median}, good {good}");
}

#[test]
fn dog_detections_sorted_capped_unique() {
    let Some(img) = graf_crop() else { return };
    let all = detect(&img, &DetectorConfig::default()).unwrap();
    assert!(all.windows(2).all(|w| w[0].score >= w[1].score));
    let capped = detect(
        &img,
        &DetectorConfig {
            max_keypoints: 50,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(capped.len(), 50);
    assert_eq!(capped[..], all[..50]);
    // no exact duplicates
    let mut keys: Vec<_> = all
        .iter()
        .map(|d| d.frame.to_row().map(f32::to_bits))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), all.len());
    // a higher contrast threshold keeps fewer points
    let strict = detect(
        &img,
        &DetectorConfig {
            contrast_threshold: 0.12,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        strict.len() < all.len() / 2,
        "{} vs {}",
        strict.len(),
        all.len()
    );
    // flat image: no keypoints, not an error
    let flat = GrayImage::filled(100, 80, 0.3);
    assert!(detect(&flat, &DetectorConfig::default())
        .unwrap()
        .is_empty());
    assert_eq!(
        sift_descriptors(&flat, &[], 6.0, false).unwrap().dim(),
        (0, 128)
    );
}

#[test]
fn sift_descriptors_on_frames_match_opencv_detect_and_compute() {
    let Some(img) = graf_crop() else { return };
    // OpenCV reference: detect + compute in one call.
    let mat = img.to_mat_u8().unwrap();
    let mut sift = opencv::features2d::SIFT::create_def().unwrap();
    let mut kps = Vector::<KeyPoint>::new();
    let mut desc = Mat::default();
    sift.detect_and_compute(&mat, &opencv::core::no_array(), &mut kps, &mut desc, false)
        .unwrap();
    let frames: Vec<_> = kps.iter().map(|k| frame_from_keypoint(&k, 6.0)).collect();
    let ours = sift_descriptors(&img, &frames, 6.0, false).unwrap();
    let root = sift_descriptors(&img, &frames, 6.0, true).unwrap();
    assert_eq!(ours.dim(), (frames.len(), 128));
    let mut close = 0;
    for (i, row) in ours.rows().into_iter().enumerate() {
        let r: Vec<f32> = (0..128)
            .map(|j| *desc.at_2d::<f32>(i as i32, j).unwrap())
            .collect();
        let n = r.iter().map(|v| v * v).sum::<f32>().sqrt();
        let cos: f32 = row.iter().zip(&r).map(|(a, b)| a * b / n).sum();
        if cos > 0.99 {
            close += 1;
        }
        assert!((row.dot(&row) - 1.0).abs() < 1e-4);
        // RootSIFT: unit L2, square root of the L1-normalised reference.
        let l1: f32 = r.iter().sum();
        let rr = root.row(i);
        assert!((rr[5] - (r[5] / l1).sqrt()).abs() < 1e-4);
        assert!((rr.dot(&rr) - 1.0).abs() < 1e-4);
    }
    let frac = close as f32 / frames.len() as f32;
    eprintln!(
        "SIFT on frames vs detectAndCompute: {:.1}% rows with cosine > 0.99",
        100.0 * frac
    );
    assert!(frac > 0.95, "{frac}");
}

/// `Selection::Colmap` against a reference built from OpenCV's own keypoints: each keypoint's
/// DoG level from the octave and layer OpenCV packs into `KeyPoint::octave` (not from its
/// size, as descl recovers it), COLMAP's rule applied to those levels (whole levels from the
/// coarsest until more than N locations, ≤ 2 orientations per location, the first ones).
/// A keypoint location: centre and response, bit for bit.
type Location = (u32, u32, u32);

#[test]
fn colmap_selection_keeps_the_levels_colmap_keeps() {
    let Some(img) = graf_crop() else { return };
    let mat = img.to_mat_u8().unwrap();
    let mut sift = opencv::features2d::SIFT::create_def().unwrap();
    let mut kps = Vector::<KeyPoint>::new();
    sift.detect(&mat, &mut kps, &opencv::core::no_array())
        .unwrap();
    // Level o·S + layer; OpenCV packs octave o (signed byte, −1 for the doubled image) and
    // layer into `octave` (`unpackOctave`).
    let level = |kp: &KeyPoint| {
        let o = i32::from((kp.octave() & 255) as u8 as i8);
        o * descl::detect::dog::SIFT_OCTAVE_LAYERS + ((kp.octave() >> 8) & 255)
    };
    let key = |x: f32, y: f32, r: f32| (x.to_bits(), y.to_bits(), r.to_bits());
    // (location, its level, its orientations in OpenCV's order)
    let mut locations: Vec<(Location, i32, Vec<f32>)> = Vec::new();
    for kp in kps.iter() {
        // Frames drop OpenCV's upscale offset (exact in f32 at these coordinates).
        let off = descl::detect::dog::OPENCV_SIFT_UPSCALE_OFFSET_PX;
        let k = key(kp.pt().x - off, kp.pt().y - off, kp.response());
        match locations.iter_mut().find(|l| l.0 == k) {
            Some(l) => {
                assert_eq!(l.1, level(&kp), "one location, one level");
                if !l.2.contains(&kp.angle()) {
                    l.2.push(kp.angle());
                }
            }
            None => locations.push((k, level(&kp), vec![kp.angle()])),
        }
    }
    let max = 150;
    let mut levels: Vec<i32> = locations.iter().map(|l| l.1).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut finest_kept = i32::MIN;
    let mut held = 0;
    for &lv in levels.iter().rev() {
        held += locations.iter().filter(|l| l.1 == lv).count();
        if held > max {
            finest_kept = lv;
            break;
        }
    }
    assert!(
        finest_kept > levels[0],
        "the crop must have more than {max} locations"
    );
    let mut expected: Vec<(Location, f32)> = locations
        .iter()
        .filter(|l| l.1 >= finest_kept)
        .flat_map(|l| l.2.iter().take(2).map(move |&a| (l.0, a)))
        .collect();

    let ours = detect(
        &img,
        &DetectorConfig {
            max_keypoints: max,
            selection: descl::detect::Selection::Colmap,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(ours.windows(2).all(|w| w[0].score >= w[1].score));
    let mut got: Vec<(Location, f32)> = ours
        .iter()
        .map(|d| {
            let kp = descl::detect::dog::keypoint_from_frame(&d.frame, 6.0).unwrap();
            (key(d.frame.x, d.frame.y, d.score), kp.angle())
        })
        .collect();
    let order = |a: &(Location, f32), b: &(Location, f32)| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1));
    expected.sort_by(order);
    got.sort_by(order);
    assert_eq!(got.len(), expected.len());
    assert!(got.len() > max, "{} frames for {max} locations", got.len());
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(g.0, e.0);
        // The angle goes through the frame and back: equal to float rounding.
        let d = (g.1 - e.1).rem_euclid(360.0);
        assert!(d.min(360.0 - d) < 1e-3, "{g:?} vs {e:?}");
    }
}

/// Positions in the pixel-centre convention (centre of pixel i at i): a keypoint at x in an
/// image is at w − 1 − x in its mirror image and, turned by 90°, at (h − 1 − y, x). OpenCV
/// 4.6's own positions sit ¼ px right of and below that (its upscale offset), which shows here
/// as a median error of ½ px; descl's frames must show none.
#[test]
fn dog_positions_follow_the_pixel_centre_convention() {
    let Some(img) = graf_crop() else { return };
    let (w, h) = (img.width, img.height);
    let mirror = GrayImage::from_vec(
        w,
        h,
        (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .map(|(x, y)| img.get(w - 1 - x, y))
            .collect(),
    )
    .unwrap();
    let cfg = DetectorConfig::default();
    let d0 = detect(&img, &cfg).unwrap();
    let median_error = |other: &GrayImage, map: &dyn Fn(f32, f32) -> (f32, f32)| {
        let d1 = detect(other, &cfg).unwrap();
        let mut dx = Vec::new();
        let mut dy = Vec::new();
        for d in &d0 {
            let (xe, ye) = map(d.frame.x, d.frame.y);
            // The nearest detection of the same scale (the fine octaves only: the doubled and
            // the first octave sample the same pixels in both images).
            if d.frame.scale() > 6.0 * 2.0 * 1.6 * 2f32.sqrt() {
                continue;
            }
            if let Some(e) = d1
                .iter()
                .filter(|e| (e.frame.scale() / d.frame.scale() - 1.0).abs() < 0.02)
                .min_by(|a, b| {
                    let da = (a.frame.x - xe).hypot(a.frame.y - ye);
                    let db = (b.frame.x - xe).hypot(b.frame.y - ye);
                    da.total_cmp(&db)
                })
                .filter(|e| (e.frame.x - xe).hypot(e.frame.y - ye) < 0.75)
            {
                dx.push(e.frame.x - xe);
                dy.push(e.frame.y - ye);
            }
        }
        let med = |v: &mut Vec<f32>| {
            v.sort_by(f32::total_cmp);
            v[v.len() / 2]
        };
        assert!(dx.len() > 50, "only {} keypoints found again", dx.len());
        (med(&mut dx), med(&mut dy), dx.len())
    };
    let wm = w as f32 - 1.0;
    let (mx, my, n) = median_error(&mirror, &|x, y| (wm - x, y));
    eprintln!("mirror: {n} keypoints, median error x {mx:+.3} y {my:+.3} px");
    assert!(mx.abs() < 0.05 && my.abs() < 0.05, "{mx} {my}");
    let hm = h as f32 - 1.0;
    let (rx, ry, n) = median_error(&rot90(&img), &|x, y| (hm - y, x));
    eprintln!("rot90: {n} keypoints, median error x {rx:+.3} y {ry:+.3} px");
    assert!(rx.abs() < 0.05 && ry.abs() < 0.05, "{rx} {ry}");
}
