"""Diagnostics runner: which evidence a model uses (docs/DESIGN.md section 4, Axis 1,
Axis 2, flank protocols), on a benchmark's test split, stored in ``evaluations``.

Per run: masks are made for test photos that have none (with the named masker, kept in the cache
unless the curator asks to keep them in the catalogue);
embeddings of every variant go through the feature cache; inpainted backgrounds
are made by the named inpainter for each seed and their mAP averaged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select

from core.inspect.diagnostics import (
    DIAGNOSTIC_VARIANTS,
    INPAINTED_AT,
    diagnose_embeddings,
    own_variant_scores,
    photo_mirror_check,
)
from core.inspect.inpainting import create_inpainter, default_inpainter_name
from core.inspect.masking import default_masker_name
from core.inspect.variants import VARIANTS
from db.identify.benchmarks import load_benchmark, load_benchmark_fit_ids
from db.catalogue import CatalogueError
from db.embeddings import embed_images, get_backbone, sources_for, variant_loader
from db.identify.evaluation import store_evaluation
from db.inspect.masks import diagnostic_masks
from db.models import Image, Individual
from db.session import Catalogue

__all__ = ["DIAGNOSTIC_VARIANTS", "PhotoDiagnosis", "diagnose_photo", "run_diagnose"]  # the variants: core.inspect.diagnostics


def run_diagnose(cat: Catalogue, *, backbone: str, benchmark: str, masker: str | None = None,
                 inpainter: str | None = None, seeds: tuple[int, ...] = (0,), user: str = "curator",
                 progress: Callable[[float, str], None] | None = None,
                 should_cancel: Callable[[], bool] | None = None, store: bool = True,
                 keep_masks: bool = False) -> dict[str, Any]:
    """Diagnose ``backbone`` on ``benchmark``'s test photos. Photos without a catalogue mask are masked into the
    diagnostic's cache, not the catalogue, unless ``keep_masks`` (see :func:`db.inspect.masks.diagnostic_masks`); the
    figures come from :func:`core.inspect.diagnostics.diagnose_embeddings`."""

    def report(frac: float, msg: str) -> None:
        if progress:
            progress(frac, msg)

    data = load_benchmark(cat, benchmark, split="test")
    masker_name = masker or default_masker_name()
    report(0.0, f"masking test photos without a mask ({masker_name})")
    sources, mask_run = diagnostic_masks(cat, data.image_ids, masker=masker_name, keep_in_catalogue=keep_masks,
                                         user=user, should_cancel=should_cancel,
                                         progress=lambda d, t: report(0.25 * d / max(t, 1), f"masking {d}/{t}"))
    model = get_backbone(cat, backbone, fit_image_ids=load_benchmark_fit_ids(cat, benchmark))
    inp_name = inpainter or default_inpainter_name()
    inp = create_inpainter(inp_name)
    metric = getattr(model, "metric", "cosine")
    sightings = data.sightings if any(data.sightings) else None

    embeddings: dict[str, np.ndarray] = {}
    steps = [(v, 0) for v in DIAGNOSTIC_VARIANTS if v != "background_inpainted"] + \
            [("background_inpainted", s) for s in seeds]
    for i, (variant, seed) in enumerate(steps):
        lo, hi = 0.25 + 0.7 * i / len(steps), 0.25 + 0.7 * (i + 1) / len(steps)
        label = variant if variant != "background_inpainted" else f"{variant} (seed {seed})"
        emb = embed_images(cat, data.image_ids, backbone=model, variant=variant, inpainter=inp, seed=seed,
                           should_cancel=should_cancel, sources=sources,
                           progress=lambda d, t, lo=lo, hi=hi, label=label: report(lo + (hi - lo) * d / max(t, 1), f"{label} {d}/{t}"))
        embeddings[variant if variant != "background_inpainted" else f"{INPAINTED_AT}{seed}"] = emb

    report(0.96, "computing diagnostics")
    figures = diagnose_embeddings(embeddings, data.labels, data.flanks, metric=metric, sightings=sightings)
    per_image = figures.pop("per_image")
    result: dict[str, Any] = {
        "model": model.config.name,
        "benchmark": data.name,
        "variant": "all",
        "n_images": len(data),
        "metric": metric,
        **figures,
        "per_image": {"image_ids": data.image_ids, "labels": data.labels, **per_image},
        "masker": masker_name,
        "mask_run": {k: mask_run.get(k, 0) for k in ("masked", "cached", "flagged", "empty", "retried", "todo",
                                                      "kept_in_catalogue")},
        "inpainter": inp.name, "inpainter_config": inp.config, "seeds": list(seeds),
        "model_config": model.config.to_dict(),
    }
    if store:
        result["evaluation_id"] = store_evaluation(cat, result, kind="diagnose", masker=masker_name,
                                                   inpainter=f"{inp.name} seeds {list(seeds)}")
    report(1.0, "done")
    return result


@dataclass
class PhotoDiagnosis:
    """The numbers of one photo's diagnosis (see :func:`diagnose_photo`)."""

    image_id: int
    name: str
    individual: str | None
    mask_source: str | None
    mask_details: dict[str, Any]
    pictures: dict[str, np.ndarray]
    own_scores: dict[str, float | None]
    mirror_sim: float
    nn_sim: float | None
    danger_margin: float | None
    nn_image_id: int | None
    nn_individual: str | None
    nn_thumb: str | None
    own_gallery: int
    own_same_sighting_included: bool
    other_gallery: int
    other_cutouts: int
    metric: str


