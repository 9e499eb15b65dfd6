"""Which animal a screen shows, in words: a camera-trap photo may hold several animals (one annotation each), so
Match review, the Mask tab's picker and the whole-frame views name an animal by its photo, how many animals that
photo holds and where in it this one stands ("animal #3, one of 2 in photo f003.jpg (the left one)"). The review
queue's end and the "not the same" on the last candidate are said here too, so the tab only shows them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select

from core.annotations import Box
from db.models import Image, Individual, MatchDecision, Photo
from db.session import Catalogue

__all__ = ["AnimalPlace", "QUEUE_DONE", "animal_places", "animal_title", "frame_legend", "last_candidate_words",
           "position_words", "queue_end_words"]


@dataclass(frozen=True)
class AnimalPlace:
    """Where one annotation stands: its photo, how many animals that photo holds, and this one's position."""

    annotation_id: int
    photo_id: int
    photo_name: str
    animals: int  # annotations of the photo, this one included
    position: str | None  # "left", "right", "2nd from the left" ... when the photo holds more than one animal

    @property
    def title(self) -> str:
        """e.g. ``animal #3, one of 2 in photo f003.jpg (the left one)``."""
        if self.animals <= 1:
            return f"animal #{self.annotation_id}, the only one in photo {self.photo_name}"
        where = f" ({self.position})" if self.position else ""
        return f"animal #{self.annotation_id}, one of {self.animals} in photo {self.photo_name}{where}"

    @property
    def brief(self) -> str | None:
        """For a caption with little room: ``animal #6, the right one of 2 animals in pair.jpg``; None for a lone
        animal (its photo says it all)."""
        return f"animal #{self.annotation_id}, {self.short} in {self.photo_name}" if self.animals > 1 else None

    @property
    def short(self) -> str:
        """For a picker's line, beside the file name: ``the left one of 2 animals`` (empty for a lone animal)."""
        if self.animals <= 1:
            return ""
        return f"{self.position or 'one'} of {self.animals} animals"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def position_words(boxes: dict[int, Box]) -> dict[int, str]:
    """Each box's place among a photo's boxes, by the left-to-right order of their centres: with two, "the left one"
    and "the right one"; with more, "the 2nd from the left" and so on. Boxes side by side are told apart this way;
    boxes one above the other (centres within 5% of the width) by top and bottom."""
    if len(boxes) < 2:
        return {}
    centres = {i: (b.x + b.w / 2, b.y + b.h / 2) for i, b in boxes.items()}
    xs = sorted(c[0] for c in centres.values())
    stacked = xs[-1] - xs[0] < 0.05
    axis = 1 if stacked else 0
    order = sorted(boxes, key=lambda i: (centres[i][axis], i))
    first, last = ("top", "bottom") if stacked else ("left", "right")
    if len(order) == 2:
        return {order[0]: f"the {first} one", order[1]: f"the {last} one"}
    return {i: f"the {_ordinal(k + 1)} from the {first}" for k, i in enumerate(order)}


def animal_places(cat: Catalogue, annotation_ids: Iterable[int] | None = None) -> dict[int, AnimalPlace]:
    """:class:`AnimalPlace` of each given annotation (of every annotation when None); unknown ids are left out."""
    wanted = None if annotation_ids is None else {int(i) for i in annotation_ids}
    with cat.unit_of_work() as s:
        q = select(Image.id, Image.photo_id, Image.bbox_x, Image.bbox_y, Image.bbox_w, Image.bbox_h)
        if wanted is not None:
            photos = select(Image.photo_id).where(Image.id.in_(wanted)).scalar_subquery()
            q = q.where(Image.photo_id.in_(photos))
        rows = s.execute(q.order_by(Image.id)).all()
        names = dict(s.execute(select(Photo.id, Photo.original_name)
                               .where(Photo.id.in_({r.photo_id for r in rows}))).all()) if rows else {}
    by_photo: dict[int, dict[int, Box]] = {}
    for r in rows:
        by_photo.setdefault(r.photo_id, {})[r.id] = Box(r.bbox_x, r.bbox_y, r.bbox_w, r.bbox_h)
    out = {}
    for photo_id, boxes in by_photo.items():
        where = position_words(boxes)
        for annotation_id in boxes:
            if wanted is None or annotation_id in wanted:
                out[annotation_id] = AnimalPlace(annotation_id=annotation_id, photo_id=photo_id,
                                                 photo_name=names.get(photo_id, "?"), animals=len(boxes),
                                                 position=where.get(annotation_id))
    return out


def animal_title(cat: Catalogue, annotation_id: int) -> str:
    """``animal #3, one of 2 in photo f003.jpg (the left one)``; ``animal #N`` for an id not in the catalogue."""
    place = animal_places(cat, [annotation_id]).get(int(annotation_id))
    return place.title if place is not None else f"animal #{annotation_id}"


def frame_legend(cat: Catalogue, annotation_id: int, *, what: str) -> list[tuple[bool, str]]:
    """The legend of a whole-frame view centred on one annotation, as ``(highlighted, words)`` lines: the
    highlighted box is ``what`` (e.g. "photo to identify"), the others are the photo's other animals, named."""
    with cat.unit_of_work() as s:
        photo_id = s.scalar(select(Image.photo_id).where(Image.id == int(annotation_id)))
        others = s.execute(select(Image.id, Individual.name)
                           .outerjoin(Individual, Image.individual_id == Individual.id)
                           .where(Image.photo_id == photo_id, Image.id != int(annotation_id))
                           .order_by(Image.id)).all() if photo_id is not None else []
    lines = [(True, f"{what}, #{annotation_id}")]
    if others:
        named = ", ".join(f"#{i} {name or 'no individual yet'}" for i, name in others)
        lines.append((False, f"other animal{'s' if len(others) != 1 else ''}: {named}"))
    return lines


#: What the review screen says once no animal of the queue is waiting.
QUEUE_DONE = "The review queue is done: every animal in it has a decision."


def queue_end_words(cat: Catalogue, queue: list[int]) -> str:
    """The review screen's one line at the end of the queue: how many animals it held (the queue holds animals,
    several to a photo at times) and that all are decided (or that it is empty)."""
    if not queue:
        return "Nothing is waiting for review."
    with cat.unit_of_work() as s:
        decided = set(s.scalars(select(MatchDecision.query_image_id).where(
            MatchDecision.undone_at.is_(None), MatchDecision.query_image_id.in_(list(queue)))))
    left = [i for i in queue if i not in decided]
    if left:
        return (f"{len(left)} of the {len(queue)} animals in the review queue still wait for a decision; "
                f"press Next or Reload queue.")
    return (f"The review queue is done: all {len(queue)} animal{'s' if len(queue) != 1 else ''} have a decision. "
            f"Press Reload queue after importing photos, or open a photo by hand.")


def last_candidate_words(rank: int, *, candidates: int, name: str | None = None) -> str:
    """What "not the same" on the last candidate shown leads to, said as what was decided ("N149, the only
    candidate, is not this animal"): none of the candidates is this animal, so it may be a new individual (the
    photo stays on screen for that decision)."""
    which = "the only candidate" if candidates <= 1 else f"candidate {rank} and the last one shown"
    who = f"{name}, {which}," if name else which[0].upper() + which[1:] + ","
    return (f"{who} is not this animal. If it is none of the candidates, press New individual (I); "
            f"or Next to leave it for later.")
