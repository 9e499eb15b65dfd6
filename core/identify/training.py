"""Training heads (and the last blocks of a backbone) from identity labels -- pure torch, no DB.

Two modes (``TrainConfig.blocks``): 0 trains the head only on cached frozen features (seconds per epoch on a
CPU); N > 0 (or -1 for all) also fine-tunes the backbone's last N blocks on freshly augmented photos. Both use
no horizontal flips anywhere (a flip turns a left flank into a right one), a fixed validation set from the
training animals (:func:`validation_split`), early stopping on validation macro mAP, and per-epoch seeds, so a
resumed run draws the same batches as an uninterrupted one.

The two modes, the batches and the augmentation (:func:`augment`): docs/training.md."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from core.identify.heads import head_spec
from core.metrics import all_vs_all_metrics
from core.similarity import pairwise_scores

ALL_BLOCKS = -1
SAMPLERS = ("m-per-class", "identity-aware")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (saved with the model)."""

    head: str = "supcon"
    loss: str | None = None  # default: the head's own loss
    blocks: int = 0  # 0 head only on cached features; N the last N blocks; -1 the whole backbone
    epochs: int = 30
    identities_per_batch: int = 16
    per_identity: int = 4
    lr: float = 1e-3
    backbone_lr: float = 1e-4
    weight_decay: float = 1e-4
    views: int = 8  # cached views per photo in head-only mode (view 0 un-augmented)
    patience: int = 10  # epochs without a better validation mAP before stopping
    seed: int = 0
    anti_symmetry: float = 0.0  # lambda of the anti-symmetry term (supcon / triplet / arcface)
    anti_symmetry_tau: float = 0.3
    out_dim: int = 512
    val_per_identity: int = 2
    val_min_photos: int = 4
    steps_per_epoch: int | None = None  # default ceil(n_train / batch)
    # identity-focused learning: adapters, the idsim patch term and the sampler
    adapter: str | None = None  # "lora": peft LoRA adapters on the backbone instead of unfreezing blocks
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.05
    patch_weight: float = 1.0  # lambda of the idsim head's patch-transport term
    sampler: str = "identity-aware"  # identity-aware (pre-scheduled, hard negatives; the default, so
    # curators' rejections become hard negatives) | m-per-class (pml MPerClassSampler)
    sources_per_batch: int | None = None  # identity-aware: K sources per batch (default: every source, at most 2)
    hard_negatives: int = 2  # identity-aware: k hard-negative identities each anchor brings
    #: share of the benchmark's train identities kept out of training, for a spot pipeline's calibration (0: none;
    #: None: :func:`resolve_calibration_holdout` decides)
    calibration_holdout: float | None = None

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> TrainConfig:
        """The config of a job's (or a recipe's) params: its fields that are set, the rest default; other keys (the
        backbone, the data source, who asked) are not the training config's. Validated, so a bad value is refused
        when the job is asked for, not when a worker starts it."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names and v is not None})

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError("epochs must be at least 1")
        if self.blocks < ALL_BLOCKS:
            raise ValueError("blocks must be 0 (head only), a positive number of blocks, or -1 (all)")
        if self.identities_per_batch < 2:
            raise ValueError("identities_per_batch must be at least 2 (a batch needs negatives)")
        if self.per_identity < 2:
            raise ValueError("per_identity must be at least 2 (a batch needs positives)")
        if self.views < 1:
            raise ValueError("views must be at least 1")
        if self.adapter not in (None, "lora"):
            raise ValueError(f"unknown adapter {self.adapter!r}; expected lora")
        if self.adapter is not None and self.blocks != 0:
            raise ValueError("--adapter lora trains adapters on a frozen backbone: leave --blocks at 0")
        if self.lora_rank < 1:
            raise ValueError("the LoRA rank must be at least 1")
        if self.lora_alpha <= 0:
            raise ValueError("the LoRA alpha must be positive")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError("the LoRA dropout must be in [0, 1)")
        if self.patch_weight < 0:
            raise ValueError("the patch weight must not be negative")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; expected one of {', '.join(SAMPLERS)}")
        if self.sources_per_batch is not None and self.sources_per_batch < 1:
            raise ValueError("sources per batch must be at least 1")
        if self.hard_negatives < 0:
            raise ValueError("hard negatives per anchor must not be negative")
        if self.calibration_holdout is not None:
            check_calibration_holdout(self.calibration_holdout, allow_none=True)

    @property
    def trains_backbone(self) -> bool:
        """Whether photos go through the backbone every step (fine-tuned blocks or adapters), not cached views."""
        return self.blocks != 0 or self.adapter is not None

    def resolved_loss(self) -> str:

        return self.loss or head_spec(self.head).default_loss

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["loss"] = self.resolved_loss()
        return d


def parse_blocks(text: str | int) -> int:
    """How many backbone blocks to fine-tune, as typed: a number (0 = the head only) or 'all' (:data:`ALL_BLOCKS`)."""
    if str(text).lower() == "all":
        return ALL_BLOCKS
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"--blocks must be a number or 'all', got {text!r}") from None
    if n < 0:
        raise ValueError("--blocks must be 0 (head only), a positive number, or 'all'")
    return n


def resolve_device(device: str | None) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; ``cuda`` on a machine without one is a clear error."""
    device = (device or "auto").lower()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but this machine has no usable CUDA GPU; use --device cpu or auto")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise ValueError(f"unknown device {device!r}; expected auto, cpu or cuda")
    return torch.device(device)


