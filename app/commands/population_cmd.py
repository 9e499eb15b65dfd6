"""``rosette population``: how many animals of a species, from its identified detections at the camera stations;
``rosette export capthist OUT``: the capture histories for secr, camtrapR and MARK."""

from __future__ import annotations

import json

from jobs.actions import population as ps
from jobs.requests.population import CapthistExportRequest, PopulationRequest

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
    p.add_argument("--json", action="store_true", help="everything as JSON (histories, f_k, effort, estimates)")
    p.set_defaults(func=run)


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
    request = PopulationRequest(species=args.species, occasion_days=args.occasion_days, date_from=args.date_from,
                                date_to=args.date_to)
    try:
        summary = ps.population_summary(ctx.catalogue, request)
    except ps.SpeciesNotChosen as exc:
        raise ValueError(f"{exc} {CHOOSE_SPECIES}") from None
    print(json.dumps(summary, indent=2) if args.json else ps.summary_text(summary))
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
