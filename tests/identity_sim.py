"""Simulated camera-trap studies with known identities, for the identification-uncertainty tests and benchmark.

As in :mod:`tests.sim_study`: animals with home-range centres around a grid of stations and heterogeneous
catchability, photographed on each day (occasion) with probability p0_i exp(-d^2 / 2 sigma^2). A share of the
detections lose their individual (``unreviewed``). Two kinds of match probabilities:

- :func:`simulate_photos` (:class:`PhotoStudy`): every detected animal is a real nyala of the shared photo set and
  every detection one of its photos (:class:`PhotoBank`, embedded once by Rosette's default backbone); the
  imputation input is built as the catalogue builds it (:func:`db.field.identities.imputation_input`): the calibrator
  fitted on the identified photos' top-5 pairs, p(new) fitted on them, each unreviewed photo's best score per
  individual turned into a distribution by :func:`core.field.identities.unit_distribution`. Rosette's own
  probabilities, errors included.
- :func:`simulate` (:class:`Study`): synthetic scores (the true animal N(+mu, 1), the others N(-mu, 1), mu the
  photo's quality) turned into probabilities by the exact likelihood ratio exp(2 mu s); cheap, for the speed
  benchmark and the small tests.

``input(reviewed)`` builds the imputation input for any set of reviewed detections, so a simulated curator can
review some and answer with the truth.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from core.field import identities as ids
from core.field import new_animal as na
from core.field import population as pop
from core.identify.calibration import Calibrator, fit_match_calibrator
from core.metrics import all_vs_all_valid
from db.identify.calibration import top_k_outcomes
from db.field.identities import fit_new_animal



@dataclass
class _Truth:
    """The detections of one simulated study, their true animals and which of them lost their individual."""

    animal: np.ndarray  # per detection: the true animal
    occasion: np.ndarray  # per detection
    n_occasions: int
    unreviewed: np.ndarray  # indices of the detections without an individual

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

    def _catalogue(self, open_units: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the fixed detections, the catalogue's animals, the fixed rows as (catalogue index, occasion))."""
        fixed_det = np.setdiff1d(np.arange(self.animal.size), self.unreviewed[open_units])
        catalogue = np.unique(self.animal[fixed_det])
        fixed = np.column_stack([np.searchsorted(catalogue, self.animal[fixed_det]), self.occasion[fixed_det]])
        return fixed_det, catalogue, fixed

    def input(self, reviewed: Iterable[int] = ()) -> ids.ImputationInput:
        raise NotImplementedError

    def top1(self, model: str = "Mh-Chao", inp: ids.ImputationInput | None = None) -> pop.Estimate:
        """Each unreviewed detection as its most probable individual, or a new animal of its own (``inp``: the
        study's :meth:`input` with nothing reviewed, when already built)."""
        inp = self.input() if inp is None else inp
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


@dataclass(kw_only=True)
class Study(_Truth):
    """A simulated study with synthetic scores."""

    unit_scores: np.ndarray  # unreviewed detections x animals
    pair_scores: np.ndarray  # unreviewed x unreviewed
    mu: np.ndarray  # per unreviewed detection: how far apart its same and not-same scores lie (photo quality)

    @staticmethod
    def _p_same(scores: np.ndarray, mu: np.ndarray | float, prior: float) -> np.ndarray:
        return 1.0 / (1.0 + (1.0 - prior) / prior * np.exp(-2.0 * mu * scores))

    def input(self, reviewed: Iterable[int] = ()) -> ids.ImputationInput:
        """The imputation input with the unreviewed detections ``reviewed`` (indices into :attr:`unreviewed`)
        answered with the truth; the catalogue's individuals are the animals with a fixed detection."""
        open_units = self._still_open(reviewed)
        _, catalogue, fixed = self._catalogue(open_units)
        base_rate = 1.0 / (catalogue.size + 1)
        counts = np.bincount(fixed[:, 0], minlength=catalogue.size)
        prior_new, prior = ids.good_turing_new(counts), ids.capture_prior(counts)
        units = []
        for j in open_units:
            keep, probs, _ = ids.unit_distribution(
                self.unit_scores[j, catalogue], pair_base_rate=base_rate, prior_new=prior_new, prior=prior,
                same_probability=lambda s, _r, mu=self.mu[j]: self._p_same(s, mu, base_rate), floor=1e-6)
            units.append(ids.UncertainUnit(key=int(j), occasions=(int(self.occasion[self.unreviewed[j]]),),
                                           candidates=tuple(int(k) for k in keep),
                                           probabilities=tuple(float(x) for x in probs)))
        mu = self.mu[open_units]
        pairwise = self._p_same(self.pair_scores[np.ix_(open_units, open_units)], np.minimum.outer(mu, mu),
                                base_rate)
        np.fill_diagonal(pairwise, 0.0)
        share = (float(np.sum(counts == 1)), float(counts.sum()))
        return ids.ImputationInput(n_occasions=self.n_occasions, individuals=tuple(int(a) for a in catalogue),
                                   fixed=fixed, units=tuple(units), pairwise=pairwise, new_share=share)


