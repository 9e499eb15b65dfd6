"""The density by spatial capture-recapture (:mod:`db.field.density`) on a basis of identities, as ``rosette
population --identities`` has them: ``decided`` (every assigned annotation as assigned), ``confirmed`` (the
curators' detections only, fitted on the buffer of the study as decided) or ``uncertain`` (the identities nobody
confirmed imputed as :mod:`db.field.identities` imputes them, each draw fitted; :mod:`core.field.density_draws`).

One function, :func:`density_on_basis`, answers for both the foreground command (``rosette density``, through
:func:`jobs.actions.density.density_summary`) and the Population tab's background job (``jobs.kinds``), so the two
give the same figures. It sits above ``db.field`` because the identities' provenance and scoring
(:mod:`db.field.identities`) use the identify area, which ``db.field`` may not import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any

import numpy as np

from core.field import capthist as ch
from core.field import density_draws as dd
from core.field import identities as ids
from db.field import identities as db_ids
from db.field.density import (
    CatalogueDensityStudy,
    annotation_stations,
    catalogue_density_study,
    density_answer,
    density_answer_and_fit,
    fit_answer,
    summary_line,
)
from db.session import Catalogue

Progress = Callable[[float, str], None]


def density_on_basis(cat: Catalogue | None, *, identities: str, draws: int, seed: int, species: str | None = None,
                     occasion_days: float = 1.0, date_from: date | None = None, date_to: date | None = None,
                     captures: str | None = None, traps: str | None = None, detector: str = "proximity",
                     detectfn: str = "HN", buffer_m: float | None = None, spacing_m: float | None = None,
                     mask: str | None = None, conditional: bool = False, progress: Progress | None = None,
                     should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The density answer (:func:`db.field.density.density_answer`'s options) on the basis ``identities``, with
    ``identities``, ``provenance_counts``, ``draws`` and ``share_from_identification``; on the ``confirmed`` and
    ``uncertain`` bases ``estimates_decided`` holds the estimates as decided beside them. ``draws`` and ``seed``
    are the imputation's on ``uncertain``. secr's files (``captures``, ``traps``) carry no provenance and are fitted
    as decided. ``uncertain`` without a calibrated model raises :class:`db.field.identities.NoCalibration`; a stop
    (``should_stop``, asked before each photo batch and each draw) raises
    :class:`core.field.identities.ImputationCancelled` or the scoring's
    :class:`core.identify.features.ExtractionCancelled`, with nothing kept."""
    if identities not in ids.BASES:
        raise ValueError(f"identities {identities!r} unknown; use one of {', '.join(ids.BASES)}")
    report = progress or (lambda fraction, message: None)
    fit_options = {"species": species, "occasion_days": occasion_days, "date_from": date_from, "date_to": date_to,
                   "captures": captures, "traps": traps, "detector": detector, "detectfn": detectfn,
                   "buffer_m": buffer_m, "spacing_m": spacing_m, "mask": mask, "conditional": conditional}
    if captures is not None or traps is not None:
        if identities != "decided":
            raise ValueError(f"density on {identities} identities needs the catalogue's study: secr's files do not "
                             "say who identified each animal")
        answer = density_answer(None, **fit_options, progress=report)
        answer.update(identities="decided", provenance_counts=None, draws=0, share_from_identification={})
        return answer
    if cat is None:
        raise ValueError("give secr's captures and traps files, or a catalogue to fit its study")
    report(0.0, "gathering the study's detections and stations")
    prepared = catalogue_density_study(cat, species=species, occasion_days=occasion_days, date_from=date_from,
                                       date_to=date_to)
    ident = db_ids.identity_study(cat, prepared.population)
    inp = None
    if identities == "uncertain":  # refused here, before any fit, when there is no calibration
        report(0.01, "scoring the unreviewed and machine-identified annotations against the catalogue")
        inp = db_ids.imputation_input(
            cat, ident, should_cancel=should_stop,
            progress=lambda done, total: report(0.01 + 0.09 * done / max(total, 1), f"{done} of {total} photos"))
    imputing = inp is not None and bool(inp.units)
    start = 0.1 if identities == "uncertain" else 0.0  # the photos scored first
    decided_span = 0.2 if imputing else 0.5 if identities == "confirmed" else 1.0 - start
    answer, fit = density_answer_and_fit(cat, **fit_options, prepared=prepared,
                                         progress=lambda f, m: report(start + decided_span * f, m))
    answer.update(identities=identities, provenance_counts=ident.provenance_counts, draws=0,
                  share_from_identification={}, outside_occasions=ident.outside_occasions)
    if identities == "decided" or answer.get("refused"):  # a study the array cannot carry is refused on any basis
        return answer
    answer["estimates_decided"] = _decided_estimates(answer)
    answer["notes"] = [*answer["notes"], *ident.notes]
    stations = annotation_stations(cat, [d.annotation_id for d in ident.detections])
    if identities == "confirmed":
        return _confirmed(answer, prepared, ident, stations, detector=detector, detectfn=detectfn,
                          spacing_m=spacing_m, mask=mask, conditional=conditional, progress=report)
    assert inp is not None
    if not imputing:
        answer["share_from_identification"] = {n: 0.0 for n in ("D", fit.detection_name, "sigma")}
        answer["notes"].append(f"No {prepared.population.species} annotation in the study is unreviewed or "
                               "machine-identified: the density with identification uncertainty is the density as "
                               "decided.")
        return answer
    return _with_draws(answer, fit, prepared, ident, inp, stations, draws=draws, seed=seed, detector=detector,
                       detectfn=detectfn, conditional=conditional, progress=report, should_stop=should_stop)


