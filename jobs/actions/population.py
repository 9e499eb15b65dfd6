"""Population answers (docs/DESIGN.md section 8): how many animals of a species live in the
study area, from the catalogue's identified detections at its camera stations, and the capture histories written
for secr, camtrapR and MARK.

``population_summary`` (``rosette population``, the Population tab) gives a JSON-ready dict: the parameters used,
what the numbers rest on (annotations, photos, deployments used; those left out and why), the occasions with their
effort, each individual's capture history and count, the capture frequencies f_k, the discovery curve and the
estimates M0, Mt (Darroch) and Mh-Chao with 95% intervals and each model's assumption in one sentence.
``export_capthist`` (``rosette export capthist``, the tab's download) writes the same histories as files.
"""

from __future__ import annotations

import errno
import math
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from core.field import capthist as ch
from db import species as species_store
from db.catalogue import CatalogueError, IdentityState, changes_since, identity_state
from db.export_rules import refuse_unnamed_species
from db.field.population import LEFT_OUT_REASONS, LEFT_OUT_WORDS, PopulationStudy, population_study, secr_inputs
from db.field.population import SpeciesNotChosen  # noqa: F401 - re-exported: each screen says where to choose a species
from db.session import Catalogue
from jobs.requests.population import CapthistExportRequest, PopulationRequest

#: Annotation ids listed per reason a detection was left out (the counts are complete).
LISTED_IDS = 20
ESTIMATE_HEADERS = ["Model", "Animals (N)", "95% interval", "What it assumes"]
FILES = {"captures": "captures.txt", "traps": "traps.txt", "record_table": "record_table.csv",
         "mark": "histories.inp", "readme": "README.txt"}


