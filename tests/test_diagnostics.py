"""Context reliance, laterality and flank protocols on hand-made embeddings with known answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.inspect.diagnostics import (
    context_reliance,
    flank_codes,
    flank_masks,
    flank_protocols,
    laterality,
    map_by_variant,
    mirror_tier,
    mirrored_query_ratio,
    risk_band,
    scores,
)
from core.metrics import all_vs_all_metrics
from core.similarity import lift_to_hyperboloid, lorentz_distance

K, M, D = 12, 4, 32  # identities, images per identity, embedding size


@pytest.fixture()
def population():
    """Identity centres and per-image labels: 12 identities x 4 images."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(K), M)
    centres = rng.normal(size=(K, D))
    return rng, labels, centres


# --- Axis 1 ------------------------------------------------------------------------------


def test_background_blind_model_has_low_bg_fg(population):
    rng, labels, centres = population
    foreground = centres[labels] + 0.1 * rng.normal(size=(K * M, D))  # identity lives here
    inpainted = rng.normal(size=(K * M, D))  # background is pure noise
    maps = map_by_variant({"foreground_only": foreground, "background_inpainted": inpainted}, labels)
    assert maps["foreground_only"] == pytest.approx(1.0)
    out = context_reliance(maps)
    assert out["bg_fg"] < 0.4 and out["bg_fg_band"] == "LOW"
    assert out["bg_sil_fg"] is None and out["bg_sil_fg_band"] is None


def test_background_reading_model_is_high_risk(population):
    rng, labels, centres = population
    foreground = centres[labels] + 1.5 * rng.normal(size=(K * M, D))  # weak identity signal
    background = centres[labels] + 0.1 * rng.normal(size=(K * M, D))  # strong identity signal
    maps = map_by_variant({"foreground_only": foreground, "background_only": background}, labels)
    out = context_reliance(maps)
    assert out["bg_sil_fg"] > 1.10 and out["bg_sil_fg_band"] == "HIGH"


