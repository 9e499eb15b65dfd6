"""Review and catalogue say which animal: a camera-trap photo holding two animals is named per animal ("animal #3,
one of 2 in photo f003.jpg (the left one)") in Match review, the pickers and the whole-frame legend; the end of
the review queue and "not the same" on the last candidate are said in words."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sqlalchemy import select

from app.tabs.match_cards import compare_label, header_html
from core.annotations import Box
from core.io.box_drawing import HIGHLIGHT_COLOUR, OTHER_COLOUR, draw_legend
from db.models import Photo
from jobs.actions import decisions as ds
from jobs.actions import frames as fr
from jobs.actions import masks as mk
from jobs.actions import match as ms
from jobs.actions import review_words as rw
from jobs.requests.match import DecideRequest
from tests.test_annotations import _pair_annotations, imported, trap  # noqa: F401 - the shared trap fixtures


def _gallery_annotation(cat, name: str) -> int:
    with cat.unit_of_work() as s:
        return s.scalar(select(Photo).where(Photo.original_name == name)).annotations[0].id


# --------------------------------------------------------------------------- positions and titles


def test_position_words_tell_side_by_side_and_stacked_boxes_apart():
    two = {7: Box(0.52, 0.05, 0.46, 0.9), 3: Box(0.02, 0.05, 0.46, 0.9)}
    assert rw.position_words(two) == {3: "the left one", 7: "the right one"}
    three = {1: Box(0.7, 0.1, 0.2, 0.2), 2: Box(0.1, 0.1, 0.2, 0.2), 3: Box(0.4, 0.5, 0.2, 0.2)}
    assert rw.position_words(three) == {2: "the 1st from the left", 3: "the 2nd from the left",
                                        1: "the 3rd from the left"}
    stacked = {1: Box(0.3, 0.6, 0.4, 0.3), 2: Box(0.31, 0.05, 0.4, 0.3)}
    assert rw.position_words(stacked) == {2: "the top one", 1: "the bottom one"}
    assert rw.position_words({1: Box(0.0, 0.0, 1.0, 1.0)}) == {}


def test_a_two_animal_photo_titles_each_animal_with_its_place(imported):
    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    assert rw.animal_title(cat, a) == f"animal #{a}, one of 2 in photo pair.jpg (the left one)"
    assert rw.animal_title(cat, b) == f"animal #{b}, one of 2 in photo pair.jpg (the right one)"
    lone = _gallery_annotation(cat, "a.jpg")
    assert rw.animal_title(cat, lone) == f"animal #{lone}, the only one in photo a.jpg"
    assert rw.animal_title(cat, 999999) == "animal #999999"
    places = rw.animal_places(cat, [a, lone])
    assert set(places) == {a, lone} and places[a].animals == 2 and places[lone].short == ""


def test_match_review_titles_the_query_and_the_candidate(imported):
    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    query = ms.query_photo(cat, a)
    assert query.title == f"animal #{a}, one of 2 in photo pair.jpg (the left one)"
    assert dict(query.facts())["Animal"] == query.title
    view = ms.MatchView(query=query, model_name="m", model_provenance="p", flank_filter="any")
    head = header_html(view, [a], 0)
    assert "Animal 1 of 1 in the review queue" in head and f"animal #{a}, one of 2 in photo pair.jpg" in head
    card = ms.CandidateCard(rank=1, image_id=b, individual_id=1, individual_name="Bia", score=0.5, flank="right",
                            sighting=None, same_sighting=True, thumb=None,
                            title=rw.animal_places(cat, [b])[b].brief)
    assert compare_label(card) == (f"Candidate 1: Bia · animal #{b}, the right one of 2 animals in pair.jpg "
                                   f"· right flank · score 0.500")
    lone = _gallery_annotation(cat, "a.jpg")
    assert rw.animal_places(cat, [lone])[lone].brief is None


def test_the_pickers_tell_the_two_animals_of_a_frame_apart(imported):
    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    for choices in (mk.mask_image_choices(cat), ms.photo_choices(cat)):
        labels = {i: label for label, i in choices}
        assert labels[a].startswith(f"#{a} · pair.jpg · the left one of 2 animals · ")
        assert labels[b].startswith(f"#{b} · pair.jpg · the right one of 2 animals · ")
        lone = _gallery_annotation(cat, "a.jpg")
        assert "animals" not in labels[lone] and labels[lone].startswith(f"#{lone} · a.jpg · ")


# --------------------------------------------------------------------------- the whole-frame legend


def test_draw_legend_adds_a_strip_under_the_frame_and_keeps_the_frame():
    frame = np.full((200, 300, 3), 40, np.uint8)
    assert draw_legend(frame, []) is frame
    out = draw_legend(frame, [(True, "photo to identify: animal #3"), (False, "other animal: #4 São João")])
    assert out.shape[1] == 300 and out.shape[0] > 200
    assert np.array_equal(out[:200], frame)  # nothing drawn over the picture
    strip = out[200:].reshape(-1, 3)
    assert (strip == HIGHLIGHT_COLOUR).all(axis=1).any() and (strip == OTHER_COLOUR).all(axis=1).any()


def test_the_whole_frame_has_a_legend_naming_the_query_and_the_others(imported):
    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    lines = rw.frame_legend(cat, a, what="photo to identify")
    assert lines[0] == (True, f"photo to identify, #{a}")
    assert lines[1][0] is False and re.fullmatch(rf"other animal: #{b} .+", lines[1][1])
    plain = fr.frame_with_boxes(cat, a)
    with_legend = fr.frame_with_boxes(cat, a, legend="photo to identify")
    assert with_legend.shape[0] > plain.shape[0] and np.array_equal(with_legend[:plain.shape[0]], plain)
    lone = _gallery_annotation(cat, "a.jpg")
    assert rw.frame_legend(cat, lone, what="this animal") == [(True, f"this animal, #{lone}")]


# --------------------------------------------------------------------------- the queue's end, the last candidate


def test_the_queue_end_says_whether_photos_still_wait(imported):
    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    assert rw.queue_end_words(cat, []) == "Nothing is waiting for review."
    assert rw.queue_end_words(cat, [a, b]).startswith("2 of the 2 animals in the review queue still wait")
    ds.decide(cat, DecideRequest(query_image_id=a, decision="new", user="ana", new_name="Cara"))
    assert rw.queue_end_words(cat, [a, b]).startswith("1 of the 2 animals")
    ds.decide(cat, DecideRequest(query_image_id=b, decision="new", user="ana", new_name="Dora"))
    words = rw.queue_end_words(cat, [a, b])
    assert words.startswith("The review queue is done: all 2 animals have a decision.")
    assert "queue-end" in header_html(None, [a, b], 1, end_words=words) and words in header_html(
        None, [a, b], 1, end_words=words)


def test_not_the_same_on_the_last_candidate_offers_a_new_individual():
    only = rw.last_candidate_words(1, candidates=1, name="N149")
    assert only.startswith("N149, the only candidate, is not this animal.") and "New individual (I)" in only
    last = rw.last_candidate_words(6, candidates=6, name="N150")
    assert last.startswith("N150, candidate 6 and the last one shown, is not this animal.")
    assert "Not " not in rw.last_candidate_words(1, candidates=1)


def test_an_individual_already_in_the_photo_is_flagged_and_ranked_below(imported):
    """Two animals in one frame are two individuals: once the left one is identified as Bia, Bia is offered for the
    right one only below the others, flagged with the left one's number."""
    cat, _ = imported
    a, b = (r.id for r in _pair_annotations(cat))
    seen = ds.decision_claim(cat, a)  # whatever an earlier test decided on it
    ds.decide(cat, DecideRequest(query_image_id=a, decision="same", user="ana",
                                 candidate_image_id=_gallery_annotation(cat, "b.jpg"),
                                 seen_individual_id=seen.individual_id, seen_decision_id=seen.decision_id,
                                 seen_version=seen.version))
    view = ms.match_query(cat, b, model_name="efficientnet_lite0")
    names = [c.individual_name for c in view.candidates]
    assert names[-1] == "Bia" and "Ana" in names and [c.rank for c in view.candidates] == [1, 2]
    assert view.candidates[-1].in_photo_as == a and view.candidates[0].in_photo_as is None
    from app.tabs.match_cards import candidates_html

    assert f"already in this photo as #{a}" in candidates_html(view, 1)


