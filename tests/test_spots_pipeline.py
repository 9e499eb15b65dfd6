"""Fused spot-evidence pipelines in the catalogue (db.identify.spots, jobs.actions.spots, the CLI): evaluation, the
stored pipeline model, compare, export, keypoint jobs and bad input -- on synthetic spotted animals."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from PIL import Image as PILImage

from app.cli import main as cli
from core.identify.spots import MatcherUnavailableError
from db.identify.spots import features_for, get_matcher, is_pipeline, load_pipeline
from jobs.actions.spots import (
    KeypointsRequest,
    MatchedSpotsRequest,
    SpotEvaluationRequest,
    evaluate_spots,
    extract_keypoints,
    matched_spots,
)
from tests.test_spots import spot_photo, spotted_animal

INDIVIDUALS = 14
PHOTOS_EACH = 4
BLANK = "ind03_2.png"  # a blank photo: no keypoints, no spot evidence
NO_MASK = "ind04_1.png"  # saved without an alpha channel: keypoints from the whole photo


@pytest.fixture(scope="module")
def spotted(tmp_path_factory):
    """A catalogue of spotted animals (RGBA photos whose alpha is the animal) and an identity benchmark."""
    from db.identify.benchmarks import create_benchmark
    from db.io.ingest import ingest_path
    from db.session import open_catalogue

    root = tmp_path_factory.mktemp("spotted")
    photos = root / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    rows = []
    for i in range(INDIVIDUALS):
        coat = spot_photo(1000 + i, size=(150, 180), n_spots=45)
        for j in range(PHOTOS_EACH):
            name = f"ind{i:02d}_{j}.png"
            rgb, mask = spotted_animal(coat, rng)
            if name == BLANK:
                rgb, mask = np.full_like(rgb, 128), np.ones_like(mask)
            img = PILImage.fromarray(rgb)
            if name != NO_MASK:
                img = img.convert("RGBA")
                img.putalpha(PILImage.fromarray(mask.astype(np.uint8) * 255))
            img.save(photos / name)
            rows.append({"filename": name, "identity": f"ind{i:02d}", "flank": "left",
                         "sighting": f"ind{i:02d}-s{j}"})
    manifest = photos / "manifest.csv"
    with open(manifest, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["filename", "identity", "flank", "sighting"])
        writer.writeheader()
        writer.writerows(rows)
    cat = open_catalogue(root / "data")
    ingest_path(cat, manifest, format="manifest", user="tester")
    create_benchmark(cat, "spotted", manifest=manifest, split="identity", test_fraction=0.5, seed=0)
    return cat, root


@pytest.fixture(scope="module")
def evaluated(spotted):
    cat, _ = spotted
    return evaluate_spots(cat, SpotEvaluationRequest(benchmark="spotted", model="efficientnet_lite0", matcher="sift",
                                                     shortlist=20, lnbnn=True))


def test_evaluation_reports_every_component_and_registers_the_pipeline(spotted, evaluated):
    cat, _ = spotted
    res = evaluated
    assert res["model"] == "efficientnet_lite0+sift+lnbnn-k20"
    assert set(res["components"]) >= {"global", "global+verification", "global+lnbnn", "fused", "lnbnn_alone"}
    for m in [res, *res["components"].values()]:
        assert 0.0 <= m["map_macro"] <= 1.0 and 0.0 <= m["cmc_macro"]["1"] <= 1.0
    # the coats are rotated copies: spot evidence finds them where the global features are distracted by the
    # backgrounds
    glob = res["components"]["global"]
    assert res["components"]["global+verification"]["map_macro"] > glob["map_macro"] + 0.1
    assert res["map_macro"] > glob["map_macro"] + 0.1 and res["cmc_macro"]["1"] >= glob["cmc_macro"]["1"]
    assert res["map_macro"] > 0.8
    assert res["spots"]["verified_pairs"] > 0 and res["evaluation_id"]
    # the pipeline is a stored model, with its calibration and provenance
    assert is_pipeline(cat, res["model"]) and not is_pipeline(cat, "efficientnet_lite0")
    stored = load_pipeline(cat, res["model"])
    assert stored.global_model == "efficientnet_lite0" and stored.settings.shortlist == 20
    assert set(stored.calibrators) == {"global", "inliers", "lnbnn"}
    grid = np.linspace(0, 200, 101)
    assert np.all(np.diff(stored.calibrators["inliers"].probability(grid)) >= 0)  # monotone
    assert "isotonic calibration" in stored.provenance()
    # its name works where a backbone's does: the global model embeds
    from db.embeddings import get_backbone

    assert get_backbone(cat, res["model"]).config.name == "efficientnet_lite0"


def test_bad_photos_are_scored_by_the_global_model_alone(spotted, evaluated):
    cat, _ = spotted
    summary = evaluated["spots"]
    both = summary["test"]["photos"] + summary["calibration"]["photos"]
    assert both == INDIVIDUALS * PHOTOS_EACH
    assert summary["test"]["no_spot_evidence"] + summary["calibration"]["no_spot_evidence"] == 1  # the blank photo
    assert summary["test"]["masked_share"] < 1.0 or summary["calibration"]["masked_share"] < 1.0  # the unmasked one
    from sqlalchemy import select

    from db.models import Image

    with cat.unit_of_work() as s:
        blank = s.scalar(select(Image.id).where(Image.original_name == BLANK))
        other = s.scalar(select(Image.id).where(Image.original_name == "ind03_0.png"))
    spots = matched_spots(cat, MatchedSpotsRequest(query_image_id=blank, candidate_image_id=other))
    assert spots.status == "no_keypoints" and spots.n_inliers == 0 and "no spot evidence" in spots.words


def test_compare_reads_the_pipeline_like_a_model(spotted, evaluated):
    from db.identify.compare import compare

    cat, _ = spotted
    res = compare(cat, evaluated["model"], "efficientnet_lite0", benchmark="spotted")
    assert res["endpoints"]["map"]["mean_a"] == pytest.approx(evaluated["map_macro"], abs=0.15)
    assert res["endpoints"]["map"]["mean_diff"] > 0
    assert res["verdict"]


def test_matched_spots_of_two_photos_of_one_animal(spotted):
    cat, _ = spotted
    from sqlalchemy import select

    from db.models import Image

    with cat.unit_of_work() as s:
        ids = dict(s.execute(select(Image.original_name, Image.id)).all())
    same = matched_spots(cat, MatchedSpotsRequest(query_image_id=ids["ind05_0.png"], candidate_image_id=ids["ind05_1.png"]))
    other = matched_spots(cat, MatchedSpotsRequest(query_image_id=ids["ind05_0.png"], candidate_image_id=ids["ind06_1.png"]))
    assert same.n_inliers >= 15 and same.status == "verified"
    assert other.n_inliers < same.n_inliers / 3
    assert same.picture.ndim == 3 and same.picture.shape[1] > same.picture.shape[0]  # side by side
    unmasked = matched_spots(cat, MatchedSpotsRequest(query_image_id=ids[NO_MASK], candidate_image_id=ids["ind04_0.png"]))
    assert "no mask" in unmasked.note
    with pytest.raises(ValueError, match="two different photos"):
        MatchedSpotsRequest(query_image_id=ids["ind05_0.png"], candidate_image_id=ids["ind05_0.png"])


def test_keypoints_are_cached_per_photo_mask_and_matcher(spotted):
    cat, _ = spotted
    res = extract_keypoints(cat, KeypointsRequest(matcher="orb"))
    assert res["photos"] == INDIVIDUALS * PHOTOS_EACH and res["keypoints_mean"] > 20
    matcher = get_matcher("orb")
    files = list((cat.cache_dir / "spots" / matcher.config.fingerprint()).rglob("*.npz"))
    assert len(files) == INDIVIDUALS * PHOTOS_EACH
    # a damaged cache entry is recomputed, not trusted
    files[0].write_bytes(b"garbage")
    from db.embeddings import all_image_ids

    again = features_for(cat, all_image_ids(cat), matcher=matcher)
    assert all(f.descriptors.dtype == np.uint8 for f in again)


def test_keypoints_job_runs_on_the_light_queue(spotted):
    from jobs.queue import LIGHT, queue_of, submit_and_run

    cat, _ = spotted
    assert queue_of("keypoints") == LIGHT
    job = submit_and_run(cat, "keypoints", {**KeypointsRequest(matcher="sift").to_dict(), "user": "tester"})
    assert job.status.value == "succeeded", job.error
    assert job.result["photos"] == INDIVIDUALS * PHOTOS_EACH and "keypoints" in job.result["summary"]


def test_requests_refuse_bad_settings(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="unknown local matcher"):
        SpotEvaluationRequest(benchmark="b", matcher="surf")
    with pytest.raises(ValueError, match="at least 1"):
        SpotEvaluationRequest(benchmark="b", shortlist=0)
    with pytest.raises(ValueError, match="whole number"):
        SpotEvaluationRequest(benchmark="b", shortlist=2.5)
    with pytest.raises(ValueError, match="benchmark"):
        SpotEvaluationRequest(benchmark=" ")
    with pytest.raises(ValueError, match=r"SpotEvaluationRequest: unknown field\(s\) 'colour'"):
        SpotEvaluationRequest.from_dict({"benchmark": "b", "colour": "red"})
    assert SpotEvaluationRequest.from_dict(SpotEvaluationRequest(benchmark="b").to_dict()).benchmark == "b"
    # a learned matcher whose weights are absent is listed as unavailable and never offered
    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(tmp_path / "none"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(MatcherUnavailableError, match="not on this machine"):
        SpotEvaluationRequest(benchmark="b", matcher="loftr")
    from jobs.actions.spots import available_matchers

    assert "sift" in available_matchers() and "loftr" not in available_matchers()


def test_cli_eval_verify_json_and_pipeline_name(spotted, evaluated, capsys):
    cat, root = spotted
    data = str(root / "data")
    assert cli(["--data-dir", data, "eval", "--backbone", "efficientnet_lite0", "--benchmark", "spotted",
                "--verify", "sift", "--shortlist", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "efficientnet_lite0+sift-k20" and "map_macro" in out and "1" in out["cmc_macro"]
    assert out["components"]["global"]["map_macro"] < out["map_macro"]
    # the pipeline's own name re-evaluates it with its stored settings
    assert cli(["--data-dir", data, "eval", "--model", "efficientnet_lite0+sift-k20", "--benchmark", "spotted"]) == 0
    text = capsys.readouterr().out
    assert "+ spot verification" in text and "pipeline efficientnet_lite0+sift-k20" in text
    # bad input: a clear message, exit 1
    assert cli(["--data-dir", data, "eval", "--backbone", "efficientnet_lite0", "--benchmark", "spotted",
                "--verify", "surf"]) == 1
    assert "unknown local matcher" in capsys.readouterr().err
    assert cli(["--data-dir", data, "spots", "matchers", "--json"]) == 0
    names = {m["name"]: m["available"] for m in json.loads(capsys.readouterr().out)}
    assert names["sift"] is True and "loftr" in names


def test_cli_spots_show_draws_the_pair(spotted, tmp_path, capsys):
    cat, root = spotted
    from sqlalchemy import select

    from db.models import Image

    with cat.unit_of_work() as s:
        ids = dict(s.execute(select(Image.original_name, Image.id)).all())
    out = tmp_path / "pair.png"
    assert cli(["--data-dir", str(root / "data"), "spots", "show", str(ids["ind07_0.png"]), str(ids["ind07_1.png"]),
                "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["inliers"] >= 15 and res["status"] == "verified"
    assert PILImage.open(out).size[0] > PILImage.open(out).size[1]


def test_kaggle_export_with_a_pipeline(spotted, evaluated, tmp_path):
    """The pipeline scores Kaggle rows with its fused probability: a photo of the same animal scores higher
    than another animal's, and rows without spot evidence keep the global probability."""
    from db.identify.export import export_kaggle

    cat, root = spotted
    photos = root / "photos"
    test_csv = tmp_path / "test.csv"
    test_csv.write_text("row_id,query_image,gallery_image\n"
                        "r1,ind08_0.png,ind08_1.png\n"
                        "r2,ind08_0.png,ind09_1.png\n"
                        f"r3,{BLANK},ind03_0.png\n")
    out = tmp_path / "submission.csv"
    res = export_kaggle(cat, test_csv=test_csv, images_dir=photos, model=evaluated["model"], out=out)
    assert res["model"] == evaluated["model"] and res["metric"] == "probability"
    assert res["spots"] == {"pairs": 3, "with_spot_evidence": 2, "fusion": load_pipeline(cat, res["model"]).fusion.name}
    rows = {r["row_id"]: float(r["similarity"]) for r in csv.DictReader(open(out))}
    assert rows["r1"] > rows["r2"] and 0.0 <= min(rows.values()) and max(rows.values()) <= 1.0
    with pytest.raises(ValueError, match="full_rgb"):
        export_kaggle(cat, test_csv=test_csv, images_dir=photos, model=evaluated["model"], out=out,
                      variant="foreground_only")


