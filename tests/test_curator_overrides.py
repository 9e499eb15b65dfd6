"""A machine never undoes a curator: once a curator moved or deleted a machine box (a MegaDetector box, a Camtrap DP
observation) and did not undo it, importing the same detections again, a lower threshold or a re-run leaves that
detection alone and says so; what the curator drew or decided stays; undoing the edit lifts the override."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select, text

from app.cli import main as cli
from core.annotations import Box
from db.records.annotations import add_box, curator_overrides, delete_box, list_annotations, move_box, undo_box_edit
from db.io.ingest import ingest_path
from db.models import BoxEdit, Individual, MatchDecision, Photo
from db.session import open_catalogue
from tests.camtrapdp_package import write_package

BOX_A = [0.02, 0.05, 0.46, 0.9]  # two.jpg: moved by the curator
BOX_B = [0.52, 0.05, 0.46, 0.9]  # two.jpg: deleted by the curator
MOVED_A = [0.1, 0.3, 0.3, 0.6]  # under half of A's area in common: not "the same box" by overlap alone
FRESH_TWO = [0.45, 0.0, 0.1, 0.1]  # two.jpg, below 0.2: nobody acted on it
BOX_S = [0.2, 0.2, 0.5, 0.6]  # solo.jpg: decided (a new individual)
DRAWN = [0.75, 0.1, 0.2, 0.3]  # solo.jpg: drawn by the curator
OVER_S = [0.22, 0.2, 0.5, 0.6]  # solo.jpg, below 0.2: lies over the decided box
OVER_DRAWN = [0.74, 0.1, 0.2, 0.3]  # solo.jpg, below 0.2: lies over the drawn box
FRESH_SOLO = [0.05, 0.85, 0.1, 0.1]  # solo.jpg, below 0.2: nobody acted on it
LOW = "0.05"


def _md(frames: dict[str, list[dict]]) -> dict:
    return {"info": {"format_version": "1.3", "detector": "md_v5a.0.0.pt"},
            "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
            "images": [{"file": f, "detections": d} for f, d in frames.items()]}


def _det(box, conf) -> dict:
    return {"category": "1", "conf": conf, "bbox": list(box)}


@pytest.fixture(scope="module")
def trap(tmp_path_factory) -> Path:
    """Two camera frames and their MegaDetector JSON: ``two.jpg`` with two animals above 0.2 and one box below,
    ``solo.jpg`` with one animal above 0.2 and three boxes below; ``rerun.json`` is a second MegaDetector run
    whose box for B is a little off (a new version of the detector)."""
    root = tmp_path_factory.mktemp("overrides")
    frames = root / "frames"
    frames.mkdir()
    rng = np.random.default_rng(7)
    for name in ("two.jpg", "solo.jpg"):
        PILImage.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(frames / name, quality=90)
    (root / "md.json").write_text(json.dumps(_md({
        "two.jpg": [_det(BOX_A, 0.93), _det(BOX_B, 0.61), _det(FRESH_TWO, 0.1)],
        "solo.jpg": [_det(BOX_S, 0.8), _det(OVER_S, 0.08), _det(OVER_DRAWN, 0.07), _det(FRESH_SOLO, 0.06)]})))
    (root / "rerun.json").write_text(json.dumps(_md({
        "two.jpg": [_det(BOX_A, 0.93), _det([0.53, 0.06, 0.45, 0.88], 0.58)]})))
    return root


def _run(d: str, *args: str) -> None:
    assert cli(["--data-dir", d, "--user", "ana", *args]) == 0


def _state(cat) -> dict:
    """Everything a curator's work consists of: each annotation (id, photo, box, source, confidence, individual),
    the decisions, the box edits and the individuals."""
    rows = {r.id: (r.image_id, r.bbox, r.source, r.confidence, r.individual) for r in list_annotations(cat)}
    with cat.unit_of_work() as s:
        decisions = [(m.id, m.query_image_id, m.decision.value, m.undone_at)
                     for m in s.scalars(select(MatchDecision).order_by(MatchDecision.id))]
        edits = [(b.id, b.kind, b.undone_at) for b in s.scalars(select(BoxEdit).order_by(BoxEdit.id))]
        individuals = [(i.id, i.name) for i in s.scalars(select(Individual).order_by(Individual.id))]
    return {"annotations": rows, "decisions": decisions, "edits": edits, "individuals": individuals}


def _photo(cat, name: str) -> int:
    with cat.unit_of_work() as s:
        return s.scalar(select(Photo.id).where(Photo.original_name == name))


def _by_box(cat, photo: int) -> dict[tuple, int]:
    return {tuple(r.bbox): r.id for r in list_annotations(cat, photo_id=photo)}


@pytest.fixture()
def curated(trap, tmp_path, capsys):
    """The frames imported with md.json, then a curator's session through the CLI: A moved, B deleted, a box drawn
    on solo.jpg, and solo's machine box decided as a new individual."""
    d = str(tmp_path / "data")
    _run(d, "import", str(trap / "frames"), "--detections", str(trap / "md.json"))
    cat = open_catalogue(d)
    two, solo = _photo(cat, "two.jpg"), _photo(cat, "solo.jpg")
    boxes = _by_box(cat, two)
    a, b = boxes[tuple(BOX_A)], boxes[tuple(BOX_B)]
    (s_id,) = _by_box(cat, solo).values()
    _run(d, "box", "move", str(a), *map(str, MOVED_A))
    _run(d, "box", "delete", str(b))
    _run(d, "box", "add", str(solo), *map(str, DRAWN))
    _run(d, "decide", "--annotation", str(s_id), "new", "--name", "Stripe")
    capsys.readouterr()
    return d, cat, {"two": two, "solo": solo, "a": a, "b": b, "s": s_id, "drawn": _by_box(cat, solo)[tuple(DRAWN)]}


