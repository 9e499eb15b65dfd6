"""The spot-evidence figures on the shared nyala split (README, "Spot evidence"): identity split 0.3, seed 0,
GrabCut masks, same-sighting photos excluded. For the frozen default backbone and for a SupCon-trained one
(last 4 blocks, 15 epochs, a fifth of the train identities held out for calibration), the fused pipeline
(global + verification + LNBNN) is at least as good as each of its components within 0.005 on macro mAP and
macro CMC@1, and reaches at least 1.15x the global model's mAP and 1.9x its CMC@1.

It needs what the suite's 15 minutes cannot hold: GrabCut masks of the 1,205 photos (about 12 minutes on 2
cores), the SupCon training (about 10) and two evaluations (1-2 each). So it runs only when
``ROSETTE_SPOT_FIGURES`` names a folder for its catalogue (kept between runs: the photos are imported, masked
and the model trained once, then reused) and ../shared/data/nyala is present; otherwise it says which is
missing and skips. ``ROSETTE_SPOT_FIGURES=/tmp/spot-figures pytest tests/test_spot_figures.py -s``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.cli import main as cli_main
from tests.conftest import SHARED_NYALA_DIR, shared_nyala_present

FOLDER = os.environ.get("ROSETTE_SPOT_FIGURES", "").strip()
SUPCON = "spot-figures-supcon-b4"
#: every component the evaluation reports: the global model alone, + verification, + LNBNN, all three by the mean of
#: their probabilities (every pipeline built before fusions were chosen), and LNBNN ranking the whole gallery
COMPONENTS = ("global", "global+verification", "global+lnbnn", "fused", "lnbnn_alone")

pytestmark = [pytest.mark.timeout(3600), pytest.mark.skipif(
    not FOLDER or not shared_nyala_present(),
    reason=("the spot-evidence figures on nyala take about 25 minutes (GrabCut masks, a SupCon training): set "
            "ROSETTE_SPOT_FIGURES to a folder to run them" if not FOLDER else
            "../shared/data/nyala is absent: the spot-evidence figures need the shared nyala photos"))]


def _cli(data: Path, capsys, *args: str) -> str:
    rc = cli_main(["--data-dir", str(data), *args])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    return out.out


@pytest.fixture(scope="module")
def catalogue() -> Path:
    """The folder's catalogue with the nyala photos, the benchmark and a GrabCut mask on every photo."""
    data = Path(FOLDER)
    if not (data / "catalogue.db").exists():
        assert cli_main(["--data-dir", str(data), "import", str(SHARED_NYALA_DIR / "manifest.csv")]) == 0
        assert cli_main(["--data-dir", str(data), "benchmark", "create", "nyala", "--from-manifest",
                         str(SHARED_NYALA_DIR / "manifest.csv"), "--split", "identity", "--test-fraction", "0.3",
                         "--seed", "0"]) == 0
    assert cli_main(["--data-dir", str(data), "mask", "--masker", "grabcut", "--only-missing"]) == 0
    return data


def _metrics(m: dict) -> tuple[float, float]:
    return float(m["map_macro"]), float(m["cmc_macro"]["1"])


def _check(result: dict, label: str) -> None:
    fused = _metrics(result)
    parts = {name: _metrics(result["components"][name]) for name in COMPONENTS if name in result["components"]}
    g_map, g_cmc = parts["global"]
    print(f"\n{label}: fused mAP {fused[0]:.3f} CMC@1 {fused[1]:.3f} ({fused[0] / g_map:.3f}x, "
          f"{fused[1] / g_cmc:.3f}x the global model); "
          + "; ".join(f"{n} {m:.3f} / {c:.3f}" for n, (m, c) in parts.items()))
    assert set(parts) == set(COMPONENTS), parts
    for name, (m, c) in parts.items():
        assert fused[0] >= m - 0.005 and fused[1] >= c - 0.005, (label, name, (m, c), fused)
    assert fused[0] >= 1.15 * g_map and fused[1] >= 1.9 * g_cmc, (label, fused, parts["global"])


def test_fused_pipeline_figures_with_the_frozen_backbone(catalogue, capsys):
    out = _cli(catalogue, capsys, "eval", "--backbone", "efficientnet_lite0", "--benchmark", "nyala", "--verify",
               "sift", "--lnbnn", "--json")
    with capsys.disabled():
        _check(json.loads(out), "frozen efficientnet_lite0")


@pytest.mark.xfail(strict=True, reason="not reached: on the SupCon model the fused CMC@1 is 1.76x the global "
                   "model's (0.253 against 0.144), short of 1.9x (95% interval over the 54 test animals 1.27x to "
                   "2.35x); mAP 1.30x and every component are met")
def test_fused_pipeline_figures_with_a_supcon_trained_backbone(catalogue, capsys):
    models = json.loads(_cli(catalogue, capsys, "models", "list", "--json"))
    if not any(m.get("name") == SUPCON for m in models):
        _cli(catalogue, capsys, "train", "--head", "supcon", "--benchmark", "nyala", "--blocks", "4", "--epochs",
             "15", "--hold-out-for-calibration", "0.2", "--name", SUPCON, "--no-diagnose", "--wait", "--json")
    out = _cli(catalogue, capsys, "eval", "--model", SUPCON, "--benchmark", "nyala", "--verify", "sift", "--lnbnn",
               "--json")
    with capsys.disabled():
        _check(json.loads(out), f"SupCon, last 4 blocks ({SUPCON})")
