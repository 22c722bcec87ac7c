"""The descl Python API on real images, checked against the `descl` command line (the same
library: results must be equal, not close)."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import descl
from conftest import REPO, read_meta


# --- extraction ------------------------------------------------------------------------------


def test_extract_equals_cli_with_defaults(fountain, run_cli, tmp_path):
    """Extractor() and `descl extract IMAGE` with no options: same defaults (model, 2048
    keypoints, DoG, contrast threshold, max image size), same frames and descriptors."""
    image = fountain[0]
    ours = descl.Extractor().extract(image)
    run_cli("extract", image, "--out", tmp_path)
    cli = np.load(tmp_path / f"{image.stem}.npz")
    meta = read_meta(cli)

    assert ours["model"] == descl.DEFAULT_MODEL == meta["model"]
    assert ours["model_sha256"] == meta["model_sha256"]
    assert ours["detector"] == meta["detector"] == "dog"
    assert ours["image_size"] == (meta["image_width"], meta["image_height"]) == (1536, 1024)
    n = len(cli["frames"])
    assert n == descl.DEFAULT_MAX_KEYPOINTS, "the CLI's default keypoint cap differs"
    assert ours["frames"].shape == (n, 6) and ours["frames"].dtype == np.float32
    assert ours["keypoints"].shape == (n, 2) and ours["keypoints"].dtype == np.float32
    assert ours["scores"].shape == (n,) and ours["scores"].dtype == np.float32
    assert ours["descriptors"].shape == (n, 128) and ours["descriptors"].dtype == np.float32
    np.testing.assert_allclose(ours["frames"], cli["frames"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours["descriptors"], cli["descriptors"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ours["scores"], cli["scores"])
    np.testing.assert_array_equal(ours["keypoints"], ours["frames"][:, :2])
    # Unit-length float descriptors, strongest keypoints first.
    np.testing.assert_allclose(np.linalg.norm(ours["descriptors"], axis=1), 1.0, atol=1e-5)
    assert np.all(np.diff(ours["scores"]) <= 0)


def test_colmap_selection_equals_the_cli(fountain, run_cli, tmp_path):
    """selection="colmap": max_keypoints chosen as COLMAP chooses max_num_features (whole DoG
    levels from the coarsest, at most two orientations per location); the same frames as
    `descl extract --selection colmap`."""
    image = fountain[0]
    ex = descl.Extractor(model="rootsift", max_keypoints=300, selection="colmap")
    assert ex.selection == "colmap" and descl.Extractor(model="rootsift").selection == "strongest"
    ours = ex.extract(image)
    run_cli("extract", image, "-m", "rootsift", "--max-keypoints", "300",
            "--selection", "colmap", "--out", tmp_path)
    cli = np.load(tmp_path / f"{image.stem}.npz")
    np.testing.assert_array_equal(ours["frames"], cli["frames"])
    _, counts = np.unique(
        np.column_stack([ours["keypoints"], ours["scores"]]), axis=0, return_counts=True
    )
    # At least 300 locations (the finest kept level whole), never a third orientation.
    assert len(counts) >= 300 and counts.max() <= 2, (len(counts), counts.max())
    with pytest.raises(ValueError, match="unknown selection `best`"):
        descl.Extractor(selection="best")


def test_array_input_equals_path_input(extractor, graf, tmp_path):
    """A file and the same pixels as an array give the same features: RGB uint8 (converted
    with descl's BT.601 weights), gray uint8 and gray float32 in [0, 1]."""
    rgb = np.asarray(Image.open(graf).convert("RGB"))
    from_file = extractor.extract(graf)
    from_rgb = extractor.extract(rgb)
    assert len(from_file["frames"]) > 100
    for key in ("frames", "scores", "descriptors"):
        np.testing.assert_array_equal(from_rgb[key], from_file[key], err_msg=key)
    assert from_rgb["image"] == "<array>"
    assert from_rgb["image_size"] == (rgb.shape[1], rgb.shape[0])

    # RGBA: alpha ignored, as for files.
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 7, np.uint8)])
    np.testing.assert_array_equal(extractor.extract(rgba)["descriptors"], from_file["descriptors"])

    gray = np.asarray(Image.open(graf).convert("L"))
    gray_png = tmp_path / "gray.png"
    Image.fromarray(gray).save(gray_png)
    from_gray_file = extractor.extract(gray_png)
    from_gray_u8 = extractor.extract(gray)
    from_gray_f32 = extractor.extract(gray.astype(np.float32) / np.float32(255))
    # A str and an os.PathLike are the same input; a non-contiguous view is read correctly.
    from_str = extractor.extract(str(gray_png))
    from_view = extractor.extract(np.ascontiguousarray(gray.T).T)
    for other in (from_gray_u8, from_gray_f32, from_str, from_view):
        for key in ("frames", "scores", "descriptors"):
            np.testing.assert_array_equal(other[key], from_gray_file[key], err_msg=key)


