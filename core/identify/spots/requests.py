"""Typed requests for the spot-evidence actions, validated when made (pure: only the matcher registry is
consulted). A job stores a request's ``to_dict()`` and the worker rebuilds it with ``from_dict()`` (unknown keys,
wrong types and bad values are refused: :class:`core.requests.Request`). They live in core because the store's
spot functions (``db.identify.spots``) take them too."""

from __future__ import annotations

from dataclasses import dataclass

from core.identify.backbones import DEFAULT_BACKBONE
from core.identify.evaluation import check_flank
from core.requests import Request
from core.identify.spots import list_matchers, matcher_available
from core.identify.spots.base import DEFAULT_MATCHER, MatcherUnavailableError
from core.identify.spots.fusion import DEFAULT_SHORTLIST
from core.identify.spots.pipeline import DEFAULT_LNBNN_SHORTLIST, PipelineSettings


def available_matchers() -> list[str]:
    """Local matchers that can run on this machine (learned ones only with their weights)."""
    return [n for n in list_matchers() if matcher_available(n)]


def _check_matcher(name: str) -> None:
    if name not in list_matchers():
        raise ValueError(f"unknown local matcher {name!r}; available: {', '.join(available_matchers())}")
    if not matcher_available(name):
        raise MatcherUnavailableError(f"the {name} matcher's weights are not on this machine; available here: "
                                      f"{', '.join(available_matchers())}")


@dataclass(frozen=True)
class SpotEvaluationRequest(Request):
    """Evaluate a global model + spot evidence on a benchmark (``rosette eval --verify``, the Benchmarks tab)."""

    benchmark: str
    model: str = DEFAULT_BACKBONE
    matcher: str = DEFAULT_MATCHER
    shortlist: int = DEFAULT_SHORTLIST
    verification: bool = True
    lnbnn: bool = False
    user: str = "curator"
    #: build the pipeline with its calibration fitted on this benchmark's train split (for a test-only benchmark);
    #: None: the evaluated benchmark's own train split. A stored pipeline's name keeps its stored calibration.
    calibrate_on: str | None = None
    #: the gallery of each query: any photo, its own flank (same) or the other one (cross)
    flank: str = "any"
    #: with LNBNN: its own top candidates over the whole gallery that join the global shortlist
    lnbnn_shortlist: int = DEFAULT_LNBNN_SHORTLIST

    def __post_init__(self) -> None:
        if not (self.benchmark or "").strip():
            raise ValueError("choose a benchmark to evaluate on")
        check_flank(self.flank)
        if self.calibrate_on is not None:
            if not isinstance(self.calibrate_on, str):
                raise ValueError(f"the benchmark to calibrate on must be a name, got {self.calibrate_on!r}")
            object.__setattr__(self, "calibrate_on", self.calibrate_on.strip() or None)
        if not (self.model or "").strip():
            raise ValueError("choose the global model that makes the shortlist")
        if isinstance(self.shortlist, bool) or not isinstance(self.shortlist, int):
            raise ValueError(f"the shortlist size must be a whole number, got {self.shortlist!r}")
        _check_matcher(self.matcher)
        self.settings()  # validates shortlist and scorers

    def settings(self) -> PipelineSettings:
        return PipelineSettings(matcher=self.matcher, shortlist=self.shortlist, verification=self.verification,
                                lnbnn=self.lnbnn, lnbnn_shortlist=self.lnbnn_shortlist)


@dataclass(frozen=True)
class KeypointsRequest(Request):
    """Extract (and cache) keypoints for the photos of a species, or of the given photos."""

    matcher: str = DEFAULT_MATCHER
    species: int | None = None
    image_ids: tuple[int, ...] | None = None
    user: str = "curator"

    def __post_init__(self) -> None:
        _check_matcher(self.matcher)
        if self.image_ids is not None:
            object.__setattr__(self, "image_ids", tuple(int(i) for i in self.image_ids))


@dataclass(frozen=True)
class MatchedSpotsRequest(Request):
    """The matched spots between a query photo and a candidate photo, under a pipeline or a matcher."""

    query_image_id: int
    candidate_image_id: int
    pipeline: str | None = None
    matcher: str = DEFAULT_MATCHER

    def __post_init__(self) -> None:
        for what, v in (("query", self.query_image_id), ("candidate", self.candidate_image_id)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"the {what} photo must be a photo number, got {v!r}")
        if self.query_image_id == self.candidate_image_id:
            raise ValueError("choose two different photos")
        if self.pipeline is None:
            _check_matcher(self.matcher)


