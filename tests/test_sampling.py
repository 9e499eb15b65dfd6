"""The identity-aware sampler (core.identify.sampling, issue 16 item 4): the schedule's invariants on a synthetic data set
of three sources with uneven identities, the hard-negative table on a hand-worked case, and the refusals."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chisquare

from core.identify.sampling import HardNegatives, check_schedule, hard_negative_table, identity_aware_schedule

# three sources; identity code -> photo count, uneven (1 photo up to 12)
SIZES = {"lions": {0: 1, 1: 3, 2: 8, 3: 12}, "nyala": {4: 2, 5: 2, 6: 5, 7: 9, 8: 4}, "zebra": {9: 6, 10: 2}}


def _data() -> tuple[np.ndarray, list[str]]:
    codes, sources = [], []
    for src, ids in SIZES.items():
        for code, n in ids.items():
            codes += [code] * n
            sources += [src] * n
    order = np.random.default_rng(5).permutation(len(codes))  # rows not grouped: the schedule must not rely on it
    return np.asarray(codes)[order], [sources[i] for i in order]


CODES, SOURCES = _data()
SOURCE_OF = {code: src for src, ids in SIZES.items() for code in ids}
NO_NEGATIVES = {c: HardNegatives((), ()) for c in SOURCE_OF}


def _groups(batch: np.ndarray, per_identity: int) -> list[int]:
    """The identity of each consecutive group of ``per_identity`` rows (each group is one identity)."""
    out = []
    for start in range(0, len(batch), per_identity):
        ids = set(CODES[batch[start:start + per_identity]].tolist())
        assert len(ids) == 1, f"a group mixes identities {ids}"
        out.append(ids.pop())
    return out


def test_schedule_invariants_one_group_per_identity_and_k_sources_of_m_samples():
    schedule = identity_aware_schedule(CODES, SOURCES, hard_negatives=NO_NEGATIVES, epochs=3, steps_per_epoch=200,
                                       identities_per_batch=6, per_identity=2, sources_per_batch=2, seed=7)
    assert len(schedule) == 3 and all(len(epoch) == 200 for epoch in schedule)
    for batch in (b for epoch in schedule for b in epoch):
        groups = _groups(batch, 2)
        assert len(groups) == len(set(groups))  # (a) each identity at most once as a group
        per_source = Counter(SOURCE_OF[g] for g in groups)
        assert len(per_source) == 2  # (b) exactly K = 2 sources...
        g = min(6 // 2, *(len(SIZES[s]) for s in per_source))  # zebra has 2 identities: then 2 groups each
        assert set(per_source.values()) == {g}  # ... with M = g x 2 photos each
        assert len(batch) == 2 * g * 2
        for start in range(0, len(batch), 2):  # without replacement when the identity has the photos
            rows = batch[start:start + 2]
            if len(np.flatnonzero(CODES == CODES[rows[0]])) >= 2:
                assert len(set(rows.tolist())) == 2
    # a source is drawn at most once per batch, so K = 3 holds every source, 2 groups each (zebra's 2 identities)
    three = identity_aware_schedule(CODES, SOURCES, hard_negatives=NO_NEGATIVES, epochs=1, steps_per_epoch=50,
                                    identities_per_batch=9, per_identity=3, sources_per_batch=3, seed=0)
    for batch in three[0]:
        assert Counter(SOURCE_OF[g] for g in _groups(batch, 3)) == {"lions": 2, "nyala": 2, "zebra": 2}


def test_one_source_holds_min_of_identities_per_batch_and_the_identities():
    codes = np.repeat(np.arange(5), [4, 1, 2, 3, 6])
    sources = ["only"] * len(codes)
    negatives = {c: HardNegatives((), ()) for c in range(5)}
    big = identity_aware_schedule(codes, sources, hard_negatives=negatives, epochs=1, steps_per_epoch=20,
                                  identities_per_batch=16, per_identity=4, sources_per_batch=None, seed=1)
    for batch in big[0]:
        assert len(batch) == 5 * 4 and Counter(codes[batch].tolist()) == {c: 4 for c in range(5)}
    small = identity_aware_schedule(codes, sources, hard_negatives=negatives, epochs=1, steps_per_epoch=20,
                                    identities_per_batch=3, per_identity=2, sources_per_batch=None, seed=1)
    assert all(len(b) == 6 and len(set(codes[b].tolist())) == 3 for b in small[0])


def test_anchor_frequency_is_proportional_to_photo_count():
    """(c) The first group of a batch is its first anchor: over 6,000 batches it is identity i in proportion to
    i's photos among all photos (source drawn by its photos, then the identity by its photos in the source)."""
    # a hard negative for every identity, so the later groups are not anchors; the first one always is
    negatives = {c: HardNegatives((), (min(SIZES[s]) if c != min(SIZES[s]) else max(SIZES[s]),))
                 for s in SIZES for c in SIZES[s]}
    schedule = identity_aware_schedule(CODES, SOURCES, hard_negatives=negatives, epochs=3, steps_per_epoch=2000,
                                       identities_per_batch=4, per_identity=2, sources_per_batch=2, seed=11)
    firsts = Counter(int(CODES[b[0]]) for epoch in schedule for b in epoch)
    codes = sorted(SOURCE_OF)
    photos = np.array([np.sum(CODES == c) for c in codes], dtype=float)
    observed = np.array([firsts.get(c, 0) for c in codes], dtype=float)
    expected = observed.sum() * photos / photos.sum()
    assert chisquare(observed, expected).pvalue > 0.001
    # and the heaviest identity leads about 12 / 54 of the batches, the lightest about 1 / 54
    assert observed[3] / observed.sum() == pytest.approx(12 / 54, abs=0.02)
    assert observed[0] / observed.sum() == pytest.approx(1 / 54, abs=0.008)


