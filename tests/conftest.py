"""Shared fixtures: the nyala photos, a fresh data directory, offline settings."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

REPO_ROOT = Path(__file__).resolve().parent.parent
NYALA_DIR = REPO_ROOT.parent / "shared" / "data" / "nyala"
DEMO_DIR = REPO_ROOT / "assets" / "demo"


@pytest.fixture(scope="session")
def nyala_dir() -> Path:
    """The shared nyala photo set; skipped (with a reason) only outside the project machines."""
    if not (NYALA_DIR / "manifest.csv").exists():
        pytest.skip("../shared/data/nyala is not present")
    return NYALA_DIR


@pytest.fixture(scope="session")
def nyala_manifest(nyala_dir: Path) -> list[dict[str, str]]:
    with open(nyala_dir / "manifest.csv", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    """An empty Rosette data directory."""
    d = tmp_path / "rosette-data"
    d.mkdir()
    return d