def _num(x: Any) -> Any:
    """JSON-safe: infinite or undefined numbers become None, numpy scalars plain Python."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, (list, tuple)):
        return [_num(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _num(v) for k, v in x.items()}
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(f):
        return None
    return int(f) if isinstance(x, int) or (hasattr(x, "dtype") and "int" in str(x.dtype)) else f


def _study(cat: Catalogue, request: PopulationRequest) -> PopulationStudy:
    return population_study(cat, species=request.species, occasion_days=request.occasion_days,
                            date_from=request.first_day, date_to=request.last_day)


def species_choices(cat: Catalogue) -> list[str]:
    """Species names, those with individuals first (the Population tab's choices)."""
    rows = species_store.list_species(cat)
    return [r["name"] for r in rows if r["individuals"]] + [r["name"] for r in rows if not r["individuals"]]


def summarise(study: PopulationStudy) -> dict[str, Any]:
    """The JSON-ready summary of a study (see the module notes)."""
    h = study.histories
    per_occasion = h.matrix.sum(axis=0).tolist() if h.n_individuals else [0] * h.n_occasions
    effort = [round(float(e), 4) for e in (h.effort if h.effort is not None else [0.0] * h.n_occasions)]
    histories = {str(name): "".join(str(int(v)) for v in row) for name, row in zip(h.individuals, h.matrix)}
    estimates = []
    for est in study.estimates:
        d = est.to_dict()
        d["details"] = _num({k: v for k, v in est.details.items() if k != "ci_method"})
        d["ci_method"] = est.details.get("ci_method")
        d["estimable"] = not math.isnan(est.N)
        estimates.append(d)
    outside = {(str(name), when) for name, when in h.outside_effort}
    used_deployments = {x.deployment for x in study.detections}
    left_counts = {r: len(study.left_out.get(r, ())) for r in LEFT_OUT_REASONS}
    notes = []
    if not h.n_individuals:
        notes.append(f"No identified {study.species} was detected at a deployment in the window: there is nothing "
                     "to estimate.")
    else:
        notes += sorted({est.details["note"] for est in study.estimates if math.isnan(est.N)})
    if outside:
        notes.append(f"{len(outside)} detection(s) fall outside every deployment's active period; they are counted "
                     "(check the deployments' start and end).")
    camera_days = float(h.effort.sum()) if h.effort is not None else 0.0
    if round(study.deployments_camera_days, 2) != round(camera_days, 2):
        notes.append(f"The deployments ran {_fmt(study.deployments_camera_days, 2)} camera-days in all (the "
                     f"Deployments tab's count); {_fmt(camera_days, 2)} of them fall in the study window, and only "
                     "those give effort here.")
    if study.all_occasions > h.n_occasions:
        notes.append(f"{study.all_occasions - h.n_occasions} occasion(s) without any active camera and without "
                     "detections are left out of the estimates.")
    return {
        "species": study.species,
        "parameters": {"species": study.species, "occasion_days": study.occasion_days,
                       "from": study.date_from.isoformat() if study.date_from else None,
                       "to": study.date_to.isoformat() if study.date_to else None,
                       "start": study.start.isoformat(),
                       "last_day": (study.end - timedelta(days=1)).date().isoformat()},
        "individuals": h.n_individuals,
        "occasions": h.n_occasions,
        "occasion_table": [{"occasion": k + 1, "begins": lo.isoformat(), "ends": hi.isoformat(),
                            "effort_days": effort[k], "individuals": int(per_occasion[k])}
                           for k, (lo, hi) in enumerate(h.occasion_bounds)],
        "effort": effort,
        "camera_days": round(camera_days, 4),
        "deployments_camera_days": round(study.deployments_camera_days, 4),
        "capture_counts": {str(k): int(v) for k, v in h.capture_counts().items()},
        "capture_histories": histories,
        "capture_frequencies": {str(k): int(v) for k, v in study.frequencies.items()},
        "discovery": [int(x) for x in study.discovery],
        "estimates": estimates,
        "data": {
            "annotations": len(study.detections),
            "photos": len({x.photo_id for x in study.detections}),
            "deployments": len(study.stations),
            "stations": len({st.station for st in study.stations}),
            "deployments_with_detections": len(used_deployments),
            "annotations_of_species": study.annotations_considered,
            "left_out": left_counts,
            "left_out_annotation_ids": {r: list(study.left_out.get(r, ()))[:LISTED_IDS] for r in LEFT_OUT_REASONS},
            "outside_active_period": len(outside),
        },
        "notes": notes,
    }


def population_summary(cat: Catalogue, request: PopulationRequest) -> dict[str, Any]:
    """The population answer for ``request`` as a JSON-ready dict."""
    return summarise(_study(cat, request))


def catalogue_state(cat: Catalogue) -> IdentityState:
    """How far the catalogue's identities had come: taken before a result is computed, kept with it on screen."""
    with cat.unit_of_work() as s:
        return identity_state(s)


def stale_text(cat: Catalogue, state: IdentityState | None, *, again: str) -> str:
    """Empty while a result computed on ``state`` still answers the catalogue; else one line saying how many
    changes it predates and to press ``again`` (the button's label), so two results on one screen that disagree
    say which one is old instead of leaving the curator to guess."""
    if state is None:
        return ""
    with cat.unit_of_work() as s:
        changes, animals = changes_since(s, state)
    said = [f"{changes} newer change{'s' if changes != 1 else ''} to who is who (decisions, moves, undos)"
            if changes else "", f"{animals} newer animal{'s' if animals != 1 else ''} imported" if animals else ""]
    said = [w for w in said if w]
    if not said:
        return ""
    return f"⚠ Computed before {' and '.join(said)}: these numbers are out of date. Press **{again}** again."


# --------------------------------------------------------------------------- words, tables and charts


def _fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "no upper limit"
    return f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:.0f}"