def test_reimporting_the_same_json_changes_nothing_the_curator_did_and_says_why(curated, trap, capsys):
    d, cat, ids = curated
    before = _state(cat)
    assert [row[1:3] for row in before["annotations"].values() if row[0] == ids["two"]] == \
        [(tuple(MOVED_A), "drawn")]  # B is gone, A is where the curator put it
    _run(d, "import", str(trap / "frames"), "--detections", str(trap / "md.json"))
    out = capsys.readouterr().out
    assert _state(cat) == before  # no box back, none added, same ids, same decisions and individuals
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("two.jpg", "solo.jpg"))}
    assert "duplicate" in lines["two.jpg"] and "added" not in lines["two.jpg"]
    assert (f"the megadetector box {BOX_A} (confidence 0.93) was left alone: annotation #{ids['a']} came from this "
            f"detection, and ana moved it to {MOVED_A} on") in lines["two.jpg"]
    assert (f"the megadetector box {BOX_B} (confidence 0.61) was left alone: annotation #{ids['b']} came from this "
            "detection, and ana deleted it on") in lines["two.jpg"]
    assert "duplicate" in lines["solo.jpg"] and "left alone" not in lines["solo.jpg"]  # its box is there, as decided


def test_a_lower_threshold_adds_only_detections_nobody_acted_on(curated, trap):
    _, cat, ids = curated
    before = _state(cat)
    report = ingest_path(cat, trap / "frames", user="ana", detections=trap / "md.json", min_confidence=float(LOW))
    items = {it.name: it for it in report.items if it.name.endswith(".jpg")}
    after = _state(cat)
    added = {i: row for i, row in after["annotations"].items() if i not in before["annotations"]}
    assert sorted((row[0], row[1], row[2]) for row in added.values()) == sorted(
        [(ids["two"], tuple(FRESH_TWO), "megadetector"), (ids["solo"], tuple(FRESH_SOLO), "megadetector")])
    assert {i: after["annotations"][i] for i in before["annotations"]} == before["annotations"]  # nothing changed
    assert {k: v for k, v in after.items() if k != "annotations"} == \
        {k: v for k, v in before.items() if k != "annotations"}
    two, solo = items["two.jpg"], items["solo.jpg"]
    assert two.status == solo.status == "updated"
    assert "added 1 animal box" in two.message and "added 1 animal box" in solo.message
    assert f"annotation #{ids['a']} came from this detection, and ana moved it" in two.message
    assert f"annotation #{ids['b']} came from this detection, and ana deleted it" in two.message
    assert f"the megadetector box {OVER_S} (confidence 0.08) lies over annotation #{ids['s']}" in solo.message
    assert f"the megadetector box {OVER_DRAWN} (confidence 0.07) lies over annotation #{ids['drawn']} (drawn" \
        in solo.message
    again = ingest_path(cat, trap / "frames", user="ana", detections=trap / "md.json", min_confidence=float(LOW))
    assert {it.name: it.status for it in again.items if it.name.endswith(".jpg")} == \
        {"two.jpg": "duplicate", "solo.jpg": "duplicate"}
    assert _state(cat) == after


