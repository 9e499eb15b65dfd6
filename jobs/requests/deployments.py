"""Requests about camera stations (deployments): list them, import a deployments CSV, and a curator's add, edit
and delete in the Deployments screen."""

from __future__ import annotations

from dataclasses import dataclass

from core.requests import Request
from core.field.stations import DeploymentSpec, deployment_spec
from jobs.requests._values import settle


def _text(value: object) -> str | None:
    """A form or option value as stripped text (blank: None)."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


@dataclass(frozen=True)
class ListDeploymentsRequest(Request):
    """Every deployment, with its photo count and active days."""


@dataclass(frozen=True)
class ImportDeploymentsRequest(Request):
    """Import a deployments CSV (Camtrap DP column names) on this machine; ``dry_run`` stores nothing."""

    path: str
    user: str
    dry_run: bool = False

    def __post_init__(self) -> None:
        path = _text(self.path)
        if path is None:
            raise ValueError("Choose a deployments CSV file first.")
        settle(self, path=path)


@dataclass(frozen=True)
class DeploymentFormRequest(Request):
    """One deployment as a curator types it: the Camtrap DP fields, times ISO 8601 with a UTC offset (the
    deployment's local time; an end without one takes the start's). Checked when made (an end before its start,
    a latitude without a longitude, coordinates out of range are refused)."""

    deployment_id: str
    start: str
    end: str
    user: str
    location_id: str | None = None
    location_name: str | None = None
    latitude: float | None = None
    longitude: float | None = None
    camera_id: str | None = None
    camera_model: str | None = None

    def __post_init__(self) -> None:
        settle(self, **{f: _text(getattr(self, f)) for f in ("deployment_id", "start", "end", "location_id",
                                                              "location_name", "camera_id", "camera_model")})
        for name in ("latitude", "longitude"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = _text(value)
                try:
                    value = None if value is None else float(value)
                except ValueError:
                    raise ValueError(f"the {name} must be a number, got {getattr(self, name)!r}") from None
            settle(self, **{name: value})
        if self.deployment_id is None:
            raise ValueError("a deployment needs an id (deploymentID)")
        if self.start is None or self.end is None:
            raise ValueError(f"deployment {self.deployment_id!r}: give its start and its end "
                             "(like 2024-05-01T08:00:00-04:00)")
        self.spec()  # checks every field (core.field.stations.StationError is a ValueError)

    def spec(self) -> DeploymentSpec:
        """The :class:`DeploymentSpec` this form states."""
        return deployment_spec({"deploymentID": self.deployment_id, "deploymentStart": self.start,
                                "deploymentEnd": self.end, "locationID": self.location_id,
                                "locationName": self.location_name, "latitude": self.latitude,
                                "longitude": self.longitude, "cameraID": self.camera_id,
                                "cameraModel": self.camera_model})


@dataclass(frozen=True)
class EditDeploymentRequest(Request):
    """Change deployment ``key`` to what ``form`` states (its id may change too)."""

    key: str
    form: DeploymentFormRequest

    def __post_init__(self) -> None:
        key = _text(self.key)
        if key is None:
            raise ValueError("Choose the deployment to change first.")
        settle(self, key=key)


@dataclass(frozen=True)
class DeleteDeploymentRequest(Request):
    """Delete a deployment entered by mistake (one with photos or events is refused)."""

    key: str
    user: str

    def __post_init__(self) -> None:
        key = _text(self.key)
        if key is None:
            raise ValueError("Choose the deployment to delete first.")
        settle(self, key=key)
