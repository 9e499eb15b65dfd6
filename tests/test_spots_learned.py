"""Learned local matchers (kornia): DISK / ALIKED + LightGlue and LoFTR.

No network and no real weights: the networks are built with seeded random weights (``pretrained=False``), which
find few or no matches, so the tests check well-formedness (shapes, dtypes, coordinates in the photo and in the
mask) and, with the match thresholds lowered or the network replaced by a stub, the bookkeeping of matches.
The loading code is exercised with weight files written to a temporary ``ROSETTE_WEIGHTS_DIR`` / torch hub folder.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
import torch

from core.identify.spots import (
    LEARNED_MATCHERS,
    Correspondences,
    LocalFeatures,
    MatcherConfig,
    MatcherUnavailableError,
    UnknownComponentError,
    create_matcher,
    learned,
    matcher_available,
)

H, W = 160, 200
MAX_SIDE = 160
MAX_KP = 128
WORK_W, WORK_H = 160, 128  # 200 x 160 photo, longest side -> 160


def _spotted_photo(seed: int, shape: tuple[int, int] = (H, W)) -> np.ndarray:
    """A tan coat with dark rosettes (random ellipses) and a little noise, as HxWx3 uint8."""
    rng = np.random.default_rng(seed)
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    grey = 170.0 + 30.0 * xx / w
    for _ in range(45):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(3, 9), rng.uniform(3, 9)
        d = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2
        grey = np.where(d < 1.0, rng.uniform(20, 70), grey)
        grey = np.where((d >= 1.0) & (d < 1.6), grey * 0.8, grey)
    grey = grey + rng.normal(0, 4, size=grey.shape)
    rgb = np.stack([grey, grey * 0.85, grey * 0.6], axis=-1)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def _ellipse_mask(shape: tuple[int, int] = (H, W)) -> np.ndarray:
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    return ((yy - h * 0.5) / (h * 0.35)) ** 2 + ((xx - w * 0.55) / (w * 0.35)) ** 2 < 1.0


@pytest.fixture(scope="module")
def photos() -> dict[str, np.ndarray]:
    a = _spotted_photo(1)
    b = np.roll(a, (6, -9), axis=(0, 1)).copy()  # the same coat, moved
    return {"a": a, "b": b, "mask": _ellipse_mask()}


@pytest.fixture(scope="module", params=LEARNED_MATCHERS)
def matcher(request):
    return create_matcher(request.param, pretrained=False, max_side=MAX_SIDE, max_keypoints=MAX_KP, device="cpu")


@pytest.fixture(scope="module")
def feats(matcher, photos) -> dict[str, LocalFeatures]:
    """Each matcher's features of the test photos, extracted once (twice for ``a``: determinism)."""
    return {"a": matcher.extract(photos["a"]), "a_again": matcher.extract(photos["a"]),
            "a_masked": matcher.extract(photos["a"], photos["mask"]),
            "b_masked": matcher.extract(photos["b"], photos["mask"])}


@pytest.fixture()
def no_local_weights(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """Empty ROSETTE_WEIGHTS_DIR and TORCH_HOME: 'weights present' never leaks in from the machine."""
    weights, torch_home = tmp_path / "weights", tmp_path / "torch-home"
    weights.mkdir()
    torch_home.mkdir()
    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(weights))
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    assert Path(torch.hub.get_dir()) == torch_home / "hub"
    return weights, torch_home / "hub" / "checkpoints"


def _check_in_photo(pts: np.ndarray, shape: tuple[int, int] = (H, W)) -> None:
    assert pts.dtype == np.float32 and pts.ndim == 2 and pts.shape[1] == 2
    assert np.isfinite(pts).all()
    assert (pts[:, 0] >= 0).all() and (pts[:, 0] <= shape[1] - 1).all()
    assert (pts[:, 1] >= 0).all() and (pts[:, 1] <= shape[0] - 1).all()


def _check_in_mask(pts: np.ndarray, mask: np.ndarray) -> None:
    ix = np.rint(pts[:, 0]).astype(int)
    iy = np.rint(pts[:, 1]).astype(int)
    assert mask[iy, ix].all(), "a point outside the mask"


