"""Camera stations: db.records.deployments (store, list, edit, delete, audited), the deployments CSV, a photo's deployment
and time at import (Camtrap DP-style ids, a manifest ``deployment`` column, the ``Station/...`` folder layout),
events (photos of one deployment within 60 s), the services, ``rosette deployments`` and ``rosette import
--event-gap``; every bad input with its message."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from app.cli import main as cli_main
from core.readers.base import Entry
from core.readers.deployments import DeploymentsCsvError, read_deployments_csv
from core.readers.folder import station_entries
from core.field.stations import deployment_spec
from db.audit import audit_rows
from db.catalogue import CatalogueError
from db.records.deployments import (
    DeploymentIndex,
    delete_deployment,
    edit_deployment,
    form_events,
    list_deployments,
    store_deployments,
)
from db.io.ingest import ingest_path, ingest_uploads
from db.models import Deployment, Photo, Sighting
from db.session import open_catalogue
from jobs.actions import deployments as da
from jobs.requests.deployments import DeleteDeploymentRequest, DeploymentFormRequest, ImportDeploymentsRequest
from jobs.requests.ingest import ImportPathRequest

HEADER = ["deploymentID", "locationID", "locationName", "latitude", "longitude", "deploymentStart", "deploymentEnd",
          "cameraID", "cameraModel", "setupBy"]
# station L1 ran 1-10 May, was down 11 May, ran again 12-20 May (UTC-4); L2 has no coordinates
ROWS = [["D1", "L1", "Ridge", "45.1", "-72.5", "2024-05-01T00:00:00-04:00", "2024-05-10T23:59:59-04:00", "C1",
         "Reconyx", "ana"],
        ["D2", "L1", "Ridge", "45.1", "-72.5", "2024-05-12T00:00:00-04:00", "2024-05-20T23:59:59-04:00", "C1",
         "Reconyx", "ana"],
        ["D3", "L2", "Creek", "", "", "2024-05-01T00:00:00-04:00", "2024-05-20T23:59:59-04:00", "C2", "", ""]]


def csv_bytes(header: list[str], rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return out.getvalue().encode()


def specs(rows=ROWS):
    return read_deployments_csv(csv_bytes(HEADER, rows), label="deployments.csv")


def photo(seed: int, when: str | None) -> bytes:
    """A small JPEG whose bytes differ per seed, with EXIF DateTime ``when`` (``YYYY:MM:DD HH:MM:SS``, no zone)."""
    arr = np.random.default_rng(seed).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    buf = io.BytesIO()
    exif = PILImage.Exif()
    if when:
        exif[306] = when
    PILImage.fromarray(arr).save(buf, format="JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture()
def cat(tmp_path):
    c = open_catalogue(tmp_path / "data")
    store_deployments(c, specs(), user="ana")
    return c


def photos_by_name(cat) -> dict[str, Photo]:
    with cat.unit_of_work() as s:
        out = {}
        for p in s.scalars(select(Photo)):
            p.deployment, p.sighting  # noqa: B018 - loaded before the session closes
            out[p.original_name.split("/")[-1]] = p
        return out


# --------------------------------------------------------------------------- storing deployments


def test_store_reports_new_unchanged_and_conflicting_and_never_overwrites(tmp_path):
    c = open_catalogue(tmp_path / "data")
    first = store_deployments(c, specs(), user="ana")
    assert first.new == ["D1", "D2", "D3"] and first.unchanged == [] and first.ok
    assert any("'D3'" in w and "no coordinates" in w for w in first.warnings)  # D3 named, and only D3
    assert not any("'D1'" in w for w in first.warnings)
    changed = [list(r) for r in ROWS]
    changed[0][5] = "2024-04-30T00:00:00-04:00"  # D1 stated with another start
    again = store_deployments(c, specs(changed), user="bo")
    assert again.new == [] and again.unchanged == ["D2", "D3"] and not again.ok
    (conflict,) = again.conflicting
    assert conflict.key == "D1" and conflict.fields == {"start": ("2024-05-01T00:00:00-04:00",
                                                                  "2024-04-30T00:00:00-04:00")}
    assert "the stored one was kept" in conflict.describe()
    assert {r.key: r.start for r in list_deployments(c)}["D1"] == "2024-05-01T00:00:00-04:00"


def test_store_refuses_duplicate_ids_naming_them_and_stores_nothing(tmp_path):
    c = open_catalogue(tmp_path / "data")
    dup = [deployment_spec(dict(zip(HEADER, ROWS[0])))] * 2 + [deployment_spec(dict(zip(HEADER, ROWS[2])))]
    with pytest.raises(CatalogueError, match=r"duplicate deployment ids.*'D1' \(2x\).*nothing was stored"):
        store_deployments(c, dup, user="ana")
    assert list_deployments(c) == []


def test_dry_run_stores_nothing_and_a_session_caller_owns_the_transaction(tmp_path):
    c = open_catalogue(tmp_path / "data")
    assert store_deployments(c, specs(), user="ana", dry_run=True).new == ["D1", "D2", "D3"]
    assert list_deployments(c) == []
    with c.unit_of_work() as s:
        assert store_deployments(s, specs()[:1], user="ana").new == ["D1"]
        s.rollback()  # the caller (a Camtrap DP import) gave up: nothing stays
    assert list_deployments(c) == []


def test_list_counts_active_days_and_keeps_other_fields(cat):
    rows = {r.key: r for r in list_deployments(cat)}
    # camera-days: 1 May 00:00 .. 10 May 23:59:59 ran 10 days less a second; 12..20 May, 9 days
    assert rows["D1"].active_days == pytest.approx(10 - 1 / 86400) and rows["D1"].to_dict()["active_days"] == 10
    assert rows["D2"].active_days == pytest.approx(9 - 1 / 86400)
    assert rows["D1"].details == {"setupBy": "ana"}  # an extra column, kept as it came (case included)
    assert (rows["D3"].lat, rows["D3"].lon) == (None, None)


# --------------------------------------------------------------------------- the deployments CSV


def test_csv_missing_required_columns_are_named():
    with pytest.raises(DeploymentsCsvError, match=r"missing required columns 'deploymentStart', 'deploymentEnd'"):
        read_deployments_csv(csv_bytes(["deploymentID", "start"], [["x", "2024-05-01"]]), label="d.csv")


def test_csv_headers_match_ignoring_case_and_underscores():
    (spec,) = read_deployments_csv(csv_bytes(["Deployment_ID", "deploymentstart", "DEPLOYMENT END"],
                                             [["A", "2024-05-01T00:00:00Z", "2024-05-02T00:00:00Z"]]), label="d.csv")
    assert spec.key == "A" and spec.end.isoformat() == "2024-05-02T00:00:00+00:00"


def test_csv_with_bad_rows_is_refused_whole_naming_each_line():
    rows = [list(ROWS[0]), list(ROWS[1]), list(ROWS[1])]
    rows[0][6] = "2024-04-01T00:00:00-04:00"  # ends before it starts
    rows[1][3] = "95"  # latitude out of range
    with pytest.raises(DeploymentsCsvError) as err:
        read_deployments_csv(csv_bytes(HEADER, rows), label="d.csv")
    text = str(err.value)
    assert "line 2: deployment 'D1': it ends (2024-04-01T00:00:00-04:00) before it starts" in text
    assert "line 3: deployment 'D2': latitude 95.0 is outside -90..90" in text
    assert "nothing was imported" in text


def test_csv_duplicate_ids_refused_and_named():
    with pytest.raises(DeploymentsCsvError, match=r"duplicate deploymentID values: 'D2' \(2x\)"):
        read_deployments_csv(csv_bytes(HEADER, [ROWS[0], ROWS[1], ROWS[1]]), label="d.csv")


def test_import_service_reads_a_csv_and_the_report_says_what_happened(tmp_path):
    c = open_catalogue(tmp_path / "data")
    path = write(tmp_path / "deployments.csv", csv_bytes(HEADER, ROWS))
    report = da.import_deployments(c, ImportDeploymentsRequest(str(path), user="ana"))
    assert report.summary() == "added 3 deployment(s), 0 already stored the same, 0 conflicting with what is stored"
    with pytest.raises(FileNotFoundError, match="no such file"):
        da.import_deployments(c, ImportDeploymentsRequest(str(tmp_path / "missing.csv"), user="ana"))
    with pytest.raises(ValueError, match="Choose a deployments CSV"):
        ImportDeploymentsRequest("  ", user="ana")


# --------------------------------------------------------------------------- a curator's add / edit / delete


def form(key="N1", start="2024-06-01T08:00:00+02:00", end="2024-06-09T08:00:00", **more) -> DeploymentFormRequest:
    return DeploymentFormRequest(key, start, end, user="ana", location_id="L9", **more)


def test_form_requests_check_their_values():
    assert form().spec().end.isoformat() == "2024-06-09T08:00:00+02:00"  # the end takes the start's offset
    with pytest.raises(ValueError, match="ends .* before it starts"):
        form(end="2024-05-01T00:00:00+02:00")
    with pytest.raises(ValueError, match="give both latitude and longitude"):
        form(latitude="45")
    with pytest.raises(ValueError, match="the latitude must be a number, got 'north'"):
        form(latitude="north", longitude="3")
    with pytest.raises(ValueError, match="give its start and its end"):
        form(start="")
    with pytest.raises(ValueError, match="not an ISO 8601 date-time"):
        form(start="first of May")


def test_add_edit_delete_are_audited_and_guarded(cat, tmp_path):
    da.add_deployment(cat, form())
    with pytest.raises(CatalogueError, match="a deployment 'N1' exists already"):
        da.add_deployment(cat, form())
    warnings = edit_deployment(cat, "N1", form(latitude="46.5", longitude="7.25").spec(), user="bo")
    assert warnings == []
    rows = {r.key: r for r in list_deployments(cat)}
    assert (rows["N1"].lat, rows["N1"].lon) == (46.5, 7.25)
    edit_deployment(cat, "D1", deployment_spec({**dict(zip(HEADER, ROWS[0])), "cameraID": "C9"}), user="bo")
    edit_deployment(cat, "D1", form(key="D1", start=ROWS[0][5], end=ROWS[0][6]).spec(), user="bo")
    assert {r.key: r for r in list_deployments(cat)}["D1"].details == {"setupBy": "ana"}  # a form keeps them
    da.delete_deployment(cat, DeleteDeploymentRequest("N1", user="cy"))
    assert "N1" not in {r.key for r in list_deployments(cat)}
    with pytest.raises(CatalogueError, match="no deployment 'N1'; known: 'D1', 'D2', 'D3'"):
        delete_deployment(cat, "N1", user="cy")
    trail = [(r.user, r.action, r.target, r.details) for r in audit_rows(cat, action="deployment")]
    actions = [(u, a) for u, a, _, _ in trail]
    assert ("cy", "deployment.delete") in actions and ("bo", "deployment.edit") in actions
    assert ("ana", "deployment.add") in actions
    edits = [d for u, a, t, d in trail if a == "deployment.edit"]
    assert {"lat": [None, 46.5], "lon": [None, 7.25]} in edits  # field by field: stored, then new
    assert {"camera_id": ["C1", "C9"]} in edits


def test_deleting_or_shrinking_a_deployment_with_photos_is_refused(cat, tmp_path):
    write(tmp_path / "in" / "L1" / "a.jpg", photo(1, "2024:05:03 10:00:00"))
    ingest_path(cat, tmp_path / "in", user="ana", layout="stations")
    with pytest.raises(CatalogueError, match=r"deployment 'D1' cannot be deleted: 1 photo\(s\) and 1 event\(s\)"):
        delete_deployment(cat, "D1", user="ana")
    shrunk = deployment_spec({**dict(zip(HEADER, ROWS[0])), "deploymentEnd": "2024-05-02T00:00:00-04:00"})
    with pytest.raises(CatalogueError, match=r"1 linked photo\(s\) would fall outside .*a\.jpg, taken "
                                             r"2024-05-03T10:00:00-04:00"):
        edit_deployment(cat, "D1", shrunk, user="ana")


# --------------------------------------------------------------------------- a photo's deployment and time


def test_index_resolves_ids_stations_and_says_why_not(cat):
    with cat.unit_of_work() as s:
        idx = DeploymentIndex(s)
    by_id = idx.resolve(deployment="D1", taken_at="2024-05-02T14:00:00Z", exif_time=None)
    assert (by_id.deployment_key, by_id.taken_at, by_id.warnings) == ("D1", "2024-05-02T10:00:00-04:00", ())
    gap = idx.resolve(deployment="Ridge", taken_at=None, exif_time="2024-05-11T09:00:00")  # the down day
    assert gap.deployment_id is None and gap.taken_at == "2024-05-11T09:00:00-04:00"
    assert "outside every active period of station 'Ridge'" in gap.warnings[0]
    assert "D1 2024-05-01T00:00:00-04:00 to 2024-05-10T23:59:59-04:00" in gap.warnings[0]
    unknown = idx.resolve(deployment="Nowhere", taken_at=None, exif_time=None)
    assert unknown.deployment_id is None and "no deployment or station 'Nowhere'" in unknown.warnings[0]
    outside = idx.resolve(deployment="D2", taken_at="2024-06-30T10:00:00-04:00", exif_time=None)
    assert outside.deployment_key == "D2"  # an explicit deploymentID is kept, and the report says it is odd
    assert outside.warnings == ("taken 2024-06-30T10:00:00-04:00, outside the active period of deployment 'D2' "
                                "(2024-05-12T00:00:00-04:00 to 2024-05-20T23:59:59-04:00); linked to it as the "
                                "source says",)


def test_station_layout_picks_the_deployment_running_then(cat, tmp_path):
    root = tmp_path / "cams"
    write(root / "L1" / "100RECNX" / "early.jpg", photo(1, "2024:05:03 10:00:00"))
    write(root / "L1" / "100RECNX" / "late.jpg", photo(2, "2024:05:13 10:00:00"))
    write(root / "L1" / "100RECNX" / "down.jpg", photo(3, "2024:05:11 10:00:00"))
    write(root / "loose.jpg", photo(4, "2024:05:03 10:00:00"))
    report = ingest_path(cat, root, user="ana", layout="stations")
    assert report.format == "folder (stations)" and report.counts["imported"] == 4
    got = photos_by_name(cat)
    assert got["early.jpg"].deployment.key == "D1" and got["late.jpg"].deployment.key == "D2"
    assert got["early.jpg"].taken_at == "2024-05-03T10:00:00-04:00"
    assert got["down.jpg"].deployment_id is None and got["loose.jpg"].deployment_id is None
    messages = {it.name.split("/")[-1]: it.message for it in report.items}
    assert "the EXIF time has no time zone: taken to be the local time of deployment 'D1' (UTC-4)" \
        in messages["early.jpg"]
    assert "outside every active period of station 'L1'" in messages["down.jpg"]
    assert "not inside a station folder" in messages["loose.jpg"]
    with cat.unit_of_work() as s:  # station folders are not individuals
        assert s.scalar(select(Sighting.key).where(Sighting.id == got["early.jpg"].sighting_id)).startswith("event:D1")


def test_station_layout_is_detected_only_when_every_folder_is_a_station(cat, tmp_path):
    stations = tmp_path / "stations"
    write(stations / "L2" / "a.jpg", photo(5, "2024:05:03 10:00:00"))
    write(stations / "ridge" / "b.jpg", photo(6, "2024:05:03 10:00:00"))  # a location name, case ignored
    assert ingest_path(cat, stations, user="ana").format == "folder (stations)"
    got = photos_by_name(cat)
    assert got["a.jpg"].deployment.key == "D3" and got["b.jpg"].deployment.key == "D1"
    animals = tmp_path / "animals"
    write(animals / "L2" / "c.jpg", photo(7, None))
    write(animals / "Amber" / "d.jpg", photo(8, None))  # not a station: the folders name individuals
    report = ingest_path(cat, animals, user="ana")
    assert report.format == "folder"
    assert photos_by_name(cat)["d.jpg"].deployment_id is None
    with pytest.raises(Exception, match="unknown layout 'rows'"):
        ingest_path(cat, animals, user="ana", layout="rows")


def test_station_entries_move_the_folder_from_identity_to_deployment():
    out = station_entries([Entry("S1/x.jpg", read=lambda: b"", identity="S1"), Entry("y.jpg", read=lambda: b""),
                           Entry("z.txt", error="not a photo", error_status="skipped")])
    assert [(e.identity, e.deployment) for e in out] == [(None, "S1"), (None, None), (None, None)]
    assert out[1].warning == "not inside a station folder: imported without a deployment"
    assert out[2].error == "not a photo"


def test_manifest_deployment_and_timestamp_columns(cat, tmp_path):
    folder = tmp_path / "m"
    for i, name in enumerate(["a.jpg", "b.jpg", "c.jpg", "d.jpg"]):
        write(folder / name, photo(20 + i, None))
    (folder / "manifest.csv").write_text(
        "filename,identity,deployment,timestamp,sighting\n"
        "a.jpg,Amber,D1,2024-05-02T14:00:00Z,\n"
        "b.jpg,,D1,2024-05-02 10:00:30,\n"
        "c.jpg,,Atlantis,2024-05-02T10:00:00-04:00,\n"
        "d.jpg,,D1,2024-05-02T10:00:40-04:00,enc-7\n")
    report = ingest_path(cat, folder, user="ana")
    got = photos_by_name(cat)
    assert got["a.jpg"].deployment.key == "D1" and got["a.jpg"].taken_at == "2024-05-02T10:00:00-04:00"
    assert got["b.jpg"].taken_at == "2024-05-02T10:00:30-04:00"
    assert got["c.jpg"].deployment_id is None
    messages = {it.name: it.message for it in report.items}
    assert "the timestamp has no time zone" in messages["b.jpg"]
    assert "no deployment or station 'Atlantis'" in messages["c.jpg"]
    # a and b are 30 s apart: one event; d keeps the sighting its manifest names, though 10 s after b
    assert got["a.jpg"].sighting_id == got["b.jpg"].sighting_id is not None
    with cat.unit_of_work() as s:
        assert s.get(Sighting, got["d.jpg"].sighting_id).key == "enc-7"


def test_an_uploaded_manifest_names_the_deployment_too(cat, tmp_path):
    a = write(tmp_path / "up" / "a.jpg", photo(30, None))
    b = write(tmp_path / "up" / "b.jpg", photo(31, None))
    manifest = tmp_path / "up" / "m.csv"
    manifest.write_text("filename,identity,deployment,date\na.jpg,,D3,2024-05-05T06:00:00-04:00\n"
                        "b.jpg,,D3,2024-05-05\n")  # b: a date without a time of day is no time to group by
    report = ingest_uploads(cat, [a, b], manifest=manifest, user="ana")
    assert report.counts["imported"] == 2
    got = photos_by_name(cat)
    assert got["a.jpg"].deployment.key == "D3" and got["a.jpg"].taken_at == "2024-05-05T06:00:00-04:00"
    assert got["a.jpg"].sighting.key == "event:D3:2024-05-05T06:00:00-04:00"
    assert got["b.jpg"].deployment.key == "D3" and got["b.jpg"].taken_at is None and got["b.jpg"].sighting is None
    assert "no time for this photo" in {it.name: it.message for it in report.items}["b.jpg"]


# --------------------------------------------------------------------------- events


TIMES = ["2024:05:03 10:00:00", "2024:05:03 10:00:50", "2024:05:03 10:01:45", "2024:05:03 10:03:00"]
# gaps 50 s, 55 s, 75 s: with 60 s the first three are one event and the fourth another


def event_groups(cat) -> list[list[str]]:
    got = photos_by_name(cat)
    groups: dict[int, list[str]] = {}
    for name in sorted(got):
        groups.setdefault(got[name].sighting_id, []).append(name)
    return sorted(groups.values())


def station_folder(tmp_path: Path, times=TIMES, *, seed: int = 100) -> Path:
    root = tmp_path / f"cams{seed}"
    for i, when in enumerate(times):
        write(root / "L1" / f"p{seed + i}.jpg", photo(seed + i, when))
    return root


def test_photos_within_60_s_form_one_event_worked_by_hand(cat, tmp_path):
    report = ingest_path(cat, station_folder(tmp_path), user="ana", layout="stations")
    assert event_groups(cat) == [["p100.jpg", "p101.jpg", "p102.jpg"], ["p103.jpg"]]
    with cat.unit_of_work() as s:
        events = list(s.scalars(select(Sighting).order_by(Sighting.id)))
        assert [e.key for e in events] == ["event:D1:2024-05-03T10:00:00-04:00", "event:D1:2024-05-03T10:03:00-04:00"]
        assert {(e.deployment_id, e.place, e.lat, e.camera) for e in events} == {(1, "Ridge", 45.1, "C1")}
    assert "event event:D1:2024-05-03T10:00:00-04:00 (photos of its deployment within 60 s)" in report.items[0].message


def test_the_event_gap_is_an_option(cat, tmp_path):
    ingest_path(cat, station_folder(tmp_path), user="ana", layout="stations", event_gap_s=52)
    assert event_groups(cat) == [["p100.jpg", "p101.jpg"], ["p102.jpg"], ["p103.jpg"]]  # 55 s > 52 s


def test_a_later_photo_joins_the_event_it_falls_in_and_others_are_untouched(cat, tmp_path):
    ingest_path(cat, station_folder(tmp_path), user="ana", layout="stations")
    ingest_path(cat, station_folder(tmp_path, ["2024:05:03 10:02:30"], seed=200), user="ana", layout="stations")
    # 10:02:30 is 45 s after p102 (10:01:45) and 30 s before p103 (10:03:00): it joins the first event, and the
    # second (already formed) is not regrouped
    assert event_groups(cat) == [["p100.jpg", "p101.jpg", "p102.jpg", "p200.jpg"], ["p103.jpg"]]


def test_form_events_skips_photos_that_have_a_sighting(cat, tmp_path):
    ingest_path(cat, station_folder(tmp_path), user="ana", layout="stations")
    with cat.unit_of_work() as s:
        assert form_events(s).events_created == 0  # everything already grouped: nothing to do
        with pytest.raises(CatalogueError, match="at least 0 seconds"):
            form_events(s, gap_s=-1)


def test_import_request_and_cli_take_the_event_gap(cat, tmp_path):
    with pytest.raises(ValueError, match="event gap .* 0 seconds or more"):
        ImportPathRequest(str(tmp_path), user="ana", event_gap_s=-5)
    with pytest.raises(ValueError, match="unknown layout 'x'"):
        ImportPathRequest(str(tmp_path), user="ana", layout="x")
    root = station_folder(tmp_path)
    assert cli_main(["--data-dir", str(cat.data_dir), "import", str(root), "--layout", "stations",
                     "--event-gap", "52"]) == 0
    assert event_groups(cat) == [["p100.jpg", "p101.jpg"], ["p102.jpg"], ["p103.jpg"]]


# --------------------------------------------------------------------------- rosette deployments


def test_cli_lists_imports_adds_and_deletes(tmp_path, capsys):
    data = str(tmp_path / "data")
    path = write(tmp_path / "deployments.csv", csv_bytes(HEADER, ROWS))
    assert cli_main(["--data-dir", data, "--user", "ana", "deployments", "import", str(path)]) == 0
    out = capsys.readouterr().out
    assert "added 3 deployment(s)" in out and "warning: 1 deployment(s) have no coordinates" in out
    assert cli_main(["--data-dir", data, "deployments", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(d["deploymentID"], d["active_days"], d["photos"]) for d in listed] == [("D1", 10, 0), ("D2", 9, 0),
                                                                                    ("D3", 20, 0)]
    bad = write(tmp_path / "bad.csv", csv_bytes(HEADER, [ROWS[0], ROWS[0]]))
    assert cli_main(["--data-dir", data, "deployments", "import", str(bad)]) == 1
    assert "duplicate deploymentID values: 'D1' (2x)" in capsys.readouterr().err
    assert cli_main(["--data-dir", data, "deployments", "add", "X1", "--start", "2024-06-01T00:00:00Z",
                     "--end", "2024-06-02T00:00:00Z", "--location-id", "L7"]) == 0
    assert cli_main(["--data-dir", data, "deployments", "edit", "X1", "--camera-id", "C5"]) == 0
    assert cli_main(["--data-dir", data, "deployments", "delete", "X1"]) == 0
    assert "deployment 'X1' deleted" in capsys.readouterr().out
    changed = [list(r) for r in ROWS]
    changed[2][1] = "L3"
    conflicting = write(tmp_path / "changed.csv", csv_bytes(HEADER, changed))
    assert cli_main(["--data-dir", data, "deployments", "import", str(conflicting)]) == 1
    assert "conflict: deployment 'D3' is already stored differently (location_id: stored 'L2', given 'L3')" \
        in capsys.readouterr().out
    with open_catalogue(tmp_path / "data").unit_of_work() as s:
        assert s.scalar(select(Deployment.location_id).where(Deployment.key == "D3")) == "L2"
