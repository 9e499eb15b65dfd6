"""Detectors (``core.field.detectors``): the registry, MegaDetector's availability, pre- and post-processing, and a run
on a YOLOv5-style checkpoint with random weights.

No network and no real weights. The checkpoint is the MegaDetector v5 layout (``MDV5_CONFIG``: YOLOv5x6, 3
classes) at YOLOv5n6's width / depth multiples (0.25 / 0.33) instead of x6's (1.25 / 1.33), to keep the test fast:
same layers, same head, same strides, 3.1 M parameters instead of 140 M. It is stored the way YOLOv5 stores
``md_v5a.0.0.pt``: the whole model pickled in half precision under YOLOv5's own class names
(``models.yolo.Model``, ``models.common.Conv`` ...), which are not importable here, so loading it proves the
loader rebuilds the network from the file's config without the YOLOv5 source tree.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from app.commands import detectors_cmd
from core.annotations import DETECTION_CATEGORIES, Box, Detection
from core.field.detectors import (
    Detector,
    DetectorUnavailableError,
    UnknownComponentError,
    create_detector,
    detector_available,
    detector_status,
    list_detectors,
    yolov5,
)
from core.field.detectors import megadetector as md

REPO_ROOT = Path(__file__).resolve().parent.parent
SMALL = {"depth_multiple": 0.33, "width_multiple": 0.25}  # YOLOv5n6's multiples of the x6 layout
CATEGORIES = set(DETECTION_CATEGORIES.values())


@pytest.fixture
def no_weights(tmp_path, monkeypatch) -> Path:
    """An empty ROSETTE_WEIGHTS_DIR, so weights on this machine never leak in."""
    empty = tmp_path / "weights"
    empty.mkdir()
    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(empty))
    return empty


def _small_network(seed: int = 0) -> yolov5.YOLOv5:
    torch.manual_seed(seed)
    net = yolov5.YOLOv5({**copy.deepcopy(yolov5.MDV5_CONFIG), **SMALL})
    with torch.no_grad():  # BN statistics away from the identity, so folding them (and their eps) matters
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.eps = 2e-3  # not the builder's 1e-3: the loader must take the checkpoint's own
    return net.eval()


class _Pwned:
    """A pickled global that would run a shell command if the loader resolved it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _save_like_yolov5(net: yolov5.YOLOv5, path: Path, *, marker: Path | None = None,
                      yaml_override: dict | None = None) -> None:
    """Pickle ``net`` as YOLOv5's train.py does: {'model': the whole model in half precision, ...} with the
    classes named models.yolo.* / models.common.*, from stand-in modules removed again after saving."""
    fake = {name: types.ModuleType(name) for name in ("models", "models.common", "models.yolo")}
    classes = {}
    for cls, where in ((yolov5.Conv, "models.common"), (yolov5.C3, "models.common"),
                       (yolov5.Bottleneck, "models.common"), (yolov5.SPPF, "models.common"),
                       (yolov5.Concat, "models.common"), (yolov5.Detect, "models.yolo"),
                       (yolov5.YOLOv5, "models.yolo")):
        name = "Model" if cls is yolov5.YOLOv5 else cls.__name__
        sub = type(name, (cls,), {"__module__": where, "__qualname__": name})
        setattr(fake[where], name, sub)
        classes[cls] = sub
    model = copy.deepcopy(net).half()
    for m in model.modules():
        if type(m) in classes:
            m.__class__ = classes[type(m)]
    model.yaml = {**copy.deepcopy(net.cfg), **(yaml_override or {})}
    model.names = ["animal", "person", "vehicle"]
    ckpt = {"epoch": -1, "best_fitness": None, "model": model, "ema": None, "updates": None, "optimizer": None,
            "opt": {"weights": Path("yolov5x6.pt"), "img_size": np.array([1280, 1280])},
            "date": "2022-06-01T00:00:00"}
    if marker is not None:
        ckpt["wandb_id"] = _Pwned(marker)
    saved = {k: sys.modules.get(k) for k in fake}
    sys.modules.update(fake)
    try:
        torch.save(ckpt, path)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


