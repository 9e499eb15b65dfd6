"""Where each detection's identity comes from, and the catalogue's study as an imputation input
(:mod:`core.field.identities`).

**Provenance** of an annotation of the species with a deployment and a time in the study's window:

- ``curator``: assigned to an individual by a standing human match decision (same, or new individual), or by
  hand or an import without a machine ``classificationMethod`` (labels a person gave), or a Camtrap DP
  ``classificationMethod`` of human;
- ``machine``: assigned by a Camtrap DP observation whose ``classificationMethod`` is machine (its
  ``classificationProbability``, when given, is kept as its weight), with no standing human decision since;
- ``unreviewed``: no individual.

**Match distributions.** Each non-curator detection is scored by the species' active model against every
curator-identified annotation of the species (the gallery); an individual's score is its best photo's, its rank
among the individuals the candidate's rank, and the model's calibrator (:func:`db.identify.calibration.calibrator_for`)
turns (score, rank) into the probability of the same animal. "New" gets its own calibrated p(new)
(:mod:`core.field.new_animal`, fitted on the gallery's photos), read at the study's Good-Turing share of new
animals (:func:`core.field.identities.shift_p_new`; each draw redraws that share from its own uncertainty), and the
individuals share the rest by their likelihood ratios times their share of the study's curator detections
(:func:`core.field.identities.capture_prior`: an animal caught often is the likelier owner of a photo;
:func:`core.field.identities.unit_distribution`); when the gallery cannot support that fit,
:func:`core.field.identities.match_distribution` uses a Good-Turing prior of "new". Unreviewed annotations of one
event (sighting) whose photos each hold one annotation of the species are one unit; two unreviewed units are one new
animal with the calibrated probability of their best pair of photos.

**One posterior, every screen.** :func:`match_posteriors` is the one distribution over the catalogue's individuals
plus "a new animal" (summing to 1) that Match review, ``rosette match``, ``rosette review-priority`` and the
Population tab's review list all read: the gallery is the species' curator-identified annotations
(:func:`curator_gallery`), each individual's prior share its number of them (:func:`core.field.identities.capture_prior`),
the Good-Turing share of new animals from the same counts. An individual already identified in the query's own photo
is ruled out (two animals in one frame are two individuals). While the calibration does not discriminate
(:class:`core.identify.calibration.Discrimination`) the numbers still feed the imputation, but every screen shows
:attr:`MatchPosterior.withheld` instead of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import date
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import select

from core.field import population as pop
from core.field import identities as ids
from core.field import new_animal as na
from core.identify.calibration import Calibrator
from core.similarity import pairwise_scores
from core.field.stations import StationError
from db.identify.calibration import calibration_refusal, calibrator_for
from db.catalogue import CatalogueError, current_individual
from db.embeddings import embed_images, gallery_image_ids, get_backbone
from db.models import DecisionKind, Image, Individual, MatchDecision, Photo
from db.field.population import PopulationStudy, _local
from db.field.population import population_study as _population_study
from db.session import Catalogue
from db.species import active_model_name, find_species

CURATOR, MACHINE, UNREVIEWED = ids.PROVENANCES


class NoCalibration(CatalogueError):
    """The species has no model whose scores read as probabilities yet: the identities cannot be imputed."""


@dataclass(frozen=True)
class IdentityDetection:
    """One annotation of the species in the study's window, with where its identity comes from."""

    annotation_id: int
    photo_id: int
    sighting_id: int | None
    occasion: int
    individual: str | None  # the active individual's name (None: unreviewed)
    provenance: str
    weight: float | None = None  # a machine identity's classificationProbability


@dataclass(frozen=True)
class IdentityStudy:
    """The study as decided and each detection's provenance; ``gallery`` maps each active individual of the
    species to its curator-identified annotations (anywhere, the photos a detection is matched against)."""

    study: PopulationStudy
    species_id: int
    detections: tuple[IdentityDetection, ...]
    gallery: dict[str, tuple[int, ...]]
    outside_occasions: int = 0  # unreviewed annotations on days the study has no occasion for
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def provenance_counts(self) -> dict[str, int]:
        counts = {p: 0 for p in ids.PROVENANCES}
        for d in self.detections:
            counts[d.provenance] += 1
        return counts


def _weight(details: dict | None) -> float | None:
    try:
        w = float((details or {}).get("classificationProbability"))
    except (TypeError, ValueError):
        return None
    return w if 0.0 <= w <= 1.0 else None


