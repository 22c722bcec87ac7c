//! Files built to hurt: archives that lie about their sizes, decompression bombs, devices and
//! FIFOs given as images. Each gets a clear error at once, with bounded memory, never a crash.
//! One test function reads files in this process and measures its peak memory; the others
//! (hostile `features.h5` files) only write small files here and run `descl` in a child
//! process under a memory and time limit, so they may run beside it.

mod common;

use common::{descl, run};
use descl::describe::Descriptors;
use descl::features::{FeatureMeta, Features};
use descl::frame::Frame;
use descl::io::features::write_features;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Peak resident memory of this process so far (Linux `VmHWM`), in MiB.
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    kb / 1024.0
}

/// An `.npz` whose one member, `descriptors.npy`, is `zeros` bytes of zeros behind a valid
/// `.npy` header, stored with `method`.
fn npz_of_zeros(path: &Path, zeros: usize, method: zip::CompressionMethod, zip64: bool) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(method)
        .large_file(zip64);
    zip.start_file("descriptors.npy", options).unwrap();
    let n = zeros / 4;
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({n},), }}");
    let mut header = dict.into_bytes();
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    zip.write_all(b"\x93NUMPY\x01\x00").unwrap();
    zip.write_all(&(header.len() as u16).to_le_bytes()).unwrap();
    zip.write_all(&header).unwrap();
    let block = vec![0u8; 1 << 20];
    let mut left = zeros;
    while left > 0 {
        let k = left.min(block.len());
        zip.write_all(&block[..k]).unwrap();
        left -= k;
    }
    zip.finish().unwrap();
}

/// Rewrites the uncompressed size of every zip64 extra field (id 0x0001) of `path` to `claim`.
fn claim_zip64_size(path: &Path, claim: u64) -> usize {
    let mut b = std::fs::read(path).unwrap();
    let mut patched = 0;
    let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]) as usize;
    let mut i = 0;
    while i + 4 <= b.len() {
        let sig = u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let (name_at, extra_at) = match sig {
            0x0403_4b50 => (26, 30), // local file header
            0x0201_4b50 => (28, 46), // central directory header
            _ => {
                i += 1;
                continue;
            }
        };
        let (name_len, extra_len) = (u16_at(&b, i + name_at), u16_at(&b, i + name_at + 2));
        let mut e = i + extra_at + name_len;
        let end = e + extra_len;
        while e + 4 <= end {
            let (id, len) = (u16_at(&b, e), u16_at(&b, e + 2));
            if id == 1 && len >= 8 {
                b[e + 4..e + 12].copy_from_slice(&claim.to_le_bytes());
                patched += 1;
            }
            e += 4 + len;
        }
        i += extra_at;
    }
    std::fs::write(path, b).unwrap();
    patched
}

/// Three keypoints with 4-d descriptors: a valid features file's content.
fn small_features() -> Features {
    Features {
        frames: (0..3)
            .map(|i| Frame::from_row([10.0 * i as f32, 5.0, 2.0, 0.0, 0.0, 2.0]))
            .collect(),
        scores: vec![1.0; 3],
        descriptors: Descriptors::Float(ndarray::Array2::from_elem((3, 4), 0.5)),
        meta: FeatureMeta {
            model: "m".into(),
            model_sha256: None,
            detector: "dog".into(),
            image_width: 64,
            image_height: 48,
            image: "a.png".into(),
            name: None,
            provenance: None,
            content: None,
        },
    }
}