def test_anchors_bring_their_hard_negatives_from_their_own_source_only():
    # identity 3 (lions) names 9 (zebra, another source: never brought) then 0 (lions); 7 (nyala) names 4
    negatives = {**NO_NEGATIVES, 3: HardNegatives((9,), (0,)), 7: HardNegatives((4,), ())}
    schedule = identity_aware_schedule(CODES, SOURCES, hard_negatives=negatives, epochs=2, steps_per_epoch=500,
                                       identities_per_batch=4, per_identity=2, sources_per_batch=2, seed=3)
    led = {3: 0, 7: 0}
    for batch in (b for epoch in schedule for b in epoch):
        groups = _groups(batch, 2)
        first = groups[0]
        if first in led:
            led[first] += 1
            assert groups[1] == {3: 0, 7: 4}[first]  # the anchor's group, then its same-source hard negative
    assert led[3] > 50 and led[7] > 30


def test_same_seed_same_schedule_other_seed_another():
    def run(seed: int) -> list[list[np.ndarray]]:
        return identity_aware_schedule(CODES, SOURCES, hard_negatives=NO_NEGATIVES, epochs=2, steps_per_epoch=30,
                                       identities_per_batch=6, per_identity=2, sources_per_batch=None, seed=seed)

    a, b, c = run(4), run(4), run(5)
    flat = [np.concatenate(e) for e in a]
    assert all(np.array_equal(x, y) for x, y in zip(flat, (np.concatenate(e) for e in b)))
    assert not all(np.array_equal(x, y) for x, y in zip(flat, (np.concatenate(e) for e in c)))
    assert not np.array_equal(flat[0], flat[1])  # epochs differ from one another too


# --------------------------------------------------------------------------- hard negatives, worked by hand

def _worked_features() -> tuple[np.ndarray, np.ndarray]:
    """Centroid directions A (1, 0), B (.8, .6), C (.6, .8), D (0, 1): cos A-B .8, A-C .6, A-D 0, B-C .96, B-D .6,
    C-D .8. Rows of different lengths: only their directions count."""
    codes = np.array([0, 0, 1, 1, 2, 3])
    feats = np.array([[2, 0], [0.5, 0], [8, 6], [0.4, 0.3], [0.6, 0.8], [0, 3]], dtype=float)
    return codes, feats


