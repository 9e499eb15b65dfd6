"""A stored fused pipeline keeps its calibration (issue 24, item 1): evaluating it by name on any benchmark -- a
test-only one of new animals included -- uses the calibration it was built with, unchanged, and says what it
rests on; only building calibrates, on the benchmark's own train split or, with ``--calibrate-on``, another's.
Synthetic spotted animals (the helpers of tests/test_spots.py), one small catalogue per module."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from PIL import Image as PILImage

from app.cli import main as cli
from jobs.actions.spots import SpotEvaluationRequest, evaluate_spots
from tests.test_spots import spot_photo, spotted_animal

SEEN, NEW = "seen", "new"  # an identity-split benchmark; a test-only one of other animals
SEEN_ANIMALS, NEW_ANIMALS, PHOTOS_EACH = 8, 4, 4
PIPELINE = "efficientnet_lite0+sift+lnbnn-k10"


def _manifest(path, rows) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["filename", "identity", "flank", "sighting"])
        writer.writeheader()
        writer.writerows(rows)


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """(catalogue, data dir): spotted animals, the benchmark ``seen`` (half its animals in a train split) and the
    test-only benchmark ``new`` of animals ``seen`` never shows."""
    from db.identify.benchmarks import create_benchmark
    from db.io.ingest import ingest_path
    from db.session import open_catalogue

    root = tmp_path_factory.mktemp("pipeline-calibration")
    photos = root / "photos"
    photos.mkdir()
    rng = np.random.default_rng(1)
    rows = []
    for i in range(SEEN_ANIMALS + NEW_ANIMALS):
        coat = spot_photo(2000 + i, size=(130, 160), n_spots=40)
        for j in range(PHOTOS_EACH):
            rgb, mask = spotted_animal(coat, rng)
            img = PILImage.fromarray(rgb).convert("RGBA")
            img.putalpha(PILImage.fromarray(mask.astype(np.uint8) * 255))
            name = f"a{i:02d}_{j}.png"
            img.save(photos / name)
            rows.append({"filename": name, "identity": f"a{i:02d}", "flank": "left", "sighting": f"a{i:02d}-s{j}"})
    _manifest(photos / "all.csv", rows)
    _manifest(photos / "seen.csv", rows[:SEEN_ANIMALS * PHOTOS_EACH])
    _manifest(photos / "new.csv", rows[SEEN_ANIMALS * PHOTOS_EACH:])
    cat = open_catalogue(root / "data")
    ingest_path(cat, photos / "all.csv", format="manifest", user="tester")
    create_benchmark(cat, SEEN, manifest=photos / "seen.csv", split="identity", test_fraction=0.5, seed=0)
    create_benchmark(cat, NEW, manifest=photos / "new.csv", split="test-only")
    return cat, str(root / "data")


@pytest.fixture(scope="module")
def fused_log():
    """Every fused score matrix db.identify.spots computes while the module runs, in order."""
    import db.identify.spots

    log: list[np.ndarray] = []
    original = db.identify.spots.fuse_scores

    def recording(*args, **kwargs):
        out = original(*args, **kwargs)
        log.append(np.array(out, copy=True))
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(db.identify.spots, "fuse_scores", recording)
    yield log
    mp.undo()


@pytest.fixture(scope="module")
def built(catalogue, fused_log):
    """The pipeline built on ``seen`` (calibrated on its train split), the fused matrix of the build, and the
    pipeline row's stored config right after the build."""
    from db.identify.spots import load_pipeline

    cat, _ = catalogue
    res = evaluate_spots(cat, SpotEvaluationRequest(benchmark=SEEN, model="efficientnet_lite0", matcher="sift",
                                                    shortlist=10, lnbnn=True))
    assert res["model"] == PIPELINE
    return res, fused_log[-1], _row_config(cat, PIPELINE), load_pipeline(cat, PIPELINE)


def _row_config(cat, name):
    from sqlalchemy import select

    from db.models import Model

    with cat.unit_of_work() as s:
        return json.loads(json.dumps(s.scalar(select(Model.config).where(Model.name == name))))


