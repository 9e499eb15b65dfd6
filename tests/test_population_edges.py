"""Population estimates at the edges of what the data can say: Mt's N inside its own interval, no numbers from a
single occasion or from no individuals, one rule for camera-days in the Deployments and Population tabs, a capthist
README that names only the files written, and a full disk that names the file being written.

Published figures reproduced here:
- Kanha tigers (Karanth, Nichols, Kumar, Link & Hines 2004, PNAS 101:4854-4858): M = 26 tigers on t = 10 camera
  occasions. Program MARK's model Mt gives N = 28.051 with the log-normal 95% interval (26.413, 36.180) and
  p_j = (0.1782, 0.1782, 0.1069, 0.4634, 0.2495, 0.1426, 0.1426, 0.1426, 0.1782, 0.2852) (as recorded beside the same
  data in the tests of the wiqid R package, mikemeredith/wiqid inst/tests/testthat/test-closedCap2.R). At MARK's N
  these p_j are n_j / N for n_j = (5, 5, 3, 13, 7, 4, 4, 4, 5, 8), the animals caught on each occasion.
  MARK's N is the real maximiser of Otis et al.'s (1978) Mt likelihood and its interval is Chao's (1987) log-normal
  interval on f0 = N - M, C = exp(1.96 sqrt(ln(1 + var/f0^2))), var from the likelihood's curvature (MARK's manual,
  Cooch & White, "Program MARK: a gentle introduction", chapter 14, closed captures). Rosette reports Darroch's N
  (Otis et al. 1978, as program CAPTURE does) with Darroch's variance in the same log-normal interval.
"""

from __future__ import annotations

import errno
import itertools
import math
import re
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from scipy.special import polygamma

from app.cli import main as cli_main
from app.tabs import deployments as deployments_tab
from app.tabs import population as population_tab
from core.field.population import (
    NO_INDIVIDUALS,
    ONE_OCCASION,
    darroch_root,
    estimate_all,
    lognormal_interval,
    mh_chao_from_frequencies,
    mt_from_counts,
)
from core.field.stations import camera_days, local_period
from db.catalogue import CatalogueError
from db.models import Deployment, Image, Individual, Photo, Species
from db.session import open_catalogue
from jobs.actions import deployments as deployment_actions
from jobs.actions import population as ps
from jobs.requests.deployments import ListDeploymentsRequest
from jobs.requests.population import CapthistExportRequest, PopulationRequest

KANHA_NJ = [5, 5, 3, 13, 7, 4, 4, 4, 5, 8]
KANHA_M = 26


# --------------------------------------------------------------------------- Mt: N inside its interval


def test_mt_reproduces_mark_on_the_kanha_tigers():
    e = mt_from_counts(KANHA_NJ, individuals=KANHA_M)
    # MARK's N, the real maximiser of the Mt likelihood, and its p_j
    assert round(e.details["N_mle"], 3) == 28.051
    assert [round(n / e.details["N_mle"], 4) for n in KANHA_NJ] == [
        0.1782, 0.1782, 0.1069, 0.4634, 0.2495, 0.1426, 0.1426, 0.1426, 0.1782, 0.2852]
    # MARK's interval: the log-normal interval with the variance from the likelihood's curvature at its N,
    # -1/l''(N), l'' = psi'(N+1) - psi'(N-M+1) + sum_j [1/(N - n_j) - 1/N]
    n_mle = e.details["N_mle"]
    curvature = (polygamma(1, n_mle + 1) - polygamma(1, n_mle - KANHA_M + 1)
                 + sum(1 / (n_mle - n) - 1 / n_mle for n in KANHA_NJ))
    lo, hi, _ = lognormal_interval(KANHA_M, n_mle - KANHA_M, -1 / curvature)
    assert (round(lo, 3), round(hi, 2)) == (26.413, 36.18)  # MARK: 26.413, 36.180
    # Rosette's N is Darroch's root, a little above MARK's, and its interval (Darroch's variance) holds it
    assert e.N == pytest.approx(darroch_root(KANHA_NJ, KANHA_M))
    assert np.prod([1 - n / e.N for n in KANHA_NJ]) == pytest.approx(1 - KANHA_M / e.N, rel=1e-12)
    assert 28.7 < e.N < 28.9
    var = 1 / (1 / (e.N - 26) + 9 / e.N - sum(1 / (e.N - n) for n in KANHA_NJ))
    assert e.details["variance"] == pytest.approx(var, rel=1e-12)
    C = math.exp(1.959963984540054 * math.sqrt(math.log(1 + var / (e.N - 26) ** 2)))
    assert (e.ci_low, e.ci_high) == pytest.approx((26 + (e.N - 26) / C, 26 + (e.N - 26) * C), rel=1e-12)
    assert KANHA_M < e.ci_low < e.N < e.ci_high


