"""The curator's loop around models: leaderboard, retraining from new decisions (train -> evaluate -> compare),
the embedding map, flank suggestions -- on a photo set the tests make."""

from __future__ import annotations

import numpy as np
import pytest

from db.models import DecisionKind, Flank, Image, Individual, JobStatus, MatchDecision
from jobs import queue
from jobs.requests.map import AssignSelectionRequest, MapRequest
from tests.synthetic_reid import synthetic_catalogue


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    cat, _ = synthetic_catalogue(tmp_path_factory.mktemp("loop"), individuals=8, photos_each=6, seed=12)
    for model in ("efficientnet_lite0",):
        assert queue.submit_and_run(cat, "evaluate", {"backbone": model, "benchmark": "syn"}).status.value == "succeeded"
    yield cat
    cat.close()


def test_leaderboard_rows_sort_and_archive(loop):
    from db.inspect.leaderboard import leaderboard
    from db.species import archive_model

    job = queue.submit_and_run(loop, "train", {"benchmark": "syn", "head": "supcon", "epochs": 2, "views": 2,
                                              "diagnose": True, "name": "lb-model"})
    assert job.status == JobStatus.succeeded, job.message
    rows = leaderboard(loop, benchmark="syn")
    by = {r["name"]: r for r in rows}
    assert set(by) == {"efficientnet_lite0", "lb-model"}
    assert by["lb-model"]["head"] == "supcon" and by["lb-model"]["snapshot_images"] > 0
    assert by["lb-model"]["mirror_tier"] and by["lb-model"]["bg_fg"] is not None  # the job also diagnosed
    assert "fingerprint" in by["lb-model"]["provenance"] and "sha256" in by["lb-model"]["provenance"]
    maps = [r["map_macro"] for r in rows]
    assert maps == sorted(maps, reverse=True)
    names = [r["name"] for r in leaderboard(loop, benchmark="syn", sort="name")]
    assert names == sorted(names)
    with pytest.raises(ValueError, match="unknown sort key"):
        leaderboard(loop, benchmark="syn", sort="vibes")
    archive_model(loop, "lb-model")
    assert "lb-model" not in {r["name"] for r in leaderboard(loop, benchmark="syn")}
    assert "lb-model" in {r["name"] for r in leaderboard(loop, benchmark="syn", include_archived=True)}


def test_retrain_counts_new_decisions_and_compares_with_the_active_model(loop):
    from db.identify.training import decisions_since_active
    from jobs.kinds import retrain_params

    before = decisions_since_active(loop)
    assert before["active_model"] == "efficientnet_lite0" and before["since"] is None
    with loop.unit_of_work() as s:
        imgs = s.query(Image).join(Individual, Image.individual_id == Individual.id).limit(3).all()
        for img in imgs:
            s.add(MatchDecision(query_image_id=img.id, candidate_individual_id=img.individual_id,
                                decision=DecisionKind.same, score=0.9, model_name="efficientnet_lite0", user="ana"))
        s.add(MatchDecision(query_image_id=imgs[0].id, decision=DecisionKind.not_same, score=0.2,
                            model_name="efficientnet_lite0", user="ana"))  # not a confirmed identity
        s.commit()
    assert decisions_since_active(loop)["confirmed"] == before["confirmed"] + 3
    params = retrain_params(loop, user="ana")
    assert params["source"] == "catalogue" and params["benchmark"] == "syn"
    assert params["compare_with"] == "efficientnet_lite0" and params["head"] == "supcon"
    params.update({"epochs": 2, "views": 2, "diagnose": False, "name": "retrained"})
    job = queue.submit_and_run(loop, "train", params)
    assert job.status == JobStatus.succeeded, job.message
    res = job.result
    assert res["comparison"]["b"] == "efficientnet_lite0" and "CMC@1" in res["comparison"]["verdict"]
    with loop.unit_of_work() as s:
        snap = s.query(__import__("db.models", fromlist=["Model"]).Model).filter_by(name="retrained").one()
        test_ids = set(__import__("db.identify.benchmarks", fromlist=["load_benchmark"]).load_benchmark(
            loop, "syn", split="test").image_ids)
        assert not test_ids & set(snap.data_snapshot["image_ids"])  # never trained on the benchmark's test photos
        assert snap.data_snapshot["excluded_test_photos"] == len(test_ids)
    # promotion stays manual: the active model did not change
    assert decisions_since_active(loop)["active_model"] == "efficientnet_lite0"


