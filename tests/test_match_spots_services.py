"""Spot evidence in match review and diagnostics (jobs.actions.match, app.tabs.match, jobs.actions.diagnostics): a fused
pipeline's cards (fused probability, matched spots, spot status), the matched-spots view of a pair and the
single-photo spot check -- on a small catalogue of synthetic spotted animals."""

from __future__ import annotations

import csv
import shutil

import cv2
import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from db.models import Image
from db.session import open_catalogue
from jobs.actions import match as ms
from jobs.actions import photo_diagnosis as ds
from tests.test_spots import spot_photo, spotted_animal

PIPELINE = "efficientnet_lite0+sift-test"
# (file, identity, flank): A's second photo is a rotated copy of its first; D has a single photo (its best
# match is necessarily another animal); E is A's coat seen on the other flank; the blank photo has no keypoints
PHOTOS = [("a0.png", "A", "left"), ("a1.png", "A", "left"), ("b0.png", "B", "left"), ("b1.png", "B", "left"),
          ("c0.png", "C", "left"), ("d0.png", "D", "left"), ("e0.png", "E", "right"), ("blank.png", "", "left")]


def _turned(rgb: np.ndarray, mask: np.ndarray, degrees: float) -> tuple[np.ndarray, np.ndarray]:
    """The whole photo (and its mask) rotated about its centre."""
    h, w = mask.shape
    m = cv2.getRotationMatrix2D((w / 2, h / 2), degrees, 1.0)
    return (cv2.warpAffine(rgb, m, (w, h), borderMode=cv2.BORDER_REFLECT),
            cv2.warpAffine(mask.astype(np.uint8), m, (w, h), flags=cv2.INTER_NEAREST) > 0)


def _save(path, rgb: np.ndarray, mask: np.ndarray) -> None:
    img = PILImage.fromarray(rgb).convert("RGBA")
    img.putalpha(PILImage.fromarray(mask.astype(np.uint8) * 255))
    img.save(path)


def make_photos(folder) -> None:
    rng = np.random.default_rng(7)
    coats = {ident: spot_photo(500 + n, size=(150, 180), n_spots=45) for n, ident in enumerate("ABCDE")}
    a0 = spotted_animal(coats["A"], rng, degrees=15.0, scale=(0.9, 1.0))
    for name, ident, _ in PHOTOS:
        if name == "a0.png":
            rgb, mask = a0
        elif name == "a1.png":
            rgb, mask = _turned(*a0, 5.0)
        elif name == "blank.png":
            rgb, mask = np.full((240, 300, 3), 128, np.uint8), np.ones((240, 300), bool)
        elif name == "e0.png":
            rgb, mask = spotted_animal(coats["A"], rng, degrees=15.0, scale=(0.9, 1.0))  # labelled the right flank: never compared with A's left photos
        else:
            rgb, mask = spotted_animal(coats[ident], rng, degrees=15.0, scale=(0.9, 1.0))
        _save(folder / name, rgb, mask)


