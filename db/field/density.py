"""Density of a species by spatial capture-recapture (docs/density.md), fitted to the catalogue's study or to secr's
text files, as one JSON-ready answer: what :meth:`core.field.density.DensityFit.as_dict` gives, the parameters
used, what the study rests on, and what the Population tab draws (the stations with their detections, each
animal's mean detection place, the mask points, the fitted detection curve).

The catalogue's study is :func:`db.field.population.population_study` (species, window, occasions) and its detectors and
captures are :func:`db.field.population.secr_inputs`, the ones ``rosette export capthist`` writes: UTM metres, each
station's usage its active days per occasion. Nothing is stored: a fit that cannot be made raises and leaves the
catalogue as it was.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select

from core.field.capthist import Trap
# RPSV: secr's starting sigma, the default buffer's unit
from core.field.density import DensityFit, fit_density, root_pooled_spatial_variance
from core.field.scr_data import Capture, CaptureHistory, build_capture_history, read_secr_captures, read_secr_traps
from core.field.scr_errors import DensityInputError, DetectorLayoutError
from core.field.scr_identifiability import NotIdentifiable, array_shape, spatial_recaptures
from db.field.population import PopulationStudy, SecrInputs, population_study, secr_inputs
from db.models import Deployment, Image, Photo
from db.session import Catalogue

#: The default buffer in units of RPSV (the spread of each animal's detections, secr's first guess at sigma):
#: secr advises a buffer of about 4 sigma.
BUFFER_RPSV = 4.0
CURVE_POINTS = 101

Progress = Callable[[float, str], None]


def _existing(path: str, what: str, *, give: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"the {what} file {path} does not exist: give the path of {give}")
    return p


def default_buffer(captures: Sequence[Capture | Sequence], traps: Sequence[Trap], *, detector: str) -> float:
    """4 x RPSV of the captures, rounded up to 10 m: a buffer about 4 sigma wide, as secr advises."""
    history = build_capture_history(captures, traps, detector_type=detector)
    rpsv = root_pooled_spatial_variance(history)
    if not rpsv > 0:
        raise DensityInputError("no animal was detected at two places, so no buffer can be suggested; give --buffer "
                                "(about 4 times the distance over which an animal is detected)")
    return float(math.ceil(BUFFER_RPSV * rpsv / 10.0) * 10.0)


def _map_data(fit) -> dict[str, Any]:
    """Stations with their detections and animals, each animal's mean detection place, mask points, the curve."""
    sigma = fit.sigma_m.value
    reach = max(3.0 * sigma, fit.mask.buffer_m or 0.0) if math.isfinite(sigma) else (fit.mask.buffer_m or 1.0)
    distance = np.linspace(0.0, reach, CURVE_POINTS)
    return {**_stations_and_animals(fit.history),
            "mask_xy": np.round(np.asarray(fit.mask_points, dtype=float), 1).tolist(),
            "curve": {"distance_m": distance.round(2).tolist(),
                      "probability": [float(p) for p in fit.detection_curve(distance)]}}


def _stations_and_animals(h: CaptureHistory) -> dict[str, Any]:
    """Each station with its detections and animals, and each animal's mean detection place (the map's points)."""
    per_detector = h.counts.sum(axis=(0, 1))
    animals_at = (h.counts.sum(axis=1) > 0).sum(axis=0)
    stations = [{"name": name, "x": float(x), "y": float(y), "detections": int(per_detector[k]),
                 "animals": int(animals_at[k]), "usage": float(h.usage[k].sum())}
                for k, (name, (x, y)) in enumerate(zip(h.detectors, h.xy))]
    animals = []
    for i, name in enumerate(h.animals):
        weights = h.counts[i].sum(axis=0).astype(float)
        centre = weights @ h.xy / weights.sum()
        animals.append({"name": name, "x": float(centre[0]), "y": float(centre[1]),
                        "detections": int(weights.sum()), "detectors": int((weights > 0).sum())})
    return {"stations": stations, "animals": animals}


@dataclass(frozen=True)
class CatalogueDensityStudy:
    """The catalogue's study as the density fit reads it: the population study (species, window, occasions),
    secr's detectors and captures as ``rosette export capthist`` writes them, the answer's ``study`` fields and
    what was left out, in words."""

    population: PopulationStudy
    secr: SecrInputs
    study: dict[str, Any]
    notes: tuple[str, ...]

    @property
    def located(self) -> frozenset[str]:
        """The stations with coordinates: the detectors."""
        return frozenset(t.name for t in self.secr.traps)