def test_a_rerun_of_the_detector_leaves_the_boxes_over_a_curators_edit_alone(curated, trap):
    _, cat, ids = curated
    before = _state(cat)
    dry = ingest_path(cat, trap / "frames" / "two.jpg", user="ana", detections=trap / "rerun.json", dry_run=True)
    report = ingest_path(cat, trap / "frames" / "two.jpg", user="ana", detections=trap / "rerun.json")
    (item,) = [it for it in report.items if it.name == "two.jpg"]
    assert item.status == "duplicate" and _state(cat) == before
    assert (f"the megadetector box [0.53, 0.06, 0.45, 0.88] (confidence 0.58) was left alone: annotation "
            f"#{ids['b']} came from the megadetector box {BOX_B} it lies over, and ana deleted it on") in item.message
    assert [it.message for it in dry.items if it.name == "two.jpg"] == [item.message]


def test_undo_lifts_the_override_and_nothing_is_duplicated(curated, trap):
    d, cat, ids = curated
    two = ids["two"]
    with cat.unit_of_work() as s:
        assert [(o.annotation_id, o.kind) for o in curator_overrides(s, two)] == \
            [(ids["a"], "move"), (ids["b"], "delete")]
    _run(d, "box", "undo", str(two))  # the delete: B comes back as the machine gave it
    with cat.unit_of_work() as s:
        assert [(o.annotation_id, o.kind) for o in curator_overrides(s, two)] == [(ids["a"], "move")]
    b = _by_box(cat, two)[tuple(BOX_B)]
    assert b == ids["b"]  # under its own id: the box drawn since did not take it
    assert _state(cat)["annotations"][b][1:4] == (tuple(BOX_B), "megadetector", pytest.approx(0.61))
    with cat.unit_of_work() as s:
        assert [(e.kind, e.annotation_id, e.undone_at is None) for e in
                s.scalars(select(BoxEdit).where(BoxEdit.photo_id == two).order_by(BoxEdit.id))] == \
            [("move", ids["a"], True), ("delete", b, False)]
    for threshold in (0.2, float(LOW)):
        report = ingest_path(cat, trap / "frames", user="ana", detections=trap / "md.json", min_confidence=threshold)
        (item,) = [it for it in report.items if it.name == "two.jpg"]
        assert item.message.count("left alone") == 1 and f"annotation #{ids['a']} came from" in item.message
    boxes = [row[1] for row in _state(cat)["annotations"].values() if row[0] == two]
    assert sorted(boxes) == sorted([tuple(MOVED_A), tuple(BOX_B), tuple(FRESH_TWO)])  # B once, A not back
    undo_box_edit(cat, two, user="ana")  # the move: A is the machine's box again, and the override is gone
    ingest_path(cat, trap / "frames", user="ana", detections=trap / "md.json", min_confidence=float(LOW))
    rows = {r.id: r for r in list_annotations(cat, photo_id=two)}
    assert sorted(r.bbox for r in rows.values()) == sorted([tuple(BOX_A), tuple(BOX_B), tuple(FRESH_TWO)])
    assert rows[ids["a"]].source == "megadetector" and rows[b].source == "megadetector"