def runtime_info(device: torch.device) -> dict[str, Any]:
    """Device, torch and CUDA versions (recorded in every training result)."""
    info: dict[str, Any] = {"device": device.type, "torch": torch.__version__, "cuda": torch.version.cuda}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    info["threads"] = torch.get_num_threads()
    return info


# --------------------------------------------------------------------------- data selection

def check_calibration_holdout(share: float, *, allow_none: bool = False) -> None:
    """A hold-out share for calibration is in (0, 0.5) (0 means none where ``allow_none``)."""
    if allow_none and share == 0:
        return
    if not 0.0 < float(share) < 0.5:
        raise ValueError(f"the share of train identities held out for calibration must be between 0 and 0.5 "
                         f"(e.g. 0.2), got {share}")


AUTO_CALIBRATION_HOLDOUT = 0.2
#: fewer train identities than this and the automatic hold-out is left out: a fifth of them would starve training
AUTO_HOLDOUT_MIN_IDENTITIES = 50


def resolve_calibration_holdout(share: float | None, *, source: str, n_identities: int) -> tuple[float, str]:
    """(the hold-out share to use, why). A share asked for is kept. Unasked: a fifth of a benchmark's train
    identities, so that a spot pipeline built on the model (which any benchmark-trained model may get) calibrates
    the global scores on animals the model never learned, where they are as uncertain as on new animals; none
    when training on the catalogue's decisions (its pipelines recalibrate on the curators' decided pairs) or on
    fewer than :data:`AUTO_HOLDOUT_MIN_IDENTITIES` identities."""
    if share is not None:
        return float(share), ("no hold-out for calibration (asked for)" if share == 0 else
                              f"held out for calibration as asked: {share:g} of the train identities")
    if source != "benchmark":
        return 0.0, "no hold-out for calibration: training on the catalogue's decisions"
    if n_identities < AUTO_HOLDOUT_MIN_IDENTITIES:
        return 0.0, (f"no hold-out for calibration: {n_identities} train identities, fewer than "
                     f"{AUTO_HOLDOUT_MIN_IDENTITIES} (--hold-out-for-calibration SHARE asks for one)")
    return AUTO_CALIBRATION_HOLDOUT, (f"held out for calibration by default: {AUTO_CALIBRATION_HOLDOUT:g} of the "
                                      f"{n_identities} train identities (--hold-out-for-calibration 0 trains on all)")


def calibration_holdout_split(labels: Sequence[str], *, share: float, seed: int = 0) -> np.ndarray:
    """Boolean ``is_held``: whole identities, a seeded ``share`` of those with at least two photos (an animal with
    one photo gives no same-animal pair to calibrate on), kept out of training so that a spot pipeline built on
    the model calibrates its global scores on animals the model never learned."""
    check_calibration_holdout(share)
    labels = [str(x) for x in labels]
    counts: dict[str, int] = {}
    for lab in labels:
        counts[lab] = counts.get(lab, 0) + 1
    eligible = sorted(lab for lab, n in counts.items() if n >= 2)
    n_held = int(round(share * len(counts)))
    held = set(np.random.default_rng(seed).permutation(eligible)[:min(n_held, max(len(eligible) - 2, 0))].tolist())
    return np.array([lab in held for lab in labels], dtype=bool)


