//! UBC PhotoTour: a tiny dataset written here in the release format (sheets of 16×16 patches of
//! 64×64, info.txt, m50 pair file), loaded back and scored.

use descl::describe::Descriptors;
use descl::eval::phototour;
use descl::progress::Silent;
use ndarray::{Array2, Array3};

/// Patch `id` is filled with grey value `id % 250` except one pixel at (row 0, col 0) = 255.
fn write_dataset(dir: &std::path::Path, n: usize) {
    let sheets = n.div_ceil(phototour::PATCHES_PER_SHEET);
    for s in 0..sheets {
        let mut im = image::GrayImage::new(1024, 1024);
        for k in 0..phototour::PATCHES_PER_SHEET {
            let id = s * phototour::PATCHES_PER_SHEET + k;
            let (r, c) = ((k / 16) as u32 * 64, (k % 16) as u32 * 64);
            for y in 0..64 {
                for x in 0..64 {
                    im.put_pixel(c + x, r + y, image::Luma([(id % 250) as u8]));
                }
            }
        }
        im.save(dir.join(phototour::sheet_name(s))).unwrap();
    }
    // 3D point of patch id: id / 2 (pairs of patches show the same point).
    let info: String = (0..n).map(|id| format!("{} 0\n", id / 2)).collect();
    std::fs::write(dir.join("info.txt"), info).unwrap();
}

#[test]
fn loads_patches_from_sheets_in_row_major_order() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path(), 300);
    let p = phototour::load_patches(dir.path(), &[0, 17, 255, 256, 299, 17]).unwrap();
    assert_eq!(p.shape(), &[6, 32, 32]);
    for (o, id) in [0usize, 17, 255, 256, 299, 17].iter().enumerate() {
        let want = (id % 250) as f32 / 255.0;
        assert!(
            p.index_axis(ndarray::Axis(0), o)
                .iter()
                .all(|v| (v - want).abs() < 1e-6),
            "patch {id}"
        );
    }
    let e = phototour::load_patches(dir.path(), &[600])
        .unwrap_err()
        .to_string();
    assert!(e.contains("patches0002.bmp"), "{e}");
}

#[test]
fn fpr95_on_a_written_pair_file() {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path(), 300);
    // 20 matching pairs (2i, 2i+1) and 20 non-matching (i, i+100) in the release's 6 columns.
    let mut lines = String::new();
    for i in 0..20 {
        lines += &format!("{} {} 0 {} {} 0\n", 2 * i, i, 2 * i + 1, i);
    }
    for i in 0..20 {
        lines += &format!("{} {} 0 {} {} 0\n", i, i / 2, i + 100, (i + 100) / 2);
    }
    let pairs_file = dir.path().join(phototour::TEST_PAIRS_FILE);
    std::fs::write(&pairs_file, lines).unwrap();
    let pairs = phototour::read_pairs(&pairs_file).unwrap();
    assert_eq!(pairs.len(), 40);
    assert!(pairs[..20].iter().all(|p| p.matching) && pairs[20..].iter().all(|p| !p.matching));
    // Descriptor = grey level: matching pairs differ by 1/255, non-matching by 100/255, so every
    // positive ranks first: FPR95 = 0. With a descriptor that puts 5 negatives (ids 0..4 vs
    // 100..104) at distance 0, those negatives rank first: FPR95 = 5/20 = 25 %.
    let mut grey = |p: &Array3<f32>| -> descl::Result<Descriptors> {
        let n = p.shape()[0];
        Ok(Descriptors::Float(Array2::from_shape_fn(
            (n, 1),
            |(i, _)| p[[i, 5, 5]],
        )))
    };
    let r = phototour::evaluate(dir.path(), &pairs_file, &mut grey, &Silent).unwrap();
    assert_eq!(r.pairs, 40);
    assert_eq!(r.fpr95, 0.0);
    let mut folded = |p: &Array3<f32>| -> descl::Result<Descriptors> {
        let n = p.shape()[0];
        Ok(Descriptors::Float(Array2::from_shape_fn(
            (n, 1),
            |(i, _)| {
                let g = (p[[i, 5, 5]] * 255.0).round();
                // grey 100..104 → 0..4, so pairs (i, i+100), i < 5, collide.
                if (100.0..105.0).contains(&g) {
                    g - 100.0
                } else {
                    g
                }
            },
        )))
    };
    let r = phototour::evaluate(dir.path(), &pairs_file, &mut folded, &Silent).unwrap();
    assert!((r.fpr95 - 25.0).abs() < 1e-9, "{}", r.fpr95);
    assert!(r.roc.first() == Some(&(0.0, 0.0)) && r.roc.last() == Some(&(1.0, 1.0)));
}

#[test]
fn malformed_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m50_100000_100000_0.txt");
    std::fs::write(&f, "1 2 0 3 4\n").unwrap();
    let e = phototour::read_pairs(&f).unwrap_err().to_string();
    assert!(
        e.contains("m50_100000_100000_0.txt") && e.contains("6"),
        "{e}"
    );
    let info = dir.path().join("info.txt");
    std::fs::write(&info, "12 0\nx 0\n").unwrap();
    assert!(phototour::read_info(&info)
        .unwrap_err()
        .to_string()
        .contains("line 2"));
}
