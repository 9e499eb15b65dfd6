"""SCR models beyond the null (core.field.scr_models, scr_fit, scr_select) against secr's own stored fits, the
likelihood written out term by term, and the inputs they must refuse.

The reference figures are secr 5.5.0's stored fits (``data/*.RData`` in github.com/MurrayEfford/secr, commit
712df0b): each fit's ``fit$par`` (link-scale coefficients, in ``betanames`` order) and ``-fit$minimum`` (its
log-likelihood), read with base R's ``load()`` semantics; the data are their capture histories and masks, shipped
as text in tests/fixtures/secr (see its README.md)."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core.field.capthist import Trap
from core.field.density import numerical_gradient
from core.field.scr_data import build_capture_history, read_secr_captures, read_secr_traps
from core.field.scr_errors import DensityInputError, SigmaNotEstimable
from core.field.scr_fit import fit_scr_model
from core.field.scr_likelihood import logmultinomial
from core.field.scr_mask import Mask, trapbuffer_mask
from core.field.scr_models import (
    ScrSession,
    build_sessions,
    mask_covariate_from_geojson,
    normalise_sex,
    parse_model,
    prepare_models,
    read_mask_with_covariates,
    read_secr_sex,
)
from core.field.scr_select import aic_table, format_aic_table, model_average_density, split_models

SECR = Path(__file__).parent / "fixtures" / "secr"

# secr's stored fits: coefficients (fit$par) and log-likelihood (-fit$minimum)
SECRDEMO_0 = ([1.7010691499857131, -0.978494143655482, 3.379831898920274], -759.02574573)
SECRDEMO_B = ([1.6981397445231214, -0.9537307917435194, -0.03200813324443232, 3.37986687909797], -759.01642294)
SECRDEMO_CL = ([-0.9784947308810245, 3.3798319668637142], -755.94034404)
OVENBIRD_1 = ([-0.09366333865587194, -3.560782297727519, 4.364059306663844], -931.14044323)
OVENBIRD_D = ([0.031709005961229796, -0.0638587644429462, -3.5619296999089296, 4.364109862294589], -930.72538699)
POSSUM_0 = ([0.5257882881540318, -1.4355013999560675, 3.941502472853235], -1097.10716584)
POSSUM_DS = ([2.0402595052794714, -0.0008369588275905454, -1.4349961551617803, 3.9419431372383276],
             -1096.51060586)
# their SEs, sqrt(diag(beta.vcv)) (secr's from nlm's numerical Hessian)
SECRDEMO_B_SE = [0.11953507633711448, 0.22715929829957351, 0.23459010690378085, 0.044428681123739815]
OVENBIRD_D_SE = [0.19145977842179268, 0.0701515118144222, 0.15062294292503695, 0.08114865862997404]
BLACKBEAR_0_SE = [0.09815880269716361, 0.15914064842266393, 0.06698590593731757, 0.17200752709816536]
BLACKBEAR_0 = ([-4.668965833725568, -1.6908330404245986, 6.55201265324691, -0.3340055973244159], -1164.54731094)
BLACKBEAR_H2BK = ([-4.462242527074042, -3.421369012097584, 0.7868542801377496, 2.3143793379496524,
                   6.995865446490102, -0.054902847635485676, -0.7279507084785597], -1114.10995799)


def _load(name: str, detector: str, *, sex: bool = False) -> list[ScrSession]:
    traps = read_secr_traps(SECR / f"{name}_trap.txt")
    captures = read_secr_captures(SECR / f"{name}_capt.txt")
    mask, covariates = read_mask_with_covariates(SECR / f"{name}_mask.csv")
    codes = read_secr_sex(SECR / f"{name}_capt.txt") if sex else None
    return build_sessions(captures, traps, mask, detector_type=detector, sex=codes, mask_covariates=covariates)


@pytest.fixture(scope="module")
def captdata() -> list[ScrSession]:
    """secr's captdata (single-catch traps, fitted with the multi-catch likelihood) on secr.fit's default mask."""
    traps = read_secr_traps(SECR / "trap.txt")
    history = build_capture_history(read_secr_captures(SECR / "capt.txt", fmt="XY", traps=traps), traps,
                                    detector_type="multi")
    return [ScrSession("1", history, trapbuffer_mask(history.xy, buffer_m=100))]


@pytest.fixture(scope="module")
def ovenbird() -> list[ScrSession]:
    """ovenCH: five years (2005-2009) of mist-netting, 44 nets, one bird removed (died) in 2009."""
    return _load("ovenbird", "multi")


@pytest.fixture(scope="module")
def blackbear() -> list[ScrSession]:
    return _load("blackbear", "proximity", sex=True)


@pytest.fixture(scope="module")
def secrdemo_b(captdata):
    return fit_scr_model(captdata, "g0~b")


@pytest.fixture(scope="module")
def ovenbird_d(ovenbird):
    return fit_scr_model(ovenbird, "D~Session")


# --------------------------------------------------------------------------- formulas


def test_model_formulas_parse_as_secr_writes_them():
    model = parse_model("g0 ~ b, sigma~sex")
    assert model.terms == {"g0": ("b",), "sigma": ("sex",)} and model.text == "g0~b, sigma~sex"
    assert parse_model("~1").terms == {} and parse_model("").text == "~1"
    assert parse_model("D~session + d.to.shore").of("D") == ("session", "d.to.shore")
    assert parse_model("g0~1+t").of("g0") == ("t",)
    assert split_models("g0~1; g0~b; g0~sex, sigma~sex") == ["g0~1", "g0~b", "g0~sex, sigma~sex"]
    for bad, message in (("g0~b*t", "only additive"), ("g1~b", "parameter 'g1' unknown"),
                         ("g0~b, g0~t", "two formulas"), ("g0 b", "parameter ~ terms"), ("g0~b+", "empty term")):
        with pytest.raises(DensityInputError, match=message):
            parse_model(bad)


def test_coefficient_names_follow_secr(ovenbird, blackbear):
    """secr's betanames: D.session2006... for the session factor, D.Session for the trend, g0.t2... for occasions,
    h2M for the mixture class (sex levels F, M)."""
    assert prepare_models(ovenbird, "D~session").names == (
        "D", "D.session2006", "D.session2007", "D.session2008", "D.session2009", "g0", "sigma")
    assert prepare_models(ovenbird, "D~Session, g0~t").names[:4] == ("D", "D.Session", "g0", "g0.t2")
    assert prepare_models(ovenbird, "g0~T, sigma~session", conditional=True).names[:3] == ("g0", "g0.T", "sigma")
    # blackbear.h2bk's betanames, in secr's order
    assert prepare_models(blackbear, "g0~h2+bk, sigma~h2", detectfn="EX").names == (
        "D", "g0", "g0.h2M", "g0.bkTRUE", "sigma", "sigma.h2M", "pmix.h2M")
    # sex in the full likelihood is secr's hcov mixture; with the conditional likelihood a known covariate
    assert prepare_models(blackbear, "sigma~sex", detectfn="EX").names[-2:] == ("sigma.h2M", "pmix.h2M")
    assert prepare_models(blackbear, "g0~sex", detectfn="EX", conditional=True).names == ("g0", "g0.sexM", "sigma")


# --------------------------------------------------------------------------- secr's stored fits


def test_loglik_of_secr_stored_fits_at_their_estimates(captdata, ovenbird, blackbear):
    """secrdemo.0, .b, .CL; ovenbird.model.1, .D (five sessions, a removal); blackbear.0 and .h2bk (proximity,
    exponential detection, hcov = "sex", details = list(fastproximity = FALSE)): log L to 1e-6."""
    cases = [(captdata, "~1", {}, SECRDEMO_0), (captdata, "g0~b", {}, SECRDEMO_B),
             (captdata, "~1", {"conditional": True}, SECRDEMO_CL), (ovenbird, "~1", {}, OVENBIRD_1),
             (ovenbird, "D~Session", {}, OVENBIRD_D),
             (blackbear, "~1", {"detectfn": "EX", "hcov": True, "fastproximity": False}, BLACKBEAR_0),
             (blackbear, "g0~h2+bk, sigma~h2", {"detectfn": "EX", "fastproximity": False}, BLACKBEAR_H2BK)]
    for sessions, model, options, (beta, loglik) in cases:
        prepared = prepare_models(sessions, model, **options)
        assert prepared.log_likelihood(np.array(beta)) == pytest.approx(loglik, abs=1e-6), model


def test_secrdemo_b_fit_matches_secr(secrdemo_b):
    """secrdemo.b = secr.fit(captdata, model = g0 ~ b): coefficients to 1e-4, their SEs to 0.2%, log L to 1e-5,
    from our own starts."""
    beta, loglik = SECRDEMO_B
    assert secrdemo_b.names == ("D", "g0", "g0.bTRUE", "sigma")
    np.testing.assert_allclose(secrdemo_b.beta, beta, atol=1e-4)
    assert secrdemo_b.loglik == pytest.approx(loglik, abs=1e-5)
    assert secrdemo_b.aic == pytest.approx(2 * -loglik + 8, abs=1e-4)
    assert secrdemo_b.aicc == pytest.approx(2 * -loglik + 8 + 2 * 4 * 5 / (76 - 5), abs=1e-4)  # n = 76 animals
    assert secrdemo_b.likelihood_form.startswith("multi")
    np.testing.assert_allclose(secrdemo_b.se, SECRDEMO_B_SE, rtol=2e-3)


def test_ovenbird_sessions_fit_matches_secr(ovenbird_d):
    """ovenbird.model.D = secr.fit(ovenCH, model = D ~ Session, mask = ovenmask): five sessions jointly, D with a
    linear trend over sessions, g0 and sigma shared."""
    beta, loglik = OVENBIRD_D
    assert ovenbird_d.names == ("D", "D.Session", "g0", "sigma")
    np.testing.assert_allclose(ovenbird_d.beta, beta, atol=1e-4)
    np.testing.assert_allclose(ovenbird_d.se, OVENBIRD_D_SE, rtol=2e-3)
    assert ovenbird_d.loglik == pytest.approx(loglik, abs=1e-5)
    assert ovenbird_d.n_animals == 103  # AICc's n: animals detected, summed over sessions (secr's oneline.secr)
    d0, trend = ovenbird_d.beta[:2]
    assert [s.name for s in ovenbird_d.sessions] == ["2005", "2006", "2007", "2008", "2009"]
    for r, session in enumerate(ovenbird_d.sessions):
        assert session.density_per_ha.value == pytest.approx(math.exp(d0 + trend * r), rel=1e-9)
        assert session.density_per_ha.lcl < session.density_per_ha.value < session.density_per_ha.ucl
    assert set(ovenbird_d.sessions[0].detection) == {""}  # not by sex
    doc = json.loads(json.dumps(ovenbird_d.as_dict()))
    assert list(doc["coefficients"]) == ["D", "D.Session", "g0", "sigma"]
    assert doc["sessions"][4]["D_per_100km2"]["estimate"] == pytest.approx(
        10_000 * math.exp(d0 + 4 * trend), rel=1e-9)
    assert doc["likelihood"] == "full" and doc["loglik"] == pytest.approx(loglik, abs=1e-5)


def test_density_over_a_mask_covariate_matches_secr():
    """possum.model.Ds = secr.fit(possumCH, model = D ~ d.to.shore, link = list(D = "identity")) on possummask: log L
    at secr's estimates to 1e-6, and secr's estimates are the maximum (the gradient there is small; a full fit of
    its 5,120-point mask takes about 15 s and is in tests/benchmarks/bench_density_models.py)."""
    sessions = _load("possum", "multi")
    null = prepare_models(sessions, "~1")
    assert null.log_likelihood(np.array(POSSUM_0[0])) == pytest.approx(POSSUM_0[1], abs=1e-6)
    prepared = prepare_models(sessions, "D~d.to.shore", d_link="identity")
    beta = np.array(POSSUM_DS[0])
    assert prepared.names == ("D", "D.d.to.shore", "g0", "sigma") and prepared.links["D"] == "identity"
    assert prepared.log_likelihood(beta) == pytest.approx(POSSUM_DS[1], abs=1e-6)
    scale = np.array([1.0, 500.0, 1.0, 1.0])  # d.to.shore spans about 500 m
    grad = numerical_gradient(lambda z: prepared.log_likelihood(z / scale), beta * scale)
    assert np.max(np.abs(grad)) < 0.5  # at a point 0.01 away on any coefficient it exceeds 10


def test_hcov_fit_matches_secr(blackbear):
    """blackbear.0 = secr.fit(blackbearCH, hcov = "sex", detectfn = "EX", details = list(fastproximity = FALSE)):
    g0 and sigma shared, pmix ~ h2; from our starts, coefficients to 1e-4, SEs to 0.2%, log L to 1e-5; pmix is the
    share of males among the 139 sexed bears, 58 / 139."""
    fit = fit_scr_model(blackbear, "~1", detectfn="EX", hcov=True, fastproximity=False)
    assert fit.names == ("D", "g0", "sigma", "pmix.h2M") and fit.model == "pmix~h2"
    np.testing.assert_allclose(fit.beta, BLACKBEAR_0[0], atol=1e-4)
    np.testing.assert_allclose(fit.se, BLACKBEAR_0_SE, rtol=2e-3)
    assert fit.loglik == pytest.approx(BLACKBEAR_0[1], abs=1e-5)
    session = fit.sessions[0]
    assert session.pmix["M"].value == pytest.approx(58 / 139, abs=1e-5)
    assert session.pmix["F"].value == pytest.approx(81 / 139, abs=1e-5)
    assert set(session.detection) == {""}  # g0 and sigma do not differ by sex in this model
    doc = json.loads(json.dumps(fit.as_dict()))
    assert doc["sex"] == "hcov mixture" and "occasion by occasion" in doc["likelihood_form"]


def test_hcov_mixture_matches_secr_at_its_maximum(blackbear):
    """blackbear.h2bk: g0 ~ h2 + bk, sigma ~ h2, pmix ~ h2 with hcov = "sex" (139 bears of known sex at 65 hair
    snares); the gradient of log L vanishes at secr's estimates."""
    prepared = prepare_models(blackbear, "g0~h2+bk, sigma~h2", detectfn="EX", fastproximity=False)
    assert prepared.class_mode == "mixture" and not prepared.pooled
    grad = numerical_gradient(prepared.log_likelihood, np.array(BLACKBEAR_H2BK[0]))
    assert np.max(np.abs(grad)) < 0.05


