"""Comparing two models: symmetric effects, corrected p-values, verdict, CLI --json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.cli import main as cli
from db.identify.compare import compare, difference_figure, per_query_values
from jobs import queue
from tests.synthetic_reid import synthetic_catalogue


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    cat, _ = synthetic_catalogue(tmp_path_factory.mktemp("compare"), individuals=10, photos_each=6, seed=8)
    job = queue.submit_and_run(cat, "train", {"benchmark": "syn", "head": "supcon", "epochs": 4, "views": 4,
                                             "steps_per_epoch": 3, "diagnose": False, "name": "cmp-a"})
    assert job.status.value == "succeeded", job.message
    yield cat
    cat.close()


def test_per_query_values_follow_the_benchmark_protocol(two_models):
    v = per_query_values(two_models, "efficientnet_lite0", "syn")
    ap, hit1, hit5 = v["map"], v["cmc1"], v["cmc5"]
    ok = ~np.isnan(ap)
    assert ok.sum() > 0 and np.all((ap[ok] >= 0) & (ap[ok] <= 1))
    assert np.all(hit1[ok] <= hit5[ok])  # first place is within the top 5
    assert np.all(np.isnan(hit1) == np.isnan(ap))
    ev = __import__("db.identify.evaluation", fromlist=["run_evaluation"]).run_evaluation(
        two_models, backbone="efficientnet_lite0", benchmark="syn", store=False)
    assert np.nanmean(ap) == pytest.approx(ev["map_micro"], abs=1e-9)
    assert np.nanmean(hit1) == pytest.approx(ev["cmc_micro"]["1"], abs=1e-9)


def test_compare_is_antisymmetric_and_corrected(two_models):
    ab = compare(two_models, "cmp-a", "efficientnet_lite0", benchmark="syn")
    ba = compare(two_models, "efficientnet_lite0", "cmp-a", benchmark="syn")
    for ep in ("map", "cmc1", "cmc5"):
        e, f = ab["endpoints"][ep], ba["endpoints"][ep]
        assert e["mean_diff"] == pytest.approx(-f["mean_diff"])
        assert e["p_combined"] == pytest.approx(f["p_combined"])
        assert e["ci_low"] <= e["mean_diff"] <= e["ci_high"]
        assert e["p_holm"] >= e["p_combined"] - 1e-12  # correction never lowers a p-value
        assert e["n_a_better"] == f["n_b_better"]
    assert ab["verdict"] == ab["endpoints"]["cmc1"]["verdict"] and "CMC@1" in ab["verdict"]
    assert len(ab["ap_differences"]) == ab["endpoints"]["map"]["n_queries"]
    fig = difference_figure(ab)
    assert fig.data[0].type == "histogram"
    labels = [a.text for a in fig.layout.annotations]
    assert labels == ["mean", "95% CI"]  # the upper CI line carries no stray label
    with pytest.raises(ValueError, match="two different models"):
        compare(two_models, "cmp-a", "cmp-a", benchmark="syn")
    with pytest.raises(ValueError, match="as many B models"):
        compare(two_models, ["cmp-a", "efficientnet_lite0"], ["efficientnet_lite0"], benchmark="syn")


def test_compare_cli_json(two_models, capsys):
    assert cli(["--data-dir", str(two_models.data_dir), "compare", "cmp-a", "efficientnet_lite0",
                "--benchmark", "syn", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res["endpoints"]) == {"map", "cmc1", "cmc5"}
    for e in res["endpoints"].values():
        assert {"mean_diff", "ci_low", "ci_high", "p_combined", "p_holm", "significant", "verdict"} <= set(e)


def test_compare_gives_the_leaderboards_identity_balanced_figures_too(two_models):
    """Compare tests per-query values (micro); the leaderboard shows identity-balanced ones (macro). Both are
    reported, and the macro ones equal the evaluation's (issue 14, item 8: 0.474 vs 0.400 for one model)."""
    ev = __import__("db.identify.evaluation", fromlist=["run_evaluation"]).run_evaluation(
        two_models, backbone="efficientnet_lite0", benchmark="syn", store=False)
    res = compare(two_models, "cmp-a", "efficientnet_lite0", benchmark="syn")
    e_map, e_cmc1 = res["endpoints"]["map"], res["endpoints"]["cmc1"]
    assert e_map["macro_b"] == pytest.approx(ev["map_macro"], abs=1e-9)
    assert e_cmc1["macro_b"] == pytest.approx(ev["cmc_macro"]["1"], abs=1e-9)
    assert e_map["mean_b"] == pytest.approx(ev["map_micro"], abs=1e-9)