/// `descl extract INPUT` must fail within `limit` with `expect` on stderr.
fn extract_fails_fast(input: &Path, expect: &str, limit: Duration) {
    let out = tempfile::tempdir().unwrap();
    let mut child = descl()
        .arg("extract")
        .arg(input)
        .arg("--out")
        .arg(out.path())
        .args(["-m", "sift"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            child.kill().unwrap();
            panic!("{}: still running after {limit:?}", input.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(expect), "{stderr}");
    assert!(stderr.contains(&input.display().to_string()), "{stderr}");
}

#[test]
fn hostile_archives_devices_and_fifos() {
    let dir = tempfile::tempdir().unwrap();

    // A 2^62-byte member claimed by zip64 headers: reading must not reserve the claim.
    let lie = dir.path().join("zip64-lie.npz");
    npz_of_zeros(&lie, 4096, zip::CompressionMethod::Stored, true);
    assert!(
        claim_zip64_size(&lie, 1 << 62) >= 1,
        "no zip64 field patched"
    );
    let before = peak_mib();
    match descl::io::features::read_features(&lie) {
        Err(e) => assert!(e.to_string().contains("zip64-lie.npz"), "{e}"),
        Ok(_) => panic!("a lying archive was read as features"),
    }

    // A deflate bomb: 1 GiB of zeros in about 1 MiB. The error comes long before the data.
    let bomb = dir.path().join("bomb.npz");
    npz_of_zeros(&bomb, 1 << 30, zip::CompressionMethod::Deflated, false);
    assert!(std::fs::metadata(&bomb).unwrap().len() < 4 << 20);
    let e = descl::io::features::read_features(&bomb)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bomb.npz") && e.contains("decompression bomb"),
        "{e}"
    );
    let grown = peak_mib() - before;
    assert!(grown < 100.0, "peak memory grew by {grown:.0} MiB");

    // Many members, each under the per-member floor, adding up (issue 24: 150 deflated
    // members of 16 MiB of zeros took 2.5 GB): a features file reads only its own members, and
    // all members of an archive together have a budget from the file's size.
    let padded = dir.path().join("padded.npz");
    write_features(&padded, &small_features()).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&padded)
        .unwrap();
    let mut zip = zip::ZipWriter::new_append(file).unwrap();
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    let zeros = descl::io::npz::NpyArray {
        shape: vec![(4 << 20) - 32], // with its 128-byte header: 16 MiB, the floor
        data: descl::io::npz::NpyData::F32(vec![0.0; (4 << 20) - 32]),
    }
    .to_npy()
    .unwrap();
    for k in 0..40 {
        zip.start_file(format!("extra{k}.npy"), options).unwrap();
        zip.write_all(&zeros).unwrap();
    }
    drop(zeros);
    zip.finish().unwrap();
    assert!(std::fs::metadata(&padded).unwrap().len() < 4 << 20);
    let f = descl::io::features::read_features(&padded).unwrap();
    assert_eq!(f.frames.len(), 3);
    let e = descl::io::npz::read_npz(&padded).unwrap_err().to_string();
    assert!(
        e.contains("padded.npz") && e.contains("in all") && e.contains("decompression bomb"),
        "{e}"
    );
    let grown = peak_mib() - before;
    assert!(grown < 100.0, "peak memory grew by {grown:.0} MiB");

    // The CLI says the same, and exits non-zero.
    let (ok, _, stderr) = run(descl().arg("match").arg(&bomb).arg(&bomb));
    assert!(!ok && stderr.contains("decompression bomb"), "{stderr}");

    // Devices and FIFOs are not images: a clear error at once (a FIFO would block the open).
    extract_fails_fast(
        Path::new("/dev/zero"),
        "not a regular file",
        Duration::from_secs(20),
    );
    let fifo = dir.path().join("fifo.png");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    extract_fails_fast(&fifo, "not a regular file", Duration::from_secs(20));
}

/// `descl ARGS...` in a child limited to 4 GB of address space (a reader that allocates what a
/// hostile file declares fails there instead of taking the machine's memory), within `limit`.
#[cfg(feature = "h5")]
fn descl_limited(args: &[&std::ffi::OsStr], limit: Duration) -> (bool, String, String) {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "ulimit -v 4000000 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_descl"))
        .args(args);
    common::run_within(&mut cmd, limit)
}

/// A features.h5 descl wrote for three small images, reopened for writing.
#[cfg(feature = "h5")]
fn features_h5(dir: &Path) -> (std::path::PathBuf, hdf5_metno::File) {
    let imgs = dir.join("imgs");
    std::fs::create_dir(&imgs).unwrap();
    for (k, name) in ["a.png", "b.png", "c.png"].into_iter().enumerate() {
        common::gray_image(160 + 16 * k as u32, 120, false)
            .save(imgs.join(name))
            .unwrap();
    }
    let out = dir.join("out");
    let (ok, _, err) = common::extract(&imgs, &out, &["-m", "sift", "--format", "h5"]);
    assert!(ok, "{err}");
    let path = out.join("features.h5");
    let file = hdf5_metno::File::with_options()
        .with_fapl(|p| p.file_locking(false))
        .open_rw(&path)
        .unwrap();
    (path, file)
}

/// A group hard-linked into itself (`f['L/self'] = f['L']`) made the walk over features.h5's
/// groups endless (55 s and 4.5 GB before): refused at once, naming the file.
#[cfg(feature = "h5")]
#[test]
fn an_h5_link_cycle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, file) = features_h5(dir.path());
    file.create_group("L").unwrap();
    file.link_hard("L", "L/self").unwrap();
    file.close().unwrap();
    let m = dir.path().join("m");
    let (ok, _, err) = descl_limited(
        &[
            "match".as_ref(),
            "--exhaustive".as_ref(),
            "--images".as_ref(),
            path.as_os_str(),
            "--out-dir".as_ref(),
            m.as_os_str(),
        ],
        Duration::from_secs(20),
    );
    assert!(
        !ok && err.contains(&path.display().to_string()) && err.contains("hard link"),
        "{err}"
    );
}

/// A `keypoints` dataset declared (10⁹, 2), gzip-chunked and never written, is a few KB on
/// disk; reading it allocated 8 GB. Refused from its declared size, naming the dataset.
#[cfg(feature = "h5")]
#[test]
fn an_h5_dataset_declaring_a_billion_keypoints_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (path, file) = features_h5(dir.path());
    let g = file.group("b.png").unwrap();
    g.unlink("keypoints").unwrap();
    g.new_dataset::<f32>()
        .shape((1_000_000_000, 2))
        .chunk((1 << 16, 2))
        .deflate(9)
        .create("keypoints")
        .unwrap();
    drop(g);
    file.close().unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20);
    let m = dir.path().join("m");
    let (ok, _, err) = descl_limited(
        &[
            "match".as_ref(),
            "--exhaustive".as_ref(),
            "--images".as_ref(),
            path.as_os_str(),
            "--out-dir".as_ref(),
            m.as_os_str(),
        ],
        Duration::from_secs(60),
    );
    assert!(
        !ok && err.contains(&path.join("b.png").display().to_string())
            && err.contains("`keypoints` declares"),
        "{err}"
    );
}
