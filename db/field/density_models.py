"""Density models beyond the null on the catalogue's study (docs/density.md, "Models beyond the null"): its
sessions (:mod:`db.field.density_sessions`) with each animal's sex as catalogued, a mask round each session's
stations, the models fitted as :mod:`core.field.scr_fit` and :mod:`core.field.scr_select` fit them, and the null
fit's identifiability checks before and after each fit, so that a model the data cannot carry is answered with one
sentence and no figure. Nothing is stored."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import date, timedelta
from typing import Any

import numpy as np

from core.field import scr_identifiability as idf
from core.field.density import MAX_WIDENINGS, suggest_buffer
from core.field.scr_data import build_capture_history
from core.field.scr_errors import DensityInputError
from core.field.scr_fit import ScrModelFit, fit_scr_model
from core.field.scr_mask import trapbuffer_mask
from core.field.scr_models import ScrSession, build_sessions, parse_model
from core.field.scr_select import ModelComparison, compare_models
from db.field.density import default_buffer
from db.field.density_sessions import CatalogueSessions, catalogue_sessions
from db.session import Catalogue

Progress = Callable[[float, str], None]


def _catalogue_scr_sessions(found: CatalogueSessions, *, detector: str, buffer_m: float, spacing_m: float | None,
                            with_sex: bool) -> list[ScrSession]:
    """The catalogue's sessions as the models fit them, each with its mask ``buffer_m`` round its stations."""
    captures = [c for s in found.sessions for c in s.captures]
    traps = {s.name: list(s.study.secr.traps) for s in found.sessions}
    masks = {name: trapbuffer_mask(np.array([[t.x, t.y] for t in ts], dtype=float), buffer_m=buffer_m,
                                   spacing_m=spacing_m) for name, ts in traps.items()}
    return build_sessions(captures, traps, masks, detector_type=detector, sex=found.sex if with_sex else None,
                          session_names=[s.name for s in found.sessions])


def _check_models(found: CatalogueSessions, models: Sequence[str], *, detector: str) -> None:
    """Refuse, before any fit, what the sessions cannot carry, with the null fit's sentences: too few animals
    caught at several stations (in every session where sigma is a session's own, else in all together), a term
    of the session with one session, sex where no individual has one."""
    formulas = [parse_model(m) for m in models]
    if len(found.sessions) == 1 and any(f.uses("session") or f.uses("Session") for f in formulas):
        raise idf.NotIdentifiable("The catalogue gives one session, so nothing can vary by session; split it "
                                  "with --sessions year or --sessions deployment-group.", criterion="one_session")
    if any(f.uses("sex") or f.uses("h2") for f in formulas):
        animals = {c.animal for s in found.sessions for c in s.captures}
        if not any(found.sex_of(a) for a in animals):
            raise idf.NotIdentifiable(f"No {found.species} individual detected here has a sex in the catalogue, so "
                                      "nothing can vary by sex; give the individuals their sex, or drop sex from "
                                      "the model.", criterion="no_sex")
    per_session = any({"session", "Session"} & set(f.of("sigma")) for f in formulas)
    histories = [(s.name, build_capture_history(s.captures, s.study.secr.traps, detector_type=detector,
                                                session=s.name, require_spread=False)) for s in found.sessions]
    if len(histories) == 1 or per_session:
        for name, h in histories:
            try:
                idf.check_history(h.counts, idf.array_shape(h.xy))
            except idf.NotIdentifiable as exc:
                if len(histories) == 1:
                    raise
                raise idf.NotIdentifiable(f"Session {name}: {exc.reason}", criterion=exc.criterion) from None
        return
    animals = sum(h.n_animals for _, h in histories)
    recaptured = sum(idf.spatial_recaptures(h.counts) for _, h in histories)
    if animals < 2 or recaptured < idf.MIN_SPATIAL_RECAPTURES:
        raise idf.NotIdentifiable(
            f"The {len(histories)} sessions together caught only {recaptured} animal(s) at more than one station, too "
            f"few to measure how far these animals move; SCR needs at least {idf.MIN_SPATIAL_RECAPTURES} animals "
            "caught at several stations, and stations closer than about 2 sigma.", criterion="spatial_recaptures")


