"""What every export that leaves Rosette obeys (the Camtrap DP package, the catalogue zip, the capture histories):

- no species called ``default`` leaves: that is the name a catalogue starts with, before anybody named its
  species, and a package or a sheet saying "default" tells its reader nothing. Such an export is refused, before
  anything is written, pointing to the Species tab where the species gets its name;
- people stay private: the person boxes of every exported photo are blurred (``blur``, the default), or the photos
  showing people are left out (``omit``); the originals leave only when ``keep`` was chosen, and that choice is
  written to the audit trail (:func:`record_people_kept`) before any file is.
"""

from __future__ import annotations

from collections.abc import Iterable

from db.audit import acting_as, record_action
from db.catalogue import CatalogueError
from db.session import Catalogue

#: The name of a species nobody has named yet (the one every catalogue starts with).
UNNAMED_SPECIES = "default"
#: The audit action of an export that kept people unblurred.
PEOPLE_KEPT_ACTION = "export.people_kept"


def is_unnamed_species(name: str | None) -> bool:
    return (name or "").strip().lower() == UNNAMED_SPECIES


def refuse_unnamed_species(names: Iterable[str | None], *, export: str, what: str) -> None:
    """Refuse ``export`` (e.g. "The Camtrap DP export") when one of ``names`` (a species name per row it would
    write; ``what`` says what a row is, e.g. "observation(s)") is the unnamed species."""
    unnamed = sum(1 for n in names if is_unnamed_species(n))
    if unnamed:
        raise CatalogueError(
            f"{export} would write the species {UNNAMED_SPECIES!r} for {unnamed} {what}: that species has no name "
            "yet. Name it in the Species tab first (its scientific name, e.g. Tragelaphus angasii), or from the "
            f"shell with `rosette species rename {UNNAMED_SPECIES} NAME`; nothing was written.")


def record_people_kept(cat: Catalogue, *, user: str, export: str, out: str, photos: int) -> None:
    """Write the audit row of an export keeping people unblurred (``photos``: how many photos show people), in a
    transaction of its own, before the export writes any file: a read-only catalogue, which cannot record it, is
    refused."""
    if cat.read_only:
        raise CatalogueError("Keeping people unblurred is recorded in the audit trail, and this catalogue is open "
                             "read-only: choose blur or omit, or export from a catalogue you can write.")
    with acting_as(user), cat.unit_of_work() as s:
        record_action(s, action=PEOPLE_KEPT_ACTION, target=f"export:{export}",
                      details={"out": out, "photos_with_people": photos})
        s.commit()
