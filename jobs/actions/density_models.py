"""Density models beyond the null (``rosette density --model`` and ``--compare``) on secr's text files or on the
catalogue's study: several sessions (a captures file's ``Session`` column, or the catalogue's detections by year or
by deployment group), sex (a column of the captures file, or each individual's in the catalogue), density over a
mask CSV's covariates, and a set of models ranked by AICc with the model-averaged D. The fits are
:mod:`core.field.scr_fit`'s and :mod:`core.field.scr_select`'s (docs/density.md, "Models beyond the null"); this
layer reads the files or the catalogue's sessions (:mod:`db.field.density_sessions`), pairs traps and masks with
sessions, checks that the data can carry the models as the null fit checks them, and words the answer."""

from __future__ import annotations

import math
from datetime import timedelta
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.field import scr_identifiability as idf
from core.field.density import MAX_WIDENINGS, suggest_buffer
from core.field.scr_data import Capture, Trap, build_capture_history, read_secr_captures, read_secr_traps
from core.field.scr_errors import DensityInputError, FitNotConverged, MaskError
from core.field.scr_fit import ScrModelFit, fit_scr_model
from core.field.scr_mask import Mask, trapbuffer_mask
from core.field.scr_models import (
    ScrSession,
    build_sessions,
    normalise_sex,
    parse_model,
    read_mask_with_covariates,
    read_secr_sex,
)
from core.field.scr_select import AicRow, ModelComparison, compare_models, format_aic_table
from db.field.density import default_buffer
from db.field.density_sessions import CatalogueSessions, catalogue_sessions
from db.session import Catalogue
from jobs.requests.density import DensityModelsRequest

#: Terms of a formula that are not mask covariates (secr's own variables).
_BUILT_IN_TERMS = {"session", "Session", "t", "T", "b", "bk", "sex", "h2"}


def _existing(path: str, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} file {path} not found")
    return p


def _captures_format(path: Path, traps: Sequence[Trap]) -> str:
    """'XY' where the first capture line names its detector by coordinates that match a trap (secr's
    ``fmt = "XY"``, as captdata is written), else 'trapID'."""
    names = {t.name for t in traps}
    xy = {(round(t.x, 2), round(t.y, 2)) for t in traps}
    for raw in path.read_text(encoding="utf-8-sig").splitlines():
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) >= 5 and fields[3] not in names:
            try:
                if (round(float(fields[3]), 2), round(float(fields[4]), 2)) in xy:
                    return "XY"
            except ValueError:
                pass
        return "trapID"
    return "trapID"


def _session_order(captures: Sequence[Capture]) -> list[str]:
    seen: list[str] = []
    for c in captures:
        if c.session not in seen:
            seen.append(c.session)
    return seen


def _per_session(paths: Sequence[str], names: Sequence[str], flag: str) -> list[str]:
    """One path per session: the one file for all, or one each in the order the sessions first appear."""
    if len(paths) == 1:
        return list(paths) * len(names)
    if len(paths) != len(names):
        raise DensityInputError(f"{len(paths)} {flag} files for {len(names)} session(s) ({', '.join(names)}); "
                                f"give one {flag} file for every session, in the order the sessions first appear "
                                "in the captures file, or one for all")
    return list(paths)


def _check_covariates(models: Sequence[str], sessions: Sequence[ScrSession]) -> None:
    """A density term that is neither secr's own variable nor a covariate of every session's mask is refused by
    name, with the covariates the masks hold."""
    for text in models:
        for term in parse_model(text).of("D"):
            if term in _BUILT_IN_TERMS:
                continue
            for s in sessions:
                if term not in s.mask_covariates:
                    held = ", ".join(sorted(s.mask_covariates)) or "none"
                    raise MaskError(f"model {text!r}: {term!r} is not a covariate of the mask of session {s.name!r} "
                                    f"(its covariates: {held}); add it as a column of the mask CSV")


