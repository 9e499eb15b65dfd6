"""The Ray engine of the job worker on a local Ray cluster (loopback, 2 CPUs): embedding through Ray Data and
evaluation through a Ray task give the local engine's features and metrics; cancel, an unreachable cluster and
a Ray worker killed mid-job leave the job with a message; a killed job never leaves half a feature file."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
from ray.exceptions import WorkerCrashedError

from app.cli import main as cli
from core.identify.features import read_cached
from db.embeddings import all_image_ids, embed_images, get_backbone
from db.models import JobStatus
from db.session import Catalogue
from jobs import queue, ray_engine
from jobs.context import JobContext
from jobs.registry import HEAVY, register_job_kind
from jobs.worker import run_once
from tests.synthetic_reid import synthetic_catalogue

pytestmark = pytest.mark.ray
REPO_ROOT = Path(__file__).resolve().parent.parent
BACKBONE = "efficientnet_lite0"


@register_job_kind("ray_embed_then_die", queue=HEAVY)
def embed_then_die_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Test-only kind: embeds the photos 4 at a time and kills its own process once the first batch is cached
    (a Ray worker lost mid-job, as out-of-memory would)."""

    def progress(done: int, total: int) -> None:
        if done >= 4:
            os._exit(1)

    embed_images(cat, all_image_ids(cat), backbone=get_backbone(cat, BACKBONE), batch_size=4, progress=progress)
    return {"summary": "never reached"}


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    """One local Ray cluster on loopback for the module; its workers register this module's job kinds too."""
    env = {"ROSETTE_JOB_KINDS": "tests.job_kinds,tests.test_ray",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})
    yield
    ray.shutdown()


def _catalogue(root: Path) -> Catalogue:
    cat, _ = synthetic_catalogue(root, individuals=5, photos_each=4, seed=0)  # 20 photos, benchmark "syn"
    return cat


def _features(cat: Catalogue) -> dict[Path, np.ndarray]:
    root = cat.cache_dir / "features"
    return {p.relative_to(root): np.load(p) for p in sorted(root.rglob("*.npy"))}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a Ray Data actor starts torch and the backbone: ~20-30 s on 2 busy cores
def test_embed_job_through_ray_data_gives_the_local_features_and_local_reads_find_them(tmp_path, capsys,
                                                                                        monkeypatch):
    import jobs.kinds

    monkeypatch.setattr(jobs.kinds, "EMBED_CHUNK", 7)  # the local job embeds 20 photos in chunks of 7, 7 and 6
    on_ray, local = _catalogue(tmp_path / "ray"), _catalogue(tmp_path / "local")
    jid = queue.submit(on_ray, "embed", {"backbone": BACKBONE})
    assert ray_engine.run_one(on_ray) == jid
    job = queue.get_job(on_ray, jid)
    assert job.status == JobStatus.succeeded, job.error
    assert job.worker == "ray:" and job.progress == 1.0  # the engine is named in the jobs table
    assert job.result["images"] == 20 and job.result["computed"] == 20 and job.result["dim"] == 1280
    local_job = queue.submit_and_run(local, "embed", {"backbone": BACKBONE})
    assert local_job.status == JobStatus.succeeded and local_job.result["images"] == 20
    assert local_job.result["dim"] == 1280 and local_job.progress == 1.0

    ray_feats, local_feats = _features(on_ray), _features(local)
    assert len(ray_feats) == 20 and set(ray_feats) == set(local_feats)  # the same fingerprint, variant and keys
    for path, vec in ray_feats.items():
        assert vec.dtype == np.float32 and np.allclose(vec, local_feats[path], atol=1e-5, rtol=0), path

    # a later local read finds every vector cached: nothing is rewritten, and it returns exactly those vectors
    files = sorted((on_ray.cache_dir / "features").rglob("*.npy"))
    stamps = [f.stat().st_mtime_ns for f in files]
    ids = all_image_ids(on_ray)
    emb = embed_images(on_ray, ids, backbone=get_backbone(on_ray, BACKBONE))
    assert [f.stat().st_mtime_ns for f in files] == stamps
    assert sorted((on_ray.cache_dir / "features").rglob("*.npy")) == files
    assert {tuple(np.round(r, 6)) for r in emb} == {tuple(np.round(v, 6)) for v in ray_feats.values()}

    capsys.readouterr()
    assert cli(["--data-dir", str(on_ray.data_dir), "jobs", "list"]) == 0
    assert "ray:" in capsys.readouterr().out  # `rosette jobs` shows where it ran
    on_ray.close()
    local.close()


