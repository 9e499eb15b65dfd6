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
from core.similarity import pairwise_scores
from core.field.stations import StationError
from db.identify.calibration import calibrator_for
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


def imputation_input(cat: Catalogue, ident: IdentityStudy, *,
                     progress: Callable[[int, int], None] | None = None,
                     should_cancel: Callable[[], bool] | None = None) -> ids.ImputationInput:
    """The study as an imputation input (see the module notes). Refused (:class:`NoCalibration`) when the species'
    active model has no calibration yet and some identity is uncertain."""
    n_occ = ident.study.histories.n_occasions
    fixed_rows = [(d.individual, d.occasion) for d in ident.detections if d.provenance == CURATOR]
    machine_names = [d.individual for d in ident.detections if d.provenance == MACHINE]
    individuals = list(dict.fromkeys([*sorted(ident.gallery), *(n for n, _ in fixed_rows), *machine_names]))
    index = {n: i for i, n in enumerate(individuals)}
    fixed = np.array([(index[n], k) for n, k in fixed_rows], dtype=np.int64).reshape(-1, 2)
    units = _units(ident)
    if not units:
        return ids.ImputationInput(n_occasions=n_occ, individuals=tuple(individuals), fixed=fixed)
    model = active_model_name(cat, ident.species_id)
    cal = calibrator_for(cat, model, species_id=ident.species_id)
    if cal is None:
        raise NoCalibration(
            f"the {ident.study.species} model {model!r} has no calibration yet, so its scores cannot be read as "
            f"probabilities: decide some matches in Match review (or add a benchmark of the species), then check it "
            f"with `rosette calibration {model} --species \"{ident.study.species}\"`")
    gallery_names = [n for n in individuals if ident.gallery.get(n)]
    gallery_ids = [a for n in gallery_names for a in ident.gallery[n]]
    unit_ids = [d.annotation_id for u in units for d in u]
    backbone = get_backbone(cat, model)
    emb = embed_images(cat, [*gallery_ids, *unit_ids], backbone=backbone, progress=progress,
                       should_cancel=should_cancel)
    metric = getattr(backbone.config, "metric", "cosine")
    g_emb, u_emb = emb[:len(gallery_ids)], emb[len(gallery_ids):]
    pos = 0
    unit_rows = []
    for u in units:
        unit_rows.append(list(range(pos, pos + len(u))))
        pos += len(u)
    col_groups, pos = [], 0
    for n in gallery_names:
        col_groups.append(list(range(pos, pos + len(ident.gallery[n]))))
        pos += len(ident.gallery[n])
    best = _best_per_group(pairwise_scores(u_emb, g_emb, metric=metric), unit_rows, col_groups) \
        if gallery_ids else np.zeros((len(units), 0))
    pair = _best_per_group(pairwise_scores(u_emb, u_emb, metric=metric), unit_rows, unit_rows)
    base_rate = cal.n_positive / cal.n_outcomes
    counts = np.bincount(fixed[:, 0], minlength=len(individuals)) if fixed.size else np.zeros(0, dtype=np.int64)
    prior_new = ids.good_turing_new(counts[counts > 0])
    new_cal = None
    if gallery_ids:
        g_labels = [n for n in gallery_names for _ in ident.gallery[n]]
        new_cal, _ = fit_new_animal(pairwise_scores(g_emb, g_emb, metric=metric), g_labels,
                                    _sightings(cat, gallery_ids))
        if new_cal is not None and best.shape[1]:
            top1, gap = na.top_two(best)
            p_new_of_unit = new_cal.probability(top1, gap)
            if 0.0 < prior_new < 1.0:  # read at the study's share of new animals, not the fit's
                p_new_of_unit = ids.shift_p_new(p_new_of_unit, fitted_rate=new_cal.n_new / new_cal.n_queries,
                                                study_rate=prior_new)
    g_index = np.array([index[n] for n in gallery_names], dtype=np.int64)
    prior = ids.capture_prior(counts[g_index]) if counts.size else None
    out_units = []
    for j, u in enumerate(units):
        cands: tuple[int, ...] = ()
        probs: tuple[float, ...] = ()
        p_new = 1.0
        if best.shape[1]:
            keep, dist, p_new = ids.unit_distribution(
                best[j], same_probability=cal.probability, pair_base_rate=base_rate, prior_new=prior_new,
                p_new=float(p_new_of_unit[j]) if new_cal is not None else None, prior=prior)
            cands = tuple(int(g_index[k]) for k in keep)
            probs = tuple(float(x) for x in dist)
        d0 = u[0]
        if d0.provenance == MACHINE and d0.weight is not None:
            cands, probs = ids.machine_distribution(index[d0.individual], d0.weight, cands, probs, p_new)
        out_units.append(ids.UncertainUnit(key=d0.annotation_id, occasions=tuple(sorted({d.occasion for d in u})),
                                           candidates=cands, probabilities=probs, provenance=d0.provenance,
                                           annotation_ids=tuple(d.annotation_id for d in u)))
    pairwise = cal.probability(pair.reshape(-1), np.ones(pair.size)).reshape(pair.shape)
    np.fill_diagonal(pairwise, 0.0)
    share = (float(np.sum(counts == 1)), float(counts.sum())) if counts.sum() > 0 else None
    return ids.ImputationInput(n_occasions=n_occ, individuals=tuple(individuals), fixed=fixed,
                               units=tuple(out_units), pairwise=pairwise, new_share=share)



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

    inp = imputation_input(cat, ident, progress=embedding_progress, should_cancel=should_stop)
    result = ids.impute(inp, draws=draws, seed=seed, progress=draw_progress, should_stop=should_stop)
    rows = []
    for p in ids.review_priority(inp, result)[:top]:
        unit = inp.units[p.unit]
        best = max(range(len(unit.probabilities)), key=lambda k: unit.probabilities[k], default=None)
        rows.append({"annotation_ids": list(unit.annotation_ids), "provenance": unit.provenance,
                     "occasions": [k + 1 for k in unit.occasions],
                     "expected_narrowing": round(p.expected_narrowing, 3),
                     "variance_explained": round(p.variance_explained, 3),
                     "most_likely": str(inp.individuals[unit.candidates[best]]) if best is not None else None,
                     "probability": round(unit.probabilities[best], 4) if best is not None else None,
                     "p_new": round(unit.p_new, 4)})
    notes = [*ident.notes, *result.notes]
    if result.units:
        notes.append(f"With identification uncertainty: {result.units} event(s) of unreviewed or machine-identified "
                     f"annotations imputed in {result.draws} draws (seed {seed}); {ids.COMBINE_METHOD}.")
    else:
        notes.append(f"No {study.species} annotation in the study is unreviewed or machine-identified: there is "
                     "nothing to review for the estimate.")
    return {"species": study.species, "estimates": [combined_dict(c) for c in result.estimates],
            "share_from_identification": {c.model: c.share_from_identification for c in result.estimates},
            "draws": result.draws if result.units else 0, "seed": seed, "uncertain_units": result.units,
            "provenance_counts": ident.provenance_counts, "combination_method": ids.COMBINE_METHOD,
            "priority": rows, "notes": notes}