def read_sessions(request: DensityModelsRequest) -> list[ScrSession]:
    """The request's sessions from its files (see :class:`DensityModelsRequest`)."""
    captures_path = _existing(request.captures, "captures")
    trap_paths = [_existing(t, "traps") for t in request.traps]
    first_traps = read_secr_traps(trap_paths[0])
    fmt = _captures_format(captures_path, first_traps)
    if fmt == "XY" and len(trap_paths) > 1:
        raise DensityInputError("captures that name detectors by X Y need one traps file for every session")
    captures = read_secr_captures(captures_path, fmt=fmt, traps=first_traps)
    names = _session_order(captures)
    trap_sets = [read_secr_traps(p) for p in _per_session([str(p) for p in trap_paths], names, "--traps")]
    uses_sex = any(parse_model(m).uses("sex") or parse_model(m).uses("h2") for m in request.models)
    sex = read_secr_sex(captures_path, fmt=fmt) if uses_sex else None
    masks: list[Mask] = []
    covariates: list[Mapping[str, np.ndarray]] = []
    if request.masks:
        for path in _per_session(list(request.masks), names, "--mask"):
            if Path(path).suffix.lower() not in (".csv", ".txt"):
                raise MaskError(f"mask {path}: models read a CSV of x,y points (with covariate columns); "
                                "a GeoJSON habitat is used by the null fit only")
            mask, cov = read_mask_with_covariates(_existing(path, "mask"), spacing_m=request.spacing_m)
            masks.append(mask)
            covariates.append(cov)
    else:
        for traps in trap_sets:
            xy = np.array([[t.x, t.y] for t in traps], dtype=float)
            masks.append(trapbuffer_mask(xy, buffer_m=float(request.buffer_m or 0.0), spacing_m=request.spacing_m))
            covariates.append({})
    sessions = build_sessions(captures, trap_sets, masks, detector_type=request.detector, sex=sex,
                              mask_covariates=covariates, session_names=names)
    _check_covariates(request.models, sessions)
    return sessions


def density_models(request: DensityModelsRequest, *, cat: Catalogue | None = None,
                   progress: Callable[[float, str], None] | None = None) -> dict[str, Any]:
    """Fit the request's model, or rank its models by AICc, as a JSON-ready dict: ``kind`` 'model' with the fit's
    every figure (:meth:`core.field.scr_fit.ScrModelFit.as_dict`), or 'compare' with the table, the model-averaged
    D of each session and every fit. On the catalogue (``cat``, a request without files) a model the sessions
    cannot carry is an answer with ``refused`` and its one-sentence ``reason`` and no figure. A fit that does not
    converge is refused as a ``ValueError``."""
    if not request.from_files:
        if cat is None:
            raise ValueError("give secr's captures and traps files, or a catalogue to fit its study")
        return catalogue_models(cat, request, progress=progress)
    report = progress or (lambda fraction, message: None)
    report(0.0, "reading the files")
    sessions = read_sessions(request)
    files = {"captures": request.captures, "traps": list(request.traps), "masks": list(request.masks),
             "buffer_m": request.buffer_m}
    try:
        if request.model is not None:
            report(0.1, f"fitting {request.model}")
            fit = fit_scr_model(sessions, request.model, detectfn=request.detectfn,
                                conditional=request.conditional, d_link=request.d_link)
            report(1.0, "done")
            return {"kind": "model", "files": files, **fit.as_dict()}
        comparison = compare_models(sessions, request.models, detectfn=request.detectfn,
                                    conditional=request.conditional, d_link=request.d_link, progress=report)
    except FitNotConverged as exc:
        raise ValueError(str(exc)) from None
    return {"kind": "compare", "files": files, **comparison.as_dict()}


# --------------------------------------------------------------------------- on the catalogue


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
        if not any(normalise_sex(found.sex.get(a), animal=a) for a in animals):
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
        sexes = [normalise_sex(found.sex.get(a), animal=a) for a in animals]
        study = s.study.study
        stations = s.study.population.stations  # the session's effort, not its window (a year is longer)
        first = min(st.begin for st in stations).date()
        last = (max(st.end for st in stations) - timedelta(microseconds=1)).date()
        out.append({"session": s.name, "start": first.isoformat(), "last_day": last.isoformat(),
                    "animals": len(animals), "detections": len(set(s.captures)),
                    "stations": len(s.study.secr.traps), "occasions": study["occasions"], "epsg": study["epsg"],
                    "sex": {"F": sexes.count("F"), "M": sexes.count("M"), "unknown": sexes.count(None)}})
    return out


