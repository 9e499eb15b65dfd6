"""Train/test splits for re-ID benchmarks (docs/DESIGN.md section 4, "Splits and sightings").

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

SPLIT_KINDS = ("identity", "sighting", "test-only")  # plus "column:<name>" (an official split from a manifest)
TRAIN_VALUES = ("train", "training")
TEST_VALUES = ("test", "query", "gallery", "testing", "eval")


def is_column_split(kind: str) -> bool:
    return kind.startswith("column:") and len(kind) > len("column:")


def check_split_kind(kind: str) -> None:
    if kind not in SPLIT_KINDS and not is_column_split(kind):
        raise ValueError(f"unknown split kind {kind!r}; expected identity, sighting, test-only or column:<name> "
                         "(the split given in a manifest column, e.g. column:source_split)")


def split_from_column(values: Sequence[str | None]) -> np.ndarray:
    """Boolean ``is_test`` from an official split column: train/training -> train; test/query/gallery/
    testing/eval -> test (case-insensitive). Any other value (or an empty cell) is refused, naming it."""
    out = np.zeros(len(values), dtype=bool)
    bad: dict[str, int] = {}
    for i, v in enumerate(values):
        key = (v or "").strip().lower()
        if key in TEST_VALUES:
            out[i] = True
        elif key not in TRAIN_VALUES:
            bad[key or "(empty)"] = bad.get(key or "(empty)", 0) + 1
    if bad:
        listed = ", ".join(f"{k!r} x{n}" for k, n in sorted(bad.items()))
        raise ValueError(f"the split column has values that are neither train nor test: {listed} "
                         f"(train: {', '.join(TRAIN_VALUES)}; test: {', '.join(TEST_VALUES)})")
    return out


def make_split_any(kind: str, labels: Sequence[str], sightings: Sequence[str | None], *,
                   column_values: Sequence[str | None] | None = None, test_fraction: float = 0.3,
                   seed: int = 0) -> np.ndarray:
    """``is_test`` for any split kind: the random ones, ``test-only`` (everything is test: a published test
    set evaluated whole) and ``column:<name>`` (``column_values`` decide)."""
    check_split_kind(kind)
    if kind == "test-only":
        return np.ones(len(labels), dtype=bool)
    if is_column_split(kind):
        if column_values is None:
            raise ValueError(f"split {kind!r} needs a manifest with that column")
        return split_from_column(column_values)
    return make_split(kind, labels, sightings, test_fraction=test_fraction, seed=seed)


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