def test_mt_n_just_above_m_lies_inside_its_interval():
    """8 animals on 4 occasions, nearly all recaptured: Darroch's N = 8.08, which the likelihood's integer interval
    (8 to 8: every N >= 9 is more than 3.84/2 below the peak at N = 8) left outside."""
    e = mt_from_counts([4, 5, 5, 7], individuals=8)
    assert e.N == pytest.approx(darroch_root([4, 5, 5, 7], 8)) and round(e.N, 2) == 8.08
    assert e.details["N_profile"] == 8  # the integer likelihood peak is M itself ...
    assert 8 < e.ci_low < e.N < e.ci_high  # ... but the interval is built around N, and holds it


def test_mt_every_animal_caught_on_every_occasion_is_exactly_m():
    e = mt_from_counts([8, 8, 8], individuals=8)
    assert (e.N, e.ci_low, e.ci_high) == (8, 8, 8) and e.details["variance"] == 0


@pytest.mark.parametrize("M", [2, 3, 5, 8])
def test_mt_n_inside_its_interval_for_every_small_study(M):
    checked = 0
    for t in (2, 3, 4):
        for nj in itertools.product(range(1, M + 1), repeat=t):
            if sum(nj) <= M:  # no recapture: N unbounded
                continue
            e = mt_from_counts(list(nj), individuals=M)
            assert M <= e.ci_low <= e.N <= e.ci_high, (nj, e)
            checked += 1
    assert checked > 0


# --------------------------------------------------------------------------- one occasion, no individuals


def test_one_occasion_gives_no_number_and_says_why_in_one_sentence():
    one = np.ones((48, 1), dtype=int)  # 48 animals, each seen on the only occasion
    for e in estimate_all(one):
        assert math.isnan(e.N) and math.isnan(e.ci_low) and math.isnan(e.ci_high), e
        assert e.to_dict()["N"] is None
        assert e.details["note"] == ONE_OCCASION
    assert ONE_OCCASION.endswith(".") and ONE_OCCASION.count(". ") == 0
    # Chao's formula alone would have made 48 + 48*47/2 = 1,176 of them
    assert mh_chao_from_frequencies([48]).N == pytest.approx(48 + 48 * 47 / 2)
    assert math.isnan(mh_chao_from_frequencies([48], occasions=1).N)


def test_no_individuals_gives_no_numbers_at_all():
    for e in estimate_all(np.zeros((0, 5), dtype=int)):
        assert (e.to_dict()["N"], e.to_dict()["ci_low"], e.to_dict()["ci_high"]) == (None, None, None)
        assert e.details["note"] == NO_INDIVIDUALS
    assert math.isnan(mh_chao_from_frequencies({1: 0, 2: 0}).N)


def test_two_occasions_still_give_numbers():
    x = np.array([[1, 1], [1, 0], [0, 1], [1, 1], [1, 0]])
    m0, mt, mh = estimate_all(x)
    assert all(math.isfinite(e.N) for e in (m0, mt, mh))
    assert mt.N == pytest.approx(4 * 3 / 2)  # Petersen: n1 n2 / m2


# --------------------------------------------------------------------------- camera-days: one rule for both tabs

