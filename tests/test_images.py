"""core.io.images: safe decoding, colour modes, EXIF orientation/time/GPS, thumbnails."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from core.io.images import (
    ImageDecodeError,
    decode_image,
    extension_for,
    load_rgb,
    make_thumbnail,
    to_rgb8,
)


def _save(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _noise(h: int = 24, w: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims width x height (valid CRC) followed by a tiny bogus IDAT."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


# --------------------------------------------------------------------------- plain decode


def test_rgb_jpeg_decodes_with_facts():
    data = _save(Image.fromarray(_noise()), "JPEG", quality=90)
    d = decode_image(data, name="a.jpg")
    assert (d.width, d.height) == (32, 24)
    assert d.image.mode == "RGB" and d.image.size == (32, 24)
    assert d.format == "JPEG" and d.mode == "RGB"
    assert d.alpha is None and not d.has_transparency
    assert d.exif_time is None and d.gps_lat is None and d.gps_lon is None
    assert extension_for(d.format) == ".jpg"


def test_nyala_photo_decodes(nyala_dir, nyala_manifest):
    data = (nyala_dir / "images" / nyala_manifest[0]["filename"]).read_bytes()
    d = decode_image(data)
    assert max(d.width, d.height) == 512
    assert np.asarray(d.image).std() > 5  # real picture content, not a blank frame


# --------------------------------------------------------------------------- modes


def test_rgba_keeps_alpha_and_colour_under_transparency():
    rgb = _noise()
    alpha = np.zeros((24, 32), np.uint8)
    alpha[4:20, 8:24] = 255
    data = _save(Image.fromarray(np.dstack([rgb, alpha]), "RGBA"), "PNG")
    d = decode_image(data)
    assert d.mode == "RGBA"
    assert d.alpha is not None and np.array_equal(d.alpha, alpha)
    assert d.has_transparency
    # the colour under transparent pixels is the photo's, not composited onto a background
    assert np.array_equal(np.asarray(d.image), rgb)


def test_opaque_rgba_is_not_transparent():
    rgba = np.dstack([_noise(), np.full((24, 32), 255, np.uint8)])
    d = decode_image(_save(Image.fromarray(rgba, "RGBA"), "PNG"))
    assert d.alpha is not None and not d.has_transparency


def test_la_grey_with_alpha():
    grey = np.arange(24 * 32, dtype=np.uint32).reshape(24, 32) % 256
    alpha = np.full((24, 32), 255, np.uint8)
    alpha[:, :10] = 0
    img = Image.merge("LA", [Image.fromarray(grey.astype(np.uint8), "L"), Image.fromarray(alpha, "L")])
    d = decode_image(_save(img, "PNG"))
    assert d.mode == "LA"
    assert np.array_equal(d.alpha, alpha)
    arr = np.asarray(d.image)
    assert np.array_equal(arr[:, :, 0], grey.astype(np.uint8)) and np.array_equal(arr[:, :, 0], arr[:, :, 2])


def test_palette_with_transparency_index():
    idx = np.zeros((10, 12), np.uint8)
    idx[2:8, 3:9] = 1
    img = Image.fromarray(idx, "P")
    img.putpalette([0, 0, 0, 200, 30, 40] + [0] * (254 * 3))
    data = _save(img, "PNG", transparency=0)  # palette entry 0 is transparent
    d = decode_image(data)
    assert d.mode == "P"
    assert d.alpha is not None
    assert np.array_equal(d.alpha > 127, idx == 1)
    assert tuple(np.asarray(d.image)[5, 5]) == (200, 30, 40)


def test_cmyk_jpeg_to_rgb():
    cmyk = np.zeros((16, 16, 4), np.uint8)
    cmyk[:, 8:, 0] = 255  # right half pure cyan ink; left half no ink = white
    data = _save(Image.fromarray(cmyk, "CMYK"), "JPEG", quality=95)
    d = decode_image(data)
    assert d.mode == "CMYK" and d.image.mode == "RGB"
    arr = np.asarray(d.image).astype(int)
    assert (arr[:, :4] > 230).all()  # white
    right = arr[:, 12:]
    assert right[:, :, 0].max() < 40 and right[:, :, 1].min() > 215 and right[:, :, 2].min() > 215  # cyan


def test_16bit_grey_png_scaled_not_clipped():
    arr = np.array([[0, 257, 32896, 65535]], dtype=np.uint16).repeat(3, axis=0)
    img = Image.fromarray(arr)  # mode I;16
    assert img.mode.startswith("I")
    d = decode_image(_save(img, "PNG"))
    assert d.mode.startswith("I")
    out = np.asarray(d.image)[0, :, 0]
    assert out.tolist() == [0, 1, 128, 255]  # round(v * 255 / 65535); clipping would give 255 for all but 0


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_to_rgb8_wide_modes(mode):
    if mode == "F":
        img = Image.fromarray(np.array([[0.0, 0.5, 1.0]], np.float32), "F")
        expect = [0, 128, 255]
    elif mode == "I":
        img = Image.fromarray(np.array([[0, 32768, 65535]], np.int32), "I")
        expect = [0, 128, 255]
    else:
        img = Image.fromarray(np.array([[0, 65535, 1000]], np.uint16))
        expect = [0, 255, round(1000 * 255 / 65535)]
    out = to_rgb8(img)
    assert out.mode == "RGB"
    assert np.asarray(out)[0, :, 1].tolist() == expect


def test_grayscale_and_bilevel():
    grey = (np.arange(64, dtype=np.uint8) * 4).reshape(8, 8)
    d = decode_image(_save(Image.fromarray(grey, "L"), "PNG"))
    assert d.mode == "L"
    arr = np.asarray(d.image)
    assert arr.shape == (8, 8, 3) and np.array_equal(arr[:, :, 1], grey)
    bilevel = Image.fromarray(grey > 100).convert("1")
    out = np.asarray(to_rgb8(bilevel))
    assert set(np.unique(out).tolist()) == {0, 255}
    assert np.array_equal(out[:, :, 0] == 255, grey > 100)


# --------------------------------------------------------------------------- EXIF


def _exif_jpeg(rgb: np.ndarray, *, orientation: int | None = None, time: str | None = None,
               gps: dict | None = None) -> bytes:
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    if time is not None:
        exif.get_ifd(0x8769)[0x9003] = time
    if gps is not None:
        exif.get_ifd(0x8825).update(gps)
    return _save(Image.fromarray(rgb), "JPEG", quality=95, exif=exif.tobytes())


def test_exif_orientation_6_swaps_width_and_height():
    rgb = np.zeros((20, 40, 3), np.uint8)  # stored 40 wide x 20 high
    rgb[:6, :6] = (255, 0, 0)  # red block at the stored top-left
    d = decode_image(_exif_jpeg(rgb, orientation=6))
    assert d.orientation == 6
    assert (d.width, d.height) == (20, 40)
    arr = np.asarray(d.image).astype(int)
    # orientation 6 = the camera was turned 90 deg clockwise: stored top-left ends top-right
    assert arr[2, -3, 0] > 200 and arr[2, -3, 1] < 60
    assert arr[2, 2, 0] < 60


def test_exif_orientation_applied_in_load_rgb():
    rgb = np.zeros((20, 40, 3), np.uint8)
    arr = load_rgb(_exif_jpeg(rgb, orientation=8))
    assert arr.shape == (40, 20, 3) and arr.dtype == np.uint8


def test_exif_time_and_gps():
    gps = {1: "S", 2: (16.0, 30.0, 0.0), 3: "W", 4: (56.0, 45.0, 36.0)}
    d = decode_image(_exif_jpeg(_noise(), time="2023:07:14 06:30:05", gps=gps))
    assert d.exif_time == "2023-07-14T06:30:05"
    assert d.gps_lat == pytest.approx(-16.5)
    assert d.gps_lon == pytest.approx(-(56 + 45 / 60 + 36 / 3600))


def test_exif_placeholder_time_is_ignored():
    d = decode_image(_exif_jpeg(_noise(), time="0000:00:00 00:00:00"))
    assert d.exif_time is None


# --------------------------------------------------------------------------- bad input


def test_empty_file():
    with pytest.raises(ImageDecodeError, match="empty"):
        decode_image(b"", name="x.jpg")


def test_text_file_is_not_a_picture():
    with pytest.raises(ImageDecodeError, match="not a picture") as exc:
        decode_image(b"hello, this is a text file\n" * 20, name="notes.jpg")
    assert "notes.jpg" in str(exc.value)


def test_truncated_jpeg_is_reported_damaged():
    data = _save(Image.fromarray(_noise(64, 64, seed=3)), "JPEG", quality=95)
    with pytest.raises(ImageDecodeError, match="damaged|incomplete"):
        decode_image(data[: len(data) // 2])


def test_garbage_after_jpeg_magic():
    rng = np.random.default_rng(7)
    data = b"\xff\xd8\xff\xe0" + rng.integers(0, 256, 2000, dtype=np.uint8).tobytes()
    with pytest.raises(ImageDecodeError):
        decode_image(data)


def test_bomb_header_refused_before_decoding():
    data = _png_header_only(100_000, 100_000)  # 10 gigapixels announced in 100 bytes
    with pytest.raises(ImageDecodeError, match="refused") as exc:
        decode_image(data, name="bomb.png")
    assert "megapixels" in str(exc.value)


def test_max_pixels_limit_on_real_image():
    data = _save(Image.fromarray(_noise(200, 200)), "PNG")
    with pytest.raises(ImageDecodeError, match="safety limit"):
        decode_image(data, max_pixels=10_000)
    assert decode_image(data, max_pixels=40_000).width == 200


# --------------------------------------------------------------------------- helpers


def test_load_rgb_max_side_uses_draft_and_fits(tmp_path):
    data = _save(Image.fromarray(np.random.default_rng(1).integers(0, 256, (600, 800, 3), dtype=np.uint8)), "JPEG")
    p = tmp_path / "big.jpg"
    p.write_bytes(data)
    full = load_rgb(p)
    small = load_rgb(p, max_side=100)
    assert full.shape == (600, 800, 3)
    assert max(small.shape[:2]) == 100 and small.shape[2] == 3
    assert small.shape[0] == 75


def test_thumbnail_fits_and_never_enlarges():
    big = Image.fromarray(np.random.default_rng(2).integers(0, 256, (300, 600, 3), dtype=np.uint8))
    t = Image.open(io.BytesIO(make_thumbnail(big, size=128)))
    assert t.format == "JPEG" and t.size == (128, 64)
    small = Image.fromarray(_noise(10, 20))
    assert Image.open(io.BytesIO(make_thumbnail(small, size=128))).size == (20, 10)
    rgba = Image.fromarray(np.dstack([_noise(), np.zeros((24, 32), np.uint8)]), "RGBA")
    assert Image.open(io.BytesIO(make_thumbnail(rgba))).mode == "RGB"
