//! `training/scripts/gpu-return`: what a GPU lease brings back through the device tool's return
//! folder, which takes at most 8 files of 16 MiB, 64 MiB together. Finished runs come back
//! without their checkpoints (nothing resumes them), runs the time limit stopped with them, and a
//! run that no longer fits is named, never dropped silently. The limits are scaled down through
//! the script's environment overrides so that the files stay small.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const PIECE_BYTES: usize = 8192;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu-return")
}

/// Bytes that do not compress or repeat, so that sizes are what the test says.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A run folder as `descl-train train` leaves it: at `step` of `iterations`, with a checkpoint of
/// `checkpoint_bytes`.
fn run_folder(
    root: &Path,
    name: &str,
    step: u64,
    iterations: u64,
    checkpoint_bytes: usize,
) -> PathBuf {
    let dir = root.join(name);
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("config.json"),
        format!("{{\"name\": \"{name}\", \"iterations\": {iterations}}}"),
    )
    .unwrap();
    fs::write(
        dir.join("checkpoint.json"),
        format!("{{\"step\": {step}, \"seed\": 1}}"),
    )
    .unwrap();
    fs::write(
        dir.join("checkpoint.safetensors"),
        noise(checkpoint_bytes, step + 1),
    )
    .unwrap();
    fs::write(dir.join("model.safetensors"), noise(3000, step + 2)).unwrap();
    fs::write(dir.join(format!("{name}.onnx")), noise(2000, step + 3)).unwrap();
    fs::write(dir.join(format!("{name}.json")), "{\"card\": true}").unwrap();
    fs::write(dir.join("log.jsonl"), "{\"it\": 1}\n").unwrap();
    dir
}

fn gpu_return(out: &Path, runs: &[&Path], max_files: usize, max_bytes: usize) -> (i32, String) {
    gpu_return_with(out, runs, max_files, max_bytes, &PIECE_BYTES.to_string())
}

fn gpu_return_with(
    out: &Path,
    runs: &[&Path],
    max_files: usize,
    max_bytes: usize,
    piece: &str,
) -> (i32, String) {
    let o = Command::new("bash")
        .arg(script())
        .arg(out)
        .args(runs)
        .env("DESCL_RETURN_MAX_FILES", max_files.to_string())
        .env("DESCL_RETURN_MAX_BYTES", max_bytes.to_string())
        .env("DESCL_RETURN_PIECE_BYTES", piece)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), text)
}

/// The returned folders, reassembled as the README says (`cat NAME.tar.* | tar -xf -`):
/// run name -> file name -> bytes.
fn reassemble(out: &Path) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
    let mut pieces: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for e in fs::read_dir(out).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_string_lossy().to_string();
        let (name, _) = file.split_once(".tar.").unwrap();
        pieces.entry(name.to_string()).or_default().push(p);
    }
    let back = tempfile::tempdir().unwrap();
    let mut runs = BTreeMap::new();
    for (name, mut parts) in pieces {
        parts.sort();
        let mut tar = Vec::new();
        for p in &parts {
            tar.extend(fs::read(p).unwrap());
        }
        let tarfile = back.path().join(format!("{name}.tar"));
        fs::write(&tarfile, tar).unwrap();
        let ok = Command::new("tar")
            .arg("-C")
            .arg(back.path())
            .arg("-xf")
            .arg(&tarfile)
            .status()
            .unwrap();
        assert!(ok.success(), "{name}: the pieces do not make a tar archive");
        let mut files = BTreeMap::new();
        for e in fs::read_dir(back.path().join(&name)).unwrap() {
            let p = e.unwrap().path();
            files.insert(
                p.file_name().unwrap().to_string_lossy().to_string(),
                fs::read(&p).unwrap(),
            );
        }
        runs.insert(name, files);
    }
    runs
}

/// Every file in `out` within the (scaled) tool limits.
fn assert_within_limits(out: &Path, max_files: usize, max_bytes: usize) {
    let sizes: Vec<u64> = fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    assert!(
        sizes.len() <= max_files,
        "{} files returned, limit {max_files}",
        sizes.len()
    );
    assert!(
        sizes.iter().all(|&s| s as usize <= PIECE_BYTES),
        "a piece over {PIECE_BYTES} bytes: {sizes:?}"
    );
    assert!(
        sizes.iter().sum::<u64>() as usize <= max_bytes,
        "{sizes:?} over {max_bytes} bytes"
    );
}

#[test]
fn finished_runs_leave_their_checkpoints_and_stopped_runs_bring_them() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let done = run_folder(&runs, "done", 4500, 4500, 30_000);
    let stopped = run_folder(&runs, "stopped", 3750, 4500, 9000);
    let out = dir.path().join("out");
    let (code, text) = gpu_return(&out, &[&done, &stopped], 8, 64 * 1024);
    assert_eq!(code, 0, "{text}");
    assert_within_limits(&out, 8, 64 * 1024);
    let back = reassemble(&out);
    let d = &back["done"];
    assert!(
        !d.contains_key("checkpoint.safetensors"),
        "a finished run's checkpoint came back: {text}"
    );
    assert!(!d.contains_key("model.safetensors"));
    assert_eq!(d["done.onnx"], fs::read(done.join("done.onnx")).unwrap());
    assert!(
        d.contains_key("checkpoint.json")
            && d.contains_key("log.jsonl")
            && d.contains_key("done.json")
    );
    let s = &back["stopped"];
    assert_eq!(
        s["checkpoint.safetensors"],
        fs::read(stopped.join("checkpoint.safetensors")).unwrap(),
        "a stopped run must bring its checkpoint whole: {text}"
    );
    assert!(!s.contains_key("model.safetensors"));
}

