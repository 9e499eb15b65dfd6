"""The SAM 2 masker for real: the smallest SAM 2.1 architecture from the package's own config,
random weights, through the same code the app uses; and the checkpoint-loading path."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from core.inspect.masking import create_masker

pytestmark = pytest.mark.slow  # builds Hiera-tiny and runs its 1024 px image encoder on the CPU (~2 s)

CONFIG = "configs/sam2.1/sam2.1_hiera_t.yaml"


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)
    img[64:192, 80:176] = (200, 150, 80)
    return img


@pytest.fixture(scope="module")
def random_masker():
    from core.inspect.masking.sam2_masker import clear_model_cache

    clear_model_cache()
    masker = create_masker("sam2", random_init=True, device="cpu", config=CONFIG)
    yield masker
    clear_model_cache()


def _assert_binary_mask(res, shape):
    assert res.source == "sam2"
    assert res.mask.shape == shape
    assert res.mask.dtype == np.bool_
    assert set(np.unique(res.mask).tolist()) <= {False, True}


def test_config_names_come_from_the_installed_package():
    from core.inspect.masking.sam2_masker import available_sam2_configs, resolve_sam2_config

    names = available_sam2_configs()
    assert CONFIG in names and "configs/sam2.1/sam2.1_hiera_l.yaml" in names
    assert resolve_sam2_config("sam2.1_hiera_t") == CONFIG
    assert resolve_sam2_config("sam2.1_hiera_t.yaml") == CONFIG
    with pytest.raises(ValueError, match="unknown SAM 2 config 'sam9_hiera_t'.*ships"):
        resolve_sam2_config("sam9_hiera_t")


def test_without_a_checkpoint_the_error_says_how_to_get_one(monkeypatch):
    from core.inspect.masking.sam2_masker import Sam2NotConfiguredError

    monkeypatch.delenv("ROSETTE_SAM2_CHECKPOINT", raising=False)
    with pytest.raises(Sam2NotConfiguredError, match=r"sam2\.1_hiera_tiny\.pt.*ROSETTE_SAM2_CHECKPOINT"):
        create_masker("sam2")
    monkeypatch.setenv("ROSETTE_SAM2_CHECKPOINT", "/nonexistent/sam2.1_hiera_tiny.pt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        create_masker("sam2", device="cpu")


def test_point_and_box_prompts_give_binary_masks_the_size_of_the_image(random_masker, image):
    t0 = time.perf_counter()
    point = random_masker.predict(image, points=[(128.0, 128.0)], point_labels=[1])
    first = time.perf_counter() - t0
    _assert_binary_mask(point, image.shape[:2])
    assert point.details["multimask_output"] is True and len(point.details["scores"]) == 3
    assert point.details["score"] == max(point.details["scores"])
    assert point.details["checkpoint"] == "random-init"
    assert point.details["config"] == CONFIG and point.details["image_size"] == 1024

    t0 = time.perf_counter()
    box = random_masker.predict(image, box=(80, 64, 176, 192))
    again = time.perf_counter() - t0
    _assert_binary_mask(box, image.shape[:2])
    assert box.details["multimask_output"] is False and len(box.details["scores"]) == 1
    assert box.details["prompt"]["box"] == [80.0, 64.0, 176.0, 192.0]
    # the embedding of the same photo is reused: the second prompt skips the image encoder
    assert random_masker.set_image(image) is False
    calls = []
    saved_key, real_set_image = random_masker._image_key, random_masker.predictor.set_image
    random_masker.predictor.set_image = calls.append  # a different photo does reach the encoder
    try:
        assert random_masker.set_image(image[::-1].copy()) is True and len(calls) == 1
    finally:
        random_masker.predictor.set_image, random_masker._image_key = real_set_image, saved_key
    print(f"\nSAM 2 hiera-tiny CPU: first prediction {first:.2f} s (encoder + decoder), re-prompt {again:.3f} s")


def test_batch_mode_uses_the_centred_box_and_is_deterministic(random_masker, image):
    a = random_masker.predict(image)
    b = random_masker.predict(image)
    _assert_binary_mask(a, image.shape[:2])
    assert a.details["rule"].startswith("batch: centred box")
    assert a.details["prompt"]["box"] == [12.8, 12.8, 243.2, 243.2]
    assert np.array_equal(a.mask, b.mask)


def test_model_is_loaded_once_per_process(random_masker):
    from core.inspect.masking.sam2_masker import cached_model_keys

    other = create_masker("sam2", random_init=True, device="cpu", config=CONFIG)
    assert other.model is random_masker.model
    assert cached_model_keys() == [(CONFIG, "random-init:0", "cpu")]


def test_checkpoint_loading_via_env_and_option(random_masker, image, tmp_path, monkeypatch):
    # a different random model, saved in the release format {"model": state_dict}
    from core.inspect.masking.sam2_masker import load_sam2_model

    model, _ = load_sam2_model(config=CONFIG, random_init=True, seed=1, device="cpu")
    sd = model.state_dict()
    assert not torch.equal(sd["sam_mask_decoder.iou_token.weight"],
                           random_masker.model.state_dict()["sam_mask_decoder.iou_token.weight"])
    ckpt = tmp_path / "sam2.1_hiera_tiny.pt"
    torch.save({"model": sd}, ckpt)

    monkeypatch.setenv("ROSETTE_SAM2_CHECKPOINT", str(ckpt))
    monkeypatch.setenv("ROSETTE_SAM2_CONFIG", "sam2.1_hiera_t")
    loaded = create_masker("sam2", device="cpu")
    loaded_sd = loaded.model.state_dict()
    assert loaded_sd.keys() == sd.keys()
    assert all(torch.equal(loaded_sd[k], sd[k]) for k in sd)
    assert loaded.info["checkpoint"] == str(ckpt.resolve())
    import hashlib

    assert loaded.info["checkpoint_sha256"] == hashlib.sha256(ckpt.read_bytes()).hexdigest()

    monkeypatch.delenv("ROSETTE_SAM2_CHECKPOINT")
    via_option = create_masker("sam2", checkpoint=str(ckpt), config=CONFIG, device="cpu")
    assert via_option.model is loaded.model  # same (config, checkpoint, device): cached


def test_a_checkpoint_of_another_architecture_is_rejected_clearly(tmp_path):
    ckpt = tmp_path / "wrong.pt"
    torch.save({"model": {"not_a_sam2_weight": torch.zeros(1)}}, ckpt)
    with pytest.raises(RuntimeError, match="does not fit config"):
        create_masker("sam2", checkpoint=str(ckpt), config=CONFIG, device="cpu")
