"""A species' common name beside its scientific one: set, changed and cleared through the Species screen's service and
``rosette species rename --common-name`` / ``rosette species common-name``, audited, undoable with the rename it came
with (one identity event holding both old names), kept by a merge's undo, listed, written by the Camtrap DP export as
the taxon's English ``vernacularNames`` and read back by the import."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from app.cli import main as cli
from core.field.camtrapdp_writer import PackageMetadata, build_descriptor, validate_package
from core.readers.camtrapdp import common_names, read_camtrapdp
from db.audit import audit_rows, verify_chain
from db.catalogue import CatalogueError, ConflictError
from db.io.ingest import ingest_path
from db.models import Deployment, Photo, Species
from db.session import open_catalogue
from jobs.actions import catalogue as services
from jobs.actions import species as sa
from jobs.actions.camtrapdp import export_camtrap_dp
from jobs.requests.camtrapdp import ExportCamtrapDPRequest
from jobs.requests.catalogue import MergeSpeciesRequest, RenameSpeciesRequest, UndoRequest
from tests.camtrapdp_package import write_package
from tests.synthetic_reid import make_two_species_manifest


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """A manifest of 4 individuals x 2 photos: ny00, ny01 (nyala) and leo02, leo03 (lion)."""
    root = tmp_path_factory.mktemp("species-common-name")
    manifest = make_two_species_manifest(root / "photos", seed=5)
    return manifest


@pytest.fixture()
def cat(photos, tmp_path):
    catalogue = open_catalogue(tmp_path / "data")
    report = ingest_path(catalogue, photos, format="manifest", user="ana")
    assert not [i for i in report.items if i.status == "error"], report.items
    yield catalogue
    catalogue.close()


def _names(cat) -> dict[str, str | None]:
    with cat.unit_of_work() as s:
        return {sp.name: sp.common_name for sp in s.scalars(select(Species).order_by(Species.id))}


def _rename(cat, species, new_name=None, *, common=None, user="ana"):
    return sa.rename_species(cat, RenameSpeciesRequest(species, new_name, user=user, common_name=common))


# --------------------------------------------------------------------------- the service, the audit, the undo


def test_a_rename_with_a_common_name_is_one_audited_change_and_its_undo_restores_both(cat):
    lion = next(r["id"] for r in sa.list_species(cat) if r["name"] == "lion")
    done = _rename(cat, "lion", " Panthera  leo", common="  African   lion ")
    assert (done.old, done.name, done.old_common_name, done.common_name) == ("lion", "Panthera leo", None,
                                                                              "African lion")
    assert "lion is now Panthera leo; its common name is now African lion" in done.message
    assert "English name" in done.message
    assert {r["name"]: r["common_name"] for r in sa.list_species(cat)} == \
        {"default": None, "nyala": None, "Panthera leo": "African lion"}
    (row,) = audit_rows(cat, action="species.rename", target=f"species#{lion}")
    assert row.user == "ana" and row.details == {"name": ["lion", "Panthera leo"],
                                                 "common_name": [None, "African lion"]}
    assert sa.species_history_rows(cat)[0][1:] == \
        ["ana", f"#{done.event_id} renamed species lion to Panthera leo (common name none → African lion)"]

    undone = sa.undo_species_change(cat, UndoRequest(user="ben", event_id=sa.last_species_change_id(cat)))
    assert undone.what == "renamed species lion to Panthera leo (common name none → African lion)"
    assert _names(cat) == {"default": None, "nyala": None, "lion": None}
    undo_row = audit_rows(cat, action="species.rename", target=f"species#{lion}")[0]  # the newest
    assert undo_row.details == {"name": ["Panthera leo", "lion"], "common_name": ["African lion", None]}
    assert verify_chain(cat).ok


def test_the_common_name_alone_is_set_changed_cleared_and_each_undone_in_turn(cat):
    first = _rename(cat, "nyala", common="nyala antelope")
    assert first.message.startswith("The common name of nyala is now nyala antelope (change #")
    second = _rename(cat, "nyala", common="Nyala")
    cleared = _rename(cat, "nyala", common="")
    assert cleared.common_name is None and "(Nyala) is cleared" in cleared.message
    assert "Exports write" not in cleared.message  # the scientific name did not change
    assert _names(cat)["nyala"] is None
    history = [r[2] for r in sa.species_history_rows(cat)]
    assert history == [f"#{cleared.event_id} set species nyala's common name Nyala → none",
                       f"#{second.event_id} set species nyala's common name nyala antelope → Nyala",
                       f"#{first.event_id} set species nyala's common name none → nyala antelope"]
    assert [r.details for r in audit_rows(cat, action="species.rename")] == \
        [{"common_name": ["Nyala", None]}, {"common_name": ["nyala antelope", "Nyala"]},
         {"common_name": [None, "nyala antelope"]}]
    for expected in ("Nyala", "nyala antelope", None):
        sa.undo_species_change(cat, UndoRequest(user="ana", event_id=sa.last_species_change_id(cat)))
        assert _names(cat)["nyala"] == expected


def test_undoing_a_common_name_change_keeps_a_later_rename_and_a_changed_common_name_blocks_it(cat):
    common = _rename(cat, "lion", common="lion")
    rename = _rename(cat, "lion", "Panthera leo")  # the scientific name only
    services.undo(cat, UndoRequest(user="ana", event_id=common.event_id))  # older, and about the other name
    assert _names(cat)["Panthera leo"] is None
    services.undo(cat, UndoRequest(user="ana", event_id=rename.event_id))
    assert _names(cat) == {"default": None, "nyala": None, "lion": None}

    set_ = _rename(cat, "lion", common="lion")
    _rename(cat, "lion", common="African lion")
    with pytest.raises(ConflictError, match="common name of species 'lion' was changed again since"):
        services.undo(cat, UndoRequest(user="ana", event_id=set_.event_id))
    assert _names(cat)["lion"] == "African lion"  # nothing changed


def test_bad_or_unchanged_names_are_refused_and_nothing_changes(cat):
    _rename(cat, "lion", common="lion")
    events = sa.species_history_rows(cat)
    with pytest.raises(CatalogueError, match="already has the common name 'lion'"):
        _rename(cat, "lion", common=" lion ")
    with pytest.raises(CatalogueError, match="already has that name"):
        _rename(cat, "lion", "lion", common="lion")
    with pytest.raises(CatalogueError, match="already has no common name"):
        _rename(cat, "nyala", common="")
    with pytest.raises(CatalogueError, match="common names are up to 200 printable characters"):
        _rename(cat, "lion", common="x" * 201)
    with pytest.raises(CatalogueError, match="printable"):
        _rename(cat, "lion", common="li\x01on")
    with pytest.raises(CatalogueError, match="a species named 'nyala' exists"):
        _rename(cat, "lion", "Nyala", common="big cat")
    with pytest.raises(ValueError, match="new name or a common name"):
        RenameSpeciesRequest("lion", None, user="ana")
    assert sa.species_history_rows(cat) == events and _names(cat)["lion"] == "lion"


def test_a_merged_species_comes_back_with_its_common_name(cat):
    _rename(cat, "lion", common="African lion")
    _rename(cat, "nyala", common="nyala")
    merge = sa.merge_species(cat, MergeSpeciesRequest("lion", "nyala", user="ana"))
    assert _names(cat) == {"default": None, "nyala": "nyala"}  # the target keeps its own
    sa.undo_species_change(cat, UndoRequest(user="ana", event_id=merge.merged.event_id))
    assert _names(cat) == {"default": None, "nyala": "nyala", "lion": "African lion"}


# --------------------------------------------------------------------------- the command line


def test_the_cli_sets_lists_clears_and_undoes_a_common_name(cat, capsys):
    d = str(cat.data_dir)
    assert cli(["--data-dir", d, "--user", "ana", "species", "rename", "lion", "Panthera leo",
                "--common-name", "lion"]) == 0
    out = capsys.readouterr().out
    assert "is now 'Panthera leo', common name 'lion'" in out
    assert cli(["--data-dir", d, "species", "common-name", "nyala", "Nyala"]) == 0
    said = capsys.readouterr().out
    assert "the common name of species 'nyala' is now 'Nyala'" in said
    event = int(said.split("rosette undo ")[1].split()[0])
    assert cli(["--data-dir", d, "species", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["id", "species", "common", "name"]
    assert any(line.split()[1:3] == ["nyala", "Nyala"] for line in table)
    assert any("Panthera leo" in line and line.split()[3] == "lion" for line in table)
    assert cli(["--data-dir", d, "species", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["common_name"] for r in rows} == {"default": None, "nyala": "Nyala", "Panthera leo": "lion"}

    assert cli(["--data-dir", d, "undo", str(event)]) == 0
    assert _names(cat)["nyala"] is None
    assert cli(["--data-dir", d, "species", "common-name", "Panthera leo", ""]) == 0
    assert "is cleared" in capsys.readouterr().out and _names(cat)["Panthera leo"] is None
    assert cli(["--data-dir", d, "species", "common-name", "Panthera leo", ""]) == 1  # nothing to clear
    assert "already has no common name" in capsys.readouterr().err
    assert [r.user for r in audit_rows(cat, action="species.rename")][-1] == "ana"


# --------------------------------------------------------------------------- Camtrap DP out and back in

START, END = "2024-05-01T00:00:00+02:00", "2024-05-10T00:00:00+02:00"


def _package(root, *, taxonomic=None):
    """Two media, a red fox and a badger (with boxes), at one deployment; ``taxonomic`` replaces the descriptor's."""
    deps = [{"deploymentID": "D1", "locationID": "L1", "latitude": 51.05, "longitude": 4.2,
             "deploymentStart": START, "deploymentEnd": END}]
    med = [{"mediaID": f"M{i}", "deploymentID": "D1", "timestamp": f"2024-05-0{i + 1}T10:00:00+02:00",
            "filePath": f"media/m{i}.jpg", "filePublic": "false", "fileMediatype": "image/jpeg"} for i in (1, 2)]
    obs = [{"observationID": f"O{i}", "deploymentID": "D1", "mediaID": f"M{i}", "observationLevel": "media",
            "observationType": "animal", "scientificName": name, "bboxX": 0.1, "bboxY": 0.1, "bboxWidth": 0.5,
            "bboxHeight": 0.5} for i, name in ((1, "Vulpes vulpes"), (2, "Meles meles"))]
    path = write_package(root, deps, med, obs)
    if taxonomic is not None:
        descriptor = json.loads(path.read_text())
        descriptor["taxonomic"] = taxonomic
        path.write_text(json.dumps(descriptor))
    return path


