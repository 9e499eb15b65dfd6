"""A training run over photos the store hands over: no session, no catalogue.

:func:`run_training` takes the training set (:class:`TrainingSet`: labels, sightings, content hashes and
solidity of each photo, in one order), a loader of each photo and the makers of its mirror and near-identity
distractor (:class:`TrainingPhotos`), and the run's callbacks (:class:`TrainingHooks`: progress, log, metric
rows, stop). It holds out a fixed identity-covering validation set, trains a head (and optionally the last
blocks of the backbone) with :mod:`core.identify.training`, keeps ``last.pt`` / ``best.pt`` checkpoints in the hooks'
folder (a killed run resumes from ``last.pt``), and returns the best epoch's checkpoint (format
:data:`core.identify.backbones.trained.CHECKPOINT_FORMAT`) with the run's record. Registering it as a model is the
store's part (``db.identify.training.train_model``).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.identify.adapters import LoraSpec, adapted_widths, adapter_parameters, adapter_state, add_lora, rank_refusal
from core.identify.backbones import BackboneConfig, create_backbone
from core.identify.backbones.torch_base import resize_for_config
from core.identify.backbones.trained import CHECKPOINT_FORMAT
from core.identify.features import atomic_write
from core.identify.heads import create_head, head_spec
from core.identify.losses import create_loss
from core.progress import PhaseClock, duration_words
from core.identify.sampling import check_schedule, hard_negative_table, identity_aware_schedule
from core.identify.training import (
    TrainableModel,
    TrainConfig,
    TrainState,
    augment,
    embed_features,
    encode_labels,
    fit,
    make_optimizer,
    near_identity_scores,
    resolve_device,
    runtime_info,
    set_trainable_blocks,
    val_map,
    validation_split,
    view_generator,
)

TRAINABLE_BACKBONE_HINT = "train on a torch backbone such as efficientnet_lite0 (sift_vlad has nothing to train)"

Photo = Callable[[int], np.ndarray]


class NotTrainableError(ValueError):
    """The backbone has no torch model to train (the message says which to use instead)."""


@dataclass
class TrainingSet:
    """The exact photos a model is trained on (frozen labels), and where they came from."""

    source: str
    image_ids: list[int]
    labels: list[str]
    sightings: list[str | None]
    content_hashes: list[str]
    solidity: list[float | None]
    benchmark: str | None = None
    excluded_test_photos: int = 0
    sources: list[str] | None = None
    """Each photo's source (a benchmark or species name) for the identity-aware sampler; None: one source."""
    hard_negative_pairs: list[tuple[str, str]] = field(default_factory=list)
    """Identity pairs (labels as in ``labels``) that curators marked "not the same": the identity-aware sampler's
    first hard negatives."""

    def snapshot_hash(self) -> str:
        """SHA-256 over the sorted (content hash, identity) pairs: same photos and labels, same hash."""
        lines = sorted(f"{h}\t{lab}" for h, lab in zip(self.content_hashes, self.labels))
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()

    def snapshot(self) -> dict[str, Any]:
        return {"source": self.source, "benchmark": self.benchmark, "n_images": len(self.image_ids),
                "n_individuals": len(set(self.labels)), "image_ids": list(self.image_ids),
                "individuals": sorted(set(self.labels)), "hash": self.snapshot_hash(),
                "excluded_test_photos": self.excluded_test_photos}


@dataclass
class TrainingHooks:
    """How a training run talks to the outside (a job's context, or the CLI's)."""

    folder: Path
    progress: Callable[[float, str], None] = lambda f, m: None
    log: Callable[[str], None] = lambda m: None
    metric: Callable[[dict[str, Any]], None] = lambda row: None
    should_stop: Callable[[], bool] = lambda: False
    job_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoint_dir(self) -> Path:
        d = self.folder / "checkpoints"
        d.mkdir(parents=True, exist_ok=True)
        return d


