"""Spot evidence actions, each one function taking one typed request (``core.identify.spots.requests``, validated when
made): evaluate a fused pipeline, extract keypoints for a species (a light job), show the matched spots of a
pair, list matchers. The CLI (``rosette eval --verify``, ``rosette spots ...``) and the Match review and Benchmarks
tabs call these; the jobs rebuild the same requests."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from core.identify.spots import describe_matchers, matcher_available
from core.identify.spots.draw import draw_correspondences
from core.identify.spots.pipeline import DEFAULT_LNBNN_SHORTLIST, PipelineSettings  # noqa: F401 (the tab reads it)
from core.identify.spots.requests import (  # noqa: F401
    KeypointsRequest,
    MatchedSpotsRequest,
    SpotEvaluationRequest,
    available_matchers,
)
from db.identify.benchmarks import list_benchmarks
from db.catalogue import CatalogueError
from db.embeddings import load_photo, sources_for
from db.session import Catalogue
from db.identify.spots import (  # noqa: F401  (the service: one request in, a result out)
    evaluate_request as evaluate_spots,
)
from db.identify.spots import (
    extract_keypoints,  # noqa: F401
    get_matcher,
    load_pipeline,
    matcher_for,
    verify_candidates,
)
from jobs import queue
from jobs.actions.common import curator_name


def matcher_rows() -> list[tuple[str, str, str]]:
    """(name, available here?, description) of every local matcher."""
    return [(n, "yes" if matcher_available(n) else "no (weights not on this machine)", d)
            for n, d in describe_matchers().items()]


def submit_keypoints(cat: Catalogue, request: KeypointsRequest) -> int:
    """Queue keypoint extraction on the light queue; returns the job id."""
    return queue.submit(cat, "keypoints", replace(request, user=curator_name(request.user)).to_dict())


def submit_spot_evaluation(cat: Catalogue, request: SpotEvaluationRequest) -> int:
    """Queue a fused pipeline's evaluation on the heavy queue; returns the job id."""
    return queue.submit(cat, "evaluate_spots", replace(request, user=curator_name(request.user)).to_dict())


def launch_spot_evaluation(cat: Catalogue, request: SpotEvaluationRequest) -> tuple[int, str]:
    """Queue the evaluation of ``request`` (the Benchmarks tab's form); returns (job id, message)."""
    with cat.unit_of_work() as s:
        known = {b.name for b in list_benchmarks(s)}
    for name in (request.benchmark, request.calibrate_on):
        if name and name not in known:
            raise CatalogueError(f"There is no benchmark named {name!r}.")
    job_id = submit_spot_evaluation(cat, request)
    settings = request.settings()
    own = f" joined by LNBNN's own top {settings.lnbnn_shortlist}" if settings.own_candidates else ""
    return job_id, (f"Evaluation of {request.model} re-ranked by {request.matcher} spot evidence "
                    f"({' + '.join(settings.scorers)}, top {request.shortlist}{own}) on {request.benchmark} queued as "
                    f"job #{job_id}; the pipeline and its numbers appear here and in the Models tab when it finishes.")


def launch_keypoints(cat: Catalogue, request: KeypointsRequest) -> tuple[int, str]:
    """Queue keypoint extraction (the light queue: it never waits behind training); returns (job id, message)."""
    job_id = submit_keypoints(cat, request)
    return job_id, (f"Keypoint extraction with {request.matcher} queued as job #{job_id} (light queue); "
                    "match review then verifies spots without waiting.")


@dataclass
class MatchedSpots:
    """What the matched-spots view shows for one pair."""

    picture: np.ndarray  # the two photos side by side with the inlier correspondences drawn
    n_inliers: int
    status: str
    words: str
    n_keypoints: tuple[int, int]
    masked: tuple[bool, bool]
    matcher: str
    note: str


def matched_spots(cat: Catalogue, request: MatchedSpotsRequest) -> MatchedSpots:
    """Verify the pair and draw its inlier correspondences (lines joining the same spots)."""
    if request.pipeline:
        stored = load_pipeline(cat, request.pipeline)
        if stored is None:
            raise CatalogueError(f"{request.pipeline!r} is not a fused pipeline")
        matcher, settings = matcher_for(stored), stored.settings
    else:
        matcher, settings = get_matcher(request.matcher), PipelineSettings(matcher=request.matcher)
    ids = [request.query_image_id, request.candidate_image_id]
    (fa, fb), (v,) = verify_candidates(cat, ids[0], ids[1:], matcher=matcher, settings=settings)
    srcs = sources_for(cat, ids)
    picture = draw_correspondences(load_photo(cat, srcs[0]), load_photo(cat, srcs[1]), v.inliers_a, v.inliers_b)
    notes = []
    for what, f in (("query", fa), ("candidate", fb)):
        if not f.masked:
            notes.append(f"the {what} photo has no mask: its keypoints come from the whole photo, background included")
    return MatchedSpots(picture=picture, n_inliers=v.n_inliers, status=v.status, words=v.words,
                        n_keypoints=(fa.n, fb.n), masked=(fa.masked, fb.masked), matcher=matcher.config.name,
                        note="; ".join(notes))
