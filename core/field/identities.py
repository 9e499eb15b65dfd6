"""Identification uncertainty carried into the population estimates: where each identity comes from, multiple
imputation of the identities nobody has confirmed, and which reviews would narrow the answer most.

Pure numpy over arrays and dataclasses; no catalogue, no UI. An identity's provenance is ``curator``, ``machine``
or ``unreviewed``; the estimates' bases are ``decided``, ``confirmed`` and ``uncertain`` (:func:`impute`).
:func:`combine_draws` mixes the draws into one interval that holds both sampling and identification error;
:func:`review_priority` ranks the detections whose review would narrow it most.

The imputation's steps, how draws are combined and the review priority's formula: docs/population.md."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import ndtr

from core.field import population as pop

PROVENANCES = ("curator", "machine", "unreviewed")
BASES = ("decided", "confirmed", "uncertain")
MODELS = ("M0", "Mt", "Mh-Chao")
DEFAULT_DRAWS = 200
MAX_DRAWS = 10_000
NEW = -1  # a unit's draw of "an animal not in the catalogue", before the new animals are clustered
COMBINE_METHOD = ("draw mixture: each draw's N as a split log-normal on N - M matching its own 95% interval (a "
                  "half-normal above M matching its upper end where the draw's N is M); the 2.5% and 97.5% "
                  "quantiles of the equal-weight mixture of the draws; N the median of the draws")
_Z_HALF = 2.241402727604947  # the half-normal's 97.5% point: Phi^-1(0.9875)
_Z = pop.Z_975
_P_CLIP = 1e-9
CANDIDATE_FLOOR = 1e-4  # an individual less likely than this for a detection is not listed as its candidate
PRIOR_PSEUDO = 1.0  # capture_prior: one detection more for each individual (Laplace's rule)
RARE_SHARE = 0.02  # review priority: a unit's values drawn in fewer than this share of the draws are pooled


class ImputationCancelled(Exception):
    """The imputation was asked to stop; nothing of it is kept."""


def check_draws(draws: object) -> int:
    """A number of draws between 1 and :data:`MAX_DRAWS`, or a ValueError that says what to give."""
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer, float)) or draws != int(draws):
        raise ValueError(f"the number of draws must be a whole number from 1 to {MAX_DRAWS:,}, got {draws!r}")
    if not 1 <= int(draws) <= MAX_DRAWS:
        raise ValueError(f"the number of draws must be from 1 to {MAX_DRAWS:,}, got {int(draws):,} "
                         f"({DEFAULT_DRAWS} is usual)")
    return int(draws)


# --------------------------------------------------------------------------- distributions of one unit


def good_turing_new(counts: Sequence[int] | np.ndarray) -> float:
    """The probability that the next detection is of an animal not yet seen, as Good and Turing estimate it from
    the detections per known individual: f1 / n (f1 individuals seen once, n detections); 1 when none is known."""
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    n = int(c.sum())
    if n == 0:
        return 1.0
    return float(min(1.0, max(np.sum(c == 1), 0.5) / n))


def capture_prior(counts: Sequence[float] | np.ndarray, *, pseudo: float = PRIOR_PSEUDO) -> np.ndarray:
    """Each catalogue individual's prior share of an unidentified detection, before its photo is looked at:
    proportional to its detections in the study plus ``pseudo``. An animal caught often is the likelier owner of
    the next photo; with n curator detections and each detection as likely to be left unidentified, a flat prior on
    an animal's total gives it (n + 1) times a common factor of unidentified ones expected (Laplace), so an animal of
    the catalogue not caught in the study keeps a share. An even prior sends ambiguous photos to animals caught
    once far too often, lowering f1 and with it Chao's estimate."""
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if c.size and (np.any(~np.isfinite(c)) or np.any(c < 0)):
        raise ValueError("detection counts must be >= 0")
    w = c + float(pseudo)
    return w / w.sum() if c.size else w