def test_sessions_with_their_own_detectors_occasions_and_masks_add_up(captdata, ovenbird):
    """captdata (100 traps, 5 occasions, its mask) and ovenbird 2005 (44 nets, 9 occasions, ovenmask) fitted
    jointly with every parameter by session: log L is the sum of the two sessions' own log-likelihoods."""
    joint = prepare_models([captdata[0], ovenbird[0]], "D~session, g0~session, sigma~session")
    assert joint.names == ("D", "D.session2005", "g0", "g0.session2005", "sigma", "sigma.session2005")
    first, second = np.array(SECRDEMO_0[0]), np.array([-0.05, -3.5, 4.3])
    beta = np.array([first[0], second[0] - first[0], first[1], second[1] - first[1], first[2],
                     second[2] - first[2]])
    alone = (prepare_models(captdata, "~1").log_likelihood(first)
             + prepare_models(ovenbird[:1], "~1").log_likelihood(second))
    assert joint.log_likelihood(beta) == pytest.approx(alone, abs=1e-8)


def test_pooled_proximity_differs_by_the_binomial_constant(blackbear):
    """secr's default for proximity detectors pools the occasions (binomial with size = occasions used) when
    nothing varies by occasion; the log-likelihood then gains sum over animals and detectors of log C(S, y)."""
    beta = np.array(BLACKBEAR_0[0])
    pooled = prepare_models(blackbear, "~1", detectfn="EX", hcov=True)
    by_occasion = prepare_models(blackbear, "~1", detectfn="EX", hcov=True, fastproximity=False)
    assert pooled.pooled and "pooled" in pooled.likelihood_form
    assert "occasion by occasion" in by_occasion.likelihood_form
    history = blackbear[0].history
    used = (history.usage > 0).sum(axis=1)
    y = (history.counts > 0).sum(axis=1)
    constant = sum(math.log(math.comb(int(s), int(k))) for row in y for s, k in zip(used, row))
    # and the multinomial term counts the pooled histories (secr pools the capture history before it counts)
    constant += logmultinomial(y) - logmultinomial(history.counts)
    assert pooled.log_likelihood(beta) - by_occasion.log_likelihood(beta) == pytest.approx(constant, abs=1e-8)
    # a learned response varies by occasion: never pooled
    assert not prepare_models(blackbear, "g0~b", detectfn="EX", hcov=True).pooled


