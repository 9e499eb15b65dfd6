"""The Species screen's services and ``rosette species rename|merge``: a rename and a merge are audited and
undoable; a merge moves every individual, photo, benchmark and trained model in one transaction, settles the active
model, and is refused (nothing changed) when two individuals of one name would end up in one species. The
Catalogue's recent changes say "moved X to species Y" and list flank, sex and life-stage changes, which undo."""

from __future__ import annotations


import pytest
from sqlalchemy import func, select

from app.cli import main as cli
from db import catalogue as ops
from db.audit import audit_rows
from db.catalogue import CatalogueError, ConflictError
from db.io.ingest import ingest_path
from db.models import Benchmark, Flank, Image, Individual, Job, Model, ModelStatus, Species
from db.session import open_catalogue
from jobs.actions import catalogue as services
from jobs.actions import species as sa
from jobs.actions.individuals import set_individual_traits
from jobs.requests.catalogue import (
    IndividualSpeciesRequest,
    MergeSpeciesRequest,
    MovePhotosRequest,
    RenameSpeciesRequest,
    SetFlanksRequest,
    UndoRequest,
)
from jobs.requests.individuals import SetTraitsRequest
from tests.synthetic_reid import make_two_species_manifest


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """A manifest of 4 individuals x 2 photos: ny00, ny01 (nyala) and leo02, leo03 (lion)."""
    root = tmp_path_factory.mktemp("species-screen")
    manifest = make_two_species_manifest(root / "photos", seed=3)
    return manifest


@pytest.fixture()
def cat(photos, tmp_path):
    catalogue = open_catalogue(tmp_path / "data")
    report = ingest_path(catalogue, photos, format="manifest", user="ana")
    assert not [i for i in report.items if i.status == "error"], report.items
    yield catalogue
    catalogue.close()


def _state(cat) -> dict:
    """Who is of which species: every individual, photo, benchmark and model, and each species' settings."""
    with cat.unit_of_work() as s:
        return {"species": {sp.id: (sp.name, sp.active_model_id) for sp in s.scalars(select(Species))},
                "individuals": dict(s.execute(select(Individual.name, Individual.species_id)).all()),
                "images": dict(s.execute(select(Image.id, Image.species_id)).all()),
                "benchmarks": dict(s.execute(select(Benchmark.name, Benchmark.species_id)).all()),
                "models": {m.name: (m.species_id, m.status.value) for m in s.scalars(select(Model))}}


def _species_id(cat, name: str) -> int:
    with cat.unit_of_work() as s:
        return s.scalar(select(Species.id).where(Species.name == name))


def _add_model_and_benchmark(cat, species: str, *, active: bool) -> int:
    """A trained model and a benchmark of ``species`` (the model its active one when ``active``)."""
    sid = _species_id(cat, species)
    with cat.unit_of_work() as s:
        model = Model(name=f"{species}-model", backbone="efficientnet_lite0", head="supcon", species_id=sid,
                      status=ModelStatus.active if active else ModelStatus.candidate)
        s.add_all([model, Benchmark(name=f"{species}-bench", split_kind="identity", species_id=sid)])
        s.flush()
        if active:
            s.get(Species, sid).active_model_id = model.id
        s.commit()
        return model.id


# --------------------------------------------------------------------------- rename