def _assess(fit: ScrModelFit, sessions: Sequence[ScrSession]) -> None:
    """The null fit's checks of a fitted model, session by session and sex by sex (sigma inside the array and the
    mask, a non-singular information matrix, intervals that say something); the first failure refused in its
    sentence (the condition number of the vcv is that of the information matrix it inverts)."""
    for session, est in zip(sessions, fit.sessions):
        shape = idf.array_shape(session.history.xy)
        pts = session.mask.xy
        extent = float(np.hypot(*(pts.max(axis=0) - pts.min(axis=0)))) if pts.size else math.inf
        d = est.density_per_ha
        for sigma in est.sigma_m.values():
            criterion = idf.failed_criterion(sigma=sigma.value, sigma_lcl=sigma.lcl, sigma_ucl=sigma.ucl,
                                             d_lcl=d.lcl, d_ucl=d.ucl, information=fit.vcv, shape=shape,
                                             mask_extent_m=extent)
            if criterion is not None:
                exc = idf.refusal(criterion, shape)
                prefix = f"Model {fit.model}, session {session.name}: " if len(sessions) > 1 else \
                    f"Model {fit.model}: "
                raise idf.NotIdentifiable(prefix + exc.reason, criterion=criterion)


def _suggested_buffer(fit: ScrModelFit, sessions: Sequence[ScrSession]) -> float:
    """The widest of secr's suggested buffers over the sessions, at each session's widest-ranging sex."""
    wanted = 0.0
    for session, est in zip(sessions, fit.sessions):
        label = max(est.sigma_m, key=lambda k: est.sigma_m[k].value)
        first = est.detection.get(label) or next(iter(est.detection.values()))
        wanted = max(wanted, suggest_buffer(session.history, detectfn=fit.detectfn, first=first.value,
                                            sigma=est.sigma_m[label].value))
    return wanted


def _default_buffer(found: CatalogueSessions, *, detector: str) -> float:
    """4 x the spread of the detections (RPSV), the widest over the sessions where an animal reached two stations."""
    widths = []
    for s in found.sessions:
        try:
            widths.append(default_buffer(s.captures, s.study.secr.traps, detector=detector))
        except DensityInputError:  # no animal at two stations in this session: it shares the others' sigma
            continue
    if not widths:
        raise DensityInputError("no animal was detected at two places in any session, so no buffer can be "
                                "suggested; give --buffer (about 4 times the distance over which an animal is "
                                "detected)")
    return max(widths)


def _session_rows(found: CatalogueSessions) -> list[dict[str, Any]]:
    out = []
    for s in found.sessions:
        animals = sorted({c.animal for c in s.captures})
        sexes = [found.sex_of(a) for a in animals]
        study = s.study.study
        stations = s.study.population.stations  # the session's effort, not its window (a year is longer)
        first = min(st.begin for st in stations).date()
        last = (max(st.end for st in stations) - timedelta(microseconds=1)).date()
        out.append({"session": s.name, "start": first.isoformat(), "last_day": last.isoformat(),
                    "animals": len(animals), "detections": len(set(s.captures)),
                    "stations": len(s.study.secr.traps), "occasions": study["occasions"], "epsg": study["epsg"],
                    "sex": {"F": sexes.count("F"), "M": sexes.count("M"), "unknown": sexes.count(None)}})
    return out


