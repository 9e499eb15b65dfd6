"""Population answers on a basis of identities (``rosette population --identities``, ``rosette review-priority``):
``decided`` (every assigned annotation as assigned), ``confirmed`` (curator identities only) or ``uncertain``
(the identities nobody confirmed imputed from the species' calibrated match probabilities,
:mod:`core.field.identities`), with where the identities come from and which reviews would narrow the answer most.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.field import population as pop
from db.field.identities import NoCalibration, check_uncertain_study, confirmed_estimates, identity_study, uncertain_answer
from db.session import Catalogue
from jobs import queue
from db.models import JobStatus
from jobs.actions import population as ps
from jobs.actions.jobs import cancel_job
from jobs.requests.identities import PopulationIdentitiesRequest, ReviewPriorityRequest
from jobs.requests.jobs import CancelJobRequest

__all__ = ["NoCalibration", "check_uncertain_basis", "population_on_basis", "review_priority", "queue_uncertain", "basis_lines", "priority_rows",
           "SIDE_BY_SIDE_HEADERS", "PRIORITY_HEADERS", "side_by_side_rows"]

Progress = Callable[[int, int], None]
BASIS_WORDS = {"decided": "as decided (every assigned annotation as assigned)",
               "confirmed": "confirmed (curator identities only)",
               "uncertain": "with identification uncertainty"}
SIDE_BY_SIDE_HEADERS = ["Model", "As decided: N", "95% interval", "With identification uncertainty: N",
                        "95% interval", "Share from identification"]
#: The fourth column's header of the side-by-side table on the confirmed basis.
CONFIRMED_HEADER = "Confirmed only: N"
PRIORITY_HEADERS = ["Annotation(s)", "Provenance", "Occasion(s)", "Expected narrowing (animals)",
                    "Most likely", "Probability", "New animal"]


def _estimate_dict(est: pop.Estimate) -> dict[str, Any]:
    d = est.to_dict()
    d["details"] = ps._num({k: v for k, v in est.details.items() if k != "ci_method"})
    d["ci_method"] = est.details.get("ci_method")
    d["estimable"] = not math.isnan(est.N)
    return d


def population_on_basis(cat: Catalogue, request: PopulationIdentitiesRequest, *, progress: Progress | None = None,
                        should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The population answer of :func:`jobs.actions.population.population_summary` on the request's basis, with
    ``identities``, ``provenance_counts``, ``draws`` and ``share_from_identification``; ``estimates`` are the
    basis's and ``estimates_decided`` the answer as decided beside them."""
    study = ps._study(cat, request)
    summary = ps.summarise(study)
    ident = identity_study(cat, study)
    summary.update(identities=request.identities, provenance_counts=ident.provenance_counts, draws=0,
                   share_from_identification={}, estimates_decided=summary["estimates"])
    summary["notes"] = [*summary["notes"], *ident.notes]
    if request.identities == "confirmed":
        summary["estimates"] = [_estimate_dict(e) for e in confirmed_estimates(ident)]
        summary["notes"].append(f"Confirmed: the {ident.provenance_counts['curator']} annotation(s) whose animal a "
                                "curator identified (an animal's annotations on one occasion count once); the "
                                "capture histories and frequencies shown are those as decided.")
    elif request.identities == "uncertain":
        check_uncertain_basis(cat, request)
        answer = uncertain_answer(cat, species=request.species, occasion_days=request.occasion_days,
                                  date_from=request.first_day, date_to=request.last_day, draws=request.draws,
                                  seed=request.seed, progress=progress, should_stop=should_stop)
        summary.update({k: answer[k] for k in ("estimates", "draws", "seed", "uncertain_units",
                                               "share_from_identification", "combination_method")})
        summary["review_first"] = answer["priority"]
        summary["notes"] += [n for n in answer["notes"] if n not in summary["notes"]]
    return summary