@pytest.fixture(scope="module")
def md_checkpoint(tmp_path_factory) -> tuple[Path, yolov5.YOLOv5, Path]:
    """(folder holding md_v5a.0.0.pt, the network it was saved from, a marker file the checkpoint must not create)."""
    folder = tmp_path_factory.mktemp("md-weights")
    net = _small_network()
    marker = folder.parent / "pwned-marker"
    _save_like_yolov5(net, folder / "md_v5a.0.0.pt", marker=marker)
    assert "models" not in sys.modules  # nothing named like YOLOv5's tree is importable while loading
    return folder, net, marker


def _photo(seed: int = 1, shape: tuple[int, int] = (480, 640)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)


# --------------------------------------------------------------------------- registry and availability


def test_the_registry_lists_megadetector_and_names_the_known_ones_on_an_unknown_name(no_weights):
    assert list_detectors() == ["megadetector"]
    with pytest.raises(UnknownComponentError, match=r"unknown detector 'yolo'; available: megadetector"):
        create_detector("yolo")
    with pytest.raises(ValueError, match="available: megadetector"):  # a ValueError too: the CLI prints it
        detector_available("yolo")


def test_without_weights_megadetector_is_listed_unavailable_with_a_one_line_reason(no_weights):
    ok, reason = md.available()
    assert ok is False and "\n" not in reason
    assert reason == (f"no MegaDetector weights in $ROSETTE_WEIGHTS_DIR ({no_weights}) (put md_v5a.0.0.pt there; "
                      "boxes can also come from a MegaDetector batch JSON: rosette import FOLDER --detections MD.json)")
    assert detector_status() == [("megadetector", False, reason)]
    with pytest.raises(DetectorUnavailableError, match="put md_v5a.0.0.pt there") as err:
        create_detector("megadetector")
    assert isinstance(err.value, FileNotFoundError)  # the CLI's one-line error path


def test_an_unset_weights_dir_and_unusable_files_are_named(tmp_path, monkeypatch):
    monkeypatch.delenv("ROSETTE_WEIGHTS_DIR", raising=False)
    ok, reason = md.available()
    assert not ok and "$ROSETTE_WEIGHTS_DIR (not set)" in reason
    # an MDv1000 file whose embedded metadata says it is not a YOLOv5 network
    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(tmp_path))
    with zipfile.ZipFile(tmp_path / "md_v1000.0.0-redwood.pt", "w") as zf:
        zf.writestr("archive/data.pkl", b"")
        zf.writestr("archive/megadetector_info.json", json.dumps({"model_type": "yolov9", "image_size": 1280}))
    ok, reason = md.available()
    assert not ok and "md_v1000.0.0-redwood.pt is a yolov9 network" in reason and "md_v5a.0.0.pt" in reason
    assert md.find_weights(tmp_path / "nope.pt") == (None, f"MegaDetector weights {tmp_path / 'nope.pt'} do not exist")


def test_weights_are_found_by_preference_in_the_folder_and_its_megadetector_subfolder(tmp_path, monkeypatch):
    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(tmp_path))
    (tmp_path / "megadetector").mkdir()
    for name in ("md_v5b.0.0.pt", "notes.txt", "megadetector/md_v5a.0.0.pt", "md_v5c.pt"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in md.candidate_files(tmp_path)] == ["md_v5b.0.0.pt", "md_v5c.pt", "md_v5a.0.0.pt"]
    found, reason = md.find_weights()
    assert found.version == "v5b.0.0" and found.image_size == 1280 and reason.startswith("weights: ")
    assert md.version_from_filename("md_v1000.0.0-spruce.pt") == "v1000.0.0-spruce"


