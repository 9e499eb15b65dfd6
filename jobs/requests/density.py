"""Requests of the density and activity answers: ``rosette density`` and ``rosette activity``, and the Population
tab's density section (fitted by a background job) and activity panel."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.field.identities import check_draws
from core.field.scr_data import DETECTOR_TYPES
from core.field.scr_likelihood import DETECTION_FUNCTIONS
from core.field.scr_models import parse_model
from core.field.scr_select import split_models
from db.field.density_sessions import parse_grouping
from core.requests import Request
from jobs.requests._values import settle
from jobs.requests.identities import identity_basis, whole_number
from jobs.requests.population import PopulationRequest, optional_species

#: How activity can be split within one species.
ACTIVITY_GROUPINGS = ("individual", "sex")
#: Bootstrap resamples of an overlap interval by default (overlap's authors advise 1,000 or more).
DEFAULT_RESAMPLES = 1000
MAX_RESAMPLES = 100_000
#: Imputation draws of the density with identification uncertainty by default: each draw is a whole SCR fit (about
#: a second on a camera-trap study), so fewer than the population's 200; 50 take under two minutes.
DEFAULT_DENSITY_DRAWS = 50


def optional_path(value: object) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text or None


def optional_metres(value: object, what: str) -> float | None:
    """A positive distance in metres, None when not given; plain words otherwise."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ValueError(f"the {what} must be a distance in metres, got {value!r}")
    try:
        metres = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"the {what} must be a distance in metres, got {value!r}") from None
    if not math.isfinite(metres) or metres <= 0:
        raise ValueError(f"the {what} must be more than 0 m, got {value!r}; give about 4 times the distance over "
                         "which an animal is detected (sigma)" if what == "buffer"
                         else f"the {what} must be more than 0 m, got {value!r}")
    return metres


def detector_and_function(detector: object, detectfn: object) -> tuple[str, str]:
    """The detector type and detection function as the fits name them, or a one-line refusal."""
    kind = str(detector).strip().lower()
    if kind == "single":  # secr itself fits single-catch traps with the multi-catch likelihood
        raise ValueError("detector 'single' is fitted as secr fits it, with the multi-catch likelihood (an "
                         "approximation that secr also warns of): give detector multi")
    if kind not in DETECTOR_TYPES:
        raise ValueError(f"detector {detector!r} unknown; use one of {', '.join(DETECTOR_TYPES)} "
                         "(proximity for camera traps)")
    function = str(detectfn).strip().upper()
    if function not in DETECTION_FUNCTIONS:
        raise ValueError(f"detection function {detectfn!r} unknown; use one of {', '.join(DETECTION_FUNCTIONS)}")
    return kind, function