def test_decisions_replace_the_benchmark_calibration_once_there_are_enough(spotted, evaluated):
    """Below 50 decided pairs the stored (benchmark) calibration is used; from 50 on, the curators' same /
    not-same pairs refit the global and inlier calibrations, and match review says what they rest on."""
    from sqlalchemy import select

    from db.identify.matching import rank_candidates, record_decision
    from db.models import Image, Individual
    from db.identify.spots import decided_pairs, with_decision_calibration

    cat, _ = spotted
    stored = load_pipeline(cat, evaluated["model"])
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Individual.name).join(Individual, Image.individual_id == Individual.id)
                         .order_by(Image.id)).all()
    by_animal: dict[str, list[int]] = {}
    for image_id, name in rows:
        by_animal.setdefault(name, []).append(image_id)
    animals = sorted(by_animal)
    pairs = []
    for n, name in enumerate(animals):
        photos = by_animal[name]
        pairs += [(photos[0], photos[1], "same"), (photos[2], photos[3], "same")]
        pairs += [(photos[0], by_animal[animals[(n + 1) % len(animals)]][0], "not"),
                  (photos[1], by_animal[animals[(n + 2) % len(animals)]][1], "not")]
    for q, c, d in pairs[:40]:
        record_decision(cat, query_image_id=q, candidate_image_id=c, decision=d, user="tester")
    assert with_decision_calibration(cat, stored) is stored  # 40 < 50: the benchmark calibration stands
    for q, c, d in pairs[40:]:
        record_decision(cat, query_image_id=q, candidate_image_id=c, decision=d, user="tester")
    assert len(decided_pairs(cat)) == len(pairs) >= 50
    refitted = with_decision_calibration(cat, stored)
    assert refitted is not stored
    assert refitted.calibrators["global"].n_outcomes == len(pairs)
    assert "curator decisions" in refitted.provenance()
    assert refitted.calibrators["lnbnn"] is stored.calibrators["lnbnn"]
    # match review ranks with it and says so; candidates carry their spot facts
    result = rank_candidates(cat, by_animal[animals[5]][0], model_name=evaluated["model"], k=5)
    assert result.pipeline and "curator decisions" in result.model_provenance
    top = result.candidates[0]
    assert top.individual_name == animals[5] and top.inliers is not None and top.inliers >= 15
    assert 0.0 <= top.score <= 1.0 and top.spot_status == "verified"


