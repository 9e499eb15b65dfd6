"""Density answers (docs/density.md): animals per 100 km² of a species by spatial capture-recapture, fitted as secr
fits it to the catalogue's study (species, window and occasions as ``rosette population`` builds them, the
stations in UTM metres as ``rosette export capthist`` writes them) or to secr's text files.

``density_summary`` (``rosette density``) fits in the foreground on a basis of identities (``decided``,
``confirmed`` or ``uncertain``: the identities nobody confirmed imputed as ``rosette population --identities
uncertain`` imputes them, each draw fitted; :mod:`db.field.density_identities`); the Population tab queues the same fit on
any basis as a background job (``queue_density``, ``density_status``: a fit with its buffer check takes seconds to a
minute, each draw under a second) and draws the answer: the estimates with what each assumes, a map of the
stations, mask and detections, the fitted detection curve, and a report to download (``write_density_report``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core.field import capthist as ch
from core.field.scr_errors import FitNotConverged
from db.catalogue import CatalogueError
from db.field.density_identities import density_on_basis
from db.field.identities import NoCalibration  # noqa: F401 - re-exported: the screens refuse `uncertain` with its words
from db.models import JobStatus
from db.session import Catalogue
from jobs import queue
from jobs.actions.job_words import job_of_kind, unfinished_words
from jobs.actions.identities import basis_table_lines, provenance_line
from jobs.requests.density import DensityRequest

#: The job kind of a density fit run in the background (jobs.kinds).
DENSITY_JOB = "density"
ESTIMATE_HEADERS = ["Parameter", "Estimate", "95% interval", "What it assumes"]
SIDE_BY_SIDE_HEADERS = ["Parameter", "As decided", "95% interval", "With identification uncertainty",
                        "95% interval", "Share from identification"]
#: The fourth column's header of the side-by-side table on the confirmed basis.
CONFIRMED_HEADER = "Confirmed only"
DETECTION_CURVES = {"HN": "half-normal", "HHN": "hazard half-normal", "EX": "exponential"}
#: The fields of the JSON answer a report or a CLI reader gets (the map's points are left to the picture).
DRAWING_KEYS = ("mask_xy", "curve", "stations", "animals")


def density_summary(cat: Catalogue | None, request: DensityRequest, *,
                    progress: Callable[[float, str], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The density answer for ``request`` on its basis of identities as a JSON-ready dict (``cat`` may be None for
    secr files; :func:`db.field.density_identities.density_on_basis`, which the background job calls too). A fit that
    does not converge is refused as a ``ValueError`` naming the start values tried, so every screen shows it; a fit
    the array cannot carry is an answer with ``refused`` and its one-sentence ``reason`` and no estimate;
    ``uncertain`` without a calibrated model raises :class:`NoCalibration` naming the command that checks one;
    a stop raises :class:`core.field.identities.ImputationCancelled` with nothing kept."""
    try:
        return density_on_basis(cat, **request.fit_options(), progress=progress, should_stop=should_stop)
    except FitNotConverged as exc:
        raise ValueError(str(exc)) from None


# --------------------------------------------------------------------------- in the background


def queue_density(cat: Catalogue, request: DensityRequest) -> tuple[int, str]:
    """Queue the fit as a background job (the Population tab) on the request's basis of identities; returns (job
    id, what the tab says). The request was checked when it was made (secr's files on another basis than decided
    among them), so a bad one is refused before anything is queued."""
    job_id = queue.submit(cat, DENSITY_JOB, request.to_dict())
    if request.identities == "uncertain":
        what = f"with identification uncertainty ({request.draws} draws, seed {request.seed})"
        steps = (f"the photos are scored, the study fitted as decided, then each of the {request.draws} draws of "
                 "the identities is fitted, under a second each")
    elif request.identities == "confirmed":
        what = "on confirmed identities (the curators' only)"
        steps = "the study is fitted as decided, then on the curators' detections alone: seconds to a few minutes"
    else:
        what = "on the identities as decided"
        steps = "a fit with its buffer check takes from seconds to a minute or two"
    return job_id, (f"Density fit queued as job #{job_id} {what}. Its progress is shown here and in the Jobs tab; "
                    f"{steps}.")