def test_the_descriptor_gives_each_taxon_its_english_name_and_the_reader_takes_only_that():
    meta = PackageMetadata(title="t", created=datetime(2024, 6, 1, tzinfo=timezone.utc),
                           contributors=[{"title": "ana", "role": "contact"}],
                           project_title="t", sampling_design="opportunistic", observation_level=("media",))
    deps = [{"deploymentID": "D1", "latitude": 1.0, "longitude": 2.0, "deploymentStart": START,
             "deploymentEnd": END}]
    obs = [{"scientificName": "Vulpes vulpes"}, {"scientificName": "Meles meles"}]
    descriptor = build_descriptor(meta, deployments=deps, media=[], observations=obs,
                                  common_names={"Vulpes vulpes": "red fox", "Canis lupus": "wolf"})
    assert descriptor["taxonomic"] == [{"scientificName": "Meles meles"},
                                       {"scientificName": "Vulpes vulpes", "vernacularNames": {"eng": "red fox"}}]
    assert common_names({"taxonomic": [
        {"scientificName": "Vulpes vulpes", "vernacularNames": {"fra": "renard roux", "eng": "red fox"}},
        {"scientificName": "Meles meles", "vernacularNames": {"fra": "blaireau"}},  # no English name: none
        {"scientificName": "Canis lupus", "vernacularNames": "wolf"},  # not as the profile says: skipped
        "Lynx lynx"]}) == {"Vulpes vulpes": "red fox"}
    assert common_names({}) == {} and common_names({"taxonomic": "x"}) == {}


