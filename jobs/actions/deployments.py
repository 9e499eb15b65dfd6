"""Camera stations as people act on them: list the deployments (``rosette deployments``, the Deployments tab),
import a deployments CSV, and add, edit or delete one (each audited, as the curator who did it)."""

from __future__ import annotations

from pathlib import Path

from core.readers.deployments import DeploymentsCsvError, read_deployments_csv
from db.records import deployments as store
from db.records.deployments import DeploymentRow, DeploymentStoreReport
from db.session import Catalogue
from jobs.actions.common import curator_name
from jobs.requests.deployments import (
    DeleteDeploymentRequest,
    DeploymentFormRequest,
    EditDeploymentRequest,
    ImportDeploymentsRequest,
    ListDeploymentsRequest,
)

__all__ = ["DeploymentRow", "DeploymentStoreReport", "DeploymentsCsvError", "add_deployment", "delete_deployment",
           "deployments", "edit_deployment", "import_deployments"]

#: The largest deployments CSV read (bytes): thousands of deployments fit in far less.
MAX_CSV_BYTES = 32 * 1024 * 1024


def deployments(cat: Catalogue, request: ListDeploymentsRequest) -> list[DeploymentRow]:
    """Every deployment by station then start, with its photo count and active days."""
    return store.list_deployments(cat)


def import_deployments(cat: Catalogue, request: ImportDeploymentsRequest) -> DeploymentStoreReport:
    """Read a deployments CSV and store it: new deployments are added, ones already stored the same are left,
    ones stored differently are reported as conflicts and kept as stored. A file with any bad row is refused
    whole (:class:`DeploymentsCsvError` naming every problem)."""
    path = Path(request.path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.stat().st_size > MAX_CSV_BYTES:
        raise DeploymentsCsvError(f"{path.name}: larger than {MAX_CSV_BYTES // (1024 * 1024)} MB; "
                                  "is it a deployments CSV?")
    specs = read_deployments_csv(path.read_bytes(), label=path.name)
    return store.store_deployments(cat, specs, user=curator_name(request.user), dry_run=request.dry_run)


def add_deployment(cat: Catalogue, request: DeploymentFormRequest) -> DeploymentStoreReport:
    return store.add_deployment(cat, request.spec(), user=curator_name(request.user))


def edit_deployment(cat: Catalogue, request: EditDeploymentRequest) -> list[str]:
    """Change a deployment; the warnings (no coordinates, an overlap with another of its station)."""
    return store.edit_deployment(cat, request.key, request.form.spec(), user=curator_name(request.form.user))


def delete_deployment(cat: Catalogue, request: DeleteDeploymentRequest) -> None:
    store.delete_deployment(cat, request.key, user=curator_name(request.user))