def test_build_records_what_its_calibration_rests_on(built):
    res, _, config, _ = built
    basis = res["calibrated_on"]
    assert basis["benchmark"] == SEEN and basis["split"] == "train" and basis["fitted_now"] is True
    assert basis["scorers"] == ["global", "inliers", "lnbnn"] and basis["fitted_at"]
    assert basis["photos"] == SEEN_ANIMALS * PHOTOS_EACH // 2 and basis["individuals"] == SEEN_ANIMALS // 2
    for scorer in basis["scorers"]:
        assert basis["n_pairs"][scorer] == res["calibration"][scorer]["n_pairs"] > 0
        assert 0 < basis["n_positive"][scorer] == res["calibration"][scorer]["n_same"] < basis["n_pairs"][scorer]
    assert f"calibrated on benchmark {SEEN}'s train split" in basis["words"] and "fitted now" in basis["words"]
    stored = config["calibration_source"]
    assert stored["benchmark"] == SEEN and stored["built_on"] == SEEN and stored["fitted_at"] == basis["fitted_at"]


def test_stored_pipeline_evaluates_a_test_only_benchmark_with_its_stored_calibration(catalogue, built, fused_log):
    """Fails before the fix: "benchmark 'new' has no train split to calibrate the spot scorers on"."""
    from db.identify.spots import load_pipeline

    cat, _ = catalogue
    _, _, config, before = built
    res = evaluate_spots(cat, SpotEvaluationRequest(benchmark=NEW, model=PIPELINE))
    assert res["model"] == PIPELINE and res["benchmark"] == NEW and res["evaluation_id"]
    assert res["n_queries"] == NEW_ANIMALS * PHOTOS_EACH and res["map_macro"] > 0.8  # new animals, found by spots
    basis = res["calibrated_on"]
    assert basis["benchmark"] == SEEN and basis["fitted_now"] is False and "not refitted" in basis["words"]
    assert basis["fitted_at"] == built[0]["calibrated_on"]["fitted_at"]
    assert basis["n_pairs"] == built[0]["calibrated_on"]["n_pairs"]
    assert res["seconds"]["calibration"] == 0.0 and "calibration" not in res["spots"]
    # nothing refitted, nothing rewritten: the row is as the build left it
    assert _row_config(cat, PIPELINE) == config
    after = load_pipeline(cat, PIPELINE)
    grid = np.linspace(-1, 200, 301)
    for scorer, cal in before.calibrators.items():
        assert np.array_equal(cal.probability(grid), after.calibrators[scorer].probability(grid))


def test_stored_calibration_gives_the_builds_fused_scores(catalogue, built, fused_log, monkeypatch):
    """Evaluated by name on the benchmark it was built on, the pipeline gives exactly the build's fused scores,
    and fits nothing on the way."""
    import db.identify.spots

    def no_fitting(*args, **kwargs):
        raise AssertionError("a stored pipeline's evaluation fitted a calibration")

    monkeypatch.setattr(db.identify.spots, "fit_scorer_calibrations", no_fitting)
    cat, _ = catalogue
    res_build, fused_build, config, _ = built
    res = evaluate_spots(cat, SpotEvaluationRequest(benchmark=SEEN, model=PIPELINE))
    assert np.array_equal(fused_log[-1], fused_build)
    assert res["map_macro"] == res_build["map_macro"] and res["cmc_macro"] == res_build["cmc_macro"]
    assert res["components"] == res_build["components"]
    assert _row_config(cat, PIPELINE) == config


