"""Diel activity and overlap checked against the R package overlap's own figures (inst/tests/testthat/test-all.R,
data simulatedData shipped in tests/fixtures/overlap with its GPL attribution), against identities any density
and overlap must satisfy, and against bad input."""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime, time
from pathlib import Path

import numpy as np
import pytest
from scipy.special import i0e

from core.field.capthist import Record, camtrapr_csv_text
from core.field.activity import (
    MIN_DETECTIONS,
    TWO_PI,
    bandwidth,
    boot_ci,
    bootstrap_overlap,
    clock_radians,
    density_fit,
    fit_activity,
    fit_groups,
    overlap,
    overlap_estimates,
    overlap_true,
    parse_record_table,
    read_record_table,
    times_to_radians,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "overlap"


def _observations() -> dict[str, np.ndarray]:
    with open(FIXTURES / "simulatedData_obs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {name: np.array([float(r["radians"]) for r in rows if r["series"] == name])
            for name in ("tigerObs", "pigObs")}


def _true_densities() -> dict[str, np.ndarray]:
    with open(FIXTURES / "simulatedData_true.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {name: np.array([float(r[name]) for r in rows]) for name in ("tigerTrue", "pigTrue")}


TIGER, PIG = _observations()["tigerObs"], _observations()["pigObs"]


# --------------------------------------------------------------------------- overlap's own figures


def test_the_fixture_is_overlaps_simulated_data_unchanged():
    """test-all.R 'built-in data sets are unchanged': sizes and means to 6 decimals."""
    true = _true_densities()
    assert TIGER.size == 100 and PIG.size == 80 and true["tigerTrue"].size == 128
    assert round(TIGER.mean(), 6) == 3.248677
    assert round(PIG.mean(), 6) == 3.328342
    assert round(true["tigerTrue"].mean(), 6) == 0.157957
    assert round(true["pigTrue"].mean(), 6) == 0.157913


def test_overlap_true_of_the_true_densities_is_overlaps():
    true = _true_densities()
    assert overlap_true(true["tigerTrue"], true["pigTrue"]) == pytest.approx(0.2910917, abs=1e-6)


@pytest.mark.parametrize(("sample", "kappa", "expected"), [
    ("tigerObs", 30, [0.02440435, 0.44522913, 0.02179983, 0.50513539, 0.02440435]),
    ("pigObs", 10, [7.877244e-06, 4.522317e-02, 4.622752e-01, 1.216268e-01, 7.877244e-06]),
])
def test_density_fit_gives_overlaps_values(sample, kappa, expected):
    x = _observations()[sample]
    got = density_fit(x, [0, math.pi / 2, math.pi, 3 * math.pi / 2, 2 * math.pi], kappa)
    assert np.max(np.abs(got - expected)) < 1e-4
    assert got == pytest.approx(expected, rel=1e-6)  # overlap's own tolerance is 1e-7 on these rounded figures


def test_bandwidth_is_overlaps():
    assert abs(bandwidth(TIGER) - 29.9065) < 1e-4
    assert abs(bandwidth(PIG) - 10.42076) < 1e-4


def test_dhat1_dhat4_dhat5_of_tiger_against_pig_are_overlaps():
    est = overlap_estimates(TIGER, PIG)
    for name, expected in (("Dhat1", 0.29086), ("Dhat4", 0.26920), ("Dhat5", 0.22750)):
        assert abs(est[name] - expected) < 1e-4, name
        assert round(est[name], 5) == expected, name
    assert round(est["Dhat4"], 6) == 0.269201


def test_adjusted_and_skipped_estimators_are_overlaps():
    est = overlap_estimates(TIGER, PIG, adjust=(1.2, 1.5, 1))
    assert [round(est[k], 5) for k in ("Dhat1", "Dhat4", "Dhat5")] == [0.31507, 0.28849, 0.23750]
    only4 = overlap_estimates(TIGER, PIG, adjust=(None, 1, None))
    assert math.isnan(only4["Dhat1"]) and math.isnan(only4["Dhat5"])
    assert round(only4["Dhat4"], 6) == 0.269201


def test_overlap_gives_the_estimates_the_bandwidths_and_overlaps_advice():
    result = overlap(TIGER, PIG)
    assert (result.n_a, result.n_b) == (100, 80)
    assert result.dhat4 == pytest.approx(0.269201, abs=1e-6)
    assert result.bandwidth_a == pytest.approx(29.9065, abs=1e-4)
    assert result.recommended == "Dhat4"  # the smaller sample (80) has more than 75 times
    assert result.bootstrap is None and result.interval() is None
    assert overlap(TIGER[:70], PIG).recommended == "Dhat1"


def test_the_smoothed_bootstrap_centres_where_overlaps_does_and_its_interval_holds_the_true_overlap():
    """overlap's bootstrap(tigerObs, pigObs, nb = 99) averages 0.345504 (Dhat1) and 0.33061 (Dhat4) with R's
    random numbers; ours draw from the same fitted densities with numpy's, so the means agree within the Monte
    Carlo error of 99 resamples (sd about 0.045, so about 0.005), not to the digit."""
    result = overlap(TIGER, PIG, bootstrap=400, seed=20260)
    assert abs(result.bootstrap["Dhat1"].mean - 0.345504) < 0.02
    assert abs(result.bootstrap["Dhat4"].mean - 0.33061) < 0.02
    assert result.bootstrap["Dhat4"].n_resamples == 400
    true = overlap_true(_true_densities()["tigerTrue"], _true_densities()["pigTrue"])
    low, high = result.interval()  # basic0 of the recommended Dhat4
    assert low < true < high
    assert low < result.dhat4 < high
    assert 0.1 < high - low < 0.3  # two samples of 80-100 times: an interval about ±0.09 wide, as overlap gives
    assert result.bootstrap["Dhat4"].interval == result.bootstrap["Dhat4"].intervals["basic0"]
    again = bootstrap_overlap(TIGER, PIG, n_resamples=5, seed=7)
    assert np.array_equal(again, bootstrap_overlap(TIGER, PIG, n_resamples=5, seed=7))
    assert not np.array_equal(again, bootstrap_overlap(TIGER, PIG, n_resamples=5, seed=8))


@pytest.mark.parametrize("sizes", [(50, 60), (100, 80), (1500, 2500)])
def test_each_bootstrap_row_is_overlapest_of_a_resample_drawn_from_the_fitted_densities(sizes):
    """resample(smooth = TRUE) draws each time from the 511 distinct points of a 512-point grid on [0, 2π] with
    chances proportional to the fitted density there; bootEst then runs overlapEst on the resample. Redo both
    here with the public functions and the same seeded draws (the bootstrap's fast path must agree), at sizes
    where overlapEst evaluates at the times (up to 140 in all), interpolates on its grid, and at larger ones."""
    rng = np.random.default_rng(3)
    a = np.mod(np.concatenate([TIGER, rng.vonmises(1.6, 4.0, max(0, sizes[0] - TIGER.size))]), TWO_PI)[:sizes[0]]
    b = np.mod(np.concatenate([PIG, rng.vonmises(3.3, 2.0, max(0, sizes[1] - PIG.size))]), TWO_PI)[:sizes[1]]
    grid = np.linspace(0.0, TWO_PI, 512)[:-1]
    chances = [density_fit(x, grid, bandwidth(x)) for x in (a, b)]
    chances = [c / c.sum() for c in chances]
    draws = np.random.default_rng(11)
    rows = bootstrap_overlap(a, b, n_resamples=3, seed=11)
    for row in rows:
        resample_a = np.repeat(grid, draws.multinomial(a.size, chances[0]))
        resample_b = np.repeat(grid, draws.multinomial(b.size, chances[1]))
        plain = overlap_estimates(resample_a, resample_b)
        assert row == pytest.approx([plain["Dhat1"], plain["Dhat4"], plain["Dhat5"]], abs=1e-10)


def test_results_serialise_as_plain_json():
    skipped = json.loads(json.dumps(overlap(TIGER, PIG, adjust=(None, 1, None)).as_dict(), allow_nan=False))
    assert skipped["Dhat1"] is None and skipped["Dhat5"] is None and skipped["bootstrap"] is None
    assert skipped["Dhat4"] == pytest.approx(0.269201, abs=1e-6)
    booted = json.loads(json.dumps(overlap(TIGER, PIG, bootstrap=40, seed=1).as_dict(), allow_nan=False))
    dhat4 = booted["bootstrap"]["Dhat4"]
    assert dhat4["ci_method"] == "basic0" and [dhat4["ci_low"], dhat4["ci_high"]] == dhat4["intervals"]["basic0"]
    assert dhat4["ci_low"] < booted["Dhat4"] < dhat4["ci_high"]
    assert dhat4["n_resamples"] == 40 and booted["recommended"] == "Dhat4"
    curve = json.loads(json.dumps(fit_activity(PIG, label="pig").as_dict(n_grid=64), allow_nan=False))
    assert curve["label"] == "pig" and curve["n"] == 80 and len(curve["hours"]) == 64 == len(curve["density_per_hour"])
    assert curve["bandwidth"] == pytest.approx(10.42076, abs=1e-4)


def test_boot_ci_on_numbers_worked_by_hand():
    # 999 values 0.001 .. 0.999: ranks 25 and 975 are whole, so perc is those order statistics
    bt = np.arange(1, 1000) / 1000.0
    ci = boot_ci(0.4, bt)
    assert ci["perc"] == pytest.approx((0.025, 0.975))
    assert ci["basic0"] == pytest.approx((0.025 - 0.1, 0.975 - 0.1))  # bias = mean 0.5 - 0.4
    assert ci["basic"] == pytest.approx((0.8 - 0.975, 0.8 - 0.025))
    merr = np.std(bt, ddof=1) * 1.959964
    assert ci["norm0"] == pytest.approx((0.4 - merr, 0.4 + merr), abs=1e-6)
    assert ci["norm"] == pytest.approx((0.3 - merr, 0.3 + merr), abs=1e-6)
    # 99 values 1 .. 99: rank 2.5 lies between the 2nd and 3rd, interpolated on the normal scale:
    # (qnorm(.025) - qnorm(.02)) / (qnorm(.03) - qnorm(.02)) = 0.093785 / 0.172955 = 0.54225
    ci = boot_ci(50.0, np.arange(1, 100, dtype=float))
    assert ci["perc"] == pytest.approx((2.54225, 97.45775), abs=1e-4)
    assert all(math.isnan(v) for v in boot_ci(0.5, np.linspace(0, 1, 20))["perc"])  # too few for 95 %


# --------------------------------------------------------------------------- identities


def test_a_sample_overlaps_itself_completely():
    true = _true_densities()
    assert overlap_true(true["tigerTrue"], true["tigerTrue"]) == pytest.approx(1.0, abs=1e-12)
    est = overlap_estimates(PIG, PIG)
    assert [est[k] for k in ("Dhat1", "Dhat4", "Dhat5")] == pytest.approx([1.0, 1.0, 1.0], abs=1e-12)


@pytest.mark.parametrize("n", [100, 3000])
def test_an_activity_density_integrates_to_one_over_the_day(n):
    rng = np.random.default_rng(n)
    times = np.mod(np.concatenate([rng.vonmises(1.2, 8.0, n // 2), rng.vonmises(4.5, 3.0, n - n // 2)]), TWO_PI)
    fit = fit_activity(times)
    grid = np.linspace(0.0, TWO_PI, 4097)[:-1]  # a periodic rectangle rule is exact to rounding for these curves
    assert fit.density(grid).mean() * TWO_PI == pytest.approx(1.0, abs=1e-9)
    hours, per_hour = fit.curve(n_grid=2049, per_hour=True)
    assert hours[0] == 0.0 and hours[-1] == 24.0
    assert per_hour[:-1].mean() * 24.0 == pytest.approx(1.0, abs=1e-9)


def test_the_fourier_form_used_for_large_samples_is_the_kernel_sum():
    rng = np.random.default_rng(5)
    x = np.mod(rng.vonmises(2.0, 1.5, 5000), TWO_PI)
    at = np.linspace(0.0, TWO_PI, 300)
    kappa = 45.0
    naive = np.array([np.exp(kappa * np.cos(t - x)).sum() for t in at]) / (x.size * TWO_PI * np.i0(kappa))
    assert density_fit(x, at, kappa) == pytest.approx(naive, rel=1e-10, abs=1e-15)


def test_a_narrow_kernel_keeps_its_tails_digits():
    """Bunched times give a large bandwidth; far from them the density is tiny and must stay positive and exact
    in its leading digits (the Fourier form alone would leave rounding noise of the peak's size there)."""
    rng = np.random.default_rng(9)
    x = np.mod(rng.vonmises(1.0, 300.0, 4000), TWO_PI)
    kappa = bandwidth(x)
    assert kappa > 1000
    at = np.linspace(0.0, TWO_PI, 400)
    naive = np.array([np.exp(kappa * (np.cos(t - x) - 1.0)).sum() for t in at]) / (x.size * TWO_PI * i0e(kappa))
    got = density_fit(x, at, kappa)
    assert np.all(got >= 0.0)
    assert got == pytest.approx(naive, rel=1e-6)


def test_rotating_both_samples_changes_no_estimate():
    angle = 1.234
    for a, b in ((TIGER, PIG), (TIGER[:60], PIG[:60])):
        assert bandwidth(np.mod(a + angle, TWO_PI)) == pytest.approx(bandwidth(a), rel=1e-9)
        assert bandwidth(np.mod(b + angle, TWO_PI)) == pytest.approx(bandwidth(b), rel=1e-9)
    # up to 140 times in all, overlapEst evaluates the densities at the times themselves: any rotation
    small, turned = overlap_estimates(TIGER[:60], PIG[:60]), overlap_estimates(
        np.mod(TIGER[:60] + angle, TWO_PI), np.mod(PIG[:60] + angle, TWO_PI))
    assert turned["Dhat4"] == pytest.approx(small["Dhat4"], abs=1e-12)
    assert turned["Dhat5"] == pytest.approx(small["Dhat5"], abs=1e-12)
    assert turned["Dhat1"] == pytest.approx(small["Dhat1"], abs=2e-3)  # Δ̂₁ sums on the 128-point grid
    # larger samples use the grid throughout: a turn by whole grid steps moves nothing
    step = 5 * TWO_PI / 127
    full, stepped = overlap_estimates(TIGER, PIG), overlap_estimates(np.mod(TIGER + step, TWO_PI),
                                                                     np.mod(PIG + step, TWO_PI))
    assert [stepped[k] for k in full] == pytest.approx([full[k] for k in full], abs=1e-9)


# --------------------------------------------------------------------------- times and record tables


def test_clock_times_become_radians_after_midnight():
    assert clock_radians(0, 0) == 0.0
    assert clock_radians(6, 0) == pytest.approx(math.pi / 2)
    assert clock_radians(18, 0, 0) == pytest.approx(3 * math.pi / 2)
    got = times_to_radians([datetime(2024, 3, 1, 12, 0, 0), time(23, 59, 59), datetime(2024, 3, 2, 0, 0, 30)])
    assert got == pytest.approx([math.pi, TWO_PI * 86399 / 86400, TWO_PI * 30 / 86400])
    with pytest.raises(ValueError, match="not a clock time"):
        clock_radians(24, 0)


def _records() -> list[Record]:
    out = []
    for i in range(12):
        out.append(Record(station="CT1", species="leopard", individual=f"L{i % 3}",
                          when=datetime(2024, 5, 1 + i, (19 + i) % 24, 15, 0), directory="d", file_name=f"{i}.jpg"))
    out.append(Record(station="CT2", species="nyala", individual="N1", when=datetime(2024, 5, 3, 9, 30, 0),
                      directory="d", file_name="n.jpg"))
    return out


def test_the_record_table_rosette_exports_reads_back_as_times_per_species(tmp_path):
    path = tmp_path / "recordTable.csv"
    path.write_text(camtrapr_csv_text(_records()))
    table = read_record_table(path)
    leopard = table.of_species("leopard")
    assert leopard.size == 12
    expected = sorted(clock_radians((19 + i) % 24, 15) for i in range(12))
    assert sorted(leopard) == pytest.approx(expected)
    assert table.of_species("nyala") == pytest.approx([clock_radians(9, 30)])
    assert set(table.individuals) == {"L0", "L1", "L2", "N1"}
    assert fit_activity(leopard, label="leopard").n == 12
    with pytest.raises(ValueError, match=r"no detection of 'tiger' \(species in it: leopard, nyala\)"):
        table.of_species("tiger")


def test_a_record_table_with_date_and_time_columns_is_read():
    text = "Station,Species,Date,Time\nA,civet,2024-01-02,21:30:00\nB,civet,2024-01-03,03:00\n"
    table = parse_record_table(text)
    assert table.of_species("civet") == pytest.approx([clock_radians(21, 30), clock_radians(3, 0)])
    assert table.when[0] == datetime(2024, 1, 2, 21, 30)


def test_a_record_table_is_thinned_to_independent_detections_as_camtrapr_does():
    text = ("Station,Species,Individual,DateTimeOriginal\n"
            "A,civet,c1,2024-01-02 21:00:00\n"
            "A,civet,c2,2024-01-02 21:20:00\n"  # 20 min after the last kept at A: same event for the species
            "A,civet,c1,2024-01-02 21:50:00\n"  # 50 min after the last kept (21:00): still that event
            "A,civet,c1,2024-01-02 22:05:00\n"  # 65 min after 21:00: a new event
            "B,civet,c1,2024-01-02 21:10:00\n"  # another station
            "A,genet,g1,2024-01-02 21:05:00\n")  # another species
    table = parse_record_table(text)
    species_events = table.independent(min_minutes=60)
    assert [w.strftime("%H:%M") for w in species_events.when] == ["21:00", "22:05", "21:10", "21:05"]
    assert species_events.of_species("civet") == pytest.approx([clock_radians(21, 0), clock_radians(22, 5),
                                                                clock_radians(21, 10)])
    per_individual = table.independent(min_minutes=60, by_individual=True)
    assert [w.strftime("%H:%M") for w in per_individual.when] == ["21:00", "21:20", "22:05", "21:10", "21:05"]
    assert len(table.independent(min_minutes=0).when) == 6


def test_unreadable_record_table_rows_are_named_and_nothing_is_read():
    text = ("Station,Species,DateTimeOriginal\n"
            "A,civet,2024-01-02 21:30:00\n"
            "A,civet,yesterday evening\n"
            "B,,2024-01-02 22:00:00\n"
            "B,civet,2024-01-02 25:00:00\n")
    with pytest.raises(ValueError) as caught:
        parse_record_table(text, source="rt.csv")
    message = str(caught.value)
    assert "rt.csv: 3 row(s) cannot be read" in message
    assert "line 3: cannot read DateTimeOriginal 'yesterday evening'" in message
    assert "line 4: no Species" in message
    assert "line 5: cannot read DateTimeOriginal '2024-01-02 25:00:00'" in message
    assert "line 2" not in message
    with pytest.raises(ValueError, match="needs the columns Species and DateTimeOriginal .* found Species, Station"):
        parse_record_table("Station,Species\nA,civet\n")


# --------------------------------------------------------------------------- bad input


def test_fewer_than_ten_detections_are_refused_with_what_to_do():
    assert MIN_DETECTIONS == 10
    with pytest.raises(ValueError) as caught:
        fit_activity(PIG[:9], label="leopard, female")
    message = str(caught.value)
    assert "leopard, female: only 9 detection(s)" in message
    assert "at least 10 independent detections" in message and "Widen the date window" in message
    assert fit_activity(PIG[:10]).n == 10
    with pytest.raises(ValueError, match="B: only 3 detection"):
        overlap(TIGER, PIG[:3])


def test_groups_too_small_are_set_aside_with_their_reason_and_the_others_fitted():
    groups = fit_groups({"M01": TIGER[:40], "F02": PIG[:4], "F03": PIG})
    assert list(groups.fits) == ["M01", "F03"]
    assert groups.fits["F03"].bandwidth == pytest.approx(10.42076, abs=1e-4)
    assert groups.fits["M01"].label == "M01"
    assert list(groups.refused) == ["F02"]
    assert groups.refused["F02"].startswith("F02: only 4 detection(s)")


def test_times_outside_the_day_are_named():
    times = list(PIG[:12])
    times[1], times[4], times[7] = 7.0, -0.1, float("nan")
    with pytest.raises(ValueError) as caught:
        fit_activity(times, label="pig")
    message = str(caught.value)
    assert "pig: 3 time(s) outside [0, 2π) radians (#2 = 7.0, #5 = -0.1, #8 = nan)" in message
    assert "radians after midnight" in message
    with pytest.raises(ValueError, match="outside"):
        fit_activity(list(PIG[:11]) + [TWO_PI])  # 2π is midnight again: give 0
    with pytest.raises(ValueError, match="must be numbers"):
        fit_activity(["dusk"] * 12)


def test_too_few_resamples_for_the_interval_asked_are_refused():
    # ranks (R + 1) · 0.025 and (R + 1) · 0.975 must lie strictly inside 1..R: 39 puts the upper one on 39 itself
    with pytest.raises(ValueError, match="a 95% interval needs at least 40 bootstrap resamples, got 39"):
        overlap(TIGER, PIG, bootstrap=39)
    assert all(math.isnan(v) for v in boot_ci(0.3, np.linspace(0.1, 0.5, 39))["perc"])
    assert not any(math.isnan(v) for v in boot_ci(0.3, np.linspace(0.1, 0.5, 40))["perc"])
    with pytest.raises(ValueError, match="a 80% interval needs at least 10 bootstrap resamples"):
        overlap(TIGER, PIG, bootstrap=9, conf=0.8)
    assert overlap(TIGER, PIG, bootstrap=10, conf=0.8, seed=0).interval() is not None
    with pytest.raises(ValueError, match="conf must be between 0 and 1"):
        overlap(TIGER, PIG, conf=95)


def test_times_all_at_one_moment_are_refused():
    with pytest.raises(ValueError, match="all 12 detections are at the same time of day"):
        fit_activity([1.0] * 12)
    with pytest.raises(ValueError, match="no bandwidth"):
        bandwidth(np.array([1.0, 1.0 + 1e-6] * 6))
