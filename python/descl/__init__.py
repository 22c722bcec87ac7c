"""descl: learned local image features.

Detect keypoints (DoG or Harris-Affine) as affine frames, describe their 32×32 patches with an
ONNX model (or SIFT / RootSIFT), match descriptor sets and verify matches with RANSAC: the
library the ``descl`` command line runs, on numpy arrays.

    >>> import descl
    >>> ex = descl.Extractor(max_keypoints=2048)        # the default model
    >>> f0, f1 = ex.extract("a.jpg"), ex.extract("b.jpg")
    >>> m = descl.match(f0["descriptors"], f1["descriptors"])
    >>> v = descl.verify(f0["keypoints"], f1["keypoints"], m["matches"])
    >>> v["num_inliers"], v["model"]

Before the native module loads, two environment variables are set unless already set:
``ORT_DYLIB_PATH`` to the ONNX Runtime library of the ``onnxruntime`` wheel this package
depends on (found without importing onnxruntime), and ``DESCL_MODELS`` to the models folder of
the ``descl-models`` wheel when it is installed (``pip install descl[models]``: every shipped
model), else to this package's own (the default model only). Set either before ``import descl``
to use another library or models folder.
"""

import importlib.util
import os
from pathlib import Path

#: The ONNX Runtime release descl is built against (the ``onnxruntime`` wheel's version).
ORT_VERSION = "1.31.1"

_HERE = Path(__file__).resolve().parent


def _bundled_ort_library():
    """``onnxruntime/capi/libonnxruntime.so.<ORT_VERSION>`` of the installed onnxruntime wheel,
    or None. ``find_spec`` locates the package without importing it (importing onnxruntime
    would load its own copy of the library through its Python bindings)."""
    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        lib = Path(folder) / "capi" / f"libonnxruntime.so.{ORT_VERSION}"
        if lib.is_file():
            return lib
    return None


def _models_wheel_folder():
    """``descl_models/models`` of the installed descl-models wheel (every shipped model, the
    default included), or None; found without importing it. None too when its version is not
    this package's (an upgrade of descl without the extra leaves the old models wheel behind,
    whose folder would otherwise replace the new default model)."""
    try:
        spec = importlib.util.find_spec("descl_models")
    except (ImportError, ValueError):
        return None
    try:
        from importlib.metadata import PackageNotFoundError, version

        if version("descl-models") != version("descl"):
            return None
    except (ImportError, PackageNotFoundError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        models = Path(folder) / "models"
        if models.is_dir():
            return models
    return None


def _configure_environment():
    # Read by the native module when it first needs them (the first model load), so setting
    # them here, before that, is enough. os.environ writes through to the C environment.
    if not os.environ.get("ORT_DYLIB_PATH"):
        lib = _bundled_ort_library()
        if lib is not None:
            os.environ["ORT_DYLIB_PATH"] = str(lib)
    if not os.environ.get("DESCL_MODELS"):
        for models in (_models_wheel_folder(), _HERE / "models"):
            if models is not None and models.is_dir():
                os.environ["DESCL_MODELS"] = str(models)
                break


_configure_environment()

from ._descl import (  # noqa: E402  (after the environment is set)
    DEFAULT_CONTRAST_THRESHOLD,
    DEFAULT_MAX_IMAGE_SIZE,
    DEFAULT_MAX_KEYPOINTS,
    DEFAULT_MODEL,
    DETECTORS,
    LOWE_RATIO,
    MIN_INLIERS,
    DesclError,
    Extractor,
    match,
    models,
    models_dir,
    ort_library,
    verify,
)

__all__ = [
    "DEFAULT_CONTRAST_THRESHOLD",
    "DEFAULT_MAX_IMAGE_SIZE",
    "DEFAULT_MAX_KEYPOINTS",
    "DEFAULT_MODEL",
    "DETECTORS",
    "LOWE_RATIO",
    "MIN_INLIERS",
    "ORT_VERSION",
    "DesclError",
    "Extractor",
    "match",
    "models",
    "models_dir",
    "ort_library",
    "verify",
]