def test_the_fusion_is_chosen_by_cross_validation_and_stored_with_its_figures(spotted, evaluated, capsys):
    """Every candidate fusion has cross-validated figures on the calibration photos and test figures beside
    them; the kept one is the best cross-validated, is what the pipeline's own figures are, and is stored."""
    from app.commands.eval_cmd import print_fusion

    cat, _ = spotted
    fusion = evaluated["fusion"]
    cv, test = fusion["cv"], fusion["test"]
    assert {"global", "inliers", "lnbnn", "mean: global+inliers+lnbnn", "logistic: log-odds"} <= set(cv)
    assert set(test) == set(cv) and fusion["n_folds"] >= 2
    kept = fusion["kept"]
    merit = {n: cv[n]["map_macro"] + cv[n]["cmc1_macro"] for n in cv}
    assert merit[kept] == max(merit.values()) and kept in fusion["why"]
    assert test[kept]["map_macro"] == pytest.approx(evaluated["map_macro"])
    assert test[kept]["cmc1_macro"] == pytest.approx(evaluated["cmc_macro"]["1"])
    stored = load_pipeline(cat, evaluated["model"])
    assert stored.fusion.name == kept and stored.fusion_choice["cv"] == cv
    assert f"fused by {kept}" in stored.provenance()
    print_fusion(evaluated)
    out = capsys.readouterr().out
    assert "CV mAP" in out and "test CMC@1" in out and f"* {kept}" in out and f"fusion kept: {kept}" in out


