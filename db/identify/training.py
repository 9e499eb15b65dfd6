"""Training a model from the catalogue: the training set snapshot, the run, the registered model.

``train_model`` takes the photos of a benchmark's train split -- or of several
benchmarks' (``"nyala,lions"``: one model, each benchmark a source of the
identity-aware sampler, identities namespaced by benchmark) -- or the catalogue's
confirmed individuals, never a benchmark's test photos, and hands them, with their
masks and inpainted backgrounds where the loss needs them, to
:func:`core.identify.training_loop.run_training`, which holds out a fixed identity-covering
validation set, trains a head (and optionally the last blocks of the backbone),
keeps ``last.pt`` / ``best.pt`` checkpoints in the job folder (a killed run resumes
from ``last.pt``) and returns the best epoch's checkpoint. This module registers it
as a candidate model whose row holds the backbone, head, loss, checkpoint hash, full
config, data snapshot, device and wall time. The model's name then works everywhere
a backbone name does.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select

from core.identify.backbones import BACKBONES, DEFAULT_BACKBONE
from core.identify.backbones.trained import trained_config
from core.identify.backbones.weights import sha256_file
from core.identify.heads import head_spec
from core.inspect.inpainting import create_inpainter, default_inpainter_name
from core.identify.training import (
    TrainConfig,
    calibration_holdout_split,
    composite_distractor,
    freeing_gpu,
    resolve_calibration_holdout,
)
from core.identify.training_loop import (
    TRAINABLE_BACKBONE_HINT,
    NotTrainableError,
    TrainingHooks,
    TrainingPhotos,
    TrainingSet,
    atomic_torch_save,
    model_name,
    run_training,
)
from core.inspect.variants import flip_horizontal, make_variant
from db.identify.benchmarks import load_benchmark
from db.catalogue import CatalogueError
from db.embeddings import inpainted_background, load_mask, load_photo, pixel_key_of, sources_for
from db.models import DecisionKind, Image, Individual, MatchDecision, Model, ModelStatus, Sighting, Species
from db.session import Catalogue
from db.species import active_model_name

__all__ = ["MIN_TRAIN_PHOTOS", "TRAINABLE_BACKBONE_HINT", "TrainingHooks", "TrainingSet", "benchmark_list",
           "check_model_name", "decisions_since_active", "hard_negative_pairs", "list_models", "summary_json",
           "train_model", "trained_model_names", "trained_model_row",
           "training_set"]  # TrainingSet, TrainingHooks: core.identify.training_loop, re-exported

MIN_TRAIN_PHOTOS = 8


def _test_image_ids(cat: Catalogue, benchmark: str) -> set[int]:
    return set(load_benchmark(cat, benchmark, split="test").image_ids)


def benchmark_list(benchmark: str | None) -> list[str]:
    """The benchmarks of a training run: ``None`` none, ``"nyala"`` one, ``"nyala,lions"`` several."""
    return [b.strip() for b in benchmark.split(",") if b.strip()] if benchmark else []


def training_set(cat: Catalogue, *, source: str = "benchmark", benchmark: str | None = None,
                 image_ids: Sequence[int] | None = None, species_id: int | None = None) -> TrainingSet:
    """The photos to train on.

    ``source="benchmark"``: the train split of ``benchmark``; several comma-separated benchmarks
    (``"nyala,lions"``) give one training set of all their train splits, each photo's source its benchmark and
    its identity namespaced by it (``"nyala/A"``, so identity A of one benchmark is not A of another; a single
    benchmark keeps its labels). ``source="catalogue"``: every photo of an active individual, its source the
    individual's species. Either way every named benchmark's test photos are left out and counted, and asking
    for one explicitly (``image_ids``, which restricts either) is refused. ``hard_negative_pairs`` are the
    curators' standing "not the same" decisions between two identities of the set (newest first).
    """
    if source not in ("benchmark", "catalogue"):
        raise CatalogueError(f"unknown training source {source!r}; expected benchmark or catalogue")
    benches = benchmark_list(benchmark)
    test_of = {b: _test_image_ids(cat, b) for b in benches}
    test_ids = set().union(*test_of.values())
    if image_ids is not None and test_ids & set(image_ids):
        bad = sorted(test_ids & set(image_ids))
        owner = next(b for b in benches if bad[0] in test_of[b])
        raise CatalogueError(f"refusing to train on {len(bad)} photo(s) of benchmark {owner!r}'s test split "
                             f"(e.g. image {bad[0]}): a model must never see the photos it is evaluated on")
    excluded = 0
    rows: list[tuple[int, str, str | None, str]] = []  # (image id, label, sighting, source)
    if source == "benchmark":
        if not benches:
            raise CatalogueError("training from a benchmark needs its name (--benchmark NAME)")
        several = len(benches) > 1
        taken: dict[int, str] = {}
        for b in benches:
            data = load_benchmark(cat, b, split="train")
            if not data.image_ids:
                raise CatalogueError(f"benchmark {b!r} has no train split (a test-only benchmark); "
                                     "train from the catalogue or another benchmark")
            for iid, label, sighting in zip(data.image_ids, data.labels, data.sightings):
                if iid in test_ids:  # another benchmark's test photo
                    excluded += 1
                    continue
                if iid in taken:
                    raise CatalogueError(f"benchmarks {taken[iid]!r} and {b!r} share training photos (e.g. image "
                                         f"{iid}): the same animal would count as two identities; train on "
                                         "benchmarks of different photos")
                taken[iid] = b
                rows.append((iid, f"{b}/{label}" if several else str(label),
                             f"{b}/{sighting}" if several and sighting else sighting, b))
    else:
        with cat.unit_of_work() as s:
            q = (select(Image.id, Individual.name, Sighting.key, Species.name)
                 .join(Individual, Image.individual_id == Individual.id)
                 .outerjoin(Species, Species.id == Individual.species_id)
                 .outerjoin(Sighting, Image.sighting_id == Sighting.id)
                 .where(Individual.active.is_(True)).order_by(Image.id))
            if species_id is not None:
                q = q.where(Image.species_id == species_id)
            rows = [(r[0], str(r[1]), r[2], r[3] or "catalogue") for r in s.execute(q).all()]
        excluded = sum(1 for r in rows if r[0] in test_ids)
        rows = [r for r in rows if r[0] not in test_ids]
    if image_ids is not None:
        keep = set(image_ids)
        rows = [r for r in rows if r[0] in keep]
    with cat.unit_of_work() as s:
        meta = {r.id: (pixel_key_of(r.content_hash, r.box), r.solidity) for r in s.scalars(
            select(Image).where(Image.id.in_([r[0] for r in rows])))}
    if len(rows) < MIN_TRAIN_PHOTOS or len({r[1] for r in rows}) < 2:
        raise CatalogueError(f"training needs at least {MIN_TRAIN_PHOTOS} photos of at least two individuals; "
                             f"this training set has {len(rows)} photo(s) of {len({r[1] for r in rows})}")
    ids, labels = [r[0] for r in rows], [r[1] for r in rows]
    return TrainingSet(source=source, benchmark=",".join(benches) or None, image_ids=ids, labels=labels,
                       sightings=[r[2] for r in rows], content_hashes=[meta[r[0]][0] for r in rows],
                       solidity=[meta[r[0]][1] for r in rows], excluded_test_photos=excluded,
                       sources=[r[3] for r in rows], hard_negative_pairs=hard_negative_pairs(cat, ids, labels))


def hard_negative_pairs(cat: Catalogue, image_ids: Sequence[int], labels: Sequence[str]) -> list[tuple[str, str]]:
    """The curators' standing "not the same" decisions as pairs of training labels, newest first, each pair once:
    the query photo's identity (its label when the photo is in the set, else its individual's) against the
    rejected identity (the candidate photo's label, else the candidate individual's). An individual's label is
    the one most of its photos in the set carry. Decisions whose two sides are not both in the set (or are one
    identity) are left out."""
    label_of = {int(i): str(lab) for i, lab in zip(image_ids, labels)}
    with cat.unit_of_work() as s:
        decisions = s.execute(
            select(MatchDecision.query_image_id, MatchDecision.candidate_image_id,
                   MatchDecision.candidate_individual_id)
            .where(MatchDecision.decision == DecisionKind.not_same, MatchDecision.undone_at.is_(None))
            .order_by(MatchDecision.created_at.desc(), MatchDecision.id.desc())).all()
        if not decisions:
            return []
        wanted = set(label_of) | {d[0] for d in decisions} | {d[1] for d in decisions if d[1] is not None}
        individual_of: dict[int, int | None] = {}
        wanted_list = sorted(wanted)
        for start in range(0, len(wanted_list), 10000):
            individual_of.update(s.execute(select(Image.id, Image.individual_id).where(
                Image.id.in_(wanted_list[start:start + 10000]))).tuples().all())
    counts: dict[int, Counter[str]] = {}
    for iid, lab in label_of.items():
        ind = individual_of.get(iid)
        if ind is not None:
            counts.setdefault(ind, Counter())[lab] += 1

    def of_individual(ind: int | None) -> str | None:
        c = counts.get(ind) if ind is not None else None
        return min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] if c else None

    def of_image(iid: int | None) -> str | None:
        if iid is None:
            return None
        return label_of.get(iid) or of_individual(individual_of.get(iid))

    pairs: list[tuple[str, str]] = []
    seen: set[frozenset[str]] = set()
    for query, cand_image, cand_individual in decisions:
        a = of_image(query)
        b = label_of.get(cand_image) if cand_image in label_of else None
        b = b or of_individual(cand_individual) or of_image(cand_image)
        if a is None or b is None or a == b or frozenset((a, b)) in seen:
            continue
        seen.add(frozenset((a, b)))
        pairs.append((a, b))
    return pairs


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,150}$")


def check_model_name(cat: Catalogue, name: str) -> None:
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
    """Train (:func:`core.identify.training_loop.run_training`, checkpointing every epoch) on the training set, register
    the best epoch as a candidate model; returns a summary."""
    t_start = time.perf_counter()
    if backbone == "sift_vlad":
        raise CatalogueError(TRAINABLE_BACKBONE_HINT)
    name = name or hooks.extra.get("name") or model_name(backbone, config, hooks.job_id)
    head_spec(config.head)  # an unknown head is refused before the training set is read
    tset = training_set(cat, source=source, benchmark=benchmark, image_ids=image_ids, species_id=species_id)
    held_for_calibration: list[int] = []
    share, why = resolve_calibration_holdout(config.calibration_holdout, source=source,
                                             n_identities=len(set(tset.labels)))
    config = dataclasses.replace(config, calibration_holdout=share)
    if share == 0:
        hooks.log(why)
    if config.calibration_holdout > 0:
        if source != "benchmark":
            raise CatalogueError("a hold-out for calibration keeps some of a benchmark's train identities out of "
                                 "training: train from a benchmark (--benchmark NAME), or leave the hold-out out")
        is_held = calibration_holdout_split(tset.labels, share=config.calibration_holdout, seed=config.seed)
        held_for_calibration = [i for i, h in zip(tset.image_ids, is_held) if h]
        n_animals = len({lab for lab, h in zip(tset.labels, is_held) if h})
        tset = training_set(cat, source=source, benchmark=benchmark, species_id=species_id,
                            image_ids=[i for i, h in zip(tset.image_ids, is_held) if not h])
        hooks.log(f"{why}: {len(held_for_calibration)} photos of {n_animals} identities")
    counts = dict(sorted(Counter(tset.sources or []).items()))
    if len(counts) > 1:
        hooks.log("sources: " + ", ".join(f"{name} ({n} photos)" for name, n in counts.items()))
    if config.sampler == "identity-aware":
        hooks.log(f"hard negatives: {len(tset.hard_negative_pairs)} pair(s) of identities curators marked "
                  "\"not the same\" come first; the frozen model's highest-ranked wrong identities fill the rest")
    srcs = sources_for(cat, tset.image_ids)
    photos = TrainingPhotos(
        load=lambda i: load_photo(cat, srcs[i]),
        makers=lambda photo, need_distractors: _mirror_and_distractor_makers(
            cat, srcs, tset, photo, seed=config.seed, need_distractors=need_distractors))
    try:
        run = run_training(tset, photos, backbone=backbone, config=config, name=name, device=device, hooks=hooks,
                           cache_dir=cat.cache_dir)
    except NotTrainableError as exc:
        raise CatalogueError(str(exc)) from None
    # ---- best epoch -> registered model
    check_model_name(cat, name)
    rel = Path("models") / f"{name}.pt"
    atomic_torch_save(run.checkpoint, cat.data_dir / rel)
    sha = sha256_file(cat.data_dir / rel)
    cfg = trained_config(name, base_config=run.base_config, head=run.head, embed_dim=run.embed_dim,
                         metric=run.metric, checkpoint_sha256=sha, blocks=run.blocks, loss=run.loss,
                         checkpoint_name=rel.name)
    wall = time.perf_counter() - t_start
    training = run.record(config, wall_seconds=wall, job_id=hooks.job_id)
    training["calibration_holdout_image_ids"] = held_for_calibration
    with cat.unit_of_work() as s:
        row = Model(name=name, backbone=backbone, head=config.head, loss=run.loss, config=cfg.to_dict(),
                    checkpoint_path=str(rel), checkpoint_hash=sha, training_config=training,
                    data_snapshot=_snapshot(tset), job_id=hooks.job_id, status=ModelStatus.candidate,
                    species_id=_single_species(cat, tset.image_ids))
        s.add(row)
        s.commit()
        model_id = row.id
    freeing_gpu(run.device)
    hooks.log(f"registered model {name} (id {model_id}, checkpoint sha256 {sha[:12]}...) in {wall:.1f} s")
    return {"model": name, "model_id": model_id, "checkpoint_sha256": sha, **{k: training[k] for k in (
        "wall_seconds", "seconds_per_epoch", "epochs_run", "best_epoch", "stopped_early", "best_val_map_macro",
        "frozen_val_map_macro", "n_train", "n_val", "runtime", "nearid")}, "snapshot_hash": tset.snapshot_hash(),
        "n_individuals": len(set(tset.labels)), "sources": counts,
        "hard_negative_pairs": len(tset.hard_negative_pairs)}


def _snapshot(tset: TrainingSet) -> dict[str, Any]:
    """The model row's data snapshot: the training set's, with each source's photo count (``sources``) and the
    curators' hard-negative pairs it held."""
    return {**tset.snapshot(), "sources": dict(sorted(Counter(tset.sources or []).items())),
            "hard_negative_pairs": [list(p) for p in tset.hard_negative_pairs]}


def _mirror_and_distractor_makers(cat: Catalogue, srcs: list[Any], tset: TrainingSet,
                                  photo: Callable[[int], np.ndarray], *, seed: int, need_distractors: bool):
    """Makers of each photo's mirror (the flipped foreground cutout, or the flipped photo without a mask)
    and near-identity distractor (another individual's foreground on this photo's inpainted background)."""
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