def catalogue_models(cat: Catalogue, *, models: Sequence[str], single: bool, species: str | None = None,
                     occasion_days: float = 1.0, date_from: date | None = None, date_to: date | None = None,
                     sessions: str | None = None, detector: str = "proximity", detectfn: str = "HN",
                     buffer_m: float | None = None, spacing_m: float | None = None, conditional: bool = False,
                     d_link: str = "log", progress: Progress | None = None) -> dict[str, Any]:
    """``models`` fitted on the catalogue's study of ``species`` (one, ``single``, or ranked by AICc) as a
    JSON-ready answer: ``kind`` 'model' with the fit's every figure, or 'compare' with the table, the
    model-averaged D and every fit, with ``study`` (how the sessions were made and each one's animals by sex).
    The sessions are :func:`db.field.density_sessions.catalogue_sessions`'s (``sessions``: its grouping), each
    mask a buffer round its stations (by default 4 x RPSV, widened while secr's suggested buffer for the fitted
    model lies beyond it); the null fit's checks are made before and after each fit, and a model the sessions
    cannot carry is an answer with ``refused`` and its one-sentence ``reason`` and no figure. A fit that finds no
    maximum raises :class:`core.field.scr_errors.FitNotConverged`."""
    report = progress or (lambda fraction, message: None)
    report(0.0, "gathering the sessions' detections and stations")
    found = catalogue_sessions(cat, species=species, occasion_days=occasion_days, date_from=date_from,
                               date_to=date_to, grouping=sessions)
    study = {"source": "catalogue", "species": found.species, "grouping": sessions,
             "occasion_days": occasion_days, "from": date_from.isoformat() if date_from else None,
             "to": date_to.isoformat() if date_to else None,
             "sessions": _session_rows(found)}
    kind = "model" if single else "compare"
    with_sex = any(parse_model(m).uses("sex") or parse_model(m).uses("h2") for m in models)
    try:
        _check_models(found, models, detector=detector)
    except idf.NotIdentifiable as exc:
        report(1.0, "refused")
        return {"kind": kind, "refused": True, "reason": exc.reason, "criterion": exc.criterion, "study": study,
                "notes": list(found.notes)}
    buffer_default = buffer_m is None
    buffer_m = _default_buffer(found, detector=detector) if buffer_m is None else float(buffer_m)
    notes = list(found.notes)
    start_buffer = buffer_m
    try:
        for widening in range(MAX_WIDENINGS + 1):
            fitted = _catalogue_scr_sessions(found, detector=detector, buffer_m=buffer_m, spacing_m=spacing_m,
                                             with_sex=with_sex)
            result, fits = _fit_all(fitted, models, single=single, detectfn=detectfn, conditional=conditional,
                                    d_link=d_link, report=report)
            wanted = _suggested_buffer(fits[0] if single else result.best, fitted)
            if wanted <= buffer_m:
                break
            if not buffer_default or widening == MAX_WIDENINGS:
                notes.append(f"the buffer of {buffer_m:,.0f} m is narrower than the {wanted:,.0f} m secr's "
                             "suggest.buffer gives for the fitted model: D may be biased high; fit again with a "
                             "wider --buffer")
                break
            buffer_m = float(math.ceil(wanted / 10.0) * 10.0)
            report(0.05, f"widening the buffer to {buffer_m:,.0f} m (secr's suggested buffer for the fit)")
    except idf.NotIdentifiable as exc:
        report(1.0, "refused")
        return {"kind": kind, "refused": True, "reason": exc.reason, "criterion": exc.criterion, "study": study,
                "notes": notes}
    if buffer_m != start_buffer:
        notes.append(f"buffer widened from {start_buffer:,.0f} m (4 × the spread of the detections) to "
                     f"{buffer_m:,.0f} m, secr's suggested buffer for the fitted model")
    study["buffer_m"], study["buffer_default"] = buffer_m, buffer_default
    study["mask_points"] = [s.mask.n_points for s in fitted]
    answer = result.as_dict()
    answer["notes"] = [*notes, *answer.get("notes", [])]
    report(1.0, "done")
    return {"kind": kind, "study": study, **answer}


def _fit_all(sessions: Sequence[ScrSession], models: Sequence[str], *, single: bool, detectfn: str,
             conditional: bool, d_link: str, report: Progress) -> tuple[ScrModelFit | ModelComparison,
                                                                        list[ScrModelFit]]:
    if single:
        report(0.1, f"fitting {models[0]}")
        fit = fit_scr_model(sessions, models[0], detectfn=detectfn, conditional=conditional, d_link=d_link)
        _assess(fit, sessions)
        return fit, [fit]
    # each fit is checked as it comes, before the ranking: a table of fits the sessions cannot carry says nothing
    comparison = compare_models(sessions, models, detectfn=detectfn, conditional=conditional, d_link=d_link,
                                progress=lambda f, m: report(0.05 + 0.9 * f, m),
                                assess=lambda fit: _assess(fit, sessions))
    return comparison, list(comparison.fits)
