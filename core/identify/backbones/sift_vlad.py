"""``sift_vlad``: RootSIFT local descriptors aggregated with VLAD -- the weight-free classical baseline.

Per photo: SIFT descriptors at one working scale, RootSIFT, VLAD over a K = 64 word codebook, intra- and power
normalisation, global L2 (8192-d). A photo with no keypoints gets the constant unit vector, so rows stay
L2-normalised. The codebook is learned with :meth:`SiftVladBackbone.fit` and saved with the model; its SHA-256 is
in the config, so the feature-cache key changes with the codebook.

Each step with its formula and source: docs/backbones.md."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from core.identify.backbones.config import BackboneConfig, BackboneNotFittedError

DESCRIPTOR_DIM = 128
_EPS = 1e-12


def rootsift(descriptors: np.ndarray) -> np.ndarray:
    """SIFT descriptors (n x 128) -> RootSIFT: sqrt(d / max(|d|_1, eps)), float32."""
    d = np.asarray(descriptors, dtype=np.float32)
    if d.size == 0:
        return d.reshape(0, DESCRIPTOR_DIM)
    d = d / np.maximum(np.abs(d).sum(axis=1, keepdims=True), _EPS)
    return np.sqrt(d)


def vlad(descriptors: np.ndarray, centroids: np.ndarray, *, intra_norm: bool = True,
         power_norm: bool = True) -> np.ndarray:
    """VLAD of one photo's descriptors (n x d) against centroids (K x d) -> K*d float32, L2-normalised.

    v_k = sum_{x: NN(x)=k} (x - c_k); then per-word L2 (intra-norm), sign(v) sqrt|v|, global L2.
    With no descriptors, returns the constant unit vector 1/sqrt(K*d).
    """
    c = np.asarray(centroids, dtype=np.float32)
    k, dim = c.shape
    x = np.asarray(descriptors, dtype=np.float32).reshape(-1, dim)
    if len(x) == 0:
        return np.full(k * dim, 1.0 / np.sqrt(k * dim), dtype=np.float32)
    # nearest word: argmin |x - c|^2 = argmin (|c|^2 - 2 x.c)
    assign = np.argmin((c * c).sum(axis=1)[None, :] - 2.0 * (x @ c.T), axis=1)
    onehot = np.zeros((len(x), k), dtype=np.float32)
    onehot[np.arange(len(x)), assign] = 1.0
    counts = onehot.sum(axis=0)
    v = onehot.T @ x - counts[:, None] * c
    if intra_norm:
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), _EPS)
    v = v.reshape(-1)
    if power_norm:
        v = np.sign(v) * np.sqrt(np.abs(v))
    norm = np.linalg.norm(v)
    if norm < _EPS:
        return np.full(k * dim, 1.0 / np.sqrt(k * dim), dtype=np.float32)
    return (v / norm).astype(np.float32)


def codebook_sha256(centroids: np.ndarray) -> str:
    """Hex SHA-256 of the codebook (shape + float32 C-order bytes)."""
    c = np.ascontiguousarray(centroids, dtype=np.float32)
    h = hashlib.sha256(f"{c.shape[0]}x{c.shape[1]}:".encode())
    h.update(c.tobytes())
    return h.hexdigest()


class SiftVladBackbone:
    """RootSIFT + VLAD; docs/backbones.md gives every step."""

    metric = "cosine"

    def __init__(self, *, n_clusters: int = 64, max_side: int = 512, max_keypoints: int = 2000,
                 centroids: np.ndarray | None = None, fit_info: dict[str, Any] | None = None,
                 workers: int | None = None) -> None:
        if n_clusters < 2:
            raise ValueError("n_clusters must be at least 2")
        self.n_clusters = int(n_clusters)
        self.max_side = int(max_side)
        self.max_keypoints = int(max_keypoints)
        self.workers = workers if workers is not None else min(2, os.cpu_count() or 1)
        self.centroids: np.ndarray | None = None
        self.fit_info: dict[str, Any] = {}
        if centroids is not None:
            self._set_codebook(np.asarray(centroids, dtype=np.float32), fit_info or {})
        self.config = self._make_config()

    def __repr__(self) -> str:
        state = "fitted" if self.centroids is not None else "not fitted"
        return f"SiftVladBackbone(K={self.n_clusters}, max_side={self.max_side}, {state})"

    # ----------------------------------------------------------------- config
    def _make_config(self) -> BackboneConfig:
        sha = codebook_sha256(self.centroids) if self.centroids is not None else None
        if sha is None:
            source = "unfitted codebook (call fit)"
        else:
            n = self.fit_info.get("n_images", "?")
            source = f"codebook sha256:{sha[:12]} fitted on {n} images (seed {self.fit_info.get('seed', '?')})"
        return BackboneConfig(
            name="sift_vlad", architecture="opencv-sift+rootsift+vlad",
            input_size=(self.max_side, self.max_side), mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0),
            interpolation="area", pooling="vlad(intra-norm,signed-sqrt,l2)",
            embed_dim=self.n_clusters * DESCRIPTOR_DIM, weight_source=source, weights_sha256=sha,
            supports_tokens=False, resize="longest_edge",
            extra={"n_clusters": self.n_clusters, "max_keypoints": self.max_keypoints, "root_sift": True,
                   "codebook_sha256": sha, "opencv": cv2.__version__,
                   **{f"fit_{k}": v for k, v in sorted(self.fit_info.items())}},
        )

    def _set_codebook(self, centroids: np.ndarray, fit_info: dict[str, Any]) -> None:
        if centroids.shape != (self.n_clusters, DESCRIPTOR_DIM):
            raise ValueError(f"codebook must be {self.n_clusters} x {DESCRIPTOR_DIM}, got {centroids.shape}")
        if not np.all(np.isfinite(centroids)):
            raise ValueError("codebook contains non-finite values")
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        self.fit_info = {k: v for k, v in fit_info.items() if isinstance(v, (str, int, float, bool))}

    # ----------------------------------------------------------------- descriptors
    def _grey(self, image: np.ndarray) -> np.ndarray:
        a = np.asarray(image)
        if a.dtype != np.uint8:
            raise TypeError(f"images must be uint8 RGB arrays, got dtype {a.dtype}")
        if a.ndim == 3 and a.shape[2] in (3, 4):
            grey = cv2.cvtColor(np.ascontiguousarray(a[:, :, :3]), cv2.COLOR_RGB2GRAY)
        elif a.ndim == 2:
            grey = a
        else:
            raise ValueError(f"images must be HxWx3 uint8 RGB arrays, got shape {a.shape}")
        h, w = grey.shape
        scale = self.max_side / max(h, w)
        if scale != 1.0:
            size = (max(1, round(w * scale)), max(1, round(h * scale)))
            grey = cv2.resize(grey, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        return np.ascontiguousarray(grey)

    def describe(self, image: np.ndarray) -> np.ndarray:
        """One photo -> its RootSIFT descriptors (n x 128 float32, n <= max_keypoints)."""
        sift = cv2.SIFT_create(nfeatures=self.max_keypoints)
        _, desc = sift.detectAndCompute(self._grey(image), None)
        if desc is None:
            return np.zeros((0, DESCRIPTOR_DIM), dtype=np.float32)
        return rootsift(desc)

    def _map(self, fn: Any, images: Sequence[np.ndarray]) -> list[Any]:
        if self.workers <= 1 or len(images) < 2:
            return [fn(img) for img in images]
        with ThreadPoolExecutor(max_workers=self.workers) as pool:  # OpenCV releases the GIL
            return list(pool.map(fn, images))

    # ----------------------------------------------------------------- fit / embed
    def fit(self, images: Sequence[np.ndarray], *, seed: int = 0, max_descriptors: int = 200_000,
            max_iter: int = 100) -> SiftVladBackbone:
        """Learn the K-word codebook from the RootSIFT descriptors of ``images`` (seeded MiniBatchKMeans).

        At most ``max_descriptors`` descriptors are used (a seeded random subset). Returns self.
        """
        from sklearn.cluster import MiniBatchKMeans

        images = list(images)
        if not images:
            raise ValueError("sift_vlad.fit needs at least one photo")
        descs = [d for d in self._map(self.describe, images) if len(d)]
        x = np.concatenate(descs) if descs else np.zeros((0, DESCRIPTOR_DIM), np.float32)
        if len(x) < self.n_clusters:
            raise ValueError(f"sift_vlad.fit found only {len(x)} descriptors in {len(images)} photos; "
                             f"need at least {self.n_clusters}")
        rng = np.random.default_rng(seed)
        if len(x) > max_descriptors:
            x = x[np.sort(rng.choice(len(x), size=max_descriptors, replace=False))]
        km = MiniBatchKMeans(n_clusters=self.n_clusters, random_state=seed, batch_size=4096, n_init=3,
                             max_iter=max_iter)
        km.fit(x.astype(np.float64))
        self._set_codebook(km.cluster_centers_.astype(np.float32),
                           {"n_images": len(images), "n_descriptors": int(len(x)), "seed": int(seed)})
        self.config = self._make_config()
        return self

    @property
    def is_fitted(self) -> bool:
        return self.centroids is not None

    def embed(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Photos -> N x (K*128) float32 VLAD vectors, rows L2-normalised."""
        if self.centroids is None:
            raise BackboneNotFittedError(
                "sift_vlad has no codebook yet: call backbone.fit(images, seed=0) on a set of photos "
                "(e.g. the training split) or load a saved one with create_backbone('sift_vlad', codebook_path=...)")
        centroids = self.centroids
        images = list(images)
        if not images:
            return np.zeros((0, self.config.embed_dim), dtype=np.float32)
        rows = self._map(lambda img: vlad(self.describe(img), centroids), images)
        return np.stack(rows).astype(np.float32, copy=False)

    # ----------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the codebook and settings to ``path`` (.npz), atomically (tmp file + os.replace)."""
        if self.centroids is None:
            raise BackboneNotFittedError("nothing to save: sift_vlad has not been fitted")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format": "rosette-sift-vlad-1", "n_clusters": self.n_clusters, "max_side": self.max_side,
                "max_keypoints": self.max_keypoints, "fit_info": self.fit_info,
                "codebook_sha256": codebook_sha256(self.centroids)}
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, centroids=self.centroids, meta=np.array(json.dumps(meta)))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, workers: int | None = None) -> SiftVladBackbone:
        """Read a codebook written by :meth:`save` (its hash is verified)."""
        with np.load(Path(path), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            centroids = np.asarray(data["centroids"], dtype=np.float32)
        if meta.get("format") != "rosette-sift-vlad-1":
            raise ValueError(f"{path} is not a Rosette sift_vlad codebook")
        if codebook_sha256(centroids) != meta.get("codebook_sha256"):
            raise ValueError(f"{path}: codebook hash mismatch (file damaged?)")
        return cls(n_clusters=int(meta["n_clusters"]), max_side=int(meta["max_side"]),
                   max_keypoints=int(meta["max_keypoints"]), centroids=centroids,
                   fit_info=meta.get("fit_info") or {}, workers=workers)


def create_sift_vlad(*, pretrained: bool = True, device: str | None = None, codebook_path: str | None = None,
                     n_clusters: int = 64, max_side: int = 512, max_keypoints: int = 2000,
                     workers: int | None = None) -> SiftVladBackbone:
    """Factory for the registry. ``pretrained``/``device`` are accepted for a uniform interface
    (SIFT has no weights and runs on CPU); with ``codebook_path`` the saved codebook is loaded."""
    del pretrained, device
    if codebook_path is not None:
        backbone = SiftVladBackbone.load(codebook_path, workers=workers)
        if backbone.n_clusters != n_clusters and n_clusters != 64:
            raise ValueError(f"codebook {codebook_path} has K={backbone.n_clusters}, asked for K={n_clusters}")
        return backbone
    return SiftVladBackbone(n_clusters=n_clusters, max_side=max_side, max_keypoints=max_keypoints, workers=workers)
