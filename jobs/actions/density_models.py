"""Density models beyond the null (``rosette density --model`` and ``--compare``) on secr's text files or on the
catalogue's study: several sessions (a captures file's ``Session`` column, or the catalogue's detections by year or
by deployment group), sex (a column of the captures file, or each individual's in the catalogue), density over a
mask CSV's covariates, and a set of models ranked by AICc with the model-averaged D. The fits are
:mod:`core.field.scr_fit`'s and :mod:`core.field.scr_select`'s (docs/density.md, "Models beyond the null"); this
layer reads the files or the catalogue's sessions (:mod:`db.field.density_sessions`), pairs traps and masks with
sessions, and words the answer. On the catalogue the fit is :func:`db.field.density_models.catalogue_models`'s,
in the foreground (the CLI) or as a background job (the Population tab: ``queue_density_models``,
``density_models_status``), and the tab's model picker offers the models the catalogue's own covariates carry
(``model_choices``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.field.scr_data import Capture, Trap, read_secr_captures, read_secr_traps
from core.field.scr_errors import DensityInputError, FitNotConverged, MaskError
from core.field.scr_fit import fit_scr_model
from core.field.scr_mask import Mask, read_geojson_polygon, trapbuffer_mask
from core.field.scr_models import (
    ScrSession,
    build_sessions,
    mask_covariate_from_geojson,
    parse_model,
    read_mask_with_covariates,
    read_secr_sex,
)
from core.field.scr_select import AicRow, compare_models, format_aic_table
from db.catalogue import CatalogueError
from db.field.density_models import catalogue_models
from db.field.density_sessions import catalogue_sessions
from db.models import JobStatus
from db.session import Catalogue
from jobs import queue
from jobs.actions.job_words import job_of_kind, unfinished_words
from jobs.answer_words import models_answer_words
from jobs.requests.density import DensityModelChoicesRequest, DensityModelFiguresRequest, DensityModelsRequest

#: The job kind of a models fit or comparison run in the background (jobs.kinds).
DENSITY_MODELS_JOB = "density_models"
AIC_HEADERS = ["Model", "Parameters", "log-likelihood", "AICc", "dAICc", "AICc weight"]
FIGURE_HEADERS = ["Session", "Sex", "Animals", "D per 100 km² (95% interval)", "g0 (95% interval)",
                  "sigma m (95% interval)"]

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


def _geojson_mask(path: Path, traps: Sequence[Trap], request: DensityModelsRequest,
                  ) -> tuple[Mask, dict[str, np.ndarray]]:
    """A session's mask from a GeoJSON habitat: the buffer round its detectors, clipped to the polygons; each
    density term the models name is read per mask point from the features' attribute of that name."""
    polygon = read_geojson_polygon(path)
    xy = np.array([[t.x, t.y] for t in traps], dtype=float)
    mask = trapbuffer_mask(xy, buffer_m=float(request.buffer_m or 0.0), spacing_m=request.spacing_m,
                           polygon=polygon)
    terms = {term for text in request.models for term in parse_model(text).of("D")} - _BUILT_IN_TERMS
    return mask, {term: mask_covariate_from_geojson(mask, path, term) for term in sorted(terms)}


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
        for path, traps in zip(_per_session(list(request.masks), names, "--mask"), trap_sets):
            if Path(path).suffix.lower() in (".geojson", ".json"):
                mask, cov = _geojson_mask(_existing(path, "mask"), traps, request)
            else:
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
        try:
            return catalogue_models(cat, **request.fit_options(), progress=progress)
        except FitNotConverged as exc:
            raise ValueError(str(exc)) from None
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


# --------------------------------------------------------------------------- the Population tab


#: The models the picker may offer, in the order shown, with what each needs: sex (individuals with a sex),
#: sessions (more than one).
_CANDIDATES = (("g0~1", ""), ("g0~b", ""), ("sigma~sex", "sex"), ("g0~sex, sigma~sex", "sex"),
               ("D~session", "sessions"), ("D~session, g0~sex, sigma~sex", "sex sessions"))


def model_choices(cat: Catalogue, request: DensityModelChoicesRequest) -> dict[str, Any]:
    """The models the catalogue's own covariates can carry for the study ``request`` describes: sex only where an
    individual detected has one, ``session`` only with more than one session; with the sessions, the sexed
    animals and one line of words. A study that cannot be gathered gives no model and its reason as the words."""
    try:
        found = catalogue_sessions(cat, species=request.species, occasion_days=request.occasion_days,
                                   date_from=request.first_day, date_to=request.last_day, grouping=request.sessions)
    except (ValueError, CatalogueError) as exc:
        return {"models": [], "default": [], "sessions": [], "sexed": 0, "words": str(exc)}
    animals = {c.animal for s in found.sessions for c in s.captures}
    sexed = sum(1 for a in animals if found.sex_of(a) is not None)
    have = {"sex"} if sexed else set()
    if len(found.sessions) > 1:
        have.add("sessions")
    models = [m for m, needs in _CANDIDATES if set(needs.split()) <= have]
    names = [s.name for s in found.sessions]
    words = (f"{found.species}: {len(names)} session(s) ({', '.join(names)}), {len(animals)} animals, {sexed} with a "
             "sex in the catalogue." + ("" if sexed else " Models with sex need individuals with a sex.") +
             ("" if len(names) > 1 else " Models by session need more than one session (by year or group)."))
    default = [m for m in ("g0~1", "sigma~sex", "g0~sex, sigma~sex", "D~session") if m in models]
    return {"models": models, "default": default, "sessions": names, "sexed": sexed, "words": words}