@dataclass(frozen=True)
class PhotoBank:
    """Real photos of known animals, the backbone's all-vs-all scores, and the model's calibrator: where a
    :class:`PhotoStudy` takes the photo of each detection from."""

    identity: np.ndarray  # per photo: its animal (an index into names)
    sighting: np.ndarray  # per photo: its sighting (photos of one sighting share a moment and a background)
    names: tuple[str, ...]
    scores: np.ndarray  # photos x photos
    calibrator: Calibrator  # fitted on the bank's top-5 pairs, as a benchmark of the species calibrates the model

    def photos_of(self, k: int) -> np.ndarray:
        return np.flatnonzero(self.identity == k)


def bank_from_scores(scores: np.ndarray, identities: list[str], sightings: list[str]) -> PhotoBank:
    """A bank of photos with their all-vs-all ``scores``; the calibrator as :func:`db.identify.calibration.
    calibrator_for` fits it from a benchmark: each photo's top-5 candidates among the others, photos of its own
    sighting left out."""
    names, identity = np.unique(np.asarray(identities, dtype=str), return_inverse=True)
    _, sighting = np.unique(np.char.add(np.asarray(identities, dtype=str), np.char.add("/", np.asarray(
        sightings, dtype=str))), return_inverse=True)
    s, same, ranks = top_k_outcomes(scores, all_vs_all_valid(len(identities), sightings=sighting.tolist()),
                                    identity.tolist(), top_k=5)
    return PhotoBank(identity=identity, sighting=sighting, names=tuple(str(n) for n in names),
                     scores=np.asarray(scores, dtype=np.float64),
                     calibrator=fit_match_calibrator(s, same, ranks=ranks, sources={"benchmark top-5 pairs": s.size}))