@dataclass
class TrainingPhotos:
    """The training set's photos by position, as the store provides them.

    ``load(i)`` is the i-th photo (RGB; the run keeps each one it loads). ``makers(photo, need_distractors)``
    returns ``(mirror_of, distractor_of)`` built on the run's cached ``photo``: each photo's mirror, and its
    near-identity distractor (None unless asked for); it may refuse (e.g. photos without masks for NearID).
    It is called once, after the validation split, so anything it draws comes at the same point of every run.
    """

    load: Photo
    makers: Callable[[Photo, bool], tuple[Photo, Photo | None]]


def atomic_torch_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda fh: torch.save(obj, fh))


def views_cache_path(cache_dir: Path, fingerprint: str, kind: str, views: int, seed: int, content_hash: str) -> Path:
    return cache_dir / "train_views" / fingerprint / f"{kind}-v{views}-s{seed}" / content_hash[:2] / f"{content_hash}.npy"


def cached_views(cache_dir: Path, backbone: Any, photos: Photo, hashes: Sequence[str], *,
                 kind: str, views: int, seed: int, progress: Callable[[int, int], None],
                 should_stop: Callable[[], bool]) -> torch.Tensor:
    """N x V x (D or T x C) frozen features of each photo's views (view 0 plain, the rest augmented),
    cached on disk under ``cache_dir`` per (backbone fingerprint, kind, views, seed, photo) so head experiments
    reuse them."""
    size = tuple(backbone.config.input_size)
    out: list[torch.Tensor] = []
    fp = backbone.config.fingerprint()
    for i, h in enumerate(hashes):
        if should_stop():
            raise InterruptedError("training stopped on request")
        path = views_cache_path(cache_dir, fp, kind, views, seed, h)
        arr = None
        if path.exists():
            try:
                arr = np.load(path, allow_pickle=False)
            except (OSError, ValueError, EOFError):
                arr = None
        if arr is None or arr.shape[0] != views:
            rgb = photos(i)
            imgs = [rgb] + [augment(rgb, size=size, generator=view_generator(seed, h, v)) for v in range(1, views)]
            arr = embed_features(backbone, imgs, kind=kind, dtype=torch.float16).numpy()
            atomic_write(path, lambda fh, a=arr: np.save(fh, a, allow_pickle=False))
        out.append(torch.from_numpy(np.asarray(arr)))
        progress(i + 1, len(hashes))
    return torch.stack(out)


def model_name(backbone: str, config: TrainConfig, job_id: int | None) -> str:
    """The default name of a trained model: backbone, head, blocks, seed and the job (or the time)."""
    extent = f"lora{config.lora_rank}" if config.adapter == "lora" else \
        "b" + ("all" if config.blocks == -1 else str(config.blocks))
    stem = f"{backbone.replace(':', '_').replace('/', '_')}-{config.head}-{extent}-s{config.seed}"
    return f"{stem}-j{job_id}" if job_id is not None else f"{stem}-{time.strftime('%Y%m%d%H%M%S')}"


@dataclass
class TrainedRun:
    """A finished run: the best epoch's checkpoint and what the model's row records about it."""

    checkpoint: dict[str, Any]
    base_config: BackboneConfig
    head: str
    embed_dim: int
    metric: str
    loss: str
    blocks: int
    device: torch.device
    runtime: dict[str, Any]
    state: TrainState
    frozen_val: dict[str, float] | None
    validation_image_ids: list[int]
    n_train: int
    trainable_backbone_params: int
    nearid: dict[str, float] | None

    def record(self, config: TrainConfig, *, wall_seconds: float, job_id: int | None) -> dict[str, Any]:
        """The training record a model's row keeps (``training_config``)."""
        n_val = len(self.validation_image_ids)
        epoch_seconds = [r["seconds"] for r in self.state.history]
        return {"train_config": config.to_dict(), "runtime": self.runtime, "wall_seconds": wall_seconds,
                "seconds_per_epoch": float(np.median(epoch_seconds)) if epoch_seconds else None,
                "epochs_run": self.state.epoch, "best_epoch": self.state.best_epoch,
                "stopped_early": self.state.stopped_early,
                "best_val_map_macro": self.state.best_map if n_val else None,
                "frozen_val_map_macro": self.frozen_val["map_macro"] if self.frozen_val else None,
                "n_val": int(n_val), "n_train": int(self.n_train),
                "validation_image_ids": list(self.validation_image_ids),
                "trainable_backbone_params": self.trainable_backbone_params,
                "history": self.state.history, "job_id": job_id, "nearid": self.nearid}


