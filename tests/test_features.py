"""Feature extraction: disk cache (hits, keys, corruption, atomic writes), progress, cancellation, load_rgb."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.identify.backbones import BackboneConfig
from core.identify.features import (
    ExtractionCancelled,
    extract_features,
    feature_cache_path,
    load_rgb,
    read_cached,
    write_cached,
)


class CountingBackbone:
    """A tiny deterministic backbone: embedding = L2-normalised per-channel means and a constant; counts calls."""

    def __init__(self, name: str = "counting", dim: int = 4) -> None:
        self.config = BackboneConfig(
            name=name, architecture="mean-colour", input_size=(8, 8), mean=(0, 0, 0), std=(1, 1, 1),
            interpolation="bilinear", pooling="avg", embed_dim=dim, weight_source="none", weights_sha256=None,
            supports_tokens=False)
        self.embed_calls = 0
        self.embedded = 0

    def embed(self, images):
        self.embed_calls += 1
        self.embedded += len(images)
        rows = [np.concatenate([img.reshape(-1, 3).mean(0) / 255.0, [1.0]])[: self.config.embed_dim]
                for img in images]
        out = np.asarray(rows, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _items(n: int, calls: list[str], *, offset: int = 0):
    def make(i: int):
        def load() -> np.ndarray:
            calls.append(f"k{i}")
            return np.full((6, 5, 3), (i * 7) % 256, dtype=np.uint8)
        return load
    return [(f"k{i}", make(i)) for i in range(offset, offset + n)]


def test_second_run_reads_everything_from_the_cache(tmp_path):
    backbone, calls = CountingBackbone(), []
    first = extract_features(backbone, _items(10, calls), variant="full_rgb", cache_dir=tmp_path, batch_size=4)
    assert len(calls) == 10 and backbone.embed_calls == 3
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-6)
    calls.clear()
    stats: dict[str, int] = {}
    second = extract_features(backbone, _items(10, calls), variant="full_rgb", cache_dir=tmp_path, batch_size=4,
                              stats=stats)
    assert calls == [] and backbone.embed_calls == 3  # nothing recomputed, no loader called
    assert stats == {"cached": 10, "computed": 0}
    np.testing.assert_array_equal(first, second)
    cfg_file = tmp_path / backbone.config.fingerprint() / "config.json"
    assert cfg_file.exists() and backbone.config.name in cfg_file.read_text()
    # a partly new list only computes the new items
    extract_features(backbone, _items(12, calls), variant="full_rgb", cache_dir=tmp_path, batch_size=4)
    assert calls == ["k10", "k11"]


def test_cache_is_keyed_by_variant_and_backbone_fingerprint(tmp_path):
    calls: list[str] = []
    a, b = CountingBackbone("a"), CountingBackbone("b")
    extract_features(a, _items(3, calls), variant="full_rgb", cache_dir=tmp_path)
    extract_features(a, _items(3, calls), variant="foreground_only", cache_dir=tmp_path)
    extract_features(b, _items(3, calls), variant="full_rgb", cache_dir=tmp_path)
    assert len(calls) == 9
    p1 = feature_cache_path(tmp_path, a.config.fingerprint(), "full_rgb", "k1")
    p2 = feature_cache_path(tmp_path, b.config.fingerprint(), "full_rgb", "k1")
    p3 = feature_cache_path(tmp_path, a.config.fingerprint(), "foreground_only", "k1")
    assert len({p1, p2, p3}) == 3 and all(p.exists() for p in (p1, p2, p3))


def test_no_cache_dir_and_duplicate_keys_are_computed_once(tmp_path):
    backbone, calls = CountingBackbone(), []
    items = _items(3, calls)
    items = items + [items[1], items[0]]
    out = extract_features(backbone, items, variant="full_rgb", cache_dir=None)
    assert out.shape == (5, 4) and len(calls) == 3 and backbone.embedded == 3
    np.testing.assert_array_equal(out[3], out[1])
    np.testing.assert_array_equal(out[4], out[0])
    assert list(tmp_path.iterdir()) == []
    assert extract_features(backbone, [], variant="full_rgb", cache_dir=tmp_path).shape == (0, 4)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "wrong_shape", "nan"])
def test_corrupt_cache_entry_is_recomputed(tmp_path, damage):
    backbone, calls = CountingBackbone(), []
    good = extract_features(backbone, _items(3, calls), variant="full_rgb", cache_dir=tmp_path)
    path = feature_cache_path(tmp_path, backbone.config.fingerprint(), "full_rgb", "k1")
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:20])
    elif damage == "garbage":
        path.write_bytes(b"not a numpy file at all")
    elif damage == "wrong_shape":
        np.save(path, np.ones(7, np.float32))
    else:
        np.save(path, np.full(4, np.nan, np.float32))
    assert read_cached(path, 4) is None
    calls.clear()
    again = extract_features(backbone, _items(3, calls), variant="full_rgb", cache_dir=tmp_path)
    assert calls == ["k1"]
    np.testing.assert_array_equal(again, good)
    np.testing.assert_array_equal(read_cached(path, 4), good[1])  # repaired on disk


def test_writes_are_atomic_when_the_writer_dies(tmp_path, monkeypatch):
    path = tmp_path / "ab" / "entry.npy"
    write_cached(path, np.arange(4, dtype=np.float32))

    def dying_save(fh, arr, allow_pickle=False):
        fh.write(b"\x93NUMPY partial")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(np, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        write_cached(path, np.zeros(4, dtype=np.float32))
    monkeypatch.undo()
    np.testing.assert_array_equal(read_cached(path, 4), np.arange(4))  # old entry intact
    assert [p.name for p in path.parent.iterdir()] == ["entry.npy"]  # no temporary file left behind


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    path = tmp_path / "xy" / "same.npy"
    vectors = [np.full(256, i, dtype=np.float32) for i in range(8)]
    bad: list[object] = []
    stop = threading.Event()

    def writer(i: int) -> None:
        for _ in range(30):
            write_cached(path, vectors[i])

    def reader() -> None:
        while not stop.is_set():
            if path.exists():
                v = read_cached(path, 256)
                if v is None or len(set(v.tolist())) != 1:
                    bad.append(v)

    r = threading.Thread(target=reader)
    r.start()
    writers = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    r.join()
    assert bad == []
    assert len(list(path.parent.iterdir())) == 1


def test_progress_is_reported_and_cancel_stops_between_batches(tmp_path):
    backbone, calls = CountingBackbone(), []
    seen: list[tuple[int, int]] = []
    with pytest.raises(ExtractionCancelled) as err:
        extract_features(backbone, _items(10, calls), variant="full_rgb", cache_dir=tmp_path, batch_size=3,
                         progress=lambda d, t: seen.append((d, t)), should_cancel=lambda: len(seen) >= 3)
    assert (err.value.done, err.value.total) == (6, 10)
    assert seen == [(0, 10), (3, 10), (6, 10)] and backbone.embed_calls == 2
    seen.clear()
    backbone.embed_calls = 0
    extract_features(backbone, _items(10, calls), variant="full_rgb", cache_dir=tmp_path, batch_size=3,
                     progress=lambda d, t: seen.append((d, t)))
    assert seen == [(6, 10), (9, 10), (10, 10)] and backbone.embed_calls == 2  # resumed, finished batches cached


def test_odd_keys_get_safe_file_names(tmp_path):
    p = feature_cache_path(tmp_path, "fp", "full_rgb", "../../etc/passwd")
    assert p.resolve().is_relative_to(tmp_path.resolve()) and len(p.stem) == 64
    assert feature_cache_path(tmp_path, "fp", "full_rgb", "abc123+mask9").name == "abc123+mask9.npy"


def test_real_backbone_through_the_cache(tmp_path, nyala_dir, nyala_manifest):
    from core.identify.backbones import create_backbone

    backbone = create_backbone("efficientnet_lite0", device="cpu")
    paths = [nyala_dir / "images" / r["filename"] for r in nyala_manifest[:5]]
    calls: list[str] = []

    def item(p: Path):
        def load():
            calls.append(p.name)
            return load_rgb(p)
        return (p.stem, load)

    first = extract_features(backbone, [item(p) for p in paths], variant="full_rgb", cache_dir=tmp_path,
                             batch_size=2)
    np.testing.assert_allclose(first, backbone.embed([load_rgb(p) for p in paths]), atol=1e-5)
    calls.clear()
    second = extract_features(backbone, [item(p) for p in paths], variant="full_rgb", cache_dir=tmp_path)
    assert calls == []
    np.testing.assert_array_equal(first, second)


# --------------------------------------------------------------------------- load_rgb

def _jpeg(size: tuple[int, int], *, orientation: int | None = None) -> bytes:
    w, h = size
    img = Image.new("RGB", (w, h), (200, 30, 30))
    img.paste((30, 30, 200), (0, 0, w // 2, h))  # left half blue
    exif = Image.Exif()
    if orientation:
        exif[0x0112] = orientation
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


def test_load_rgb_draft_mode_bounds_the_size(tmp_path):
    data = _jpeg((2400, 1600))
    full = load_rgb(data)
    assert full.shape == (1600, 2400, 3) and full.dtype == np.uint8
    small = load_rgb(data, max_side=500)
    assert max(small.shape[:2]) == 500 and small.shape[2] == 3
    assert abs(small.shape[1] / small.shape[0] - 1.5) < 0.01
    path = tmp_path / "big.jpg"
    path.write_bytes(data)
    np.testing.assert_array_equal(load_rgb(path, max_side=500), small)
    np.testing.assert_array_equal(load_rgb(str(path), max_side=500), small)


def test_load_rgb_applies_exif_orientation_and_converts_to_rgb():
    rotated = load_rgb(_jpeg((300, 200), orientation=6))  # 6 = rotate 90 degrees clockwise to view
    assert rotated.shape == (300, 200, 3)
    assert rotated[5, 100, 2] > 150 and rotated[-5, 100, 0] > 150  # the blue left half is now on top
    rgba = Image.new("RGBA", (40, 30), (10, 20, 30, 0))
    buf = io.BytesIO()
    rgba.save(buf, format="PNG")
    out = load_rgb(buf.getvalue())
    assert out.shape == (30, 40, 3) and tuple(out[0, 0]) == (10, 20, 30)
    grey = Image.new("L", (20, 10), 77)
    buf = io.BytesIO()
    grey.save(buf, format="JPEG")
    assert load_rgb(buf.getvalue()).shape == (10, 20, 3)
