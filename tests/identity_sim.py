"""Simulated camera-trap studies with known identities, for the identification-uncertainty tests and benchmark.

As in :mod:`tests.sim_study`: animals with home-range centres around a grid of stations and heterogeneous
catchability, photographed on each day (occasion) with probability p0_i exp(-d^2 / 2 sigma^2). A share of the
detections lose their individual (``unreviewed``); each such detection has a photo quality mu and gets synthetic
match scores against every animal (the true one N(+mu, 1), the others N(-mu, 1)) and against every other unreviewed
detection, turned into calibrated "same animal" probabilities by the exact likelihood ratio exp(2 mu s) with a
prior of one in the number of candidates. :meth:`Study.input` builds the imputation input for any set of reviewed
detections, so a simulated curator can review some and answer with the truth.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from core.field import population as pop
from core.field import identities as ids


@dataclass
class Study:
    """The truth and the synthetic scores of one simulated study."""

    animal: np.ndarray  # per detection: the true animal
    occasion: np.ndarray  # per detection
    n_occasions: int
    unreviewed: np.ndarray  # indices of the detections without an individual
    unit_scores: np.ndarray  # unreviewed detections x animals
    pair_scores: np.ndarray  # unreviewed x unreviewed
    mu: np.ndarray  # per unreviewed detection: how far apart its same and not-same scores lie (photo quality)

    def histories(self, detections: np.ndarray | None = None) -> np.ndarray:
        idx = np.arange(self.animal.size) if detections is None else detections
        m = np.zeros((int(self.animal.max()) + 1, self.n_occasions), dtype=np.uint8)
        m[self.animal[idx], self.occasion[idx]] = 1
        return m[m.sum(axis=1) > 0]

    def oracle(self, model: str = "Mh-Chao") -> pop.Estimate:
        return next(e for e in pop.estimate_all(self.histories()) if e.model == model)

    def confirmed(self, model: str = "Mh-Chao", reviewed: Iterable[int] = ()) -> pop.Estimate:
        keep = np.setdiff1d(np.arange(self.animal.size), self.unreviewed[self._still_open(reviewed)])
        return next(e for e in pop.estimate_all(self.histories(keep)) if e.model == model)

    def _still_open(self, reviewed: Iterable[int]) -> np.ndarray:
        done = set(int(u) for u in reviewed)
        return np.array([j for j in range(self.unreviewed.size) if j not in done], dtype=np.int64)

    @staticmethod
    def _p_same(scores: np.ndarray, mu: np.ndarray | float, prior: float) -> np.ndarray:
        return 1.0 / (1.0 + (1.0 - prior) / prior * np.exp(-2.0 * mu * scores))

    def input(self, reviewed: Iterable[int] = ()) -> ids.ImputationInput:
        """The imputation input with the unreviewed detections ``reviewed`` (indices into :attr:`unreviewed`)
        answered with the truth; the catalogue's individuals are the animals with a fixed detection."""
        open_units = self._still_open(reviewed)
        fixed_det = np.setdiff1d(np.arange(self.animal.size), self.unreviewed[open_units])
        catalogue = np.unique(self.animal[fixed_det])
        index = {int(a): k for k, a in enumerate(catalogue)}
        fixed = np.column_stack([[index[int(a)] for a in self.animal[fixed_det]], self.occasion[fixed_det]])
        prior = 1.0 / (catalogue.size + 1)
        prior_new = ids.good_turing_new(np.bincount(fixed[:, 0], minlength=catalogue.size))
        units = []
        for j in open_units:
            p = self._p_same(self.unit_scores[j, catalogue], self.mu[j], prior)
            probs, _ = ids.match_distribution(p, prior_new=prior_new, pair_base_rate=prior)
            keep = np.flatnonzero(probs > 1e-6)
            units.append(ids.UncertainUnit(key=int(j), occasions=(int(self.occasion[self.unreviewed[j]]),),
                                           candidates=tuple(int(k) for k in keep),
                                           probabilities=tuple(float(probs[k]) for k in keep)))
        mu = self.mu[open_units]
        pairwise = self._p_same(self.pair_scores[np.ix_(open_units, open_units)], np.minimum.outer(mu, mu), prior)
        np.fill_diagonal(pairwise, 0.0)
        return ids.ImputationInput(n_occasions=self.n_occasions, individuals=tuple(int(a) for a in catalogue),
                                   fixed=fixed, units=tuple(units), pairwise=pairwise)

    def top1(self, model: str = "Mh-Chao") -> pop.Estimate:
        """Each unreviewed detection as its most probable individual, or a new animal of its own."""
        inp = self.input()
        rows = [(int(k), int(t)) for k, t in inp.fixed]
        K = len(inp.individuals)
        for j, u in enumerate(inp.units):
            best = int(np.argmax(u.probabilities)) if u.probabilities else -1
            k = u.candidates[best] if best >= 0 and u.probabilities[best] > u.p_new else K + j
            rows.append((k, u.occasions[0]))
        r = np.asarray(rows)
        m = np.zeros((K + len(inp.units), self.n_occasions), dtype=np.uint8)
        m[r[:, 0], r[:, 1]] = 1
        return next(e for e in pop.estimate_all(m[m.sum(axis=1) > 0]) if e.model == model)


