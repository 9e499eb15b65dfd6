"""Choosing a pipeline's fusion by cross-validation grouped by individual (core.identify.spots.fusion_choice), on small
synthetic calibration sets whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

import core.identify.spots.fusion_choice as fc
from core.identify.spots.fusion import GLOBAL, fit_scorer_calibrations, fused_similarity, shortlist_ranks
from core.identify.spots.fusion_choice import (
    LOGISTIC,
    MEAN,
    SINGLE,
    Fusion,
    candidate_fusions,
    choose_fusion,
    individual_folds,
)

INLIERS, LNBNN = "inliers", "lnbnn"


def calibration_set(*, individuals: int = 8, photos: int = 3, seed: int = 0):
    """All-vs-all raw scores of ``individuals`` x ``photos`` photos: a noisy global score, an inlier count that
    is perfect (20-30 on same-animal pairs, 0-5 on the rest) and an LNBNN vote that is pure noise."""
    rng = np.random.default_rng(seed)
    labels = [f"ind{i}" for i in range(individuals) for _ in range(photos)]
    lab = np.asarray(labels)
    same = lab[:, None] == lab[None, :]
    n = len(labels)
    g = rng.uniform(0.2, 0.6, (n, n)) + 0.15 * same
    g = (g + g.T) / 2
    inl = np.where(same, rng.integers(20, 31, (n, n)), rng.integers(0, 6, (n, n))).astype(float)
    inl = np.triu(inl) + np.triu(inl, 1).T
    votes = rng.uniform(0, 1, (n, n))
    valid = ~np.eye(n, dtype=bool)
    raw = {GLOBAL: g, INLIERS: inl, LNBNN: votes}
    applies = {GLOBAL: np.ones((n, n), bool), INLIERS: valid.copy(), LNBNN: valid.copy()}
    return raw, applies, valid, labels


def _choose(raw, applies, valid, labels, **kw):
    short = valid.copy()  # every other photo is shortlisted
    same = np.asarray(labels)[:, None] == np.asarray(labels)[None, :]
    cals = fit_scorer_calibrations(raw, same, short, {k: v for k, v in applies.items() if k != GLOBAL})
    return choose_fusion(raw, applies, valid, short, labels, (GLOBAL, INLIERS, LNBNN), calibrators=cals, **kw), cals


def test_folds_hold_whole_individuals_and_are_balanced():
    labels = [f"ind{i}" for i in range(10) for _ in range(i % 3 + 1)]
    folds = individual_folds(labels, 5, seed=3)
    for name in set(labels):
        assert len({int(f) for f, lab in zip(folds, labels) if lab == name}) == 1
    per_fold = [len({lab for f, lab in zip(folds, labels) if f == k}) for k in range(5)]
    assert per_fold == [2, 2, 2, 2, 2]
    assert np.array_equal(folds, individual_folds(labels, 5, seed=3))  # seeded
    with pytest.raises(ValueError, match="cannot fill"):
        individual_folds(["a", "a", "b"], 3)


def test_a_perfect_scorer_wins_and_noise_loses():
    raw, applies, valid, labels = calibration_set()
    choice, _ = _choose(raw, applies, valid, labels)
    # the inlier count separates same from different animals exactly, fold after fold: CV mAP and CMC@1 are 1
    assert choice.cv[INLIERS] == {"map_macro": 1.0, "cmc1_macro": 1.0}
    assert choice.cv[LNBNN]["map_macro"] < 0.8 and choice.cv[GLOBAL]["map_macro"] < 1.0
    # a mean with it may tie at 1.0, but ties go to the simplest: the scorer alone
    assert choice.fusion.kind == SINGLE and choice.fusion.name == INLIERS
    assert not choice.fell_back and "inliers has the best cross-validated" in choice.why
    assert set(choice.cv) == {c.name for c in candidate_fusions((GLOBAL, INLIERS, LNBNN))}
    assert choice.n_folds == 5


def test_grouped_cv_never_fits_on_a_held_out_individual(monkeypatch):
    raw, applies, valid, labels = calibration_set(individuals=7)
    lab = np.asarray(labels)
    seen: list[tuple[str, set[str]]] = []
    real_cal, real_fit = fc.fit_scorer_calibrations, fc._fit

    def photos_in(pairs):
        pairs = np.asarray(pairs, bool)
        return set(lab[pairs.any(axis=1) | pairs.any(axis=0)].tolist())

    def spy_cal(raw_, same, pairs, applies_=None, *, source=""):
        seen.append(("calibrate", photos_in(pairs)))
        return real_cal(raw_, same, pairs, applies_, source=source)

    def spy_fit(candidate, raw_, applies_, cals, pairs, shortlist, same, *, max_iter):
        seen.append(("fit", photos_in(pairs)))
        return real_fit(candidate, raw_, applies_, cals, pairs, shortlist, same, max_iter=max_iter)

    real_folds = fc.individual_folds

    def spy_folds(labels_, n, *, seed=0):
        folds = real_folds(labels_, n, seed=seed)
        spy_folds.folds = folds
        return folds

    monkeypatch.setattr(fc, "fit_scorer_calibrations", spy_cal)
    monkeypatch.setattr(fc, "_fit", spy_fit)
    monkeypatch.setattr(fc, "individual_folds", spy_folds)
    short = valid.copy()
    same = lab[:, None] == lab[None, :]
    cals = real_cal(raw, same, short, {k: v for k, v in applies.items() if k != GLOBAL})
    choose_fusion(raw, applies, valid, short, labels, (GLOBAL, INLIERS, LNBNN), calibrators=cals, n_folds=3)
    folds = spy_folds.folds
    fold_individuals = [set(lab[folds == k].tolist()) for k in range(3)]
    # within the cross-validation loop (before the final refit on every pair), each fold's calibration and fits
    # see only the other folds' individuals
    calls = [c for c in seen if c[0] in ("calibrate", "fit")]
    fold_calls = [c for c in calls if c[1] != set(labels)]
    assert len([c for c in fold_calls if c[0] == "calibrate"]) == 3
    k = -1
    for kind, photos in fold_calls:
        if kind == "calibrate":
            k += 1
        assert photos and not photos & fold_individuals[k], (kind, k)
        assert photos == set(labels) - fold_individuals[k]


def test_a_logistic_fit_that_does_not_converge_falls_back_to_the_best_single_scorer():
    raw, applies, valid, labels = calibration_set(seed=1)
    choice, _ = _choose(raw, applies, valid, labels, max_iter=1)
    assert choice.fell_back and choice.fusion.kind == SINGLE and choice.fusion.name == INLIERS
    assert "did not converge in 1 iterations" in choice.why and "fell back to the best single scorer" in choice.why
    assert choice.not_converged and all(n.startswith("logistic") for n in choice.not_converged)


def test_too_few_same_animal_pairs_are_refused():
    raw, applies, valid, labels = calibration_set(individuals=3, photos=3)  # 3 x 3 x 2 = 18 same pairs
    with pytest.raises(ValueError, match="18 same-animal pairs in the shortlists, fewer than 20"):
        _choose(raw, applies, valid, labels)


def test_logistic_fusion_learns_a_positive_weight_on_the_informative_scorer_and_round_trips():
    raw, applies, valid, labels = calibration_set(seed=2)
    choice, cals = _choose(raw, applies, valid, labels)
    logistic = choice.fitted["logistic: log-odds"]
    assert logistic.kind == LOGISTIC and logistic.fitted
    w = dict(zip(logistic.features, logistic.weights))
    assert w["log-odds inliers"] > abs(w["log-odds lnbnn"])
    again = Fusion.from_dict(logistic.to_dict())
    assert again == logistic
    # used in the ranking as stored: the perfect scorer's pairs come first for every query
    sim = fused_similarity(raw[GLOBAL], valid, shortlist=23, raw=raw, calibrators=cals, applies=applies,
                           fusion=again)
    lab = np.asarray(labels)
    top2 = np.argsort(-sim, axis=1)[:, :2]
    assert np.all(lab[top2] == lab[:, None])


def test_single_and_mean_fusions_by_hand():
    probs = {GLOBAL: np.array([0.2, 0.4, 0.6]), INLIERS: np.array([0.9, 0.1, np.nan])}
    applies = {INLIERS: np.array([True, False, True])}
    # one scorer: its probability where it applies, the global one elsewhere (and where it is NaN)
    assert np.allclose(Fusion(SINGLE, (INLIERS,)).combine(probs, applies), [0.9, 0.4, 0.6])
    assert np.allclose(Fusion(MEAN, (GLOBAL, INLIERS)).combine(probs, applies), [0.55, 0.4, 0.6])
    with pytest.raises(ValueError, match="not been fitted"):
        Fusion(LOGISTIC, (GLOBAL, INLIERS)).combine(probs, applies)
    with pytest.raises(ValueError, match="exactly one scorer"):
        Fusion(SINGLE, (GLOBAL, INLIERS))


def test_shortlist_ranks_by_hand():
    raw = np.array([[0.9, 0.5, 0.5, 0.1], [1.0, 3.0, 2.0, 9.0]])
    short = np.array([[True, True, True, False], [True, True, True, True]])
    applies = np.array([[True, True, True, True], [True, True, False, True]])
    r = shortlist_ranks(raw, short, applies)
    assert np.array_equal(np.nan_to_num(r, nan=-1), [[1, 2, 2, -1], [3, 2, -1, 1]])
