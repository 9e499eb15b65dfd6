"""What every local matcher shares: its config, the features and correspondences it returns, the protocol and the errors. The matcher modules import this, not the package, whose registry imports them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np

DEFAULT_MATCHER = "sift"
#: Below this many keypoints a photo has no usable spot evidence (tiny, blurred or blank): it is scored by the
#: global model alone and marked "no spot evidence".
MIN_KEYPOINTS = 12


class MatcherUnavailableError(FileNotFoundError):
    """A learned matcher's weights are not on this machine (it is listed as unavailable, never offered)."""


@dataclass(frozen=True)
class MatcherConfig:
    """Everything that determines a matcher's output (cache key and provenance).

    ``max_side``: photos are resized so their longest side is this many pixels before detection (up or down,
    so every photo is described at the same scale); ``max_keypoints``: the strongest ones are kept;
    ``ratio``: Lowe's ratio test threshold (ignored by learned matchers, which match with a network);
    ``binary``: descriptors are packed bits compared by Hamming distance.
    """

    name: str
    descriptor: str
    descriptor_dim: int
    max_side: int
    max_keypoints: int
    ratio: float
    binary: bool = False
    dense: bool = False  # detector-free (LoFTR): correspondences come from the image pair itself
    weight_source: str = "none (classical)"
    weights_sha256: str | None = None
    extra: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_side < 32:
            raise ValueError(f"max_side must be at least 32 pixels, got {self.max_side}")
        if self.max_keypoints < 1:
            raise ValueError(f"max_keypoints must be at least 1, got {self.max_keypoints}")
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"the ratio test threshold must be in (0, 1], got {self.ratio}")
        object.__setattr__(self, "extra", tuple(sorted((str(k), v) for k, v in dict(self.extra).items())))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra"] = dict(self.extra)
        d["fingerprint"] = self.fingerprint()
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MatcherConfig:
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in data.items() if k in names}
        d["extra"] = tuple(dict(d.get("extra") or {}).items())
        cfg = cls(**d)
        if "fingerprint" in data and data["fingerprint"] != cfg.fingerprint():
            raise ValueError("matcher config fingerprint does not match its fields")
        return cfg

    def fingerprint(self) -> str:
        """16 hex chars of SHA-256 over the canonical JSON of all fields."""
        payload = {f.name: getattr(self, f.name) for f in fields(self)}
        payload["extra"] = dict(self.extra)
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=list)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass
class LocalFeatures:
    """One photo's keypoints and descriptors.

    ``keypoints``: N x 2 float32 (x, y) in the original photo's pixels; ``descriptors``: N x D (float32, or
    uint8 packed bits); ``image_size``: (H, W) of the original photo; ``scale``: working / original size
    (pixel thresholds are set at the working scale); ``masked``: detection was restricted to the animal's
    mask (False: the whole photo, because there was no mask); ``image``: the working-scale grey image, kept
    only by dense matchers (LoFTR), which match image pairs rather than descriptors.
    """

    keypoints: np.ndarray
    descriptors: np.ndarray
    image_size: tuple[int, int]
    scale: float
    masked: bool
    image: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.keypoints = np.asarray(self.keypoints, dtype=np.float32).reshape(-1, 2)
        self.descriptors = np.asarray(self.descriptors)
        if self.descriptors.ndim != 2 or self.descriptors.shape[0] != self.keypoints.shape[0]:
            raise ValueError(f"{self.keypoints.shape[0]} keypoints but descriptors of shape {self.descriptors.shape}")
        self.image_size = (int(self.image_size[0]), int(self.image_size[1]))
        self.scale = float(self.scale)

    @property
    def n(self) -> int:
        return int(self.keypoints.shape[0])

    def enough(self, minimum: int = MIN_KEYPOINTS) -> bool:
        """Whether there are enough keypoints for spot evidence (dense matchers: whether there is an image)."""
        return self.n >= minimum or self.image is not None


@dataclass
class Correspondences:
    """Tentative point pairs between photo A and photo B (original pixel coordinates of each) with a
    per-pair confidence in [0, 1] (1 - distance ratio for the ratio test; the network's for learned ones)."""

    points_a: np.ndarray
    points_b: np.ndarray
    confidence: np.ndarray

    def __post_init__(self) -> None:
        self.points_a = np.asarray(self.points_a, dtype=np.float32).reshape(-1, 2)
        self.points_b = np.asarray(self.points_b, dtype=np.float32).reshape(-1, 2)
        self.confidence = np.asarray(self.confidence, dtype=np.float32).reshape(-1)
        if not (len(self.points_a) == len(self.points_b) == len(self.confidence)):
            raise ValueError("points_a, points_b and confidence must have the same length")

    def __len__(self) -> int:
        return int(self.points_a.shape[0])

    @classmethod
    def empty(cls) -> Correspondences:
        return cls(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0))


@runtime_checkable
class LocalMatcher(Protocol):
    config: MatcherConfig

    def extract(self, rgb: np.ndarray, mask: np.ndarray | None = None) -> LocalFeatures:
        """HxWx3 uint8 RGB (and an optional HxW bool mask) -> keypoints and descriptors."""
        ...

    def match(self, a: LocalFeatures, b: LocalFeatures) -> Correspondences:
        """Tentative correspondences between two photos' features."""
        ...