def test_secr_test_initial_multisession_cl_both_proximity_scales():
    """secr tests/testthat/test-initial.R: smallCH = join(subset(ovenCHp, sessions = 1:3, traps = 1:20)), 28 birds
    on 20 nets over 29 occasions; CL, HHN, lambda0 = 0.037, sigma = 65.3, mask make.mask(buffer = 200, nx = 20,
    type = "trapbuffer"): log L -301.1396 with fastproximity = FALSE and -109.61114 with fastproximity = TRUE."""
    traps = read_secr_traps(SECR / "ovenCHp_joined_trap.txt")
    history = build_capture_history(read_secr_captures(SECR / "ovenCHp_joined_capt.txt"), traps,
                                    detector_type="proximity")
    assert (history.n_animals, history.n_occasions, len(traps)) == (28, 29, 20)
    session = [ScrSession("joined", history, trapbuffer_mask(history.xy, buffer_m=200, nx=20))]
    beta = np.array([math.log(0.037), math.log(65.3)])
    for fast, expected in ((False, -301.1396), (True, -109.61114)):
        prepared = prepare_models(session, "~1", detectfn="HHN", conditional=True, fastproximity=fast)
        assert prepared.pooled is fast
        assert prepared.log_likelihood(beta) == pytest.approx(expected, abs=1e-4)


