"""Density answers (docs/density.md): animals per 100 km² of a species by spatial capture-recapture, fitted as secr
fits it to the catalogue's study (species, window and occasions as ``rosette population`` builds them, the
stations in UTM metres as ``rosette export capthist`` writes them) or to secr's text files.

``density_summary`` (``rosette density``) fits in the foreground on a basis of identities (``decided``,
``confirmed`` or ``uncertain``: the identities nobody confirmed imputed as ``rosette population --identities
uncertain`` imputes them, each draw fitted; :mod:`core.field.density_draws`); the Population tab queues the fit as a
background job (``queue_density``, ``density_status``: a fit with its buffer check takes seconds to a minute) and
draws the answer: the estimates with what each assumes, a map of the stations, mask and detections, the fitted
detection curve, and a report to download (``write_density_report``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from core.field import capthist as ch
from core.field import density_draws as dd
from core.field import identities as ids
from core.field.scr_errors import FitNotConverged
from db import identities as db_ids
from db.catalogue import CatalogueError
from db.field.density import (
    CatalogueDensityStudy,
    annotation_stations,
    catalogue_density_study,
    density_answer,
    density_answer_and_fit,
    fit_answer,
    summary_line,
)
from db.identities import NoCalibration  # noqa: F401 - re-exported: the screens refuse `uncertain` with its words
from db.models import JobStatus
from db.session import Catalogue
from jobs import queue
from jobs.actions.identities import basis_table_lines
from jobs.requests.density import DensityRequest

#: The job kind of a density fit run in the background (jobs.kinds).
DENSITY_JOB = "density"
ESTIMATE_HEADERS = ["Parameter", "Estimate", "95% interval", "What it assumes"]
SIDE_BY_SIDE_HEADERS = ["Parameter", "As decided", "95% interval", "With identification uncertainty",
                        "95% interval", "Share from identification"]
DETECTION_CURVES = {"HN": "half-normal", "HHN": "hazard half-normal", "EX": "exponential"}
#: The fields of the JSON answer a report or a CLI reader gets (the map's points are left to the picture).
DRAWING_KEYS = ("mask_xy", "curve", "stations", "animals")


def density_summary(cat: Catalogue | None, request: DensityRequest, *,
                    progress: Callable[[float, str], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The density answer for ``request`` on its basis of identities as a JSON-ready dict (``cat`` may be None for
    secr files), with ``identities``, ``provenance_counts``, ``draws`` and ``share_from_identification``; on the
    ``confirmed`` and ``uncertain`` bases ``estimates_decided`` holds the estimates as decided beside them. A fit
    that does not converge is refused as a ``ValueError`` naming the start values tried, so every screen shows
    it; ``uncertain`` without a calibrated model raises :class:`NoCalibration` naming the command that checks one;
    a stop raises :class:`core.field.identities.ImputationCancelled` with nothing kept."""
    try:
        if request.from_files:
            answer = density_answer(None, **request.fit_options(), progress=progress)
            answer.update(identities="decided", provenance_counts=None, draws=0, share_from_identification={})
            return answer
        if cat is None:
            raise ValueError("give secr's captures and traps files, or a catalogue to fit its study")
        return _density_on_basis(cat, request, progress=progress or (lambda fraction, message: None),
                                 should_stop=should_stop)
    except FitNotConverged as exc:
        raise ValueError(str(exc)) from None


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