def _check_correspondences(c: Correspondences, fa: LocalFeatures, fb: LocalFeatures,
                           mask_b: np.ndarray | None = None) -> None:
    assert isinstance(c, Correspondences)
    assert len(c.points_a) == len(c.points_b) == len(c.confidence) == len(c)
    _check_in_photo(c.points_a, fa.image_size)
    _check_in_photo(c.points_b, fb.image_size)
    assert c.confidence.dtype == np.float32
    assert np.isfinite(c.confidence).all() and (c.confidence >= 0).all() and (c.confidence <= 1).all()
    if fa.image is None:  # sparse: every matched point is one of the photo's keypoints
        for pts, f in ((c.points_a, fa), (c.points_b, fb)):
            assert all((f.keypoints == p).all(axis=1).any() for p in pts)
    if mask_b is not None:
        _check_in_mask(c.points_b, mask_b)


# --------------------------------------------------------------------------- config, registry, availability


def test_config_of_a_random_weight_matcher(matcher):
    cfg = matcher.config
    name = cfg.name
    assert name in LEARNED_MATCHERS
    expect = {"disk-lightglue": ("disk", 128, False), "aliked-lightglue": ("aliked", 128, False),
              "loftr": ("loftr", 0, True)}[name]
    assert (cfg.descriptor, cfg.descriptor_dim, cfg.dense) == expect
    assert (cfg.max_side, cfg.max_keypoints, cfg.ratio, cfg.binary) == (MAX_SIDE, MAX_KP, 1.0, False)
    assert cfg.weight_source == "random (test)" and cfg.weights_sha256 is None
    import kornia

    assert dict(cfg.extra)["kornia"] == kornia.__version__
    assert MatcherConfig.from_dict(cfg.to_dict()) == cfg
    again = create_matcher(name, pretrained=False, max_side=MAX_SIDE, max_keypoints=MAX_KP, device="cpu")
    assert again.config.fingerprint() == cfg.fingerprint()
    other = create_matcher(name, pretrained=False, max_side=MAX_SIDE, max_keypoints=MAX_KP + 1, device="cpu")
    assert other.config.fingerprint() != cfg.fingerprint()


def test_unknown_names_and_options_raise():
    with pytest.raises(UnknownComponentError):
        create_matcher("no-such-matcher", pretrained=False)
    with pytest.raises(UnknownComponentError):
        matcher_available("no-such-matcher")
    with pytest.raises(UnknownComponentError):
        learned.learned_weights_available("sift")
    with pytest.raises(TypeError, match="bogus"):
        create_matcher("loftr", pretrained=False, bogus=1)
    assert matcher_available("sift") is True


@pytest.mark.parametrize("name", LEARNED_MATCHERS)
def test_pretrained_without_local_weights_is_unavailable(name, no_local_weights, monkeypatch):
    weights_dir, hub_dir = no_local_weights
    assert matcher_available(name) is False
    assert learned.learned_weights_available(name) is False
    with pytest.raises(MatcherUnavailableError) as info:
        create_matcher(name)  # pretrained=True: must look locally only, never download
    msg = str(info.value)
    assert str(weights_dir) in msg and str(hub_dir) in msg and "ROSETTE_WEIGHTS_DIR" in msg
    for w in learned.WEIGHT_FILES[name]:
        assert w.local_name in msg and w.hub_name in msg
    assert not hub_dir.exists() or not any(hub_dir.iterdir())  # nothing was fetched

    monkeypatch.delenv("ROSETTE_WEIGHTS_DIR")
    with pytest.raises(MatcherUnavailableError, match="ROSETTE_WEIGHTS_DIR"):
        create_matcher(name)