def test_a_common_name_goes_out_as_vernacular_names_and_comes_back_in(tmp_path):
    first = open_catalogue(tmp_path / "first")
    package = _package(tmp_path / "pkg", taxonomic=[
        {"scientificName": "Vulpes vulpes", "vernacularNames": {"eng": "red fox", "fra": "renard roux"}},
        {"scientificName": "Meles meles", "vernacularNames": {"nld": "das"}}])
    assert read_camtrapdp(package).common_names == {"Vulpes vulpes": "red fox"}
    report = ingest_path(first, package, format="camtrap-dp", user="importer")
    assert report.counts["imported"] == 2, [(i.name, i.status, i.message) for i in report.items]
    assert _names(first) == {"default": None, "Vulpes vulpes": "red fox", "Meles meles": None}
    (added,) = audit_rows(first, action="species.add", target="species#2")
    assert added.user == "importer" and added.details == {"name": "Vulpes vulpes", "common_name": "red fox"}
    sa.rename_species(first, RenameSpeciesRequest("Meles meles", None, user="ana", common_name="European badger"))

    out = tmp_path / "out"
    done = export_camtrap_dp(first, ExportCamtrapDPRequest(user="ana", out=str(out)))
    assert done.valid, done.details["problems"]
    descriptor = json.loads((out / "datapackage.json").read_text())
    assert descriptor["taxonomic"] == [
        {"scientificName": "Meles meles", "vernacularNames": {"eng": "European badger"}},
        {"scientificName": "Vulpes vulpes", "vernacularNames": {"eng": "red fox"}}]
    assert validate_package(out) == []  # the shipped profile takes vernacularNames as written
    first.close()

    second = open_catalogue(tmp_path / "second")
    with second.unit_of_work() as s:  # a curator already named the fox here: the package does not replace it
        s.add(Species(name="Vulpes vulpes", common_name="fox"))
        s.commit()
    report = ingest_path(second, out / "datapackage.json", format="camtrap-dp", user="importer")
    assert report.counts["imported"] == 2, [(i.name, i.status, i.message) for i in report.items]
    assert _names(second) == {"default": None, "Vulpes vulpes": "fox", "Meles meles": "European badger"}
    with second.unit_of_work() as s:
        assert s.scalar(select(Deployment.key)) == "D1" and len(list(s.scalars(select(Photo)))) == 2
    second.close()


def test_a_package_fills_in_a_missing_common_name_only(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    with cat.unit_of_work() as s:
        s.add_all([Species(name="Vulpes vulpes"), Species(name="Meles meles", common_name="badger")])
        s.commit()
    package = _package(tmp_path / "pkg", taxonomic=[
        {"scientificName": "Vulpes vulpes", "vernacularNames": {"eng": "red fox"}},
        {"scientificName": "Meles meles", "vernacularNames": {"eng": "European badger"}}])
    ingest_path(cat, package, format="camtrap-dp", user="importer")
    assert _names(cat) == {"default": None, "Vulpes vulpes": "red fox", "Meles meles": "badger"}
    assert [r.details for r in audit_rows(cat, action="species.rename", user="importer")] == \
        [{"common_name": [None, "red fox"]}]
    cat.close()
