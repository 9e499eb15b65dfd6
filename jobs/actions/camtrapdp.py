"""The Camtrap DP export as a service: the catalogue's deployments, photos and annotations as a Camtrap DP 1.0
package (``rosette export camtrap-dp OUT``, the Export tab), validated offline against the shipped schemas."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from db import camtrapdp_export
from db.session import Catalogue
from jobs.actions.common import curator_name
from jobs.requests.camtrapdp import ExportCamtrapDPRequest


@dataclass(frozen=True)
class CamtrapDPExported:
    """Where the package is (and its zip, when one was asked for), what it holds and whether it is valid."""

    path: str
    zip_path: str | None
    valid: bool
    details: dict[str, Any]  # db.camtrapdp_export.CamtrapDPExport.to_dict(): counts, left out, problems

    @property
    def message(self) -> str:
        return self.details["summary"] + "."

    def to_dict(self) -> dict[str, Any]:
        return {**self.details, "zip": self.zip_path}


def export_camtrap_dp(cat: Catalogue, request: ExportCamtrapDPRequest) -> CamtrapDPExported:
    """Write and validate the package at ``request.out`` (or a new folder under the data folder's exports)."""
    user = curator_name(request.user)
    if request.out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
        out = cat.data_dir / "exports" / f"camtrap-dp-{stamp}"
    else:
        out = Path(request.out).expanduser()
    done = camtrapdp_export.export_camtrap_dp(cat, out, user=user, title=request.title,
                                              sampling_design=request.sampling_design,
                                              include_media=request.include_media)
    zip_path = None
    if request.zip:
        zip_path = shutil.make_archive(str(out), "zip", root_dir=out)
    return CamtrapDPExported(path=str(done.path), zip_path=zip_path, valid=done.valid, details=done.to_dict())
