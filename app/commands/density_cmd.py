"""``rosette density``: animals per 100 km² of a species by spatial capture-recapture, from the catalogue's study
or secr's text files; ``rosette activity``: when in the day one or two species are active, and how much their
activity overlaps."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from app.commands.population_cmd import CHOOSE_SPECIES
from core.field.identities import BASES, MAX_DRAWS
from jobs.actions import activity as act
from jobs.actions import density as ds
from jobs.actions import density_models as dm
from jobs.actions import partial_id as pid
from jobs.actions import population as ps
from jobs.requests.density import (
    ACTIVITY_GROUPINGS,
    DEFAULT_DENSITY_DRAWS,
    DEFAULT_RESAMPLES,
    ActivityRequest,
    DensityModelsRequest,
    DensityRequest,
)
from jobs.requests.partial_id import DEFAULT_CHAINS, DEFAULT_ITERATIONS, PartialIdRequest


def register(sub) -> None:
    p = sub.add_parser("density", help="density (animals per 100 km²) by spatial capture-recapture, as secr fits it")
    p.add_argument("--species", default=None, help="species name or id (default: the one species with individuals)")
    p.add_argument("--occasion-days", type=float, default=1.0, help="length of a capture occasion in days (default: 1)")
    p.add_argument("--from", dest="date_from", default=None, metavar="YYYY-MM-DD",
                   help="first day of the study window (default: the first deployment's start)")
    p.add_argument("--to", dest="date_to", default=None, metavar="YYYY-MM-DD",
                   help="last day of the study window, included (default: the last deployment's end)")
    p.add_argument("--captures", default=None, metavar="FILE",
                   help="secr captures file ('Session ID Occasion Detector'), with --traps, instead of the catalogue")
    p.add_argument("--traps", action="append", default=[], metavar="FILE",
                   help="secr traps file ('Detector X Y [usage]', metres); with --model or --compare once for every "
                        "session, in the order the sessions first appear in the captures file, or once for all")
    p.add_argument("--detector", default="proximity",
                   help="proximity (camera traps, default), count or multi (single-catch traps: multi, as secr fits "
                        "them)")
    p.add_argument("--detectfn", default="HN", help="detection curve: HN (half-normal, default), HHN or EX")
    p.add_argument("--buffer", dest="buffer_m", type=float, default=None, metavar="M",
                   help="mask buffer round the detectors in metres (default: start at 4 x the spread of the "
                        "detections and widen it until D is stable)")
    p.add_argument("--spacing", dest="spacing_m", type=float, default=None, metavar="M",
                   help="mask cell size in metres (default: 64 points across)")
    p.add_argument("--mask", action="append", default=[], metavar="FILE",
                   help="habitat as a CSV of x,y points or a GeoJSON polygon, in the detectors' metres; with --model "
                        "or --compare once per session or once for all: a CSV's columns after x,y, or the "
                        "GeoJSON features' attributes, are covariates (D~name)")
    p.add_argument("--model", default=None, metavar="FORMULA",
                   help="fit one model, in secr's formula language, e.g. \"g0~sex, sigma~sex\" or \"D~session\" "
                        "(sex from the captures file's column after Detector, or each individual's in the catalogue)")
    p.add_argument("--compare", default=None, metavar="MODELS",
                   help="fit models separated by ';' and rank them by AICc, with the model-averaged D, "
                        "e.g. \"g0~1; g0~b; g0~sex, sigma~sex\"")
    p.add_argument("--sessions", default=None, metavar="BY",
                   help="with --model or --compare on the catalogue: year (the calendar year of each detection), "
                        "deployment-group (each deployment's Camtrap DP deploymentGroups) or deployment-group:KEY "
                        "(its group written KEY:value); default: the window as one session")
    p.add_argument("--link", default=None, metavar="D=LINK",
                   help="with --model or --compare: density's link, D=log (default) or D=identity")
    p.add_argument("--cl", action="store_true", help="conditional likelihood, D derived (Horvitz-Thompson)")
    p.add_argument("--identities", choices=BASES, default="decided",
                   help="decided: every assigned annotation as assigned (default); confirmed: curator identities "
                        "only; uncertain: the others imputed from the calibrated match probabilities, each draw "
                        "fitted")
    p.add_argument("--draws", type=int, default=DEFAULT_DENSITY_DRAWS,
                   help=f"imputation draws with --identities uncertain, each a whole fit (default: "
                        f"{DEFAULT_DENSITY_DRAWS}, at most {MAX_DRAWS:,})")
    p.add_argument("--seed", type=int, default=0, help="random seed of the draws (default: 0)")
    p.add_argument("--flanks", action="store_true",
                   help="one-flank photos: the two-flank partial-identity model (Augustine et al. 2018) on the "
                        "catalogue's study (each photo's flank label, cameras from the deployments), or on a captures "
                        "file with a Flank column (L, R or B) and a traps file with a cameras column (1 or 2)")
    p.add_argument("--flank-links", default=None, metavar="FILE",
                   help="with --flanks: links known otherwise, 'left_id right_id' per line")
    p.add_argument("--chains", type=int, default=DEFAULT_CHAINS,
                   help=f"with --flanks: MCMC chains (default {DEFAULT_CHAINS})")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"with --flanks: iterations per chain, a quarter warm-up (default {DEFAULT_ITERATIONS:,})")
    p.add_argument("--json", action="store_true", help="every figure as JSON")
    p.set_defaults(func=run)

    a = sub.add_parser("activity", help="diel activity of one or two species (von Mises kernel density) and overlap")
    a.add_argument("--species", action="append", default=[], metavar="NAME",
                   help="species name or id; give it twice to compare two species (their overlap)")
    a.add_argument("--by", choices=ACTIVITY_GROUPINGS, default=None, help="one curve per individual or per sex")
    a.add_argument("--record-table", default=None, metavar="FILE",
                   help="camtrapR record table (CSV) instead of the catalogue's photos")
    a.add_argument("--independent-minutes", type=float, default=30.0, metavar="MIN",
                   help="record table only: rows closer than this at a station are one detection (default: 30)")
    a.add_argument("--bootstrap", type=int, default=DEFAULT_RESAMPLES, metavar="N",
                   help=f"smoothed-bootstrap resamples of the overlap's 95%% interval (default {DEFAULT_RESAMPLES}; "
                        "0: none)")
    a.add_argument("--seed", type=int, default=1, help="seed of the bootstrap (default 1)")
    a.add_argument("--json", action="store_true", help="every figure as JSON (the curves included)")
    a.set_defaults(func=run_activity)


def _d_link(text: str | None) -> str:
    """'log' or 'identity' from ``--link D=identity``; only density's link can be chosen."""
    if text is None:
        return "log"
    parameter, _, link = text.partition("=")
    if parameter.strip() != "D" or not link.strip():
        raise ValueError(f"--link {text!r}: only density's link can be set, as D=log or D=identity")
    return link.strip()


