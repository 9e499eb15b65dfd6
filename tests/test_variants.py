"""Image variants on hand-made 2x3 photos: each pixel checked against the definition."""

from __future__ import annotations

import numpy as np
import pytest

from core.inspect.variants import MASK_FREE_VARIANTS, VARIANTS, flip_horizontal, make_variant

# a 2x3 photo with distinct pixels, animal = the left column and the centre of row 0
RGB = np.arange(18, dtype=np.uint8).reshape(2, 3, 3) + 10
MASK = np.array([[True, True, False], [True, False, False]])


def test_variant_names_are_the_designs():
    assert VARIANTS == ("full_rgb", "foreground_only", "background_only", "background_inpainted", "silhouette", "mirror")
    assert MASK_FREE_VARIANTS == ("full_rgb",)


def test_flip_horizontal_mirrors_columns():
    out = flip_horizontal(RGB)
    assert np.array_equal(out[:, 0], RGB[:, 2]) and np.array_equal(out[:, 2], RGB[:, 0])
    assert np.array_equal(flip_horizontal(out), RGB)
    assert out.flags["C_CONTIGUOUS"]


def test_full_rgb_is_a_copy_of_the_photo_and_needs_no_mask():
    out = make_variant(RGB, None, "full_rgb")
    assert np.array_equal(out, RGB) and out is not RGB
    out[0, 0] = 0
    assert RGB[0, 0, 0] != 0  # the photo is not modified through the variant


def test_foreground_only_zeroes_the_background():
    out = make_variant(RGB, MASK, "foreground_only")
    assert out.dtype == np.uint8 and out.shape == RGB.shape
    assert np.array_equal(out[MASK], RGB[MASK])
    assert (out[~MASK] == 0).all()


def test_background_only_zeroes_the_animal_and_keeps_the_silhouette_hole():
    out = make_variant(RGB, MASK, "background_only")
    assert (out[MASK] == 0).all()
    assert np.array_equal(out[~MASK], RGB[~MASK])
    assert np.array_equal(make_variant(RGB, MASK, "bg_silhouette"), out)  # alias from the papers


def test_foreground_and_background_partition_the_photo():
    fg = make_variant(RGB, MASK, "foreground_only").astype(int)
    bg = make_variant(RGB, MASK, "background_only").astype(int)
    assert np.array_equal(fg + bg, RGB.astype(int))


def test_silhouette_is_the_mask_in_white_on_three_channels():
    out = make_variant(RGB, MASK, "silhouette")
    assert out.shape == (2, 3, 3) and out.dtype == np.uint8
    assert out[..., 0].tolist() == [[255, 255, 0], [255, 0, 0]]
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()


def test_mirror_is_the_flipped_foreground_cutout():
    out = make_variant(RGB, MASK, "mirror")
    # row 0: pixels (0,0),(0,1) are animal, (0,2) zeroed; flipped -> [0, RGB[0,1], RGB[0,0]]
    assert out[0, 0].tolist() == [0, 0, 0]
    assert np.array_equal(out[0, 1], RGB[0, 1]) and np.array_equal(out[0, 2], RGB[0, 0])
    assert np.array_equal(out, flip_horizontal(make_variant(RGB, MASK, "foreground_only")))


def test_background_inpainted_returns_the_given_inpainting():
    filled = np.full_like(RGB, 7)
    out = make_variant(RGB, MASK, "background_inpainted", inpainted=filled)
    assert np.array_equal(out, filled) and out is not filled
    with pytest.raises(ValueError, match="needs the inpainted photo"):
        make_variant(RGB, MASK, "background_inpainted")
    with pytest.raises(ValueError, match="does not match the photo"):
        make_variant(RGB, MASK, "background_inpainted", inpainted=np.zeros((3, 3, 3), np.uint8))


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v not in MASK_FREE_VARIANTS])
def test_mask_dependent_variants_need_a_mask(variant):
    with pytest.raises(ValueError, match="needs an animal mask"):
        make_variant(RGB, None, variant, inpainted=RGB)


def test_unknown_variant_and_bad_inputs_are_rejected_clearly():
    with pytest.raises(ValueError, match="unknown image variant 'negative'.*full_rgb"):
        make_variant(RGB, MASK, "negative")
    with pytest.raises(ValueError, match="does not match the image size"):
        make_variant(RGB, MASK[:, :2], "foreground_only")
    with pytest.raises(ValueError, match="uint8"):
        make_variant(RGB.astype(np.float32), MASK, "foreground_only")


def test_variants_are_deterministic_on_a_real_sized_photo():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)
    mask = rng.random((96, 128)) > 0.5
    for v in VARIANTS:
        a = make_variant(rgb, mask, v, inpainted=rgb)
        b = make_variant(rgb, mask, v, inpainted=rgb)
        assert a.shape == rgb.shape and a.dtype == np.uint8 and np.array_equal(a, b), v
