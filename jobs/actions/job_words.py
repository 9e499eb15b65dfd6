"""A job's request in the Jobs tab's words: the animals it works on counted as animals (a job's ``image_ids`` are
annotation ids, the animals in the photos, not the photos), its species by name (read from those animals when the
request names none, as an import's features job does), and nothing that is unset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select

from db.catalogue import CatalogueError
from db.models import Image, Job, JobStatus, Species
from db.session import Catalogue
from jobs import queue

#: Ids listed before "…" (the count is always complete).
SHOWN_IDS = 3


def _ids(ids: Sequence[int]) -> str:
    ordered = sorted(ids)
    if len(ordered) > 1 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"#{ordered[0]}–#{ordered[-1]}"
    listed = ", ".join(f"#{i}" for i in ordered[:SHOWN_IDS])
    return listed + (", …" if len(ordered) > SHOWN_IDS else "")


def params_words(params: Mapping[str, Any], *, species_names: Mapping[int, str],
                 species_of_animals: Sequence[str] = ()) -> str:
    """One job's request in words: ``image_ids`` as "24 animals (#1–#24)", ``species`` by name (else the
    ``species_of_animals`` the animals are of), the other settings as ``key=value``; unset ones left out."""
    parts = []
    species = params.get("species")
    named = species_names.get(species, str(species)) if species is not None else ", ".join(species_of_animals)
    for key, value in params.items():
        if key in ("user", "species", "image_ids") or value is None:
            continue
        parts.append(f"{key}={value}")
    ids = params.get("image_ids")
    if isinstance(ids, (list, tuple)):
        n = len(ids)
        animals = f"{n} animal{'s' if n != 1 else ''}" + (f" ({_ids(ids)})" if n else "")
        parts.insert(0, animals + (f" of {named}" if named else ""))
    elif named:
        parts.insert(0, f"species={named}")
    return ", ".join(parts)


def job_params_words(cat: Catalogue, job_ids: Sequence[int]) -> dict[int, str]:
    """The request of each job in ``job_ids`` in words (:func:`params_words`), by job id."""
    if not job_ids:
        return {}
    with cat.unit_of_work() as s:
        jobs = list(s.execute(select(Job.id, Job.params).where(Job.id.in_(list(job_ids)))).all())
        names = dict(s.execute(select(Species.id, Species.name)).all())
        wanted = {int(i) for _, p in jobs if (p or {}).get("species") is None
                  and isinstance((p or {}).get("image_ids"), (list, tuple)) for i in p["image_ids"]}
        species_of = dict(s.execute(select(Image.id, Image.species_id).where(Image.id.in_(wanted))).all()) \
            if wanted else {}
    out = {}
    for job_id, params in jobs:
        params = params or {}
        ids = params.get("image_ids") if params.get("species") is None else None
        of = sorted({names.get(species_of[i], "") for i in ids or () if i in species_of} - {""})
        out[job_id] = params_words(params, species_names=names, species_of_animals=of)
    return out


def job_of_kind(cat: Catalogue, job_id: int, kind: str, what: str) -> Job:
    """The job a tab polls, refused in one sentence when it is another kind's (``what``: what this kind fits)."""
    job = queue.get_job(cat, int(job_id))
    if job.kind != kind:
        raise CatalogueError(f"job #{job.id} is a {job.kind} job, not {what}")
    return job


def unfinished_words(job: Job, label: str) -> str:
    """The status line of a job that has not succeeded: failed or cancelled with why, else its progress."""
    if job.status in (JobStatus.failed, JobStatus.cancelled):  # the message says which, and why
        why = (job.message or "").removeprefix("failed: ")
        return f"{label} {job.status.value}: {why}"
    return f"{label} {job.status.value}: {job.progress:.0%} {job.message or ''}".rstrip()