def test_a_rename_is_audited_listed_and_undone(cat):
    lion = _species_id(cat, "lion")
    done = sa.rename_species(cat, RenameSpeciesRequest("lion", "  Panthera   leo ", user="ana"))
    assert (done.species_id, done.old, done.name) == (lion, "lion", "Panthera leo")
    assert "lion is now Panthera leo" in done.message and "undone" in done.message
    assert "Panthera leo" in sa.species_names(cat) and "lion" not in sa.species_names(cat)
    rows = audit_rows(cat, action="species.rename", target=f"species#{lion}")
    assert len(rows) == 1 and rows[0].user == "ana" and rows[0].details == {"name": ["lion", "Panthera leo"]}
    assert sa.species_history_rows(cat)[0][1:] == ["ana", f"#{done.event_id} renamed species lion to Panthera leo"]
    assert sa.last_species_change_id(cat) == done.event_id

    undone = sa.undo_species_change(cat, UndoRequest(user="ben", event_id=sa.last_species_change_id(cat)))
    assert undone.what == "renamed species lion to Panthera leo"
    assert "lion" in sa.species_names(cat) and _species_id(cat, "lion") == lion
    assert sa.species_history_rows(cat)[0][2].endswith("(undone)")
    assert sa.last_species_change_id(cat) is None
    with pytest.raises(CatalogueError, match="no species change to undo"):
        sa.undo_species_change(cat, UndoRequest(user="ben", event_id=None))


def test_a_rename_onto_another_species_or_its_own_name_is_refused(cat):
    with pytest.raises(CatalogueError, match="a species named 'nyala' exists; merge into it"):
        sa.rename_species(cat, RenameSpeciesRequest("lion", "NYALA", user="ana"))
    with pytest.raises(CatalogueError, match="already has that name"):
        sa.rename_species(cat, RenameSpeciesRequest("lion", "lion", user="ana"))
    with pytest.raises(CatalogueError, match="a species needs a name"):
        sa.rename_species(cat, RenameSpeciesRequest("lion", "  ", user="ana"))
    assert sa.species_history_rows(cat) == []


def test_undoing_a_rename_renamed_again_since_is_refused(cat):
    first = sa.rename_species(cat, RenameSpeciesRequest("lion", "Panthera leo", user="ana"))
    sa.rename_species(cat, RenameSpeciesRequest("Panthera leo", "Leo", user="ana"))
    with pytest.raises(ConflictError, match="renamed again since"):
        services.undo(cat, UndoRequest(user="ana", event_id=first.event_id))
    assert "Leo" in sa.species_names(cat)


# --------------------------------------------------------------------------- merge


def test_a_merge_moves_everything_in_one_change_and_undo_restores_it_exactly(cat):
    _add_model_and_benchmark(cat, "lion", active=False)
    lion, nyala = _species_id(cat, "lion"), _species_id(cat, "nyala")
    before = _state(cat)
    done = sa.merge_species(cat, MergeSpeciesRequest("lion", "nyala", user="ana"))
    m = done.merged
    assert (m.individuals, m.photos, m.benchmarks, m.models, m.source_kept) == (2, 4, 1, 1, False)
    assert "Merged species lion into nyala: 2 individuals, 4 photos (4 animals), 1 benchmark and 1 trained model" \
        in done.message
    after = _state(cat)
    assert lion not in after["species"]
    assert set(after["individuals"].values()) == {nyala} and set(after["images"].values()) == {nyala}
    assert after["benchmarks"]["lion-bench"] == nyala and after["models"]["lion-model"][0] == nyala
    assert {r["name"]: r["individuals"] for r in sa.list_species(cat)} == {"default": 0, "nyala": 4}
    assert audit_rows(cat, action="history.species_merge")[0].user == "ana"
    assert audit_rows(cat, action="species.delete", target=f"species#{lion}")[0].user == "ana"
    assert audit_rows(cat, action="individual.species")  # each individual's move is in the trail
    assert sa.species_history_rows(cat)[0][2] == f"#{m.event_id} merged species lion into nyala (2 individuals, " \
                                                 "4 photos, 4 animals)"

    undone = sa.undo_species_change(cat, UndoRequest(user="ben", event_id=sa.last_species_change_id(cat)))
    assert undone.kind == "species_merge"
    assert _state(cat) == before  # lion back with its own id, and everything of it back in it