def register_pipeline(cat, name: str = PIPELINE) -> None:
    """A pipeline row written directly, calibrated on made-up outcomes (no evaluation run)."""
    from core.identify.calibration import fit_calibrator
    from core.identify.spots.pipeline import PipelineSettings
    from db.embeddings import get_backbone
    from db.identify.spots import _register_pipeline, get_matcher

    # global: the probability rises with the score (about p = score); inliers: more than 15 means the same animal
    g = np.repeat(np.linspace(0.0, 1.0, 21), 10)
    same = (np.tile(np.arange(10), 21) < np.round(10 * g)).astype(int)
    inl = np.arange(0, 61)
    _register_pipeline(cat, name, global_model="efficientnet_lite0",
                       global_config=get_backbone(cat, "efficientnet_lite0").config.to_dict(),
                       settings=PipelineSettings(), matcher=get_matcher("sift"),
                       calibrators={"global": fit_calibrator(g, same),
                                    "inliers": fit_calibrator(inl, (inl > 15).astype(int))},
                       calibration_source={"what": "test"}, species_id=None)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    from db.io.ingest import ingest_path

    root = tmp_path_factory.mktemp("spotcat")
    photos = root / "photos"
    photos.mkdir()
    make_photos(photos)
    with open(photos / "manifest.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["filename", "identity", "flank", "sighting"])
        for n, (name, ident, flank) in enumerate(PHOTOS):
            w.writerow([name, ident, flank, f"s{n}"])
    cat = open_catalogue(root / "data")
    report = ingest_path(cat, photos / "manifest.csv", format="manifest", user="seed")
    assert report.counts.get("imported") == len(PHOTOS), report.summary()
    register_pipeline(cat)
    cat.close()
    return root / "data"


@pytest.fixture()
def cat(seeded, tmp_path):
    target = tmp_path / "data"
    shutil.copytree(seeded, target)
    c = open_catalogue(target)
    yield c
    c.close()


def ids(cat) -> dict[str, int]:
    with cat.unit_of_work() as s:
        return dict(s.execute(select(Image.original_name, Image.id)).all())


# --------------------------------------------------------------------------- match review with a pipeline


def test_pipeline_cards_carry_the_fused_probability_and_matched_spots(cat, capsys):
    import json

    from app.cli import main as cli_main
    from app.tabs.match_cards import candidates_html, header_html
    from db.identify.matching import rank_candidates

    photo = ids(cat)
    view = ms.match_query(cat, photo["a0.png"], model_name=PIPELINE)
    result = rank_candidates(cat, photo["a0.png"], model_name=PIPELINE, k=ms.CANDIDATES_SHOWN)
    assert view.pipeline and result.pipeline and view.candidates
    assert len(view.candidates) == len(result.candidates)
    for card, cand in zip(view.candidates, result.candidates):
        assert card.image_id == cand.image_id
        assert card.score == pytest.approx(cand.score)  # the pair's fused probability ranks, not re-calibrated
        assert card.global_score == pytest.approx(cand.global_score)
        assert card.inliers == cand.inliers and card.spot_status == cand.spot_status
        assert card.spot_status is not None and card.inliers is not None
    # one posterior over the individuals and a new animal, as every other view: an individual's photos share its
    # probability, and the individuals' probabilities and p(new) sum to 1 (pair probabilities would sum above it)
    assert view.p_new is not None and view.probability_withheld is None
    per_individual = {c.individual_name: c.probability for c in view.candidates if c.probability is not None}
    assert per_individual and sum(per_individual.values()) + view.p_new == pytest.approx(1.0)
    assert sum(c.score for c in view.candidates) > 1.0
    assert max(per_individual, key=per_individual.get) == "A"
    head = header_html(view, [], 0)
    assert "New animal:" in head and "likely the same animal" not in head and "match-suggest-new" not in head
    assert not view.suggest_new
    # rosette match --json reads the same numbers
    assert cli_main(["--data-dir", str(cat.data_dir), "match", str(photo["a0.png"]), "--model", PIPELINE,
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["p_new"] == pytest.approx(view.p_new) and out["probability_withheld"] is None
    assert [c["probability"] for c in out["candidates"]] == pytest.approx([c.probability for c in view.candidates])
    top = view.candidates[0]
    assert top.image_id == photo["a1.png"] and top.spot_status == "verified" and top.inliers >= 15
    assert top.spot_probability == pytest.approx(1.0)
    cross = next(c for c in view.candidates if c.image_id == photo["e0.png"])
    assert cross.spot_status == "cross_flank" and cross.inliers == 0
    assert "fused calibrated probability" in view.calibration_note and "isotonic calibration" in view.calibration_note
    assert "summing to 1" in view.calibration_note
    assert view.new_threshold is not None  # a new individual can be suggested on the posterior's p(new)
    html = candidates_html(view, 1)
    assert f"{top.inliers} matched spots" in html and "rz-spots" in html
    assert "opposite flank: no spots to compare" in html
    assert "fused probability" in html and "raw global score" in html
    assert f"{top.inliers} spots" in html  # beside the raw score
    assert "spots verified" in html  # the status words in the badge's tooltip
    # every photo here is masked and has spots: no note about the query in the header
    assert view.query_spot_note is None and "match-spot-note" not in header_html(view, [], 0)


def test_a_pipeline_that_does_not_discriminate_shows_no_probability_and_no_hint(cat, monkeypatch):
    from app.tabs.match_cards import header_html
    from core.identify.calibration import Discrimination

    # as the curators' decided pairs would measure it: held-out AUC at chance
    monkeypatch.setattr(ms, "pipeline_discrimination", lambda *a, **k: Discrimination(0.5, 0.3, 60, 20))
    view = ms.match_query(cat, ids(cat)["blank.png"], model_name=PIPELINE)
    assert view.candidates and all(c.probability is None for c in view.candidates)
    assert view.p_new is None and not view.suggest_new
    assert view.probability_withheld and "cannot tell the same animal" in view.probability_withheld
    head = header_html(view, [], 0)
    assert "match-probability-withheld" in head and "new individual" not in head


def test_a_photo_without_spots_is_said_so_in_the_header(cat):
    from app.tabs.match_cards import header_html

    view = ms.match_query(cat, ids(cat)["blank.png"], model_name=PIPELINE)
    assert view.query_spot_note and "no spot evidence" in view.query_spot_note
    assert "no spot evidence" in header_html(view, [], 0)
    assert {c.spot_status for c in view.candidates} == {"no_keypoints", "cross_flank"}  # E is the other flank
    # nothing to go on but weak global scores: p(new) of the one posterior says new, not a pair under a threshold
    assert view.p_new is not None and view.p_new > 0.5 and view.suggest_new
    assert "A new animal is" in header_html(view, [], 0)


def test_a_global_model_view_has_no_spot_facts(cat):
    from app.tabs.match_cards import candidates_html

    view = ms.match_query(cat, ids(cat)["a0.png"], model_name="efficientnet_lite0")
    assert not view.pipeline and view.candidates
    assert all(c.inliers is None and c.spot_status is None and not c.has_spot_facts for c in view.candidates)
    assert "rz-spots" not in candidates_html(view, 1)


def test_matcher_choices_list_pipelines_but_not_archived_ones(cat):
    from db.models import Model, ModelStatus

    choices = ms.matcher_choices(cat)
    assert PIPELINE in choices and choices[0] == ms.DEFAULT_MODEL
    register_pipeline(cat, "efficientnet_lite0+sift-newer")
    choices = ms.matcher_choices(cat)
    assert choices.index("efficientnet_lite0+sift-newer") < choices.index(PIPELINE)  # newest first
    with cat.unit_of_work() as s:
        s.scalar(select(Model).where(Model.name == PIPELINE)).status = ModelStatus.archived
        s.commit()
    assert PIPELINE not in ms.matcher_choices(cat)


# --------------------------------------------------------------------------- matched spots of a pair


def test_matched_spots_of_a_rotated_copy_and_of_another_animal(cat):
    from core.identify.spots.draw import DRAW_HEIGHT
    from jobs.actions.spots import MatchedSpotsRequest, matched_spots

    photo = ids(cat)
    same = matched_spots(cat, MatchedSpotsRequest(query_image_id=photo["a0.png"], candidate_image_id=photo["a1.png"]))
    other = matched_spots(cat, MatchedSpotsRequest(query_image_id=photo["a0.png"], candidate_image_id=photo["c0.png"]))
    assert same.status == "verified" and same.n_inliers >= 20
    assert other.n_inliers < same.n_inliers / 3
    h, w = 240, 300  # both photos are 240 x 300: each drawn 360 high, 450 wide
    assert same.picture.shape[0] == DRAW_HEIGHT and same.picture.dtype == np.uint8
    assert same.picture.shape[1] > round(w * DRAW_HEIGHT / h) * 1.5  # side by side, wider than either photo


def test_candidate_spots_text_names_the_count_the_pair_and_the_matcher(cat):
    photo = ids(cat)
    view = ms.match_query(cat, photo["a0.png"], model_name=PIPELINE)
    sv = ms.candidate_spots(cat, view, 1)
    top = view.candidates[0]
    assert sv.n_inliers == top.inliers  # the pipeline's own matcher and settings: the count on the card
    assert f"**{sv.n_inliers} matched spots** between photo #{photo['a0.png']} and candidate 1 " \
           f"({top.individual_name}" in sv.text
    assert "spots verified (sift, pipeline" in sv.text
    assert sv.picture.ndim == 3 and sv.picture.shape[1] > sv.picture.shape[0]
    # without a pipeline the default matcher draws the pair
    glob = ms.match_query(cat, photo["a0.png"], model_name="efficientnet_lite0")
    cross_rank = next(c.rank for c in glob.candidates if c.image_id == photo["e0.png"])
    sv = ms.candidate_spots(cat, glob, cross_rank)
    assert sv.n_inliers == 0 and sv.status == "cross_flank" and "opposite flanks" in sv.text
    assert "pipeline" not in sv.text
    with pytest.raises(ValueError, match="Open a photo"):
        ms.candidate_spots(cat, None, 1)


# --------------------------------------------------------------------------- diagnostics: spot evidence


def test_spot_check_is_quiet_when_the_best_match_shares_many_spots(cat):
    check = ds.spot_evidence_check(cat, ids(cat)["a0.png"])
    assert check.rows and check.rows[0].image_id == ids(cat)["a1.png"]
    assert check.rows[0].inliers >= 15 and check.warning is None
    assert "shares only" not in check.summary and "coat pattern supports it" in check.summary
    assert len(check.rows) <= ds.SPOT_CHECK_CANDIDATES
    md = ds.spot_check_markdown(check)
    assert f"| {check.rows[0].inliers} |" in md and "Matched spots" in md and "⚠" not in md


def test_spot_check_warns_when_the_best_match_shares_almost_no_spots(cat):
    photo = ids(cat)
    check = ds.spot_evidence_check(cat, photo["d0.png"])  # D has no other photo: its best match is another animal
    top = check.rows[0]
    assert top.inliers < ds.FEW_SPOTS and top.status != "cross_flank"
    assert check.warning is not None
    shared = "no matched spots" if top.inliers == 0 else f"only {top.inliers} matched spot"
    assert check.warning.startswith(f"The best match (score {top.score:.2f}) shares {shared}")
    assert "the model may be matching the background or the pose, not the coat" in check.warning
    md = ds.spot_check_markdown(check)
    assert "⚠" in md and all(f"#{r.image_id} |" in md for r in check.rows)
    # the cross-flank candidate is listed without a count
    rows = {r.image_id: r for r in check.rows}
    if photo["e0.png"] in rows:
        assert rows[photo["e0.png"]].status == "cross_flank"


def test_spot_check_of_a_blank_photo_says_it_has_no_spot_evidence(cat):
    check = ds.spot_evidence_check(cat, ids(cat)["blank.png"])
    assert not check.enough_keypoints
    assert "no spot evidence on this photo (too few keypoints: tiny, blurred or blank)" in check.warning.lower()
    assert {r.status for r in check.rows} <= {"no_keypoints", "cross_flank"}
    assert all(r.inliers == 0 for r in check.rows)


def test_spot_check_of_a_pipeline_ranks_by_its_global_model(cat):
    check = ds.spot_evidence_check(cat, ids(cat)["a0.png"], model=PIPELINE)
    assert check.model == "efficientnet_lite0" and check.rows