def test_describe_given_frames_equals_extract(extractor, graf):
    """Frames `extract` returned, described again, get the descriptors it gave them; the same
    frames given without the magnification in `a` (COLMAP's σ·R) and magnification=1 too; on a
    shrunk image (max_image_size) the frames are described where extract described them."""
    f = extractor.extract(graf)
    assert len(f["frames"]) > 100
    again = extractor.describe(graf, f["frames"])
    np.testing.assert_array_equal(again["frames"], f["frames"])
    # The network runs on other batches: a few values move in the 6th decimal.
    np.testing.assert_allclose(again["descriptors"], f["descriptors"], atol=1e-5)
    assert again["detector"] == "given" and again["model"] == f["model"]
    assert not again["scores"].any()

    bare = f["frames"].copy()
    bare[:, 2:] /= extractor.magnification
    from_bare = extractor.describe(graf, bare, magnification=1.0)
    np.testing.assert_allclose(from_bare["descriptors"], f["descriptors"], atol=1e-5)

    # Shuffled frames: each descriptor depends on its own patch only.
    order = np.random.default_rng(0).permutation(len(f["frames"]))
    shuffled = extractor.describe(graf, f["frames"][order])
    np.testing.assert_allclose(shuffled["descriptors"], f["descriptors"][order], atol=1e-5)

    small = descl.Extractor(max_keypoints=256, max_image_size=400)
    fs = small.extract(graf)
    again = small.describe(graf, fs["frames"])
    # The frames go to the shrunk image's pixels and back: f32 rounding moves the patch by
    # far less than a pixel.
    err = np.abs(again["descriptors"] - fs["descriptors"]).max()
    assert err < 0.02, err


def test_describe_refuses_bad_frames(extractor, graf):
    good = extractor.extract(graf)["frames"][:5]
    with pytest.raises(ValueError, match=r"frames: expected a float N×6 array"):
        extractor.describe(graf, good[:, :4])
    nan = good.copy()
    nan[2, 3] = np.nan
    with pytest.raises(ValueError, match=r"img1.png: keypoint 2 is not finite"):
        extractor.describe(graf, nan)
    outside = good.copy()
    outside[1, 0] = 5000.0
    with pytest.raises(ValueError, match=r"keypoint 1 .*outside the 800×640 image"):
        extractor.describe(graf, outside)
    with pytest.raises(ValueError, match="magnification must be a positive number"):
        extractor.describe(graf, good, magnification=0.0)
    empty = extractor.describe(graf, np.zeros((0, 6), np.float32))
    assert empty["descriptors"].shape[0] == 0


def test_extract_many_keeps_order_and_reports_progress(extractor, fountain):
    calls = []
    many = extractor.extract_many(fountain[:2], progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 2), (2, 2)]
    assert [f["image"] for f in many] == [str(p) for p in fountain[:2]]
    single = extractor.extract(fountain[1])
    np.testing.assert_array_equal(many[1]["descriptors"], single["descriptors"])

    class Recorder:
        def __init__(self):
            self.events = []

        def start(self, stage, total):
            self.events.append(("start", stage, total))

        def inc(self, n):
            self.events.append(("inc", n))

        def note(self, line):
            self.events.append(("note", line))

        def finish(self):
            self.events.append(("finish",))

    rec = Recorder()
    missing = fountain[0].parent / "no-such-image.jpg"
    out = extractor.extract_many([fountain[0], missing], progress=rec, skip_errors=True)
    assert out[1] is None and len(out[0]["frames"]) == 1024
    assert rec.events[0] == ("start", "extract", 2)
    assert rec.events[-1] == ("finish",)
    notes = [e[1] for e in rec.events if e[0] == "note"]
    assert len(notes) == 1 and str(missing) in notes[0]

    with pytest.raises(descl.DesclError, match="1 of 2 images failed") as err:
        extractor.extract_many([fountain[0], missing], progress=False)
    assert str(missing) in str(err.value)


