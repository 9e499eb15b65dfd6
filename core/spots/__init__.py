"""Local ("spot") evidence: keypoint matchers, as a registry like the backbones.

A *local matcher* finds keypoints on the animal and proposes correspondences between two photos; geometric
verification (:mod:`core.spots.verify`) then keeps the ones a single plausible transform explains, and the
inlier count is the pair's spot evidence. HotSpotter (Wildbook) and WildFusion (wildlife-tools) get their
accuracy on patterned species this way.

Fixed interfaces:

- ``matcher.extract(rgb, mask) -> LocalFeatures``: keypoints in the *original* photo's pixel coordinates
  (x, y), descriptors (float32 rows, or uint8 packed bits for binary descriptors) and the working scale;
  with a mask, only keypoints on the animal are kept. Deterministic for the same input.
- ``matcher.match(a, b) -> Correspondences``: tentative point pairs (ratio test, or a learned matcher),
  in each photo's original coordinates.

Each matcher carries one frozen :class:`MatcherConfig` (like a backbone's config): its fingerprint keys the
feature cache, so features are cached content-addressed per (photo, mask, matcher config)
(:func:`features_cache_path`). Registered names (the name is what the database stores):

- ``sift`` -- OpenCV SIFT with RootSIFT descriptors on the masked animal (the offline default).
- ``orb`` -- OpenCV ORB, binary descriptors matched by Hamming distance (fast).
- ``disk-lightglue``, ``aliked-lightglue``, ``loftr`` -- learned (kornia), used when their weights are on this
  machine (:func:`matcher_available`); built with random weights in tests.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.registry import Registry, UnknownComponentError

__all__ = [
    "DEFAULT_MATCHER",
    "MIN_KEYPOINTS",
    "MATCHERS",
    "Correspondences",
    "LocalFeatures",
    "LocalMatcher",
    "MatcherConfig",
    "MatcherUnavailableError",
    "UnknownComponentError",
    "create_matcher",
    "describe_matchers",
    "features_cache_path",
    "list_matchers",
    "load_features",
    "matcher_available",
    "save_features",
]

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


MATCHERS: Registry[LocalMatcher] = Registry("local matcher")


@MATCHERS.register("sift", description="OpenCV SIFT with RootSIFT descriptors on the masked animal, Lowe ratio "
                                       "test (offline default)")
def _sift(**opts: Any) -> LocalMatcher:
    from core.spots.classical import create_sift

    return create_sift(**opts)


@MATCHERS.register("orb", description="OpenCV ORB, binary descriptors matched by Hamming distance (fast)")
def _orb(**opts: Any) -> LocalMatcher:
    from core.spots.classical import create_orb

    return create_orb(**opts)


def _register_learned(name: str, description: str) -> None:
    @MATCHERS.register(name, description=description)
    def factory(**opts: Any) -> LocalMatcher:
        from core.spots.learned import create_learned_matcher  # kornia / torch: heavy, imported on use

        return create_learned_matcher(name, **opts)


_register_learned("disk-lightglue", "DISK keypoints matched by LightGlue (kornia; weights when present)")
_register_learned("aliked-lightglue", "ALIKED keypoints matched by LightGlue (kornia; weights when present)")
_register_learned("loftr", "LoFTR detector-free dense matching (kornia; weights when present)")

LEARNED_MATCHERS = ("disk-lightglue", "aliked-lightglue", "loftr")


def list_matchers() -> list[str]:
    """Registered local matcher names."""
    return MATCHERS.names()


def describe_matchers() -> dict[str, str]:
    return MATCHERS.describe()


def matcher_available(name: str) -> bool:
    """Whether ``create_matcher(name)`` can run here (classical ones always; learned ones when their weights
    are on this machine). Unknown names raise."""
    MATCHERS.resolve(name)
    if name not in LEARNED_MATCHERS:
        return True
    try:
        from core.spots.learned import learned_weights_available

        return learned_weights_available(name)
    except ImportError:  # kornia not installed
        return False


def create_matcher(name: str = DEFAULT_MATCHER, /, *, pretrained: bool = True, **opts: Any) -> LocalMatcher:
    """Build the matcher registered as ``name``; ``pretrained=False`` builds learned matchers with random
    weights (tests). Raises :class:`~core.registry.UnknownComponentError` for unknown names and
    :class:`MatcherUnavailableError` when pretrained weights are not on this machine."""
    if name in LEARNED_MATCHERS:
        return MATCHERS.create(name, pretrained=pretrained, **opts)
    return MATCHERS.create(name, **opts)


# ----------------------------------------------------------------------------------------------- cache


def features_cache_path(cache_dir: str | Path, fingerprint: str, content_key: str) -> Path:
    """Where the features of (photo [+ mask], matcher config) live: ``<cache>/<fingerprint>/<key[:2]>/<key>.npz``."""
    key = content_key if content_key.replace("-", "").isalnum() and len(content_key) <= 160 else \
        hashlib.sha256(content_key.encode()).hexdigest()
    return Path(cache_dir) / fingerprint / key[:2] / f"{key}.npz"


def save_features(path: Path, features: LocalFeatures) -> None:
    """Write atomically (temporary file + ``os.replace``)."""
    from core.features import atomic_write

    buf = io.BytesIO()
    arrays: dict[str, np.ndarray] = {
        "keypoints": features.keypoints, "descriptors": features.descriptors,
        "meta": np.array([features.image_size[0], features.image_size[1], features.scale, float(features.masked)],
                         dtype=np.float64)}
    if features.image is not None:
        arrays["image"] = features.image
    np.savez(buf, **arrays)
    data = buf.getvalue()
    atomic_write(path, lambda fh: fh.write(data))


def load_features(path: Path) -> LocalFeatures | None:
    """The cached features at ``path``, or None when missing or unreadable (then they are recomputed)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = z["meta"]
            return LocalFeatures(keypoints=z["keypoints"], descriptors=z["descriptors"],
                                 image_size=(int(meta[0]), int(meta[1])), scale=float(meta[2]),
                                 masked=bool(meta[3]), image=z["image"] if "image" in z.files else None)
    except (OSError, ValueError, KeyError, EOFError):
        return None
