"""The functions the Match review, Benchmarks & models and Jobs tabs call, each a few lines over ``db`` / ``jobs``.

Like :mod:`app.services`, every function does one thing and returns plain data
(dataclasses, rows, curator-readable messages) that a tab only renders.
Curator-caused problems (nothing to undo, a photo decided by someone else
meanwhile, a taken benchmark name ...) are raised as ``CatalogueError`` /
``ValueError`` with a message meant to be shown as is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import select

from app.services import curator_name, upload_path
from db.catalogue import CatalogueError
from db.models import Evaluation, Image, Individual, Job, JobStatus, MatchDecision, Sighting
from db.session import Catalogue

DEFAULT_MODEL = "efficientnet_lite0"
CANDIDATES_SHOWN = 12
QUEUE_LIMIT = 500

# (label a curator reads, value rank_candidates takes)
FLANK_FILTERS: list[tuple[str, str]] = [("All flanks", "any"), ("Same flank only", "same"),
                                        ("Opposite flank only", "cross")]
DECISION_WORDS = {"same": "same individual", "not": "not the same", "unsure": "unsure", "new": "new individual"}
# Variants an evaluation job can run without an inpainter (background_inpainted needs one: use Diagnostics).
EVALUATION_VARIANTS: list[tuple[str, str]] = [
    ("Whole photo (full_rgb)", "full_rgb"),
    ("Animal only, background blacked out (foreground_only)", "foreground_only"),
    ("Background only, animal blacked out (background_only)", "background_only"),
    ("Outline only (silhouette)", "silhouette"),
    ("Mirrored animal (mirror)", "mirror"),
]
RERANK_CHOICES: list[tuple[str, str]] = [("No re-ranking", "none"), ("k-reciprocal re-ranking", "k_reciprocal"),
                                         ("Average query expansion (aqe)", "aqe")]
SPLIT_CHOICES: list[tuple[str, str]] = [
    ("New individuals (identity-disjoint: test animals are unseen)", "identity"),
    ("Known individuals, new sightings (sighting-disjoint)", "sighting"),
]


def _utc(t: datetime | None) -> str:
    return t.replace(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if t else ""


def _enum_value(v: Any) -> str:
    return v.value if hasattr(v, "value") else str(v)


# =========================================================================== match review


def unavailable_models() -> list[str]:
    """Registered backbones whose weights are not on this machine (shown as unavailable, never offered)."""
    from core.backbones import list_backbones, weights_available

    return [n for n in list_backbones() if not n.endswith(":") and not weights_available(n)]


def active_model(cat: Catalogue, species: int | str | None = None) -> str:
    """The active model of a species (the default species when None)."""
    from db.species import active_model_name

    return active_model_name(cat, species)


def active_model_state(cat: Catalogue, species: int | str | None = None) -> tuple[str, bool]:
    """(active model, ready): ready once no queued or running embedding job is computing its features."""
    from jobs.queue import list_jobs

    name = active_model(cat, species)
    busy = any(j.status in (JobStatus.queued, JobStatus.running) and (j.params or {}).get("backbone") == name
               for j in list_jobs(cat, limit=50, kind="embed"))
    return name, not busy


def matcher_choices(cat: Catalogue | None = None) -> list[str]:
    """Models a curator can match with: the offline default first, then the trained models of ``cat`` (newest
    first), then the other backbones (hub prefixes left out)."""
    try:
        from core.backbones import list_backbones
    except ImportError:
        return [DEFAULT_MODEL]
    from core.backbones import weights_available

    names = [n for n in list_backbones() if not n.endswith(":") and weights_available(n)]
    trained = []
    if cat is not None:
        from db.training import trained_model_names

        trained = trained_model_names(cat)
    rest = [n for n in names if n != DEFAULT_MODEL]
    return ([DEFAULT_MODEL] if DEFAULT_MODEL in names else []) + trained + rest


@dataclass
class QueryPhoto:
    """The photo being matched, with what the curator needs to judge it."""

    image_id: int
    path: str  # absolute path of the full photo
    original_name: str
    flank: str
    sighting: str | None
    date: str | None
    place: str | None
    individual_id: int | None
    individual_name: str | None
    mask_path: str | None  # absolute path of the mask PNG, or None
    mask_source: str | None
    decided: str | None = None  # the standing decision on this photo, in words, if any
    decided_id: int | None = None  # its id: a decision records it, so a later one by someone else is noticed

    def facts(self) -> list[tuple[str, str]]:
        """(label, value) lines shown next to the photo."""
        return [
            ("Photo", f"#{self.image_id} · {self.original_name}"),
            ("Currently", self.individual_name or "not assigned to an individual"),
            ("Flank", self.flank if self.flank != "unknown" else "not set"),
            ("Sighting", self.sighting or "none"),
            ("Date", self.date or "unknown"),
            ("Place", self.place or "unknown"),
            ("Mask", f"from {self.mask_source}" if self.mask_path else "none"),
        ] + ([("Decided", self.decided)] if self.decided else [])


def query_photo(cat: Catalogue, image_id: int) -> QueryPhoto:
    with cat.unit_of_work() as s:
        row = s.execute(
            select(Image, Individual.name, Sighting)
            .outerjoin(Individual, Image.individual_id == Individual.id)
            .outerjoin(Sighting, Image.sighting_id == Sighting.id)
            .where(Image.id == int(image_id))
        ).first()
        if row is None:
            raise CatalogueError(f"There is no photo #{image_id} in the catalogue.")
        im, name, sg = row
        lat, lon = (sg.lat, sg.lon) if sg and sg.lat is not None and sg.lon is not None else (im.gps_lat, im.gps_lon)
        place = (sg.place if sg else None) or (f"{lat:.5f}, {lon:.5f}" if lat is not None and lon is not None else None)
        dec = s.execute(
            select(MatchDecision, Individual.name)
            .outerjoin(Individual, MatchDecision.candidate_individual_id == Individual.id)
            .where(MatchDecision.query_image_id == im.id, MatchDecision.undone_at.is_(None))
            .order_by(MatchDecision.id.desc()).limit(1)).first()
        decided, decided_id = None, None
        if dec is not None:
            d, other = dec
            what = DECISION_WORDS.get(_enum_value(d.decision), _enum_value(d.decision))
            decided = f"{what}{f' ({other})' if other else ''} by {d.user}, {_utc(d.created_at)} UTC"
            decided_id = d.id
        return QueryPhoto(image_id=im.id, decided=decided, decided_id=decided_id, path=cat.blobs.existing(im.blob_path) or "", original_name=im.original_name,
                          flank=_enum_value(im.flank), sighting=sg.key if sg else None,
                          date=(sg.date if sg and sg.date else None) or im.exif_time, place=place,
                          individual_id=im.individual_id, individual_name=name,
                          mask_path=cat.blobs.existing(im.mask_path), mask_source=im.mask_source)


def query_picture(photo: QueryPhoto, *, outline: bool) -> str | np.ndarray:
    """The query photo as a path, or (with ``outline`` and a mask) as RGB with the mask's outline drawn."""
    if not outline or not photo.mask_path:
        return photo.path
    import cv2

    from core.images import load_rgb
    from core.masking import decode_mask_png

    rgb = np.ascontiguousarray(load_rgb(photo.path))
    with open(photo.mask_path, "rb") as fh:
        mask = decode_mask_png(fh.read()).astype(np.uint8)
    if mask.shape != rgb.shape[:2]:
        mask = cv2.resize(mask, (rgb.shape[1], rgb.shape[0]), interpolation=cv2.INTER_NEAREST)
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    width = max(2, round(max(rgb.shape[:2]) / 250))
    cv2.drawContours(rgb, contours, -1, (255, 200, 0), width)
    return rgb


