"""2-D maps of an embedding space (UMAP, umap-learn).

- cosine models: UMAP with the cosine metric to the plane.
- Lorentz models: UMAP with the hyperboloid output metric (umap's ``output_metric="hyperboloid"``), shown on
  the Poincare disk: a hyperboloid point (x, y, z = sqrt(1 + x^2 + y^2)) maps to (x, y) / (1 + z), inside the
  unit disk; the input metric is the geodesic distance (computed as arccosh(-<a, b>_L)).
"""

from __future__ import annotations

import numpy as np

from core.similarity import lorentz_distance


def project_2d(embeddings: np.ndarray, *, metric: str = "cosine", n_neighbors: int = 15, min_dist: float = 0.1,
               seed: int = 0) -> np.ndarray:
    """N x D embeddings -> N x 2 map coordinates (Poincare disk for ``metric="lorentz"``)."""
    import umap

    x = np.asarray(embeddings, dtype=np.float32)
    n = x.shape[0]
    if n < 3:
        return np.zeros((n, 2), dtype=np.float32) if n else np.zeros((0, 2), dtype=np.float32)
    k = max(2, min(n_neighbors, n - 1))
    if metric == "lorentz":

        dist = lorentz_distance(x, x) if n <= 5000 else None
        reducer = umap.UMAP(n_neighbors=k, min_dist=min_dist, random_state=seed, output_metric="hyperboloid",
                            metric="precomputed" if dist is not None else "euclidean", init="random")
        h = reducer.fit_transform(dist if dist is not None else x[:, 1:])
        z = np.sqrt(1.0 + np.sum(h.astype(np.float64) ** 2, axis=1, keepdims=True))
        return (h / (1.0 + z)).astype(np.float32)
    init = "spectral" if n > k + 1 else "random"
    reducer = umap.UMAP(n_neighbors=k, min_dist=min_dist, metric="cosine", random_state=seed, init=init)
    return reducer.fit_transform(x).astype(np.float32)
