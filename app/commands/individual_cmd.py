"""``rosette individual NAME``: one individual's page (first and last seen, sightings and stations, best photo
per flank, home range, sex and life stage), and ``--sex`` / ``--life-stage`` to set those (audited), as the
Catalogue tab's individual page does."""

from __future__ import annotations

import json

from app.console import print_table, printable
from jobs.actions import catalogue as catalogue_services
from jobs.actions import individuals as services
from jobs.requests.individuals import IndividualHistoryRequest, SetTraitsRequest


def register(sub) -> None:
    p = sub.add_parser("individual", help="one individual's page: when and where it was seen, its best photo per "
                                          "flank, home range, sex and life stage (--sex / --life-stage set them)")
    p.add_argument("individual", help="id or name")
    p.add_argument("--sex", default=None, help=f"set its sex: {', '.join(services.SEXES)} (empty text clears it)")
    p.add_argument("--life-stage", default=None,
                   help=f"set its life stage: {', '.join(services.LIFE_STAGES)} (empty text clears it)")
    p.add_argument("--json", action="store_true", help="print the page as JSON")
    p.set_defaults(func=run_individual)


def run_individual(args, ctx) -> int:
    cat = ctx.catalogue
    ind = catalogue_services.individual_id(cat, args.individual)
    if args.sex is not None or args.life_stage is not None:
        done = services.set_individual_traits(cat, SetTraitsRequest(ind, args.sex, args.life_stage, user=ctx.user))
        if not args.json:
            print(printable(done.message))
    page = services.individual_history(cat, IndividualHistoryRequest(ind))
    if args.json:
        print(json.dumps(page.to_dict()))
        return 0
    h = page.history
    print(printable(f"{h.name} (#{h.id}, {h.species})" + ("" if h.active else " (merged away or retired)")))
    print(printable(page.facts()))
    print(printable(page.traits()))
    print(printable(page.home_range()))
    print()
    print(services.BEST_PHOTO_RULE)
    print_table([(b.flank, b.annotation_id, b.photo_id, "yes" if b.confirmed else "no", "yes" if b.masked else "no",
                  b.crop_px, b.when_text or "", b.n_candidates) for b in h.best_photos],
                ["flank", "annotation", "photo", "confirmed", "mask", "crop px", "time", "chosen from"])
    print()
    print_table(page.station_rows(), services.STATION_HEADERS)
    return 0