def validation_split(labels: Sequence[str], sightings: Sequence[str | None] | None = None, *,
                     per_identity: int = 2, min_photos: int = 4, seed: int = 0) -> np.ndarray:
    """Boolean ``is_val``: a fixed, identity-covering held-out set from the training animals.

    Every identity with at least ``min_photos`` photos gives ``per_identity`` of them
    (from different sightings where it has them, so each held-out photo has a
    positive outside its own sighting); the rest stay for training. Seeded.
    """
    labels = [str(x) for x in labels]
    sightings = list(sightings) if sightings is not None else [None] * len(labels)
    rng = np.random.default_rng(seed)
    by_id: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        by_id.setdefault(lab, []).append(i)
    is_val = np.zeros(len(labels), dtype=bool)
    for lab in sorted(by_id):
        idx = by_id[lab]
        if len(idx) < min_photos:
            continue
        order = [idx[j] for j in rng.permutation(len(idx))]
        chosen: list[int] = []
        seen: set[Any] = set()
        for i in order:  # first pass: one photo per sighting
            key = sightings[i] if sightings[i] not in (None, "") else f"__{i}"
            if key not in seen:
                chosen.append(i)
                seen.add(key)
            if len(chosen) == per_identity:
                break
        for i in order:
            if len(chosen) == per_identity:
                break
            if i not in chosen:
                chosen.append(i)
        is_val[chosen] = True
    return is_val


