"""Calibrated confidence: raw match scores -> "probability this is the same animal".

Two fits, each monotone in the score, so the ranking never changes, only how a score reads: Platt scaling
(:func:`fit_platt`, smooth, usable from a handful of outcomes; match review uses it while outcomes are fewer than
:data:`ISOTONIC_FROM`) and isotonic regression (:func:`fit_calibrator`, whose thresholds the spot-evidence fusion
reads). :func:`reliability` gives the reliability diagram and ECE; :func:`spread` says how well one query's
candidates' probabilities are told apart; :func:`discrimination` says whether the calibrated probabilities tell the
same animal from a different one at all (while they do not, no screen shows a probability).

Curators reject high-scoring top candidates: outcomes that fall with the score are ordinary, never a reason to refuse
a calibration. :func:`fit_platt` is a monotone fit (the score's weight is kept >= 0): where the outcomes do not rise
with the score the best monotone logistic fit is flat at the outcomes' base rate, which :func:`discrimination` then
reads as "does not discriminate".

Why each fit is used where it is, and the ECE formula: docs/retrieval.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MIN_OUTCOMES = 10  # isotonic
MIN_PLATT_OUTCOMES = 4  # Platt: a rough curve from the first few decisions, said to be rough
ISOTONIC_FROM = 2000  # match review switches to isotonic only when its steps are this well supported
PLATT = "platt"
ENOUGH_DECISIONS = 50  # from this many decided pairs on, the curators' decisions alone are trusted
ISOTONIC = "isotonic"
FLAT = "flat"  # the monotone fit where the outcomes do not rise with the score: every score reads the base rate
MIN_AUC = 0.6  # discrimination: the held-out AUC must reach this, and its 95% lower bound lie above 0.5
MAX_FOLDS = 5


@dataclass(frozen=True)
class Discrimination:
    """Whether calibrated probabilities tell same from different: the held-out (cross-validated) AUC of the
    calibrated p(same) on the outcomes, its 95% lower bound (Hanley and McNeil's standard error) and how many
    outcomes it rests on. It discriminates when the AUC is at least :data:`MIN_AUC` and its lower bound above 0.5:
    short of that, a probability shown would read as evidence the scores do not carry."""

    auc: float | None
    low: float | None
    n_outcomes: int
    n_positive: int

    @property
    def discriminates(self) -> bool:
        return self.auc is not None and self.low is not None and self.auc >= MIN_AUC and self.low > 0.5

    def figure(self) -> str:
        """e.g. ``held-out AUC 0.52 (lower bound 0.31) on 14 decided pairs, 5 the same animal``."""
        what = (f"held-out AUC {self.auc:.2f} (95% lower bound {self.low:.2f})" if self.auc is not None
                else "no held-out AUC (too few of one outcome to hold any out)")
        return f"{what} on {self.n_outcomes} pairs of known outcome, {self.n_positive} of the same animal"

    def withheld(self, species: str) -> str:
        """The one line a screen shows instead of probabilities: why, and what would change it."""
        return (f"No match probabilities for {species} yet: the calibration cannot tell the same animal from a "
                f"different one ({self.figure()}; it needs an AUC of at least {MIN_AUC:.1f} and a lower bound above "
                f"0.5). Decide more matches in Match review, both 'Same' and 'Not the same', or identify more "
                f"photos: probabilities return once the scores rank the same animal above the others.")


@dataclass
class Calibrator:
    """A fitted score -> probability map with what it rests on."""

    model: Any
    n_outcomes: int
    n_positive: int
    sources: dict[str, int] = field(default_factory=dict)
    method: str = ISOTONIC
    uses_rank: bool = False  # Platt on (score, log rank): pass each candidate's rank to :meth:`probability`
    discrimination: Discrimination | None = None  # set by whoever measured it (db.identify.calibration)

    def probability(self, scores: np.ndarray | list[float], ranks: np.ndarray | list[int] | None = None) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        if self.method == FLAT:
            return np.full(s.shape, float(self.model))
        if self.method == PLATT:
            return self.model.predict_proba(_platt_features(s, ranks if self.uses_rank else None,
                                                            with_rank=self.uses_rank))[:, 1]
        return np.clip(self.model.predict(s), 0.0, 1.0)

    def describe(self) -> str:
        """How it was fitted, in words for the match-review note."""
        if self.method == PLATT:
            return "Platt scaling (logistic on score" + (" and rank)" if self.uses_rank else ")")
        if self.method == FLAT:
            return "a flat fit (these outcomes do not rise with the score: every score reads their base rate)"
        return "isotonic regression"


def _platt_features(scores: np.ndarray, ranks: np.ndarray | list[int] | None, *, with_rank: bool) -> np.ndarray:
    if not with_rank:
        return scores[:, None]
    r = np.ones_like(scores) if ranks is None else np.asarray(ranks, dtype=np.float64).reshape(-1)
    if r.shape != scores.shape:
        raise ValueError(f"{scores.size} scores but {r.size} ranks")
    return np.column_stack([scores, np.log(np.maximum(r, 1.0))])


def _checked(scores, outcomes, ranks=None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} outcomes")
    r = None if ranks is None else np.asarray(ranks, dtype=np.float64).reshape(-1)
    if r is not None and r.shape != s.shape:
        raise ValueError(f"{s.size} scores but {r.size} ranks")
    keep = np.isfinite(s) & (np.isfinite(r) if r is not None else True)
    return s[keep], y[keep], (r[keep] if r is not None else None)


def fit_calibrator(scores: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
                   sources: dict[str, int] | None = None) -> Calibrator:
    """Isotonic fit of outcomes (1 same, 0 not) on scores; needs both outcomes and MIN_OUTCOMES pairs."""
    from sklearn.isotonic import IsotonicRegression

    s, y, _ = _checked(scores, outcomes)
    if s.size < MIN_OUTCOMES or len(np.unique(y)) < 2:
        raise ValueError(f"calibration needs at least {MIN_OUTCOMES} decisions with both 'same' and 'not the same' "
                         f"among them; there are {s.size} ({int(y.sum())} same)")
    model = IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(s, y)
    return Calibrator(model=model, n_outcomes=int(s.size), n_positive=int(y.sum()), sources=dict(sources or {}))


def fit_platt(scores: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
              ranks: np.ndarray | list[int] | None = None, sources: dict[str, int] | None = None,
              strength: float = 1.0) -> Calibrator:
    """Platt scaling: logistic regression of outcomes on the standardised score (and log rank when given), with
    an L2 prior of ``strength`` (scikit-learn's C = 1 / strength).

    The probability must never reorder candidates: it has to rise with the score and not rise with the rank.
    A rank weight of the wrong sign is dropped (refit on the score alone); where the score's weight is still not
    positive the outcomes do not rise with the score (curators rejected high-scoring candidates), and the best fit
    with a weight >= 0 is flat at the outcomes' base rate (:data:`FLAT`). Refused (``ValueError``) only without
    :data:`MIN_PLATT_OUTCOMES` outcomes and both kinds among them."""
    from sklearn.linear_model import LogisticRegression  # lazy: scikit-learn is heavy to import
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    s, y, r = _checked(scores, outcomes, ranks)
    if s.size < MIN_PLATT_OUTCOMES or len(np.unique(y)) < 2:
        raise ValueError(f"calibration needs at least {MIN_PLATT_OUTCOMES} decisions with both 'same' and "
                         f"'not the same' among them; there are {s.size} ({int(y.sum())} same)")
    use_rank = r is not None and np.unique(r).size > 1
    for with_rank in ((True, False) if use_rank else (False,)):
        model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0 / strength))
        model.fit(_platt_features(s, r, with_rank=with_rank), y)
        w = model[-1].coef_[0]
        if w[0] > 0 and (not with_rank or w[1] <= 0):
            return Calibrator(model=model, n_outcomes=int(s.size), n_positive=int(y.sum()),
                              sources=dict(sources or {}), method=PLATT, uses_rank=with_rank)
    return Calibrator(model=float(y.mean()), n_outcomes=int(s.size), n_positive=int(y.sum()),
                      sources=dict(sources or {}), method=FLAT)


def _auc_lower_bound(auc: float, n_pos: int, n_neg: int) -> float:
    """Hanley and McNeil's (1982) standard error of an AUC, as the 95% lower bound auc - 1.96 se."""
    q1, q2 = auc / (2.0 - auc), 2.0 * auc ** 2 / (1.0 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc ** 2) + (n_neg - 1) * (q2 - auc ** 2)) / (n_pos * n_neg)
    return float(auc - 1.959963984540054 * np.sqrt(max(var, 0.0)))


def discrimination(scores: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
                   ranks: np.ndarray | list[int] | None = None, seed: int = 0) -> Discrimination:
    """The held-out discrimination of :func:`fit_platt`'s probability on these outcomes: stratified k-fold
    (k = up to :data:`MAX_FOLDS`, at most the rarer outcome's count), each fold's probabilities from a fit on the
    others, one AUC over all of them (a fold whose fit is flat gives ties: no discrimination)."""
    from sklearn.metrics import roc_auc_score  # lazy: scikit-learn is heavy to import
    from sklearn.model_selection import StratifiedKFold

    s, y, r = _checked(scores, outcomes, ranks)
    n_pos = int(y.sum())
    n_neg = int(s.size - n_pos)
    folds = min(MAX_FOLDS, n_pos, n_neg)
    if folds < 2:
        return Discrimination(None, None, int(s.size), n_pos)
    held = np.empty(s.size)
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(s[:, None], y):
        try:
            cal = fit_platt(s[train], y[train], ranks=None if r is None else r[train])
        except ValueError:  # a training fold with too few of one outcome: it knows nothing
            held[test] = float(y[train].mean())
            continue
        held[test] = cal.probability(s[test], None if r is None else r[test])
    auc = float(roc_auc_score(y, held))
    return Discrimination(auc, _auc_lower_bound(auc, n_pos, n_neg), int(s.size), n_pos)


def fit_match_calibrator(scores: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
                         ranks: np.ndarray | list[int] | None = None,
                         sources: dict[str, int] | None = None) -> Calibrator:
    """What match review reads: Platt (score and rank) until :data:`ISOTONIC_FROM` outcomes, isotonic after."""
    n = int(np.isfinite(np.asarray(scores, dtype=np.float64)).sum())
    if n >= ISOTONIC_FROM:
        return fit_calibrator(scores, outcomes, sources=sources)
    return fit_platt(scores, outcomes, ranks=ranks, sources=sources)


def spread(probabilities_per_query: list[np.ndarray | list[float]], *, decimals: int = 2) -> dict[str, float]:
    """How well one query's candidates are told apart: the mean standard deviation of their probabilities, and
    the share of queries whose candidates all read the same (rounded to ``decimals``, as shown)."""
    rows = [np.asarray(p, dtype=np.float64) for p in probabilities_per_query if len(p) > 1]
    if not rows:
        return {"mean_std": 0.0, "all_equal": 0.0, "n_queries": 0}
    return {"mean_std": float(np.mean([p.std() for p in rows])),
            "all_equal": float(np.mean([np.unique(np.round(p, decimals)).size == 1 for p in rows])),
            "n_queries": len(rows)}


def reliability(probabilities: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
                n_bins: int = 10) -> dict[str, Any]:
    """Equal-width bins of predicted probability: per bin count, mean prediction, observed rate; and ECE."""
    p = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    y = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.digitize(p, edges[1:-1], right=False), 0, n_bins - 1)
    bins = []
    ece = 0.0
    for b in range(n_bins):
        m = idx == b
        n = int(m.sum())
        if n:
            pred, obs = float(p[m].mean()), float(y[m].mean())
            ece += n / max(1, p.size) * abs(obs - pred)
            bins.append({"low": float(edges[b]), "high": float(edges[b + 1]), "n": n, "predicted": pred,
                         "observed": obs})
    return {"bins": bins, "ece": float(ece), "n": int(p.size)}
