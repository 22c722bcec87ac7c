"""Shared fixtures of the descl Python tests: where the repository, the shared data and the
`descl` binary are, and extractors loaded once per session.

Like the Rust tests (tests/common/mod.rs), tests that need `../shared/data` (or `$DESCL_DATA`)
fail when `CI` is set and it is missing, and are skipped with a message on a checkout without
it. The `descl` binary the comparisons run is `target/debug/descl` (`$DESCL_BIN` overrides);
scripts/test-python builds it.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

import descl

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def installed_package():
    """The tests run against the installed package, not python/descl of the checkout (which
    has no compiled module)."""
    assert hasattr(descl, "Extractor"), f"descl imported from {descl.__file__} has no Extractor"


@pytest.fixture(scope="session")
def data_root():
    env = os.environ.get("DESCL_DATA")
    root = Path(env) if env else REPO.parent / "shared" / "data"
    if not root.is_dir():
        message = f"shared data missing: {root} (set DESCL_DATA)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the shared data: {message}")
        pytest.skip(message)
    return root


@pytest.fixture(scope="session")
def fountain(data_root):
    """The first three images of Strecha fountain-P11 (1536×1024)."""
    images = sorted((data_root / "strecha" / "fountain-P11" / "images").glob("*.jpg"))
    assert len(images) >= 3, f"fountain-P11 images missing under {data_root}"
    return images[:3]


@pytest.fixture(scope="session")
def graf(data_root):
    """An RGB PNG (Oxford graf img1, 800×640): decoders agree exactly on PNG."""
    path = data_root / "oxford" / "graf" / "img1.png"
    assert path.is_file(), f"{path} missing"
    return path


@pytest.fixture(scope="session")
def descl_bin():
    path = Path(os.environ.get("DESCL_BIN", REPO / "target" / "debug" / "descl"))
    if not path.is_file():
        pytest.fail(f"{path} missing: build it with `cargo build --bin descl` (scripts/test-python does)")
    return path


@pytest.fixture(scope="session")
def run_cli(descl_bin):
    """Runs `descl ARGS...` (same environment: the package has set ORT_DYLIB_PATH and
    DESCL_MODELS, so the binary loads the same library and model files); returns stdout."""

    def run(*args):
        proc = subprocess.run(
            [str(descl_bin), *map(str, args)], capture_output=True, text=True, timeout=600
        )
        assert "panicked" not in proc.stderr, proc.stderr
        assert proc.returncode == 0, f"descl {' '.join(map(str, args))} failed:\n{proc.stderr}"
        return proc.stdout

    return run


@pytest.fixture(scope="session")
def extractor():
    """The default model, 1024 keypoints (the suite's speed setting)."""
    return descl.Extractor(max_keypoints=1024)


@pytest.fixture(scope="session")
def binary_extractor():
    return descl.Extractor(model="descl-tfeat-cdf-binary256-mix", max_keypoints=1024)


def read_meta(npz):
    return json.loads(str(npz["meta"]))
