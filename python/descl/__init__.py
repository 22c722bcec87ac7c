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
``ORT_DYLIB_PATH`` to the ONNX Runtime library descl uses (the rule below), and
``DESCL_MODELS`` to the models folder of the ``descl-models`` wheel when it is installed (every
shipped model), else to this package's own (the default model only). Set either before
``import descl`` to use another library or models folder.

The ONNX Runtime library, first found wins:

1. ``onnxruntime/capi/libonnxruntime.so.1.31.*`` of an installed ``onnxruntime-gpu`` of the
   ``1.31`` family (``pip install onnxruntime-gpu==1.31.*``): CUDA then works;
2. ``descl/_ort/libonnxruntime.so.1.31.1``, the CPU library the wheel carries (scripts/wheel),
   so the package needs no ``onnxruntime`` wheel, which exists for CPython >= 3.11 only;
3. ``onnxruntime/capi/libonnxruntime.so.1.31.1`` of an installed ``onnxruntime==1.31.1`` (a
   package built from source, ``pip install ./python``, carries no library).
"""

import importlib.util
import os
from pathlib import Path

#: The ONNX Runtime release descl is built against and carries (``descl/_ort/``).
ORT_VERSION = "1.31.1"
#: The releases whose library descl loads: ONNX Runtime's C API is stable within a minor
#: release, and descl's Rust code is built for 1.31's.
ORT_FAMILY = ".".join(ORT_VERSION.split(".")[:2])
#: The folder of the carried library, inside the package (scripts/wheel puts it there).
CARRIED_ORT_FOLDER = "_ort"
#: The GPU build of ONNX Runtime on PyPI; it installs the package ``onnxruntime`` too.
ORT_GPU_DISTRIBUTION = "onnxruntime-gpu"

_HERE = Path(__file__).resolve().parent


def _onnxruntime_capi_library(version):
    """``onnxruntime/capi/libonnxruntime.so.<version>`` of the installed ``onnxruntime``
    package (the CPU or the GPU wheel), or None. ``find_spec`` locates the package without
    importing it (importing onnxruntime would load its own copy of the library through its
    Python bindings)."""
    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        lib = Path(folder) / "capi" / f"libonnxruntime.so.{version}"
        if lib.is_file():
            return lib
    return None


def _gpu_ort_library():
    """The library of an installed ``onnxruntime-gpu`` of the ``ORT_FAMILY`` release, or None
    (none installed, or another release, whose C API descl was not built for)."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        gpu = version(ORT_GPU_DISTRIBUTION)
    except (ImportError, PackageNotFoundError):
        return None
    if gpu.split(".")[:2] != ORT_FAMILY.split("."):
        return None
    return _onnxruntime_capi_library(gpu)


def _carried_ort_library():
    """``descl/_ort/libonnxruntime.so.<ORT_VERSION>``, carried by the wheel, or None."""
    lib = _HERE / CARRIED_ORT_FOLDER / f"libonnxruntime.so.{ORT_VERSION}"
    return lib if lib.is_file() else None


def ort_library_choice():
    """The ONNX Runtime library ``import descl`` points ``ORT_DYLIB_PATH`` at when it is unset
    (the rule of the module's doc), or None when there is none."""
    for find in (_gpu_ort_library, _carried_ort_library):
        lib = find()
        if lib is not None:
            return lib
    return _onnxruntime_capi_library(ORT_VERSION)


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
        lib = ort_library_choice()
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
    "ORT_FAMILY",
    "ORT_VERSION",
    "DesclError",
    "Extractor",
    "match",
    "models",
    "models_dir",
    "ort_library",
    "verify",
]
