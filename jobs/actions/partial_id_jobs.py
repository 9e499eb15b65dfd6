"""The two-flank partial-identity density as the Population tab runs it: whether the catalogue's study can carry it
(one-flank identities of the species in the window), the background job that fits it (kind ``flank_density``, the
answer of ``rosette density --flanks`` on the catalogue), and the words and table of that job, running, refused,
failed or done. The fit itself is :mod:`db.field.partial_id_fit`'s; the words are
:func:`jobs.actions.partial_id.flanks_text`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from db.catalogue import CatalogueError
from db.field.partial_id_study import catalogue_flank_study
from db.models import JobStatus
from db.session import Catalogue
from jobs import queue
from jobs.actions.job_words import job_of_kind, unfinished_words
from jobs.actions.partial_id import flanks_text
from jobs.answer_words import figure, flank_answer_words, tab_words
from jobs.requests.partial_id import PartialIdRequest
from jobs.requests.population import PopulationRequest

#: The job kind of a partial-identity fit run in the background (jobs.kinds).
FLANK_DENSITY_JOB = "flank_density"
ESTIMATE_HEADERS = ["Parameter", "Posterior median", "95% credible interval"]
#: (posterior key, the row's name, digits shown)
_ROWS = (("N", "N (animals in the state space)", 0), ("D_per_100km2", "D (animals per 100 km²)", 1),
         ("sigma_m", "sigma (m)", 0), ("p0_single", "p0, one side", 3), ("p0_both", "p0, both sides at once", 3))


def flank_offer(cat: Catalogue, request: PopulationRequest) -> dict[str, Any]:
    """Whether the tab offers the fit for the study ``request`` describes: ``offered`` when the species holds
    one-flank identities in the window, with ``words`` saying what the fit would rest on; else the one sentence of
    why not and what would change that (the study's own refusal: flanks not set, nothing to fit, every individual
    seen on both flanks)."""
    try:
        study = catalogue_flank_study(cat, species=request.species, occasion_days=request.occasion_days,
                                      date_from=request.first_day, date_to=request.last_day)
    except (CatalogueError, ValueError) as exc:  # the density study's own refusals are ValueErrors too
        reason = tab_words(str(exc).rstrip("."))
        return {"offered": False, "words": f"Not offered: {reason}."}
    left_out = ", ".join(f"{n} {label}" for label, n in sorted(study.no_flank.items()))
    words = (f"Offered: {study.species} holds {len(study.left_identities)} left-flank and "
             f"{len(study.right_identities)} right-flank identities that no photo links, with "
             f"{len(study.both_side_animals)} animal(s) seen on both sides at once and {len(study.known_links)} "
             f"known link(s), at {len(study.stations)} stations"
             + (f"; left out for showing no flank: {left_out} view(s)" if left_out else "") + ".")
    return {"offered": True, "words": words}


def queue_flank_density(cat: Catalogue, request: PartialIdRequest) -> tuple[int, str]:
    """Queue the fit of the catalogue's study as a background job; returns (job id, what the tab says). Text files
    are fitted in the foreground (``rosette density --flanks``), and a study the tab would not offer is refused
    with the offer's sentence, so neither is queued."""
    if request.from_files:
        raise ValueError("the background job fits the catalogue's study; fit text files with rosette density --flanks")
    offer = flank_offer(cat, request)
    if not offer["offered"]:
        raise CatalogueError(offer["words"])
    job_id = queue.submit(cat, FLANK_DENSITY_JOB, request.to_dict())
    return job_id, (f"Density from one-flank photos queued as job #{job_id}: {request.chains} chain(s) of "
                    f"{request.iterations:,} iterations from seed {request.seed}. Its progress is shown here and in "
                    "the Jobs tab; 20,000 iterations of a chain take a minute or more.")


def latest_flank_density_job(cat: Catalogue) -> int | None:
    """The newest partial-identity job, so a reloaded page shows its answer again."""
    jobs = queue.list_jobs(cat, limit=1, kind=FLANK_DENSITY_JOB)
    return jobs[0].id if jobs else None


def flank_density_status(cat: Catalogue, job_id: int | None) -> tuple[dict[str, Any] | None, str]:
    """(the answer once the job succeeded, else None; the status line: done with D, its interval and the
    diagnostics, refused with its one sentence and no number, the progress meanwhile, or why it failed)."""
    if not job_id:
        return None, ""
    job = job_of_kind(cat, job_id, FLANK_DENSITY_JOB, "a density from one-flank photos")
    label = f"Flank density job #{job.id}"
    if job.status == JobStatus.succeeded:
        answer = dict(job.result or {})
        return answer, f"{label} {flank_answer_words(answer)}"
    return None, unfinished_words(job, label)


def estimate_rows(answer: Mapping[str, Any] | None) -> list[list[str]]:
    """Rows of :data:`ESTIMATE_HEADERS`: N, D, sigma and p0 (both sides only where two cameras worked) with their
    95% credible intervals; none for a refused fit."""
    if not answer or answer.get("refused"):
        return []
    post = answer["posterior"]
    rows = []
    for key, name, digits in _ROWS:
        p = post.get(key)
        if p:
            rows.append([name, figure(p["median"], digits),
                         f"{figure(p['lcl'], digits)} – {figure(p['ucl'], digits)}"])
    return rows


def flank_view(cat: Catalogue, job_id: int | None) -> dict[str, Any]:
    """What the tab shows of a job: ``status`` (its line), ``done`` (it finished: succeeded, refused, failed or
    cancelled), the ``table`` (:func:`estimate_rows`) and the ``text`` of the answer (:func:`flanks_text`: what
    the fit rests on, the diagnostics and the most probable links); no row or text while it runs or when it was
    refused (the status line holds the reason)."""
    answer, words = flank_density_status(cat, job_id)
    finished = answer is not None or " failed: " in words or " cancelled: " in words
    refused = answer is None or bool(answer.get("refused"))
    return {"status": words, "done": finished, "table": estimate_rows(answer),
            "text": "" if refused else flanks_text(answer)}
