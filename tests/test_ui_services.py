"""app/services: the functions Gradio handlers call; and the app shell builds (no browser)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from db import catalogue as cat_ops
from db.catalogue import CatalogueError
from db.models import Flank, Image, Sighting, Species
from db.session import open_catalogue
from jobs.actions import catalogue as services
from jobs.actions import ingest, maintenance
from jobs.actions.export import export_catalogue
from jobs.requests.catalogue import (
    MergeRequest,
    MovePhotosRequest,
    RenameRequest,
    SetFlanksRequest,
    SplitRequest,
    UndoRequest,
)
from jobs.requests.export import ExportCatalogueRequest
from jobs.requests.ingest import ImportUploadsRequest

TINY_JPEG_SIDE = 8


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    yield c
    c.close()


def _photo(cat, n: int, *, individual_id: int | None, sighting: Sighting | None = None,
           flank: Flank = Flank.left, thumb: bool = True) -> int:
    """Store a tiny real JPEG (distinct bytes per n) and its catalogue row; returns the image id."""
    from io import BytesIO

    from PIL import Image as PILImage

    buf = BytesIO()
    PILImage.new("RGB", (TINY_JPEG_SIDE, TINY_JPEG_SIDE), (n * 7 % 256, 40, 90)).save(buf, format="JPEG")
    data = buf.getvalue() + bytes([n])  # trailing byte keeps hashes distinct even for equal pixels
    rel = cat.blobs.put(data, kind="images", ext=".jpg")
    with cat.unit_of_work() as s:
        img = Image(content_hash=rel.split("/")[-1][:64], original_name=f"photo{n}.jpg", blob_path=rel,
                    thumb_path=rel if thumb else None, format="JPEG", mode="RGB", width=8, height=8,
                    size_bytes=len(data), individual_id=individual_id, flank=flank,
                    sighting_id=sighting.id if sighting else None)
        s.add(img)
        s.commit()
        return img.id


@pytest.fixture()
def two_animals(cat):
    """Ayo (3 photos, 2 sightings) and Bela (1 photo, no sighting); ids returned by name."""
    with cat.unit_of_work() as s:
        ayo = cat_ops.create_individual(s, "Ayo", user="ana")
        bela = cat_ops.create_individual(s, "Bela", user="ana")
        s1 = Sighting(key="s1", date="2024-05-01", place="Porto Jofre")
        s2 = Sighting(key="s2", date="2024-06-02")
        s.add_all([s1, s2])
        s.commit()
        ids = {"Ayo": ayo.id, "Bela": bela.id}
    with cat.unit_of_work() as s:
        s1, s2 = s.scalars(select(Sighting).order_by(Sighting.id)).all()
    photos = [_photo(cat, 1, individual_id=ids["Ayo"], sighting=s1),
              _photo(cat, 2, individual_id=ids["Ayo"], sighting=s1, flank=Flank.right),
              _photo(cat, 3, individual_id=ids["Ayo"], sighting=s2, flank=Flank.unknown),
              _photo(cat, 4, individual_id=ids["Bela"], thumb=False)]
    return {**ids, "photos": photos}


def test_individual_cards_counts_captions_and_cover(cat, two_animals):
    cards = {c.name: c for c in services.individual_cards(cat)}
    assert cards["Ayo"].caption == "Ayo (3 photos, 2 sightings)"
    assert cards["Bela"].caption == "Bela (1 photo, 0 sightings)"
    assert Path(cards["Ayo"].thumb).is_file()
    # without a thumbnail the stored photo itself is the cover
    assert Path(cards["Bela"].thumb).is_file() and "/images/" in cards["Bela"].thumb
    assert [c.name for c in services.individual_cards(cat, search="be")] == ["Bela"]


def test_open_individual_lists_photos_with_flank_sighting_date_and_sightings(cat, two_animals):
    view = services.open_individual(cat, two_animals["Ayo"])
    assert view.headline() == "Ayo: 3 photos, 2 sightings"
    assert [c.id for c in view.images] == two_animals["photos"][:3]
    first = view.images[0].caption
    assert "left flank" in first and "sighting s1" in first and "2024-05-01" in first
    assert "flank not set" in view.images[2].caption
    assert view.sightings == [["s1", "2024-05-01", "Porto Jofre", "", "", 2], ["s2", "2024-06-02", "", "", "", 1]]
    assert [v for _label, v in services.image_choices(view)] == two_animals["photos"][:3]


def test_rename_then_undo_restores_name_and_history_says_who(cat, two_animals):
    msg = services.rename(cat, RenameRequest(two_animals["Ayo"], "Ayo II", user="bia")).message
    assert msg == "Renamed Ayo to Ayo II."
    assert services.open_individual(cat, two_animals["Ayo"]).name == "Ayo II"
    rows = services.history_rows(cat)
    assert rows[0][1] == "bia" and rows[0][2].endswith("renamed Ayo to Ayo II")
    assert services.undo(cat, UndoRequest(user="bia")).message == "Undone: renamed Ayo to Ayo II."
    assert services.open_individual(cat, two_animals["Ayo"]).name == "Ayo"
    rows = services.history_rows(cat)
    assert "undid change" in rows[0][2] and rows[1][2].endswith("(undone)")


def test_rename_to_taken_name_is_a_curator_error(cat, two_animals):
    with pytest.raises(CatalogueError, match="already exists"):
        services.rename(cat, RenameRequest(two_animals["Ayo"], "Bela", user="bia"))
    with pytest.raises(CatalogueError, match="Open an individual"):
        services.rename(cat, RenameRequest(None, "X", user="bia"))


def test_changes_need_a_curator_name(cat, two_animals):
    with pytest.raises(ValueError, match="signed in"):
        services.rename(cat, RenameRequest(two_animals["Ayo"], "Ayo II", user="   "))


def test_merge_moves_photos_retires_source_and_undo_restores(cat, two_animals):
    msg = services.merge(cat, MergeRequest(two_animals["Bela"], two_animals["Ayo"], user="bia")).message
    assert msg == "Merged Bela into Ayo (1 photo moved)."
    assert [c.name for c in services.individual_cards(cat)] == ["Ayo"]
    assert len(services.open_individual(cat, two_animals["Ayo"]).images) == 4
    retired = services.open_individual(cat, two_animals["Bela"])
    assert not retired.active and retired.headline().endswith("(merged into Ayo)")
    services.undo(cat, UndoRequest(user="bia"))
    assert {c.name: c.n_images for c in services.individual_cards(cat)} == {"Ayo": 3, "Bela": 1}


def test_merge_needs_a_target(cat, two_animals):
    with pytest.raises(CatalogueError, match="merge into"):
        services.merge(cat, MergeRequest(two_animals["Ayo"], None, user="bia"))


def test_split_makes_new_individual_and_undo_puts_photos_back(cat, two_animals):
    moved = two_animals["photos"][1:3]
    done = services.split(cat, SplitRequest(moved, new_name="Cacau", user="bia"))
    new_id, msg = done.individual_id, done.message
    assert msg == "Split 2 photos out into the new individual Cacau."
    assert [c.id for c in services.open_individual(cat, new_id).images] == moved
    assert {c.name: c.n_images for c in services.individual_cards(cat)} == {"Ayo": 1, "Bela": 1, "Cacau": 2}
    assert services.undo(cat, UndoRequest(user="bia")).message.startswith("Undone: split 2 photos out into Cacau")
    assert {c.name: c.n_images for c in services.individual_cards(cat)} == {"Ayo": 3, "Bela": 1}


def test_split_needs_photos(cat, two_animals):
    with pytest.raises(CatalogueError, match="at least one image"):
        services.split(cat, SplitRequest([], user="bia"))


def test_undo_with_nothing_to_undo(cat):
    with pytest.raises(CatalogueError, match="nothing to undo"):
        services.undo(cat, UndoRequest(user="bia"))


def test_catalogue_summary_and_provenance_hide_password(cat, two_animals):
    assert services.catalogue_summary(cat).startswith("2 individuals · 4 photos · 2 sightings")
    assert str(cat.data_dir) in maintenance.provenance_line(cat)
    assert maintenance.database_label("postgresql://ana:secret@db.example/rosette") == "postgresql://ana:***@db.example/rosette"


def test_import_uploads_needs_files(cat):
    with pytest.raises(ValueError, match="Choose some photos"):
        ingest.import_uploads(cat, ImportUploadsRequest([], user="bia"))


def test_import_uploads_matches_manifest_by_original_name(cat, nyala_dir, nyala_manifest, tmp_path):
    """Uploads arrive as <upload dir>/<hash>/<original name>; the manifest refers to the original names."""
    two = sorted({r["identity"] for r in nyala_manifest if r["identity"]})[:2]
    rows = [r for r in nyala_manifest if r["identity"] in two][:3]
    uploads = []
    for i, r in enumerate(rows):
        d = tmp_path / "gradio" / f"{i:040x}"
        d.mkdir(parents=True)
        uploads.append(str(shutil.copy(nyala_dir / "images" / r["filename"], d / r["filename"])))
    manifest = tmp_path / "gradio" / "m" / "manifest.csv"
    manifest.parent.mkdir()
    manifest.write_text("filename,identity,flank,sighting\n"
                        + "".join(f"{r['filename']},{r['identity']},{r['flank']},{r['sighting']}\n" for r in rows))
    outcome = ingest.import_uploads(cat, ImportUploadsRequest(uploads, manifest=str(manifest), user="bia"))
    assert len(outcome.rows) >= len(rows) and all(len(r) == 3 for r in outcome.rows)
    expected = {}
    for r in rows:
        expected[r["identity"]] = expected.get(r["identity"], 0) + 1
    assert {c.name: c.n_images for c in services.individual_cards(cat)} == expected
    # the new photos' features for match review are computed ahead, in the background (issue 14, item 10)
    from jobs.queue import get_job

    job = get_job(cat, outcome.features_job)
    assert job.kind == "embed" and job.status.value == "queued" and job.params["backbone"] == "efficientnet_lite0"
    assert f"being computed in the background (job #{job.id})" in outcome.summary
    with cat.unit_of_work() as s:
        added = sorted(s.scalars(select(Image.id)))
    assert sorted(job.params["image_ids"]) == added  # the animals it added
    every = ingest.warm_features(cat, user="bia")  # a waiting job of every photo covers later imports too
    assert every is not None and ingest.warm_features(cat, user="bia", image_ids=job.params["image_ids"]) is None


@pytest.mark.slow  # imports every tab module, some of which load torch
def test_build_app_constructs_with_all_tabs(cat, two_animals):
    import gradio as gr

    from app.ui import build_app, discover_tabs

    tabs = discover_tabs()
    assert [t.title for t in tabs][:2] == ["Ingest", "Catalogue"]
    assert all(t.error is None for t in tabs), [t.error for t in tabs if t.error]
    demo = build_app(cat, single_user="bia")
    assert isinstance(demo, gr.Blocks)
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"rosette-identity", "ingest-files", "ingest-import", "ingest-report", "catalogue-individuals",
            "catalogue-open", "catalogue-undo", "catalogue-history", "rosette-provenance", "pop-identities",
            "dens-draws", "dens-identities"} <= ids
    # every poll starts stopped and belongs to a tab: selecting that tab starts its own polls and stops the rest
    timers = [b for b in demo.blocks.values() if isinstance(b, gr.Timer)]
    assert len(timers) >= 5 and not any(t.active for t in timers)
    # ... and sits outside every tab: the page mounts a tab's components when the tab is first shown, so a start
    # sent to a timer inside it as the tab opens could arrive before the timer exists and be lost
    config = demo.get_config_file()

    def inside_tabs(node, in_tab=False):
        here = in_tab or isinstance(demo.blocks.get(node["id"]), gr.Tab)
        found = {node["id"]} if here else set()
        for child in node.get("children", []):
            found |= inside_tabs(child, here)
        return found

    in_tabs = inside_tabs(config["layout"])
    assert {"ingest-files", "dens-draws"} <= {demo.blocks[i].elem_id for i in in_tabs}
    assert not in_tabs & {t._id for t in timers}
    # an action that queues a job starts the poll that shows its progress
    deps = {d["id"]: d for d in config["dependencies"]}
    timer_ids = {t._id for t in timers}
    starts_poll = {deps[d["trigger_after"]]["api_name"] for d in deps.values()
                   if d.get("trigger_after") is not None and d["trigger_only_on_success"]
                   and d["outputs"] and set(d["outputs"]) <= timer_ids}
    assert {"export_camtrap_dp", "density", "population_identities", "run_sensitivity"} <= starts_poll
    # the Jobs tab runs no Gradio event to poll: its list asks a server function of its own, and the run panel is
    # redrawn (an event) only when the list's digest of the training runs changes
    jobs_list = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "jobs-list")
    assert [fn.__name__ for fn in jobs_list.server_fns] == ["jobs_now"]
    assert "train_model" not in starts_poll
    from app.ui_base import tab_timers_switch

    owners = ["jobs", "export", "population", "population"]
    assert [u.active for u in tab_timers_switch("population", owners)] == [False, False, True, True]
    assert [u.active for u in tab_timers_switch("match", owners)] == [False] * 4
    # refreshes run for the tab in sight: page load triggers none of another tab's, a catalogue change reaches the
    # tab shown only, and a selection records the tab and the version it shows
    from app.ui_base import tab_selected, version_reaches

    on_load = [d for d in config["dependencies"] if any(event == "load" for _, event in d["targets"])]
    assert len(on_load) == 1 and [demo.blocks[i].elem_id for i in on_load[0]["outputs"]] == ["rosette-identity"]
    assert version_reaches(["match", "population"], 7, "population") == [gr.skip(), 7, gr.skip(), 7]
    assert version_reaches(["match", "population"], 7, None) == [gr.skip()] * 4
    selected = tab_selected("population", owners, 3, with_seen=True)
    assert selected[0] == "population" and [u.active for u in selected[1:5]] == [False, False, True, True]
    assert selected[5] == 3 and len(tab_selected("ingest", owners, 3, with_seen=False)) == 5


def test_a_broken_tab_becomes_an_error_tab(cat, monkeypatch):
    from app import ui

    def broken(ctx):
        raise RuntimeError("boom in build")

    real = ui.discover_tabs
    monkeypatch.setattr(ui, "discover_tabs",
                        lambda: real() + [ui.TabModule(name="broken", title="Broken", order=999, build=broken),
                                          ui.TabModule(name="missing", title="Missing", order=999, build=None,
                                                       error="ImportError: no module")])
    demo = ui.build_app(cat)
    texts = [getattr(b, "value", None) for b in demo.blocks.values()]
    assert any(isinstance(t, str) and "boom in build" in t for t in texts)
    assert any(isinstance(t, str) and "ImportError: no module" in t for t in texts)


def test_curator_action_turns_domain_errors_into_messages(monkeypatch):
    import gradio as gr

    from app import ui_base as ui  # the guard's module (app.ui, the shell, re-exports it)
    from app.ui import curator_action

    monkeypatch.setattr(ui, "_POLICY", ui.AccessPolicy(catalogue=None, single_user="ana"))

    @curator_action
    def fails():
        raise CatalogueError("an individual named 'Ayo' already exists")

    @curator_action
    def crashes():
        raise KeyError("x")

    with pytest.raises(gr.Error) as err:
        fails(None)  # Gradio passes the request first
    assert err.value.message == "an individual named 'Ayo' already exists"
    with pytest.raises(gr.Error, match="Something went wrong"):
        crashes(None)


def test_markdown_text_shows_user_strings_literally():
    from app.ui import markdown_text

    assert markdown_text("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert\\(1\\)&gt;"
    assert markdown_text("Amber_2 *big* [x](y) #1") == "Amber\\_2 \\*big\\* \\[x\\]\\(y\\) \\#1"
    assert markdown_text("Tawny Ayo's") == "Tawny Ayo's"  # quotes need nothing: no entity to break


def test_catalogue_export_has_the_csvs_sheets_and_defused_cells(cat, two_animals, tmp_path):
    """Issue 14, everyday features: individuals, photos, sightings and decisions as CSV, formula-like cells
    defused, and a per-individual sheet with its best photos beside it; the same from the shell."""
    import csv
    import io
    import zipfile

    from app.cli import main as cli

    services.rename(cat, RenameRequest(two_animals["Bela"], "=HYPERLINK(\"http://x\")", user="ana"))  # a hostile name
    with cat.unit_of_work() as s:  # an export never writes the species "default": it is named first
        s.get(Species, 1).name = "Panthera onca"
        s.commit()
    done = export_catalogue(cat, ExportCatalogueRequest(user="ana"))
    path, message = done.path, done.message
    assert message == f"Exported 2 individuals, 4 photos (4 animals), 2 sightings and 0 decisions to {Path(path).name}."
    assert Path(path).parent == cat.data_dir / "exports"
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())

        def rows(member: str) -> list[dict[str, str]]:
            return list(csv.DictReader(io.StringIO(zf.read(member).decode())))

        individuals = {r["individual_id"]: r for r in rows("individuals.csv")}
        assert individuals[str(two_animals["Ayo"])]["photos"] == "3"
        assert individuals[str(two_animals["Ayo"])]["sightings"] == "2"
        assert individuals[str(two_animals["Ayo"])]["first_seen"] == "2024-05-01"
        assert individuals[str(two_animals["Ayo"])]["last_seen"] == "2024-06-02"
        assert individuals[str(two_animals["Bela"])]["name"] == "'=HYPERLINK(\"http://x\")"  # text, not a formula
        photos = rows("photos.csv")
        assert len(photos) == 4 and {p["sighting"] for p in photos} == {"s1", "s2", ""}
        assert next(p for p in photos if p["sighting"] == "s1")["place"] == "Porto Jofre"
        sightings = {r["sighting"]: r for r in rows("sightings.csv")}
        assert sightings["s1"]["photos"] == "2" and sightings["s2"]["photos"] == "1"
        assert rows("decisions.csv") == []
        sheet = next(n for n in names if n.startswith(f"sheets/{two_animals['Ayo']:05d}-Ayo"))
        page = zf.read(sheet).decode()
        assert "<h1>Ayo</h1>" in page and "3 photos · 2 sightings · seen 2024-05-01 to 2024-06-02" in page
        pictures = [n for n in names if n.startswith("sheets/img/")]
        assert len(pictures) == 4 and page.count("<img ") == 3  # Ayo's three, each file in the zip
        bela_sheet = next(n for n in names if n.startswith(f"sheets/{two_animals['Bela']:05d}-"))
        assert "&lt;" not in bela_sheet and "=HYPERLINK" in zf.read(bela_sheet).decode()  # escaped in HTML
        assert "README.txt" in names
    out = tmp_path / "cat.zip"
    assert cli(["--data-dir", str(cat.data_dir), "export-catalogue", "--out", str(out)]) == 0
    with zipfile.ZipFile(out) as zf:
        assert {"individuals.csv", "photos.csv", "sightings.csv", "decisions.csv"} <= set(zf.namelist())


def _second_animal(cat, image_id: int, *, individual_id: int | None) -> tuple[int, int]:
    """Another animal in the photo of annotation ``image_id``: (its annotation id, the photo id)."""
    with cat.unit_of_work() as s:
        first = s.get(Image, image_id)
        img = Image(**{c: getattr(first, c) for c in ("content_hash", "original_name", "blob_path", "thumb_path",
                                                      "format", "mode", "width", "height", "size_bytes")},
                    photo_id=first.photo_id, individual_id=individual_id, sighting_id=first.sighting_id)
        s.add(img)
        s.commit()
        return img.id, first.photo_id


def test_recent_changes_name_the_animal_and_its_photo_and_what_an_undo_undid(cat, two_animals):
    """An assignment moves an animal (an annotation), not a photo: the history names both, and an undo says what
    it undid in the same words instead of the event's internal kind."""
    second, photo = _second_animal(cat, two_animals["photos"][0], individual_id=None)
    assert photo != second  # the ids differ: the words must not mix them up
    with cat.unit_of_work() as s:
        cat_ops.assign_image(s, second, two_animals["Bela"], user="ana")
        s.commit()
    assert services.history_rows(cat)[0][2].endswith(f"assigned animal #{second} (photo #{photo}) to Bela")
    assert services.undo(cat, UndoRequest(user="ana")).message == \
        f"Undone: assigned animal #{second} (photo #{photo}) to Bela."
    undone_id = int(services.history_rows(cat)[1][2].split()[0][1:])
    assert services.history_rows(cat)[0][2].endswith(
        f"undid change #{undone_id}: assigned animal #{second} (photo #{photo}) to Bela")
    services.rename(cat, RenameRequest(two_animals["Ayo"], "Tico", user="ana"))
    services.undo(cat, UndoRequest(user="ana"))
    renamed_id = int(services.history_rows(cat)[1][2].split()[0][1:])
    assert services.history_rows(cat)[0][2].endswith(f"undid change #{renamed_id}: renamed Ayo to Tico")