@dataclass
class CandidateCard:
    """One ranked candidate as shown: picture, who it is, how the model scored it."""

    rank: int
    image_id: int
    individual_id: int
    individual_name: str
    score: float
    flank: str
    sighting: str | None
    same_sighting: bool
    thumb: str | None  # absolute path of the picture to show
    mirror_sim: float | None = None  # from the model's latest diagnostics run, when there is one
    danger_margin: float | None = None
    probability: float | None = None  # calibrated "probability this is the same animal", when calibrated


@dataclass
class MatchView:
    """Everything one match-review screen shows; kept in the page so a decision records exactly what was seen."""

    query: QueryPhoto
    model_name: str
    model_provenance: str
    flank_filter: str
    candidates: list[CandidateCard] = field(default_factory=list)
    diagnostics_source: str | None = None  # which diagnostics run the mirror badges come from
    place_date_note: str | None = None  # e.g. "place contains 'Porto Jofre', from 2024-05-01", when filtered
    calibration_note: str | None = None  # what the probabilities rest on
    new_threshold: float | None = None  # below it (top candidate's probability) a new individual is suggested

    @property
    def suggest_new(self) -> bool:
        top = self.candidates[0] if self.candidates else None
        return bool(top is None or (top.probability is not None and self.new_threshold is not None
                                    and top.probability < self.new_threshold))

    @property
    def seen_individual_id(self) -> int | None:
        return self.query.individual_id

    def candidate(self, rank: int | None) -> CandidateCard | None:
        """The candidate at ``rank`` (1-based), or the top one when ``rank`` is None / not shown."""
        for c in self.candidates:
            if c.rank == rank:
                return c
        return self.candidates[0] if self.candidates else None


