"""The installed package is the manylinux wheel of scripts/wheel (what scripts/test-python
installs): its extension loads OpenCV from the wheel's own descl.libs/ (auditwheel's copies),
never from the system, so a machine without libopencv runs it; ONNX Runtime is the library the
wheel carries (descl/_ort/), so no `onnxruntime` wheel is needed (they exist for CPython >= 3.11
only, the wheel installs on 3.9). Skipped for a package built another way
(`pip install ./python`)."""

from pathlib import Path

import pytest

import descl


def _loaded_libraries():
    """Paths of the shared objects mapped into this process (/proc/self/maps)."""
    paths = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and ".so" in parts[5]:
            paths.add(parts[5].strip())
    return paths


def test_opencv_comes_from_the_wheel():
    pkg = Path(descl.__file__).resolve().parent
    libs = pkg.parent / "descl.libs"
    if not libs.is_dir():
        pytest.skip(f"not the repaired wheel (no {libs}): installed from source")
    vendored = {p.name.split("-")[0] for p in libs.iterdir()}
    assert {"libopencv_core", "libopencv_imgproc", "libopencv_calib3d"} <= vendored, vendored
    # Running the describe path maps every library the extension needs.
    ex = descl.Extractor(max_keypoints=64)
    import numpy as np

    yy, xx = np.mgrid[0:96, 0:128]
    img = (0.5 + 0.5 * np.sin(xx / 5.0) * np.cos(yy / 7.0)).astype(np.float32)
    f = ex.extract(img)
    assert f["descriptors"].shape[1] == 128
    opencv = [p for p in _loaded_libraries() if "libopencv_" in Path(p).name]
    assert opencv, "no OpenCV library mapped"
    outside = [p for p in opencv if Path(p).parent.resolve() != libs.resolve()]
    assert not outside, f"OpenCV loaded from outside the wheel: {outside}"
    ort = [p for p in _loaded_libraries() if "libonnxruntime" in Path(p).name]
    carried = (pkg / descl.CARRIED_ORT_FOLDER).resolve()
    assert ort and all(Path(p).parent.resolve() == carried for p in ort), ort


def test_the_wheel_needs_no_onnxruntime_wheel_and_installs_on_39():
    """The installed wheel's metadata: CPython >= 3.9 and no onnxruntime requirement (the
    library travels in the wheel, descl/_ort/)."""
    import importlib.metadata as md

    pkg = Path(descl.__file__).resolve().parent
    if not (pkg.parent / "descl.libs").is_dir():
        pytest.skip("not the repaired wheel: installed from source")
    meta = md.metadata("descl")
    assert meta["Requires-Python"].replace(" ", "") == ">=3.9", meta["Requires-Python"]
    requires = [r.replace(" ", "") for r in md.requires("descl") or []]
    assert not [r for r in requires if r.startswith("onnxruntime")], requires
    assert (pkg / descl.CARRIED_ORT_FOLDER / f"libonnxruntime.so.{descl.ORT_VERSION}").is_file()


#: PyPI's default limit on one file is 100 MB; the descl wheel stays well under it.
DESCL_WHEEL_MAX_BYTES = 50_000_000
#: PyPI's default limit on one file.
PYPI_FILE_MAX_BYTES = 100_000_000


def test_wheels_fit_pypi_and_the_extra_pins_the_models_wheel():
    """The two wheels scripts/test-python installed: descl (the default model inside) at most
    50 MB, descl-models (every model) under PyPI's limit, and `descl[models]` pins this
    version of it."""
    import importlib.metadata as md
    import os

    wheel, models_wheel = os.environ.get("DESCL_WHEEL"), os.environ.get("DESCL_MODELS_WHEEL")
    if not wheel or not models_wheel:
        pytest.skip("DESCL_WHEEL / DESCL_MODELS_WHEEL not set: not run by scripts/test-python")
    assert Path(wheel).stat().st_size <= DESCL_WHEEL_MAX_BYTES, Path(wheel).stat().st_size
    assert Path(models_wheel).stat().st_size <= PYPI_FILE_MAX_BYTES, Path(models_wheel).stat().st_size
    version = md.version("descl")
    assert md.version("descl-models") == version
    # Requirement strings as the metadata spells them (spaces and quotes vary by builder).
    requires = [r.replace(" ", "").replace("'", '"') for r in md.requires("descl") or []]
    assert f'descl-models=={version};extra=="models"' in requires, requires
