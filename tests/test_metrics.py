"""Retrieval metrics on hand-worked cases, invariances, and agreement with scikit-learn."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

import core.metrics as metrics
from core.metrics import (
    all_vs_all_metrics,
    all_vs_all_valid,
    average_precision,
    first_hit_rank,
    relevance,
    retrieval_metrics,
    same_sighting_mask,
)

# --- hand-worked three-query case -------------------------------------------------------
# gallery identities:            g0=a  g1=b  g2=a  g3=c
GALLERY = ["a", "b", "a", "c"]
QUERIES = ["a", "b", "c"]
SIM = np.array(
    [
        # q0 (a): order g0(+) g1 g2(+) g3 -> AP = (1/1 + 2/3)/2 = 5/6, first hit rank 1
        [0.9, 0.8, 0.7, 0.1],
        # q1 (b): order g0 g2 g3 g1(+)    -> AP = 1/4,                first hit rank 4
        [0.9, 0.2, 0.8, 0.7],
        # q2 (c): order g3(+) g2 g1 g0    -> AP = 1,                  first hit rank 1
        [0.1, 0.2, 0.3, 0.4],
    ]
)
# mAP micro = macro (one query per identity) = (5/6 + 1/4 + 1)/3 = 25/36
# CMC@1 = 2/3 (q0, q2), CMC@5 = CMC@10 = 1


def test_hand_worked_three_queries():
    res = retrieval_metrics(SIM, QUERIES, GALLERY)
    np.testing.assert_allclose(res.ap, [5 / 6, 1 / 4, 1.0])
    np.testing.assert_array_equal(res.first_hit_rank, [1, 4, 1])
    assert res.map_micro == pytest.approx(25 / 36)
    assert res.map_macro == pytest.approx(25 / 36)
    assert res.cmc_micro == pytest.approx({1: 2 / 3, 5: 1.0, 10: 1.0})
    assert res.cmc_macro == pytest.approx({1: 2 / 3, 5: 1.0, 10: 1.0})
    assert res.n_queries == 3 and res.n_identities == 3
    np.testing.assert_array_equal(res.query_index, [0, 1, 2])


def test_macro_and_micro_differ_on_unbalanced_identities():
    gallery = ["a", "b", "x", "y"]
    queries = ["a", "a", "b"]
    sim = np.array(
        [
            [0.9, 0.1, 0.2, 0.3],  # q0 (a): a first            -> AP 1,   rank 1
            [0.5, 0.1, 0.9, 0.2],  # q1 (a): x, a               -> AP 1/2, rank 2
            [0.9, 0.1, 0.8, 0.7],  # q2 (b): a, x, y, b         -> AP 1/4, rank 4
        ]
    )
    res = retrieval_metrics(sim, queries, gallery, ks=(1, 2, 5))
    # micro = (1 + 1/2 + 1/4)/3 = 7/12 ; macro = mean(a: 3/4, b: 1/4) = 1/2
    assert res.map_micro == pytest.approx(7 / 12)
    assert res.map_macro == pytest.approx(1 / 2)
    # CMC@1 micro = 1/3 ; macro = mean(a: 1/2, b: 0) = 1/4 ; CMC@2 micro 2/3, macro mean(1, 0) = 1/2
    assert res.cmc_micro == pytest.approx({1: 1 / 3, 2: 2 / 3, 5: 1.0})
    assert res.cmc_macro == pytest.approx({1: 1 / 4, 2: 1 / 2, 5: 1.0})
    assert res.n_identities == 2


def test_perfect_ranking_scores_one_everywhere():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 4)
    same = relevance(labels, labels)
    sim = same + 0.01 * rng.random(same.shape)  # every positive above every negative
    res = all_vs_all_metrics(sim, labels)
    assert res.map_macro == pytest.approx(1.0) and res.map_micro == pytest.approx(1.0)
    assert all(v == pytest.approx(1.0) for v in (*res.cmc_macro.values(), *res.cmc_micro.values()))
    assert res.n_queries == 24 and res.n_identities == 6


def test_reversed_ranking_gives_known_value():
    # 4 gallery items, the 2 positives ranked last (ranks 3 and 4): AP = (1/3 + 2/4)/2 = 5/12
    sim = np.array([[0.4, 0.3, 0.2, 0.1]])
    rel = np.array([[False, False, True, True]])
    assert average_precision(sim, rel)[0] == pytest.approx(5 / 12)
    assert first_hit_rank(sim, rel)[0] == 3
    # whole benchmark reversed: negatives always first -> CMC@1 = 0
    labels = np.repeat(np.arange(3), 3)
    same = relevance(labels, labels)
    res = all_vs_all_metrics(-same.astype(float) + 0.001 * np.arange(9), labels, ks=(1,))
    # each query: 6 negatives then 2 positives -> AP = (1/7 + 2/8)/2
    assert res.map_micro == pytest.approx((1 / 7 + 2 / 8) / 2)
    assert res.cmc_micro[1] == 0.0
    np.testing.assert_array_equal(res.first_hit_rank, 7)


def test_ties_follow_sklearn_and_pessimistic_rank():
    # one positive tied with two negatives: the block of 3 has precision 1/3 -> AP 1/3;
    # pessimistic rank counts both tied negatives -> 3
    sim = np.array([[0.5, 0.5, 0.5, 0.1]])
    rel = np.array([[True, False, False, False]])
    assert average_precision(sim, rel)[0] == pytest.approx(1 / 3)
    assert first_hit_rank(sim, rel)[0] == 3
    # positives at 0.9 and tied at 0.5 with a negative: (1/1 + 2/3)/2 = 5/6, rank 1
    sim = np.array([[0.9, 0.5, 0.5, 0.1]])
    rel = np.array([[True, True, False, False]])
    assert average_precision(sim, rel)[0] == pytest.approx(5 / 6)
    assert first_hit_rank(sim, rel)[0] == 1
    # tied positives only: no penalty
    sim = np.array([[0.5, 0.5, 0.1]])
    rel = np.array([[True, True, False]])
    assert average_precision(sim, rel)[0] == pytest.approx(1.0)
    assert first_hit_rank(sim, rel)[0] == 1
    # a constant scorer: AP = share of positives, rank = 1 + #negatives
    sim = np.zeros((1, 5))
    rel = np.array([[True, False, True, False, False]])
    assert average_precision(sim, rel)[0] == pytest.approx(2 / 5)
    assert first_hit_rank(sim, rel)[0] == 4


def test_nan_scores_rank_last():
    sim = np.array([[np.nan, 0.2, 0.1]])
    rel = np.array([[True, False, False]])
    assert average_precision(sim, rel)[0] == pytest.approx(1 / 3)
    assert first_hit_rank(sim, rel)[0] == 3
    # with a masked-out item also scored: valid order 0.2, 0.1, NaN(+) -> AP 1/3, rank 3
    sim = np.array([[np.nan, 0.2, 0.1, 0.5]])
    rel = np.array([[True, False, False, False]])
    valid = np.array([[True, True, True, False]])
    assert average_precision(sim, rel, valid=valid)[0] == pytest.approx(1 / 3)
    assert first_hit_rank(sim, rel, valid=valid)[0] == 3


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gallery_order_invariance(seed):
    rng = np.random.default_rng(seed)
    q, g = 15, 40
    sim = np.round(rng.random((q, g)), 1)  # plenty of ties
    rel = rng.random((q, g)) < 0.15
    valid = rng.random((q, g)) < 0.8
    perm = rng.permutation(g)
    for fn in (average_precision, first_hit_rank):
        a = fn(sim, rel, valid=valid)
        b = fn(sim[:, perm], rel[:, perm], valid=valid[:, perm])
        np.testing.assert_allclose(a, b, equal_nan=True)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("decimals", [None, 1])
def test_agrees_with_sklearn_average_precision(seed, decimals):
    rng = np.random.default_rng(seed)
    q, g = 25, 60
    sim = rng.normal(size=(q, g)).astype(np.float32)
    if decimals is not None:
        sim = np.round(sim, decimals)
    rel = rng.random((q, g)) < rng.uniform(0.02, 0.5)
    valid = rng.random((q, g)) < 0.85
    ap = average_precision(sim, rel, valid=valid)
    for i in range(q):
        y = rel[i, valid[i]]
        if y.any():
            assert ap[i] == pytest.approx(average_precision_score(y, sim[i, valid[i]]), abs=1e-12)
        else:
            assert np.isnan(ap[i])


def test_first_hit_rank_matches_brute_force():
    rng = np.random.default_rng(7)
    sim = np.round(rng.random((30, 20)), 1)
    rel = rng.random((30, 20)) < 0.2
    valid = rng.random((30, 20)) < 0.9
    ranks = first_hit_rank(sim, rel, valid=valid)
    for i in range(30):
        p = rel[i] & valid[i]
        if not p.any():
            assert np.isnan(ranks[i])
            continue
        best = sim[i, p].max()
        assert ranks[i] == 1 + np.sum(valid[i] & ~rel[i] & (sim[i] >= best))


def test_queries_without_positive_are_excluded():
    gallery = ["a", "b", "c"]
    queries = ["a", "z", "b", "y"]  # z and y have no positive
    sim = np.array([[0.9, 0.1, 0.0], [0.3, 0.2, 0.1], [0.9, 0.1, 0.0], [0.1, 0.2, 0.3]])
    res = retrieval_metrics(sim, queries, gallery)
    assert res.n_queries == 2 and res.n_identities == 2
    np.testing.assert_array_equal(res.query_index, [0, 2])
    # q0: AP 1 ; q2 (b): b second -> AP 1/2
    np.testing.assert_allclose(res.ap, [1.0, 0.5])
    assert res.map_micro == pytest.approx(0.75)
    ap_all = average_precision(sim, relevance(queries, gallery))
    assert np.isnan(ap_all[1]) and np.isnan(ap_all[3])


def test_no_query_at_all_gives_nan_and_json_none():
    res = retrieval_metrics(np.zeros((2, 2)), ["a", "b"], ["c", "d"])
    assert res.n_queries == 0 and np.isnan(res.map_macro)
    d = res.to_dict()
    assert d["map_macro"] is None and d["cmc_micro"]["1"] is None
    json.dumps(d)


def test_valid_mask_removes_gallery_items():
    sim = np.array([[0.9, 0.8, 0.1]])
    rel = np.array([[False, True, False]])
    assert average_precision(sim, rel)[0] == pytest.approx(0.5)
    assert first_hit_rank(sim, rel)[0] == 2
    valid = np.array([[False, True, True]])  # drop the negative in front
    assert average_precision(sim, rel, valid=valid)[0] == pytest.approx(1.0)
    assert first_hit_rank(sim, rel, valid=valid)[0] == 1
    # masking out the only positive removes the query
    valid = np.array([[True, False, True]])
    assert np.isnan(average_precision(sim, rel, valid=valid)[0])
    assert np.isnan(first_hit_rank(sim, rel, valid=valid)[0])


# images 0,1,2 are identity a; 0 and 1 come from the same sighting; image 3 is b
AVA_SIM = np.array(
    [
        [1.0, 0.9, 0.2, 0.5],
        [0.9, 1.0, 0.3, 0.4],
        [0.2, 0.3, 1.0, 0.6],
        [0.5, 0.4, 0.6, 1.0],
    ]
)
AVA_LABELS = ["a", "a", "a", "b"]
AVA_SIGHTINGS = ["s1", "s1", "s2", "s3"]


def test_all_vs_all_excludes_self_and_same_sighting():
    res = all_vs_all_metrics(AVA_SIM, AVA_LABELS, sightings=AVA_SIGHTINGS)
    # q0: gallery {2 (a, .2), 3 (b, .5)} -> order 3, 2 -> AP 1/2, rank 2
    # q1: gallery {2 (a, .3), 3 (b, .4)} -> AP 1/2, rank 2
    # q2: gallery {0 (a, .2), 1 (a, .3), 3 (b, .6)} -> order 3, 1, 0 -> AP (1/2 + 2/3)/2 = 7/12
    # q3 (b): no positive -> excluded
    np.testing.assert_allclose(res.ap, [1 / 2, 1 / 2, 7 / 12])
    assert res.n_queries == 3 and res.n_identities == 1
    assert res.map_micro == pytest.approx(19 / 36) and res.map_macro == pytest.approx(19 / 36)
    np.testing.assert_array_equal(res.first_hit_rank, [2, 2, 2])

    # same-sighting photos kept: q0 order 1(a), 3(b), 2(a) -> (1 + 2/3)/2 = 5/6; q1 likewise; q2 7/12
    kept = all_vs_all_metrics(AVA_SIM, AVA_LABELS, sightings=AVA_SIGHTINGS, exclude_same_sighting=False)
    np.testing.assert_allclose(kept.ap, [5 / 6, 5 / 6, 7 / 12])
    assert kept.map_micro == pytest.approx(27 / 36)
    no_sightings = all_vs_all_metrics(AVA_SIM, AVA_LABELS)
    assert no_sightings.map_micro == pytest.approx(kept.map_micro)


def test_unknown_sightings_never_match():
    mask = same_sighting_mask(["s1", None, None, "", "s1", float("nan")])
    expected = np.zeros((6, 6), dtype=bool)
    expected[0, 0] = expected[0, 4] = expected[4, 0] = expected[4, 4] = True
    np.testing.assert_array_equal(mask, expected)
    # unknown sightings therefore behave like no sighting labels at all
    res = all_vs_all_metrics(AVA_SIM, AVA_LABELS, sightings=[None, None, None, None])
    assert res.map_micro == pytest.approx(27 / 36)


def test_all_vs_all_valid_mask():
    valid = all_vs_all_valid(4, sightings=AVA_SIGHTINGS)
    assert not valid.diagonal().any()
    assert not valid[0, 1] and not valid[1, 0] and valid[0, 2] and valid[2, 3]


def test_chunked_rows_give_the_same_answer(monkeypatch):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 8, 50)
    sim = np.round(rng.normal(size=(50, 50)), 1)
    whole = all_vs_all_metrics(sim, labels)
    monkeypatch.setattr(metrics, "_CHUNK_ELEMENTS", 120)  # 2 rows per chunk
    chunked = all_vs_all_metrics(sim, labels)
    np.testing.assert_allclose(whole.ap, chunked.ap)
    np.testing.assert_array_equal(whole.first_hit_rank, chunked.first_hit_rank)


def test_to_dict_is_json_friendly():
    d = retrieval_metrics(SIM, QUERIES, GALLERY).to_dict()
    assert set(d) == {"map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "n_identities"}
    assert set(d["cmc_macro"]) == {"1", "5", "10"}
    assert json.loads(json.dumps(d))["map_micro"] == pytest.approx(25 / 36)


def test_shape_errors():
    with pytest.raises(ValueError):
        retrieval_metrics(np.zeros((2, 3)), ["a", "b"], ["a", "b"])
    with pytest.raises(ValueError):
        all_vs_all_metrics(np.zeros((2, 3)), ["a", "b"])
    with pytest.raises(ValueError):
        average_precision(np.zeros((2, 3)), np.zeros((2, 3)), valid=np.ones((3, 2)))
