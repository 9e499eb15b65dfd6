"""Training a model from the catalogue: the training set snapshot, the run, the registered model.

``train_model`` takes the photos of a benchmark's train split (or the catalogue's
confirmed individuals, never a benchmark's test photos), holds out a fixed
identity-covering validation set, trains a head (and optionally the last
blocks of the backbone) with :mod:`core.training`, keeps ``last.pt`` /
``best.pt`` checkpoints in the job folder (a killed run resumes from
``last.pt``), and registers the best epoch as a candidate model whose row holds
the backbone, head, loss, checkpoint hash, full config, data snapshot, device
and wall time. The model's name then works everywhere a backbone name does.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sqlalchemy import select

from core.backbones import DEFAULT_BACKBONE
from core.progress import PhaseClock, duration_words
from core.training import TrainConfig
from db.catalogue import CatalogueError
from db.models import Image, Individual, Model, ModelStatus, Sighting
from db.session import Catalogue

TRAINABLE_BACKBONE_HINT = "train on a torch backbone such as efficientnet_lite0 (sift_vlad has nothing to train)"
MIN_TRAIN_PHOTOS = 8


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

    def snapshot_hash(self) -> str:
        """SHA-256 over the sorted (content hash, identity) pairs: same photos and labels, same hash."""
        lines = sorted(f"{h}\t{lab}" for h, lab in zip(self.content_hashes, self.labels))
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()

    def snapshot(self) -> dict[str, Any]:
        return {"source": self.source, "benchmark": self.benchmark, "n_images": len(self.image_ids),
                "n_individuals": len(set(self.labels)), "image_ids": list(self.image_ids),
                "individuals": sorted(set(self.labels)), "hash": self.snapshot_hash(),
                "excluded_test_photos": self.excluded_test_photos}


def _test_image_ids(cat: Catalogue, benchmark: str) -> set[int]:
    from db.benchmarks import load_benchmark

    return set(load_benchmark(cat, benchmark, split="test").image_ids)


def training_set(cat: Catalogue, *, source: str = "benchmark", benchmark: str | None = None,
                 image_ids: Sequence[int] | None = None, species_id: int | None = None) -> TrainingSet:
    """The photos to train on.

    ``source="benchmark"``: the train split of ``benchmark``. ``source="catalogue"``: every photo of an
    active individual; the test photos of ``benchmark`` (when given) are left out and counted.
    ``image_ids`` restricts either; asking for a benchmark test photo explicitly is refused.
    """
    from db.benchmarks import load_benchmark

    if source not in ("benchmark", "catalogue"):
        raise CatalogueError(f"unknown training source {source!r}; expected benchmark or catalogue")
    test_ids = _test_image_ids(cat, benchmark) if benchmark else set()
    if image_ids is not None and test_ids & set(image_ids):
        bad = sorted(test_ids & set(image_ids))
        raise CatalogueError(f"refusing to train on {len(bad)} photo(s) of benchmark {benchmark!r}'s test split "
                             f"(e.g. image {bad[0]}): a model must never see the photos it is evaluated on")
    excluded = 0
    if source == "benchmark":
        if not benchmark:
            raise CatalogueError("training from a benchmark needs its name (--benchmark NAME)")
        data = load_benchmark(cat, benchmark, split="train")
        if not data.image_ids:
            raise CatalogueError(f"benchmark {benchmark!r} has no train split (a test-only benchmark); "
                                 "train from the catalogue or another benchmark")
        rows = list(zip(data.image_ids, data.labels, data.sightings))
    else:
        with cat.unit_of_work() as s:
            q = (select(Image.id, Individual.name, Sighting.key)
                 .join(Individual, Image.individual_id == Individual.id)
                 .outerjoin(Sighting, Image.sighting_id == Sighting.id)
                 .where(Individual.active.is_(True)).order_by(Image.id))
            if species_id is not None:
                q = q.where(Image.species_id == species_id)
            rows = [(r[0], r[1], r[2]) for r in s.execute(q).all()]
        excluded = sum(1 for r in rows if r[0] in test_ids)
        rows = [r for r in rows if r[0] not in test_ids]
    if image_ids is not None:
        keep = set(image_ids)
        rows = [r for r in rows if r[0] in keep]
    with cat.unit_of_work() as s:
        meta = {r[0]: (r[1], r[2]) for r in s.execute(
            select(Image.id, Image.content_hash, Image.solidity).where(Image.id.in_([r[0] for r in rows])))}
    if len(rows) < MIN_TRAIN_PHOTOS or len({r[1] for r in rows}) < 2:
        raise CatalogueError(f"training needs at least {MIN_TRAIN_PHOTOS} photos of at least two individuals; "
                             f"this training set has {len(rows)} photo(s) of {len({r[1] for r in rows})}")
    return TrainingSet(source=source, benchmark=benchmark, image_ids=[r[0] for r in rows],
                       labels=[str(r[1]) for r in rows], sightings=[r[2] for r in rows],
                       content_hashes=[meta[r[0]][0] for r in rows], solidity=[meta[r[0]][1] for r in rows],
                       excluded_test_photos=excluded)


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


def _atomic_torch_save(obj: Any, path: Path) -> None:
    from core.features import atomic_write

    atomic_write(path, lambda fh: torch.save(obj, fh))


def _views_cache_path(cat: Catalogue, fingerprint: str, kind: str, views: int, seed: int, content_hash: str) -> Path:
    return cat.cache_dir / "train_views" / fingerprint / f"{kind}-v{views}-s{seed}" / content_hash[:2] / f"{content_hash}.npy"


def _cached_views(cat: Catalogue, backbone: Any, photos: Callable[[int], np.ndarray], hashes: Sequence[str], *,
                  kind: str, views: int, seed: int, progress: Callable[[int, int], None],
                  should_stop: Callable[[], bool]) -> torch.Tensor:
    """N x V x (D or T x C) frozen features of each photo's views (view 0 plain, the rest augmented),
    cached on disk per (backbone fingerprint, kind, views, seed, photo) so head experiments reuse them."""
    from core.features import atomic_write
    from core.training import augment, embed_features, view_generator

    size = tuple(backbone.config.input_size)
    out: list[torch.Tensor] = []
    fp = backbone.config.fingerprint()
    for i, h in enumerate(hashes):
        if should_stop():
            raise InterruptedError("training stopped on request")
        path = _views_cache_path(cat, fp, kind, views, seed, h)
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


def _model_name(backbone: str, config: TrainConfig, job_id: int | None) -> str:
    blocks = "all" if config.blocks == -1 else str(config.blocks)
    stem = f"{backbone.replace(':', '_').replace('/', '_')}-{config.head}-b{blocks}-s{config.seed}"
    return f"{stem}-j{job_id}" if job_id is not None else f"{stem}-{time.strftime('%Y%m%d%H%M%S')}"


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,150}$")


def check_model_name(cat: Catalogue, name: str) -> None:
    from core.backbones import BACKBONES

    if not _NAME.match(name):
        raise CatalogueError(f"model name {name!r}: use letters, digits, '.', '_', '+' or '-' (up to 150)")
    if name in BACKBONES:
        raise CatalogueError(f"model name {name!r} is a built-in backbone; choose another")
    with cat.unit_of_work() as s:
        if s.scalar(select(Model.id).where(Model.name == name)) is not None:
            raise CatalogueError(f"a model named {name!r} exists; choose another name")


def train_model(cat: Catalogue, *, backbone: str = DEFAULT_BACKBONE, config: TrainConfig,
                source: str = "benchmark", benchmark: str | None = None, image_ids: Sequence[int] | None = None,
                name: str | None = None, device: str = "auto", hooks: TrainingHooks,
                species_id: int | None = None) -> dict[str, Any]:
    """Train, checkpoint every epoch, register the best epoch as a candidate model; returns a summary."""
    from core.backbones import create_backbone
    from core.heads import create_head, head_spec
    from core.losses import create_loss
    from core.training import (TrainableModel, TrainState, encode_labels, fit, freeing_gpu, make_optimizer, resolve_device, runtime_info, set_trainable_blocks,
                               validation_split, val_map, embed_features)
    from db.embeddings import load_photo, sources_for

    t_start = time.perf_counter()
    if backbone == "sift_vlad":
        raise CatalogueError(TRAINABLE_BACKBONE_HINT)
    name = name or hooks.extra.get("name") or _model_name(backbone, config, hooks.job_id)
    spec = head_spec(config.head)
    loss_name = config.resolved_loss()
    tset = training_set(cat, source=source, benchmark=benchmark, image_ids=image_ids, species_id=species_id)
    dev = resolve_device(device)
    info = runtime_info(dev)
    hooks.log(f"training {name}: backbone {backbone}, head {config.head}, loss {loss_name}, blocks {config.blocks}, "
              f"{len(tset.image_ids)} photos of {len(set(tset.labels))} individuals from {tset.source}"
              f"{' ' + benchmark if benchmark else ''}; device {info}")
    if tset.excluded_test_photos:
        hooks.log(f"left out {tset.excluded_test_photos} photo(s) of benchmark {benchmark!r}'s test split")
    base = create_backbone(backbone, device=str(dev))
    if not hasattr(base, "model"):
        raise CatalogueError(TRAINABLE_BACKBONE_HINT)
    torch.manual_seed(config.seed)

    is_val = validation_split(tset.labels, tset.sightings, per_identity=config.val_per_identity,
                              min_photos=config.val_min_photos, seed=config.seed)
    if is_val.sum() and len({lab for lab, v in zip(tset.labels, is_val) if v}) < 2:
        is_val[:] = False
    tr = np.flatnonzero(~is_val)
    va = np.flatnonzero(is_val)
    codes_all, names = encode_labels([tset.labels[i] for i in tr])
    val_labels = [tset.labels[i] for i in va]
    val_sightings = [tset.sightings[i] for i in va]
    hooks.log(f"validation: {len(va)} photos of {len(set(val_labels))} training individuals held out "
              f"(identity-covering); training on {len(tr)}")
    srcs = sources_for(cat, tset.image_ids)
    photo_cache: dict[int, np.ndarray] = {}

    def photo(i: int) -> np.ndarray:
        if i not in photo_cache:
            photo_cache[i] = load_photo(cat, srcs[i])
        return photo_cache[i]

    needs_masks = loss_name == "nearid"
    kind = spec.input_kind
    # ---- data
    loss_needs = {"mirror": loss_name == "lorentz" or config.anti_symmetry > 0, "distractors": loss_name == "nearid"}
    mirror_of, distractor_of = _mirror_and_distractor_makers(cat, srcs, tset, photo, seed=config.seed,
                                                             need_distractors=needs_masks)
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
    model = TrainableModel(head, backbone_model=base.model if config.blocks != 0 else None, kind=kind).to(dev)
    n_trainable_bb = set_trainable_blocks(base.model, config.blocks) if config.blocks != 0 else 0
    with torch.no_grad():
        out_dim = int(model.head(probe.to(dev).float()).shape[-1])
    loss_fn = create_loss(loss_name, num_classes=len(names), embedding_size=out_dim,
                          anti_symmetry=config.anti_symmetry, anti_symmetry_tau=config.anti_symmetry_tau).to(dev)
    extra = [p for p in loss_fn.parameters() if p.requires_grad]  # ArcFace's class centres train too
    optimizer = make_optimizer(model, config, riemannian=spec.metric == "lorentz", extra_params=extra)
    solidity = torch.tensor([1.0 if s is None else float(s) for s in tset.solidity], dtype=torch.float32)
    codes_t = torch.from_numpy(codes_all)

    if config.blocks == 0:
        hooks.progress(0.02, f"caching {config.views} views of {len(tr)} training photos")
        caching_clock = PhaseClock("caching views")
        views = _cached_views(cat, base, lambda j: photo(int(tr[j])), [tset.content_hashes[i] for i in tr],
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
        from core.training import augment

        size = tuple(base.config.input_size)
        big = (int(size[0] * 1.15), int(size[1] * 1.15))
        from core.backbones.timm_backbones import resize_for_config

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
            _atomic_torch_save({"model": model.trainable_state(), "epoch": row["epoch"]}, best)
        _atomic_torch_save({"fingerprint": fingerprint, "model": model.trainable_state(),
                            "optimizer": optimizer.state_dict(),
                            "loss_state": loss_fn.state_dict() if extra else None,
                            "state": st.__dict__}, last)

    hooks.metric({"epoch": 0, "step": 0, **({f"val_{k}": v for k, v in frozen_val.items()} if frozen_val else {}),
                  "frozen": True}) if state.epoch == 0 else None
    state = fit(model, loss_fn, optimizer, codes=codes_all, config=config, step_inputs=step_inputs,
                embed_val=embed_val if len(va) else None, val_labels=val_labels, val_sightings=val_sightings,
                metric=spec.metric, state=state, on_epoch=on_epoch, on_step=on_step, should_stop=hooks.should_stop)
    # ---- best epoch -> registered model
    if best.exists():
        model.load_state_dict(torch.load(best, map_location="cpu", weights_only=False)["model"])
    model.eval()
    nearid_scores = None
    if loss_name == "nearid" and len(va):
        from core.training import near_identity_scores

        with torch.no_grad():
            e_val = embed_val()
            d_feats = embed_features(base, [distractor_of(int(i)) for i in va], kind=kind)
            e_d = model.head(d_feats.to(dev)).float().cpu().numpy() if config.blocks == 0 else \
                model(base.preprocess([distractor_of(int(i)) for i in va])).float().cpu().numpy()
        nearid_scores = near_identity_scores(e_val, val_labels, e_d)
        hooks.log(f"NearID on the validation set: SSR {nearid_scores['ssr']:.3f}, PA {nearid_scores['pa']:.3f}")
    ckpt = {"format": "rosette-trained-1", "backbone": backbone, "backbone_config": base.config.to_dict(),
            "head": config.head, "head_options": head_options, "input_kind": kind, "metric": spec.metric,
            "blocks": config.blocks, "in_dim": in_dim, "embed_dim": out_dim, "loss": loss_name,
            "head_state": {k: v.cpu() for k, v in model.head.state_dict().items()},
            "backbone_state": {k: v.cpu() for k, v in base.model.state_dict().items()} if config.blocks != 0 else None,
            "train_config": config.to_dict(), "snapshot_hash": tset.snapshot_hash()}
    check_model_name(cat, name)
    rel = Path("models") / f"{name}.pt"
    _atomic_torch_save(ckpt, cat.data_dir / rel)
    from core.backbones.timm_backbones import sha256_file

    sha = sha256_file(cat.data_dir / rel)
    from core.backbones.trained import trained_config

    cfg = trained_config(name, base_config=base.config, head=config.head, embed_dim=out_dim, metric=spec.metric,
                         checkpoint_sha256=sha, blocks=config.blocks, loss=loss_name, checkpoint_name=rel.name)
    wall = time.perf_counter() - t_start
    epoch_seconds = [r["seconds"] for r in state.history]
    training = {"train_config": config.to_dict(), "runtime": info, "wall_seconds": wall,
                "seconds_per_epoch": float(np.median(epoch_seconds)) if epoch_seconds else None,
                "epochs_run": state.epoch, "best_epoch": state.best_epoch, "stopped_early": state.stopped_early,
                "best_val_map_macro": state.best_map if len(va) else None,
                "frozen_val_map_macro": frozen_val["map_macro"] if frozen_val else None,
                "n_val": int(len(va)), "n_train": int(len(tr)),
                "validation_image_ids": [int(tset.image_ids[i]) for i in va], "trainable_backbone_params": n_trainable_bb,
                "history": state.history, "job_id": hooks.job_id, "nearid": nearid_scores}
    with cat.unit_of_work() as s:
        row = Model(name=name, backbone=backbone, head=config.head, loss=loss_name, config=cfg.to_dict(),
                    checkpoint_path=str(rel), checkpoint_hash=sha, training_config=training,
                    data_snapshot=tset.snapshot(), job_id=hooks.job_id, status=ModelStatus.candidate,
                    species_id=_single_species(cat, tset.image_ids))
        s.add(row)
        s.commit()
        model_id = row.id
    freeing_gpu(dev)
    hooks.log(f"registered model {name} (id {model_id}, checkpoint sha256 {sha[:12]}...) in {wall:.1f} s")
    return {"model": name, "model_id": model_id, "checkpoint_sha256": sha, **{k: training[k] for k in (
        "wall_seconds", "seconds_per_epoch", "epochs_run", "best_epoch", "stopped_early", "best_val_map_macro",
        "frozen_val_map_macro", "n_train", "n_val", "runtime", "nearid")}, "snapshot_hash": tset.snapshot_hash(),
        "n_individuals": len(set(tset.labels))}


def _mirror_and_distractor_makers(cat: Catalogue, srcs: list[Any], tset: TrainingSet,
                                  photo: Callable[[int], np.ndarray], *, seed: int, need_distractors: bool):
    """Makers of each photo's mirror (the flipped foreground cutout, or the flipped photo without a mask)
    and near-identity distractor (another individual's foreground on this photo's inpainted background)."""
    from core.training import composite_distractor
    from core.variants import flip_horizontal, make_variant
    from db.embeddings import inpainted_background, load_mask

    def mirror_of(i: int) -> np.ndarray:
        rgb = photo(i)
        mask = load_mask(cat, srcs[i], shape=rgb.shape[:2])
        return make_variant(rgb, mask, "mirror") if mask is not None else flip_horizontal(rgb)

    if not need_distractors:
        return mirror_of, None
    missing = [s.image_id for s in srcs if not s.mask_path]
    if missing:
        raise CatalogueError(f"NearID needs a mask for every training photo (its distractors paste one animal onto "
                             f"another's background); {len(missing)} photo(s) have none, e.g. image {missing[0]}: "
                             "mask them first in the Mask tab (or `rosette mask`)")
    from core.inpainting import create_inpainter, default_inpainter_name

    inpainter = create_inpainter(default_inpainter_name())
    rng = np.random.default_rng(seed)
    labels = np.asarray(tset.labels)
    partner = {}
    for i in range(len(srcs)):
        others = np.flatnonzero(labels != labels[i])
        partner[i] = int(others[rng.integers(len(others))])

    def distractor_of(i: int) -> np.ndarray:
        rgb = photo(i)
        mask = load_mask(cat, srcs[i], shape=rgb.shape[:2])
        background = inpainted_background(cat, srcs[i], rgb, mask, inpainter=inpainter, seed=0)
        j = partner[i]
        other = photo(j)
        return composite_distractor(background, other, load_mask(cat, srcs[j], shape=other.shape[:2]))

    return mirror_of, distractor_of


def _single_species(cat: Catalogue, image_ids: Sequence[int]) -> int | None:
    with cat.unit_of_work() as s:
        ids = set(s.scalars(select(Image.species_id).where(Image.id.in_(list(image_ids)))))
    return ids.pop() if len(ids) == 1 else None


def decisions_since_active(cat: Catalogue, species_id: int = 1) -> dict[str, Any]:
    """Confirmed identities (standing 'same' and 'new individual' decisions) on the species' photos since the
    active model's training snapshot was taken (all of them when the active model was never trained)."""
    from sqlalchemy import func

    from db.models import DecisionKind, MatchDecision
    from db.species import active_model_name

    name = active_model_name(cat, species_id)
    with cat.unit_of_work() as s:
        model = s.scalar(select(Model).where(Model.name == name))
        since = model.created_at if model is not None and model.data_snapshot else None
        q = (select(func.count()).select_from(MatchDecision).join(Image, Image.id == MatchDecision.query_image_id)
             .where(MatchDecision.undone_at.is_(None), Image.species_id == species_id,
                    MatchDecision.decision.in_([DecisionKind.same, DecisionKind.new_individual])))
        if since is not None:
            q = q.where(MatchDecision.created_at > since)
        n = int(s.scalar(q) or 0)
    return {"active_model": name, "since": since.isoformat() if since else None, "confirmed": n}


def list_models(cat: Catalogue) -> list[Model]:
    with cat.unit_of_work() as s:
        return list(s.scalars(select(Model).order_by(Model.id)))


def trained_model_names(cat: Catalogue) -> list[str]:
    """Names of trained models that are not archived and whose checkpoint is on disk, newest first."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Model.name, Model.checkpoint_path).where(
            Model.head.is_not(None), Model.status != ModelStatus.archived).order_by(Model.id.desc())).all()
    return [name for name, path in rows if path and (cat.data_dir / path).exists()]


def trained_model_row(cat: Catalogue, name: str) -> Model | None:
    with cat.unit_of_work() as s:
        return s.scalar(select(Model).where(Model.name == name, Model.head.is_not(None)))


def summary_json(result: dict[str, Any]) -> str:
    return json.dumps(result, default=float)