def _provenance(individual: str | None, details: dict | None, decided_by_curator: bool) -> str:
    if individual is None:
        return UNREVIEWED
    if decided_by_curator:
        return CURATOR
    method = str((details or {}).get("classificationMethod") or "").strip().lower()
    return MACHINE if method == "machine" else CURATOR


def identity_study(cat: Catalogue, study: PopulationStudy) -> IdentityStudy:
    """Every annotation of the study's species with a deployment and a time in its window, with its provenance
    (see the module notes), and the gallery of curator-identified annotations."""
    with cat.unit_of_work() as s:
        sp = find_species(s, study.species)
        individuals = {i.id: i for i in s.scalars(select(Individual))}
        names: dict[int, str | None] = {}
        for ind_id, ind in individuals.items():
            now = current_individual(ind, individuals)
            names[ind_id] = now.name if now is not None and now.active else None
        decided = set(s.scalars(select(MatchDecision.query_image_id).where(
            MatchDecision.undone_at.is_(None),
            MatchDecision.decision.in_([DecisionKind.same, DecisionKind.new_individual]))))
        rows = s.execute(select(Image.id, Image.individual_id, Image.photo_id, Image.sighting_id,
                                Image.observation_details, Photo.deployment_id, Photo.taken_at)
                         .join(Photo, Image.photo_id == Photo.id)
                         .where(Image.species_id == sp.id).order_by(Image.id)).all()
    start = datetime.combine(study.start, datetime.min.time())
    detections, gallery, outside = [], {}, 0
    for ann_id, ind_id, photo_id, sighting_id, details, dep_id, taken_at in rows:
        name = names.get(ind_id) if ind_id is not None else None
        prov = _provenance(name, details, ann_id in decided)
        if prov == CURATOR:
            gallery.setdefault(name, []).append(ann_id)
        if dep_id is None or not taken_at:
            continue
        try:
            when = _local(taken_at, "photo time")
        except StationError:
            continue
        if not start <= when < study.end:
            continue
        k = study.occasion_of(when)
        if k is None:
            outside += prov == UNREVIEWED
            continue
        detections.append(IdentityDetection(annotation_id=ann_id, photo_id=photo_id, sighting_id=sighting_id,
                                            occasion=k, individual=name, provenance=prov,
                                            weight=_weight(details) if prov == MACHINE else None))
    notes = []
    if outside:
        notes.append(f"{outside} unreviewed annotation(s) fall on days without an active camera or a decided "
                     "detection; they are left out.")
    return IdentityStudy(study=study, species_id=sp.id, detections=tuple(detections),
                         gallery={k: tuple(v) for k, v in gallery.items()}, outside_occasions=outside,
                         notes=tuple(notes))


def _matrix(rows: list[tuple[str, int]], n_occasions: int) -> np.ndarray:
    names = {n: i for i, n in enumerate(dict.fromkeys(n for n, _ in rows))}
    m = np.zeros((len(names), n_occasions), dtype=np.uint8)
    for n, k in rows:
        m[names[n], k] = 1
    return m


def confirmed_estimates(ident: IdentityStudy) -> list[pop.Estimate]:
    """M0, Mt and Mh-Chao from the curator identities only (the decided study's occasions)."""
    rows = [(d.individual, d.occasion) for d in ident.detections if d.provenance == CURATOR]
    return pop.estimate_all(_matrix(rows, ident.study.histories.n_occasions))


def _units(ident: IdentityStudy) -> list[list[IdentityDetection]]:
    """The non-curator detections as units: one per machine detection; the unreviewed ones of one event together
    when each of its photos holds one annotation of the species, else one each."""
    per_photo: dict[int, int] = {}
    for d in ident.detections:
        per_photo[d.photo_id] = per_photo.get(d.photo_id, 0) + 1
    units: list[list[IdentityDetection]] = []
    events: dict[int, list[IdentityDetection]] = {}
    for d in ident.detections:
        if d.provenance == CURATOR:
            continue
        if d.provenance == UNREVIEWED and d.sighting_id is not None and per_photo[d.photo_id] == 1:
            if d.sighting_id not in events:
                events[d.sighting_id] = []
                units.append(events[d.sighting_id])
            events[d.sighting_id].append(d)
        else:
            units.append([d])
    return units