def test_a_merge_is_refused_when_two_individuals_of_one_name_would_meet(cat):
    with cat.unit_of_work() as s:
        ops.create_individual(s, "LEO02", user="ana", species_id=_species_id(cat, "nyala"))
        s.commit()
    before = _state(cat)
    with pytest.raises(CatalogueError, match=r"individuals of the same name would be in one species: 'leo02' "
                                             r"\(lion\) and 'LEO02' \(nyala\)"):
        sa.merge_species(cat, MergeSpeciesRequest("lion", "nyala", user="ana"))
    assert _state(cat) == before and sa.species_history_rows(cat) == []


def test_the_target_takes_the_source_model_only_when_it_has_none(cat):
    model_id = _add_model_and_benchmark(cat, "lion", active=True)
    nyala = _species_id(cat, "nyala")
    done = sa.merge_species(cat, MergeSpeciesRequest("lion", "nyala", user="ana"))
    assert done.merged.adopted_model == "lion-model" and done.merged.demoted_model is None
    assert sa.active_model_name(cat, "nyala") == "lion-model"
    with cat.unit_of_work() as s:
        job = s.get(Job, done.job_ids["embed"])
        assert (job.kind, job.params["backbone"], job.params["species"]) == ("embed", "lion-model", nyala)
    assert f"job #{job.id}" in done.message
    services.undo(cat, UndoRequest(user="ana", event_id=done.merged.event_id))
    assert sa.active_model_name(cat, "nyala") == "efficientnet_lite0"
    assert _state(cat)["species"][_species_id(cat, "lion")] == ("lion", model_id)


def test_a_target_with_its_own_model_keeps_it_and_the_source_model_is_a_candidate_again(cat):
    _add_model_and_benchmark(cat, "lion", active=True)
    _add_model_and_benchmark(cat, "nyala", active=True)
    done = sa.merge_species(cat, MergeSpeciesRequest("lion", "nyala", user="ana"))
    assert done.merged.adopted_model is None and done.merged.demoted_model == "lion-model"
    assert done.job_ids == {} and "candidate again" in done.message
    assert sa.active_model_name(cat, "nyala") == "nyala-model"
    assert _state(cat)["models"]["lion-model"][1] == "candidate"
    services.undo(cat, UndoRequest(user="ana", event_id=done.merged.event_id))
    assert _state(cat)["models"]["lion-model"][1] == "active"
    assert sa.active_model_name(cat, "lion") == "lion-model"


def test_the_first_species_is_emptied_not_removed(cat):
    lion = _species_id(cat, "lion")
    sa.set_individual_species(cat, IndividualSpeciesRequest(_individual(cat, "leo02"), "default", user="ana"))
    done = sa.merge_species(cat, MergeSpeciesRequest("default", "lion", user="ana"))
    assert done.merged.source_kept and done.merged.individuals == 1
    assert "default stays, empty" in done.message
    assert {r["name"]: r["individuals"] for r in sa.list_species(cat)} == {"default": 0, "nyala": 2, "lion": 2}
    services.undo(cat, UndoRequest(user="ana", event_id=done.merged.event_id))
    assert {r["name"]: r["individuals"] for r in sa.list_species(cat)} == {"default": 1, "nyala": 2, "lion": 1}
    assert _state(cat)["individuals"]["leo03"] == lion


def test_undoing_a_merge_whose_photos_moved_on_is_refused_and_changes_nothing(cat):
    done = sa.merge_species(cat, MergeSpeciesRequest("lion", "nyala", user="ana"))
    sa.set_individual_species(cat, IndividualSpeciesRequest(_individual(cat, "leo02"), "okapi", user="ana"))
    before = _state(cat)
    with pytest.raises(ConflictError, match=r"3 individual\(s\) or photo\(s\) of the merge changed species or were "
                                            r"removed since"):  # leo02 and its two photos
        services.undo(cat, UndoRequest(user="ana", event_id=done.merged.event_id))
    assert _state(cat) == before