MINUS_4 = timezone(timedelta(hours=-4))


def test_a_ten_day_deployment_is_ten_camera_days():
    noon, later = datetime(2024, 5, 1, 12, tzinfo=MINUS_4), datetime(2024, 5, 11, 12, tzinfo=MINUS_4)
    assert camera_days(noon, later) == 10  # out on 11 calendar days, but it ran 10 days
    # the same end written in UTC is the same instant, read in the deployment's local time
    assert camera_days(noon, later.astimezone(timezone.utc)) == 10
    assert local_period(noon, later.astimezone(timezone.utc)) == (datetime(2024, 5, 1, 12), datetime(2024, 5, 11, 12))
    assert camera_days(noon, datetime(2024, 5, 1, 18, tzinfo=MINUS_4)) == 0.25


def _photo(s, n: int, deployment: Deployment, taken_at: str) -> Photo:
    ph = Photo(content_hash=f"{n:064x}", original_name=f"cam/IMG_{n:04d}.JPG", blob_path=f"images/{n}.jpg",
               format="JPEG", mode="RGB", width=16, height=16, size_bytes=100, deployment=deployment,
               taken_at=taken_at)
    s.add(ph)
    return ph


def _seen(s, n: int, deployment: Deployment, taken_at: str, species: Species, who: Individual) -> None:
    ph = _photo(s, n, deployment, taken_at)
    s.add(Image(photo=ph, content_hash=ph.content_hash, original_name=ph.original_name, blob_path=ph.blob_path,
                format="JPEG", mode="RGB", width=16, height=16, size_bytes=100, species_id=species.id,
                individual=who))


NYALA = "Tragelaphus angasii"


@pytest.fixture(scope="module")
def season(tmp_path_factory):
    """Three stations, local time -04:00:
    ST1 1 May 12:00 .. 11 May 12:00 (10 camera-days; 11 calendar days), with coordinates;
    ST2 2 May 06:00 .. 4 May 22:00 (2.6667), its end written in UTC (5 May 02:00Z), with coordinates;
    ST3 3 May 00:00 .. 9 May 18:00 (6.75), no coordinates.
    In all 19.4167 camera-days. Nandi is seen at ST1 on 2 and 5 May and at ST3 on 4 May; Zuri at ST2 on 3 May."""
    data_dir = tmp_path_factory.mktemp("season") / "rosette-data"
    cat = open_catalogue(data_dir)
    with cat.unit_of_work() as s:
        nyala = Species(name=NYALA)
        s.add(nyala)
        s.flush()
        st1 = Deployment(key="ST1-a", location_id="ST1", lat=-27.8, lon=32.3, start="2024-05-01T12:00:00-04:00",
                         end="2024-05-11T12:00:00-04:00")
        st2 = Deployment(key="ST2-a", location_id="ST2", lat=-27.81, lon=32.31, start="2024-05-02T06:00:00-04:00",
                         end="2024-05-05T02:00:00Z")
        st3 = Deployment(key="ST3-a", location_id="ST3", start="2024-05-03T00:00:00-04:00",
                         end="2024-05-09T18:00:00-04:00")
        s.add_all([st1, st2, st3])
        nandi, zuri = Individual(name="Nandi", species_id=nyala.id), Individual(name="Zuri", species_id=nyala.id)
        s.add_all([nandi, zuri])
        s.flush()
        _seen(s, 1, st1, "2024-05-02T08:00:00-04:00", nyala, nandi)
        _seen(s, 2, st1, "2024-05-05T08:00:00-04:00", nyala, nandi)
        _seen(s, 3, st3, "2024-05-04T08:00:00-04:00", nyala, nandi)
        _seen(s, 4, st2, "2024-05-03T08:00:00-04:00", nyala, zuri)
        s.commit()
    try:
        yield cat
    finally:
        cat.close()