def _best_per_group(sim: np.ndarray, row_groups: list[list[int]], col_groups: list[list[int]]) -> np.ndarray:
    """Group x group: the best score between a row group's and a column group's members."""
    by_col = np.column_stack([sim[:, g].max(axis=1) for g in col_groups]) if col_groups else \
        np.zeros((sim.shape[0], 0))
    return np.vstack([by_col[g].max(axis=0) for g in row_groups]) if row_groups else np.zeros((0, len(col_groups)))


def _halves(labels: list[str], seed: int) -> np.ndarray:
    """Each photo's half (False / True) by its identity, identities shuffled with ``seed``."""
    names = sorted(set(labels))
    order = np.random.default_rng(seed).permutation(len(names))
    half = {names[k]: bool(i % 2) for i, k in enumerate(order)}
    return np.array([half[x] for x in labels])


def fit_new_animal(sim: np.ndarray, labels: list[str], sightings: list[int | None], *, seed: int = 0
                   ) -> tuple[na.NewAnimalCalibrator | None, dict | None]:
    """p(new) for a gallery's photos (all-vs-all scores ``sim``): fitted on the protocol of
    :mod:`core.field.new_animal` over every identity, and measured honestly by cross-fitting (fitted on half the
    identities, measured on the other half, both ways). (None, None) when the photos do not support a fit."""
    if len(set(labels)) < 4:
        return None, None
    half = _halves(labels, seed)
    figures = []
    try:
        for pool in (half, ~half):
            fit = na.fit_new_animal(na.novelty_queries(sim, labels, sightings=sightings, query_pool=pool, seed=seed))
            figures.append(na.measure(fit, na.novelty_queries(sim, labels, sightings=sightings, query_pool=~pool,
                                                               seed=seed + 1)))
        everyone = na.novelty_queries(sim, labels, sightings=sightings, seed=seed)
        cal = na.fit_new_animal(everyone, sources={"queries": int(everyone.query.size)})
    except ValueError:
        return None, None
    n = sum(f["n"] for f in figures)
    report = {"ece": sum(f["ece"] * f["n"] for f in figures) / n, "n_queries": n,
              "n_new": int(everyone.is_new.sum()), "method": "Platt scaling of 'new' on the best individual's score "
              "and its gap to the second; a third of the identities made new (one photo a query, the rest out of the "
              "gallery); ECE cross-fitted on halves of the identities"}
    return cal, report


def _sightings(cat: Catalogue, image_ids: list[int]) -> list[int | None]:
    with cat.unit_of_work() as s:
        rows = dict(s.execute(select(Image.id, Image.sighting_id).where(Image.id.in_(image_ids))).all())
    return [rows.get(i) for i in image_ids]


def new_animal_report(cat: Catalogue, model: str, *, species_id: int) -> dict | None:
    """How well ``model`` tells a new animal, on the species' identified photos (``rosette calibration``): the
    cross-fitted ECE of p(new) and what it rests on; None when there are too few identities."""
    image_ids = gallery_image_ids(cat, species_id=species_id)
    with cat.unit_of_work() as s:
        owner = dict(s.execute(select(Image.id, Image.individual_id).where(Image.id.in_(image_ids))).all())
    backbone = get_backbone(cat, model)
    emb = embed_images(cat, image_ids, backbone=backbone)
    sim = pairwise_scores(emb, emb, metric=getattr(backbone.config, "metric", "cosine"))
    return fit_new_animal(sim, [str(owner[i]) for i in image_ids], _sightings(cat, image_ids))[1]


def curator_gallery(cat: Catalogue, species_id: int) -> dict[str, tuple[int, ...]]:
    """Each active individual of the species with its curator-identified annotations (anywhere): the gallery every
    posterior is read against (the provenance rules of the module notes)."""
    with cat.unit_of_work() as s:
        individuals = {i.id: i for i in s.scalars(select(Individual))}
        decided = set(s.scalars(select(MatchDecision.query_image_id).where(
            MatchDecision.undone_at.is_(None),
            MatchDecision.decision.in_([DecisionKind.same, DecisionKind.new_individual]))))
        rows = s.execute(select(Image.id, Image.individual_id, Image.observation_details)
                         .where(Image.species_id == species_id, Image.individual_id.is_not(None))
                         .order_by(Image.id)).all()
    gallery: dict[str, list[int]] = {}
    for ann_id, ind_id, details in rows:
        name = _active_name(individuals, ind_id)
        if name is not None and _provenance(name, details, ann_id in decided) == CURATOR:
            gallery.setdefault(name, []).append(ann_id)
    return {k: tuple(v) for k, v in gallery.items()}


