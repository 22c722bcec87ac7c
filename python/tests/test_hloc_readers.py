"""hloc's own readers on descl's hloc files, for a flat and a nested image folder (issue 24).

hloc is not on PyPI; `hloc_vendor/` holds unchanged copies of its `hloc/utils/io.py` and
`parsers.py` (see its README). They run in a subprocess with that folder on PYTHONPATH —
`get_keypoints`, `get_matches` (through `find_pair`, either order) and `list_h5_names` — as
hloc's `reconstruction.import_features` / `import_matches` and `localize_sfm` call them, on the
files of the README's recipe: `descl extract IMAGES --format h5`, then `descl match --images
OUT/features.h5 --pairs pairs.txt --format h5`. What they return is compared with descl's own
`.npz` output of the same extraction (keypoints; raw matches of `descl match A.npz B.npz`).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("h5py")

VENDOR = Path(__file__).resolve().parent / "hloc_vendor"
KEYPOINTS = 512

LAYOUTS = {
    "flat": ["0000.jpg", "0001.jpg", "0002.jpg"],
    # Two images of one file name in different folders: only their paths tell them apart.
    "nested": ["a/0000.jpg", "b/0000.jpg", "c/d/0002.jpg"],
}

READ = """
import json, sys
from pathlib import Path
import numpy as np
from hloc.utils.io import get_keypoints, get_matches, list_h5_names
features, matches, pairs, out = map(Path, sys.argv[1:5])
res = {"names": sorted(list_h5_names(features)), "keypoints": {}, "matches": {}}
for name in res["names"]:
    kp, unc = get_keypoints(features, name, return_uncertainty=True)
    res["keypoints"][name] = {"kp": kp.astype(float).tolist(), "uncertainty": float(unc)}
for line in pairs.read_text().splitlines():
    a, b = line.split()
    m, s = get_matches(matches, a, b)
    res["matches"][f"{a} {b}"] = m.tolist()
try:
    get_matches(matches, res["names"][0], res["names"][0])
    res["unknown_pair"] = "found"
except ValueError as e:
    res["unknown_pair"] = str(e)
out.write_text(json.dumps(res))
"""


def stem(name):
    return name.rsplit(".", 1)[0]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_hlocs_readers_read_descls_files(layout, fountain, run_cli, tmp_path):
    names = LAYOUTS[layout]
    images = tmp_path / "images"
    for name, src in zip(names, fountain):
        (images / name).parent.mkdir(parents=True, exist_ok=True)
        (images / name).symlink_to(src)
    # hloc's pairs_from_retrieval lists a pair in both orders.
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(f"{names[0]} {names[1]}\n{names[1]} {names[0]}\n{names[2]} {names[0]}\n")
    out = tmp_path / "hloc"
    run_cli("extract", images, "--out", out, "--format", "h5", "--max-keypoints", KEYPOINTS)
    run_cli("match", "--images", out / "features.h5", "--pairs", pairs, "--out-dir", out,
            "--format", "h5")
    npz = tmp_path / "npz"
    run_cli("extract", images, "--out", npz, "--max-keypoints", KEYPOINTS)

    result = tmp_path / "read.json"
    env = dict(os.environ, PYTHONPATH=str(VENDOR))
    proc = subprocess.run(
        [sys.executable, "-c", READ, out / "features.h5", out / "matches.h5", pairs, result],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(result.read_text())

    assert got["names"] == sorted(names)
    for name in names:
        z = np.load(npz / (stem(name) + ".npz"))
        kp = np.array(got["keypoints"][name]["kp"], dtype=np.float32)
        # hloc's keypoint convention is descl's (pixel centre at 0).
        np.testing.assert_array_equal(kp, z["frames"][:, :2])
        assert got["keypoints"][name]["uncertainty"] == 1.0
    for line in pairs.read_text().splitlines():
        a, b = line.split()
        # The pair is stored once, in the set's order; hloc flips it when asked the other way.
        x, y = sorted([a, b])
        ref = tmp_path / "ref.npz"
        run_cli("match", npz / (stem(x) + ".npz"), npz / (stem(y) + ".npz"), "--out", ref)
        expected = np.load(ref)["matches"].astype(np.int64)
        if (a, b) != (x, y):
            expected = expected[:, ::-1]
        m = np.array(got["matches"][line], dtype=np.int64).reshape(-1, 2)
        assert len(m) > 50, f"{line}: {len(m)} matches"
        np.testing.assert_array_equal(m[np.argsort(m[:, 0])], expected[np.argsort(expected[:, 0])])
    assert "Could not find pair" in got["unknown_pair"]