def test_extract_many_default_progress_writes_to_stderr(fountain, tmp_path):
    """progress=True without tqdm: a counter on stderr (run in a fresh interpreter)."""
    code = (
        "import sys; sys.modules['tqdm'] = None\n"
        "import descl\n"
        f"descl.Extractor(max_keypoints=64).extract_many([{str(fountain[0])!r}])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "extract 1/1" in proc.stderr


def test_extraction_releases_the_gil(extractor, fountain):
    """A Python thread keeps running while an image is extracted."""
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    thread = threading.Thread(target=count)
    thread.start()
    start = time.perf_counter()
    try:
        extractor.extract(fountain[2])
    finally:
        elapsed = time.perf_counter() - start
        stop.set()
        thread.join()
    # ~1 tick per ms when the GIL is free; with the GIL held the whole call: at most a few.
    assert ticks[0] > 0.2 * elapsed * 1000, (ticks[0], elapsed)


def test_image_without_keypoints_gives_empty_results(extractor):
    flat = np.full((64, 64), 128, np.uint8)
    f = extractor.extract(flat)
    assert f["keypoints"].shape == (0, 2) and f["frames"].shape == (0, 6)
    assert f["scores"].shape == (0,) and f["descriptors"].shape[0] == 0
    d = np.random.default_rng(0).standard_normal((10, 128)).astype(np.float32)
    empty = np.zeros((0, 128), np.float32)
    for a, b in ((empty, d), (d, empty), (empty, empty)):
        m = descl.match(a, b)
        assert m["matches"].shape == (0, 2) and m["matches"].dtype == np.int64
        assert m["distances"].shape == (0,) and m["distances"].dtype == np.float32
    v = descl.verify(f["keypoints"], f["keypoints"], np.zeros((0, 2), np.int64))
    assert v["model"] is None and v["num_inliers"] == 0 and v["inliers"].shape == (0,)
    assert "too few matches" in v["reason"]


# --- matching and verification ---------------------------------------------------------------


def test_match_and_verify_equal_cli(fountain, run_cli, tmp_path):
    """`descl extract` two fountain images, `descl match` their features files; descl.match and
    descl.verify on the same features give the same matches, distances, inliers and model,
    with many inliers of a fundamental matrix."""
    a, b = fountain[0], fountain[1]
    run_cli("extract", a, b, "--out", tmp_path, "--max-keypoints", 1024)
    fa, fb = (np.load(tmp_path / f"{p.stem}.npz") for p in (a, b))
    run_cli("match", tmp_path / f"{a.stem}.npz", tmp_path / f"{b.stem}.npz", "--out", tmp_path / "m.npz")
    cli = np.load(tmp_path / "m.npz")
    assert read_meta(cli)["geometry"] == "fundamental"

    m = descl.match(fa["descriptors"], fb["descriptors"])
    assert m["matches"].dtype == np.int64 and m["matches"].shape[1] == 2
    np.testing.assert_array_equal(m["matches"], cli["matches"].astype(np.int64))
    np.testing.assert_array_equal(m["distances"], cli["distances"])

    v = descl.verify(fa["frames"][:, :2], fb["frames"][:, :2], m["matches"])
    assert v["kind"] == "fundamental" and v["reason"] is None
    assert v["num_inliers"] >= 100, v["num_inliers"]
    assert v["inliers"].dtype == bool and v["inliers"].sum() == v["num_inliers"]
    np.testing.assert_array_equal(v["inliers"], cli["inliers"].astype(bool))
    np.testing.assert_allclose(v["model"], cli["model"], rtol=0, atol=1e-12)
    # Frames (N×6) are accepted as keypoints too.
    v6 = descl.verify(fa["frames"], fb["frames"], m["matches"])
    np.testing.assert_array_equal(v6["inliers"], v["inliers"])

    # The fundamental matrix holds for the inliers: x1ᵀ F x0 ≈ 0.
    F = v["model"]
    p0 = np.c_[fa["frames"][m["matches"][v["inliers"], 0], :2], np.ones(v["num_inliers"])]
    p1 = np.c_[fb["frames"][m["matches"][v["inliers"], 1], :2], np.ones(v["num_inliers"])]
    lines = p0 @ F.T
    dist = np.abs(np.sum(p1 * lines, axis=1)) / np.linalg.norm(lines[:, :2], axis=1)
    assert np.median(dist) < 1.0


def test_match_options(extractor, fountain):
    f0, f1 = extractor.extract(fountain[0]), extractor.extract(fountain[1])
    d0, d1 = f0["descriptors"], f1["descriptors"]
    default = descl.match(d0, d1)
    explicit = descl.match(d0, d1, mutual=True, ratio=descl.LOWE_RATIO)
    np.testing.assert_array_equal(default["matches"], explicit["matches"])
    loose = descl.match(d0, d1, mutual=False, ratio=None)
    assert len(loose["matches"]) == len(d0)  # every descriptor keeps its nearest neighbour
    top = descl.match(d0, d1, top_k=10)
    assert len(top["matches"]) == 10
    gated = descl.match(d0, d1, max_distance=0.5)
    assert np.all(gated["distances"] <= 0.5)
    # Distances are L2 distances between the matched rows.
    i, j = default["matches"][:5].T
    np.testing.assert_allclose(default["distances"][:5], np.linalg.norm(d0[i] - d1[j], axis=1), atol=1e-5)
    h = descl.verify(f0["keypoints"], f1["keypoints"], default["matches"], model="homography", threshold=3.0)
    assert h["kind"] == "homography" and h["model"].shape == (3, 3)


def test_binary_model_gives_bytes_and_hamming_matches(binary_extractor, fountain):
    f0, f1 = (binary_extractor.extract(p) for p in fountain[:2])
    d0, d1 = f0["descriptors"], f1["descriptors"]
    assert d0.dtype == np.uint8 and d0.shape == (1024, 32)
    assert f0["model"] == "descl-tfeat-cdf-binary256-mix"
    m = descl.match(d0, d1)
    assert len(m["matches"]) > 100
    i, j = m["matches"].T
    hamming = np.unpackbits(d0[i] ^ d1[j], axis=1).sum(axis=1)
    np.testing.assert_array_equal(m["distances"], hamming.astype(np.float32))
    v = descl.verify(f0["keypoints"], f1["keypoints"], m["matches"])
    assert v["num_inliers"] >= 100


def test_essential_matrix_with_intrinsics(extractor, fountain, data_root):
    """With the Strecha calibration (`.camera` lines 0-2 are K), the essential matrix and the
    relative pose come out."""
    cams = data_root / "strecha" / "fountain-P11" / "cameras"
    K = [np.loadtxt(cams / f"{p.name}.camera", max_rows=3) for p in fountain[:2]]
    f0, f1 = extractor.extract(fountain[0]), extractor.extract(fountain[1])
    m = descl.match(f0["descriptors"], f1["descriptors"])
    v = descl.verify(f0["keypoints"], f1["keypoints"], m["matches"], model="essential", K0=K[0], K1=K[1])
    assert v["kind"] == "essential" and v["num_inliers"] >= 100
    R, t = v["pose"]["R"], v["pose"]["t"]
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-6)
    assert abs(np.linalg.norm(t) - 1) < 1e-6
    with pytest.raises(ValueError, match="needs intrinsics"):
        descl.verify(f0["keypoints"], f1["keypoints"], m["matches"], model="essential")