def _active_name(individuals: dict[int, Individual], ind_id: int | None) -> str | None:
    ind = individuals.get(ind_id) if ind_id is not None else None
    now = current_individual(ind, individuals) if ind is not None else None
    return now.name if now is not None and now.active else None


def frame_individuals(cat: Catalogue, annotation_ids: list[int]) -> dict[str, int]:
    """The individuals already identified in the photos of ``annotation_ids`` (by their other animals), each with
    the annotation identified as it: none of them can be these animals."""
    with cat.unit_of_work() as s:
        photos = select(Image.photo_id).where(Image.id.in_(annotation_ids)).scalar_subquery()
        rows = s.execute(select(Image.id, Image.individual_id).where(
            Image.photo_id.in_(photos), Image.id.not_in(annotation_ids), Image.individual_id.is_not(None))
            .order_by(Image.id)).all()
        individuals = {i.id: i for i in s.scalars(select(Individual))} if rows else {}
    out: dict[str, int] = {}
    for ann_id, ind_id in rows:
        name = _active_name(individuals, ind_id)
        if name is not None:
            out.setdefault(name, int(ann_id))
    return out


@dataclass(frozen=True)
class MatchPosterior:
    """One query's posterior (an annotation, or an event's annotations together): each gallery individual's
    probability of being its animal and p(new), summing to 1; the individuals ruled out because they are already
    in the query's photo (name -> that annotation); and, while the calibration does not discriminate, the sentence
    a screen shows instead of these numbers."""

    annotation_ids: tuple[int, ...]
    individuals: tuple[str, ...]
    probabilities: tuple[float, ...]
    p_new: float
    ruled_out: dict[str, int] = field(default_factory=dict)
    withheld: str | None = None

    def probability_of(self, individual: str) -> float | None:
        """The individual's probability (None for one outside the curator gallery)."""
        try:
            return self.probabilities[self.individuals.index(individual)]
        except ValueError:
            return None

    def most_likely(self) -> tuple[str | None, float | None]:
        if not self.probabilities:
            return None, None
        k = int(np.argmax(self.probabilities))
        return self.individuals[k], self.probabilities[k]


def no_calibration(cat: Catalogue, *, species: str, species_id: int, model: str) -> NoCalibration:
    """The refusal of any number that needs a calibration, with its real cause and what to do; one sentence for
    the command line, the Population tab (before a job is queued) and the job itself."""
    why = calibration_refusal(cat, model, species_id=species_id) or \
        f"model {model!r} has no calibration yet, so its scores cannot be read as probabilities"
    return NoCalibration(f"{species}: {why}; then check it with `rosette calibration {model} --species "
                         f"\"{species}\"`")


_NEW_CAL_CACHE: dict[tuple, tuple[na.NewAnimalCalibrator | None, dict | None]] = {}
NEW_ANIMAL_MAX_PHOTOS = 3000  # p(new) is fitted on at most this many gallery photos' all-vs-all scores


def _new_animal_fit(cat: Catalogue, model: str, gallery_ids: list[int], labels: list[str],
                    g_emb: np.ndarray, metric: str) -> na.NewAnimalCalibrator | None:
    """:func:`fit_new_animal` on the gallery, kept while the gallery and model are unchanged (every screen asks)."""
    key = (str(cat.data_dir), model, tuple(gallery_ids), tuple(labels))
    if key not in _NEW_CAL_CACHE:
        _NEW_CAL_CACHE.clear()
        n = min(len(gallery_ids), NEW_ANIMAL_MAX_PHOTOS)  # all-vs-all: the first photos stand for a large gallery
        _NEW_CAL_CACHE[key] = fit_new_animal(pairwise_scores(g_emb[:n], g_emb[:n], metric=metric), labels[:n],
                                             _sightings(cat, gallery_ids[:n]))
    return _NEW_CAL_CACHE[key][0]


