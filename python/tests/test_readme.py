"""The README's Python quick start, run exactly as written (issues 45, 57): every ```python
block of README.md is executed, in order, from the repository root, as the README says, on the
example pair the first run (scripts/demo, scripts/example-images) leaves in .deps/examples. Its
```sh blocks are run by tests/readme.rs."""

import os
import re

import numpy as np
import pytest

from conftest import REPO

EXAMPLES = REPO / ".deps" / "examples"


def python_blocks(readme):
    return re.findall(r"^```python\n(.*?)^```", readme, flags=re.S | re.M)


def test_the_parser_finds_blocks():
    text = "x\n```python\na = 1\n```\n```sh\nls\n```\n```python\nb = 2\n```\n"
    assert python_blocks(text) == ["a = 1\n", "b = 2\n"]


@pytest.fixture
def example_pair():
    """The Middlebury motorcycle pair (741×500) in .deps/examples, as the README names it."""
    left, right = EXAMPLES / "motorcycle_left.png", EXAMPLES / "motorcycle_right.png"
    if not (left.is_file() and right.is_file()):
        message = f"example images missing in {EXAMPLES} (run scripts/example-images)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return REPO


def test_readme_python_runs_as_written(example_pair, monkeypatch, capsys):
    blocks = python_blocks((REPO / "README.md").read_text())
    assert blocks, "README.md has no ```python block"
    monkeypatch.chdir(example_pair)
    scope = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)
    # What the quick start promises: features as numpy arrays, matches, an inlier mask, and a
    # line saying what it found.
    f0, f1, m, v = scope["f0"], scope["f1"], scope["m"], scope["v"]
    for f in (f0, f1):
        assert f["descriptors"].dtype == np.float32 and len(f["descriptors"]) > 500
        assert f["keypoints"].shape == (len(f["descriptors"]), 2)
    assert m["matches"].shape[1] == 2 and len(m["matches"]) > 50, m["matches"].shape
    assert v["kind"] == "fundamental" and v["model"] is not None, v["reason"]
    assert v["inliers"].shape == (len(m["matches"]),)
    assert v["num_inliers"] == int(v["inliers"].sum()) > 0.5 * len(m["matches"])
    printed = capsys.readouterr().out
    assert f"{len(m['matches'])} matches, {v['num_inliers']} fundamental inliers" in printed, printed
