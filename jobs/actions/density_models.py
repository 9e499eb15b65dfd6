"""Density models beyond the null on secr's text files (``rosette density --model`` and ``--compare``): several
sessions in one captures file, sex from its column after ``Detector``, density over a mask CSV's covariates, and a
set of models ranked by AICc with the model-averaged D. The fits are :mod:`core.field.scr_fit`'s and
:mod:`core.field.scr_select`'s (docs/density.md, "Models beyond the null"); this layer reads the files, pairs
traps and masks with sessions, and words the answer."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.field.scr_data import Capture, Trap, read_secr_captures, read_secr_traps
from core.field.scr_errors import DensityInputError, FitNotConverged, MaskError
from core.field.scr_fit import fit_scr_model
from core.field.scr_mask import Mask, trapbuffer_mask
from core.field.scr_models import (
    ScrSession,
    build_sessions,
    parse_model,
    read_mask_with_covariates,
    read_secr_sex,
)
from core.field.scr_select import AicRow, compare_models, format_aic_table
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


def density_models(request: DensityModelsRequest, *,
                   progress: Callable[[float, str], None] | None = None) -> dict[str, Any]:
    """Fit the request's model, or rank its models by AICc, as a JSON-ready dict: ``kind`` 'model' with the fit's
    every figure (:meth:`core.field.scr_fit.ScrModelFit.as_dict`), or 'compare' with the table, the model-averaged
    D of each session and every fit. A fit that does not converge is refused as a ``ValueError``."""
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


def models_text(answer: Mapping[str, Any]) -> str:
    """The CLI's plain answer: a fit's coefficients and each session's figures, or the AICc table as secr's
    ``AIC()`` prints it with each session's model-averaged D."""
    if answer["kind"] == "model":
        return "\n".join(_fit_lines(answer))
    criterion = answer["criterion"]
    rows = [AicRow(model=r["model"], detectfn=r["detectfn"], n_parameters=r["npar"], loglik=r["logLik"],
                   aic=r["AIC"], aicc=r["AICc"] if r["AICc"] is not None else math.nan, delta=r[f"d{criterion}"],
                   weight=r[f"{criterion}wt"]) for r in answer["table"]]
    lines = [format_aic_table(rows, criterion=criterion), ""]
    lines += [f"Model-averaged D, session {a['session']}: {_estimate(a['D_per_100km2'], 1)} per 100 km²"
              for a in answer["model_averaged"]]
    lines += [f"Note: {n}" for n in answer.get("notes", [])]
    return "\n".join(lines)
