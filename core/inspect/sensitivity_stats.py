"""Selective sensitivity, the statistics and the figure: per dimension the least-squares slope of
similarity-to-original against edit strength with a bootstrap CI over photos (scipy), the selectivity
(|identity slope| / steepest context slope) with its CI, plain-word verdicts, and the plotly curves. The edits
themselves are :mod:`core.inspect.sensitivity`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from core.inspect.sensitivity import CONTEXT_DIMENSIONS, DIMENSION_COLOURS, DIMENSION_WORDS, DIMENSIONS, STRENGTHS
from core.similarity import METRICS, l2_normalize, paired_scores

# --------------------------------------------------------------------------- statistics


def similarity_to_original(original: np.ndarray, edited: np.ndarray, *, metric: str = "cosine") -> np.ndarray:
    """s(e(x), e(edit(x))) per row with the model's score (cosine of normalised rows, or exp(-d)); a row equal to
    its original scores exactly 1 (the score of a point with itself)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    a, b = np.atleast_2d(np.asarray(original)), np.atleast_2d(np.asarray(edited))
    if a.shape != b.shape:
        raise ValueError(f"original and edited embeddings differ in shape: {a.shape} vs {b.shape}")
    if metric == "cosine":
        a, b = l2_normalize(a), l2_normalize(b)
    sims = np.clip(paired_scores(a, b, metric=metric).astype(np.float64), -1.0, 1.0)
    return np.where(np.all(a == b, axis=1), 1.0, sims)