def test_eval_job_as_a_ray_task_gives_the_local_metrics(tmp_path):
    on_ray, local = _catalogue(tmp_path / "ray"), _catalogue(tmp_path / "local")
    params = {"benchmark": "syn", "backbone": BACKBONE}
    jid = queue.submit(on_ray, "evaluate", params)
    assert run_once(on_ray, engine="ray", queue=HEAVY) == jid
    job = queue.get_job(on_ray, jid)
    assert job.status == JobStatus.succeeded, job.error
    assert job.worker == "ray:"
    assert "started in process" in (on_ray.data_dir / "jobs" / str(jid) / "log.txt").read_text()
    ref = queue.submit_and_run(local, "evaluate", params)
    assert ref.status == JobStatus.succeeded
    for key in ("map_macro", "map_micro"):
        assert abs(job.result[key] - ref.result[key]) <= 1e-5, key
    for key in ("cmc_macro", "cmc_micro"):
        assert set(job.result[key]) == set(ref.result[key])
        for k, v in ref.result[key].items():
            assert abs(job.result[key][k] - v) <= 1e-5
    assert job.result["n_queries"] == ref.result["n_queries"] > 0
    on_ray.close()
    local.close()


def test_cancel_of_a_running_ray_job_stops_its_task(tmp_path):
    from db.session import open_catalogue

    cat = open_catalogue(tmp_path / "data")
    # a job that ignores the request: only ray.cancel(force=True) after the grace period stops it
    jid = queue.submit(cat, "sleep_heavy", {"steps": 600, "seconds": 0.1, "ignore_cancel": True})
    runner = threading.Thread(target=ray_engine.run_one, args=(cat,), kwargs={"cancel_grace_s": 0.5})
    runner.start()
    deadline = time.monotonic() + 60
    while queue.get_job(cat, jid).progress <= 0:  # its task is running and reporting progress
        assert time.monotonic() < deadline, "the Ray task never reported progress"
        time.sleep(0.1)
    queue.request_cancel(cat, jid, by="ana")
    runner.join(timeout=60)
    assert not runner.is_alive()
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.cancelled and job.progress < 1.0
    assert job.message.startswith("cancelled by ana") and "Ray task was stopped" in job.message
    cat.close()


def test_an_unreachable_cluster_is_named_and_the_job_waits_with_the_message(tmp_path, capsys):
    from db.session import open_catalogue

    cat = open_catalogue(tmp_path / "data")
    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
    jid = queue.submit(cat, "sleep_heavy", {"steps": 1})
    with pytest.raises(ray_engine.RayUnavailable, match=f"the Ray cluster at {address} cannot be reached"):
        run_once(cat, engine="ray", address=address)
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.queued and job.attempts == 0 and job.worker is None
    assert address in job.message and job.message.startswith("waiting:")

    capsys.readouterr()
    for extra in (["--once"], []):  # one job, and the long-running worker: both end with one line
        assert cli(["--data-dir", str(cat.data_dir), "worker", "--engine", "ray", "--address", address, *extra]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and address in err and "Traceback" not in err
    assert queue.get_job(cat, jid).status == JobStatus.queued
    assert cli(["--data-dir", str(cat.data_dir), "worker", "--address", address, "--once"]) == 1
    assert "--engine ray" in capsys.readouterr().err
    cat.close()


@pytest.mark.slow  # the Ray task starts torch and the backbone before it dies
def test_a_killed_ray_worker_requeues_then_fails_and_leaves_no_partial_feature_file(tmp_path):
    cat = _catalogue(tmp_path / "ray")
    jid = queue.submit(cat, "ray_embed_then_die", {}, max_attempts=2)
    assert ray_engine.run_one(cat) == jid
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.queued and job.attempts == 1
    assert "Ray worker was lost" in job.message and "(attempt 1 of 2); queued again" in job.message
    root = cat.cache_dir / "features"
    files = sorted(root.rglob("*.npy"))
    assert len(files) == 4  # the first batch, each file whole; nothing half-written under a final name
    assert all(read_cached(f, 1280) is not None for f in files)
    assert list(root.rglob("*.tmp")) == []  # no temporary file left behind either

    cat.close()


def test_a_ray_worker_killed_on_the_last_attempt_fails_the_job_with_a_message(tmp_path):
    from db.session import open_catalogue

    cat = open_catalogue(tmp_path / "data")
    jid = queue.submit(cat, "sleep_heavy", {"steps": 3, "crash": 0}, max_attempts=1)  # SIGKILLs its own process
    assert ray_engine.run_one(cat) == jid
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.failed and job.message.startswith("failed: its Ray worker was lost")
    assert "(attempt 1 of 1)" in job.message and job.error and job.result is None
    cat.close()


def test_lost_workers_are_told_from_errors_in_rosettes_code():
    assert ray_engine.is_lost(WorkerCrashedError())
    try:
        try:
            raise WorkerCrashedError()
        except WorkerCrashedError as inner:
            raise RuntimeError("the pipeline stopped") from inner
    except RuntimeError as outer:
        assert ray_engine.is_lost(outer)
    assert not ray_engine.is_lost(ValueError("no such photo"))
    assert ray_engine.engine_label("10.0.0.5:6379") == "ray:10.0.0.5:6379" and ray_engine.engine_label(None) == "ray:"
    with pytest.raises(ray_engine.RayUnavailable, match="not HOST:PORT"):
        ray_engine.connect("no-port-here")
