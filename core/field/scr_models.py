"""Spatial capture-recapture models beyond the null, in secr's formula language: several sessions fitted jointly,
sex (known, or secr's ``hcov`` two-class mixture where some animals are unsexed), learned responses ``b`` and
``bk``, occasion ``t``, and density over mask covariates.

A model is text such as ``"g0~b, sigma~sex"`` (:func:`parse_model`); :func:`prepare_models` turns it and a list of
:class:`ScrSession` into a :class:`PreparedModels` whose :meth:`PreparedModels.log_likelihood` takes the link-scale
coefficients, named as secr names them (``D``, ``D.Session``, ``g0.bTRUE``, ``sigma.h2M``, ``pmix.h2M``...).

Why the likelihood is organised as it is: every detection term depends on the data only through which
detection-parameter row (secr's parameter index array: session, occasion, learned state, class) applies to an
animal at a detector on an occasion, so the data are reduced once to weights over (row, detector) pairs and each
evaluation is a few matrix products over the mask. The formulas and the secr conventions matched:
docs/density.md, "Models beyond the null"."""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.special import expit, gammaln

from core.field.capthist import Trap
from core.field.scr_data import Capture, CaptureHistory, build_capture_history
from core.field.scr_errors import DensityInputError, MaskError, SigmaNotEstimable
from core.field.scr_likelihood import DETECTION_FUNCTIONS, logmultinomial
from core.field.scr_mask import Mask, points_in_polygons, read_geojson_polygon, read_mask_csv

_TINY = 1e-300
_LINK_LIMIT = 700.0
_KERNEL_CACHE = 8  # distance kernels kept per session (a gradient visits the current sigma and two neighbours)
_HAZARD_CACHE = 2  # hazard arrays kept: the latest, for the other sessions of the same layout

#: The real parameters a formula may name, with secr's default links.
LINKS = {"D": "log", "g0": "logit", "lambda0": "log", "sigma": "log", "pmix": "logit"}
#: Terms a detection parameter may depend on: sessions as a factor or a trend, occasions as a factor or a trend,
#: the learned responses, and sex (an individual covariate; ``h2`` is secr's name for the mixture class).
DETECTION_TERMS = ("session", "Session", "t", "T", "b", "bk", "sex", "h2")
#: Sex as secr's factor has it: levels in this order, so the second level's coefficient is named ``...M``.
SEX_LEVELS = ("F", "M")
_SEX_CODES = {"f": "F", "female": "F", "m": "M", "male": "M"}
_UNKNOWN_SEX = {"", "na", "nan", "u", "unknown", "?", "none", "unsexed"}
_TERM = re.compile(r"^[A-Za-z_.][A-Za-z0-9_.]*$")


# --------------------------------------------------------------------------- formulas


@dataclass(frozen=True)
class ModelFormula:
    """A parsed model: each real parameter's terms (absent or empty: constant, ``~1``)."""

    terms: Mapping[str, tuple[str, ...]]
    text: str

    def of(self, parameter: str) -> tuple[str, ...]:
        return tuple(self.terms.get(parameter, ()))

    def uses(self, term: str) -> bool:
        return any(term in t for t in self.terms.values())

    def __str__(self) -> str:
        return self.text


def parse_model(text: str) -> ModelFormula:
    """``"g0~b, sigma~sex"`` (formulas separated by commas, terms by ``+``; ``"~1"`` or ``""`` is the null model)
    as a :class:`ModelFormula`. Interactions and functions are refused: only additive models are fitted here."""
    source = (text or "").strip()
    terms: dict[str, tuple[str, ...]] = {}
    pieces = [p.strip() for p in source.split(",") if p.strip()]
    for piece in pieces:
        if "~" not in piece:
            raise DensityInputError(f"model {piece!r}: write each formula as 'parameter ~ terms', e.g. 'g0 ~ b'")
        lhs, rhs = (s.strip() for s in piece.split("~", 1))
        if not lhs:
            if len(pieces) == 1 and rhs == "1":
                break
            raise DensityInputError(f"model {piece!r}: name the parameter, e.g. 'g0 ~ b'")
        if lhs not in LINKS:
            raise DensityInputError(f"model {piece!r}: parameter {lhs!r} unknown; use one of {', '.join(LINKS)}")
        if lhs in terms:
            raise DensityInputError(f"model {source!r}: {lhs} has two formulas; give one, terms joined by '+'")
        if any(c in rhs for c in "*:()^-|/"):
            raise DensityInputError(f"model {piece!r}: only additive terms joined by '+' are fitted "
                                    "(no interactions, functions or removed terms)")
        names = [t.strip() for t in rhs.split("+")]
        if any(not t for t in names):
            raise DensityInputError(f"model {piece!r}: an empty term")
        names = [t for t in names if t != "1"]
        for t in names:
            if not _TERM.match(t):
                raise DensityInputError(f"model {piece!r}: term {t!r} is not a name")
        if len(set(names)) != len(names):
            raise DensityInputError(f"model {piece!r}: a term is given twice")
        terms[lhs] = tuple(names)
    shown = ", ".join(f"{p}~{'+'.join(t) if t else '1'}" for p, t in terms.items()) or "~1"
    return ModelFormula(terms=terms, text=shown)


# --------------------------------------------------------------------------- sessions and their inputs


def normalise_sex(code: object, *, animal: str = "", session: str = "") -> str | None:
    """'F' or 'M' from the codes a catalogue or a captures file uses; None for unknown; anything else refused."""
    if code is None or (isinstance(code, float) and math.isnan(code)):
        return None
    text = str(code).strip().lower()
    if text in _UNKNOWN_SEX:
        return None
    if text in _SEX_CODES:
        return _SEX_CODES[text]
    where = f" for animal {animal!r}" + (f" in session {session!r}" if session else "") if animal else ""
    raise DensityInputError(f"sex code {code!r}{where} is not known; use F or M (female, male), or leave it empty "
                            "(or NA) where the sex is not known")


