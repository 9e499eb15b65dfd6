"""SIFT's extraction options (core.identify.spots.classical): the mask's bounding crop, the contrast threshold and the
dilated mask -- each in the config's fingerprint, keypoints always in the photo's own pixels and on the animal."""

from __future__ import annotations

import numpy as np
import pytest

from core.identify.spots import create_matcher
from core.identify.spots.classical import SIFT_CONTRAST, mask_crop, working_view
from core.identify.spots.verify import verify_pair
from tests.test_spots import rotated, spot_photo

PLAIN = create_matcher("sift")


def small_animal(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A 960 x 1280 photo whose spotted animal fills a 240 x 320 box at (x 700, y 400); the rest is flat."""
    img = np.full((960, 1280, 3), 120, np.uint8)
    img[400:640, 700:1020] = spot_photo(seed, size=(240, 320), n_spots=60)
    mask = np.zeros(img.shape[:2], bool)
    mask[400:640, 700:1020] = True
    return img, mask


def test_mask_crop_by_hand():
    m = np.zeros((100, 200), bool)
    m[10:60, 50:150] = True  # 50 rows x 100 columns
    assert mask_crop(m, margin=0.1) == (5, 65, 40, 160)
    assert mask_crop(m, margin=1.0) == (0, 100, 0, 200)  # within the photo
    assert mask_crop(np.zeros((4, 5), bool)) == (0, 4, 0, 5)  # empty: the whole photo


def test_crop_describes_the_animal_at_max_side_and_keeps_original_coordinates():
    img, mask = small_animal()
    grey, det, scale, origin = working_view(img, mask, max_side=512, crop=True)
    assert max(grey.shape) == 512 and det is not None and det.shape == grey.shape
    assert origin[0] <= 700 and origin[1] <= 400 and scale > 1.0  # the 326-px-wide crop enlarged to 512
    cropped = create_matcher("sift", crop=True).extract(img, mask)
    whole = PLAIN.extract(img, mask)
    assert cropped.n > 2 * whole.n  # at 512 px on the whole photo the animal is only 128 px wide
    x, y = cropped.keypoints[:, 0], cropped.keypoints[:, 1]
    assert np.all((x >= 700) & (x < 1020) & (y >= 400) & (y < 640))


def test_a_cropped_photo_still_verifies_against_its_rotated_copy():
    img, mask = small_animal(5)
    other = rotated(img, 8.0)
    other_mask = rotated(mask.astype(np.uint8) * 255, 8.0) > 127
    sift = create_matcher("sift", crop=True)
    a, b = sift.extract(img, mask), sift.extract(other, other_mask)
    v = verify_pair(a, b, sift.match(a, b))
    assert v.n_inliers >= 20, v.status


def test_lower_contrast_and_dilated_mask_find_more_keypoints():
    img, mask = small_animal(7)
    low = create_matcher("sift", crop=True, contrast_threshold=0.02).extract(img, mask)
    base = create_matcher("sift", crop=True).extract(img, mask)
    assert low.n > base.n
    # the dilated mask reaches past the eroded one: keypoints on the edge of the coat count
    grown = create_matcher("sift", mask_dilate=4).extract(img, mask)
    assert grown.n >= PLAIN.extract(img, mask).n
    _, det_eroded, _, _ = working_view(img, mask, max_side=512)
    _, det_grown, _, _ = working_view(img, mask, max_side=512, mask_dilate=4)
    assert (det_grown > 0).sum() > (mask.sum() * (512 / 1280) ** 2) > (det_eroded > 0).sum()


def test_options_are_in_the_fingerprint_and_the_plain_matcher_keeps_its_own():
    fps = {create_matcher("sift", **opts).config.fingerprint() for opts in (
        {}, {"crop": True}, {"contrast_threshold": 0.02}, {"mask_dilate": 4}, {"crop": True, "max_side": 768})}
    assert len(fps) == 5
    plain = dict(PLAIN.config.extra)
    assert "crop" not in plain and "contrast_threshold" not in plain and "mask_dilate" not in plain
    explicit = create_matcher("sift", crop=False, contrast_threshold=SIFT_CONTRAST, mask_dilate=0)
    assert explicit.config.fingerprint() == PLAIN.config.fingerprint()
    with pytest.raises(ValueError, match="contrast threshold"):
        create_matcher("sift", contrast_threshold=0.0)
    with pytest.raises(ValueError, match="grown"):
        create_matcher("sift", mask_dilate=-1)