def nyala_bank(nyala_dir: Path, *, cache_dir: Path) -> PhotoBank:
    """The nyala photo set embedded by Rosette's default backbone (features cached in ``cache_dir``: the cache the
    p(new) test of the same photos fills, so the photos are embedded once)."""
    # torch and the backbones are heavy to import: only the tests on real photos need them
    from core.identify.backbones import DEFAULT_BACKBONE, create_backbone
    from core.identify.features import extract_features
    from core.io.images import load_rgb
    from core.similarity import pairwise_scores

    with open(Path(nyala_dir) / "manifest.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["identity"].strip()]
    backbone = create_backbone(DEFAULT_BACKBONE)
    items = [(r["filename"], lambda p=Path(nyala_dir) / "images" / r["filename"]: load_rgb(str(p))) for r in rows]
    emb = extract_features(backbone, items, variant="full_rgb", cache_dir=cache_dir)
    return bank_from_scores(pairwise_scores(emb, emb, metric=backbone.config.metric),
                            [r["identity"] for r in rows], [r["sighting"] for r in rows])


@dataclass(kw_only=True)
class PhotoStudy(_Truth):
    """A simulated study whose every detection is a real photo of its animal (:class:`PhotoBank`)."""

    photo: np.ndarray  # per detection: its photo in the bank
    bank: PhotoBank

    def input(self, reviewed: Iterable[int] = ()) -> ids.ImputationInput:
        """The imputation input as :func:`db.field.identities.imputation_input` builds it from the catalogue, with the
        unreviewed detections ``reviewed`` (indices into :attr:`unreviewed`) answered with the truth: the fixed
        detections' photos are the gallery (each detection its own event); the bank's calibrator (a benchmark's);
        p(new) fitted on the gallery's photos and read at the study's share of new animals; each open detection's
        best score per individual becomes its distribution."""
        open_units = self._still_open(reviewed)
        fixed_det, catalogue, fixed = self._catalogue(open_units)
        order = np.argsort(fixed[:, 0], kind="stable")
        g_photos, g_labels = self.photo[fixed_det][order], fixed[order, 0]
        g_scores = self.bank.scores[np.ix_(g_photos, g_photos)]
        cal = self.bank.calibrator
        new_cal, _ = fit_new_animal(g_scores, [str(x) for x in g_labels], list(range(g_photos.size)))
        u_photos = self.photo[self.unreviewed[open_units]]
        starts = np.flatnonzero(np.r_[True, np.diff(g_labels) != 0])
        best = np.maximum.reduceat(self.bank.scores[np.ix_(u_photos, g_photos)], starts, axis=1) \
            if u_photos.size else np.zeros((0, catalogue.size))
        counts = np.bincount(fixed[:, 0], minlength=catalogue.size)
        prior_new, prior = ids.good_turing_new(counts), ids.capture_prior(counts)
        p_new = None
        if new_cal is not None and u_photos.size:
            p_new = new_cal.probability(*na.top_two(best))
            if 0.0 < prior_new < 1.0:
                p_new = ids.shift_p_new(p_new, fitted_rate=new_cal.n_new / new_cal.n_queries, study_rate=prior_new)
        base_rate = cal.n_positive / cal.n_outcomes
        units = []
        for j, d in enumerate(self.unreviewed[open_units]):
            keep, probs, _ = ids.unit_distribution(
                best[j], same_probability=cal.probability, pair_base_rate=base_rate, prior_new=prior_new,
                p_new=None if p_new is None else float(p_new[j]), prior=prior)
            units.append(ids.UncertainUnit(key=int(open_units[j]), occasions=(int(self.occasion[d]),),
                                           candidates=tuple(int(k) for k in keep),
                                           probabilities=tuple(float(x) for x in probs)))
        pair = self.bank.scores[np.ix_(u_photos, u_photos)]
        pairwise = cal.probability(pair.reshape(-1), np.ones(pair.size)).reshape(pair.shape)
        np.fill_diagonal(pairwise, 0.0)
        share = (float(np.sum(counts == 1)), float(counts.sum()))
        return ids.ImputationInput(n_occasions=self.n_occasions, individuals=tuple(int(a) for a in catalogue),
                                   fixed=fixed, units=tuple(units), pairwise=pairwise, new_share=share)


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


def _detections(rng: np.random.Generator, *, n_animals: int, n_occasions: int, grid: tuple[int, int], sigma: float,
                spacing: float, p0: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """(animal, occasion) of every animal x station x day seen."""
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
    return np.asarray(animal, dtype=np.int64), np.asarray(occasion, dtype=np.int64)


def simulate(seed: int, *, n_animals: int = 60, n_occasions: int = 10, removed: float = 0.3,
             quality: tuple[float, float] = (0.5, 3.0),
             grid: tuple[int, int] = (4, 3), sigma: float = 1.5, spacing: float = 2.0,
             p0: tuple[float, float] = (0.8, 5.0)) -> Study:
    """One study: detections as (animal, occasion) per animal x station x day seen; ``removed`` of them lose
    their individual; each has a photo quality mu drawn uniformly from ``quality``."""
    rng = np.random.default_rng(seed)
    animal_a, occ_a = _detections(rng, n_animals=n_animals, n_occasions=n_occasions, grid=grid, sigma=sigma,
                                  spacing=spacing, p0=p0)
    n_removed = int(round(removed * animal_a.size))
    unreviewed = np.sort(rng.choice(animal_a.size, size=n_removed, replace=False))
    mu = rng.uniform(*quality, size=n_removed)
    unit_scores, pair = _scores(rng, animal_a[unreviewed], n_animals, mu)
    return Study(animal=animal_a, occasion=occ_a, n_occasions=n_occasions, unreviewed=unreviewed,
                 unit_scores=unit_scores, pair_scores=pair, mu=mu)


def simulate_photos(seed: int, bank: PhotoBank, *, n_animals: int = 60, n_occasions: int = 10,
                    removed: float = 0.3, grid: tuple[int, int] = (4, 3), sigma: float = 1.5, spacing: float = 2.0,
                    p0: tuple[float, float] = (0.8, 5.0)) -> PhotoStudy:
    """One study on real photos: the detections of :func:`simulate` (one per animal and occasion, as the
    capture histories count them); each detected animal a distinct animal of ``bank`` with at least as many
    sightings as its occasions (drawn at random), each detection a photo of another of its sightings (two photos
    of one moment would match on the shared background); ``removed`` of the detections lose their individual."""
    rng = np.random.default_rng(seed)
    animal_a, occ_a = _detections(rng, n_animals=n_animals, n_occasions=n_occasions, grid=grid, sigma=sigma,
                                  spacing=spacing, p0=p0)
    pairs = np.unique(np.column_stack([animal_a, occ_a]), axis=0)
    animal_a, occ_a = pairs[:, 0], pairs[:, 1]
    seen, per_animal = np.unique(animal_a, return_counts=True)
    sightings = [np.unique(bank.sighting[bank.photos_of(k)]) for k in range(len(bank.names))]
    free = list(rng.permutation(len(bank.names)))
    photo = np.empty(animal_a.size, dtype=np.int64)
    for i in np.argsort(-per_animal, kind="stable"):
        k = next((k for k in free if sightings[k].size >= per_animal[i]), None)
        if k is None:
            raise ValueError(f"the photo bank has no animal left with {per_animal[i]} sightings")
        free.remove(k)
        mine = np.flatnonzero(animal_a == seen[i])
        for d, sg in zip(mine, rng.choice(sightings[k], size=mine.size, replace=False)):
            photo[d] = rng.choice(np.flatnonzero((bank.identity == k) & (bank.sighting == sg)))
    n_removed = int(round(removed * animal_a.size))
    unreviewed = np.sort(rng.choice(animal_a.size, size=n_removed, replace=False))
    return PhotoStudy(animal=animal_a, occasion=occ_a, n_occasions=n_occasions, unreviewed=unreviewed, photo=photo,
                      bank=bank)


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


def review_comparison(studies: Iterable[_Truth], *, reviews: int = 20, random_sets: int = 4, draws: int = 200
                      ) -> dict[str, float]:
    """A simulated curator answers the ``reviews`` top-priority annotations of each study, or ``reviews`` random
    ones, with the truth: the Mh-Chao interval's width after each (the random side the mean of ``random_sets``
    sets, so that which ones happen to be drawn does not drown the comparison), the narrowing, the
    identification part left, their paired one-sided Wilcoxon p-values, and the median over the open annotations
    of their most probable individual's probability (how sharply the match probabilities discriminate)."""
    top_narrow, rand_narrow, top_ident, rand_ident, top_width, rand_width, top_p = [], [], [], [], [], [], []
    for s, st in enumerate(studies):
        inp = st.input()
        before = ids.impute(inp, draws=draws, seed=s)
        e0 = before.estimate("Mh-Chao")
        ranked = ids.review_priority(inp, before)
        assert [p.variance_explained for p in ranked] == sorted((p.variance_explained for p in ranked), reverse=True)
        top_p += [max(u.probabilities, default=0.0) for u in inp.units]
        rng = np.random.default_rng(s)
        keys = [u.key for u in inp.units]
        sides = [("top", [inp.units[p.unit].key for p in ranked[:reviews]])]
        sides += [("random", list(rng.choice(keys, size=reviews, replace=False))) for _ in range(random_sets)]
        width: dict[str, list[float]] = {"top": [], "random": []}
        ident: dict[str, list[float]] = {"top": [], "random": []}
        for side, chosen in sides:
            after = ids.impute(st.input(chosen), draws=draws, seed=99).estimate("Mh-Chao")
            width[side].append(after.ci_high - after.ci_low)
            ident[side].append(width[side][-1] * (after.share_from_identification or 0.0))
        top_width.append(width["top"][0])
        rand_width.append(float(np.mean(width["random"])))
        top_narrow.append((e0.ci_high - e0.ci_low) - top_width[-1])
        rand_narrow.append((e0.ci_high - e0.ci_low) - rand_width[-1])
        top_ident.append(ident["top"][0])
        rand_ident.append(float(np.mean(ident["random"])))
    return {"studies": len(top_width), "top_width": float(np.mean(top_width)),
            "random_width": float(np.mean(rand_width)), "top_narrow": float(np.mean(top_narrow)),
            "random_narrow": float(np.mean(rand_narrow)), "top_ident": float(np.mean(top_ident)),
            "random_ident": float(np.mean(rand_ident)),
            "p_narrow": float(stats.wilcoxon(top_narrow, rand_narrow, alternative="greater").pvalue),
            "p_ident": float(stats.wilcoxon(rand_ident, top_ident, alternative="greater").pvalue),
            "median_top_probability": float(np.median(top_p))}
