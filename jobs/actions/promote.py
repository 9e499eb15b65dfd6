"""Actions that change the catalogue and then need background work: the store says what is needed, this layer
queues it (db never imports the job queue)."""

from __future__ import annotations

from typing import Any

from db.session import Catalogue
from db.species import archive_model, promote_model
from jobs.actions.common import curator_name
from jobs.queue import submit
from jobs.requests.models import ArchiveRequest, PromoteRequest  # noqa: F401


def promote(cat: Catalogue, request: PromoteRequest) -> dict[str, Any]:
    """Promote ``request.model`` (``db.species.promote_model``) and queue what the promotion needs: the species'
    re-embedding (``job_id``) and, for a fused pipeline, every photo's keypoints (``keypoints_job_id``).
    ``message`` says it in the Models tab's words."""
    result = promote_model(cat, request.model, species=request.species, user=curator_name(request.user))
    ids = {item["kind"]: submit(cat, item["kind"], item["params"]) for item in result["follow_up"]}
    result["job_id"] = ids.get("embed")
    if "keypoints" in ids:
        result["keypoints_job_id"] = ids["keypoints"]
    result["message"] = (f"{result['model']} is now the active model for {result['species']} (was "
                         f"{result['previous']}). Its features are being computed for every photo (job "
                         f"#{result['job_id']}); match review switches to it when done.")
    return result


def archive(cat: Catalogue, request: ArchiveRequest) -> str:
    """Archive a candidate model (an active one must be replaced first); returns a message."""
    curator_name(request.user)
    archive_model(cat, request.model)
    return f"{request.model} archived: hidden from the pickers, kept with its evaluations."