def catalogue_density_study(cat: Catalogue, *, species: str | None = None, occasion_days: float = 1.0,
                            date_from: date | None = None, date_to: date | None = None) -> CatalogueDensityStudy:
    """The study of ``species`` with its located stations and captures; refused in words when no station has
    coordinates or no identified animal was detected at one."""
    pop_study = population_study(cat, species=species, occasion_days=occasion_days, date_from=date_from,
                                 date_to=date_to)
    secr = secr_inputs(pop_study)
    if not secr.traps:
        raise DetectorLayoutError(f"no station of the {pop_study.species} study has coordinates: give the "
                                  "deployments their latitude and longitude (import them with coordinates), "
                                  "then fit again")
    if not secr.captures:
        raise DensityInputError(f"no identified {pop_study.species} was detected at a station with coordinates "
                                "in the window: there is nothing to fit")
    notes = (f"{secr.left_out_words}.",) if secr.stations_without_coordinates else ()
    h = pop_study.histories
    study = {"source": "catalogue", "species": pop_study.species, "occasion_days": pop_study.occasion_days,
             "from": date_from.isoformat() if date_from else None,
             "to": date_to.isoformat() if date_to else None, "start": pop_study.start.isoformat(),
             "last_day": (pop_study.end - timedelta(days=1)).date().isoformat(),
             "individuals": h.n_individuals, "occasions": h.n_occasions, "epsg": secr.epsg,
             "stations_without_coordinates": list(secr.stations_without_coordinates),
             "detections_without_coordinates": len(secr.detections_without_coordinates),
             "annotations": len(pop_study.detections)}
    return CatalogueDensityStudy(population=pop_study, secr=secr, study=study, notes=notes)


def annotation_stations(cat: Catalogue, annotation_ids: Sequence[int]) -> dict[int, str]:
    """annotation id -> the station of its photo's deployment (annotations without a deployment are absent): where
    an annotation nobody identified was seen, for the draws that give it an individual."""
    wanted = sorted({int(a) for a in annotation_ids})
    out: dict[int, str] = {}
    with cat.unit_of_work() as s:
        for lo in range(0, len(wanted), 500):
            rows = s.execute(select(Image.id, Deployment).join(Photo, Image.photo_id == Photo.id)
                             .join(Deployment, Photo.deployment_id == Deployment.id)
                             .where(Image.id.in_(wanted[lo:lo + 500]))).all()
            out.update({ann_id: dep.station for ann_id, dep in rows})
    return out