# --------------------------------------------------------------------------- the likelihood's properties


def test_unknown_sex_is_mixed_and_known_sex_adds_the_class_share(blackbear):
    """With two identical classes the mixture's log L is the null model's, plus sum over known animals of
    log pmix(class); with every animal unknown, exactly the null model's."""
    null = prepare_models(blackbear, "~1", detectfn="EX", fastproximity=False)
    beta = np.array(BLACKBEAR_0[0][:3])
    base = null.log_likelihood(beta)
    mixture = prepare_models(blackbear, "g0~h2, sigma~h2", detectfn="EX", fastproximity=False)
    p_m = 0.3
    mixed_beta = np.array([beta[0], beta[1], 0.0, beta[2], 0.0, math.log(p_m / (1 - p_m))])
    sexes = blackbear[0].sex
    share = sum(math.log(p_m if s == "M" else 1 - p_m) for s in sexes)
    assert mixture.log_likelihood(mixed_beta) == pytest.approx(base + share, abs=1e-8)
    unknown = [ScrSession(s.name, s.history, s.mask, sex=tuple(None for _ in s.sex)) for s in blackbear]
    some = [ScrSession(s.name, s.history, s.mask, sex=tuple(None if i % 3 else c for i, c in enumerate(s.sex)))
            for s in blackbear]
    all_unknown = prepare_models(unknown, "g0~h2, sigma~h2", detectfn="EX", fastproximity=False)
    assert all_unknown.log_likelihood(mixed_beta) == pytest.approx(base, abs=1e-8)
    partly = prepare_models(some, "g0~h2, sigma~h2", detectfn="EX", fastproximity=False)
    known = [c for c in some[0].sex if c is not None]
    expected = base + sum(math.log(p_m if s == "M" else 1 - p_m) for s in known)
    assert partly.log_likelihood(mixed_beta) == pytest.approx(expected, abs=1e-8)
    # the classes differ: unknown animals take both, and the fit's figures are per sex
    apart = mixed_beta.copy()
    apart[2], apart[4] = 0.8, -0.1
    assert math.isfinite(partly.log_likelihood(apart)) and partly.log_likelihood(apart) != expected


