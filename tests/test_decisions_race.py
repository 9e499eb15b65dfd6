"""Race-free decisions: simultaneous curators on one photo -- exactly one wins, the others are told, and
nothing is half-applied (no empty individual)."""

from __future__ import annotations

import threading

import pytest

from db import catalogue as ops
from db.catalogue import ConflictError
from db.matching import current_decision_version, record_decision, undo_decision
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


def _count(cat, model) -> int:
    with cat.unit_of_work() as s:
        return s.query(model).count()


@pytest.mark.parametrize("decision", ["new", "same"])
def test_simultaneous_decisions_exactly_one_wins(cat, decision):
    n_individuals = _count(cat, Individual)
    seen = current_decision_version(cat, 1)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def curator(k: int) -> None:
        barrier.wait()
        try:
            record_decision(cat, query_image_id=1, decision=decision, user=f"curator{k}", seen_version=seen,
                            candidate_image_id=2 if decision == "same" else None)
            result = "won"
        except ConflictError as exc:
            result = "told: " + str(exc)
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=curator, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
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

    def at_once(*args: str) -> list[subprocess.CompletedProcess]:
        procs = [subprocess.Popen([sys.executable, "-m", "app.cli", "--data-dir", d, "--user", f"c{k}", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(4)]
        return [subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate()) for p in procs]

    runs = at_once("decide", "1", "new")
    assert sorted(r.returncode for r in runs) == [0, 1, 1, 1], [(r.stdout, r.stderr) for r in runs]
    assert all("decided" in r.stderr or "standing decision" in r.stderr for r in runs if r.returncode)
    assert _count(cat, MatchDecision) == 1 and _count(cat, Individual) == n_individuals + 1
    # --replace re-decides on purpose: each call that wins adds exactly one decision, the others are told
    runs = at_once("decide", "1", "same", "--candidate", "2", "--replace")
    won = sum(r.returncode == 0 for r in runs)
    assert won >= 1 and all("decided" in r.stderr for r in runs if r.returncode), [r.stderr for r in runs]
    assert _count(cat, MatchDecision) == 1 + won
    from app.cli import main as cli

    assert cli(["--data-dir", d, "decide", "1", "unsure", "--candidate", "2"]) == 1  # no --replace: refused
