"""Selective sensitivity (issue 16, item 1): the edits on hand-made pictures, the statistics on similarities built so
that the slopes are known exactly, and the runner end to end on a small synthetic benchmark with alpha masks
(refusal of photos without a mask, cache reuse, storage, leaderboard, the job, the CLI)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from app.cli import main as cli
from core.inspect import sensitivity as sv
from core.inspect import sensitivity_stats as st
from db.inspect.sensitivity import MissingMasksError, identity_edit_in_use, run_sensitivity
from jobs import queue
from jobs.actions import diagnostics as ds
from jobs.requests.diagnostics import SensitivityRequest
from tests.synthetic_reid import synthetic_catalogue

DIRS = sv.EditDirections(brightness=1, temperature=1, rotation=1, turn=1, zoom=1, shift=(0.5, -0.5))


def _picture(h: int = 60, w: int = 80) -> tuple[np.ndarray, np.ndarray]:
    """A smooth picture (ramps in every channel, so any move of a pixel changes it) and a box mask."""
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([40 + 2 * x, 30 + 3 * y, 200 - x - y], axis=2).clip(0, 255).astype(np.uint8)
    mask = np.zeros((h, w), bool)
    mask[15:45, 20:60] = True
    return rgb, mask


def _donor() -> tuple[np.ndarray, np.ndarray]:
    """Another animal: a uniform coat of colour (10, 200, 30) inside its mask, something else around it."""
    rgb = np.full((40, 50, 3), 250, np.uint8)
    mask = np.zeros((40, 50), bool)
    mask[5:25, 10:40] = True
    rgb[mask] = (10, 200, 30)
    return rgb, mask


def _edit(rgb, mask, dim, t, **extra):
    donor_rgb, donor_mask = _donor()
    background = np.full((30, 30, 3), (0, 0, 255), np.uint8)
    return sv.edit_photo(rgb, mask, dim, t, directions=DIRS, background=background, donor_rgb=donor_rgb,
                         donor_mask=donor_mask, **extra)


# --------------------------------------------------------------------------- the edits


@pytest.mark.parametrize("dim", sv.DIMENSIONS)
def test_a_zero_strength_edit_is_the_photo_itself_and_scores_exactly_one(dim):
    rgb, mask = _picture()
    out = _edit(rgb, mask, dim, 0.0)
    assert out.dtype == np.uint8 and np.array_equal(out, rgb) and out is not rgb

    def embed(img: np.ndarray) -> np.ndarray:  # any deterministic embedding: mean colour of each quarter
        q = [img[:30, :40], img[:30, 40:], img[30:, :40], img[30:, 40:]]
        return np.concatenate([p.reshape(-1, 3).mean(0) for p in q])[None] / 255.0 + 0.1

    assert st.similarity_to_original(embed(rgb), embed(out))[0] == 1.0
    full = _edit(rgb, mask, dim, 1.0)
    assert st.similarity_to_original(embed(rgb), embed(full))[0] < 1.0


def test_the_background_edit_changes_only_pixels_outside_the_mask_and_more_with_strength():
    rgb, mask = _picture()
    changes = []
    for t in sv.STRENGTHS:
        out = _edit(rgb, mask, "background", t)
        assert np.array_equal(out[mask], rgb[mask])
        changes.append(np.abs(out.astype(int) - rgb)[~mask].mean())
    assert changes == sorted(changes) and changes[0] == 0 < changes[1]
    full = _edit(rgb, mask, "background", 1.0)
    assert (full[~mask] == (0, 0, 255)).all()  # at strength 1 the outside is the new background
    half = _edit(rgb, mask, "background", 0.5)
    expected = np.rint(0.5 * rgb[~mask].astype(np.float32) + 0.5 * np.array([0, 0, 255], np.float32))
    assert np.array_equal(half[~mask], expected.astype(np.uint8))


def test_the_identity_edit_changes_only_pixels_inside_the_mask_towards_the_donors_coat():
    rgb, mask = _picture()
    changes = []
    for t in sv.STRENGTHS:
        out = _edit(rgb, mask, "identity", t)
        assert np.array_equal(out[~mask], rgb[~mask])
        changes.append(np.abs(out.astype(int) - rgb)[mask].mean())
    assert changes == sorted(changes) and changes[0] == 0 < changes[1]
    full = _edit(rgb, mask, "identity", 1.0)
    assert (full[mask] == (10, 200, 30)).all()  # the donor's coat, its surroundings left out
    quarter = _edit(rgb, mask, "identity", 0.25)
    expected = np.rint(0.75 * rgb[mask].astype(np.float32) + 0.25 * np.array([10, 200, 30], np.float32))
    assert np.array_equal(quarter[mask], expected.astype(np.uint8))


def test_the_coat_fills_the_donors_box_with_the_nearest_coat_pixel():
    donor = np.zeros((4, 4, 3), np.uint8)
    dmask = np.zeros((4, 4), bool)
    dmask[0:2, 0] = True  # left column: red above, green below
    dmask[0, 1] = True  # one blue pixel top right of the box
    donor[0, 0], donor[1, 0], donor[0, 1] = (255, 0, 0), (0, 255, 0), (0, 0, 255)
    target = np.zeros((2, 2), bool)
    target[:] = True
    coat = sv.coat_canvas((2, 2), target, donor, dmask)  # the box is 2x2, the same size: no resizing
    assert coat[0, 0].tolist() == [255, 0, 0] and coat[1, 0].tolist() == [0, 255, 0]
    assert coat[0, 1].tolist() == [0, 0, 255]
    assert coat[1, 1].tolist() in ([0, 255, 0], [0, 0, 255])  # off the donor's mask: a nearest coat pixel
    with pytest.raises(ValueError, match="no coat"):
        sv.coat_canvas((2, 2), target, donor, np.zeros((4, 4), bool))


@pytest.mark.parametrize("dim", ["lighting", "viewpoint"])
def test_lighting_and_viewpoint_change_the_photo_more_as_the_strength_grows(dim):
    rgb, mask = _picture()
    for dirs in (DIRS, sv.EditDirections(-1, -1, -1, -1, -1, (-1.0, 1.0))):
        outs = [sv.edit_photo(rgb, mask, dim, t, directions=dirs) for t in sv.STRENGTHS]
        change = [np.abs(o.astype(int) - rgb).mean() for o in outs]
        assert change == sorted(change) and change[0] == 0 < change[1], change
    if dim == "lighting":  # gamma and exposure push the same way: every pixel moves one way only
        darker = sv.EditDirections(-1, 1, 1, 1, 1, (0.0, 0.0))
        steps = np.stack([sv.edit_lighting(rgb, t, directions=darker).astype(int) for t in sv.STRENGTHS])
        assert (np.diff(steps[..., 1], axis=0) <= 0).all()  # green is scaled by exposure and gamma only


def test_the_viewpoint_homography_turns_the_photo_by_the_angle_about_its_centre():
    settings = sv.EditSettings(scale=0.0, crop=0.0)
    h, w = 61, 81
    assert np.allclose(sv.viewpoint_homography((h, w), 0.0, directions=DIRS, settings=settings), np.eye(3))
    hm = sv.viewpoint_homography((h, w), 1.0, directions=DIRS, settings=settings)
    cx, cy = (w - 1) / 2, (h - 1) / 2

    def apply(x, y):
        p = hm @ np.array([x, y, 1.0])
        return p[0] / p[2], p[1] / p[2]

    assert np.allclose(apply(cx, cy), (cx, cy))  # the centre stays put
    x, y = apply(cx + 10, cy)  # the camera turn keeps the horizon through the centre flat; the roll turns it
    assert np.degrees(np.arctan2(y - cy, x - cx)) == pytest.approx(30.0)
    assert sv.draw_directions(sv.photo_seed(3, "abc")) == sv.draw_directions(sv.photo_seed(3, "abc"))


def test_an_edit_refuses_a_strength_outside_zero_to_one_and_an_unknown_dimension():
    rgb, mask = _picture()
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        _edit(rgb, mask, "lighting", 1.5)
    with pytest.raises(ValueError, match="unknown edit dimension"):
        _edit(rgb, mask, "weather", 0.5)


class StandInPipeline:
    """Shaped like a diffusers inpainting pipeline: paints the whole picture one colour, records its strength."""

    def __init__(self) -> None:
        self.strengths: list[float] = []

    def __call__(self, prompt, image, mask_image, height, width, num_inference_steps, guidance_scale, strength,
                 generator, output_type="np"):
        self.strengths.append(strength)
        return SimpleNamespace(images=[np.full((height, width, 3), 0.5, np.float32)])


def test_the_diffusion_identity_edit_repaints_only_the_animal_at_the_noise_strength():
    from core.inspect.inpainting import DiffusersInpainter

    pipe = StandInPipeline()
    editor = sv.DiffusionIdentityEditor(DiffusersInpainter(pipeline=pipe, steps=2))
    rgb, mask = _picture()
    assert np.array_equal(sv.edit_photo(rgb, mask, "identity", 0.0, identity_editor=editor), rgb)
    assert pipe.strengths == []  # strength 0: the photo itself, no model call
    out = sv.edit_photo(rgb, mask, "identity", 0.75, identity_editor=editor, seed=5)
    assert pipe.strengths == [0.75]
    assert np.array_equal(out[~mask], rgb[~mask]) and (out[mask] == 128).all()
    assert editor.config["identity_edit"] == "diffusion" and editor.config["steps"] == 2

    class NoStrength:
        def __call__(self, prompt, image, mask_image):
            raise AssertionError("not called")

    with pytest.raises(ValueError, match="no noise 'strength'"):
        sv.DiffusionIdentityEditor(DiffusersInpainter(pipeline=NoStrength()))


def test_the_identity_edit_is_diffusion_only_where_a_diffusers_model_is_configured(monkeypatch):
    monkeypatch.delenv("ROSETTE_INPAINT_MODEL", raising=False)
    assert identity_edit_in_use() == "coat"
    with pytest.raises(ValueError, match="ROSETTE_INPAINT_MODEL"):
        identity_edit_in_use("diffusion")
    monkeypatch.setenv("ROSETTE_INPAINT_MODEL", "/models/sd-inpainting")
    assert identity_edit_in_use() == "diffusion"
    assert identity_edit_in_use("coat") == "coat"
    with pytest.raises(ValueError, match="unknown identity edit"):
        identity_edit_in_use("paint")


# --------------------------------------------------------------------------- donors and statistics


def test_the_identity_donor_is_the_nearest_other_individual_of_the_same_species():
    scores = np.array([[1.0, 0.9, 0.8, 0.7, 0.95],
                       [0.9, 1.0, 0.2, 0.6, 0.1],
                       [0.8, 0.2, 1.0, 0.3, 0.99],
                       [0.7, 0.6, 0.3, 1.0, 0.2],
                       [0.95, 0.1, 0.99, 0.2, 1.0]])
    labels = ["a", "a", "b", "c", "d"]
    species = [1, 1, 1, 1, 2]
    # photo 0: 1 is the same animal, 4 another species -> 2 (0.8); photo 2: 4 is another species -> 0 (0.8);
    # photo 3: 0 (0.7) beats 1 (0.6); photo 4 is the only one of its species
    assert sv.nearest_other_individual(scores, labels, species).tolist() == [2, 3, 0, 0, -1]
    assert sv.nearest_other_individual(scores, labels).tolist() == [4, 3, 4, 0, 2]


def test_background_donors_come_from_another_animal_and_sighting_whatever_the_order():
    keys = ["k0", "k1", "k2", "k3", "k4", "k5"]
    labels = ["a", "a", "b", "b", "c", "c"]
    sightings = ["s1", "s1", "s2", "s3", "s3", "s4"]
    donors = sv.background_donors(keys, labels, sightings, seed=4)
    for i, j in enumerate(donors):
        assert labels[j] != labels[i] and sightings[j] != sightings[i]
    order = [5, 3, 1, 0, 4, 2]
    shuffled = sv.background_donors([keys[i] for i in order], [labels[i] for i in order],
                                    [sightings[i] for i in order], seed=4)
    assert [keys[order[j]] for j in shuffled] == [keys[donors[i]] for i in order]
    assert sv.background_donors(["x"], ["a"], None).tolist() == [-1]


def test_similarity_to_the_original_is_one_for_the_same_embedding_and_the_models_score_otherwise():
    a = np.array([[0.6, 0.8, 0.0], [1.0, 0.0, 0.0]], np.float32)
    b = np.array([[0.6, 0.8, 0.0], [0.0, 2.0, 0.0]], np.float32)
    assert st.similarity_to_original(a, b).tolist() == [1.0, 0.0]


def _constructed(identity_slopes, context=(-0.1, -0.2, -0.05)):
    """Similarities that fall exactly linearly: 1 + slope * t for every photo and strength."""
    t = np.asarray(sv.STRENGTHS)
    n = len(identity_slopes)
    sims = {d: np.tile(1 + k * t, (n, 1)) for d, k in zip(sv.CONTEXT_DIMENSIONS, context)}
    sims["identity"] = np.stack([1 + k * t for k in identity_slopes])
    return sims


def test_slopes_intervals_and_selectivity_on_a_hand_worked_case():
    res = st.summarise_sensitivity(_constructed([-0.3, -0.4, -0.5]), seed=0, n_resamples=500)
    d = res.dimensions
    assert d["background"].slope == pytest.approx(-0.1) and d["lighting"].slope == pytest.approx(-0.2)
    assert d["viewpoint"].slope == pytest.approx(-0.05) and d["identity"].slope == pytest.approx(-0.4)
    assert d["identity"].intercept == pytest.approx(1.0)
    # every photo falls alike along the context edits: the interval is that slope itself
    assert (d["lighting"].ci_low, d["lighting"].ci_high) == pytest.approx((-0.2, -0.2))
    assert -0.5 <= d["identity"].ci_low < -0.4 < d["identity"].ci_high <= -0.3
    assert d["identity"].curve == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6])
    assert d["identity"].curve_low[0] == d["identity"].curve_high[0] == 1.0
    assert d["identity"].curve_low[-1] <= 0.6 <= d["identity"].curve_high[-1]
    assert res.selectivity == pytest.approx(2.0) and res.steepest_context == "lighting"
    lo, hi = res.selectivity_ci
    assert 1.5 - 1e-9 <= lo <= 2.0 <= hi <= 2.5 + 1e-9  # |identity| from 0.3 to 0.5, over the lighting's 0.2
    assert res.verdict.startswith("Selective:") and "2.0 times" in res.verdict and "(lighting)" in res.verdict
    assert st.least_squares_slope(sv.STRENGTHS, [[1.0, 0.9, 0.8, 0.7, 0.6]]) == pytest.approx((-0.4, 1.0))
    again = st.summarise_sensitivity(_constructed([-0.3, -0.4, -0.5]), seed=0, n_resamples=500)
    assert again.selectivity_ci == res.selectivity_ci  # seeded


def test_the_verdict_says_which_context_moves_the_model_more_than_a_different_coat():
    res = st.summarise_sensitivity(_constructed([-0.1, -0.1], context=(-0.05, -0.3, -0.15)), n_resamples=200)
    assert res.selectivity == pytest.approx(1 / 3)
    assert res.verdict.startswith("Not selective: this model is moved more by lighting than by a different animal's")
    text = " ".join(res.verdicts).lower()
    assert "this model is moved more by lighting than by a different animal's coat" in text
    assert "moved more by a change of viewpoint than by a different animal's coat" in text
    assert "a different animal's coat moves it more than a new background" in text
    flat = st.summarise_sensitivity(_constructed([0.0, 0.0]), n_resamples=200)
    assert "does not lower" in flat.verdict
    assert st.selectivity_of({"identity": -0.2, "background": 0.0, "lighting": 0.0, "viewpoint": 0.0}) is None
    with pytest.raises(ValueError, match="missing: identity"):
        st.summarise_sensitivity({d: np.ones((2, 5)) for d in sv.CONTEXT_DIMENSIONS})


def test_the_figure_draws_four_curves_and_the_selectivity():
    res = st.summarise_sensitivity(_constructed([-0.3, -0.4, -0.5]), n_resamples=200).to_dict()
    fig = st.sensitivity_figure(res, provenance="model m; benchmark b")
    assert [t.name.split(":")[0] for t in fig.data] == list(sv.DIMENSIONS)
    assert list(fig.data[3].y) == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6])
    assert "Selectivity 2.00" in fig.layout.annotations[0].text
    assert "benchmark b" in fig.data[0].hovertext[0]


def test_the_request_checks_its_values():
    assert SensitivityRequest(benchmark="b", backbone="", identity_edit="").backbone is None
    with pytest.raises(ValueError, match="benchmark"):
        SensitivityRequest(benchmark="")
    with pytest.raises(ValueError, match="seed"):
        SensitivityRequest(benchmark="b", seed=-1)
    with pytest.raises(ValueError, match="identity edit"):
        SensitivityRequest(benchmark="b", identity_edit="paint")
    r = SensitivityRequest(benchmark="b", seed=3, mask_missing=True)
    assert SensitivityRequest.from_dict(r.to_dict()) == r


# --------------------------------------------------------------------------- the runner on a small benchmark


@pytest.fixture(scope="module")
def masked(tmp_path_factory):
    """A synthetic catalogue (alpha masks), its benchmark ``syn`` (8 test photos of 2 animals) and a first run."""
    root = tmp_path_factory.mktemp("sens")
    cat, _ = synthetic_catalogue(root, individuals=5, photos_each=4, seed=3, masks=True)
    first = run_sensitivity(cat, backbone="efficientnet_lite0", benchmark="syn", seed=0, n_resamples=500)
    yield cat, first
    cat.close()


@pytest.mark.slow  # the module's first run (efficientnet_lite0 on 128 edited photos) takes ~15 s
def test_a_run_edits_every_masked_test_photo_and_starts_every_curve_at_one(masked):
    cat, res = masked
    assert res["n_images"] == 8 and set(res["dimensions"]) == set(sv.DIMENSIONS)
    sims = res["per_image"]["similarities"]
    for d in sv.DIMENSIONS:
        arr = np.asarray(sims[d])
        assert arr.shape == (8, 5) and (arr[:, 0] == 1.0).all() and (arr[:, 1:] < 1.0).all()
        assert res["dimensions"][d]["curve"][0] == 1.0
        assert res["dimensions"][d]["slope"] == pytest.approx(st.least_squares_slope(sv.STRENGTHS, arr)[0])
    labels = dict(zip(res["per_image"]["image_ids"], res["per_image"]["labels"]))
    for i, donor in zip(res["per_image"]["image_ids"], res["per_image"]["identity_donor_ids"]):
        assert labels[donor] != labels[i]
    slopes = {d: res["dimensions"][d]["slope"] for d in sv.DIMENSIONS}
    assert res["selectivity"] == pytest.approx(st.selectivity_of(slopes))
    # the model itself scores a zero-strength edit exactly 1: it is the same photo, pixel for pixel
    from db.embeddings import get_backbone, load_mask, load_photo, sources_for

    src = sources_for(cat, res["per_image"]["image_ids"][:1])[0]
    rgb = load_photo(cat, src)
    mask = load_mask(cat, src, shape=rgb.shape[:2])
    model = get_backbone(cat, "efficientnet_lite0")
    for dim in sv.DIMENSIONS:
        still = _edit(rgb, mask, dim, 0.0)
        assert st.similarity_to_original(model.embed([rgb]), model.embed([still]))[0] == 1.0
    assert res["cache"] == {"edited_photos": 8 * 4 * 4, "computed": 8 * 4 * 4, "cached": 0}


@pytest.mark.slow  # the module's first run (efficientnet_lite0 on 128 edited photos) takes ~15 s
def test_a_second_run_reads_every_edit_from_the_cache(masked, monkeypatch):
    import db.inspect.sensitivity as store

    cat, first = masked

    def no_edits(*args, **kwargs):
        raise AssertionError("a cached edit was made again")

    monkeypatch.setattr(store, "edit_photo", no_edits)
    again = run_sensitivity(cat, backbone="efficientnet_lite0", benchmark="syn", seed=0, n_resamples=500,
                            store=False)
    assert again["cache"] == {"edited_photos": 128, "computed": 0, "cached": 128}
    assert again["per_image"]["similarities"] == first["per_image"]["similarities"]
    assert again["selectivity"] == first["selectivity"]
    assert again["seconds"] < first["seconds"]


@pytest.mark.slow  # the module's first run (efficientnet_lite0 on 128 edited photos) takes ~15 s
def test_the_stored_run_is_traceable_and_feeds_the_leaderboard(masked):
    from db.inspect.leaderboard import leaderboard

    cat, res = masked
    v = ds.load_sensitivity(cat, res["evaluation_id"])
    m = v.metrics
    assert v.model == "efficientnet_lite0" and v.benchmark == "syn" and m["n_images"] == 8
    assert m["model_fingerprint"] == v.model_config["fingerprint"] and m["weights_sha256"]
    assert m["edits"]["seed"] == 0 and m["edits"]["settings"] == sv.EditSettings().to_dict()
    assert m["edits"]["identity"] == "coat" and m["masks"]["sources"] == {"alpha": 8}
    prov = v.provenance()
    for part in ("efficientnet_lite0", m["model_fingerprint"], "benchmark syn, 8 test photos", "seed 0",
                 "identity edit coat", "opencv"):
        assert part in prov
    rows = {r["name"]: r for r in leaderboard(cat, benchmark="syn", sort="selectivity")}
    assert rows["efficientnet_lite0"]["selectivity"] == pytest.approx(res["selectivity"])
    assert rows["efficientnet_lite0"]["sensitivity_id"] == ds.load_sensitivity(cat).evaluation_id
    text = ds.sensitivity_summary_markdown(v)
    assert f"{res['selectivity']:.2f}" in text and "elective" in text
    table = ds.sensitivity_rows(v)
    assert [r[0].split("(")[-1] for r in table] == [f"{d})" for d in sv.DIMENSIONS]
    assert table[3][1] == f"{res['dimensions']['identity']['slope']:+.3f}"


@pytest.mark.slow  # the module's first run (efficientnet_lite0 on 128 edited photos) takes ~15 s
def test_the_leaderboard_shows_no_selectivity_for_a_model_without_a_run(masked):
    from db.identify.evaluation import store_evaluation
    from db.inspect.leaderboard import leaderboard

    cat, _ = masked
    store_evaluation(cat, {"model": "other-model", "benchmark": "syn", "variant": "full_rgb", "map_macro": 0.5},
                     kind="retrieval")
    rows = {r["name"]: r for r in leaderboard(cat, benchmark="syn")}
    assert rows["other-model"]["selectivity"] is None and rows["other-model"]["sensitivity_id"] is None


@pytest.mark.slow  # the module's first run (efficientnet_lite0 on 128 edited photos) takes ~15 s
def test_the_cli_names_the_four_dimensions_and_the_selectivity(masked, capsys):
    cat, res = masked
    d = str(cat.data_dir)
    args = ["--data-dir", d, "diagnose", "--backbone", "efficientnet_lite0", "--benchmark", "syn", "--sensitivity"]
    assert cli([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["dimensions"]) == {"background", "lighting", "viewpoint", "identity"}
    for dim in sv.DIMENSIONS:
        st = out["dimensions"][dim]
        assert st["ci_low"] <= st["slope"] <= st["ci_high"]
    assert out["selectivity"] == pytest.approx(res["selectivity"]) and len(out["selectivity_ci"]) == 2
    assert out["cache"]["computed"] == 0 and "per_image" not in out and out["evaluation_id"]
    assert cli(args) == 0
    text = capsys.readouterr().out
    for dim in sv.DIMENSIONS:
        assert dim in text
    assert "selectivity" in text and "moved more by" in text and "fingerprint" in text


@pytest.mark.slow  # the module's first run (efficientnet_lite0 on 128 edited photos) takes ~15 s
def test_the_panel_queues_a_job_that_stores_a_run(masked):
    cat, _ = masked
    with pytest.raises(ValueError, match="no benchmark named"):
        ds.submit_sensitivity(cat, SensitivityRequest(benchmark="nope", user="ana"))
    job_id, message = ds.submit_sensitivity(cat, SensitivityRequest(benchmark="syn", backbone="efficientnet_lite0",
                                                                    user="ana"))
    assert f"job #{job_id}" in message and "8 test photos" in message
    assert ds.sensitivity_job_status(cat, job_id)[1:] == (None, False)
    assert queue.get_job(cat, job_id).kind == "sensitivity"
    assert queue.run_job(cat, job_id).value == "succeeded"
    text, evaluation_id, over = ds.sensitivity_job_status(cat, job_id)
    assert over and "selectivity" in text and evaluation_id == ds.load_sensitivity(cat).evaluation_id
    assert ds.sensitivity_choices(cat)[0][1] == evaluation_id


@pytest.fixture()
def unmasked(tmp_path):
    cat, _ = synthetic_catalogue(tmp_path, individuals=5, photos_each=4, seed=3, masks=False)
    yield cat
    cat.close()


def test_photos_without_a_mask_are_named_and_refused_not_skipped(unmasked, capsys):
    from db.identify.benchmarks import load_benchmark

    cat = unmasked
    test = load_benchmark(cat, "syn", split="test")
    with pytest.raises(MissingMasksError) as err:
        run_sensitivity(cat, backbone="efficientnet_lite0", benchmark="syn")
    message = str(err.value)
    assert "8 of the 8 test photos of benchmark 'syn' have no mask" in message
    assert len(err.value.missing) == 8 and "and 3 more" in message
    names = [name for _, name in err.value.missing]
    assert all(name in message for name in names[:5]) and names[5] not in message
    assert "rosette mask" in message and "Mask tab" in message and "--mask-missing" in message
    with pytest.raises(MissingMasksError):  # the panel refuses before queueing anything
        ds.submit_sensitivity(cat, SensitivityRequest(benchmark="syn", user="ana"))
    assert queue.list_jobs(cat, kind="sensitivity") == []
    assert cli(["--data-dir", str(cat.data_dir), "diagnose", "--benchmark", "syn", "--sensitivity", "--json"]) == 1
    assert names[0] in capsys.readouterr().err
    assert len(test) == 8


class MeanColours:
    """A tiny stand-in backbone (mean colour of each quarter of the photo), to keep a test about masking fast."""

    def __init__(self) -> None:
        from core.identify.backbones import BackboneConfig

        self.config = BackboneConfig(name="test_quarters", architecture="quarters", input_size=(8, 8),
                                     mean=(0, 0, 0), std=(1, 1, 1), interpolation="area", pooling="quarter means",
                                     embed_dim=12, weight_source="none (test)", weights_sha256=None,
                                     supports_tokens=False)

    def embed(self, images):
        out = []
        for im in images:
            h, w = im.shape[0] // 2, im.shape[1] // 2
            parts = [im[:h, :w], im[:h, w:], im[h:, :w], im[h:, w:]]
            v = np.concatenate([p.reshape(-1, 3).mean(0) for p in parts]) / 255.0 + 0.1
            out.append(v / np.linalg.norm(v))
        return np.stack(out).astype(np.float32)


def measure_with_quarters(cat):
    """run_sensitivity with --mask-missing (GrabCut) on the stand-in backbone, nothing stored."""
    from db import embeddings

    key = (str(cat.data_dir), "test_quarters", None)
    embeddings._BACKBONES[key] = MeanColours()
    try:
        return run_sensitivity(cat, backbone="test_quarters", benchmark="syn", mask_missing=True, masker="grabcut",
                               n_resamples=100, store=False)
    finally:
        embeddings._BACKBONES.pop(key, None)


def test_an_empty_mask_is_named_too(unmasked):
    from db.identify.benchmarks import load_benchmark
    from db.inspect.masks import store_mask

    cat = unmasked
    test = load_benchmark(cat, "syn", split="test")
    for k, image_id in enumerate(test.image_ids):
        mask = np.zeros((160, 160), bool)
        if k != 2:
            mask[40:120, 40:120] = True
        store_mask(cat, image_id, mask, source="grabcut", user="ana")
    with pytest.raises(MissingMasksError) as err:
        run_sensitivity(cat, backbone="efficientnet_lite0", benchmark="syn", mask_missing=True)
    assert err.value.missing == [] and [i for i, _ in err.value.empty] == [test.image_ids[2]]
    message = str(err.value)
    assert "1 of the 8 test photos of benchmark 'syn' have an empty mask" in message
    assert err.value.empty[0][1] in message and "click on the animal" in message


def test_mask_missing_masks_the_photos_first_then_measures(unmasked):
    from db.identify.benchmarks import load_benchmark
    from db.inspect.sensitivity import photos_without_mask

    cat = unmasked
    test = load_benchmark(cat, "syn", split="test")
    res = measure_with_quarters(cat)
    assert photos_without_mask(cat, test.image_ids) == []
    assert res["masks"]["sources"] == {"grabcut": 8}
    assert "8 of 8 photos masked with grabcut" in res["masks"]["made_now"]
    assert res["n_images"] == 8 and res["cache"]["computed"] == 128


def test_mask_missing_clicks_in_the_middle_when_the_masker_finds_no_animal(unmasked, monkeypatch):
    """An automatic mask that comes out empty is made again with one click in the middle (as in the Mask tab),
    so --mask-missing finishes; a curator's own empty mask is never overwritten (previous test)."""
    import db.inspect.sensitivity as store
    from db.identify.benchmarks import load_benchmark
    from db.inspect.masks import store_mask

    cat = unmasked
    test = load_benchmark(cat, "syn", split="test")
    real_mask_images = store.mask_images

    def masker_that_misses_one(cat_, *, image_ids, **kw):
        out = real_mask_images(cat_, image_ids=image_ids, **kw)
        store_mask(cat_, image_ids[0], np.zeros((160, 160), bool), source="grabcut", user="ana")
        return out

    monkeypatch.setattr(store, "mask_images", masker_that_misses_one)
    res = measure_with_quarters(cat)
    assert res["n_images"] == 8
    assert store.unusable_masks(cat, test.image_ids) == ([], [])