@dataclass(frozen=True)
class DensityRequest(PopulationRequest):
    """Fit density by spatial capture-recapture (secr's model) to the catalogue's study of a species (the window
    and occasions of :class:`PopulationRequest`, the stations in UTM metres as ``rosette export capthist`` writes
    them), or to secr's text files ``captures`` and ``traps`` (then the study fields are not used).

    ``detector``: proximity (camera traps), count or multi; ``detectfn``: HN, HHN or EX; ``buffer_m``: the mask's
    buffer round the detectors (None: 4 x the spread of the animals' detections, secr's starting sigma);
    ``spacing_m``: the mask's cell size (None: 64 points across); ``mask``: a CSV of x,y points or a GeoJSON
    polygon of the habitat, in the detectors' metres; ``conditional``: the conditional likelihood, D derived.

    ``identities``: the basis, as ``rosette population --identities`` has it: ``decided`` (every assigned
    annotation as assigned), ``confirmed`` (curator identities only) or ``uncertain`` (the identities nobody
    confirmed imputed ``draws`` times from ``seed``, each draw fitted); secr's files carry no provenance, so they
    are fitted as decided only."""

    captures: str | None = None
    traps: str | None = None
    detector: str = "proximity"
    detectfn: str = "HN"
    buffer_m: float | None = None
    spacing_m: float | None = None
    mask: str | None = None
    conditional: bool = False
    identities: str = "decided"
    draws: int = DEFAULT_DENSITY_DRAWS
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        detector, detectfn = detector_and_function(self.detector, self.detectfn)
        settle(self, captures=optional_path(self.captures), traps=optional_path(self.traps), detector=detector,
               detectfn=detectfn, buffer_m=optional_metres(self.buffer_m, "buffer"),
               spacing_m=optional_metres(self.spacing_m, "mask spacing"), mask=optional_path(self.mask),
               conditional=bool(self.conditional), identities=identity_basis(self.identities),
               draws=check_draws(self.draws), seed=whole_number(self.seed, "seed"))
        if self.seed < 0:
            raise ValueError(f"the seed must be 0 or more, got {self.seed}")
        if (self.captures is None) != (self.traps is None):
            given, missing = ("captures", "traps") if self.captures else ("traps", "captures")
            raise ValueError(f"the {given} file was given without the {missing} file: give both secr files "
                             "(--captures FILE --traps FILE), or neither to fit the catalogue's study")
        if self.captures is not None and self.identities != "decided":
            raise ValueError(f"density on {self.identities} identities needs the catalogue's study: secr's files "
                             "do not say who identified each animal; fit them as decided (the default), or fit the "
                             "catalogue's study instead of the files")

    @property
    def from_files(self) -> bool:
        return self.captures is not None

    def fit_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`db.field.density_identities.density_on_basis`: the fit's, and the basis of
        identities with its draws (the command and the background job fit the same request the same way)."""
        return {"species": self.species, "occasion_days": self.occasion_days, "date_from": self.first_day,
                "date_to": self.last_day, "captures": self.captures, "traps": self.traps, "detector": self.detector,
                "detectfn": self.detectfn, "buffer_m": self.buffer_m, "spacing_m": self.spacing_m,
                "mask": self.mask, "conditional": self.conditional, "identities": self.identities,
                "draws": self.draws, "seed": self.seed}


@dataclass(frozen=True)
class ActivityRequest(Request):
    """Diel activity of one species (or of each of its individuals or sexes, ``by``), or of two species with their
    overlap, from the catalogue's photos (one time per event) or from a camtrapR record table (``record_table``,
    thinned to one row per ``independent_minutes`` at a station). ``resamples``: smoothed-bootstrap resamples of
    each overlap's 95% interval (0: none); ``seed`` makes them repeatable."""

    species: tuple[str, ...] = ()
    by: str | None = None
    record_table: str | None = None
    independent_minutes: float = 30.0
    resamples: int = DEFAULT_RESAMPLES
    seed: int | None = 1

    def __post_init__(self) -> None:
        names = tuple(dict.fromkeys(n for n in (optional_species(s) for s in (self.species or ())) if n))
        if len(names) > 2:
            raise ValueError(f"{len(names)} species were given; activity compares at most two (give one or two)")
        by = optional_species(self.by)
        by = by.lower() if by else None
        if by is not None and by not in ACTIVITY_GROUPINGS:
            raise ValueError(f"activity can be split by {' or '.join(ACTIVITY_GROUPINGS)}, not {self.by!r}")
        if by is not None and len(names) > 1:
            raise ValueError("splitting by individual or sex works with one species; give one species with the "
                             "split, or two species without it")
        if isinstance(self.independent_minutes, bool) or not (
                isinstance(self.independent_minutes, (int, float)) and 0 <= self.independent_minutes <= 24 * 60):
            raise ValueError(f"the minutes between independent detections must be between 0 and 1440, got "
                             f"{self.independent_minutes!r}")
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, int) or not (
                self.resamples == 0 or 40 <= self.resamples <= MAX_RESAMPLES):
            raise ValueError(f"the bootstrap resamples must be 0 (no interval) or between 40 and {MAX_RESAMPLES:,} "
                             f"(overlap's authors advise 1,000 or more), got {self.resamples!r}")
        settle(self, species=names, by=by, record_table=optional_path(self.record_table),
               independent_minutes=float(self.independent_minutes))


#: How the density's link can be set on files (``--link D=identity``): secr's log (default) or identity.
DENSITY_LINKS = ("log", "identity")


