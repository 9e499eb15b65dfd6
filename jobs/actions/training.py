"""What the Jobs tab's training panel shows and does: the form's choices and defaults, launching a run,
and one run's live view (loss and validation curves from ``metrics.jsonl``, the log tail, status)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.backbones import DEFAULT_BACKBONE
from db.catalogue import CatalogueError
from db.session import Catalogue

BLOCK_CHOICES = [("head only, on cached features (minutes on a CPU)", "0"), ("last 2 blocks", "2"),
                 ("last 4 blocks (about 80 s per nyala epoch on 2 CPU cores)", "4"), ("last 8 blocks", "8"),
                 ("whole backbone (GPU)", "all")]
HEAD_LABELS = {
    "supcon": "SupCon (recommended: the loss that improved nyala retrieval)",
    "triplet": "Triplet (margin 0.4)",
    "arcface": "Sub-center ArcFace (k 3, margin 0.5, scale 51.5)",
    "lorentz": "Lorentz / hyperbolic (scores exp(-distance))",
    "nearid": "NearID (needs masks: other animals pasted on this photo's background)",
}
TRAINABLE_BACKBONES = (DEFAULT_BACKBONE,)


@dataclass
class TrainDefaults:
    backbones: list[str]
    heads: list[tuple[str, str]]
    blocks: list[tuple[str, str]]
    benchmarks: list[str]
    training_sets: list[tuple[str, str]]
    devices: list[str]
    backbone: str
    head: str
    block: str
    epochs: int
    training_set: str
    device: str


def train_defaults(cat: Catalogue) -> TrainDefaults:
    """Form choices and the defaults the measured recipes suggest (SupCon; last 4 blocks on a GPU, head only on
    a CPU; 30 epochs; a benchmark's train split when there is one)."""
    import torch

    from core.heads import list_heads
    from db.benchmarks import list_benchmarks

    with cat.unit_of_work() as s:
        benches = [b.name for b in list_benchmarks(s) if (b.config or {}).get("n_test", 0) < (b.config or {}).get(
            "n_images", 0)]
    sets = [(f"train split of benchmark {b} (evaluated on its test split)", f"benchmark:{b}") for b in benches]
    sets.append(("every confirmed individual in the catalogue", "catalogue"))
    cuda = torch.cuda.is_available()
    return TrainDefaults(
        backbones=list(TRAINABLE_BACKBONES), heads=[(HEAD_LABELS.get(h, h), h) for h in list_heads()],
        blocks=BLOCK_CHOICES, benchmarks=benches, training_sets=sets,
        devices=["auto", "cpu"] + (["cuda"] if cuda else []), backbone=DEFAULT_BACKBONE, head="supcon",
        block="4" if cuda else "0", epochs=30, training_set=sets[0][1], device="auto")


def launch_training(cat: Catalogue, *, backbone: str, head: str, blocks: str, epochs: float | int | None,
                    training_set: str, device: str, user: str) -> tuple[int, str]:
    """Queue a training job (heavy queue); returns (job id, message)."""
    from core.training import TrainConfig, parse_blocks  # lazy: core.training imports torch
    from core.heads import head_spec
    from jobs.queue import submit

    head_spec(head)
    if backbone not in TRAINABLE_BACKBONES:
        raise CatalogueError(f"{backbone!r} cannot be trained here; choose {', '.join(TRAINABLE_BACKBONES)}")
    try:
        n_epochs = int(epochs or 0)
    except (TypeError, ValueError):
        raise CatalogueError("Epochs must be a whole number.") from None
    if not 1 <= n_epochs <= 1000:
        raise CatalogueError("Epochs must be between 1 and 1000.")
    if training_set == "catalogue":
        source, benchmark = "catalogue", None
    elif training_set and training_set.startswith("benchmark:"):
        source, benchmark = "benchmark", training_set.split(":", 1)[1]
    else:
        raise CatalogueError("Choose a training set.")
    if device not in ("auto", "cpu", "cuda"):
        raise CatalogueError(f"unknown device {device!r}")
    params = {"backbone": backbone, "head": head, "blocks": parse_blocks(blocks), "epochs": n_epochs,
              "source": source, "benchmark": benchmark, "device": device, "user": user}
    params = {k: v for k, v in params.items() if v is not None}
    TrainConfig.from_params(params)  # refused here, before anything is queued
    job_id = submit(cat, "train", params)
    where = f"benchmark {benchmark}'s train split" if benchmark else "the catalogue's confirmed individuals"
    return job_id, (f"Training job #{job_id} queued: {HEAD_LABELS.get(head, head).split(' (')[0]} on {backbone}, "
                    f"{'head only' if blocks == '0' else 'blocks ' + blocks}, {n_epochs} epochs, from {where}.")


def training_runs(cat: Catalogue, *, limit: int = 30) -> list[tuple[str, int]]:
    """(label, job id) of the newest training jobs, newest first."""
    from jobs.queue import list_jobs

    out = []
    for job in list_jobs(cat, limit=limit, kind="train"):
        p = job.params or {}
        out.append((f"#{job.id} {p.get('head', 'supcon')} blocks {p.get('blocks', 0)} - {job.status.value}", job.id))
    return out


@dataclass
class RunView:
    job_id: int | None
    status: str
    summary: str
    log_tail: str
    figure: Any
    can_cancel: bool
    can_retry: bool
    epochs_done: int


def run_figure(rows: list[dict[str, Any]], *, title: str = "") -> Any:
    """Plotly: training loss per epoch (left axis) and validation mAP (right axis), the frozen features'
    validation mAP as a dashed line."""
    import plotly.graph_objects as go

    epochs = [r for r in rows if r.get("epoch", 0) > 0 and "train_loss" in r]
    frozen = next((r.get("val_map_macro") for r in rows if r.get("frozen")), None)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[r["epoch"] for r in epochs], y=[r["train_loss"] for r in epochs],
                             mode="lines+markers", name="training loss", yaxis="y1"))
    if any("val_map_macro" in r for r in epochs):
        fig.add_trace(go.Scatter(x=[r["epoch"] for r in epochs], y=[r.get("val_map_macro") for r in epochs],
                                 mode="lines+markers", name="validation mAP (macro)", yaxis="y2"))
    if frozen is not None:
        fig.add_trace(go.Scatter(x=[0, max([r["epoch"] for r in epochs], default=1)], y=[frozen, frozen],
                                 mode="lines", name="frozen features", yaxis="y2", line={"dash": "dash"}))
    fig.update_layout(title=title, height=340, margin={"l": 50, "r": 50, "t": 40, "b": 40},
                      xaxis={"title": "epoch"}, yaxis={"title": "loss"},
                      yaxis2={"title": "validation mAP", "overlaying": "y", "side": "right", "rangemode": "tozero"},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def run_view(cat: Catalogue, job_id: int | None) -> RunView:
    """Everything the panel shows for one training job (or the newest one when ``job_id`` is None)."""
    from db.models import JobStatus
    from jobs.queue import JobError, get_job, read_log_tail, read_metrics

    if job_id is None:
        runs = training_runs(cat, limit=1)
        job_id = runs[0][1] if runs else None
    if job_id is None:
        return RunView(None, "", "No training run yet: fill in the form and press **Train**.", "", run_figure([]),
                       False, False, 0)
    try:
        job = get_job(cat, int(job_id))
    except JobError as exc:
        raise CatalogueError(str(exc)) from None
    rows = read_metrics(cat, job.id)
    epochs = [r for r in rows if r.get("epoch", 0) > 0]
    status = job.status.value if not (job.status == JobStatus.running and job.cancel_requested) else "cancelling"
    p = job.params or {}
    res = job.result or {}
    bits = [f"**Job #{job.id}** ({status}, {job.progress:.0%}): {job.message or ''}",
            f"{p.get('head', 'supcon')} head on {p.get('backbone', 'efficientnet_lite0')}, blocks {p.get('blocks', 0)}, "
            f"{len(epochs)} of {p.get('epochs', 30)} epochs, attempt {job.attempts} of {job.max_attempts}"]
    if res.get("model"):
        ev = res.get("evaluation") or {}
        bits.append(f"New candidate model **{res['model']}**: validation mAP {res.get('frozen_val_map_macro') or 0:.3f} "
                    f"(frozen) -> {res.get('best_val_map_macro') or 0:.3f}"
                    + (f"; test mAP macro {ev['map_macro']:.3f}" if ev.get("map_macro") is not None else "")
                    + f"; device {(res.get('runtime') or {}).get('device')}, {res.get('wall_seconds', 0):.0f} s.")
    return RunView(job.id, status, "\n\n".join(bits), read_log_tail(cat, job.id, max_chars=3000),
                   run_figure(rows, title=f"job #{job.id}"),
                   can_cancel=job.status in (JobStatus.queued, JobStatus.running) and not job.cancel_requested,
                   can_retry=job.status in (JobStatus.failed, JobStatus.cancelled), epochs_done=len(epochs))
