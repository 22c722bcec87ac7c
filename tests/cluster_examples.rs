//! The cluster examples run unchanged on one machine: `examples/slurm/*.sbatch` with
//! `SLURM_ARRAY_TASK_ID` set by hand, and the commands of `examples/kubernetes/*-job.yaml` with
//! `JOB_COMPLETION_INDEX` set by hand; both end in a merged COLMAP database that COLMAP's mapper
//! reconstructs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `DATA` with four fountain images in `DATA/images`.
fn data_folder(data: &Path, dir: &Path) -> PathBuf {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    for i in 0..4 {
        let name = format!("{i:04}.jpg");
        std::os::unix::fs::symlink(
            data.join("strecha/fountain-P11/images").join(&name),
            images.join(&name),
        )
        .unwrap();
    }
    dir.to_path_buf()
}

/// A shell command with descl first on PATH and the examples' settings.
fn shell(program: &str, dir: &Path) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_descl")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(program);
    c.env("PATH", path)
        .env("DATA", dir)
        .env("NEIGHBOURS", "2")
        .env("DESCL_EXTRACT_ARGS", "--max-keypoints 512");
    c
}

fn check(c: &mut Command, what: &str) {
    let (ok, _, err) = common::run(c);
    assert!(ok, "{what}: {err}");
}

/// The database has the four images and verified pairs, and the mapper registered images.
fn check_outputs(dir: &Path) {
    let images = common::db_rows(&dir.join("database.db"), "images", "name");
    assert_eq!(images.len(), 4, "{images:?}");
    assert!(
        !common::db_rows(&dir.join("database.db"), "two_view_geometries", "pair_id").is_empty()
    );
    assert!(
        dir.join("sparse/0/images.bin").is_file(),
        "no model in {}",
        dir.display()
    );
}

#[test]
fn slurm_scripts_run_unchanged() {
    let Some(data) = common::data_root_or_skip("slurm_scripts_run_unchanged") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = data_folder(&data, tmp.path());
    let script = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/slurm")
            .join(name)
    };
    const SHARDS: usize = 2;
    for stage in [
        "extract.sbatch",
        "pairs.sbatch",
        "match.sbatch",
        "merge.sbatch",
    ] {
        let array = matches!(stage, "extract.sbatch" | "match.sbatch");
        for task in 0..if array { SHARDS } else { 1 } {
            let mut c = shell("bash", &dir);
            c.arg(script(stage)).env("SHARDS", SHARDS.to_string());
            if array {
                c.env("SLURM_ARRAY_TASK_ID", task.to_string());
            }
            check(&mut c, stage);
        }
    }
    check_outputs(&dir);
}

/// The container script of a manifest (the block under `args: - |`) and its `SHARDS` value.
fn manifest_script(path: &Path) -> (String, Option<usize>) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| l.trim() == "- |").unwrap() + 1;
    let indent = lines[start].len() - lines[start].trim_start().len();
    let script: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| l.len() > indent && l[..indent].trim().is_empty())
        .map(|l| &l[indent..])
        .collect();
    let shards = lines
        .iter()
        .find(|l| l.contains("name: SHARDS"))
        .and_then(|l| l.split('"').nth(1))
        .map(|v| v.parse().unwrap());
    (script.join("\n"), shards)
}

#[test]
fn kubernetes_job_commands_run_unchanged() {
    let Some(data) = common::data_root_or_skip("kubernetes_job_commands_run_unchanged") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = data_folder(&data, tmp.path());
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kubernetes");
    for job in ["extract", "pairs", "match", "merge"] {
        let (script, shards) = manifest_script(&manifests.join(format!("{job}-job.yaml")));
        assert!(script.contains("descl"), "{job}: {script}");
        for index in 0..shards.unwrap_or(1) {
            let mut c = shell("sh", &dir);
            c.args(["-c", &script]);
            if let Some(n) = shards {
                c.env("SHARDS", n.to_string())
                    .env("JOB_COMPLETION_INDEX", index.to_string());
            }
            check(&mut c, job);
        }
    }
    check_outputs(&dir);
}