def _scores(rng: np.random.Generator, truth: np.ndarray, n_animals: int, mu: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic scores of each unreviewed detection against every animal and every other such detection: the
    same animal N(+mu, 1), another N(-mu, 1), mu the poorer photo's."""
    n = truth.size
    unit = rng.normal(0.0, 1.0, size=(n, n_animals)) - mu[:, None]
    unit[np.arange(n), truth] += 2 * mu
    m = np.minimum.outer(mu, mu)
    pair = rng.normal(0.0, 1.0, size=(n, n)) + np.where(truth[:, None] == truth[None, :], m, -m)
    pair = np.triu(pair, 1)
    return unit, pair + pair.T


def simulate(seed: int, *, n_animals: int = 60, n_occasions: int = 10, removed: float = 0.3,
             quality: tuple[float, float] = (0.5, 3.0),
             grid: tuple[int, int] = (4, 3), sigma: float = 1.5, spacing: float = 2.0,
             p0: tuple[float, float] = (0.8, 5.0)) -> Study:
    """One study: detections as (animal, occasion) per animal x station x day seen; ``removed`` of them lose
    their individual; each has a photo quality mu drawn uniformly from ``quality``."""
    rng = np.random.default_rng(seed)
    xy = np.array([[c * spacing, -r * spacing] for r in range(grid[1]) for c in range(grid[0])], dtype=float)
    lo, hi = xy.min(axis=0) - 2.0, xy.max(axis=0) + 2.0
    centres = rng.uniform(lo, hi, size=(n_animals, 2))
    base = rng.beta(*p0, size=n_animals)
    d2 = ((centres[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2)
    p = base[:, None] * np.exp(-d2 / (2 * sigma**2))
    animal, occasion = [], []
    for day in range(n_occasions):
        seen = rng.random(p.shape) < p
        for i, _ in zip(*np.nonzero(seen)):
            animal.append(i)
            occasion.append(day)
    animal_a, occ_a = np.asarray(animal, dtype=np.int64), np.asarray(occasion, dtype=np.int64)
    n_removed = int(round(removed * animal_a.size))
    unreviewed = np.sort(rng.choice(animal_a.size, size=n_removed, replace=False))
    mu = rng.uniform(*quality, size=n_removed)
    unit_scores, pair = _scores(rng, animal_a[unreviewed], n_animals, mu)
    return Study(animal=animal_a, occasion=occ_a, n_occasions=n_occasions, unreviewed=unreviewed,
                 unit_scores=unit_scores, pair_scores=pair, mu=mu)


def benchmark_input(seed: int = 0, *, detections: int = 1000, individuals: int = 100, occasions: int = 10,
                    uncertain: float = 0.3) -> ids.ImputationInput:
    """An input of exactly ``detections`` detections of ``individuals`` animals over ``occasions`` occasions,
    ``uncertain`` of them unreviewed with synthetic match probabilities (the speed benchmark's study)."""
    rng = np.random.default_rng(seed)
    animal = np.concatenate([np.arange(individuals), rng.integers(0, individuals, detections - individuals)])
    occasion = rng.integers(0, occasions, detections)
    n_unc = int(round(uncertain * detections))
    unreviewed = np.sort(rng.choice(detections, size=n_unc, replace=False))
    mu = rng.uniform(0.5, 3.0, size=n_unc)
    scores, pair = _scores(rng, animal[unreviewed], individuals, mu)
    study = Study(animal=animal, occasion=occasion, n_occasions=occasions, unreviewed=unreviewed,
                  unit_scores=scores, pair_scores=pair, mu=mu)
    return study.input()
