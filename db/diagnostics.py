"""Diagnostics runner: which evidence a model uses (DESIGN section 4, Axis 1,
Axis 2, flank protocols), on a benchmark's test split, stored in ``evaluations``.

Per run: masks are made for test photos that have none (with the named masker);
embeddings of every variant go through the feature cache; inpainted backgrounds
are made by the named inpainter for each seed and their mAP averaged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from db.benchmarks import load_benchmark
from db.embeddings import embed_images, get_backbone, load_benchmark_fit_ids
from db.evaluation import store_evaluation
from db.masks import mask_images
from db.session import Catalogue

DIAGNOSTIC_VARIANTS = ("full_rgb", "foreground_only", "background_only", "background_inpainted", "silhouette", "mirror")


def run_diagnose(cat: Catalogue, *, backbone: str, benchmark: str, masker: str | None = None,
                 inpainter: str | None = None, seeds: tuple[int, ...] = (0,), user: str = "curator",
                 progress: Callable[[float, str], None] | None = None,
                 should_cancel: Callable[[], bool] | None = None, store: bool = True) -> dict[str, Any]:
    from core.diagnostics import context_reliance, flank_protocols, laterality, map_by_variant, mirrored_query_ratio
    from core.inpainting import create_inpainter, default_inpainter_name
    from core.masking import default_masker_name
    from core.similarity import pairwise_scores

    def report(frac: float, msg: str) -> None:
        if progress:
            progress(frac, msg)

    data = load_benchmark(cat, benchmark, split="test")
    masker_name = masker or default_masker_name()
    report(0.0, f"masking test photos without a mask ({masker_name})")
    mask_run = mask_images(cat, masker=masker_name, image_ids=data.image_ids, only_missing=True, user=user,
                           should_cancel=should_cancel,
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
                           should_cancel=should_cancel,
                           progress=lambda d, t, lo=lo, hi=hi, label=label: report(lo + (hi - lo) * d / max(t, 1), f"{label} {d}/{t}"))
        embeddings[variant if variant != "background_inpainted" else f"background_inpainted@{seed}"] = emb

    report(0.96, "computing diagnostics")
    per_seed = {k: v for k, v in embeddings.items() if k.startswith("background_inpainted@")}
    plain = {k: v for k, v in embeddings.items() if not k.startswith("background_inpainted@")}
    maps = map_by_variant(plain, data.labels, metric=metric, sightings=sightings)
    bg_maps = map_by_variant(per_seed, data.labels, metric=metric, sightings=sightings)
    maps["background_inpainted"] = float(np.mean(list(bg_maps.values())))
    axis1 = context_reliance(maps)
    lat = laterality(embeddings["foreground_only"], embeddings["mirror"], data.labels, metric=metric)
    mq = mirrored_query_ratio(embeddings["foreground_only"], embeddings["mirror"], data.labels, metric=metric,
                              sightings=sightings)
    sim_full = pairwise_scores(embeddings["full_rgb"], embeddings["full_rgb"], metric=metric)
    flanks = flank_protocols(sim_full, data.labels, data.flanks, sightings=sightings, exclude_same_sighting=True)
    flanks_with = flank_protocols(sim_full, data.labels, data.flanks, sightings=sightings, exclude_same_sighting=False)
    lat_d = lat.to_dict(per_image=True)
    result: dict[str, Any] = {
        "model": model.config.name,
        "benchmark": data.name,
        "variant": "all",
        "n_images": len(data),
        "metric": metric,
        "bg_fg": axis1["bg_fg"], "bg_fg_band": axis1["bg_fg_band"],
        "bg_sil_fg": axis1["bg_sil_fg"], "bg_sil_fg_band": axis1["bg_sil_fg_band"],
        "map_macro_by_variant": maps,
        "map_macro_background_inpainted_by_seed": {k.split("@")[1]: v for k, v in bg_maps.items()},
        "mirror_sim_mean": lat_d["mirror_sim_mean"], "mirror_sim_std": lat_d["mirror_sim_std"],
        "mirror_tier": lat_d["mirror_tier"], "danger_margin_positive": lat_d["danger_margin_positive"],
        "mirrored_query_ratio": mq.get("ratio") if isinstance(mq, dict) else mq,
        "mirrored_query": mq,
        "within_flank": flanks["within_flank"], "cross_flank": flanks["cross_flank"],
        "cross_within_ratio": flanks.get("cross_within_ratio"),
        "within_flank_with_same_sighting": flanks_with["within_flank"],
        "cross_flank_with_same_sighting": flanks_with["cross_flank"],
        "per_image": {"image_ids": data.image_ids, "labels": data.labels,
                      **{k: lat_d[k] for k in ("mirror_sim", "nn_sim", "nn_index", "danger_margin") if k in lat_d}},
        "masker": masker_name, "mask_run": {k: mask_run[k] for k in ("masked", "flagged", "todo")},
        "inpainter": inp.name, "inpainter_config": inp.config, "seeds": list(seeds),
        "model_config": model.config.to_dict(),
    }
    if store:
        result["evaluation_id"] = store_evaluation(cat, result, kind="diagnose", masker=masker_name,
                                                   inpainter=f"{inp.name} seeds {list(seeds)}")
    report(1.0, "done")
    return result