def laterality_badges(cat: Catalogue, model_name: str) -> tuple[dict[int, tuple[float, float]], str | None]:
    """Per-photo (mirror similarity, danger margin) from the model's latest diagnostics run, and what run it is."""
    with cat.unit_of_work() as s:
        ev = s.scalar(select(Evaluation).where(Evaluation.kind == "diagnose", Evaluation.model_name == model_name)
                      .order_by(Evaluation.id.desc()).limit(1))
    if ev is None:
        return {}, None
    per = (ev.metrics or {}).get("per_image") or {}
    ids, mirror, margin = per.get("image_ids") or [], per.get("mirror_sim") or [], per.get("danger_margin") or []
    out = {}
    for i, image_id in enumerate(ids):
        if i < len(mirror) and i < len(margin) and mirror[i] is not None and margin[i] is not None:
            out[int(image_id)] = (float(mirror[i]), float(margin[i]))
    return out, f"diagnostics run #{ev.id} on {ev.benchmark_name} ({_utc(ev.created_at)} UTC)"


def match_query(cat: Catalogue, image_id: int, *, model_name: str = DEFAULT_MODEL, flank_filter: str = "any",
                place: str | None = None, date_from: str | None = None, date_to: str | None = None,
                k: int = CANDIDATES_SHOWN, progress: Callable[[int, int], None] | None = None) -> MatchView:
    """Rank the gallery for one photo (optionally only photos from a place / date range) and
    gather what the review screen shows."""
    from db.matching import rank_candidates

    if flank_filter not in {v for _, v in FLANK_FILTERS}:
        raise ValueError(f"unknown flank filter {flank_filter!r}")
    photo = query_photo(cat, image_id)
    result = rank_candidates(cat, photo.image_id, model_name=model_name, k=k, flank_filter=flank_filter,
                             place=place, date_from=date_from, date_to=date_to, progress=progress)
    badges, source = laterality_badges(cat, model_name)
    from db.calibration import calibrator_for, new_individual_threshold
    from db.species import species_of_image

    species_id = species_of_image(cat, photo.image_id)
    cal = calibrator_for(cat, result.model_name, species_id=species_id) if result.candidates else None
    probs = cal.probability([c.score for c in result.candidates]) if cal is not None else [None] * len(result.candidates)
    cal_note = None
    if cal is not None:
        parts = ", ".join(f"{n} {what}" for what, n in cal.sources.items() if n)
        cal_note = (f"probability calibrated (isotonic) on {cal.n_outcomes} outcomes ({parts}) for {result.model_name}")
    cards = [CandidateCard(rank=c.rank, image_id=c.image_id, individual_id=c.individual_id,
                           individual_name=c.individual_name, score=c.score, flank=c.flank, sighting=c.sighting,
                           same_sighting=c.same_sighting, thumb=cat.blobs.existing(c.thumb_path) or cat.blobs.existing(c.blob_path),
                           mirror_sim=badges.get(c.image_id, (None, None))[0],
                           danger_margin=badges.get(c.image_id, (None, None))[1],
                           probability=None if p is None else float(p))
             for c, p in zip(result.candidates, probs)]
    note = ", ".join(part for part in (
        f"place contains {place.strip()!r}" if (place or "").strip() else "",
        f"from {date_from.strip()}" if (date_from or "").strip() else "",
        f"to {date_to.strip()}" if (date_to or "").strip() else "") if part) or None
    return MatchView(query=photo, model_name=result.model_name, model_provenance=result.model_provenance,
                     flank_filter=flank_filter, candidates=cards, diagnostics_source=source if badges else None,
                     place_date_note=note, calibration_note=cal_note,
                     new_threshold=new_individual_threshold(cat, species_id) if cal is not None else None)


