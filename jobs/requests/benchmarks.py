"""Requests of the benchmark actions (``jobs.actions.benchmarks``): freeze a benchmark, evaluate a model on one.

An evaluation runs as a job: the action stores ``EvaluateRequest.to_dict()`` as the job's params and the
``evaluate`` job kind rebuilds it with ``EvaluateRequest.from_dict`` (``rosette eval`` runs the same request at
once)."""

from __future__ import annotations

from dataclasses import dataclass

from core.identify.backbones import DEFAULT_BACKBONE
from core.identify.evaluation import FLANK_SETTINGS, RERANK_METHODS
from core.requests import Request
from core.identify.splits import check_split_kind
from core.inspect.variants import canonical_variant
from jobs.requests._values import as_id, settle

RANDOM_SPLITS = ("identity", "sighting")  # the seeded splits, whose test share is chosen


@dataclass(frozen=True)
class CreateBenchmarkRequest(Request):
    """Freeze a named benchmark with its split: every assigned catalogue photo, or a manifest's photos (those not
    yet in the catalogue are imported). ``split``: identity, sighting, test-only or column:NAME; ``replace``
    rebuilds a benchmark of the same name."""

    name: str
    user: str
    split: str = "identity"
    test_fraction: float = 0.3
    seed: int = 0
    manifest: str | None = None
    replace: bool = False

    def __post_init__(self) -> None:
        settle(self, name=(self.name or "").strip())
        if not self.name:
            raise ValueError("Give the benchmark a name.")
        check_split_kind(self.split)
        try:
            fraction = float(self.test_fraction)
        except (TypeError, ValueError):
            raise ValueError(f"the test share must be a number, got {self.test_fraction!r}") from None
        if self.split in RANDOM_SPLITS and not 0.05 <= fraction <= 0.95:
            raise ValueError("The test share must be between 5% and 95%.")
        settle(self, test_fraction=fraction, seed=as_id(self.seed, "seed"),
               manifest=str(self.manifest) if self.manifest else None)


@dataclass(frozen=True)
class EvaluateRequest(Request):
    """Evaluate ``backbone`` (a registry name or a trained model) on ``benchmark``'s test split, all against all,
    seeing ``variant`` of each photo and re-ranked by ``rerank``; ``flank`` (any, same, cross) restricts each
    query's gallery to photos of its own flank or of the other one."""

    benchmark: str
    backbone: str = DEFAULT_BACKBONE
    variant: str = "full_rgb"
    rerank: str = "none"
    user: str = "curator"
    flank: str = "any"

    def __post_init__(self) -> None:
        if not self.benchmark:
            raise ValueError("Choose a benchmark to evaluate on (create one first if there is none).")
        if not self.backbone:
            raise ValueError("Choose a model.")
        canonical_variant(self.variant)  # an unknown variant is named with the known ones
        if self.rerank not in RERANK_METHODS:
            raise ValueError(f"unknown re-ranking {self.rerank!r}")
        if self.flank not in FLANK_SETTINGS:
            raise ValueError(f"unknown flank setting {self.flank!r}; expected one of {', '.join(FLANK_SETTINGS)}")
