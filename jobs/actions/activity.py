"""Activity answers (docs/activity.md): when in the day a species is active, as a von Mises kernel density of its
detection times with the bandwidth the overlap package chooses, per species, per individual or per sex, and how
much two activity patterns overlap (Dhat1, Dhat4, Dhat5 with a smoothed-bootstrap 95% interval).

The times are each event's local clock time in the catalogue (:func:`db.field.activity.activity_times`: one detection
per event, not per photo), or the rows of a camtrapR record table (``Species`` and ``DateTimeOriginal``, or
``Date`` and ``Time``, as ``rosette export capthist`` writes it) thinned to independent detections.

``activity_summary`` (``rosette activity``, the Population tab's activity panel) gives a JSON-ready dict; the
words, the overlap table and the plotly chart are made from it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from core.field.activity import MIN_DETECTIONS, fit_groups, overlap, read_record_table, times_to_radians
from db.field.activity import activity_times
from db.session import Catalogue
from jobs.requests.density import ActivityRequest

#: Pairs of groups whose overlap is estimated when a species is split by individual (the largest groups first):
#: each pair's interval takes a thousand resamples.
MAX_INDIVIDUAL_PAIRS = 3
OVERLAP_HEADERS = ["Groups", "Detections", "Dhat1", "Dhat4", "Dhat5", "Reported", "95% interval"]
LEFT_OUT_WORDS = {"no_time": "annotation(s) on photos without a readable time",
                  "no_individual": "annotation(s) not assigned to an individual",
                  "unknown_sex": "annotation(s) of animals of unknown sex",
                  "no_individual_in_table": "record(s) with no Individual"}


class ActivityRefused(ValueError):
    """The detections cannot carry the curve asked for (too few, for a species or every group of a split); the
    message says why and what to do. A screen shows it where it stays, beside the curves drawn before."""


def _catalogue_groups(cat: Catalogue, request: ActivityRequest) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    groups: dict[str, np.ndarray] = {}
    basis: dict[str, Any] = {"source": "catalogue", "species": [], "annotations": 0, "photos": 0, "events": 0,
                             "left_out": {}}
    for name in request.species or (None,):
        found = activity_times(cat, species=name, by=request.by)
        basis["species"].append(found.species)
        for key in ("annotations", "photos", "events"):
            basis[key] += getattr(found, key)
        for reason, count in found.left_out.items():
            basis["left_out"][reason] = basis["left_out"].get(reason, 0) + count
        if request.by is None and not found.groups:
            groups[found.species] = np.zeros(0)  # refused below, in the activity engine's own words
        for group, times in found.groups.items():
            groups[group] = times_to_radians(times)
    return groups, basis


def _record_table_groups(request: ActivityRequest) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    if request.by == "sex":
        raise ValueError("a camtrapR record table has no sex column: split it by individual, or fit the catalogue's "
                         "photos by sex")
    table = read_record_table(request.record_table)
    rows = len(table.species)
    species = list(request.species)
    if not species:
        known = sorted(set(table.species))
        if len(known) != 1:
            raise ValueError(f"the record table holds {len(known)} species ({', '.join(known) or 'none'}): give one "
                             "or two with --species")
        species = known
    thinned = table.independent(min_minutes=request.independent_minutes, by_individual=request.by == "individual")
    groups: dict[str, np.ndarray] = {}
    no_individual = 0
    for name in species:
        times = thinned.of_species(name)  # refused, naming the species there are, when it has none
        if request.by is None:
            groups[name] = times
            continue
        who = np.array([ind for sp, ind in zip(thinned.species, thinned.individuals) if sp == name])
        no_individual += int((who == "").sum())
        for ind in sorted(set(who) - {""}, key=lambda i: (-(who == i).sum(), i)):
            groups[ind] = times[who == ind]
    basis = {"source": "record_table", "record_table": str(request.record_table), "species": species,
             "rows": rows, "independent_rows": len(thinned.species),
             "independent_minutes": request.independent_minutes,
             "left_out": {"no_individual_in_table": no_individual} if no_individual else {}}
    return groups, basis


def _pairs(names: list[str], by: str | None) -> list[tuple[str, str]]:
    if by == "individual":
        return list(itertools.combinations(names[:MAX_INDIVIDUAL_PAIRS], 2))[:MAX_INDIVIDUAL_PAIRS]
    return list(itertools.combinations(names, 2))


def activity_summary(cat: Catalogue | None, request: ActivityRequest) -> dict[str, Any]:
    """The activity answer for ``request`` as a JSON-ready dict: each group's fitted curve (hours 0..24, density
    per hour), the groups too small to fit and why, and the overlap of each pair compared. With fewer than
    :data:`core.field.activity.MIN_DETECTIONS` detections for a species asked (or for every group of a split),
    it is refused with words that say what to do."""
    if request.record_table is not None:
        if not Path(request.record_table).expanduser().is_file():
            raise FileNotFoundError(f"the record table {request.record_table} does not exist: give the path of a "
                                    "camtrapR record table (CSV)")
        groups, basis = _record_table_groups(request)
    else:
        if cat is None:
            raise ValueError("give a record table, or a catalogue to read the photos' times from")
        groups, basis = _catalogue_groups(cat, request)
    fitted = fit_groups(groups)
    if request.by is None:  # the species asked must each be fitted: a comparison with a missing side is none
        for name in groups:
            if name in fitted.refused:
                raise ActivityRefused(fitted.refused[name])
    elif not fitted.fits:
        sizes = ", ".join(f"{g} {len(t)}" for g, t in list(groups.items())[:8]) or "none"
        raise ActivityRefused(f"no {request.by} of {basis['species'][0]} has {MIN_DETECTIONS} or more independent "
                         f"detections (detections per {request.by}: {sizes}); an activity curve needs at least "
                         f"{MIN_DETECTIONS}. Look at the species as a whole (without the split), or widen the data")
    names = list(fitted.fits)
    overlaps = []
    for a, b in _pairs(names, request.by):
        result = overlap(fitted.fits[a], fitted.fits[b], bootstrap=request.resamples, seed=request.seed,
                         labels=(a, b))
        d = result.as_dict()
        lo_hi = result.interval()
        overlaps.append({"a": a, "b": b, **d,
                         "estimate": d[result.recommended],
                         "ci_low": None if lo_hi is None or not math.isfinite(lo_hi[0]) else lo_hi[0],
                         "ci_high": None if lo_hi is None or not math.isfinite(lo_hi[1]) else lo_hi[1]})
    return {"by": request.by, "species": basis["species"], "resamples": request.resamples, "seed": request.seed,
            "groups": [fitted.fits[n].as_dict() for n in names], "refused": dict(fitted.refused),
            "overlaps": overlaps, "basis": basis}


# --------------------------------------------------------------------------- words, tables and the chart


def curves_of(summary: Mapping[str, Any]) -> str:
    """What a summary's curves are of, in words: "Panthera onca, each individual"."""
    species = " and ".join(summary["species"])
    return f"{species}, each {summary['by']}" if summary["by"] else species