def test_weight_file_names_are_the_ones_kornia_caches():
    """The torch hub names are where kornia's own ``from_pretrained`` / ``LightGlue("disk")`` cache the files."""
    from kornia.feature import LightGlue

    def first(urls) -> str:
        return urls[0] if isinstance(urls, list) else urls

    disk_urls = importlib.import_module("kornia.feature.disk.disk").urls["depth"]
    loftr_urls = importlib.import_module("kornia.feature.loftr.loftr").urls["outdoor"]
    aliked_urls = [u.format(learned.ALIKED_MODEL) for u in
                   importlib.import_module("kornia.feature.aliked.aliked")._CHECKPOINT_URLS]
    disk, lg_disk = learned.WEIGHT_FILES["disk-lightglue"]
    aliked, lg_aliked = learned.WEIGHT_FILES["aliked-lightglue"]
    (loftr,) = learned.WEIGHT_FILES["loftr"]
    for w, urls in ((disk, disk_urls), (loftr, loftr_urls), (aliked, aliked_urls)):
        assert w.hub_name == os.path.basename(urlparse(first(urls)).path) and w.url == first(urls)
    for w, feat in ((lg_disk, "disk"), (lg_aliked, "aliked")):
        assert w.hub_name == f"{LightGlue.features[feat]['weights']}_{LightGlue.version}.pth".replace(".", "-")
        assert w.url.endswith(f"/{feat}_lightglue.pth")


def _state_dicts(m, name: str) -> list[tuple[str, dict]]:
    """(wrapper key, state dict) per weight file, in WEIGHT_FILES order."""
    if name == "loftr":
        return [("state_dict", m.net.state_dict())]
    lg = {}
    for k, v in m.matcher.state_dict().items():  # the published LightGlue files use the original layer names
        for i in range(m.matcher.conf.n_layers):
            k = k.replace(f"transformers.{i}.self_attn", f"self_attn.{i}")
            k = k.replace(f"transformers.{i}.cross_attn", f"cross_attn.{i}")
        lg[k] = v
    return [("extractor" if name == "disk-lightglue" else "", m.detector.state_dict()), ("", lg)]


@pytest.mark.parametrize("name", LEARNED_MATCHERS)
def test_pretrained_loads_the_local_files(name, no_local_weights):
    """First file in ROSETTE_WEIGHTS_DIR (loftr: torch hub), the rest in torch hub; loaded, hashed, recorded."""
    weights_dir, hub_dir = no_local_weights
    hub_dir.mkdir(parents=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)  # weights that differ from the seeded random ones
        src = create_matcher(name, pretrained=False, max_side=MAX_SIDE, max_keypoints=MAX_KP, device="cpu")
        for p in src.__dict__.values():
            if isinstance(p, torch.nn.Module):
                for t in p.parameters():
                    t.data.normal_(0, 0.05)
    files = []
    for i, (w, (key, sd)) in enumerate(zip(learned.WEIGHT_FILES[name], _state_dicts(src, name), strict=True)):
        path = weights_dir / w.local_name if i == 0 and name != "loftr" else hub_dir / w.hub_name
        torch.save({key: sd} if key else sd, path)
        files.append(path)
    assert matcher_available(name) is True

    m = create_matcher(name, max_side=MAX_SIDE, max_keypoints=MAX_KP, device="cpu")
    cfg = m.config
    assert cfg.weights_sha256 == ",".join(hashlib.sha256(p.read_bytes()).hexdigest() for p in files)
    assert cfg.weight_source != "random (test)"
    assert ("ROSETTE_WEIGHTS_DIR" in cfg.weight_source) == (name != "loftr") and "torch hub" in cfg.weight_source
    pairs = [(src.net, m.net)] if name == "loftr" else [(src.detector, m.detector), (src.matcher, m.matcher)]
    for s, t in pairs:
        assert not t.training
        ts = dict(t.named_parameters())
        for k, v in s.named_parameters():
            assert torch.equal(ts[k], v), k

    # a file that does not fit the network is refused, not silently half-loaded
    files[-1].write_bytes(b"not a checkpoint")
    with pytest.raises(MatcherUnavailableError, match=str(files[-1].name)):
        create_matcher(name, max_side=MAX_SIDE, max_keypoints=MAX_KP, device="cpu")


