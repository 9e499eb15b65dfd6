"""The Jobs tab and `rosette jobs` say where a job ran: on this machine's worker, or on a Ray cluster."""

from __future__ import annotations

from app.tabs.jobs import jobs_html
from jobs.actions.jobs import JobRow, ran_on_words


def test_ran_on_words():
    assert ran_on_words(None) == ""
    assert ran_on_words("ray:10.0.0.5:6379") == "Ray (10.0.0.5:6379)"
    assert ran_on_words("ray:") == "Ray (local cluster)"
    assert ran_on_words("curator-laptop:4242") == "local (curator-laptop)"


def test_the_jobs_table_has_a_ran_on_column():
    row = JobRow(id=7, kind="embed", status="running", progress=0.5, message="embedding", params="species_id=1",
                 created="2026-11-24 01:00", duration="3 s", can_cancel=True, can_retry=False, error=None,
                 ran_on=ran_on_words("ray:127.0.0.1:6379"))
    page = jobs_html([row])
    assert "<th>Ran on</th>" in page
    assert "<td class='ran-on'>Ray (127.0.0.1:6379)</td>" in page
