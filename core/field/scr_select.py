"""Model selection among SCR fits as secr's ``AIC()`` and ``modelAverage()`` make it.

:func:`aic_table` ranks fits by AICc (or AIC) with the difference from the best and Akaike weights (models more
than ``dmax`` = 10 units behind get weight 0, as secr does); :func:`model_average_density` averages each session's
D on the log scale with those weights (secr's ``average = "link"``: the variance is the weighted sum of each
model's variance plus its squared deviation from the average, the interval Wald on the log scale);
:func:`compare_models` fits a set of models on one data set and returns both.

A table is refused where its likelihoods are not comparable: conditional with full, pooled proximity occasions
(secr's ``fastproximity``) with occasion-by-occasion ones (they differ by a constant), or sex as a mixture in some
models only (secr refuses different ``hcov``). :func:`compare_models` avoids the last two by fitting the whole set
on one scale."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from core.field.density import Z95, Estimate
from core.field.scr_errors import DensityInputError
from core.field.scr_fit import ScrModelFit, fit_scr_model
from core.field.scr_models import ScrSession, parse_model

#: Models further than this behind the best get weight 0 (secr's ``dmax``).
DMAX = 10.0


@dataclass(frozen=True)
class AicRow:
    """One model's line of the table, as secr's ``AIC()`` prints it."""

    model: str
    detectfn: str
    n_parameters: int
    loglik: float
    aic: float
    aicc: float
    delta: float
    weight: float


@dataclass(frozen=True, eq=False)
class ModelComparison:
    """Fits of a model set on one data set, their table (best first) and the model-averaged D of each session."""

    fits: tuple[ScrModelFit, ...]
    table: tuple[AicRow, ...]
    criterion: str
    averaged_density: tuple[tuple[str, Estimate], ...]
    notes: tuple[str, ...] = ()

    @property
    def best(self) -> ScrModelFit:
        return next(f for f in self.fits if f.model == self.table[0].model)

    def as_dict(self) -> dict[str, object]:
        return {"criterion": self.criterion, "table": [_row_dict(r, self.criterion) for r in self.table],
                "model_averaged": [{"session": s, "D_per_100km2": e.scaled(10_000.0).as_dict()}
                                   for s, e in self.averaged_density],
                "fits": [f.as_dict() for f in self.fits], "notes": list(self.notes)}


def _row_dict(row: AicRow, criterion: str) -> dict[str, object]:
    return {"model": row.model, "detectfn": row.detectfn, "npar": row.n_parameters, "logLik": row.loglik,
            "AIC": row.aic, "AICc": row.aicc if math.isfinite(row.aicc) else None, f"d{criterion}": row.delta,
            f"{criterion}wt": row.weight}


def _check_comparable(fits: Sequence[ScrModelFit]) -> None:
    if len({f.conditional for f in fits}) > 1:
        raise DensityInputError("conditional and full likelihoods cannot be ranked together; fit every model with "
                                "the same likelihood")
    if len({f.pooled for f in fits}) > 1:
        raise DensityInputError("models with pooled proximity occasions (secr's fastproximity) and models fitted "
                                "occasion by occasion differ by a constant and cannot be ranked together; fit them "
                                "all occasion by occasion (fastproximity=False)")
    if len({f.class_mode == "mixture" for f in fits}) > 1:
        raise DensityInputError("models with sex as secr's hcov mixture and models without it cannot be ranked "
                                "together (secr refuses different hcov); fit every model with hcov=True")
    if len({f.n_animals for f in fits}) > 1:
        raise DensityInputError("the fits are of different data (different numbers of animals); rank models of "
                                "one data set")


def aic_table(fits: Sequence[ScrModelFit], *, criterion: str = "AICc", dmax: float = DMAX) -> tuple[AicRow, ...]:
    """The fits ranked by ``criterion`` ("AICc" or "AIC"), best first, with dAICc and Akaike weights."""
    if criterion not in ("AIC", "AICc"):
        raise DensityInputError(f"criterion {criterion!r} unknown; use 'AIC' or 'AICc'")
    if not fits:
        raise DensityInputError("no fits to rank")
    _check_comparable(fits)
    values = np.array([f.aicc if criterion == "AICc" else f.aic for f in fits], dtype=float)
    if not np.all(np.isfinite(values)):
        raise DensityInputError("AICc is not defined where a model has as many parameters as animals less one; "
                                "rank by AIC or fit fewer parameters")
    delta = values - values.min()
    keep = np.abs(delta) < abs(dmax)
    raw = np.where(keep, np.exp(-delta / 2), 0.0)
    weights = raw / raw.sum()
    rows = [AicRow(model=f.model, detectfn=f.detectfn, n_parameters=f.n_parameters, loglik=f.loglik, aic=f.aic,
                   aicc=f.aicc, delta=float(d), weight=float(w)) for f, d, w in zip(fits, delta, weights)]
    return tuple(sorted(rows, key=lambda r: r.delta))


def model_average_density(fits: Sequence[ScrModelFit], table: Sequence[AicRow]) -> tuple[tuple[str, Estimate], ...]:
    """Each session's D averaged over the models on the log scale with the table's weights (see the module's
    docstring)."""
    weight = {r.model: r.weight for r in table}
    out = []
    for j, session in enumerate(fits[0].sessions):
        etas, variances, ws = [], [], []
        for f in fits:
            d = f.sessions[j].density_per_ha
            etas.append(math.log(d.value))
            variances.append((d.se / d.value) ** 2 if math.isfinite(d.se) else math.nan)
            ws.append(weight[f.model])
        eta = float(np.dot(ws, etas))
        variance = float(np.dot(ws, np.array(variances) + (np.array(etas) - eta) ** 2))
        se = math.sqrt(variance) if variance >= 0 else math.nan
        value = math.exp(eta)
        out.append((session.name, Estimate(value, value * se, math.exp(eta - Z95 * se), math.exp(eta + Z95 * se))))
    return tuple(out)


def split_models(text: str) -> list[str]:
    """``"g0~1; g0~b; g0~sex, sigma~sex"`` as its models."""
    models = [m.strip() for m in text.split(";") if m.strip()]
    if not models:
        raise DensityInputError("no model to fit; give models separated by ';', e.g. 'g0~1; g0~b'")
    return models


def compare_models(sessions: Sequence[ScrSession], models: str | Sequence[str], *, detectfn: str = "HN",
                   conditional: bool = False, d_link: str = "log", fastproximity: bool = True,
                   criterion: str = "AICc",
                   progress: Callable[[float, str], None] | None = None,
                   assess: Callable[[ScrModelFit], None] | None = None) -> ModelComparison:
    """Fit every model on ``sessions`` on one likelihood scale and rank them. Where one model has sex in the full
    likelihood every model is fitted with secr's hcov mixture (pmix estimated in each), and where one has ``t``,
    ``b`` or ``bk`` every proximity model is fitted occasion by occasion, so that the table compares like with
    like; the notes say so. ``assess`` sees each fit before the ranking (it raises to refuse one the data cannot
    carry: a table of such fits says nothing)."""
    report = progress or (lambda fraction, message: None)
    texts = split_models(models) if isinstance(models, str) else list(models)
    formulas = [parse_model(m) for m in texts]
    if len({f.text for f in formulas}) != len(formulas):
        raise DensityInputError("a model is given twice; give each model once")
    notes = []
    hcov = not conditional and any(f.uses("sex") or f.uses("h2") for f in formulas)
    if hcov:
        notes.append("every model fitted with sex as secr's hcov mixture (pmix ~ h2), so that their AICc compare")
    by_occasion = any(t in f.of(p) for f in formulas for p in ("g0", "lambda0", "sigma") for t in ("t", "T", "b", "bk"))
    pooled = fastproximity and not by_occasion
    if fastproximity and by_occasion and sessions and sessions[0].history.detector_type == "proximity":
        notes.append("every model fitted occasion by occasion (not pooled), as one of them varies by occasion")
    fits = []
    for j, formula in enumerate(formulas):
        report(j / len(formulas), f"fitting {formula} ({j + 1} of {len(formulas)})")
        fits.append(fit_scr_model(sessions, formula, detectfn=detectfn, conditional=conditional, d_link=d_link,
                                  hcov=True if hcov else None, fastproximity=pooled))
        if assess is not None:
            assess(fits[-1])
    table = aic_table(fits, criterion=criterion)
    report(1.0, "done")
    return ModelComparison(fits=tuple(fits), table=table, criterion=criterion,
                           averaged_density=model_average_density(fits, table), notes=tuple(notes))


def format_aic_table(table: Sequence[AicRow], *, criterion: str = "AICc") -> str:
    """The table as secr's ``AIC()`` prints it."""
    header = f"{'model':<32} {'detectfn':<17} {'npar':>4} {'logLik':>11} {'AIC':>9} {'AICc':>9} " \
             f"{'d' + criterion:>7} {criterion + 'wt':>7}"
    names = {"HN": "halfnormal", "HHN": "hazard halfnormal", "EX": "exponential"}
    lines = [header]
    for r in table:
        detectfn = names.get(r.detectfn, r.detectfn)
        lines.append(f"{r.model:<32} {detectfn:<17} {r.n_parameters:>4} {r.loglik:>11.3f} "
                     f"{r.aic:>9.3f} {r.aicc:>9.3f} {r.delta:>7.3f} {r.weight:>7.4f}")
    return "\n".join(lines)
