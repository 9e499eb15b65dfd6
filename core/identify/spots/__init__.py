"""Local ("spot") evidence: keypoint matchers, as a registry like the backbones.

A *local matcher* finds keypoints on the animal (``extract``) and proposes correspondences between two photos
(``match``); geometric verification (:mod:`core.identify.spots.verify`) keeps the ones a single plausible
transform explains, and the inlier count is the pair's spot evidence, as in HotSpotter and WildFusion. Each
matcher carries one frozen :class:`MatcherConfig` whose fingerprint keys the feature cache
(:func:`features_cache_path`). Registered: ``sift`` (the offline default), ``orb``, and the learned
``disk-lightglue``, ``aliked-lightglue`` and ``loftr`` when their weights are here (:func:`matcher_available`).

The interfaces' contracts and what each matcher is: docs/spots.md."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np

from core.identify.features import atomic_write
from core.registry import Registry, UnknownComponentError
from core.identify.spots.base import (  # noqa: F401  (the package's public names, defined there for its submodules)
    DEFAULT_MATCHER,
    MIN_KEYPOINTS,
    Correspondences,
    LocalFeatures,
    LocalMatcher,
    MatcherConfig,
    MatcherUnavailableError,
)
from core.identify.spots.classical import create_orb, create_sift
from core.identify.spots.learned import learned_weights_available

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


MATCHERS: Registry[LocalMatcher] = Registry("local matcher")


@MATCHERS.register("sift", description="OpenCV SIFT with RootSIFT descriptors on the masked animal, Lowe ratio "
                                       "test (offline default)")
def _sift(**opts: Any) -> LocalMatcher:

    return create_sift(**opts)


@MATCHERS.register("orb", description="OpenCV ORB, binary descriptors matched by Hamming distance (fast)")
def _orb(**opts: Any) -> LocalMatcher:

    return create_orb(**opts)


def _register_learned(name: str, description: str) -> None:
    @MATCHERS.register(name, description=description)
    def factory(**opts: Any) -> LocalMatcher:
        from core.identify.spots.learned import create_learned_matcher  # kornia / torch: heavy, imported on use

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