def test_listing_detectors_does_not_import_torch(no_weights):
    code = ("import sys; import core.field.detectors as d; d.detector_status(); d.describe_detectors(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "ROSETTE_WEIGHTS_DIR": str(no_weights)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- pre- and post-processing


def test_letterbox_is_yolov5s_classic_letterbox():
    img, r, pad = md.letterbox(_photo(shape=(480, 640)), 1280, 64)
    assert img.shape == (960, 1280, 3) and r == 2.0 and pad == (0.0, 0.0)
    img, r, (dw, dh) = md.letterbox(_photo(shape=(333, 500)), 1280, 64)
    # 500 x 333 * 2.56 = 1280 x 852; 852 is padded by (1280 - 852) % 64 = 44 rows, 22 above and 22 below
    assert img.shape == (896, 1280, 3) and r == 2.56 and (dw, dh) == (0.0, 22.0)
    assert (img[:22] == 114).all() and (img[-22:] == 114).all() and not (img[22:-22] == 114).all()


def test_boxes_go_back_to_the_photo_normalised_and_truncated():
    xyxy = np.array([[200.0, 100.0, 600.0, 500.0],  # photo pixels: 100, 50, 300, 250 (gain 2, no padding)
                     [-50.0, 900.0, 30.0, 1000.0],  # clipped to the frame: 0, 450, 15, 480
                     [10.0, 10.0, 10.4, 50.0]])  # rounds to zero width: left out
    dets = md.to_detections(xyxy, np.array([0.51234, 0.9, 0.8]), np.array([0, 1, 2]), (960, 1280), (480, 640),
                            min_confidence=0.2)
    assert dets == [Detection("person", Box(0.0, 0.9375, 0.0234, 0.0625), 0.9),
                    Detection("animal", Box(0.1562, 0.1041, 0.3125, 0.4166), 0.512)]
    # letterbox padding is taken off: a 500 x 333 photo in a 1280 x 896 input (gain 2.56, 21.76 rows above)
    det = md.to_detections(np.array([[256.0, 21.76 + 128.0, 512.0, 21.76 + 256.0]]), np.array([0.7]),
                           np.array([0]), (896, 1280), (333, 500))[0]
    assert det.box == Box(0.2, 0.1501, 0.2, 0.1501)  # 100..200 x 50..100 px, truncated to 4 decimals


def test_postprocess_keeps_the_best_box_per_class_and_drops_weak_ones():
    def row(cx, cy, w, h, obj, scores):
        return [cx, cy, w, h, obj, *scores]

    pred = torch.tensor([
        row(300, 300, 200, 200, 0.95, [0.9, 0.1, 0.0]),  # animal 0.855
        row(305, 300, 200, 200, 0.9, [0.9, 0.1, 0.0]),  # animal 0.81, overlaps the first: suppressed
        row(300, 300, 200, 200, 0.9, [0.1, 0.8, 0.0]),  # person 0.72: another class, kept
        row(900, 500, 100, 100, 0.1, [1.0, 0.0, 0.0]),  # objectness below the threshold
        row(900, 200, 100, 100, 0.9, [0.1, 0.0, 0.1]),  # best class score 0.09 below the threshold
    ])
    dets = md.postprocess(pred, (960, 1280), (480, 640), min_confidence=0.2)
    assert [d.category for d in dets] == ["animal", "person"]
    # objectness x class score, truncated (not rounded) to 3 decimals as MegaDetector writes it: float32 0.855 and
    # 0.72 come out as 0.854 and 0.719
    assert [d.confidence for d in dets] == pytest.approx([0.855, 0.72], abs=1.01e-3)
    assert dets[0].box == dets[1].box == Box(0.1562, 0.2083, 0.1562, 0.2083)  # 100..200 px of 640 x 480
    assert md.postprocess(pred, (960, 1280), (480, 640), min_confidence=0.99) == []


# --------------------------------------------------------------------------- a run on a YOLOv5-style checkpoint


def test_megadetector_runs_on_a_yolov5_checkpoint_without_the_yolov5_package(md_checkpoint, monkeypatch):
    folder, net, marker = md_checkpoint
    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(folder))
    ok, reason = md.available()
    assert ok and reason == f"weights: {folder / 'md_v5a.0.0.pt'} (MegaDetector v5a.0.0)"

    detector = create_detector("megadetector", min_confidence=0.01)
    assert isinstance(detector, Detector) and detector.name == "megadetector"
    dets = detector.detect(_photo())
    assert dets, "random weights score around 0.25: some boxes pass 0.01"
    assert len(dets) <= md.MAX_DETECTIONS
    for d in dets:
        assert isinstance(d, Detection) and isinstance(d.box, Box)
        assert d.category in CATEGORIES
        assert 0.01 <= d.confidence <= 1.0
        assert 0.0 <= d.box.x and 0.0 <= d.box.y and d.box.w > 0 and d.box.h > 0
        assert d.box.x + d.box.w <= 1.0 and d.box.y + d.box.h <= 1.0
    assert [d.confidence for d in dets] == sorted((d.confidence for d in dets), reverse=True)

    # the rebuilt network is the saved one: same raw output as the original (after the fp16 round trip, BN folded)
    reference = copy.deepcopy(net).half().float().fuse().eval()
    x = torch.rand(1, 3, 256, 320, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        expected, got = reference(x), detector.network(x)
    assert got.shape == expected.shape == (1, 3 * (32 * 40 + 16 * 20 + 8 * 10 + 4 * 5), 8)  # strides 8 .. 64
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-3)
    assert detector.network.stride.tolist() == [8.0, 16.0, 32.0, 64.0]

    details = detector.details()
    path = folder / "md_v5a.0.0.pt"
    assert details["weights"] == str(path) and details["version"] == "v5a.0.0"
    assert details["weights_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert details["image_size"] == 1280 and details["min_confidence"] == 0.01
    # nothing from the pickle ran: YOLOv5's classes and the shell command became inert stand-ins
    assert not marker.exists()
    replaced = set(detector.checkpoint_info["stand_ins"])
    assert {"models.yolo.Model", "models.common.Conv", f"{os.system.__module__}.system"} <= replaced
    assert detector.checkpoint_info["names"] == ["animal", "person", "vehicle"]
    # a threshold per call, and the default (MegaDetector's output threshold) when none is given
    assert all(d.confidence >= 0.3 for d in detector.detect(_photo(), min_confidence=0.3))
    assert create_detector("megadetector").min_confidence == md.OUTPUT_THRESHOLD


def test_weights_that_do_not_fit_their_config_and_broken_files_are_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(tmp_path))
    _save_like_yolov5(_small_network(), tmp_path / "md_v5a.0.0.pt", yaml_override={"nc": 80})
    with pytest.raises(ValueError, match=r"md_v5a.0.0.pt: its weights do not fit the network its config describes"):
        create_detector("megadetector").detect(_photo())
    (tmp_path / "md_v5a.0.0.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"md_v5a.0.0.pt: not a readable PyTorch checkpoint"):
        create_detector("megadetector").detect(_photo())


# --------------------------------------------------------------------------- the command


def _run_command(argv: list[str], capsys) -> str:
    parser = argparse.ArgumentParser(prog="rosette")
    detectors_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    assert args.func(args, None) == 0
    return capsys.readouterr().out


def test_the_detectors_command_lists_each_detector_and_why(no_weights, md_checkpoint, monkeypatch, capsys):
    rows = json.loads(_run_command(["detectors", "--json"], capsys))
    assert [(r["name"], r["available"]) for r in rows] == [("megadetector", False)]
    assert "put md_v5a.0.0.pt there" in rows[0]["reason"] and "MegaDetector v5" in rows[0]["description"]
    table = _run_command(["detectors"], capsys)
    assert table.splitlines()[0].split() == ["detector", "available", "here", "why"]
    assert "megadetector" in table and " no " in table and "--detections MD.json" in table

    monkeypatch.setenv("ROSETTE_WEIGHTS_DIR", str(md_checkpoint[0]))
    rows = json.loads(_run_command(["detectors", "--json"], capsys))
    assert rows[0]["available"] is True and rows[0]["reason"].endswith("md_v5a.0.0.pt (MegaDetector v5a.0.0)")


def test_the_detectors_command_through_the_cli(no_weights, capsys):
    from app import cli

    if detectors_cmd not in cli.COMMANDS:
        pytest.skip("app.commands.detectors_cmd is not registered in app.cli.COMMANDS yet")
    assert cli.main(["detectors", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "megadetector"