def latest_density_job(cat: Catalogue) -> int | None:
    """The newest density job, so a reloaded page shows its answer again."""
    jobs = queue.list_jobs(cat, limit=1, kind=DENSITY_JOB)
    return jobs[0].id if jobs else None


#: how a fit's status line names the identities it was asked on (as decided: nothing to add)
BASIS_WORDS = {"confirmed": "on confirmed identities", "uncertain": "with identification uncertainty"}


def density_status(cat: Catalogue, job_id: int | None) -> tuple[dict[str, Any] | None, str]:
    """(the answer once the job succeeded, else None; the status line: done with its summary, what the curator
    reads meanwhile, or why it failed), naming the identities the fit was asked on unless as decided."""
    if not job_id:
        return None, ""
    job = job_of_kind(cat, job_id, DENSITY_JOB, "a density fit")
    basis = BASIS_WORDS.get(str((job.params or {}).get("identities") or "decided"))
    label = f"Density fit job #{job.id}" + (f" {basis}" if basis else "")
    if job.status == JobStatus.succeeded:
        answer = dict(job.result or {})
        if answer.get("refused"):  # the array cannot carry a density: the one sentence, no number
            return answer, f"{label} refused: {answer['reason']}"
        return answer, f"{label} done: {answer.get('summary', '')}."
    return None, unfinished_words(job, label)


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
    if answer.get("refused"):
        return [["D (animals per 100 km²)", "no estimate", "—", answer["reason"]]]
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
    check = answer.get("buffer_check") or {}
    if check.get("changed"):  # said where D is read, not only in the notes
        d_assumes = f"{check['message'][0].upper()}{check['message'][1:]}. {d_assumes}"
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


def _where(answer: Mapping[str, Any]) -> str:
    study = answer["study"]
    if study["source"] == "catalogue":
        return (f"{study['species']}: {answer['n_animals']} animal(s) with {answer['n_detections']} detection(s) at "
                f"{answer['n_detectors']} station(s) over {answer['n_occasions']} occasion(s) of "
                f"{_fmt(study['occasion_days'], 3).rstrip('0').rstrip('.')} day(s), {study['start']} to "
                f"{study['last_day']} (stations in UTM metres, EPSG:{study['epsg']})")
    return (f"secr files {Path(study['captures']).name} and {Path(study['traps']).name}: "
            f"{answer['n_animals']} animal(s) with {answer['n_detections']} detection(s) at "
            f"{answer['n_detectors']} detector(s) over {answer['n_occasions']} occasion(s)")


def _mask_words(answer: Mapping[str, Any]) -> str:
    """The mask as it was made: a mask file is named (a CSV is used as it is, so no buffer is spoken of); a buffer
    is the default, the widened one, or the user's."""
    p, m = answer["parameters"], answer["mask"]
    if p["mask_file"] and m.get("source") == "csv":
        return f"mask from {Path(p['mask_file']).name}, {m['points']} points {_fmt(m['spacing_m'], 0)} m apart, " \
               f"{_fmt(m['area_km2'], 1)} km²"
    if p.get("buffer_start_m") is not None:
        buffer = (f"buffer {_fmt(p['buffer_m'], 0)} m (widened by itself from {_fmt(p['buffer_start_m'], 0)} m, "
                  "4 × the spread of the animals' detections, until D was stable)")
    elif p["buffer_default"] and p["mask_file"]:  # the habitat is the user's: the buffer only bounds it
        buffer = f"within {_fmt(p['buffer_m'], 0)} m of a detector (4 × the spread of the animals' detections)"
    elif p["buffer_default"]:
        buffer = f"buffer {_fmt(p['buffer_m'], 0)} m (4 × the spread of the animals' detections, the default)"
    else:
        buffer = f"buffer {_fmt(p['buffer_m'], 0)} m (yours)"
    where = f"mask clipped to {Path(p['mask_file']).name}, " if p["mask_file"] else "mask of "
    return (f"{where}{m['points']} points {_fmt(m['spacing_m'], 0)} m apart, {buffer}, "
            f"{_fmt(m['area_km2'], 1)} km²")


