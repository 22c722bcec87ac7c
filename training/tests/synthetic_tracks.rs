//! Synthetic tracks from a real training photo: views of one class show the same structure
//! (higher normalised correlation than patches of different classes), generation is
//! deterministic, and it reads only the folder it is given.

mod common;

use descl_training::data::synthetic::{generate, SyntheticConfig};
use descl_training::data::PATCH_PIXELS;

fn ncc(a: &[u8], b: &[u8]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (
        a.iter().map(|&v| v as f64).sum::<f64>() / n,
        b.iter().map(|&v| v as f64).sum::<f64>() / n,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64 - ma, y as f64 - mb);
        sab += x * y;
        saa += x * x;
        sbb += y * y;
    }
    sab / (saa * sbb).sqrt().max(1e-12)
}

#[test]
fn tracks_from_a_training_photo_are_consistent_and_deterministic() {
    let Some(root) =
        common::data_root_or_skip("tracks_from_a_training_photo_are_consistent_and_deterministic")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("train/lightglue/dsc_0410.jpg"),
        dir.path().join("a.jpg"),
    )
    .unwrap();
    let cfg = SyntheticConfig {
        images: Some(dir.path().to_path_buf()),
        groups: 1,
        max_side: 640,
        seed: 9,
        ..Default::default()
    };
    let set = generate(&cfg).unwrap();
    let n = set.header.classes;
    assert_eq!(set.header.views, 3);
    assert!(n >= 50, "only {n} tracks");
    assert_eq!(set.pixels.len(), n * 3 * PATCH_PIXELS);
    let (mut same, mut other) = (0.0, 0.0);
    for c in 0..n {
        same += ncc(set.patch(c, 0), set.patch(c, 1));
        other += ncc(set.patch(c, 0), set.patch((c + 1) % n, 1));
    }
    let (same, other) = (same / n as f64, other / n as f64);
    assert!(
        same > 0.5 && same > other + 0.3,
        "mean NCC same class {same:.3}, other class {other:.3}"
    );
    assert_eq!(
        generate(&cfg).unwrap(),
        set,
        "generation must be deterministic"
    );
}
