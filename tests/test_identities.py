"""Identification uncertainty in the population estimates (core.field.identities), on simulated studies with known
identities (tests/identity_sim.py): the distributions of one detection, the imputation's histories and the combined
interval. The coverage of the oracle estimate and the review priority against random reviews are checked over many
studies in tests/test_identities_study.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.field import population as pop
from core.field import identities as ids
from tests.identity_sim import simulate


def test_match_distribution_is_bayes_rule_over_the_exclusive_answers():
    # base rate 0.2: p = 0.5 is a likelihood ratio of 4, p = 0.2 one of 1; prior of new 0.1 spread over 2
    probs, p_new = ids.match_distribution([0.5, 0.2], prior_new=0.1, pair_base_rate=0.2)
    w = np.array([0.45 * 4, 0.45 * 1, 0.1])
    assert probs == pytest.approx(w[:2] / w.sum())
    assert p_new == pytest.approx(w[2] / w.sum())
    assert probs.sum() + p_new == pytest.approx(1.0)
    assert ids.match_distribution([], prior_new=0.3, pair_base_rate=0.5)[1] == 1.0
    with pytest.raises(ValueError, match="base rate"):
        ids.match_distribution([0.5], prior_new=0.1, pair_base_rate=0.0)


def test_an_animal_caught_often_is_the_likelier_owner_of_a_photo():
    # detections 0, 1 and 3: shares (0+1) : (1+1) : (3+1); equal likelihood ratios leave the prior's order
    assert ids.capture_prior([0, 1, 3]) == pytest.approx(np.array([1, 2, 4]) / 7)
    probs, p_new = ids.match_distribution([0.2, 0.2, 0.2], prior_new=0.3, pair_base_rate=0.2,
                                          prior=ids.capture_prior([0, 1, 3]))
    assert probs == pytest.approx(0.7 * np.array([1, 2, 4]) / 7) and p_new == pytest.approx(0.3)
    probs, p_new = ids.distribution_with_p_new([0.5, 0.2], p_new=0.4, pair_base_rate=0.2, prior=[1, 3])
    assert probs == pytest.approx(0.6 * np.array([4 * 1, 1 * 3]) / 7) and p_new == 0.4
    with pytest.raises(ValueError, match="2 shares"):
        ids.match_distribution([0.5, 0.2], prior_new=0.1, pair_base_rate=0.2, prior=[1.0])


def test_p_new_is_read_at_the_studys_share_of_new_animals():
    # odds 1 fitted where 30% were new, read where 10% are: odds (1/9) / (3/7) = 7/27
    assert ids.shift_p_new(0.5, fitted_rate=0.3, study_rate=0.1) == pytest.approx(7 / 34)
    assert ids.shift_p_new(np.array([0.2, 0.9]), fitted_rate=0.2, study_rate=0.2) == pytest.approx([0.2, 0.9])
    with pytest.raises(ValueError, match="study share"):
        ids.shift_p_new(0.5, fitted_rate=0.3, study_rate=1.0)
    keep, probs, p_new = ids.unit_distribution([0.9, 0.1, 0.5], same_probability=lambda s, r: s,
                                               pair_base_rate=0.5, p_new=0.25, floor=0.05)
    assert list(keep) == [0, 2] and p_new == 0.25  # the individual at 0.1 (odds 1/9 of 9 + 1 + 1/9) dropped
    assert probs == pytest.approx(0.75 * np.array([9, 1]) / (9 + 1 + 1 / 9))


def test_each_draw_redraws_the_share_of_new_animals():
    """30 unreviewed photos, each new with probability 0.2 at the Good-Turing share 4 / 20: with the share's own
    uncertainty drawn, the number of new animals per draw keeps its mean and spreads wider than a binomial's;
    a machine identity keeps its weight."""
    units = tuple(ids.UncertainUnit(k, occasions=(0,), candidates=(0,), probabilities=(0.8,)) for k in range(30))
    machine = ids.UncertainUnit("m", occasions=(0,), candidates=(0,), probabilities=(0.8,), provenance="machine")
    fixed = ids.ImputationInput(n_occasions=2, individuals=("A",), fixed=[(0, 1)], units=(*units, machine))
    drawn = ids.ImputationInput(n_occasions=2, individuals=("A",), fixed=[(0, 1)], units=(*units, machine),
                                new_share=(4, 20))
    a = ids.sample_identities(fixed, 4000, np.random.default_rng(0)) >= 1
    b = ids.sample_identities(drawn, 4000, np.random.default_rng(0)) >= 1
    assert a[:, :30].sum(axis=1).mean() == pytest.approx(6.0, abs=0.2)
    assert b[:, :30].sum(axis=1).mean() == pytest.approx(6.0 * 4.5 / 4, rel=0.1)  # Gamma(f1 + 1/2) has mean 4.5
    assert b[:, :30].sum(axis=1).std() > 1.5 * a[:, :30].sum(axis=1).std()
    assert b[:, 30].mean() == pytest.approx(0.2, abs=0.02)
    with pytest.raises(ValueError, match="new_share"):
        ids.ImputationInput(n_occasions=2, individuals=("A",), fixed=[(0, 1)], new_share=(1, 0))


def test_good_turing_prior_of_a_new_animal():
    assert ids.good_turing_new([1, 1, 3, 5]) == pytest.approx(2 / 10)
    assert ids.good_turing_new([]) == 1.0
    assert ids.good_turing_new([2, 2]) == pytest.approx(0.5 / 4)  # no singleton: half of one, never 0


def test_machine_identity_keeps_its_probability_as_weight():
    cands, probs = ids.machine_distribution(3, 0.8, [3, 5], [0.5, 0.3], 0.2)
    assert cands == (3, 5)
    assert probs[0] == 0.8
    assert probs[1] == pytest.approx(0.2 * 0.3 / 0.5)  # the rest spread as the match distribution spreads it
    assert 1 - sum(probs) == pytest.approx(0.2 * 0.2 / 0.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        ids.machine_distribution(3, 1.2, [3], [1.0], 0.0)


@pytest.mark.parametrize("bad", [0, -1, 10_001, 2.5, True, "200"])
def test_draws_out_of_range_are_refused_with_the_range(bad):
    with pytest.raises(ValueError, match="from 1 to 10,000"):
        ids.check_draws(bad)


def test_every_identity_confirmed_gives_exactly_the_decided_answer():
    st = simulate(11)
    decided = pop.estimate_all(st.histories())
    rows = {a: k for k, a in enumerate(sorted(set(st.animal.tolist())))}
    fixed = np.column_stack([[rows[a] for a in st.animal], st.occasion])
    inp = ids.ImputationInput(n_occasions=st.n_occasions, individuals=tuple(rows), fixed=fixed)
    result = ids.impute(inp, draws=200, seed=3)
    assert "identification uncertainty is the answer as decided" in result.notes[0]
    for dec, unc in zip(decided, result.estimates):
        assert (unc.model, unc.N, unc.ci_low, unc.ci_high) == (dec.model, dec.N, dec.ci_low, dec.ci_high)
        assert unc.share_from_identification in (0.0, None)


def test_a_certain_unit_rebuilds_the_histories_as_decided():
    # individual 0 seen on occasions 0 and 2, individual 1 on 1; an uncertain event on occasions 1 and 3 that is
    # individual 0 with probability 1: every draw is the study with that event assigned to 0
    inp = ids.ImputationInput(n_occasions=4, individuals=("A", "B"), fixed=[(0, 0), (0, 2), (1, 1)],
                              units=(ids.UncertainUnit("e1", occasions=(1, 3), candidates=(0,),
                                                       probabilities=(1.0,)),))
    labels = ids.sample_identities(inp, 50, np.random.default_rng(0))
    assert (labels == 0).all()
    per = ids.estimate_draws(inp, labels)
    want = pop.estimate_all(np.array([[1, 1, 1, 1], [0, 1, 0, 0]]))
    for e in want:
        assert (per.N[e.model] == e.N).all() or (np.isnan(per.N[e.model]).all() and math.isnan(e.N))


def test_new_animals_are_shared_when_two_photos_look_alike():
    def units(pairwise: float) -> ids.ImputationInput:
        new = (ids.UncertainUnit("u1", occasions=(1,)), ids.UncertainUnit("u2", occasions=(2,)))
        pw = np.array([[0.0, pairwise], [pairwise, 0.0]])
        return ids.ImputationInput(n_occasions=3, individuals=("A",), fixed=[(0, 0)], units=new, pairwise=pw)

    rng = np.random.default_rng(1)
    alike = ids.sample_identities(units(0.999), 2000, rng)
    apart = ids.sample_identities(units(0.0), 2000, rng)
    half = ids.sample_identities(units(0.5), 4000, rng)
    assert (alike[:, 0] == 1).all()  # the first new animal: K + its first unit
    assert np.mean(alike[:, 1] == alike[:, 0]) > 0.99
    assert (apart[:, 1] == 2).all()
    assert np.mean(half[:, 1] == half[:, 0]) == pytest.approx(0.5, abs=0.03)


def test_cancel_stops_the_draws_and_keeps_nothing():
    st = simulate(12)
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 5

    with pytest.raises(ids.ImputationCancelled, match="stopped after 5 of 200 draws"):
        ids.impute(st.input(), draws=200, seed=0, should_stop=stop)


def test_combined_interval_lies_between_the_draws_and_holds_both_errors():
    N = np.array([40.0, 50.0, 60.0])
    low, high = np.array([33.0, 41.0, 48.0]), np.array([60.0, 72.0, 90.0])
    M = np.array([30.0, 35.0, 40.0])
    c = ids.combine_draws("Mh-Chao", N, low, high, M)
    assert c.N == 50.0
    assert 33.0 <= c.ci_low <= 48.0 and 60.0 <= c.ci_high <= 90.0
    assert c.ci_high - c.ci_low > np.mean(high - low)  # wider than the draws' own intervals on average
    assert 0 < c.share_from_identification < 1
    one = ids.combine_draws("Mh-Chao", N[:1], low[:1], high[:1], M[:1])
    assert (one.ci_low, one.ci_high) == (33.0, 60.0)


def test_draws_whose_n_is_m_keep_the_room_their_interval_leaves_above_m():
    """Two draws without singletons (N = M = 10, Mh-Chao's interval [10, 12] and [10, 14]): each is a half-normal
    above M whose 97.5% point is its upper end, sigma = (high - M) / Phi^-1(0.9875); the mixture's 97.5% quantile
    solves 0.5 (2 Phi(x'/sa) - 1) + 0.5 (2 Phi(x'/sb) - 1) = 0.975 with x' = x - 10, and lies between the two
    ends. As point masses at M (the interval [M, M]) the answer would have been 10-10."""
    from scipy import stats

    N, M = np.array([10.0, 10.0]), np.array([10.0, 10.0])
    c = ids.combine_draws("Mh-Chao", N, np.array([10.0, 10.0]), np.array([12.0, 14.0]), M)
    sa, sb = 2 / stats.norm.ppf(0.9875), 4 / stats.norm.ppf(0.9875)
    cdf = 0.5 * (2 * stats.norm.cdf((c.ci_high - 10) / sa) - 1) + 0.5 * (2 * stats.norm.cdf((c.ci_high - 10) / sb) - 1)
    assert cdf == pytest.approx(0.975, abs=1e-8) and 12.0 < c.ci_high < 14.0
    assert c.N == 10.0 and 10.0 <= c.ci_low < 10.1
    points = ids.combine_draws("Mh-Chao", N, np.array([10.0, 10.0]), np.array([10.0, 10.0]), M)
    assert (points.ci_low, points.ci_high) == (10.0, 10.0)


def test_the_basis_words_name_the_provenance_and_line_up_the_side_by_side_table():
    from jobs.actions.identities import SIDE_BY_SIDE_HEADERS, basis_table_lines

    counts = {"curator": 7, "machine": 2, "unreviewed": 3}
    decided = basis_table_lines({"identities": "decided", "provenance_counts": counts}, headers=SIDE_BY_SIDE_HEADERS,
                                confirmed_header="Confirmed only: N", rows=[["M0", "12"] + [""] * 4])
    assert decided == ["Identities as decided (every assigned annotation as assigned): 7 annotation(s) identified by "
                       "a curator, 2 by a machine, 3 unreviewed."]
    rows = [["M0", "12", "10–15", "11", "9–16", "40%"], ["Mh-Chao", "14", "11–22", "13", "10–25", "35%"]]
    lines = basis_table_lines({"identities": "confirmed", "provenance_counts": counts}, headers=SIDE_BY_SIDE_HEADERS,
                              confirmed_header="Confirmed only: N", rows=rows)
    assert "Confirmed only: N" in lines[1] and "With identification uncertainty" not in lines[1]
    # the columns line up: each row's second cell starts where the header's does
    start = lines[1].index("As decided: N")
    assert lines[2][start:].startswith("12") and lines[3][start:].startswith("14")
    assert all(line == line.rstrip() for line in lines)
