"""Train identities held out for a spot pipeline's calibration (rosette train --hold-out-for-calibration SHARE):
the split by hand, and shares outside (0, 0.5) refused before anything is queued."""

from __future__ import annotations

import numpy as np
import pytest

from app.cli import main as cli
from core.identify.training import (
    AUTO_HOLDOUT_MIN_IDENTITIES,
    TrainConfig,
    calibration_holdout_split,
    check_calibration_holdout,
    resolve_calibration_holdout,
)


def test_whole_identities_with_two_photos_are_held_out_seeded():
    # 10 identities: a..h with 3 photos each, i and j with one photo (they give no same-animal pair)
    labels = [c for c in "abcdefgh" for _ in range(3)] + ["i", "j"]
    held = calibration_holdout_split(labels, share=0.2, seed=0)
    held_ids = {lab for lab, h in zip(labels, held) if h}
    assert len(held_ids) == 2  # round(0.2 x 10 identities)
    assert not held_ids & {"i", "j"}
    for lab in held_ids:  # whole identities
        assert all(h for lab2, h in zip(labels, held) if lab2 == lab)
    assert np.array_equal(held, calibration_holdout_split(labels, share=0.2, seed=0))
    # at least two identities always stay to train on
    assert calibration_holdout_split(["a", "a", "b", "b"], share=0.49).sum() == 0


@pytest.mark.parametrize("share", [0.0, 0.5, -0.1, 0.7])
def test_a_share_outside_the_open_interval_is_refused(share):
    with pytest.raises(ValueError, match=r"between 0 and 0.5 \(e.g. 0.2\)"):
        check_calibration_holdout(share)


def test_the_training_config_keeps_the_share_and_zero_means_none():
    assert TrainConfig().calibration_holdout is None  # decided when the training set is known
    assert TrainConfig(calibration_holdout=0.0).calibration_holdout == 0.0
    assert TrainConfig(calibration_holdout=0.2).to_dict()["calibration_holdout"] == 0.2
    with pytest.raises(ValueError, match="between 0 and 0.5"):
        TrainConfig(calibration_holdout=0.6)


def test_by_default_a_fifth_of_a_large_benchmark_is_held_out_and_nothing_else():
    """Unasked, a benchmark of 50 or more train identities keeps a fifth out of training; fewer, or training on
    the catalogue's decisions, keeps none; a share asked for (0 included) is kept; every answer says why."""
    n = AUTO_HOLDOUT_MIN_IDENTITIES
    share, why = resolve_calibration_holdout(None, source="benchmark", n_identities=n)
    assert share == 0.2 and "by default" in why and "--hold-out-for-calibration 0" in why
    share, why = resolve_calibration_holdout(None, source="benchmark", n_identities=n - 1)
    assert share == 0.0 and f"{n - 1} train identities" in why
    assert resolve_calibration_holdout(None, source="catalogue", n_identities=500)[0] == 0.0
    assert resolve_calibration_holdout(0.0, source="benchmark", n_identities=500) == \
        (0.0, "no hold-out for calibration (asked for)")
    assert resolve_calibration_holdout(0.3, source="benchmark", n_identities=10)[0] == 0.3


def test_cli_refuses_a_bad_share_before_queueing(tmp_path, capsys):
    data = str(tmp_path / "data")
    assert cli(["--data-dir", data, "train", "--benchmark", "nyala", "--hold-out-for-calibration", "0.5"]) == 1
    assert "between 0 and 0.5" in capsys.readouterr().err
    assert cli(["--data-dir", data, "jobs", "list", "--json"]) == 0
    assert capsys.readouterr().out.strip() in ("[]", "")


def test_training_keeps_the_held_out_identities_for_the_pipelines_calibration(tmp_path, monkeypatch):
    """A run with a hold-out never sees those identities; they are recorded with the model, and a spot pipeline
    built on it calibrates on them alone: not on what it learned, nor on its validation photos of animals it
    learned, unless too few photos of unlearned animals remain (then on the photos it did not train on, then on
    the whole train split; never on the test split)."""
    from sqlalchemy import select

    from db.identify.benchmarks import create_benchmark, load_benchmark
    from db.models import JobStatus, Model
    from db.session import open_catalogue
    import db.identify.spots as spots
    from db.identify.spots import _calibration_exclusion, _trained_on, calibration_image_ids
    from jobs import queue
    from tests.synthetic_reid import make_reid_set

    manifest = make_reid_set(tmp_path / "photos", individuals=12, photos_each=6, seed=2, masks=True)
    cat = open_catalogue(tmp_path / "data")
    create_benchmark(cat, "syn", manifest=manifest, split="identity", test_fraction=0.3, seed=0)
    job = queue.submit_and_run(cat, "train", {"benchmark": "syn", "views": 2, "steps_per_epoch": 2, "epochs": 1,
                                              "diagnose": False, "calibration_holdout": 0.25, "name": "held"})
    assert job.status == JobStatus.succeeded, f"{job.message}\n{job.error}"
    with cat.unit_of_work() as s:
        row = s.scalar(select(Model).where(Model.name == "held"))
        snapshot, record = dict(row.data_snapshot), dict(row.training_config)
    train = load_benchmark(cat, "syn", split="train")
    label = dict(zip(train.image_ids, train.labels))
    held = record["calibration_holdout_image_ids"]
    held_animals = {label[i] for i in held}
    assert len(held_animals) == round(0.25 * len(set(train.labels)))  # whole identities: every photo of each
    assert sorted(held) == sorted(i for i in train.image_ids if label[i] in held_animals)
    assert not set(held) & set(snapshot["image_ids"])
    assert record["train_config"]["calibration_holdout"] == 0.25
    trained_on = _trained_on(cat, "held")
    assert not set(trained_on) & set(held)
    assert set(held) <= set(calibration_image_ids(cat, "syn", exclude=trained_on, limit=10_000))
    validation = record["validation_image_ids"]
    assert validation and not set(validation) & set(held)  # photos of animals it learned, not trained on
    test_ids = load_benchmark(cat, "syn", split="test").image_ids

    def calibration_set(min_photos: int) -> tuple[set[int], str]:
        monkeypatch.setattr(spots, "MIN_HELD_OUT_PHOTOS", min_photos)
        exclude, what = _calibration_exclusion(cat, "syn", trained_on, test_ids, everything=10_000)
        return set(calibration_image_ids(cat, "syn", exclude=exclude, limit=10_000)), what

    assert calibration_set(len(held)) == (set(held), "animals")
    assert calibration_set(len(held) + 1) == (set(held) | set(validation), "photos")
    assert calibration_set(10_000) == (set(train.image_ids), "")  # the train split, said so; never a test photo
    assert _calibration_exclusion(cat, "syn", [], test_ids, everything=10_000) == (list(test_ids), "")
    cat.close()
