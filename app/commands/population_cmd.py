"""``rosette population``: how many animals of a species, from its identified detections at the camera stations;
``rosette export capthist OUT``: the capture histories for secr, camtrapR and MARK."""

from __future__ import annotations

import json

from app.console import print_table
from core.field.identities import BASES, DEFAULT_DRAWS
from jobs.actions import identities as ident
from jobs.actions import population as ps
from jobs.requests.identities import PopulationIdentitiesRequest, ReviewPriorityRequest
from jobs.requests.population import CapthistExportRequest

#: How a command line chooses a species.
CHOOSE_SPECIES = "with --species NAME"


def _window_options(p) -> None:
    p.add_argument("--species", default=None,
                   help="species name or id (default: the one species with individuals)")
    p.add_argument("--occasion-days", type=float, default=1.0,
                   help="length of a capture occasion in days (default: 1)")
    p.add_argument("--from", dest="date_from", default=None, metavar="YYYY-MM-DD",
                   help="first day of the study window (default: the first deployment's start)")
    p.add_argument("--to", dest="date_to", default=None, metavar="YYYY-MM-DD",
                   help="last day of the study window, included (default: the last deployment's end)")


def register(sub) -> None:
    p = sub.add_parser("population", help="population size of a species (M0, Mt, Mh-Chao) from its capture "
                                          "histories at the camera stations")
    _window_options(p)
    _identity_options(p)
    p.add_argument("--json", action="store_true", help="everything as JSON (histories, f_k, effort, estimates)")
    p.set_defaults(func=run)
    r = sub.add_parser("review-priority", help="the unreviewed and machine-identified annotations whose review "
                                               "would narrow the population estimate's interval most")
    _window_options(r)
    r.add_argument("--top", type=int, default=20, help="how many to list (default: 20)")
    r.add_argument("--draws", type=int, default=DEFAULT_DRAWS, help=f"imputation draws (default: {DEFAULT_DRAWS})")
    r.add_argument("--seed", type=int, default=0, help="random seed of the draws (default: 0)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=run_review_priority)


def _identity_options(p) -> None:
    p.add_argument("--identities", choices=BASES, default="decided",
                   help="decided: every assigned annotation as assigned (default); confirmed: curator identities "
                        "only; uncertain: the others imputed from the calibrated match probabilities")
    p.add_argument("--draws", type=int, default=DEFAULT_DRAWS,
                   help=f"imputation draws with --identities uncertain (default: {DEFAULT_DRAWS}, at most 10,000)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the draws (default: 0)")


def register_capthist_export(export_subparsers) -> None:
    """Add ``capthist OUT`` to ``rosette export``."""
    p = export_subparsers.add_parser("capthist", help="capture histories for secr (captures, traps with usage), "
                                                      "camtrapR (record table) and MARK (.inp)")
    p.add_argument("out", help="folder to write the files into (made if missing)")
    _window_options(p)
    p.add_argument("--binary-usage", action="store_true",
                   help="secr usage as 0/1 per occasion instead of the active days")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_capthist)


def run(args, ctx) -> int:
    request = PopulationIdentitiesRequest(species=args.species, occasion_days=args.occasion_days,
                                          date_from=args.date_from, date_to=args.date_to,
                                          identities=args.identities, draws=args.draws, seed=args.seed)
    try:
        summary = ident.population_on_basis(ctx.catalogue, request)
    except ps.SpeciesNotChosen as exc:
        raise ValueError(f"{exc} {CHOOSE_SPECIES}") from None
    except ident.NoCalibration as exc:
        raise ValueError(f"--identities uncertain refused: {exc}") from None
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(ps.summary_text(summary) + "\n\n" + "\n".join(ident.basis_lines(summary)))
    return 0


def run_review_priority(args, ctx) -> int:
    request = ReviewPriorityRequest(species=args.species, occasion_days=args.occasion_days,
                                    date_from=args.date_from, date_to=args.date_to, draws=args.draws,
                                    seed=args.seed, top=args.top)
    try:
        report = ident.review_priority(ctx.catalogue, request)
    except ps.SpeciesNotChosen as exc:
        raise ValueError(f"{exc} {CHOOSE_SPECIES}") from None
    except ident.NoCalibration as exc:
        raise ValueError(f"review-priority refused: {exc}") from None
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    est = report["estimate"]
    print(f"{report['species']}: Mh-Chao N = {ps._fmt(est['N'])} ({ident._interval(est['ci_low'], est['ci_high'])}) "
          f"with identification uncertainty, {report['uncertain_units']} uncertain event(s), {report['draws']} "
          "draws. Review these first (Match review):")
    if report["priority"]:
        print_table(ident.priority_rows(report), ident.PRIORITY_HEADERS)
    for note in report["notes"]:
        print(note)
    return 0


def run_capthist(args, ctx) -> int:
    request = CapthistExportRequest(species=args.species, occasion_days=args.occasion_days, date_from=args.date_from,
                                    date_to=args.date_to, out=args.out, binary_usage=args.binary_usage)
    try:
        done = ps.export_capthist(ctx.catalogue, request)
    except ps.SpeciesNotChosen as exc:
        raise ValueError(f"{exc} {CHOOSE_SPECIES}") from None
    if args.json:
        print(json.dumps({"folder": done.folder, "files": done.files, "epsg": done.epsg,
                          "individuals": done.individuals, "occasions": done.occasions,
                          "stations_without_coordinates": list(done.stations_without_coordinates),
                          "detections_without_coordinates": list(done.detections_without_coordinates)}))
    else:
        print(done.message)
    return 0