def least_squares_slope(strengths: Sequence[float], similarities: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through every (strength, similarity) point of every photo
    (``similarities`` is N photos x S strengths)."""
    y = np.asarray(similarities, dtype=np.float64)
    x = np.broadcast_to(np.asarray(strengths, dtype=np.float64), y.shape)
    ok = np.isfinite(y)
    xs, ys = x[ok], y[ok]
    if xs.size < 2 or np.ptp(xs) == 0:
        raise ValueError("a slope needs points at two strengths at least")
    xm, ym = xs.mean(), ys.mean()
    slope = float(np.sum((xs - xm) * (ys - ym)) / np.sum((xs - xm) ** 2))
    return slope, float(ym - slope * xm)


def _per_photo_slopes(strengths: Sequence[float], sims: np.ndarray) -> np.ndarray:
    x = np.asarray(strengths, dtype=np.float64)
    xc = x - x.mean()
    return (np.asarray(sims, dtype=np.float64) - np.asarray(sims, dtype=np.float64).mean(axis=1, keepdims=True)) \
        @ xc / np.sum(xc ** 2)


def selectivity_of(slopes: Mapping[str, float]) -> float | None:
    """|identity slope| / max(|background slope|, |lighting slope|, |viewpoint slope|); None when the context
    slopes are all 0 (no context edit moves the model at all: the ratio is unbounded)."""
    steepest = max(abs(float(slopes[d])) for d in CONTEXT_DIMENSIONS)
    return None if steepest == 0 else abs(float(slopes["identity"])) / steepest


def _selectivity_vec(*slope_sets: np.ndarray, axis: int = -1) -> np.ndarray:
    ident, *context = (np.abs(np.mean(s, axis=axis)) for s in slope_sets)
    steepest = np.max(np.stack(context), axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(steepest > 0, ident / np.where(steepest > 0, steepest, 1.0), np.inf)


@dataclass(frozen=True)
class DimensionStats:
    """One dimension's figures: the slope of similarity against strength with its CI, and the mean curve."""

    dimension: str
    slope: float
    ci_low: float | None
    ci_high: float | None
    intercept: float
    curve: list[float]
    curve_low: list[float]
    curve_high: list[float]


@dataclass(frozen=True)
class SensitivityResult:
    """What :func:`summarise_sensitivity` finds; ``to_dict`` is what is stored and printed as JSON."""

    strengths: list[float]
    n_photos: int
    dimensions: dict[str, DimensionStats]
    selectivity: float | None
    selectivity_ci: tuple[float | None, float | None]
    steepest_context: str
    verdict: str
    verdicts: list[str]
    confidence: float
    n_resamples: int
    seed: int
    per_photo_slopes: dict[str, list[float]] = field(repr=False, default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["selectivity_ci"] = list(self.selectivity_ci)
        d["slopes"] = {k: v.slope for k, v in self.dimensions.items()}
        return d


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _bootstrap(data: tuple[np.ndarray, ...], statistic: Callable[..., Any], *, seed: int, n_resamples: int,
               confidence: float, paired: bool = False, axis: int = 0) -> tuple[Any, Any]:
    from scipy import stats as sps  # lazy: scipy.stats takes ~0.4 s to import, needed only for the intervals

    res = sps.bootstrap(data, statistic, n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                        rng=np.random.default_rng(seed), paired=paired, vectorized=True, axis=axis)
    return res.confidence_interval.low, res.confidence_interval.high


def summarise_sensitivity(similarities: Mapping[str, np.ndarray], strengths: Sequence[float] = STRENGTHS, *,
                          seed: int = 0, n_resamples: int = 2000, confidence: float = 0.95) -> SensitivityResult:
    """Slopes, bootstrap CIs, curves, selectivity and verdicts from ``similarities[dimension]`` (N photos x S
    strengths, the same photos in every dimension). With fewer than two photos there are no intervals."""
    missing = [d for d in DIMENSIONS if d not in similarities]
    if missing:
        raise ValueError(f"similarities for every dimension are needed; missing: {', '.join(missing)}")
    sims = {d: np.asarray(similarities[d], dtype=np.float64) for d in DIMENSIONS}
    n = sims["identity"].shape[0]
    if any(s.shape != (n, len(strengths)) for s in sims.values()):
        raise ValueError(f"every dimension needs an N x {len(strengths)} array for the same N photos")
    if n == 0:
        raise ValueError("no photos to summarise")
    per_photo = {d: _per_photo_slopes(strengths, sims[d]) for d in DIMENSIONS}
    stats: dict[str, DimensionStats] = {}
    for k, d in enumerate(DIMENSIONS):
        slope, intercept = least_squares_slope(strengths, sims[d])
        curve = sims[d].mean(axis=0)
        lo = hi = None
        c_lo, c_hi = curve.copy(), curve.copy()
        if n >= 2:
            if np.ptp(per_photo[d]) > 0:
                lo, hi = _bootstrap((per_photo[d],), np.mean, seed=seed + k, n_resamples=n_resamples,
                                    confidence=confidence)
            else:
                lo = hi = slope
            varying = np.ptp(sims[d], axis=0) > 0
            if varying.any():
                b_lo, b_hi = _bootstrap((sims[d][:, varying],), np.mean, seed=seed + 10 + k,
                                        n_resamples=n_resamples, confidence=confidence)
                c_lo[varying], c_hi[varying] = b_lo, b_hi
        stats[d] = DimensionStats(d, slope, _finite(lo), _finite(hi), intercept, [float(v) for v in curve],
                                  [float(v) for v in c_lo], [float(v) for v in c_hi])
    slopes = {d: stats[d].slope for d in DIMENSIONS}
    sel = selectivity_of(slopes)
    sel_ci: tuple[float | None, float | None] = (None, None)
    if n >= 2 and sel is not None:
        data = tuple(per_photo[d] for d in ("identity", *CONTEXT_DIMENSIONS))
        if any(np.ptp(x) > 0 for x in data):
            with np.errstate(divide="ignore", invalid="ignore"):
                lo, hi = _bootstrap(data, _selectivity_vec, seed=seed + 20, n_resamples=n_resamples,
                                    confidence=confidence, paired=True, axis=0)
            sel_ci = (_finite(lo), _finite(hi))
        else:
            sel_ci = (sel, sel)
    steepest = max(CONTEXT_DIMENSIONS, key=lambda d: abs(slopes[d]))
    verdicts = sensitivity_verdicts(slopes, sel, sel_ci, n_photos=n, confidence=confidence)
    return SensitivityResult(strengths=[float(s) for s in strengths], n_photos=n, dimensions=stats, selectivity=sel,
                             selectivity_ci=sel_ci, steepest_context=steepest, verdict=verdicts[0],
                             verdicts=verdicts, confidence=confidence, n_resamples=n_resamples, seed=seed,
                             per_photo_slopes={d: [float(v) for v in per_photo[d]] for d in DIMENSIONS})


def sensitivity_verdicts(slopes: Mapping[str, float], selectivity: float | None,
                         selectivity_ci: tuple[float | None, float | None] = (None, None), *, n_photos: int = 0,
                         confidence: float = 0.95) -> list[str]:
    """The verdict in plain words, headline first: is the model moved more by a different animal's coat than by
    any change of context, and by which context more than by the coat."""
    coat = DIMENSION_WORDS["identity"]
    ident = float(slopes["identity"])
    steepest = max(CONTEXT_DIMENSIONS, key=lambda d: abs(float(slopes[d])))
    worse = sorted((d for d in CONTEXT_DIMENSIONS if abs(float(slopes[d])) >= abs(ident)),
                   key=lambda d: -abs(float(slopes[d])))
    lo, hi = selectivity_ci
    pct = f"{100 * confidence:.0f}%"
    if ident >= 0:
        head = (f"A different animal's coat does not lower this model's similarity at all (slope {ident:+.3f}): "
                "it does not tell this animal from another by the coat.")
    elif selectivity is None:
        head = ("Selective: no change of context moves this model's similarity, while a different animal's coat "
                f"lowers it (slope {ident:+.3f}).")
    elif selectivity > 1:
        head = (f"Selective: a different animal's coat lowers this model's similarity {selectivity:.1f} times as "
                f"much as the strongest change of context ({DIMENSION_WORDS[steepest]}).")
        if lo is not None and lo <= 1:
            head += (f" Not certain on {n_photos} photos: the {pct} interval of that ratio ({lo:.2f} to {hi:.2f}) "
                     "reaches 1.")
    else:
        head = (f"Not selective: this model is moved more by {DIMENSION_WORDS[steepest]} than by {coat} "
                f"(the coat moves it {selectivity:.2f} times as much).")
        if hi is not None and hi >= 1:
            head += (f" Not certain on {n_photos} photos: the {pct} interval of that ratio ({lo:.2f} to {hi:.2f}) "
                     "reaches 1.")
    out = [head]
    out += [f"This model is moved more by {DIMENSION_WORDS[d]} than by {coat} (slope {float(slopes[d]):+.3f} "
            f"against {ident:+.3f})." for d in worse if not (ident < 0 and selectivity is not None
                                                              and selectivity <= 1 and d == steepest)]
    calm = [d for d in CONTEXT_DIMENSIONS if d not in worse]
    if calm and ident < 0:
        out.append(f"{coat[0].upper() + coat[1:]} moves it more than "
                   + " or ".join(DIMENSION_WORDS[d] for d in calm) + ".")
    return out


# --------------------------------------------------------------------------- the figure


def sensitivity_figure(result: Mapping[str, Any], *, provenance: str = "", title: str | None = None) -> Any:
    """Plotly: mean similarity to the original photo against edit strength, one curve per dimension with its
    interval as error bars, the slope in the legend, the selectivity above the plot. ``result`` is
    :meth:`SensitivityResult.to_dict` (or a stored run's metrics holding it)."""
    import plotly.graph_objects as go  # lazy: plotly is only needed once a run is drawn

    strengths = list(result.get("strengths") or STRENGTHS)
    dims = result.get("dimensions") or {}
    fig = go.Figure()
    for d in DIMENSIONS:
        st = dims.get(d)
        if not st:
            continue
        curve = st["curve"]
        upper = [h - m for h, m in zip(st["curve_high"], curve)]
        lower = [m - lo for m, lo in zip(curve, st["curve_low"])]
        ci = (f" [{st['ci_low']:+.3f}, {st['ci_high']:+.3f}]" if st.get("ci_low") is not None
              and st.get("ci_high") is not None else "")
        hover = [f"{DIMENSION_WORDS[d]} ({d}) at strength {s:g}<br>mean similarity to the original {m:.3f}"
                 f" ({lo:.3f} to {hi:.3f})<br>slope {st['slope']:+.3f}{ci}"
                 + (f"<br>{provenance.replace('; ', '<br>')}" if provenance else "")
                 for s, m, lo, hi in zip(strengths, curve, st["curve_low"], st["curve_high"])]
        fig.add_trace(go.Scatter(x=strengths, y=curve, mode="lines+markers", name=f"{d}: slope {st['slope']:+.3f}{ci}",
                                 line={"color": DIMENSION_COLOURS[d], "width": 3 if d == "identity" else 2,
                                           "dash": "solid" if d == "identity" else "dot"},
                                 error_y={"type": "data", "array": upper, "arrayminus": lower, "visible": True},
                                 hovertext=hover, hoverinfo="text"))
    sel = result.get("selectivity")
    lo, hi = (result.get("selectivity_ci") or [None, None])[:2]
    text = "<b>Selectivity " + ("unbounded" if sel is None else f"{sel:.2f}") + "</b>"
    if lo is not None and hi is not None:
        text += f" ({lo:.2f} to {hi:.2f})"
    fig.add_annotation(xref="paper", yref="paper", x=1.0, y=1.12, showarrow=False, align="right", text=text,
                       hovertext="selectivity = |identity slope| / steepest |context slope| (background, lighting, "
                                 "viewpoint); above 1: a different animal's coat moves the model more than context")
    lows = [v for d in dims.values() for v in d.get("curve_low", [])]
    bottom = min([0.0, *lows]) if lows and min(lows) < 0 else max(0.0, min(lows or [0.0]) - 0.05)
    fig.update_layout(title=title or "How far each kind of change moves the model's similarity to the original photo",
                      height=420, margin={"l": 60, "r": 20, "t": 90, "b": 50}, legend={"orientation": "h", "y": -0.2},
                      xaxis={"title": "strength of the change (0 = the photo itself)", "tickvals": strengths},
                      yaxis={"title": "similarity to the original photo", "range": [bottom, 1.02]})
    return fig
