"""Benchmarks and evaluations: freeze a benchmark, evaluate a model on one (at once, or as a job), list the
stored evaluations with their provenance and chart them. The Benchmarks tab and ``rosette benchmark`` /
``rosette eval`` call these; the actions take a request of ``jobs.requests.benchmarks``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from core.identify.evaluation import FLANK_SETTINGS, RERANK_METHODS
from db.identify.benchmarks import create_benchmark as store_benchmark
from db.identify.benchmarks import list_benchmarks
from db.catalogue import CatalogueError
from db.identify.evaluation import list_evaluations, run_evaluation
from db.inspect.leaderboard import config_provenance
from db.models import Benchmark, Evaluation
from db.session import Catalogue
from db.identify.spots import is_pipeline
from jobs.actions.common import curator_name
from jobs.actions.match import utc_text
from jobs.queue import submit
from jobs.requests.benchmarks import CreateBenchmarkRequest, EvaluateRequest  # noqa: F401

EVALUATION_VARIANTS: list[tuple[str, str]] = [
    ("Whole photo (full_rgb)", "full_rgb"),
    ("Animal only, background blacked out (foreground_only)", "foreground_only"),
    ("Background only, animal blacked out (background_only)", "background_only"),
    ("Outline only (silhouette)", "silhouette"),
    ("Mirrored animal (mirror)", "mirror"),
]
RERANK_WORDS = {"none": "No re-ranking", "k_reciprocal": "k-reciprocal re-ranking",
                "aqe": "Average query expansion (aqe)",
                "patch_ot": "Patch transport on the top 20 (patch_ot; idsim models)"}
RERANK_CHOICES: list[tuple[str, str]] = [(RERANK_WORDS.get(m, m), m) for m in RERANK_METHODS]
FLANK_WORDS = {"any": "Any flank", "same": "Same flank only", "cross": "Other flank only (left <-> right)"}
FLANK_CHOICES: list[tuple[str, str]] = [(FLANK_WORDS[f], f) for f in FLANK_SETTINGS]
SPLIT_CHOICES: list[tuple[str, str]] = [
    ("New individuals (identity-disjoint: test animals are unseen)", "identity"),
    ("Known individuals, new sightings (sighting-disjoint)", "sighting"),
]

BENCHMARK_HEADERS = ["Benchmark", "Split", "Photos", "Test photos", "Individuals", "Test individuals", "Seed",
                     "Test share", "Source", "Created (UTC)"]
EVALUATION_HEADERS = ["#", "When (UTC)", "Benchmark", "Model", "Variant", "Re-ranking", "Flank", "mAP per individual",
                      "mAP per photo", "Top-1 hit", "Top-5 hit", "mAP with same sighting", "Queries",
                      "Provenance"]


def benchmark_names(cat: Catalogue) -> list[str]:
    with cat.unit_of_work() as s:
        return [b.name for b in list_benchmarks(s)]


def benchmark_list(cat: Catalogue) -> list[dict[str, Any]]:
    """Stored benchmarks as {name, split, and their config (photo and identity counts, seed, test share,
    source)} (``rosette benchmark list``)."""
    with cat.unit_of_work() as s:
        return [{"name": b.name, "split": b.split_kind, **(b.config or {})} for b in list_benchmarks(s)]


def benchmark_rows(cat: Catalogue) -> list[list[object]]:
    """Stored benchmarks as rows under BENCHMARK_HEADERS."""
    with cat.unit_of_work() as s:
        out = []
        for b in list_benchmarks(s):
            c = b.config or {}
            out.append([b.name, b.split_kind, c.get("n_images"), c.get("n_test"), c.get("n_identities"),
                        c.get("n_test_identities"), c.get("seed"), c.get("test_fraction"), c.get("source"),
                        utc_text(b.created_at)])
        return out


@dataclass
class BenchmarkOutcome:
    benchmark: Benchmark  # the stored benchmark (its config holds the counts)
    message: str


def create_benchmark(cat: Catalogue, request: CreateBenchmarkRequest) -> BenchmarkOutcome:
    """Freeze a named benchmark with its split: every assigned catalogue photo, or a manifest's photos."""
    b = store_benchmark(cat, request.name, manifest=request.manifest, split=request.split,
                        test_fraction=request.test_fraction, seed=request.seed, user=curator_name(request.user),
                        replace=request.replace)
    c = b.config
    return BenchmarkOutcome(b, (f"Benchmark {b.name} created: {c['n_images']} photos of {c['n_identities']} "
                                f"individuals, {c['n_test']} test photos of {c['n_test_identities']} individuals "
                                f"({b.split_kind} split, seed {c['seed']})."))


