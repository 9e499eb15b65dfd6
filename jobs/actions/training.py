"""Training: queue a run (:func:`train`, for ``rosette train`` and the Jobs tab alike), run it here and wait
(``rosette train --wait``), and what the Jobs tab's training panel shows: the form's choices and defaults, and one
run's live view (loss and validation curves from ``metrics.jsonl``, the log tail, status); the models with their
training summary (``rosette models list``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select

from core.identify.backbones import DEFAULT_BACKBONE
from db.identify.benchmarks import list_benchmarks
from db.catalogue import CatalogueError
from db.models import Evaluation, Job, JobStatus, Model, utcnow
from db.session import Catalogue
from db.species import model_status
from jobs import queue
from jobs.actions.common import curator_name
from jobs.requests.training import TrainRequest
from jobs.worker import ray_cluster_gpus, supervise

BLOCK_CHOICES = [("head only, on cached features (minutes on a CPU)", "0"), ("last 2 blocks", "2"),
                 ("last 4 blocks (about 80 s per nyala epoch on 2 CPU cores)", "4"), ("last 8 blocks", "8"),
                 ("whole backbone (GPU)", "all"),
                 ("LoRA adapters, rank 16 (peft; the backbone stays frozen, the model keeps only the adapters)",
                  "lora16")]
DEFAULT_SAMPLER = "identity-aware"  # core.identify.training.TrainConfig's default, named here without importing torch
SAMPLER_CHOICES = [("identity-uniform (16 individuals x 4 photos, pml MPerClassSampler)", "m-per-class"),
                   ("identity-aware: pre-scheduled, with the curators' 'not the same' pairs as hard negatives",
                    "identity-aware")]
HEAD_LABELS = {
    "supcon": "SupCon (recommended: the loss that improved nyala retrieval)",
    "triplet": "Triplet (margin 0.4)",
    "arcface": "Sub-center ArcFace (k 3, margin 0.5, scale 51.5)",
    "lorentz": "Lorentz / hyperbolic (scores exp(-distance))",
    "nearid": "NearID (needs masks: other animals pasted on this photo's background)",
    "idsim": "ID-Sim (global SupCon + Sinkhorn patch transport between the patch sets)",
}
TRAINABLE_BACKBONES = (DEFAULT_BACKBONE,)
#: the share of train identities kept out of training so a spot pipeline calibrates on animals the model never
#: learned ("auto": core.identify.training.resolve_calibration_holdout decides, as ``rosette train`` without
#: ``--hold-out-for-calibration``)
HOLDOUT_CHOICES = [("automatic: a fifth of a benchmark's train identities when it has 50 or more", "auto"),
                   ("none: train on every identity", "0"), ("a tenth of the train identities", "0.1"),
                   ("a fifth", "0.2"), ("three tenths", "0.3")]


@dataclass
class TrainDefaults:
    backbones: list[str]
    heads: list[tuple[str, str]]
    blocks: list[tuple[str, str]]
    samplers: list[tuple[str, str]]
    benchmarks: list[str]
    training_sets: list[tuple[str, str]]
    devices: list[str]
    backbone: str
    head: str
    block: str
    epochs: int
    training_set: str
    device: str
    sampler: str = DEFAULT_SAMPLER
    holdouts: list[tuple[str, str]] | None = None
    holdout: str = "auto"


def train_defaults(cat: Catalogue) -> TrainDefaults:
    """Form choices and the defaults the measured recipes suggest (SupCon; last 4 blocks on a GPU, head only on
    a CPU; 30 epochs; a benchmark's train split when there is one)."""
    import torch  # lazy, as core.identify.heads: torch takes seconds to import

    from core.identify.heads import list_heads  # lazy: imports torch

    with cat.unit_of_work() as s:
        benches = [b.name for b in list_benchmarks(s) if (b.config or {}).get("n_test", 0) < (b.config or {}).get(
            "n_images", 0)]
    sets = [(f"train split of benchmark {b} (evaluated on its test split)", f"benchmark:{b}") for b in benches]
    sets.append(("every confirmed individual in the catalogue", "catalogue"))
    cuda = torch.cuda.is_available()
    return TrainDefaults(
        backbones=list(TRAINABLE_BACKBONES), heads=[(HEAD_LABELS.get(h, h), h) for h in list_heads()],
        blocks=BLOCK_CHOICES, samplers=SAMPLER_CHOICES, benchmarks=benches, training_sets=sets,
        devices=["auto", "cpu"] + (["cuda"] if cuda else []), backbone=DEFAULT_BACKBONE, head="supcon",
        block="4" if cuda else "0", epochs=30, training_set=sets[0][1], device="auto", holdouts=HOLDOUT_CHOICES)


def training_form(*, backbone: str, head: str, blocks: str, epochs: float | int | None, training_set: str,
                  device: str, user: str, sampler: str = DEFAULT_SAMPLER, calibration_holdout: str = "auto"
                  ) -> TrainRequest:
    """The Jobs tab's form as a training request, refused in the form's words (a whole number of epochs from 1 to
    1000, a training set chosen, a backbone that can be trained here, a hold-out share of the choices)."""
    from core.identify.training import parse_blocks  # lazy: core.identify.training imports torch

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
    if sampler not in dict((v, k) for k, v in SAMPLER_CHOICES):
        raise CatalogueError(f"unknown batch sampler {sampler!r}")
    if calibration_holdout not in dict((v, k) for k, v in HOLDOUT_CHOICES):
        raise CatalogueError(f"unknown calibration hold-out {calibration_holdout!r}; expected one of "
                             f"{', '.join(v for _, v in HOLDOUT_CHOICES)}")
    holdout = None if calibration_holdout == "auto" else float(calibration_holdout)
    extent: dict[str, Any] = ({"adapter": "lora", "lora_rank": int(blocks[4:] or 16)}
                              if str(blocks).startswith("lora") else {"blocks": parse_blocks(blocks)})
    return TrainRequest(backbone=backbone, source=source, benchmark=benchmark, device=device, user=user,
                        config={"head": head, **extent, "epochs": n_epochs, "sampler": sampler,
                                "calibration_holdout": holdout})


def train(cat: Catalogue, request: TrainRequest) -> int:
    """Queue a training run on the heavy queue (``rosette train`` and the Jobs tab); returns the job id. The
    ``train`` job rebuilds the request, trains, then evaluates, diagnoses and compares as it asks. Unknown
    benchmarks, more identities or sources per batch than the training set has, ``--device cuda`` where no
    worker has CUDA, and a LoRA rank wider than the backbone's narrowest adapted layer are refused here
    (:func:`check_training_request`), before anything is queued."""
    check_training_request(cat, request)
    return queue.submit(cat, "train", replace(request, user=curator_name(request.user)).to_dict())


def check_training_request(cat: Catalogue, request: TrainRequest) -> None:
    """Refuse, in words, what the catalogue says a training request cannot do: benchmarks it does not have (all
    of them named), and -- when they were asked for explicitly -- more identities per batch than the training set
    has individuals, or more sources per batch than it has sources (benchmarks, or species from the
    catalogue). Also what the machines say it cannot do (:func:`check_training_device`, :func:`check_lora`)."""
    check_training_device(cat, request)
    check_lora(request)
    with cat.unit_of_work() as s:
        known = sorted(b.name for b in list_benchmarks(s))
    unknown = [b for b in request.benchmarks if b not in known]
    if unknown:
        raise CatalogueError(f"unknown benchmark{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(repr(b) for b in unknown)}; the catalogue has "
                             + (", ".join(known) if known else "no benchmark yet (`rosette benchmark create`)"))
    ids_asked = request.config.get("identities_per_batch")
    sources_asked = request.config.get("sources_per_batch")
    if ids_asked is None and sources_asked is None:
        return
    if ids_asked is not None and ids_asked < 2:
        raise CatalogueError(f"identities per batch must be at least 2 (a batch needs negatives), got {ids_asked}")
    from db.identify.training import training_set  # lazy: db.identify.training imports torch

    tset = training_set(cat, source=request.source, benchmark=request.benchmark, species_id=request.species)
    n_ids = len(set(tset.labels))
    sources = sorted(set(tset.sources or [tset.source]))
    if ids_asked is not None and ids_asked > n_ids:
        raise CatalogueError(f"{ids_asked} identities per batch asked for, but the training set has {n_ids} "
                             f"individuals; ask for at most {n_ids} (--identities-per-batch)")
    if sources_asked is not None and sources_asked > len(sources):
        raise CatalogueError(f"{sources_asked} sources per batch asked for, but the training photos come from "
                             f"{len(sources)} source(s) ({', '.join(sources)}); ask for at most {len(sources)} "
                             "(--sources-per-batch)")


def check_training_device(cat: Catalogue, request: TrainRequest) -> None:
    """Refuse ``--device cuda`` when this machine has no usable CUDA GPU (the local engine runs the job here,
    or on a worker of the same machine), in the words the job itself would use -- unless the Ray worker serving
    this catalogue declares GPUs on its cluster (:func:`jobs.worker.ray_cluster_gpus`; its training tasks get
    one)."""
    if not request.device.startswith("cuda"):
        return
    import torch  # lazy: torch takes seconds to import (the request has imported it already)

    if torch.cuda.is_available() or ray_cluster_gpus(cat) >= 1:
        return
    from core.identify.training import resolve_device  # lazy: core.identify.training imports torch

    try:
        resolve_device(request.device)
    except ValueError as exc:  # "device 'cuda' was asked for but this machine has no usable CUDA GPU; ..."
        raise CatalogueError(f"{exc} (no Ray worker with GPUs serves this catalogue either)") from None


def check_lora(request: TrainRequest) -> None:
    """Refuse a LoRA rank wider than the backbone's narrowest adapted layer, in the running job's words
    (:func:`core.identify.training_loop.check_lora_rank`, from the backbone's architecture, without training). A backbone
    whose architecture cannot be built here (unknown, weights elsewhere) is left to the job's own refusal."""
    if request.config.get("adapter") != "lora":
        return
    from core.identify.training_loop import backbone_adapted_widths, check_lora_rank  # lazy: imports torch

    rank = request.train_config().lora_rank
    try:
        backbone_adapted_widths(request.backbone)
    except Exception:  # noqa: BLE001 - the job says why the backbone cannot be built
        return
    try:
        check_lora_rank(request.backbone, rank)
    except ValueError as exc:
        raise CatalogueError(str(exc)) from None


def launch_training(cat: Catalogue, request: TrainRequest) -> tuple[int, str]:
    """The Jobs tab's Train button: queue the form's run (built by :func:`training_form`); returns (job id,
    message)."""
    from core.identify.training import ALL_BLOCKS  # lazy: core.identify.training imports torch

    job_id = train(cat, request)
    head, blocks = request.config["head"], request.config["blocks"]
    where = (f"benchmark {request.benchmark}'s train split" if request.benchmark
             else "the catalogue's confirmed individuals")
    extent = "head only" if blocks == 0 else "blocks " + ("all" if blocks == ALL_BLOCKS else str(blocks))
    return job_id, (f"Training job #{job_id} queued: {HEAD_LABELS.get(head, head).split(' (')[0]} on "
                    f"{request.backbone}, {extent}, {request.config['epochs']} epochs, from {where}.")


def run_here(cat: Catalogue, job_id: int, *, report: Callable[[Job], None] | None = None,
             poll_s: float = 0.5) -> Job:
    """Run a queued job in a supervised child of this process (or, if a worker took it first, follow it) until it
    ends, calling ``report(job)`` every ``poll_s`` seconds; returns the finished job (``rosette train --wait``)."""
    try:
        won = queue.transition(cat, job_id, JobStatus.running, expect={JobStatus.queued}, started_at=utcnow(),
                               heartbeat_at=utcnow(), worker=queue.worker_name(), message="started",
                               attempts=Job.attempts + 1)
    except queue.InvalidTransition:
        won = False
    runner = threading.Thread(target=supervise, args=(cat, job_id), daemon=True) if won else None
    if runner:
        runner.start()
    while True:
        job = queue.get_job(cat, job_id)
        if job.status in queue.TERMINAL and (runner is None or not runner.is_alive()):
            return job
        if report is not None:
            report(job)
        time.sleep(poll_s)


def cancel_run(cat: Catalogue, job_id: int) -> None:
    """Ask a run waited for to stop (``rosette train --wait`` interrupted)."""
    queue.request_cancel(cat, job_id)


def models_overview(cat: Catalogue) -> list[dict[str, Any]]:
    """Every model with its training summary and latest retrieval evaluation (what ``rosette models list``
    shows)."""
    status = model_status(cat)
    with cat.unit_of_work() as s:
        models = list(s.scalars(select(Model).order_by(Model.id)))
        evals = list(s.scalars(select(Evaluation).where(Evaluation.kind == "retrieval").order_by(Evaluation.id)))
    latest = {e.model_name: e for e in evals if e.variant == "full_rgb"
              and (e.metrics or {}).get("flank", "any") in ("any", None)}
    out = []
    for m in models:
        tc = m.training_config or {}
        ev = latest.get(m.name)
        out.append({"name": m.name, "backbone": m.backbone, "head": m.head, "loss": m.loss, "status": m.status.value,
                    "active_for": status.get(m.name, {}).get("active_for", []),
                    "blocks": (tc.get("train_config") or {}).get("blocks"), "epochs_run": tc.get("epochs_run"),
                    "best_val_map_macro": tc.get("best_val_map_macro"), "wall_seconds": tc.get("wall_seconds"),
                    "device": (tc.get("runtime") or {}).get("device"),
                    "n_train_images": (m.data_snapshot or {}).get("n_images"),
                    "snapshot_hash": (m.data_snapshot or {}).get("hash"), "checkpoint_sha256": m.checkpoint_hash,
                    "latest_evaluation": None if ev is None else {
                        "benchmark": ev.benchmark_name, "map_macro": ev.metrics.get("map_macro"),
                        "map_micro": ev.metrics.get("map_micro"), "evaluation_id": ev.id}})
    return out


def training_runs(cat: Catalogue, *, limit: int = 30) -> list[tuple[str, int]]:
    """(label, job id) of the newest training jobs, newest first."""
    out = []
    for job in queue.list_jobs(cat, limit=limit, kind="train"):
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
    import plotly.graph_objects as go  # lazy: plotly is only needed once a run is drawn

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
    if job_id is None:
        runs = training_runs(cat, limit=1)
        job_id = runs[0][1] if runs else None
    if job_id is None:
        return RunView(None, "", "No training run yet: fill in the form and press **Train**.", "", run_figure([]),
                       False, False, 0)
    try:
        job = queue.get_job(cat, int(job_id))
    except queue.JobError as exc:
        raise CatalogueError(str(exc)) from None
    rows = queue.read_metrics(cat, job.id)
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
    return RunView(job.id, status, "\n\n".join(bits), queue.read_log_tail(cat, job.id, max_chars=3000),
                   run_figure(rows, title=f"job #{job.id}"),
                   can_cancel=job.status in (JobStatus.queued, JobStatus.running) and not job.cancel_requested,
                   can_retry=job.status in (JobStatus.failed, JobStatus.cancelled), epochs_done=len(epochs))
