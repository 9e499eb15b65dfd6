"""Review-screen mends that need no browser: models without weights are not offered, mirror badges carry the
diagnostics' tier colours, calibrated probabilities and the new-individual suggestion render."""

from __future__ import annotations

from app.tabs.match_cards import candidates_html, header_html
from core.inspect.diagnostics import TIER_BANDS, tier_colour
from db.session import open_catalogue
from jobs.actions import match as ms


def test_models_without_weights_are_listed_as_unavailable_not_offered(data_dir):
    cat = open_catalogue(data_dir)
    offered = ms.matcher_choices(cat)
    missing = ms.unavailable_models()
    assert "efficientnet_lite0" in offered and "sift_vlad" in offered
    assert "megadescriptor-t-224" in missing and "miewid-msv3" in missing  # no hub weights on this machine
    assert not set(missing) & set(offered)
    cat.close()


def _view(prob, mirror, *, p_new=None):
    q = ms.QueryPhoto(image_id=1, path="", original_name="a.jpg", flank="left", sighting=None, date=None, place=None,
                      individual_id=None, individual_name=None, mask_path=None, mask_source=None)
    card = ms.CandidateCard(rank=1, image_id=2, individual_id=3, individual_name="Amber", score=0.81, flank="left",
                            sighting=None, same_sighting=False, thumb=None, mirror_sim=mirror, danger_margin=-0.1,
                            probability=prob)
    return ms.MatchView(query=q, model_name="m", model_provenance="p", flank_filter="any", candidates=[card],
                        calibration_note="isotonic on 60 outcomes", new_threshold=0.5, p_new=p_new)


def test_mirror_badges_use_the_tier_colours_and_probability_shows():
    html = candidates_html(_view(0.73, 0.97), 1)
    assert f"background:{tier_colour(0.97)}" in html and "data-tier='strong shortcut'" in html
    assert dict((t, c) for t, _, _, c in TIER_BANDS)["strong shortcut"] == tier_colour(0.97)
    assert "73% same animal" in html
    assert "new individual" not in header_html(_view(0.73, 0.97), [1], 0)


def test_the_new_individual_hint_reads_p_new_never_a_weak_candidate_alone():
    # the hint comes from the one posterior's p(new): a weak best candidate with no p(new) suggests nothing
    assert "new individual" not in header_html(_view(0.12, 0.5), [1], 0)
    text = header_html(_view(0.12, 0.5, p_new=0.88), [1], 0)
    assert "A new animal is 88% likely" in text and "threshold: 50%" in text and "new individual" in text
    assert "likely the same animal" not in text  # no pair's score against the threshold
    assert "new individual" not in header_html(_view(0.6, 0.5, p_new=0.4), [1], 0)
