//! `model::resolve`: names in the models folder, paths with and without a card beside them.
//! One test in this binary, because it sets `DESCL_MODELS` for the whole process.


use descl::model::card::sha256_file;
use descl::model::{list_cards, models_dir, resolve, MODELS_ENV};
use std::path::Path;

fn card_json(name: &str, file: &str, sha: &str) -> String {
    serde_json::json!({
        "name": name, "file": file, "sha256": sha, "architecture": "tfeat",
        "input": {"size": 32, "range": [0.0, 1.0]}, "output": {"dim": 128, "kind": "float"},
        "patch": {"size": 32, "magnification": 5.0}, "training": {"method": "hardnet"}
    })
    .to_string()
}

fn write(p: &Path, bytes: &[u8]) {
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn resolve_names_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY (edition 2021: safe): the only test in this binary, so no other thread reads env.
    std::env::set_var(MODELS_ENV, dir.path());
    assert_eq!(models_dir(), dir.path());

    let onnx = dir.path().join("a.onnx");
    write(&onnx, b"model a");
    let sha = sha256_file(&onnx).unwrap();
    write(
        &dir.path().join("a.json"),
        card_json("a", "a.onnx", &sha).as_bytes(),
    );

    // By name, by .onnx path (card found beside it), by card path.
    for key in [
        "a".to_string(),
        onnx.display().to_string(),
        dir.path().join("a.json").display().to_string(),
    ] {
        let r = resolve(&key).unwrap();
        assert_eq!(r.onnx, onnx, "{key}");
        let (card, _) = r.card.as_ref().unwrap();
        assert_eq!((card.name.as_str(), card.patch.magnification), ("a", 5.0));
        assert_eq!(r.display_name(), "a");
    }
    assert_eq!(list_cards().unwrap().len(), 1);

    // An uncarded .onnx elsewhere: no card, named by its path.
    let other = tempfile::tempdir().unwrap();
    let bare = other.path().join("bare.onnx");
    write(&bare, b"bare");
    let r = resolve(bare.to_str().unwrap()).unwrap();
    assert!(r.card.is_none());
    assert_eq!(r.display_name(), bare.display().to_string());

    // Unknown name: the error lists the known ones.
    let e = resolve("nope").unwrap_err().to_string();
    assert!(e.contains("nope") && e.contains("known: a"), "{e}");

    // A card beside an .onnx that describes another file.
    let c = other.path().join("c.onnx");
    write(&c, b"c");
    write(
        &other.path().join("c.json"),
        card_json("c", "bare.onnx", &sha256_file(&bare).unwrap()).as_bytes(),
    );
    let e = resolve(c.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("c.json") && e.contains("not"), "{e}");

    // The model changed after its card was written.
    write(&onnx, b"model a, retrained");
    let e = resolve("a").unwrap_err().to_string();
    assert!(e.contains("a.onnx") && e.contains("SHA-256"), "{e}");

    // A card whose model file is missing.
    std::fs::remove_file(&onnx).unwrap();
    let e = resolve("a").unwrap_err().to_string();
    assert!(e.contains("a.onnx") && e.contains("missing"), "{e}");

    // A malformed card is reported by name when listing.
    write(
        &dir.path().join("broken.json"),
        br#"{"sha256": "x", "architecture": 3}"#,
    );
    let e = list_cards().unwrap_err().to_string();
    assert!(e.contains("broken.json"), "{e}");
}