@dataclass
class QueueEntry:
    image_id: int
    top_score: float
    top_individual: str | None
    assigned: bool

    @property
    def label(self) -> str:
        who = f"best match {self.top_individual} ({self.top_score:.2f})" if self.top_individual else "no gallery yet"
        return f"#{self.image_id} · {'assigned' if self.assigned else 'unassigned'} · {who}"


def review_queue(cat: Catalogue, *, model_name: str = DEFAULT_MODEL, limit: int = QUEUE_LIMIT,
                 progress: Callable[[int, int], None] | None = None) -> list[QueueEntry]:
    """Photos with no standing decision: unassigned first, then by how confident their top match is."""
    from db.matching import review_queue as queue

    return [QueueEntry(q.image_id, q.top_score, q.top_individual, q.assigned)
            for q in queue(cat, model_name=model_name, limit=limit, progress=progress)]


def next_pending(cat: Catalogue, queue: Sequence[int], pos: int) -> int | None:
    """Index of the first photo in ``queue`` from ``pos`` on (then from the start) with no standing decision."""
    if not queue:
        return None
    with cat.unit_of_work() as s:
        decided = set(s.scalars(select(MatchDecision.query_image_id).where(
            MatchDecision.undone_at.is_(None), MatchDecision.query_image_id.in_(list(queue)))))
    start = max(0, min(int(pos), len(queue)))
    for i in [*range(start, len(queue)), *range(0, start)]:
        if queue[i] not in decided:
            return i
    return None


def photo_choices(cat: Catalogue) -> list[tuple[str, int]]:
    """(label, image id) for every photo, for picking a query by hand."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.original_name, Individual.name)
                         .outerjoin(Individual, Image.individual_id == Individual.id).order_by(Image.id)).all()
    return [(f"#{i} · {name} · {who or 'unassigned'}", i) for i, name, who in rows]


@dataclass
class DecisionOutcome:
    decision_id: int
    message: str


def decide(cat: Catalogue, view: MatchView | None, decision: str, *, user: str, rank: int | None = None,
           new_name: str | None = None) -> DecisionOutcome:
    """Record the curator's decision on the shown query against the chosen candidate (default: the top one).

    ``same`` / ``not`` / ``unsure`` refer to the candidate at ``rank``; ``new`` starts a new
    individual for the query. The query's individual as shown is passed on, so a photo
    another curator decided meanwhile is refused with a message rather than overwritten.
    """
    from db.matching import record_decision

    user = curator_name(user)
    if view is None:
        raise CatalogueError("Open a photo to match first.")
    if decision not in DECISION_WORDS:
        raise ValueError(f"unknown decision {decision!r}")
    cand = None if decision == "new" else view.candidate(rank)
    if decision != "new" and cand is None:
        raise CatalogueError("There is no candidate to compare with; choose 'new individual' or change the filter.")
    dec = record_decision(cat, query_image_id=view.query.image_id, decision=decision, user=user,
                          candidate_image_id=cand.image_id if cand else None,
                          score=cand.score if cand else None, rank=cand.rank if cand else None,
                          model_name=view.model_name, seen_individual_id=view.seen_individual_id,
                          seen_decision_id=view.query.decided_id,
                          new_name=(new_name or "").strip() or None)
    photo = f"photo #{view.query.image_id}"
    if decision == "same":
        text = f"Recorded: {photo} is {cand.individual_name} (candidate {cand.rank}, score {cand.score:.3f})."
    elif decision == "new":
        with cat.unit_of_work() as s:
            name = s.scalar(select(Individual.name).where(Individual.id == dec.candidate_individual_id))
        text = f"Recorded: {photo} is a new individual, {name}."
    else:
        text = (f"Recorded: {photo} vs {cand.individual_name} (candidate {cand.rank}): "
                f"{DECISION_WORDS[decision]}.")
    return DecisionOutcome(decision_id=dec.id, message=text)


def undo_last_decision(cat: Catalogue, *, user: str) -> tuple[int, str]:
    """Undo this curator's latest decision; returns (its query photo id, message)."""
    from db.matching import undo_decision

    user = curator_name(user)
    dec = undo_decision(cat, user=user)
    return dec.query_image_id, (f"Undone: your '{DECISION_WORDS.get(_enum_value(dec.decision), dec.decision)}' "
                                f"decision on photo #{dec.query_image_id}.")


def current_individual(cat: Catalogue, image_id: int) -> int | None:
    with cat.unit_of_work() as s:
        return s.scalar(select(Image.individual_id).where(Image.id == int(image_id)))