def _density_on_basis(cat: Catalogue, request: DensityRequest, *, progress: Callable[[float, str], None],
                      should_stop: Callable[[], bool] | None) -> dict[str, Any]:
    progress(0.0, "gathering the study's detections and stations")
    prepared = catalogue_density_study(cat, species=request.species, occasion_days=request.occasion_days,
                                       date_from=request.first_day, date_to=request.last_day)
    ident = db_ids.identity_study(cat, prepared.population)
    inp = None
    if request.identities == "uncertain":  # refused here, before any fit, when there is no calibration
        progress(0.01, "scoring the unreviewed and machine-identified annotations against the catalogue")
        inp = db_ids.imputation_input(
            cat, ident, should_cancel=should_stop,
            progress=lambda done, total: progress(0.01 + 0.09 * done / max(total, 1), f"{done} of {total} photos"))
    imputing = inp is not None and bool(inp.units)
    start = 0.1 if request.identities == "uncertain" else 0.0  # the photos scored first
    decided_span = 0.2 if imputing else 0.5 if request.identities == "confirmed" else 1.0 - start
    answer, fit = density_answer_and_fit(cat, **request.fit_options(), prepared=prepared,
                                         progress=lambda f, m: progress(start + decided_span * f, m))
    answer.update(identities=request.identities, provenance_counts=ident.provenance_counts, draws=0,
                  share_from_identification={})
    if request.identities == "decided":
        return answer
    answer["estimates_decided"] = _decided_estimates(answer)
    answer["notes"] = [*answer["notes"], *ident.notes]
    stations = annotation_stations(cat, [d.annotation_id for d in ident.detections])
    located = prepared.located
    if request.identities == "confirmed":
        rows = [(prepared.secr.session, ch.secr_token(d.individual), d.occasion + 1, stations[d.annotation_id])
                for d in ident.detections
                if d.provenance == db_ids.CURATOR and stations.get(d.annotation_id) in located]
        if not rows:
            raise ValueError(f"no {prepared.population.species} detection at a station with coordinates was "
                             "identified by a curator: there is nothing to fit on confirmed identities; review some "
                             "in Match review, or fit as decided")
        confirmed, _ = fit_answer(rows, prepared.secr.traps, study=dict(prepared.study), notes=prepared.notes,
                                  detector=request.detector, detectfn=request.detectfn,
                                  buffer_m=answer["parameters"]["buffer_m"], spacing_m=request.spacing_m,
                                  mask=request.mask, conditional=request.conditional,
                                  progress=lambda f, m: progress(0.5 + 0.5 * f, f"confirmed identities: {m}"))
        confirmed["parameters"]["buffer_default"] = answer["parameters"]["buffer_default"]
        confirmed.update({k: answer[k] for k in ("identities", "provenance_counts", "draws",
                                                 "share_from_identification", "estimates_decided")})
        confirmed["notes"] = [*confirmed["notes"], *ident.notes,
                              f"Confirmed: the {ident.provenance_counts['curator']} detection(s) a curator "
                              "identified, on the buffer of the study as decided."]
        return confirmed
    assert inp is not None
    if not imputing:
        answer["share_from_identification"] = {n: 0.0 for n in ("D", fit.detection_name, "sigma")}
        answer["notes"].append(f"No {prepared.population.species} annotation in the study is unreviewed or "
                               "machine-identified: the density with identification uncertainty is the density as "
                               "decided.")
        return answer
    return _with_draws(answer, fit, request, prepared, ident, inp, stations, progress=progress,
                       should_stop=should_stop)


def _with_draws(answer: dict[str, Any], fit: Any, request: DensityRequest, prepared: CatalogueDensityStudy,
                ident: db_ids.IdentityStudy, inp: ids.ImputationInput, stations: Mapping[int, str], *,
                progress: Callable[[float, str], None], should_stop: Callable[[], bool] | None) -> dict[str, Any]:
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
    labels = ids.sample_identities(inp, request.draws, np.random.default_rng(request.seed))
    per = dd.fit_draws(detections, labels, prepared.secr.traps, mask=dd.mask_of(fit), detector=request.detector,
                       detectfn=request.detectfn, conditional=request.conditional, start=dd.start_of(fit),
                       should_stop=should_stop,
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
                "draws": per.draws, "draws_used": d100.draws_used, "seed": request.seed,
                "uncertain_units": len(inp.units), "combination_method": dd.DENSITY_COMBINE_METHOD,
                "share_from_identification": {k: c.share_from_identification for k, c in combined.items()},
                "animals_per_draw": {"min": int(per.animals.min()), "median": float(np.median(per.animals)),
                                     "max": int(per.animals.max())},
                "draws_started_from_previous": per.from_previous, "draw_seconds": round(per.seconds, 3)})
    out["summary"] = summary_line(out) + " with identification uncertainty"
    notes = [f"With identification uncertainty: {len(inp.units)} event(s) of unreviewed or machine-identified "
             f"annotations imputed in {per.draws} draws (seed {request.seed}) as `rosette population --identities "
             f"uncertain` imputes them; each draw's capture histories rebuilt and fitted on the mask of the study as "
             f"decided; {dd.DENSITY_COMBINE_METHOD}.",
             "The log-likelihood, AIC, map and buffer check are those of the study as decided."]
    if per.failed:
        notes.append(f"{per.failed} of {per.draws} draws gave no fit (or no interval) and are left out.")
    out["notes"] = [*answer["notes"], *notes]
    return out


# --------------------------------------------------------------------------- in the background