def density_answer(cat: Catalogue | None, *, species: str | None = None, occasion_days: float = 1.0,
                   date_from: date | None = None, date_to: date | None = None, captures: str | None = None,
                   traps: str | None = None, detector: str = "proximity", detectfn: str = "HN",
                   buffer_m: float | None = None, spacing_m: float | None = None, mask: str | None = None,
                   conditional: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Fit density to secr's files (``captures`` and ``traps``) or to the catalogue's study of ``species``, and
    return the JSON-ready answer (see the module's notes). Every input fault raises a ``ValueError`` (or
    ``FileNotFoundError``) that says what to do; a fit that finds no maximum raises
    :class:`core.field.scr_errors.FitNotConverged` naming the start values tried."""
    return density_answer_and_fit(cat, species=species, occasion_days=occasion_days, date_from=date_from,
                                  date_to=date_to, captures=captures, traps=traps, detector=detector,
                                  detectfn=detectfn, buffer_m=buffer_m, spacing_m=spacing_m, mask=mask,
                                  conditional=conditional, progress=progress)[0]


def density_answer_and_fit(cat: Catalogue | None, *, species: str | None = None, occasion_days: float = 1.0,
                           date_from: date | None = None, date_to: date | None = None, captures: str | None = None,
                           traps: str | None = None, detector: str = "proximity", detectfn: str = "HN",
                           buffer_m: float | None = None, spacing_m: float | None = None, mask: str | None = None,
                           conditional: bool = False, progress: Progress | None = None,
                           prepared: CatalogueDensityStudy | None = None) -> tuple[dict[str, Any], DensityFit]:
    """:func:`density_answer` and the fit itself (its mask and estimates start the draws of the answer with
    identification uncertainty); ``prepared``: the catalogue's study when the caller has gathered it already."""
    report = progress or (lambda fraction, message: None)
    began = time.perf_counter()
    mask_path = _existing(mask, "mask", give="a CSV of x,y points or a GeoJSON polygon") if mask else None
    if captures is not None and traps is not None:
        trap_rows = read_secr_traps(_existing(traps, "traps", give="secr's traps file"))
        capture_rows = read_secr_captures(_existing(captures, "captures", give="secr's captures file"),
                                          traps=trap_rows)
        study: dict[str, Any] = {"source": "files", "captures": str(captures), "traps": str(traps)}
        notes: list[str] = []
    else:
        if cat is None and prepared is None:
            raise ValueError("give secr's captures and traps files, or a catalogue to fit its study")
        if prepared is None:
            report(0.0, "gathering the study's detections and stations")
            prepared = catalogue_density_study(cat, species=species, occasion_days=occasion_days,
                                               date_from=date_from, date_to=date_to)
        trap_rows, capture_rows = list(prepared.secr.traps), list(prepared.secr.captures)
        study, notes = dict(prepared.study), list(prepared.notes)
    return fit_answer(capture_rows, trap_rows, study=study, notes=notes, detector=detector, detectfn=detectfn,
                      buffer_m=buffer_m, spacing_m=spacing_m, mask=mask, mask_path=mask_path,
                      conditional=conditional, progress=report, began=began)


def fit_answer(capture_rows: Sequence[Capture | Sequence], trap_rows: Sequence[Trap], *, study: dict[str, Any],
               notes: Sequence[str] = (), detector: str = "proximity", detectfn: str = "HN",
               buffer_m: float | None = None, spacing_m: float | None = None, mask: str | None = None,
               mask_path: Path | None = None, conditional: bool = False, progress: Progress | None = None,
               began: float | None = None) -> tuple[dict[str, Any], DensityFit | None]:
    """Fit ``capture_rows`` at ``trap_rows`` and return the JSON-ready answer with the fit; ``study`` and ``notes``
    say what they rest on. Without ``buffer_m`` the buffer starts at 4 x the detections' RPSV and is widened by
    itself until D is stable (:func:`core.field.density.fit_density`'s ``widen_buffer``). Where the array cannot
    carry the fit the answer is refused (:func:`refused_answer`: no estimate, the reason) and the fit is None."""
    report = progress or (lambda fraction, message: None)
    began = time.perf_counter() if began is None else began
    if mask and mask_path is None:
        mask_path = _existing(mask, "mask", give="a CSV of x,y points or a GeoJSON polygon")
    buffer_default = buffer_m is None
    if buffer_default:
        buffer_m = default_buffer(capture_rows, trap_rows, detector=detector)
    parameters = {"detector": detector, "detectfn": detectfn, "buffer_m": float(buffer_m),
                  "buffer_default": buffer_default, "spacing_m": spacing_m,
                  "mask_file": str(mask) if mask else None, "conditional": bool(conditional)}
    try:
        fit = fit_density(capture_rows, trap_rows, detector=detector, detectfn=detectfn, buffer_m=float(buffer_m),
                          spacing_m=spacing_m, mask=mask_path, conditional=conditional, widen_buffer=buffer_default,
                          progress=lambda f, m: report(0.05 + 0.95 * f, m))
    except NotIdentifiable as exc:
        report(1.0, "refused")
        answer = refused_answer(exc, capture_rows, trap_rows, detector=detector, detectfn=detectfn,
                                conditional=conditional, parameters=parameters, study=study, notes=notes)
        answer["seconds"] = round(time.perf_counter() - began, 3)
        return answer, None
    answer = fit.as_dict()
    answer["notes"] = [*notes, *answer.get("notes", [])]
    check = fit.buffer_check
    if check is not None and check.widened:  # the buffer the answer rests on is the widened one
        parameters.update(buffer_m=check.used_buffer_m, buffer_start_m=float(buffer_m))
    answer["parameters"] = parameters
    answer["study"] = study
    answer.update(_map_data(fit))
    answer["seconds"] = round(time.perf_counter() - began, 3)
    answer["summary"] = summary_line(answer)
    return answer, fit


def refused_answer(exc: NotIdentifiable, capture_rows: Sequence[Capture | Sequence], trap_rows: Sequence[Trap], *,
                   detector: str, detectfn: str, conditional: bool, parameters: dict[str, Any],
                   study: dict[str, Any], notes: Sequence[str] = ()) -> dict[str, Any]:
    """The answer of a fit the array cannot carry: what the study holds and the one sentence why, and no estimate
    (no ``D_per_100km2`` key at all, so no reader can take a number from it)."""
    history = build_capture_history(capture_rows, trap_rows, detector_type=detector)
    shape = array_shape(history.xy)
    answer: dict[str, Any] = {
        "refused": True, "reason": exc.reason, "criterion": exc.criterion, "detector": history.detector_type,
        "detectfn": detectfn, "likelihood": "conditional" if conditional else "full",
        "n_animals": history.n_animals, "n_detections": history.n_detections, "n_occasions": history.n_occasions,
        "n_detectors": len(history.detectors), "detector_spacing_m": shape.spacing_m,
        "array_extent_m": shape.extent_m, "spatial_recaptures": spatial_recaptures(history.counts),
        "parameters": parameters, "study": study, "notes": list(notes), **_stations_and_animals(history)}
    answer["summary"] = summary_line(answer)
    return answer


def summary_line(answer: dict[str, Any]) -> str:
    """One line: D with its 95% interval, and the animals and detectors it rests on; a failed buffer check is
    part of it (the headline, not only the notes); a refused fit says so and why, with no number."""
    if answer.get("refused"):
        return f"no density: {answer['reason']}"
    d, lo, hi = answer["D_per_100km2"], answer["ci_low"], answer["ci_high"]
    line = (f"D = {d:.1f} animals per 100 km²" if d is not None else "D not estimable") + (
        f" (95% interval {lo:.1f} – {hi:.1f})" if lo is not None and hi is not None else "") + \
        f" from {answer['n_animals']} animals at {answer['n_detectors']} detectors"
    check = answer.get("buffer_check")
    if check and check.get("changed"):
        line += f"; {check['message']}"
    return line
