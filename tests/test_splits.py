from __future__ import annotations

import numpy as np
import pytest

from core.identify.splits import identity_disjoint_split, make_split, sighting_disjoint_split


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identity_split_is_disjoint_seeded_and_sized(seed):
    labels = [f"id{i // 3}" for i in range(30)]  # 10 identities x 3
    is_test = identity_disjoint_split(labels, test_fraction=0.3, seed=seed)
    test_ids = {lab for lab, t in zip(labels, is_test) if t}
    train_ids = {lab for lab, t in zip(labels, is_test) if not t}
    assert len(test_ids) == 3 and not (test_ids & train_ids)
    assert is_test.sum() == 9
    assert np.array_equal(is_test, identity_disjoint_split(labels, test_fraction=0.3, seed=seed))


def test_identity_split_changes_with_seed():
    labels = [f"id{i}" for i in range(50)]
    a = identity_disjoint_split(labels, test_fraction=0.3, seed=0)
    b = identity_disjoint_split(labels, test_fraction=0.3, seed=1)
    assert not np.array_equal(a, b)


def test_sighting_split_keeps_sightings_whole_and_train_side_for_test_ids():
    labels = ["a"] * 6 + ["b"] * 2 + ["c"] * 3
    sightings = ["s1", "s1", "s2", "s2", "s3", "s3", "t1", "t1", "u1", "u2", "u3"]
    is_test = sighting_disjoint_split(labels, sightings, test_fraction=0.5, seed=0)
    for s in set(sightings):
        vals = {t for t, ss in zip(is_test, sightings) if ss == s}
        assert len(vals) == 1, f"sighting {s} straddles the split"
    assert not any(t for t, lab in zip(is_test, labels) if lab == "b")  # single sighting: stays in train
    for lab in {l for l, t in zip(labels, is_test) if t}:
        assert any(not t for t, l2 in zip(is_test, labels) if l2 == lab)


def test_bad_fraction_and_kind():
    with pytest.raises(ValueError):
        identity_disjoint_split(["a", "b"], test_fraction=1.0, seed=0)
    with pytest.raises(ValueError, match="unknown split kind"):
        make_split("random", ["a", "b"], test_fraction=0.5, seed=0)