def queue_density_models(cat: Catalogue, request: DensityModelsRequest) -> tuple[int, str]:
    """Queue the request's model or comparison on the catalogue as a background job; returns (job id, what the tab
    says). secr's files are fitted in the foreground (``rosette density``), so they are refused here."""
    if request.from_files:
        raise ValueError("the background job fits the catalogue's study; fit secr's files with rosette density")
    job_id = queue.submit(cat, DENSITY_MODELS_JOB, request.to_dict())
    what = f"model {request.model}" if request.model is not None else f"{len(request.models)} models by AICc"
    return job_id, (f"Density job #{job_id} queued: {what}. Its progress is shown here and in the Jobs tab; each "
                    "model takes seconds to a minute or two.")


def latest_density_models_job(cat: Catalogue) -> int | None:
    """The newest models job, so a reloaded page shows its answer again."""
    jobs = queue.list_jobs(cat, limit=1, kind=DENSITY_MODELS_JOB)
    return jobs[0].id if jobs else None


def density_models_status(cat: Catalogue, job_id: int | None) -> tuple[dict[str, Any] | None, str]:
    """(the answer once the job succeeded, else None; the status line: done with the best model, refused with its
    one sentence, the progress meanwhile, or why it failed)."""
    if not job_id:
        return None, ""
    job = job_of_kind(cat, job_id, DENSITY_MODELS_JOB, "a density models fit")
    label = f"Density models job #{job.id}"
    if job.status == JobStatus.succeeded:
        answer = dict(job.result or {})
        return answer, f"{label} {models_answer_words(answer)}"
    return None, unfinished_words(job, label)


def aic_rows(answer: Mapping[str, Any] | None) -> list[list[str]]:
    """Rows of :data:`AIC_HEADERS`, best first (one row for a single model; none for a refused one)."""
    if not answer or answer.get("refused"):
        return []
    if answer["kind"] == "model":
        return [[answer["model"], str(answer["n_parameters"]), _num(answer["loglik"], 3), _num(answer["AICc"], 3),
                 "0.000", "1.0000"]]
    return [[r["model"], str(r["npar"]), _num(r["logLik"], 3), _num(r["AICc"], 3), _num(r["dAICc"], 3),
             _num(r["AICcwt"], 4)] for r in answer["table"]]


def _fits(answer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [answer] if answer["kind"] == "model" else list(answer["fits"])


def model_view(cat: Catalogue, request: DensityModelFiguresRequest) -> dict[str, Any]:
    """What the tab shows of a density models job: ``status`` (its line), ``done`` (an answer is stored), the AICc
    ``table`` (rows of :data:`AIC_HEADERS`), the fitted ``models`` in the table's order, the ``model`` shown
    (``request.model``, None: the best by AICc) with its per-session and per-sex ``figures`` (rows of
    :data:`FIGURE_HEADERS`) and a line ``about`` it and the notes; no rows while the job runs or was refused."""
    answer, words = density_models_status(cat, request.job_id)
    view: dict[str, Any] = {"status": words, "done": answer is not None, "table": aic_rows(answer), "models": [],
                            "model": None, "figures": [], "about": ""}
    if not answer or answer.get("refused"):
        return view
    view["models"] = [r[0] for r in view["table"]]
    view["model"], view["figures"], view["about"] = _figures(answer, request.model)
    return view


def _figures(answer: Mapping[str, Any], model: str | None) -> tuple[str, list[list[str]], str]:
    fits = {f["model"]: f for f in _fits(answer)}
    best = answer["table"][0]["model"] if answer["kind"] == "compare" else answer["model"]
    name = model or best
    if name not in fits:
        raise ValueError(f"model {name!r} is not among the job's models ({', '.join(fits)})")
    fit = fits[name]
    detection = "lambda0" if fit["detectfn"] == "HHN" else "g0"
    animals = {r["session"]: r for r in (answer.get("study") or {}).get("sessions", [])}
    rows = []
    for s in fit["sessions"]:
        by_sex = isinstance(s["sigma_m"], Mapping) and "estimate" not in s["sigma_m"] or \
            isinstance(s[detection], Mapping) and "estimate" not in s[detection]
        sexes = ("F", "M") if by_sex else ("",)
        counts = animals.get(s["session"], {}).get("sex", {})
        for sex in sexes:
            def pick(block: Any, sex: str = sex) -> Mapping[str, Any]:
                return block if "estimate" in block else block[sex]

            n = str(s["n_animals"]) if not sex else f"{counts.get(sex, '—')} sexed {sex}"
            rows.append([s["session"], {"F": "female", "M": "male"}.get(sex, "both"), n,
                         _estimate(s["D_per_100km2"], 1) if sex in ("", "F") else "(as above)",
                         _estimate(pick(s[detection]), 4), _estimate(pick(s["sigma_m"]), 0)])
    line = f"{'Best model' if name == best else 'Model'} {name}: {fit['likelihood']} likelihood" + (
        f", sex as {fit['sex']}" if fit.get("sex") else "") + "." + "".join(
        f" {n[0].upper()}{n[1:].rstrip('.')}." for n in answer.get("notes", []))
    return name, rows, line