def test_embedding_map_job_and_payload(loop):
    from db.inspect.embedding_map import load_map
    from jobs.actions import map as mp

    assert load_map(loop, "efficientnet_lite0") is None  # not computed yet
    job = queue.submit_and_run(loop, "map", {"model": "efficientnet_lite0"})
    assert job.status == JobStatus.succeeded and job.queue == "light" and job.result["n"] == 48
    m = load_map(loop, "efficientnet_lite0")
    assert len(m["points"]) == 48 and not m["poincare"]
    for colour in ("individual", "flank", "solidity", "species", "undecided"):
        p = mp.map_payload(loop, "efficientnet_lite0", colour)
        assert len(p["x"]) == len(p["value"]) == len(p["thumb"]) == 48
    ind = mp.map_payload(loop, "efficientnet_lite0", "individual")
    assert len(set(ind["value"])) == 8 and ind["categorical"]
    html = mp.map_html(ind)
    assert "map-data" in html and "</script>" in html and html.count("</script>") == 1  # JSON cannot close it
    with pytest.raises(ValueError, match="colour by"):
        mp.map_payload(loop, "efficientnet_lite0", "mood")
    items, text = mp.selection(loop, ind["id"][:5])
    assert len(items) == 5 and "5 photos selected" in text

    # the colour legend names each individual with its colour and photo count (issue 14, item 4)
    legend = {e["name"]: e for e in ind["legend"]}
    assert len(legend) == 8 and sum(e["n"] for e in legend.values()) == 48
    for label, colour in zip(ind["label"], ind["colour"]):
        assert legend[label]["colour"] == colour  # a point and its legend entry share the colour
    assert len({e["colour"] for e in legend.values()}) == 8
    assert all(f"{name} ({e['n']})" in html for name, e in legend.items())
    assert "mask solidity" in mp.map_html(mp.map_payload(loop, "efficientnet_lite0", "solidity"))


def test_map_assign_can_create_an_individual_and_warns_about_mixed_selections(loop):
    """Issue 14, item 4: Assign could not create a new individual, and a lasso over two animals moved them all
    silently."""
    from db.models import Image, Individual
    from jobs.actions import map as mp

    with loop.unit_of_work() as s:
        rows = s.query(Image.id, Image.individual_id).filter(Image.individual_id.is_not(None)).order_by(Image.id).all()
    by_ind: dict[int, list[int]] = {}
    for image_id, ind in rows:
        by_ind.setdefault(ind, []).append(image_id)
    (a, a_photos), (b, b_photos) = list(by_ind.items())[:2]
    mixed = a_photos[:2] + b_photos[:1]
    _, text = mp.selection(loop, mixed)
    assert "belong to 2 different individuals" in text
    with pytest.raises(ValueError, match="Tick “Create it if new”"):
        mp.assign_selection(loop, AssignSelectionRequest(image_ids=mixed, individual="Zafira", user="ana"))
    message = mp.assign_selection(loop, AssignSelectionRequest(image_ids=mixed, individual="Zafira", user="ana",
                                                               create_new=True))
    assert message.startswith("Created Zafira and assigned 3 photo(s) to Zafira")
    assert "they came from 2 individuals" in message
    with loop.unit_of_work() as s:
        zafira = s.query(Individual).filter_by(name="Zafira").one()
        assert sorted(i for (i,) in s.query(Image.id).filter(Image.individual_id == zafira.id)) == sorted(mixed)
    # assigning to an existing name with the box ticked reuses it, and a single source is named plainly
    again = mp.assign_selection(loop, AssignSelectionRequest(image_ids=a_photos[2:3], individual="Zafira",
                                                             user="ana", create_new=True))
    assert again.startswith("Assigned 1 photo(s) to Zafira") and "were " in again


