"""Race-free decisions: simultaneous curators on one photo -- exactly one wins, the others are told, and
nothing is half-applied (no empty individual)."""

from __future__ import annotations

import threading

import pytest

from db import catalogue as ops
from db.catalogue import ConflictError
from db.identify.matching import current_decision_version, record_decision, undo_decision
from db.models import Image, Individual, MatchDecision
from db.session import open_catalogue


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    with c.unit_of_work() as s:
        ind = ops.create_individual(s, "Amber", user="ana")
        for i in range(3):
            s.add(Image(content_hash=f"h{i}", original_name=f"p{i}.jpg", blob_path=f"images/h{i}.jpg", format="JPEG",
                        mode="RGB", width=4, height=4, size_bytes=1, individual_id=ind.id if i else None))
        s.commit()
    yield c
    c.close()


def at_once(n: int, act) -> list[str]:
    """Run ``act(k)`` for k < n on n threads released together; each outcome is what it returned, or
    "told: <message>" when it was refused with a ConflictError."""
    barrier = threading.Barrier(n)
    outcomes: list[str] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        barrier.wait()
        try:
            result = act(k)
        except ConflictError as exc:
            result = "told: " + str(exc)
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes


def _count(cat, model) -> int:
    with cat.unit_of_work() as s:
        return s.query(model).count()


@pytest.mark.parametrize("decision", ["new", "same"])
def test_simultaneous_decisions_exactly_one_wins(cat, decision):
    n_individuals = _count(cat, Individual)
    seen = current_decision_version(cat, 1)

    def curator(k: int) -> str:
        record_decision(cat, query_image_id=1, decision=decision, user=f"curator{k}", seen_version=seen,
                        candidate_image_id=2 if decision == "same" else None)
        return "won"

    outcomes = at_once(8, curator)
    assert outcomes.count("won") == 1, outcomes
    from db.audit import verify_chain

    assert verify_chain(cat).ok  # eight writers at once never fork the audit trail's hash chain
    assert all(o.startswith("told: this photo was decided by curator") for o in outcomes if o != "won")
    assert _count(cat, MatchDecision) == 1
    assert _count(cat, Individual) == n_individuals + (1 if decision == "new" else 0)  # no empty individual
    assert current_decision_version(cat, 1) == seen + 1


def test_a_decision_on_a_stale_screen_is_refused_and_undo_moves_the_version(cat):
    v0 = current_decision_version(cat, 1)
    record_decision(cat, query_image_id=1, decision="unsure", user="ana", seen_version=v0)
    with pytest.raises(ConflictError):
        record_decision(cat, query_image_id=1, decision="new", user="ben", seen_version=v0)
    undo_decision(cat, user="ana")
    assert current_decision_version(cat, 1) == v0 + 2
    with pytest.raises(ConflictError):  # the screen ben opened before the undo is stale too
        record_decision(cat, query_image_id=1, decision="new", user="ben", seen_version=v0 + 1)
    record_decision(cat, query_image_id=1, decision="new", user="ben", seen_version=v0 + 2)


def test_cli_decide_goes_through_the_same_check(cat, capsys):
    from app.cli import main as cli

    d = str(cat.data_dir)
    assert cli(["--data-dir", d, "decide", "1", "new"]) == 0
    assert cli(["--data-dir", d, "decide", "999", "new"]) == 1
    assert "no image with id 999" in capsys.readouterr().err