def review_priority(cat: Catalogue, request: ReviewPriorityRequest, *, progress: Progress | None = None,
                    should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The ``request.top`` unreviewed and machine annotations (by event) whose review is expected to narrow the
    ``uncertain`` interval of Mh-Chao most, with what is known of each (the same posterior Match review shows; no
    number while the calibration does not discriminate, ``probability_withheld`` saying why)."""
    check_uncertain_basis(cat, request)
    answer = uncertain_answer(cat, species=request.species, occasion_days=request.occasion_days,
                              date_from=request.first_day, date_to=request.last_day, draws=request.draws,
                              seed=request.seed, top=request.top, progress=progress, should_stop=should_stop)
    chao = next(e for e in answer["estimates"] if e["model"] == "Mh-Chao")
    return {"species": answer["species"], "model": "Mh-Chao", "draws": answer["draws"], "seed": request.seed,
            "provenance_counts": answer["provenance_counts"], "uncertain_units": answer["uncertain_units"],
            "estimate": chao, "priority": answer["priority"], "notes": answer["notes"],
            "probability_withheld": answer.get("probability_withheld")}


def check_uncertain_basis(cat: Catalogue, request: PopulationIdentitiesRequest) -> None:
    """Refuse the basis with identification uncertainty now, with the job's own sentence (:class:`NoCalibration`:
    its real cause and what to do), when it could not run: the Population tab's queue button and the command line
    ask before anything is queued or embedded."""
    check_uncertain_study(cat, species=request.species, occasion_days=request.occasion_days,
                          date_from=request.first_day, date_to=request.last_day)


def queue_uncertain(cat: Catalogue, request: PopulationIdentitiesRequest) -> int:
    """Queue the estimates with identification uncertainty as a background job (the Population tab), after
    :func:`check_uncertain_basis` (a refusal is given at the click, never after the job ran): its result is
    :func:`db.field.identities.uncertain_answer`'s; returns the job's id."""
    check_uncertain_basis(cat, request)
    return queue.submit(cat, "population_uncertain", request.to_dict())


UNCERTAIN_JOB = "population_uncertain"


def latest_uncertain_job(cat: Catalogue) -> int | None:
    """The newest imputation job, so a reloaded page shows its answer again."""
    jobs = queue.list_jobs(cat, limit=1, kind=UNCERTAIN_JOB)
    return jobs[0].id if jobs else None


def uncertain_status(cat: Catalogue, job_id: int | None) -> tuple[dict[str, Any] | None, str]:
    """(the answer once the imputation job succeeded, else None; what the curator reads meanwhile, or why it
    stopped)."""
    if not job_id:
        return None, ""
    job = queue.get_job(cat, int(job_id))
    if job.kind != UNCERTAIN_JOB:
        raise ValueError(f"job #{job.id} is a {job.kind} job, not an imputation of identities")
    if job.status == JobStatus.succeeded:
        return dict(job.result or {}), ""
    if job.status in (JobStatus.failed, JobStatus.cancelled):
        why = (job.message or "").removeprefix("failed: ")
        return None, f"Imputation job #{job.id} {job.status.value}: {why} Nothing of it was kept."
    return None, f"Imputation job #{job.id} {job.status.value}: {job.progress:.0%} {job.message or ''}".rstrip()


def cancel_uncertain(cat: Catalogue, job_id: int, *, user: str) -> str:
    """Cancel the imputation job (nothing of it is stored); what happened, in words."""
    return cancel_job(cat, CancelJobRequest(job_id=job_id, user=user)).message


def with_answer(decided: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, Any]:
    """The decided summary with an imputation job's answer as its ``uncertain`` basis (for the tables below)."""
    return {**decided, "identities": "uncertain", "estimates_decided": decided["estimates"],
            "estimates": answer["estimates"], "share_from_identification": answer["share_from_identification"],
            "provenance_counts": answer["provenance_counts"], "draws": answer["draws"],
            "review_first": answer["priority"]}


