"""A deployments CSV (camera stations) with Camtrap DP's column names: ``deploymentID, locationID, locationName,
latitude, longitude, deploymentStart, deploymentEnd, cameraID, cameraModel`` and any others (kept as they came,
in the deployment's ``details``). ``deploymentID``, ``deploymentStart`` and ``deploymentEnd`` are required; column
names are matched ignoring case, spaces and underscores. The CSV may be UTF-8 (with or without BOM) or Latin-1,
comma, semicolon or tab separated.

The file is taken whole or not at all: a missing required column, a duplicate ``deploymentID`` or any row that
is not a valid deployment (an end before its start, a latitude outside -90..90, a time that is not ISO 8601)
refuses it, naming every problem with its line, so the curator fixes the file and nothing is half-imported.
"""

from __future__ import annotations

import csv

from core.readers.base import ManifestError
from core.readers.manifest import csv_rows
from core.field.stations import DEPLOYMENT_COLUMNS, DeploymentSpec, StationError, check_unique_ids, deployment_spec

#: Columns a deployments CSV must have.
DEPLOYMENTS_REQUIRED = ("deploymentID", "deploymentStart", "deploymentEnd")
#: At most this many problems are listed in the refusal (then "and N more").
MAX_LISTED = 20


class DeploymentsCsvError(ManifestError):
    """A deployments CSV that cannot be imported; the message names every problem found."""


def _norm(name: str) -> str:
    return name.strip().lower().replace(" ", "").replace("_", "")


def read_deployments_csv(data: bytes, *, label: str) -> list[DeploymentSpec]:
    """Every deployment of a deployments CSV, validated (:func:`core.field.stations.deployment_spec`); raises
    :class:`DeploymentsCsvError` naming every problem (missing columns, bad rows with their line, duplicate ids)."""
    reader = csv_rows(data)
    canonical = {_norm(c): c for c in DEPLOYMENT_COLUMNS}
    header: list[str] | None = None
    specs: list[DeploymentSpec] = []
    problems: list[str] = []
    try:
        for raw in reader:
            if not any(c.strip() for c in raw):
                continue
            if header is None:
                header = [canonical.get(_norm(h), h.strip()) for h in raw]
                missing = [c for c in DEPLOYMENTS_REQUIRED if c not in header]
                if missing:
                    found = ", ".join(repr(h) for h in header if h) or "none"
                    raise DeploymentsCsvError(
                        f"{label}: missing required column{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(repr(m) for m in missing)} (found: {found}); nothing was imported")
                continue
            row = {header[i]: raw[i] for i in range(min(len(header), len(raw))) if header[i]}
            try:
                specs.append(deployment_spec(row, what=f"line {reader.line_num}"))
            except StationError as exc:
                problems.append(f"line {reader.line_num}: {exc}")
    except csv.Error as exc:
        raise DeploymentsCsvError(f"{label}: not a readable CSV file ({exc}); nothing was imported") from None
    if header is None:
        raise DeploymentsCsvError(f"{label}: the CSV file is empty (no header line); nothing was imported")
    try:
        check_unique_ids([s.key for s in specs], what="deploymentID values")
    except StationError as exc:
        problems.append(str(exc))
    if problems:
        more = f"; and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
        raise DeploymentsCsvError(f"{label}: {len(problems)} problem(s), nothing was imported: "
                                  + "; ".join(problems[:MAX_LISTED]) + more)
    return specs