def identities_sentence(answer: Mapping[str, Any]) -> str:
    """Which identities the figures rest on and how many unreviewed annotations were left out of them."""
    counts = answer.get("provenance_counts")
    if not counts:
        return "Identities: as the secr files give them (they do not say who identified each animal)."
    basis = answer.get("identities", "decided")
    outside = int(answer.get("outside_occasions") or 0)
    curator, machine, unreviewed = counts["curator"], counts["machine"], counts["unreviewed"]
    if basis == "confirmed":
        return (f"Identities confirmed only: the {curator} annotation(s) a curator identified; {machine} "
                f"machine-identified and {unreviewed + outside} unreviewed annotation(s) left out.")
    if basis == "uncertain":
        return (f"Identities with identification uncertainty: {curator} annotation(s) a curator identified, kept; "
                f"{machine} machine-identified and {unreviewed} unreviewed annotation(s) given an animal "
                f"in each draw; {outside} unreviewed annotation(s) outside the occasions left out.")
    return (f"Identities as decided: {curator} annotation(s) identified by a curator and {machine} by a machine; "
            f"{unreviewed + outside} unreviewed annotation(s) left out.")


def basis_text(answer: Mapping[str, Any]) -> str:
    """One paragraph: what the fit rests on, the identities, the mask, the buffer check and the notes; for a
    refused fit what the study holds and why no figure is shown."""
    if answer.get("refused"):
        return (f"No density: {answer['reason']} ({_where(answer)}; {answer['spatial_recaptures']} animal(s) caught "
                f"at two or more stations; stations {_fmt(answer['detector_spacing_m'], 0)} m apart on average, "
                f"{_fmt(answer['array_extent_m'], 0)} m across.) {identities_sentence(answer)}")
    check = answer.get("buffer_check")
    text = ""
    if check and check.get("changed"):  # first, where it cannot be missed
        text = f"{check['message'][0].upper()}{check['message'][1:]}. "
    text += (f"{_where(answer)}; {answer['detector']} detectors, {answer['detectfn']} detection curve, "
             f"{answer['likelihood']} likelihood; {_mask_words(answer)}; detectors "
             f"{_fmt(answer['detector_spacing_m'], 0)} m apart on average. Log-likelihood {_fmt(answer['loglik'], 3)}, "
             f"AIC {_fmt(answer['AIC'], 2)}. {identities_sentence(answer)}")
    if check and not check.get("changed"):
        text += f" Buffer check: {check['message']}."
    notes = [n for n in answer.get("notes", []) if not check or n != check["message"]]
    return text + "".join(f" {n[0].upper()}{n[1:]}{'' if n.endswith('.') else '.'}" for n in notes)


def summary_text(answer: Mapping[str, Any]) -> str:
    """The CLI's plain answer: the basis, then the estimates table and what each assumes, then where the
    identities come from (and, on another basis than decided, the estimates as decided beside)."""
    if answer.get("refused"):
        return basis_text(answer)
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


def identity_lines(answer: Mapping[str, Any], *, table: bool = True) -> list[str]:
    """Where the identities come from, on the confirmed or uncertain basis the estimates side by side as plain text
    (``table``; a screen that draws :func:`identity_rows` as a table of its own leaves it out), and the draws."""
    if not table or answer["identities"] == "decided":
        lines = [provenance_line(answer)]
    else:
        lines = basis_table_lines(answer, headers=SIDE_BY_SIDE_HEADERS, confirmed_header=CONFIRMED_HEADER,
                                  rows=identity_rows(answer))
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
             f"**{answer['summary'][0].upper()}{answer['summary'][1:].rstrip('.')}.**", "",
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


def nice_length(span: float) -> float:
    """A scale bar's length: 1, 2 or 5 times a power of ten, about a fifth of ``span``."""
    if not (math.isfinite(span) and span > 0):
        return 100.0
    target = span / 5
    power = 10 ** math.floor(math.log10(target))
    return float(max(m * power for m in (1, 2, 5) if m * power <= target))