@pytest.mark.parametrize("n, word", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (22, "22nd")])
def test_ordinals(n, word):
    assert rw._ordinal(n) == word


# --------------------------------------------------------------------------- an import embeds only its new animals


def _upload(tmp_path, src, name: str) -> str:
    """A file as Gradio stores an upload: <upload dir>/<hash>/<original name>."""
    import hashlib

    d = tmp_path / "gradio" / hashlib.sha1(name.encode()).hexdigest()
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(src.read_bytes())
    return str(d / name)


def test_an_import_embeds_only_its_new_animals_and_counts_them(trap, tmp_path):
    import json

    from db.session import open_catalogue
    from jobs import queue
    from jobs.actions import ingest
    from jobs.requests.ingest import ImportUploadsRequest

    cat = open_catalogue(tmp_path / "data")
    try:
        gallery = [_upload(tmp_path, trap / "gallery" / n, n) for n in ("a.jpg", "b.jpg")]
        first = ingest.import_uploads(cat, ImportUploadsRequest(gallery, user="ana"))
        job = queue.get_job(cat, first.features_job)
        first_ids = job.params["image_ids"]
        assert job.kind == "embed" and len(first_ids) == 2
        assert "the features of its 2 animals in 2 photos for match review" in first.summary

        # the same files again: nothing new, nothing to embed
        again = ingest.import_uploads(cat, ImportUploadsRequest(gallery, user="ana"))
        assert again.features_job is None and "features" not in again.summary

        # a two-animal frame with its detections: its two animals only, in one photo
        md = trap / "md.json"
        pair = _upload(tmp_path, trap / "frames" / "pair.jpg", "pair.jpg")
        third = ingest.import_uploads(cat, ImportUploadsRequest([pair], user="ana", detections=str(md)))
        job = queue.get_job(cat, third.features_job)
        assert "the features of its 2 animals in 1 photo for match review" in third.summary
        pair_ids = job.params["image_ids"]
        assert len(pair_ids) == 2 and not set(pair_ids) & set(first_ids)
        assert json.loads(json.dumps(job.params)) == job.params

        # the job embeds those two and says so in animals and photos
        assert queue.run_job(cat, third.features_job).value == "succeeded"
        done = queue.get_job(cat, third.features_job)
        assert done.result["images"] == 2 and done.result["summary"].startswith("embedded 2 animals in 1 photo with ")

        # a job of every photo waiting covers later imports; a job of some animals does not
        every = ingest.warm_features(cat, user="ana")
        assert every is not None and queue.get_job(cat, every).params["image_ids"] is None
        assert ingest.warm_features(cat, user="ana", image_ids=pair_ids) is None
    finally:
        cat.close()


