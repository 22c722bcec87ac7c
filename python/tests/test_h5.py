"""`descl extract/match --format h5`: hloc's files, read with h5py and checked against hloc's
layout (hloc/extract_features.py, match_features.py, utils/parsers.py; hloc is not on PyPI, so
its readers are not run and nothing of them is re-implemented here beyond the facts below):

- features.h5: a group per image name; keypoints float32 N×2 (attribute `uncertainty`),
  descriptors D×N, scores float32 N, image_size int64 (W, H);
- matches.h5: a group `names_to_pair(a, b)` = "a/b" ('/' in names → '-'); matches0 int16 N_a
  (−1 unmatched), matching_scores0 float16 N_a;
- a pairs file of hloc's pairs_from_* (`name0 name1` per line, either order, repeats) is accepted.
"""

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

KEYPOINTS = 1024


@pytest.fixture(scope="module")
def hloc_run(tmp_path_factory, fountain, run_cli):
    """Three fountain images extracted and matched into h5 (and npz, the reference)."""
    work = tmp_path_factory.mktemp("hloc")
    images = work / "images"
    images.mkdir()
    for p in fountain:
        (images / p.name).symlink_to(p)
    names = [p.name for p in fountain]
    pairs = work / "pairs.txt"
    # hloc's pairs_from_exhaustive lists each pair once; retrieval lists both orders.
    pairs.write_text(
        f"{names[0]} {names[1]}\n{names[1]} {names[0]}\n{names[0]} {names[2]}\n{names[1]} {names[2]}\n"
    )
    out = work / "h5"
    run_cli("extract", images, "--out", out, "--format", "h5", "--max-keypoints", KEYPOINTS)
    run_cli("match", "--images", images, "--pairs", pairs, "--out-dir", out, "--format", "h5",
            "--max-keypoints", KEYPOINTS)
    npz = work / "npz"
    run_cli("extract", images, "--out", npz, "--max-keypoints", KEYPOINTS)
    return {"images": images, "names": names, "pairs": pairs, "out": out, "npz": npz}


def names_to_pair(a, b):
    return "/".join((a.replace("/", "-"), b.replace("/", "-")))


def test_features_file_has_hlocs_names_shapes_and_dtypes(hloc_run):
    with h5py.File(hloc_run["out"] / "features.h5", "r") as f:
        assert sorted(f.keys()) == sorted(hloc_run["names"])
        for name in hloc_run["names"]:
            g = f[name]
            assert set(g.keys()) == {"keypoints", "descriptors", "scores", "image_size"}
            kp, desc, scores = g["keypoints"], g["descriptors"], g["scores"]
            n = kp.shape[0]
            assert 0 < n <= KEYPOINTS
            assert kp.dtype == np.float32 and kp.shape == (n, 2)
            assert float(kp.attrs["uncertainty"]) == 1.0
            assert desc.dtype == np.float32 and desc.shape == (128, n)
            # One unit descriptor per column (hloc's D×N), not per row.
            np.testing.assert_allclose(np.linalg.norm(desc[()], axis=0), 1.0, atol=1e-4)
            assert scores.dtype == np.float32 and scores.shape == (n,)
            assert g["image_size"].dtype == np.int64
            assert list(g["image_size"][()]) == [1536, 1024]


def test_features_equal_the_npz_of_the_same_extraction(hloc_run):
    with h5py.File(hloc_run["out"] / "features.h5", "r") as f:
        for name in hloc_run["names"]:
            z = np.load(hloc_run["npz"] / (name.rsplit(".", 1)[0] + ".npz"))
            # hloc's keypoint convention is descl's (pixel centre at 0); COLMAP's adds 0.5.
            np.testing.assert_array_equal(f[name]["keypoints"][()], z["frames"][:, :2])
            np.testing.assert_array_equal(f[name]["descriptors"][()], z["descriptors"].T)
            np.testing.assert_array_equal(f[name]["scores"][()], z["scores"])


def test_matches_file_has_hlocs_pair_keys_and_dtypes(hloc_run, run_cli, tmp_path):
    names = hloc_run["names"]
    expected = {names_to_pair(names[0], names[1]), names_to_pair(names[0], names[2]),
                names_to_pair(names[1], names[2])}
    with h5py.File(hloc_run["out"] / "matches.h5", "r") as m, \
            h5py.File(hloc_run["out"] / "features.h5", "r") as f:
        keys = set()
        m.visititems(lambda k, o: keys.add(k) if isinstance(o, h5py.Group) and "matches0" in o else None)
        assert keys == expected
        for key in expected:
            a, b = key.split("/")
            m0, s0 = m[key]["matches0"][()], m[key]["matching_scores0"][()]
            na, nb = f[a]["keypoints"].shape[0], f[b]["keypoints"].shape[0]
            assert m0.dtype == np.int16 and m0.shape == (na,)
            assert s0.dtype == np.float16 and s0.shape == (na,)
            valid = m0 != -1
            assert valid.sum() > 100, f"{key}: {valid.sum()} matches"
            assert m0.min() >= -1 and m0.max() < nb
            assert np.all(s0[~valid] == 0) and np.all(s0[valid] > 0)
            # Same matches as `descl match A B` writes to .npz; scores are hloc's (1 + cos)/2.
            out = tmp_path / f"{a}-{b}.npz"
            run_cli("match", hloc_run["npz"] / (a.rsplit(".", 1)[0] + ".npz"),
                    hloc_run["npz"] / (b.rsplit(".", 1)[0] + ".npz"), "--out", out)
            z = np.load(out)
            idx = np.flatnonzero(valid)
            np.testing.assert_array_equal(np.stack([idx, m0[idx]], -1), z["matches"].astype(np.int64))
            da, db = f[a]["descriptors"][()], f[b]["descriptors"][()]
            cos = np.sum(da[:, idx] * db[:, m0[idx]], axis=0)
            np.testing.assert_allclose(s0[idx].astype(np.float32), (1 + cos) / 2, atol=2e-3)


def test_rerun_skips_stored_pairs(hloc_run, run_cli):
    before = (hloc_run["out"] / "matches.h5").stat().st_mtime_ns
    out = run_cli("match", "--images", hloc_run["images"], "--pairs", hloc_run["pairs"],
                  "--out-dir", hloc_run["out"], "--format", "h5", "--max-keypoints", KEYPOINTS,
                  "--json")
    import json
    summary = json.loads(out)
    assert summary["skipped_existing"] == 3 and summary["failed"] == 0
    assert (hloc_run["out"] / "matches.h5").stat().st_mtime_ns == before