def evaluate(cat: Catalogue, request: EvaluateRequest, *, progress: Callable[[int, int], None] | None = None,
             should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Evaluate at once (``rosette eval``, and the ``evaluate`` job that :func:`launch_evaluation` queues): the
    figures, stored as an evaluation (its id under ``evaluation_id``)."""
    return run_evaluation(cat, backbone=request.backbone, benchmark=request.benchmark, variant=request.variant,
                          rerank=request.rerank, progress=progress, should_cancel=should_cancel, flank=request.flank)


def is_fused_pipeline(cat: Catalogue, name: str) -> bool:
    """Whether ``name`` is a fused pipeline (global model + spot evidence), evaluated with spot evidence."""
    return is_pipeline(cat, name)


def launch_evaluation(cat: Catalogue, request: EvaluateRequest) -> tuple[int, str]:
    """Queue the evaluation as a job (the Benchmarks tab's form); returns (job id, message). The job stores the
    request (``to_dict``) and the worker rebuilds it."""
    request = replace(request, user=curator_name(request.user))
    if request.benchmark not in benchmark_names(cat):
        raise CatalogueError(f"There is no benchmark named {request.benchmark!r}.")
    if request.variant not in {v for _, v in EVALUATION_VARIANTS}:
        raise ValueError(f"unknown image variant {request.variant!r}")
    job_id = submit(cat, "evaluate", request.to_dict())
    return job_id, (f"Evaluation of {request.backbone} on {request.benchmark} ({request.variant}, re-ranking "
                    f"{request.rerank}, {FLANK_WORDS[request.flank].lower()}) queued as job #{job_id}; follow it in the "
                    "Jobs tab. Its numbers appear here "
                    "when it finishes.")


def config_fingerprint(config: dict[str, Any]) -> str:
    """Short fingerprint of a stored model config: its own ``fingerprint`` if saved, else sha256 of its JSON."""
    if not config:
        return "unknown"
    for key in ("fingerprint", "config_fingerprint"):
        if config.get(key):
            return str(config[key])[:16]
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def provenance_text(ev: Evaluation) -> str:
    """Where every number of one evaluation comes from, in one line."""
    c = ev.model_config or {}
    if c.get("pipeline"):  # a fused pipeline: global model + calibrated spot evidence
        return " · ".join([config_provenance(c), f"masks {ev.masker or 'none'}", f"benchmark {ev.benchmark_name}"])
    parts = [f"model {ev.model_name}", f"config {config_fingerprint(c)}",
             f"weights {c.get('weight_source') or 'unknown'}"]
    if c.get("weights_sha256"):
        parts.append(f"weights sha256 {str(c['weights_sha256'])[:12]}")
    if c.get("input_size"):
        parts.append(f"input {c.get('input_size')}")
    parts += [f"variant {ev.variant}", f"masker {ev.masker or 'none'}", f"inpainter {ev.inpainter or 'none'}",
              f"benchmark {ev.benchmark_name}"]
    rerank = (ev.metrics or {}).get("rerank")
    if rerank:
        parts.append(f"re-ranking {rerank}")
    flank = (ev.metrics or {}).get("flank")
    if flank and flank != "any":
        parts.append(f"gallery: {FLANK_WORDS.get(flank, flank).lower()}")
    return " · ".join(parts)


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(v) else round(v, 4)


@dataclass
class EvaluationRow:
    id: int
    when: str
    benchmark: str
    model: str
    variant: str
    rerank: str
    kind: str
    map_macro: float | None
    map_micro: float | None
    cmc1: float | None
    cmc5: float | None
    map_macro_with_same_sighting: float | None
    n_queries: int | None
    provenance: str
    flank: str = "any"

    def cells(self) -> list[object]:
        return [self.id, self.when, self.benchmark, self.model, self.variant, self.rerank, self.flank, self.map_macro,
                self.map_micro, self.cmc1, self.cmc5, self.map_macro_with_same_sighting, self.n_queries,
                self.provenance]

    @property
    def label(self) -> str:
        extra = f" + {self.rerank}" if self.rerank not in ("none", "") else ""
        extra += f" · {self.flank} flank" if self.flank != "any" else ""
        return f"#{self.id} {self.model} · {self.variant}{extra}"


def evaluation_rows(cat: Catalogue, *, benchmark: str | None = None) -> list[EvaluationRow]:
    """Stored retrieval evaluations (newest first) with their headline numbers and provenance."""
    rows = []
    for ev in list_evaluations(cat, benchmark=benchmark or None, kind="retrieval"):
        m = ev.metrics or {}
        with_same = m.get("with_same_sighting") or {}
        rows.append(EvaluationRow(
            id=ev.id, when=utc_text(ev.created_at), benchmark=ev.benchmark_name, model=ev.model_name, variant=ev.variant,
            rerank=str(m.get("rerank") or "none"), kind=ev.kind, map_macro=_num(m.get("map_macro")),
            map_micro=_num(m.get("map_micro")), cmc1=_num((m.get("cmc_macro") or {}).get("1")),
            cmc5=_num((m.get("cmc_macro") or {}).get("5")),
            map_macro_with_same_sighting=_num(with_same.get("map_macro")) if m.get("same_sighting_excluded") else None,
            n_queries=m.get("n_queries"), provenance=provenance_text(ev), flank=str(m.get("flank") or "any")))
    return rows


def evaluation_chart(rows: Sequence[EvaluationRow]) -> Any:
    """Plotly bars: identity-balanced mAP per stored evaluation (and with same-sighting photos), provenance on hover."""
    import plotly.graph_objects as go  # lazy: plotly is only needed to draw the chart

    shown = list(reversed(list(rows)))  # oldest left
    fig = go.Figure()
    labels = [r.label for r in shown]
    hover = [f"{r.label}<br>benchmark {r.benchmark}<br>{r.provenance.replace(' · ', '<br>')}" for r in shown]
    fig.add_bar(name="mAP (macro), same-sighting photos excluded", x=labels,
                y=[r.map_macro for r in shown], hovertext=hover, hoverinfo="text+y", marker_color="#d97706")
    if any(r.map_macro_with_same_sighting is not None for r in shown):
        fig.add_bar(name="mAP (macro), same-sighting photos included", x=labels,
                    y=[r.map_macro_with_same_sighting for r in shown], hovertext=hover, hoverinfo="text+y",
                    marker_color="#78716c")
    fig.update_layout(barmode="group", bargap=0.5 if len(shown) < 4 else 0.25, bargroupgap=0.08, height=380, margin=dict(l=40, r=10, t=40, b=80),
                      title="Match quality per evaluation (higher is better; hover a bar for its provenance)",
                      yaxis=dict(title="mAP (identity-balanced)", range=[0, 1]),
                      legend=dict(orientation="h", y=-0.25), template="plotly_white")
    if not shown:
        fig.update_xaxes(visible=False)
        fig.add_annotation(text="No evaluations yet: start one above; it appears here when its job finishes.",
                           x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font=dict(size=14))
    return fig
