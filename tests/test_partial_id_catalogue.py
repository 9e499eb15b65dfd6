"""``rosette density --flanks`` on the catalogue: the partial-identity model's inputs read from the photos' flank
labels, the individuals and the deployments, and its refusals.

The catalogue (built with the ORM, :func:`build_flank_catalogue`): six jaguar stations on a 3 x 2 grid 1 km apart,
eight daily occasions in June 2024. S1 has two cameras side by side all season; S3 has a second camera for the first
three days only; the others one. The individuals, by what their photos show:

- Lefty1, Lefty2: left flanks only (left-flank identities); Righty1, Righty2: right flanks only;
- Both1 (both flanks at S1 on day 2) and Both2 (both at S3 on day 2): both sides at once at two cameras (``B``);
- Linked1 (both flanks at S4, one camera) and Linked2 (both at S3 on day 6, its second camera gone): known links;
- Front1: a front view only, left out (it shows neither flank's pattern).

An ocelot seen on both flanks is a species with no one-flank identity.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from app.cli import main as cli_main
from core.field.partial_id import flank_data
from db.catalogue import CatalogueError
from db.field.partial_id_study import catalogue_flank_study, most_at_once
from db.models import Deployment, Flank, Individual, Species
from db.session import open_catalogue
from jobs.actions import partial_id as pid
from jobs.requests.partial_id import PartialIdRequest
from tests.test_population_service import _annotation, _photo

JAGUAR = "Panthera onca"
OCELOT = "Leopardus pardalis"
ORIGIN = (-16.5, -56.5)
KM_PER_DEG_LAT = 110.57
#: station -> (x km, y km)
GRID = {f"S{n + 1}": (float(n % 3), float(n // 3)) for n in range(6)}
#: (individual, station, day of June, flanks photographed then)
SIGHTINGS = [
    ("Lefty1", "S3", 2, "L"), ("Lefty1", "S4", 5, "L"), ("Lefty2", "S5", 1, "L"), ("Lefty2", "S6", 3, "L"),
    ("Righty1", "S4", 2, "R"), ("Righty1", "S5", 6, "R"), ("Righty2", "S6", 4, "R"), ("Righty2", "S5", 7, "R"),
    ("Both1", "S1", 2, "LR"), ("Both1", "S2", 5, "L"), ("Both2", "S3", 2, "LR"), ("Both2", "S2", 7, "R"),
    ("Linked1", "S4", 3, "LR"), ("Linked1", "S5", 7, "R"), ("Linked2", "S3", 6, "LR"), ("Linked2", "S2", 1, "L"),
    ("Front1", "S6", 5, "F"),
]
FLANKS = {"L": Flank.left, "R": Flank.right, "F": Flank.front, "U": Flank.unknown}
TZ = "-04:00"


def _lat_lon(x_km: float, y_km: float) -> tuple[float, float]:
    km_per_deg_lon = KM_PER_DEG_LAT * math.cos(math.radians(ORIGIN[0]))
    return round(ORIGIN[0] + y_km / KM_PER_DEG_LAT, 6), round(ORIGIN[1] + x_km / km_per_deg_lon, 6)


def build_flank_catalogue(data_dir: Path, *, unset: int = 0) -> None:
    """The catalogue of the module's notes; ``unset`` more photos of Lefty1 whose flank nobody set."""
    cat = open_catalogue(data_dir)
    with cat.unit_of_work() as s:
        jaguar, ocelot = Species(name=JAGUAR), Species(name=OCELOT)
        s.add_all([jaguar, ocelot])
        s.flush()
        deps: dict[str, Deployment] = {}
        for name, (x, y) in GRID.items():
            lat, lon = _lat_lon(x, y)
            deps[name] = Deployment(key=f"{name}-a", location_id=name, lat=lat, lon=lon,
                                    start=f"2024-06-01T00:00:00{TZ}", end=f"2024-06-09T00:00:00{TZ}")
        lat, lon = _lat_lon(*GRID["S1"])
        second = [Deployment(key="S1-b", location_id="S1", lat=lat, lon=lon, start=f"2024-06-01T00:00:00{TZ}",
                             end=f"2024-06-09T00:00:00{TZ}")]
        lat, lon = _lat_lon(*GRID["S3"])
        second.append(Deployment(key="S3-b", location_id="S3", lat=lat, lon=lon, start=f"2024-06-01T00:00:00{TZ}",
                                 end=f"2024-06-04T00:00:00{TZ}"))
        s.add_all([*deps.values(), *second])
        names = sorted({n for n, *_ in SIGHTINGS})
        animals = {n: Individual(name=n, species_id=jaguar.id) for n in names}
        animals["Oce1"] = Individual(name="Oce1", species_id=ocelot.id)
        s.add_all(animals.values())
        s.flush()
        k = 0
        rows = [*SIGHTINGS, *[("Lefty1", "S3", 4, "U")] * unset]
        for name, station, day, codes in rows:
            for code in codes:
                k += 1
                photo = _photo(s, k, deployment=deps[station], taken_at=f"2024-06-{day:02d}T21:{k % 60:02d}:00{TZ}")
                img = _annotation(s, photo, jaguar, animals[name])
                img.flank = FLANKS[code]
        for day, code in ((2, "L"), (5, "R")):
            k += 1
            photo = _photo(s, k, deployment=deps["S2"], taken_at=f"2024-06-{day:02d}T22:00:00{TZ}")
            _annotation(s, photo, ocelot, animals["Oce1"]).flank = FLANKS[code]
        s.commit()
    cat.close()