def test_known_sex_covariate_and_hcov_mixture_differ_by_the_class_term(blackbear):
    """Conditional likelihood, every bear sexed: sex as a known covariate (secr's sigma.sexM) and as the hcov
    mixture differ by sum over classes of n_x log(pmix_x p._x / sum_y pmix_y p._y), secr's likelihood component 4."""
    covariate = prepare_models(blackbear, "g0~sex, sigma~sex", detectfn="EX", conditional=True, fastproximity=False)
    mixture = prepare_models(blackbear, "g0~sex, sigma~sex", detectfn="EX", conditional=True, hcov=True,
                             fastproximity=False)
    assert covariate.names == ("g0", "g0.sexM", "sigma", "sigma.sexM") and covariate.class_mode == "covariate"
    assert mixture.names == ("g0", "g0.h2M", "sigma", "sigma.h2M", "pmix.h2M")
    beta = np.array([-3.0, 0.6, 7.0, -0.2])
    pmix_m = 0.45
    pdots = mixture.class_pdots(0, np.append(beta, 0.0))
    share = np.array([1 - pmix_m, pmix_m]) * pdots
    counts = [blackbear[0].sex.count("F"), blackbear[0].sex.count("M")]
    term = sum(n * math.log(v / share.sum()) for n, v in zip(counts, share))
    assert mixture.log_likelihood(np.append(beta, math.log(pmix_m / (1 - pmix_m)))) == pytest.approx(
        covariate.log_likelihood(beta) + term, abs=1e-8)


