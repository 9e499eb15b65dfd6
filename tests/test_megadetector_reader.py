"""MegaDetector batch output reader (core.readers.megadetector) and person blurring (core.io.privacy)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from core.annotations import Box
from core.io.privacy import blur_boxes, box_pixels
from core.readers.megadetector import (
    DetectionsFormatError,
    FrameDetections,
    MegaDetectorOutput,
    match_frames,
    read_megadetector_json,
    summary_line,
)


def _det(cat: str, conf: float, bbox: list) -> dict:
    return {"category": cat, "conf": conf, "bbox": bbox}


def _md(images: list, *, version: str | None = "1.4", categories: dict | None = None) -> dict:
    data: dict = {"images": images,
                  "detection_categories": categories or {"1": "animal", "2": "person", "3": "vehicle"}}
    info = {"detector": "md_v5a.0.0.pt", "detection_completion_time": "2024-05-01 10:00:00"}
    if version is not None:
        info["format_version"] = version
    data["info"] = info
    return data


def _write(tmp_path, data, name="md.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


BASIC = [
    {"file": "cam1\\IMG_0001.JPG", "max_detection_conf": 0.95,
     "detections": [_det("1", 0.95, [0.1, 0.2, 0.3, 0.4]), _det("1", 0.6, [0.5, 0.5, 0.4, 0.4])]},
    {"file": "./cam1/IMG_0002.JPG", "detections": [_det("2", 0.88, [0.4, 0.1, 0.2, 0.7])]},
    {"file": "cam1/IMG_0003.JPG", "detections": []},
    {"file": "cam2/IMG_0004.JPG",
     "detections": [_det("1", 0.05, [0.1, 0.1, 0.2, 0.2]), _det("2", 0.1, [0.3, 0.3, 0.2, 0.2])]},
]


def test_reads_frames_keeps_boxes_and_counts_low_ones(tmp_path):
    out = read_megadetector_json(_write(tmp_path, _md(BASIC)))
    assert isinstance(out, MegaDetectorOutput)
    assert out.format_version == "1.4" and out.detector == "md_v5a.0.0.pt" and out.min_confidence == 0.2
    assert out.problems == ()
    # Backslashes and a leading './' are normalised in the keys.
    assert sorted(out.frames) == ["cam1/IMG_0001.JPG", "cam1/IMG_0002.JPG", "cam1/IMG_0003.JPG",
                                  "cam2/IMG_0004.JPG"]
    two = out.frames["cam1/IMG_0001.JPG"]
    assert [d.confidence for d in two.animals] == [0.95, 0.6]
    assert two.animals[0].box == Box(0.1, 0.2, 0.3, 0.4) and two.animals[0].category == "animal"
    assert two.people == () and two.below_threshold == 0 and not two.is_empty
    person = out.frames["cam1/IMG_0002.JPG"]
    assert person.animals == () and len(person.people) == 1 and person.people[0].category == "person"
    empty = out.frames["cam1/IMG_0003.JPG"]
    assert empty.is_empty and empty.below_threshold == 0 and empty.failure is None
    low = out.frames["cam2/IMG_0004.JPG"]
    assert low.animals == () and low.people == () and low.below_threshold == 2 and low.is_empty


def test_threshold_is_inclusive_and_configurable(tmp_path):
    images = [{"file": "a.jpg", "detections": [_det("1", 0.2, [0.1, 0.1, 0.2, 0.2]),
                                               _det("1", 0.19999, [0.5, 0.5, 0.2, 0.2]),
                                               _det("3", 0.7, [0.0, 0.0, 0.5, 0.5])]}]
    path = _write(tmp_path, _md(images))
    frame = read_megadetector_json(path).frames["a.jpg"]
    assert [d.confidence for d in frame.animals] == [0.2]
    assert frame.below_threshold == 1 and frame.vehicles == 1
    strict = read_megadetector_json(path, min_confidence=0.8).frames["a.jpg"]
    assert strict.animals == () and strict.vehicles == 0 and strict.below_threshold == 3
    assert len(read_megadetector_json(path, min_confidence=0.0).frames["a.jpg"].animals) == 2
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="min_confidence"):
            read_megadetector_json(path, min_confidence=bad)


def test_bad_detections_are_problems_not_fatal(tmp_path):
    images = [{"file": "cam1/x.jpg", "detections": [
        _det("1", 0.9, [0.8, 0.1, 0.5, 0.2]),     # outside the frame
        _det("1", 0.9, [0.1, 0.1, 0.0, 0.2]),     # zero area
        _det("7", 0.9, [0.1, 0.1, 0.2, 0.2]),     # unknown category
        _det("1", "high", [0.1, 0.1, 0.2, 0.2]),  # conf not a number
        _det("1", 0.9, [0.3, 0.3, 0.2, 0.2]),     # fine
    ]}]
    out = read_megadetector_json(json.dumps(_md(images)).encode())
    frame = out.frames["cam1/x.jpg"]
    assert [d.box for d in frame.animals] == [Box(0.3, 0.3, 0.2, 0.2)]
    assert len(out.problems) == 4
    outside, zero, unknown, conf = out.problems
    assert all(p.startswith("cam1/x.jpg: detection #") for p in out.problems)
    assert "[0.8, 0.1, 0.5, 0.2]" in outside and "outside the frame" in outside
    assert "zero area" in zero and "#2" in zero
    assert "unknown category '7'" in unknown and "1 animal" in unknown
    assert "'high'" in conf and "not a number" in conf


def test_rounding_overshoot_is_clipped_not_refused():
    images = [{"file": "a.jpg", "detections": [_det("1", 0.9, [0.5, -0.0001, 0.5001, 0.3])]}]
    out = read_megadetector_json(json.dumps(_md(images)).encode())
    assert out.problems == ()
    box = out.frames["a.jpg"].animals[0].box
    assert box.x + box.w == pytest.approx(1.0) and box.y == 0.0


def test_duplicate_file_keeps_first_and_reports_second():
    images = [{"file": "a.jpg", "detections": [_det("1", 0.9, [0.1, 0.1, 0.2, 0.2])]},
              {"file": "./a.jpg", "detections": [_det("2", 0.9, [0.1, 0.1, 0.2, 0.2])]}]
    out = read_megadetector_json(json.dumps(_md(images)).encode())
    assert len(out.frames) == 1
    assert len(out.frames["a.jpg"].animals) == 1 and out.frames["a.jpg"].people == ()
    assert len(out.problems) == 1 and "a.jpg" in out.problems[0] and "first entry is kept" in out.problems[0]


def test_categories_mapped_by_the_files_own_names_and_failures_kept():
    images = [{"file": "a.jpg", "detections": [_det("5", 0.9, [0.1, 0.1, 0.2, 0.2]),
                                               _det("1", 0.9, [0.5, 0.5, 0.2, 0.2])]},
              {"file": "b.jpg", "failure": "Failure image access", "detections": None}]
    out = read_megadetector_json(json.dumps(_md(images, categories={"5": "Animal", "1": "person"})).encode())
    a = out.frames["a.jpg"]
    assert [d.box.x for d in a.animals] == [0.1] and [d.box.x for d in a.people] == [0.5]
    b = out.frames["b.jpg"]
    assert b.failure == "Failure image access" and not b.is_empty and b.animals == ()


def test_old_file_without_version_reads_as_1_0():
    data = {"images": [{"file": "a.jpg", "detections": [_det("1", 0.9, [0.1, 0.1, 0.2, 0.2])]}]}
    out = read_megadetector_json(json.dumps(data).encode())
    assert out.format_version == "1.0" and out.detector is None
    assert len(out.frames["a.jpg"].animals) == 1  # built-in categories used when the file has none


@pytest.mark.parametrize("content, message", [
    ({"images": [{"file_name": "a.jpg", "id": 1}], "annotations": [], "categories": []}, "COCO"),
    ({"annotations": [], "categories": []}, "no 'images' list (found keys: annotations, categories)"),
    ([{"file": "a.jpg"}], "the JSON is a list"),
    ({"profile": "camtrap-dp", "resources": []}, "Camtrap DP"),
    ("{not json", "not valid JSON"),
    ({"info": {"format_version": "2.0"}, "images": []}, "format 2.0 is not supported; Rosette reads format 1.x"),
    ({"info": {"format_version": "abc"}, "images": []}, "'abc' is not a version number"),
])
def test_not_megadetector_output_is_a_format_error(tmp_path, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(DetectionsFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_megadetector_json(path)


def test_format_error_is_a_value_error_and_binary_is_refused(tmp_path):
    assert issubclass(DetectionsFormatError, ValueError)
    with pytest.raises(DetectionsFormatError, match="not UTF-8"):
        read_megadetector_json(b"\xff\xd8\xff\xe0 a jpeg")
    with pytest.raises(DetectionsFormatError, match="cannot read"):
        read_megadetector_json(tmp_path / "nope.json")


def _frame(name: str) -> FrameDetections:
    return FrameDetections(name, (), (), 0, 0, None)


def _output(names: list[str]) -> MegaDetectorOutput:
    return MegaDetectorOutput("1.4", None, 0.2, {n: _frame(n) for n in names}, ())


def test_match_frames_exact_case_and_suffix():
    out = _output(["cam1/IMG_0001.JPG", "cam1/img_0002.jpg", "IMG_0003.JPG", "deep/cam1/IMG_0004.JPG",
                   "cam1/GONE.JPG"])
    matched, missing = match_frames(out, ["cam1/IMG_0001.JPG", "cam1/IMG_0002.JPG", "site/cam9/IMG_0003.JPG",
                                          "cam1/IMG_0004.JPG", "other.jpg"])
    assert matched["cam1/IMG_0001.JPG"].file == "cam1/IMG_0001.JPG"     # exact
    assert matched["cam1/IMG_0002.JPG"].file == "cam1/img_0002.jpg"     # case-insensitive
    assert matched["site/cam9/IMG_0003.JPG"].file == "IMG_0003.JPG"     # folder path longer
    assert matched["cam1/IMG_0004.JPG"].file == "deep/cam1/IMG_0004.JPG"  # JSON path longer
    assert "other.jpg" not in matched and len(matched) == 4
    assert missing == ["cam1/GONE.JPG"]


def test_match_frames_refuses_ambiguous_suffix_and_prefers_exact():
    out = _output(["IMG_0001.JPG", "a/IMG_0002.JPG"])
    matched, missing = match_frames(out, ["cam1/IMG_0001.JPG", "cam2/IMG_0001.JPG", "a/IMG_0002.JPG",
                                          "b/a/IMG_0002.JPG"])
    assert "cam1/IMG_0001.JPG" not in matched and "cam2/IMG_0001.JPG" not in matched
    assert list(matched) == ["a/IMG_0002.JPG"]
    assert missing == ["IMG_0001.JPG"]
    # A suffix must end at a folder boundary: "XIMG_0001.JPG" is not "IMG_0001.JPG".
    matched, missing = match_frames(_output(["IMG_0001.JPG"]), ["cam1/XIMG_0001.JPG"])
    assert matched == {} and missing == ["IMG_0001.JPG"]


def test_summary_line_counts():
    images = BASIC + [{"file": f"gone{i}.jpg", "detections": []} for i in range(6)]
    out = read_megadetector_json(json.dumps(_md(images)).encode())
    matched, missing = match_frames(out, ["cam1/IMG_0001.JPG", "cam1/IMG_0002.JPG", "cam1/IMG_0003.JPG",
                                          "cam2/IMG_0004.JPG"])
    assert len(missing) == 6
    line = summary_line(out, matched, missing)
    assert "\n" not in line
    for part in ("10 frames read", "2 animal boxes kept", "1 frames with people", "8 empty frames",
                 "2 boxes below 0.2", "4 matched", "6 files missing from the folder (gone0.jpg, gone1.jpg, "
                 "gone2.jpg, gone3.jpg, gone4.jpg, ...)"):
        assert part in line, (part, line)
    assert "gone5.jpg" not in line


def _checkerboard(mode: str, size=(64, 48), cell=2) -> Image.Image:
    yy, xx = np.mgrid[0:size[1], 0:size[0]]
    board = (((yy // cell) + (xx // cell)) % 2 * 255).astype(np.uint8)
    if mode == "L":
        return Image.fromarray(board, "L")
    chans = [board, 255 - board, board]
    if mode == "RGBA":
        chans.append(np.full_like(board, 200))
    return Image.fromarray(np.stack(chans, axis=-1), mode)


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L"])
def test_blur_boxes_obscures_inside_and_keeps_outside(mode):
    img = _checkerboard(mode)
    before = np.asarray(img).copy()
    box = Box(0.25, 0.25, 0.5, 0.5)  # pixels 16..48 x 12..36 on a 64 x 48 frame
    out = blur_boxes(img, [box])
    assert out.mode == mode and out.size == img.size and out is not img
    assert np.array_equal(np.asarray(img), before)  # the input is not changed
    after = np.asarray(out).astype(float)
    left, top, right, bottom = box_pixels(box, *img.size)
    assert (left, top, right, bottom) == (16, 12, 48, 36)
    inside = np.zeros(before.shape[:2], bool)
    inside[top:bottom, left:right] = True
    assert np.array_equal(after[~inside], before[~inside].astype(float))
    # Per channel (RGBA's constant alpha would otherwise count as spread between channels).
    std_before = before[inside].astype(float).reshape(inside.sum(), -1).std(axis=0)
    std_after = after[inside].reshape(inside.sum(), -1).std(axis=0)
    assert std_before[:3].min() > 100 and (std_after < 0.1 * std_before[:3].min()).all()


def test_blur_boxes_tiny_box_and_no_boxes():
    img = _checkerboard("RGB")
    assert np.array_equal(np.asarray(blur_boxes(img, [])), np.asarray(img))
    out = np.asarray(blur_boxes(img, [Box(0.5, 0.5, 4 / 64, 4 / 48)])).astype(float)
    region = out[24:28, 32:36]
    assert region.std(axis=(0, 1)).max() < 1.0  # a 4 x 4 box is filled with one colour
    assert np.array_equal(out[:24], np.asarray(img)[:24].astype(float))
    pal = img.convert("P")
    assert blur_boxes(pal, [Box(0.1, 0.1, 0.5, 0.5)]).mode == "RGB"