# --- bad input ---------------------------------------------------------------------------------


def test_bad_arrays_are_refused_with_clear_messages():
    d = np.zeros((5, 128), np.float32)
    with pytest.raises(ValueError, match=r"desc0: expected float32 N×D or uint8 N×32, got float64 \(5, 128\)"):
        descl.match(d.astype(np.float64), d)
    with pytest.raises(ValueError, match=r"desc1: .* got uint8 \(5, 16\)"):
        descl.match(np.zeros((5, 32), np.uint8), np.zeros((5, 16), np.uint8))
    with pytest.raises(ValueError, match=r"desc0: .* got float32 \(128,\)"):
        descl.match(d[0], d)
    with pytest.raises(ValueError, match="desc0 is float32 N×128 but desc1 is uint8 N×32"):
        descl.match(d, np.zeros((5, 32), np.uint8))
    with pytest.raises(ValueError, match="ratio must be in"):
        descl.match(d, d, ratio=1.5)
    kp = np.zeros((5, 2), np.float32)
    with pytest.raises(ValueError, match=r"kpts1: expected a float N×2 .* got float32 \(5, 3\)"):
        descl.verify(kp, np.zeros((5, 3), np.float32), np.zeros((0, 2), np.int64))
    with pytest.raises(ValueError, match=r"matches: expected an integer K×2 .* got float64"):
        descl.verify(kp, kp, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="match 0 has index 7 for kpts1, which has 5 keypoints"):
        descl.verify(kp, kp, np.array([[0, 7]]))
    with pytest.raises(ValueError, match="unknown model `affine`"):
        descl.verify(kp, kp, np.zeros((0, 2), np.int64), model="affine")
    with pytest.raises(ValueError, match="K0: expected a 3×3"):
        descl.verify(kp, kp, np.zeros((0, 2), np.int64), model="essential", K0=np.eye(2))