def test_cli_says_what_the_stored_calibration_rests_on(catalogue, built, capsys):
    _, data = catalogue
    assert cli(["--data-dir", data, "eval", "--model", PIPELINE, "--benchmark", NEW, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == NEW and out["calibrated_on"]["benchmark"] == SEEN
    assert out["calibrated_on"]["fitted_now"] is False and out["calibrated_on"]["n_positive"]["inliers"] > 0
    assert cli(["--data-dir", data, "eval", "--model", PIPELINE, "--benchmark", NEW]) == 0
    text = capsys.readouterr().out
    assert f"calibration: calibrated on benchmark {SEEN}'s train split" in text
    assert "the pipeline's stored calibration, not refitted" in text and "+ spot verification" in text
    # a stored pipeline keeps its calibration: asking to calibrate it elsewhere is refused
    assert cli(["--data-dir", data, "eval", "--model", PIPELINE, "--benchmark", NEW, "--calibrate-on", SEEN]) == 1
    err = capsys.readouterr().err
    assert "keeps the calibration it was built with" in err and "--backbone efficientnet_lite0" in err


def test_building_on_a_test_only_benchmark_needs_calibrate_on(catalogue, built, capsys):
    _, data = catalogue
    assert cli(["--data-dir", data, "eval", "--backbone", "efficientnet_lite0", "--benchmark", NEW,
                "--verify", "sift", "--shortlist", "10"]) == 1
    err = capsys.readouterr().err
    assert "no train split to calibrate" in err and "--calibrate-on BENCHMARK" in err
    assert "--verify" not in err and "--benchmark" not in err  # never the options already given
    # the pipeline built with the same settings is stored: the message offers it by name
    assert cli(["--data-dir", data, "eval", "--backbone", "efficientnet_lite0", "--benchmark", NEW,
                "--verify", "sift", "--lnbnn", "--shortlist", "10"]) == 1
    assert f"evaluate the stored pipeline {PIPELINE} by its name" in capsys.readouterr().err
    # --calibrate-on a benchmark without a train split either: refused, without recommending --calibrate-on again
    assert cli(["--data-dir", data, "eval", "--backbone", "efficientnet_lite0", "--benchmark", SEEN,
                "--verify", "sift", "--shortlist", "10", "--calibrate-on", NEW]) == 1
    err = capsys.readouterr().err
    assert "given to calibrate on, has no train split either" in err and "--calibrate-on" not in err


def test_calibrate_on_builds_a_pipeline_for_a_test_only_benchmark(catalogue, built, capsys):
    from db.identify.spots import load_pipeline

    cat, data = catalogue
    assert cli(["--data-dir", data, "eval", "--backbone", "efficientnet_lite0", "--benchmark", NEW,
                "--verify", "sift", "--shortlist", "10", "--calibrate-on", SEEN, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "efficientnet_lite0+sift-k10" and out["benchmark"] == NEW
    basis = out["calibrated_on"]
    assert basis["benchmark"] == SEEN and basis["built_on"] == NEW and basis["fitted_now"] is True
    assert basis["scorers"] == ["global", "inliers"] and basis["photos"] == SEEN_ANIMALS * PHOTOS_EACH // 2
    assert f"when the pipeline was built on {NEW}" in basis["words"]
    assert out["map_macro"] >= out["components"]["global"]["map_macro"]
    stored = load_pipeline(cat, out["model"])
    assert stored.calibration_source["benchmark"] == SEEN and stored.calibration_source["built_on"] == NEW
    # the calibration photos are the seen animals' train photos, never the evaluated benchmark's test photos
    from db.identify.benchmarks import load_benchmark

    assert set(stored.calibration_source["image_ids"]) <= set(load_benchmark(cat, SEEN, split="train").image_ids)
    assert not set(stored.calibration_source["image_ids"]) & set(load_benchmark(cat, NEW).image_ids)


def test_request_carries_calibrate_on_through_a_job():
    req = SpotEvaluationRequest(benchmark=NEW, calibrate_on=f" {SEEN} ")
    assert req.calibrate_on == SEEN
    assert SpotEvaluationRequest.from_dict(req.to_dict()).calibrate_on == SEEN
    assert SpotEvaluationRequest(benchmark=NEW, calibrate_on="  ").calibrate_on is None
    with pytest.raises(ValueError, match="calibrate on must be a name"):
        SpotEvaluationRequest(benchmark=NEW, calibrate_on=3)


def test_a_stored_pipeline_is_evaluated_per_flank(catalogue, built):
    """Every photo here shows its left flank: the same-flank gallery is the whole gallery (the same figures as
    any), the cross-flank one is empty (no query left), and the result says which was asked."""
    cat, _ = catalogue
    any_ = evaluate_spots(cat, SpotEvaluationRequest(benchmark=NEW, model=PIPELINE, user="tester"))
    same = evaluate_spots(cat, SpotEvaluationRequest(benchmark=NEW, model=PIPELINE, user="tester", flank="same"))
    cross = evaluate_spots(cat, SpotEvaluationRequest(benchmark=NEW, model=PIPELINE, user="tester", flank="cross"))
    assert (any_["flank"], same["flank"], cross["flank"]) == ("any", "same", "cross")
    assert same["map_macro"] == any_["map_macro"] and same["n_queries"] == any_["n_queries"] > 0
    assert cross["n_queries"] == 0 and cross["flank_counts"]["left"] == NEW_ANIMALS * PHOTOS_EACH
    with pytest.raises(ValueError, match="flank"):
        SpotEvaluationRequest(benchmark=NEW, model=PIPELINE, flank="up")
