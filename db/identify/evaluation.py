"""Benchmark evaluation runner: embed a benchmark's test split with a backbone,
score all-vs-all, compute the metrics and store them in ``evaluations`` with
the exact model config, so every number shown can be traced back. The maths over the embeddings
(:func:`core.identify.evaluation.evaluate_embeddings`) are pure functions in core."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from core.identify.evaluation import RERANK_METHODS, check_flank, evaluate_embeddings, similarity_for
from db.identify.benchmarks import load_benchmark, load_benchmark_fit_ids
from db.embeddings import embed_images, get_backbone, sources_for, variant_loader
from db.models import Benchmark, Evaluation, Model
from db.session import Catalogue

__all__ = ["RERANK_METHODS", "evaluate_embeddings", "list_evaluations", "run_evaluation", "similarity_for",
           "store_evaluation"]  # the array maths live in core.identify.evaluation; re-exported for their older importers


def run_evaluation(cat: Catalogue, *, backbone: str, benchmark: str, variant: str = "full_rgb",
                   rerank: str = "none", inpainter: Any = None, masker: str | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   should_cancel: Callable[[], bool] | None = None, store: bool = True,
                   flank: str = "any") -> dict[str, Any]:
    """Evaluate ``backbone`` on the test split of ``benchmark`` (all-vs-all, docs/DESIGN.md section 4).

    The headline figures exclude gallery photos from the query's own sighting;
    ``with_same_sighting`` holds the figures with them (their gap is a context-leakage signal). ``flank``
    (any, same, cross) restricts each query's gallery to its own flank or the other one; the setting is stored
    with the figures (``metrics["flank"]``).
    """
    check_flank(flank)
    if rerank not in RERANK_METHODS:
        raise ValueError(f"unknown re-ranking {rerank!r}; expected one of {', '.join(RERANK_METHODS)}")
    data = load_benchmark(cat, benchmark, split="test")
    model = get_backbone(cat, backbone, fit_image_ids=load_benchmark_fit_ids(cat, benchmark))
    emb = embed_images(cat, data.image_ids, backbone=model, variant=variant, inpainter=inpainter,
                       progress=progress, should_cancel=should_cancel)
    metric = model.config.metric  # cosine, or exp(-d) for hyperbolic (Lorentz) models
    patches = None
    if rerank == "patch_ot":
        if not getattr(model, "has_patches", False):
            raise ValueError(f"patch_ot re-ranking needs a model with a patch head (trained with --head idsim); "
                             f"{model.config.name} has none")
        patches = model.embed_patches([variant_loader(cat, src, variant, inpainter=inpainter)[1]()
                                       for src in sources_for(cat, data.image_ids)])
    metrics = evaluate_embeddings(emb, data.labels, data.sightings, metric=metric, rerank=rerank, patches=patches,
                                  flanks=data.flanks, flank=flank)
    result = {
        **metrics,
        "metric": metric,
        "model": model.config.name,
        "variant": variant,
        "benchmark": data.name,
        "rerank": rerank,
        "model_config": model.config.to_dict(),
    }
    if store:
        result["evaluation_id"] = store_evaluation(cat, result, kind="retrieval", masker=masker,
                                                   inpainter=getattr(inpainter, "name", None))
    return result


def store_evaluation(cat: Catalogue, result: dict[str, Any], *, kind: str, masker: str | None = None,
                     inpainter: str | None = None) -> int:
    with cat.unit_of_work() as s:
        model_id = s.scalar(select(Model.id).where(Model.name == result["model"]))
        bench_id = s.scalar(select(Benchmark.id).where(Benchmark.name == result["benchmark"]))
        metrics = {k: v for k, v in result.items() if k != "model_config"}
        ev = Evaluation(model_id=model_id, model_name=result["model"],
                        model_config=result.get("model_config", {}), benchmark_id=bench_id,
                        benchmark_name=result["benchmark"], kind=kind, variant=result.get("variant", "full_rgb"),
                        masker=masker, inpainter=inpainter, metrics=metrics)
        s.add(ev)
        s.commit()
        return ev.id


def list_evaluations(cat: Catalogue, *, benchmark: str | None = None, kind: str | None = None,
                     limit: int = 200) -> list[Evaluation]:
    with cat.unit_of_work() as s:
        q = select(Evaluation).order_by(Evaluation.id.desc()).limit(limit)
        if benchmark:
            q = q.where(Evaluation.benchmark_name == benchmark)
        if kind:
            q = q.where(Evaluation.kind == kind)
        return list(s.scalars(q))
