"""Inpainters: convex-hull mask, diffusion sizes, OpenCV Telea, and a tiny random diffusers
pipeline run through the same code as the real FLUX.1-Fill / SD inpainting (never the network)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.inspect.inpainting import (
    Inpainter,
    InpainterNotConfiguredError,
    create_inpainter,
    default_inpainter_name,
    fit_size_for_diffusion,
    inpainting_mask,
    list_inpainters,
)
from core.registry import UnknownComponentError


def _scene(h: int = 64, w: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Horizontal colour gradient 'background' with a bright plus-shaped 'animal'."""
    x = np.linspace(0, 200, w)
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[..., 0] = x[None, :]
    rgb[..., 1] = 100
    rgb[..., 2] = 200 - x[None, :]
    mask = np.zeros((h, w), bool)
    mask[h // 2 - 3 : h // 2 + 3, w // 4 : 3 * w // 4] = True
    mask[h // 4 : 3 * h // 4, w // 2 - 3 : w // 2 + 3] = True
    rgb[mask] = (255, 255, 255)
    return rgb, mask


# ----------------------------------------------------------------------------- geometry


def test_inpainting_mask_is_the_convex_hull_then_dilated():
    _, mask = _scene()
    hull = inpainting_mask(mask, dilate_px=0)
    assert hull[mask].all()
    # the hull of a plus fills the corners between its arms (a diamond-ish octagon)
    assert hull[32 - 6, 32 - 6] and not mask[32 - 6, 32 - 6]
    assert not hull[2, 2]
    grown = inpainting_mask(mask, dilate_px=3)
    assert grown[hull].all() and grown.sum() > hull.sum()
    # dilation by 3 px reaches exactly 3 px beyond the hull's rightmost column
    cols = np.where(hull.any(axis=0))[0]
    gcols = np.where(grown.any(axis=0))[0]
    assert gcols.max() == cols.max() + 3
    assert not inpainting_mask(np.zeros((8, 8), bool)).any()


@pytest.mark.parametrize(
    ("hw", "expected"),
    [
        ((512, 384), (512, 384)),  # already fits, multiples of 8
        ((2048, 1536), (1024, 768)),  # halved
        ((513, 341), (512, 344)),  # rounded to the nearest multiple of 8
        ((3000, 10), (1024, 8)),  # a side never drops below one multiple
        ((1030, 1030), (1024, 1024)),  # the cap holds after rounding
    ],
)
def test_fit_size_for_diffusion(hw, expected):
    out = fit_size_for_diffusion(*hw)
    assert out == expected
    assert max(out) <= 1024 and out[0] % 8 == 0 and out[1] % 8 == 0


# ----------------------------------------------------------------------------- registry + opencv


def test_registry_and_default(monkeypatch):
    assert list_inpainters() == ["diffusers", "opencv"]
    with pytest.raises(UnknownComponentError, match="unknown inpainter 'lama'"):
        create_inpainter("lama")
    monkeypatch.delenv("ROSETTE_INPAINT_MODEL", raising=False)
    assert default_inpainter_name() == "opencv"
    monkeypatch.setenv("ROSETTE_INPAINT_MODEL", "black-forest-labs/FLUX.1-Fill-dev")
    assert default_inpainter_name() == "diffusers"


def test_opencv_inpainting_removes_the_animal_and_keeps_the_rest():
    rgb, mask = _scene()
    inp = create_inpainter("opencv")
    assert isinstance(inp, Inpainter) and inp.config["model"] == "opencv-telea"
    out = inp.inpaint(rgb, mask, seed=0)
    assert out.shape == rgb.shape and out.dtype == np.uint8
    region = inpainting_mask(mask, dilate_px=inp.dilate_px)
    assert np.array_equal(out[~region], rgb[~region])
    # the white plus is gone: filled pixels look like the surrounding gradient (green channel 100)
    assert out[mask].mean() < 200 and abs(float(out[mask][:, 1].mean()) - 100) < 10
    assert np.array_equal(inp.inpaint(rgb, mask, seed=5), out)  # deterministic, seed ignored


def test_opencv_works_downscaled_on_large_photos():
    rgb, mask = _scene(200, 300)
    out = create_inpainter("opencv", work_max_side=100).inpaint(rgb, mask)
    region = inpainting_mask(mask)
    assert out.shape == rgb.shape
    assert np.array_equal(out[~region], rgb[~region])
    assert out[mask].mean() < 200


def test_opencv_with_an_empty_mask_returns_the_photo():
    rgb, _ = _scene()
    assert np.array_equal(create_inpainter("opencv").inpaint(rgb, np.zeros(rgb.shape[:2], bool)), rgb)


# ----------------------------------------------------------------------------- diffusers


def test_diffusers_without_a_model_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv("ROSETTE_INPAINT_MODEL", raising=False)
    with pytest.raises(InpainterNotConfiguredError, match="ROSETTE_INPAINT_MODEL.*opencv"):
        create_inpainter("diffusers")


@pytest.mark.slow
def test_diffusers_with_a_model_missing_from_the_cache_fails_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InpainterNotConfiguredError, match="could not load.*local files"):
        create_inpainter("diffusers", model_id="rosette-test/no-such-inpainting-model", device="cpu")
    with pytest.raises(InpainterNotConfiguredError, match="folder holding a saved diffusers pipeline"):
        create_inpainter("diffusers", model_id=str(tmp_path), device="cpu")


class FluxFillPipeline:
    """Stand-in with FLUX.1-Fill's class name and call signature: records the call, returns grey."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, prompt=None, image=None, mask_image=None, height=None, width=None, strength=1.0,
                 num_inference_steps=50, guidance_scale=30.0, generator=None, output_type="pil"):
        self.calls.append(dict(prompt=prompt, image=image, mask_image=mask_image, height=height, width=width,
                               steps=num_inference_steps, guidance=guidance_scale, generator=generator,
                               output_type=output_type))

        class Out:
            images = [np.full((height, width, 3), 0.5, np.float32)]

        return Out()


def test_flux_fill_gets_the_papers_settings():
    rgb, mask = _scene(1100, 900)  # larger than 1024: downscaled for the model, full size back
    pipe = FluxFillPipeline()
    inp = create_inpainter("diffusers", pipeline=pipe, negative_prompt="animal")
    out = inp.inpaint(rgb, mask, seed=2)
    (call,) = pipe.calls
    assert (call["steps"], call["guidance"]) == (50, 30.0)
    assert "vegetation" in call["prompt"] and call["output_type"] == "np"
    assert (call["height"], call["width"]) == (1024, 840)
    assert call["image"].size == (840, 1024) and call["mask_image"].size == (840, 1024)
    assert call["generator"].initial_seed() == 2
    assert "negative_prompt" not in call  # FLUX.1-Fill takes none: filtered by the call signature
    region = inpainting_mask(mask, dilate_px=inp.dilate_px)
    assert out.shape == rgb.shape
    assert (out[region] == 128).all() and np.array_equal(out[~region], rgb[~region])
    assert inp.config["guidance"] == 30.0 and inp.config["pipeline_class"] == "FluxFillPipeline"


@pytest.fixture(scope="module")
def tiny_sd_pipeline(tmp_path_factory):
    """StableDiffusionInpaintPipeline with tiny random modules, built from configs only (offline)."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionInpaintPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    d = tmp_path_factory.mktemp("tok")
    letters = "abcdefghijklmnopqrstuvwxyz,"
    tokens = ["<|startoftext|>", "<|endoftext|>"] + list(letters) + [c + "</w>" for c in letters]
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (d / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(vocab_file=str(d / "vocab.json"), merges_file=str(d / "merges.txt"), model_max_length=77)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=32, in_channels=9, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
    )
    vae = AutoencoderKL(
        block_out_channels=[32, 64], in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2,
    )
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=32, intermediate_size=37,
        num_attention_heads=4, num_hidden_layers=2, vocab_size=len(tokens),
    ))
    scheduler = DDIMScheduler(steps_offset=1)
    return StableDiffusionInpaintPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )


@pytest.mark.slow
def test_tiny_diffusers_pipeline_fills_only_the_hull_and_keeps_size(tiny_sd_pipeline):
    rgb, mask = _scene(64, 64)
    inp = create_inpainter("diffusers", pipeline=tiny_sd_pipeline, steps=2)
    cfg = inp.config
    assert cfg["pipeline_class"] == "StableDiffusionInpaintPipeline"
    assert cfg["steps"] == 2 and cfg["guidance"] == 7.5  # SD default; FLUX.1-Fill gets 30
    assert "vegetation" in cfg["prompt"] and cfg["longest_edge"] == 1024 and cfg["multiple"] == 8
    out = inp.inpaint(rgb, mask, seed=0)
    assert out.shape == rgb.shape and out.dtype == np.uint8
    region = inpainting_mask(mask, dilate_px=inp.dilate_px)
    assert np.array_equal(out[~region], rgb[~region])  # pasted back outside the mask
    assert not np.array_equal(out[region], rgb[region])  # the animal's region was regenerated
    assert np.array_equal(inp.inpaint(rgb, mask, seed=0), out)  # same seed, same image
    assert not np.array_equal(inp.inpaint(rgb, mask, seed=1), out)  # another seed, another fill


@pytest.mark.slow
def test_tiny_diffusers_pipeline_on_an_odd_size_photo(tiny_sd_pipeline):
    # 70x61 is not a multiple of 8: the model runs at 72x64 and the result comes back at 70x61
    rgb, mask = _scene(70, 61)
    inp = create_inpainter("diffusers", pipeline=tiny_sd_pipeline, steps=1, guidance=1.0)
    out = inp.inpaint(rgb, mask, seed=3)
    region = inpainting_mask(mask, dilate_px=inp.dilate_px)
    assert out.shape == (70, 61, 3)
    assert np.array_equal(out[~region], rgb[~region])