def test_catalogue_export_counts_photos_and_animals_apart(cat, two_animals):
    """A photo with two animals is one photo and two animals in the zip: photos.csv has a row per animal, named by
    its annotation_id, with the photo_id it shares; the counts and the README say which is which."""
    import csv
    import io
    import zipfile

    second, photo = _second_animal(cat, two_animals["photos"][0], individual_id=two_animals["Ayo"])
    with cat.unit_of_work() as s:
        s.get(Species, 1).name = "Panthera onca"
        s.commit()
    done = export_catalogue(cat, ExportCatalogueRequest(user="ana"))
    assert "Exported 2 individuals, 4 photos (5 animals), 2 sightings" in done.message
    with zipfile.ZipFile(done.path) as zf:
        def rows(member: str) -> list[dict[str, str]]:
            return list(csv.DictReader(io.StringIO(zf.read(member).decode())))

        animals = rows("photos.csv")
        assert len(animals) == 5 and "image_id" not in animals[0]
        by_id = {int(r["annotation_id"]): int(r["photo_id"]) for r in animals}
        assert by_id[second] == by_id[two_animals["photos"][0]] == photo
        ayo = next(r for r in rows("individuals.csv") if r["name"] == "Ayo")
        assert (ayo["photos"], ayo["animals"]) == ("3", "4")
        s1 = next(r for r in rows("sightings.csv") if r["sighting"] == "s1")
        assert (s1["photos"], s1["animals"]) == ("2", "3")
        assert zf.read("decisions.csv").decode().split("\n")[0].split(",")[4:6] == ["query_annotation_id",
                                                                                "candidate_annotation_id"]
        readme = zf.read("README.txt").decode()
        assert "annotation_id names the animal" in readme and "photo_id the photo file" in readme
        sheet = zf.read(next(n for n in zf.namelist() if n.startswith(f"sheets/{two_animals['Ayo']:05d}-"))).decode()
        assert "3 photos (4 animals) · 2 sightings" in sheet


