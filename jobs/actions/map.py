"""What the Map tab shows and does: the map's points as compact JSON for the WebGL scatter, computing or queuing
the projection (``rosette map``, "Compute map"), and the photos of a box / lasso selection (to review, or assign to
an individual)."""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from plotly.colors import qualitative
from sqlalchemy import select

from db import catalogue as ops
from db.inspect.embedding_map import COLOUR_BY, load_map
from db.inspect.embedding_map import compute_map as compute_projection
from db.models import Image, Individual, JobStatus
from db.session import Catalogue
from jobs import queue
from jobs.actions.common import curator_name
from jobs.requests.map import AssignSelectionRequest, MapRequest

MAX_SELECTION_SHOWN = 60
PALETTE = tuple(qualitative.Dark24) + tuple(qualitative.Light24)  # 48 distinguishable colours, then they repeat
LEGEND_SHOWN = 40


def map_payload(cat: Catalogue, model: str, colour_by: str, *, species_id: int | None = None) -> dict[str, Any] | None:
    """{x, y, id, label, value, thumb, poincare, model, colour_by} arrays for the plot, or None (not computed)."""
    if colour_by not in COLOUR_BY:
        raise ValueError(f"colour by one of {', '.join(COLOUR_BY)}")
    m = load_map(cat, model, species_id=species_id)
    if m is None:
        return None
    pts = m["points"]
    if colour_by == "solidity":
        labels = [("no mask" if p["solidity"] is None else f"solidity {p['solidity']:.2f}") for p in pts]
        values = [(-0.1 if p["solidity"] is None else round(float(p["solidity"]), 3)) for p in pts]
    else:
        raw = [("undecided" if p["undecided"] else "decided") if colour_by == "undecided" else str(p[colour_by])
               for p in pts]
        codes = {v: i for i, v in enumerate(sorted(set(raw)))}
        labels, values = raw, [codes[v] for v in raw]
    payload = {"x": [round(p["x"], 4) for p in pts], "y": [round(p["y"], 4) for p in pts], "id": [p["id"] for p in pts],
               "label": labels, "value": values, "thumb": [p["thumb"] for p in pts], "poincare": m["poincare"],
               "model": model, "colour_by": colour_by, "categorical": colour_by != "solidity"}
    if payload["categorical"]:  # one colour per category, named in the legend (most photos first)
        payload["colour"] = [PALETTE[v % len(PALETTE)] for v in values]
        counts = Counter(labels)
        payload["legend"] = [{"name": name, "colour": PALETTE[codes[name] % len(PALETTE)], "n": n}
                             for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return payload


def legend_html(payload: dict[str, Any]) -> str:
    """The map's colour legend: a swatch, name and photo count per category (or the solidity scale in words)."""
    if not payload.get("categorical"):
        return ("<div class='map-legend' id='map-legend'>Colour: mask solidity, from dark purple (ragged outline) to "
                "yellow (solid); the darkest points, below the scale, have no mask.</div>")
    entries = payload.get("legend", [])
    items = "".join(f"<span class='map-key' data-name='{html.escape(e['name'], quote=True)}'>"
                    f"<span class='map-swatch' style='background:{e['colour']}'></span>"
                    f"{html.escape(e['name'])} ({e['n']})</span>" for e in entries[:LEGEND_SHOWN])
    more = f" <span class='map-more'>and {len(entries) - LEGEND_SHOWN} more</span>" if len(entries) > LEGEND_SHOWN else ""
    repeat = (f" Colours repeat after {len(PALETTE)} categories: hover a point for its name."
              if len(entries) > len(PALETTE) else "")
    return (f"<div class='map-legend' id='map-legend'><b>Colour: {html.escape(payload['colour_by'])}</b>{repeat} "
            f"{items}{more}</div>")


def map_html(payload: dict[str, Any] | None, *, note: str = "") -> str:
    """The container the Map tab's script draws into; the data rides along as JSON."""
    if payload is None:
        text = html.escape(note) or "No map yet for this model: press "
        return (f"<div class='map-empty' id='map-empty'>{text}"
                + ("<b>Compute map</b>." if text.endswith("press ") else "") + "</div>")
    data = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    return (f"<div class='map-root' id='map-root' data-n='{len(payload['id'])}'><div class='map-plot' "
            f"id='map-plot'></div>{legend_html(payload)}"
            f"<script type='application/json' class='map-data'>{data}</script></div>")


def map_wait_note(cat: Catalogue, model: str) -> str:
    """What the empty map says: its job is computing (with progress), queued behind job #N, or not asked for."""
    mine = next((j for j in queue.list_jobs(cat, limit=100, kind="map")
                 if (j.params or {}).get("model") == model and j.status in (JobStatus.queued, JobStatus.running)),
                None)
    if mine is None:
        return f"No map yet for {model}: press "
    if mine.status == JobStatus.running:
        return f"The map for {model} is being computed (job #{mine.id}, {100 * (mine.progress or 0):.0f}%). "
    ahead = sorted((j for j in queue.list_jobs(cat, limit=200) if j.queue == mine.queue and j.id != mine.id
                    and (j.status == JobStatus.running or (j.status == JobStatus.queued and j.id < mine.id))),
                   key=lambda j: (j.status != JobStatus.running, j.id))
    if not ahead:
        return f"The map for {model} is queued as job #{mine.id} and starts when a worker is free. "
    first = ahead[0]
    return (f"The map for {model} is queued as job #{mine.id}, behind job #{first.id} ({first.kind}, "
            f"{first.status.value})" + (f" and {len(ahead) - 1} more" if len(ahead) > 1 else "") + ". ")


def colour_choices() -> tuple[str, ...]:
    """What the map's points can be coloured by."""
    return COLOUR_BY


def compute_map(cat: Catalogue, request: MapRequest, *, progress: Callable[[float, str], None] | None = None,
                should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Compute the map now (``rosette map --wait``; the ``map`` job runs the same request in the background)."""
    return compute_projection(cat, request.model, species_id=request.species, progress=progress,
                              should_cancel=should_cancel)


def queue_map(cat: Catalogue, request: MapRequest) -> tuple[int, str]:
    """Queue the map's computation on the light queue (the Map tab's "Compute map", ``rosette map``); returns
    (job id, what the Map tab says)."""
    job_id = queue.submit(cat, "map", replace(request, user=curator_name(request.user)).to_dict())
    return job_id, f"Map queued as job #{job_id}: the photos' features, then UMAP. It appears here when done."


def selection(cat: Catalogue, ids: list[int]) -> tuple[list[tuple[str, str]], str]:
    """(gallery items (picture, caption), summary) of the selected photos."""
    ids = [int(i) for i in ids][:5000]
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.thumb_path, Image.blob_path, Individual.name)
                         .outerjoin(Individual, Image.individual_id == Individual.id)
                         .where(Image.id.in_(ids)).order_by(Image.id)).all()
    items = []
    for i, thumb, blob, name in rows[:MAX_SELECTION_SHOWN]:
        path = cat.blobs.existing(thumb) or cat.blobs.existing(blob)
        if path:
            items.append((path, f"#{i} · {name or 'no individual'}"))
    who = sorted({r[3] or "no individual" for r in rows})
    more = f" (showing {MAX_SELECTION_SHOWN})" if len(rows) > MAX_SELECTION_SHOWN else ""
    named = [w for w in who if w != "no individual"]
    warn = (f" ⚠ They belong to {len(named)} different individuals: assigning moves them all to one."
            if len(named) > 1 else "")
    return items, (f"**{len(rows)} photos selected**{more}: {html.escape(', '.join(who[:12]))}"
                   f"{' …' if len(who) > 12 else ''}.{warn}"
                   " Assign them to an individual below (a new one if you tick “Create it if new”), or open one in "
                   "Match review by its number.")


def selection_owners(cat: Catalogue, ids: list[int]) -> list[str]:
    """The individuals the selected photos belong to now, by name ("no individual" for unassigned ones)."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Individual.name).select_from(Image)
                         .outerjoin(Individual, Image.individual_id == Individual.id)
                         .where(Image.id.in_([int(i) for i in ids]))).scalars().all()
    return sorted({r or "no individual" for r in rows})


