"""Requests of the job-list actions (``jobs.actions.jobs``): cancel a job, run a failed or cancelled one again,
queue the features of every photo."""

from __future__ import annotations

from dataclasses import dataclass

from core.identify.backbones import DEFAULT_BACKBONE
from core.requests import Request
from jobs.requests._values import as_id, settle


@dataclass(frozen=True)
class CancelJobRequest(Request):
    """Cancel a queued job at once, or ask a running one to stop at its next step."""

    job_id: int
    user: str

    def __post_init__(self) -> None:
        settle(self, job_id=as_id(self.job_id, "job number"))


@dataclass(frozen=True)
class RetryJobRequest(Request):
    """Queue a failed or cancelled job again (a training run resumes from its last checkpoint)."""

    job_id: int
    user: str

    def __post_init__(self) -> None:
        settle(self, job_id=as_id(self.job_id, "job number"))


@dataclass(frozen=True)
class WarmFeaturesRequest(Request):
    """Queue an ``embed`` job computing ``backbone``'s features for every photo (match review then never computes
    them while a curator waits)."""

    user: str
    backbone: str = DEFAULT_BACKBONE

    def __post_init__(self) -> None:
        if not self.backbone:
            raise ValueError("Choose a model.")