def _loop_loglik(history, mask, g0_of, sigma, density):
    """The full likelihood with g0 by occasion and learned state, one animal, occasion and detector at a time:
    proximity (Bernoulli), count (Poisson) or multi-catch (competing hazards) detectors, half-normal."""
    n, n_occ, n_det = history.counts.shape
    d2 = ((history.xy[:, None, :] - mask.xy[None, :, :]) ** 2).sum(axis=2)
    kernel = np.exp(-d2 / (2 * sigma ** 2))
    pr = np.ones((n, mask.n_points))
    for i, s in itertools.product(range(n), range(n_occ)):
        b = history.counts[i, :s].sum() > 0
        hazards = [history.usage[k, s] * -np.log(1 - g0_of(s, b, history.counts[i, :s, k].sum() > 0) * kernel[k])
                   for k in range(n_det)]
        if history.detector_type == "multi":
            total = np.maximum(sum(hazards), 1e-300)
            hit = np.flatnonzero(history.counts[i, s])
            pr[i] *= (1 - np.exp(-total)) * hazards[hit[0]] / total if hit.size else np.exp(-total)
            continue
        for k in range(n_det):
            y = int(history.counts[i, s, k])
            if history.detector_type == "proximity":
                pr[i] *= 1 - np.exp(-hazards[k]) if y else np.exp(-hazards[k])
            else:
                pr[i] *= np.exp(-hazards[k]) * hazards[k] ** y / math.factorial(y)
    never = np.ones(mask.n_points)
    for s, k in itertools.product(range(n_occ), range(n_det)):
        never *= (1 - g0_of(s, False, False) * kernel[k]) ** history.usage[k, s]
    pdot = 1 - never.mean()
    _, sharing = np.unique(history.counts.reshape(n, -1), axis=0, return_counts=True)
    logmult = math.lgamma(n + 1) - sum(math.lgamma(c + 1) for c in sharing)
    expected = density * mask.area_ha * pdot
    return (float(np.log(pr.mean(axis=1)).sum()) - n * math.log(pdot) + logmult
            + n * math.log(expected) - expected - math.lgamma(n + 1))