def _progress_to_stderr(args) -> Callable[[float, str], None]:
    """Progress lines on stderr, none with --json (its stdout is one JSON document a script reads)."""
    def progress(fraction: float, message: str) -> None:
        if not args.json:
            print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)

    return progress


def run_models(args, ctx) -> int:
    """``--model`` or ``--compare`` on secr's files or on the catalogue's study (its sessions with --sessions)."""
    if args.identities != "decided":
        raise ValueError("--model and --compare fit the identities as decided; drop --identities")
    request = DensityModelsRequest(species=args.species, occasion_days=args.occasion_days, date_from=args.date_from,
                                   date_to=args.date_to, captures=args.captures or "", traps=tuple(args.traps),
                                   masks=tuple(args.mask), model=args.model, compare=args.compare,
                                   d_link=_d_link(args.link), detector=args.detector, detectfn=args.detectfn,
                                   buffer_m=args.buffer_m, spacing_m=args.spacing_m, conditional=args.cl,
                                   sessions=args.sessions)

    try:
        answer = dm.density_models(request, cat=None if request.from_files else ctx.catalogue,
                                   progress=_progress_to_stderr(args))
    except ps.SpeciesNotChosen as exc:
        raise ValueError(f"{exc} {CHOOSE_SPECIES}") from None
    print(json.dumps(answer, indent=2) if args.json else dm.models_text(answer))
    # a model the sessions cannot carry is an answer (its reason) but not a success for a script
    return 1 if answer.get("refused") else 0


