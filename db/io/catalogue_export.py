"""The catalogue as files a project can keep or share: one zip with individuals, photos, sightings and decisions
as CSV (formula-like cells defused, so a name such as ``=HYPERLINK(...)`` is text in a spreadsheet), a sheet per
individual (HTML, with its best photos beside it), and a README saying what made it.

A sheet's picture of an animal in a photo showing people has their person boxes blurred (``people="blur"``, the
default), is left out (``omit``), or is the unblurred crop (``keep``, written to the audit trail first); a
catalogue whose species is still called ``default`` is refused before anything is written (db.export_rules)."""

from __future__ import annotations

import csv
import html
import io
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select

from core.annotations import Box, crop_rect
from core.io.csv_safety import defuse_cell
from core.io.images import decode_image, make_thumbnail
from core.io.privacy import DEFAULT_PEOPLE, blur_boxes, check_people_choice, person_boxes
from db.export_rules import record_people_kept, refuse_unnamed_species
from db.models import Image, Individual, MatchDecision, Photo, Sighting, Species
from db.session import Catalogue

# a photo may show several animals: "photos" count photo files, "animals" the animals in them (annotations), and
# photos.csv has one row per animal, named by its annotation_id, with the photo_id of the photo it is in
INDIVIDUAL_COLUMNS = ("individual_id", "name", "species", "active", "merged_into_id", "photos", "animals",
                      "sightings", "first_seen", "last_seen", "notes")
PHOTO_COLUMNS = ("annotation_id", "photo_id", "original_name", "content_hash", "individual_id", "individual",
                 "species", "flank", "sighting", "date", "place", "camera", "observer", "mask_source", "solidity",
                 "width", "height", "bbox_x", "bbox_y", "bbox_w", "bbox_h", "box_source", "box_confidence")
SIGHTING_COLUMNS = ("sighting_id", "sighting", "date", "place", "lat", "lon", "camera", "observer", "photos",
                    "animals")
DECISION_COLUMNS = ("decision_id", "at_utc", "user", "decision", "query_annotation_id", "candidate_annotation_id",
                    "candidate_individual_id", "model", "score", "rank", "undone_at_utc")
README_COLUMNS = (
    "A photo may show several animals. photos.csv has one row per animal in a photo: annotation_id names the "
    "animal (its box in the photo), photo_id the photo file it is in (two animals of one photo share it). The "
    "photos and animals columns of individuals.csv and sightings.csv count photo files and animals; "
    "decisions.csv's query_annotation_id and candidate_annotation_id are annotation ids as in photos.csv.\n")
BEST_PHOTOS = 6


@dataclass(frozen=True)
class CatalogueExport:
    path: Path
    counts: dict[str, int]

    people: str = DEFAULT_PEOPLE

    @property
    def summary(self) -> str:
        c = self.counts
        text = (f"Exported {c['individuals']} individuals, {c['photos']} photos ({c['animals']} animals), "
                f"{c['sightings']} sightings and {c['decisions']} decisions to {self.path.name}")
        shown = c.get("pictures_with_people", 0)
        if shown:
            text += {"blur": f"; {shown} sheet picture(s) showing people, the people blurred",
                     "omit": f"; {shown} sheet picture(s) showing people left out (people: omit)",
                     "keep": f"; {shown} sheet picture(s) showing people kept unblurred (people: keep, recorded in "
                             "the audit trail)"}[self.people]
        return text