def test_bad_images_are_refused(extractor, tmp_path):
    with pytest.raises(ValueError, match=r"image: expected an H×W uint8 or float32 .* got float64 \(64, 64\)"):
        extractor.extract(np.zeros((64, 64)))
    with pytest.raises(ValueError, match=r"got uint8 \(64, 64, 2\)"):
        extractor.extract(np.zeros((64, 64, 2), np.uint8))
    with pytest.raises(ValueError, match="smaller than the minimum"):
        extractor.extract(np.zeros((8, 64), np.uint8))
    with pytest.raises(ValueError, match=r"values must be in \[0, 1\], found 255"):
        extractor.extract(np.full((64, 64), 255, np.float32))
    with pytest.raises(TypeError, match="expected a path .* or a numpy array, got int"):
        extractor.extract(42)

    missing = tmp_path / "missing.jpg"
    with pytest.raises(FileNotFoundError, match="no such file") as err:
        extractor.extract(missing)
    assert str(missing) in str(err.value)

    not_image = tmp_path / "notes.jpg"
    not_image.write_text("not an image")
    with pytest.raises(descl.DesclError) as err:
        extractor.extract(not_image)
    assert str(not_image) in str(err.value)
    assert isinstance(err.value, RuntimeError)


def test_bad_extractor_settings():
    with pytest.raises(descl.DesclError, match="no model named `no-such-model`") as err:
        descl.Extractor(model="no-such-model")
    assert descl.DEFAULT_MODEL in str(err.value)  # the known models are listed
    assert "describer `no-such-model`" in str(err.value)  # the CLI's context
    with pytest.raises(descl.DesclError, match="no such model file") as err:
        descl.Extractor(model="/nowhere/model.onnx")
    assert "/nowhere/model.onnx" in str(err.value)
    with pytest.raises(ValueError, match="unknown detector `sift`"):
        descl.Extractor(detector="sift")
    with pytest.raises(ValueError, match="unknown device `gpu`"):
        descl.Extractor(device="gpu")
    # Below the smallest side descl reads: refused at once, as `descl extract --max-image-size 8`
    # is, not at the first image.
    with pytest.raises(ValueError, match="at least 16 pixels, .* got 8"):
        descl.Extractor(max_image_size=8)


# --- models, ONNX Runtime, example ------------------------------------------------------------


