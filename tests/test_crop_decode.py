"""Annotation crops decoded straight from JPEG bytes (core.io.images.load_crop / load_crops): exact at scale 1,
close to a downscaled full decode with JPEG draft, EXIF orientation applied before the crop, and the same
refusals (huge header, truncated file) as load_rgb."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

from core.annotations import WHOLE_PHOTO, Box, crop_array, crop_rect
from core.io.images import (
    CropDecode,
    ImageDecodeError,
    crop_draft_scale,
    decode_key,
    draft_size,
    load_crop,
    load_crops,
    load_rgb,
)

W, H = 4000, 3000
LEFT = Box(0.05, 0.30, 0.40, 0.45)  # camera-trap-like: each animal about 0.4 x 0.45 of the frame
RIGHT = Box(0.55, 0.25, 0.40, 0.45)
MIN_SIDE = draft_size(224)  # 448, what efficientnet_lite0 (224 x 224) asks for


def _pattern(width: int, height: int) -> np.ndarray:
    """A structured, asymmetric picture: red ramps left to right, green top to bottom, blue 80-px checkers
    whose intensity grows with the square's index (so every region differs and a flip or rotation shows)."""
    x = np.arange(width, dtype=np.float32)[None, :]
    y = np.arange(height, dtype=np.float32)[:, None]
    r = np.broadcast_to(255 * x / (width - 1), (height, width))
    g = np.broadcast_to(255 * y / (height - 1), (height, width))
    cx, cy = (x // 80).astype(np.int64), (y // 80).astype(np.int64)
    b = np.where((cx + cy) % 2 == 0, 40 + (cx * 7 + cy * 13) % 180, 20).astype(np.float32)
    return np.stack([r, g, b], axis=-1).round().clip(0, 255).astype(np.uint8)


def _jpeg(rgb: np.ndarray, *, quality: int = 92, orientation: int | None = None, mode: str = "RGB") -> bytes:
    img = Image.fromarray(rgb, "RGB")
    if mode != "RGB":
        img = img.convert(mode)
    buf = io.BytesIO()
    kwargs = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    img.save(buf, format="JPEG", quality=quality, **kwargs)
    return buf.getvalue()


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float32) - b.astype(np.float32)).mean())


