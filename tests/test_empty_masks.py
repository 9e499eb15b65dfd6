"""Empty automatic masks (issue 24, item 2): the batch masker clicks in the middle when its box prompt finds no
animal, every summary counts empty masks apart from the good ones, ``--mask-missing`` makes again the empty masks a
batch run made but never a curator's, and a refusal after ``--mask-missing`` says what to do by hand instead of
recommending the option just given.

The photos: a small synthetic benchmark (5 animals x 4 photos, 160 px) whose first photo of each animal is a grey
frame, on which GrabCut prompted with the batch box finds nothing."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from app.cli import main as cli
from core.inspect.masking import MaskResult
from core.inspect.masking.grabcut import GrabCutMasker
from db.inspect.masks import diagnostic_masks, made_automatically, mask_images
from db.models import Image
from db.inspect.sensitivity import MissingMasksError, run_sensitivity, unusable_masks
from tests.synthetic_reid import make_reid_set

REAL_PREDICT = GrabCutMasker.predict


@pytest.fixture()
def grey_cat(tmp_path):
    from db.identify.benchmarks import create_benchmark
    from db.session import open_catalogue

    manifest = make_reid_set(tmp_path / "photos", individuals=5, photos_each=4, seed=3)
    rng = np.random.default_rng(0)
    for i in range(5):  # a different grey each, with a little noise (GrabCut is slow on a perfectly flat frame)
        grey = 80 + 20 * i + rng.integers(-2, 3, (160, 160, 3))
        PILImage.fromarray(grey.astype(np.uint8)).save(tmp_path / "photos" / f"ind{i:02d}_0.png")
    cat = open_catalogue(tmp_path / "data")
    create_benchmark(cat, "syn", manifest=manifest, split="identity", test_fraction=0.4, seed=0)
    yield cat
    cat.close()


def grey_ids(cat, among=None) -> list[int]:
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.original_name).order_by(Image.id)).all()
    return [i for i, name in rows if name.endswith("_0.png") and (among is None or i in among)]


def split_test_ids(cat) -> list[int]:
    from db.identify.benchmarks import load_benchmark

    return list(load_benchmark(cat, "syn", split="test").image_ids)



def stored(cat, image_id):
    with cat.unit_of_work() as s:
        img = s.get(Image, image_id)
        return img.mask_path, img.mask_source, dict(img.mask_details or {}), list(img.mask_flags or [])


def finds_nothing(monkeypatch, *, only_grey: bool = False) -> None:
    """GrabCut that finds no animal (on the grey frames only, or anywhere), whatever the prompt."""

    def predict(self, rgb, **kw):
        res = REAL_PREDICT(self, rgb, **kw)
        if not only_grey or np.ptp(rgb) <= 4:
            res = MaskResult(mask=np.zeros_like(res.mask), source=res.source, details=res.details)
        return res

    monkeypatch.setattr(GrabCutMasker, "predict", predict)


def test_the_batch_masker_clicks_in_the_middle_when_its_box_finds_no_animal(grey_cat):
    from core.annotations import box_prompt
    from core.inspect.masking import create_masker
    from db.embeddings import load_photo, sources_for

    cat = grey_cat
    grey = grey_ids(cat)
    src = sources_for(cat, grey[:1])[0]
    rgb = load_photo(cat, src)
    assert not create_masker("grabcut").predict(rgb, box=box_prompt(src.box, rgb.shape)).mask.any()  # the case

    out = mask_images(cat, masker="grabcut", image_ids=grey, only_missing=False, user="ana")
    assert (out["masked"], out["empty"], out["retried"]) == (5, 0, 5), out["summary"]
    assert "5 found with a click in the middle" in out["summary"]
    for image_id in grey:
        path, source, details, flags = stored(cat, image_id)
        assert path and source == "grabcut" and "empty" not in flags
        assert details["made_by"] == "automatic" and details["prompt"]["points"] == [[80.0, 80.0]]


def test_every_summary_counts_empty_masks_apart(grey_cat, monkeypatch, capsys):
    from jobs import queue
    from jobs.actions.masks import submit_mask_all
    from jobs.requests.masks import MaskPhotosRequest

    cat = grey_cat
    grey = grey_ids(cat)
    finds_nothing(monkeypatch, only_grey=True)

    job_id, _ = submit_mask_all(cat, MaskPhotosRequest(masker="grabcut", user="ana"))  # the "mask" job
    assert queue.run_job(cat, job_id).value == "succeeded"
    job = queue.get_job(cat, job_id)
    good = 20 - job.result["empty"]
    assert job.result["empty"] == 5 and job.result["masked"] == good and sorted(job.result["empty_ids"]) == grey
    assert f"{good} of 20 photos masked with grabcut" in job.message and "5 empty" in job.message
    assert f"#{grey[0]}" in job.message and "Mask tab" in job.message

    assert cli(["--data-dir", str(cat.data_dir), "mask", "--masker", "grabcut", "--all"]) == 0  # rosette mask
    printed = capsys.readouterr().out
    assert f"{good} of 20 photos masked with grabcut" in printed and "5 empty" in printed

    # the diagnostic's own mask pass (masks kept in its cache), and the words of `rosette diagnose`
    from app.commands.diagnose_cmd import _masks_words

    def unmasked():
        with cat.unit_of_work() as s:
            for img in s.scalars(select(Image)):
                img.mask_path = img.mask_source = img.mask_details = img.mask_flags = None
            s.commit()

    unmasked()
    sources, run = diagnostic_masks(cat, split_test_ids(cat), masker="grabcut")
    assert run["empty"] == 2 and run["masked"] == len(sources) - 2 and "2 empty" in run["summary"]
    assert "2 empty" in _masks_words(run)
    monkeypatch.setattr(GrabCutMasker, "predict", REAL_PREDICT)  # an empty mask in the cache is made again
    _, run = diagnostic_masks(cat, split_test_ids(cat), masker="grabcut")
    assert run["empty"] == 0 and run["masked"] == 2 and run["retried"] == 2 and run["cached"] == len(sources) - 2


def test_mask_missing_redoes_empty_automatic_masks_and_never_a_curators(grey_cat, monkeypatch):
    from jobs.actions import diagnostics as ds
    from jobs.actions.masks import accept_mask
    from jobs.requests.diagnostics import SensitivityRequest
    from jobs.requests.masks import AcceptMaskRequest, MaskDraft

    cat = grey_cat
    tests = split_test_ids(cat)
    grey = grey_ids(cat, among=tests)
    assert len(grey) == 2
    with monkeypatch.context() as m:  # a batch run that left the grey frames' masks empty
        finds_nothing(m, only_grey=True)
        assert mask_images(cat, masker="grabcut", image_ids=tests, user="ana")["empty"] == 2
    # a curator's own empty mask, accepted in the Mask tab ("Make mask" with no prompt)
    curator = next(i for i in tests if i not in grey)
    default = {"prompt": {"box": [8, 8, 152, 152], "box_source": "default: frame minus 0.05 of each side",
                          "points": None, "point_labels": None}}
    accept_mask(cat, AcceptMaskRequest(draft=MaskDraft(image_id=curator, mask=np.zeros((160, 160), bool),
                                                       source="grabcut", details=default), user="bia"))
    before = stored(cat, curator)
    assert not made_automatically(before[1], before[2])
    assert made_automatically(*stored(cat, grey[0])[1:3])

    # the panel queues the run: the automatic masks will be made again; the curator's is refused, by number
    with pytest.raises(MissingMasksError) as err:
        ds.submit_sensitivity(cat, SensitivityRequest(benchmark="syn", mask_missing=True, masker="grabcut",
                                                      user="ana"))
    assert [i for i, _ in err.value.empty] == [curator] and "--mask-missing" not in str(err.value)
    assert f"#{curator} in the Mask tab" in str(err.value)

    with pytest.raises(MissingMasksError) as err:
        run_sensitivity(cat, backbone="efficientnet_lite0", benchmark="syn", mask_missing=True, masker="grabcut",
                        store=False)
    message = str(err.value)
    assert [i for i, _ in err.value.empty] == [curator] and err.value.missing == []
    assert unusable_masks(cat, tests) == ([], [(curator, err.value.empty[0][1])])  # the grey frames: masked now
    assert stored(cat, curator) == before  # the curator's mask is untouched
    assert "--mask-missing" not in message and "Mask the photos without a mask first" not in message
    assert f"Open photo #{curator} in the Mask tab" in message and "never replaced by a batch run" in message


def test_the_refusal_after_mask_missing_says_what_to_do_instead(grey_cat, monkeypatch):
    cat = grey_cat
    tests = split_test_ids(cat)
    finds_nothing(monkeypatch)  # nothing found anywhere, not even with a click in the middle
    with pytest.raises(MissingMasksError) as err:
        run_sensitivity(cat, backbone="efficientnet_lite0", benchmark="syn", mask_missing=True, masker="grabcut",
                        store=False)
    message = str(err.value)
    assert len(err.value.empty) == len(tests) and err.value.missing == []
    assert f"{len(tests)} of the {len(tests)} test photos of benchmark 'syn' have an empty mask" in message
    assert "--mask-missing" not in message and "Mask the photos without a mask first" not in message
    assert "tried again with a click in the middle" in message
    assert f"Open photos #{tests[0]}" in message and "draw a box around it" in message
    assert "Mask tab" in message

    # without --mask-missing, empty automatic masks are what that option is for: it is named then
    with pytest.raises(MissingMasksError) as err:
        run_sensitivity(cat, backbone="efficientnet_lite0", benchmark="syn", store=False)
    assert "--mask-missing" in str(err.value) and "rosette mask`" not in str(err.value)


def test_a_mask_is_automatic_only_when_its_details_say_so():
    box = {"box": [1, 1, 9, 9], "points": None}
    assert made_automatically("grabcut", {"made_by": "automatic", "prompt": {**box, "points": [[5, 5]]}})
    assert not made_automatically("grabcut", {"made_by": "curator", "prompt": {**box, "box_source": "default"}})
    assert not made_automatically("alpha", {"made_by": "automatic"})
    # masks from before the marker: the masker's default prompt is a batch run's, clicks or a drawn box a curator's
    assert made_automatically("sam2", {"prompt": {**box, "box_source": "default: frame minus 0.05 of each side"}})
    assert not made_automatically("grabcut", {"prompt": {**box, "box_source": "default", "points": [[5, 5]]}})
    assert not made_automatically("grabcut", {"prompt": {**box, "box_source": "given"}})
    assert not made_automatically("grabcut", None)  # stored by hand, no record of a masker's prompt


def test_a_batch_with_nothing_to_mask_says_so_instead_of_0_of_0(tmp_path):
    from db.session import open_catalogue

    cat = open_catalogue(tmp_path / "data")
    try:
        assert mask_images(cat, masker="grabcut")["summary"] == \
            "nothing to mask: every photo chosen already has a mask (--all masks them again)"
        assert mask_images(cat, masker="grabcut", only_missing=False)["summary"] == "nothing to mask: no photo chosen"
    finally:
        cat.close()
