"""The idsim head and LoRA adapters through the real training path (issue 16): a synthetic benchmark, the CLI,
the adapter-only checkpoint, the patch_ot re-ranking, and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from app.cli import main as cli
from core.identify.adapters import adapter_state, add_lora, check_rank, load_adapters, lora_targets
from core.identify.backbones import create_backbone
from core.identify.training import TrainConfig, features_for
from db.identify.benchmarks import create_benchmark
from db.models import JobStatus
from db.session import open_catalogue
from jobs import queue
from tests.synthetic_reid import make_reid_set

FAST = {"views": 2, "steps_per_epoch": 2, "epochs": 1, "diagnose": False, "identities_per_batch": 4,
        "per_identity": 2}


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    root = tmp_path_factory.mktemp("idsim")
    manifest = make_reid_set(root / "photos", individuals=8, photos_each=5, seed=3, masks=True)
    cat = open_catalogue(root / "data")
    create_benchmark(cat, "syn", manifest=manifest, split="identity", test_fraction=0.3, seed=0)
    yield cat
    cat.close()


def train(cat, **params):
    job = queue.submit_and_run(cat, "train", {"benchmark": "syn", **FAST, **params})
    assert job.status == JobStatus.succeeded, f"{job.message}\n{job.error}"
    return job


# --------------------------------------------------------------------------- LoRA, pure

def test_lora_starts_at_the_frozen_backbone_and_round_trips_through_its_state():
    x = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(0))
    model = create_backbone("efficientnet_lite0", device="cpu").model
    with torch.no_grad():
        frozen = features_for(model, x, kind="pooled")
    spec = add_lora(model, rank=4, alpha=8, dropout=0.0)
    model.eval()
    with torch.no_grad():
        assert torch.equal(features_for(model, x, kind="pooled"), frozen)  # B starts at zero
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        tuned = features_for(model, x, kind="pooled")
    state = adapter_state(model)
    assert state and all("lora_" in k for k in state)
    assert sum(v.numel() for v in state.values()) == sum(p.numel() for n, p in model.named_parameters()
                                                         if "lora_" in n)
    fresh = create_backbone("efficientnet_lite0", device="cpu").model
    load_adapters(fresh, spec, state)  # merged into the base weights
    with torch.no_grad():
        again = features_for(fresh, x, kind="pooled")
    assert not torch.allclose(tuned, frozen, atol=1e-3)
    assert torch.allclose(again, tuned, atol=1e-4)


def test_lora_targets_skip_depthwise_and_dynamic_padding_and_the_rank_is_checked():
    model = create_backbone("efficientnet_lite0", device="cpu").model
    targets = lora_targets(model)
    modules = dict(model.named_modules())
    assert "conv_head" in targets and "blocks.1.0.conv_pw" in targets
    assert all(modules[t].groups == 1 for t in targets) and "conv_stem" not in targets
    assert not any(t.endswith("conv_dw") for t in targets)
    check_rank(model, targets, 16)  # the narrowest adapted layer (blocks.0.0.conv_pw, 32 -> 16) takes 16
    with pytest.raises(ValueError, match=r"LoRA rank 17 is larger than layer 'blocks.0.0.conv_pw''s width 16"):
        check_rank(model, targets, 17)


def test_lora_config_refusals():
    with pytest.raises(ValueError, match="leave --blocks at 0"):
        TrainConfig(adapter="lora", blocks=2)
    with pytest.raises(ValueError, match="unknown adapter"):
        TrainConfig(adapter="dora")
    with pytest.raises(ValueError, match="rank must be at least 1"):
        TrainConfig(adapter="lora", lora_rank=0)
    assert TrainConfig(adapter="lora").trains_backbone and not TrainConfig().trains_backbone


# --------------------------------------------------------------------------- through the training job

def test_idsim_head_only_trains_on_cached_tokens_and_patch_ot_evaluates(syn, capsys):
    job = train(syn, head="idsim", patch_weight=0.5, name="syn-idsim")
    ckpt = torch.load(syn.data_dir / "models" / "syn-idsim.pt", map_location="cpu", weights_only=False)
    assert ckpt["loss"] == "idsim" and ckpt["train_config"]["patch_weight"] == 0.5 and ckpt["input_kind"] == "tokens"
    ev = job.result["evaluation"]
    assert 0 <= ev["map_macro"] <= 1
    capsys.readouterr()
    assert cli(["--data-dir", str(syn.data_dir), "eval", "--backbone", "syn-idsim", "--benchmark", "syn",
                "--rerank", "patch_ot", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["rerank"] == "patch_ot" and 0 <= res["map_macro"] <= 1
    # patch_ot on a model without a patch head: a clear refusal
    assert cli(["--data-dir", str(syn.data_dir), "eval", "--backbone", "efficientnet_lite0", "--benchmark", "syn",
                "--rerank", "patch_ot"]) == 1
    assert "needs a model with a patch head" in capsys.readouterr().err


def test_cli_idsim_with_lora_stores_only_the_adapters(syn, capsys):
    """The issue's command, on the synthetic benchmark: idsim + LoRA rank 4, one epoch on the CPU, JSON with
    map_macro; the checkpoint holds the adapters and the head, not the backbone, and names its base."""
    capsys.readouterr()
    rc = cli(["--data-dir", str(syn.data_dir), "train", "--head", "idsim", "--adapter", "lora", "--rank", "4",
              "--benchmark", "syn", "--epochs", "1", "--device", "cpu", "--views", "2", "--no-diagnose", "--wait",
              "--json", "--name", "syn-idsim-lora"])
    out = capsys.readouterr().out
    assert rc == 0, out
    res = json.loads(out)
    assert res["model"] == "syn-idsim-lora" and 0 <= res["map_macro"] <= 1
    ckpt = torch.load(syn.data_dir / "models" / "syn-idsim-lora.pt", map_location="cpu", weights_only=False)
    base = create_backbone("efficientnet_lite0", device="cpu")
    assert ckpt["backbone_state"] is None and ckpt["adapter"]["rank"] == 4 and ckpt["adapter"]["alpha"] == 32
    assert ckpt["base_fingerprint"] == base.config.fingerprint()
    assert ckpt["adapter_state"] and all("lora_" in k for k in ckpt["adapter_state"])
    changed = [k for k, v in ckpt["adapter_state"].items() if "lora_B" in k and v.abs().sum() > 0]
    assert changed, "one epoch of training moves the adapters off zero"
    size = (syn.data_dir / "models" / "syn-idsim-lora.pt").stat().st_size
    stored = sum(v.numel() * v.element_size() for part in ("adapter_state", "head_state")
                 for v in ckpt[part].values())
    backbone = sum(v.numel() * v.element_size() for v in base.model.state_dict().values())
    assert stored <= size < stored + 200_000 and sum(
        v.numel() * v.element_size() for v in ckpt["adapter_state"].values()) < backbone / 20
    from db.embeddings import get_backbone

    model = get_backbone(syn, "syn-idsim-lora")
    assert "lora r4" in model.config.extra_dict()["adapter"]
    emb = model.embed([np.zeros((64, 64, 3), np.uint8)])
    assert emb.shape == (1, 512) and np.isclose(np.linalg.norm(emb), 1.0, atol=1e-5)


def test_lora_rank_wider_than_a_layer_is_refused(syn):
    job = queue.submit_and_run(syn, "train", {"benchmark": "syn", **FAST, "adapter": "lora", "lora_rank": 64})
    assert job.status == JobStatus.failed and "LoRA rank 64 is larger than layer" in job.message


def test_a_base_with_other_weights_refuses_the_adapters(syn, tmp_path):
    """The adapters name their base by fingerprint; a checkpoint whose base differs is refused, not mis-loaded."""
    from core.identify.backbones.trained import load_trained_backbone

    src = syn.data_dir / "models" / "syn-idsim-lora.pt"
    if not src.exists():
        train(syn, head="supcon", adapter="lora", lora_rank=2, name="syn-idsim-lora")
    ckpt = torch.load(src, map_location="cpu", weights_only=False)
    ckpt["base_fingerprint"] = "0" * 16
    bad = tmp_path / "bad.pt"
    torch.save(ckpt, bad)
    with pytest.raises(ValueError, match="adapters were trained on base"):
        load_trained_backbone(bad, name="bad", checkpoint_sha256="x")


def test_jobs_tab_form_offers_lora_idsim_and_the_identity_aware_sampler(syn):
    from jobs.actions.training import DEFAULT_SAMPLER, train_defaults, training_form

    d = train_defaults(syn)
    assert d.sampler == DEFAULT_SAMPLER == TrainConfig().sampler == "identity-aware"
    assert "idsim" in [v for _, v in d.heads] and "lora16" in [v for _, v in d.blocks]
    assert [v for _, v in d.samplers] == ["m-per-class", "identity-aware"]
    req = training_form(backbone="efficientnet_lite0", head="idsim", blocks="lora16", epochs=2,
                        training_set="benchmark:syn", device="cpu", user="ana", sampler="identity-aware")
    cfg = req.train_config()
    assert cfg.adapter == "lora" and cfg.lora_rank == 16 and cfg.blocks == 0 and cfg.sampler == "identity-aware"
    assert training_form(backbone="efficientnet_lite0", head="supcon", blocks="4", epochs=2,
                         training_set="benchmark:syn", device="cpu", user="ana").train_config().blocks == 4
    with pytest.raises(Exception, match="unknown batch sampler"):
        training_form(backbone="efficientnet_lite0", head="supcon", blocks="4", epochs=2,
                      training_set="benchmark:syn", device="cpu", user="ana", sampler="random")
    # the calibration hold-out: automatic (resolved when the run starts), none, or a share as rosette train takes it
    assert [v for _, v in d.holdouts] == ["auto", "0", "0.1", "0.2", "0.3"] and d.holdout == "auto"
    form = dict(backbone="efficientnet_lite0", head="supcon", blocks="0", epochs=2, training_set="benchmark:syn",
                device="cpu", user="ana")
    assert training_form(**form).train_config().calibration_holdout is None
    assert training_form(**form, calibration_holdout="0").train_config().calibration_holdout == 0
    assert training_form(**form, calibration_holdout="0.3").train_config().calibration_holdout == 0.3
    with pytest.raises(Exception, match="unknown calibration hold-out '0.6'"):
        training_form(**form, calibration_holdout="0.6")