def test_deployments_and_population_tabs_count_the_same_camera_days(season):
    rows = {r.key: r for r in deployment_actions.deployments(season, ListDeploymentsRequest())}
    assert {k: round(r.active_days, 4) for k, r in rows.items()} == {"ST1-a": 10, "ST2-a": 2.6667, "ST3-a": 6.75}
    assert rows["ST1-a"].to_dict()["active_days"] == 10
    table, _, words = deployments_tab._table(season)
    assert [row[7] for row in table] == [10, 2.67, 6.75]
    assert "19.42 camera-days in all" in words

    summary = ps.population_summary(season, PopulationRequest(species=NYALA))
    assert summary["camera_days"] == pytest.approx(19.4167, abs=1e-4)
    assert summary["camera_days"] == pytest.approx(sum(r.active_days for r in rows.values()), abs=1e-4)
    assert sum(o["effort_days"] for o in summary["occasion_table"]) == pytest.approx(19.4167, abs=1e-3)
    basis = ps.basis_text(summary)
    assert "(19.42 camera-days)" in basis and "in all (the Deployments tab's count)" not in basis


def test_a_window_says_why_its_camera_days_differ(season):
    summary = ps.population_summary(season, PopulationRequest(species=NYALA, date_from="2024-05-03",
                                                              date_to="2024-05-05"))
    # 3-5 May whole days: ST1 3 days, ST2 3 May 00:00 .. 4 May 22:00 = 1.9167, ST3 3 days
    assert summary["camera_days"] == pytest.approx(7.9167, abs=1e-4)
    assert ("The deployments ran 19.42 camera-days in all (the Deployments tab's count); 7.92 of them fall in the "
            "study window, and only those give effort here.") in ps.basis_text(summary)


def test_one_occasion_says_why_in_the_population_answer(season):
    summary = ps.population_summary(season, PopulationRequest(species=NYALA, occasion_days=30))
    assert summary["occasions"] == 1 and summary["individuals"] == 2
    assert [r[1:3] for r in ps.estimate_rows(summary)] == [["no estimate", "—"]] * 3
    assert summary["notes"].count(ONE_OCCASION) == 1 and ONE_OCCASION in ps.basis_text(summary)
    assert "no estimate" in ps.summary_text(summary)


# --------------------------------------------------------------------------- capthist files


def _named_files(readme: str) -> set[str]:
    return {name for name in ps.FILES.values() if name in readme}


def test_the_readme_names_only_files_that_were_written(season, tmp_path):
    done = ps.export_capthist(season, CapthistExportRequest(species=NYALA, out=str(tmp_path / "with-traps")))
    folder = Path(done.folder)
    readme = (folder / "README.txt").read_text()
    written = {p.name for p in folder.iterdir()}
    assert _named_files(readme) - {"README.txt"} <= written and "traps.txt" in written
    assert "read.capthist('captures.txt', 'traps.txt'" in readme