def test_cli_decisions_at_once_exactly_one_wins(cat):
    """Four `rosette decide 1 new` (then four `decide 1 same --replace`) started at once, as separate
    processes: exactly one of each is recorded, the others are told, and no empty individual is left."""
    import subprocess
    import sys

    d = str(cat.data_dir)
    n_individuals = _count(cat, Individual)

    def cli_at_once(*args: str) -> list[subprocess.CompletedProcess]:
        procs = [subprocess.Popen([sys.executable, "-m", "app.cli", "--data-dir", d, "--user", f"c{k}", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(4)]
        return [subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate()) for p in procs]

    runs = cli_at_once("decide", "1", "new")
    assert sorted(r.returncode for r in runs) == [0, 1, 1, 1], [(r.stdout, r.stderr) for r in runs]
    assert all("decided" in r.stderr or "standing decision" in r.stderr for r in runs if r.returncode)
    assert _count(cat, MatchDecision) == 1 and _count(cat, Individual) == n_individuals + 1
    # --replace re-decides on purpose: each call that wins adds exactly one decision, the others are told
    runs = cli_at_once("decide", "1", "same", "--candidate", "2", "--replace")
    won = sum(r.returncode == 0 for r in runs)
    assert won >= 1 and all("decided" in r.stderr for r in runs if r.returncode), [r.stderr for r in runs]
    assert _count(cat, MatchDecision) == 1 + won
    from app.cli import main as cli

    assert cli(["--data-dir", d, "decide", "1", "unsure", "--candidate", "2"]) == 1  # no --replace: refused


def test_simultaneous_undo_undoes_the_change_once(cat):
    """Eight curators, each looking at the Catalogue tab, press "Undo last change" at once: the newest change
    is undone exactly once, the others are told it was already undone, and the change before it is left alone
    (issue 14, item 14). The button sends the change the page showed: a curator whose press arrives after
    another's undo has committed must not undo the change before it (the CI run of stop 18 did exactly that)."""
    from db.models import EventKind, IdentityEvent
    from jobs.actions.catalogue import last_change_id, undo
    from jobs.requests.catalogue import UndoRequest

    with cat.unit_of_work() as s:
        ops.rename_individual(s, 1, "Amber Two", user="ana")  # the change before: must survive
        s.commit()
    with cat.unit_of_work() as s:
        ops.rename_individual(s, 1, "Amber Three", user="ana")  # the newest change
        s.commit()
    shown = last_change_id(cat)

    def press(k: int) -> str:
        try:
            return undo(cat, UndoRequest(user=f"curator{k}", seen_event_id=shown)).message
        except ops.CatalogueError as exc:
            return f"told: {exc}"

    outcomes = at_once(8, press)
    assert sum(o.startswith("Undone") for o in outcomes) == 1, outcomes
    assert all("already undone" in o for o in outcomes if not o.startswith("Undone")), outcomes
    # a late press, long after the others, is told too: it does not reach for the change before
    assert "already undone by curator" in press(9)
    with cat.unit_of_work() as s:
        assert s.get(Individual, 1).name == "Amber Two"
        assert s.query(IdentityEvent).filter(IdentityEvent.kind == EventKind.undo).count() == 1


def test_undo_refuses_when_a_newer_change_came_since_the_page_was_shown(cat):
    """The page showed change A as the newest; someone made change B since: pressing Undo undoes nothing and
    names B, so the curator does not undo a change they have not seen."""
    from jobs.actions.catalogue import last_change_id, undo
    from jobs.requests.catalogue import UndoRequest

    with cat.unit_of_work() as s:
        ops.rename_individual(s, 1, "Amber Two", user="ana")
        s.commit()
    shown = last_change_id(cat)
    with cat.unit_of_work() as s:
        ops.rename_individual(s, 1, "Amber Three", user="bia")
        s.commit()
    with pytest.raises(ops.ConflictError, match=r"newer change .*renamed Amber Two to Amber Three by bia"):
        undo(cat, UndoRequest(user="cid", seen_event_id=shown))
    with cat.unit_of_work() as s:
        assert s.get(Individual, 1).name == "Amber Three"
    assert undo(cat, UndoRequest(user="cid", seen_event_id=last_change_id(cat))).message == "Undone: renamed Amber Two to Amber Three."
    with pytest.raises(ops.NotFoundError, match="no change #999"):
        undo(cat, UndoRequest(user="cid", seen_event_id=999))


def test_undo_last_change_after_a_new_individual_decision_undoes_the_decision(cat):
    """Undoing the change a "new individual" decision made also undoes the decision: the photo is back in
    review (no standing decision, unassigned), the empty individual is retired, and nothing is left to undo."""
    from db.identify.matching import standing_decision
    from jobs.actions.catalogue import undo
    from jobs.requests.catalogue import UndoRequest

    n_active = len([i for i in _individuals(cat) if i.active])
    dec = record_decision(cat, query_image_id=1, decision="new", user="ana", new_name="Newcomer")
    assert undo(cat, UndoRequest(user="ana")).message.startswith("Undone")
    with cat.unit_of_work() as s:
        assert s.get(MatchDecision, dec.id).undone_at is not None
        assert s.get(Image, 1).individual_id is None
    assert len([i for i in _individuals(cat) if i.active]) == n_active  # "Newcomer" retired, not left empty
    assert standing_decision(cat, 1)[1] is None  # no standing decision: the review queue shows it again
    with pytest.raises(Exception, match="nothing to undo"):
        undo_decision(cat, user="ana")
    record_decision(cat, query_image_id=1, decision="new", user="ben")  # the photo can be decided again


def _individuals(cat):
    with cat.unit_of_work() as s:
        return list(s.query(Individual))