def run_flanks(args, ctx) -> int:
    """``--flanks`` on the flank files or on the catalogue's study: the partial-identity model's answer; a fit whose
    chains did not converge is an answer (its reason) but not a success for a script."""
    if len(args.traps) > 1 or len(args.mask) > 1:
        raise ValueError("--flanks fits one session: give one --traps and at most one --mask")
    if args.model is not None or args.compare is not None or args.sessions is not None or args.link is not None:
        raise ValueError("--flanks fits its own model on one session: drop --model, --compare, --sessions and --link")
    if args.detector != "proximity" or args.detectfn != "HN" or args.cl or args.identities != "decided":
        raise ValueError("--flanks fits camera traps (proximity) with the half-normal curve and the full likelihood, "
                         "on the identities as decided: drop --detector, --detectfn, --cl and --identities")
    request = PartialIdRequest(species=args.species, occasion_days=args.occasion_days, date_from=args.date_from,
                               date_to=args.date_to, captures=args.captures or "", traps=(args.traps or [""])[0],
                               links=args.flank_links, buffer_m=args.buffer_m, mask=(args.mask or [None])[0],
                               spacing_m=args.spacing_m, chains=args.chains, iterations=args.iterations,
                               seed=args.seed)

    try:
        answer = pid.partial_id_density(request, cat=None if request.from_files else ctx.catalogue,
                                        progress=_progress_to_stderr(args))
    except ps.SpeciesNotChosen as exc:
        raise ValueError(f"{exc} {CHOOSE_SPECIES}") from None
    print(json.dumps(answer, indent=2) if args.json else pid.flanks_text(answer))
    return 1 if answer["refused"] else 0


def run(args, ctx) -> int:
    if args.flanks:
        return run_flanks(args, ctx)
    if args.flank_links is not None:
        raise ValueError("--flank-links gives the known links of --flanks: give it with --flanks")
    if args.model is not None or args.compare is not None:
        return run_models(args, ctx)
    if args.sessions is not None:
        raise ValueError("--sessions splits the catalogue into sessions for a model: give it with --model or "
                         "--compare (e.g. --model \"D~session\")")
    if args.link is not None:
        raise ValueError("--link sets a model's link: give it with --model or --compare")
    if len(args.traps) > 1 or len(args.mask) > 1:
        raise ValueError("several --traps or --mask files are for several sessions: give them with --model or "
                         "--compare (e.g. --model \"D~session\")")
    request = DensityRequest(species=args.species, occasion_days=args.occasion_days, date_from=args.date_from,
                             date_to=args.date_to, captures=args.captures, traps=(args.traps or [None])[0],
                             detector=args.detector, detectfn=args.detectfn, buffer_m=args.buffer_m,
                             spacing_m=args.spacing_m, mask=(args.mask or [None])[0], conditional=args.cl,
                             identities=args.identities, draws=args.draws, seed=args.seed)

    try:
        answer = ds.density_summary(None if request.from_files else ctx.catalogue, request,
                                    progress=_progress_to_stderr(args))
    except ps.SpeciesNotChosen as exc:
        raise ValueError(f"{exc} {CHOOSE_SPECIES}") from None
    except ds.NoCalibration as exc:
        raise ValueError(f"--identities uncertain refused: {exc}") from None
    print(json.dumps(ds.plain_answer(answer), indent=2) if args.json else ds.summary_text(answer))
    # a density the array cannot carry is an answer (the reason, in the JSON too) but not a success for a script
    return 1 if answer.get("refused") else 0


def run_activity(args, ctx) -> int:
    request = ActivityRequest(species=tuple(args.species), by=args.by, record_table=args.record_table,
                              independent_minutes=args.independent_minutes, resamples=args.bootstrap, seed=args.seed)
    try:
        summary = act.activity_summary(None if request.record_table else ctx.catalogue, request)
    except ps.SpeciesNotChosen as exc:
        raise ValueError(f"{exc} {CHOOSE_SPECIES}") from None
    print(json.dumps(summary, indent=2) if args.json else act.summary_text(summary))
    return 0
