"""Identification uncertainty in the population estimates (core.field.identities), on simulated studies with known
identities (tests/identity_sim.py): the distributions of one detection, the imputation's histories, the combined
interval, its coverage of the oracle estimate, and the review priority."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

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


def test_uncertain_interval_holds_the_oracle_in_at_least_90_percent_of_40_studies(capsys):
    held = {"uncertain": 0, "confirmed": 0, "top-1": 0}
    bias: dict[str, list[float]] = {k: [] for k in held}
    for s in range(40):
        st = simulate(1000 + s, removed=0.3)
        oracle = st.oracle().N
        unc = ids.impute(st.input(), draws=200, seed=s).estimate("Mh-Chao")
        for basis, (n, lo, hi) in {"uncertain": (unc.N, unc.ci_low, unc.ci_high),
                                   "confirmed": (st.confirmed().N, st.confirmed().ci_low, st.confirmed().ci_high),
                                   "top-1": (st.top1().N, st.top1().ci_low, st.top1().ci_high)}.items():
            held[basis] += lo <= oracle <= hi
            bias[basis].append(n - oracle)
    with capsys.disabled():
        print("\nMh-Chao 95% interval holding the oracle estimate over 40 studies, 30% of identities removed: "
              + "; ".join(f"{k} {held[k]}/40, mean bias {np.mean(bias[k]):+.1f}" for k in held))
    assert held["uncertain"] >= 36


def test_reviewing_the_top_20_removes_more_identification_uncertainty_than_20_random(capsys):
    top_ident, rand_ident, top_narrow, rand_narrow = [], [], [], []
    for s in range(20):
        st = simulate(2000 + s, removed=0.3)
        inp = st.input()
        before = ids.impute(inp, draws=200, seed=s)
        e0 = before.estimate("Mh-Chao")
        ranked = ids.review_priority(inp, before)
        assert [p.variance_explained for p in ranked] == sorted((p.variance_explained for p in ranked), reverse=True)
        top = [inp.units[p.unit].key for p in ranked[:20]]
        rand = list(np.random.default_rng(s).choice([u.key for u in inp.units], size=20, replace=False))
        for chosen, ident, narrow in ((top, top_ident, top_narrow), (rand, rand_ident, rand_narrow)):
            after = ids.impute(st.input(chosen), draws=200, seed=99).estimate("Mh-Chao")
            width = after.ci_high - after.ci_low
            ident.append(width * (after.share_from_identification or 0.0))
            narrow.append((e0.ci_high - e0.ci_low) - width)
    p_ident = stats.wilcoxon(rand_ident, top_ident, alternative="greater").pvalue
    p_narrow = stats.wilcoxon(top_narrow, rand_narrow, alternative="greater").pvalue
    with capsys.disabled():
        print(f"\n20 studies, 20 reviews answered with the truth: identification part of the width left "
              f"{np.mean(top_ident):.1f} (top) vs {np.mean(rand_ident):.1f} (random), paired Wilcoxon p = "
              f"{p_ident:.2g}; whole width narrowed {np.mean(top_narrow):.1f} vs {np.mean(rand_narrow):.1f}, "
              f"p = {p_narrow:.2g}")
    assert p_ident < 0.05