def _decided_estimates(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The estimates of the answer as decided, shown beside another basis's."""
    name = "lambda0" if "lambda0" in answer else "g0"
    return {"D_per_100km2": answer["D_per_100km2"], "ci_low": answer["ci_low"], "ci_high": answer["ci_high"],
            name: answer.get(name), f"{name}_ci": answer.get(f"{name}_ci"), "sigma_m": answer["sigma_m"],
            "sigma_ci_m": answer["sigma_ci_m"], "n_animals": answer["n_animals"],
            "n_detections": answer["n_detections"]}


def _animal_names(names: Sequence[str]) -> tuple[str, ...]:
    """Each individual's animal name in the draws: its secr token, as the captures as decided name it (so that a
    draw with every identity fixed is that study exactly); two names with one token are told apart."""
    tokens = [ch.secr_token(str(n)) for n in names]
    if len(set(tokens)) == len(tokens):
        return tuple(tokens)
    return tuple(f"{t}~{k}" for k, t in enumerate(tokens))


def _confirmed(answer: dict[str, Any], prepared: CatalogueDensityStudy, ident: db_ids.IdentityStudy,
               stations: Mapping[int, str], *, detector: str, detectfn: str, spacing_m: float | None,
               mask: str | None, conditional: bool, progress: Progress) -> dict[str, Any]:
    """The curators' detections alone, fitted on the buffer of the study as decided (so the two are comparable)."""
    rows = [(prepared.secr.session, ch.secr_token(d.individual), d.occasion + 1, stations[d.annotation_id])
            for d in ident.detections
            if d.provenance == db_ids.CURATOR and stations.get(d.annotation_id) in prepared.located]
    if not rows:
        raise ValueError(f"no {prepared.population.species} detection at a station with coordinates was "
                         "identified by a curator: there is nothing to fit on confirmed identities; review some "
                         "in Match review, or fit as decided")
    confirmed, _ = fit_answer(rows, prepared.secr.traps, study=dict(prepared.study), notes=prepared.notes,
                              detector=detector, detectfn=detectfn, buffer_m=answer["parameters"]["buffer_m"],
                              spacing_m=spacing_m, mask=mask, conditional=conditional,
                              progress=lambda f, m: progress(0.5 + 0.5 * f, f"confirmed identities: {m}"))
    confirmed["parameters"]["buffer_default"] = answer["parameters"]["buffer_default"]
    confirmed.update({k: answer[k] for k in ("identities", "provenance_counts", "draws",
                                             "share_from_identification", "estimates_decided",
                                             "outside_occasions")})
    if confirmed.get("refused"):
        return confirmed
    confirmed["notes"] = [*confirmed["notes"], *ident.notes,
                          f"Confirmed: the {ident.provenance_counts['curator']} annotation(s) whose animal a "
                          "curator identified (an animal's annotations at one station on one occasion are one "
                          "detection), on the buffer of the study as decided."]
    return confirmed


def _with_draws(answer: dict[str, Any], fit: Any, prepared: CatalogueDensityStudy, ident: db_ids.IdentityStudy,
                inp: ids.ImputationInput, stations: Mapping[int, str], *, draws: int, seed: int, detector: str,
                detectfn: str, conditional: bool, progress: Progress,
                should_stop: Callable[[], bool] | None) -> dict[str, Any]:
    """The answer as decided with D, the detection parameter and sigma over the draws of the identities."""
    located = prepared.located
    occasion = {d.annotation_id: d.occasion + 1 for d in ident.detections}
    where = {a: st for a, st in stations.items() if st in located}
    detections = dd.DrawDetections(
        session=prepared.secr.session,
        fixed=tuple((ch.secr_token(d.individual), occasion[d.annotation_id], where[d.annotation_id])
                    for d in ident.detections if d.provenance == db_ids.CURATOR and d.annotation_id in where),
        units=tuple(tuple((occasion[a], where[a]) for a in u.annotation_ids if a in where) for u in inp.units),
        individuals=_animal_names(inp.individuals))
    labels = ids.sample_identities(inp, draws, np.random.default_rng(seed))
    per = dd.fit_draws(detections, labels, prepared.secr.traps, mask=dd.mask_of(fit), detector=detector,
                       detectfn=detectfn, conditional=conditional, start=dd.start_of(fit), should_stop=should_stop,
                       progress=lambda d, n: progress(0.3 + 0.7 * d / n, f"density draw {d} of {n}"))
    name = fit.detection_name
    combined = dd.combine_density(per, detection_name=name)
    d100 = combined["D"]
    area_km2 = answer["mask"]["area_km2"]

    def num(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    out = dict(answer)
    out.update({"D_per_100km2": num(d100.N), "D_per_km2": num(d100.N / 100), "D_per_ha": num(d100.N / 10_000),
                "D_se_per_100km2": None, "ci_low": num(d100.ci_low), "ci_high": num(d100.ci_high),
                name: num(combined[name].N), f"{name}_se": None,
                f"{name}_ci": [num(combined[name].ci_low), num(combined[name].ci_high)],
                "sigma_m": num(combined["sigma"].N), "sigma_se_m": None,
                "sigma_ci_m": [num(combined["sigma"].ci_low), num(combined["sigma"].ci_high)],
                "N_in_mask": {"estimate": num(d100.N * area_km2 / 100), "se": None,
                              "lcl": num(d100.ci_low * area_km2 / 100), "ucl": num(d100.ci_high * area_km2 / 100)},
                "draws": per.draws, "draws_used": d100.draws_used, "seed": seed,
                "uncertain_units": len(inp.units), "combination_method": dd.DENSITY_COMBINE_METHOD,
                "share_from_identification": {k: c.share_from_identification for k, c in combined.items()},
                "animals_per_draw": {"min": int(per.animals.min()), "median": float(np.median(per.animals)),
                                     "max": int(per.animals.max())},
                "draws_started_from_previous": per.from_previous, "draw_seconds": round(per.seconds, 3)})
    out["summary"] = summary_line(out) + " with identification uncertainty"
    notes = [f"With identification uncertainty: {len(inp.units)} event(s) of unreviewed or machine-identified "
             f"annotations imputed in {per.draws} draws (seed {seed}) as `rosette population --identities "
             f"uncertain` imputes them; each draw's capture histories rebuilt and fitted on the mask of the study as "
             f"decided; {dd.DENSITY_COMBINE_METHOD}.",
             "The log-likelihood, AIC, map and buffer check are those of the study as decided."]
    if per.failed:
        notes.append(f"{per.failed} of {per.draws} draws gave no fit (or no interval) and are left out.")
    out["notes"] = [*answer["notes"], *notes]
    return out
