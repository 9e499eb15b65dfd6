"""Calibrated confidence: isotonic, monotone, within [0, 1], from decisions (benchmark pairs while few)."""

from __future__ import annotations

import numpy as np
import pytest

from core.calibration import fit_calibrator, reliability
from db.benchmarks import create_benchmark
from db.calibration import (calibration_report, calibrator_for, new_individual_threshold,
                            set_new_individual_threshold)
from db.models import DecisionKind, Image, MatchDecision
from db.session import open_catalogue
from tests.synthetic_reid import make_reid_set


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_isotonic_calibration_is_monotone_and_bounded(seed):
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0, 1, 500)
    outcomes = (rng.uniform(0, 1, 500) < scores ** 2).astype(int)  # true P(same | s) = s^2
    cal = fit_calibrator(scores, outcomes)
    grid = np.linspace(-0.5, 1.5, 201)
    p = cal.probability(grid)
    assert np.all(np.diff(p) >= 0) and p.min() >= 0 and p.max() <= 1
    assert cal.probability([0.9])[0] == pytest.approx(0.81, abs=0.12)
    assert cal.probability([0.2])[0] == pytest.approx(0.04, abs=0.08)
    assert cal.n_outcomes == 500 and cal.n_positive == int(outcomes.sum())


def test_calibration_needs_both_outcomes():
    with pytest.raises(ValueError, match="both 'same' and 'not the same'"):
        fit_calibrator(np.linspace(0, 1, 20), np.ones(20))
    with pytest.raises(ValueError, match="at least"):
        fit_calibrator([0.1, 0.9], [0, 1])


def test_reliability_hand_worked():
    """Bins [0,0.5) and [0.5,1]: predictions 0.2,0.2 (outcomes 0,1) and 0.8,0.8 (1,1):
    observed 0.5 vs 0.2 and 1.0 vs 0.8 -> ECE = 0.5*0.3 + 0.5*0.2 = 0.25."""
    rel = reliability([0.2, 0.2, 0.8, 0.8], [0, 1, 1, 1], n_bins=2)
    assert [(b["n"], b["predicted"], b["observed"]) for b in rel["bins"]] == [(2, 0.2, 0.5), (2, 0.8, 1.0)]
    assert rel["ece"] == pytest.approx(0.25)


def test_db_calibrator_uses_decisions_and_benchmark_pairs_while_few(tmp_path):
    manifest = make_reid_set(tmp_path / "photos", individuals=6, photos_each=5, seed=9)
    cat = open_catalogue(tmp_path / "data")
    create_benchmark(cat, "syn", manifest=manifest, split="identity", test_fraction=0.5, seed=0)
    cal = calibrator_for(cat, "efficientnet_lite0")
    assert cal is not None and cal.sources["decisions"] == 0
    assert cal.sources["benchmark syn top-5 pairs"] > 0
    # curators' decisions: high scores were the same animal, low ones were not
    with cat.unit_of_work() as s:
        ids = [i for (i,) in s.query(Image.id).all()]
        for k in range(60):
            same = k % 2 == 0
            s.add(MatchDecision(query_image_id=ids[k % len(ids)], candidate_image_id=ids[(k + 1) % len(ids)],
                                decision=DecisionKind.same if same else DecisionKind.not_same,
                                score=0.9 - 0.001 * k if same else 0.3 + 0.001 * k, model_name="efficientnet_lite0",
                                user="ana"))
        s.commit()
    cal = calibrator_for(cat, "efficientnet_lite0")
    assert cal.sources == {"decisions": 60} and cal.n_outcomes == 60
    assert cal.probability([0.95])[0] == pytest.approx(1.0) and cal.probability([0.2])[0] == pytest.approx(0.0)
    report = calibration_report(cat, "efficientnet_lite0")
    assert report["n_outcomes"] == 60 and report["reliability_on_decisions"]["ece"] == pytest.approx(0.0)
    assert new_individual_threshold(cat) == 0.5
    assert set_new_individual_threshold(cat, 0.3) == 0.3 and new_individual_threshold(cat) == 0.3
    with pytest.raises(ValueError, match="between 0 and 1"):
        set_new_individual_threshold(cat, 1.5)
    cat.close()