def test_ticked_photos_move_together_and_take_one_flank(cat, two_animals):
    """Issue 14, everyday features: select several photos in the Catalogue to move them or set their flank."""
    ayo_photos = [p for p in two_animals["photos"][:3]]
    message = services.move_photos(cat, MovePhotosRequest(ayo_photos[:2], two_animals["Bela"], user="ana"))
    assert message == "Moved 2 photos to Bela (each one is an undoable change)."
    assert {c.name: c.n_images for c in services.individual_cards(cat)} == {"Ayo": 1, "Bela": 3}
    assert services.undo(cat, UndoRequest(user="ana")).message.startswith("Undone: assigned animal")  # one back
    assert {c.name: c.n_images for c in services.individual_cards(cat)} == {"Ayo": 2, "Bela": 2}
    assert services.set_flanks(cat, SetFlanksRequest(ayo_photos, "left", user="ana")) == "Flank set to left for 3 photos."
    with cat.unit_of_work() as s:
        assert {s.get(Image, i).flank.value for i in ayo_photos} == {"left"}
    with pytest.raises(CatalogueError, match="Tick the photos"):
        services.move_photos(cat, MovePhotosRequest([], two_animals["Bela"], user="ana"))
    with pytest.raises(CatalogueError, match="Choose the flank"):
        services.set_flanks(cat, SetFlanksRequest(ayo_photos, "sideways", user="ana"))


