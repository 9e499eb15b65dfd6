"""Species: from the manifest, per-species candidates and review queue, no cross-species assignment or merge;
the manifest's place column; promoting a model to active (per species) and archiving."""

from __future__ import annotations

import csv
import json

import pytest

from app.cli import main as cli
from db import catalogue as ops
from db.catalogue import CatalogueError
from db.io.ingest import ingest_path
from db.identify.matching import rank_candidates, review_queue
from db.models import Image, Individual, JobStatus, Sighting
from db.session import open_catalogue
from db.species import active_model_name, archive_model, list_species, model_status, promote_model
from jobs import queue
from jobs.actions.promote import PromoteRequest, promote
from tests.synthetic_reid import make_reid_set


@pytest.fixture(scope="module")
def two_species(tmp_path_factory):
    """Nyala-like coats (4 x 4 photos) and 'lion' coats (3 x 4 photos) in one manifest with species and place."""
    root = tmp_path_factory.mktemp("species")
    manifest = make_reid_set(root / "photos", individuals=7, photos_each=4, seed=6)
    rows = list(csv.DictReader(open(manifest)))
    for r in rows:
        lion = r["identity"] in ("ind04", "ind05", "ind06")
        r["species"] = "lion" if lion else "nyala"
        r["identity"] = ("leo" if lion else "ny") + r["identity"][3:]
        r["place"] = "Okavango" if lion else "Kruger"
    with open(manifest, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cat = open_catalogue(root / "data")
    report = ingest_path(cat, manifest, format="manifest", user="ana")
    assert not [i for i in report.items if i.status == "error"], report.items
    yield cat, manifest
    cat.close()


def _species_of(cat, name: str) -> int:
    with cat.unit_of_work() as s:
        return s.query(Individual).filter_by(name=name).one().species_id


def test_manifest_species_and_place_are_kept(two_species):
    cat, _ = two_species
    species = {r["name"]: r for r in list_species(cat)}
    assert set(species) == {"default", "nyala", "lion"}
    assert species["lion"]["individuals"] == 3 and species["lion"]["images"] == 12
    assert species["nyala"]["individuals"] == 4 and species["default"]["images"] == 0
    assert _species_of(cat, "leo04") == species["lion"]["id"]
    with cat.unit_of_work() as s:
        places = {p for (p,) in s.query(Sighting.place).all()}
    assert places == {"Okavango", "Kruger"}


def test_candidates_and_review_queue_stay_within_the_species(two_species):
    cat, _ = two_species
    with cat.unit_of_work() as s:
        lion_photo = s.query(Image).join(Individual, Image.individual_id == Individual.id).filter(
            Individual.name == "leo05").first().id
    res = rank_candidates(cat, lion_photo, k=20)
    assert res.candidates and all(c.individual_name.startswith("leo") for c in res.candidates)
    # the place filter reads the manifest's place
    assert rank_candidates(cat, lion_photo, place="okav").candidates
    assert not rank_candidates(cat, lion_photo, place="Kruger").candidates
    for item in review_queue(cat):
        with cat.unit_of_work() as s:
            own = s.get(Image, item.image_id).species_id
        assert _species_of(cat, item.top_individual) == own


def test_no_assignment_or_merge_across_species(two_species):
    cat, _ = two_species
    with cat.unit_of_work() as s:
        lion = s.query(Individual).filter_by(name="leo04").one()
        nyala = s.query(Individual).filter_by(name="ny00").one()
        photo = s.query(Image).filter_by(individual_id=nyala.id).first()
        with pytest.raises(CatalogueError, match="another species"):
            ops.assign_image(s, photo.id, lion.id, user="ana")
        with pytest.raises(CatalogueError, match="different species"):
            ops.merge_individuals(s, lion.id, nyala.id, user="ana")


def test_species_cli_list_rename_and_set(two_species, capsys):
    cat, _ = two_species
    d = str(cat.data_dir)
    assert cli(["--data-dir", d, "species", "rename", "lion", "Panthera leo"]) == 0
    capsys.readouterr()
    assert cli(["--data-dir", d, "species", "list", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert "Panthera leo" in names
    assert cli(["--data-dir", d, "species", "rename", "Panthera leo", "lion"]) == 0
    with cat.unit_of_work() as s:
        ind = s.query(Individual).filter_by(name="ny03").one()
    assert cli(["--data-dir", d, "species", "set", "okapi", "--individual", str(ind.id)]) == 0
    with cat.unit_of_work() as s:
        assert {i.species_id for i in s.query(Image).filter_by(individual_id=ind.id)} == {_species_of(cat, "ny03")}
    assert cli(["--data-dir", d, "species", "set", "nyala", "--individual", str(ind.id)]) == 0
    assert cli(["--data-dir", d, "species", "rename", "nope", "x"]) == 1
    assert "no species 'nope'" in capsys.readouterr().err


def test_promote_makes_a_model_active_for_its_species_and_queues_embedding(two_species, capsys):
    from db.identify.benchmarks import create_benchmark

    cat, manifest = two_species
    assert active_model_name(cat, "nyala") == "efficientnet_lite0"
    create_benchmark(cat, "lions", split="identity", test_fraction=0.34, seed=0)  # whole catalogue
    job = queue.submit_and_run(cat, "train", {"source": "catalogue", "head": "supcon", "epochs": 2, "views": 2,
                                             "name": "promo-model", "diagnose": False})
    assert job.status == JobStatus.succeeded, job.message
    res = promote(cat, PromoteRequest(model="promo-model", species="nyala", user="ana"))  # the store promotes, jobs queue the re-embedding
    assert res["previous"] == "efficientnet_lite0" and res["job_id"]
    assert active_model_name(cat, "nyala") == "promo-model" and active_model_name(cat, "lion") == "efficientnet_lite0"
    status = model_status(cat)
    assert status["promo-model"] == {"status": "active", "active_for": ["nyala"]}
    embed = queue.get_job(cat, res["job_id"])
    assert embed.kind == "embed" and embed.params["backbone"] == "promo-model" and embed.queue == "light"
    assert queue.run_job(cat, embed.id) == JobStatus.succeeded
    n_nyala = [r for r in list_species(cat) if r["name"] == "nyala"][0]["images"]
    assert queue.get_job(cat, embed.id).result["images"] == n_nyala  # only the species' photos
    # the CLI shows it; an active model cannot be archived; a missing model cannot be promoted
    capsys.readouterr()
    assert cli(["--data-dir", str(cat.data_dir), "models", "list", "--json"]) == 0
    rows = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert rows["promo-model"]["status"] == "active" and rows["promo-model"]["active_for"] == ["nyala"]
    with pytest.raises(CatalogueError, match="is active"):
        archive_model(cat, "promo-model")
    assert cli(["--data-dir", str(cat.data_dir), "models", "promote", "no-such-model"]) == 1
    assert "unknown backbone or trained model" in capsys.readouterr().err
    # promoting the default back: the trained model returns to candidate, then it can be archived
    jobs_before = len(queue.list_jobs(cat, limit=500))
    back = promote_model(cat, "efficientnet_lite0", species="nyala")  # the store only: it says what is needed
    assert back["follow_up"] == [{"kind": "embed", "params": {
        "backbone": "efficientnet_lite0", "species": back["species_id"], "user": "curator",
        "reason": "promotion of efficientnet_lite0 for nyala"}}]
    assert len(queue.list_jobs(cat, limit=500)) == jobs_before  # and queues nothing (db never imports jobs)
    assert model_status(cat)["promo-model"]["status"] == "candidate"
    archive_model(cat, "promo-model")
    assert model_status(cat)["promo-model"]["status"] == "archived"
    from db.identify.training import trained_model_names

    assert "promo-model" not in trained_model_names(cat)
    with pytest.raises(CatalogueError, match="archived"):
        promote_model(cat, "promo-model", species="nyala")


def test_setting_a_species_from_the_catalogue_tab_and_undoing_it(tmp_path):
    from db.models import Image as Img
    from jobs.actions import catalogue as services
    from jobs.actions import species as sa
    from jobs.requests.catalogue import IndividualSpeciesRequest, UndoRequest

    manifest = make_reid_set(tmp_path / "photos", individuals=2, photos_each=2, seed=15)
    cat = open_catalogue(tmp_path / "data")
    ingest_path(cat, manifest, format="manifest", user="ana")
    with cat.unit_of_work() as s:
        ind = s.query(Individual).filter_by(name="ind00").one()
    assert sa.species_of_individual(cat, ind.id) == "default"
    text = sa.set_individual_species(cat, IndividualSpeciesRequest(ind.id, " okapi ", user="ana")).message
    assert "now okapi" in text and "okapi" in sa.species_names(cat)
    assert sa.species_of_individual(cat, ind.id) == "okapi"
    with cat.unit_of_work() as s:
        assert {i.species_id for i in s.query(Img).filter_by(individual_id=ind.id)} == {_species_of(cat, "ind00")}
    services.undo(cat, UndoRequest(user="ana"))
    assert sa.species_of_individual(cat, ind.id) == "default"
    with cat.unit_of_work() as s:
        assert {i.species_id for i in s.query(Img).filter_by(individual_id=ind.id)} == {1}
    with pytest.raises(ValueError, match="Open an individual"):
        sa.set_individual_species(cat, IndividualSpeciesRequest(None, "okapi", user="ana"))
    cat.close()
