"""Compare two models on one benchmark with paired statistics (docs/DESIGN.md section 4, "Comparing two models").

Both models embed the benchmark's test split; every query's AP, hit@1 and hit@5 are computed under the
benchmark protocol (all-vs-all, same-sighting photos excluded). Per endpoint: a paired Wilcoxon signed-rank
test per seed (A and B may each be several models, one per training seed, paired in order), Fisher's
combination across seeds, Holm's correction across the endpoints, and a bootstrap CI of the mean
difference (A - B). The verdict is one sentence per endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.metrics import all_vs_all_valid, average_precision, first_hit_rank, relevance
from core.similarity import pairwise_scores
from db.identify.benchmarks import load_benchmark, load_benchmark_fit_ids
from db.embeddings import embed_images, get_backbone
from db.session import Catalogue
from db.identify.spots import load_pipeline, pipeline_similarity

ENDPOINTS = ("map", "cmc1", "cmc5")
PRIMARY = "cmc1"


def test_split_scores(cat: Catalogue, model: str, benchmark: str) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """(test split, model, all-vs-all score matrix, valid mask) under the benchmark protocol: self and
    same-sighting pairs excluded. Shared by the comparison and the calibration's benchmark pairs."""

    data = load_benchmark(cat, benchmark, split="test")
    pipeline = load_pipeline(cat, model)
    if pipeline is not None:  # a fused pipeline: its calibrated spot-evidence scores, same protocol
        sim, valid = pipeline_similarity(cat, pipeline, data.image_ids, data.sightings, data.flanks)
        return data, _PipelineAsModel(pipeline), sim, valid
    backbone = get_backbone(cat, model, fit_image_ids=load_benchmark_fit_ids(cat, benchmark))
    emb = embed_images(cat, data.image_ids, backbone=backbone)
    sim = pairwise_scores(emb, emb, metric=backbone.config.metric)
    has = any(s for s in data.sightings)
    valid = all_vs_all_valid(len(data.labels), sightings=data.sightings if has else None)
    return data, backbone, sim, valid


class _PipelineAsModel:
    """What comparison and calibration read of a model (``config.name``, ``config.metric``), for a pipeline."""

    def __init__(self, pipeline: Any) -> None:
        from types import SimpleNamespace

        self.pipeline = pipeline
        self.config = SimpleNamespace(name=pipeline.name, metric="probability")


def per_query_values(cat: Catalogue, model: str, benchmark: str) -> dict[str, Any]:
    """Per-query AP, hit@1, hit@5 of ``model`` on the test split (NaN for queries without a positive)."""
    data, backbone, sim, valid = test_split_scores(cat, model, benchmark)
    rel = relevance(data.labels, data.labels)
    ap = average_precision(sim, rel, valid=valid)
    rank = first_hit_rank(sim, rel, valid=valid)
    hit = lambda k: np.where(np.isnan(rank), np.nan, (rank <= k).astype(float))  # noqa: E731
    return {"map": ap, "cmc1": hit(1), "cmc5": hit(5), "image_ids": data.image_ids, "labels": data.labels,
            "model": backbone.config.name}


def identity_balanced(values: np.ndarray, labels: Sequence[str]) -> float:
    """Mean over identities of the mean of that identity's queries (NaN queries left out): the leaderboard's
    macro figure, from the same per-query values the paired tests use."""
    v = np.asarray(values, dtype=np.float64)
    lab = np.asarray(labels)
    keep = ~np.isnan(v)
    per = [v[keep & (lab == ident)].mean() for ident in np.unique(lab[keep])]
    return float(np.mean(per)) if per else float("nan")


