"""Issue 24 item 5: per-flank figures (``rosette eval --flank any|same|cross``): each query's gallery restricted to
its own flank or to the other one, stored with the evaluation and shown as leaderboard columns."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.cli import main as cli
from core.inspect.diagnostics import flank_protocols
from core.identify.evaluation import evaluate_embeddings, flank_retrieval
from core.metrics import all_vs_all_metrics, all_vs_all_valid, retrieval_metrics
from core.similarity import pairwise_scores
from jobs.requests.benchmarks import EvaluateRequest
from tests.synthetic_reid import synthetic_catalogue

# Six photos: three of A (0 left, 1 right, 2 left, 5 front), two of B (3 left, 4 right). Symmetric scores:
LABELS = ["A", "A", "A", "B", "B", "A"]
FLANKS = ["left", "right", "left", "left", "right", "front"]
S = {(0, 1): .5, (0, 2): .6, (0, 3): .7, (0, 4): .8, (0, 5): .1, (1, 2): .2, (1, 3): .3, (1, 4): .15, (1, 5): .1,
     (2, 3): .4, (2, 4): .1, (2, 5): .05, (3, 4): .25, (3, 5): .0, (4, 5): .0}


def hand_matrix() -> np.ndarray:
    sim = np.eye(6)
    for (i, j), v in S.items():
        sim[i, j] = sim[j, i] = v
    return sim


def test_a_case_worked_out_by_hand():
    sim = hand_matrix()
    # same flank (left ranks left, right ranks right; photo 5, a front view, is neither query nor candidate):
    #   q0 (A, left): gallery 2 (A, .6), 3 (B, .7) -> 3, 2: the positive at rank 2 -> AP 1/2, first hit 2
    #   q2 (A, left): gallery 0 (A, .6), 3 (B, .4) -> AP 1, first hit 1
    #   q3 (B, left): gallery 0, 2 are both A: no positive, left out; q1 (A, right) and q4 (B, right) rank only
    #   each other (A vs B): left out; q5 (front) left out
    #   -> micro (1/2 + 1) / 2 = 3/4; macro: A's mean 3/4 alone = 3/4; CMC@1 1/2
    same = flank_retrieval(sim, LABELS, FLANKS, flank="same")
    assert same.n_queries == 2 and list(same.query_index) == [0, 2]
    assert same.ap.tolist() == pytest.approx([1 / 2, 1])
    assert same.map_micro == pytest.approx(3 / 4) and same.map_macro == pytest.approx(3 / 4)
    assert same.cmc_micro[1] == pytest.approx(1 / 2)
    # cross flank (left ranks right and right ranks left):
    #   q0 (A, left): gallery 1 (A, .5), 4 (B, .8) -> 4, 1: AP 1/2, first hit 2
    #   q1 (A, right): gallery 0 (A, .5), 2 (A, .2), 3 (B, .3) -> 0, 3, 2: AP (1/1 + 2/3) / 2 = 5/6, first hit 1
    #   q2 (A, left): gallery 1 (A, .2), 4 (B, .1) -> AP 1, first hit 1
    #   q3 (B, left): gallery 1 (A, .3), 4 (B, .25) -> 1, 4: AP 1/2, first hit 2
    #   q4 (B, right): gallery 0 (A, .8), 2 (A, .1), 3 (B, .25) -> 0, 3, 2: AP 1/2, first hit 2
    #   -> micro (1/2 + 5/6 + 1 + 1/2 + 1/2) / 5 = 2/3; macro: A (1/2 + 5/6 + 1) / 3 = 7/9, B 1/2 -> 23/36;
    #      CMC@1 micro 2/5
    cross = flank_retrieval(sim, LABELS, FLANKS, flank="cross")
    assert list(cross.query_index) == [0, 1, 2, 3, 4]
    assert cross.ap.tolist() == pytest.approx([1 / 2, 5 / 6, 1, 1 / 2, 1 / 2])
    assert cross.map_micro == pytest.approx(2 / 3) and cross.map_macro == pytest.approx(23 / 36)
    assert cross.cmc_micro[1] == pytest.approx(2 / 5)
    # the flank diagnostic computes the same two protocols (one version of the masks)
    diag = flank_protocols(sim, LABELS, FLANKS)
    assert diag["within_flank"] == same.to_dict() and diag["cross_flank"] == cross.to_dict()
    # any: every other photo, exactly today's all-vs-all figures
    assert flank_retrieval(sim, LABELS, FLANKS, flank="any").to_dict() == all_vs_all_metrics(sim, LABELS).to_dict()
    with pytest.raises(ValueError, match="unknown flank setting 'left'"):
        flank_retrieval(sim, LABELS, FLANKS, flank="left")


def _set(seed: int = 0, n: int = 24):
    rng = np.random.default_rng(seed)
    labels = [f"id{i % 6}" for i in range(n)]
    flanks = [("left", "right", "left", "right", "unknown")[i % 5] for i in range(n)]
    sightings = [f"s{i // 2}" for i in range(n)]
    centres = rng.normal(size=(6, 16))
    emb = np.stack([centres[i % 6] + 1.5 * rng.normal(size=16) for i in range(n)])
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), labels, flanks, sightings


def test_any_is_today_and_a_gallery_permutation_changes_nothing():
    emb, labels, flanks, sightings = _set()
    today_sim = pairwise_scores(emb, emb)  # what evaluate_embeddings did before --flank
    valid = all_vs_all_valid(len(labels), sightings=sightings)
    today = retrieval_metrics(today_sim, labels, labels, valid=valid).to_dict()
    out = evaluate_embeddings(emb, labels, sightings)  # flank defaults to any
    assert out["flank"] == "any" and {k: out[k] for k in today} == today
    assert out["with_same_sighting"] == all_vs_all_metrics(today_sim, labels, exclude_same_sighting=False).to_dict()
    for flank in ("same", "cross"):
        res = evaluate_embeddings(emb, labels, sightings, flanks=flanks, flank=flank)
        assert res["flank"] == flank and res["flank_counts"] == {"left": 10, "right": 10, "no_side": 4}
        assert 0 < res["n_queries"] <= 20
        perm = np.random.default_rng(1).permutation(len(labels))
        again = evaluate_embeddings(emb[perm], [labels[i] for i in perm], [sightings[i] for i in perm],
                                    flanks=[flanks[i] for i in perm], flank=flank)
        assert 0 < res["map_macro"] < 1
        for key in ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "with_same_sighting"):
            assert json.dumps(again[key]) == json.dumps(res[key]) or again[key] == pytest.approx(res[key])
        assert {k: again[k] for k in ("n_queries", "n_identities", "flank", "flank_counts")} == {
            k: res[k] for k in ("n_queries", "n_identities", "flank", "flank_counts")}
    with pytest.raises(ValueError, match="needs the flank of every photo"):
        evaluate_embeddings(emb, labels, sightings, flank="same")
    with pytest.raises(ValueError, match="unknown flank setting"):
        EvaluateRequest(benchmark="b", flank="left")


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    cat, _ = synthetic_catalogue(tmp_path_factory.mktemp("flank"), individuals=6, photos_each=4, seed=8,
                                 test_fraction=0.5)
    yield cat
    cat.close()


def test_eval_flank_is_stored_and_fills_the_leaderboard_columns(syn, capsys):
    from db.inspect.leaderboard import leaderboard
    from jobs.actions.benchmarks import evaluation_rows
    from jobs.actions.models import leaderboard_html

    got = {}
    for flank in ("any", "same", "cross"):
        args = ["--data-dir", str(syn.data_dir), "eval", "--backbone", "efficientnet_lite0", "--benchmark", "syn",
                "--json"]
        assert cli(args + ([] if flank == "any" else ["--flank", flank])) == 0
        got[flank] = json.loads(capsys.readouterr().out)
        assert got[flank]["flank"] == flank
    assert got["same"]["flank_counts"]["no_side"] == 0 and got["any"]["n_queries"] >= got["same"]["n_queries"]
    (row,) = leaderboard(syn, benchmark="syn")
    assert row["map_macro"] == got["any"]["map_macro"]  # the headline stays the every-flank figure
    assert row["map_same_flank"] == got["same"]["map_macro"]
    assert row["map_cross_flank"] == got["cross"]["map_macro"]
    html = leaderboard_html([row])
    assert "Same-flank mAP" in html and "Cross-flank mAP" in html and f"{row['map_cross_flank']:.3f}" in html
    assert [r.flank for r in evaluation_rows(syn, benchmark="syn")] == ["cross", "same", "any"]
    # the text output says what the flank setting leaves out
    assert cli(["--data-dir", str(syn.data_dir), "eval", "--backbone", "efficientnet_lite0", "--benchmark", "syn",
                "--flank", "cross"]) == 0
    assert "the other flank only" in capsys.readouterr().out