def catalogue_models(cat: Catalogue, request: DensityModelsRequest, *,
                     progress: Callable[[float, str], None] | None = None) -> dict[str, Any]:
    """:func:`density_models` on the catalogue's study: its sessions (:func:`db.field.density_sessions.
    catalogue_sessions`), sex from the individuals, each session's mask a buffer round its stations (by default
    4 x RPSV, widened while secr's suggested buffer for the fitted model lies beyond it), the null fit's checks
    before and after each fit."""
    report = progress or (lambda fraction, message: None)
    report(0.0, "gathering the sessions' detections and stations")
    found = catalogue_sessions(cat, species=request.species, occasion_days=request.occasion_days,
                               date_from=request.first_day, date_to=request.last_day, grouping=request.sessions)
    study = {"source": "catalogue", "species": found.species, "grouping": request.sessions,
             "occasion_days": request.occasion_days, "from": request.date_from, "to": request.date_to,
             "sessions": _session_rows(found)}
    kind = "model" if request.model is not None else "compare"
    with_sex = any(parse_model(m).uses("sex") or parse_model(m).uses("h2") for m in request.models)
    try:
        _check_models(found, request.models, detector=request.detector)
    except idf.NotIdentifiable as exc:
        report(1.0, "refused")
        return {"kind": kind, "refused": True, "reason": exc.reason, "criterion": exc.criterion, "study": study,
                "notes": list(found.notes)}
    buffer_default = request.buffer_m is None
    buffer_m = _default_buffer(found, detector=request.detector) if buffer_default else float(request.buffer_m)
    notes = list(found.notes)
    start_buffer = buffer_m
    try:
        for widening in range(MAX_WIDENINGS + 1):
            sessions = _catalogue_scr_sessions(found, detector=request.detector, buffer_m=buffer_m,
                                               spacing_m=request.spacing_m, with_sex=with_sex)
            result, fits = _fit_all(sessions, request, report)
            for fit in fits:
                _assess(fit, sessions)
            wanted = _suggested_buffer(fits[0] if kind == "model" else result.best, sessions)
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
    except FitNotConverged as exc:
        raise ValueError(str(exc)) from None
    if buffer_m != start_buffer:
        notes.append(f"buffer widened from {start_buffer:,.0f} m (4 × the spread of the detections) to "
                     f"{buffer_m:,.0f} m, secr's suggested buffer for the fitted model")
    study["buffer_m"], study["buffer_default"] = buffer_m, buffer_default
    study["mask_points"] = [s.mask.n_points for s in sessions]
    answer = result.as_dict()
    answer["notes"] = [*notes, *answer.get("notes", [])]
    report(1.0, "done")
    return {"kind": kind, "study": study, **answer}


def _fit_all(sessions: Sequence[ScrSession], request: DensityModelsRequest,
             report: Callable[[float, str], None]) -> tuple[ScrModelFit | ModelComparison, list[ScrModelFit]]:
    if request.model is not None:
        report(0.1, f"fitting {request.model}")
        fit = fit_scr_model(sessions, request.model, detectfn=request.detectfn, conditional=request.conditional,
                            d_link=request.d_link)
        return fit, [fit]
    comparison = compare_models(sessions, request.models, detectfn=request.detectfn, conditional=request.conditional,
                                d_link=request.d_link, progress=lambda f, m: report(0.05 + 0.9 * f, m))
    return comparison, list(comparison.fits)


# --------------------------------------------------------------------------- words


def _num(x: object, digits: int, *, sep: str = ",") -> str:
    return "—" if not isinstance(x, (int, float)) or not math.isfinite(x) else f"{x:{sep}.{digits}f}"


def _estimate(e: Mapping[str, Any], digits: int) -> str:
    return f"{_num(e.get('estimate'), digits)} ({_num(e.get('lcl'), digits)} – {_num(e.get('ucl'), digits)})"