def test_the_calibration_sample_says_why_it_stopped_growing(spotted, evaluated):
    """The spotted train split (7 animals x 4 photos) holds far fewer than 500 same-animal pairs per scorer:
    every usable photo is taken and the result says the train split ran out, with the counts."""
    cat, _ = spotted
    sample = evaluated["calibration_sample"]
    assert sample["stopped"] == "train split ran out" and "ran out" in sample["words"]
    assert sample["photos"] == sample["photos_available"] == evaluated["spots"]["calibration"]["photos"]
    assert sample["same_pairs"]["global"] == evaluated["calibration"]["global"]["n_same"] < 500
    stored = load_pipeline(cat, evaluated["model"])
    assert stored.calibration_source["sample"]["stopped"] == "train split ran out"


def test_too_few_same_animal_pairs_are_refused_and_nothing_is_stored(spotted, evaluated, monkeypatch):
    import db.identify.spots as spots_db

    cat, _ = spotted
    monkeypatch.setattr(spots_db, "MIN_SAME_PAIRS", 10_000)
    request = SpotEvaluationRequest(benchmark="spotted", model="efficientnet_lite0", matcher="sift", shortlist=7,
                                    lnbnn=True)
    with pytest.raises(Exception, match="too few same-animal pairs.*at least 10000 each.*nothing was stored"):
        evaluate_spots(cat, request)
    assert not is_pipeline(cat, "efficientnet_lite0+sift+lnbnn-k7")


