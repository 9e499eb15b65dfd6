"""End to end in a real browser: the Deployments tab lists the camera stations stored before the server started
(with photo counts and active days), a curator adds one with the form (a bad one is refused with the reason),
uploads a deployments CSV, changes a deployment and deletes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from tests.browser.conftest import choose, require_chromium, start_rosette
from tests.browser.test_ingest_catalogue import upload

TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def stations_server(tmp_path_factory):
    """A catalogue holding deployment D1 (station Ridge, 1-10 May) and one photo linked to it."""
    require_chromium()
    import io

    import numpy as np
    from PIL import Image as PILImage

    from core.field.stations import deployment_spec
    from db.records.deployments import store_deployments
    from db.io.ingest import ingest_path
    from db.session import open_catalogue

    root = tmp_path_factory.mktemp("deployments")
    data = root / "rosette-data"
    cat = open_catalogue(data)
    try:
        store_deployments(cat, [deployment_spec({"deploymentID": "D1", "locationID": "Ridge", "latitude": "45.1",
                                                 "longitude": "-72.5", "deploymentStart": "2024-05-01T00:00:00-04:00",
                                                 "deploymentEnd": "2024-05-10T23:59:59-04:00"})], user="seed")
        buf = io.BytesIO()
        exif = PILImage.Exif()
        exif[306] = "2024:05:03 10:00:00"
        PILImage.fromarray(np.full((24, 32, 3), 120, np.uint8)).save(buf, format="JPEG", exif=exif.tobytes())
        (root / "cams" / "Ridge").mkdir(parents=True)
        (root / "cams" / "Ridge" / "a.jpg").write_bytes(buf.getvalue())
        assert ingest_path(cat, root / "cams", user="seed", layout="stations").counts["imported"] == 1
    finally:
        cat.close()
    csv_path = root / "more-deployments.csv"
    csv_path.write_text("deploymentID,locationID,latitude,longitude,deploymentStart,deploymentEnd\n"
                        "C1,Creek,,,2024-06-01T00:00:00+02:00,2024-06-03T12:00:00+02:00\n")
    server = start_rosette(data)
    server.csv_path = csv_path
    try:
        yield server
    finally:
        server.stop()


def _stored(data_dir: Path) -> dict[str, tuple]:
    from db.models import Deployment
    from db.session import open_catalogue

    cat = open_catalogue(data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            return {d.key: (d.location_id, d.lat, d.lon, d.start, d.end)
                    for d in s.scalars(select(Deployment))}
    finally:
        cat.close()


def test_list_and_add_deployments(stations_server, page, shot):
    from playwright.sync_api import expect

    page.goto(stations_server.url)
    page.get_by_role("tab", name="Deployments").click()
    table = page.locator("#deployments-table")
    expect(table).to_contain_text("Ridge", timeout=TIMEOUT_MS)
    expect(page.locator("#deployments-overview")).to_contain_text(
        "1 deployment(s) at 1 station(s), 1 linked photo(s), 10 camera-days in all")

    # --- add a deployment with the form
    page.locator("#deployment-id input").fill("D2")
    page.locator("#deployment-location input").fill("Ridge")
    page.locator("#deployment-start input").fill("2024-05-12T00:00:00-04:00")
    page.locator("#deployment-end input").fill("2024-05-20T23:59:59-04:00")
    page.locator("#deployment-lat input").fill("45.1")
    page.locator("#deployment-lon input").fill("-72.5")
    page.locator("#deployment-add").click()
    expect(page.locator("#deployments-status")).to_contain_text("added 1 deployment(s)", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("D2", timeout=TIMEOUT_MS)
    expect(page.locator("#deployments-overview")).to_contain_text("2 deployment(s) at 1 station(s)")
    shot("added")

    # --- an end before the start is refused with the reason
    page.locator("#deployment-id input").fill("D3")
    page.locator("#deployment-end input").fill("2024-05-01T00:00:00-04:00")
    page.locator("#deployment-add").click()
    expect(page.get_by_text("before it starts").first).to_be_visible(timeout=TIMEOUT_MS)

    stored = _stored(stations_server.data_dir)
    assert stored["D2"] == ("Ridge", 45.1, -72.5, "2024-05-12T00:00:00-04:00", "2024-05-20T23:59:59-04:00")
    assert "D3" not in stored


def test_upload_a_csv_then_change_and_delete_a_deployment(stations_server, page, shot):
    from playwright.sync_api import expect

    page.goto(stations_server.url)
    page.get_by_role("tab", name="Deployments").click()
    table = page.locator("#deployments-table")
    expect(table).to_contain_text("Ridge", timeout=TIMEOUT_MS)

    # --- upload a deployments CSV: stored, and the missing coordinates are named
    upload(page, "deployments-csv", [str(stations_server.csv_path)])
    page.locator("#deployments-import").click()
    status = page.locator("#deployments-status")
    expect(status).to_contain_text("added 1 deployment(s)", timeout=TIMEOUT_MS)
    expect(status).to_contain_text("have no coordinates")
    expect(table).to_contain_text("Creek", timeout=TIMEOUT_MS)
    shot("uploaded")

    # --- pick the uploaded one: the form shows it; give it a camera and save; then delete it
    choose(page, "deployments-chosen", "C1")
    expect(page.locator("#deployment-start input")).to_have_value("2024-06-01T00:00:00+02:00", timeout=TIMEOUT_MS)
    page.locator("#deployment-camera input").fill("CAM-9")
    page.locator("#deployment-save").click()
    expect(status).to_contain_text("Deployment C1 saved", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("CAM-9", timeout=TIMEOUT_MS)
    page.locator("#deployment-delete").click()
    expect(status).to_contain_text("Deployment C1 deleted", timeout=TIMEOUT_MS)
    expect(table).not_to_contain_text("Creek", timeout=TIMEOUT_MS)
    assert "C1" not in _stored(stations_server.data_dir)


def test_a_camtrap_dp_package_uploaded_in_the_ingest_tab_brings_its_stations(stations_server, page, shot,
                                                                             tmp_path):
    """A package zip uploaded on its own in the Ingest tab comes in as a package: its media are imported (the
    blank one reported empty) and its two deployments appear in the Deployments tab with their station names."""
    from playwright.sync_api import expect

    from tests import test_camtrapdp_import as pkg
    from tests.camtrapdp_package import write_package, zip_package

    def renamed(rows: list[dict]) -> list[dict]:  # P1/P2: the server already holds a deployment D1
        return [{k: ({"D1": "P1", "D2": "P2"}.get(v, v) if k == "deploymentID" else v) for k, v in r.items()}
                for r in rows]

    folder = write_package(tmp_path / "pkg", renamed(pkg.deployments()), renamed(pkg.media()),
                           renamed(pkg.observations()))
    archive = zip_package(folder.parent, tmp_path / "survey.zip")
    page.goto(stations_server.url)
    page.get_by_role("tab", name="Ingest").click()
    upload(page, "ingest-files", [str(archive)])
    page.locator("#ingest-import").click()
    summary = page.locator("#ingest-summary")
    expect(summary).to_contain_text("Import finished", timeout=TIMEOUT_MS)
    expect(summary).to_contain_text("4 imported")  # 4 media (the deployments line is not one); blank M4 left out
    expect(page.locator("#ingest-report")).to_contain_text("media/m4.jpg")
    shot("package")
    page.get_by_role("tab", name="Deployments").click()
    table = page.locator("#deployments-table")
    expect(table).to_contain_text("Pond", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("P2")
    stored = _stored(stations_server.data_dir)
    assert stored["P1"][:3] == ("L1", 51.05, 4.2) and stored["P2"][0] == "L2"