def decision_count(cat: Catalogue, *, user: str | None = None) -> int:
    """Standing (not undone) decisions, optionally by one curator."""
    with cat.unit_of_work() as s:
        q = select(MatchDecision.id).where(MatchDecision.undone_at.is_(None))
        if user:
            q = q.where(MatchDecision.user == user)
        return len(s.scalars(q).all())


def ingest_query(cat: Catalogue, upload: object, *, user: str) -> tuple[int, str]:
    """Import one uploaded photo (or find it if already in the catalogue); returns (image id, message)."""
    from db.ingest import ingest_uploads

    user = curator_name(user)
    if upload is None:
        raise ValueError("Choose a photo to upload first.")
    report = ingest_uploads(cat, [upload_path(upload)], user=user)
    ids = report.image_ids
    if not ids:
        problems = "; ".join(f"{it.name}: {it.message}" for it in report.items if it.message) or "unknown reason"
        raise CatalogueError(f"The photo could not be imported ({problems}).")
    status = report.items[0].status if report.items else "imported"
    return ids[0], f"Photo #{ids[0]} {'imported' if status == 'imported' else status}."


# =========================================================================== benchmarks and evaluations

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


# =========================================================================== jobs


@dataclass
class JobRow:
    id: int
    kind: str
    status: str  # queued | running | cancelling | succeeded | failed | cancelled
    progress: float
    message: str
    params: str
    created: str
    duration: str
    can_cancel: bool
    can_retry: bool
    error: str | None
    waited_s: float | None = None  # for a queued job: seconds since it was queued


def _duration(job: Job) -> str:
    if job.started_at is None:
        return ""
    from db.models import utcnow

    end = job.finished_at or utcnow()
    secs = max(0, int((end - job.started_at).total_seconds()))
    return f"{secs // 60} min {secs % 60:02d} s" if secs >= 60 else f"{secs} s"


def job_rows(cat: Catalogue, *, limit: int = 50) -> list[JobRow]:
    """The newest jobs with what the Jobs tab shows and which buttons apply."""
    from db.models import utcnow
    from jobs.queue import list_jobs

    out = []
    for job in list_jobs(cat, limit=limit):
        status = job.status.value
        if job.status == JobStatus.running and job.cancel_requested:
            status = "cancelling"
        params = ", ".join(f"{k}={v}" for k, v in (job.params or {}).items() if k != "user")
        out.append(JobRow(id=job.id, kind=job.kind, status=status, progress=float(job.progress or 0.0),
                          message=job.message or "", params=params, created=_utc(job.created_at),
                          duration=_duration(job),
                          can_cancel=job.status in (JobStatus.queued, JobStatus.running) and not job.cancel_requested,
                          can_retry=job.status in (JobStatus.failed, JobStatus.cancelled),
                          error=(job.error or "").strip().splitlines()[-1] if job.error else None,
                          waited_s=(utcnow() - job.created_at).total_seconds()
                          if job.status == JobStatus.queued and job.created_at else None))
    return out


def oldest_queued_wait_s(rows: Sequence[JobRow]) -> float | None:
    """Seconds the longest-waiting queued job has waited, or None when nothing waits."""
    waits = [r.waited_s for r in rows if r.status == "queued" and r.waited_s is not None]
    return max(waits) if waits else None


def cancel_job(cat: Catalogue, job_id: int) -> str:
    from jobs.queue import request_cancel

    status = request_cancel(cat, int(job_id))
    if status == JobStatus.cancelled:
        return f"Job #{job_id} cancelled."
    if status == JobStatus.running:
        return f"Job #{job_id} will stop at its next step."
    return f"Job #{job_id} has already finished ({status.value})."


def retry_job(cat: Catalogue, job_id: int) -> str:
    from jobs.queue import InvalidTransition, retry

    try:
        retry(cat, int(job_id))
    except InvalidTransition as exc:
        raise CatalogueError(f"Job #{job_id} cannot be run again: {exc}.") from None
    return f"Job #{job_id} queued again."


def warm_feature_cache(cat: Catalogue, *, backbone: str = DEFAULT_MODEL) -> str:
    """Queue an ``embed`` job so match review does not compute features while the curator waits."""
    from jobs.queue import submit

    job_id = submit(cat, "embed", {"backbone": backbone})
    return f"Job #{job_id} queued: computing {backbone} features for every photo."


def worker_running() -> bool:
    """Whether a job worker thread runs in this process (jobs only progress when one runs somewhere)."""
    import threading

    return any(t.name.startswith("rosette-worker") and t.is_alive() for t in threading.enumerate())