def queue_density(cat: Catalogue, request: DensityRequest) -> tuple[int, str]:
    """Queue the fit as a background job (the Population tab); returns (job id, what the tab says). The request
    was checked when it was made, so a bad one is refused before anything is queued. The background job fits the
    identities as decided; another basis is refused rather than answered as decided."""
    if request.identities != "decided":
        raise ValueError(f"the background density fit uses the identities as decided; fit on {request.identities} "
                         f"identities with `rosette density --identities {request.identities}`")
    job_id = queue.submit(cat, DENSITY_JOB, request.to_dict())
    return job_id, (f"Density fit queued as job #{job_id}. Its progress is shown here and in the Jobs tab; a fit "
                    "with its buffer check takes from seconds to a minute or two.")


def latest_density_job(cat: Catalogue) -> int | None:
    """The newest density job, so a reloaded page shows its answer again."""
    jobs = queue.list_jobs(cat, limit=1, kind=DENSITY_JOB)
    return jobs[0].id if jobs else None


def density_status(cat: Catalogue, job_id: int | None) -> tuple[dict[str, Any] | None, str]:
    """(the answer once the job succeeded, else None; what the curator reads meanwhile, or why it failed)."""
    if not job_id:
        return None, ""
    job = queue.get_job(cat, int(job_id))
    if job.kind != DENSITY_JOB:
        raise CatalogueError(f"job #{job.id} is a {job.kind} job, not a density fit")
    if job.status == JobStatus.succeeded:
        return dict(job.result or {}), ""
    if job.status in (JobStatus.failed, JobStatus.cancelled):  # the message says which, and why
        why = (job.message or "").removeprefix("failed: ")
        return None, f"Density fit job #{job.id} {job.status.value}: {why}"
    return None, f"Density fit job #{job.id} {job.status.value}: {job.progress:.0%} {job.message or ''}".rstrip()


# --------------------------------------------------------------------------- words and tables


def _fmt(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:,.{digits}f}"


def _interval(lo: float | None, hi: float | None, digits: int = 1) -> str:
    return "—" if lo is None or hi is None else f"{_fmt(lo, digits)} – {_fmt(hi, digits)}"


def estimate_rows(answer: Mapping[str, Any]) -> list[list[str]]:
    """Rows of :data:`ESTIMATE_HEADERS`: D per 100 km², g0 or lambda0, sigma and N in the mask, each with its 95%
    interval and what it assumes, in one sentence."""
    curve = DETECTION_CURVES.get(answer["detectfn"], answer["detectfn"])
    name = "lambda0" if "lambda0" in answer else "g0"
    detection_ci = answer.get(f"{name}_ci") or [None, None]
    n = answer.get("N_in_mask") or {}
    if answer["likelihood"] == "conditional":
        d_assumes = ("Derived as the animals caught over the effective sampled area, n / (p. × mask area) "
                     "(Horvitz-Thompson); activity centres are spread evenly over the mask.")
    else:
        d_assumes = ("Activity centres are spread evenly over the habitat mask (a Poisson process) and no animal "
                     "is born, dies or moves its centre during the study.")
    what = "detections expected at the centre per occasion" if name == "lambda0" else \
        "chance of detection at the centre per occasion"
    return [
        ["D (animals per 100 km²)", _fmt(answer["D_per_100km2"]), _interval(answer["ci_low"], answer["ci_high"]),
         d_assumes],
        [f"{name} ({what})", _fmt(answer.get(name), 3), _interval(*detection_ci, digits=3),
         "Every animal is as detectable as every other, on every occasion and at every detector, and a detection "
         "does not make it more or less likely to be detected again."],
        ["sigma (m, how far an animal ranges)", _fmt(answer["sigma_m"], 0), _interval(*answer["sigma_ci_m"], digits=0),
         f"Detection falls with distance from an animal's centre along the {curve} curve, alike for every animal "
         "and in every direction."],
        ["N in the mask (animals)", _fmt(n.get("estimate")), _interval(n.get("lcl"), n.get("ucl")),
         "The mask holds every place where an animal that could be detected lives (the buffer check tests this)."],
    ]


