"""An incoming Camtrap DP package checked against the Camtrap DP schemas Rosette ships (``core/field/schemas``), offline,
as the export checks what it writes (:mod:`core.field.camtrapdp_writer`): the descriptor against the profile (JSON
Schema) and every table against its table schema with frictionless (types, formats, required cells, enums, unique
ids, foreign keys). Columns are matched by name, as Rosette's reader matches them: a package may leave out the
optional columns or write them in another order.

The reader's own checks come first and decide what can be imported; this check names the rule each remaining
problem breaks, grouped into one report line per rule (resource, field, rule, the rows). It runs on a copy of the
descriptor and the three tables in a temporary folder (a package in a zip included), never on the media files, and
nothing is fetched: the package's own profile and schema URLs (1.0, 1.0.1, GBIF's) are read as the shipped 1.x
version's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import frictionless

from core.field.camtrapdp_writer import (
    CAMTRAP_DP_VERSION,
    PROFILE_URL,
    SCHEMA_URLS,
    TABLES,
    check_descriptor,
    table_schema,
)
from core.readers.base import ReadError, Tree
from core.readers.report import IngestItemResult

#: Most rule lines one import lists, and most rows one line names.
MAX_LINES = 20
SHOWN_ROWS = 5

@dataclass(frozen=True)
class _Broken:
    """One cell, row or descriptor part that breaks a rule."""

    resource: str  # deployments | media | observations | datapackage.json
    field: str
    rule: str  # what frictionless or the profile says the rule is
    row: int | None = None  # as frictionless counts (the header is row 1)
    cell: str | None = None


def check_against_schemas(tree: Tree, descriptor: Mapping[str, Any], paths: Mapping[str, str], *,
                          label: str) -> list[IngestItemResult]:
    """Report lines (status ``note``, about the package) naming each Camtrap DP rule the package breaks, with its
    rows; ``paths``: each table's path in ``tree``. Empty: the package is valid Camtrap DP."""
    # the descriptor against the profile, its 1.x profile and table schema URLs read as the shipped version's
    as_shipped = {**descriptor, "profile": PROFILE_URL,
                  "resources": [{**r, "schema": SCHEMA_URLS[r["name"]]} if isinstance(r, Mapping)
                                and r.get("name") in TABLES else r for r in descriptor.get("resources") or []]}
    broken = [_Broken("datapackage.json", p.field or "", p.message.removeprefix("the descriptor: "))
              for p in check_descriptor(as_shipped)]
    with tempfile.TemporaryDirectory(prefix="rosette-camtrapdp-check-") as tmp:
        folder = Path(tmp)
        resources = []
        for res in descriptor.get("resources") or []:
            if not isinstance(res, Mapping) or res.get("name") not in TABLES:
                continue
            name = res["name"]
            try:
                (folder / f"{name}.csv").write_bytes(tree.read(paths[name]))
            except (ReadError, KeyError, OSError):
                continue  # the reader has named what is wrong with it
            resources.append({**{k: v for k, v in res.items() if k not in ("path", "schema", "profile")},
                              "path": f"{name}.csv", "schema": table_schema(name)})
        local = {k: v for k, v in descriptor.items() if k in ("name", "id", "title")}
        local["resources"] = resources
        try:
            report = frictionless.Package(local, basepath=str(folder),
                                          detector=frictionless.Detector(schema_sync=True)).validate()
        except frictionless.FrictionlessException as exc:
            broken.append(_Broken("datapackage.json", "", f"frictionless could not read the tables: "
                                                          f"{exc.error.message}"))
        else:
            broken.extend(_Broken("datapackage.json", "", e.message) for e in report.errors)
            for task in report.tasks:
                broken.extend(_Broken(task.name or "?", getattr(e, "field_name", None) or "",
                                      f"{e.title.lower()}: {e.note}" if e.note else e.message,
                                      row=getattr(e, "row_number", None), cell=getattr(e, "cell", None))
                              for e in task.errors)
    return rule_lines(broken, label=label)


def rule_lines(broken: Sequence[_Broken], *, label: str) -> list[IngestItemResult]:
    """One line per rule broken (resource, field, rule), naming the rows (the header is row 1); the descriptor's
    rules in one line."""
    groups: dict[tuple[str, str, str], list[_Broken]] = {}
    descriptor = [f"{b.field}: {b.rule}" if b.field else b.rule for b in broken
                  if b.resource == "datapackage.json"]
    if descriptor:
        groups[("datapackage.json", "", "; ".join(descriptor))] = []
    for b in broken:
        if b.resource != "datapackage.json":
            groups.setdefault((b.resource, b.field, b.rule), []).append(b)
    lines = []
    for (resource, column, rule), found in list(groups.items())[:MAX_LINES]:
        rows = [b.row for b in found if b.row is not None]
        where = resource + (f", field {column}" if column else "")
        if rows:
            shown = ", ".join(str(r) for r in rows[:SHOWN_ROWS]) + (f" and {len(rows) - SHOWN_ROWS} more"
                                                                     if len(rows) > SHOWN_ROWS else "")
            cell = next((b.cell for b in found if b.cell), None)
            text = (f"{len(rows)} row(s) break the rule {rule} (row{'s' if len(rows) > 1 else ''} {shown}"
                    + (f"; e.g. {cell!r})" if cell else ")"))
        else:
            text = rule
        lines.append(IngestItemResult(label, "note", f"Camtrap DP {CAMTRAP_DP_VERSION} schema check (frictionless, "
                                      f"the shipped schemas): {where}: {text}", about_import=True))
    if len(groups) > MAX_LINES:
        lines.append(IngestItemResult(label, "note", f"Camtrap DP schema check: {len(groups) - MAX_LINES} more "
                                      "rule(s) broken, not listed", about_import=True))
    return lines
