"""Density from one-flank photos on text files or on the catalogue (``rosette density --flanks``): the two-flank
partial-identity model of Augustine et al. (2018), fitted by :mod:`core.field.partial_id`. This layer reads the files
or the catalogue's study (:mod:`db.field.partial_id_study`), makes the state space, and words the answer
(docs/density.md, "One-flank photos")."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from core.field.partial_id import (
    FlankCapture,
    FlankData,
    FlankStation,
    PartialIdFit,
    StateSpace,
    fit_partial_id,
    flank_data,
    read_flank_captures,
    read_flank_links,
    read_flank_traps,
    summary_dict,
)
from core.field.scr_mask import read_geojson_polygon, read_mask_csv, trapbuffer_mask
from db.field.density import default_buffer
from db.field.flank_links import individual_ids
from db.field.partial_id_study import CatalogueFlankStudy, catalogue_flank_study
from db.session import Catalogue
from jobs.requests.partial_id import PartialIdRequest

#: Links shown in the plain answer (the JSON lists every pair with a probability above 0).
SHOWN_LINKS = 10


def _existing(path: str, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} file {path} not found")
    return p


def state_space(request: PartialIdRequest, xy: np.ndarray) -> StateSpace:
    """The mask's cells (a CSV of points, or a GeoJSON polygon cut to the buffer), else the paper's rectangle."""
    if request.mask is None:
        return StateSpace.around(xy, buffer_m=float(request.buffer_m or 0.0))
    path = _existing(request.mask, "mask")
    if path.suffix.lower() in (".csv", ".txt"):
        return StateSpace.from_mask(read_mask_csv(path, spacing_m=request.spacing_m))
    polygon = read_geojson_polygon(path)
    return StateSpace.from_mask(trapbuffer_mask(xy, buffer_m=float(request.buffer_m or 0.0),
                                                spacing_m=request.spacing_m, polygon=polygon))


def read_flank_files(request: PartialIdRequest) -> FlankData:
    """The request's captures, stations and links as the sampler's histories (bad input refused in one line)."""
    stations = read_flank_traps(_existing(request.traps, "traps"))
    captures = read_flank_captures(_existing(request.captures, "captures"))
    links = read_flank_links(_existing(request.links, "links")) if request.links else []
    return flank_data(captures, stations, links)


def read_flank_catalogue(cat: Catalogue, request: PartialIdRequest) -> tuple[FlankData, CatalogueFlankStudy]:
    """The catalogue's study of the request's species and window as the sampler's histories, with a links file's
    links (individuals' names) added to the ones the catalogue holds."""
    study = catalogue_flank_study(cat, species=request.species, occasion_days=request.occasion_days,
                                  date_from=request.first_day, date_to=request.last_day)
    links = list(study.links)
    if request.links:
        links += read_flank_links(_existing(request.links, "links"))
    return flank_data(study.captures, study.stations, links, cannot_link=study.cannot_link), study


def add_link_evidence(rows: list[dict[str, Any]], captures: Sequence[FlankCapture],
                      stations: Sequence[FlankStation]) -> None:
    """What each pair's probability rests on, added to its row: ``distance_m``, the least distance between a station
    where the left identity was photographed (a left or both-side capture) and one where the right was, and that
    closest pair of captures' ``left_station``/``left_occasion`` and ``right_station``/``right_occasion`` (of equally
    close pairs, the one nearest in time, then the earliest). The model links flanks by where they were caught only,
    so this is the evidence a curator weighs the probability by."""
    xy = {st.name: (st.x, st.y) for st in stations}
    seen: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for c in captures:
        for side in ("L", "R"):
            if c.flank in (side, "B"):
                seen.setdefault((side, c.identity), []).append((c.station, c.occasion))
    for row in rows:
        best: tuple[float, int, int, int, str, str] | None = None
        for ls, lo in seen.get(("L", row["left"]), []):
            for rs, ro in seen.get(("R", row["right"]), []):
                d = math.dist(xy[ls], xy[rs])
                key = (round(d, 6), abs(lo - ro), lo, ro, ls, rs)
                if best is None or key < best:
                    best = key
        if best is not None:
            row.update(distance_m=best[0], left_station=best[4], left_occasion=best[2], right_station=best[5],
                       right_occasion=best[3])


def catalogue_fields(study: CatalogueFlankStudy, *, buffer_m: float | None, buffer_default: bool) -> dict[str, Any]:
    """What the catalogue's fit rests on: the ordinary density's study fields, the identities as read, and the
    detections left out for showing no flank."""
    return {**study.density.study, "left_identities": list(study.left_identities),
            "right_identities": list(study.right_identities),
            "both_side_animals": list(study.both_side_animals), "known_links": list(study.known_links),
            "rejected_links": [list(pair) for pair in study.cannot_link],
            "no_flank": dict(study.no_flank), "buffer_m": buffer_m, "buffer_default": buffer_default}


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def answer_of(fit: PartialIdFit, data: FlankData, request: PartialIdRequest) -> dict[str, Any]:
    """The JSON-ready answer: today's density keys where they apply (``D_per_100km2`` the posterior median,
    ``ci_low``/``ci_high`` its 95% credible interval, ``sigma_m``), N with its interval, the posterior mean number
    of linked pairs, the diagnostics, and every left-right pair's probability of being one animal. A fit whose
    chains did not converge or mix is ``refused`` with its ``reason`` and no estimate."""
    study = {"stations": len(data.station_names), "one_camera_occasions": int(data.k1.sum()),
             "two_camera_occasions": int(data.k2.sum()), "left_identities": data.n_left - data.n_fixed,
             "right_identities": data.n_right - data.n_fixed, "both_side_animals": data.n_both,
             "known_links": data.n_fixed - data.n_both}
    out: dict[str, Any] = {
        "kind": "flanks", "model": "two-flank partial identity (Augustine et al. 2018)",
        "files": {"captures": request.captures, "traps": request.traps, "links": request.links,
                  "mask": request.mask, "buffer_m": request.buffer_m},
        "study": study, "refused": fit.refused is not None, "reason": fit.refused,
        "rhat_max": _num(fit.rhat_max), "ess_min": _num(fit.ess_min), "chains": fit.chains,
        "iterations": fit.iterations, "warmup": fit.warmup, "augmented_M": fit.augmented,
        "area_km2": fit.area_km2, "seconds": fit.seconds, "seed": request.seed,
    }
    if fit.refused is not None:
        return out
    out.update({
        "D_per_100km2": fit.d_per_100km2.median, "ci_low": fit.d_per_100km2.lcl, "ci_high": fit.d_per_100km2.ucl,
        "sigma_m": fit.sigma_m.median, "N": fit.n.median, "N_ci_low": fit.n.lcl, "N_ci_high": fit.n.ucl,
        "p0_single": fit.p0_single.median, "p0_both": fit.p0_both.median if fit.p0_both else None,
        "linked_pairs": fit.linked_pairs, "known_pairs": fit.known_pairs,
        "posterior": summary_dict(fit), "link_probabilities": fit.link_list(),
    })
    return out


def partial_id_density(request: PartialIdRequest, *, cat: Catalogue | None = None,
                       progress: Callable[[float, str], None] | None = None) -> dict[str, Any]:
    """Read the files (or, without them, the catalogue's study), fit the model, and answer (see :func:`answer_of`;
    on the catalogue ``source`` is ``catalogue`` and ``catalogue`` says what the fit rests on). A study with nothing
    to fit, unset flanks or no one-flank identity raises :class:`db.catalogue.CatalogueError` in one sentence."""
    report = progress or (lambda fraction, message: None)
    study: CatalogueFlankStudy | None = None
    buffer_default = False
    if request.from_files:
        report(0.0, "reading the files")
        data = read_flank_files(request)
    else:
        if cat is None:
            raise ValueError("give --captures and --traps files, or a catalogue to fit its study")
        report(0.0, "gathering the study's flanks, stations and cameras")
        data, study = read_flank_catalogue(cat, request)
        mask_points = request.mask is not None and request.mask.lower().endswith((".csv", ".txt"))
        if request.buffer_m is None and not mask_points:
            # the ordinary density's default: 4 x the spread of each individual's detections
            buffer_default = True
            request = replace(request, buffer_m=default_buffer(list(study.density.secr.captures),
                                                               list(study.density.secr.traps), detector="proximity"))
    space = state_space(request, data.xy)
    fit = fit_partial_id(data, space, chains=request.chains, iterations=request.iterations,
                         augmented=request.augmented, seed=request.seed, min_ess=request.min_ess, progress=report)
    report(1.0, "done")
    answer = answer_of(fit, data, request)
    answer["source"] = "files" if study is None else "catalogue"
    if study is not None:
        answer["catalogue"] = catalogue_fields(study, buffer_m=request.buffer_m, buffer_default=buffer_default)
        rows = answer.get("link_probabilities") or []
        add_link_evidence(rows, study.captures, study.stations)
        ids = individual_ids(cat, {r["left"] for r in rows} | {r["right"] for r in rows})
        for r in rows:  # the individuals as they were fitted: a later merge or rename shows in Match review
            r["left_individual_id"], r["right_individual_id"] = ids.get(r["left"]), ids.get(r["right"])
    return answer


def _interval(lo: float, hi: float, digits: int) -> str:
    return f"{lo:,.{digits}f} – {hi:,.{digits}f}"


def flanks_text(answer: Mapping[str, Any]) -> str:
    """The CLI's plain answer."""
    s = answer["study"]
    lines = []
    if answer.get("source") == "catalogue":
        c = answer["catalogue"]
        left_out = ", ".join(f"{n} {label}" for label, n in sorted(c["no_flank"].items()))
        lines.append(f"{c['species']}, {c['start']} to {c['last_day']}, occasions of {c['occasion_days']:g} day(s), "
                     f"stations in UTM metres (EPSG:{c['epsg']}); buffer {_fmt(c['buffer_m'], 0)} m"
                     + (" (4 x the spread of the animals' detections)" if c["buffer_default"] else "")
                     + (f"; left out for showing no flank: {left_out} view(s)" if left_out else "") + ".")
    lines += [f"Two-flank partial identity (Augustine et al. 2018): {s['stations']} stations "
              f"({s['one_camera_occasions']:,} one-camera and {s['two_camera_occasions']:,} two-camera station-"
              f"occasions); {s['left_identities']} left and {s['right_identities']} right identities unlinked, "
              f"{s['both_side_animals']} animals seen on both sides at once, {s['known_links']} known links.",
              f"{answer['chains']} chains x {answer['iterations']:,} iterations ({answer['warmup']:,} warm-up), "
              f"M = {answer['augmented_M']}, state space {answer['area_km2']:,.1f} km²; R-hat at most "
              f"{_fmt(answer['rhat_max'], 3)}, least effective sample size {_fmt(answer['ess_min'], 0)}."]
    if answer["refused"]:
        lines.append(f"Refused: {answer['reason']}.")
        return "\n".join(lines)
    post = answer["posterior"]
    lines += [f"D {answer['D_per_100km2']:,.1f} animals per 100 km² (95% credible interval "
              f"{_interval(answer['ci_low'], answer['ci_high'], 1)}); N {answer['N']:,.0f} "
              f"({_interval(answer['N_ci_low'], answer['N_ci_high'], 0)}) in the state space.",
              f"p0 one side {_estimate(post['p0_single'], 3)}"
              + (f"; p0 both sides {_estimate(post['p0_both'], 3)}" if post["p0_both"] else "")
              + f"; sigma {_estimate(post['sigma_m'], 0)} m.",
              f"Linked left-right pairs: {answer['linked_pairs']:.1f} on average ({answer['known_pairs']} known)."]
    suggested = [r for r in answer["link_probabilities"] if not r["known"]][:SHOWN_LINKS]
    if suggested:
        lines.append("Most probable links (left – right: probability the same animal):")
        lines += [f"  {r['left']} – {r['right']}: {r['probability']:.2f}" for r in suggested]
    return "\n".join(lines)


def _estimate(p: Mapping[str, float], digits: int) -> str:
    return f"{p['median']:,.{digits}f} ({_interval(p['lcl'], p['ucl'], digits)})"


def _fmt(x: float | None, digits: int) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"