def test_models_lists_the_default_like_the_cli(run_cli):
    models = descl.models()
    defaults = [m["name"] for m in models if m["default"]]
    assert defaults == [descl.DEFAULT_MODEL]
    names = [m["name"] for m in models]
    assert "descl-tfeat-cdf-binary256-mix" in names
    binary = next(m for m in models if m["name"] == "descl-tfeat-cdf-binary256-mix")
    assert binary["kind"] == "binary" and binary["dim"] == 256
    assert all(Path(m["file"]).is_file() and Path(m["card"]).is_file() for m in models)
    assert json.loads(run_cli("models", "--json")) == models


def test_package_finds_bundled_models_and_onnxruntime(tmp_path):
    """Outside the repository, with no environment set, the package uses the descl-models
    wheel's folder when that is installed (every model), else its own (the default only), and
    the ONNX Runtime library the wheel carries (descl/_ort/; an onnxruntime wheel's when the
    package was built from source); ORT_DYLIB_PATH set by the user wins."""
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DYLIB_PATH", "DESCL_MODELS", "LD_LIBRARY_PATH")}
    code = (
        "import descl, json\n"
        "ex = descl.Extractor(max_keypoints=10)\n"
        "print(json.dumps([str(descl.ort_library()), str(descl.models_dir()), ex.model,\n"
        "                  sorted(m['name'] for m in descl.models())]))\n"
    )
    # As installed by scripts/test-python: both wheels.
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    lib, models, model, names = json.loads(proc.stdout)
    package = Path(descl.__file__).parent
    assert Path(lib).name == f"libonnxruntime.so.{descl.ORT_VERSION}"
    carried = package / descl.CARRIED_ORT_FOLDER / Path(lib).name
    if carried.is_file():
        assert Path(lib) == carried
    else:
        assert Path(lib).parent.parent.name == "onnxruntime"
    assert model == descl.DEFAULT_MODEL
    import descl_models

    assert Path(models) == descl_models.MODELS_DIR
    assert descl.DEFAULT_MODEL in names and "descl-tfeat-cdf-binary256-mix" in names
    # Without the descl-models wheel (hidden from the import system): the package's own
    # folder, which holds the default model's file and card and nothing else.
    hidden = "import sys; sys.modules['descl_models'] = None\n"
    proc = subprocess.run([sys.executable, "-c", hidden + code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    _, models, model, names = json.loads(proc.stdout)
    assert Path(models) == package / "models"
    assert model == descl.DEFAULT_MODEL and names == [descl.DEFAULT_MODEL]
    shipped = sorted(p.name for p in (package / "models").iterdir())
    assert shipped == [f"{descl.DEFAULT_MODEL}.json", f"{descl.DEFAULT_MODEL}.onnx"], shipped
    # A descl-models wheel of another version (left behind by an upgrade without the extra) is
    # passed over for the package's own folder.
    stale = (
        "import importlib.metadata as md\n"
        "real = md.version\n"
        "md.version = lambda name: '0.0.1' if name == 'descl-models' else real(name)\n"
    )
    proc = subprocess.run([sys.executable, "-c", stale + code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    _, models, model, names = json.loads(proc.stdout)
    assert Path(models) == package / "models"
    assert names == [descl.DEFAULT_MODEL]

    env["ORT_DYLIB_PATH"] = str(tmp_path / "nothing.so")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode != 0
    assert "DesclError" in proc.stderr and "nothing.so does not exist" in proc.stderr


def test_example_match_pair_draws_the_pair(fountain, tmp_path):
    out = tmp_path / "pair.png"
    script = REPO / "examples" / "python" / "match_pair.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(fountain[0]), str(fountain[1]), str(out), "--max-keypoints", "1024"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "inliers" in proc.stdout
    assert out.is_file() and out.stat().st_size > 50_000
    with Image.open(out) as im:
        assert im.format == "PNG" and im.size == (2 * 1536, 1024)
        # Green inlier lines were drawn.
        px = np.asarray(im.convert("RGB")).reshape(-1, 3).astype(int)
        assert np.sum((px[:, 1] > 200) & (px[:, 0] < 100) & (px[:, 2] < 100)) > 1000
