"""Masker registry, alpha and GrabCut maskers, mask quality and mask PNG storage."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from core.inspect.masking import (
    Masker,
    MaskQuality,
    MaskResult,
    create_masker,
    decode_mask_png,
    default_box,
    default_masker_name,
    encode_mask_png,
    list_maskers,
    mask_quality,
    prompt_of,
    solidity,
)
from core.registry import UnknownComponentError


def _ellipse_scene(h: int = 160, w: int = 240, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A tan ellipse 'animal' on noisy green 'grass' and its true mask."""
    rng = np.random.default_rng(seed)
    img = np.clip(np.array([40, 120, 40]) + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
    truth = np.zeros((h, w), np.uint8)
    cv2.ellipse(truth, (w // 2, h // 2), (w // 4, h // 4), 0, 0, 360, 1, -1)
    img[truth.astype(bool)] = (200, 150, 80)
    return img, truth.astype(bool)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


# ----------------------------------------------------------------------------- registry


def test_registry_lists_the_three_maskers_and_rejects_unknown_names():
    assert list_maskers() == ["alpha", "grabcut", "sam2"]
    with pytest.raises(UnknownComponentError, match="unknown masker 'sam3'.*alpha, grabcut, sam2"):
        create_masker("sam3")


def test_default_masker_is_grabcut_without_a_checkpoint_and_sam2_with_one(monkeypatch, tmp_path):
    monkeypatch.delenv("ROSETTE_SAM2_CHECKPOINT", raising=False)
    assert default_masker_name() == "grabcut"
    monkeypatch.setenv("ROSETTE_SAM2_CHECKPOINT", str(tmp_path / "missing.pt"))
    assert default_masker_name() == "grabcut"  # a path that does not exist is not "configured"
    ckpt = tmp_path / "sam2.1_hiera_tiny.pt"
    ckpt.write_bytes(b"x")
    monkeypatch.setenv("ROSETTE_SAM2_CHECKPOINT", str(ckpt))
    assert default_masker_name() == "sam2"


# ----------------------------------------------------------------------------- quality


def test_solidity_of_a_filled_rectangle_is_one_and_of_empty_is_zero():
    m = np.zeros((20, 30), bool)
    m[5:15, 3:25] = True
    assert solidity(m) == pytest.approx(1.0)
    assert solidity(np.zeros((5, 5), bool)) == 0.0
    assert solidity(np.ones((1, 1), bool)) == 1.0


def test_solidity_of_an_l_shape_is_its_area_over_the_rasterised_hull():
    # L made of a 10x10 square with its top-right 5x5 quarter removed: area 75.
    m = np.zeros((10, 10), bool)
    m[:, :5] = True
    m[5:, :] = True
    assert m.sum() == 75
    # hull vertices (0,0),(4,0),(9,5),(9,9),(0,9): the filled hull loses the pixels strictly above
    # the diagonal from (4,0) to (9,5): rows 0..4 lose 5,4,3,2,1 pixels -> 100 - 15 = 85 pixels.
    assert solidity(m) == pytest.approx(75 / 85)


def test_solidity_of_two_far_apart_blobs_is_low():
    m = np.zeros((50, 50), bool)
    m[0:5, 0:5] = True
    m[45:50, 45:50] = True
    # hull = the diagonal band joining the two corner squares: far more than 50 px, far less than 2500
    assert 50 / 2500 < solidity(m) < 0.15


def test_mask_quality_flags():
    empty = mask_quality(np.zeros((10, 10), bool))
    assert isinstance(empty, MaskQuality)
    assert empty.flags == ["empty"] and empty.n_components == 0 and empty.area_fraction == 0.0

    full = mask_quality(np.ones((10, 10), bool))
    assert full.flags == ["full_frame"] and full.area_fraction == 1.0 and full.solidity == pytest.approx(1.0)

    two = np.zeros((40, 40), bool)
    two[2:12, 2:12] = True
    two[25:35, 25:35] = True
    q = mask_quality(two)
    assert q.n_components == 2 and q.flags == ["multi_component"]
    assert q.area_fraction == pytest.approx(200 / 1600)


def test_mask_quality_ignores_specks_below_the_component_fraction():
    m = np.zeros((60, 60), bool)
    m[10:50, 10:50] = True  # 1600 px
    m[0, 59] = True  # one stray pixel: 1/1601 < 1 %
    q = mask_quality(m)
    assert q.n_components == 1 and "multi_component" not in q.flags
    assert mask_quality(m, min_component_fraction=0.0).n_components == 2


def _animal_in_box() -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """A 200x200 frame with a whole animal: an ellipse filling the drawn box (10, 20)-(170, 120)."""
    m = np.zeros((200, 200), np.uint8)
    cv2.ellipse(m, (90, 70), (80, 50), 0, 0, 360, 1, -1)
    return m.astype(bool), (10.0, 20.0, 170.0, 120.0)


def test_a_whole_animal_fills_its_box_and_raises_no_partial_warning():
    m, box = _animal_in_box()
    q = mask_quality(m, box=box, points=[(90, 70)], point_labels=[1])
    assert q.flags == [] and q.clicks_missed == 0
    assert q.box_extent == (pytest.approx(161 / 160, abs=0.02), pytest.approx(101 / 100, abs=0.02))
    assert q.box_sides_reached == 4
    assert q.box_fill == pytest.approx(np.pi * 80 * 50 / (160 * 100), rel=0.03)  # ellipse / box = pi/4


def test_a_body_only_mask_is_solid_but_flagged_short_of_its_box():
    """The issue's case: GrabCut kept only the body (no head, neck or legs). Solidity stays high, so only the
    box check can see it: the mask spans 60 % of the box's width and 50 % of its height."""
    _, box = _animal_in_box()
    body = np.zeros((200, 200), bool)
    body[30:80, 50:146] = True  # 96 x 50 px inside the 160 x 100 box
    q = mask_quality(body, box=box)
    assert q.solidity == pytest.approx(1.0) and "short_of_box" in q.flags
    assert q.box_extent == (pytest.approx(0.6), pytest.approx(0.5))
    assert q.box_sides_reached == 0 and q.box_fill == pytest.approx(96 * 50 / (160 * 100))
    assert mask_quality(body).flags == []  # without the box nothing can tell


def test_an_animal_click_outside_the_mask_is_flagged_a_background_click_is_not():
    m, box = _animal_in_box()
    assert mask_quality(m, points=[(195, 195)], point_labels=[0]).flags == []
    q = mask_quality(m, points=[(90, 70), (195, 195)], point_labels=[1, 1])
    assert q.flags == ["misses_clicks"] and q.clicks_missed == 1


def test_prompt_of_keeps_a_drawn_box_and_drops_the_default_one():
    drawn = {"prompt": {"box": [1, 2, 3, 4], "box_source": "given", "points": [[2, 3]], "point_labels": [1]}}
    assert prompt_of(drawn) == {"box": (1, 2, 3, 4), "points": [[2, 3]], "point_labels": [1]}
    default = {"prompt": {"box": [0, 0, 9, 9], "box_source": "default: frame minus 0.05 of each side"}}
    assert prompt_of(default)["box"] is None
    assert prompt_of(None) == {"box": None, "points": None, "point_labels": None}


# ----------------------------------------------------------------------------- PNG


def test_mask_png_round_trip_is_exact_and_one_bit():
    rng = np.random.default_rng(1)
    m = rng.random((37, 53)) > 0.6
    data = encode_mask_png(m)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "1" and im.size == (53, 37)
    back = decode_mask_png(data)
    assert back.dtype == bool and back.shape == m.shape
    assert np.array_equal(back, m)


def test_decode_reads_8bit_grey_and_rgba_alpha_pngs():
    grey = np.array([[0, 127, 128, 255]], np.uint8)
    buf = io.BytesIO()
    Image.fromarray(grey).save(buf, format="PNG")
    assert decode_mask_png(buf.getvalue()).tolist() == [[False, False, True, True]]

    rgba = np.zeros((1, 3, 4), np.uint8)
    rgba[..., 3] = [0, 200, 255]
    buf = io.BytesIO()
    Image.fromarray(rgba).save(buf, format="PNG")
    assert decode_mask_png(buf.getvalue()).tolist() == [[False, True, True]]


# ----------------------------------------------------------------------------- alpha


def test_alpha_masker_thresholds_at_127_and_needs_alpha():
    masker = create_masker("alpha")
    assert isinstance(masker, Masker) and masker.name == "alpha"
    rgb = np.zeros((2, 3, 3), np.uint8)
    alpha = np.array([[0, 127, 128], [255, 10, 200]], np.uint8)
    res = masker.predict(rgb, alpha=alpha)
    assert isinstance(res, MaskResult) and res.source == "alpha"
    assert res.mask.dtype == bool
    assert res.mask.tolist() == [[False, False, True], [True, False, True]]
    assert res.details["threshold"] == 127
    assert create_masker("alpha", threshold=5).predict(rgb, alpha=alpha).mask.sum() == 5
    with pytest.raises(ValueError, match="needs the file's alpha channel"):
        masker.predict(rgb)
    with pytest.raises(ValueError, match="does not match"):
        masker.predict(rgb, alpha=np.zeros((3, 3), np.uint8))


# ----------------------------------------------------------------------------- grabcut


def test_default_box_is_the_centred_margin():
    assert default_box(100, 200) == pytest.approx((10.0, 5.0, 190.0, 95.0))


def test_grabcut_finds_a_contrasting_animal_from_the_default_box():
    img, truth = _ellipse_scene()
    res = create_masker("grabcut").predict(img)
    assert res.source == "grabcut" and res.mask.dtype == bool and res.mask.shape == truth.shape
    assert _iou(res.mask, truth) > 0.9
    assert res.details["prompt"]["box_source"].startswith("default")


def test_grabcut_is_deterministic_and_box_limits_the_mask():
    img, truth = _ellipse_scene(seed=3)
    masker = create_masker("grabcut")
    a = masker.predict(img, box=(60, 40, 180, 120)).mask
    b = masker.predict(img, box=(60, 40, 180, 120)).mask
    assert np.array_equal(a, b)
    assert not a[:, :59].any() and not a[:39, :].any()  # nothing outside the box
    # a box over the left half only keeps the left half of the animal
    left = masker.predict(img, box=(0, 0, 120, 160)).mask
    assert left[:, 121:].sum() == 0 and left[truth].mean() < 0.6


def test_grabcut_click_prompts_force_labels():
    img, truth = _ellipse_scene(seed=4)
    masker = create_masker("grabcut")
    # a negative click in the middle of the animal carves out a hole, a positive one on grass adds it
    res = masker.predict(img, points=[(120, 80), (20, 15)], point_labels=[0, 1])
    assert not res.mask[80, 120]
    assert res.mask[15, 20]
    assert res.details["prompt"]["point_labels"] == [0, 1]
    with pytest.raises(ValueError, match="2 points but 1 point labels"):
        masker.predict(img, points=[(1, 1), (2, 2)], point_labels=[1])


def test_grabcut_works_downscaled_on_large_photos_and_returns_full_size():
    img, truth = _ellipse_scene(h=300, w=600)
    res = create_masker("grabcut", work_max_side=150).predict(img)
    assert res.details["work_size"] == [75, 150]
    assert res.mask.shape == (300, 600)
    assert _iou(res.mask, truth) > 0.85


def test_grabcut_on_real_nyala_photos_gives_plausible_masks(nyala_dir, nyala_manifest):
    masker = create_masker("grabcut")
    for row in nyala_manifest[:2]:
        rgb = np.asarray(Image.open(nyala_dir / "images" / row["filename"]).convert("RGB"))
        res = masker.predict(rgb)
        q = mask_quality(res.mask)
        assert res.mask.shape == rgb.shape[:2]
        assert 0.05 < q.area_fraction < 0.9, q
        assert "full_frame" not in q.flags and "empty" not in q.flags