def shift_p_new(p_new: float | np.ndarray, *, fitted_rate: float, study_rate: float) -> float | np.ndarray:
    """p(new) fitted where a share ``fitted_rate`` of the queries were new, read for a study where a share
    ``study_rate`` of the unidentified detections are expected to be (Bayes' rule on a change of prior: the odds
    scaled by odds(study_rate) / odds(fitted_rate)). p(new) is fitted on the gallery's own photos, where every
    animal photographed once counts as new; among a study's unidentified photos new animals are rarer (the
    Good-Turing share f1 / n, :func:`good_turing_new`), and an unshifted p(new) makes ghosts of known animals."""
    for name, rate in (("fitted", fitted_rate), ("study", study_rate)):
        if not 0.0 < rate < 1.0:
            raise ValueError(f"the {name} share of new animals must be between 0 and 1, got {rate!r}")
    p = np.clip(np.asarray(p_new, dtype=np.float64), _P_CLIP, 1.0 - _P_CLIP)
    odds = p / (1.0 - p) * (study_rate / (1.0 - study_rate)) / (fitted_rate / (1.0 - fitted_rate))
    out = odds / (1.0 + odds)
    return float(out) if out.ndim == 0 else out


def _prior_shares(prior: Sequence[float] | np.ndarray | None, n: int) -> np.ndarray:
    if prior is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(prior, dtype=np.float64).reshape(-1)
    if w.size != n or np.any(~np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"the prior must give {n} shares >= 0 with a positive sum")
    return w / w.sum()


