"""Train/test splits for re-ID benchmarks (DESIGN section 4, "Splits and sightings").

- identity-disjoint (open set): a seeded random ``test_fraction`` of the
  *identities* goes to test with all their photos; test animals are new.
- sighting-disjoint (closed set, like the Kaggle jaguar challenge): only
  identities with >= 2 sightings contribute test photos; for each, a seeded
  random share of its sightings goes to test while at least one stays in
  train, so every test identity has other sightings on the training side and
  the photos of one sighting never straddle the split.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

SPLIT_KINDS = ("identity", "sighting")


def identity_disjoint_split(labels: Sequence[str], *, test_fraction: float, seed: int) -> np.ndarray:
    """Boolean ``is_test`` per item; round(test_fraction * n_identities) identities (at least 1) go to test."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must be strictly between 0 and 1")
    labels_arr = np.asarray([str(x) for x in labels])
    identities = np.array(sorted(set(labels_arr.tolist())))
    if len(identities) < 2:
        raise ValueError("an identity-disjoint split needs at least two identities")
    rng = np.random.default_rng(seed)
    n_test = min(len(identities) - 1, max(1, int(round(test_fraction * len(identities)))))
    test_ids = set(rng.permutation(identities)[:n_test].tolist())
    return np.array([lab in test_ids for lab in labels_arr.tolist()], dtype=bool)


def sighting_disjoint_split(labels: Sequence[str], sightings: Sequence[str | None], *, test_fraction: float,
                            seed: int) -> np.ndarray:
    """Boolean ``is_test`` per item; whole sightings move, each test identity keeps a train sighting.

    Items without a sighting label form a sighting of their own.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must be strictly between 0 and 1")
    if len(labels) != len(sightings):
        raise ValueError("labels and sightings must have the same length")
    keys = [s if s not in (None, "") else f"__item{i}" for i, s in enumerate(sightings)]
    by_identity: dict[str, list[str]] = defaultdict(list)
    for lab, key in zip(labels, keys):
        if key not in by_identity[str(lab)]:
            by_identity[str(lab)].append(key)
    rng = np.random.default_rng(seed)
    test_keys: set[tuple[str, str]] = set()
    for lab in sorted(by_identity):
        sights = sorted(by_identity[lab])
        if len(sights) < 2:
            continue
        n_test = min(len(sights) - 1, max(1, int(round(test_fraction * len(sights)))))
        for key in rng.permutation(np.array(sights))[:n_test].tolist():
            test_keys.add((lab, key))
    return np.array([(str(lab), key) in test_keys for lab, key in zip(labels, keys)], dtype=bool)


def make_split(kind: str, labels: Sequence[str], sightings: Sequence[str | None] | None = None, *,
               test_fraction: float, seed: int) -> np.ndarray:
    if kind == "identity":
        return identity_disjoint_split(labels, test_fraction=test_fraction, seed=seed)
    if kind == "sighting":
        return sighting_disjoint_split(labels, sightings or [None] * len(labels), test_fraction=test_fraction, seed=seed)
    raise ValueError(f"unknown split kind {kind!r}; expected one of {SPLIT_KINDS}")