def test_same_sighting_exclusion_removes_background_leak(population):
    rng, labels, _ = population
    # two sightings per identity, two photos each; the background is the sighting's place
    sightings = np.array([f"s{i // 2}" for i in range(K * M)])
    place = rng.normal(size=(K * M // 2, D))
    background = place[np.arange(K * M) // 2] + 0.05 * rng.normal(size=(K * M, D))
    sim = scores(background, background)
    leaked = all_vs_all_metrics(sim, labels, sightings=sightings, exclude_same_sighting=False)
    clean = all_vs_all_metrics(sim, labels, sightings=sightings)
    # the same-sighting photo is always the top match: CMC@1 = 1 and AP >= 1/3 (1 of 3 positives first)
    assert leaked.cmc_micro[1] == 1.0 and leaked.map_macro >= 1 / 3
    # across sightings the place says nothing about identity: CMC@1 near chance (2 of 46 positives)
    assert clean.cmc_micro[1] < 0.3 and clean.map_macro < leaked.map_macro - 0.15
    maps = map_by_variant({"bg": background}, labels, sightings=sightings)
    assert maps["bg"] == pytest.approx(clean.map_macro)


def test_context_reliance_hand_values():
    out = context_reliance({"foreground_only": 0.5, "background_inpainted": 0.25, "bg_silhouette": 0.6})
    assert out["bg_fg"] == pytest.approx(0.5) and out["bg_fg_band"] == "LOW"
    assert out["bg_sil_fg"] == pytest.approx(1.2) and out["bg_sil_fg_band"] == "HIGH"
    assert context_reliance({"background_inpainted": 0.3})["bg_fg"] is None
    assert context_reliance({"foreground_only": 0.0, "background_inpainted": 0.3})["bg_fg"] is None
    json.dumps(out)


@pytest.mark.parametrize(
    ("ratio", "band"),
    [(0.0, "LOW"), (0.9499, "LOW"), (0.95, "MEDIUM"), (1.0, "MEDIUM"), (1.10, "MEDIUM"), (1.1001, "HIGH"), (None, None)],
)
def test_risk_band_boundaries(ratio, band):
    assert risk_band(ratio) == band


# --- Axis 2 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mean", "tier"),
    [
        (0.2, "aware"),
        (0.8499, "aware"),
        (0.85, "moderate"),
        (0.9599, "moderate"),
        (0.96, "strong shortcut"),
        (0.99, "strong shortcut"),
        (0.9901, "symmetric"),
        (1.0, "symmetric"),
    ],
)
def test_mirror_tier_boundaries(mean, tier):
    assert mirror_tier(mean) == tier


def test_flip_invariant_model_is_symmetric(population):
    rng, labels, centres = population
    x = centres[labels] + 0.1 * rng.normal(size=(K * M, D))
    res = laterality(x, x.copy(), labels)
    np.testing.assert_allclose(res.mirror_sim, 1.0, atol=1e-6)
    assert res.tier == "symmetric" and res.mirror_sim_std < 1e-6
    assert res.danger_margin_positive == 0 and np.all(res.danger_margin < 0)
    assert mirrored_query_ratio(x, x, labels)["ratio"] == pytest.approx(1.0)
    d = res.to_dict(per_image=True)
    assert d["mirror_tier"] == "symmetric" and len(d["nn_index"]) == K * M
    json.dumps(d)


def test_flip_invariant_lorentz_model_is_symmetric(population):
    rng, labels, centres = population
    x = lift_to_hyperboloid(0.3 * (centres[labels] + 0.1 * rng.normal(size=(K * M, D))))
    res = laterality(x, x.copy(), labels, metric="lorentz")
    np.testing.assert_allclose(res.mirror_sim, 1.0, atol=1e-6)
    assert res.tier == "symmetric"
    assert np.all((res.nn_sim > 0) & (res.nn_sim < 1))


def test_danger_margin_sign_on_constructed_case():
    # three identities, one image each, orthogonal-ish embeddings
    x = np.array([[1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 1.0]])
    labels = ["a", "b", "c"]
    flipped = x.copy()
    flipped[0] = x[1]  # the mirror of image 0 *is* animal b
    res = laterality(x, flipped, labels)
    # image 0: mirror_sim = cos(x0, x1) = 0.6 ; nn_sim = cos(x1, x1) = 1 -> margin +0.4
    assert res.mirror_sim[0] == pytest.approx(0.6)
    assert res.nn_sim[0] == pytest.approx(1.0) and res.nn_index[0] == 1
    assert res.danger_margin[0] == pytest.approx(0.4)
    # image 1: flip == itself -> mirror_sim 1, nn = image 0 with cos 0.6 -> margin -0.4
    assert res.danger_margin[1] == pytest.approx(-0.4) and res.nn_index[1] == 0
    # image 2: mirror 1, best other identity has cos 0 -> margin -1
    assert res.danger_margin[2] == pytest.approx(-1.0)
    assert res.danger_margin_positive == 1
    assert res.mirror_sim_mean == pytest.approx((0.6 + 1 + 1) / 3)
    assert res.tier == "moderate"  # mean 0.8667


def test_laterality_nn_excludes_own_identity_and_uses_gallery():
    x = np.array([[1.0, 0.0], [1.0, 0.01]])  # same identity, nearly identical
    res = laterality(x, x, ["a", "a"])
    assert np.all(np.isnan(res.nn_sim)) and np.all(res.nn_index == -1)
    assert res.danger_margin_positive == 0
    gallery = np.array([[0.0, 1.0], [1.0, 0.0]])
    res = laterality(x, x, ["a", "a"], gallery=gallery, gallery_labels=["b", "a"])
    np.testing.assert_array_equal(res.nn_index, [0, 0])


def test_mirrored_query_ratio_drops_when_flip_looks_like_another_animal(population):
    rng, labels, centres = population
    x = centres[labels] + 0.1 * rng.normal(size=(K * M, D))
    flipped = centres[(labels + 1) % K] + 0.1 * rng.normal(size=(K * M, D))
    out = mirrored_query_ratio(x, flipped, labels)
    assert out["map_macro_regular"] == pytest.approx(1.0)
    assert out["ratio"] < 0.3 and out["n_queries"] == K * M


def test_lorentz_scores_decrease_with_distance():
    origin = lift_to_hyperboloid(np.zeros((1, 3)))
    t = np.linspace(0.0, 3.0, 20)
    points = lift_to_hyperboloid(np.stack([t, np.zeros_like(t), np.zeros_like(t)], axis=1))
    s = scores(origin, points, metric="lorentz")[0]
    d = lorentz_distance(origin, points)[0]
    assert np.all(s > 0) and np.all(s <= 1) and s[0] == pytest.approx(1.0)
    assert np.all(np.diff(d) > 0) and np.all(np.diff(s) < 0)
    np.testing.assert_allclose(s, np.exp(-d), rtol=1e-5)


def test_cosine_scores_normalise_rows():
    s = scores(np.array([[3.0, 0.0]]), np.array([[0.0, 2.0], [5.0, 5.0]]))
    np.testing.assert_allclose(s, [[0.0, np.sqrt(0.5)]], atol=1e-6)
    with pytest.raises(ValueError):
        scores(np.ones((1, 2)), np.ones((1, 2)), metric="dot")


# --- flank protocols ---------------------------------------------------------------------

# 0 a/L, 1 a/R, 2 a/L, 3 b/L, 4 b/R, 5 a/unknown flank (must be ignored everywhere)
FL_LABELS = ["a", "a", "a", "b", "b", "a"]
FL_FLANKS = ["left", "right", "L", "Left", "R", "unknown"]
FL_SIM = np.full((6, 6), 0.99)  # image 5 looks like everything: it would change every AP
for (i, j), v in {
    (0, 1): 0.8, (0, 2): 0.3, (0, 3): 0.6, (0, 4): 0.1,
    (1, 2): 0.1, (1, 3): 0.4, (1, 4): 0.9,
    (2, 3): 0.2, (2, 4): 0.5,
    (3, 4): 0.7,
}.items():
    FL_SIM[i, j] = FL_SIM[j, i] = v
np.fill_diagonal(FL_SIM, 1.0)


def test_flank_protocols_hand_case():
    out = flank_protocols(FL_SIM, FL_LABELS, FL_FLANKS)
    assert out["n_left"] == 3 and out["n_right"] == 2
    within = out["within_flank"]
    # within: q0 gallery {2 a .3, 3 b .6} -> AP 1/2 ; q2 gallery {0 a .3, 3 b .2} -> AP 1
    # q3 (b, L), q1 (a, R), q4 (b, R) have no same-flank positive -> excluded
    assert within["n_queries"] == 2
    assert within["map_micro"] == pytest.approx(0.75) and within["map_macro"] == pytest.approx(0.75)
    assert within["cmc_micro"]["1"] == pytest.approx(0.5)
    cross = out["cross_flank"]
    # cross: q0 {1 a .8, 4 b .1} -> 1 ; q2 {1 a .1, 4 b .5} -> 1/2 ; q3 {1 a .4, 4 b .7} -> 1
    #        q1 {0 a .8, 2 a .1, 3 b .4} -> order 0, 3, 2 -> (1 + 2/3)/2 = 5/6 ; q4 {0 .1, 2 .5, 3 b .7} -> 1
    # micro = (1 + 1/2 + 1 + 5/6 + 1)/5 = 13/15 ; macro = mean(a: (1 + 1/2 + 5/6)/3 = 7/9, b: 1) = 8/9
    assert cross["n_queries"] == 5 and cross["n_identities"] == 2
    assert cross["map_micro"] == pytest.approx(13 / 15)
    assert cross["map_macro"] == pytest.approx(8 / 9)
    assert cross["cmc_micro"]["1"] == pytest.approx(4 / 5)
    assert out["cross_within_ratio"] == pytest.approx((8 / 9) / 0.75)
    json.dumps(out)


def test_cross_flank_query_and_gallery_are_disjoint():
    masks = flank_masks(FL_FLANKS)
    code = flank_codes(FL_FLANKS)
    np.testing.assert_array_equal(code, [0, 1, 0, 0, 1, -1])
    for i in range(6):
        gallery = np.flatnonzero(masks["cross"][i])
        assert not np.any(code[gallery] == code[i])  # never the query's own flank, never self
        assert i not in np.flatnonzero(masks["within"][i])
        assert np.all(code[np.flatnonzero(masks["within"][i])] == code[i])
    assert not masks["cross"][5].any() and not masks["cross"][:, 5].any()
    assert not masks["within"][5].any() and not masks["within"][:, 5].any()


def test_flank_masks_exclude_same_sighting_only_when_asked():
    sightings = ["s1", "s1", "s2", "s3", "s4", "s5"]
    kept = flank_masks(FL_FLANKS, sightings=sightings)
    dropped = flank_masks(FL_FLANKS, sightings=sightings, exclude_same_sighting=True)
    assert kept["cross"][0, 1] and not dropped["cross"][0, 1]
    out = flank_protocols(FL_SIM, FL_LABELS, FL_FLANKS, sightings=sightings, exclude_same_sighting=True)
    # q0 cross gallery becomes {4 b} -> no positive; q1 loses 0 -> {2 a .1, 3 b .4} -> AP 1/2
    assert out["cross_flank"]["n_queries"] == 4
    assert out["cross_flank"]["map_micro"] == pytest.approx((0.5 + 1 + 0.5 + 1) / 4)