@pytest.fixture(scope="module")
def flank_catalogue(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("flanks") / "rosette-data"
    build_flank_catalogue(data_dir)
    return data_dir


def _study(data_dir: Path, **options):
    cat = open_catalogue(data_dir)
    try:
        return catalogue_flank_study(cat, **options)
    finally:
        cat.close()


def _cli(capsys, data_dir: Path, *args: str) -> tuple[int, str, str]:
    rc = cli_main(["--data-dir", str(data_dir), "density", "--flanks", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_identities_and_links_are_read_from_the_flank_labels(flank_catalogue):
    study = _study(flank_catalogue, species=JAGUAR)
    assert study.left_identities == ("Lefty1", "Lefty2")
    assert study.right_identities == ("Righty1", "Righty2")
    assert study.both_side_animals == ("Both1", "Both2")
    assert study.known_links == ("Linked1", "Linked2")
    assert study.links == (("Linked1", "Linked1"), ("Linked2", "Linked2"))
    assert study.no_flank == {"front": 1}  # Front1 is no identity at all
    assert "Front1" not in {c.identity for c in study.captures}
    data = flank_data(study.captures, study.stations, study.links)
    assert (data.n_left - data.n_fixed, data.n_right - data.n_fixed) == (2, 2)
    assert (data.n_both, data.n_fixed - data.n_both) == (2, 2)


def test_a_both_side_capture_only_where_two_cameras_worked(flank_catalogue):
    study = _study(flank_catalogue, species=JAGUAR)
    cameras = {st.name: st.cameras for st in study.stations}
    assert len(cameras["S1"]) == 8  # the 9th day has no camera working: not an occasion
    assert cameras["S1"] == (2,) * 8
    assert cameras["S3"] == (2, 2, 2, 1, 1, 1, 1, 1)  # its second camera came down after day 3
    assert all(cameras[n] == (1,) * 8 for n in ("S2", "S4", "S5", "S6"))
    both = sorted((c.identity, c.station, c.occasion) for c in study.captures if c.flank == "B")
    assert both == [("Both1", "S1", 2), ("Both2", "S3", 2)]
    # both flanks at one camera are two one-side captures, never a B
    at_s3 = sorted(c.flank for c in study.captures if c.identity == "Linked2" and c.station == "S3")
    assert at_s3 == ["L", "R"]
    at_s4 = sorted(c.flank for c in study.captures if c.identity == "Linked1" and c.station == "S4")
    assert at_s4 == ["L", "R"]
    # a camera replaced at a moment is one camera, two side by side are two
    day = [(0, 12), (12, 24)]
    assert most_at_once(day, 0, 24) == 1 and most_at_once([(0, 24), (6, 18)], 0, 24) == 2


def test_unset_flanks_refuse_the_study_naming_how_many(tmp_path, capsys):
    data_dir = tmp_path / "rosette-data"
    build_flank_catalogue(data_dir, unset=3)
    with pytest.raises(CatalogueError, match=r"^3 of the 24 Panthera onca detection\(s\) have no flank set"):
        _study(data_dir, species=JAGUAR)
    rc, out, err = _cli(capsys, data_dir, "--species", JAGUAR, "--iterations", "200")
    errors = [line for line in err.splitlines() if not line.startswith("[")]
    assert rc == 1 and out == ""
    assert len(errors) == 1 and "3 of the 24" in errors[0] and "Mask or Match review" in errors[0], err


def test_nothing_to_fit_and_no_one_flank_identity_are_refused(flank_catalogue, capsys):
    with pytest.raises(CatalogueError, match="ordinary density applies"):
        _study(flank_catalogue, species=OCELOT)
    rc, out, err = _cli(capsys, flank_catalogue, "--species", JAGUAR, "--from", "2024-06-08", "--to", "2024-06-08")
    assert rc == 1 and out == "" and "nothing to fit" in err, err
    rc, out, err = _cli(capsys, flank_catalogue, "--species", OCELOT)
    assert rc == 1 and "without --flanks" in err, err


def test_the_request_fits_the_catalogue_without_files():
    request = PartialIdRequest(species=JAGUAR, occasion_days=2, date_from="2024-06-01")
    assert not request.from_files and request.buffer_m is None
    assert PartialIdRequest.from_dict(request.to_dict()) == request
    with pytest.raises(ValueError, match="or neither to fit the catalogue"):
        PartialIdRequest(traps="t.txt")


def test_a_short_fit_through_the_command_prints_the_density_keys(flank_catalogue, capsys, monkeypatch):
    # short chains: the keys and what the fit rests on are checked here, not the convergence
    fit = pid.fit_partial_id
    monkeypatch.setattr(pid, "fit_partial_id", lambda *a, **k: fit(*a, **{**k, "rhat_limit": math.inf, "min_ess": 0}))
    rc, out, err = _cli(capsys, flank_catalogue, "--species", JAGUAR, "--chains", "2", "--iterations", "300",
                        "--json")
    answer = json.loads(out)
    assert rc == 0, answer.get("reason")
    for key in ("D_per_100km2", "ci_low", "ci_high", "sigma_m", "N", "N_ci_low", "N_ci_high", "linked_pairs",
                "rhat_max", "ess_min", "link_probabilities"):
        assert key in answer, key
    assert answer["source"] == "catalogue" and not answer["refused"]
    assert answer["study"] == {"stations": 6, "one_camera_occasions": 37, "two_camera_occasions": 11,
                               "left_identities": 2, "right_identities": 2, "both_side_animals": 2,
                               "known_links": 2}
    assert answer["catalogue"]["species"] == JAGUAR and answer["catalogue"]["buffer_default"]
    assert answer["catalogue"]["buffer_m"] > 0 and answer["catalogue"]["epsg"]
    # the known links come back as certain, the unlinked pairs as probabilities
    known = {(r["left"], r["right"]) for r in answer["link_probabilities"] if r["known"]}
    assert known == {("Linked1", "Linked1"), ("Linked2", "Linked2"), ("Both1", "Both1"), ("Both2", "Both2")}
    assert all(0 < r["probability"] <= 1 for r in answer["link_probabilities"])