def test_undoing_a_merge_after_a_photo_joined_the_other_species_individual_is_refused(cat):
    done = sa.merge_species(cat, MergeSpeciesRequest("lion", "nyala", user="ana"))
    photo = _first_image(cat, "leo02")
    services.move_photos(cat, MovePhotosRequest((photo,), _individual(cat, "ny00"), user="ana"))
    before = _state(cat)
    with pytest.raises(ConflictError, match="1 photo\\(s\\) were moved between the two species' individuals"):
        services.undo(cat, UndoRequest(user="ana", event_id=done.merged.event_id))
    assert _state(cat) == before
    services.undo(cat, UndoRequest(user="ana", seen_event_id=services.last_change_id(cat)))  # the move first
    services.undo(cat, UndoRequest(user="ana", event_id=done.merged.event_id))
    assert _state(cat)["individuals"]["leo02"] == _species_id(cat, "lion")


def test_a_merge_undone_after_a_new_species_came_brings_the_old_one_back_beside_it(cat):
    done = sa.merge_species(cat, MergeSpeciesRequest("lion", "nyala", user="ana"))
    sa.set_individual_species(cat, IndividualSpeciesRequest(_individual(cat, "ny01"), "okapi", user="ana"))
    services.undo(cat, UndoRequest(user="ana", event_id=done.merged.event_id))
    state = _state(cat)
    assert {name: state["species"][sid][0] for name, sid in state["individuals"].items()} == {
        "ny00": "nyala", "ny01": "okapi", "leo02": "lion", "leo03": "lion"}
    assert {r["name"]: r["images"] for r in sa.list_species(cat)} == {"default": 0, "nyala": 2, "okapi": 2, "lion": 4}


def test_undoing_a_move_to_a_new_species_removes_it_when_left_empty_and_says_so(cat):
    """A move that made a species, undone, leaves no empty species behind: the removal is audited and the
    history says it in a curator's words; a species that existed before the move stays."""
    ny01 = _individual(cat, "ny01")
    sa.set_individual_species(cat, IndividualSpeciesRequest(ny01, "Okapia johnstoni", user="ana"))
    okapi = _species_id(cat, "Okapia johnstoni")
    undone = services.undo(cat, UndoRequest(user="ben"))
    assert undone.message == "Undone: moved ny01 to species Okapia johnstoni."
    assert "Okapia johnstoni" not in sa.species_names(cat)
    assert audit_rows(cat, action="species.delete", target=f"species#{okapi}")[0].user == "ben"
    newest = services.history_rows(cat)[0][2]
    assert newest.endswith(f"undid change #{undone.event_id}: moved ny01 to species Okapia johnstoni; species "
                           "Okapia johnstoni, left empty, was removed")
    sa.set_individual_species(cat, IndividualSpeciesRequest(ny01, "lion", user="ana"))  # lion was there before
    services.undo(cat, UndoRequest(user="ana"))
    sa.set_individual_species(cat, IndividualSpeciesRequest(_individual(cat, "leo02"), "nyala", user="ana"))
    sa.set_individual_species(cat, IndividualSpeciesRequest(_individual(cat, "leo03"), "nyala", user="ana"))
    sa.set_individual_species(cat, IndividualSpeciesRequest(ny01, "Okapia johnstoni", user="ana"))
    sa.set_individual_species(cat, IndividualSpeciesRequest(_individual(cat, "ny00"), "Okapia johnstoni",
                                                            user="ana"))
    services.undo(cat, UndoRequest(user="ana"))  # ny00 back: ny01 still makes Okapia johnstoni a species
    assert {"lion", "Okapia johnstoni"} <= set(sa.species_names(cat))