def compare(cat: Catalogue, a: str | Sequence[str], b: str | Sequence[str], *, benchmark: str,
            alpha: float = 0.05, seed: int = 0) -> dict[str, Any]:
    """Compare A and B (a model name each, or one model per seed) on ``benchmark``'s test split."""
    from core.identify.stats import bootstrap_ci, compare_models, holm, verdict  # lazy: scipy, statsmodels (start-up)

    names_a = [a] if isinstance(a, str) else list(a)
    names_b = [b] if isinstance(b, str) else list(b)
    if len(names_a) != len(names_b) or not names_a:
        raise ValueError(f"give as many B models as A models (one per seed): {len(names_a)} vs {len(names_b)}")
    if names_a == names_b:
        raise ValueError("choose two different models to compare")
    va = [per_query_values(cat, m, benchmark) for m in names_a]
    vb = [per_query_values(cat, m, benchmark) for m in names_b]
    label_a, label_b = "+".join(names_a), "+".join(names_b)
    out: dict[str, Any] = {"a": label_a, "b": label_b, "benchmark": benchmark, "n_seeds": len(names_a),
                           "endpoints": {}}
    pvals = {}
    for ep in ENDPOINTS:
        res = compare_models([x[ep] for x in va], [y[ep] for y in vb])
        diffs = np.concatenate([x[ep] - y[ep] for x, y in zip(va, vb)])
        lo, hi = bootstrap_ci(diffs, seed=seed)
        out["endpoints"][ep] = {
            # per-query means (micro): what the paired tests compare; the identity-balanced means (macro) are
            # what the leaderboard shows, so both are given and labelled
            "mean_a": float(np.nanmean(np.concatenate([x[ep] for x in va]))),
            "mean_b": float(np.nanmean(np.concatenate([y[ep] for y in vb]))),
            "macro_a": float(np.mean([identity_balanced(x[ep], x["labels"]) for x in va])),
            "macro_b": float(np.mean([identity_balanced(y[ep], y["labels"]) for y in vb])),
            "mean_diff": res["mean_diff"], "ci_low": lo, "ci_high": hi, "p_combined": res["p_combined"],
            "consistent_direction": res["consistent_direction"],
            "n_queries": int(np.sum(~np.isnan(diffs))),
            "n_a_better": int(sum(s["n_a_better"] for s in res["per_seed"])),
            "n_b_better": int(sum(s["n_b_better"] for s in res["per_seed"])),
            "per_seed_p": [s["p"] for s in res["per_seed"]],
        }
        pvals[ep] = res["p_combined"]
    for ep, h in holm(pvals, alpha=alpha).items():
        e = out["endpoints"][ep]
        e["p_holm"], e["significant"] = h["p_holm"], h["reject"]
        e["verdict"] = verdict(ep, name_a=label_a, name_b=label_b, mean_diff=e["mean_diff"], p_holm=h["p_holm"],
                               alpha=alpha, ci=(e["ci_low"], e["ci_high"]))
    out["verdict"] = out["endpoints"][PRIMARY]["verdict"]
    out["ap_differences"] = [float(d) for d in (va[0]["map"] - vb[0]["map"]) if not np.isnan(d)]
    return out


def difference_figure(result: dict[str, Any]) -> Any:
    """Plotly histogram of per-query AP differences (A - B) with the mean and its bootstrap CI."""
    import plotly.graph_objects as go

    d = result["ap_differences"]
    e = result["endpoints"]["map"]
    fig = go.Figure(go.Histogram(x=d, nbinsx=40, name="queries", marker={"color": "#d97706"}))
    for x, dash, name in ((e["mean_diff"], "solid", "mean"), (e["ci_low"], "dot", "95% CI"),
                          (e["ci_high"], "dot", None)):
        if name:
            fig.add_vline(x=x, line_dash=dash, line_color="#1f2937", annotation_text=name)
        else:
            fig.add_vline(x=x, line_dash=dash, line_color="#1f2937")
    fig.add_vline(x=0, line_color="#9ca3af")
    fig.update_layout(title=f"AP per query: {result['a']} minus {result['b']} (right of 0: A better)", height=320,
                      margin={"l": 40, "r": 20, "t": 50, "b": 40}, xaxis_title="AP difference", yaxis_title="queries")
    return fig