def test_without_coordinates_the_readme_does_not_name_the_traps_file(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    try:
        with cat.unit_of_work() as s:
            nyala = Species(name=NYALA)
            s.add(nyala)
            s.flush()
            dep = Deployment(key="X1", location_id="X", start="2024-05-01T00:00:00-04:00",
                             end="2024-05-04T00:00:00-04:00")
            s.add(dep)
            who = Individual(name="Nandi", species_id=nyala.id)
            s.add(who)
            s.flush()
            _seen(s, 1, dep, "2024-05-01T08:00:00-04:00", nyala, who)
            _seen(s, 2, dep, "2024-05-03T08:00:00-04:00", nyala, who)
            s.commit()
        done = ps.export_capthist(cat, CapthistExportRequest(species=NYALA, out=str(tmp_path / "out")))
    finally:
        cat.close()
    folder = Path(done.folder)
    written = {p.name for p in folder.iterdir()}
    readme = (folder / "README.txt").read_text()
    assert "traps.txt" not in written and "traps.txt" not in readme
    assert _named_files(readme) <= written
    assert "read.capthist" not in readme and "secr's traps file was not written" in readme


def _full_disk_at(name: str):
    real = Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name == name:
            real(self, "partial", encoding="utf-8")  # a full disk leaves a part written
            raise OSError(errno.ENOSPC, "No space left on device")  # a failed write() names no file
        return real(self, *args, **kwargs)

    return write_text


def test_a_full_disk_names_the_file_being_written_and_keeps_no_half_set(season, tmp_path, monkeypatch):
    out = tmp_path / "elsewhere" / "capthist"
    monkeypatch.setattr(Path, "write_text", _full_disk_at("histories.inp"))
    with pytest.raises(CatalogueError) as caught:
        ps.export_capthist(season, CapthistExportRequest(species=NYALA, out=str(out)))
    message = str(caught.value)
    assert f"could not write {out / 'histories.inp'}: the disk it is on is full" in message
    assert str(season.data_dir) not in message
    assert list(out.iterdir()) == []  # captures, traps and the record table written before it are gone


def test_a_full_disk_in_the_cli_names_the_target(season, tmp_path, monkeypatch, capsys):
    out = tmp_path / "cli-out"
    monkeypatch.setattr(Path, "write_text", _full_disk_at("captures.txt"))
    rc = cli_main(["--data-dir", str(season.data_dir), "export", "capthist", str(out), "--species", NYALA])
    err = capsys.readouterr().err
    assert rc == 1 and f"could not write {out / 'captures.txt'}: the disk it is on is full" in err
    assert "Traceback" not in err


def test_a_full_disk_while_zipping_names_the_zip(season, tmp_path, monkeypatch):
    out = tmp_path / "zipped"

    def no_space(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "write", no_space)
    with pytest.raises(CatalogueError, match=rf"could not write {re.escape(str(out))}\.zip: the disk it is on is full"):
        ps.export_capthist(season, CapthistExportRequest(species=NYALA, out=str(out), as_zip=True))
    assert not Path(f"{out}.zip").exists()


# --------------------------------------------------------------------------- two species: where to choose one


@pytest.fixture(scope="module")
def two_species(tmp_path_factory):
    cat = open_catalogue(tmp_path_factory.mktemp("two-species") / "rosette-data")
    with cat.unit_of_work() as s:
        nyala, kudu = Species(name=NYALA), Species(name="Tragelaphus strepsiceros")
        s.add_all([nyala, kudu])
        s.flush()
        dep = Deployment(key="ST1-a", location_id="ST1", start="2024-05-01T00:00:00-04:00",
                         end="2024-05-04T00:00:00-04:00")
        s.add(dep)
        nandi, kobus = Individual(name="Nandi", species_id=nyala.id), Individual(name="Kobus", species_id=kudu.id)
        s.add_all([nandi, kobus])
        s.flush()
        _seen(s, 1, dep, "2024-05-01T08:00:00-04:00", nyala, nandi)
        _seen(s, 2, dep, "2024-05-02T08:00:00-04:00", kudu, kobus)
        s.commit()
    try:
        yield cat
    finally:
        cat.close()


def test_two_species_are_named_and_each_screen_says_where_to_choose(two_species, tmp_path, capsys):
    with pytest.raises(ps.SpeciesNotChosen) as caught:
        ps.population_summary(two_species, PopulationRequest())
    assert caught.value.names == (NYALA, "Tragelaphus strepsiceros")
    assert "--species" not in str(caught.value)
    words = population_tab.choose_species_text(caught.value.names)
    assert words.startswith(f"Individuals of 2 species are catalogued ({NYALA}, Tragelaphus strepsiceros): "
                            "choose one in the **Species** list above")
    assert "--species" not in words
    rc = cli_main(["--data-dir", str(two_species.data_dir), "population"])
    assert rc == 1 and "choose one with --species NAME" in capsys.readouterr().err
    rc = cli_main(["--data-dir", str(two_species.data_dir), "export", "capthist", str(tmp_path / "out")])
    assert rc == 1 and "choose one with --species NAME" in capsys.readouterr().err
    assert ps.population_summary(two_species, PopulationRequest(species=NYALA))["individuals"] == 1