def test_the_species_totals_count_photos_and_animals_apart(cat):
    """Two animals in one photo: the Species tab's line counts one photo and two animals, not two photos."""
    with cat.unit_of_work() as s:
        first = s.scalar(select(Image).order_by(Image.id).limit(1))
        s.add(Image(**{c: getattr(first, c) for c in ("content_hash", "original_name", "blob_path", "format",
                                                      "mode", "width", "height", "size_bytes")},
                    photo_id=first.photo_id, species_id=first.species_id))
        s.commit()
    rows = sa.list_species(cat)
    assert sum(r["images"] for r in rows) == 9 and sum(r["photos"] for r in rows) == 8
    assert sa.totals_text(cat, rows) == "3 species, 4 individuals, 8 photos and 9 animals in all."


def test_merge_requests_name_two_different_species():
    with pytest.raises(ValueError, match="Choose the species to merge first"):
        MergeSpeciesRequest(None, "nyala", user="ana")
    with pytest.raises(ValueError, match="Choose the species to merge it into"):
        MergeSpeciesRequest("lion", " ", user="ana")
    with pytest.raises(ValueError, match="two different species"):
        MergeSpeciesRequest("Lion", "lion ", user="ana")


# --------------------------------------------------------------------------- the Catalogue's recent changes


def _individual(cat, name: str) -> int:
    with cat.unit_of_work() as s:
        return s.scalar(select(Individual.id).where(Individual.name == name))


def test_recent_changes_say_which_species_an_individual_moved_to(cat):
    sa.set_individual_species(cat, IndividualSpeciesRequest(_individual(cat, "ny01"), "lion", user="ana"))
    newest = services.history_rows(cat)[0][2]
    assert newest.endswith("moved ny01 to species lion") and "renamed" not in newest


def test_flank_changes_are_one_listed_change_that_undoes(cat):
    ny01 = _individual(cat, "ny01")
    with cat.unit_of_work() as s:
        ids = sorted(s.scalars(select(Image.id).where(Image.individual_id == ny01)))
        s.get(Image, ids[0]).flank, s.get(Image, ids[0]).flank_source = Flank.unknown, None
        s.get(Image, ids[1]).flank, s.get(Image, ids[1]).flank_source = Flank.right, "manifest"
        s.commit()
    services.set_flanks(cat, SetFlanksRequest(tuple(ids), "left", user="ana"))
    newest = services.history_rows(cat)[0]
    assert newest[1] == "ana"
    assert newest[2].endswith(f"set the flank of 2 photos (#{ids[0]}, #{ids[1]}) of ny01 to left (was right, unknown)")
    assert services.history_rows(cat, individual_id=ny01)[0] == newest

    undone = services.undo(cat, UndoRequest(user="ben", seen_event_id=services.last_change_id(cat)))
    assert undone.kind == "flank"
    with cat.unit_of_work() as s:
        assert [(i.flank.value, i.flank_source) for i in s.scalars(select(Image).where(Image.id.in_(ids))
                                                                   .order_by(Image.id))] == [("unknown", None),
                                                                                             ("right", "manifest")]


def test_undoing_a_flank_set_again_since_is_refused(cat):
    image_id = _first_image(cat, "ny00")
    services.set_flanks(cat, SetFlanksRequest((image_id,), "front", user="ana"))  # no photo starts as front
    first = services.last_change_id(cat)
    assert services.history_rows(cat)[0][2].startswith(f"#{first} set the flank of photo #{image_id} of ny00 to front")
    services.set_flanks(cat, SetFlanksRequest((image_id,), "right", user="ana"))
    with pytest.raises(ConflictError, match=f"the flank of photo #{image_id} was changed again since"):
        services.undo(cat, UndoRequest(user="ana", event_id=first))
    events_before = services.last_change_id(cat)
    services.set_flanks(cat, SetFlanksRequest((image_id,), "right", user="ana"))  # no change: nothing to undo
    assert services.last_change_id(cat) == events_before


def _first_image(cat, name: str) -> int:
    with cat.unit_of_work() as s:
        return s.scalar(select(func.min(Image.id)).join(Individual, Individual.id == Image.individual_id)
                        .where(Individual.name == name))