def test_a_deleted_annotations_id_is_never_given_to_a_new_box(curated):
    from db.audit import audit_rows

    d, cat, ids = curated
    with cat.unit_of_work() as s:
        sql = s.scalar(select(text("sql")).select_from(text("sqlite_master")).where(text("name = 'images'")))
    assert "AUTOINCREMENT" in sql  # the catalogue the import made
    # B was the newest annotation when deleted; the box drawn after that took the next id, not B's
    assert ids["b"] == max(ids["a"], ids["b"], ids["s"]) and ids["drawn"] == ids["b"] + 1
    delete_box(cat, ids["drawn"], user="ana")  # the newest one now
    again = add_box(cat, ids["solo"], Box(*DRAWN), user="ana")
    assert again == ids["drawn"] + 1
    named = [(r.action, r.target) for r in reversed(audit_rows(cat)) if r.target in (f"photo#{ids['drawn']}",
                                                                                    f"photo#{again}")]
    assert named == [("photo.import", f"photo#{ids['drawn']}"), ("photo.delete", f"photo#{ids['drawn']}"),
                     ("photo.import", f"photo#{again}")]  # the trail names each animal by an id of its own
    undo_box_edit(cat, ids["solo"], user="ana")  # the add goes
    undo_box_edit(cat, ids["solo"], user="ana")  # the delete: the drawn box back under its own id
    assert {r.id: r.source for r in list_annotations(cat, photo_id=ids["solo"])} == \
        {ids["s"]: "megadetector", ids["drawn"]: "drawn"}
    with cat.unit_of_work() as s:
        assert [(e.kind, e.annotation_id) for e in s.scalars(select(BoxEdit).where(BoxEdit.photo_id == ids["solo"])
                                                             .order_by(BoxEdit.id))] == \
            [("add", ids["drawn"]), ("delete", ids["drawn"]), ("add", again)]
    assert add_box(cat, ids["solo"], Box(*DRAWN), user="ana") == again + 1  # nor the id of the add undone


def test_a_second_move_and_a_delete_after_a_move_keep_the_first_override(curated, trap):
    _, cat, ids = curated
    move_box(cat, ids["a"], Box(0.15, 0.3, 0.25, 0.6), user="bo")
    delete_box(cat, ids["a"], user="bo")
    with cat.unit_of_work() as s:
        (first, _) = curator_overrides(s, ids["two"])
    assert (first.annotation_id, first.kind, first.user, first.source) == (ids["a"], "move", "ana", "megadetector")
    assert first.box.as_list() == BOX_A and first.confidence == pytest.approx(0.93)
    report = ingest_path(cat, trap / "frames" / "two.jpg", user="ana", detections=trap / "md.json")
    (item,) = [it for it in report.items if it.name == "two.jpg"]
    assert item.status == "duplicate" and f"annotation #{ids['a']} came from this detection, and ana moved it on" \
        in item.message  # it no longer exists: moved, then deleted
    assert ids["a"] not in {r.id for r in list_annotations(cat)}


def test_an_undo_that_is_refused_leaves_the_edit_standing(curated, capsys):
    d, cat, ids = curated
    _run(d, "decide", "--annotation", str(ids["drawn"]), "new", "--name", "Dot")
    assert cli(["--data-dir", d, "--user", "ana", "box", "undo", str(ids["solo"])]) == 1  # the add: decided on since
    assert "cannot be removed: it is assigned to an individual" in capsys.readouterr().err
    with cat.unit_of_work() as s:
        (add,) = s.scalars(select(BoxEdit).where(BoxEdit.photo_id == ids["solo"]))
        assert add.kind == "add" and add.undone_at is None
    assert ids["drawn"] in {r.id for r in list_annotations(cat, photo_id=ids["solo"])}