def _photo_facts(cat: Catalogue, image_id: int) -> dict[str, Any]:
    with cat.unit_of_work() as s:
        img = s.get(Image, int(image_id))
        if img is None:
            raise CatalogueError(f"There is no photo #{image_id}.")
        ind = s.get(Individual, img.individual_id) if img.individual_id else None
        return {"name": img.original_name, "individual_id": img.individual_id, "individual": ind.name if ind else None,
                "sighting_id": img.sighting_id, "mask_path": img.mask_path, "mask_source": img.mask_source,
                "mask_details": dict(img.mask_details or {}), "species_id": img.species_id}


def diagnose_photo(cat: Catalogue, image_id: int, *, model: Any, inpainter: Any, seed: int = 0,
                   progress: Callable[[float, str], None] | None = None) -> PhotoDiagnosis:
    """Variants, own-individual scores and the mirror check of one masked photo x.

    With s the model's score (cosine, or exp(-d) for Lorentz heads) and e_v(x) the
    embedding of variant v of x:

    - own_score(v) = max over the other photos y of x's individual of s(e_v(x), e_full_rgb(y)):
      how strongly that variant alone still points to the right animal, with whole
      photos as the gallery. Photos from x's own sighting are left out when the
      individual has photos from other sightings (same place and moment would inflate it).
      None when x has no individual or it has no other photo.
    - mirror_sim = s(e_foreground_only(x), e_mirror(x)).
    - nn_sim = max over photos y of *other* (active) individuals of x's species of s(e_mirror(x), g(y)),
      g(y) = e_foreground_only(y) when y has a mask, else e_full_rgb(y) (counted in
      ``other_cutouts`` so the panel can say how fair the comparison was).
    - danger_margin = nn_sim - mirror_sim (> 0: the mirrored photo looks more like another animal).

    The scores come from :func:`core.inspect.diagnostics.own_variant_scores` and :func:`core.inspect.diagnostics.photo_mirror_check`.
    """
    def report(frac: float, msg: str) -> None:
        if progress:
            progress(frac, msg)

    facts = _photo_facts(cat, image_id)
    if not facts["mask_path"]:
        raise ValueError(f"Photo #{image_id} has no mask yet: make one in the Mask tab first.")
    metric = getattr(model, "metric", None) or getattr(getattr(model, "config", None), "metric", "cosine")
    src = sources_for(cat, [int(image_id)])[0]

    emb: dict[str, np.ndarray] = {}
    pictures: dict[str, np.ndarray] = {}
    for i, v in enumerate(VARIANTS):
        report(0.6 * i / len(VARIANTS), v)
        pictures[v] = variant_loader(cat, src, v, inpainter=inpainter, seed=seed)[1]()
        emb[v] = embed_images(cat, [src.image_id], backbone=model, variant=v, inpainter=inpainter, seed=seed)[0]

    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.individual_id, Image.sighting_id, Image.mask_path, Individual.name,
                                Image.thumb_path, Image.blob_path)
                         .join(Individual, Image.individual_id == Individual.id)
                         .where(Individual.active.is_(True), Image.id != src.image_id,
                                Image.species_id == facts["species_id"]).order_by(Image.id)).all()

    # own individual: every variant against whole photos of the same animal
    own = [r for r in rows if facts["individual_id"] is not None and r.individual_id == facts["individual_id"]]
    other_sightings = [r for r in own if facts["sighting_id"] is None or r.sighting_id != facts["sighting_id"]]
    same_included = bool(own) and not other_sightings
    own = other_sightings or own
    own_scores: dict[str, float | None] = dict.fromkeys(VARIANTS)
    if own:
        report(0.65, f"comparing with {len(own)} photo(s) of the same individual")
        g = embed_images(cat, [r.id for r in own], backbone=model, variant="full_rgb")
        own_scores = own_variant_scores({v: emb[v] for v in VARIANTS}, g, metric=metric)

    # other individuals: the mirrored cut-out against their cut-outs (full photos where no mask exists)
    others = [r for r in rows if r.individual_id != facts["individual_id"]]
    cut = [r for r in others if r.mask_path]
    whole = [r for r in others if not r.mask_path]
    nn_sim = margin = None
    nn_row = None
    query_label = f"individual {facts['individual_id']}" if facts["individual_id"] else "the photo itself"
    if others:
        report(0.75, f"comparing the mirrored photo with {len(others)} photo(s) of other individuals")
        parts = []
        if cut:
            parts.append(embed_images(cat, [r.id for r in cut], backbone=model, variant="foreground_only"))
        if whole:
            parts.append(embed_images(cat, [r.id for r in whole], backbone=model, variant="full_rgb"))
        ordered = cut + whole
        mirror_sim, nn_sim, margin, nn_index = photo_mirror_check(
            emb["foreground_only"], emb["mirror"], query_label, metric=metric, gallery=np.concatenate(parts),
            gallery_labels=[f"individual {r.individual_id}" for r in ordered])
        nn_row = ordered[int(nn_index)]
    else:
        mirror_sim = photo_mirror_check(emb["foreground_only"], emb["mirror"], query_label, metric=metric)[0]
    report(1.0, "done")
    return PhotoDiagnosis(
        image_id=src.image_id, name=facts["name"], individual=facts["individual"], mask_source=facts["mask_source"],
        mask_details=facts["mask_details"], pictures=pictures, own_scores=own_scores, mirror_sim=mirror_sim,
        nn_sim=nn_sim, danger_margin=margin, nn_image_id=nn_row.id if nn_row else None,
        nn_individual=nn_row.name if nn_row else None,
        nn_thumb=(cat.blobs.existing(nn_row.thumb_path) or cat.blobs.existing(nn_row.blob_path)) if nn_row else None,
        own_gallery=len(own), own_same_sighting_included=same_included, other_gallery=len(others),
        other_cutouts=len(cut), metric=metric)