def basis_text(summary: Mapping[str, Any]) -> str:
    """One paragraph: what the numbers rest on and the parameters that produced them."""
    p, d = summary["parameters"], summary["data"]
    left = [f"{n} {LEFT_OUT_WORDS[r]}" for r, n in d["left_out"].items() if n]
    days = _fmt(p["occasion_days"], 3)
    text = (f"{summary['individuals']} {p['species']} individual(s) detected on {summary['occasions']} occasion(s) "
            f"of {days} day(s) from {p['start']} to {p['last_day']} (deployments' local time); "
            f"{d['annotations']} annotation(s) on {d['photos']} photo(s), {d['deployments']} deployment(s) at "
            f"{d['stations']} station(s) gave effort ({_fmt(summary['camera_days'], 2)} camera-days), "
            f"{d['deployments_with_detections']} of them with detections.")
    if left:
        text += " Left out: " + "; ".join(left) + "."
    return text + "".join(f" {n}" for n in summary["notes"])


def estimate_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """Rows of :data:`ESTIMATE_HEADERS`: model, N, its 95% interval, the assumption in one sentence."""
    rows = []
    for e in summary["estimates"]:
        if not e.get("estimable", True):  # no individuals, or a single occasion: the notes say why
            rows.append([e["model"], "no estimate", "—", e["assumption"]])
            continue
        n = _fmt(e["N"])
        ci = ("—" if e["ci_low"] is None and e["ci_high"] is None
              else f"{_fmt(e['ci_low'])} – {_fmt(e['ci_high'])}")
        rows.append([e["model"], n, ci, e["assumption"]])
    return rows


def history_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """(headers, rows) of the capture-history table: individual, occasions caught, then 0/1 per occasion."""
    t = summary["occasions"]
    headers = ["Individual", "Occasions caught"] + [str(k + 1) for k in range(t)]
    rows = [[name, summary["capture_counts"][name], *[int(c) for c in hist]]
            for name, hist in summary["capture_histories"].items()]
    return headers, rows


def summary_text(summary: Mapping[str, Any]) -> str:
    """The CLI's plain answer: the basis, the estimates table, f_k and the discovery curve."""
    lines = [basis_text(summary), ""]
    rows = estimate_rows(summary)
    widths = [max(len(str(r[i])) for r in rows + [ESTIMATE_HEADERS]) for i in range(3)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(ESTIMATE_HEADERS[:3], widths)))
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r[:3], widths)))
    lines.append("")
    lines += [f"{r[0]}: {r[3]}" for r in rows]
    f = summary["capture_frequencies"]
    lines += ["", "Animals caught on exactly k occasions: " + (", ".join(f"f{k}={v}" for k, v in f.items()) or "none"),
              "Individuals known by the end of each occasion: " + (" ".join(map(str, summary["discovery"])) or "none")]
    return "\n".join(lines)


def discovery_figure(summary: Mapping[str, Any]) -> Any:
    """Line chart: individuals known by the end of each occasion, with each estimate's N as a dashed line."""
    import plotly.graph_objects as go  # lazy: plotly is heavy and only needed when a chart is drawn

    x = list(range(1, summary["occasions"] + 1))
    fig = go.Figure(go.Scatter(x=x, y=summary["discovery"], mode="lines+markers", name="individuals known",
                               hovertemplate="occasion %{x}: %{y} individuals known<extra></extra>"))
    colours = {"M0": "#2e8b57", "Mt": "#e67e22", "Mh-Chao": "#8e44ad"}
    places = {"M0": "bottom right", "Mt": "top left", "Mh-Chao": "top right"}  # close lines keep apart labels
    for e in summary["estimates"]:
        if e["N"] is not None and x:
            fig.add_hline(y=e["N"], line_dash="dash", line_color=colours.get(e["model"], "#777"),
                          annotation_text=f"{e['model']} N = {_fmt(e['N'])}",
                          annotation_position=places.get(e["model"], "top left"))
    fig.update_layout(title="Discovery curve: individuals known after each occasion", height=360,
                      margin=dict(l=50, r=20, t=60, b=40), xaxis=dict(title="occasion", dtick=1),
                      yaxis=dict(title="individuals", rangemode="tozero"), showlegend=False)
    return fig


