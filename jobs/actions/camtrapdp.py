"""The Camtrap DP export as a service: the catalogue's deployments, photos and annotations as a Camtrap DP 1.0
package (``rosette export camtrap-dp OUT``, the Export tab), validated offline against the shipped schemas.

The shell writes it in the foreground (:func:`export_camtrap_dp`); the Export tab queues it as a
``camtrap_dp_export`` job on the light queue (``jobs.actions.export.queue_camtrap_dp_export``); both write it with
:func:`db.field.camtrapdp_export.export_package`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from db.field import camtrapdp_export
from db.session import Catalogue
from jobs.actions.common import curator_name
from jobs.requests.camtrapdp import ExportCamtrapDPRequest


@dataclass(frozen=True)
class CamtrapDPExported:
    """Where the package is (and its zip, when one was asked for), what it holds and whether it is valid."""

    path: str
    zip_path: str | None
    valid: bool
    details: dict[str, Any]  # db.field.camtrapdp_export.CamtrapDPExport.to_dict(): counts, left out, problems

    @property
    def message(self) -> str:
        return self.details["summary"] + "."

    def to_dict(self) -> dict[str, Any]:
        return {**self.details, "zip": self.zip_path}


def export_camtrap_dp(cat: Catalogue, request: ExportCamtrapDPRequest, *,
                      progress: Callable[[int, int], None] | None = None,
                      should_cancel: Callable[[], bool] | None = None) -> CamtrapDPExported:
    """Write and validate the package at ``request.out`` (or a new folder under the data folder's exports), now;
    ``progress(done, total)`` follows the photo files and the check, ``should_cancel`` stops it."""
    done, zip_path = camtrapdp_export.export_package(
        cat, out=request.out, zip=request.zip, user=curator_name(request.user), title=request.title,
        sampling_design=request.sampling_design, include_media=request.include_media, people=request.people,
        progress=progress, should_cancel=should_cancel)
    return CamtrapDPExported(path=str(done.path), zip_path=zip_path, valid=done.valid, details=done.to_dict())
