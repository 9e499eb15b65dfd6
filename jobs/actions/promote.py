"""Actions that change the catalogue and then need background work: the store says what is needed, this layer
queues it (db never imports the job queue)."""

from __future__ import annotations

from typing import Any

from db.session import Catalogue
from db.species import promote_model
from jobs.queue import submit


def promote(cat: Catalogue, name: str, *, species: str | int | None = None, user: str = "curator") -> dict[str, Any]:
    """Promote ``name`` (``db.species.promote_model``) and queue what the promotion needs: the species'
    re-embedding (``job_id``) and, for a fused pipeline, every photo's keypoints (``keypoints_job_id``)."""
    result = promote_model(cat, name, species=species, user=user)
    ids = {item["kind"]: submit(cat, item["kind"], item["params"]) for item in result["follow_up"]}
    result["job_id"] = ids.get("embed")
    if "keypoints" in ids:
        result["keypoints_job_id"] = ids["keypoints"]
    return result
