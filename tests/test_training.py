"""Training end to end on a photo set the tests make (tests/synthetic_reid.py): heads beat frozen features on
the validation set, models register with their snapshot and load wherever a backbone does, a killed job
resumes from its checkpoint, test photos are never trained on, and the CLI."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

from app.cli import main as cli
from core.identify.training import augment, identity_batches, resolve_device, set_trainable_blocks, validation_split
from db.identify.benchmarks import create_benchmark, load_benchmark
from db.catalogue import CatalogueError
from db.models import JobStatus, Model
from db.session import open_catalogue
from jobs import queue
from tests.synthetic_reid import make_reid_set

FAST = {"views": 4, "steps_per_epoch": 3, "epochs": 3, "diagnose": False}


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    """One catalogue with a synthetic benchmark 'syn' (12 individuals x 8 photos, alpha masks), shared so the
    cached training views are computed once."""
    root = tmp_path_factory.mktemp("train")
    manifest = make_reid_set(root / "photos", individuals=12, photos_each=8, seed=1, masks=True)
    cat = open_catalogue(root / "data")
    create_benchmark(cat, "syn", manifest=manifest, split="identity", test_fraction=0.3, seed=0)
    yield cat, manifest
    cat.close()


def train(cat, **params):
    job = queue.submit_and_run(cat, "train", {"benchmark": "syn", **FAST, **params})
    assert job.status == JobStatus.succeeded, f"{job.message}\n{job.error}"
    return job


# --------------------------------------------------------------------------- pure pieces

def test_validation_split_is_identity_covering_and_prefers_other_sightings():
    labels = ["a"] * 5 + ["b"] * 4 + ["c"] * 2
    sightings = ["a1", "a1", "a2", "a2", "a3", "b1", "b1", "b2", "b2", "c1", "c2"]
    is_val = validation_split(labels, sightings, per_identity=2, min_photos=4, seed=0)
    val = [(lab, s) for lab, s, v in zip(labels, sightings, is_val) if v]
    assert sorted(lab for lab, _ in val) == ["a", "a", "b", "b"]  # c has too few photos to spare two
    for ident in ("a", "b"):
        assert len({s for lab, s in val if lab == ident}) == 2  # two different sightings
    assert np.array_equal(is_val, validation_split(labels, sightings, per_identity=2, min_photos=4, seed=0))


def test_identity_batches_are_identity_uniform_and_seeded():
    codes = np.repeat(np.arange(20), 5)
    batches = identity_batches(codes, per_identity=4, identities_per_batch=16, steps=5, seed=3)
    assert len(batches) == 5
    for b in batches:
        ids, counts = np.unique(codes[b], return_counts=True)
        assert len(b) == 64 and len(ids) == 16 and set(counts) == {4}
    again = identity_batches(codes, per_identity=4, identities_per_batch=16, steps=5, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(batches, again))
    small = identity_batches(np.repeat(np.arange(3), 2), per_identity=4, identities_per_batch=16, steps=1, seed=0)
    assert len(small[0]) == 12  # only 3 identities: 3 x 4, drawn with replacement


def test_augmentation_never_flips():
    """Left half red, right half blue: over many random crops, rotations and jitters the red side stays left."""
    img = np.zeros((96, 128, 3), dtype=np.uint8)
    img[:, :64, 0] = 255
    img[:, 64:, 2] = 255
    for seed in range(40):
        out = augment(img, size=(64, 64), generator=torch.Generator().manual_seed(seed)).astype(float)
        left, right = out[:, :16], out[:, -16:]
        assert left[..., 0].mean() >= right[..., 0].mean() and right[..., 2].mean() >= left[..., 2].mean()


def test_device_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto").type == "cpu"
    with pytest.raises(ValueError, match="no usable CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device("tpu")


def test_set_trainable_blocks_counts():
    import timm

    model = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=0)
    total = sum(p.numel() for p in model.parameters())
    assert set_trainable_blocks(model, 0) == 0
    two = set_trainable_blocks(model, 2)
    four = set_trainable_blocks(model, 4)
    assert 0 < two < four < total
    assert set_trainable_blocks(model, -1) == total
    assert not model.conv_stem.weight.requires_grad or set_trainable_blocks(model, -1) == total
    set_trainable_blocks(model, 2)
    assert not model.conv_stem.weight.requires_grad and model.conv_head.weight.requires_grad


# --------------------------------------------------------------------------- end to end

def test_head_training_beats_frozen_features_and_registers_the_model(syn):
    cat, _ = syn
    job = train(cat, head="supcon", epochs=10, views=6, steps_per_epoch=4, diagnose=True, name="syn-supcon")
    res = job.result
    assert res["best_val_map_macro"] > res["frozen_val_map_macro"], res
    assert res["runtime"]["device"] == "cpu" and res["runtime"]["torch"] == torch.__version__
    assert res["evaluation"]["map_macro"] > 0 and res["evaluation"]["metric"] == "cosine"
    assert res["diagnostics"]["mirror_tier"] and res["diagnostics"]["bg_fg"] is not None
    # the model row: head, loss, checkpoint hash of the file, the exact training snapshot
    with cat.unit_of_work() as s:
        row = s.query(Model).filter_by(name="syn-supcon").one()
    import hashlib

    assert row.head == "supcon" and row.loss == "supcon" and row.job_id == job.id
    assert hashlib.sha256((cat.data_dir / row.checkpoint_path).read_bytes()).hexdigest() == row.checkpoint_hash
    train_ids = set(load_benchmark(cat, "syn", split="train").image_ids)
    test_ids = set(load_benchmark(cat, "syn", split="test").image_ids)
    assert set(row.data_snapshot["image_ids"]) == train_ids and not test_ids & set(row.data_snapshot["image_ids"])
    assert row.training_config["train_config"]["seed"] == 0 and row.config["weights_sha256"] == row.checkpoint_hash
    # the validation hold-out is recorded: spot pipelines calibrate on photos the model never learned from,
    # and the hold-out rebuilt for older models (from the snapshot, checked by its hash) is the same one
    from db.identify.spots import _rebuilt_validation_ids, _trained_on, calibration_image_ids

    held = row.training_config["validation_image_ids"]
    assert len(held) == res["n_val"] > 0 and set(held) <= train_ids
    assert sorted(_rebuilt_validation_ids(cat, row.data_snapshot, row.training_config, None)) == sorted(held)
    trained_on = _trained_on(cat, "syn-supcon")
    assert set(trained_on) == train_ids - set(held) and _trained_on(cat, "efficientnet_lite0") == []
    assert set(calibration_image_ids(cat, "syn", exclude=trained_on)) <= set(held)
    # metrics.jsonl: the frozen baseline at epoch 0, then one row per epoch with the loss and validation mAP
    rows = queue.read_metrics(cat, job.id)
    assert rows[0]["epoch"] == 0 and rows[0]["frozen"]
    assert [r["epoch"] for r in rows[1:]] == list(range(1, res["epochs_run"] + 1))
    assert all("train_loss" in r and "val_map_macro" in r for r in rows[1:])
    # the trained model works where a backbone does
    assert cli(["--data-dir", str(cat.data_dir), "eval", "--backbone", "syn-supcon", "--benchmark", "syn",
                "--json"]) == 0


def test_evaluation_of_the_trained_model_is_reproducible(syn, capsys):
    cat, _ = syn
    if not (cat.data_dir / "models" / "syn-supcon.pt").exists():
        train(cat, head="supcon", name="syn-supcon")
    capsys.readouterr()
    outs = []
    for _ in range(2):
        assert cli(["--data-dir", str(cat.data_dir), "eval", "--backbone", "syn-supcon", "--benchmark", "syn",
                    "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["map_macro"] == outs[1]["map_macro"] and outs[0]["model"] == "syn-supcon"


def test_test_photos_are_never_trained_on(syn):
    from db.identify.training import training_set

    cat, _ = syn
    test_ids = load_benchmark(cat, "syn", split="test").image_ids
    with pytest.raises(CatalogueError, match="never see the photos it is evaluated on"):
        training_set(cat, source="catalogue", benchmark="syn", image_ids=test_ids[:3] + [1])
    tset = training_set(cat, source="catalogue", benchmark="syn")
    assert tset.excluded_test_photos == len(test_ids) and not set(test_ids) & set(tset.image_ids)
    same = training_set(cat, source="catalogue", benchmark="syn")
    assert same.snapshot_hash() == tset.snapshot_hash()


def test_partial_finetune_trains_only_the_last_blocks(syn):
    from core.identify.backbones import create_backbone
    from db.embeddings import get_backbone

    cat, _ = syn
    job = train(cat, head="supcon", blocks=1, epochs=1, steps_per_epoch=2, name="syn-b1")
    ckpt = torch.load(cat.data_dir / "models" / "syn-b1.pt", map_location="cpu", weights_only=False)
    fresh = create_backbone("efficientnet_lite0").model.state_dict()
    tuned = ckpt["backbone_state"]
    changed = {k for k in fresh if not torch.equal(fresh[k], tuned[k])}
    assert changed and all(k.startswith(("blocks.6.", "conv_head")) for k in changed), sorted(changed)[:5]
    assert job.result["runtime"]["device"] == "cpu" and job.result["seconds_per_epoch"] > 0
    emb = get_backbone(cat, "syn-b1").embed([np.zeros((64, 64, 3), np.uint8)])
    assert emb.shape == (1, 512) and np.isclose(np.linalg.norm(emb), 1.0, atol=1e-5)


def test_lorentz_model_scores_exp_minus_distance(syn):
    from core.similarity import pairwise_scores
    from db.embeddings import embed_images, get_backbone

    cat, _ = syn
    job = train(cat, head="lorentz", epochs=2, name="syn-lorentz")
    assert job.result["evaluation"]["metric"] == "lorentz"
    model = get_backbone(cat, "syn-lorentz")
    assert model.metric == "lorentz" and model.config.embed_dim == 257
    ids = load_benchmark(cat, "syn", split="test").image_ids[:5]
    emb = embed_images(cat, ids, backbone=model)
    assert np.allclose(-emb[:, 0] ** 2 + (emb[:, 1:] ** 2).sum(1), -1, atol=1e-2)
    s = pairwise_scores(emb, emb, metric="lorentz")
    assert np.all(s > 0) and np.all(s <= 1 + 1e-6) and np.allclose(np.diag(s), 1, atol=1e-3)


def test_arcface_and_triplet_with_the_anti_symmetry_term(syn):
    cat, _ = syn
    for head in ("arcface", "triplet"):
        job = train(cat, head=head, anti_symmetry=0.5, name=f"syn-{head}-as")
        assert job.result["best_val_map_macro"] is not None
        with cat.unit_of_work() as s:
            row = s.query(Model).filter_by(name=f"syn-{head}-as").one()
        assert row.training_config["train_config"]["anti_symmetry"] == 0.5 and row.loss == head


def test_nearid_uses_composited_distractors_and_reports_ssr_pa(syn):
    cat, _ = syn
    job = train(cat, head="nearid", epochs=2, name="syn-nearid")
    scores = job.result["nearid"]
    assert 0.0 <= scores["ssr"] <= 1.0 and 0.0 <= scores["pa"] <= 1.0 and scores["n_pairs"] > 0


def test_nearid_without_masks_is_refused(tmp_path):
    manifest = make_reid_set(tmp_path / "photos", individuals=4, photos_each=4, seed=2, masks=False)
    cat = open_catalogue(tmp_path / "data")
    create_benchmark(cat, "plain", manifest=manifest, split="identity", test_fraction=0.3, seed=0)
    job = queue.submit_and_run(cat, "train", {"benchmark": "plain", "head": "nearid", **FAST})
    assert job.status == JobStatus.failed and "NearID needs a mask" in job.message
    cat.close()


def test_near_identity_scores_hand_worked():
    from core.identify.training import near_identity_scores

    a = np.array([[1.0, 0], [1, 0], [0, 1], [0, 1]])
    labels = ["x", "x", "y", "y"]
    d = np.array([[0.6, 0.8], [0.6, 0.8], [0.0, 1.0], [1.0, 0]])  # photo 2's distractor equals its positive
    res = near_identity_scores(a, labels, d)
    # margins: x: 1-0.6, 1-0.6 > 0; y: (2->3) 1-1 = 0 (not positive), (3->2) 1-0 > 0
    assert res["pa"] == pytest.approx(3 / 4) and res["ssr"] == pytest.approx(1 / 2)


@pytest.mark.slow
def test_killed_training_job_resumes_from_its_last_checkpoint(syn):
    from jobs.worker import supervise

    cat, _ = syn
    jid = queue.submit(cat, "train", {"benchmark": "syn", "head": "supcon", "views": 4, "epochs": 8,
                                      "steps_per_epoch": 40, "patience": 50, "diagnose": False,
                                      "name": "syn-resumed"}, max_attempts=2)
    assert queue.claim_next(cat) == jid
    t = threading.Thread(target=supervise, args=(cat, jid), daemon=True)
    t.start()
    deadline = time.monotonic() + 180
    while len([r for r in queue.read_metrics(cat, jid) if r.get("epoch", 0) >= 2]) == 0:
        assert time.monotonic() < deadline, "training never reached epoch 2"
        assert queue.get_job(cat, jid).status == JobStatus.running, queue.get_job(cat, jid).message
        time.sleep(0.1)
    os.kill(queue.get_job(cat, jid).pid, signal.SIGKILL)  # as the out-of-memory killer would
    t.join(60)
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.queued and "SIGKILL" in job.message
    done_before = max(r["epoch"] for r in queue.read_metrics(cat, jid))
    assert 2 <= done_before < 8
    assert queue.claim_next(cat) == jid
    assert supervise(cat, jid) == JobStatus.succeeded, queue.get_job(cat, jid).message
    job = queue.get_job(cat, jid)
    log = queue.read_log_tail(cat, jid, max_chars=100_000)
    assert "resumed from the checkpoint after epoch" in log and job.attempts == 2
    assert job.result["epochs_run"] == 8
    epochs = [r["epoch"] for r in queue.read_metrics(cat, jid) if r["epoch"] > 0]
    assert sorted(set(epochs)) == list(range(1, 9))  # nothing lost, at most the killed epoch repeated


def test_cli_train_wait_json_and_models_list(syn, capsys):
    cat, _ = syn
    capsys.readouterr()
    rc = cli(["--data-dir", str(cat.data_dir), "train", "--head", "supcon", "--benchmark", "syn", "--epochs", "2",
              "--views", "4", "--no-diagnose", "--wait", "--json", "--name", "syn-cli"])
    out = capsys.readouterr().out
    assert rc == 0, out
    res = json.loads(out)
    assert res["model"] == "syn-cli" and 0 <= res["map_macro"] <= 1 and res["evaluation"]["map_macro"] == res["map_macro"]
    assert cli(["--data-dir", str(cat.data_dir), "models", "list", "--json"]) == 0
    models = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert models["syn-cli"]["status"] == "candidate" and models["syn-cli"]["head"] == "supcon"
    assert models["syn-cli"]["latest_evaluation"]["map_macro"] == pytest.approx(res["map_macro"])
    # a clear error for a bad head, nothing queued
    n_jobs = len(queue.list_jobs(cat, limit=1000))
    assert cli(["--data-dir", str(cat.data_dir), "train", "--head", "cosface", "--benchmark", "syn"]) == 1
    assert "unknown head" in capsys.readouterr().err and len(queue.list_jobs(cat, limit=1000)) == n_jobs
    # a bad value is refused before anything is queued, not later in the worker (issue 15)
    assert cli(["--data-dir", str(cat.data_dir), "train", "--benchmark", "syn", "--epochs", "0"]) == 1
    assert "epochs must be at least 1" in capsys.readouterr().err and len(queue.list_jobs(cat, limit=1000)) == n_jobs
    from jobs.actions.training import launch_training, training_form

    with pytest.raises(ValueError, match="Epochs must be between 1 and 1000"):
        launch_training(cat, training_form(backbone="efficientnet_lite0", head="supcon", blocks="0", epochs=0,
                                           training_set="benchmark:syn", device="cpu", user="ana"))
    assert len(queue.list_jobs(cat, limit=1000)) == n_jobs


def test_trained_model_name_must_be_new_and_checkpoint_intact(syn):
    from db.embeddings import _BACKBONES, get_backbone

    cat, _ = syn
    job = queue.submit_and_run(cat, "train", {"benchmark": "syn", **FAST, "name": "efficientnet_lite0"})
    assert job.status == JobStatus.failed and "built-in backbone" in job.message
    if not (cat.data_dir / "models" / "syn-cli.pt").exists():
        train(cat, head="supcon", name="syn-cli")
    path = cat.data_dir / "models" / "syn-cli.pt"
    original = path.read_bytes()
    try:
        path.write_bytes(original[:-10] + b"0123456789")
        _BACKBONES.clear()
        with pytest.raises(CatalogueError, match="does not match the hash"):
            get_backbone(cat, "syn-cli")
    finally:
        path.write_bytes(original)
        _BACKBONES.clear()


def test_official_split_column_and_test_only_benchmarks(tmp_path):
    import csv

    manifest = make_reid_set(tmp_path / "photos", individuals=4, photos_each=4, seed=3)
    rows = list(csv.DictReader(open(manifest)))
    for i, r in enumerate(rows):
        r["source_split"] = "test" if r["identity"] in ("ind00", "ind01") else "train"
    with open(manifest, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cat = open_catalogue(tmp_path / "data")
    b = create_benchmark(cat, "official", manifest=manifest, split="column:source_split")
    test = load_benchmark(cat, "official", split="test")
    assert set(test.labels) == {"ind00", "ind01"} and b.config["n_test"] == 8 and b.config["test_fraction"] is None
    only = create_benchmark(cat, "published", manifest=manifest, split="test-only")
    assert only.config["n_test"] == 16 and load_benchmark(cat, "published", split="train").image_ids == []
    with pytest.raises(CatalogueError, match="missing column"):
        create_benchmark(cat, "nocol", manifest=manifest, split="column:fold")
    rows[0]["source_split"] = "holdout"
    with open(manifest, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(CatalogueError, match="'holdout' x1"):
        create_benchmark(cat, "bad", manifest=manifest, split="column:source_split")
    # a test-only benchmark has nothing to train on, and sift_vlad will not fit a codebook on a handful of photos
    job = queue.submit_and_run(cat, "train", {"benchmark": "published", **FAST})
    assert job.status == JobStatus.failed and "test-only" in job.message
    from db.identify.evaluation import run_evaluation

    with pytest.raises(CatalogueError, match="at least 50 photos"):
        run_evaluation(cat, backbone="sift_vlad", benchmark="published")
    cat.close()


def test_sift_vlad_codebook_is_keyed_by_its_fit_set(tmp_path):
    from db.embeddings import _BACKBONES, get_backbone

    manifest = make_reid_set(tmp_path / "photos", individuals=12, photos_each=10, seed=4)
    cat = open_catalogue(tmp_path / "data")
    create_benchmark(cat, "a", manifest=manifest, split="identity", test_fraction=0.3, seed=0)
    create_benchmark(cat, "b", manifest=manifest, split="identity", test_fraction=0.3, seed=1)
    from db.identify.benchmarks import load_benchmark_fit_ids

    fit_a, fit_b = load_benchmark_fit_ids(cat, "a"), load_benchmark_fit_ids(cat, "b")
    assert set(fit_a) != set(fit_b)
    _BACKBONES.clear()
    ba = get_backbone(cat, "sift_vlad", fit_image_ids=fit_a)
    bb = get_backbone(cat, "sift_vlad", fit_image_ids=fit_b)
    books = sorted(p.name for p in (cat.data_dir / "models").glob("sift_vlad-codebook-*.npz"))
    assert len(books) == 2 and ba.config.fingerprint() != bb.config.fingerprint()
    assert get_backbone(cat, "sift_vlad", fit_image_ids=fit_a) is ba  # the same fit set reuses its codebook
    _BACKBONES.clear()
    cat.close()


def test_trained_model_in_pickers_and_every_command(syn, tmp_path, capsys):
    """A trained model is offered by the Match review and Diagnostics pickers and works with eval --model,
    diagnose --model and export-kaggle --model."""
    import csv

    from jobs.actions import diagnostics as ds
    from jobs.actions import match as ms

    cat, manifest = syn
    if not (cat.data_dir / "models" / "syn-cli.pt").exists():
        train(cat, head="supcon", name="syn-cli")
    assert "syn-cli" in ms.matcher_choices(cat) and ms.matcher_choices(cat)[0] == "efficientnet_lite0"
    assert "syn-cli" in ds.backbone_names(cat) and "syn-cli" not in ds.backbone_names()
    d = str(cat.data_dir)
    assert cli(["--data-dir", d, "eval", "--model", "syn-cli", "--benchmark", "syn", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "syn-cli"
    assert cli(["--data-dir", d, "diagnose", "--model", "syn-cli", "--benchmark", "syn", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mirror_tier"]
    names = [r["filename"] for r in csv.DictReader(open(manifest))][:3]
    test_csv = tmp_path / "test.csv"
    with open(test_csv, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row_id", "query_image", "gallery_image"])
        w.writerows([[f"r{i}", a, b] for i, (a, b) in enumerate((a, b) for a in names for b in names)])
    out = tmp_path / "submission.csv"
    assert cli(["--data-dir", d, "export-kaggle", "--test-csv", str(test_csv), "--images", str(manifest.parent),
                "--model", "syn-cli", "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 9 and all(abs(float(r["similarity"]) - 1) < 1e-4 for r in rows[::4])