def frequency_figure(summary: Mapping[str, Any]) -> Any:
    """Bars: f_k, the number of individuals caught on exactly k occasions."""
    import plotly.graph_objects as go  # lazy: plotly is heavy and only needed when a chart is drawn

    f = summary["capture_frequencies"]
    fig = go.Figure(go.Bar(x=[int(k) for k in f], y=list(f.values()), text=list(f.values()), textposition="outside",
                           hovertemplate="caught on %{x} occasion(s): %{y} individuals<extra></extra>"))
    fig.update_layout(title="Capture frequencies: individuals caught on exactly k occasions", height=360,
                      margin=dict(l=50, r=20, t=60, b=40), xaxis=dict(title="k (occasions caught)", dtick=1),
                      yaxis=dict(title="individuals (f_k)", range=[0, max([1, *f.values()]) * 1.2]),
                      showlegend=False)
    return fig


# --------------------------------------------------------------------------- capture-history files


@dataclass(frozen=True)
class CapthistExport:
    """The files written, the UTM grid of the traps, and what was left out of secr's files (named)."""

    folder: str
    files: dict[str, str]
    epsg: int | None
    individuals: int
    occasions: int
    stations_without_coordinates: tuple[str, ...] = ()
    detections_without_coordinates: tuple[int, ...] = ()  # annotation ids
    zip_path: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def message(self) -> str:
        text = (f"Wrote the capture histories of {self.individuals} individual(s) over {self.occasions} occasion(s) "
                f"to {self.folder}: " + ", ".join(Path(p).name for p in self.files.values()) + ".")
        if self.epsg is not None:
            text += f" Trap coordinates are UTM metres, EPSG:{self.epsg}."
        return text + "".join(f" {n}" for n in self.notes)


def _out_folder(cat: Catalogue, out: str | None) -> Path:
    if out is not None:
        return Path(out).expanduser()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    return cat.data_dir / "exports" / f"capthist-{stamp}"


