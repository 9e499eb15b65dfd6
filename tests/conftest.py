"""Shared fixtures: the nyala photos, a fresh data directory, offline settings."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

try:  # pytest 9 keeps a test's id here (see pytest_collection_modifyitems)
    from _pytest.nodeid import NodeId
except ImportError:  # older pytest: xdist's own hook writes the group into the id
    NodeId = None

from tests.pg_cluster import create_database, throwaway_cluster

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
# the queue tests' own job kinds (sleep, sleep_heavy): registered in this process by the fixture below, and in
# the worker's child processes, which inherit this variable
os.environ["ROSETTE_JOB_KINDS"] = "tests.job_kinds"
# under pytest-xdist each worker (and the servers and jobs it starts, which inherit this) computes on one thread:
# the workers already fill the cores, and two thread pools per core only trade places
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_threads, "1")

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_NYALA_DIR = REPO_ROOT.parent / "shared" / "data" / "nyala"
DEMO_DIR = REPO_ROOT / "assets" / "demo"


def shared_nyala_present() -> bool:
    """``../shared/data/nyala`` is there (and not overridden by ``ROSETTE_TEST_NYALA=demo``, a fresh clone's view)."""
    if os.environ.get("ROSETTE_TEST_NYALA", "").lower() == "demo":
        return False
    return (SHARED_NYALA_DIR / "manifest.csv").exists()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Groups for ``pytest -n N --dist loadgroup``: each module stays on one worker, so its module-scoped catalogue
    is built once and its tests run in order; every browser test shares one group, so one browser and one Rosette
    server run at a time (two browser modules at once on 2 cores slowed each other past their timeouts).

    xdist reads a group from the test's id (``path::name@group``), which its own hook writes into ``item._nodeid``;
    pytest 9 keeps the id in ``item._id`` instead, so without the line below every test was scattered on its own."""
    for item in items:
        path = str(item.fspath).replace(os.sep, "/")
        group = "browser" if "/tests/browser/" in path else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
        grouped = getattr(config.option, "loadgroup", False)  # set on xdist's workers only
        if NodeId is not None and grouped and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{group}")


def pytest_report_header(config) -> str:
    if shared_nyala_present():
        return "rosette: nyala photos from ../shared/data/nyala"
    return "rosette: nyala photos from assets/demo (the 54 labelled demo photos; ../shared is absent)"


@pytest.fixture(scope="session")
def nyala_dir(tmp_path_factory) -> Path:
    """The nyala photo set: ``../shared/data/nyala`` (1,213 photos) when present, else a stand-in made from
    what the repository ships: the labelled photos of ``assets/demo`` (same layout: ``images/`` and
    ``manifest.csv`` with identity, flank and sighting). Never skipped; tests read counts from the manifest."""
    if shared_nyala_present():
        return SHARED_NYALA_DIR
    root = tmp_path_factory.mktemp("nyala-from-demo")
    (root / "images").mkdir()
    with open(DEMO_DIR / "manifest.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        rows = [r for r in reader if r["identity"].strip()]  # the demo's unlabelled photos have no truth here
        columns = reader.fieldnames
    for r in rows:
        (root / "images" / r["filename"]).write_bytes((DEMO_DIR / "images" / r["filename"]).read_bytes())
    with open(root / "manifest.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return root


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


@pytest.fixture(autouse=True, scope="session")
def test_job_kinds():
    """Registers ``tests/job_kinds.py`` (the ``sleep`` and ``sleep_heavy`` kinds) for the whole run."""
    from jobs.registry import load_extra_job_kinds

    load_extra_job_kinds()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster for the whole test session, started only when a test asks for it: the URL
    ``postgresql+psycopg://rosette:<pw>@127.0.0.1:<port>/rosette`` (``rosette`` is its superuser). Raises, never
    skips, when PostgreSQL is not installed."""
    with throwaway_cluster() as url:
        yield url


@pytest.fixture()
def pg_db_url(pg_url: str) -> str:
    """The URL of a fresh, empty database on the session's PostgreSQL cluster (one per test)."""
    return create_database(pg_url)