def test_lnbnn_own_candidates_reach_what_a_two_photo_shortlist_misses(spotted, evaluated):
    """With a global shortlist of two photos, re-ranking can only reorder those two. LNBNN's own top candidates
    over the whole gallery (10 by default) join it, so the rotated copies LNBNN finds are re-ranked first (CMC@1
    0.71 -> 0.96, mAP 0.56 -> 0.94 when written); match review joins them the same way."""
    from db.identify.matching import rank_candidates
    from db.models import Image
    from sqlalchemy import select

    cat, _ = spotted
    alone = evaluate_spots(cat, SpotEvaluationRequest(benchmark="spotted", model="efficientnet_lite0", matcher="sift",
                                                      shortlist=2, lnbnn=True, lnbnn_shortlist=0))
    joint = evaluate_spots(cat, SpotEvaluationRequest(benchmark="spotted", model="efficientnet_lite0", matcher="sift",
                                                      shortlist=2, lnbnn=True))
    assert (alone["model"], joint["model"]) == ("efficientnet_lite0+sift+lnbnn-k2-own0",
                                                "efficientnet_lite0+sift+lnbnn-k2")
    assert joint["cmc_macro"]["1"] > alone["cmc_macro"]["1"] + 0.2 and joint["map_macro"] > alone["map_macro"] + 0.1
    assert load_pipeline(cat, joint["model"]).settings.own_candidates == {"lnbnn": 10}
    assert "joined by LNBNN's own top 10" in load_pipeline(cat, joint["model"]).provenance()

    with cat.unit_of_work() as s:
        query = s.scalar(select(Image.id).where(Image.original_name == "ind10_0.png"))
        individual = s.get(Image, query).individual_id
    result = rank_candidates(cat, query, model_name=joint["model"], k=12)
    shortlisted = [c for c in result.candidates if c.spot_status != "outside_shortlist"]
    assert len(shortlisted) > 1  # the global top-1 and LNBNN's own
    with cat.unit_of_work() as s:
        assert s.get(Image, result.candidates[0].image_id).individual_id == individual