def encode_labels(labels: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Identity names -> integer codes 0..K-1 (sorted names) and the names."""
    names = sorted({str(x) for x in labels})
    index = {n: i for i, n in enumerate(names)}
    return np.array([index[str(x)] for x in labels], dtype=np.int64), names


def identity_batches(codes: np.ndarray, *, per_identity: int, identities_per_batch: int, steps: int,
                     seed: int) -> list[np.ndarray]:
    """``steps`` identity-uniform batches of indices (pml ``MPerClassSampler``, seeded).

    Each batch holds ``min(identities_per_batch, n_identities)`` identities x ``per_identity``
    photos (drawn with replacement when an identity has fewer).
    """
    from pytorch_metric_learning import samplers

    n_ids = len(np.unique(codes))
    if n_ids < 2:
        raise ValueError("training needs at least two identities")
    batch = min(identities_per_batch, n_ids) * per_identity
    state = np.random.get_state()
    np.random.seed(seed % (2 ** 32))  # pml's sampler draws from numpy's global generator
    try:
        sampler = samplers.MPerClassSampler(codes, m=per_identity, batch_size=batch,
                                            length_before_new_iter=batch * steps)
        flat = np.fromiter(iter(sampler), dtype=np.int64)
    finally:
        np.random.set_state(state)
    return [flat[i:i + batch] for i in range(0, len(flat) - batch + 1, batch)]


# --------------------------------------------------------------------------- augmentation (no flips)

def augment(image: np.ndarray, *, size: tuple[int, int], generator: torch.Generator,
            scale: tuple[float, float] = (0.6, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3),
            jitter: float = 0.25, max_rotation: float = 10.0) -> np.ndarray:
    """One HxWx3 uint8 photo -> an augmented ``size`` (H, W) uint8 photo. Never flipped."""
    from torchvision.transforms.v2 import functional as TF

    img = torch.from_numpy(np.array(image, dtype=np.uint8, copy=True)).permute(2, 0, 1)
    h, w = img.shape[1:]

    def uniform(lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(torch.rand((), generator=generator))

    area = h * w
    top, left, ch, cw = 0, 0, h, w
    for _ in range(10):
        target = area * uniform(*scale)
        aspect = math.exp(uniform(math.log(ratio[0]), math.log(ratio[1])))
        cw_try, ch_try = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < cw_try <= w and 0 < ch_try <= h:
            cw, ch = cw_try, ch_try
            top = int(torch.randint(0, h - ch + 1, (), generator=generator))
            left = int(torch.randint(0, w - cw + 1, (), generator=generator))
            break
    img = TF.resized_crop(img, top, left, ch, cw, list(size), antialias=True)
    if max_rotation > 0:
        img = TF.rotate(img, uniform(-max_rotation, max_rotation), fill=0)
    if jitter > 0:
        img = TF.adjust_brightness(img, uniform(1 - jitter, 1 + jitter))
        img = TF.adjust_contrast(img, uniform(1 - jitter, 1 + jitter))
        img = TF.adjust_saturation(img, uniform(1 - jitter, 1 + jitter))
    return img.permute(1, 2, 0).contiguous().numpy()


def view_generator(seed: int, item_key: str, view: int) -> torch.Generator:
    """The generator of one cached view: fixed by (seed, photo content key, view)."""
    import hashlib

    digest = hashlib.sha256(f"{seed}:{item_key}:{view}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


# --------------------------------------------------------------------------- backbone surgery

def backbone_blocks(model: nn.Module) -> list[nn.Module]:
    """The backbone's blocks in forward order (timm ``blocks`` / ``stages`` / ``layers``, one level flattened)."""
    for attr in ("blocks", "stages", "layers"):
        seq = getattr(model, attr, None)
        if isinstance(seq, (nn.Sequential, nn.ModuleList)) and len(seq):
            flat: list[nn.Module] = []
            for child in seq:
                if isinstance(child, (nn.Sequential, nn.ModuleList)):
                    flat.extend(child)
                else:
                    flat.append(child)
            return flat
    raise ValueError(f"{type(model).__name__} exposes no blocks to fine-tune; train a head only (blocks 0)")


_TAIL = ("conv_head", "bn2", "norm", "fc_norm", "head_drop")


def set_trainable_blocks(model: nn.Module, blocks: int) -> int:
    """Freeze everything, then unfreeze the last ``blocks`` blocks and the layers after them
    (-1 or more than there are: the whole backbone). Returns the number of trainable parameters."""
    model.requires_grad_(False)
    if blocks == 0:
        return 0
    flat = backbone_blocks(model)
    if blocks == ALL_BLOCKS or blocks >= len(flat):
        model.requires_grad_(True)
    else:
        for block in flat[-blocks:]:
            block.requires_grad_(True)
        for name in _TAIL:
            part = getattr(model, name, None)
            if isinstance(part, nn.Module):
                part.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def features_for(model: nn.Module, x: torch.Tensor, *, kind: str) -> torch.Tensor:
    """Backbone forward -> pooled N x C (``kind="pooled"``) or tokens N x T x C (``"tokens"``)."""
    feats = model.forward_features(x)
    if kind == "pooled":
        if hasattr(model, "forward_head"):
            out = model.forward_head(feats, pre_logits=True)
        else:
            out = feats.mean(dim=(2, 3)) if feats.ndim == 4 else feats[:, 0]
        return out.flatten(1).float()
    if feats.ndim == 4:
        if getattr(model, "output_fmt", "NCHW") == "NHWC":
            return feats.flatten(1, 2).float()
        return feats.flatten(2).transpose(1, 2).float()
    if feats.ndim == 3:
        return feats[:, int(getattr(model, "num_prefix_tokens", 0)):, :].float()
    raise RuntimeError(f"unexpected forward_features shape {tuple(feats.shape)}")


@torch.no_grad()
def embed_features(backbone: Any, images: Sequence[np.ndarray], *, kind: str, batch_size: int = 32,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Frozen backbone features of photos (already at the input size or not): N x C or N x T x C on CPU."""
    out = []
    for start in range(0, len(images), batch_size):
        x = backbone.preprocess(list(images[start:start + batch_size]))
        with torch.inference_mode():
            out.append(features_for(backbone.model, x, kind=kind).to("cpu", dtype))
    return torch.cat(out) if out else torch.empty(0)


# --------------------------------------------------------------------------- the model being trained

class TrainableModel(nn.Module):
    """head(features) for cached features, or head(backbone(x)) when the backbone's last blocks train."""

    def __init__(self, head: nn.Module, *, backbone_model: nn.Module | None = None, kind: str = "pooled") -> None:
        super().__init__()
        self.head = head
        self.backbone = backbone_model
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.backbone is not None:
            x = features_for(self.backbone, x, kind=self.kind)
        return self.head(x.float())

    def forward_with_patches(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The global embedding and the patch set (a head with ``forward_with_patches``: idsim)."""
        if self.backbone is not None:
            x = features_for(self.backbone, x, kind=self.kind)
        return self.head.forward_with_patches(x.float())

    def training_mode(self) -> None:
        """Eval mode everywhere (no BatchNorm statistics updates: frozen layers stay exactly frozen), except the
        LoRA adapters' dropout, which is part of their training."""
        self.train(False)
        for name, module in self.named_modules():
            if isinstance(module, nn.Dropout) and "lora_dropout" in name:
                module.train(True)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The head, and the backbone when it is being fine-tuned (what a checkpoint must keep)."""
        return {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}


@dataclass
class TrainState:
    """What a checkpoint holds to resume exactly where a run stopped."""

    epoch: int = 0  # epochs finished
    step: int = 0
    best_map: float = -1.0
    best_epoch: int = 0
    bad_epochs: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False


def val_map(embeddings: np.ndarray, labels: Sequence[str], sightings: Sequence[str | None] | None, *,
            metric: str) -> dict[str, float]:
    """All-vs-all macro / micro mAP and CMC@1 of the validation set, same-sighting pairs excluded."""
    sim = pairwise_scores(embeddings, embeddings, metric=metric)
    has = sightings is not None and any(s not in (None, "") for s in sightings)
    res = all_vs_all_metrics(sim, list(labels), sightings=list(sightings) if has else None,
                             exclude_same_sighting=True).to_dict()
    return {"map_macro": float(res["map_macro"] or 0.0), "map_micro": float(res["map_micro"] or 0.0),
            "cmc1_macro": float((res.get("cmc_macro") or {}).get("1") or 0.0), "n_queries": int(res["n_queries"])}


StepInputs = Callable[[np.ndarray, int, torch.Generator], dict[str, Any]]


def fit(model: TrainableModel, loss_fn: nn.Module, optimizer: torch.optim.Optimizer, *, codes: np.ndarray,
        config: TrainConfig, step_inputs: StepInputs, embed_val: Callable[[], np.ndarray] | None,
        val_labels: Sequence[str], val_sightings: Sequence[str | None] | None, metric: str,
        state: TrainState | None = None,
        on_epoch: Callable[[TrainState, dict[str, Any], bool], None] | None = None,
        on_step: Callable[[int, int, float], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        batches: Callable[[int], Sequence[np.ndarray]] | None = None) -> TrainState:
    """The training loop shared by both modes.

    ``step_inputs(batch_indices, epoch, generator)`` returns ``{"x": inputs, "labels": codes,
    **loss extras}`` where extras are inputs to embed with the model (``mirror`` -> ``mirror_embeddings``,
    ``distractors`` -> ``distractors``) or passed as they are (``solidity``). After each epoch the
    validation set is embedded, the row appended to ``state.history`` and ``on_epoch(state, row, is_best)``
    called. ``batches(epoch)`` gives the epoch's batches (row indices) when they are pre-scheduled (the
    identity-aware sampler); by default pml's ``MPerClassSampler`` draws them (:func:`identity_batches`). (the caller saves checkpoints there). Stops after ``config.epochs``, after ``config.patience``
    epochs without a better validation mAP, or when ``should_stop()``.
    """
    state = state or TrainState()
    n_ids = len(np.unique(codes))
    batch = min(config.identities_per_batch, n_ids) * config.per_identity
    steps = config.steps_per_epoch or max(1, math.ceil(len(codes) / batch))
    while state.epoch < config.epochs and not state.stopped_early:
        epoch = state.epoch + 1
        t0 = time.perf_counter()
        torch.manual_seed(config.seed * 100003 + epoch)
        gen = torch.Generator().manual_seed(config.seed * 100003 + epoch)
        model.training_mode()  # no BN statistics updates: frozen layers stay exactly frozen
        losses = []
        epoch_batches = batches(epoch) if batches is not None else identity_batches(
            codes, per_identity=config.per_identity, identities_per_batch=config.identities_per_batch, steps=steps,
            seed=config.seed * 7919 + epoch)
        for i, idx in enumerate(epoch_batches):
            if should_stop is not None and should_stop():
                raise InterruptedError("training stopped on request")
            inputs = step_inputs(idx, epoch, gen)
            labels = inputs.pop("labels")
            extras: dict[str, Any] = {}
            if getattr(loss_fn, "needs_patches", False):
                emb, extras["patches"] = model.forward_with_patches(inputs.pop("x"))
            else:
                emb = model(inputs.pop("x"))
            if "mirror" in inputs:
                extras["mirror_embeddings"] = model(inputs.pop("mirror"))
            if "distractors" in inputs:
                d = inputs.pop("distractors")  # N x K x ...
                k = d.shape[1]
                extras["distractors"] = model(d.flatten(0, 1)).view(d.shape[0], k, -1)
            extras.update(inputs)
            loss = loss_fn(emb, labels, **extras)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"the loss became {float(loss)} at epoch {epoch}, step {i + 1}; "
                                         "try a lower learning rate")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            state.step += 1
            if on_step is not None:
                on_step(epoch, i + 1, losses[-1])
        row: dict[str, Any] = {"epoch": epoch, "step": state.step, "train_loss": float(np.mean(losses)),
                               "seconds": time.perf_counter() - t0}
        if embed_val is not None:
            with torch.no_grad():
                row.update({f"val_{k}": v for k, v in val_map(embed_val(), val_labels, val_sightings,
                                                              metric=metric).items()})
        score = row.get("val_map_macro", -row["train_loss"])
        is_best = score > state.best_map
        if is_best:
            state.best_map, state.best_epoch, state.bad_epochs = score, epoch, 0
        else:
            state.bad_epochs += 1
        state.epoch = epoch
        state.history.append(row)
        if state.bad_epochs >= config.patience:
            state.stopped_early = True
        if on_epoch is not None:
            on_epoch(state, row, is_best)
    return state


def make_optimizer(model: TrainableModel, config: TrainConfig, *, riemannian: bool = False,
                   extra_params: Sequence[nn.Parameter] = ()) -> torch.optim.Optimizer:
    """AdamW (Riemannian Adam from geoopt for the Lorentz head) with the head at ``lr``
    and fine-tuned backbone blocks at ``backbone_lr``."""
    groups = [{"params": [p for p in model.head.parameters() if p.requires_grad] + list(extra_params),
               "lr": config.lr}]
    if model.backbone is not None:
        bb = [p for p in model.backbone.parameters() if p.requires_grad]
        if bb:
            groups.append({"params": bb, "lr": config.backbone_lr})
    if riemannian:
        import geoopt

        return geoopt.optim.RiemannianAdam(groups, weight_decay=config.weight_decay)
    return torch.optim.AdamW(groups, weight_decay=config.weight_decay)


def near_identity_scores(anchor: np.ndarray, labels: Sequence[str], distractor: np.ndarray, *,
                         metric: str = "cosine") -> dict[str, float]:
    """NearID's SSR and PA from embeddings of the photos and of each photo's near-identity distractor.

    For every ordered pair (i, j) of distinct photos of one identity the directed margin is
    m_ij = s(p_i, p_j) - s(p_i, n_i), n_i the distractor made for photo i.
    PA = share of positive margins over all pairs; SSR = share of identities (with a pair) whose
    every margin is positive.
    """
    labels = np.asarray([str(x) for x in labels])
    sim = pairwise_scores(anchor, anchor, metric=metric)
    d = np.array([pairwise_scores(anchor[i:i + 1], distractor[i:i + 1], metric=metric)[0, 0]
                  for i in range(len(anchor))])
    margins_all, ok_ids, n_ids = [], 0, 0
    for lab in np.unique(labels):
        idx = np.flatnonzero(labels == lab)
        if len(idx) < 2:
            continue
        m = [sim[i, j] - d[i] for i in idx for j in idx if i != j]
        margins_all.extend(m)
        n_ids += 1
        ok_ids += int(all(v > 0 for v in m))
    if not margins_all:
        return {"ssr": float("nan"), "pa": float("nan"), "n_pairs": 0, "n_identities": 0}
    return {"ssr": ok_ids / n_ids, "pa": float(np.mean(np.array(margins_all) > 0)), "n_pairs": len(margins_all),
            "n_identities": n_ids}


def composite_distractor(background: np.ndarray, other_rgb: np.ndarray, other_mask: np.ndarray) -> np.ndarray:
    """A near-identity distractor: another individual's foreground pasted onto the anchor's background.

    The other photo and its mask are resized to the background's size; out = mask ? other : background.
    """
    import cv2

    h, w = background.shape[:2]
    rgb = cv2.resize(np.ascontiguousarray(other_rgb), (w, h), interpolation=cv2.INTER_AREA)
    mask = cv2.resize(other_mask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST).astype(bool)
    return np.where(mask[:, :, None], rgb, background).astype(np.uint8)


def freeing_gpu(device: torch.device) -> None:
    """Release cached GPU memory at the end of a job."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()