# --------------------------------------------------------------------------- extract


def test_extract_without_mask(matcher, feats):
    f = feats["a"]
    assert isinstance(f, LocalFeatures)
    assert f.image_size == (H, W) and f.masked is False
    assert f.scale == pytest.approx(MAX_SIDE / W)
    _check_in_photo(f.keypoints)
    assert f.n <= MAX_KP
    if matcher.config.dense:
        assert f.keypoints.shape == (0, 2) and f.descriptors.shape == (0, 0)
        assert f.descriptors.dtype == np.float32
        assert f.image is not None and f.image.dtype == np.uint8 and f.image.shape == (WORK_H, WORK_W)
        assert f.enough()
    else:
        assert f.image is None
        assert f.descriptors.shape == (f.n, 128) and f.descriptors.dtype == np.float32
        assert np.isfinite(f.descriptors).all()
        if f.n:
            np.testing.assert_allclose(np.linalg.norm(f.descriptors, axis=1), 1.0, atol=1e-4)
    g = feats["a_again"]  # deterministic
    np.testing.assert_array_equal(f.keypoints, g.keypoints)
    np.testing.assert_array_equal(f.descriptors, g.descriptors)
    if f.image is not None:
        np.testing.assert_array_equal(f.image, g.image)


def test_extract_with_mask(matcher, feats, photos):
    mask = photos["mask"]
    f = feats["a_masked"]
    assert f.masked is True and f.image_size == (H, W)
    _check_in_photo(f.keypoints)
    _check_in_mask(f.keypoints, mask)
    if matcher.config.dense:
        import cv2

        work = cv2.resize(mask.astype(np.uint8), (WORK_W, WORK_H), interpolation=cv2.INTER_NEAREST) > 0
        assert f.image is not None and f.image.shape == (WORK_H, WORK_W)
        assert (f.image[~work] == 0).all()  # background blanked
        on = f.image > 0
        assert on.sum() > 0.8 * work.sum() and not (on & ~work).any()  # the (eroded) animal kept, >= 1
    else:
        assert f.n <= MAX_KP and f.descriptors.shape == (f.n, 128)
    with pytest.raises(ValueError):
        matcher.extract(photos["a"], mask[:-1])
    with pytest.raises(ValueError):
        matcher.extract(photos["a"][..., 0])


def test_extract_scales_and_shapes(matcher):
    """A photo smaller than max_side is enlarged; coordinates still come back in its own pixels."""
    small = _spotted_photo(5, (90, 120))
    f = matcher.extract(small, _ellipse_mask((90, 120)))
    assert f.image_size == (90, 120) and f.scale == pytest.approx(MAX_SIDE / 120)
    _check_in_photo(f.keypoints, (90, 120))
    _check_in_mask(f.keypoints, _ellipse_mask((90, 120)))


# --------------------------------------------------------------------------- match


def test_match_is_well_formed(matcher, feats, photos):
    fa, fb = feats["a"], feats["b_masked"]
    c = matcher.match(fa, fb)
    _check_correspondences(c, fa, fb, photos["mask"])
    assert len(c) <= MAX_KP
    c2 = matcher.match(feats["a_again"], fb)  # deterministic
    np.testing.assert_array_equal(c.points_a, c2.points_a)
    np.testing.assert_array_equal(c.points_b, c2.points_b)
    np.testing.assert_array_equal(c.confidence, c2.confidence)


def test_match_with_thresholds_lowered(matcher, feats, photos, monkeypatch):
    """Random weights rarely pass the match thresholds; at 0 the matches flow through the bookkeeping."""
    if matcher.config.dense:
        monkeypatch.setattr(matcher.net.coarse_matching, "thr", 0.0)
    else:
        monkeypatch.setattr(matcher.matcher.conf, "filter_threshold", 0.0)
    fa, fb = feats["a_masked"], feats["b_masked"]
    c = matcher.match(fa, fb)
    _check_correspondences(c, fa, fb, photos["mask"])
    _check_in_mask(c.points_a, photos["mask"])
    if not matcher.config.dense:
        assert fa.n > 0 and fb.n > 0
        assert len(c) > 0  # the best mutual pair always passes a zero threshold


