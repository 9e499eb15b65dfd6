"""Decoding and resizing JPEGs on the backbone's device (core.identify.gpu_decode), checked on the CPU: the
torchvision path gives the CPU path's inputs to one 8-bit level and its features to float tolerance on the real
demo photos; PNGs, greyscale, CMYK and EXIF-rotated JPEGs fall back per photo to the CPU path; a damaged JPEG
fails exactly as on the CPU path; without CUDA the default is the CPU path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.identify import features as features_module
from core.identify.backbones import create_backbone
from core.identify.backbones.torch_base import resolve_device
from core.identify.features import PhotoFile, extract_features
from core.identify.gpu_decode import device_decode_default, device_decode_supported, prepare_on_device
from core.io.images import ImageDecodeError, load_rgb

DEMO = Path(__file__).resolve().parents[1] / "assets" / "demo" / "images"
#: one 8-bit level after normalisation with the default backbone's std of 0.5: 1 / (255 * 0.5)
LEVEL = 1.0 / 127.5


@pytest.fixture(scope="module")
def backbone():
    return create_backbone("efficientnet_lite0", device="cpu", runtime="torch")


@pytest.fixture(scope="module")
def demo_paths() -> list[Path]:
    paths = sorted(DEMO.glob("*.jpg"))[::6]  # 10 of the 60 real photos, several sizes: enough, and fast
    assert len(paths) >= 8
    return paths


def _items(paths: list[Path]) -> list[tuple[str, PhotoFile]]:
    return [(p.name, PhotoFile(p)) for p in paths]


def test_device_path_on_cpu_gives_the_cpu_path_features_on_real_photos(backbone, demo_paths):
    batch, on_device = prepare_on_device(backbone, [PhotoFile(p) for p in demo_paths], device="cpu")
    assert on_device == len(demo_paths)  # every demo photo took the torchvision path, none fell back
    reference = backbone.prepare([load_rgb(p) for p in demo_paths])
    assert batch.shape == reference.shape == (len(demo_paths), 3, 224, 224)
    diff = (batch - reference).abs()
    assert float(diff.max()) <= LEVEL * 1.001  # PIL's resize reproduced to one 8-bit level...
    assert float(diff.mean()) < 0.01 * LEVEL  # ...and almost everywhere exactly

    fast = extract_features(backbone, _items(demo_paths), variant="full_rgb", cache_dir=None, batch_size=8,
                            decode_on_device=True)
    cpu = extract_features(backbone, _items(demo_paths), variant="full_rgb", cache_dir=None, batch_size=8,
                           decode_on_device=False)
    # measured on the demo photos: max |diff| 2.8e-4, cosine >= 0.999999
    assert np.abs(fast - cpu).max() < 2e-3
    assert float(np.min(np.sum(fast * cpu, axis=1))) > 0.9999
    assert float(np.max(cpu[0] @ cpu[1:].T)) < 0.99  # the photos differ, so equal rows are not trivially equal


@pytest.mark.parametrize(("resize", "interpolation"), [("letterbox", "bicubic"), ("letterbox", "bilinear"),
                                                       ("stretch", "bilinear")])
def test_other_geometries_match_the_cpu_resize(backbone, demo_paths, monkeypatch, resize, interpolation):
    monkeypatch.setattr(backbone, "config", dataclasses.replace(backbone.config, resize=resize,
                                                                interpolation=interpolation))
    paths = demo_paths[:4]
    batch, on_device = prepare_on_device(backbone, [PhotoFile(p) for p in paths], device="cpu")
    reference = backbone.prepare([load_rgb(p) for p in paths])
    assert on_device == len(paths)
    assert float((batch - reference).abs().max()) <= LEVEL * 1.001


def _odd_photos(src: Path, folder: Path) -> dict[str, Path]:
    """A PNG, a greyscale JPEG, a CMYK JPEG and an EXIF-rotated JPEG made from one real photo."""
    img = Image.open(src).convert("RGB")
    out = {"png": folder / "photo.png", "grey": folder / "grey.jpg", "cmyk": folder / "cmyk.jpg",
           "rotated": folder / "rotated.jpg"}
    img.save(out["png"])
    img.convert("L").save(out["grey"], quality=90)
    img.convert("CMYK").save(out["cmyk"], quality=90)
    exif = Image.Exif()
    exif[0x0112] = 6  # "turn 90 degrees clockwise to view": load_rgb turns it upright
    img.save(out["rotated"], quality=90, exif=exif)
    return out


def test_odd_files_fall_back_per_photo_and_give_the_cpu_path_features(backbone, demo_paths, tmp_path):
    odd = _odd_photos(demo_paths[0], tmp_path)
    assert load_rgb(odd["rotated"]).shape[:2] == load_rgb(demo_paths[0]).shape[1::-1]  # really rotated
    paths = [demo_paths[1], *odd.values(), demo_paths[2]]
    batch, on_device = prepare_on_device(backbone, [PhotoFile(p) for p in paths], device="cpu")
    assert on_device == 2  # only the two plain RGB JPEGs; the four odd files took the CPU path, in one batch
    reference = backbone.prepare([load_rgb(p) for p in paths])
    assert torch.equal(batch[1:5], reference[1:5])  # the fallback rows are the CPU path's, bit for bit

    fast = extract_features(backbone, _items(paths), variant="full_rgb", cache_dir=None, decode_on_device=True)
    cpu = extract_features(backbone, _items(paths), variant="full_rgb", cache_dir=None, decode_on_device=False)
    assert np.abs(fast - cpu).max() < 2e-3
    assert float(fast[4] @ fast[3]) < 0.999  # the rotated photo was turned upright, unlike the PNG of it


def test_a_damaged_jpeg_fails_as_on_the_cpu_path(backbone, demo_paths, tmp_path):
    data = demo_paths[0].read_bytes()
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(data[:len(data) // 2])
    garbled = bytearray(data)
    middle = len(garbled) // 2
    garbled[middle:middle + 200] = bytes((b * 7 + 13) % 256 for b in garbled[middle:middle + 200])
    damaged = tmp_path / "garbled.jpg"
    damaged.write_bytes(bytes(garbled))  # keeps its end marker: the decoder itself must refuse it
    for bad in (truncated, damaged):
        with pytest.raises(ImageDecodeError):
            load_rgb(bad)
        # the CPU path's own error (a curator message), never the decoder's RuntimeError
        with pytest.raises(ImageDecodeError):
            prepare_on_device(backbone, [PhotoFile(demo_paths[1]), PhotoFile(bad)], device="cpu")
        with pytest.raises(ImageDecodeError):
            extract_features(backbone, _items([demo_paths[1], bad]), variant="full_rgb", cache_dir=None,
                             decode_on_device=True)


def test_without_cuda_the_default_is_the_cpu_path(backbone, demo_paths, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None).type == "cpu"  # what create_backbone picks without a GPU
    assert device_decode_supported(backbone) and not device_decode_default(backbone)
    calls: list[int] = []

    def spy(bb, loaders, **kw):
        calls.append(len(loaders))
        return prepare_on_device(bb, loaders, **kw)

    monkeypatch.setattr(features_module, "prepare_on_device", spy)
    items = _items(demo_paths[:3])
    extract_features(backbone, items, variant="full_rgb", cache_dir=None)
    assert calls == []  # default on a CPU backbone: the CPU path
    extract_features(backbone, items, variant="full_rgb", cache_dir=None, decode_on_device=True)
    assert calls == [3]  # the spy does see the device path when it runs
    arrays = [(p.name, (lambda p=p: load_rgb(p))) for p in demo_paths[:3]]
    extract_features(backbone, arrays, variant="full_rgb", cache_dir=None, decode_on_device=True)
    assert calls == [3]  # loaders that only give arrays always take the CPU path
    monkeypatch.setattr(backbone, "device", torch.device("cuda"))
    assert device_decode_default(backbone)  # a CUDA backbone would take it by default


def test_backbones_whose_preprocessing_cannot_move_are_refused(backbone, monkeypatch):
    monkeypatch.setattr(backbone, "config", dataclasses.replace(backbone.config, interpolation="lanczos"))
    assert not device_decode_supported(backbone)
    with pytest.raises(ValueError, match="cannot run on the device"):
        extract_features(backbone, [("a", PhotoFile(DEMO / "none.jpg"))], variant="full_rgb", cache_dir=None,
                         decode_on_device=True)