def basis_text(answer: Mapping[str, Any]) -> str:
    """One paragraph: what the fit rests on, the mask, the buffer check and the notes."""
    study, p, m = answer["study"], answer["parameters"], answer["mask"]
    if study["source"] == "catalogue":
        where = (f"{study['species']}: {answer['n_animals']} animal(s) with {answer['n_detections']} detection(s) at "
                 f"{answer['n_detectors']} station(s) over {answer['n_occasions']} occasion(s) of "
                 f"{_fmt(study['occasion_days'], 3).rstrip('0').rstrip('.')} day(s), {study['start']} to "
                 f"{study['last_day']} (stations in UTM metres, EPSG:{study['epsg']})")
    else:
        where = (f"secr files {Path(study['captures']).name} and {Path(study['traps']).name}: "
                 f"{answer['n_animals']} animal(s) with {answer['n_detections']} detection(s) at "
                 f"{answer['n_detectors']} detector(s) over {answer['n_occasions']} occasion(s)")
    buffer = f"buffer {_fmt(p['buffer_m'], 0)} m" + (" (4 × the spread of the animals' detections, the default)"
                                                     if p["buffer_default"] else "")
    mask = (f"mask from {Path(p['mask_file']).name}, {m['points']} points" if p["mask_file"]
            else f"mask of {m['points']} points") + f" {_fmt(m['spacing_m'], 0)} m apart, {buffer}, " \
        f"{_fmt(m['area_km2'], 1)} km²"
    text = (f"{where}; {answer['detector']} detectors, {answer['detectfn']} detection curve, "
            f"{answer['likelihood']} likelihood; {mask}; detectors {_fmt(answer['detector_spacing_m'], 0)} m apart "
            f"on average. Log-likelihood {_fmt(answer['loglik'], 3)}, AIC {_fmt(answer['AIC'], 2)}.")
    check = answer.get("buffer_check")
    if check:
        text += f" Buffer check: {check['message']}."
    notes = [n for n in answer.get("notes", []) if not check or n != check["message"]]
    return text + "".join(f" {n[0].upper()}{n[1:]}{'' if n.endswith('.') else '.'}" for n in notes)


def summary_text(answer: Mapping[str, Any]) -> str:
    """The CLI's plain answer: the basis, then the estimates table and what each assumes, then where the
    identities come from (and, on another basis than decided, the estimates as decided beside)."""
    rows = estimate_rows(answer)
    widths = [max(len(str(r[i])) for r in rows + [ESTIMATE_HEADERS]) for i in range(3)]
    lines = [basis_text(answer), "", "  ".join(h.ljust(w) for h, w in zip(ESTIMATE_HEADERS[:3], widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r[:3], widths)).rstrip() for r in rows]
    lines += [""] + [f"{r[0]}: {r[3]}" for r in rows]
    if answer.get("provenance_counts"):
        lines += [""] + identity_lines(answer)
    return "\n".join(lines)


def identity_rows(answer: Mapping[str, Any]) -> list[list[str]]:
    """Rows of :data:`SIDE_BY_SIDE_HEADERS`: D, the detection parameter and sigma as decided and on the answer's
    basis, with the share of the interval from identification."""
    decided = answer["estimates_decided"]
    name = "lambda0" if "lambda0" in answer else "g0"
    share = answer.get("share_from_identification") or {}
    out = []
    for label, key, ci, digits, share_key in (("D (per 100 km²)", "D_per_100km2", None, 1, "D"),
                                              (name, name, f"{name}_ci", 3, name),
                                              ("sigma (m)", "sigma_m", "sigma_ci_m", 0, "sigma")):
        lo_d, hi_d = (decided["ci_low"], decided["ci_high"]) if ci is None else (decided.get(ci) or [None, None])
        lo_b, hi_b = (answer["ci_low"], answer["ci_high"]) if ci is None else (answer.get(ci) or [None, None])
        s = share.get(share_key)
        out.append([label, _fmt(decided.get(key), digits), _interval(lo_d, hi_d, digits), _fmt(answer.get(key), digits),
                    _interval(lo_b, hi_b, digits), f"{100 * s:.0f}%" if s is not None else "—"])
    return out


def identity_lines(answer: Mapping[str, Any]) -> list[str]:
    """Where the identities come from and, on the confirmed or uncertain basis, the estimates side by side."""
    lines = basis_table_lines(answer, headers=SIDE_BY_SIDE_HEADERS, confirmed_header="Confirmed only",
                              rows=identity_rows(answer) if answer["identities"] != "decided" else [])
    if answer["identities"] == "uncertain" and answer.get("draws"):
        lines.append(f"{answer['draws']} draws of the identities (seed {answer['seed']}), {answer['draws_used']} "
                     "fitted; how they are combined is in the notes above.")
    return lines


