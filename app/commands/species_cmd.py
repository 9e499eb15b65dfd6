"""``rosette species list|rename|common-name|merge|set|threshold``: the catalogue's species."""

from __future__ import annotations

import json

from app.console import print_table
from jobs.actions import species as sa
from jobs.requests.catalogue import (
    IndividualSpeciesRequest,
    MergeSpeciesRequest,
    PhotoSpeciesRequest,
    RenameSpeciesRequest,
    SpeciesThresholdRequest,
)


def register(sub) -> None:
    p = sub.add_parser("species", help="list species, rename or merge them, or set an individual's or photos' species")
    ssub = p.add_subparsers(dest="species_action", metavar="ACTION", required=True)
    ls = ssub.add_parser("list", help="species with their counts and active model")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)
    rn = ssub.add_parser("rename", help="give a species a new scientific name (the name exports write), and with "
                                        "--common-name a common name, in one change (undoable: rosette undo EVENT)")
    rn.add_argument("species")
    rn.add_argument("new_name", help="the scientific name, e.g. 'Tragelaphus angasii'")
    rn.add_argument("--common-name", default=None, help="what people call it, e.g. 'nyala' (\"\" clears it)")
    rn.set_defaults(func=run_rename)
    cn = ssub.add_parser("common-name", help="set a species' common name, e.g. 'nyala' (\"\" clears it; undoable: "
                                             "rosette undo EVENT)")
    cn.add_argument("species")
    cn.add_argument("common_name")
    cn.set_defaults(func=run_common_name)
    mg = ssub.add_parser("merge", help="move every individual, photo, benchmark and trained model of a species into "
                                       "another and remove it (undoable: rosette undo EVENT)")
    mg.add_argument("source", help="the species to merge away (name or id)")
    mg.add_argument("target", help="the species to merge it into (name or id)")
    mg.set_defaults(func=run_merge)
    st = ssub.add_parser("set", help="set the species of an individual (and its photos) or of unassigned photos")
    st.add_argument("species", help="species name (created if new) or id")
    st.add_argument("--individual", type=int, default=None)
    st.add_argument("--images", type=int, nargs="*", default=None)
    st.set_defaults(func=run_set)
    th = ssub.add_parser("threshold", help="below this calibrated probability match review suggests a new individual")
    th.add_argument("species")
    th.add_argument("percent", type=float, help="0 to 100")
    th.set_defaults(func=run_threshold)


def run_list(args, ctx) -> int:
    rows = sa.list_species(ctx.catalogue)
    if args.json:
        print(json.dumps(rows))
    else:
        print_table([(r["id"], r["name"], r["common_name"] or "", r["individuals"], r["images"], r["active_model"])
                     for r in rows], ["id", "species", "common name", "individuals", "photos", "active model"])
    return 0


def run_rename(args, ctx) -> int:
    sp = sa.rename_species(ctx.catalogue, RenameSpeciesRequest(args.species, args.new_name, user=ctx.user,
                                                               common_name=args.common_name))
    common = f", common name {sp.common_name!r}" if sp.common_name else ""
    print(f"species {sp.species_id} is now {sp.name!r}{common} (change #{sp.event_id}; rosette undo {sp.event_id} "
          "reverses it)")
    return 0


def run_common_name(args, ctx) -> int:
    sp = sa.rename_species(ctx.catalogue, RenameSpeciesRequest(args.species, None, user=ctx.user,
                                                               common_name=args.common_name))
    now = f"is now {sp.common_name!r}" if sp.common_name else "is cleared"
    print(f"the common name of species {sp.name!r} {now} (change #{sp.event_id}; rosette undo {sp.event_id} "
          "reverses it)")
    return 0


def run_merge(args, ctx) -> int:
    done = sa.merge_species(ctx.catalogue, MergeSpeciesRequest(args.source, args.target, user=ctx.user))
    print(done.message)
    print(f"rosette undo {done.merged.event_id} reverses it")
    return 0


def run_set(args, ctx) -> int:
    if (args.individual is None) == (not args.images):
        raise ValueError("give either --individual ID or --images ID ...")
    if args.individual is not None:
        done = sa.set_individual_species(ctx.catalogue, IndividualSpeciesRequest(args.individual, args.species,
                                                                                 user=ctx.user))
        print(f"individual {args.individual} and its photos are now species {done.species_id}")
    else:
        sid = sa.set_photo_species(ctx.catalogue, PhotoSpeciesRequest(tuple(args.images), args.species, user=ctx.user))
        print(f"{len(args.images)} photo(s) are now species {sid}")
    return 0


def run_threshold(args, ctx) -> int:
    v = sa.set_new_individual_threshold(ctx.catalogue, SpeciesThresholdRequest(args.species, args.percent / 100.0,
                                                                               user=ctx.user))
    print(f"match review suggests a new individual below {100 * v:.0f}% for species {args.species}")
    return 0
