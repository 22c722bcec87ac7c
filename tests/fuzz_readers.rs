//! Property-based fuzzing of every reader of untrusted files: whatever the bytes, a reader
//! returns a value or an error naming the file, never a panic, an abort or a hang. Random bytes
//! and mutations (byte flips, truncations) of valid files. The suite runs a short budget
//! (`PROPTEST_CASES`, 64 by default here); a longer run is
//! `PROPTEST_CASES=20000 cargo test --test fuzz_readers`. Inputs that once failed are kept in
//! `tests/fuzz_readers.proptest-regressions` and replayed first.

use descl::describe::Descriptors;
use descl::features::{FeatureMeta, Features};
use descl::frame::Frame;
use proptest::prelude::*;
use std::path::Path;

/// A valid features file's bytes (3 frames, 128-d float descriptors).
fn valid_features_npz(dir: &Path) -> Vec<u8> {
    let f = Features {
        frames: (0..3)
            .map(|i| Frame {
                x: i as f32,
                y: 2.0 * i as f32,
                a: [[6.0, 0.0], [0.0, 6.0]],
            })
            .collect(),
        scores: vec![1.0, 0.5, 0.25],
        descriptors: Descriptors::Float(ndarray::Array2::from_elem((3, 128), 0.088_388_35)),
        meta: FeatureMeta {
            model: "m".into(),
            model_sha256: None,
            detector: "dog".into(),
            image_width: 64,
            image_height: 48,
            image: "x.png".into(),
            name: None,
            provenance: None,
            content: None,
        },
    };
    let p = dir.join("valid.npz");
    descl::io::features::write_features(&p, &f).unwrap();
    std::fs::read(&p).unwrap()
}

/// Writes `bytes` and runs every file reader on them; errors must name the file.
fn read_all(dir: &Path, bytes: &[u8]) {
    let p = dir.join("fuzz.bin");
    std::fs::write(&p, bytes).unwrap();
    let name = p.display().to_string();
    if let Err(e) = descl::io::features::read_features(&p) {
        assert!(e.to_string().contains(&name), "{e}");
    }
    if let Err(e) = descl::io::matches::read_matches(&p) {
        assert!(e.to_string().contains(&name), "{e}");
    }
    if let Err(e) = descl::model::card::ModelCard::load(&p) {
        assert!(e.to_string().contains(&name), "{e}");
    }
    let _ = descl::io::colmap::read_keypoints(&p);
    let _ = descl::io::strecha::read_camera(&p);
    let _ = descl::eval::phototour::read_info(&p);
    let _ = descl::eval::phototour::read_pairs(&p);
    let _ = descl::eval::hpatches::load_patch_file(&p);
    let _ = descl::image::load_gray(&p);
    let _ = descl::io::npz::NpyArray::from_npy(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let dir = tempfile::tempdir().unwrap();
        read_all(dir.path(), &bytes);
    }

    #[test]
    fn mutated_features_files_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = valid_features_npz(dir.path());
        for (at, v) in flips {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        read_all(dir.path(), &bytes);
    }

    #[test]
    fn mutated_npy_headers_never_panic(
        shape in proptest::collection::vec(0u64..u64::MAX, 0..4),
        descr in prop::sample::select(vec!["<f4", "|u1", "<u4", "<f8", "<U7", ">f4", "<c8", ""]),
        fortran in any::<bool>(),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let dict = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': ({}{}), }}",
            if fortran { "True" } else { "False" },
            dims.join(", "),
            if dims.len() == 1 { "," } else { "" }
        );
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        bytes.extend_from_slice(dict.as_bytes());
        bytes.extend_from_slice(&tail);
        // Huge declared shapes must be refused from the header, never allocated.
        let _ = descl::io::npz::NpyArray::from_npy(&bytes);
    }
}

/// A features file whose `meta` declares `<U4611686018427387904` strings: 4 × that wraps to 0
/// in a usize, which once reached `chunks_exact(0)` and panicked. It must be a format error
/// naming the file and the dtype.
#[test]
fn a_meta_dtype_whose_size_overflows_is_a_format_error() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let valid = valid_features_npz(dir.path());
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(valid)).unwrap();
    let bad = dir.path().join("bad.npz");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&bad).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    for i in 0..archive.len() {
        let mut member = archive.by_index(i).unwrap();
        let name = member.name().unwrap().to_string();
        let mut bytes = Vec::new();
        member.read_to_end(&mut bytes).unwrap();
        if name == "meta.npy" {
            let dict = "{'descr': '<U4611686018427387904', 'fortran_order': False, 'shape': (), }";
            bytes = b"\x93NUMPY\x01\x00".to_vec();
            bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
            bytes.extend_from_slice(dict.as_bytes());
        }
        zip.start_file(name, options).unwrap();
        zip.write_all(&bytes).unwrap();
    }
    zip.finish().unwrap();
    let e = descl::io::features::read_features(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&bad.display().to_string()), "{e}");
    assert!(e.contains("<U4611686018427387904"), "{e}");
}
