"""Past a large species' size, the map and the flank classifier work on a seeded sample, never on every photo."""

from __future__ import annotations

from db.inspect import embedding_map


def test_the_map_of_a_large_species_is_a_seeded_sample(monkeypatch):
    monkeypatch.setattr(embedding_map, "all_image_ids", lambda cat, species_id=None: list(range(1, 101)))
    monkeypatch.setattr(embedding_map, "MAP_MAX_PHOTOS", 10)
    first = embedding_map._photo_ids(None, 1)
    assert len(first) == 10 and len(set(first)) == 10 and first == sorted(first)
    assert set(first) <= set(range(1, 101))
    assert embedding_map._photo_ids(None, 1) == first  # the same sample again: the stored map is found again
    monkeypatch.setattr(embedding_map, "MAP_MAX_PHOTOS", 100)
    assert embedding_map._photo_ids(None, 1) == list(range(1, 101))  # at the limit: every photo
