"""The demo catalogue shipped in assets/demo and its seeding."""

from __future__ import annotations

import collections
import csv
import hashlib

import pytest
from sqlalchemy import select

from db.demo import DEMO_DIR, seed_demo_if_empty
from db.io.ingest import ingest_path
from db.models import Flank, Image, Individual
from db.session import open_catalogue


def _manifest() -> list[dict[str, str]]:
    with open(DEMO_DIR / "manifest.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_demo_assets_are_complete_and_attributed():
    rows = _manifest()
    assert 50 <= len(rows) <= 70
    assert list(rows[0]) == ["filename", "identity", "flank", "sighting", "source_split"]
    for r in rows:
        assert (DEMO_DIR / "images" / r["filename"]).is_file()
    per_ind = collections.defaultdict(set)
    for r in rows:
        if r["identity"]:
            per_ind[r["identity"]].add(r["flank"])
    assert 8 <= len(per_ind) <= 12
    # a few photos come without an identity: the match-review queue has new photos to decide
    assert 3 <= sum(not r["identity"] for r in rows) <= 10
    assert all(flanks == {"left", "right"} for flanks in per_ind.values())
    attribution = (DEMO_DIR / "ATTRIBUTION.md").read_text()
    assert "tvanzyl/wildlife_reidentification" in attribution and "Dlamini" in attribution
    # no two demo files are the same bytes (each becomes its own image)
    digests = {hashlib.sha256((DEMO_DIR / "images" / r["filename"]).read_bytes()).hexdigest() for r in rows}
    assert len(digests) == len(rows)


def test_demo_files_match_the_shared_set(nyala_dir, nyala_manifest):
    from tests.conftest import shared_nyala_present

    if not shared_nyala_present():
        pytest.skip("compares assets/demo with ../shared/data/nyala, which is absent here")
    shared = {r["filename"]: r for r in nyala_manifest}
    for r in _manifest():
        truth = shared[r["filename"]]
        assert r["identity"] in ("", truth["identity"])  # blank = left for the curator to identify
        assert {k: v for k, v in r.items() if k != "identity"} == {k: v for k, v in truth.items() if k != "identity"}
        assert (DEMO_DIR / "images" / r["filename"]).read_bytes() == (nyala_dir / "images" / r["filename"]).read_bytes()


def test_seed_demo_into_empty_catalogue_once(data_dir):
    cat = open_catalogue(data_dir)
    rows = _manifest()
    report = seed_demo_if_empty(cat)
    assert report is not None and report.counts["imported"] == len(rows) and report.errors == []
    with cat.unit_of_work() as s:
        imgs = list(s.scalars(select(Image)))
        names = dict(s.execute(select(Individual.id, Individual.name)).all())
    assert len(imgs) == len(rows)
    truth = {r["filename"]: (r["identity"] or None, r["flank"]) for r in rows}
    assert {i.original_name: (names.get(i.individual_id), i.flank.value) for i in imgs} == truth
    assert all(i.flank in (Flank.left, Flank.right) for i in imgs)
    assert seed_demo_if_empty(cat) is None  # not empty any more: nothing happens
    cat.close()


def test_no_seed_when_catalogue_has_images(data_dir, tmp_path):
    cat = open_catalogue(data_dir)
    first = DEMO_DIR / "images" / _manifest()[0]["filename"]
    ingest_path(cat, first, user="ana")
    assert seed_demo_if_empty(cat) is None
    with cat.unit_of_work() as s:
        assert len(list(s.scalars(select(Image)))) == 1
    cat.close()
