//! The relocatable bundle (`scripts/bundle`, issue 25) where descl's libraries cannot be found:
//! a chroot holding only the unpacked bundle, glibc's files and two Strecha images, with /proc
//! mounted in a private mount namespace (descl finds its models and ONNX Runtime from its own
//! path, /proc/self/exe). There the bundled binary extracts and matches the pair, with features
//! and matches equal to the normal build's on the host; the normal binary copied in does not
//! even start (its loader finds no libstdc++/OpenCV), so the chroot really hides the system's.
//!
//! The bundle is made from the binary under test (the dev profile's links the same libraries as
//! the release one). Needs root (chroot, mount) and util-linux's `unshare`: skipped with a
//! message without them; in CI (`CI` set) missing data, ONNX Runtime or tools fail the test.

mod common;

use descl::io::features::read_features;
use descl::io::matches::read_matches;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The base system the bundle relies on: glibc's loader and glibc's libraries (scripts/closure's
/// GLIBC_RE, which the bundle does not carry), at the paths the loader looks for them. libresolv
/// is linked by the `h5` build (HDF5 → libcurl, Kerberos); every glibc library of the list that
/// the machine has is copied, as any glibc system has them all.
const GLIBC_FILES: [&str; 10] = [
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/libm.so.6",
    "/lib/x86_64-linux-gnu/libmvec.so.1",
    "/lib/x86_64-linux-gnu/libdl.so.2",
    "/lib/x86_64-linux-gnu/librt.so.1",
    "/lib/x86_64-linux-gnu/libpthread.so.0",
    "/lib/x86_64-linux-gnu/libresolv.so.2",
    "/lib/x86_64-linux-gnu/libutil.so.1",
    "/lib/x86_64-linux-gnu/libanl.so.1",
];

/// The pair: two overlapping Strecha fountain views.
const PAIR: [&str; 2] = ["0000.jpg", "0001.jpg"];

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn tool(name: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !p.is_empty()).then(|| PathBuf::from(p))
}

/// Runs `args` inside the chroot `root` with an empty environment and /proc mounted (in a
/// private mount namespace, so nothing stays mounted): (success, stdout, stderr).
fn in_chroot(root: &Path, chroot: &Path, args: &[&str]) -> (bool, String, String) {
    let script = format!(
        "mount -t proc proc '{}/proc' && exec env -i '{}' '{}' {}",
        root.display(),
        chroot.display(),
        root.display(),
        args.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    common::run(Command::new("unshare").args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]))
}

#[test]
fn bundle_runs_in_a_chroot_without_system_libraries_and_matches_the_normal_build() {
    let test = "bundle_runs_in_a_chroot";
    let ci = std::env::var_os("CI").is_some();
    if !is_root() {
        eprintln!("{test}: skipped, needs root (chroot, mount)");
        return;
    }
    let (Some(chroot), Some(_)) = (tool("chroot"), tool("unshare")) else {
        assert!(!ci, "{test}: chroot or unshare missing in CI");
        eprintln!("{test}: skipped, chroot or unshare not installed");
        return;
    };
    let Some(data) = common::data_root_or_skip(test) else {
        return;
    };
    if !common::ort_or_skip(test) {
        return;
    }
    let images = data.join("strecha/fountain-P11/images");
    let dir = tempfile::tempdir().unwrap();

    // The bundle, from the binary under test, with the default model.
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bundle"))
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_descl"),
            "--models",
            "default",
        ])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scripts/bundle failed: {stderr}");
    let tarball = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let name = tarball
        .file_name()
        .unwrap()
        .to_string_lossy()
        .strip_suffix(".tar.gz")
        .unwrap()
        .to_string();
    assert!(
        name.starts_with("descl-") && name.ends_with("-linux-x86_64"),
        "{name}"
    );

    // The chroot: the unpacked bundle, glibc, the two images; nothing else.
    let root = dir.path().join("root");
    for d in ["opt", "proc", "data", "out", "plain/bin"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let (ok, _, err) = common::run(
        Command::new("tar")
            .arg("-C")
            .arg(root.join("opt"))
            .arg("-xzf")
            .arg(&tarball),
    );
    assert!(ok, "tar: {err}");
    for f in GLIBC_FILES.iter().filter(|f| Path::new(f).exists()) {
        let dst = root.join(f.trim_start_matches('/'));
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(f, &dst).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    for img in PAIR {
        std::fs::copy(images.join(img), root.join("data").join(img)).unwrap();
    }
    let bundled = format!("/opt/{name}/bin/descl");
    let stem = |i: usize| PAIR[i].trim_end_matches(".jpg");

    // The normal binary does not start there: the system's libraries are out of reach.
    std::fs::copy(env!("CARGO_BIN_EXE_descl"), root.join("plain/bin/descl")).unwrap();
    let (ok, _, err) = in_chroot(&root, &chroot, &["/plain/bin/descl", "--version"]);
    assert!(
        !ok && err.contains("error while loading shared libraries"),
        "the normal binary started in the chroot: {err}"
    );

    // The bundle: extract and match the pair.
    let (ok, _, err) = in_chroot(
        &root,
        &chroot,
        &[&bundled, "extract", "/data", "--out", "/out"],
    );
    assert!(ok, "bundled extract: {err}");
    let (a, b) = (
        format!("/out/{}.npz", stem(0)),
        format!("/out/{}.npz", stem(1)),
    );
    let (ok, _, err) = in_chroot(
        &root,
        &chroot,
        &[&bundled, "match", &a, &b, "--out", "/out/pair.npz"],
    );
    assert!(ok, "bundled match: {err}");

    // The normal build on the host, same inputs.
    let host = dir.path().join("host");
    let (ok, _, err) = common::run(
        common::descl()
            .arg("extract")
            .arg(root.join("data"))
            .arg("--out")
            .arg(&host),
    );
    assert!(ok, "{err}");
    let (ok, _, err) = common::run(
        common::descl()
            .arg("match")
            .arg(host.join(format!("{}.npz", stem(0))))
            .arg(host.join(format!("{}.npz", stem(1))))
            .arg("--out")
            .arg(host.join("pair.npz")),
    );
    assert!(ok, "{err}");

    for i in 0..2 {
        let file = format!("{}.npz", stem(i));
        let (c, h) = (
            read_features(&root.join("out").join(&file)).unwrap(),
            read_features(&host.join(&file)).unwrap(),
        );
        assert!(c.frames.len() > 500, "{file}: {} frames", c.frames.len());
        assert_eq!(c.frames, h.frames, "{file}: frames differ");
        assert_eq!(c.scores, h.scores, "{file}: scores differ");
        assert_eq!(c.descriptors, h.descriptors, "{file}: descriptors differ");
        assert_eq!(c.meta.model, h.meta.model, "{file}");
    }
    let (c, h) = (
        read_matches(&root.join("out/pair.npz")).unwrap(),
        read_matches(&host.join("pair.npz")).unwrap(),
    );
    assert!(c.pairs.len() > 100, "{} matches", c.pairs.len());
    assert_eq!(
        (&c.pairs, &c.distances, &c.inliers, &c.model),
        (&h.pairs, &h.distances, &h.inliers, &h.model)
    );
}
