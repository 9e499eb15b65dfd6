"""What the Match review screen shows: the photo to identify, its ranked candidates (with calibrated
probabilities, mirror badges and spot evidence), the review queue, the matched spots of a pair. The decisions
taken on it are actions of their own, in :mod:`jobs.actions.decisions`.

Like :mod:`jobs.actions.catalogue`, every function does one thing and returns plain data (dataclasses, rows,
curator-readable messages) that a tab or a command only renders. Curator-caused problems (no such photo, a
malformed date ...) are raised as ``CatalogueError`` / ``ValueError`` with a message meant to be shown as is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import select

from core.identify.backbones import DEFAULT_BACKBONE, list_backbones, weights_available
from core.identify.calibration import ENOUGH_DECISIONS
from core.io.images import load_rgb
from core.inspect.masking import decode_mask_png
from core.field import identities as ids
from core.field.identities import suggests_new_animal
from core.identify.spots.fusion import GLOBAL
from core.identify.spots.verify import STATUS_WORDS
from db.identify.calibration import calibrator_for, new_individual_threshold
from db.field.identities import NoCalibration, curator_gallery, match_posteriors
from db.catalogue import CatalogueError, check_date
from db.identify.matching import MatchResult, rank_candidates
from db.identify.matching import review_queue as ranked_queue
from db.models import (
    DecisionKind,
    Evaluation,
    Image,
    Individual,
    JobStatus,
    MatchDecision,
    Model,
    ModelStatus,
    Sighting,
)
from db.session import Catalogue
from db.species import active_model_name, find_species, species_of_image
from db.identify.spots import PIPELINE_HEAD, load_pipeline, pipeline_discrimination, with_decision_calibration
from db.identify.vector_index import build_vector_index as build_index_now
from db.identify.vector_index import index_state
from jobs.actions.frames import annotation_picture
from jobs.actions.review_words import animal_places
from jobs.actions.spots import MatchedSpotsRequest, matched_spots
from jobs.queue import list_jobs, submit
from jobs.requests.match import IndexBuildRequest

DEFAULT_MODEL = DEFAULT_BACKBONE
CANDIDATES_SHOWN = 12
QUEUE_LIMIT = 500

# (label a curator reads, value rank_candidates takes)
FLANK_FILTERS: list[tuple[str, str]] = [("All flanks", "any"), ("Same flank only", "same"),
                                        ("Opposite flank only", "cross")]
DECISION_WORDS = {kind.value: kind.words for kind in DecisionKind}  # one vocabulary: db.models.DecisionKind


def utc_text(t: datetime | None) -> str:
    """A stored (naive UTC) time as curators read it, without the zone."""
    return t.replace(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if t else ""


def enum_value(v: Any) -> str:
    return v.value if hasattr(v, "value") else str(v)


# =========================================================================== match review


def unavailable_models() -> list[str]:
    """Registered backbones whose weights are not on this machine (shown as unavailable, never offered)."""
    return [n for n in list_backbones() if not n.endswith(":") and not weights_available(n)]


def active_model(cat: Catalogue, species: int | str | None = None) -> str:
    """The active model of a species (the default species when None)."""
    return active_model_name(cat, species)


def active_model_state(cat: Catalogue, species: int | str | None = None) -> tuple[str, bool]:
    """(active model, ready): ready once no queued or running embedding job is computing its features."""
    name = active_model(cat, species)
    busy = any(j.status in (JobStatus.queued, JobStatus.running) and (j.params or {}).get("backbone") == name
               for j in list_jobs(cat, limit=50, kind="embed"))
    return name, not busy


def pipeline_names(cat: Catalogue) -> list[str]:
    """Fused pipelines (global shortlist + spot evidence) of ``cat`` that are not archived, newest first (those
    whose global model's weights are not on this machine left out)."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Model.name, Model.backbone).where(Model.head == PIPELINE_HEAD,
                                                                  Model.status != ModelStatus.archived)
                         .order_by(Model.id.desc())).all()
    try:
        missing = set(unavailable_models())
    except ImportError:
        missing = set()
    return [name for name, backbone in rows if backbone not in missing]


