"""``rosette deployments [--json]`` / ``rosette deployments import|add|edit|delete``: camera stations.

A deployment is one camera at one location for one active period; a station that was down for some days is
several deployments sharing its location id. Times are ISO 8601 with the UTC offset of the deployment's local
time (``2024-05-01T08:00:00-04:00``). ``import`` reads a deployments CSV with Camtrap DP column names
(deploymentID, locationID, locationName, latitude, longitude, deploymentStart, deploymentEnd, cameraID,
cameraModel, ...): new deployments are added, ones stored differently are reported and kept as stored.
"""

from __future__ import annotations

import json

from app.console import print_table
from jobs.actions import deployments as da
from jobs.requests.deployments import (
    DeleteDeploymentRequest,
    DeploymentFormRequest,
    EditDeploymentRequest,
    ImportDeploymentsRequest,
    ListDeploymentsRequest,
)


def _form_options(p, *, required: bool) -> None:
    p.add_argument("--start", required=required, help="when it started, e.g. 2024-05-01T08:00:00-04:00")
    p.add_argument("--end", required=required, help="when it ended (its offset defaults to the start's)")
    p.add_argument("--location-id", default=None, help="the station it belongs to (locationID)")
    p.add_argument("--location-name", default=None, help="the station's name (locationName)")
    p.add_argument("--lat", type=float, default=None, help="latitude, WGS84 decimal degrees")
    p.add_argument("--lon", type=float, default=None, help="longitude, WGS84 decimal degrees")
    p.add_argument("--camera-id", default=None, help="the camera's id (cameraID)")
    p.add_argument("--camera-model", default=None, help="the camera's make and model (cameraModel)")


def register(sub) -> None:
    p = sub.add_parser("deployments", help="camera stations: list, import a deployments CSV, add, edit, delete",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("--json", action="store_true", help="list as JSON")
    p.set_defaults(func=run_list)
    dsub = p.add_subparsers(dest="deployments_action", metavar="ACTION")
    im = dsub.add_parser("import", help="import a deployments CSV (Camtrap DP column names)")
    im.add_argument("csv", metavar="CSV")
    im.add_argument("--dry-run", action="store_true", help="check the file and report, store nothing")
    im.add_argument("--json", action="store_true")
    im.set_defaults(func=run_import)
    add = dsub.add_parser("add", help="add one deployment")
    add.add_argument("deployment_id", metavar="DEPLOYMENT_ID")
    _form_options(add, required=True)
    add.set_defaults(func=run_add)
    ed = dsub.add_parser("edit", help="change a deployment (options not given keep their value)")
    ed.add_argument("deployment_id", metavar="DEPLOYMENT_ID")
    ed.add_argument("--new-id", default=None, help="rename it")
    _form_options(ed, required=False)
    ed.set_defaults(func=run_edit)
    de = dsub.add_parser("delete", help="delete a deployment that has no photos")
    de.add_argument("deployment_id", metavar="DEPLOYMENT_ID")
    de.set_defaults(func=run_delete)


def run_list(args, ctx) -> int:
    rows = da.deployments(ctx.catalogue, ListDeploymentsRequest())
    if args.json:
        print(json.dumps([r.to_dict() for r in rows]))
        return 0
    print_table([(r.key, r.location_id or "", r.location_name or "",
                  "" if r.lat is None else f"{r.lat:.5f}", "" if r.lon is None else f"{r.lon:.5f}", r.start, r.end,
                  f"{r.active_days:.2f}".rstrip("0").rstrip("."), r.photos, r.camera_id or "") for r in rows],
                ["deployment", "location", "name", "lat", "lon", "start", "end", "camera-days", "photos", "camera"])
    if not rows:
        print("no deployments yet: rosette deployments import CSV, or rosette deployments add")
    return 0


def _print_report(report) -> None:
    print(report.summary())
    for c in report.conflicting:
        print(f"conflict: {c.describe()}")
    for w in report.warnings:
        print(f"warning: {w}")


def run_import(args, ctx) -> int:
    report = da.import_deployments(ctx.catalogue, ImportDeploymentsRequest(args.csv, user=ctx.user,
                                                                           dry_run=args.dry_run))
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        _print_report(report)
    return 0 if report.ok else 1


def run_add(args, ctx) -> int:
    report = da.add_deployment(ctx.catalogue, DeploymentFormRequest(
        args.deployment_id, args.start, args.end, user=ctx.user, location_id=args.location_id,
        location_name=args.location_name, latitude=args.lat, longitude=args.lon, camera_id=args.camera_id,
        camera_model=args.camera_model))
    _print_report(report)
    return 0


def run_edit(args, ctx) -> int:
    current = {r.key: r for r in da.deployments(ctx.catalogue, ListDeploymentsRequest())}.get(args.deployment_id)
    if current is None:
        raise ValueError(f"no deployment {args.deployment_id!r}; rosette deployments lists them")

    def pick(given, stored):
        return stored if given is None else given

    form = DeploymentFormRequest(
        args.new_id or current.key, pick(args.start, current.start), pick(args.end, current.end), user=ctx.user,
        location_id=pick(args.location_id, current.location_id),
        location_name=pick(args.location_name, current.location_name), latitude=pick(args.lat, current.lat),
        longitude=pick(args.lon, current.lon), camera_id=pick(args.camera_id, current.camera_id),
        camera_model=pick(args.camera_model, current.camera_model))
    for w in da.edit_deployment(ctx.catalogue, EditDeploymentRequest(current.key, form)):
        print(f"warning: {w}")
    print(f"deployment {form.deployment_id!r} saved")
    return 0


def run_delete(args, ctx) -> int:
    da.delete_deployment(ctx.catalogue, DeleteDeploymentRequest(args.deployment_id, user=ctx.user))
    print(f"deployment {args.deployment_id!r} deleted")
    return 0