def plain_answer(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The answer without the map's points and the curve (what ``--json`` prints and the report lists)."""
    return {k: v for k, v in answer.items() if k not in DRAWING_KEYS}


def write_density_report(cat: Catalogue, answer: Mapping[str, Any]) -> str:
    """Write the answer as a Markdown report under the data folder's exports; returns its path."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    who = answer["study"].get("species") or "secr-files"
    path = cat.data_dir / "exports" / f"density-{ch.secr_token(who)}-{stamp}.md"
    lines = ["# Density by spatial capture-recapture", "",
             f"Written by Rosette on {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.", "",
             basis_text(answer), "", "| " + " | ".join(ESTIMATE_HEADERS) + " |",
             "|" + "---|" * len(ESTIMATE_HEADERS)]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in estimate_rows(answer)]
    lines += ["", "## Every figure (as `rosette density --json` gives it)", "", "```json",
              json.dumps(plain_answer(answer), indent=2), "```", ""]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines), encoding="utf-8")
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise CatalogueError(f"could not write the density report {path}: {exc.strerror or exc}. Free some space "
                             "and write it again.") from None
    return str(path)


# --------------------------------------------------------------------------- charts


def map_figure(answer: Mapping[str, Any]) -> Any:
    """Plan view in metres: the mask's points, the stations (sized by detections) and each animal's mean
    detection place."""
    import plotly.graph_objects as go  # lazy: plotly is heavy and only needed when a chart is drawn

    mask = answer["mask_xy"]
    stations, animals = answer["stations"], answer["animals"]
    fig = go.Figure()
    fig.add_trace(go.Scattergl(x=[p[0] for p in mask], y=[p[1] for p in mask], mode="markers", name="habitat mask",
                               marker=dict(symbol="square", size=4, color="#cfe8cf"), hoverinfo="skip"))
    most = max([1, *(s["detections"] for s in stations)])
    fig.add_trace(go.Scatter(
        x=[s["x"] for s in stations], y=[s["y"] for s in stations], mode="markers+text", name="stations",
        text=[s["name"] for s in stations], textposition="top center",
        marker=dict(symbol="triangle-up", color="#1f3b73", size=[8 + 14 * s["detections"] / most for s in stations]),
        customdata=[[s["detections"], s["animals"], s["usage"]] for s in stations],
        hovertemplate="%{text}: %{customdata[0]} detections of %{customdata[1]} animals, "
                      "%{customdata[2]:.1f} occasions of use<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=[a["x"] for a in animals], y=[a["y"] for a in animals], mode="markers", name="animals (mean detection)",
        text=[a["name"] for a in animals], marker=dict(color="#c0392b", size=6, opacity=0.8),
        customdata=[[a["detections"], a["detectors"]] for a in animals],
        hovertemplate="%{text}: %{customdata[0]} detections at %{customdata[1]} stations<extra></extra>"))
    fig.update_layout(title="Stations, habitat mask and detections (metres)", height=480,
                      margin=dict(l=60, r=20, t=60, b=40), legend=dict(orientation="h", y=-0.12),
                      xaxis=dict(title="x (m)"), yaxis=dict(title="y (m)", scaleanchor="x", scaleratio=1))
    return fig


def curve_figure(answer: Mapping[str, Any]) -> Any:
    """The fitted detection curve: chance (or expected number) of detections in one occasion against distance."""
    import plotly.graph_objects as go  # lazy: plotly is heavy and only needed when a chart is drawn

    curve = answer["curve"]
    name = "lambda0" if "lambda0" in answer else "g0"
    ylabel = "expected detections per occasion" if name == "lambda0" else "chance of detection per occasion"
    fig = go.Figure(go.Scatter(x=curve["distance_m"], y=curve["probability"], mode="lines", name="fitted",
                               hovertemplate="%{x:.0f} m: %{y:.3f}<extra></extra>"))
    fig.add_vline(x=answer["sigma_m"], line_dash="dash", line_color="#777",
                  annotation_text=f"sigma = {_fmt(answer['sigma_m'], 0)} m", annotation_position="top right")
    fig.update_layout(title=f"Detection curve ({DETECTION_CURVES.get(answer['detectfn'], answer['detectfn'])}): "
                            f"{name} = {_fmt(answer.get(name), 3)} at the centre", height=360,
                      margin=dict(l=60, r=20, t=60, b=40), showlegend=False,
                      xaxis=dict(title="distance from the animal's centre (m)"),
                      yaxis=dict(title=ylabel, rangemode="tozero"))
    return fig