@functools.cache
def backbone_adapted_widths(backbone: str) -> tuple[tuple[str, int], ...] | None:
    """(name, width) of the layers LoRA adapters would go on in ``backbone``, from its architecture alone (random
    weights on the CPU, built once per process); None for a backbone without a torch model."""
    base = create_backbone(backbone, pretrained=False, device="cpu")
    model = getattr(base, "model", None)
    return None if model is None else tuple(adapted_widths(model))


def check_lora_rank(backbone: str, rank: int) -> None:
    """Refuse, before any job exists, a LoRA rank wider than ``backbone``'s narrowest adapted layer, in the words
    the running job would use (:func:`core.identify.adapters.check_rank`)."""
    widths = backbone_adapted_widths(backbone)
    why = None if widths is None else rank_refusal(widths, rank)
    if why:
        raise ValueError(why)


def run_training(tset: TrainingSet, photos: TrainingPhotos, *, backbone: str, config: TrainConfig, name: str,
                 device: str, hooks: TrainingHooks, cache_dir: Path) -> TrainedRun:
    """Train on ``tset`` and checkpoint every epoch; returns the best epoch's checkpoint (not yet saved as a
    model). Frozen views are cached under ``cache_dir``. Raises :class:`NotTrainableError` for a backbone with
    no torch model."""
    spec = head_spec(config.head)
    loss_name = config.resolved_loss()
    dev = resolve_device(device)
    info = runtime_info(dev)
    benchmark = tset.benchmark
    hooks.log(f"training {name}: backbone {backbone}, head {config.head}, loss {loss_name}, "
              f"{'LoRA rank ' + str(config.lora_rank) if config.adapter else 'blocks ' + str(config.blocks)}, "
              f"{len(tset.image_ids)} photos of {len(set(tset.labels))} individuals from {tset.source}"
              f"{' ' + benchmark if benchmark else ''}; device {info}")
    if tset.excluded_test_photos:
        hooks.log(f"left out {tset.excluded_test_photos} photo(s) of benchmark {benchmark!r}'s test split")
    base = create_backbone(backbone, device=str(dev))
    if not hasattr(base, "model"):
        raise NotTrainableError(TRAINABLE_BACKBONE_HINT)
    torch.manual_seed(config.seed)

    is_val = validation_split(tset.labels, tset.sightings, per_identity=config.val_per_identity,
                              min_photos=config.val_min_photos, seed=config.seed)
    if is_val.sum() and len({lab for lab, v in zip(tset.labels, is_val) if v}) < 2:
        is_val[:] = False
    tr = np.flatnonzero(~is_val)
    va = np.flatnonzero(is_val)
    codes_all, names = encode_labels([tset.labels[i] for i in tr])
    train_sources = [(tset.sources or [tset.source] * len(tset.labels))[i] for i in tr]
    if config.sampler == "identity-aware":  # refused before any photo is embedded when the data cannot fill it
        check_schedule(codes_all, train_sources, identities_per_batch=config.identities_per_batch,
                       per_identity=config.per_identity, sources_per_batch=config.sources_per_batch)
    val_labels = [tset.labels[i] for i in va]
    val_sightings = [tset.sightings[i] for i in va]
    hooks.log(f"validation: {len(va)} photos of {len(set(val_labels))} training individuals held out "
              f"(identity-covering); training on {len(tr)}")
    photo_cache: dict[int, np.ndarray] = {}

    def photo(i: int) -> np.ndarray:
        if i not in photo_cache:
            photo_cache[i] = photos.load(i)
        return photo_cache[i]

    needs_masks = loss_name == "nearid"
    kind = spec.input_kind
    # ---- data
    loss_needs = {"mirror": loss_name == "lorentz" or config.anti_symmetry > 0, "distractors": loss_name == "nearid"}
    mirror_of, distractor_of = photos.makers(photo, needs_masks)
    hooks.progress(0.01, "frozen features of the validation photos")
    val_imgs = [photo(int(i)) for i in va]
    frozen_val = None
    if len(va):
        pooled = embed_features(base, val_imgs, kind="pooled")
        frozen_val = val_map(torch.nn.functional.normalize(pooled, dim=1).numpy(), val_labels, val_sightings,
                             metric="cosine")
        hooks.log(f"frozen features on the validation set: mAP macro {frozen_val['map_macro']:.4f}")
    with torch.no_grad():
        probe = embed_features(base, [photo(int(tr[0]))], kind=kind)
    in_dim = int(probe.shape[-1])
    head_options = {"out_dim": config.out_dim if config.head != "lorentz" else 256, "seed": config.seed}
    head = create_head(config.head, in_dim=in_dim, **head_options)
    lora: LoraSpec | None = None
    if config.adapter == "lora":
        lora = add_lora(base.model, rank=config.lora_rank, alpha=config.lora_alpha, dropout=config.lora_dropout)
        n_trainable_bb = sum(p.numel() for p in adapter_parameters(base.model))
        hooks.log(f"LoRA adapters (rank {lora.rank}, alpha {lora.alpha:g}, dropout {lora.dropout:g}) on "
                  f"{len(lora.targets)} layers: {n_trainable_bb:,} trainable parameters; the backbone stays frozen")
    else:
        n_trainable_bb = set_trainable_blocks(base.model, config.blocks) if config.blocks != 0 else 0
    model = TrainableModel(head, backbone_model=base.model if config.trains_backbone else None, kind=kind).to(dev)
    with torch.no_grad():
        out_dim = int(model.head(probe.to(dev).float()).shape[-1])
    loss_fn = create_loss(loss_name, num_classes=len(names), embedding_size=out_dim,
                          anti_symmetry=config.anti_symmetry, anti_symmetry_tau=config.anti_symmetry_tau,
                          patch_weight=config.patch_weight).to(dev)
    if getattr(loss_fn, "needs_patches", False) and not hasattr(head, "forward_with_patches"):
        raise ValueError(f"the {loss_name} loss needs a head with patch embeddings (--head idsim), not {config.head}")
    extra = [p for p in loss_fn.parameters() if p.requires_grad]  # ArcFace's class centres train too
    optimizer = make_optimizer(model, config, riemannian=spec.metric == "lorentz", extra_params=extra)
    solidity = torch.tensor([1.0 if s is None else float(s) for s in tset.solidity], dtype=torch.float32)
    codes_t = torch.from_numpy(codes_all)

    if not config.trains_backbone:
        hooks.progress(0.02, f"caching {config.views} views of {len(tr)} training photos")
        caching_clock = PhaseClock("caching views")
        views = cached_views(cache_dir, base, lambda j: photo(int(tr[j])), [tset.content_hashes[i] for i in tr],
                             kind=kind, views=config.views, seed=config.seed, should_stop=hooks.should_stop,
                             progress=lambda d, t: hooks.progress(0.02 + 0.18 * d / t, caching_clock.words(d, t)))
        mirror_feats = embed_features(base, [mirror_of(int(i)) for i in tr], kind=kind) \
            if loss_needs["mirror"] else None
        dist_feats = embed_features(base, [distractor_of(int(i)) for i in tr], kind=kind)[:, None] \
            if loss_needs["distractors"] else None
        val_feats = embed_features(base, val_imgs, kind=kind) if len(va) else None

        def step_inputs(idx: np.ndarray, epoch: int, gen: torch.Generator) -> dict[str, Any]:
            pick = torch.randint(0, views.shape[1], (len(idx),), generator=gen)
            ii = torch.from_numpy(idx)
            out: dict[str, Any] = {"x": views[ii, pick].to(dev).float(), "labels": codes_t[ii].to(dev),
                                   "solidity": solidity[torch.from_numpy(tr[idx])].to(dev)}
            if mirror_feats is not None:
                out["mirror"] = mirror_feats[ii].to(dev)
            if dist_feats is not None:
                out["distractors"] = dist_feats[ii].to(dev)
            return out

        def embed_val() -> np.ndarray:
            model.eval()
            return model(val_feats.to(dev)).float().cpu().numpy()
    else:
        size = tuple(base.config.input_size)
        big = (int(size[0] * 1.15), int(size[1] * 1.15))
        big_cfg = base.config.with_updates(input_size=big)
        hooks.progress(0.02, f"loading {len(tr)} training photos")
        train_imgs = [resize_for_config(photo(int(i)), big_cfg) for i in tr]
        dist_imgs = [resize_for_config(distractor_of(int(i)), big_cfg) for i in tr] if loss_needs["distractors"] else None
        val_small = [resize_for_config(img, base.config) for img in val_imgs]

        def step_inputs(idx: np.ndarray, epoch: int, gen: torch.Generator) -> dict[str, Any]:
            imgs = [augment(train_imgs[j], size=size, generator=gen) for j in idx]
            x = base.preprocess(imgs)
            out: dict[str, Any] = {"x": x, "labels": codes_t[torch.from_numpy(idx)].to(dev),
                                   "solidity": solidity[torch.from_numpy(tr[idx])].to(dev)}
            if loss_needs["mirror"]:
                out["mirror"] = torch.flip(x, dims=[3])  # the mirrored photo is an input, never a positive
            if dist_imgs is not None:
                out["distractors"] = base.preprocess([augment(dist_imgs[j], size=size, generator=gen)
                                                      for j in idx])[:, None]
            return out

        def embed_val() -> np.ndarray:
            chunks = []
            for s in range(0, len(val_small), 32):
                chunks.append(model(base.preprocess(val_small[s:s + 32])).float().cpu().numpy())
            return np.concatenate(chunks)

    # ---- resume
    last = hooks.checkpoint_dir / "last.pt"
    best = hooks.checkpoint_dir / "best.pt"
    fingerprint = {"config": config.to_dict(), "snapshot": tset.snapshot_hash(), "backbone": base.config.fingerprint()}
    state = TrainState()
    if last.exists():
        ck = torch.load(last, map_location="cpu", weights_only=False)
        if ck.get("fingerprint") == fingerprint:
            model.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            if ck.get("loss_state"):
                loss_fn.load_state_dict(ck["loss_state"])
            state = TrainState(**ck["state"])
            hooks.log(f"resumed from the checkpoint after epoch {state.epoch} (best epoch {state.best_epoch}, "
                      f"validation mAP {state.best_map:.4f})")
        else:
            hooks.log("a checkpoint of a different configuration or data was found and ignored")

    total_epochs = config.epochs
    n_batches = max(1, int(np.ceil(len(tr) / (min(config.identities_per_batch, len(names)) * config.per_identity))))
    steps_per_epoch = config.steps_per_epoch or n_batches
    batches = None
    if config.sampler == "identity-aware":
        hooks.progress(0.2, "scheduling the run's identity-aware batches")
        # the frozen model's ranking: the cached plain views when they are pooled vectors, else embedded once
        ranked = views[:, 0].float() if not config.trains_backbone and kind == "pooled" else \
            embed_features(base, [photo(int(i)) for i in tr], kind="pooled")
        negatives = hard_negative_table(codes_all, names, decided=tset.hard_negative_pairs,
                                        features=ranked.numpy(), k=config.hard_negatives, sources=train_sources)
        schedule = identity_aware_schedule(codes_all, train_sources, hard_negatives=negatives, epochs=total_epochs,
                                           steps_per_epoch=steps_per_epoch,
                                           identities_per_batch=config.identities_per_batch,
                                           per_identity=config.per_identity,
                                           sources_per_batch=config.sources_per_batch, seed=config.seed)
        decided = sum(len(v.decided) for v in negatives.values())
        hooks.log(f"identity-aware batches: {len(schedule)} epochs x {len(schedule[0])} steps, "
                  f"{decided} curator hard negative(s), the rest from the frozen model's ranking")

        def batches(epoch: int) -> list[np.ndarray]:
            return schedule[epoch - 1]

    training_clock = PhaseClock("training steps")

    def on_step(epoch: int, step: int, loss: float) -> None:
        frac = 0.2 + 0.7 * ((epoch - 1) + step / steps_per_epoch) / total_epochs
        left = training_clock.seconds_left((epoch - 1) * steps_per_epoch + step, total_epochs * steps_per_epoch)
        hooks.progress(frac, f"epoch {epoch}/{total_epochs}, step {step}/{steps_per_epoch}, loss {loss:.4f}"
                             + (f" (training about {duration_words(left)} left)" if left is not None else ""))

    def on_epoch(st: TrainState, row: dict[str, Any], is_best: bool) -> None:
        hooks.metric(row)
        hooks.log(f"epoch {row['epoch']}: loss {row['train_loss']:.4f}"
                  + (f", validation mAP {row['val_map_macro']:.4f}" if "val_map_macro" in row else "")
                  + f" ({row['seconds']:.1f} s){' best' if is_best else ''}")
        if is_best:
            atomic_torch_save({"model": model.trainable_state(), "epoch": row["epoch"]}, best)
        atomic_torch_save({"fingerprint": fingerprint, "model": model.trainable_state(),
                           "optimizer": optimizer.state_dict(),
                           "loss_state": loss_fn.state_dict() if extra else None,
                           "state": st.__dict__}, last)

    hooks.metric({"epoch": 0, "step": 0, **({f"val_{k}": v for k, v in frozen_val.items()} if frozen_val else {}),
                  "frozen": True}) if state.epoch == 0 else None
    state = fit(model, loss_fn, optimizer, codes=codes_all, config=config, step_inputs=step_inputs,
                embed_val=embed_val if len(va) else None, val_labels=val_labels, val_sightings=val_sightings,
                metric=spec.metric, state=state, on_epoch=on_epoch, on_step=on_step, should_stop=hooks.should_stop,
                batches=batches)
    # ---- best epoch -> the checkpoint a model is registered with
    if best.exists():
        model.load_state_dict(torch.load(best, map_location="cpu", weights_only=False)["model"])
    model.eval()
    nearid_scores = None
    if loss_name == "nearid" and len(va):
        with torch.no_grad():
            e_val = embed_val()
            d_feats = embed_features(base, [distractor_of(int(i)) for i in va], kind=kind)
            e_d = model.head(d_feats.to(dev)).float().cpu().numpy() if not config.trains_backbone else \
                model(base.preprocess([distractor_of(int(i)) for i in va])).float().cpu().numpy()
        nearid_scores = near_identity_scores(e_val, val_labels, e_d)
        hooks.log(f"NearID on the validation set: SSR {nearid_scores['ssr']:.3f}, PA {nearid_scores['pa']:.3f}")
    ckpt = {"format": CHECKPOINT_FORMAT, "backbone": backbone, "backbone_config": base.config.to_dict(),
            "head": config.head, "head_options": head_options, "input_kind": kind, "metric": spec.metric,
            "blocks": config.blocks, "in_dim": in_dim, "embed_dim": out_dim, "loss": loss_name,
            "head_state": {k: v.cpu() for k, v in model.head.state_dict().items()},
            "backbone_state": {k: v.cpu() for k, v in base.model.state_dict().items()} if config.blocks != 0 else None,
            "adapter": lora.to_dict() if lora is not None else None,
            "adapter_state": adapter_state(base.model) if lora is not None else None,
            "base_fingerprint": base.config.fingerprint(),
            "train_config": config.to_dict(), "snapshot_hash": tset.snapshot_hash()}
    return TrainedRun(checkpoint=ckpt, base_config=base.config, head=config.head, embed_dim=out_dim,
                      metric=spec.metric, loss=loss_name, blocks=config.blocks, device=dev, runtime=info, state=state,
                      frozen_val=frozen_val, validation_image_ids=[int(tset.image_ids[i]) for i in va],
                      n_train=len(tr), trainable_backbone_params=n_trainable_bb, nearid=nearid_scores)
