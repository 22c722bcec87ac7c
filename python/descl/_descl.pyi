"""Type stubs of the native module (python/src/*.rs); the docstrings there are the reference."""

import os
import pathlib
from typing import Any, Callable, Optional, Protocol, Sequence, TypedDict, Union

import numpy as np
import numpy.typing as npt

DEFAULT_MODEL: str
DEFAULT_MAX_KEYPOINTS: int
DEFAULT_MAX_IMAGE_SIZE: int
DEFAULT_CONTRAST_THRESHOLD: float
LOWE_RATIO: float
MIN_INLIERS: int
DETECTORS: list[str]

class DesclError(RuntimeError): ...

PathLike = Union[str, os.PathLike[str]]

class Features(TypedDict):
    keypoints: npt.NDArray[np.float32]  # N×2
    frames: npt.NDArray[np.float32]  # N×6
    scores: npt.NDArray[np.float32]  # N
    descriptors: Union[npt.NDArray[np.float32], npt.NDArray[np.uint8]]  # N×D or N×32
    image_size: tuple[int, int]  # (W, H)
    model: str
    model_sha256: Optional[str]
    detector: str
    image: str

class ProgressLike(Protocol):
    def start(self, stage: str, total: int) -> None: ...
    def inc(self, n: int) -> None: ...
    def finish(self) -> None: ...

class Extractor:
    def __init__(
        self,
        model: Optional[str] = None,
        device: str = "cpu",
        max_keypoints: int = 2048,
        detector: str = "dog",
        contrast_threshold: Optional[float] = None,
        max_image_size: int = 3200,
        selection: str = "strongest",
    ) -> None: ...
    def extract(self, image: Union[PathLike, npt.NDArray[Any]]) -> Features: ...
    def describe(
        self,
        image: Union[PathLike, npt.NDArray[Any]],
        frames: npt.ArrayLike,
        *,
        magnification: Optional[float] = None,
    ) -> Features: ...
    def extract_many(
        self,
        images: Sequence[PathLike],
        *,
        progress: Union[bool, Callable[[int, int], Any], ProgressLike] = True,
        skip_errors: bool = False,
    ) -> list[Optional[Features]]: ...
    @property
    def model(self) -> str: ...
    @property
    def provenance(self) -> str: ...
    @property
    def magnification(self) -> float: ...
    @property
    def detector(self) -> str: ...
    @property
    def max_keypoints(self) -> int: ...
    @property
    def contrast_threshold(self) -> float: ...
    @property
    def selection(self) -> str: ...
    @property
    def max_image_size(self) -> int: ...
    @property
    def device(self) -> str: ...

class Matches(TypedDict):
    matches: npt.NDArray[np.int64]  # K×2
    distances: npt.NDArray[np.float32]  # K

def match(
    desc0: npt.ArrayLike,
    desc1: npt.ArrayLike,
    *,
    mutual: bool = True,
    ratio: Optional[float] = 0.8,
    max_distance: Optional[float] = None,
    min_gap: Optional[float] = None,
    top_k: Optional[int] = None,
) -> Matches: ...

class Pose(TypedDict):
    R: npt.NDArray[np.float64]
    t: npt.NDArray[np.float64]
    num_in_front: int

class Verification(TypedDict):
    model: Optional[npt.NDArray[np.float64]]  # 3×3
    inliers: npt.NDArray[np.bool_]  # K
    num_inliers: int
    reason: Optional[str]
    kind: str
    pose: Optional[Pose]

def verify(
    kpts0: npt.ArrayLike,
    kpts1: npt.ArrayLike,
    matches: npt.ArrayLike,
    *,
    model: str = "fundamental",
    threshold: Optional[float] = None,
    confidence: Optional[float] = None,
    max_iters: Optional[int] = None,
    min_inliers: Optional[int] = None,
    K0: Optional[npt.ArrayLike] = None,
    K1: Optional[npt.ArrayLike] = None,
) -> Verification: ...
def models() -> list[dict[str, Any]]: ...
def models_dir() -> pathlib.Path: ...
def ort_library() -> pathlib.Path: ...
