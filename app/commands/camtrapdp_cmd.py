"""``rosette export camtrap-dp OUT [--no-media] [--zip] [--title T] [--sampling-design D] [--people blur|omit|keep]
[--json]``: the catalogue as a Camtrap DP 1.0 package, validated offline against the shipped TDWG schemas (exit
status 1 when invalid); people in the photos are blurred unless ``--people`` says otherwise."""

from __future__ import annotations

import json
import sys

from app.commands.eval_cmd import progress_printer
from core.field.camtrapdp_writer import SAMPLING_DESIGNS
from core.io.privacy import DEFAULT_PEOPLE, PEOPLE_CHOICES
from jobs.actions.camtrapdp import export_camtrap_dp
from jobs.requests.camtrapdp import ExportCamtrapDPRequest


def register_export(export_subparsers) -> None:
    """Add ``camtrap-dp`` to the sub-commands of ``rosette export``."""
    p = export_subparsers.add_parser("camtrap-dp", help="the catalogue as a Camtrap DP 1.0 package (deployments, "
                                                        "media, observations), checked against the standard")
    p.add_argument("out", metavar="OUT", help="a new (or empty) folder for the package")
    p.add_argument("--no-media", dest="include_media", action="store_false",
                   help="write the tables only, without copying the photo files into the package")
    p.add_argument("--zip", action="store_true", help="also pack the package into OUT.zip")
    p.add_argument("--title", default=None, help="the package's and project's title (default: the catalogue's "
                                                 "folder name)")
    p.add_argument("--sampling-design", default="opportunistic", choices=list(SAMPLING_DESIGNS),
                   help="Camtrap DP project.samplingDesign (default: opportunistic)")
    p.add_argument("--people", default=DEFAULT_PEOPLE, choices=list(PEOPLE_CHOICES),
                   help="the photos showing people: blur their person boxes (default), omit the photos, or keep "
                        "them unblurred (recorded in the audit trail)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    request = ExportCamtrapDPRequest(user=ctx.user, out=args.out, include_media=args.include_media, zip=args.zip,
                                     title=args.title, sampling_design=args.sampling_design, people=args.people)
    done = export_camtrap_dp(ctx.catalogue, request, progress=progress_printer("writing the photos"))
    if args.json:
        print(json.dumps(done.to_dict()))
    else:
        print(done.message)
        for problem in done.details["problems"]:
            print(f"  {problem['resource'] or 'datapackage.json'}"
                  + (f", row {problem['row']}" if problem["row"] is not None else "")
                  + (f", field {problem['field']}" if problem["field"] else "") + f": {problem['message']}",
                  file=sys.stderr)
        if done.zip_path:
            print(f"zip: {done.zip_path}")
    return 0 if done.valid else 1
