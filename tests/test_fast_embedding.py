"""Faster embedding on one node: the ONNX Runtime forward pass (checked against torch, cached export, fallbacks),
the runtime choice, JPEG draft decoding and the overlapped (multi-thread) preparation in extract_features."""

from __future__ import annotations

import io
import json
import logging
import random
import sys
import threading
import time

import numpy as np
import onnx
import pytest
import torch
from PIL import Image
from torch import nn

from core.identify import onnx_runtime
from core.identify.backbones import BackboneConfig, create_backbone
from core.identify.backbones.torch_base import TorchBackbone, resize_for_config
from core.identify.features import extract_features
from core.io.images import draft_size, load_rgb
from core.identify.onnx_runtime import META_FILE, MODEL_FILE, onnx_dir, requested_runtime


def _photos(n: int, seed: int = 0) -> list[np.ndarray]:
    """Smooth synthetic photos of different sizes (blocky colour fields plus a little noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h, w = 150 + 37 * i, 260 - 20 * i
        small = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
        img = np.asarray(Image.fromarray(small).resize((w, h), Image.Resampling.BILINEAR))
        noise = rng.integers(-8, 9, size=img.shape)
        out.append(np.clip(img.astype(np.int16) + noise, 0, 255).astype(np.uint8))
    return out


@pytest.fixture(scope="module")
def pair():
    """(onnx backbone, torch backbone): the same efficientnet_lite0 weights, two runtimes."""
    onnx_bb = create_backbone("efficientnet_lite0", device="cpu", runtime="onnx")
    torch_bb = create_backbone("efficientnet_lite0", device="cpu", runtime="torch")
    return onnx_bb, torch_bb


def test_onnx_features_equal_torch_features_and_keep_the_fingerprint(pair, monkeypatch):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    onnx_bb, torch_bb = pair
    photos = _photos(5)
    assert onnx_bb.runtime == "onnx" and "onnxruntime" in onnx_bb.runtime_reason
    assert torch_bb.runtime == "torch"
    a, b = onnx_bb.embed(photos), torch_bb.embed(photos)
    assert a.shape == b.shape == (5, 1280)
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(a[0], a[1], atol=1e-3)  # different photos, different features
    # the runtime is not part of what the features mean: same fingerprint, so the same cache entries
    assert onnx_bb.config.fingerprint() == torch_bb.config.fingerprint()


def test_runtime_choice_by_option_and_environment(monkeypatch):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    assert requested_runtime(None) == "auto"
    assert requested_runtime("torch") == "torch"
    monkeypatch.setenv("ROSETTE_RUNTIME", "torch")
    assert requested_runtime(None) == "torch" and requested_runtime("auto") == "torch"
    assert requested_runtime("onnx") == "onnx"  # a keyword option beats the environment
    monkeypatch.setenv("ROSETTE_RUNTIME", "tensorrt")
    with pytest.raises(ValueError, match="ROSETTE_RUNTIME"):
        requested_runtime(None)
    with pytest.raises(ValueError, match="runtime option"):
        requested_runtime("cuda")


def test_the_default_backbone_runs_onnx_unless_torch_is_asked_for(pair, monkeypatch):
    onnx_bb, _ = pair
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    assert onnx_bb.use_runtime("auto") == "onnx"  # embedded default on CPU: ONNX Runtime
    monkeypatch.setenv("ROSETTE_RUNTIME", "torch")
    assert onnx_bb.runtime == "torch"
    photos = _photos(2)
    x = onnx_bb.prepare(photos)
    assert x.is_contiguous(memory_format=torch.channels_last)  # torch path: channels-last
    monkeypatch.setenv("ROSETTE_RUNTIME", "auto")
    assert onnx_bb.runtime == "onnx"
    assert onnx_bb.use_runtime("torch") == "torch"  # a keyword option, sticky for this backbone
    assert onnx_bb.use_runtime("onnx") == "onnx"
    with pytest.raises(ValueError):
        onnx_bb.use_runtime("bogus")


def test_auto_keeps_other_torch_backbones_on_torch(monkeypatch):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    cfg = BackboneConfig(name="tiny", architecture="tiny", input_size=(16, 16), mean=(0.5,) * 3, std=(0.5,) * 3,
                         interpolation="bilinear", pooling="avg", embed_dim=4, weight_source="test",
                         weights_sha256=None, supports_tokens=False)
    bb = TorchBackbone(model, cfg, device="cpu")
    assert bb.runtime == "torch"
    assert bb.use_runtime("onnx") == "onnx"  # explicitly asked for: any torch backbone can export
    photos = _photos(3)
    np.testing.assert_allclose(bb.embed(photos), TorchBackbone(model, cfg, device="cpu", runtime="torch").embed(photos),
                               atol=1e-5)


def test_missing_onnxruntime_falls_back_to_torch_with_a_logged_reason(monkeypatch, caplog):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` raise ImportError
    bb = create_backbone("efficientnet_lite0", pretrained=False, device="cpu")
    with caplog.at_level(logging.WARNING):
        assert bb.runtime == "torch"
    assert "onnxruntime is not installed" in caplog.text and "falling back to torch" in caplog.text
    assert "onnxruntime is not installed" in bb.runtime_reason
    feats = bb.embed(_photos(2))
    assert feats.shape == (2, 1280) and np.all(np.isfinite(feats))


def test_an_export_that_fails_the_check_is_not_used(monkeypatch, caplog, tmp_path):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    real = onnx_runtime.torch_features
    monkeypatch.setattr(onnx_runtime, "torch_features", lambda model, x: real(model, x) + 1e-3)
    bb = create_backbone("efficientnet_lite0", pretrained=False, device="cpu")
    with caplog.at_level(logging.WARNING):
        assert bb.use_runtime(cache_dir=tmp_path) == "torch"
    assert "differ from torch's" in caplog.text
    assert not (onnx_dir(tmp_path, bb.config.fingerprint()) / META_FILE).exists()


@pytest.mark.slow  # three ONNX exports: ~5 s on an idle 2-core machine, more under load
def test_the_export_is_cached_reused_and_a_partial_file_is_never_used(monkeypatch, tmp_path):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    exports: list[int] = []
    real = onnx_runtime._export_bytes

    def counting(model, size):
        exports.append(1)
        return real(model, size)

    monkeypatch.setattr(onnx_runtime, "_export_bytes", counting)
    monkeypatch.setattr(onnx_runtime, "_EXPORTED", {})  # this process's exports: none yet
    first = create_backbone("efficientnet_lite0", pretrained=False, device="cpu")
    assert first.use_runtime(cache_dir=tmp_path) == "onnx" and len(exports) == 1
    folder = onnx_dir(tmp_path, first.config.fingerprint())
    model_file = folder / MODEL_FILE
    good = model_file.read_bytes()
    ops = [node.op_type for node in onnx.load_from_string(good).graph.node]
    assert "Pad" not in ops and ops.count("Conv") == 49  # timm's 5 "same" pads moved into their convs
    assert json.loads((folder / META_FILE).read_text())["size"] == len(good)

    def build():
        return onnx_runtime.build_onnx_forward(first.model, input_size=first.config.input_size,
                                               fingerprint=first.config.fingerprint(), cache_dir=tmp_path)

    forward, reason = build()
    assert forward is not None and reason == "" and len(exports) == 1  # reused, not exported again
    # another feature cache in this process reuses this process's export (the session is still checked)
    other = tmp_path / "other-cache"
    forward, reason = onnx_runtime.build_onnx_forward(first.model, input_size=first.config.input_size,
                                                      fingerprint=first.config.fingerprint(), cache_dir=other)
    assert forward is not None and reason == "" and len(exports) == 1
    assert (onnx_dir(other, first.config.fingerprint()) / MODEL_FILE).read_bytes() == good
    onnx_runtime._EXPORTED.clear()  # from here on, only the files on disk can spare an export

    # a half-written model under the final name (and a stale temporary file beside it) is not opened
    model_file.write_bytes(good[: len(good) // 2])
    (folder / f".{MODEL_FILE}.abc123.tmp").write_bytes(good[:100])
    forward, reason = build()
    assert forward is not None and len(exports) == 2  # exported again
    assert model_file.read_bytes() == good
    x = onnx_runtime.check_batch(first.config.input_size, n=2, seed=5)
    np.testing.assert_allclose(forward(x), onnx_runtime.torch_features(first.model, x), atol=1e-4)

    # a model file without its sidecar (the writer died between the two) is not used either
    (folder / META_FILE).unlink()
    onnx_runtime._EXPORTED.clear()
    forward, _ = build()
    assert forward is not None and len(exports) == 3 and (folder / META_FILE).exists()


def test_extract_features_keeps_the_onnx_export_in_the_feature_cache(pair, monkeypatch, tmp_path):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    _, torch_bb = pair
    fresh = create_backbone("efficientnet_lite0", device="cpu")
    photos = _photos(4)
    items = [(f"p{i}", (lambda img=img: img)) for i, img in enumerate(photos)]
    a = extract_features(fresh, items, variant="full_rgb", cache_dir=tmp_path, batch_size=3)
    assert fresh.runtime == "onnx"
    assert (onnx_dir(tmp_path, fresh.config.fingerprint()) / MODEL_FILE).exists()
    stats: dict[str, int] = {}
    b = extract_features(torch_bb, items, variant="full_rgb", cache_dir=tmp_path, batch_size=3, runtime="torch",
                         stats=stats)
    assert stats == {"cached": 4, "computed": 0}  # the same cache entries serve both runtimes
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, torch_bb.embed(photos), atol=1e-4)


def _jpeg(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def test_draft_decoding_gives_the_same_size_model_input(pair):
    _, torch_bb = pair
    cfg = torch_bb.config
    assert draft_size(cfg.input_size) == 448
    big = np.asarray(Image.fromarray(_photos(1)[0]).resize((1600, 1200), Image.Resampling.BILINEAR))
    data = _jpeg(big)
    full, drafted = load_rgb(data), load_rgb(data, draft=448)
    assert full.shape == (1200, 1600, 3)
    assert drafted.shape == (600, 800, 3)  # DCT-scaled by 1/2: both sides still >= 448
    a, b = resize_for_config(full, cfg), resize_for_config(drafted, cfg)
    assert a.shape == b.shape == (224, 224, 3) and a.dtype == b.dtype == np.uint8
    assert np.abs(a.astype(int) - b.astype(int)).mean() < 3.0
    # a photo under 2 x 448 a side decodes exactly as without draft
    small = _jpeg(_photos(1)[0])
    np.testing.assert_array_equal(load_rgb(small, draft=448), load_rgb(small))


class _SlowLoaderBackbone:
    """Deterministic embedding (mean colour + constant) with a prepare/embed_prepared split."""

    def __init__(self) -> None:
        self.config = BackboneConfig(
            name="slow", architecture="mean-colour", input_size=(4, 4), mean=(0, 0, 0), std=(1, 1, 1),
            interpolation="bilinear", pooling="avg", embed_dim=4, weight_source="none", weights_sha256=None,
            supports_tokens=False)
        self.threads: set[str] = set()

    def prepare(self, images):
        self.threads.add(threading.current_thread().name)
        return np.stack([np.concatenate([img.reshape(-1, 3).mean(0) / 255.0, [1.0]]) for img in images])

    def embed_prepared(self, batch):
        out = np.asarray(batch, dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_overlapped_pipeline_keeps_order_and_values():
    rng = random.Random(0)
    delays = [rng.uniform(0.0, 0.01) for _ in range(23)]

    def items():
        def make(i: int):
            def load() -> np.ndarray:
                time.sleep(delays[i])  # batches finish out of order across workers
                return np.full((5, 4, 3), (i * 11) % 256, dtype=np.uint8)
            return load
        return [(f"k{i}", make(i)) for i in range(23)]

    seq_bb, par_bb = _SlowLoaderBackbone(), _SlowLoaderBackbone()
    sequential = extract_features(seq_bb, items(), variant="v", cache_dir=None, batch_size=3, prefetch=False)
    overlapped = extract_features(par_bb, items(), variant="v", cache_dir=None, batch_size=3, workers=3)
    np.testing.assert_array_equal(overlapped, sequential)
    expected = np.array([[(i * 11) % 256 / 255.0] * 3 + [1.0] for i in range(23)], dtype=np.float32)
    np.testing.assert_allclose(sequential, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
    assert seq_bb.threads == {threading.current_thread().name}
    assert len(par_bb.threads) > 1 and all(t.startswith("rosette-prefetch") for t in par_bb.threads)
    with pytest.raises(ValueError, match="workers"):
        extract_features(seq_bb, items(), variant="v", cache_dir=None, workers=0)


def test_overlapped_onnx_pipeline_equals_the_sequential_torch_one(pair, monkeypatch):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    onnx_bb, torch_bb = pair
    onnx_bb.use_runtime("onnx")
    photos = _photos(7, seed=3)
    items = [(f"q{i}", (lambda img=img: img)) for i, img in enumerate(photos)]
    fast = extract_features(onnx_bb, items, variant="full_rgb", cache_dir=None, batch_size=2, workers=2)
    slow = extract_features(torch_bb, items, variant="full_rgb", cache_dir=None, batch_size=2, prefetch=False)
    np.testing.assert_allclose(fast, slow, atol=1e-4)
    seq_onnx = extract_features(onnx_bb, items, variant="full_rgb", cache_dir=None, batch_size=2, prefetch=False)
    np.testing.assert_array_equal(fast, seq_onnx)


def test_a_runtime_failure_mid_run_finishes_with_torch(monkeypatch, caplog):
    monkeypatch.delenv("ROSETTE_RUNTIME", raising=False)
    bb = create_backbone("efficientnet_lite0", pretrained=False, device="cpu")
    assert bb.runtime == "onnx"
    photos = _photos(2)
    expected = bb.embed(photos)

    def broken(x):
        raise RuntimeError("session died")

    bb._onnx = broken  # what a crashed ONNX Runtime session looks like to the backbone
    with caplog.at_level(logging.WARNING):
        feats = bb.embed(photos)
    assert "session died" in caplog.text and bb.runtime == "torch"
    np.testing.assert_allclose(feats, expected, atol=1e-4)