@dataclass(frozen=True, eq=False)
class ScrSession:
    """One session (a site or a year): its capture history, its habitat mask with any covariates at the mask
    points, and each animal's sex ('F', 'M' or None for unknown, in ``history.animals`` order) where known."""

    name: str
    history: CaptureHistory
    mask: Mask
    sex: tuple[str | None, ...] | None = None
    mask_covariates: Mapping[str, np.ndarray] = field(default_factory=dict)


def read_mask_with_covariates(path: str | Path, *,
                              spacing_m: float | None = None) -> tuple[Mask, dict[str, np.ndarray]]:
    """A mask CSV (x, y columns) and its further columns as covariates at the mask points; an empty or NA cell is
    NaN, refused later only if a model uses that covariate."""
    mask = read_mask_csv(path, spacing_m=spacing_m)
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    header = [c.strip() for c in rows[0]]
    lower = [h.lower() for h in header]
    if "x" not in lower or "y" not in lower:
        return mask, {}
    covariates: dict[str, np.ndarray] = {}
    for j, name in enumerate(header):
        if lower[j] in ("x", "y") or not name:
            continue
        values = []
        for r in rows[1:]:
            cell = r[j].strip() if j < len(r) else ""
            try:
                values.append(float(cell) if cell and cell.upper() != "NA" else math.nan)
            except ValueError:
                raise MaskError(f"{path}: mask covariate {name!r} has a value {cell!r} that is not a number") from None
        covariates[name] = np.array(values, dtype=float)
    return mask, covariates


def mask_covariate_from_geojson(mask: Mask, source: str | Path | dict, attribute: str) -> np.ndarray:
    """A covariate at each mask point from a GeoJSON of habitat polygons (in the detectors' metres): the numeric
    ``attribute`` of the feature whose polygon holds the point (the first such feature), NaN where none does; a
    model using the covariate then refuses the points without a value."""
    data = source if isinstance(source, dict) else json.loads(Path(source).read_text(encoding="utf-8"))
    features = data.get("features", [data]) if data.get("type") == "FeatureCollection" else [data]
    values = np.full(mask.n_points, np.nan)
    found = False
    for feature in features:
        props = feature.get("properties") or {}
        if attribute not in props or feature.get("geometry") is None:
            continue
        try:
            value = float(props[attribute])
        except (TypeError, ValueError):
            raise MaskError(f"GeoJSON attribute {attribute!r} has a value {props[attribute]!r} that is not a "
                            "number") from None
        found = True
        inside = points_in_polygons(mask.xy, read_geojson_polygon(feature)) & np.isnan(values)
        values[inside] = value
    if not found:
        raise MaskError(f"no GeoJSON feature has the attribute {attribute!r}")
    return values


def read_secr_sex(path: str | Path, *, fmt: str = "trapID", column: int | None = None) -> dict[tuple[str, str], str]:
    """Each (session, animal)'s sex code from a secr captures file whose first covariate column holds it (the
    field after ``Detector``, or after ``X Y`` with ``fmt="XY"``); codes are checked by :func:`normalise_sex`
    when the sessions are built. An animal given two different codes is refused."""
    index = column if column is not None else (5 if fmt == "XY" else 4)
    out: dict[tuple[str, str], str] = {}
    text = Path(path).read_text(encoding="utf-8-sig")
    for number, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0].split()
        if not body:
            continue
        if len(body) <= index:
            raise DensityInputError(f"{Path(path).name} line {number}: no sex column (field {index + 1})")
        key = (body[0], body[1])
        code = body[index]
        if key in out and out[key] != code:
            raise DensityInputError(f"{Path(path).name} line {number}: animal {body[1]!r} in session {body[0]!r} "
                                    f"has sex {out[key]!r} and {code!r}; give each animal one sex")
        out[key] = code
    return out


def build_sessions(captures: Iterable[Capture | Sequence], traps: Sequence[Trap] | Sequence[Sequence[Trap]] |
                   Mapping[str, Sequence[Trap]], masks: Mask | Sequence[Mask] | Mapping[str, Mask], *,
                   detector_type: str, sex: Mapping[tuple[str, str], object] | Mapping[str, object] | None = None,
                   mask_covariates: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]] |
                   None = None, session_names: Sequence[str] | None = None) -> list[ScrSession]:
    """The sessions of a captures file, in the order they first appear (or ``session_names``): ``traps`` and
    ``masks`` given once for all sessions, or one per session in that order (or by name). ``sex`` maps
    (session, animal) or animal to a code. A session named by the traps or ``session_names`` without a capture is
    refused: it would contribute only its undetected animals, which secr does not fit either."""
    rows = [c if isinstance(c, Capture) else Capture(str(c[0]), str(c[1]), abs(int(c[2])), str(c[3]),
                                                     removed=int(c[2]) < 0) for c in captures]
    seen: list[str] = []
    for r in rows:
        if r.session not in seen:
            seen.append(r.session)
    names = list(session_names) if session_names is not None else list(seen)
    if isinstance(traps, Mapping):
        names += [n for n in traps if n not in names]
    if isinstance(masks, Mapping):
        names += [n for n in masks if n not in names]
    empty = [n for n in names if n not in seen]
    if empty:
        raise DensityInputError(f"session {empty[0]!r} has no captures; drop it or give its captures "
                                f"(sessions with captures: {', '.join(seen)})")

    def per_session(value, what: str, single) -> list:
        if single(value):
            return [value] * len(names)
        if isinstance(value, Mapping):
            missing = [n for n in names if n not in value]
            if missing:
                raise DensityInputError(f"no {what} for session {missing[0]!r}")
            return [value[n] for n in names]
        value = list(value)
        if len(value) != len(names):
            raise DensityInputError(f"{len(value)} {what} for {len(names)} sessions ({', '.join(names)}); give one "
                                    "for every session, in the order the sessions first appear, or one for all")
        return value

    trap_sets = per_session(traps, "traps", lambda v: len(v) > 0 and isinstance(list(v)[0], Trap))
    mask_list = per_session(masks, "masks", lambda v: isinstance(v, Mask))
    covs = per_session(mask_covariates, "mask covariates",
                       lambda v: isinstance(v, Mapping) and not any(isinstance(x, Mapping) for x in v.values())
                       ) if mask_covariates is not None else [{}] * len(names)
    out: list[ScrSession] = []
    for name, session_traps, mask, cov in zip(names, trap_sets, mask_list, covs):
        history = build_capture_history(rows, session_traps, detector_type=detector_type, session=name,
                                        require_spread=False)
        codes = None
        if sex is not None:
            lookup: Mapping = sex
            codes = tuple(normalise_sex(lookup.get((name, a), lookup.get(a)), animal=a, session=name)
                          for a in history.animals)
        for key, values in cov.items():
            if np.asarray(values).shape != (mask.n_points,):
                raise MaskError(f"mask covariate {key!r} of session {name!r} has {np.asarray(values).size} values "
                                f"for {mask.n_points} mask points")
        out.append(ScrSession(name=name, history=history, mask=mask, sex=codes, mask_covariates=dict(cov)))
    if not any(((s.history.counts.sum(axis=1) > 0).sum(axis=1) >= 2).any() for s in out):
        raise SigmaNotEstimable("no animal was detected at two different detectors in any session, so sigma (how "
                                "far an animal ranges) cannot be estimated; a longer study or more detectors may "
                                "catch some animal at a second detector")
    return out