def informative_first(cat: Catalogue, queue_ids: list[int]) -> tuple[list[int], str]:
    """A Match review queue with the annotations the newest finished imputation job ranked most informative for
    the population estimate first (in its order, each event's annotations together), the rest after as they were;
    and what the curator reads about it."""
    answer = None
    for job in queue.list_jobs(cat, limit=20, kind=UNCERTAIN_JOB):
        if job.status == JobStatus.succeeded:
            answer = dict(job.result or {})
            break
    if not answer or not answer.get("priority"):
        return list(queue_ids), ("No estimate with identification uncertainty has been computed yet: run it in the "
                                 "Population tab (Whose identities), then choose this order again.")
    pending = set(queue_ids)
    first = [a for row in answer["priority"] for a in row["annotation_ids"] if a in pending]
    first = list(dict.fromkeys(first))
    rest = [i for i in queue_ids if i not in set(first)]
    return first + rest, (f"Most informative for the {answer['species']} population estimate first: {len(first)} "
                          "animal(s) ranked by how much their review would narrow its interval, then the rest.")


# --------------------------------------------------------------------------- words and tables


def _interval(low: Any, high: Any) -> str:
    if low is None and high is None:
        return "—"
    return f"{ps._fmt(low)} – {ps._fmt(high)}"


def side_by_side_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """Rows of :data:`SIDE_BY_SIDE_HEADERS`: each model as decided and on the summary's basis."""
    rows = []
    for dec, basis in zip(summary["estimates_decided"], summary["estimates"]):
        share = summary.get("share_from_identification", {}).get(dec["model"])
        rows.append([dec["model"],
                     ps._fmt(dec["N"]) if dec.get("estimable", True) else "no estimate",
                     _interval(dec["ci_low"], dec["ci_high"]),
                     ps._fmt(basis["N"]) if basis.get("estimable", True) else "no estimate",
                     _interval(basis["ci_low"], basis["ci_high"]),
                     f"{100 * share:.0f}%" if share is not None else "—"])
    return rows


def basis_lines(summary: Mapping[str, Any]) -> list[str]:
    """The CLI's words on the basis: where the identities come from and the estimates side by side."""
    return basis_table_lines(summary, headers=SIDE_BY_SIDE_HEADERS, confirmed_header=CONFIRMED_HEADER,
                             rows=side_by_side_rows(summary) if summary["identities"] != "decided" else [])


def _provenance_counts(counts: Mapping[str, int]) -> str:
    return (f"{counts['curator']} annotation(s) identified by a curator, {counts['machine']} by a machine, "
            f"{counts['unreviewed']} unreviewed.")


def provenance_line(answer: Mapping[str, Any]) -> str:
    """Where the identities of a population or density answer come from, in one sentence."""
    return f"Identities {BASIS_WORDS[answer['identities']]}: {_provenance_counts(answer['provenance_counts'])}"


def basis_headers(identities: str, headers: Sequence[str], *, confirmed_header: str) -> list[str]:
    """A side-by-side table's headers for the basis: its fourth column names the confirmed basis when it is that."""
    out = list(headers)
    if identities == "confirmed":
        out[3] = confirmed_header
    return out


def basis_table_lines(answer: Mapping[str, Any], *, headers: Sequence[str], confirmed_header: str,
                      rows: list[list[str]]) -> list[str]:
    """Where the identities come from, then (on the confirmed or uncertain basis) ``rows`` as a plain-text table:
    the words the population and density commands share."""
    lines = [provenance_line(answer)]
    if answer["identities"] == "decided":
        return lines
    headers = basis_headers(answer["identities"], headers, confirmed_header=confirmed_header)
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    lines += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
    return lines


def priority_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """Rows of :data:`PRIORITY_HEADERS`."""
    return [[", ".join(f"#{a}" for a in r["annotation_ids"]), r["provenance"],
             ", ".join(map(str, r["occasions"])), f"{r['expected_narrowing']:.2f}", r["most_likely"] or "—",
             _percent(r.get("probability")), _percent(r.get("p_new"))]
            for r in report["priority"]]


def _percent(p: float | None) -> str:
    """A probability as the review list shows it; "—" where none is shown (not calibrated, or withheld)."""
    return f"{100 * p:.0f}%" if p is not None else "—"


def provenance_text(summary: Mapping[str, Any]) -> str:
    """One sentence: how many annotations each kind of identity has."""
    return f"Identities: {_provenance_counts(summary['provenance_counts'])}"