def test_hard_negative_table_decided_first_then_ranked_up_to_k():
    codes, feats = _worked_features()
    decided = [("A", "D"), ("X", "A"), ("C", "C"), ("D", "A"), ("B", "nobody")]  # unknown, self, repeat ignored
    table = hard_negative_table(codes, ["A", "B", "C", "D"], decided=decided, features=feats, k=2)
    assert table == {0: HardNegatives((3,), (1,)),  # A: D decided, then B (.8)
                     1: HardNegatives((), (2, 0)),  # B: C (.96), A (.8)
                     2: HardNegatives((), (1, 3)),  # C: B (.96), D (.8)
                     3: HardNegatives((0,), (2,))}  # D: A decided (symmetric), then C (.8)
    assert table[0].codes == (3, 1) and table[3].codes == (0, 2)
    one = hard_negative_table(codes, ["A", "B", "C", "D"], decided=decided, features=feats, k=1)
    assert one[0] == HardNegatives((3,), ()) and one[1] == HardNegatives((), (2,))
    # more decisions than k: the first ones given are kept
    many = hard_negative_table(codes, ["A", "B", "C", "D"], decided=[("A", "C"), ("A", "B"), ("A", "D")],
                               features=feats, k=2)
    assert many[0] == HardNegatives((2, 1), ())
    assert all(v == HardNegatives((), ()) for v in hard_negative_table(
        codes, ["A", "B", "C", "D"], decided=decided, features=feats, k=0).values())


def test_hard_negative_ties_are_broken_by_code_and_k_beyond_the_identities():
    codes = np.array([0, 1, 2])
    feats = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])  # P is orthogonal to Q and to R: a tie
    table = hard_negative_table(codes, ["P", "Q", "R"], decided=[], features=feats, k=1)
    assert table[0] == HardNegatives((), (1,))
    assert hard_negative_table(codes, ["P", "Q", "R"], decided=[], features=feats, k=5)[0].codes == (1, 2)


# --------------------------------------------------------------------------- refusals

def test_refusals_say_what_the_data_lacks():
    with pytest.raises(ValueError, match=r"3 sources per batch asked for, but the training photos come from 2 "
                                         r"source\(s\) \(a, b\)"):
        check_schedule(np.array([0, 1, 2, 3]), ["a", "a", "b", "b"], identities_per_batch=4, per_identity=2,
                       sources_per_batch=3)
    with pytest.raises(ValueError, match="'b' have a single identity"):
        check_schedule(np.array([0, 1, 2, 2]), ["a", "a", "b", "b"], identities_per_batch=4, per_identity=2,
                       sources_per_batch=None)
    with pytest.raises(ValueError, match="1 identities per batch cannot be split over 2 sources"):
        check_schedule(np.array([0, 1, 2, 3]), ["a", "a", "b", "b"], identities_per_batch=1, per_identity=2,
                       sources_per_batch=None)
    with pytest.raises(ValueError, match="identity 1 has photos in two sources"):
        check_schedule(np.array([0, 1, 1, 2]), ["a", "a", "b", "b"], identities_per_batch=4, per_identity=2,
                       sources_per_batch=1)
    with pytest.raises(ValueError, match="4 identity codes but 3 sources"):
        check_schedule(np.array([0, 1, 2, 3]), ["a", "a", "b"], identities_per_batch=4, per_identity=2,
                       sources_per_batch=1)
    with pytest.raises(ValueError, match="no training photos"):
        check_schedule(np.array([], dtype=int), [], identities_per_batch=4, per_identity=2, sources_per_batch=None)
    # what is fine: one source (K defaults to 1), more identities per batch than there are
    check_schedule(np.array([0, 0, 1, 1]), ["a"] * 4, identities_per_batch=16, per_identity=4, sources_per_batch=None)
    with pytest.raises(ValueError, match="3 sources per batch asked for"):  # the schedule refuses as the check does
        identity_aware_schedule(np.array([0, 1, 2, 3]), ["a", "a", "b", "b"], hard_negatives={}, epochs=1,
                                steps_per_epoch=1, identities_per_batch=4, per_identity=2, sources_per_batch=3, seed=0)