def test_match_of_empty_features(matcher, feats):
    f = feats["a"]
    if matcher.config.dense:
        empty = LocalFeatures(np.zeros((0, 2)), np.zeros((0, 0), np.float32), (H, W), 0.8, False)
        with pytest.raises(ValueError, match="working image"):
            matcher.match(f, empty)
    else:
        empty = LocalFeatures(np.zeros((0, 2)), np.zeros((0, 128), np.float32), (H, W), 0.8, False)
        assert len(matcher.match(f, empty)) == 0 and len(matcher.match(empty, f)) == 0
        with pytest.raises(ValueError, match="128-d"):
            matcher.match(f, LocalFeatures(np.zeros((3, 2)), np.zeros((3, 64), np.float32), (H, W), 0.8, False))


def test_loftr_output_mapping_with_a_stub_network(photos):
    """LoFTR's +0.5 pixel frame, the scale, the mask on each side and the max_keypoints cap."""
    m = create_matcher("loftr", pretrained=False, max_side=MAX_SIDE, max_keypoints=3, device="cpu")
    fa = m.extract(photos["a"])  # unmasked, scale 0.8
    mask = np.zeros((H, W), bool)
    mask[:, : W // 2] = True
    fb = m.extract(photos["b"], mask)  # only the left half (working x < 80, eroded by ~2 px)

    def stub(data):
        assert data["image0"].shape == (1, 1, WORK_H, WORK_W) and float(data["image0"].max()) <= 1.0
        k0 = torch.tensor([[8.5, 16.5], [40.5, 40.5], [100.5, 60.5], [150.5, 120.5], [0.5, 0.5]])
        k1 = torch.tensor([[8.5, 16.5], [60.5, 40.5], [120.5, 60.5], [20.5, 20.5], [30.5, 30.5]])
        return {"keypoints0": k0, "keypoints1": k1, "confidence": torch.tensor([0.9, 0.5, 0.99, 0.7, 0.6]),
                "batch_indexes": torch.zeros(5, dtype=torch.long)}

    m.net = stub
    c = m.match(fa, fb)
    # match 2 lies outside b's mask (x = 120 working); the rest ranked by confidence, capped at 3
    np.testing.assert_allclose(c.confidence, [0.9, 0.7, 0.6])
    np.testing.assert_allclose(c.points_a, [[10, 20], [187.5, 150], [0, 0]])
    np.testing.assert_allclose(c.points_b, [[10, 20], [25, 25], [37.5, 37.5]])
    _check_correspondences(c, fa, fb, mask)


def test_lightglue_index_mapping_with_a_stub_network(photos):
    m = create_matcher("disk-lightglue", pretrained=False, max_side=MAX_SIDE, max_keypoints=MAX_KP, device="cpu")
    fa = LocalFeatures(np.array([[10, 20], [30, 40], [50, 60]]), np.eye(3, 128, dtype=np.float32), (H, W), 0.8,
                       False)
    fb = LocalFeatures(np.array([[1, 2], [3, 4]]), np.eye(2, 128, dtype=np.float32), (H, W), 0.8, False)
    seen = {}

    def stub(data):
        seen.update(data)
        return {"matches": [torch.tensor([[2, 0], [0, 1]])], "scores": [torch.tensor([0.25, 0.75])]}

    m.matcher = stub
    c = m.match(fa, fb)
    np.testing.assert_allclose(c.points_a, [[50, 60], [10, 20]])
    np.testing.assert_allclose(c.points_b, [[1, 2], [3, 4]])
    np.testing.assert_allclose(c.confidence, [0.25, 0.75])
    # the network sees working-scale keypoints and the working image size (W, H)
    np.testing.assert_allclose(seen["image0"]["keypoints"][0].numpy(), [[8, 16], [24, 32], [40, 48]])
    assert seen["image0"]["image_size"].tolist() == [[WORK_W, WORK_H]]