def match_posteriors(cat: Catalogue, groups: list[list[int]], *, species_id: int, model: str,
                     gallery: dict[str, tuple[int, ...]] | None = None,
                     progress: Callable[[int, int], None] | None = None,
                     should_cancel: Callable[[], bool] | None = None,
                     calibrator: Calibrator | None = None) -> list[MatchPosterior]:
    """Each group's posterior (see the module notes). Refused (:class:`NoCalibration`, with its real cause) when
    ``model`` has no calibration for the species. A caller that already holds the model's ``calibrator`` passes
    it: looking it up reads and scores every decided pair again."""
    cal = calibrator if calibrator is not None else calibrator_for(cat, model, species_id=species_id)
    with cat.unit_of_work() as s:
        species = find_species(s, species_id).name
    if cal is None:
        raise no_calibration(cat, species=species, species_id=species_id, model=model)
    withheld = None
    if cal.discrimination is not None and not cal.discrimination.discriminates:
        withheld = cal.discrimination.withheld(species)
    gallery = curator_gallery(cat, species_id) if gallery is None else gallery
    names = sorted(n for n in gallery if gallery[n])
    gallery_ids = [a for n in names for a in gallery[n]]
    query_ids = [a for g in groups for a in g]
    backbone = get_backbone(cat, model)
    emb = embed_images(cat, [*gallery_ids, *query_ids], backbone=backbone, progress=progress,
                       should_cancel=should_cancel)
    metric = getattr(backbone.config, "metric", "cosine")
    g_emb, q_emb = emb[:len(gallery_ids)], emb[len(gallery_ids):]
    rows, pos = [], 0
    for g in groups:
        rows.append(list(range(pos, pos + len(g))))
        pos += len(g)
    cols, pos = [], 0
    for n in names:
        cols.append(list(range(pos, pos + len(gallery[n]))))
        pos += len(gallery[n])
    if not names:
        return [MatchPosterior(tuple(g), (), (), 1.0, {}, withheld) for g in groups]
    sim = pairwise_scores(q_emb, g_emb, metric=metric)
    sim[np.asarray(query_ids)[:, None] == np.asarray(gallery_ids)[None, :]] = -np.inf  # a photo is not its own match
    best = _best_per_group(sim, rows, cols)
    counts = np.array([len(gallery[n]) for n in names], dtype=np.int64)
    prior = ids.capture_prior(counts)
    prior_new = ids.good_turing_new(counts)
    base_rate = cal.n_positive / cal.n_outcomes
    if withheld:  # scores that cannot tell animals apart carry no evidence: the priors alone, no fitted slope
        same_probability = _no_evidence(base_rate)
        new_cal = None
    else:
        same_probability = cal.probability
        new_cal = _new_animal_fit(cat, model, gallery_ids, [n for n in names for _ in gallery[n]], g_emb, metric)
    out = []
    for j, g in enumerate(groups):
        present = frame_individuals(cat, list(g))
        ruled = np.array([n in present for n in names]) | ~np.isfinite(best[j])
        p_new = None
        if new_cal is not None:
            top1, gap = na.top_two(np.where(ruled, -np.inf, best[j])[None, :])
            p_new = float(new_cal.probability(top1, gap)[0])
            if 0.0 < prior_new < 1.0:  # read at the catalogue's share of new animals, not the fit's
                p_new = float(ids.shift_p_new(p_new, fitted_rate=new_cal.n_new / new_cal.n_queries,
                                              study_rate=prior_new))
        keep, dist, pn = ids.unit_distribution(best[j], same_probability=same_probability, pair_base_rate=base_rate,
                                               p_new=p_new, prior_new=prior_new, prior=prior, floor=0.0,
                                               ruled_out=ruled)
        full = np.zeros(len(names))
        full[keep] = dist
        out.append(MatchPosterior(tuple(int(a) for a in g), tuple(names), tuple(float(x) for x in full), float(pn),
                                  {n: present[n] for n in names if n in present}, withheld))
    return out