def _csv(columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([defuse_cell(v) for v in row])
    return out.getvalue()


def _best(photos: list[tuple[Image, Sighting | None]]) -> list[tuple[Image, Sighting | None]]:
    """An individual's photos to show first: masked ones with the cleanest outline, a known flank, then larger."""
    return sorted(photos, key=lambda p: (p[0].solidity is None, -(p[0].solidity or 0.0),
                                         p[0].flank.value in ("unknown", "other"), -(p[0].width * p[0].height),
                                         p[0].id))[:BEST_PHOTOS]


def _sheet(ind: Individual, species: str, photos: list[tuple[Image, Sighting | None]], pictures: dict[int, str]) -> str:
    e = html.escape
    dates = sorted(s.date for _, s in photos if s is not None and s.date)
    cards = "".join(
        f"<figure><img src='{e(pictures[img.id])}' alt='photo {img.id}'><figcaption>#{img.id} · {e(img.flank.value)}"
        f"{' · ' + e(s.key) if s is not None else ''}{' · ' + e(s.date) if s is not None and s.date else ''}"
        f"</figcaption></figure>"
        for img, s in _best(photos) if img.id in pictures)
    return (f"<!doctype html><meta charset='utf-8'><title>{e(ind.name)}</title>"
            "<style>body{font-family:system-ui,sans-serif;margin:2rem}figure{display:inline-block;margin:0 1rem 1rem 0;"
            "text-align:center}img{max-width:240px;max-height:200px;display:block}figcaption{font-size:.85rem}</style>"
            f"<h1>{e(ind.name)}</h1><p>Species {e(species)} · {_photos_and_animals(photos)} · "
            f"{len({s.id for _, s in photos if s is not None})} sightings"
            + (f" · seen {e(dates[0])} to {e(dates[-1])}" if dates else "")
            + (f"</p><p>{e(ind.notes)}" if ind.notes else "") + f"</p><h2>Best photos</h2>{cards}")


def _photos_and_animals(animals: list[tuple[Image, Sighting | None]]) -> str:
    """"3 photos" when each animal is in its own photo, else "2 photos (3 animals)"."""
    n_photos = len({img.photo_id for img, _ in animals})
    text = f"{n_photos} photo{'s' if n_photos != 1 else ''}"
    return text if n_photos == len(animals) else f"{text} ({len(animals)} animal{'s' if len(animals) != 1 else ''})"


def _private_picture(source: str, img: Image, people: list[Box], *, blur: bool) -> bytes:
    """The sheet's picture of annotation ``img`` on a photo showing ``people``: its crop's thumbnail made from the
    stored photo, the person boxes blurred first unless ``blur`` is False (as ingest makes thumbnails)."""
    with open(source, "rb") as fh:
        frame = decode_image(fh.read(), name=img.original_name).image
    if blur:
        frame = blur_boxes(frame, people)
    return make_thumbnail(frame.crop(crop_rect(img.box, frame.width, frame.height)))


def _sheet_name(ind: Individual) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in ind.name)[:60]
    return f"sheets/{ind.id:05d}-{safe}.html"