def _by_sex(block: Any, digits: int) -> str:
    if isinstance(block, Mapping) and "estimate" in block:
        return _estimate(block, digits)
    return "; ".join(f"{k}: {_estimate(v, digits)}" for k, v in block.items())


def _fit_lines(fit: Mapping[str, Any]) -> list[str]:
    name = "lambda0" if "lambda0" in fit["sessions"][0] else "g0"
    lines = [f"Model {fit['model']}: {fit['detector']} detectors, {fit['detectfn']} detection curve, "
             f"{fit['likelihood']} likelihood ({fit['likelihood_form']}); log-likelihood {fit['loglik']:.3f}, "
             f"{fit['n_parameters']} parameters, AIC {fit['AIC']:.3f}, AICc {_num(fit['AICc'], 3, sep='')}.", "",
             f"{'coefficient':<24} {'beta':>10} {'SE':>9} {'lcl':>10} {'ucl':>10}"]
    for cname, c in fit["coefficients"].items():
        lines.append(f"{cname:<24} {_num(c['beta'], 4):>10} {_num(c['se'], 4):>9} {_num(c['lcl'], 4):>10} "
                     f"{_num(c['ucl'], 4):>10}")
    lines.append("")
    for s in fit["sessions"]:
        lines.append(f"Session {s['session']} ({s['n_animals']} animals): D {_estimate(s['D_per_100km2'], 1)} per "
                     f"100 km²; {name} {_by_sex(s[name], 4)}; sigma {_by_sex(s['sigma_m'], 1)} m")
    lines += [f"Note: {n}" for n in fit.get("notes", [])]
    return lines


def study_lines(answer: Mapping[str, Any]) -> list[str]:
    """What a catalogue fit rests on: the species, how the sessions were made, and each session's animals (by sex),
    detections, stations and occasions; nothing for secr's files (the user holds them)."""
    study = answer.get("study") or {}
    if study.get("source") != "catalogue":
        return []
    how = {None: "one session", "year": "sessions by calendar year"}.get(
        study.get("grouping"), f"sessions by {study.get('grouping')}")
    days = _num(study["occasion_days"], 3).rstrip("0").rstrip(".")
    buffer = f", buffer {_num(study['buffer_m'], 0)} m round the stations" if study.get("buffer_m") else ""
    lines = [f"{study['species']} from the catalogue, {how}, occasions of {days} day(s){buffer}:"]
    for s in study["sessions"]:
        sex = s["sex"]
        lines.append(f"  session {s['session']}: {s['start']} to {s['last_day']}, {s['animals']} animals "
                     f"({sex['F']} F, {sex['M']} M, {sex['unknown']} unknown), {s['detections']} detections at "
                     f"{s['stations']} stations over {s['occasions']} occasions")
    return lines + [""]


def models_text(answer: Mapping[str, Any]) -> str:
    """The CLI's plain answer: a fit's coefficients and each session's figures, or the AICc table as secr's
    ``AIC()`` prints it with each session's model-averaged D; a refused model's one sentence and no figure."""
    head = study_lines(answer)
    if answer.get("refused"):
        return "\n".join([*head, f"No density: {answer['reason']}", *[f"Note: {n}" for n in answer.get("notes", [])]])
    if answer["kind"] == "model":
        return "\n".join([*head, *_fit_lines(answer)])
    criterion = answer["criterion"]
    rows = [AicRow(model=r["model"], detectfn=r["detectfn"], n_parameters=r["npar"], loglik=r["logLik"],
                   aic=r["AIC"], aicc=r["AICc"] if r["AICc"] is not None else math.nan, delta=r[f"d{criterion}"],
                   weight=r[f"{criterion}wt"]) for r in answer["table"]]
    lines = [*head, format_aic_table(rows, criterion=criterion), ""]
    lines += [f"Model-averaged D, session {a['session']}: {_estimate(a['D_per_100km2'], 1)} per 100 km²"
              for a in answer["model_averaged"]]
    lines += [f"Note: {n}" for n in answer.get("notes", [])]
    return "\n".join(lines)
