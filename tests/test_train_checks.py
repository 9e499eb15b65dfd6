"""Issue 24 item 4: a training request that cannot run is refused when it is made, before a job exists --
``--device cuda`` on a machine without CUDA (unless the Ray worker serving the catalogue declares GPUs), and a
LoRA rank wider than the backbone's narrowest adapted layer (the words the running job would use)."""

from __future__ import annotations

import pytest
import torch

from app.cli import main as cli
from db.identify.benchmarks import create_benchmark
from db.catalogue import CatalogueError
from db.session import open_catalogue
from jobs import queue
from jobs.actions import training
from jobs.requests.training import TrainRequest
from jobs.worker import declare_ray_cluster, forget_ray_cluster, ray_cluster_gpus
from tests.synthetic_reid import make_reid_set

NO_CUDA = "device 'cuda' was asked for but this machine has no usable CUDA GPU"
RANK_17 = r"LoRA rank 17 is larger than layer 'blocks.0.0.conv_pw''s width 16 .*; use --rank 16 or less"


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    root = tmp_path_factory.mktemp("checks")
    manifest = make_reid_set(root / "photos", individuals=4, photos_each=4, seed=5)
    cat = open_catalogue(root / "data")
    create_benchmark(cat, "syn", manifest=manifest, split="identity", test_fraction=0.5, seed=0)
    yield cat
    cat.close()


@pytest.fixture()
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def n_train_jobs(cat) -> int:
    return len(queue.list_jobs(cat, limit=1000, kind="train"))


def test_cuda_without_cuda_is_refused_before_a_job_exists(syn, no_cuda, capsys):
    before = n_train_jobs(syn)
    with pytest.raises(CatalogueError, match=NO_CUDA):
        training.train(syn, TrainRequest(benchmark="syn", device="cuda"))
    assert cli(["--data-dir", str(syn.data_dir), "train", "--benchmark", "syn", "--device", "cuda"]) == 1
    err = capsys.readouterr().err
    assert NO_CUDA in err and "--device cpu or auto" in err
    assert n_train_jobs(syn) == before  # nothing was queued
    # auto and cpu are queued as before
    job_id = training.train(syn, TrainRequest(benchmark="syn", device="auto"))
    assert queue.get_job(syn, job_id).params["device"] == "auto"
    queue.request_cancel(syn, job_id)


def test_cuda_is_accepted_when_the_serving_ray_cluster_declares_gpus(syn, no_cuda):
    assert ray_cluster_gpus(syn) == 0
    declare_ray_cluster(syn, label="ray:head:6379", gpus=0)  # a cluster of CPUs only: still refused
    with pytest.raises(CatalogueError, match=NO_CUDA):
        training.train(syn, TrainRequest(benchmark="syn", device="cuda"))
    declare_ray_cluster(syn, label="ray:head:6379", gpus=2)
    try:
        job_id = training.train(syn, TrainRequest(benchmark="syn", device="cuda"))
        assert queue.get_job(syn, job_id).params["device"] == "cuda"
        queue.request_cancel(syn, job_id)
    finally:
        forget_ray_cluster(syn)
    assert ray_cluster_gpus(syn) == 0
    with pytest.raises(CatalogueError, match=NO_CUDA):  # the Ray worker stopped: refused again
        training.train(syn, TrainRequest(benchmark="syn", device="cuda"))


def test_a_lora_rank_wider_than_the_narrowest_layer_is_refused_before_a_job_exists(syn, capsys):
    before = n_train_jobs(syn)
    wide = TrainRequest(benchmark="syn", config={"adapter": "lora", "lora_rank": 17})
    with pytest.raises(CatalogueError, match=RANK_17):
        training.train(syn, wide)
    assert cli(["--data-dir", str(syn.data_dir), "train", "--benchmark", "syn", "--adapter", "lora",
                "--rank", "17"]) == 1
    assert "LoRA rank 17 is larger than layer 'blocks.0.0.conv_pw''s width 16" in capsys.readouterr().err
    assert n_train_jobs(syn) == before
    job_id = training.train(syn, TrainRequest(benchmark="syn", config={"adapter": "lora", "lora_rank": 16}))
    assert queue.get_job(syn, job_id).params["lora_rank"] == 16  # the narrowest layer takes 16: queued
    queue.request_cancel(syn, job_id)


def test_the_ray_worker_declares_its_clusters_gpus_while_it_serves(tmp_path, monkeypatch):
    from jobs import ray_engine, worker

    cat = open_catalogue(tmp_path / "data")
    seen = []
    monkeypatch.setattr(ray_engine, "connect", lambda address=None, num_cpus=None: "ray:head:6379")
    monkeypatch.setattr(ray_engine, "cluster_gpus", lambda: 4.0)
    monkeypatch.setattr(ray_engine, "work_loop", lambda c, **kw: seen.append(ray_cluster_gpus(c)))
    worker.main_loop(cat, engine="ray", queues=("heavy",))
    assert seen == [4.0]  # declared while its threads ran
    assert ray_cluster_gpus(cat) == 0  # and forgotten when it stopped
    cat.close()
