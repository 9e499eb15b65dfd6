"""What ranking shows of a photo, read in one query: its individual, flank, sighting, place, date and pictures
(shared by match review's ranking and the spot-evidence re-ranking)."""

from __future__ import annotations

from sqlalchemy import select

from db.models import Image, Individual, Sighting
from db.session import Catalogue


def image_rows(cat: Catalogue, ids: list[int]) -> dict[int, tuple]:
    """{image id: (id, individual id, individual name, flank, sighting key, thumb path, blob path, sighting id,
    place, sighting date, EXIF time)} for ``ids``."""
    with cat.unit_of_work() as s:
        rows = s.execute(
            select(Image.id, Image.individual_id, Individual.name, Image.flank, Sighting.key, Image.thumb_path,
                   Image.blob_path, Image.sighting_id, Sighting.place, Sighting.date, Image.exif_time)
            .outerjoin(Individual, Image.individual_id == Individual.id)
            .outerjoin(Sighting, Image.sighting_id == Sighting.id)
            .where(Image.id.in_(ids))
        ).all()
    return {r[0]: r for r in rows}