def test_the_animal_drawn_ahead_is_kept_unseen_whole_and_its_pictures_loaded():
    from html.parser import HTMLParser

    from app.tabs.match_cards import ahead_html

    pair = "<div class='rz-pair' data-query='7'><img src='gradio_api/file=/d/a&amp;b.jpg' alt='q'></div>"
    board = '<div id=\'match-candidates\'><img src="gradio_api/file=/d/c.jpg" loading=\'lazy\'></div>'
    drawn = ahead_html(pair, board, from_query=3, after_decision=True, after_next=False)

    class Read(HTMLParser):
        tags: list[tuple[str, dict]] = []

        def handle_starttag(self, tag, attrs):
            self.tags.append((tag, dict(attrs)))

    reader = Read()
    reader.feed(drawn)
    (tag, attrs), *pictures = reader.tags
    # the page's script puts back exactly what the server drew, from the attributes
    assert tag == "div" and "hidden" in attrs and attrs["data-pair"] == pair and attrs["data-board"] == board
    assert (attrs["data-from"], attrs["data-decision"], attrs["data-next"]) == ("3", "1", "0")
    # every picture of the next screen, loaded now (not lazily) so it shows at once
    assert [(t, a["src"]) for t, a in pictures] == [("img", "gradio_api/file=/d/a&b.jpg"),
                                                    ("img", "gradio_api/file=/d/c.jpg")]
    assert all("loading" not in a for _, a in pictures)