def test_the_identities_table_names_each_interval_after_its_estimate():
    """Two columns both headed "95% interval" cannot be told apart (Gradio warns that the columns are not unique):
    each is named after the estimate beside it, on every basis."""
    from app.tabs._identities import SIDE_BY_SIDE, unique_headers
    from jobs.actions import identities as ident

    assert len(set(SIDE_BY_SIDE)) == len(SIDE_BY_SIDE) == len(ident.SIDE_BY_SIDE_HEADERS)
    assert SIDE_BY_SIDE[2] == "95% interval (as decided)"
    assert SIDE_BY_SIDE[4] == "95% interval (with identification uncertainty)"
    confirmed = unique_headers(ident.basis_headers("confirmed", ident.SIDE_BY_SIDE_HEADERS,
                                                   confirmed_header=ident.CONFIRMED_HEADER))
    assert confirmed[4] == "95% interval (confirmed only)" and len(set(confirmed)) == len(confirmed)


def test_the_jobs_list_counts_a_jobs_animals_and_names_their_species(cat, two_animals):
    """An import's features job stores the new animals' annotation ids and no species: the Jobs tab says "4
    animals (#1–#4) of Panthera onca", not "species=None, image_ids=[1, 2, 3, 4]"."""
    from app.tabs.jobs import jobs_html
    from jobs.actions import jobs as js
    from jobs.actions.job_words import job_params_words, params_words
    from jobs.queue import submit
    from jobs.requests.map import EmbedRequest

    with cat.unit_of_work() as s:
        s.get(Species, 1).name = "Panthera onca"
        s.commit()
    ids = two_animals["photos"]
    job = submit(cat, "embed", EmbedRequest(backbone="b0", user="ana", reason="import", image_ids=tuple(ids)).to_dict())
    words = job_params_words(cat, [job])[job]
    assert words == f"4 animals (#{ids[0]}–#{ids[-1]}) of Panthera onca, backbone=b0, variant=full_rgb, reason=import"
    page = jobs_html(js.job_rows(cat), job_params_words(cat, [job]))
    assert "4 animals" in page and "image_ids" not in page and "species=None" not in page
    assert params_words({"image_ids": [3, 9, 12, 40]}, species_names={}) == "4 animals (#3, #9, #12, …)"
    assert params_words({"species": 1, "backbone": "b0"}, species_names={1: "Panthera onca"}) == \
        "species=Panthera onca, backbone=b0"


def test_the_training_panel_draws_no_plot_until_there_is_a_run(cat):
    """An empty figure still loads Plotly in the browser: with no training run the plot gets no value at all."""
    from dataclasses import replace

    from app.tabs.jobs import _run_outputs
    from jobs.actions import training as ts

    empty = ts.run_view(cat, None)
    assert empty.job_id is None and _run_outputs(empty, [])[2] is None
    figure = object()
    assert _run_outputs(replace(empty, job_id=7, figure=figure), [("job #7", 7)])[2] is figure