# --------------------------------------------------------------------------- Camtrap DP

START, END = "2024-05-01T00:00:00+02:00", "2024-05-10T00:00:00+02:00"


def _package(root: Path) -> Path:
    deployments = [{"deploymentID": "D1", "locationID": "L1", "locationName": "Pond", "latitude": 51.05,
                    "longitude": 4.2, "deploymentStart": START, "deploymentEnd": END}]
    media = [{"mediaID": "M1", "deploymentID": "D1", "timestamp": "2024-05-02T10:00:00+02:00",
              "filePath": "media/m1.jpg", "filePublic": "false", "fileMediatype": "image/jpeg"}]
    boxes = {"O1": [0.1, 0.2, 0.3, 0.4], "O2": [0.55, 0.1, 0.4, 0.5], "O3": [0.1, 0.65, 0.3, 0.3]}
    observations = [{"observationID": key, "deploymentID": "D1", "mediaID": "M1", "observationLevel": "media",
                     "observationType": "animal", "scientificName": "Vulpes vulpes",
                     **dict(zip(("bboxX", "bboxY", "bboxWidth", "bboxHeight"), box))} for key, box in boxes.items()]
    return write_package(root / "pkg", deployments, media, observations)


def test_a_camtrap_dp_package_imported_again_never_undoes_a_curator(tmp_path):
    path = _package(tmp_path)
    cat = open_catalogue(tmp_path / "data")
    first = ingest_path(cat, path, format="camtrap-dp", user="ana")
    (m1,) = [it for it in first.items if it.name == "media/m1.jpg"]
    o1, o2, o3 = m1.annotation_ids
    move_box(cat, o1, Box(0.0, 0.0, 0.2, 0.2), user="ana")
    delete_box(cat, o2, user="ana")
    before = _state(cat)
    again = ingest_path(cat, path, format="camtrap-dp", user="ana")
    (item,) = [it for it in again.items if it.name == "media/m1.jpg"]
    assert _state(cat) == before  # O2 is not back, O1 stays where the curator put it
    assert item.status == "duplicate"
    assert f"observation O1 was left alone: annotation #{o1} came from it, and ana moved it to [0.0, 0.0, 0.2, 0.2]" \
        in item.message
    assert f"observation O2 was left alone: annotation #{o2} came from it, and ana deleted it on" in item.message
    assert "O3" not in item.message  # nobody acted on it: catalogued, nothing to say
    undo_box_edit(cat, m1.photo_id, user="ana")  # the delete: O2 back with its observation key and fields
    rows = {r.id: r for r in list_annotations(cat, photo_id=m1.photo_id)}
    assert set(rows) == {o1, o2, o3} and rows[o2].source == "camtrap-dp"
    third = ingest_path(cat, path, format="camtrap-dp", user="ana")
    (item,) = [it for it in third.items if it.name == "media/m1.jpg"]
    assert item.status == "duplicate" and "O2" not in item.message
    assert set(r.id for r in list_annotations(cat, photo_id=m1.photo_id)) == {o1, o2, o3}  # O2 once


def test_a_box_move_is_in_the_audit_trail_with_who_and_where(curated):
    from db.audit import audit_rows

    d, cat, ids = curated
    moves = [r for r in audit_rows(cat, action="photo.box") if r.target == f"photo#{ids['a']}"]
    assert len(moves) == 1 and moves[0].user == "ana"
    details = moves[0].details
    assert details["box_source"] == ["megadetector", "drawn"]
    assert details["bbox_x"] == [BOX_A[0], MOVED_A[0]] and details["bbox_h"] == [BOX_A[3], MOVED_A[3]]
