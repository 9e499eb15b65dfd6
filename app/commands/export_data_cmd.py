"""``rosette export WHAT ...``: the catalogue's data for other tools: ``capthist`` (capture histories for secr,
camtrapR and MARK) and ``camtrap-dp`` (a Camtrap DP 1.0 package). Each kind of export adds its own subcommand."""

from __future__ import annotations

from app.commands import camtrapdp_cmd, population_cmd


def register(sub) -> None:
    p = sub.add_parser("export", help="write the catalogue's data for other tools (capthist, camtrap-dp)")
    subs = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    population_cmd.register_capthist_export(subs)
    camtrapdp_cmd.register_export(subs)
