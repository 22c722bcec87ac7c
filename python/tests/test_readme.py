"""The README's Python quick start, run exactly as written (issue 45): every ```python block of
README.md is executed, in order, in a scratch folder holding the files it names (`a.jpg`,
`b.jpg`: the bundled example pair of scripts/example-images, encoded as JPEG). Its ```sh
blocks are run by tests/readme.rs."""

import os
import re

import numpy as np
import pytest
from PIL import Image

from conftest import REPO

EXAMPLES = REPO / ".deps" / "examples"


def python_blocks(readme):
    return re.findall(r"^```python\n(.*?)^```", readme, flags=re.S | re.M)


def test_the_parser_finds_blocks():
    text = "x\n```python\na = 1\n```\n```sh\nls\n```\n```python\nb = 2\n```\n"
    assert python_blocks(text) == ["a = 1\n", "b = 2\n"]


@pytest.fixture
def example_pair(tmp_path):
    """a.jpg and b.jpg in tmp_path: the Middlebury motorcycle pair (741×500)."""
    left, right = EXAMPLES / "motorcycle_left.png", EXAMPLES / "motorcycle_right.png"
    if not (left.is_file() and right.is_file()):
        message = f"example images missing in {EXAMPLES} (run scripts/example-images)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    for src, name in [(left, "a.jpg"), (right, "b.jpg")]:
        Image.open(src).convert("RGB").save(tmp_path / name, quality=95)
    return tmp_path


def test_readme_python_runs_as_written(example_pair, monkeypatch):
    blocks = python_blocks((REPO / "README.md").read_text())
    assert blocks, "README.md has no ```python block"
    monkeypatch.chdir(example_pair)
    scope = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)
    # What the quick start promises: features as numpy arrays, matches, an inlier mask.
    f0, f1, m, v = scope["f0"], scope["f1"], scope["m"], scope["v"]
    for f in (f0, f1):
        assert f["descriptors"].dtype == np.float32 and len(f["descriptors"]) > 500
        assert f["keypoints"].shape == (len(f["descriptors"]), 2)
    assert m["matches"].shape[1] == 2 and len(m["matches"]) > 50, m["matches"].shape
    assert v["kind"] == "fundamental" and v["model"] is not None, v["reason"]
    assert v["inliers"].shape == (len(m["matches"]),)
    assert v["num_inliers"] == int(v["inliers"].sum()) > 0.5 * len(m["matches"])
