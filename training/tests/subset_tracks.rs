//! `descl-train subset`: every K-th class of a track file, a file a run trains on as it is
//! (a source without a generator), its origin recorded in the header and so in the card.

mod common;

use descl_training::data::TrackSet;
use std::path::Path;

/// `descl-train subset --tracks TRACKS --every EVERY --out OUT`.
fn subset(tracks: &Path, every: &str, out: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_descl-train"))
        .arg("subset")
        .arg("--tracks")
        .arg(tracks)
        .args(["--every", every, "--out"])
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn a_subset_keeps_every_kth_class_trains_and_its_card_names_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.bin");
    common::toy_tracks(&whole, 160, 0.1);
    let sub = dir.path().join("tracks.bin");
    let out = subset(&whole, "4", &sub);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (all, part) = (
        TrackSet::load(&whole).unwrap(),
        TrackSet::load(&sub).unwrap(),
    );
    assert_eq!(part.header.classes, 40);
    for (k, c) in [(0, 0), (1, 4), (39, 156)] {
        for v in 0..3 {
            assert_eq!(part.patch(k, v), all.patch(c, v), "class {k} view {v}");
        }
    }
    let sha = descl::model::card::sha256_file(&whole).unwrap();
    assert_eq!(part.header.source["of_sha256"], sha.as_str());
    assert_eq!(part.header.source["of"]["generator"], "test");

    // A run on the subset (tiny_config reads dir/tracks.bin) records where its data came from.
    let cfg = common::tiny_config(dir.path(), "on-subset", "out", 2, serde_json::json!({}));
    descl_training::train::train(&cfg, false).unwrap();
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("models/on-subset.json")).unwrap())
            .unwrap();
    assert!(
        card.to_string().contains(&sha),
        "the card does not name the original's sha256: {card}"
    );

    // Written over its own input: refused, the file unchanged.
    let before = std::fs::read(&whole).unwrap();
    let same = subset(&whole, "2", &whole);
    assert!(!same.status.success());
    assert!(String::from_utf8_lossy(&same.stderr).contains("another file"));
    assert_eq!(std::fs::read(&whole).unwrap(), before);
    // K = 0 is an error naming it.
    let zero = subset(&whole, "0", &dir.path().join("z.bin"));
    assert!(!zero.status.success());
    assert!(String::from_utf8_lossy(&zero.stderr).contains("k >= 1"));
}
