//! Distillation (`distill` in a run config, `descl_training::distill`): a student trained on a
//! teacher's distances alone comes closer to them, its card names the teacher, and a teacher
//! that cannot teach this student is refused before any step.

mod common;

use descl_training::train::{train, RunConfig};
use std::path::Path;

static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn distill_losses(log: &Path) -> Vec<f64> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["distill_loss"].as_f64())
        .collect()
}

fn student(dir: &Path, teacher: &Path, arch: &str, iterations: usize) -> RunConfig {
    common::tiny_config(
        dir,
        "student",
        "student-run",
        iterations,
        serde_json::json!({
            "net": {"arch": arch, "width": 0.25},
            "distill": {"teacher": teacher, "target": "distances", "metric_weight": 0.0},
            "log_every": 5,
        }),
    )
}

#[test]
fn a_student_learns_its_teachers_distances_and_names_it() {
    let _turn = TORCH_RNG.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    common::toy_tracks(&dir.path().join("tracks.bin"), 200, 0.05);
    // The teacher: a tiny TFeat trained on the toy tracks with HardNet's loss.
    let teacher_cfg = common::tiny_config(
        dir.path(),
        "teacher",
        "teacher-run",
        30,
        serde_json::json!({}),
    );
    train(&teacher_cfg, false).unwrap();
    let teacher = dir.path().join("models/teacher.onnx");
    assert!(teacher.is_file());

    let summary = train(&student(dir.path(), &teacher, "tfeat", 60), false).unwrap();
    let losses = distill_losses(&dir.path().join("student-run/log.jsonl"));
    assert!(losses.len() >= 10, "{losses:?}");
    let (first, last) = (losses[0], losses[losses.len() - 1]);
    assert!(
        last < 0.5 * first,
        "the distances did not come closer: {losses:?}"
    );
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary.card).unwrap()).unwrap();
    let d = &card["training"]["distill"];
    assert_eq!(d["teacher"]["name"], "teacher");
    assert_eq!(d["target"], "distances");
    let teacher_card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(teacher.with_extension("json")).unwrap()).unwrap();
    assert_eq!(d["teacher"]["sha256"], teacher_card["sha256"]);

    // A teacher whose file no longer is its card's: refused before any step.
    let mut bytes = std::fs::read(&teacher).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&teacher, bytes).unwrap();
    let mut cfg = student(dir.path(), &teacher, "tfeat", 10);
    cfg.out = dir.path().join("refused-run");
    let err = format!("{:#}", train(&cfg, false).unwrap_err());
    assert!(
        err.contains("teacher") && err.contains("teacher.onnx"),
        "{err}"
    );
    assert!(!dir.path().join("refused-run/log.jsonl").exists());
}