# --------------------------------------------------------------------------- the prepared likelihood


@dataclass(frozen=True)
class Coefficient:
    parameter: str  # D, g0, lambda0, sigma, pmix
    column: str  # "" for the intercept, else secr's column name (session2006, Session, bTRUE, h2M, d.to.shore)

    @property
    def name(self) -> str:
        return self.parameter if not self.column else f"{self.parameter}.{self.column}"


@dataclass
class _ClassData:
    """One class's (sex or mixture class) data terms in one session, as weights over flat (row, detector) pairs."""

    hit_idx: np.ndarray  # (R,) flat hazard rows of detection terms
    hit_usage: np.ndarray  # (R,) usage of each (proximity: log(1 - exp(-T h)) depends on T and h together)
    hit_w: np.ndarray  # (n, R)
    exp_idx: np.ndarray  # (Q,) flat rows of exposure terms (-T h summed)
    exp_w: np.ndarray  # (n, Q) usage-weighted
    prof: np.ndarray | None  # multi-catch: (P, F) usage of each flat row in each occasion profile
    caught_w: np.ndarray | None  # (n, P) occasions caught with each profile
    miss_w: np.ndarray | None  # (n, P) occasions not caught
    naive: np.ndarray  # (F,) usage of each flat row for an animal never caught (p.)


@dataclass
class _SessionData:
    name: str
    index: int
    n: int
    K: int
    d2: np.ndarray  # (K, M)
    cell_ha: float
    n_mask: int
    combos: np.ndarray  # (C, 4): occasion key, b, bk, class
    design: dict[str, np.ndarray]  # detection parameter -> (C, columns)
    design_d: np.ndarray | None  # (M, columns) density design
    classes: list[_ClassData]
    membership: np.ndarray  # (n,) class index, -1 unknown (mixture) ; all 0 without classes
    constant: float
    # caches shared by sessions with the same detectors and mask (sites surveyed in several years): sigma -> the
    # distance kernel (K, M); the parameter rows' (g0, sigma) -> their hazards (F, M)
    kernels: dict[float, np.ndarray] = field(default_factory=dict)
    hazards: dict[tuple[bytes, bytes], np.ndarray] = field(default_factory=dict)
    terms: dict[tuple[bytes, bytes], list] = field(default_factory=dict)  # this session's own, by (g0, sigma)


