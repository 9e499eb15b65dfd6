"""What the Map tab shows and does: the map's points as compact JSON for the WebGL scatter, queuing the
projection job, and the photos of a box / lasso selection (to review, or assign to an individual)."""

from __future__ import annotations

import html
import json
from typing import Any

from db.session import Catalogue

MAX_SELECTION_SHOWN = 60


def map_payload(cat: Catalogue, model: str, colour_by: str, *, species_id: int | None = None) -> dict[str, Any] | None:
    """{x, y, id, label, value, thumb, poincare, model, colour_by} arrays for the plot, or None (not computed)."""
    from db.embedding_map import COLOUR_BY, load_map

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
    return {"x": [round(p["x"], 4) for p in pts], "y": [round(p["y"], 4) for p in pts], "id": [p["id"] for p in pts],
            "label": labels, "value": values, "thumb": [p["thumb"] for p in pts], "poincare": m["poincare"],
            "model": model, "colour_by": colour_by, "categorical": colour_by != "solidity"}


def map_html(payload: dict[str, Any] | None, *, note: str = "") -> str:
    """The container the Map tab's script draws into; the data rides along as JSON."""
    if payload is None:
        text = html.escape(note) or "No map yet for this model: press "
        return (f"<div class='map-empty' id='map-empty'>{text}"
                + ("<b>Compute map</b>." if text.endswith("press ") else "") + "</div>")
    data = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    return (f"<div class='map-root' id='map-root' data-n='{len(payload['id'])}'><div class='map-plot' "
            f"id='map-plot'></div><script type='application/json' class='map-data'>{data}</script></div>")


def map_wait_note(cat: Catalogue, model: str) -> str:
    """What the empty map says: its job is computing (with progress), queued behind job #N, or not asked for."""
    from db.models import JobStatus
    from jobs.queue import list_jobs

    mine = next((j for j in list_jobs(cat, limit=100, kind="map")
                 if (j.params or {}).get("model") == model and j.status in (JobStatus.queued, JobStatus.running)),
                None)
    if mine is None:
        return f"No map yet for {model}: press "
    if mine.status == JobStatus.running:
        return f"The map for {model} is being computed (job #{mine.id}, {100 * (mine.progress or 0):.0f}%). "
    ahead = sorted((j for j in list_jobs(cat, limit=200) if j.queue == mine.queue and j.id != mine.id
                    and (j.status == JobStatus.running or (j.status == JobStatus.queued and j.id < mine.id))),
                   key=lambda j: (j.status != JobStatus.running, j.id))
    if not ahead:
        return f"The map for {model} is queued as job #{mine.id} and starts when a worker is free. "
    first = ahead[0]
    return (f"The map for {model} is queued as job #{mine.id}, behind job #{first.id} ({first.kind}, "
            f"{first.status.value})" + (f" and {len(ahead) - 1} more" if len(ahead) > 1 else "") + ". ")


def queue_map(cat: Catalogue, model: str, *, species_id: int | None = None, user: str = "curator") -> str:
    from jobs.queue import submit

    job_id = submit(cat, "map", {"model": model, "species": species_id, "user": user})
    return f"Map queued as job #{job_id}: the photos' features, then UMAP. It appears here when done."


def selection(cat: Catalogue, ids: list[int]) -> tuple[list[tuple[str, str]], str]:
    """(gallery items (picture, caption), summary) of the selected photos."""
    from sqlalchemy import select

    from db.models import Image, Individual

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
    return items, (f"**{len(rows)} photos selected**{more}: {', '.join(who[:12])}{' …' if len(who) > 12 else ''}."
                   " Assign them to an individual below, or open one in Match review by its number.")


def assign_selection(cat: Catalogue, ids: list[int], individual: str | None, *, user: str) -> str:
    """Assign the selected photos to an existing individual (by name), each an undoable change."""
    from db import catalogue as ops

    if not ids:
        raise ValueError("Select photos on the map first (box or lasso).")
    name = (individual or "").strip()
    if not name:
        raise ValueError("Type the name of the individual to assign them to.")
    moved = 0
    with cat.unit_of_work() as s:
        ind = ops.find_individual_by_name(s, name)
        if ind is None:
            raise ValueError(f"no individual named {name!r}")
        for i in ids:
            if ops.get_image(s, int(i)).individual_id != ind.id:
                ops.assign_image(s, int(i), ind.id, user=user)
                moved += 1
        s.commit()
    return f"{moved} photo(s) assigned to {name} (each is an undoable change in the Catalogue tab)."
