"""db.identify.suggestions: the stored-top-match review queue of a large catalogue, worked out by hand on six photos."""

from __future__ import annotations

import hashlib
from datetime import datetime

import pytest
from sqlalchemy import insert

from db.identify.matching import record_decision, undo_decision
from db.models import Image, Individual, Photo
from db.session import open_catalogue
from db.identify.suggestions import Suggestion, queue_from_suggestions, store_suggestions, suggestion_count

T0 = datetime(2026, 1, 1)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request) -> str | None:
    """None: SQLite in the data folder; else a fresh database on the session's PostgreSQL cluster."""
    return request.getfixturevalue("pg_db_url") if request.param == "postgresql" else None


def _catalogue(path, url):
    """Photos 1-6; photos 1 and 2 belong to Amber (id 1), 3-6 are unassigned."""
    cat = open_catalogue(path, url=url)
    with cat.engine.begin() as conn:
        conn.execute(insert(Individual.__table__), [{"id": 1, "name": "Amber", "active": True, "species_id": 1,
                                                     "created_at": T0}])
        files = [{"id": i, "content_hash": hashlib.sha256(bytes([i])).hexdigest(), "original_name": f"{i}.jpg",
                  "blob_path": f"b/{i}.jpg", "format": "JPEG", "mode": "RGB", "width": 10, "height": 10,
                  "size_bytes": 1, "imported_at": T0} for i in range(1, 7)]
        conn.execute(insert(Photo.__table__), files)  # every annotation belongs to a photo
        conn.execute(insert(Image.__table__), [
            {**f, "photo_id": f["id"], "flank": "unknown", "species_id": 1,
             "individual_id": 1 if f["id"] <= 2 else None, "decision_version": 0} for f in files])
    return cat


# photo -> (its best match, score); photo 6 has none stored
SCORES = {1: (2, 0.95), 2: (1, 0.90), 3: (1, 0.40), 4: (2, 0.80), 5: (3, 0.60)}


def _store(cat, model: str = "m") -> None:
    n = store_suggestions(cat, model_name=model, suggestions=[Suggestion(i, top, score)
                                                              for i, (top, score) in SCORES.items()])
    assert n == len(SCORES)


def test_queue_order_unassigned_first_then_score(tmp_path, database_url):
    cat = _catalogue(tmp_path / "d", database_url)
    _store(cat)
    items = queue_from_suggestions(cat, model_name="m")
    # unassigned 4 (0.80), 5 (0.60), 3 (0.40); then assigned 1 (0.95), 2 (0.90); 6 has no suggestion
    assert [it.image_id for it in items] == [4, 5, 3, 1, 2]
    assert [it.assigned for it in items] == [False, False, False, True, True]
    assert items[0].top_individual == "Amber"  # 4's best match is photo 2, Amber's
    assert items[1].top_individual is None  # 5's best match is photo 3, unassigned
    assert [it.image_id for it in queue_from_suggestions(cat, model_name="m", limit=2)] == [4, 5]
    assert queue_from_suggestions(cat, model_name="other") == []


def test_a_standing_decision_leaves_the_queue_and_its_undo_brings_it_back(tmp_path, database_url):
    cat = _catalogue(tmp_path / "d", database_url)
    _store(cat)
    dec = record_decision(cat, query_image_id=4, decision="not", user="ana", candidate_image_id=2)
    assert [it.image_id for it in queue_from_suggestions(cat, model_name="m")] == [5, 3, 1, 2]
    undo_decision(cat, dec.id, user="ana")
    assert [it.image_id for it in queue_from_suggestions(cat, model_name="m")][:1] == [4]


def test_storing_again_replaces_a_photos_suggestion(tmp_path, database_url):
    cat = _catalogue(tmp_path / "d", database_url)
    _store(cat)
    store_suggestions(cat, model_name="m", suggestions=[Suggestion(3, 2, 0.99)])
    assert suggestion_count(cat, model_name="m") == len(SCORES)
    assert [it.image_id for it in queue_from_suggestions(cat, model_name="m")][:1] == [3]