@dataclass(frozen=True, eq=False)
class PreparedModels:
    """A model on its sessions, ready for the likelihood; ``coefficients`` name the link-scale parameters."""

    formula: ModelFormula
    detectfn: str
    detector_type: str
    conditional: bool
    links: Mapping[str, str]
    class_mode: str  # "none", "mixture" (secr's hcov) or "covariate" (sex known for every animal, CL)
    pooled: bool  # proximity occasions pooled (secr's fastproximity), the pooled binomial constant added
    coefficients: tuple[Coefficient, ...]
    sessions: tuple[ScrSession, ...]
    _data: tuple[_SessionData, ...] = field(repr=False)
    _slices: Mapping[str, slice] = field(repr=False)
    _max_occasions: int = 1

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.coefficients)

    @property
    def first_name(self) -> str:
        return "lambda0" if self.detectfn == "HHN" else "g0"

    @property
    def n_animals(self) -> int:
        return sum(s.history.n_animals for s in self.sessions)

    @property
    def likelihood_form(self) -> str:
        if self.detector_type != "proximity":
            return f"{self.detector_type} detectors, occasion by occasion"
        if self.pooled:
            return "proximity occasions pooled (binomial, size = occasions used; secr's fastproximity)"
        return "proximity, occasion by occasion (Bernoulli per occasion)"

    def log_likelihood(self, beta: np.ndarray) -> float:
        """log L at ``beta`` (-inf where it cannot be evaluated, never an overflow)."""
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            try:
                value = sum(self._session_terms(s, np.asarray(beta, dtype=float))[0] for s in self._data)
            except (OverflowError, FloatingPointError, ZeroDivisionError, ValueError):
                return -math.inf
        return float(value) if math.isfinite(value) else -math.inf

    # ----------------------------------------------------------------- real parameters

    def _eta(self, parameter: str, design: np.ndarray, beta: np.ndarray) -> np.ndarray:
        sl = self._slices[parameter]
        return np.clip(design @ beta[sl], -_LINK_LIMIT, _LINK_LIMIT)

    def detection_values(self, session: int, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(g0 or lambda0, sigma) of each parameter row (:attr:`_SessionData.combos`) of a session."""
        data = self._data[session]
        first = self._eta(self.first_name, data.design[self.first_name], beta)
        first = np.exp(first) if self.detectfn == "HHN" else expit(first)
        sigma = np.exp(self._eta("sigma", data.design["sigma"], beta))
        return first, sigma

    def density_surface(self, session: int, beta: np.ndarray) -> np.ndarray:
        """D (per ha) at each mask point of a session (full likelihood only)."""
        data = self._data[session]
        eta = self._eta("D", data.design_d, beta)
        return eta if self.links["D"] == "identity" else np.exp(eta)

    def pmix(self, beta: np.ndarray) -> np.ndarray:
        """The two classes' mixing proportions (secr's pmix: class 2 on the logit scale, class 1 the rest)."""
        if self.class_mode != "mixture":
            return np.ones(1)
        p2 = float(expit(np.clip(beta[self._slices["pmix"]][0], -_LINK_LIMIT, _LINK_LIMIT)))
        return np.array([1.0 - p2, p2])

    def naive_detection(self, session: int, beta: np.ndarray, *, cls: int = 0) -> tuple[float, float]:
        """(g0 or lambda0, sigma) of an animal not yet caught, on the first occasion, of class ``cls``: what secr's
        ``predict`` reports for a model with b, bk or t."""
        row = np.array([[0, 0, 0, cls]])
        values = []
        for p in (self.first_name, "sigma"):
            design = _detection_design(self.formula.of(p), row, session_index=session, sessions=self.sessions,
                                       max_occasions=self._max_occasions)
            values.append(float(self._eta(p, design, beta)[0]))
        first = math.exp(values[0]) if self.detectfn == "HHN" else float(expit(values[0]))
        return first, math.exp(values[1])

    def varies_by_class(self, parameter: str) -> bool:
        return self.class_mode != "none" and bool({"h2", "sex"} & set(self.formula.of(parameter)))

    # ----------------------------------------------------------------- one session's terms

    def _session_terms(self, data: _SessionData, beta: np.ndarray) -> tuple[float, np.ndarray]:
        """(log L of the session, each animal's p.)."""
        first, sigma = self.detection_values(data.index, beta)
        if not (np.all(np.isfinite(first)) and np.all(np.isfinite(sigma))) or np.any(sigma <= 0) or np.any(first <= 0):
            return -math.inf, np.array([])
        if self.detectfn != "HHN" and np.any(first >= 1):
            return -math.inf, np.array([])
        per_class = self._class_terms(data, first, sigma)
        if self.conditional:
            log_pi = np.full(data.n_mask, -math.log(data.n_mask))
            density = None
        else:
            density = self.density_surface(data.index, beta)
            if not np.all(np.isfinite(density)) or np.any(density <= 0):
                return -math.inf, np.array([])
            log_pi = np.log(density) - math.log(density.sum())
        pi = np.exp(log_pi)
        n_classes = len(data.classes)
        log_class = np.empty((data.n, n_classes))
        pdot_class = np.empty(n_classes)
        for x, (scaled, top, detected) in enumerate(per_class):
            log_class[:, x] = np.log(scaled @ pi) + top
            pdot_class[x] = float(pi @ detected)
        if np.any(pdot_class <= 0):
            return -math.inf, np.array([])
        membership = data.membership
        if self.class_mode == "mixture":
            pmix = self.pmix(beta)
            weights = np.where(membership[:, None] >= 0,
                               (membership[:, None] == np.arange(n_classes)[None, :]).astype(float), pmix[None, :])
        elif self.class_mode == "covariate":
            weights = (membership[:, None] == np.arange(n_classes)[None, :]).astype(float)
        else:
            weights = np.ones((data.n, 1))
        with np.errstate(divide="ignore"):
            log_w = np.log(weights)
        joint = log_class + log_w
        top = joint.max(axis=1, keepdims=True)
        comp1 = float((np.log(np.exp(joint - top).sum(axis=1)) + top[:, 0]).sum())
        pdot_i = weights @ pdot_class
        value = comp1 - float(np.log(pdot_i).sum()) + data.constant
        if self.class_mode == "mixture":
            known = membership >= 0
            if known.any():
                counts = np.bincount(membership[known], minlength=n_classes)
                share = pmix * pdot_class
                value += float((counts * np.log(share / share.sum())).sum())
        if not self.conditional:
            expected = float(density.sum() * data.cell_ha) * data.n / float((1.0 / pdot_i).sum())
            value += data.n * math.log(expected) - expected - float(gammaln(data.n + 1))
        return value, pdot_i

    def _class_terms(self, data: _SessionData, first: np.ndarray,
                     sigma: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per class: Pr(history | centre at each mask point) scaled by each animal's largest (n, M), that log
        scale (n,), and p.(x) at each mask point (M,). They depend on the detection parameters only, so they are
        kept for the evaluations that move D or pmix alone (a third or more of a numerical gradient's)."""
        key = (first.tobytes(), sigma.tobytes())
        cached = data.terms.get(key)
        if cached is not None:
            return cached
        h = self._hazards(data, first, sigma)  # (F, M): row c * K + k
        out = []
        for cd in data.classes:
            log_pr = self._log_pr(cd, h)  # (n, M)
            top = log_pr.max(axis=1, keepdims=True) if data.n else np.zeros((0, 1))
            out.append((np.exp(log_pr - top), top[:, 0], -np.expm1(-(cd.naive @ h))))
        if len(data.terms) >= _HAZARD_CACHE:
            data.terms.pop(next(iter(data.terms)))
        data.terms[key] = out
        return out

    def _hazards(self, data: _SessionData, first: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        """The hazard of every parameter row at every detector and mask point, (rows x detectors, M). The
        distance kernel of each sigma is kept for the next evaluations: a numerical gradient moves one coefficient
        at a time, and most leave sigma where it was."""
        key = (first.tobytes(), sigma.tobytes())
        cached = data.hazards.get(key)
        if cached is not None:
            return cached
        out = np.empty((first.size * data.K, data.n_mask))
        for c, (f, s) in enumerate(zip(first, sigma)):
            kernel = data.kernels.get(float(s))
            if kernel is None:
                kernel = (np.exp(-data.d2 / (2 * s * s)) if self.detectfn in ("HN", "HHN")
                          else np.exp(-np.sqrt(data.d2) / s))
                if len(data.kernels) >= _KERNEL_CACHE:
                    data.kernels.pop(next(iter(data.kernels)))
                data.kernels[float(s)] = kernel
            block = out[c * data.K:(c + 1) * data.K]
            if self.detectfn == "HHN":
                np.multiply(kernel, f, out=block)
            else:
                np.multiply(kernel, -f, out=block)
                np.log1p(block, out=block)
                np.negative(block, out=block)
        if len(data.hazards) >= _HAZARD_CACHE:
            data.hazards.pop(next(iter(data.hazards)))
        data.hazards[key] = out
        return out

    def _log_pr(self, cd: _ClassData, h: np.ndarray) -> np.ndarray:
        """log Pr(history | centre at each mask point) of every animal, for one class."""
        out = -(cd.exp_w @ h[cd.exp_idx]) if cd.exp_idx.size else 0.0
        if cd.hit_idx.size:
            rows = h[cd.hit_idx]
            if self.detector_type == "proximity":
                t_h = np.maximum(cd.hit_usage[:, None] * rows, _TINY)
                out = out + cd.hit_w @ np.log(-np.expm1(-t_h))  # log(1 - exp(-T h)): detected on the occasion
            else:
                out = out + cd.hit_w @ np.log(np.maximum(rows, _TINY))
        if cd.prof is not None:
            total = np.maximum(cd.prof @ h, _TINY)  # (P, M) hazard summed over detectors per occasion profile
            caught = np.log(-np.expm1(-total)) - np.log(total)
            out = out + cd.caught_w @ caught - cd.miss_w @ total
        return np.broadcast_to(out, (cd.hit_w.shape[0], h.shape[1])) if np.ndim(out) == 0 else out

    def session_pdots(self, beta: np.ndarray) -> list[np.ndarray]:
        """Each session's per-animal probability of detection p.(i) at ``beta`` (for derived densities)."""
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            return [self._session_terms(s, np.asarray(beta, dtype=float))[1] for s in self._data]

    def class_pdots(self, session: int, beta: np.ndarray) -> np.ndarray:
        """p. of each class (naive animal) in a session, averaged over the density surface."""
        data = self._data[session]
        first, sigma = self.detection_values(session, beta)
        h = self._hazards(data, first, sigma)
        if self.conditional:
            pi = np.full(data.n_mask, 1.0 / data.n_mask)
        else:
            d = self.density_surface(session, beta)
            pi = d / d.sum()
        return np.array([float(pi @ -np.expm1(-(cd.naive @ h))) for cd in data.classes])

    def mask_area_ha(self, session: int) -> float:
        return self.sessions[session].mask.area_ha


# --------------------------------------------------------------------------- building it


def _class_setup(sessions: Sequence[ScrSession], formula: ModelFormula, *, conditional: bool,
                 hcov: bool | None) -> tuple[str, ModelFormula]:
    """How sex enters: not at all, as secr's hcov mixture (term h2, pmix estimated) or as a known individual
    covariate (term sex; conditional likelihood only, as in secr)."""
    uses_sex = formula.uses("sex") or formula.uses("h2")
    if hcov is None:
        hcov = uses_sex and not (conditional and formula.uses("sex") and not formula.uses("h2"))
    if hcov or formula.uses("h2"):
        if any(s.sex is None for s in sessions):
            raise DensityInputError("a model with sex needs each animal's sex (F, M, or empty for unknown)")
        terms = {p: tuple("h2" if t == "sex" else t for t in ts) for p, ts in formula.terms.items() if p != "pmix"}
        if formula.of("pmix") not in ((), ("h2",), ("sex",)):
            raise DensityInputError("pmix can depend only on the mixture class (pmix ~ h2)")
        terms["pmix"] = ("h2",)
        text = ", ".join(f"{p}~{'+'.join(t) if t else '1'}" for p, t in terms.items())
        return "mixture", ModelFormula(terms=terms, text=text)
    if formula.uses("sex"):
        if not conditional:
            raise DensityInputError("in the full likelihood sex is fitted as secr's hcov mixture; leave hcov on, or "
                                    "fit sex as a known covariate with the conditional likelihood")
        if any(s.sex is None for s in sessions):
            raise DensityInputError("a model with sex needs each animal's sex (F or M)")
        unknown = [(s.name, a) for s in sessions for a, c in zip(s.history.animals, s.sex or ()) if c is None]
        if unknown:
            raise DensityInputError(f"{len(unknown)} animal(s) have no known sex (e.g. {unknown[0][1]!r} in session "
                                    f"{unknown[0][0]!r}): fit sex as secr's hcov mixture (the full likelihood, or "
                                    "hcov=True), which gives unsexed animals a probability of each sex")
        return "covariate", formula
    if formula.of("pmix"):
        raise DensityInputError("pmix is estimated only in a model with sex (secr's hcov mixture)")
    return "none", formula


def _columns(parameter: str, terms: Sequence[str], *, sessions: Sequence[ScrSession], max_occasions: int,
             mask_terms: bool) -> list[str]:
    cols: list[str] = []
    names = [s.name for s in sessions]
    for t in terms:
        if t == "session":
            if len(sessions) < 2:
                raise DensityInputError(f"{parameter} ~ session needs two or more sessions")
            cols += [f"session{n}" for n in names[1:]]
        elif t == "Session":
            if len(sessions) < 2:
                raise DensityInputError(f"{parameter} ~ Session needs two or more sessions")
            cols.append("Session")
        elif mask_terms:
            cols.append(t)
        elif t == "t":
            if max_occasions < 2:
                raise DensityInputError(f"{parameter} ~ t needs two or more occasions")
            cols += [f"t{s}" for s in range(2, max_occasions + 1)]
        elif t in ("T", "b", "bk"):
            cols.append({"T": "T", "b": "bTRUE", "bk": "bkTRUE"}[t])
        elif t in ("h2", "sex"):
            cols.append(f"{t}{SEX_LEVELS[1]}")
    return cols


def _detection_design(terms: Sequence[str], combos: np.ndarray, *, session_index: int,
                      sessions: Sequence[ScrSession], max_occasions: int) -> np.ndarray:
    rows = []
    for s_key, b, bk, x in combos:
        row = [1.0]
        for t in terms:
            if t == "session":
                row += [1.0 if session_index == j else 0.0 for j in range(1, len(sessions))]
            elif t == "Session":
                row.append(float(session_index))
            elif t == "t":
                row += [1.0 if s_key == s else 0.0 for s in range(1, max_occasions)]
            elif t == "T":
                row.append(float(s_key))
            elif t == "b":
                row.append(float(b))
            elif t == "bk":
                row.append(float(bk))
            elif t in ("h2", "sex"):
                row.append(float(x == 1))
        rows.append(row)
    return np.array(rows, dtype=float).reshape(len(combos), -1)


def _density_design(terms: Sequence[str], session: ScrSession, *, session_index: int,
                    sessions: Sequence[ScrSession]) -> np.ndarray:
    m = session.mask.n_points
    cols = [np.ones(m)]
    for t in terms:
        if t == "session":
            cols += [np.full(m, 1.0 if session_index == j else 0.0) for j in range(1, len(sessions))]
        elif t == "Session":
            cols.append(np.full(m, float(session_index)))
        else:
            if t not in session.mask_covariates:
                known = ", ".join(session.mask_covariates) or "none"
                raise DensityInputError(f"D ~ {t}: session {session.name!r} has no mask covariate {t!r} (its mask "
                                        f"covariates: {known}); add the column to the mask or choose another term")
            values = np.asarray(session.mask_covariates[t], dtype=float)
            missing = int((~np.isfinite(values)).sum())
            if missing:
                raise DensityInputError(f"mask covariate {t!r} is missing at {missing} of {m} mask points in session "
                                        f"{session.name!r}; give a value at every point or drop those points")
            cols.append(values)
    return np.column_stack(cols)


def _signed_counts(history: CaptureHistory) -> np.ndarray:
    """The counts with secr's sign: a removed animal's captures on its last occasion negative (distinct histories
    for the multinomial coefficient, as secr's ``logmultinom`` sees them)."""
    counts = history.counts.astype(np.int64).copy()
    if history.removed_on is not None:
        for i, last in enumerate(history.removed_on):
            if last < history.n_occasions - 1:
                counts[i, last, :] *= -1
    return counts


def _prepare_session(session: ScrSession, index: int, *, sessions: Sequence[ScrSession], formula: ModelFormula,
                     first_name: str, class_mode: str, conditional: bool, pooled: bool,
                     max_occasions: int) -> _SessionData:
    history = session.history
    counts = history.counts  # (n, S, K)
    n, n_occ, n_det = counts.shape
    usage = history.usage.T  # (S, K)
    detection_terms = set(formula.of(first_name)) | set(formula.of("sigma"))
    by_occasion = bool(detection_terms & {"t", "T"})
    uses_b, uses_bk = "b" in detection_terms, "bk" in detection_terms
    n_classes = 2 if class_mode != "none" else 1
    if class_mode == "none":
        membership = np.zeros(n, dtype=int)
    else:
        membership = np.array([-1 if c is None else SEX_LEVELS.index(c) for c in session.sex], dtype=int)

    hit = counts > 0
    caught_any = hit.any(axis=2)  # (n, S)
    b_state = (np.cumsum(caught_any, axis=1) - caught_any) > 0  # caught on an earlier occasion
    bk_state = (np.cumsum(hit, axis=1) - hit) > 0  # caught at this detector on an earlier occasion
    last = history.removed_on if history.removed_on is not None else np.full(n, n_occ - 1)
    alive = np.arange(n_occ)[None, :] <= last[:, None]  # (n, S)
    used = usage > 0  # (S, K)
    valid = alive[:, :, None] & used[None, :, :]  # (n, S, K)

    occ_key = np.broadcast_to(np.arange(n_occ)[None, :, None] if by_occasion else 0, counts.shape)
    b_key = np.broadcast_to(b_state[:, :, None] if uses_b else False, counts.shape).astype(int)
    bk_key = bk_state.astype(int) if uses_bk else np.zeros(counts.shape, dtype=int)

    # parameter rows (secr's parameter index array): (occasion key, b, bk, class)
    codes_by_class = []
    for x in range(n_classes):
        codes_by_class.append(((occ_key * 2 + b_key) * 2 + bk_key) * n_classes + x)
    naive_codes = [((np.broadcast_to(np.arange(n_occ)[:, None] if by_occasion else 0, usage.shape)) * 4)
                   * n_classes + x for x in range(n_classes)]
    every = np.unique(np.concatenate([c[valid] for c in codes_by_class] + [c[used] for c in naive_codes]))
    combos = np.array([[code // n_classes // 4, (code // n_classes // 2) % 2, (code // n_classes) % 2,
                        code % n_classes] for code in every], dtype=int).reshape(-1, 4)
    n_flat = len(every) * n_det

    detector_index = np.broadcast_to(np.arange(n_det)[None, None, :], counts.shape)
    usage_full = np.broadcast_to(usage[None, :, :], counts.shape)
    constant = logmultinomial(_signed_counts(history))
    classes = []
    for x in range(n_classes):
        codes = codes_by_class[x]
        rows_of = np.full(counts.shape, -1, dtype=int)
        rows_of[valid] = np.searchsorted(every, codes[valid]) * n_det + detector_index[valid]
        animal = np.broadcast_to(np.arange(n)[:, None, None], counts.shape)
        detected = valid & hit
        prof = caught_w = miss_w = None
        if history.detector_type == "proximity":
            keys = np.column_stack([rows_of[detected], usage_full[detected]])
            hit_keys, hit_inv = np.unique(keys, axis=0, return_inverse=True) if keys.size else (
                np.zeros((0, 2)), np.zeros(0, dtype=int))
            hit_w = np.zeros((n, hit_keys.shape[0]))
            np.add.at(hit_w, (animal[detected], hit_inv.ravel()), 1.0)
            missed = valid & ~hit
            exp_keys, exp_inv = np.unique(rows_of[missed], return_inverse=True)
            exp_w = np.zeros((n, exp_keys.size))
            np.add.at(exp_w, (animal[missed], exp_inv.ravel()), usage_full[missed])
            hit_idx, hit_usage = hit_keys[:, 0].astype(int), hit_keys[:, 1].astype(float)
        else:
            hit_idx, hit_inv = np.unique(rows_of[detected], return_inverse=True)
            hit_w = np.zeros((n, hit_idx.size))
            np.add.at(hit_w, (animal[detected], hit_inv.ravel()), counts[detected].astype(float))
            hit_usage = np.ones(hit_idx.size)
            if x == 0:  # log T once per detection (not per class: the classes mix Pr, not log Pr)
                constant += float((counts[detected] * np.log(usage_full[detected])).sum())
                if history.detector_type == "count":
                    constant -= float(gammaln(counts[detected] + 1).sum())
            if history.detector_type == "count":
                exp_idx, exp_inv = np.unique(rows_of[valid], return_inverse=True)
                exp_w = np.zeros((n, exp_idx.size))
                np.add.at(exp_w, (animal[valid], exp_inv.ravel()), usage_full[valid])
                exp_keys = exp_idx
            else:  # multi-catch: competing hazards per occasion, grouped by each occasion's profile of rows
                exp_keys, exp_w = np.zeros(0, dtype=int), np.zeros((n, 0))
                profile_rows = np.where(valid, rows_of, -1)  # (n, S, K)
                keys = np.concatenate([profile_rows, np.broadcast_to(usage[None], counts.shape)], axis=2)
                pairs = np.argwhere(alive & used.any(axis=1)[None, :])  # (i, s) exposed
                flat_keys = keys[pairs[:, 0], pairs[:, 1]]
                uniq, inv = np.unique(flat_keys, axis=0, return_inverse=True)
                inv = inv.ravel()
                prof = np.zeros((uniq.shape[0], n_flat))
                for p, key in enumerate(uniq):
                    rows_k, t_k = key[:n_det].astype(int), key[n_det:]
                    ok = rows_k >= 0
                    np.add.at(prof[p], rows_k[ok], t_k[ok])
                was_caught = caught_any[pairs[:, 0], pairs[:, 1]]
                caught_w = np.zeros((n, uniq.shape[0]))
                miss_w = np.zeros((n, uniq.shape[0]))
                np.add.at(caught_w, (pairs[was_caught, 0], inv[was_caught]), 1.0)
                np.add.at(miss_w, (pairs[~was_caught, 0], inv[~was_caught]), 1.0)
        naive = np.zeros(n_flat)
        s_idx, k_idx = np.nonzero(used)
        naive_rows = np.searchsorted(every, naive_codes[x][s_idx, k_idx]) * n_det + k_idx
        np.add.at(naive, naive_rows, usage[s_idx, k_idx])
        classes.append(_ClassData(hit_idx=np.asarray(hit_idx, dtype=int), hit_usage=np.asarray(hit_usage, dtype=float),
                                  hit_w=hit_w, exp_idx=np.asarray(exp_keys, dtype=int), exp_w=exp_w, prof=prof,
                                  caught_w=caught_w, miss_w=miss_w, naive=naive))
    if pooled:
        # secr pools before it counts: the binomial coefficients of the pooled occasions, sum over animals and
        # detectors of log C(S_k, y_ik), and the multinomial term over the pooled histories (animals whose
        # detections differ only in their occasions now share a history)
        size = used.sum(axis=0)[None, :]
        y = hit.sum(axis=1)
        constant += float((gammaln(size + 1) - gammaln(y + 1) - gammaln(size - y + 1)).sum())
        constant += logmultinomial(y) - logmultinomial(_signed_counts(history))
    design = {p: _detection_design(formula.of(p), combos, session_index=index, sessions=sessions,
                                   max_occasions=max_occasions) for p in (first_name, "sigma")}
    design_d = None if conditional else _density_design(formula.of("D"), session, session_index=index,
                                                        sessions=sessions)
    d2 = ((history.xy[:, None, :] - session.mask.xy[None, :, :]) ** 2).sum(axis=2)
    return _SessionData(name=session.name, index=index, n=n, K=n_det, d2=d2, cell_ha=session.mask.cell_area_ha,
                        n_mask=session.mask.n_points, combos=combos, design=design, design_d=design_d,
                        classes=classes, membership=membership, constant=constant)


def prepare_models(sessions: Sequence[ScrSession], model: str | ModelFormula, *, detectfn: str = "HN",
                   conditional: bool = False, d_link: str = "log", hcov: bool | None = None,
                   fastproximity: bool = True) -> PreparedModels:
    """A model on its sessions, every input it cannot be fitted from refused in one sentence.

    Sex: in the full likelihood a model with ``sex`` is fitted as secr's ``hcov`` two-class mixture (the term is
    then named ``h2``, and ``pmix ~ h2`` is estimated; unsexed animals are mixed over both classes); in the
    conditional likelihood with every animal sexed, as a known individual covariate (``sex``), as secr does.
    ``hcov=True`` forces the mixture (also for a model without sex, so that AIC compares like with like).
    ``fastproximity``: pool a proximity detector's occasions (binomial) when nothing varies by occasion and usage
    is 0/1, secr's default; otherwise occasion by occasion."""
    if detectfn not in DETECTION_FUNCTIONS:
        raise DensityInputError(f"detection function {detectfn!r} unknown; use one of {', '.join(DETECTION_FUNCTIONS)}")
    if d_link not in ("log", "identity"):
        raise DensityInputError(f"link {d_link!r} for D unknown; use 'log' or 'identity'")
    sessions = list(sessions)
    if not sessions:
        raise DensityInputError("no sessions: a density needs captures")
    names = [s.name for s in sessions]
    if len(set(names)) != len(names):
        raise DensityInputError("two sessions share one name; give each session its own")
    kinds = {s.history.detector_type for s in sessions}
    if len(kinds) > 1:
        raise DensityInputError(f"the sessions use different detector types ({', '.join(sorted(kinds))}); fit them "
                                "with one type")
    detector_type = kinds.pop()
    formula = model if isinstance(model, ModelFormula) else parse_model(model)
    first_name = "lambda0" if detectfn == "HHN" else "g0"
    other = "g0" if first_name == "lambda0" else "lambda0"
    if formula.of(other):
        raise DensityInputError(f"detection function {detectfn} has {first_name}, not {other}; model {first_name}")
    if conditional and formula.of("D"):
        raise DensityInputError("D is not in the conditional likelihood; fit D ~ ... with the full likelihood")
    for parameter in (first_name, "sigma"):
        for t in formula.of(parameter):
            if t not in DETECTION_TERMS:
                raise DensityInputError(f"{parameter} ~ {t}: term unknown for a detection parameter; use one of "
                                        f"{', '.join(DETECTION_TERMS)}")
    if "sigma" in formula.terms and {"b", "bk"} & set(formula.of("sigma")):
        raise DensityInputError("sigma ~ b or bk is not fitted here; model a learned response in "
                                f"{first_name}")
    for t in formula.of("D"):
        if t in ("t", "T", "b", "bk", "sex", "h2"):
            raise DensityInputError(f"D ~ {t}: density can depend on the session or a mask covariate only")
    class_mode, formula = _class_setup(sessions, formula, conditional=conditional, hcov=hcov)
    _check_estimable(sessions, formula, first_name, class_mode=class_mode)
    max_occasions = max(s.history.n_occasions for s in sessions)
    by_occasion = any(t in formula.of(p) for p in (first_name, "sigma") for t in ("t", "T", "b", "bk"))
    binary = all(np.all(np.isin(s.history.usage, (0.0, 1.0))) for s in sessions)
    removals = any(s.history.n_removed for s in sessions)
    pooled = bool(fastproximity and detector_type == "proximity" and not by_occasion and binary and not removals)

    coefficients: list[Coefficient] = []
    slices: dict[str, slice] = {}
    order = ([] if conditional else ["D"]) + [first_name, "sigma"] + (["pmix"] if class_mode == "mixture" else [])
    for p in order:
        start = len(coefficients)
        if p == "pmix":
            cols = [f"h2{SEX_LEVELS[1]}"]
            coefficients += [Coefficient(p, c) for c in cols]
        else:
            cols = _columns(p, formula.of(p), sessions=sessions, max_occasions=max_occasions, mask_terms=p == "D")
            coefficients += [Coefficient(p, "")] + [Coefficient(p, c) for c in cols]
        slices[p] = slice(start, len(coefficients))
    data = tuple(_prepare_session(s, j, sessions=sessions, formula=formula, first_name=first_name,
                                  class_mode=class_mode, conditional=conditional, pooled=pooled,
                                  max_occasions=max_occasions) for j, s in enumerate(sessions))
    _share_layouts(data)
    links = {p: LINKS[p] for p in order}
    if not conditional:
        links["D"] = d_link
    return PreparedModels(formula=formula, detectfn=detectfn, detector_type=detector_type, conditional=conditional,
                          links=links, class_mode=class_mode, pooled=pooled, coefficients=tuple(coefficients),
                          sessions=tuple(sessions), _data=data, _slices=slices, _max_occasions=max_occasions)


def _share_layouts(data: Sequence[_SessionData]) -> None:
    """Sessions with the same detectors and mask share their distances and caches: their hazards at the same
    parameters are computed once. Only sessions with the same parameter rows share hazards."""
    layouts: dict[tuple, _SessionData] = {}
    rows: dict[tuple, _SessionData] = {}
    for d in data:
        key = (d.d2.shape, d.d2.tobytes())
        first = layouts.setdefault(key, d)
        if first is not d:
            d.d2, d.kernels = first.d2, first.kernels
        same_rows = rows.setdefault(key + (d.combos.tobytes(),), d)
        if same_rows is not d:
            d.hazards = same_rows.hazards


def _check_estimable(sessions: Sequence[ScrSession], formula: ModelFormula, first_name: str, *,
                     class_mode: str) -> None:
    """Refuse a learned response no animal's history can inform (b needs an animal caught again after its first
    capture, bk one caught again at a detector where it was caught before), and sex as a known covariate with one
    sex only. (A mixture needs no known animal: unknown ones inform it through their histories.)"""
    terms = set(formula.of(first_name)) | set(formula.of("sigma"))
    if "b" in terms:
        again = any(((s.history.counts.sum(axis=2) > 0).sum(axis=1) >= 2).any() for s in sessions)
        if not again:
            raise DensityInputError(f"{first_name} ~ b cannot be estimated: no animal was detected again on a later "
                                    "occasion after its first capture")
    if "bk" in terms:
        again = any(((s.history.counts > 0).sum(axis=1) >= 2).any() for s in sessions)
        if not again:
            raise DensityInputError(f"{first_name} ~ bk cannot be estimated: no animal was detected again at a "
                                    "detector where it had been detected before")
    if class_mode == "covariate" and "sex" in terms:
        for level in SEX_LEVELS:
            if not any(level in (s.sex or ()) for s in sessions):
                raise DensityInputError(f"a model with sex needs animals of both sexes; none is {level}")