def map_view(answer: Mapping[str, Any]) -> tuple[tuple[float, float], tuple[float, float]]:
    """The map's first view: the stations with a margin of about 1.5 sigma (at least a quarter of the array's
    width, at most the buffer), so that on a wide mask the stations and the animals stay apart; the whole mask is a
    double-click away."""
    xs = [s["x"] for s in answer["stations"]]
    ys = [s["y"] for s in answer["stations"]]
    width = max(max(xs) - min(xs), max(ys) - min(ys), 1.0)
    sigma = answer.get("sigma_m")
    buffer = (answer.get("parameters") or {}).get("buffer_m") or math.inf
    margin = max(0.25 * width, 1.5 * sigma if sigma and math.isfinite(sigma) else 0.0, 100.0)
    mask = answer.get("mask_xy")
    margin = min(margin, buffer) if mask else 0.25 * width
    view = [min(xs) - margin, max(xs) + margin, min(ys) - margin, max(ys) + margin]
    if mask:  # no wider than the mask (a habitat polygon may hug the stations), the stations always inside
        pad = 0.05 * width + 50.0
        mx, my = [p[0] for p in mask], [p[1] for p in mask]
        view = [min(max(view[0], min(mx)), min(xs) - pad), max(min(view[1], max(mx)), max(xs) + pad),
                min(max(view[2], min(my)), min(ys) - pad), max(min(view[3], max(my)), max(ys) + pad)]
    return (view[0], view[1]), (view[2], view[3])


def map_figure(answer: Mapping[str, Any]) -> Any:
    """Plan view in metres: the mask's points, each animal's mean detection place, and on top the stations (sized by
    detections, each named in dark type), zoomed to the stations (:func:`map_view`) with a scale bar."""
    import plotly.graph_objects as go  # lazy: plotly is heavy and only needed when a chart is drawn

    mask = answer.get("mask_xy") or []
    stations, animals = answer["stations"], answer["animals"]
    fig = go.Figure()
    if mask:
        fig.add_trace(go.Scattergl(x=[p[0] for p in mask], y=[p[1] for p in mask], mode="markers",
                                   name="habitat mask", marker=dict(symbol="square", size=4, color="#c9e4c9"),
                                   hoverinfo="skip"))
    # animals under the stations: one seen at a single station sits on it, and the station's name stays readable
    fig.add_trace(go.Scatter(
        x=[a["x"] for a in animals], y=[a["y"] for a in animals], mode="markers", name="animals (mean detection)",
        text=[a["name"] for a in animals], marker=dict(symbol="circle", color="#c0392b", size=8),
        customdata=[[a["detections"], a["detectors"]] for a in animals],
        hovertemplate="%{text}: %{customdata[0]} detections at %{customdata[1]} stations<extra></extra>"))
    most = max([1, *(s["detections"] for s in stations)])
    fig.add_trace(go.Scatter(
        x=[s["x"] for s in stations], y=[s["y"] for s in stations], mode="markers+text", name="stations",
        text=[s["name"] for s in stations], textposition="top center",
        # a white halo keeps a name readable over the mask and over an animal's dot
        textfont=dict(size=14, color="#0b1f44", weight="bold", shadow="0 0 3px white, 0 0 3px white, 0 0 2px white"),
        marker=dict(symbol="triangle-up", color="#1f3b73", line=dict(color="white", width=1.5),
                    size=[14 + 10 * s["detections"] / most for s in stations]),
        customdata=[[s["detections"], s["animals"], s["usage"]] for s in stations],
        hovertemplate="%{text}: %{customdata[0]} detections of %{customdata[1]} animals, "
                      "%{customdata[2]:.1f} occasions of use<extra></extra>"))
    (x0, x1), (y0, y1) = map_view(answer)
    bar = nice_length(x1 - x0)
    bx, by = x0 + 0.05 * (x1 - x0), y0 + 0.06 * (y1 - y0)
    fig.add_shape(type="line", x0=bx, x1=bx + bar, y0=by, y1=by, line=dict(color="#222", width=4))
    fig.add_annotation(x=bx + bar / 2, y=by, text=f"<b>{_distance(bar)}</b>", showarrow=False, yshift=12,
                       font=dict(size=13, color="#222"))
    fig.update_layout(title="Stations and detections (double-click: the whole mask)",
                      height=480, margin=dict(l=60, r=20, t=60, b=40), legend=dict(orientation="h", y=-0.12),
                      plot_bgcolor="white",  # the mask's green shows where the habitat ends
                      xaxis=dict(title="x (m)", range=[x0, x1], gridcolor="#eee"),
                      yaxis=dict(title="y (m)", range=[y0, y1], scaleanchor="x", scaleratio=1, gridcolor="#eee"))
    return fig


def _distance(metres: float) -> str:
    return f"{metres / 1000:g} km" if metres >= 1000 else f"{metres:g} m"


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
