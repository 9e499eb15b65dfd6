"""The on-disk IVF-PQ index (core.identify.ondisk_index) and its use by match review past the threshold (db.identify.vector_index,
db.identify.matching, the build_index job): memory-mapped shards answer like the in-memory index, recall@10 is measured
right, the shards split the ids, a half-built index is never used, and no path loads the whole gallery."""

from __future__ import annotations

import hashlib
import json

import faiss
import numpy as np
import pytest

from core.identify.ondisk_index import (
    INDEX_JSON,
    build_ivfpq_on_disk,
    exact_topk_streamed,
    measure_recall_at_10,
    open_on_disk,
    read_info,
    recall_at_k,
    shard_bounds,
    train_ivfpq,
)


def mixture(n: int = 5000, dim: int = 32, *, centres: int = 500, spread: float = 0.15, seed: int = 0) -> np.ndarray:
    """L2-normalised points of a gaussian mixture (``centres`` clusters): each has a few clear neighbours."""
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centres, dim)).astype(np.float32)
    x = c[rng.integers(0, centres, n)] + spread * rng.normal(size=(n, dim)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def chunked(x: np.ndarray, size: int):
    for s in range(0, len(x), size):
        yield x[s:s + size]


PARAMS = {"dim": 32, "nlist": 64, "m": 8, "nbits": 6, "seed": 0, "nprobe": 16}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    x = mixture()
    folder = tmp_path_factory.mktemp("ivfpq")
    q_ids = np.arange(0, 5000, 25)  # 200 queries from the set, their own row excluded
    info = build_ivfpq_on_disk(chunked(x, 700), folder=folder, n_total=len(x), shards=4, train_sample=x[::2],
                               recall_queries=x[q_ids], recall_exclude=q_ids, extra={"fingerprint": "abc"}, **PARAMS)
    return x, folder, info, q_ids


def test_on_disk_shards_answer_like_the_in_memory_index(built):
    x, folder, info, _ = built
    disk = open_on_disk(folder)
    assert disk is not None and disk.ntotal == len(x) and len(disk.parts) == 4
    # the in-memory index built the same way: same training, every vector in one index
    mem = train_ivfpq(x[::2], dim=32, nlist=64, m=8, nbits=6, metric="ip", seed=0, nprobe=16)
    mem.add_with_ids(x, np.arange(len(x), dtype=np.int64))
    q = x[:50] + 0.01
    s_mem, i_mem = mem.search(q, 10)
    s_disk, i_disk = disk.search_ids(q, 10)
    np.testing.assert_allclose(s_disk, s_mem, rtol=1e-5, atol=1e-5)
    # the same neighbours: PQ gives equal codes (exact score ties) to close points, whose order may differ, so
    # compare the neighbours scoring above each row's 10th score as sets, and the scores everywhere
    for sd, idd, sm, im in zip(s_disk, i_disk, s_mem, i_mem):
        cut = sm[-1] + 1e-6
        assert set(idd[sd > cut]) == set(im[sm > cut])
    assert (i_disk == i_mem).mean() > 0.9


def test_shards_hold_disjoint_contiguous_id_ranges_covering_all(built):
    x, folder, info, _ = built
    assert info.bounds == (0, 1250, 2500, 3750, 5000) and len(info.shard_files) == 4
    seen: set[int] = set()
    for s, name in enumerate(info.shard_files):
        part = faiss.read_index(str(folder / name), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        inv = faiss.extract_index_ivf(part).invlists
        ids = set()
        for lst in range(inv.nlist):
            size = inv.list_size(lst)
            if size:
                ids |= {int(i) for i in faiss.rev_swig_ptr(inv.get_ids(lst), size)}
        assert ids == set(range(info.bounds[s], info.bounds[s + 1]))
        assert not ids & seen
        seen |= ids
    assert seen == set(range(len(x)))
    assert shard_bounds(10, 4) == [0, 2, 5, 7, 10] and shard_bounds(3, 4) == [0, 0, 1, 2, 3]


def test_recall_at_10_hand_worked():
    exact = np.array([list(range(10)), list(range(10, 20))])
    found = np.array([[0, 1, 2, 3, 4, 5, 6, 100, 101, 102],  # 7 of 10
                      [19, 18, 17, 16, 15, 14, 13, 12, 11, 10]])  # all 10, another order
    assert recall_at_k(found[:1], exact[:1]) == pytest.approx(0.7)
    assert recall_at_k(found, exact) == pytest.approx(0.85)
    assert recall_at_k(np.array([[0, -1, -1, -1, -1, -1, -1, -1, -1, -1]]), exact[:1]) == pytest.approx(0.1)

    class Fixed:  # an "index" answering the rows above, plus the query itself first (to be excluded)
        def search_ids(self, queries, k):
            rows = np.array([[50] + list(found[0]), [60] + list(found[1])])[:, :k]
            return np.zeros(rows.shape, np.float32), rows

    assert measure_recall_at_10(Fixed(), np.zeros((2, 4)), exact, exclude=np.array([50, 60])) == pytest.approx(0.85)


def test_recall_is_measured_right_and_high_on_clustered_data(built):
    x, folder, info, q_ids = built
    stored = json.loads((folder / INDEX_JSON).read_text())
    assert stored["recall_at_10"] == pytest.approx(info.recall_at_10) and stored["recall_queries"] == 200
    assert stored["extra"] == {"fingerprint": "abc"} and stored["n"] == 5000 and stored["nprobe"] == 16
    # the same figure from numpy's full sort
    sims = x[q_ids] @ x.T
    sims[np.arange(len(q_ids)), q_ids] = -np.inf
    exact = np.argsort(-sims, axis=1, kind="stable")[:, :10]
    again = measure_recall_at_10(open_on_disk(folder), x[q_ids], exact, exclude=q_ids)
    assert again == pytest.approx(info.recall_at_10, abs=1e-9)
    assert info.recall_at_10 > 0.8
    assert "IVF-PQ on disk (4 shards, nlist 64, m 8, nprobe 16; recall@10" in info.describe()


def test_streamed_exact_topk_equals_full_argsort():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 8)).astype(np.float32)
    q = rng.normal(size=(5, 8)).astype(np.float32)
    scores, ids = exact_topk_streamed(chunked(x, 37), q, 7)
    full = q @ x.T
    want = np.argsort(-full, axis=1, kind="stable")[:, :7]
    assert np.array_equal(ids, want)
    np.testing.assert_allclose(scores, np.take_along_axis(full, want, axis=1), rtol=1e-5)
    # leaving one id per query out, and l2
    ex = want[:, 0]
    _, ids_ex = exact_topk_streamed(chunked(x, 50), q, 3, exclude=ex)
    assert np.array_equal(ids_ex, want[:, 1:4])
    d2 = ((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    _, ids_l2 = exact_topk_streamed(chunked(x, 64), q, 4, metric="l2")
    assert np.array_equal(ids_l2, np.argsort(d2, axis=1, kind="stable")[:, :4])


def test_a_half_built_index_is_never_used(tmp_path):
    x = mixture(1200, seed=1)

    def dying():
        yield x[:600]
        raise RuntimeError("killed mid-build")

    folder = tmp_path / "idx"
    with pytest.raises(RuntimeError):
        build_ivfpq_on_disk(dying(), folder=folder, n_total=len(x), shards=2, train_sample=x, **{
            **PARAMS, "nlist": 16})
    assert (folder / "shard_00.faiss").exists()  # the first shard was written ...
    assert not (folder / INDEX_JSON).exists() and read_info(folder) is None and open_on_disk(folder) is None
    # a complete build, then its index.json removed (as while a rebuild runs): not opened either
    build_ivfpq_on_disk(chunked(x, 500), folder=folder, n_total=len(x), shards=2, train_sample=x,
                        **{**PARAMS, "nlist": 16})
    assert open_on_disk(folder) is not None
    (folder / "shard_01.faiss").unlink()
    assert open_on_disk(folder) is None  # a shard it names is missing
    (folder / INDEX_JSON).unlink()
    assert open_on_disk(folder) is None


# ------------------------------------------------------------------ match review past the threshold (db + job)


class _Config:
    name = "fake32"
    embed_dim = 32
    metric = "cosine"
    weights_sha256 = "0" * 64

    def fingerprint(self) -> str:
        return "fake32fp"

    def to_dict(self) -> dict:
        return {"name": self.name, "embed_dim": self.embed_dim}


class _FakeBackbone:
    """A cosine model whose features are all in the cache (it cannot compute any)."""

    config = _Config()
    metric = "cosine"

    def embed(self, images):
        raise AssertionError("every feature should come from the cache")


N_ANIMALS, PER_ANIMAL = 60, 10  # 600 gallery photos


@pytest.fixture()
def big_gallery(data_dir, monkeypatch):
    from core.identify.features import feature_cache_path, write_cached
    from db.identify import calibration, matching
    from db.identify import vector_index as vi
    from db.models import Image, Individual
    from db.session import open_catalogue

    cat = open_catalogue(data_dir)
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(N_ANIMALS, 32))

    def add_photo(s, n: int, individual_id: int | None, vec: np.ndarray) -> Image:
        h = hashlib.sha256(f"photo-{n}".encode()).hexdigest()
        img = Image(content_hash=h, original_name=f"p{n}.jpg", blob_path=f"blobs/{h}.jpg", format="JPEG", mode="RGB",
                    width=10, height=10, size_bytes=1, individual_id=individual_id)
        s.add(img)
        write_cached(feature_cache_path(cat.cache_dir / "features", "fake32fp", "full_rgb", h),
                     (vec / np.linalg.norm(vec)).astype(np.float32))
        return img

    with cat.unit_of_work() as s:
        animals = [Individual(name=f"animal-{a:02d}") for a in range(N_ANIMALS)]
        s.add_all(animals)
        s.flush()
        n = 0
        for a, ind in enumerate(animals):
            for _ in range(PER_ANIMAL):
                add_photo(s, n, ind.id, centres[a] + 0.2 * rng.normal(size=32))
                n += 1
        query = add_photo(s, n, None, centres[7] + 0.2 * rng.normal(size=32))  # not in the gallery
        s.commit()
        query_id = query.id
        target = animals[7].id

    fake = _FakeBackbone()
    monkeypatch.setattr(matching, "get_backbone", lambda cat, name, **kw: fake)
    monkeypatch.setattr(vi, "get_backbone", lambda cat, name, **kw: fake)
    monkeypatch.setattr(calibration, "get_backbone", lambda cat, name, **kw: fake)  # its pairs: at most 3,000 photos
    monkeypatch.setattr(vi, "CHUNK_IDS", 100)
    monkeypatch.setenv(vi.THRESHOLD_ENV, "500")
    asked: list[int] = []
    real = vi.embed_images

    def guarded(cat, ids, **kw):
        asked.append(len(ids))
        if len(ids) > 300:
            raise AssertionError(f"asked for {len(ids)} embeddings at once: the whole gallery")
        return real(cat, ids, **kw)

    monkeypatch.setattr(vi, "embed_images", guarded)
    monkeypatch.setattr(matching, "embed_images", guarded)
    return {"cat": cat, "query": query_id, "target": target, "asked": asked, "add_photo": add_photo,
            "centres": centres}


def test_match_review_past_the_threshold_builds_and_names_the_on_disk_index(big_gallery, monkeypatch):
    from app.tabs.match_cards import header_html
    from db import embeddings
    from db.identify import matching
    from db.identify import vector_index as vi
    from db.models import Job, JobStatus
    from jobs.actions import match as ms
    from jobs.queue import list_jobs, run_job

    cat, query, asked = big_gallery["cat"], big_gallery["query"], big_gallery["asked"]
    # no index yet: exact search streamed in chunks, and the build is queued (once)
    first = ms.ranked_candidates(cat, query, model_name="fake32", k=5)
    assert "streamed in chunks of 100" in first.index_used and "build is queued" in first.index_used
    assert first.candidates[0].individual_id == big_gallery["target"]
    ms.ranked_candidates(cat, query, model_name="fake32", k=5)
    jobs = list_jobs(cat, kind="build_index")
    assert len(jobs) == 1 and jobs[0].status == JobStatus.queued and jobs[0].params["species"] == 1
    assert max(asked) <= 100  # the streamed search never held more than one chunk

    assert run_job(cat, jobs[0].id) == JobStatus.succeeded
    with cat.unit_of_work() as s:
        result = s.get(Job, jobs[0].id).result
    assert result["n"] == 600 and result["shards"] == 4 and result["recall_queries"] == 200
    folder = vi.index_folder(cat, 1, "fake32fp")
    assert (folder / INDEX_JSON).is_file() and (folder / "ids.npy").is_file()
    assert result["recall_at_10"] > 0.5

    asked.clear()
    view = ms.match_query(cat, query, model_name="fake32", k=5)
    assert view.index_note.startswith("IVF-PQ on disk (4 shards, nlist 8, m 8, nprobe 8; recall@10 ")
    assert "measured on 200 queries" in view.index_note
    assert "IVF-PQ on disk" in header_html(view, [], 0)
    assert asked and max(asked) <= 300 and asked[0] == 1  # the query alone, then the hits: never the gallery
    assert len(list_jobs(cat, kind="build_index")) == 1  # nothing more queued
    # the same candidates and scores as today's exact in-memory path (which embeds the whole gallery: the guard
    # would stop it, as it stops any path asking for it past the threshold)
    monkeypatch.setenv(vi.THRESHOLD_ENV, "100000")
    with pytest.raises(AssertionError, match="601 embeddings at once"):
        ms.ranked_candidates(cat, query, model_name="fake32", k=5)
    monkeypatch.setattr(matching, "embed_images", embeddings.embed_images)
    exact = ms.ranked_candidates(cat, query, model_name="fake32", k=5)
    assert exact.index_used == "exact (FAISS flat, 600 photos)"
    assert [c.image_id for c in view.candidates] == [c.image_id for c in exact.candidates]
    assert [c.score for c in view.candidates] == pytest.approx([c.score for c in exact.candidates], abs=1e-5)


def test_index_follows_small_gallery_changes_and_goes_stale(big_gallery):
    from db.identify import vector_index as vi
    from db.identify.matching import rank_candidates
    from db.models import Image
    from jobs.actions import match as ms

    cat, query = big_gallery["cat"], big_gallery["query"]
    vi.build_vector_index(cat, species_id=1, model_name="fake32")
    assert vi.index_for(cat, 1, "fake32") is not None
    # one photo added since the build, identical to the query: found (searched exactly beside the index)
    with cat.unit_of_work() as s:
        q_vec = np.load(next((cat.cache_dir / "features").rglob(f"{s.get(Image, query).content_hash}.npy")))
        twin = big_gallery["add_photo"](s, 9999, big_gallery["target"], q_vec)
        s.commit()
        twin_id = twin.id
    res = rank_candidates(cat, query, model_name="fake32", k=3, per_individual=False)
    assert res.index_used.startswith("IVF-PQ on disk") and "1 photos added since searched exactly" in res.index_used
    assert res.candidates[0].image_id == twin_id and res.candidates[0].score == pytest.approx(1.0, abs=1e-5)
    # more than 2% of the gallery changed: stale, not used
    with cat.unit_of_work() as s:
        for n in range(20):
            big_gallery["add_photo"](s, 10_000 + n, big_gallery["target"], big_gallery["centres"][3])
        s.commit()
    assert vi.index_for(cat, 1, "fake32") is None
    assert "streamed" in ms.ranked_candidates(cat, query, model_name="fake32", k=3).index_used
    # a half-built index (no index.json) is not used
    vi.build_vector_index(cat, species_id=1, model_name="fake32")
    assert vi.index_for(cat, 1, "fake32") is not None
    (vi.index_folder(cat, 1, "fake32fp") / INDEX_JSON).unlink()
    assert vi.index_for(cat, 1, "fake32") is None


def test_index_cli_builds_and_shows(big_gallery, capsys):
    from app.cli import main as cli
    from jobs.requests.match import IndexBuildRequest

    d = str(big_gallery["cat"].data_dir)
    assert cli(["--data-dir", d, "index", "show", "--species", "1", "--model", "fake32", "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["state"] == "not built" and before["gallery"] == 600 and before["threshold"] == 500
    assert cli(["--data-dir", d, "index", "build", "--species", "1", "--model", "fake32", "--wait", "--json"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["n"] == 600 and built["extra"]["gallery_hash"] and built["recall_queries"] == 200
    assert cli(["--data-dir", d, "index", "show", "--species", "1", "--model", "fake32"]) == 0
    out = capsys.readouterr().out
    assert "index in use" in out and "600 vectors, 4 shards" in out and "IVF-PQ on disk" in out
    assert cli(["--data-dir", d, "index", "build", "--species", "no-such-species"]) == 1
    with pytest.raises(ValueError, match="species must be a number"):
        IndexBuildRequest(species="abc")


def test_review_queue_past_the_on_the_fly_limit_reads_the_matches_the_build_stored(big_gallery, monkeypatch):
    from db.identify import matching
    from db.identify import vector_index as vi
    from db.catalogue import CatalogueError

    cat, query, asked = big_gallery["cat"], big_gallery["query"], big_gallery["asked"]
    monkeypatch.setattr(matching, "QUEUE_ON_THE_FLY_LIMIT", 500)
    with pytest.raises(CatalogueError, match="601 photos, too many to rank on the fly.*rosette index build"):
        matching.review_queue(cat, model_name="fake32")
    result = vi.build_vector_index(cat, species_id=1, model_name="fake32")
    assert result["suggestions"] == 601  # every photo of the species, the unassigned query too
    asked.clear()
    queue = matching.review_queue(cat, model_name="fake32", limit=10)
    assert asked == []  # no embedding at all: one query over the stored matches
    assert len(queue) == 10
    assert queue[0].image_id == query and not queue[0].assigned  # the only unassigned photo comes first
    assert queue[0].top_individual == "animal-07"  # its best match is one of its own animal's photos
    assert all(it.assigned for it in queue[1:])
    scores = [it.top_score for it in queue[1:]]
    assert scores == sorted(scores, reverse=True)