def assign_selection(cat: Catalogue, request: AssignSelectionRequest) -> str:
    """Assign the selected photos to an individual by name, each an undoable change. A name no individual has
    is refused unless ``create_new``, which makes that individual first. Photos taken from several individuals
    are named in the message, so a curator sees what a wide lasso swept up."""
    ids, name, user = request.image_ids, request.individual, curator_name(request.user)
    owners = [o for o in selection_owners(cat, ids) if o not in ("no individual", name)]
    moved, created = 0, False
    with cat.unit_of_work() as s:
        ind = ops.find_individual_by_name(s, name)
        if ind is None:
            if not request.create_new:
                raise ValueError(f"No individual is named {name!r}. Tick “Create it if new” to make a new "
                                 f"individual with these {len(ids)} photos.")
            ind, created = ops.create_individual(s, name, user=user), True
            s.flush()
        for i in ids:
            if ops.get_image(s, int(i)).individual_id != ind.id:
                ops.assign_image(s, int(i), ind.id, user=user)
                moved += 1
        s.commit()
    text = (f"{'Created ' + name + ' and assigned' if created else 'Assigned'} {moved} photo(s) to {name} "
            "(each is an undoable change in the Catalogue tab).")
    if len(owners) > 1:
        text += f" Check this: they came from {len(owners)} individuals ({', '.join(owners[:8])}{' …' if len(owners) > 8 else ''})."
    elif owners:
        text += f" They were {owners[0]}'s."
    return text