def export_capthist(cat: Catalogue, request: CapthistExportRequest) -> CapthistExport:
    """Write secr's captures and traps (usage from the deployments' active days), camtrapR's record table, MARK's
    .inp and a README into ``request.out``. A study of the species still called ``default`` is refused (the
    record table and the secr session would be named after it) before anything is written."""
    study = _study(cat, request)
    refuse_unnamed_species([study.species], export="The capture-history export", what="species studied")
    summary = summarise(study)
    folder = _out_folder(cat, request.out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: give a folder for the capture-history files")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _not_written(folder, exc, []) from None
    h = study.histories
    secr = secr_inputs(study)
    session, traps, captures, epsg = secr.session, list(secr.traps), list(secr.captures), secr.epsg
    missing, unlocated = secr.stations_without_coordinates, list(secr.detections_without_coordinates)
    notes: list[str] = []
    if missing:
        notes.append(f"{secr.left_out_words}; they are in the record table and the MARK histories.")

    p = summary["parameters"]
    header = [f"Rosette capture histories of {study.species}: occasions of {_fmt(p['occasion_days'], 3)} day(s) "
              f"from {p['start']} to {p['last_day']} (local time); {h.n_occasions} occasion(s)"]
    files: dict[str, str] = {}

    def write(key: str, text: str) -> None:
        path = folder / FILES[key]
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise _not_written(path, exc, [*files.values(), str(path)]) from None
        files[key] = str(path)

    write("captures", ch.secr_captures_text(captures, header=header))
    if traps:
        usage_words = ("0/1 per occasion (1: active that occasion)" if request.binary_usage
                       else "active days per occasion (read with binary.usage = FALSE)")
        write("traps", ch.secr_traps_text(traps, binary=request.binary_usage, header=[
            *header, f"X Y: UTM metres, WGS 84, EPSG:{epsg} (zone of the stations' centroid); usage: {usage_words}"]))
    else:
        notes.append("No station has coordinates: secr's traps file was not written.")
    records = []
    for det in study.detections:
        directory, _, file_name = det.file_name.replace("\\", "/").rpartition("/")
        records.append(ch.Record(station=det.station, species=study.species, individual=det.individual,
                                 when=det.when, directory=directory, file_name=file_name))
    write("record_table", ch.camtrapr_csv_text(records))
    write("mark", ch.mark_inp_text({str(n): row.tolist() for n, row in zip(h.individuals, h.matrix)},
                                   header=header))
    write("readme", _readme(summary, files, epsg=epsg, binary=request.binary_usage, session=session, notes=notes))
    zip_path = None
    if request.as_zip:
        zip_path = str(folder.parent / f"{folder.name}.zip")
        try:
            with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                for path in files.values():
                    zf.write(path, arcname=f"{folder.name}/{Path(path).name}")
        except OSError as exc:
            raise _not_written(Path(zip_path), exc, [zip_path]) from None
    return CapthistExport(folder=str(folder), files=files, epsg=epsg, individuals=h.n_individuals,
                          occasions=h.n_occasions, stations_without_coordinates=missing,
                          detections_without_coordinates=tuple(unlocated), zip_path=zip_path, notes=tuple(notes))


def _not_written(target: Path, exc: OSError, remove: list[str]) -> CatalogueError:
    """The error for a file or folder of the export that could not be written, naming it (not the catalogue's own
    folders); the files of this export already written are removed, so no half set is left to be read as whole."""
    for path in remove:
        Path(path).unlink(missing_ok=True)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "the disk it is on is full"
    else:
        why = exc.strerror or str(exc)
    return CatalogueError(f"could not write {target}: {why}. No capture-history file was kept; free some space or "
                          "choose another folder.")


def _readme(summary: Mapping[str, Any], files: Mapping[str, str], *, epsg: int | None, binary: bool, session: str,
            notes: list[str]) -> str:
    p = summary["parameters"]
    lines = [
        "Capture histories written by Rosette (rosette export capthist, or the Population tab's download)",
        f"on {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        f"Species: {p['species']}; occasions of {_fmt(p['occasion_days'], 3)} day(s) counted from {p['start']} "
        f"(local midnight of the first day) to {p['last_day']}; window asked: from {p['from'] or 'the start'} to "
        f"{p['to'] or 'the end'}. Occasions without any active camera and without detections are left out and the "
        f"rest numbered 1..{summary['occasions']}.",
        basis_text(summary),
        "",
        "Files:",
        f"- {FILES['captures']}: secr captures, 'Session ID Occasion Detector', one line per individual x occasion "
        f"x station; Session = {session}. Names have spaces, '#' and '/' replaced by '_'.",
    ]
    if "traps" in files:
        lines.append(f"- {FILES['traps']}: secr traps, 'Detector X Y usage', X Y in UTM metres (WGS 84, EPSG:{epsg}, "
                     "the zone of the stations' centroid); a detector is a location (several deployments of one "
                     "location are one detector); usage = "
                     + ("1 when the station was active at all in the occasion, else 0 (binary usage string)."
                        if binary else "the days of the occasion on which the station was active (its "
                        "deployments' active periods in local time, fractions of a day kept)."))
    lines += [
        f"- {FILES['record_table']}: camtrapR record table, the columns of camtrapR's recordTableIndividual "
        "(delta.time = time since the previous record of the same individual at the same station).",
        f"- {FILES['mark']}: MARK encounter histories, '/* name */ history 1;' per individual.",
        "",
        "In R:",
    ]
    if "traps" in files:
        lines += ["  library(secr)",
                  f"  CH <- read.capthist('{FILES['captures']}', '{FILES['traps']}', detector = 'proximity'"
                  + ("" if binary else ", binary.usage = FALSE") + ")"]
    lines.append(f"  library(camtrapR); rec <- read.csv('{FILES['record_table']}')")
    if notes:
        lines += ["", "Left out:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