def export_catalogue(cat: Catalogue, out: Path, *, user: str = "curator", include_inactive: bool = False,
                     people: str = DEFAULT_PEOPLE) -> CatalogueExport:
    """Write the catalogue zip to ``out`` (written to a temporary name, then moved: a reader never sees half).
    ``people`` (blur | omit | keep): what becomes of the sheet pictures of photos showing people."""
    from importlib.metadata import PackageNotFoundError, version

    check_people_choice(people)
    out = Path(out)
    with cat.unit_of_work() as s:
        species = dict(s.execute(select(Species.id, Species.name)).all())
        individuals = list(s.scalars(select(Individual).order_by(Individual.id)))
        sightings = {sg.id: sg for sg in s.scalars(select(Sighting))}
        images = list(s.scalars(select(Image).order_by(Image.id)))
        decisions = list(s.scalars(select(MatchDecision).order_by(MatchDecision.id)))
        people_in = {pid: person_boxes(rows) for pid, rows in s.execute(
            select(Photo.id, Photo.people).where(Photo.people.is_not(None)))}
        s.expunge_all()
    people_in = {pid: boxes for pid, boxes in people_in.items() if boxes}
    if not include_inactive:
        individuals = [i for i in individuals if i.active]
    refuse_unnamed_species([species.get(i.species_id) for i in individuals]
                           + [species.get(img.species_id) for img in images],
                           export="The catalogue export", what="individual(s) and photo(s)")
    by_individual: dict[int, list[tuple[Image, Sighting | None]]] = defaultdict(list)
    photos_per_sighting: dict[int, set[int]] = defaultdict(set)
    animals_per_sighting: dict[int, int] = defaultdict(int)
    for img in images:
        sg = sightings.get(img.sighting_id) if img.sighting_id else None
        if img.individual_id is not None:
            by_individual[img.individual_id].append((img, sg))
        if sg is not None:
            photos_per_sighting[sg.id].add(img.photo_id)
            animals_per_sighting[sg.id] += 1
    names = {i.id: i.name for i in individuals}
    # the sheet pictures of photos showing people (the sheets show each individual's best photos)
    shown = {img.id for ind in individuals for img, _ in _best(by_individual.get(ind.id, []))
             if img.photo_id in people_in}
    if people == "keep" and shown:
        record_people_kept(cat, user=user, export="catalogue", out=str(out), photos=len(shown))

    def when(t: datetime | None) -> str:
        return t.replace(tzinfo=timezone.utc).isoformat(timespec="seconds") if t else ""

    ind_rows = []
    for ind in individuals:
        mine = by_individual.get(ind.id, [])
        dates = sorted(sg.date for _, sg in mine if sg is not None and sg.date)
        ind_rows.append((ind.id, ind.name, species.get(ind.species_id, ""), ind.active, ind.merged_into_id or "",
                         len({img.photo_id for img, _ in mine}), len(mine),
                         len({sg.id for _, sg in mine if sg is not None}),
                         dates[0] if dates else "", dates[-1] if dates else "", ind.notes or ""))
    photo_rows = [(img.id, img.photo_id, img.original_name, img.content_hash, img.individual_id or "",
                   names.get(img.individual_id, "") if img.individual_id else "", species.get(img.species_id, ""),
                   img.flank.value, sg.key if sg else "", (sg.date if sg else None) or img.exif_time or "",
                   (sg.place if sg else "") or "", (sg.camera if sg else "") or "", (sg.observer if sg else "") or "",
                   img.mask_source or "", "" if img.solidity is None else f"{img.solidity:.3f}", img.width, img.height,
                   *img.box.as_list(), img.box_source,
                   "" if img.box_confidence is None else f"{img.box_confidence:.4f}")
                  for img in images for sg in [sightings.get(img.sighting_id) if img.sighting_id else None]]
    sighting_rows = [(sg.id, sg.key, sg.date or "", sg.place or "", "" if sg.lat is None else sg.lat,
                      "" if sg.lon is None else sg.lon, sg.camera or "", sg.observer or "",
                      len(photos_per_sighting[sg.id]), animals_per_sighting[sg.id])
                     for sg in sorted(sightings.values(), key=lambda x: x.id)]
    decision_rows = [(d.id, when(d.created_at), d.user, getattr(d.decision, "value", d.decision), d.query_image_id,
                      d.candidate_image_id or "", d.candidate_individual_id or "", d.model_name or "",
                      "" if d.score is None else f"{d.score:.6f}", d.rank or "", when(d.undone_at))
                     for d in decisions]
    try:
        rosette_version = version("rosette")
    except PackageNotFoundError:  # pragma: no cover - a bare checkout
        rosette_version = "dev"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("individuals.csv", _csv(INDIVIDUAL_COLUMNS, ind_rows))
        zf.writestr("photos.csv", _csv(PHOTO_COLUMNS, photo_rows))
        zf.writestr("sightings.csv", _csv(SIGHTING_COLUMNS, sighting_rows))
        zf.writestr("decisions.csv", _csv(DECISION_COLUMNS, decision_rows))
        written: set[str] = set()
        for ind in individuals:
            pictures: dict[int, str] = {}
            for img, _ in _best(by_individual.get(ind.id, [])):
                if img.photo_id in people_in:  # made here from the stored photo: blurred, or kept as asked
                    src = cat.blobs.existing(img.blob_path)
                    if people == "omit" or not src:
                        continue
                    name = f"sheets/img/{img.content_hash[:16]}-{img.id}.jpg"
                    zf.writestr(name, _private_picture(src, img, people_in[img.photo_id], blur=people == "blur"))
                    pictures[img.id] = name[len("sheets/"):]
                    continue
                src = cat.blobs.existing(img.thumb_path) or cat.blobs.existing(img.blob_path)
                if src:
                    name = f"sheets/img/{img.content_hash[:16]}{Path(src).suffix.lower()}"
                    if name not in written:
                        zf.write(src, arcname=name)
                        written.add(name)
                    pictures[img.id] = name[len("sheets/"):]
            zf.writestr(_sheet_name(ind), _sheet(ind, species.get(ind.species_id, ""), by_individual.get(ind.id, []),
                                                 pictures))
        zf.writestr("README.txt", (
            f"Rosette {rosette_version} catalogue export, made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by "
            f"{user} from {cat.data_dir}.\n\nindividuals.csv, photos.csv, sightings.csv, decisions.csv: one row each "
            "(cells a spreadsheet would run as formulas start with an apostrophe).\n" + README_COLUMNS
            + "sheets/: one page per "
            f"individual with its best {BEST_PHOTOS} photos (masked, cleanest outline first).\n"))
    tmp.replace(out)
    return CatalogueExport(path=out, people=people,
                           counts={"individuals": len(individuals), "photos": len({img.photo_id for img in images}),
                                   "animals": len(images),
                                   "sightings": len(sightings), "decisions": len(decisions),
                                   "pictures_with_people": len(shown)})