def test_sex_and_life_stage_changes_are_listed_and_undo(cat):
    ny00 = _individual(cat, "ny00")
    set_individual_traits(cat, SetTraitsRequest(ny00, "female", "adult", user="ana"))
    newest = services.history_rows(cat)[0][2]
    assert newest.endswith("set ny00's sex not recorded → female, life stage not recorded → adult")
    set_individual_traits(cat, SetTraitsRequest(ny00, None, "juvenile", user="ana"))
    assert services.history_rows(cat)[0][2].endswith("set ny00's life stage adult → juvenile")
    services.undo(cat, UndoRequest(user="ben", seen_event_id=services.last_change_id(cat)))
    with cat.unit_of_work() as s:
        assert (s.get(Individual, ny00).sex, s.get(Individual, ny00).life_stage) == ("female", "adult")
    services.undo(cat, UndoRequest(user="ben", seen_event_id=services.last_change_id(cat)))
    with cat.unit_of_work() as s:
        assert (s.get(Individual, ny00).sex, s.get(Individual, ny00).life_stage) == (None, None)


@pytest.mark.postgres
def test_a_merge_and_its_undo_on_postgres(data_dir, pg_db_url):
    """The merged-away species comes back under its own id, and the new kinds of change fit the history's column."""
    pg = open_catalogue(data_dir, url=pg_db_url)
    try:
        with pg.unit_of_work() as s:
            lion, nyala = Species(name="lion"), Species(name="nyala")
            s.add_all([lion, nyala])
            s.flush()
            leo = ops.create_individual(s, "Leo", user="ana", species_id=lion.id)
            s.add(Image(content_hash="h1", original_name="p1.jpg", blob_path="images/h1.jpg", format="JPEG",
                        mode="RGB", width=4, height=4, size_bytes=1, individual_id=leo.id, species_id=lion.id))
            s.commit()
            lion_id = lion.id
        before = _state(pg)
        sa.rename_species(pg, RenameSpeciesRequest("lion", "Panthera leo", user="ana"))
        done = sa.merge_species(pg, MergeSpeciesRequest("Panthera leo", "nyala", user="ana"))
        assert set(_state(pg)["images"].values()) == {_species_id(pg, "nyala")}
        services.undo(pg, UndoRequest(user="ana", event_id=done.merged.event_id))
        services.undo(pg, UndoRequest(user="ana", seen_event_id=services.last_change_id(pg)))
        assert _state(pg) == before and _species_id(pg, "lion") == lion_id
        with pg.unit_of_work() as s:  # the id sequence still hands out new ids
            s.add(Species(name="okapi"))
            s.commit()
    finally:
        pg.close()


# --------------------------------------------------------------------------- the command line


def test_rosette_species_merge_and_rename_undo_from_the_shell(cat, capsys):
    base = ["--data-dir", str(cat.data_dir), "--user", "cli-ana"]
    assert cli(base + ["species", "merge", "lion", "lion"]) == 1
    assert "two different species" in capsys.readouterr().err
    assert cli(base + ["species", "merge", "tiger", "nyala"]) == 1
    assert "no species 'tiger'" in capsys.readouterr().err
    assert cli(base + ["species", "merge", "lion", "nyala"]) == 0
    out = capsys.readouterr().out
    assert "Merged species lion into nyala: 2 individuals, 4 photos" in out
    event = int(out.split("rosette undo ")[1].split()[0])
    assert sa.species_names(cat) == ["default", "nyala"]
    assert audit_rows(cat, action="history.species_merge")[0].user == "cli-ana"
    assert cli(base + ["undo", str(event)]) == 0
    assert sa.species_names(cat) == ["default", "nyala", "lion"]
    assert cli(base + ["species", "rename", "default", "Tragelaphus angasii"]) == 0
    assert "is now 'Tragelaphus angasii'" in capsys.readouterr().out
    assert sa.species_names(cat)[0] == "Tragelaphus angasii"
