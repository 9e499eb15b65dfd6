"""``rosette import PATH [--format ...] [--dry-run]``: bring photos into the catalogue.

PATH is a photo, a folder (flat or one sub-folder per individual), a zip, a CSV
manifest (``filename[,identity,flank,sighting,date,lat,lon,camera,observer]``),
a Kaggle layout (``train.csv`` + RGBA PNGs) or a Camtrap DP 1.x package (its
``datapackage.json``, its folder or a zip: deployments, media and one annotation
per animal observation); the format is detected unless
``--format`` says it. The report lists every file that was not simply imported
(errors with their reason, skipped files, updates, the same photo under
a second name); small imports list every
file, ``--all`` always does. Exit code: 0 when at least one file was fine or
nothing failed, 1 when every file failed (or the import could not start).

Camera stations: a manifest may name each photo's ``deployment`` (a deploymentID or a station) and ``timestamp``;
camera-trap folders laid out ``Station/...`` (camtrapR) are read with ``--layout stations`` (or by themselves when
every sub-folder names a station of ``rosette deployments``). A folder's sub-folders are otherwise read as one
individual each (``--layout individuals``, the default for a folder, kept as it always was); a zip's folder names
become individuals only with ``--layout individuals``, and ``--layout none`` reads no folder name at all.
``--species NAME`` sets the species of what comes in (added if new) where the source names none. Each photo is
linked to the deployment of its station
running when it was taken, and photos of one deployment at most ``--event-gap`` seconds apart (60) form one event.
"""

from __future__ import annotations

import sys
import time

from app.console import print_table
from core.annotations import DEFAULT_MIN_CONFIDENCE
from core.field.stations import EVENT_GAP_S
from jobs.actions.ingest import FORMATS, import_path
from jobs.requests.ingest import ImportPathRequest

#: Imports with more files than this print counts and only the rows needing attention.
FULL_TABLE_MAX = 40


def register(sub) -> None:
    p = sub.add_parser("import", help="import photos (file, folder, zip, CSV manifest or Kaggle layout)",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("path", metavar="PATH", help="photo, folder, .zip, manifest .csv, Kaggle folder/train.csv or Camtrap DP "
                                          "datapackage.json (or its folder / zip)")
    p.add_argument("--format", choices=FORMATS, default=None, help="how to read PATH (default: detected)")
    p.add_argument("--dry-run", action="store_true", help="check every file and report, write nothing")
    p.add_argument("--all", action="store_true", dest="show_all", help="list every file, also on big imports")
    p.add_argument("--update-metadata", action="store_true",
                   help="for photos already in the catalogue, replace their sighting's date, place, position, camera "
                        "and observer with the manifest's (audited); without it differences are only reported")
    p.add_argument("--detections", metavar="MD.json", default=None,
                   help="MegaDetector batch output for these photos: each animal box at or above --min-confidence "
                        "becomes its own annotation, person boxes are blurred in thumbnails")
    p.add_argument("--min-confidence", type=float, default=DEFAULT_MIN_CONFIDENCE,
                   help=f"the detector threshold for animal and person boxes (default {DEFAULT_MIN_CONFIDENCE})")
    p.add_argument("--detector", default=None, metavar="NAME",
                   help="run a detector for the boxes instead (rosette detectors: which can run here; "
                        "megadetector needs its weights in $ROSETTE_WEIGHTS_DIR)")
    p.add_argument("--keep-empty", action="store_true",
                   help="import frames with no animal box too (as photos without annotations); for a Camtrap DP "
                        "package: media observed as blank (or people / vehicles only)")
    p.add_argument("--event-gap", type=float, default=EVENT_GAP_S, metavar="SECONDS",
                   help=f"photos of one camera deployment taken at most this many seconds apart form one event "
                        f"(default {EVENT_GAP_S:g})")
    p.add_argument("--layout", choices=("auto", "individuals", "stations", "none"), default="auto",
                   help="how a folder's or zip's first-level sub-folders are read: one per individual, one per "
                        "camera station (Station/..., camtrapR), or not at all (none); auto: stations when every "
                        "sub-folder names a station in 'rosette deployments', else individuals for a folder and "
                        "none for a zip")
    p.add_argument("--species", default=None, metavar="NAME",
                   help="the species of the photos coming in (added if new; a manifest's species column names a "
                        "row's own); default: the default species")
    p.set_defaults(func=run)


def _progress_printer(stream):
    if not stream.isatty():
        return None
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] > 0.2:
            last[0] = now
            print(f"\r  {done}/{total} files", end="" if done < total else "\n", file=stream, flush=True)

    return progress


def run(args, ctx) -> int:
    request = ImportPathRequest(args.path, user=ctx.user, format=args.format, dry_run=args.dry_run,
                                update_metadata=args.update_metadata, detections=args.detections,
                                min_confidence=args.min_confidence, keep_empty=args.keep_empty,
                                detector=args.detector, event_gap_s=args.event_gap, layout=args.layout,
                                species=args.species)
    try:
        report = import_path(ctx.catalogue, request, progress=_progress_printer(sys.stderr))
    except KeyboardInterrupt:  # before or after the files (reading the source, storing its deployments)
        print("interrupted: what was stored so far is kept; import again to continue", file=sys.stderr)
        return 130
    print(f"import of {report.source} as {report.format}")
    if args.show_all or len(report.items) <= FULL_TABLE_MAX:
        rows = report.rows()
    else:
        rows = report.rows(attention_only=True)
        counts = [(s, n) for s, n in report.counts.items() if n]
        print_table(counts, ["status", "files"])
        print()
        if rows:
            print("files needing attention:")
    if rows:
        print_table(rows, ["file", "status", "message"])
    print(report.summary())
    if report.items and not report.dry_run:  # a dry run stores nothing: its per-file lines say what it would do
        print(report.tally.words())
    if not report.items:
        print("no photos were found there")
    if report.interrupted:
        print("interrupted", file=sys.stderr)
    return report.exit_code
