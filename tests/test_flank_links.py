"""The flank links the two-flank partial-identity fit suggests (jobs.actions.flank_links): suggestions from a stored
finished fit with their evidence in words, a confirmed link merged (the next study reads it as a known link), a
rejected one stored (the next study passes it to the sampler as a cannot-link pair, and a fit never links it), two
curators answering one pair, undo, and requests refused.

The catalogue is tests/test_partial_id_catalogue.py's: Lefty1 (left flank at S3 on day 2, S4 on day 5), Lefty2 (S5
day 1, S6 day 3), Righty1 (right flank at S4 day 2, S5 day 6), Righty2 (S6 day 4, S5 day 7), on a 3 x 2 grid of
stations 1 km apart (S1 S2 S3 on the first row, S4 S5 S6 above them), one occasion a day from June 1.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from app.cli import main as cli_main
from core.field.partial_id import flank_data
from db.catalogue import CatalogueError, ConflictError, NotFoundError
from db.field import flank_links as store
from db.field.partial_id_study import catalogue_flank_study
from db.models import FlankLinkDecision, FlankLinkKind, Individual, Job, JobStatus, utcnow
from db.session import open_catalogue
from jobs.actions import flank_links as fl
from jobs.actions import partial_id as pid
from jobs.actions.catalogue import undo
from jobs.actions.partial_id import add_link_evidence
from jobs.requests.catalogue import UndoRequest
from jobs.requests.flank_links import FlankLinkRequest, FlankLinkSuggestionsRequest, UndoFlankLinkRequest
from jobs.requests.partial_id import PartialIdRequest
from tests.test_partial_id_catalogue import JAGUAR, build_flank_catalogue


@pytest.fixture
def cat(tmp_path: Path):
    data_dir = tmp_path / "rosette-data"
    build_flank_catalogue(data_dir)
    catalogue = open_catalogue(data_dir)
    yield catalogue
    catalogue.close()


def _row(left: str, right: str, p: float, *, known: bool = False, **evidence: Any) -> dict[str, Any]:
    return {"left": left, "right": right, "probability": p, "known": known, **evidence}


def _store_fit(cat, rows: list[dict[str, Any]], *, refused: str | None = None, species: str = JAGUAR) -> int:
    """A finished ``flank_density`` job as the job kind stores it: the answer of ``partial_id_density``."""
    result = {"kind": "flanks", "refused": refused is not None, "reason": refused, "source": "catalogue",
              "catalogue": {"species": species, "occasion_days": 1.0}}
    if refused is None:
        result["link_probabilities"] = rows
    with cat.unit_of_work() as s:
        job = Job(kind="flank_density", status=JobStatus.succeeded, params={"species": species}, result=result,
                  finished_at=utcnow())
        s.add(job)
        s.commit()
        return job.id


def _ids(cat, *names: str) -> list[int]:
    with cat.unit_of_work() as s:
        return [s.query(Individual).filter_by(name=n).one().id for n in names]


FIT_ROWS = [
    _row("Lefty1", "Righty1", 0.82, distance_m=0.0, left_occasion=5, right_occasion=2),
    _row("Lefty2", "Righty2", 0.61, distance_m=412.4, left_occasion=3, right_occasion=4),
    _row("Lefty1", "Righty2", 0.04, distance_m=1000.0, left_occasion=2, right_occasion=4),  # under the floor
    _row("Linked1", "Linked1", 1.0, known=True),
    _row("Lefty2", "Gone", 0.3, distance_m=0.0, left_occasion=1, right_occasion=1),  # no such individual now
]


def test_each_pair_gets_the_closest_captures_worked_out_by_hand(cat):
    study = catalogue_flank_study(cat, species=JAGUAR)
    rows = [_row("Lefty1", "Righty1", 0.5), _row("Lefty2", "Righty2", 0.5), _row("Lefty2", "Righty1", 0.5),
            _row("Lefty1", "Righty2", 0.5)]
    add_link_evidence(rows, study.captures, study.stations)
    one, two, three, four = rows
    # Lefty1 and Righty1 were both photographed at S4 (on days 5 and 2)
    assert (one["distance_m"], one["left_station"], one["left_occasion"], one["right_occasion"]) == (0.0, "S4", 5, 2)
    # at the same station twice (S5 on days 1 and 7, S6 on days 3 and 4): the captures nearest in time
    assert (two["distance_m"], two["left_station"], two["left_occasion"], two["right_occasion"]) == (0.0, "S6", 3, 4)
    assert (three["left_station"], three["left_occasion"], three["right_occasion"]) == ("S5", 1, 6)
    # never at one station: the nearest two are a grid step apart (1 km, as UTM measures it)
    assert four["distance_m"] == pytest.approx(1000, abs=15) and four["left_station"] != four["right_station"]
    assert fl.evidence_words(one) == "seen at the same station on nights 5 and 2"
    assert fl.evidence_words({**four, "distance_m": 412.4}) == \
        f"seen 412 m apart on nights {four['left_occasion']} and {four['right_occasion']}"
    assert fl.evidence_words({**one, "right_occasion": 5}, 2.0) == "seen at the same station on occasion 5"


def test_suggestions_are_the_stored_fits_unknown_pairs_above_the_floor_with_their_sentence(cat):
    with pytest.raises(CatalogueError, match="no two-flank fit yet: run it in the Population tab"):
        fl.link_suggestions(cat, FlankLinkSuggestionsRequest(species=JAGUAR))
    job = _store_fit(cat, FIT_ROWS)
    got = fl.link_suggestions(cat, FlankLinkSuggestionsRequest(species=JAGUAR))
    assert got.job_id == job and [(x.left, x.right) for x in got.suggestions] == \
        [("Lefty1", "Righty1"), ("Lefty2", "Righty2")]
    assert got.suggestions[0].words == ("left-flank identity Lefty1 and right-flank identity Righty1: 0.82 "
                                        "probability the same animal (seen at the same station on nights 5 and 2)")
    assert got.suggestions[1].words.endswith("0.61 probability the same animal (seen 412 m apart on nights 3 and 4)")
    assert got.changed == 1 and got.answered == 0  # the pair naming an individual the catalogue lacks
    assert "spatial model only" in got.message and "not from the coat pattern" in got.message
    low = fl.link_suggestions(cat, FlankLinkSuggestionsRequest(species=JAGUAR, floor=0.01, limit=3))
    assert [(x.left, x.right) for x in low.suggestions][-1] == ("Lefty1", "Righty2")
    # another species' fit is not this one's; a newer fit that did not converge suggests nothing
    with pytest.raises(CatalogueError, match="no two-flank fit yet"):
        fl.link_suggestions(cat, FlankLinkSuggestionsRequest(species="Leopardus pardalis"))
    _store_fit(cat, [], refused="the chains disagree (R-hat of N 1.40, above 1.1)")
    with pytest.raises(CatalogueError, match=r"suggests no links: the chains disagree \(R-hat"):
        fl.link_suggestions(cat, FlankLinkSuggestionsRequest(species=JAGUAR))


def test_a_renamed_or_merged_individual_drops_its_pairs(cat):
    job = _store_fit(cat, [{**r, "left_individual_id": i, "right_individual_id": j}
                           for r, (i, j) in zip(FIT_ROWS[:2], [_ids(cat, "Lefty1", "Righty1"),
                                                               _ids(cat, "Lefty2", "Righty2")])])
    with cat.unit_of_work() as s:
        s.query(Individual).filter_by(name="Righty2").one().name = "Righty2b"
        s.commit()
    got = fl.link_suggestions(cat, FlankLinkSuggestionsRequest())
    assert got.job_id == job and [x.left for x in got.suggestions] == ["Lefty1"] and got.changed == 1


def test_confirm_merges_the_pair_and_the_next_study_has_the_link_and_undo_takes_it_back(cat):
    job = _store_fit(cat, FIT_ROWS)
    done = fl.confirm_link(cat, FlankLinkRequest("Lefty1", "Righty1", user="ana"))
    assert done.probability == 0.82 and done.job_id == job and done.merge_event_id is not None
    assert "Righty1 was merged into Lefty1" in done.message
    with cat.unit_of_work() as s:
        righty1 = s.query(Individual).filter_by(name="Righty1").one()
        assert not righty1.active and righty1.merged_into_id == _ids(cat, "Lefty1")[0]
        row = s.query(FlankLinkDecision).one()
        assert (row.decision, row.user, row.probability, row.job_id) == (FlankLinkKind.linked, "ana", 0.82, job)
    study = catalogue_flank_study(cat, species=JAGUAR)
    assert "Lefty1" in study.known_links and "Lefty1" not in study.left_identities
    assert "Righty1" not in study.right_identities
    # a second curator answering the same pair is told who answered, in one sentence, and nothing changes
    with pytest.raises(ConflictError, match=r"^ana already linked Lefty1 and Righty1 \(at .*\); undo that answer"):
        fl.reject_link(cat, FlankLinkRequest("Lefty1", "Righty1", user="ben"))
    got = fl.link_suggestions(cat, FlankLinkSuggestionsRequest(species=JAGUAR))
    assert [(x.left, x.right) for x in got.suggestions] == [("Lefty2", "Righty2")] and got.answered == 1
    undone = fl.undo_link(cat, UndoFlankLinkRequest("Lefty1", "Righty1", user="ana"))
    assert "Righty1 is its own individual again" in undone.message
    study = catalogue_flank_study(cat, species=JAGUAR)
    assert "Lefty1" in study.left_identities and "Righty1" in study.right_identities
    assert [x.left for x in fl.link_suggestions(cat, FlankLinkSuggestionsRequest()).suggestions][0] == "Lefty1"
    with pytest.raises(NotFoundError, match="no standing answer"):
        fl.undo_link(cat, UndoFlankLinkRequest("Lefty1", "Righty1", user="ben"))


def test_a_merge_undone_elsewhere_stops_the_answer_standing(cat):
    _store_fit(cat, FIT_ROWS)
    done = fl.confirm_link(cat, FlankLinkRequest("Lefty1", "Righty1", user="ana"))
    undo(cat, UndoRequest(user="ana", event_id=done.merge_event_id))  # the Catalogue tab's Undo of the merge
    got = fl.link_suggestions(cat, FlankLinkSuggestionsRequest())
    assert ("Lefty1", "Righty1") in [(x.left, x.right) for x in got.suggestions] and got.answered == 0
    fl.reject_link(cat, FlankLinkRequest("Lefty1", "Righty1", user="ben"))  # it may be answered again


def test_reject_is_stored_and_the_next_fit_never_links_the_pair(cat, monkeypatch):
    job = _store_fit(cat, FIT_ROWS)
    done = fl.reject_link(cat, FlankLinkRequest("Lefty2", "Righty2", user="ana", job_id=job))
    assert done.probability == 0.61 and "never links them" in done.message
    with pytest.raises(ConflictError, match="ana already rejected Lefty2 and Righty2"):
        fl.confirm_link(cat, FlankLinkRequest("Lefty2", "Righty2", user="ben"))
    with cat.unit_of_work() as s:
        assert s.query(Individual).filter_by(name="Righty2").one().active  # nothing merged
    study = catalogue_flank_study(cat, species=JAGUAR)
    assert study.cannot_link == (("Lefty2", "Righty2"),)
    data = flank_data(study.captures, study.stations, study.links, cannot_link=study.cannot_link)
    assert [(data.left_names[a], data.right_names[b]) for a, b in data.cannot_link] == [("Lefty2", "Righty2")]
    # a short fit on the catalogue: the pair is never drawn together, and every row carries its evidence
    fit = pid.fit_partial_id
    monkeypatch.setattr(pid, "fit_partial_id", lambda *a, **k: fit(*a, **{**k, "rhat_limit": math.inf, "min_ess": 0}))
    answer = pid.partial_id_density(PartialIdRequest(species=JAGUAR, chains=1, iterations=300), cat=cat)
    pairs = {(r["left"], r["right"]): r for r in answer["link_probabilities"]}
    assert ("Lefty2", "Righty2") not in pairs and ("Lefty1", "Righty1") in pairs
    assert answer["catalogue"]["rejected_links"] == [["Lefty2", "Righty2"]]
    l1r1 = pairs[("Lefty1", "Righty1")]
    assert (l1r1["distance_m"], l1r1["left_occasion"], l1r1["right_occasion"]) == (0.0, 5, 2)
    assert (l1r1["left_individual_id"], l1r1["right_individual_id"]) == tuple(_ids(cat, "Lefty1", "Righty1"))
    fl.undo_link(cat, UndoFlankLinkRequest("Lefty2", "Righty2", user="ana"))
    assert catalogue_flank_study(cat, species=JAGUAR).cannot_link == ()


@pytest.mark.parametrize("make, words", [
    (lambda: FlankLinkRequest("", "Righty1", user="ana"), "Choose a suggested pair first"),
    (lambda: FlankLinkRequest("Lefty1", "Lefty1", user="ana"), "is one individual"),
    (lambda: FlankLinkRequest("Lefty1", "Righty1", user="ana", job_id="x"), "must be a number"),
    (lambda: FlankLinkSuggestionsRequest(floor=1.5), "from 0 to under 1"),
    (lambda: FlankLinkSuggestionsRequest(limit=0), "must be 1 to"),
    (lambda: UndoFlankLinkRequest(None, "Righty1", user="ana"), "no left-flank individual"),
])
def test_bad_requests_are_refused_when_made(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_pairs_that_are_no_flank_link_and_unsigned_answers_are_refused(cat):
    with pytest.raises(CatalogueError, match="Linked1 is no left-flank identity .*left and right flank"):
        fl.reject_link(cat, FlankLinkRequest("Linked1", "Righty1", user="ana"))
    with pytest.raises(CatalogueError, match=r"Righty1 is no left-flank identity \(its photos show right flank"):
        fl.reject_link(cat, FlankLinkRequest("Righty1", "Lefty1", user="ana"))
    with pytest.raises(NotFoundError, match="no individual named 'Nobody'"):
        fl.confirm_link(cat, FlankLinkRequest("Nobody", "Righty1", user="ana"))
    with pytest.raises(ValueError, match="sign in first"):
        fl.reject_link(cat, FlankLinkRequest("Lefty1", "Righty1", user=""))
    with cat.unit_of_work() as s:
        assert s.query(FlankLinkDecision).count() == 0


def test_the_command_lists_confirms_rejects_and_undoes(cat, capsys):
    _store_fit(cat, FIT_ROWS)
    base = ["--data-dir", str(cat.data_dir), "--user", "ana", "flank-links"]
    assert cli_main([*base, "list"]) == 0
    out = capsys.readouterr().out
    assert "left-flank identity Lefty1 and right-flank identity Righty1: 0.82 probability the same animal" in out
    assert "spatial model only" in out
    assert cli_main([*base, "reject", "Lefty2", "Righty2"]) == 0
    assert "not the same animal" in capsys.readouterr().out
    assert cli_main([*base, "reject", "Lefty2", "Righty2"]) == 1
    assert "ana already rejected Lefty2 and Righty2" in capsys.readouterr().err
    assert cli_main([*base, "confirm", "Lefty1", "Righty1"]) == 0
    assert "Righty1 was merged into Lefty1" in capsys.readouterr().out
    assert cli_main([*base, "list"]) == 0
    assert "0 flank links suggested" in capsys.readouterr().out
    assert cli_main([*base, "undo", "Lefty2", "Righty2"]) == 0
    assert "may link Lefty2 and Righty2 again" in capsys.readouterr().out


def test_an_answer_committed_between_the_check_and_the_write_is_a_conflict_and_undoes_the_merge(cat, monkeypatch):
    """Two curators at once: ben's answer commits after ana's checks saw none; the standing-answer index refuses
    ana's row, her merge is rolled back with it, and she reads who answered."""
    _store_fit(cat, FIT_ROWS)
    left, right = _ids(cat, "Lefty1", "Righty1")
    with cat.unit_of_work() as s:
        s.add(FlankLinkDecision(left_individual_id=left, right_individual_id=right, decision=FlankLinkKind.rejected,
                                user="ben", created_at=utcnow()))
        s.commit()
    real, calls = store.standing_answer, []

    def unseen_at_first(session, a, b):
        calls.append((a, b))
        return None if len(calls) <= 2 else real(session, a, b)  # the service's check and the store's

    monkeypatch.setattr(store, "standing_answer", unseen_at_first)
    with pytest.raises(ConflictError, match="ben already rejected Lefty1 and Righty1"):
        fl.confirm_link(cat, FlankLinkRequest("Lefty1", "Righty1", user="ana"))
    with cat.unit_of_work() as s:
        assert s.get(Individual, right).active and s.query(FlankLinkDecision).count() == 1
