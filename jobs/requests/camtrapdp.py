"""The request of the Camtrap DP export (``rosette export camtrap-dp OUT``, the Export tab)."""

from __future__ import annotations

from dataclasses import dataclass

from core.field.camtrapdp_writer import SAMPLING_DESIGNS
from core.io.privacy import DEFAULT_PEOPLE, check_people_choice
from core.requests import Request
from jobs.requests._values import settle


@dataclass(frozen=True)
class ExportCamtrapDPRequest(Request):
    """Write the catalogue as a Camtrap DP 1.0 package into the folder ``out`` (None: a new folder under the data
    directory's exports), validated offline against the shipped TDWG schemas.

    ``include_media`` False writes the tables only; ``zip`` also packs the folder into ``<out>.zip`` (what the
    Export tab offers for download); ``title`` names the package and its project (default: the catalogue's
    folder); ``sampling_design`` is Camtrap DP's ``project.samplingDesign``; ``people`` what becomes of the photos
    showing people: ``blur`` their person boxes (the default), ``omit`` the photos, or ``keep`` them as they are
    (only when chosen, and recorded in the audit trail)."""

    user: str
    out: str | None = None
    include_media: bool = True
    zip: bool = False
    title: str | None = None
    sampling_design: str = "opportunistic"
    people: str = DEFAULT_PEOPLE

    def __post_init__(self) -> None:
        check_people_choice(self.people)
        if self.sampling_design not in SAMPLING_DESIGNS:
            raise ValueError(f"sampling design {self.sampling_design!r} is not one of Camtrap DP's: "
                             f"{', '.join(SAMPLING_DESIGNS)}")
        out = (self.out or "").strip() or None
        title = (self.title or "").strip() or None
        if title is not None and len(title) > 300:
            raise ValueError(f"the package title is {len(title)} characters long; at most 300")
        settle(self, out=out, title=title)