def _resized(rgb: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``rgb`` area-resized to ``shape`` (H, W): what a DCT-scaled decode approximates."""
    return np.asarray(Image.fromarray(rgb).resize((shape[1], shape[0]), Image.Resampling.BOX))


@pytest.fixture(scope="module")
def upright() -> np.ndarray:
    return _pattern(W, H)


@pytest.fixture(scope="module")
def frame(tmp_path_factory: pytest.TempPathFactory, upright: np.ndarray):
    path = tmp_path_factory.mktemp("crops") / "frame.jpg"
    path.write_bytes(_jpeg(upright))
    return path


@pytest.fixture(scope="module")
def rotated(tmp_path_factory: pytest.TempPathFactory, upright: np.ndarray):
    """The same upright picture stored rotated (3000 x 4000 pixels) with EXIF orientation 6 (rotate 90 CW to
    view): a person, and load_rgb, see the 4000 x 3000 picture."""
    stored = np.ascontiguousarray(np.rot90(upright, k=1))  # 90 CCW; orientation 6 turns it back CW
    path = tmp_path_factory.mktemp("crops") / "rotated.jpg"
    path.write_bytes(_jpeg(stored, orientation=6))
    return path


@pytest.fixture(scope="module")
def full(frame) -> np.ndarray:
    return load_rgb(frame)


# --------------------------------------------------------------------------- decode_key / scale choice


def test_decode_key():
    assert decode_key(1) == ""
    assert decode_key(2) == "-draft2"
    assert decode_key(4) == "-draft4"
    assert decode_key(8) == "-draft8"
    for bad in (0, 3, 16, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match="draft scale"):
            decode_key(bad)  # type: ignore[arg-type]


def test_crop_draft_scale_is_largest_that_keeps_the_longer_side():
    # crop of LEFT at full resolution: 0.48 x 0.54 of 4000 x 3000 -> 1920 x 1620, longer side 1920
    assert crop_draft_scale((W, H), LEFT, None) == 1
    assert crop_draft_scale((W, H), LEFT, 448) == 4  # 480 >= 448, at 8 only 240
    # exact to the pixel: the crop's longer side as cut from the DCT-scaled frame (ceil of each side)
    for scale, below in ((8, 4), (4, 2), (2, 1)):
        left, top, right, bottom = crop_rect(LEFT, -(-W // scale), -(-H // scale))
        longer = max(right - left, bottom - top)
        assert longer in range(1920 // scale, 1920 // scale + 3)  # floor/ceil of the rect add a pixel or two
        assert crop_draft_scale((W, H), LEFT, longer) == scale
        assert crop_draft_scale((W, H), LEFT, longer + 1) == below
    assert crop_draft_scale((W, H), LEFT, 5000) == 1  # already smaller than asked: full decode
    assert crop_draft_scale((W, H), WHOLE_PHOTO, 448) == 8  # 500 x 375, longer side 500
    assert crop_draft_scale((600, 400), Box(0.1, 0.1, 0.5, 0.5), 448) == 1
    with pytest.raises(ValueError):
        crop_draft_scale((W, H), LEFT, 0)


# --------------------------------------------------------------------------- exactness at scale 1


def test_full_decode_equals_crop_of_load_rgb(frame, full):
    for box in (LEFT, RIGHT, WHOLE_PHOTO, Box(0.9, 0.9, 0.1, 0.1)):
        got = load_crop(frame, box)
        assert isinstance(got, CropDecode)
        assert got.scale == 1
        assert got.frame_size == (W, H)
        assert got.rgb.dtype == np.uint8 and got.rgb.ndim == 3 and got.rgb.shape[2] == 3
        assert np.array_equal(got.rgb, crop_array(full, box))
        assert got.rect == crop_rect(box, W, H)


def test_bytes_and_path_give_the_same_crop(frame):
    data = frame.read_bytes()
    a, b = load_crop(frame, LEFT, min_side=MIN_SIDE), load_crop(data, LEFT, min_side=MIN_SIDE)
    assert a.scale == b.scale == 4
    assert np.array_equal(a.rgb, b.rgb)
    assert np.array_equal(load_crop(str(frame), LEFT).rgb, load_crop(memoryview(data), LEFT).rgb)


def test_margin_is_honoured(frame, full):
    for margin in (0.0, 0.25):
        got = load_crop(frame, RIGHT, margin=margin)
        assert np.array_equal(got.rgb, crop_array(full, RIGHT, margin=margin))


# --------------------------------------------------------------------------- draft


def test_draft_crop_matches_downscaled_full_decode(frame, full):
    for box in (LEFT, RIGHT):
        got = load_crop(frame, box, min_side=MIN_SIDE)
        assert got.scale == 4
        assert got.frame_size == (W, H)
        assert max(got.rgb.shape[:2]) >= MIN_SIDE
        # the largest reduction: one step further would give fewer than MIN_SIDE pixels
        assert max(got.rgb.shape[:2]) // 2 < MIN_SIDE
        # same region: the decoded rect times the scale is the full-resolution rect to within the scale
        full_rect = crop_rect(box, W, H)
        assert all(abs(v * got.scale - f) <= got.scale for v, f in zip(got.rect, full_rect))
        assert got.rect == crop_rect(box, -(-W // 4), -(-H // 4))
        ref = _resized(crop_array(full, box), got.rgb.shape)
        assert _mae(got.rgb, ref) < 6.0
        # and not trivially: the other box's content is far off
        other = RIGHT if box is LEFT else LEFT
        assert _mae(got.rgb, _resized(crop_array(full, other), got.rgb.shape)) > 20.0


@pytest.mark.parametrize("min_side, scale", [(240, 8), (448, 4), (900, 2), (2000, 1)])
def test_each_draft_scale(frame, full, min_side, scale):
    got = load_crop(frame, LEFT, min_side=min_side)
    assert got.scale == scale
    assert max(got.rgb.shape[:2]) >= min(min_side, 1920)
    if scale == 1:
        assert np.array_equal(got.rgb, crop_array(full, LEFT))
    else:
        assert _mae(got.rgb, _resized(crop_array(full, LEFT), got.rgb.shape)) < 6.0


def test_two_boxes_give_two_different_crops(frame):
    left = load_crop(frame, LEFT, min_side=MIN_SIDE)
    right = load_crop(frame, RIGHT, min_side=MIN_SIDE)
    assert left.scale == right.scale == 4
    assert abs(left.rgb.shape[0] - right.rgb.shape[0]) <= 1 and abs(left.rgb.shape[1] - right.rgb.shape[1]) <= 1
    assert left.rect != right.rect
    h, w = min(left.rgb.shape[0], right.rgb.shape[0]), min(left.rgb.shape[1], right.rgb.shape[1])
    left_rgb, right_rgb = left.rgb[:h, :w], right.rgb[:h, :w]
    assert not np.array_equal(left_rgb, right_rgb)
    assert _mae(left_rgb, right_rgb) > 20.0
    # the red ramp runs left to right: the right animal's crop is redder
    assert right.rgb[..., 0].mean() > left.rgb[..., 0].mean() + 50


def test_load_crops_decodes_once_and_matches_load_crop(frame):
    both = load_crops(frame, [LEFT, RIGHT, Box(0.0, 0.0, 0.05, 0.05)], min_side=MIN_SIDE)
    assert [c.scale for c in both] == [4, 4, 1]  # the tiny box needs the full resolution
    for box, got in zip((LEFT, RIGHT, Box(0.0, 0.0, 0.05, 0.05)), both):
        one = load_crop(frame, box, min_side=MIN_SIDE)
        assert one.scale == got.scale and one.rect == got.rect
        assert np.array_equal(one.rgb, got.rgb)
    assert load_crops(frame, []) == []


def test_whole_photo_box_with_draft(frame, full):
    got = load_crop(frame, WHOLE_PHOTO, min_side=MIN_SIDE)
    assert got.scale == 8
    assert got.rgb.shape == (375, 500, 3)
    assert _mae(got.rgb, _resized(full, got.rgb.shape)) < 6.0


def test_greyscale_jpeg_draft_gives_rgb(tmp_path, upright):
    path = tmp_path / "grey.jpg"
    path.write_bytes(_jpeg(upright, mode="L"))
    got = load_crop(path, LEFT, min_side=MIN_SIDE)
    assert got.scale == 4 and got.rgb.shape[2] == 3
    ref = _resized(crop_array(load_rgb(path), LEFT), got.rgb.shape)
    assert _mae(got.rgb, ref) < 6.0


def test_non_jpeg_is_decoded_in_full(tmp_path):
    small = _pattern(1200, 900)
    path = tmp_path / "frame.png"
    Image.fromarray(small).save(path)
    got = load_crop(path, LEFT, min_side=100)
    assert got.scale == 1
    assert got.frame_size == (1200, 900)
    assert np.array_equal(got.rgb, crop_array(load_rgb(path), LEFT))
    assert np.array_equal(got.rgb, crop_array(small, LEFT))


def test_small_jpeg_is_not_drafted(tmp_path):
    path = tmp_path / "small.jpg"
    path.write_bytes(_jpeg(_pattern(640, 480)))
    got = load_crop(path, LEFT, min_side=MIN_SIDE)
    assert got.scale == 1
    assert np.array_equal(got.rgb, crop_array(load_rgb(path), LEFT))


# --------------------------------------------------------------------------- EXIF orientation


def test_exif_rotated_frame_is_cropped_upright(rotated, upright):
    assert load_rgb(rotated).shape == (H, W, 3)
    for box in (LEFT, RIGHT):
        got = load_crop(rotated, box)
        assert got.scale == 1 and got.frame_size == (W, H)
        assert np.array_equal(got.rgb, crop_array(load_rgb(rotated), box))
        assert _mae(got.rgb, crop_array(upright, box)) < 3.0  # the upright picture, not a rotated one


def test_exif_rotated_frame_with_draft(rotated, upright):
    for box in (LEFT, RIGHT):
        got = load_crop(rotated, box, min_side=MIN_SIDE)
        assert got.scale == 4  # chosen on the upright crop (1920 x 1620), decoded on the stored 3000 x 4000
        assert got.frame_size == (W, H)
        assert got.rect == crop_rect(box, W // 4, H // 4)
        ref = _resized(crop_array(upright, box), got.rgb.shape)
        assert _mae(got.rgb, ref) < 6.0
        wrong = _resized(crop_array(np.ascontiguousarray(np.rot90(upright, 2)), box), got.rgb.shape)
        assert _mae(got.rgb, wrong) > 20.0


# --------------------------------------------------------------------------- refusals, as load_rgb


def _with_size(jpeg: bytes, width: int, height: int) -> bytes:
    """The JPEG with its frame header (SOF0) claiming ``width`` x ``height``: a decompression-bomb stand-in."""
    at = jpeg.index(b"\xff\xc0")
    return jpeg[:at + 5] + struct.pack(">HH", height, width) + jpeg[at + 9:]


@pytest.mark.parametrize("size", [(10_001, 10_000), (20_000, 20_000)])
def test_huge_frame_is_refused_before_decoding(size):
    data = _with_size(_jpeg(_pattern(64, 48)), *size)
    with pytest.raises(ImageDecodeError, match="safety limit of 100 megapixels") as exc:
        load_crop(data, LEFT, min_side=MIN_SIDE)
    with pytest.raises(ImageDecodeError) as ref:
        load_rgb(data)
    assert str(exc.value) == str(ref.value)
    with pytest.raises(ImageDecodeError, match="safety limit"):
        load_crop(data, LEFT)


def test_max_pixels_is_honoured(frame):
    with pytest.raises(ImageDecodeError, match="frame.jpg: refused.*4,000 x 3,000.*safety limit of 10 megapixels"):
        load_crop(frame, LEFT, min_side=MIN_SIDE, max_pixels=10_000_000)
    assert load_crop(frame, LEFT, min_side=MIN_SIDE, max_pixels=12_000_000).scale == 4


@pytest.mark.parametrize("min_side", [None, MIN_SIDE])
def test_truncated_jpeg_is_a_clear_error(tmp_path, frame, min_side):
    path = tmp_path / "cut.jpg"
    path.write_bytes(frame.read_bytes()[: len(frame.read_bytes()) // 2])
    with pytest.raises(ImageDecodeError, match="cut.jpg: the file is damaged or incomplete"):
        load_crop(path, LEFT, min_side=min_side)
    with pytest.raises(ImageDecodeError, match="damaged or incomplete"):
        load_rgb(path)


def test_empty_and_non_image_are_refused(tmp_path):
    with pytest.raises(ImageDecodeError, match="empty"):
        load_crop(b"", LEFT)
    with pytest.raises(ImageDecodeError, match="not a picture"):
        load_crop(b"this is not a photo", LEFT, min_side=MIN_SIDE)


def test_bad_arguments(frame):
    with pytest.raises(ValueError):
        load_crop(frame, LEFT, min_side=0)
    with pytest.raises(ValueError):
        load_crop(frame, LEFT, margin=-0.1)
