"""What the Benchmarks tab calls: freeze a benchmark, launch an evaluation job, list evaluations with their
provenance and chart them. A few lines each over ``db`` / ``jobs``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jobs.actions.match import DEFAULT_MODEL, _enum_value, _utc  # noqa: F401
from jobs.actions.catalogue import curator_name
from db.catalogue import CatalogueError
from db.evaluation import RERANK_METHODS
from db.models import Evaluation
from db.session import Catalogue

EVALUATION_VARIANTS: list[tuple[str, str]] = [
    ("Whole photo (full_rgb)", "full_rgb"),
    ("Animal only, background blacked out (foreground_only)", "foreground_only"),
    ("Background only, animal blacked out (background_only)", "background_only"),
    ("Outline only (silhouette)", "silhouette"),
    ("Mirrored animal (mirror)", "mirror"),
]
RERANK_WORDS = {"none": "No re-ranking", "k_reciprocal": "k-reciprocal re-ranking",
                "aqe": "Average query expansion (aqe)"}
RERANK_CHOICES: list[tuple[str, str]] = [(RERANK_WORDS.get(m, m), m) for m in RERANK_METHODS]
SPLIT_CHOICES: list[tuple[str, str]] = [
    ("New individuals (identity-disjoint: test animals are unseen)", "identity"),
    ("Known individuals, new sightings (sighting-disjoint)", "sighting"),
]



BENCHMARK_HEADERS = ["Benchmark", "Split", "Photos", "Test photos", "Individuals", "Test individuals", "Seed",
                     "Test share", "Source", "Created (UTC)"]
EVALUATION_HEADERS = ["#", "When (UTC)", "Benchmark", "Model", "Variant", "Re-ranking", "mAP per individual",
                      "mAP per photo", "Top-1 hit", "Top-5 hit", "mAP with same sighting", "Queries",
                      "Provenance"]


def benchmark_names(cat: Catalogue) -> list[str]:
    from db.benchmarks import list_benchmarks

    with cat.unit_of_work() as s:
        return [b.name for b in list_benchmarks(s)]


def benchmark_rows(cat: Catalogue) -> list[list[object]]:
    """Stored benchmarks as rows under BENCHMARK_HEADERS."""
    from db.benchmarks import list_benchmarks

    with cat.unit_of_work() as s:
        out = []
        for b in list_benchmarks(s):
            c = b.config or {}
            out.append([b.name, b.split_kind, c.get("n_images"), c.get("n_test"), c.get("n_identities"),
                        c.get("n_test_identities"), c.get("seed"), c.get("test_fraction"), c.get("source"),
                        _utc(b.created_at)])
        return out


def create_benchmark(cat: Catalogue, name: str, *, split: str = "identity", test_fraction: float = 0.3,
                     seed: int = 0, user: str) -> str:
    """Freeze every assigned catalogue photo into a named benchmark with a seeded split; returns a message."""
    from db.benchmarks import create_benchmark as create

    user = curator_name(user)
    name = (name or "").strip()
    if not name:
        raise ValueError("Give the benchmark a name.")
    if not 0.05 <= float(test_fraction) <= 0.95:
        raise ValueError("The test share must be between 5% and 95%.")
    b = create(cat, name, split=split, test_fraction=float(test_fraction), seed=int(seed), user=user)
    c = b.config
    return (f"Benchmark {b.name} created: {c['n_images']} photos of {c['n_identities']} individuals, "
            f"{c['n_test']} test photos of {c['n_test_identities']} individuals ({b.split_kind} split, seed {c['seed']}).")


def launch_evaluation(cat: Catalogue, *, benchmark: str | None, backbone: str, variant: str = "full_rgb",
                      rerank: str = "none", user: str) -> tuple[int, str]:
    """Queue an evaluation job; returns (job id, message)."""
    from db.evaluation import RERANK_METHODS
    from jobs.queue import submit

    user = curator_name(user)
    if not benchmark:
        raise ValueError("Choose a benchmark to evaluate on (create one first if there is none).")
    if benchmark not in benchmark_names(cat):
        raise CatalogueError(f"There is no benchmark named {benchmark!r}.")
    if not backbone:
        raise ValueError("Choose a model.")
    if variant not in {v for _, v in EVALUATION_VARIANTS}:
        raise ValueError(f"unknown image variant {variant!r}")
    if rerank not in RERANK_METHODS:
        raise ValueError(f"unknown re-ranking {rerank!r}")
    job_id = submit(cat, "evaluate", {"backbone": backbone, "benchmark": benchmark, "variant": variant,
                                      "rerank": rerank, "user": user})
    return job_id, (f"Evaluation of {backbone} on {benchmark} ({variant}, re-ranking {rerank}) queued as job "
                    f"#{job_id}; follow it in the Jobs tab. Its numbers appear here when it finishes.")


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
        from db.leaderboard import config_provenance

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

    def cells(self) -> list[object]:
        return [self.id, self.when, self.benchmark, self.model, self.variant, self.rerank, self.map_macro,
                self.map_micro, self.cmc1, self.cmc5, self.map_macro_with_same_sighting, self.n_queries,
                self.provenance]

    @property
    def label(self) -> str:
        extra = f" + {self.rerank}" if self.rerank not in ("none", "") else ""
        return f"#{self.id} {self.model} · {self.variant}{extra}"


def evaluation_rows(cat: Catalogue, *, benchmark: str | None = None) -> list[EvaluationRow]:
    """Stored retrieval evaluations (newest first) with their headline numbers and provenance."""
    from db.evaluation import list_evaluations

    rows = []
    for ev in list_evaluations(cat, benchmark=benchmark or None, kind="retrieval"):
        m = ev.metrics or {}
        with_same = m.get("with_same_sighting") or {}
        rows.append(EvaluationRow(
            id=ev.id, when=_utc(ev.created_at), benchmark=ev.benchmark_name, model=ev.model_name, variant=ev.variant,
            rerank=str(m.get("rerank") or "none"), kind=ev.kind, map_macro=_num(m.get("map_macro")),
            map_micro=_num(m.get("map_micro")), cmc1=_num((m.get("cmc_macro") or {}).get("1")),
            cmc5=_num((m.get("cmc_macro") or {}).get("5")),
            map_macro_with_same_sighting=_num(with_same.get("map_macro")) if m.get("same_sighting_excluded") else None,
            n_queries=m.get("n_queries"), provenance=provenance_text(ev)))
    return rows


def evaluation_chart(rows: Sequence[EvaluationRow]) -> Any:
    """Plotly bars: identity-balanced mAP per stored evaluation (and with same-sighting photos), provenance on hover."""
    import plotly.graph_objects as go

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
