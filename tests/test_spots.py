"""Local spot evidence (core.identify.spots): matchers, verification, LNBNN, calibrated fusion -- on synthetic spot
patterns and hand-worked cases."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from core.identify.calibration import fit_calibrator
from core.registry import UnknownComponentError
from core.identify.spots import (
    Correspondences,
    LocalFeatures,
    MatcherConfig,
    create_matcher,
    features_cache_path,
    list_matchers,
    load_features,
    matcher_available,
    save_features,
)
from core.identify.spots.fusion import (
    IsotonicCurve,
    calibrator_from_dict,
    calibrator_to_dict,
    fit_scorer_calibrations,
    fuse_probabilities,
    fused_similarity,
    joint_shortlist,
    shortlist_mask,
    voted_top_k,
)
from core.identify.spots.lnbnn import build_descriptor_index, lnbnn_all_vs_all, lnbnn_scores
from core.identify.spots.pipeline import PipelineSettings, cross_flank, local_applies, spot_scores_all_vs_all
from core.identify.spots.stored import own_candidates_first
from core.identify.spots.verify import jacobian_det, verify_pair


def spot_photo(seed: int, size: tuple[int, int] = (240, 320), n_spots: int = 70) -> np.ndarray:
    """A jaguar-like synthetic coat: dark rosettes (rings and blobs) of random size on a noisy tan ground."""
    rng = np.random.default_rng(seed)
    h, w = size
    img = np.empty((h, w, 3), np.uint8)
    img[:] = (196, 150, 90)
    img = np.clip(img.astype(np.int16) + rng.integers(-12, 12, size=(h, w, 1)), 0, 255).astype(np.uint8)
    for _ in range(n_spots):
        c = (int(rng.integers(8, w - 8)), int(rng.integers(8, h - 8)))
        axes = (int(rng.integers(3, 11)), int(rng.integers(3, 11)))
        angle = float(rng.uniform(0, 180))
        thick = -1 if rng.random() < 0.5 else int(rng.integers(2, 4))
        cv2.ellipse(img, c, axes, angle, 0, 360, (40, 28, 20), thick)
    return img


def rotated(img: np.ndarray, degrees: float, scale: float = 1.0) -> np.ndarray:
    h, w = img.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), degrees, scale)
    return cv2.warpAffine(img, m, (w, h), borderMode=cv2.BORDER_REFLECT)


def spotted_animal(coat: np.ndarray, rng: np.random.Generator, *, degrees: float = 20.0,
                   scale: tuple[float, float] = (0.85, 1.05)) -> tuple[np.ndarray, np.ndarray]:
    """(rgb, mask): the coat, rotated by up to +-``degrees`` and scaled within ``scale``, pasted on a random
    smooth background of 240 x 300 (the mask is the pasted coat)."""
    h, w = 240, 300
    bg = rng.integers(60, 200, size=(h // 8, w // 8, 3)).astype(np.uint8)
    canvas = cv2.resize(bg, (w, h), interpolation=cv2.INTER_CUBIC)
    patch = rotated(coat, float(rng.uniform(-degrees, degrees)), float(rng.uniform(*scale)))
    ph, pw = patch.shape[:2]
    y, x = int(rng.integers(0, h - ph)), int(rng.integers(0, w - pw))
    canvas[y:y + ph, x:x + pw] = patch
    mask = np.zeros((h, w), bool)
    mask[y:y + ph, x:x + pw] = True
    return canvas, mask


@pytest.fixture(scope="module")
def sift():
    return create_matcher("sift", max_side=320, max_keypoints=500)


# ---------------------------------------------------------------------------------------- registry


def test_registry_lists_and_refuses_unknown_names():
    names = list_matchers()
    assert {"sift", "orb", "disk-lightglue", "loftr"} <= set(names)
    with pytest.raises(UnknownComponentError, match="unknown local matcher 'surf'"):
        create_matcher("surf")
    with pytest.raises(UnknownComponentError):
        matcher_available("surf")
    assert matcher_available("sift") and matcher_available("orb")


def test_config_fingerprint_changes_with_every_setting():
    a = create_matcher("sift").config
    assert a.fingerprint() == create_matcher("sift").config.fingerprint()
    assert a.fingerprint() != create_matcher("sift", max_side=1024).config.fingerprint()
    assert a.fingerprint() != create_matcher("sift", max_keypoints=300).config.fingerprint()
    assert a.fingerprint() != create_matcher("orb").config.fingerprint()
    assert MatcherConfig.from_dict(a.to_dict()) == a
    bad = dict(a.to_dict(), max_side=999)
    with pytest.raises(ValueError, match="fingerprint"):
        MatcherConfig.from_dict(bad)
    with pytest.raises(ValueError, match="ratio"):
        create_matcher("sift", ratio=1.5)


# ---------------------------------------------------------------------------------------- extraction


def test_keypoints_are_in_original_pixels_and_only_on_the_mask(sift):
    img = spot_photo(1, size=(480, 640))  # larger than max_side: keypoints come back in original pixels
    mask = np.zeros(img.shape[:2], bool)
    mask[100:400, 150:500] = True
    whole = sift.extract(img)
    masked = sift.extract(img, mask)
    assert whole.scale == pytest.approx(320 / 640)
    assert whole.n > masked.n > 20
    assert whole.keypoints[:, 0].max() > 320  # original coordinates, not the 320-px working copy
    x, y = masked.keypoints[:, 0], masked.keypoints[:, 1]
    assert np.all((x >= 150) & (x < 500) & (y >= 100) & (y < 400))
    assert masked.masked and not whole.masked
    # RootSIFT rows have unit L2 norm
    assert np.allclose(np.linalg.norm(masked.descriptors, axis=1), 1.0, atol=1e-4)
    assert sift.extract(img, mask).keypoints.tobytes() == masked.keypoints.tobytes()  # deterministic


def test_features_round_trip_through_the_cache(tmp_path, sift):
    f = sift.extract(spot_photo(2))
    path = features_cache_path(tmp_path, sift.config.fingerprint(), "abc123-mnomask")
    save_features(path, f)
    g = load_features(path)
    assert g is not None and g.n == f.n and g.scale == f.scale and g.image_size == f.image_size
    assert np.array_equal(g.descriptors, f.descriptors) and np.array_equal(g.keypoints, f.keypoints)
    path.write_bytes(b"not an npz")
    assert load_features(path) is None  # a damaged entry is a miss, recomputed by the caller
    assert load_features(tmp_path / "missing.npz") is None


# ---------------------------------------------------------------------------------------- verification


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_photo_against_its_rotated_copy_gives_many_inliers(sift, seed):
    img = spot_photo(seed)
    a, b = sift.extract(img), sift.extract(rotated(img, 25.0, 0.9))
    v = verify_pair(a, b, sift.match(a, b))
    assert v.status == "verified"
    assert v.n_inliers >= 40
    # the inliers really are related by the rotation: map A's inlier points with the known transform
    h, w = img.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), 25.0, 0.9)
    mapped = v.inliers_a @ m[:, :2].T + m[:, 2]
    assert np.median(np.linalg.norm(mapped - v.inliers_b, axis=1)) < 3.0


@pytest.mark.parametrize("seed", [6, 7, 8])
def test_two_different_spot_patterns_give_few_inliers(sift, seed):
    a, b = sift.extract(spot_photo(seed)), sift.extract(spot_photo(seed + 100))
    same = sift.extract(rotated(spot_photo(seed), 10.0))
    different = verify_pair(a, b, sift.match(a, b)).n_inliers
    assert different <= 8
    assert verify_pair(a, same, sift.match(a, same)).n_inliers > 5 * max(different, 1)


def test_mirror_image_is_not_verified_as_the_same_side(sift):
    img = spot_photo(9)
    a = sift.extract(img)
    mirrored = sift.extract(np.ascontiguousarray(img[:, ::-1]))
    v = verify_pair(a, mirrored, sift.match(a, mirrored))
    assert v.n_inliers <= 8


def test_orientation_reversing_fit_is_rejected_as_reflected():
    rng = np.random.default_rng(0)
    pts = rng.uniform(0, 300, size=(60, 2)).astype(np.float32)
    flipped = pts.copy()
    flipped[:, 0] = 320 - flipped[:, 0]  # an exact mirror: a homography explains it, with negative determinant
    feats = LocalFeatures(pts, np.zeros((60, 128), np.float32), (320, 320), 1.0, False)
    mirror = Correspondences(pts, flipped, np.ones(60))
    # USAC's own sample check already refuses orientation-reversing homographies; the affine fit needs ours
    assert verify_pair(feats, feats, mirror).n_inliers == 0
    v = verify_pair(feats, feats, mirror, model="affine")
    assert v.status == "reflected" and v.n_inliers == 0
    straight = verify_pair(feats, feats, Correspondences(pts, pts + 5.0, np.ones(60)))
    assert straight.status == "verified" and straight.n_inliers == 60


def test_jacobian_determinant_by_hand():
    assert jacobian_det(np.eye(3), np.array([10.0, 20.0])) == pytest.approx(1.0)
    assert jacobian_det(np.diag([2.0, 3.0, 1.0]), np.array([5.0, 5.0])) == pytest.approx(6.0)
    assert jacobian_det(np.diag([-1.0, 1.0, 1.0]), np.array([0.0, 0.0])) == pytest.approx(-1.0)
    # projective: det(H) / w^3 with w = 0.5 at the origin
    assert jacobian_det(np.diag([1.0, 1.0, 0.5]), np.array([0.0, 0.0])) == pytest.approx(0.5 / 0.125)


def test_cross_flank_and_keypointless_pairs_are_not_verified(sift):
    img = spot_photo(10)
    a = sift.extract(img)
    blank = sift.extract(np.full((200, 200, 3), 128, np.uint8))
    assert blank.n < 12
    assert verify_pair(a, a, sift.match(a, a), cross_flank=True).status == "cross_flank"
    v = verify_pair(a, blank, sift.match(a, blank))
    assert v.status == "no_keypoints" and not v.has_evidence and "no spot evidence" in v.words


def test_orb_verifies_its_rotated_copy():
    orb = create_matcher("orb", max_side=320, max_keypoints=500)
    img = spot_photo(11)
    a, b, c = orb.extract(img), orb.extract(rotated(img, 15.0)), orb.extract(spot_photo(111))
    assert a.descriptors.dtype == np.uint8 and a.descriptors.shape[1] == 32
    assert verify_pair(a, b, orb.match(a, b)).n_inliers > 3 * max(1, verify_pair(a, c, orb.match(a, c)).n_inliers)


# ---------------------------------------------------------------------------------------- LNBNN


def _feats(desc: list[list[float]]) -> LocalFeatures:
    d = np.asarray(desc, np.float32)
    return LocalFeatures(np.zeros((len(d), 2)), d, (10, 10), 1.0, False)


def test_lnbnn_votes_by_hand():
    # 1-D descriptors; gallery photo 0 has [0.0], photo 1 has [1.0], photo 2 has [3.0]
    index = build_descriptor_index([_feats([[0.0]]), _feats([[1.0]]), _feats([[3.0]])])
    # query descriptor 0.2: neighbours 0.0 (d=0.2), 1.0 (0.8), 3.0 (2.8); k=2 -> votes d3 - d_i
    s = lnbnn_scores(index, _feats([[0.2]]), k=2)
    assert s == pytest.approx([2.8 - 0.2, 2.8 - 0.8, 0.0])
    # k=1: only the nearest votes, against the second
    assert lnbnn_scores(index, _feats([[0.2]]), k=1) == pytest.approx([0.8 - 0.2, 0.0, 0.0])
    # excluding photo 0: neighbours 1.0 (0.8) and 3.0 (2.8); photo 0 gets nothing
    assert lnbnn_scores(index, _feats([[0.2]]), k=1, exclude=[0]) == pytest.approx([0.0, 2.8 - 0.8, 0.0])


def test_lnbnn_one_vote_per_descriptor_and_photo():
    # photo 0 owns two descriptors near the query; it still gets one (its best) vote per query descriptor
    index = build_descriptor_index([_feats([[0.0], [0.1]]), _feats([[5.0]])])
    s = lnbnn_scores(index, _feats([[0.0]]), k=2)
    assert s == pytest.approx([5.0 - 0.0, 0.0])


def test_lnbnn_finds_the_same_pattern_in_a_gallery(sift):
    photos = [spot_photo(s) for s in (20, 21, 22, 23)]
    feats = [sift.extract(p) for p in photos] + [sift.extract(rotated(photos[2], 12.0))]
    valid = ~np.eye(5, dtype=bool)
    scores = lnbnn_all_vs_all(feats, valid=valid, k=4)
    assert np.argmax(scores[4]) == 2 and np.argmax(scores[2]) == 4
    assert np.all(np.diag(scores) == 0)


# ---------------------------------------------------------------------------------------- calibration & fusion


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_calibration_is_monotone_and_survives_storage(seed):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=400)
    outcomes = (rng.random(400) < 1 / (1 + np.exp(-3 * scores))).astype(int)
    cal = fit_calibrator(scores, outcomes)
    grid = np.linspace(-4, 4, 300)
    p = cal.probability(grid)
    assert np.all(np.diff(p) >= -1e-12) and p.min() >= 0 and p.max() <= 1
    stored = calibrator_from_dict(calibrator_to_dict(cal))
    assert np.allclose(stored.probability(grid), p)
    assert isinstance(stored.model, IsotonicCurve) and stored.n_outcomes == 400


def test_fused_score_with_one_scorer_equals_its_calibrated_score():
    rng = np.random.default_rng(3)
    raw = rng.normal(size=(6, 9))
    cal = fit_calibrator(rng.normal(size=100), rng.integers(0, 2, 100))
    fused = fuse_probabilities({"inliers": cal.probability(raw.ravel()).reshape(raw.shape)})
    assert np.allclose(fused, cal.probability(raw.ravel()).reshape(raw.shape))


def test_lnbnn_own_candidates_join_the_global_shortlist_by_hand():
    """Global top-2 of gallery items 1..4 is {1, 2}; LNBNN votes (0, 0, 3, 0, 5): its own top-1 is item 4,
    which the global model ranked last. The joint shortlist is {1, 2, 4}; with LNBNN's top-3 only items with a
    vote join ({2, 4}: item 1 and 3 got none), and an invalid item never does."""
    g = np.array([[0.0, 0.45, 0.4, 0.1, 0.05]])
    valid = np.array([[False, True, True, True, True]])
    votes = np.array([[9.0, 0.0, 3.0, 0.0, 5.0]])
    assert voted_top_k(votes, valid, 1).tolist() == [[False, False, False, False, True]]
    assert voted_top_k(votes, valid, 3).tolist() == [[False, False, True, False, True]]
    assert not voted_top_k(votes, valid, 0).any()
    with pytest.raises(ValueError, match=">= 0"):
        voted_top_k(votes, valid, -1)
    assert joint_shortlist(g, valid, 2, own_candidates={"lnbnn": (votes, 1)}).tolist() == \
        [[False, True, True, False, True]]
    assert joint_shortlist(g, valid, 2).tolist() == shortlist_mask(g, valid, 2).tolist()
    # fused (the mean of the calibrated probabilities: global 0 below 0.5, LNBNN 1 from 4 votes): LNBNN's own
    # candidate gets a fused probability, 0.5, and ranks first, which no re-ranking of the global top-2 could do
    ident = fit_calibrator(np.linspace(0, 1, 20), (np.linspace(0, 1, 20) > 0.5).astype(int))
    vote_cal = fit_calibrator(np.arange(10.0), (np.arange(10) >= 4).astype(int))
    kw = dict(raw={"lnbnn": votes}, calibrators={"global": ident, "lnbnn": vote_cal},
              applies={"lnbnn": valid.copy()})
    joint = fused_similarity(g, valid, shortlist=2, own_candidates={"lnbnn": (votes, 1)}, **kw)
    alone = fused_similarity(g, valid, shortlist=2, **kw)
    assert np.argmax(joint[0]) == 4 and joint[0, 4] > joint[0, 3]
    assert alone[0, 4] < alone[0, 3] < 0  # without it, item 4 stays below the shortlist in global order
    # a fusion that does not read LNBNN still re-ranks LNBNN's candidate inside the joint shortlist (here by the
    # global probability alone: tied at 0, so in global order, but above item 3, which is outside)
    global_only = fused_similarity(g, valid, shortlist=2, raw={}, calibrators={"global": ident},
                                   own_candidates={"lnbnn": (votes, 1)})
    assert np.argsort(-global_only[0])[:4].tolist() == [1, 2, 4, 3]


def test_match_review_moves_lnbnn_own_candidates_into_its_shortlist():
    """The global ranking of gallery positions 7, 3, 5, 1, 0 (K = 2) and LNBNN votes per position: position 0
    (last globally) has the most votes and position 5 the second most; with 1 own candidate, 0 joins the first
    two (5 stays in place), with 2 both join in global order; without votes nothing moves."""
    ranked = [(0.9, 7, None), (0.8, 3, None), (0.7, 5, None), (0.6, 1, None), (0.5, 0, None)]
    votes = np.array([6.0, 0.0, 0.0, 1.0, 0.0, 4.0, 0.0, 0.0])
    moved, k = own_candidates_first(ranked, votes, shortlist=2, own=1)
    assert [j for _, j, _ in moved] == [7, 3, 0, 5, 1] and k == 3
    moved, k = own_candidates_first(ranked, votes, shortlist=2, own=2)
    assert [j for _, j, _ in moved] == [7, 3, 5, 0, 1] and k == 4
    assert own_candidates_first(ranked, None, shortlist=2, own=2) == (ranked, 2)
    assert own_candidates_first(ranked, np.zeros(8), shortlist=2, own=2) == (ranked, 2)


def test_pipeline_settings_own_candidates_and_pipelines_stored_before_them():
    s = PipelineSettings(lnbnn=True)
    assert s.lnbnn_shortlist == 10 and s.own_candidates == {"lnbnn": 10}
    assert PipelineSettings().own_candidates == {}  # verification alone: LNBNN brings no candidates
    assert PipelineSettings(lnbnn=True, lnbnn_shortlist=0).own_candidates == {}
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="whole number >= 0"):
            PipelineSettings(lnbnn=True, lnbnn_shortlist=bad)
    # a pipeline stored before: calibrated on the global shortlist alone, and kept so
    old = {k: v for k, v in s.to_dict().items() if k != "lnbnn_shortlist"}
    assert PipelineSettings.from_dict(old).lnbnn_shortlist == 0
    assert PipelineSettings.from_dict(s.to_dict()) == s


def test_fusion_averages_only_where_a_scorer_applies():
    p_global = np.array([[0.2, 0.6]])
    p_local = np.array([[0.8, 0.0]])
    fused = fuse_probabilities({"global": p_global, "inliers": p_local},
                               {"inliers": np.array([[True, False]])})
    assert fused == pytest.approx(np.array([[0.5, 0.6]]))


def test_shortlist_and_fused_ranking_by_hand():
    g = np.array([[0.0, 0.9, 0.8, 0.1, 0.7]])
    valid = np.array([[False, True, True, True, True]])
    assert shortlist_mask(g, valid, 2).tolist() == [[False, True, True, False, False]]
    ident = fit_calibrator(np.linspace(0, 1, 20), (np.linspace(0, 1, 20) > 0.5).astype(int))
    inl = fit_calibrator(np.arange(20.0), (np.arange(20) >= 10).astype(int))
    inliers = np.array([[np.nan, 0.0, 15.0, np.nan, np.nan]])
    fused = fused_similarity(g, valid, shortlist=2, raw={"inliers": inliers},
                             calibrators={"global": ident, "inliers": inl},
                             applies={"inliers": np.isfinite(inliers)})
    order = np.argsort(-fused[0])
    # candidate 2 (strong spot evidence) overtakes candidate 1; outside the shortlist the global order holds
    assert order[:4].tolist() == [2, 1, 4, 3]
    assert fused[0, 0] == -np.inf and fused[0, 3] < 0 and fused[0, 1] >= 0
    # with a shortlist of 1, nothing is re-ranked past the global top-1
    f1 = fused_similarity(g, valid, shortlist=1, raw={"inliers": inliers}, calibrators={"global": ident, "inliers": inl},
                          applies={"inliers": np.isfinite(inliers)})
    assert np.argmax(f1[0]) == 1


def test_gallery_order_does_not_change_fused_scores():
    rng = np.random.default_rng(5)
    g = rng.random((4, 12))
    valid = np.ones((4, 12), bool)
    inl = rng.integers(0, 30, size=(4, 12)).astype(float)
    cals = {"global": fit_calibrator(rng.random(60), rng.integers(0, 2, 60)),
            "inliers": fit_calibrator(rng.integers(0, 30, 60), rng.integers(0, 2, 60))}
    a = fused_similarity(g, valid, shortlist=5, raw={"inliers": inl}, calibrators=cals)
    perm = rng.permutation(12)
    b = fused_similarity(g[:, perm], valid[:, perm], shortlist=5, raw={"inliers": inl[:, perm]}, calibrators=cals)
    assert np.allclose(a[:, perm], b)


def test_scorer_calibration_fits_only_where_it_applies():
    same = np.eye(4, dtype=bool)[[0, 0, 1, 1]][:, :4]
    raw = {"inliers": np.arange(16.0).reshape(4, 4)}
    pairs = np.ones((4, 4), bool)
    assert "inliers" not in fit_scorer_calibrations(raw, same, pairs, {"inliers": np.zeros((4, 4), bool)})


# ---------------------------------------------------------------------------------------- pipeline


def test_cross_flank_mask_and_applies():
    cross = cross_flank(["left", "right", "unknown", "left"])
    assert cross.tolist() == [[False, True, False, False], [True, False, False, True],
                              [False, False, False, False], [False, True, False, False]]
    feats = [_feats([[0.0]] * 20), _feats([[0.0]] * 20), _feats([[0.0]] * 3), _feats([[0.0]] * 20)]
    applies = local_applies(feats, cross)
    assert not applies[0, 1] and not applies[0, 2] and applies[0, 3]


def test_pipeline_settings_validate_and_round_trip():
    s = PipelineSettings(shortlist=30, lnbnn=True)
    assert PipelineSettings.from_dict(s.to_dict()) == s and s.scorers == ("global", "inliers", "lnbnn")
    with pytest.raises(ValueError, match="at least 1"):
        PipelineSettings(shortlist=0)
    with pytest.raises(ValueError, match="verification, LNBNN"):
        PipelineSettings(verification=False, lnbnn=False)
    with pytest.raises(ValueError, match="unknown pipeline settings"):
        PipelineSettings.from_dict({"shortlist": 5, "colour": "red"})


def test_spot_pipeline_ranks_the_rotated_copy_first(sift):
    """Four patterns and a rotated copy of pattern 1: the global scores rank the copy last, spot evidence
    (calibrated) puts it first."""
    photos = [spot_photo(s) for s in (30, 31, 32, 33)] + [rotated(spot_photo(31), 20.0)]
    feats = [sift.extract(p) for p in photos]
    g = np.full((5, 5), 0.5) + 0.01 * np.arange(5)[None, :]
    g[1, 4] = g[4, 1] = 0.4  # the global model misses the pair
    valid = ~np.eye(5, dtype=bool)
    settings = PipelineSettings(shortlist=5, lnbnn=True)
    spots = spot_scores_all_vs_all(feats, g, valid, ["left"] * 5, matcher=sift, settings=settings)
    assert spots.raw["inliers"][1, 4] >= 20 and np.nanmax(np.delete(spots.raw["inliers"][1], [1, 4])) <= 8
    # the global score says little (a flat 50%), the inlier count a lot
    cals = {"global": fit_calibrator(np.linspace(0, 1, 20), np.tile([0, 1], 10)),
            "inliers": fit_calibrator(np.arange(40.0), (np.arange(40) > 12).astype(int))}
    raw, applies = spots.restricted(("global", "inliers"))
    fused = fused_similarity(g, valid, shortlist=5, raw=raw, calibrators=cals, applies=applies)
    assert np.argmax(fused[1]) == 4 and np.argmax(fused[4]) == 1
    # opposite flanks: no spot evidence is used, the global order stays
    spots_lr = spot_scores_all_vs_all(feats, g, valid, ["left", "right", "left", "left", "left"], matcher=sift,
                                      settings=settings)
    assert np.isnan(spots_lr.raw["inliers"][1, 4]) and not spots_lr.applies["inliers"][1, 4]


def test_lnbnn_approximate_index_agrees_with_exact_search():
    """The IVF index (used for large galleries) finds the same best photo as the exact one for clustered data."""
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(40, 32)).astype(np.float32)  # 40 photos, each a cloud of descriptors
    gallery = [_feats((c + 0.15 * rng.normal(size=(60, 32))).tolist()) for c in centres]
    exact = build_descriptor_index(gallery, approximate=False)
    approx = build_descriptor_index(gallery, approximate=True)
    assert type(approx.index).__name__ == "IndexIVFFlat"
    agree = 0
    for i in range(0, 40, 4):
        query = _feats((centres[i] + 0.15 * rng.normal(size=(30, 32))).tolist())
        e, a = lnbnn_scores(exact, query, k=4), lnbnn_scores(approx, query, k=4)
        assert np.argmax(e) == i
        agree += int(np.argmax(a) == i)
    assert agree >= 9


def test_lnbnn_reuses_ivf_training_only_when_asked():
    """Match review rebuilds the gallery index after every decision: the trained IVF lists are reused there
    (same results for the same data), while evaluations always train afresh."""
    rng = np.random.default_rng(8)
    centres = rng.normal(size=(30, 16)).astype(np.float32)
    gallery = [_feats((c + 0.1 * rng.normal(size=(40, 16))).tolist()) for c in centres]
    query = _feats((centres[3] + 0.1 * rng.normal(size=(20, 16))).tolist())
    first = build_descriptor_index(gallery, approximate=True, reuse_training=True)
    again = build_descriptor_index(gallery, approximate=True, reuse_training=True)  # reuses the trained lists
    fresh = build_descriptor_index(gallery, approximate=True)
    assert np.allclose(lnbnn_scores(first, query), lnbnn_scores(again, query))
    assert np.allclose(lnbnn_scores(first, query), lnbnn_scores(fresh, query))  # same seed, same training
    grown = build_descriptor_index(gallery + gallery[:1], approximate=True, reuse_training=True)
    assert grown.index.ntotal == first.index.ntotal + 40 and np.argmax(lnbnn_scores(grown, query)) == 3
