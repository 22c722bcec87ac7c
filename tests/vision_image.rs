//! `image::load_gray`: formats, BT.601 gray against OpenCV, and every kind of bad input.

use descl::image::{load_gray, MAX_IMAGE_PIXELS, MIN_IMAGE_SIDE};
use descl::Error;
use opencv::prelude::*;
use std::path::Path;

fn rgb_test_image(w: u32, h: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([
            (x * 9 % 256) as u8,
            (y * 5 % 256) as u8,
            ((x + y) * 3 % 256) as u8,
        ])
    })
}

fn assert_image_error(path: &Path, needle: &str) {
    match load_gray(path) {
        Err(e @ Error::Image { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()),
                "error does not name the file: {msg}"
            );
            assert!(msg.contains(needle), "expected '{needle}' in: {msg}");
        }
        other => panic!(
            "expected Error::Image for {}, got {other:?}",
            path.display()
        ),
    }
}

#[test]
fn formats_decode_to_bt601_gray_like_opencv() {
    let dir = tempfile::tempdir().unwrap();
    let img = rgb_test_image(40, 24);
    for ext in ["png", "ppm", "tiff", "bmp"] {
        let p = dir.path().join(format!("t.{ext}"));
        img.save(&p).unwrap();
        let g = load_gray(&p).unwrap();
        assert_eq!((g.width, g.height), (40, 24));
        // Hand formula.
        let px = img.get_pixel(7, 3).0;
        let want = (0.299 * px[0] as f32 + 0.587 * px[1] as f32 + 0.114 * px[2] as f32) / 255.0;
        assert!((g.get(7, 3) - want).abs() < 1e-6, "{ext}");
        // OpenCV's gray conversion (cvtColor RGB2GRAY, 8-bit, rounded: what imread(GRAYSCALE)
        // applies after decoding; descl links no imgcodecs) on the file's pixels: within one
        // grey level.
        let rgb = image::open(&p).unwrap().to_rgb8();
        let px: Vec<opencv::core::Vec3b> = rgb.pixels().map(|p| p.0.into()).collect();
        let m = Mat::new_rows_cols_with_data(24, 40, &px)
            .unwrap()
            .try_clone()
            .unwrap();
        let mut cv = Mat::default();
        opencv::imgproc::cvt_color_def(&m, &mut cv, opencv::imgproc::COLOR_RGB2GRAY).unwrap();
        let cvd = cv.data_bytes().unwrap();
        let maxd = g
            .data
            .iter()
            .zip(cvd)
            .map(|(a, &b)| (a * 255.0 - b as f32).abs())
            .fold(0.0, f32::max);
        assert!(maxd <= 1.0, "{ext}: max diff to OpenCV {maxd} grey levels");
    }
    // gray PGM and JPEG
    let gray = image::GrayImage::from_fn(32, 20, |x, y| image::Luma([(x * 8 + y) as u8]));
    let p = dir.path().join("g.pgm");
    gray.save(&p).unwrap();
    let g = load_gray(&p).unwrap();
    assert!((g.get(3, 2) - 26.0 / 255.0).abs() < 1e-6);
    let p = dir.path().join("c.jpg");
    img.save(&p).unwrap();
    assert_eq!(load_gray(&p).unwrap().width, 40);
}

#[test]
fn bad_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_image_error(&d.join("missing.png"), "no such file");

    let p = d.join("empty.png");
    std::fs::write(&p, b"").unwrap();
    assert_image_error(&p, "empty");

    let p = d.join("notes.png");
    std::fs::write(&p, b"this is a text file, not an image at all\n").unwrap();
    assert_image_error(&p, "not an image");

    let good = d.join("good.png");
    rgb_test_image(64, 64).save(&good).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let p = d.join("truncated.png");
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    assert_image_error(&p, "cannot decode");

    let p = d.join("one.png");
    rgb_test_image(1, 1).save(&p).unwrap();
    assert_image_error(&p, "smaller than the minimum");
    let p = d.join("thin.png");
    rgb_test_image(200, (MIN_IMAGE_SIDE - 1) as u32)
        .save(&p)
        .unwrap();
    assert_image_error(&p, "smaller than the minimum");

    // A header announcing 100000×100000 pixels followed by almost no data: rejected from the
    // header, before any pixel buffer is allocated.
    let p = d.join("huge.pgm");
    let mut huge = b"P5\n100000 100000\n255\n".to_vec();
    huge.extend_from_slice(&[0u8; 64]);
    std::fs::write(&p, &huge).unwrap();
    const _: () = assert!(100_000u64 * 100_000 > MAX_IMAGE_PIXELS);
    assert_image_error(&p, "more than the limit");
}