def refusal_text(reason: str, *, drawn: str | None) -> str:
    """A refusal as the activity panel's status line: why no curve was drawn, and that the curves of the choice
    drawn before (``drawn``, :func:`curves_of`) are still the ones shown."""
    text = f"No activity curve drawn: {reason.rstrip('.')}."
    return text + (f" The curves shown are still those of {drawn}." if drawn else "")


def changed_choice_text(drawn: str | None) -> str:
    """The status line once the choice is changed: the curves shown answer the earlier one until drawn again."""
    return (f"The curves shown are those of {drawn}; press Show activity to draw the new choice."
            if drawn else "")



def _f(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def basis_text(summary: Mapping[str, Any]) -> str:
    """One paragraph: where the times came from, how many, and what was left out."""
    b = summary["basis"]
    species = " and ".join(summary["species"])
    if b["source"] == "catalogue":
        text = (f"{species}: {b['events']} event(s) on {b['photos']} photo(s) with a readable time "
                f"({b['annotations']} annotation(s)); one detection per event, at its first photo's local time")
    else:
        text = (f"{species} in the record table {Path(b['record_table']).name}: {b['independent_rows']} independent "
                f"detection(s) of {b['rows']} row(s) (at least {b['independent_minutes']:g} minutes apart at a "
                "station)")
    if summary["by"]:
        text += f", split by {summary['by']}"
    text += ". Groups: " + "; ".join(f"{g['label']} {g['n']} detections" for g in summary["groups"]) + "."
    left = [f"{n} {LEFT_OUT_WORDS.get(r, r)}" for r, n in b["left_out"].items() if n]
    if left:
        text += " Left out: " + "; ".join(left) + "."
    if summary["refused"]:
        text += (f" Not fitted (fewer than {MIN_DETECTIONS} detections, or no bandwidth): "
                 + ", ".join(summary["refused"]) + ".")
    return text


def overlap_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """Rows of :data:`OVERLAP_HEADERS`: the pair, their detections, the three estimators, the one reported
    (Dhat4 when the smaller sample has more than 75 detections, else Dhat1) and its smoothed-bootstrap 95%
    interval (basic0)."""
    rows = []
    for o in summary["overlaps"]:
        ci = "—" if o["ci_low"] is None else f"{o['ci_low']:.3f} – {o['ci_high']:.3f}"
        rows.append([f"{o['a']} / {o['b']}", f"{o['n_a']} / {o['n_b']}", _f(o["Dhat1"]), _f(o["Dhat4"]),
                     _f(o["Dhat5"]), f"{o['recommended']} = {_f(o['estimate'])}", ci])
    return rows


def summary_text(summary: Mapping[str, Any]) -> str:
    """The CLI's plain answer: the basis, each group's bandwidth and peak hour, and the overlap table."""
    lines = [basis_text(summary), ""]
    for g in summary["groups"]:
        hours, dens = g["hours"], g["density_per_hour"]
        peak = hours[int(np.argmax(dens))]
        lines.append(f"{g['label']}: {g['n']} detections, bandwidth (kappa) {g['bandwidth']:.4f}, most active about "
                     f"{int(peak) % 24:02d}:{int(round((peak % 1) * 60)) % 60:02d}")
    rows = overlap_rows(summary)
    if rows:
        widths = [max(len(str(r[i])) for r in rows + [OVERLAP_HEADERS]) for i in range(len(OVERLAP_HEADERS))]
        lines += ["", "  ".join(h.ljust(w) for h, w in zip(OVERLAP_HEADERS, widths)).rstrip()]
        lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.append(f"(95% intervals: smoothed bootstrap, {summary['resamples']} resamples, basic0)"
                     if summary["resamples"] else "(no bootstrap asked: no intervals)")
    return "\n".join(lines)


def activity_figure(summary: Mapping[str, Any]) -> Any:
    """Each group's activity curve over the day (density per hour)."""
    import plotly.graph_objects as go  # lazy: plotly is heavy and only needed when a chart is drawn

    fig = go.Figure()
    for g in summary["groups"]:
        fig.add_trace(go.Scatter(x=g["hours"], y=g["density_per_hour"], mode="lines", name=f"{g['label']} ({g['n']})",
                                 hovertemplate=f"{g['label']}: " + "%{x:.1f} h, %{y:.3f} per hour<extra></extra>"))
    fig.update_layout(title="Activity over the day (von Mises kernel density, one detection per event)", height=380,
                      margin=dict(l=60, r=20, t=60, b=40), legend=dict(orientation="h", y=-0.18),
                      xaxis=dict(title="local time (hours)", range=[0, 24], dtick=3),
                      yaxis=dict(title="density per hour", rangemode="tozero"))
    return fig
