"""One model trained on several benchmarks (issue 16 item 4): ``rosette train --benchmark a,b --sampler
identity-aware`` on two synthetic benchmarks in one catalogue -- the training set's identities namespaced by
benchmark, each photo's source, both test splits left out, an evaluation per benchmark; the curators' "not the
same" decisions as hard-negative pairs; refusals at queue time and when the run starts; retraining from new
decisions uses the identity-aware sampler."""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import select

from app.cli import main as cli
from db.identify.benchmarks import create_benchmark, load_benchmark
from db.catalogue import CatalogueError
from db.models import DecisionKind, Evaluation, Image, JobStatus, MatchDecision, Model, utcnow
from db.session import open_catalogue
from db.identify.training import training_set
from jobs import queue
from tests.synthetic_reid import make_reid_set


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Benchmarks 'a' and 'b' (6 individuals x 6 photos each, identity-split, 2 test individuals each) in one
    catalogue; both name their individuals ind00..ind05, so only a namespace tells a/ind00 from b/ind00."""
    root = tmp_path_factory.mktemp("multi")
    cat = open_catalogue(root / "data")
    manifests = {}
    for name, seed in (("a", 21), ("b", 22)):
        manifests[name] = make_reid_set(root / f"photos-{name}", individuals=6, photos_each=6, seed=seed)
        create_benchmark(cat, name, manifest=manifests[name], split="identity", test_fraction=0.34, seed=0)
    # a standing "not the same" between two of a's training identities, and an undone one (left out); made here,
    # not in a test, so that every test sees them whatever order (or pytest-xdist worker) runs it
    ids_a = sorted(set(load_benchmark(cat, "a", split="train").labels))
    _decide(cat, _train_photo(cat, "a", ids_a[0]), _train_photo(cat, "a", ids_a[1]))
    _decide(cat, _train_photo(cat, "a", ids_a[0]), _train_photo(cat, "a", ids_a[2]), undone=True)
    yield cat, manifests
    cat.close()


def _train_photo(cat, bench: str, identity: str) -> int:
    data = load_benchmark(cat, bench, split="train")
    return next(i for i, lab in zip(data.image_ids, data.labels) if lab == identity)


def _decide(cat, query: int, candidate: int, *, undone: bool = False) -> None:
    with cat.unit_of_work() as s:
        cand = s.get(Image, candidate)
        s.add(MatchDecision(query_image_id=query, candidate_image_id=candidate,
                            candidate_individual_id=cand.individual_id, decision=DecisionKind.not_same, score=0.4,
                            model_name="efficientnet_lite0", user="ana", undone_at=utcnow() if undone else None))
        s.commit()


def test_training_set_of_two_benchmarks_namespaces_identities_and_takes_decisions(two):
    cat, manifests = two
    a_train, b_train = (load_benchmark(cat, b, split="train") for b in "ab")
    tests = set(load_benchmark(cat, "a", split="test").image_ids) | set(load_benchmark(cat, "b", split="test").image_ids)
    ids_a = sorted(set(a_train.labels))  # the fixture's decisions: a standing one between ids_a[0] and [1]
    tset = training_set(cat, source="benchmark", benchmark="a,b")
    assert tset.benchmark == "a,b" and len(tset.image_ids) == len(a_train.image_ids) + len(b_train.image_ids)
    assert not tests & set(tset.image_ids)  # both test splits left out
    assert set(tset.sources) == {"a", "b"} and tset.sources.count("a") == len(a_train.image_ids)
    assert {lab.split("/")[0] for lab in tset.labels} == {"a", "b"}
    assert set(tset.labels) == {f"a/{x}" for x in a_train.labels} | {f"b/{x}" for x in b_train.labels}
    overlap = set(a_train.labels) & set(b_train.labels)
    assert overlap and all(f"a/{x}" in tset.labels and f"b/{x}" in tset.labels for x in overlap)  # two identities
    assert all(lab.startswith(src + "/") for lab, src in zip(tset.labels, tset.sources))
    assert tset.hard_negative_pairs == [(f"a/{ids_a[0]}", f"a/{ids_a[1]}")]
    # from the catalogue: every benchmark's test photos left out (counted), the source is the species
    whole = training_set(cat, source="catalogue", benchmark="a,b")
    assert not tests & set(whole.image_ids) and whole.excluded_test_photos == len(tests)
    assert len(set(whole.sources)) == 1 and whole.hard_negative_pairs == [(ids_a[0], ids_a[1])]
    # one benchmark: its own labels (and so its snapshot hash) stay as they were
    single = training_set(cat, source="benchmark", benchmark="a")
    assert single.labels == [str(x) for x in a_train.labels] and set(single.sources) == {"a"}
    assert single.hard_negative_pairs == [(ids_a[0], ids_a[1])]


def test_benchmarks_sharing_training_photos_are_refused(two, tmp_path):
    cat, manifests = two
    create_benchmark(cat, "a-again", manifest=manifests["a"], split="identity", test_fraction=0.34, seed=5)
    try:
        with pytest.raises(CatalogueError, match="benchmarks 'a' and 'a-again' share training photos"):
            training_set(cat, source="benchmark", benchmark="a,a-again")
    finally:
        with cat.unit_of_work() as s:
            from db.models import Benchmark

            s.delete(s.scalar(select(Benchmark).where(Benchmark.name == "a-again")))
            s.commit()


def test_refused_before_anything_is_queued(two, capsys):
    cat, _ = two
    d = str(cat.data_dir)
    n_jobs = len(queue.list_jobs(cat, limit=1000))
    cases = [(["--benchmark", "a,zebra,yak"], "unknown benchmarks 'zebra', 'yak'; the catalogue has a, b"),
             (["--benchmark", "a,,b"], "an empty benchmark name"),
             (["--benchmark", "a,b,a"], "a given more than once"),
             (["--benchmark", "a,b", "--sources-per-batch", "3"],
              r"3 sources per batch asked for, but the training photos come from 2 source\(s\) \(a, b\)"),
             (["--benchmark", "a", "--identities-per-batch", "9"],
              "9 identities per batch asked for, but the training set has 4 individuals")]
    capsys.readouterr()
    for extra, message in cases:
        assert cli(["--data-dir", d, "train", "--sampler", "identity-aware", *extra]) == 1, extra
        assert re.search(message, capsys.readouterr().err), (extra, message)
    assert len(queue.list_jobs(cat, limit=1000)) == n_jobs


def test_the_run_itself_refuses_what_the_data_cannot_fill(two):
    """A job queued without the action (an old job, another client): check_schedule refuses at the start."""
    cat, _ = two
    job = queue.submit_and_run(cat, "train", {"benchmark": "a", "sampler": "identity-aware", "sources_per_batch": 2,
                                             "epochs": 1, "views": 2, "diagnose": False})
    assert job.status == JobStatus.failed
    assert "2 sources per batch asked for, but the training photos come from 1 source(s) (a)" in job.message


@pytest.mark.slow
def test_one_model_trained_on_two_benchmarks_is_evaluated_on_each(two, capsys):
    cat, _ = two
    capsys.readouterr()
    rc = cli(["--data-dir", str(cat.data_dir), "train", "--benchmark", "a,b", "--sampler", "identity-aware",
              "--epochs", "1", "--views", "2", "--no-diagnose", "--wait", "--json", "--name", "two-sources"])
    out = capsys.readouterr().out
    assert rc == 0, out
    res = json.loads(out)
    job = queue.get_job(cat, res["job_id"])
    evaluations = job.result["evaluations"]
    assert list(evaluations) == ["a", "b"] and res["evaluation"] == evaluations["a"]
    assert res["map_macro"] == evaluations["a"]["map_macro"] and 0 <= evaluations["b"]["map_macro"] <= 1
    with cat.unit_of_work() as s:
        row = s.scalar(select(Model).where(Model.name == "two-sources"))
        snap, config = row.data_snapshot, row.training_config["train_config"]
        evaluated = {e.benchmark_name for e in s.scalars(select(Evaluation).where(
            Evaluation.model_name == "two-sources"))}
    assert evaluated == {"a", "b"}
    assert config["sampler"] == "identity-aware"
    a_n, b_n = (len(load_benchmark(cat, b, split="train").image_ids) for b in "ab")
    assert snap["benchmark"] == "a,b" and snap["sources"] == {"a": a_n, "b": b_n}
    assert all(name.split("/")[0] in ("a", "b") for name in snap["individuals"])
    tests = set(load_benchmark(cat, "a", split="test").image_ids) | set(load_benchmark(cat, "b", split="test").image_ids)
    assert not tests & set(snap["image_ids"])
    assert len(snap["hard_negative_pairs"]) == 1  # the fixture's standing decision
    log = queue.read_log_tail(cat, job.id, max_chars=20000)
    assert "sources: a (" in log and "identity-aware batches: 1 epochs" in log
    assert "hard negatives: 1 pair(s) of identities curators marked" in log


def test_retraining_from_new_decisions_uses_the_identity_aware_sampler(two, capsys):
    from jobs.actions.models import RetrainRequest, retrain

    cat, _ = two
    outcome = retrain(cat, RetrainRequest(user="ana", force=True))
    job = queue.get_job(cat, outcome.job_id)
    assert job.params["sampler"] == "identity-aware" and job.params["reason"] == "retrain from new decisions"
    assert "hard negatives" in outcome.message and '"not the same"' in outcome.message
    assert cli(["--data-dir", str(cat.data_dir), "retrain", "--force"]) == 0
    assert "hard negatives" in capsys.readouterr().out
    for j in queue.list_jobs(cat, limit=5, kind="train"):
        if j.status == JobStatus.queued:
            queue.request_cancel(cat, j.id)
