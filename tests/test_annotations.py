"""Annotations (issue 22): camera-trap frames with MegaDetector boxes become one annotation per animal, each
matched and decided on its own; bad boxes, files and formats get clear messages and lose nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from app.cli import main as cli
from core.annotations import Box, InvalidBoxError, crop_rect
from core.readers import IngestError
from db.records.annotations import add_box, annotation_for_photo, delete_box, list_annotations, move_box, undo_box_edit
from db.audit import verify_chain
from db.catalogue import CatalogueError
from db.embeddings import load_photo, sources_for
from db.io.ingest import ingest_path
from db.models import BoxEdit, Image, MatchDecision, Photo
from db.session import open_catalogue
from tests.conftest import DEMO_DIR

BOX_A = [0.02, 0.05, 0.46, 0.9]
BOX_B = [0.52, 0.05, 0.46, 0.9]


def _demo_photos(n: int) -> list[Path]:
    return sorted((DEMO_DIR / "images").glob("*.jpg"))[:n]


def _two_animal_frame(path: Path, left: Path, right: Path, *, size: tuple[int, int] = (1200, 600)) -> None:
    """A frame holding two animals side by side: each demo photo fills one of BOX_A / BOX_B."""
    frame = PILImage.new("RGB", size, (90, 110, 70))
    for src, box in ((left, BOX_A), (right, BOX_B)):
        x, y, w, h = crop_rect(Box(*box), *size, margin=0.0)
        frame.paste(PILImage.open(src).convert("RGB").resize((w - x, h - y)), (x, y))
    frame.save(path, quality=95)


def _md(frames: dict[str, list[dict]], *, version: str = "1.3") -> dict:
    return {"info": {"format_version": version, "detector": "md_v5a.0.0.pt"},
            "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
            "images": [{"file": f, "detections": d} for f, d in frames.items()]}


def _det(box, conf=0.9, category="1") -> dict:
    return {"category": category, "conf": conf, "bbox": list(box)}


@pytest.fixture(scope="module")
def trap(tmp_path_factory):
    """A camera-trap folder: one two-animal frame, a person frame, an empty frame, and its MegaDetector JSON
    (naming a file that is not there); plus the two source photos as a gallery, each of a named individual."""
    root = tmp_path_factory.mktemp("trap")
    frames = root / "frames"
    frames.mkdir()
    a, b = _demo_photos(40)[0], _demo_photos(40)[20]
    _two_animal_frame(frames / "pair.jpg", a, b)
    rng = np.random.default_rng(0)
    PILImage.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(frames / "person.jpg")
    PILImage.fromarray(np.full((300, 400, 3), 120, np.uint8)).save(frames / "empty.jpg")
    md = _md({"pair.jpg": [_det(BOX_A, 0.93), _det(BOX_B, 0.61), _det([0.1, 0.1, 0.05, 0.05], 0.1)],
              "person.jpg": [_det([0.05, 0.1, 0.3, 0.8], 0.8, "2"), _det([0.5, 0.5, 0.45, 0.45], 0.7)],
              "empty.jpg": [],
              "gone.jpg": [_det(BOX_A)]})
    (root / "md.json").write_text(json.dumps(md))
    gallery = root / "gallery"
    gallery.mkdir()
    (gallery / "a.jpg").write_bytes(a.read_bytes())
    (gallery / "b.jpg").write_bytes(b.read_bytes())
    (gallery / "manifest.csv").write_text("filename,identity,flank\na.jpg,Ana,left\nb.jpg,Bia,right\n")
    return root


@pytest.fixture(scope="module")
def imported(trap, tmp_path_factory):
    """The trap folder imported with its detections into a catalogue that holds the gallery (built once)."""
    cat = open_catalogue(tmp_path_factory.mktemp("annotations-data"))
    ingest_path(cat, trap / "gallery" / "manifest.csv", user="ana")
    report = ingest_path(cat, trap / "frames", user="ana", detections=trap / "md.json")
    return cat, report


def _pair_annotations(cat) -> list:
    with cat.unit_of_work() as s:
        photo = s.scalar(select(Photo).where(Photo.original_name == "pair.jpg"))
        return list_annotations(cat, photo_id=photo.id)


def test_two_animal_frame_becomes_two_annotations_with_their_boxes(imported):
    cat, report = imported
    by_name = {it.name: it for it in report.items}
    pair = by_name["pair.jpg"]
    assert pair.status == "imported" and len(pair.annotation_ids) == 2
    rows = _pair_annotations(cat)
    assert [r.source for r in rows] == ["megadetector", "megadetector"]
    assert [list(r.bbox) for r in rows] == [BOX_A, BOX_B]
    assert [r.confidence for r in rows] == [pytest.approx(0.93), pytest.approx(0.61)]  # the 0.1 box stayed out
    assert by_name["empty.jpg"].status == "empty" and "--keep-empty" in by_name["empty.jpg"].message
    missing = [it for it in report.items if it.name == "md.json"]
    assert len(missing) == 1 and "1 file(s)" in missing[0].message and "gone.jpg" in missing[0].message
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id)).where(Photo.original_name == "empty.jpg")) == 0
        person = s.scalar(select(Photo).where(Photo.original_name == "person.jpg"))
        assert person.people == [[0.05, 0.1, 0.3, 0.8, 0.8]]
        assert person.detections["detector"] == "md_v5a.0.0.pt" and person.detections["min_confidence"] == 0.2


def test_each_annotation_reads_its_own_crop(imported):
    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    src_a, src_b = sources_for(cat, [a, b])
    crop_a, crop_b = load_photo(cat, src_a), load_photo(cat, src_b)
    la, ta, ra, ba = crop_rect(Box(*BOX_A), 1200, 600)
    assert crop_a.shape == (ba - ta, ra - la, 3)
    assert src_a.pixel_key != src_b.pixel_key and src_a.pixel_key.startswith(src_a.content_hash)
    assert np.abs(crop_a.astype(int)[:, :100].mean() - crop_b.astype(int)[:, :100].mean()) > 1  # different pixels


def test_person_box_is_blurred_in_the_thumbnail(imported, trap):
    cat, _ = imported
    with cat.unit_of_work() as s:
        person = s.scalar(select(Photo).where(Photo.original_name == "person.jpg"))
        thumb = np.asarray(PILImage.open(cat.blobs.path(person.thumb_path)).convert("L"), dtype=float)
    h, w = thumb.shape
    inside = thumb[int(0.15 * h):int(0.85 * h), int(0.08 * w):int(0.33 * w)]
    outside = thumb[int(0.15 * h):int(0.85 * h), int(0.6 * w):int(0.9 * w)]
    assert inside.std() < 0.3 * outside.std()  # random noise there: blurred inside the person's box only


def test_each_animal_is_matched_and_decided_on_its_own(imported):
    from jobs.actions.decisions import DecideRequest, decide, decision_claim
    from jobs.actions.match import ranked_candidates

    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    names = {}
    for ann in (a, b):
        res = ranked_candidates(cat, ann, k=5)
        names[ann] = res.candidates[0].individual_name
        top = res.candidates[0]
        seen = decision_claim(cat, ann)
        decide(cat, DecideRequest(query_image_id=ann, decision="same", user="ana", candidate_image_id=top.image_id,
                                  seen_individual_id=seen.individual_id, seen_decision_id=seen.decision_id,
                                  seen_version=seen.version))
    assert names == {a: "Ana", b: "Bia"}  # each crop finds the photo it was cut from, not its neighbour
    rows = {r.id: r for r in _pair_annotations(cat)}
    assert rows[a].individual == "Ana" and rows[b].individual == "Bia"
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(MatchDecision.id)).where(MatchDecision.query_image_id.in_([a, b]))) == 2
        ana = s.get(Image, a).individual_id
        blob_a, thumb_a = s.get(Image, a).blob_path, s.get(Image, a).thumb_path
    assert verify_chain(cat).ok
    # Ana's page in the Catalogue tab shows animal A as its crop (its thumbnail), never the two-animal frame
    from jobs.actions.catalogue import open_individual

    cards = {c.id: c for c in open_individual(cat, ana).images}
    assert cards[a].path == str(cat.blobs.path(thumb_a)) and cards[a].path != str(cat.blobs.path(blob_a))
    gallery = [c for i, c in cards.items() if i != a]
    assert gallery and all("/images/" in c.path.replace("\\", "/") for c in gallery)  # whole photos: the full file


def test_reimporting_the_same_detections_adds_nothing(imported, trap):
    cat, _ = imported
    with cat.unit_of_work() as s:
        before = s.scalar(select(func.count(Image.id)))
    again = ingest_path(cat, trap / "frames", user="ana", detections=trap / "md.json")
    assert {it.name: it.status for it in again.items}["pair.jpg"] == "duplicate"
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Image.id))) == before


def test_a_photo_id_means_its_only_animal_and_several_are_listed(imported):
    cat, _ = imported
    with cat.unit_of_work() as s:
        pair = s.scalar(select(Photo).where(Photo.original_name == "pair.jpg"))
        person = s.scalar(select(Photo).where(Photo.original_name == "person.jpg"))
    (only,) = list_annotations(cat, photo_id=person.id)
    assert annotation_for_photo(cat, person.id) == only.id
    with pytest.raises(CatalogueError, match=r"holds 2 annotations: #\d+ megadetector box .*--annotation"):
        annotation_for_photo(cat, pair.id)


def test_cli_annotations_match_decide_and_stats(trap, tmp_path, capsys):
    d = str(tmp_path / "cli-data")
    assert cli(["--data-dir", d, "--user", "ana", "import", str(trap / "gallery" / "manifest.csv")]) == 0
    assert cli(["--data-dir", d, "--user", "ana", "import", str(trap / "frames"), "--detections",
                str(trap / "md.json"), "--keep-empty"]) == 0
    capsys.readouterr()
    assert cli(["--data-dir", d, "annotations", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    pair = [r for r in rows if r["bbox"] in (BOX_A, BOX_B)]
    assert len(pair) == 2 and pair[0]["image_id"] == pair[1]["image_id"]
    assert set(rows[0]) == {"id", "image_id", "bbox", "confidence", "source", "individual", "flank"}
    assert cli(["--data-dir", d, "match", str(pair[0]["image_id"])]) == 1
    err = capsys.readouterr().err
    assert f"#{pair[0]['id']}" in err and f"#{pair[1]['id']}" in err
    assert cli(["--data-dir", d, "match", "--annotation", str(pair[1]["id"]), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["query_annotation_id"] == pair[1]["id"] and res["candidates"][0]["individual"] == "Bia"
    assert cli(["--data-dir", d, "--user", "ana", "decide", "--annotation", str(pair[1]["id"]), "same",
                "--candidate", str(res["candidates"][0]["annotation_id"])]) == 0
    capsys.readouterr()
    assert cli(["--data-dir", d, "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["images"] == 5 and stats["annotations"] == 5  # gallery 2 + pair + person; the empty frame: none
    assert cli(["--data-dir", d, "annotations", "--image", str(pair[0]["image_id"]), "--json"]) == 0
    decided = {r["id"]: r["individual"] for r in json.loads(capsys.readouterr().out)}
    assert decided == {pair[0]["id"]: None, pair[1]["id"]: "Bia"}


def test_box_edits_are_audited_and_undone(imported):
    cat, _ = imported
    with cat.unit_of_work() as s:
        person = s.scalar(select(Photo).where(Photo.original_name == "person.jpg"))
    new = add_box(cat, person.id, Box(0.0, 0.0, 0.2, 0.2), user="ana")
    move_box(cat, new, Box(0.1, 0.1, 0.3, 0.3), user="ana")
    assert [r.bbox for r in list_annotations(cat, photo_id=person.id) if r.id == new] == [(0.1, 0.1, 0.3, 0.3)]
    undo_box_edit(cat, person.id, user="ana")  # the move
    assert [r.bbox for r in list_annotations(cat, photo_id=person.id) if r.id == new] == [(0.0, 0.0, 0.2, 0.2)]
    delete_box(cat, new, user="ana")
    assert new not in [r.id for r in list_annotations(cat, photo_id=person.id)]
    undo_box_edit(cat, person.id, user="ana")  # the delete: it comes back with its id
    assert new in [r.id for r in list_annotations(cat, photo_id=person.id)]
    undo_box_edit(cat, person.id, user="ana")  # the add
    assert new not in [r.id for r in list_annotations(cat, photo_id=person.id)]
    with pytest.raises(CatalogueError, match="no box change to undo"):
        undo_box_edit(cat, person.id, user="ana")
    with cat.unit_of_work() as s:
        assert [e.kind for e in s.scalars(select(BoxEdit).where(BoxEdit.photo_id == person.id))] == \
            ["add", "move", "delete"]
    assert verify_chain(cat).ok


def test_a_decided_annotation_cannot_be_deleted(imported):
    cat, _ = imported
    decided = next(r for r in _pair_annotations(cat) if r.individual)
    with pytest.raises(CatalogueError, match="cannot be deleted: it is assigned to an individual"):
        delete_box(cat, decided.id, user="ana")
    assert decided.id in [r.id for r in _pair_annotations(cat)]


def test_machine_box_over_a_curators_box_keeps_the_curators(tmp_path):
    frames = tmp_path / "f"
    frames.mkdir()
    a, b = _demo_photos(2)
    _two_animal_frame(frames / "pair.jpg", a, b)
    cat = open_catalogue(tmp_path / "data")
    first = ingest_path(cat, frames, user="ana")  # no detections: one whole-photo annotation
    (whole,) = first.items[0].annotation_ids
    photo = first.items[0].photo_id
    drawn = add_box(cat, photo, Box(*BOX_A), user="ana")
    (tmp_path / "md.json").write_text(json.dumps(_md({"pair.jpg": [_det([0.03, 0.05, 0.45, 0.9]), _det(BOX_B)]})))
    report = ingest_path(cat, frames, user="ana", detections=tmp_path / "md.json")
    item = report.items[-1]
    assert item.status == "updated" and f"over annotation #{drawn}" in item.message and "added 1 animal box" in item.message
    rows = {r.id: r for r in list_annotations(cat, photo_id=photo)}
    assert rows[drawn].source == "drawn" and list(rows[drawn].bbox) == BOX_A
    assert rows[whole].source == "megadetector" and list(rows[whole].bbox) == BOX_B  # the undecided whole photo
    assert len(rows) == 2


@pytest.mark.parametrize("box, words", [([0.5, 0.5, 0.6, 0.2], "outside the frame"), ([0.1, 0.1, 0.0, 0.2], "zero area"),
                                        ([-0.2, 0.1, 0.3, 0.2], "outside the frame")])
def test_bad_boxes_are_named_and_the_rest_imported(tmp_path, box, words):
    frames = tmp_path / "f"
    frames.mkdir()
    PILImage.new("RGB", (200, 100), (10, 20, 30)).save(frames / "x.jpg")
    (tmp_path / "md.json").write_text(json.dumps(_md({"x.jpg": [_det(box), _det([0.1, 0.1, 0.3, 0.3])]})))
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, frames, user="ana", detections=tmp_path / "md.json")
    problems = [it.message for it in report.items if it.name == "md.json"]
    assert len(problems) == 1 and words in problems[0] and "x.jpg" in problems[0]
    assert [list(r.bbox) for r in list_annotations(cat)] == [[0.1, 0.1, 0.3, 0.3]]
    with pytest.raises(InvalidBoxError, match=words):
        Box(*box)


@pytest.mark.parametrize("payload, words", [
    ({"images": [{"file_name": "x.jpg", "id": 1}], "annotations": [], "categories": []}, "COCO"),
    (_md({"x.jpg": []}, version="2.0"), "2.0 is not supported"),
    ([1, 2, 3], "not MegaDetector batch output"),
])
def test_a_json_of_another_format_or_version_is_refused_before_anything_is_imported(tmp_path, payload, words):
    frames = tmp_path / "f"
    frames.mkdir()
    PILImage.new("RGB", (200, 100)).save(frames / "x.jpg")
    (tmp_path / "md.json").write_text(json.dumps(payload))
    cat = open_catalogue(tmp_path / "data")
    with pytest.raises(IngestError, match=words):
        ingest_path(cat, frames, user="ana", detections=tmp_path / "md.json")
    assert list_annotations(cat) == []


def test_truncated_and_huge_frames_get_a_message_and_the_rest_come_in(tmp_path):
    frames = tmp_path / "f"
    frames.mkdir()
    PILImage.new("RGB", (400, 300), (200, 10, 10)).save(frames / "good.jpg")
    whole = (frames / "good.jpg").read_bytes()
    (frames / "cut.jpg").write_bytes(whole[: len(whole) // 3])
    PILImage.new("L", (12_000, 9_000)).save(frames / "huge.png")  # 108 MP
    (tmp_path / "md.json").write_text(json.dumps(_md({n: [_det([0.1, 0.1, 0.5, 0.5])]
                                                      for n in ("good.jpg", "cut.jpg", "huge.png")})))
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, frames, user="ana", detections=tmp_path / "md.json")
    status = {it.name: (it.status, it.message) for it in report.items}
    assert status["good.jpg"][0] == "imported"
    assert status["cut.jpg"][0] == "error" and "truncated" in status["cut.jpg"][1].lower()
    assert status["huge.png"][0] == "error" and "100" in status["huge.png"][1]
    assert len(list_annotations(cat)) == 1


def test_masking_an_annotation_is_prompted_with_its_box(imported):
    from core.annotations import box_prompt
    from db.inspect.masks import mask_images

    cat, _ = imported
    a = _pair_annotations(cat)[0]
    src = sources_for(cat, [a.id])[0]
    crop = load_photo(cat, src)
    x0, y0, x1, y1 = box_prompt(src.box, crop.shape)
    assert 0 < x0 < 0.12 * crop.shape[1] and 0.88 * crop.shape[1] < x1 <= crop.shape[1]  # the box inside its margin
    assert box_prompt(Box(0, 0, 1, 1), crop.shape) is None
    out = mask_images(cat, masker="grabcut", image_ids=[a.id], only_missing=False, user="ana")
    assert out["masked"] == 1, out
    with cat.unit_of_work() as s:
        ann = s.get(Image, a.id)
        assert ann.mask_source == "grabcut" and ann.solidity is not None
        mask = np.asarray(PILImage.open(cat.blobs.path(ann.mask_path)))
    assert mask.shape[:2] == crop.shape[:2]  # the mask lives in the crop's pixels
    assert mask[:, : int(x0) - 1].sum() == 0  # nothing outside the prompt box (GrabCut's hard background)


def test_a_photo_shown_whole_names_every_animal_and_its_people(imported):
    """What the Catalogue tab says under a photo shown whole: each animal's box with its individual and source,
    the one clicked marked, and the person boxes blurred."""
    import re

    from jobs.actions.frames import frame_words, photo_frame

    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    words = frame_words(cat, b)
    assert re.match(rf"Photo #\d+ \(pair\.jpg\): 2 animals: #{a} .+ \(megadetector\); "
                    rf"#{b} .+ \(megadetector\) ← this one\.$", words), words
    with cat.unit_of_work() as s:
        person = s.scalar(select(Photo).where(Photo.original_name == "person.jpg"))
        (ann,) = [i.id for i in person.annotations]
        size = (person.height, person.width)
    assert frame_words(cat, ann).endswith("; 1 person box blurred.")
    assert photo_frame(cat, person.id).shape[:2] == size  # the whole photo, not a crop
    with pytest.raises(CatalogueError, match="no annotation with id 999999"):
        frame_words(cat, 999999)


def test_the_query_outline_is_drawn_on_the_animals_crop(imported):
    """Match review's "Show mask outline" draws an annotation's mask, made in its crop's pixels, on that crop: it
    was stretched over the whole two-animal frame, and the picture jumped from the crop to the frame."""
    from core.inspect.masking import encode_mask_png
    from jobs.actions import match as ms

    cat, _ = imported
    b = _pair_annotations(cat)[1]
    crop = load_photo(cat, sources_for(cat, [b.id])[0])
    h, w = crop.shape[:2]
    mask = np.zeros((h, w), bool)
    mask[h // 4: 3 * h // 4, w // 4: 3 * w // 4] = True
    rel = cat.blobs.put(encode_mask_png(mask), kind="masks", ext=".png")
    with cat.unit_of_work() as s:
        ann = s.get(Image, b.id)
        before = (ann.mask_path, ann.mask_source)
        ann.mask_path, ann.mask_source = rel, "grabcut"
        s.commit()
    try:
        photo = ms.query_photo(cat, b.id)
        plain = ms.query_picture(cat, photo, outline=False)
        drawn = ms.query_picture(cat, photo, outline=True)
        assert plain.shape == drawn.shape == crop.shape  # the crop both times, never the 1200 x 600 frame
        changed = np.any(drawn != plain, axis=2)
        assert changed[h // 4, w // 2] and changed[h // 2, w // 4]  # on the mask's edge in the crop
        assert not changed[h // 2, w // 2] and not changed[3, 3]  # inside it and far outside, untouched
    finally:
        with cat.unit_of_work() as s:
            ann = s.get(Image, b.id)
            ann.mask_path, ann.mask_source = before
            s.commit()


def test_large_frames_decode_once_per_frame_at_the_scale_the_model_needs(tmp_path, monkeypatch):
    import db.embeddings as emb

    frames = tmp_path / "f"
    frames.mkdir()
    a, b = _demo_photos(2)
    _two_animal_frame(frames / "big.jpg", a, b, size=(4000, 3000))
    (tmp_path / "md.json").write_text(json.dumps(_md({"big.jpg": [_det(BOX_A), _det(BOX_B)]})))
    cat = open_catalogue(tmp_path / "data")
    ids = list(ingest_path(cat, frames, user="ana", detections=tmp_path / "md.json").items[0].annotation_ids)
    srcs = sources_for(cat, ids)
    calls = []
    real = emb.load_crops
    monkeypatch.setattr(emb, "load_crops", lambda *a, **k: calls.append(a) or real(*a, **k))
    crops = emb.FrameCrops(cat, srcs, min_side=448)
    keys = [crops.key(s) for s in srcs]
    assert [k.endswith("-draft4") for k in keys] == [True, True] and keys[0] != keys[1]
    pixels = [crops.load(s) for s in srcs]
    assert len(calls) == 1  # one decode for both animals
    assert all(max(p.shape[:2]) >= 448 for p in pixels)
    full = [load_photo(cat, s) for s in srcs]  # full resolution: four times the size, same picture
    assert [p.shape[0] for p in pixels] == [pytest.approx(f.shape[0] / 4, abs=2) for f in full]
    assert emb.FrameCrops(cat, srcs, min_side=None).key(srcs[0]) == srcs[0].pixel_key  # no draft: key as before


def test_doctor_keeps_the_files_of_photos_and_of_frames_kept_empty(trap, tmp_path):
    from db.doctor import find_orphans

    cat = open_catalogue(tmp_path / "data")
    ingest_path(cat, trap / "frames", user="ana", detections=trap / "md.json", keep_empty=True)
    with cat.unit_of_work() as s:
        empty = s.scalar(select(Photo).where(Photo.original_name == "empty.jpg"))
        person = s.scalar(select(Photo).where(Photo.original_name == "person.jpg"))
        assert empty is not None and not empty.annotations  # kept, as a photo without annotations
        kept = {empty.blob_path, empty.thumb_path, person.thumb_path}
    orphans = find_orphans(cat, min_age_s=0)
    assert not kept & set(orphans.files) and len(kept) == 3


def test_boxes_from_a_detector_run_inside_rosette(trap, tmp_path, monkeypatch):
    """``rosette import --detector NAME``: the registered detector's boxes take the MegaDetector JSON's path
    (source ``detector:<name>``, threshold, people blurred); one that cannot run here is refused before any file."""
    from core.annotations import Detection
    from core.field.detectors import DETECTORS

    class TwoAnimals:
        name = "fake"

        def detect(self, rgb):
            return [Detection("animal", Box(*BOX_A), 0.9), Detection("animal", Box(*BOX_B), 0.15),
                    Detection("person", Box(0.0, 0.0, 0.1, 0.1), 0.8)]

        def details(self):
            return {"detector": "fake", "weights_sha256": None}

    monkeypatch.setitem(DETECTORS._factories, "fake", lambda **_: TwoAnimals())
    monkeypatch.delenv("ROSETTE_WEIGHTS_DIR", raising=False)
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, trap / "frames", user="ana", detector="fake", min_confidence=0.2)
    assert {it.name: it.status for it in report.items} == {"pair.jpg": "imported", "person.jpg": "imported",
                                                           "empty.jpg": "imported"}
    rows = list_annotations(cat)
    assert {r.source for r in rows} == {"detector:fake"} and len(rows) == 3  # one box above 0.2 per frame
    assert all(list(r.bbox) == BOX_A for r in rows)
    with cat.unit_of_work() as s:
        assert all(p.people and p.detections["source"] == "detector:fake" for p in s.scalars(select(Photo)))
    with pytest.raises(IngestError, match="megadetector detector cannot run here: no MegaDetector weights"):
        ingest_path(cat, trap / "frames", user="ana", detector="megadetector")
    assert cli(["--data-dir", str(tmp_path / "cli"), "import", str(trap / "frames"), "--detector", "nope"]) == 1


def test_frame_crops_decode_once_under_threads_and_keep_a_bounded_number_of_photos(imported, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    import db.embeddings as emb

    cat, _ = imported
    srcs = sources_for(cat, [r.id for r in _pair_annotations(cat)])
    calls = []
    real = emb.load_crops
    monkeypatch.setattr(emb, "load_crops", lambda *a, **k: calls.append(a) or real(*a, **k))
    crops = emb.FrameCrops(cat, srcs, min_side=None)
    with ThreadPoolExecutor(2) as pool:  # both animals asked at once, as the feature pipeline's threads do
        got = list(pool.map(crops.load, srcs))
    assert len(calls) == 1 and [g.shape for g in got] == [load_photo(cat, s).shape for s in srcs]
    assert not crops._decoding  # every annotation took its crop: nothing kept
    with cat.unit_of_work() as s:
        person = s.scalar(select(Photo).where(Photo.original_name == "person.jpg"))
    (other,) = sources_for(cat, [list_annotations(cat, photo_id=person.id)[0].id])
    lone = emb.FrameCrops(cat, [*srcs, other], min_side=None)
    lone.KEEP_PHOTOS = 1
    lone.load(srcs[0])  # its sibling never asks (its features were cached): the pair's crops wait ...
    assert list(lone._decoding) == [srcs[0].blob_path]
    lone.load(other)  # ... until the next photo comes: then the oldest is let go, and nothing piles up
    assert not lone._decoding


def test_the_other_animal_of_the_same_frame_is_never_a_candidate(imported):
    """Two animals in one photo are two individuals: once one is identified, the other's candidates leave it out
    (it would otherwise come first, the same background and light)."""
    from jobs.actions.match import ranked_candidates

    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    assert {r.individual for r in _pair_annotations(cat)} >= {"Ana"}  # A is identified: in the gallery
    for query, other in ((a, b), (b, a)):
        found = [c.image_id for c in ranked_candidates(cat, query, k=10).candidates]
        assert found and other not in found


def test_the_neighbours_strip_in_an_animals_crop_is_darkened_for_the_screen(imported):
    """A two-animal frame: the left animal's crop (its box plus a 10 % margin) reaches into the right animal's
    box; the screen darkens that strip so the curator sees which animal is asked about, and leaves the animal's
    own pixels as matching reads them."""
    from jobs.actions.frames import annotation_crop

    cat, _ = imported
    a = _pair_annotations(cat)[0]
    seen, read = annotation_crop(cat, a.id).astype(int), load_photo(cat, sources_for(cat, [a.id])[0]).astype(int)
    assert seen.shape == read.shape
    left, _, right, _ = crop_rect(Box(*BOX_A), 1200, 600)
    strip = round(BOX_B[0] * 1200) - left  # first column of the neighbour's box, in the crop
    assert 0 < strip < read.shape[1]
    assert np.array_equal(seen[:, :strip - 1], read[:, :strip - 1])  # the animal and the margin beside it
    dark = seen[:, strip + 1:]
    assert dark.size and np.all(dark <= read[:, strip + 1:])
    assert dark.mean() < 0.5 * read[:, strip + 1:].mean()


def test_dimming_spares_the_animals_own_box_and_pixels_outside_every_box():
    from core.io.box_drawing import dim_neighbours

    rgb = np.full((10, 10, 3), 200, np.uint8)
    out = dim_neighbours(rgb, [(0.5, 0.0, 0.8, 1.0)], (0.0, 0.0, 0.7, 1.0), factor=0.5)
    assert out is not rgb and np.all(rgb == 200)  # a copy: the crop matching reads is never touched
    assert np.all(out[:, :7] == 200)  # the animal's own box, overlap with the neighbour included
    assert np.all(out[:, 7:] == 100)  # the neighbour's part beyond it, darkened by the factor
    out = dim_neighbours(rgb, [(0.8, 0.8, 0.5, 0.5)], (0.0, 0.0, 0.5, 0.5), factor=0.5)
    assert np.all(out[8:, 8:] == 100) and np.all(out[:8] == 200) and np.all(out[:, :8] == 200)  # reaches past the edge
    assert dim_neighbours(rgb, [], (0.0, 0.0, 1.0, 1.0)) is rgb