def match_distribution(p_same: Sequence[float] | np.ndarray, *, prior_new: float, pair_base_rate: float,
                       prior: Sequence[float] | np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """One distribution over the catalogue's individuals and "new" from each individual's calibrated probability
    of being the query's animal. A calibrated p_k is the base rate of "same" among the pairs it was fitted on
    (``pair_base_rate``) updated by the score's likelihood ratio, so LR_k = odds(p_k) / odds(base rate); with the
    prior ``prior_new`` that the animal is not in the catalogue (:func:`good_turing_new`) and the rest shared
    by ``prior`` (each individual's share, :func:`capture_prior`; evenly when None), P(k) is proportional to
    (1 - prior_new) prior_k LR_k and P(new) to prior_new (Bayes' rule over the mutually exclusive answers).
    Returns (probabilities of the individuals, probability of new)."""
    if not 0.0 < pair_base_rate < 1.0:
        raise ValueError(f"the pairs' base rate must be between 0 and 1, got {pair_base_rate!r}")
    if not 0.0 <= prior_new <= 1.0:
        raise ValueError(f"the prior of a new animal must be between 0 and 1, got {prior_new!r}")
    p = np.clip(np.asarray(p_same, dtype=np.float64).reshape(-1), _P_CLIP, 1.0 - _P_CLIP)
    if p.size == 0:
        return p, 1.0
    lr = (p / (1.0 - p)) / (pair_base_rate / (1.0 - pair_base_rate))
    w = (1.0 - prior_new) * _prior_shares(prior, p.size) * lr
    total = float(w.sum()) + prior_new
    return w / total, prior_new / total


def distribution_with_p_new(p_same: Sequence[float] | np.ndarray, *, p_new: float, pair_base_rate: float,
                            prior: Sequence[float] | np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """As :func:`match_distribution`, with "new" given its own calibrated probability ``p_new``
    (:mod:`core.field.new_animal`): the individuals share 1 - p_new in proportion to prior_k LR_k."""
    if not 0.0 <= p_new <= 1.0:
        raise ValueError(f"p(new) must be between 0 and 1, got {p_new!r}")
    if not 0.0 < pair_base_rate < 1.0:
        raise ValueError(f"the pairs' base rate must be between 0 and 1, got {pair_base_rate!r}")
    p = np.clip(np.asarray(p_same, dtype=np.float64).reshape(-1), _P_CLIP, 1.0 - _P_CLIP)
    if p.size == 0:
        return p, 1.0
    lr = (p / (1.0 - p)) / (pair_base_rate / (1.0 - pair_base_rate)) * _prior_shares(prior, p.size)
    return (1.0 - p_new) * lr / lr.sum(), float(p_new)


def unit_distribution(best_scores: Sequence[float] | np.ndarray, *,
                      same_probability: Callable[[np.ndarray, np.ndarray], np.ndarray], pair_base_rate: float,
                      p_new: float | None = None, prior_new: float = 1.0,
                      prior: Sequence[float] | np.ndarray | None = None,
                      floor: float = CANDIDATE_FLOOR,
                      ruled_out: Sequence[bool] | np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """One detection's distribution from its best score against each catalogue individual, as the catalogue and
    the simulated studies both build it: each individual's rank among them, its calibrated probability of the same
    animal (``same_probability(scores, ranks)``), then :func:`distribution_with_p_new` when "new" has its own
    calibrated ``p_new``, else :func:`match_distribution` with ``prior_new``; ``prior`` shares the catalogue
    (:func:`capture_prior`). Individuals ``ruled_out`` (already identified in the query's own photo: two animals in
    one frame are two individuals) get probability 0; with all ruled out the animal is new. Individuals under
    ``floor`` are dropped, their probability left to "new". Returns (the columns kept, their probabilities, p(new)
    before the floor)."""
    scores = np.asarray(best_scores, dtype=np.float64).reshape(-1)
    if scores.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0), 1.0
    if ruled_out is not None:
        out = np.asarray(ruled_out, dtype=bool).reshape(-1)
        if out.shape != scores.shape:
            raise ValueError(f"{scores.size} scores but {out.size} ruled-out flags")
        prior = np.where(out, 0.0, _prior_shares(prior, scores.size))
        if prior.sum() <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0), 1.0
        scores = np.where(out, np.nanmin(np.where(out, np.inf, scores)) if (~out).any() else 0.0, scores)
    ranks = np.empty(scores.size)
    ranks[np.argsort(-scores, kind="stable")] = np.arange(1, scores.size + 1)
    p_same = same_probability(scores, ranks)
    if p_new is not None:
        dist, pn = distribution_with_p_new(p_same, p_new=float(p_new), pair_base_rate=pair_base_rate, prior=prior)
    else:
        dist, pn = match_distribution(p_same, prior_new=prior_new, pair_base_rate=pair_base_rate, prior=prior)
    keep = np.flatnonzero(dist >= floor)
    return keep, dist[keep], pn


def suggests_new_animal(p_new: float | None, probabilities: Sequence[float], *, threshold: float) -> bool:
    """The "probably a new individual" hint, read from the one posterior: p(new) reaches the species' threshold and
    exceeds every individual's probability. Never from one pair's score: a pairwise probability against a
    threshold calls almost every photo new when the calibration tops out low."""
    if p_new is None:
        return False
    best = max((float(p) for p in probabilities), default=0.0)
    return bool(p_new >= threshold and p_new > best)


def machine_distribution(assigned: int, weight: float, candidates: Sequence[int], probabilities: Sequence[float],
                         p_new: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """A machine identity kept with its ``classificationProbability`` ``weight``: the assigned individual gets
    ``weight``, the rest is spread as the match distribution spreads it over the other individuals and "new"
    (all of it to "new" when there is none). Returns (candidates, probabilities); "new" is 1 - their sum."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"a classification probability must be between 0 and 1, got {weight!r}")
    others = [(c, p) for c, p in zip(candidates, probabilities) if c != assigned]
    rest = sum(p for _, p in others) + p_new
    scale = (1.0 - weight) / rest if rest > 0 else 0.0
    out_c = (assigned, *(c for c, _ in others))
    out_p = (weight, *(p * scale for _, p in others))
    return out_c, out_p


@dataclass(frozen=True)
class UncertainUnit:
    """Detections whose individual is not a curator's, sharing one individual (an event's annotations): the
    occasions they fall on, and a distribution over catalogue individuals (indices into
    :attr:`ImputationInput.individuals`) whose remainder 1 - sum is "an animal not in the catalogue"."""

    key: Hashable
    occasions: tuple[int, ...]
    candidates: tuple[int, ...] = ()
    probabilities: tuple[float, ...] = ()
    provenance: str = "unreviewed"
    annotation_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.candidates) != len(self.probabilities):
            raise ValueError(f"unit {self.key!r}: {len(self.candidates)} candidates but {len(self.probabilities)} "
                             "probabilities")
        if not self.occasions:
            raise ValueError(f"unit {self.key!r} has no detection")
        if self.provenance not in PROVENANCES[1:]:
            raise ValueError(f"unit {self.key!r}: provenance {self.provenance!r} is not machine or unreviewed")
        p = np.asarray(self.probabilities, dtype=np.float64)
        if np.any(~np.isfinite(p)) or np.any(p < 0) or p.sum() > 1 + 1e-6:
            raise ValueError(f"unit {self.key!r}: probabilities must be >= 0 and sum to at most 1")

    @property
    def p_new(self) -> float:
        return max(0.0, 1.0 - float(sum(self.probabilities)))


@dataclass(frozen=True)
class ImputationInput:
    """A study for imputation: ``n_occasions``; the catalogue's ``individuals``; the curator-fixed detections as
    (individual index, occasion) rows of ``fixed``; the uncertain ``units``; ``pairwise`` (units x units, optional)
    the calibrated probability that two units are one animal, used when both draw "new"; ``new_share`` (optional)
    the Good-Turing counts (f1, n) at whose share of new animals the unreviewed units' p(new) was read
    (:func:`shift_p_new`), so that each draw can read it at a share drawn from that share's own uncertainty."""

    n_occasions: int
    individuals: tuple[Hashable, ...]
    fixed: np.ndarray
    units: tuple[UncertainUnit, ...] = ()
    pairwise: np.ndarray | None = None
    new_share: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        f = np.asarray(self.fixed, dtype=np.int64).reshape(-1, 2)
        object.__setattr__(self, "fixed", f)
        K, T = len(self.individuals), int(self.n_occasions)
        if f.size and (f[:, 0].min() < 0 or f[:, 0].max() >= K or f[:, 1].min() < 0 or f[:, 1].max() >= T):
            raise ValueError("a fixed detection names an individual or occasion outside the study")
        for u in self.units:
            if any(not 0 <= c < K for c in u.candidates) or any(not 0 <= t < T for t in u.occasions):
                raise ValueError(f"unit {u.key!r} names an individual or occasion outside the study")
        if self.new_share is not None and not (self.new_share[0] >= 0 and self.new_share[1] > 0):
            raise ValueError(f"new_share must be (singletons >= 0, detections > 0), got {self.new_share!r}")
        if self.pairwise is not None:
            pw = np.asarray(self.pairwise, dtype=np.float64)
            if pw.shape != (len(self.units), len(self.units)):
                raise ValueError(f"pairwise must be {len(self.units)} x {len(self.units)}, got {pw.shape}")
            object.__setattr__(self, "pairwise", np.clip(pw, 0.0, 1.0))


# --------------------------------------------------------------------------- sampling


def new_share_odds(new_share: tuple[float, float], draws: int, rng: np.random.Generator) -> np.ndarray:
    """Per draw, the factor on the odds of "new": the study's share of new animals is f1 / n by Good and Turing,
    f1 itself a count with its own error; each draw takes f1 from its Jeffreys posterior Gamma(f1 + 1/2) and
    returns odds(f1* / n) / odds(max(f1, 1/2) / n). Proper multiple imputation draws the parameters as well as
    the identities: at one fixed share, every draw would hold about the same number of new animals, and an
    interval so narrow misses the truth whenever the study's share is not the one estimated."""
    f1, n = float(new_share[0]), float(new_share[1])
    at = min(max(f1, 0.5) / n, 1.0 - _P_CLIP)
    share = np.clip(rng.gamma(f1 + 0.5, size=draws) / n, _P_CLIP, 1.0 - _P_CLIP)
    return (share / (1.0 - share)) / (at / (1.0 - at))


def sample_identities(inp: ImputationInput, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Draws x units: each unit's individual in each draw, catalogue individuals as their index, new animals as
    K + (the index of the draw's first unit of that new animal). With ``inp.new_share`` each draw first draws the
    study's share of new animals (:func:`new_share_odds`) and reads every unreviewed unit's p(new) at it."""
    K, n = len(inp.individuals), len(inp.units)
    out = np.empty((draws, n), dtype=np.int64)
    odds = new_share_odds(inp.new_share, draws, rng) if inp.new_share is not None and n else None
    for j, u in enumerate(inp.units):
        cum = np.cumsum(np.asarray(u.probabilities, dtype=np.float64))
        r = rng.random(draws)
        q = u.p_new
        if odds is not None and u.provenance == "unreviewed" and 0.0 < q < 1.0:
            q_d = odds * q / (1.0 - q + odds * q)
            r = r * (1.0 - q) / (1.0 - q_d)  # the individuals' shares scaled by (1 - q_d) / (1 - q)
        idx = np.searchsorted(cum, r, side="right")
        cand = np.asarray(u.candidates + (NEW,), dtype=np.int64)
        out[:, j] = cand[np.minimum(idx, len(u.candidates))]
    is_new = out == NEW
    if not is_new.any():
        return out
    seed_of = np.full((draws, n), -1, dtype=np.int64)  # the first unit of the new animal each unit joined
    for i in range(n):
        here = is_new[:, i]
        if not here.any():
            continue
        seed_of[here, i] = i
        if inp.pairwise is None or i == 0:
            continue
        d_idx = np.flatnonzero(here)
        prev = seed_of[d_idx, :i]
        q = inp.pairwise[i, :i]
        valid = prev >= 0
        if not valid.any():
            continue
        best = np.zeros((d_idx.size, i))  # per draw, the largest probability towards each new animal (by seed)
        rr, cc = np.nonzero(valid)
        np.maximum.at(best, (rr, prev[rr, cc]), q[cc])
        best = np.minimum(best, 1.0 - _P_CLIP)
        log_fresh = np.log1p(-best).sum(axis=1)
        fresh = np.exp(log_fresh)
        join = best / (1.0 - best) * fresh[:, None]
        weights = np.concatenate([join, fresh[:, None]], axis=1)
        cum = np.cumsum(weights, axis=1)
        r = rng.random(d_idx.size) * cum[:, -1]
        pick = (cum < r[:, None]).sum(axis=1)
        joined = pick < i
        seed_of[d_idx[joined], i] = pick[joined]
    new_rows, new_cols = np.nonzero(is_new)
    out[new_rows, new_cols] = K + seed_of[new_rows, new_cols]
    return out


# --------------------------------------------------------------------------- estimates per draw


@dataclass(frozen=True)
class DrawEstimates:
    """Per draw and model: N, its own interval and M (nan where the draw gives no estimate)."""

    N: dict[str, np.ndarray]
    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]
    M: np.ndarray


class _EstimateCache:
    """The estimates of one set of sufficient statistics, computed once: draws often repeat them."""

    def __init__(self) -> None:
        self.m0: dict[tuple, pop.Estimate] = {}
        self.mt: dict[tuple, pop.Estimate] = {}
        self.chao: dict[tuple, pop.Estimate] = {}

    def estimates(self, M: int, per_occasion: np.ndarray, times_caught: np.ndarray) -> tuple[pop.Estimate, ...]:
        """``times_caught``: per animal seen, on how many occasions (Mh-Chao's interval needs every f_k when no
        animal was seen once)."""
        t = int(per_occasion.size)
        n = int(per_occasion.sum())
        k0 = (M, n, t)
        if k0 not in self.m0:
            self.m0[k0] = pop.m0_from_counts(individuals=M, captures=n, occasions=t)
        k1 = (M, tuple(int(x) for x in per_occasion))
        if k1 not in self.mt:
            self.mt[k1] = pop.mt_from_counts(list(k1[1]), individuals=M)
        k2 = (tuple(int(x) for x in np.bincount(times_caught)[1:]), t)
        if k2 not in self.chao:
            self.chao[k2] = pop.mh_chao_from_frequencies(k2[0], occasions=t)
        return self.m0[k0], self.mt[k1], self.chao[k2]


def _draw_matrix(inp: ImputationInput, labels: np.ndarray, unit_rows: np.ndarray, unit_occ: np.ndarray,
                 n_rows: int) -> np.ndarray:
    mat = np.zeros((n_rows, inp.n_occasions), dtype=bool)
    if inp.fixed.size:
        mat[inp.fixed[:, 0], inp.fixed[:, 1]] = True
    if unit_rows.size:
        mat[labels[unit_rows], unit_occ] = True
    return mat


def estimate_draws(inp: ImputationInput, labels: np.ndarray, *,
                   progress: Callable[[int, int], None] | None = None,
                   should_stop: Callable[[], bool] | None = None) -> DrawEstimates:
    """M0, Mt and Mh-Chao of each draw's rebuilt capture histories (occasions as given: the caller passes the
    surveyed ones)."""
    draws = labels.shape[0]
    K, n = len(inp.individuals), len(inp.units)
    unit_rows = np.concatenate([np.full(len(u.occasions), j) for j, u in enumerate(inp.units)]) if n else \
        np.zeros(0, dtype=np.int64)
    unit_occ = np.concatenate([np.asarray(u.occasions) for u in inp.units]) if n else np.zeros(0, dtype=np.int64)
    N = {m: np.full(draws, np.nan) for m in MODELS}
    lo = {m: np.full(draws, np.nan) for m in MODELS}
    hi = {m: np.full(draws, np.nan) for m in MODELS}
    M_all = np.zeros(draws)
    cache = _EstimateCache()
    for d in range(draws):
        if should_stop is not None and should_stop():
            raise ImputationCancelled(f"stopped after {d} of {draws} draws; nothing was kept")
        mat = _draw_matrix(inp, labels[d], unit_rows, unit_occ, K + n)
        caught = mat.sum(axis=1)
        mat = mat[caught > 0]
        counts = caught[caught > 0]
        M = int(mat.shape[0])
        M_all[d] = M
        ests = cache.estimates(M, mat.sum(axis=0), counts)
        for m, e in zip(MODELS, ests):
            N[m][d], lo[m][d], hi[m][d] = e.N, e.ci_low, e.ci_high
        if progress is not None:
            progress(d + 1, draws)
    return DrawEstimates(N=N, low=lo, high=hi, M=M_all)


# --------------------------------------------------------------------------- combining the draws


@dataclass(frozen=True)
class CombinedEstimate:
    """One model's answer over the draws: N, the 95% interval with identification and sampling error, the share
    of its width from identification, and how many draws gave an estimate."""

    model: str
    N: float
    ci_low: float
    ci_high: float
    share_from_identification: float | None
    draws_used: int
    draws: int
    method: str = COMBINE_METHOD
    within_width: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return float(x) if x is not None and math.isfinite(x) else None

        return {"model": self.model, "N": num(self.N), "ci_low": num(self.ci_low), "ci_high": num(self.ci_high),
                "share_from_identification": num(self.share_from_identification), "draws_used": self.draws_used,
                "draws": self.draws, "method": self.method}


def _mixture_cdf(x: float, M: np.ndarray, f0: np.ndarray, s_lo: np.ndarray, s_hi: np.ndarray,
                 half: np.ndarray) -> float:
    out = np.zeros(M.size)
    point = (f0 <= 0) & (half <= 0)
    out[point] = (x >= M[point]).astype(float)
    above = (f0 <= 0) & (half > 0)
    if above.any():
        out[above] = 2.0 * ndtr(np.maximum(x - M[above], 0.0) / half[above]) - 1.0  # 0 up to M
    cont = (f0 > 0) & (x > M)
    if cont.any():
        z = np.log((x - M[cont]) / f0[cont])
        s = np.where(z < 0, s_lo[cont], s_hi[cont])
        with np.errstate(divide="ignore", invalid="ignore"):
            out[cont] = np.where(np.isinf(s), 0.5, ndtr(z / s))
    return float(out.mean())


def _quantile(q: float, M: np.ndarray, f0: np.ndarray, s_lo: np.ndarray, s_hi: np.ndarray, half: np.ndarray,
              a: float, b: float) -> float:
    if _mixture_cdf(b, M, f0, s_lo, s_hi, half) < q:
        return math.inf
    for _ in range(200):
        mid = 0.5 * (a + b)
        if _mixture_cdf(mid, M, f0, s_lo, s_hi, half) >= q:
            b = mid
        else:
            a = mid
        if b - a <= 1e-10 * max(1.0, abs(b)):
            break
    return b


def combine_draws(model: str, N: np.ndarray, low: np.ndarray, high: np.ndarray, M: np.ndarray) -> CombinedEstimate:
    """The draws' estimates of one model as one answer (see the module notes). Draws without an estimate are left
    out (counted); all draws alike give that draw's own interval."""
    draws = int(N.size)
    ok = np.isfinite(N)
    if not ok.any():
        return CombinedEstimate(model, math.nan, math.nan, math.nan, None, 0, draws)
    N, low, high, M = N[ok], low[ok], high[ok], M[ok]
    if np.all(N == N[0]) and np.all(low == low[0]) and np.all(high == high[0]):
        width = float(high[0] - low[0])
        return CombinedEstimate(model, float(N[0]), float(low[0]), float(high[0]), 0.0 if width > 0 else None,
                                int(ok.sum()), draws, within_width=width)
    f0 = N - M
    tiny = 1e-6 * np.maximum(f0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        s_lo = np.where(f0 > 0, np.log(f0 / np.maximum(low - M, tiny)) / _Z, 0.0)
        s_hi = np.where(f0 > 0, np.log(np.maximum(high - M, f0 + tiny) / np.where(f0 > 0, f0, 1.0)) / _Z, 0.0)
    s_lo = np.maximum(s_lo, 1e-12)
    s_hi = np.maximum(s_hi, 1e-12)
    # a draw whose N is M (no animal seen once) can still have an interval above M: a half-normal matching its top
    half = np.where((f0 <= 0) & np.isfinite(high), np.maximum(high - M, 0.0) / _Z_HALF, 0.0)
    a = float(np.min(M)) - 1.0
    finite_hi = high[np.isfinite(high)]
    b = float(max(np.max(N), finite_hi.max() if finite_hi.size else np.max(N))) * 4.0 + 10.0
    ci_low = _quantile(0.025, M, f0, s_lo, s_hi, half, a, b)
    ci_high = _quantile(0.975, M, f0, s_lo, s_hi, half, a, b)
    within = float(np.mean(high - low))
    total = ci_high - ci_low
    share = None
    if math.isfinite(total) and math.isfinite(within) and total > 0:
        share = float(min(1.0, max(0.0, 1.0 - within / total)))
    return CombinedEstimate(model, float(np.median(N)), float(ci_low), float(ci_high), share, int(ok.sum()), draws,
                            within_width=within)


# --------------------------------------------------------------------------- the whole imputation


@dataclass(frozen=True)
class ImputationResult:
    """The combined answer per model, the draws' identities (draws x units) and estimates, and the seed."""

    estimates: tuple[CombinedEstimate, ...]
    labels: np.ndarray
    per_draw: DrawEstimates
    draws: int
    seed: int
    units: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    def estimate(self, model: str) -> CombinedEstimate:
        return next(e for e in self.estimates if e.model == model)


def impute(inp: ImputationInput, *, draws: int = DEFAULT_DRAWS, seed: int = 0,
           progress: Callable[[int, int], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> ImputationResult:
    """Multiple imputation of the units' identities, ``draws`` times from ``seed``; each draw's M0, Mt and
    Mh-Chao, combined (:func:`combine_draws`). Without units every draw is the study as decided, and one draw
    stands for all of them."""
    draws = check_draws(draws)
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    if not inp.units:
        notes.append("No identity is uncertain (every detection's individual is a curator's): the answer with "
                     "identification uncertainty is the answer as decided.")
        labels = np.zeros((1, 0), dtype=np.int64)
    else:
        labels = sample_identities(inp, draws, rng)
    per = estimate_draws(inp, labels, progress=progress, should_stop=should_stop)
    combined = tuple(combine_draws(m, per.N[m], per.low[m], per.high[m], per.M) for m in MODELS)
    for c in combined:
        if c.draws_used < c.draws:
            notes.append(f"{c.model}: {c.draws - c.draws_used} of {c.draws} draws gave no estimate and are left out.")
    return ImputationResult(estimates=combined, labels=labels, per_draw=per, draws=draws, seed=seed,
                            units=len(inp.units), notes=tuple(notes))


# --------------------------------------------------------------------------- review priority


@dataclass(frozen=True)
class Priority:
    """One unit's expected effect of a review: the between-draw variance of N its identity explains, and the
    expected narrowing of the 95% interval (animals)."""

    unit: int
    key: Hashable
    variance_explained: float
    expected_narrowing: float
    annotation_ids: tuple[int, ...] = ()
    provenance: str = "unreviewed"


def review_priority(inp: ImputationInput, result: ImputationResult, *, model: str = "Mh-Chao") -> list[Priority]:
    """Units ranked by the variance of ``model``'s N that fixing their identity is expected to remove (largest
    first; ties by the unit's order). With calibrated draws a review leaves the draws' own widths unchanged on
    average, so this between-draw part is what a review is expected to narrow (docs/population.md)."""
    N = result.per_draw.N[model]
    ok = np.isfinite(N)
    labels = result.labels[ok]
    y = N[ok]
    D = y.size
    K = len(inp.individuals)
    comb = result.estimate(model)
    min_group = max(5, int(math.ceil(RARE_SHARE * D)))
    if D < 2 or not inp.units:
        return [Priority(j, u.key, 0.0, 0.0, u.annotation_ids, u.provenance) for j, u in enumerate(inp.units)]
    width = comb.ci_high - comb.ci_low
    total_var = (width / (2 * _Z)) ** 2 if math.isfinite(width) else float(np.var(y))
    grand = float(y.mean())
    out = []
    for j, u in enumerate(inp.units):
        v = np.where(labels[:, j] >= K, K, labels[:, j])  # every new animal one value
        groups, inv, counts = np.unique(v, return_inverse=True, return_counts=True)
        rare = counts < min_group
        if rare.sum() > 1:  # values too rare to be told apart are read as one: "one of the less likely ones"
            groups, inv, counts = np.unique(np.where(rare[inv], -2, v), return_inverse=True, return_counts=True)
        g = groups.size
        if g < 2:
            explained = 0.0
        else:
            means = np.bincount(inv, weights=y) / counts
            ss_between = float(np.sum(counts * (means - grand) ** 2))
            ss_within = float(np.sum((y - means[inv]) ** 2))
            ms_within = ss_within / max(D - g, 1)
            explained = max(0.0, (ss_between - (g - 1) * ms_within) / D)
        narrowing = 0.0
        if total_var > 0 and explained > 0:
            narrowing = 2 * _Z * (math.sqrt(total_var) - math.sqrt(max(total_var - explained, 0.0)))
        out.append(Priority(j, u.key, explained, narrowing, u.annotation_ids, u.provenance))
    out.sort(key=lambda p: (-p.variance_explained, p.unit))
    return out