#[test]
fn a_run_past_the_limits_is_named_and_the_exit_code_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let a = run_folder(&runs, "a", 100, 100, 50_000);
    let b = run_folder(&runs, "b", 40, 100, 40_000);
    let c = run_folder(&runs, "c", 60, 100, 40_000);
    // Room for the finished run (~10 kB as a tar) and one stopped run with its checkpoint
    // (~50 kB); the other stopped run fits only without it.
    let (max_files, max_bytes) = (20, 75_000);
    let out = dir.path().join("out");
    let (code, text) = gpu_return(&out, &[&b, &c, &a], max_files, max_bytes);
    assert_eq!(code, 3, "something was held back, yet exit {code}: {text}");
    assert_within_limits(&out, max_files, max_bytes);
    let back = reassemble(&out);
    assert!(
        back.contains_key("a") && !back["a"].contains_key("checkpoint.safetensors"),
        "{text}"
    );
    assert!(back["b"].contains_key("checkpoint.safetensors"), "{text}");
    assert!(
        back.contains_key("c") && !back["c"].contains_key("checkpoint.safetensors"),
        "{text}"
    );
    assert!(
        text.contains("c: returned WITHOUT checkpoint.safetensors"),
        "{text}"
    );

    // Nothing fits: every run is named as staying on the host, and nothing partial is written.
    let out2 = dir.path().join("out2");
    let (code, text) = gpu_return(&out2, &[&a, &b], 8, 1024);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.contains("a: NOT returned") && text.contains("b: NOT returned"),
        "{text}"
    );
    assert_eq!(fs::read_dir(&out2).unwrap().count(), 0, "{text}");
}

#[test]
fn files_already_in_the_return_folder_count_against_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let a = run_folder(&runs, "a", 100, 100, 1000);
    let out = dir.path().join("out");
    fs::create_dir_all(&out).unwrap();
    for i in 0..8 {
        fs::write(out.join(format!("other.{i}")), b"x").unwrap();
    }
    let (code, text) = gpu_return(&out, &[&a], 8, 64 * 1024);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("a: NOT returned"), "{text}");
}

#[test]
fn hostile_run_folders_are_named_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (r1, r2) = (dir.path().join("r1"), dir.path().join("r2"));
    let a1 = run_folder(&r1, "a", 100, 100, 1000);
    let a2 = run_folder(&r2, "a", 100, 100, 1000);
    let bad = run_folder(&r1, "my run", 100, 100, 1000);

    // Two folders of one name would overwrite each other's pieces: the second is refused.
    let out = dir.path().join("out");
    let (code, text) = gpu_return(&out, &[&a1, &a2, &bad], 8, 64 * 1024);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("a is already in this call"), "{text}");
    // A name the tool would not return (a space) is named, not written.
    assert!(
        text.contains("my run: NOT returned: the name must be"),
        "{text}"
    );
    let back = reassemble(&out);
    assert_eq!(back.keys().collect::<Vec<_>>(), vec!["a"]);
    assert_eq!(back["a"]["a.onnx"], fs::read(a1.join("a.onnx")).unwrap());

    // Pieces already in the return folder under that name: refused, not mixed in.
    let (code, text) = gpu_return(&out, &[&a2], 16, 64 * 1024);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("already in this call or in"), "{text}");

    // A run folder that is a symbolic link brings its files, not the link.
    let links = dir.path().join("links");
    fs::create_dir_all(&links).unwrap();
    let linked = links.join("b");
    std::os::unix::fs::symlink(&a1, &linked).unwrap();
    let out3 = dir.path().join("out3");
    let (code, text) = gpu_return(&out3, &[&linked], 8, 64 * 1024);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        reassemble(&out3)["b"]["a.onnx"],
        fs::read(a1.join("a.onnx")).unwrap()
    );

    // More than ten pieces: suffixes of one width keep `cat NAME.tar.*` in order.
    let big = run_folder(&dir.path().join("r3"), "big", 5, 100, 120_000);
    let out4 = dir.path().join("out4");
    let (code, text) = gpu_return(&out4, &[&big], 40, 1 << 20);
    assert_eq!(code, 0, "{text}");
    assert!(fs::read_dir(&out4).unwrap().count() > 10, "{text}");
    assert_eq!(
        reassemble(&out4)["big"]["checkpoint.safetensors"],
        fs::read(big.join("checkpoint.safetensors")).unwrap()
    );

    // Limits that are not whole numbers, or pieces the tool would not take, are refused.
    for piece in ["0", "-5", "abc", "17000000"] {
        let (code, text) = gpu_return_with(&dir.path().join("out5"), &[&a1], 8, 64 * 1024, piece);
        assert_eq!(code, 2, "piece {piece}: {text}");
    }
}