def matcher_choices(cat: Catalogue | None = None) -> list[str]:
    """Models a curator can match with: the offline default first, then the trained models of ``cat`` (newest
    first), then its fused pipelines (newest first), then the other backbones (hub prefixes left out)."""
    names = [n for n in list_backbones() if not n.endswith(":") and weights_available(n)]
    trained: list[str] = []
    pipelines: list[str] = []
    if cat is not None:
        from db.identify.training import trained_model_names  # lazy: db.identify.training imports torch (seconds)

        trained = trained_model_names(cat)
        pipelines = [n for n in pipeline_names(cat) if n not in trained]
    rest = [n for n in names if n != DEFAULT_MODEL and n not in trained and n not in pipelines]
    return ([DEFAULT_MODEL] if DEFAULT_MODEL in names else []) + trained + pipelines + rest


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
    decision_version: int = 0  # the photo's version when shown: a decision claims it (compare-and-set)
    camera: str | None = None
    observer: str | None = None
    title: str | None = None  # which animal: "animal #3, one of 2 in photo f003.jpg (the left one)"

    def facts(self) -> list[tuple[str, str]]:
        """(label, value) lines shown next to the photo."""
        return [
            ("Animal", self.title) if self.title else ("Photo", f"#{self.image_id} · {self.original_name}"),
            ("Currently", self.individual_name or "not assigned to an individual"),
            ("Flank", self.flank if self.flank != "unknown" else "not set"),
            ("Sighting", self.sighting or "none"),
            ("Date", self.date or "unknown"),
            ("Place", self.place or "unknown"),
            *([("Camera", self.camera)] if self.camera else []),
            *([("Observer", self.observer)] if self.observer else []),
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
            what = DECISION_WORDS.get(enum_value(d.decision), enum_value(d.decision))
            decided = f"{what}{f' ({other})' if other else ''} by {d.user}, {utc_text(d.created_at)} UTC"
            decided_id = d.id
        photo = QueryPhoto(image_id=im.id, decided=decided, decided_id=decided_id, decision_version=im.decision_version, path=cat.blobs.existing(im.blob_path) or "", original_name=im.original_name,
                          flank=enum_value(im.flank), sighting=sg.key if sg else None,
                          date=(sg.date if sg and sg.date else None) or im.exif_time, place=place,
                          individual_id=im.individual_id, individual_name=name,
                          mask_path=cat.blobs.existing(im.mask_path), mask_source=im.mask_source,
                          camera=sg.camera if sg else None, observer=sg.observer if sg else None)
    animal = animal_places(cat, [photo.image_id]).get(photo.image_id)
    photo.title = animal.title if animal is not None else None
    return photo


def query_picture(cat: Catalogue, photo: QueryPhoto, *, outline: bool) -> str | np.ndarray:
    """The query animal as a screen shows it (:func:`annotation_picture`: its stored photo, or its box's crop);
    with ``outline`` and a mask, as RGB with the mask's outline drawn. A mask is made in the crop's pixels, so its
    outline is drawn on the crop, never stretched over the whole frame."""
    picture = annotation_picture(cat, photo.image_id)
    if not outline or not photo.mask_path:
        return picture
    import cv2  # lazy: OpenCV is only needed to draw an outline

    rgb = np.array(load_rgb(picture) if isinstance(picture, str) else picture, dtype=np.uint8, copy=True)
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
    # the posterior probability that this candidate's individual (all its photos together) is the query's animal,
    # from the one distribution over the catalogue and "a new animal" (a fused pipeline's too: its pair probability
    # is ``score``)
    probability: float | None = None
    # with a fused pipeline (then ``score`` is the fused probability): what it rests on
    global_score: float | None = None  # the global model's raw score (cosine)
    inliers: int | None = None  # verified matched spots with the query
    spot_status: str | None = None  # a core.identify.spots.verify.STATUS_WORDS key, or "outside_shortlist"
    spot_probability: float | None = None  # the inlier count's calibrated probability
    title: str | None = None  # of a photo holding several animals: "animal #7, the right one of 2 animals in f9.jpg"
    in_photo_as: int | None = None  # this individual is already the query photo's annotation #N: ranked below

    @property
    def has_spot_facts(self) -> bool:
        return self.spot_status is not None or self.inliers is not None


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
    new_threshold: float | None = None  # p(new) from it on (and above every candidate) a new individual is suggested
    pipeline: bool = False  # ranked by a fused pipeline: scores are fused calibrated probabilities
    query_spot_note: str | None = None  # e.g. the query photo has no mask / no spot evidence
    index_note: str | None = None  # which index answered (exact flat, or the on-disk IVF-PQ with its recall)
    p_new: float | None = None  # the posterior's "a new animal" (None: withheld)
    probability_withheld: str | None = None  # why no probability is shown, and what would change it

    @property
    def suggest_new(self) -> bool:
        """The "probably a new individual" hint: from p(new) of the one posterior, whatever scored the view (a pair's
        score against a threshold calls almost every photo new when the calibration tops out low); none while
        probabilities are withheld."""
        if not self.candidates:
            return True
        if self.probability_withheld or self.new_threshold is None or self.p_new is None:
            return False
        return suggests_new_animal(self.p_new, [c.probability for c in self.candidates if c.probability is not None],
                                   threshold=self.new_threshold)

    @property
    def seen_individual_id(self) -> int | None:
        return self.query.individual_id

    def candidate(self, rank: int | None) -> CandidateCard | None:
        """The candidate at ``rank`` (1-based), or the top one when ``rank`` is None / not shown."""
        for c in self.candidates:
            if c.rank == rank:
                return c
        return self.candidates[0] if self.candidates else None


def ranked_candidates(cat: Catalogue, image_id: int, *, model_name: str = DEFAULT_MODEL, k: int = CANDIDATES_SHOWN,
                      flank_filter: str = "any", place: str | None = None, date_from: str | None = None,
                      date_to: str | None = None) -> MatchResult:
    """The model's ranking of the gallery for one photo, as scored (``rosette match``); :func:`match_query` adds
    what the review screen shows around it."""
    result = rank_candidates(cat, int(image_id), model_name=model_name, k=k, flank_filter=flank_filter, place=place,
                             date_from=date_from, date_to=date_to)
    queue_follow_up(cat, result)
    return result


def queue_follow_up(cat: Catalogue, result: MatchResult) -> list[int]:
    """Queue the jobs a ranking asked for (the gallery's on-disk index build), unless the same job is already
    queued or running; returns the new job ids."""
    ids = []
    for item in result.follow_up:
        if item["kind"] == "build_index":
            ids += [j for j in [submit_index_build(cat, IndexBuildRequest.from_dict(item["params"]))[0]] if j]
    return ids


def _pending_index_build(cat: Catalogue, request: IndexBuildRequest) -> int | None:
    for j in list_jobs(cat, limit=200, kind="build_index"):
        same = (j.params or {}).get("species") == request.species and (j.params or {}).get("model") == request.model
        if same and j.status in (JobStatus.queued, JobStatus.running):
            return j.id
    return None


def submit_index_build(cat: Catalogue, request: IndexBuildRequest) -> tuple[int | None, str]:
    """Queue the ``build_index`` job of a species and model (its active model when none is named); returns (new job
    id or None when one is already queued or running, message)."""
    if request.model is None:
        request = IndexBuildRequest(species=request.species, model=active_model_name(cat, request.species),
                                    user=request.user, reason=request.reason)
    pending = _pending_index_build(cat, request)
    if pending is not None:
        return None, f"the vector index of species {request.species} for {request.model} is already being built " \
                     f"(job #{pending})"
    job_id = submit(cat, "build_index", request.to_dict())
    return job_id, (f"building the vector index of species {request.species} for {request.model}: job #{job_id} "
                    "(heavy queue)")


def build_vector_index(cat: Catalogue, request: IndexBuildRequest, *,
                       progress: Callable[[int, int], None] | None = None,
                       should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Build the species' on-disk IVF-PQ index now (the ``build_index`` job, ``rosette index build --wait``)."""
    model = request.model or active_model_name(cat, request.species)
    return build_index_now(cat, species_id=request.species, model_name=model, progress=progress,
                           should_cancel=should_cancel)


def vector_index_state(cat: Catalogue, *, species: int, model: str | None = None) -> dict[str, Any]:
    """The species' vector index for ``model`` (its active model when None): built or not, in use, its recall."""
    return index_state(cat, species, model or active_model_name(cat, species))


def review_filters(flank: str | None, place: str | None, date_from: str | None, date_to: str | None
                   ) -> dict[str, str | None]:
    """The candidate filters as one value the screen keeps: a malformed date is refused here, before anything
    changes."""
    return {"flank": flank or "any", "place": (place or "").strip() or None,
            "date_from": check_date(date_from, what="the 'from' date"),
            "date_to": check_date(date_to, what="the 'to' date")}


def photo_species(cat: Catalogue, image_id: int | None) -> int:
    """The species of a photo (the default species without one): whose new-individual threshold applies."""
    return species_of_image(cat, image_id) if image_id is not None else 1


def new_threshold_percent(cat: Catalogue, image_id: int | None = None) -> int:
    """The new-individual threshold (in %) of the photo's species (the default species without a photo)."""
    return round(100 * new_individual_threshold(cat, photo_species(cat, image_id)))


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
    return out, f"diagnostics run #{ev.id} on {ev.benchmark_name} ({utc_text(ev.created_at)} UTC)"


@dataclass(frozen=True)
class CandidateNumbers:
    """What Match review and ``rosette match`` show of the posterior (:func:`db.field.identities.match_posteriors`):
    each candidate's individual's probability, p(new), and what they rest on; or no number and the sentence that
    says why (``withheld``)."""

    probabilities: list[float | None]
    p_new: float | None
    withheld: str | None
    note: str | None


def candidate_numbers(cat: Catalogue, result: MatchResult, *, species_id: int) -> CandidateNumbers:
    """The one posterior over the catalogue's individuals plus "a new animal" for the ranked query, read at its
    candidates (several photos of one individual share that individual's probability; an individual already in the
    query's photo has none of it). The Population tab's review list reads the same posterior; a fused pipeline's
    view reads its own (:func:`pipeline_numbers`)."""
    if result.pipeline:
        return pipeline_numbers(cat, result, species_id=species_id)
    none: list[float | None] = [None] * len(result.candidates)
    # a screen drawn after every decision: a calibration on thousands of pairs may lag a few decisions behind while
    # it is refitted in the background (the note says how many outcomes it rests on)
    cal = calibrator_for(cat, result.model_name, species_id=species_id, allow_stale=True)
    try:
        post = match_posteriors(cat, [[result.query_image_id]], species_id=species_id, model=result.model_name,
                                calibrator=cal)[0]
    except NoCalibration as exc:
        return CandidateNumbers(none, None, str(exc), None)
    if post.withheld:
        return CandidateNumbers(none, None, post.withheld, None)
    parts = ", ".join(f"{n} {what}" for what, n in cal.sources.items() if n)
    rough = " — rough: few outcomes yet" if cal.n_outcomes < 50 else ""
    found = f"; {cal.discrimination.figure()}" if cal.discrimination is not None else ""
    note = (f"the probability that each candidate is this animal, one distribution over the catalogue's individuals "
            f"and a new animal (summing to 1); pairs calibrated by {cal.describe()} on {cal.n_outcomes} outcomes "
            f"({parts}) for {result.model_name}{found}{rough}")
    return CandidateNumbers([post.probability_of(c.individual_name) for c in result.candidates], post.p_new, None,
                            note)


def pipeline_numbers(cat: Catalogue, result: MatchResult, *, species_id: int) -> CandidateNumbers:
    """A fused pipeline's posterior over the individuals it scored plus "a new animal", summing to 1: each
    individual's best fused probability among its candidates (a calibrated p(same), read against the base rate of
    the pairs the pipeline's global scorer was calibrated on) turned into the distribution by
    :func:`core.field.identities.match_distribution`, the prior of a new animal and each individual's share from
    the curator gallery's counts, as :func:`db.field.identities.match_posteriors` reads them. Individuals only outside the
    pipeline's verified shortlist have no fused probability and no share (it ranked them below every shortlisted
    one); an individual already in the query's photo gets 0. Withheld, with the same sentence, while the fused
    probability does not tell the curators' same pairs from their different ones
    (:func:`db.identify.spots.pipeline_discrimination`)."""
    none: list[float | None] = [None] * len(result.candidates)
    stored = load_pipeline(cat, result.model_name)
    if stored is None:
        raise CatalogueError(f"{result.model_name!r} is no longer a stored pipeline: open the photo again.")
    with cat.unit_of_work() as s:
        species = find_species(s, species_id).name
    found = pipeline_discrimination(cat, stored, species_id=species_id)
    if found is not None and not found.discriminates:
        return CandidateNumbers(none, None, found.withheld(species), None)
    pipeline = with_decision_calibration(cat, stored, species_id=species_id)
    cal = pipeline.calibrators.get(GLOBAL)
    if cal is None or not 0 < cal.n_positive < cal.n_outcomes:
        return CandidateNumbers(none, None, f"No match probabilities from pipeline {result.model_name}: it stores no "
                                f"count of the same and different pairs its global calibration rests on, so its "
                                f"fused probabilities cannot be shared between the individuals and a new animal. "
                                f"Build the pipeline again (rosette eval) to store them.", None)
    ruled = {c.individual_name for c in result.candidates if c.in_photo_as is not None}
    best: dict[str, float] = {}  # one individual's photos: its best pair speaks for it, as match_posteriors reads
    for c in result.candidates:
        if c.spot_status != "outside_shortlist" and c.individual_name not in ruled:
            best[c.individual_name] = max(best.get(c.individual_name, 0.0), min(1.0, max(0.0, float(c.score))))
    gallery = curator_gallery(cat, species_id)
    everyone = sorted({n for n, photos in gallery.items() if photos} | set(best))
    counts = np.array([len(gallery.get(n, ())) for n in everyone], dtype=np.int64)
    share = dict(zip(everyone, ids.capture_prior(counts)))
    names = list(best)
    dist, p_new = ids.match_distribution([best[n] for n in names], prior_new=ids.good_turing_new(counts),
                                         pair_base_rate=cal.n_positive / cal.n_outcomes,
                                         prior=[share[n] for n in names] if names else None)
    posterior = dict(zip(names, (float(p) for p in dist)))
    probs: list[float | None] = [0.0 if c.individual_name in ruled else posterior.get(c.individual_name)
                                 for c in result.candidates]
    checked = (f"; on the curators' decided pairs {found.figure()}" if found is not None else
               f"; not yet checked on curators' decisions (fewer than {ENOUGH_DECISIONS} decided pairs with both "
               f"outcomes): it rests on the calibration the pipeline was built with")
    note = (f"the probability that each candidate is this animal, one distribution over the individuals the pipeline "
            f"scored and a new animal (summing to 1), from the pipeline's fused calibrated probability (global "
            f"shortlist + spot evidence) by {result.model_name}: {result.model_provenance}{checked}")
    return CandidateNumbers(probs, float(p_new), None, note)


def match_query(cat: Catalogue, image_id: int, *, model_name: str = DEFAULT_MODEL, flank_filter: str = "any",
                place: str | None = None, date_from: str | None = None, date_to: str | None = None,
                k: int = CANDIDATES_SHOWN, progress: Callable[[int, int], None] | None = None) -> MatchView:
    """Rank the gallery for one photo (optionally only photos from a place / date range) and
    gather what the review screen shows."""
    if flank_filter not in {v for _, v in FLANK_FILTERS}:
        raise ValueError(f"unknown flank filter {flank_filter!r}")
    photo = query_photo(cat, image_id)
    result = rank_candidates(cat, photo.image_id, model_name=model_name, k=k, flank_filter=flank_filter,
                             place=place, date_from=date_from, date_to=date_to, progress=progress)
    queue_follow_up(cat, result)
    badges, source = laterality_badges(cat, model_name)
    species_id = species_of_image(cat, photo.image_id)
    numbers = candidate_numbers(cat, result, species_id=species_id)
    probs, cal_note = numbers.probabilities, numbers.note
    calibrated = numbers.p_new is not None
    places = animal_places(cat, [c.image_id for c in result.candidates]) if result.candidates else {}
    cards = [CandidateCard(rank=c.rank, image_id=c.image_id, individual_id=c.individual_id,
                           individual_name=c.individual_name, score=c.score, flank=c.flank, sighting=c.sighting,
                           same_sighting=c.same_sighting, thumb=cat.blobs.existing(c.thumb_path) or cat.blobs.existing(c.blob_path),
                           mirror_sim=badges.get(c.image_id, (None, None))[0],
                           danger_margin=badges.get(c.image_id, (None, None))[1],
                           probability=None if p is None else float(p),
                           global_score=getattr(c, "global_score", None), inliers=getattr(c, "inliers", None),
                           spot_status=getattr(c, "spot_status", None),
                           spot_probability=getattr(c, "spot_probability", None),
                           title=places[c.image_id].brief if c.image_id in places else None,
                           in_photo_as=getattr(c, "in_photo_as", None))
             for c, p in zip(result.candidates, probs)]
    note = ", ".join(part for part in (
        f"place contains {place.strip()!r}" if (place or "").strip() else "",
        f"from {date_from.strip()}" if (date_from or "").strip() else "",
        f"to {date_to.strip()}" if (date_to or "").strip() else "") if part) or None
    return MatchView(query=photo, model_name=result.model_name, model_provenance=result.model_provenance,
                     flank_filter=flank_filter, candidates=cards, diagnostics_source=source if badges else None,
                     place_date_note=note, calibration_note=cal_note,
                     new_threshold=new_individual_threshold(cat, species_id) if calibrated else None,
                     pipeline=bool(result.pipeline), query_spot_note=result.query_spot_note,
                     index_note=result.index_used,
                     p_new=numbers.p_new, probability_withheld=numbers.withheld)


# =========================================================================== matched spots

SPOTS_MATCHER = "sift"  # the local matcher the matched-spots view uses when the model is not a pipeline
# what a card says instead of "N matched spots" when the pair has no spots to count
SPOT_CARD_WORDS = {"cross_flank": "opposite flank: no spots to compare", "no_keypoints": "no spot evidence",
                   "outside_shortlist": "outside the verified shortlist"}


def spot_status_words(status: str | None) -> str:
    """A spot status key (``core.identify.spots.verify.STATUS_WORDS`` or ``outside_shortlist``) in curator words."""
    if status is None:
        return ""
    if status == "outside_shortlist":
        return "outside the pipeline's verified shortlist: ranked by the global model alone"
    return STATUS_WORDS.get(status, status)


@dataclass
class SpotsView:
    """The matched-spots panel for the shown query and one candidate."""

    picture: np.ndarray  # both photos side by side, a line joining each pair of matched spots
    text: str  # one Markdown line for curators
    n_inliers: int
    status: str
    matcher: str


def candidate_spots(cat: Catalogue, view: MatchView | None, rank: int | None) -> SpotsView:
    """The matched spots between the shown query and the candidate at ``rank`` (the top one by default), under
    the view's pipeline when it ranked with one, else with the default local matcher."""
    if view is None:
        raise CatalogueError("Open a photo to match first.")
    cand = view.candidate(rank)
    if cand is None:
        raise CatalogueError("There is no candidate to compare with.")
    request = MatchedSpotsRequest(query_image_id=int(view.query.image_id), candidate_image_id=int(cand.image_id),
                                  pipeline=view.model_name if view.pipeline else None, matcher=SPOTS_MATCHER)
    spots = matched_spots(cat, request)
    what = "matched spot" if spots.n_inliers == 1 else "matched spots"
    text = (f"**{spots.n_inliers} {what}** between photo #{view.query.image_id} and candidate {cand.rank} "
            f"({cand.individual_name}, photo #{cand.image_id}) — {spots.words} ({spots.matcher}"
            f"{f', pipeline {view.model_name}' if view.pipeline else ''}; keypoints {spots.n_keypoints[0]} / "
            f"{spots.n_keypoints[1]}).")
    if spots.note:
        text += f" Note: {spots.note}."
    return SpotsView(picture=spots.picture, text=text, n_inliers=spots.n_inliers, status=spots.status,
                     matcher=spots.matcher)


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
    return [QueueEntry(q.image_id, q.top_score, q.top_individual, q.assigned)
            for q in ranked_queue(cat, model_name=model_name, limit=limit, progress=progress)]


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
    """(label, image id) for every animal, for picking a query by hand (an animal of a photo holding several is
    told apart by its place: "the left one of 2 animals")."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.original_name, Individual.name)
                         .outerjoin(Individual, Image.individual_id == Individual.id).order_by(Image.id)).all()
    places = animal_places(cat)
    return [(f"#{i} · {name}{f' · {places[i].short}' if i in places and places[i].short else ''} · "
             f"{who or 'unassigned'}", i) for i, name, who in rows]


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