@pytest.mark.parametrize("detector", ["proximity", "count", "multi"])
def test_occasion_and_learned_responses_match_the_formula_term_by_term(detector):
    rng = np.random.default_rng(4)
    usage = rng.choice([0.0, 1.0, 2.0], size=(6, 4), p=[0.1, 0.6, 0.3])
    traps = [Trap(f"T{k}", float(40 * (k % 3)), float(40 * (k // 3)), tuple(usage[k])) for k in range(6)]
    rows = [("1", f"a{i}", s + 1, f"T{k}") for i in range(7) for s in range(4) for k in range(6)
            if usage[k, s] > 0 and rng.random() < 0.18]
    if detector == "count":
        rows += rows[::3]  # some second detections at one detector on one occasion
    if detector == "multi":  # one detector per animal and occasion; animal z caught at T1 again and again
        rows = list({(r[1], r[2]): r for r in rows}.values())
        rows += [("1", "z", s + 1, "T1") for s in range(4) if usage[1, s] > 0]
    history = build_capture_history(rows, traps, detector_type=detector)
    mask = trapbuffer_mask(history.xy, buffer_m=80, nx=8)
    session = [ScrSession("1", history, mask)]
    prepared = prepare_models(session, "g0~t+b+bk")
    assert prepared.names == ("D", "g0", "g0.t2", "g0.t3", "g0.t4", "g0.bTRUE", "g0.bkTRUE", "sigma")
    assert not prepared.pooled and "occasion by occasion" in prepared.likelihood_form
    beta = np.array([math.log(3.0), -1.2, 0.3, -0.4, 0.2, 0.5, -0.7, math.log(35.0)])

    def g0_of(s, b, bk):
        eta = beta[1] + (beta[1 + s] if s else 0.0) + beta[5] * b + beta[6] * bk
        return 1 / (1 + math.exp(-eta))

    expected = _loop_loglik(history, mask, g0_of, 35.0, 3.0)
    assert prepared.log_likelihood(beta) == pytest.approx(expected, abs=1e-8)


# --------------------------------------------------------------------------- model selection


def test_aic_table_as_secr_prints_it(captdata, secrdemo_b):
    """AIC(secrdemo.0, secrdemo.b, criterion = "AICc"): from the stored log-likelihoods, AICc 1524.385 and 1526.596
    (n = 76), dAICc 2.211, weights 0.7513 and 0.2487."""
    null = fit_scr_model(captdata, "~1", start=SECRDEMO_0[0])  # from secr's estimates: the test is the table
    table = aic_table([secrdemo_b, null])
    assert [r.model for r in table] == ["~1", "g0~b"]
    assert [round(r.aicc, 3) for r in table] == [1524.385, 1526.596]
    assert table[1].delta == pytest.approx(2.211, abs=1e-3)
    assert [round(r.weight, 4) for r in table] == [0.7513, 0.2487]
    assert [round(r.aic, 3) for r in aic_table([secrdemo_b, null], criterion="AIC")] == [1524.051, 1526.033]
    text = format_aic_table(table)
    assert "dAICc" in text and "AICcwt" in text and "halfnormal" in text
    averaged = model_average_density([null, secrdemo_b], table)
    (name, d), = averaged
    eta = 0.7513 * SECRDEMO_0[0][0] + 0.2487 * SECRDEMO_B[0][0]
    assert d.value == pytest.approx(math.exp(eta), rel=1e-4)
    assert d.lcl < d.value < d.ucl
    within = [f.sessions[0].density_per_ha for f in (null, secrdemo_b)]
    assert d.se >= min(e.se for e in within) * 0.99


def test_aic_table_refuses_incomparable_fits(secrdemo_b):
    for change, message in (({"conditional": True}, "conditional and full"),
                            ({"likelihood_form": "proximity occasions pooled"}, "fastproximity"),
                            ({"class_mode": "mixture"}, "hcov"), ({"n_animals": 75}, "different data")):
        with pytest.raises(DensityInputError, match=message):
            aic_table([secrdemo_b, replace(secrdemo_b, model="other", **change)])


def test_conditional_fit_derives_density_as_secr(captdata):
    """derived(secrdemo.CL): D 5.4798074 per ha, SE 0.6445541 (secr test-derived.R), from secr's estimates."""
    cl = fit_scr_model(captdata, "~1", conditional=True, start=SECRDEMO_CL[0])
    np.testing.assert_allclose(cl.beta, SECRDEMO_CL[0], atol=1e-4)
    d = cl.sessions[0].density_per_ha
    assert d.value == pytest.approx(5.4798074, abs=1e-4) and d.se == pytest.approx(0.6445541, abs=1e-4)


# --------------------------------------------------------------------------- bad input


def _sessions_of(rows, sex=None, masks=None):
    traps = [Trap(f"T{k}", float(50 * k), 0.0, (1.0, 1.0, 1.0)) for k in range(4)]
    history_traps = {"s1": traps, "s2": traps}
    mask = masks or trapbuffer_mask(np.array([[t.x, t.y] for t in traps]), buffer_m=150, nx=10)
    return build_sessions(rows, history_traps, mask, detector_type="proximity", sex=sex)


def test_refusals_are_one_line():
    rows = [("s1", "a", 1, "T0"), ("s1", "a", 2, "T1"), ("s2", "b", 1, "T1"), ("s2", "b", 3, "T2")]
    with pytest.raises(DensityInputError, match="sex code 'X' for animal 'a' in session 's1' is not known"):
        _sessions_of(rows, sex={"a": "X", "b": "F"})
    assert normalise_sex("female") == "F" and normalise_sex("NA") is None and normalise_sex("") is None
    with pytest.raises(DensityInputError, match="session 's3' has no captures"):
        build_sessions(rows, {"s1": [Trap(f"T{k}", 50.0 * k, 0.0, (1.0,) * 3) for k in range(4)]} |
                       {n: [Trap(f"T{k}", 50.0 * k, 0.0, (1.0,) * 3) for k in range(4)] for n in ("s2", "s3")},
                       Mask(np.array([[0.0, 0.0], [50.0, 0.0]]), 50.0, None, "csv"), detector_type="proximity")
    # a session where no animal reached a second detector shares sigma with the others; none at all is refused
    lone = _sessions_of(rows[:2] + [("s2", "b", 1, "T1"), ("s2", "b", 3, "T1")])
    assert lone[1].history.n_animals == 1
    with pytest.raises(SigmaNotEstimable, match="in any session"):
        _sessions_of([("s1", "a", 1, "T0"), ("s2", "b", 1, "T1")])
    sessions = _sessions_of(rows)
    with pytest.raises(DensityInputError, match="g0 ~ b cannot be estimated: no animal was detected again"):
        prepare_models([ScrSession("s1", build_capture_history([("s1", "a", 1, "T0"), ("s1", "a", 1, "T1"),
                                                                 ("s1", "b", 2, "T2")],
                                                                [Trap(f"T{k}", 50.0 * k, 0.0, (1.0,) * 3)
                                                                 for k in range(4)], detector_type="proximity"),
                                   sessions[0].mask)], "g0~b")
    covariate = np.linspace(0, 1, sessions[0].mask.n_points)
    covariate[3] = np.nan
    with_cov = [ScrSession(s.name, s.history, s.mask, mask_covariates={"habitat": covariate}) for s in sessions]
    with pytest.raises(DensityInputError, match="'habitat' is missing at 1 of .* mask points in session 's1'"):
        prepare_models(with_cov, "D~habitat")
    with pytest.raises(DensityInputError, match="no mask covariate 'forest'"):
        prepare_models(with_cov, "D~forest")
    with pytest.raises(DensityInputError, match="sex"):
        prepare_models(sessions, "sigma~sex")
    with pytest.raises(DensityInputError, match="no known sex .*hcov"):
        prepare_models(_sessions_of(rows, sex={"a": "F", "b": None}), "g0~sex", conditional=True)
    with pytest.raises(DensityInputError, match="D is not in the conditional likelihood"):
        prepare_models(sessions, "D~session", conditional=True)
    with pytest.raises(DensityInputError, match="needs two or more sessions"):
        prepare_models(sessions[:1], "D~session")
    with pytest.raises(DensityInputError) as caught:
        prepare_models(with_cov, "D~habitat")
    assert "\n" not in str(caught.value)


def test_mask_covariate_from_geojson_attribute():
    mask = Mask(np.array([[5.0, 5.0], [15.0, 5.0], [25.0, 5.0]]), 10.0, None, "csv")
    habitat = {"type": "FeatureCollection", "features": [
        {"type": "Feature", "properties": {"forest": 0.8},
         "geometry": {"type": "Polygon", "coordinates": [[[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]]]}},
        {"type": "Feature", "properties": {"forest": 0.1},
         "geometry": {"type": "Polygon", "coordinates": [[[10, 0], [20, 0], [20, 10], [10, 10], [10, 0]]]}}]}
    values = mask_covariate_from_geojson(mask, habitat, "forest")
    assert values[:2].tolist() == [0.8, 0.1] and math.isnan(values[2])
    with pytest.raises(DensityInputError, match="no GeoJSON feature has the attribute 'grass'"):
        mask_covariate_from_geojson(mask, habitat, "grass")


def test_mask_covariates_and_sex_are_read_from_files(tmp_path):
    (tmp_path / "mask.csv").write_text("x,y,forest,d.to.shore\n0,0,1,10\n10,0,0,NA\n0,10,1,12\n")
    mask, covariates = read_mask_with_covariates(tmp_path / "mask.csv")
    assert mask.n_points == 3 and mask.spacing_m == 10
    assert covariates["forest"].tolist() == [1, 0, 1] and math.isnan(covariates["d.to.shore"][1])
    (tmp_path / "capt.txt").write_text("# Session ID Occasion Detector Sex\n1 a 1 T0 F\n1 a 2 T1 F\n2 a 1 T1 M\n")
    assert read_secr_sex(tmp_path / "capt.txt") == {("1", "a"): "F", ("2", "a"): "M"}
    (tmp_path / "bad.txt").write_text("1 a 1 T0 F\n1 a 2 T1 M\n")
    with pytest.raises(DensityInputError, match="has sex 'F' and 'M'"):
        read_secr_sex(tmp_path / "bad.txt")


def test_each_fit_is_assessed_before_the_ranking(monkeypatch):
    """A comparison hands each fit to ``assess`` as it comes: a fit the data cannot carry is refused before any
    table is made of it (a table of such fits, or AICc undefined on a handful of animals, says nothing)."""
    import core.field.scr_select as scr_select

    fitted, seen = [], []
    monkeypatch.setattr(scr_select, "fit_scr_model", lambda sessions, formula, **_: fitted.append(str(formula))
                        or str(formula))

    def no_table(*_a, **_k):
        raise AssertionError("ranked before every fit was assessed")

    monkeypatch.setattr(scr_select, "aic_table", no_table)

    class Refused(Exception):
        pass

    def assess(fit):
        seen.append(fit)
        if len(seen) == 2:
            raise Refused(fit)

    with pytest.raises(Refused):
        scr_select.compare_models([], ["g0~1", "g0~b", "sigma~1"], assess=assess)
    assert fitted == seen == ["g0~1", "g0~b"]  # the third model is not fitted once the second is refused