def test_lorentz_points_map_onto_the_poincare_disk():
    import torch

    from core.lorentz import expmap0
    from core.inspect.projection import project_2d

    z = expmap0(torch.tensor(np.random.default_rng(0).normal(size=(60, 8)) * 2)).numpy()
    disk = project_2d(z, metric="lorentz", n_neighbors=10)
    assert disk.shape == (60, 2) and np.all(np.linalg.norm(disk, axis=1) < 1.0)
    flat = project_2d(np.random.default_rng(1).normal(size=(60, 16)), metric="cosine", n_neighbors=10)
    assert flat.shape == (60, 2) and np.all(np.isfinite(flat))


def test_flank_classifier_on_orientation_features():
    """Left photos carry +v in f(x) - f(flip x), right ones -v: the classifier separates them perfectly."""
    from core.inspect.flank import fit_flank_classifier, flank_class, orientation_features

    rng = np.random.default_rng(0)
    v = rng.normal(size=16)
    base = rng.normal(size=(80, 16))
    flanks = ["left"] * 40 + ["right"] * 40
    sign = np.array([1.0] * 40 + [-1.0] * 40)[:, None]
    emb, emb_flip = base + 0.5 * sign * v, base - 0.5 * sign * v
    clf = fit_flank_classifier(orientation_features(emb, emb_flip), flanks)
    assert clf.accuracy == 1.0 and clf.n_test == 16
    pred, conf = clf.predict(orientation_features(emb_flip[:3], emb[:3]))  # mirrored left photos look right
    assert pred == ["right"] * 3 and np.all(conf > 0.5)
    assert flank_class("front") == "other" and flank_class("unknown") is None
    with pytest.raises(ValueError, match="at least 10 photos"):
        fit_flank_classifier(np.zeros((3, 4)), ["left", "right", "left"])
    with pytest.raises(ValueError, match="there are 0"):  # no labelled photo at all: words, not an IndexError
        fit_flank_classifier(np.zeros((0, 4)), [])


def test_flank_suggestion_for_an_unlabelled_photo_and_accept(loop):
    from jobs.actions import flanks as fs

    with loop.unit_of_work() as s:
        img = s.query(Image).order_by(Image.id.desc()).first()
        img.flank, img.flank_source = Flank.unknown, None
        s.commit()
        image_id = img.id
    text, show = fs.flank_suggestion(loop, image_id)
    assert show and "Suggested flank" in text and "held-out" in text
    message = fs.accept_suggestion(loop, fs.AcceptFlankRequest(image_id, user="ana"))
    with loop.unit_of_work() as s:
        img = s.get(Image, image_id)
        assert img.flank.value in ("left", "right", "other") and img.flank_source == "curator"
    assert img.flank.value in message
    assert fs.flank_suggestion(loop, image_id) == ("", False)  # labelled now: nothing to suggest