def _no_evidence(base_rate: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """p(same) at the pairs' base rate whatever the score: a likelihood ratio of 1 for every candidate."""
    def same_probability(scores: np.ndarray, ranks: np.ndarray | None = None) -> np.ndarray:
        return np.full(np.shape(scores), base_rate, dtype=np.float64)
    return same_probability


def check_uncertain(cat: Catalogue, ident: IdentityStudy) -> None:
    """Refuse (:class:`NoCalibration`, its real cause and what to do) the basis with identification uncertainty
    when some identity is uncertain and the species' active model has no calibration: what the job would find after
    embedding every photo, known at the click."""
    if not _units(ident):
        return
    model = active_model_name(cat, ident.species_id)
    if calibrator_for(cat, model, species_id=ident.species_id) is None:
        raise no_calibration(cat, species=ident.study.species, species_id=ident.species_id, model=model)


def check_uncertain_study(cat: Catalogue, *, species: str | int | None = None, occasion_days: float = 1.0,
                          date_from: date | None = None, date_to: date | None = None) -> None:
    """:func:`check_uncertain` on the study these options choose (no photo is embedded: a few queries and, at
    worst, the species' calibration fit)."""
    study = _population_study(cat, species=species, occasion_days=occasion_days, date_from=date_from,
                              date_to=date_to)
    check_uncertain(cat, identity_study(cat, study))


def imputation_input(cat: Catalogue, ident: IdentityStudy, *,
                     progress: Callable[[int, int], None] | None = None,
                     should_cancel: Callable[[], bool] | None = None) -> ids.ImputationInput:
    """The study as an imputation input (see the module notes). Refused (:class:`NoCalibration`) when the species'
    active model has no calibration yet and some identity is uncertain."""
    return _imputation(cat, ident, progress=progress, should_cancel=should_cancel)[0]


def _imputation(cat: Catalogue, ident: IdentityStudy, *, progress: Callable[[int, int], None] | None = None,
                should_cancel: Callable[[], bool] | None = None
                ) -> tuple[ids.ImputationInput, list[MatchPosterior]]:
    """:func:`imputation_input` and each unit's posterior (what the review list shows of it)."""
    n_occ = ident.study.histories.n_occasions
    fixed_rows = [(d.individual, d.occasion) for d in ident.detections if d.provenance == CURATOR]
    machine_names = [d.individual for d in ident.detections if d.provenance == MACHINE]
    individuals = list(dict.fromkeys([*sorted(ident.gallery), *(n for n, _ in fixed_rows), *machine_names]))
    index = {n: i for i, n in enumerate(individuals)}
    fixed = np.array([(index[n], k) for n, k in fixed_rows], dtype=np.int64).reshape(-1, 2)
    units = _units(ident)
    if not units:
        return ids.ImputationInput(n_occasions=n_occ, individuals=tuple(individuals), fixed=fixed), []
    check_uncertain(cat, ident)
    model = active_model_name(cat, ident.species_id)
    cal = calibrator_for(cat, model, species_id=ident.species_id)
    posteriors = match_posteriors(cat, [[d.annotation_id for d in u] for u in units], species_id=ident.species_id,
                                  model=model, gallery=ident.gallery, progress=progress, should_cancel=should_cancel,
                                  calibrator=cal)
    backbone = get_backbone(cat, model)
    u_emb = embed_images(cat, [d.annotation_id for u in units for d in u], backbone=backbone)
    unit_rows, pos = [], 0
    for u in units:
        unit_rows.append(list(range(pos, pos + len(u))))
        pos += len(u)
    metric = getattr(backbone.config, "metric", "cosine")
    pair = _best_per_group(pairwise_scores(u_emb, u_emb, metric=metric), unit_rows, unit_rows)
    out_units = []
    for u, post in zip(units, posteriors):
        dist = np.asarray(post.probabilities)
        keep = np.flatnonzero(dist >= ids.CANDIDATE_FLOOR)
        cands = tuple(index[post.individuals[k]] for k in keep)
        probs = tuple(float(dist[k]) for k in keep)
        d0 = u[0]
        if d0.provenance == MACHINE and d0.weight is not None:
            cands, probs = ids.machine_distribution(index[d0.individual], d0.weight, cands, probs, post.p_new)
        out_units.append(ids.UncertainUnit(key=d0.annotation_id, occasions=tuple(sorted({d.occasion for d in u})),
                                           candidates=cands, probabilities=probs, provenance=d0.provenance,
                                           annotation_ids=tuple(d.annotation_id for d in u)))
    withheld = any(p.withheld for p in posteriors)
    link = _no_evidence(cal.n_positive / cal.n_outcomes) if withheld else cal.probability
    pairwise = link(pair.reshape(-1), np.ones(pair.size)).reshape(pair.shape)
    np.fill_diagonal(pairwise, 0.0)
    counts = np.array([len(v) for v in ident.gallery.values() if v], dtype=np.int64)
    share = (float(np.sum(counts == 1)), float(counts.sum())) if counts.sum() > 0 else None
    inp = ids.ImputationInput(n_occasions=n_occ, individuals=tuple(individuals), fixed=fixed,
                              units=tuple(out_units), pairwise=pairwise, new_share=share)
    return inp, posteriors


def priority_row(inp: ids.ImputationInput, unit: ids.UncertainUnit, post: MatchPosterior | None,
                 priority: ids.Priority) -> dict[str, Any]:
    """One row of the review list: an unreviewed unit's posterior as Match review shows it (the same numbers; a
    machine identity's kept weight instead), or, while the calibration does not discriminate, no number and the
    sentence that says why."""
    if post is not None and unit.provenance == UNREVIEWED:
        name, prob = post.most_likely()
        p_new = post.p_new
    else:
        best = max(range(len(unit.probabilities)), key=lambda k: unit.probabilities[k], default=None)
        name = str(inp.individuals[unit.candidates[best]]) if best is not None else None
        prob = unit.probabilities[best] if best is not None else None
        p_new = unit.p_new
    withheld = post.withheld if post is not None else None
    return {"annotation_ids": list(unit.annotation_ids), "provenance": unit.provenance,
            "occasions": [k + 1 for k in unit.occasions],
            "expected_narrowing": round(priority.expected_narrowing, 3),
            "variance_explained": round(priority.variance_explained, 3),
            "most_likely": None if withheld else name,
            "probability": None if withheld or prob is None else round(prob, 4),
            "p_new": None if withheld else round(p_new, 4),
            "probability_withheld": withheld}


def combined_dict(c: ids.CombinedEstimate) -> dict[str, Any]:
    """A combined estimate as JSON, with the model's assumption and the combination stated."""
    d = c.to_dict()
    d["assumption"] = pop.ASSUMPTIONS[c.model]
    d["ci_method"] = c.method
    d["estimable"] = not math.isnan(c.N)
    return d


def uncertain_answer(cat: Catalogue, *, species: str | int | None = None, occasion_days: float = 1.0,
                     date_from: date | None = None, date_to: date | None = None, draws: int = ids.DEFAULT_DRAWS,
                     seed: int = 0, top: int = 20, progress: Callable[[int, int], None] | None = None,
                     should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The study's estimates with identification uncertainty (JSON-ready): the combined estimates, the share of
    each interval from identification, the provenance counts, and the ``top`` annotations (by event) whose review
    is expected to narrow Mh-Chao's interval most. Nothing is stored; a stop raises
    :class:`core.field.identities.ImputationCancelled` (or the feature extraction's own cancel) with nothing kept.
    ``progress(done, total)``: the photos embedded, then the draws."""
    study = _population_study(cat, species=species, occasion_days=occasion_days, date_from=date_from,
                              date_to=date_to)
    ident = identity_study(cat, study)

    def embedding_progress(done: int, total: int) -> None:
        if progress is not None:
            progress(done, 2 * total)

    def draw_progress(done: int, total: int) -> None:
        if progress is not None:
            progress(total + done, 2 * total)

    inp, posteriors = _imputation(cat, ident, progress=embedding_progress, should_cancel=should_stop)
    result = ids.impute(inp, draws=draws, seed=seed, progress=draw_progress, should_stop=should_stop)
    rows = [priority_row(inp, inp.units[p.unit], posteriors[p.unit] if posteriors else None, p)
            for p in ids.review_priority(inp, result)[:top]]
    notes = [*ident.notes, *result.notes]
    if result.units:
        notes.append(f"With identification uncertainty: {result.units} event(s) of unreviewed or machine-identified "
                     f"annotations imputed in {result.draws} draws (seed {seed}); {ids.COMBINE_METHOD}.")
    else:
        notes.append(f"No {study.species} annotation in the study is unreviewed or machine-identified: there is "
                     "nothing to review for the estimate.")
    withheld = next((p.withheld for p in posteriors if p.withheld), None)
    if withheld:  # last, where the Population tab's status line reads it
        notes.append("The draws give each unreviewed animal an individual (or a new one) by how often each is seen, "
                     "not by its match scores, which cannot tell animals apart yet: the wider interval says how "
                     "little the unreviewed animals' identities are known. " + withheld)
    return {"species": study.species, "estimates": [combined_dict(c) for c in result.estimates],
            "share_from_identification": {c.model: c.share_from_identification for c in result.estimates},
            "draws": result.draws if result.units else 0, "seed": seed, "uncertain_units": result.units,
            "provenance_counts": ident.provenance_counts, "combination_method": ids.COMBINE_METHOD,
            "priority": rows, "notes": notes, "probability_withheld": withheld}