@dataclass(frozen=True)
class DensityModelsRequest(PopulationRequest):
    """Fit one model (``model``, secr's formula language: ``"g0~sex, sigma~sex"``) or rank several by AICc
    (``compare``: models separated by ';'), on secr's text files or on the catalogue's study.

    On files: ``captures`` may hold several sessions (its ``Session`` column), ``traps`` and ``masks`` are one file
    for every session or one per session in the order the sessions first appear. A mask CSV's columns after x and y
    are covariates a model can use (``D~name``); without a mask each session's mask is ``buffer_m`` round its
    detectors. Sex comes from the captures file's column after ``Detector`` when a model uses it.

    On the catalogue (no ``captures``): the study of :class:`PopulationRequest` (species, window, occasions), split
    into ``sessions``: ``year`` (the calendar year of each detection), ``deployment-group`` (each deployment's
    Camtrap DP deploymentGroups) or ``deployment-group:KEY`` (its group written KEY:value), None for one session;
    sex is each individual's in the catalogue; each session's mask is ``buffer_m`` round its stations (None: 4 x
    the spread of the detections, widened until secr's suggested buffer is inside it). The formulas are parsed
    here, so a typo is refused before anything is read."""

    captures: str = ""
    traps: tuple[str, ...] = ()
    masks: tuple[str, ...] = ()
    model: str | None = None
    compare: str | None = None
    d_link: str = "log"
    detector: str = "proximity"
    detectfn: str = "HN"
    buffer_m: float | None = None
    spacing_m: float | None = None
    conditional: bool = False
    sessions: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        model, compare = optional_path(self.model), optional_path(self.compare)
        if (model is None) == (compare is None):
            raise ValueError("give one model (--model \"g0~b\") or a set to rank (--compare \"g0~1; g0~b\"), not "
                             "both")
        models = [model] if model is not None else split_models(compare)
        for text in models:
            parse_model(text)
        captures = optional_path(self.captures)
        traps = tuple(p for p in (optional_path(t) for t in self.traps) if p)
        masks = tuple(p for p in (optional_path(m) for m in self.masks) if p)
        buffer_m = optional_metres(self.buffer_m, "buffer")
        sessions = optional_path(self.sessions)
        if captures is None and traps:
            raise ValueError("--traps goes with --captures (secr's files); without them the catalogue's stations "
                             "are the detectors")
        if captures is not None:
            if not traps:
                raise ValueError("models on secr's files need --captures FILE and --traps FILE")
            if sessions is not None:
                raise ValueError("--sessions splits the catalogue's detections; secr's captures file names its own "
                                 "sessions in its first column")
            if not masks and buffer_m is None:
                raise ValueError("give the habitat mask (--mask FILE, a CSV of x,y points) or a buffer round the "
                                 "detectors (--buffer M, about 4 x sigma)")
        else:
            if masks:
                raise ValueError("a mask file goes with secr's files; on the catalogue each session's mask is a "
                                 "buffer round its stations (--buffer M, or the default)")
            grouping, key = parse_grouping(sessions)
            sessions = None if grouping is None else (f"{grouping}:{key}" if key else grouping)
        link = str(self.d_link).strip().lower()
        if link not in DENSITY_LINKS:
            raise ValueError(f"link {self.d_link!r} for D unknown; use one of {', '.join(DENSITY_LINKS)}")
        detector, detectfn = detector_and_function(self.detector, self.detectfn)
        settle(self, captures=captures or "", traps=traps, masks=masks, model=model, compare=compare, d_link=link,
               detector=detector, detectfn=detectfn, buffer_m=buffer_m,
               spacing_m=optional_metres(self.spacing_m, "mask spacing"), conditional=bool(self.conditional),
               sessions=sessions)

    @property
    def from_files(self) -> bool:
        """Fitted on secr's files (else on the catalogue's study)."""
        return bool(self.captures)

    @property
    def models(self) -> list[str]:
        """The models to fit, in the order given."""
        return [self.model] if self.model is not None else split_models(self.compare or "")

    def fit_options(self) -> dict[str, Any]:
        """The keyword options of :func:`db.field.density_models.catalogue_models` (the background job calls it
        with them too)."""
        return {"models": self.models, "single": self.model is not None, "species": self.species,
                "occasion_days": self.occasion_days, "date_from": self.first_day, "date_to": self.last_day,
                "sessions": self.sessions, "detector": self.detector, "detectfn": self.detectfn,
                "buffer_m": self.buffer_m, "spacing_m": self.spacing_m, "conditional": self.conditional,
                "d_link": self.d_link}


@dataclass(frozen=True)
class DensityModelChoicesRequest(PopulationRequest):
    """Which models the catalogue's own covariates carry for the study (the Population tab's model picker):
    ``sessions`` as :class:`DensityModelsRequest` has it."""

    sessions: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        grouping, key = parse_grouping(optional_path(self.sessions))
        settle(self, sessions=None if grouping is None else (f"{grouping}:{key}" if key else grouping))


@dataclass(frozen=True)
class DensityModelFiguresRequest(Request):
    """The per-session and per-sex figures of one model (``model``; None: the best by AICc) of a finished density
    models job ``job_id``."""

    job_id: int = 0
    model: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.job_id, bool) or not isinstance(self.job_id, int) or self.job_id < 1:
            raise ValueError(f"no density models job to show (got {self.job_id!r}); compare models first")
        settle(self, model=optional_path(self.model))