def test_loop_commands_from_the_shell(loop, capsys):
    """calibration, species threshold, flank-suggest, map and retrain from the CLI."""
    import json

    from app.cli import main as cli

    d = str(loop.data_dir)
    capsys.readouterr()
    assert cli(["--data-dir", d, "species", "threshold", "default", "35"]) == 0
    assert cli(["--data-dir", d, "calibration", "efficientnet_lite0", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    rep = json.loads(out)
    assert rep["n_outcomes"] >= 10 and rep["new_individual_threshold"] == pytest.approx(0.35)
    probs = rep["curve"]["probability"]
    assert probs == sorted(probs) and 0 <= probs[0] and probs[-1] <= 1
    assert cli(["--data-dir", d, "species", "threshold", "default", "150"]) == 1
    assert "between 0 and 1" in capsys.readouterr().err
    with loop.unit_of_work() as s:
        img = s.query(Image).order_by(Image.id).first()
        img.flank, img.flank_source = Flank.unknown, None
        s.commit()
        photo = img.id
    assert cli(["--data-dir", d, "flank-suggest", str(photo), "--json"]) == 0
    sug = json.loads(capsys.readouterr().out)[str(photo)]
    assert sug["flank"] in ("left", "right", "other") and 0 < sug["confidence"] <= 1
    assert cli(["--data-dir", d, "flank-suggest", "--accept"]) == 0
    with loop.unit_of_work() as s:
        assert s.get(Image, photo).flank_source == "curator"
    assert cli(["--data-dir", d, "map", "--model", "efficientnet_lite0"]) == 0
    assert "queued map job" in capsys.readouterr().out
    with loop.unit_of_work() as s:  # one confirmed identity of its own: the test does not lean on another's decisions
        img = s.query(Image).where(Image.individual_id.is_not(None)).order_by(Image.id.desc()).first()
        s.add(MatchDecision(query_image_id=img.id, candidate_individual_id=img.individual_id,
                            decision=DecisionKind.same, score=0.9, model_name="efficientnet_lite0", user="ana"))
        s.commit()
    assert cli(["--data-dir", d, "retrain"]) == 0
    assert "retraining queued as job" in capsys.readouterr().out
    retrain = queue.list_jobs(loop, limit=1, kind="train")[0]
    assert retrain.params["compare_with"] == "efficientnet_lite0" and retrain.params["source"] == "catalogue"


def test_retrain_with_nothing_new_is_refused(tmp_path, capsys):
    """No identity confirmed since the active model was trained: the Models tab's Retrain and `rosette retrain`
    say so and queue nothing; `--force` still retrains (issue 14, item 5)."""
    from app.cli import main as cli
    from db.session import open_catalogue
    from jobs.actions.models import RetrainRequest, retrain

    data = tmp_path / "empty"
    cat = open_catalogue(data)
    with pytest.raises(ValueError, match="0 confirmed identities since efficientnet_lite0 was trained"):
        retrain(cat, RetrainRequest(user="ana", species=None))
    assert cli(["--data-dir", str(data), "retrain"]) == 1
    assert "learn nothing new" in capsys.readouterr().err
    assert queue.list_jobs(cat, kind="train") == []
    assert cli(["--data-dir", str(data), "retrain", "--force"]) == 0
    assert len(queue.list_jobs(cat, kind="train")) == 1


def test_the_map_says_what_its_job_waits_for_and_never_waits_behind_training(tmp_path):
    """Map jobs run on the light queue (a training run never holds them up) and the empty map says 'queued
    behind job #N' instead of 'No map yet' while they wait (issue 14, item 4)."""
    from db.session import open_catalogue
    from jobs.actions.map import map_html, map_wait_note, queue_map
    from jobs.queue import LIGHT, queue_of

    cat = open_catalogue(tmp_path / "data")
    assert queue_of("map") == LIGHT
    assert map_wait_note(cat, "efficientnet_lite0") == "No map yet for efficientnet_lite0: press "
    assert "<b>Compute map</b>" in map_html(None, note=map_wait_note(cat, "efficientnet_lite0"))
    training = queue.submit(cat, "sleep_heavy", {"steps": 1})
    first = queue.submit(cat, "sleep", {"steps": 1})  # a light job ahead of the map
    queue_map(cat, MapRequest(model="efficientnet_lite0"))
    note = map_wait_note(cat, "efficientnet_lite0")
    assert f"behind job #{first} (sleep, queued)" in note and f"#{training}" not in note
    assert "Compute map" not in map_html(None, note=note)


def test_rosette_calibration_without_outcomes_names_the_real_cause(tmp_path, capsys):
    """An empty catalogue: the refusal says what it has (0 pairs) and what to do, as the Population tab does."""
    from app.cli import main as cli

    assert cli(["--data-dir", str(tmp_path / "data"), "calibration", "efficientnet_lite0"]) == 1
    err = capsys.readouterr().err
    assert "has no calibration yet" in err and "has 0" in err and "Match review" in err, err
