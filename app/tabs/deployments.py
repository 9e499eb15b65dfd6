"""Deployments tab: the camera stations (a table of deployments with their photos and active days), a form to add,
change or delete one, and the upload of a deployments CSV with Camtrap DP column names."""

from __future__ import annotations

import html

import gradio as gr

from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text, refreshed_choices, repeated_pick
from jobs.actions import deployments as da
from jobs.actions.common import upload_path
from jobs.requests.deployments import (
    DeleteDeploymentRequest,
    DeploymentFormRequest,
    EditDeploymentRequest,
    ImportDeploymentsRequest,
    ListDeploymentsRequest,
)

TITLE = "Deployments"
ORDER = 55

HELP = """\
**Camera stations.** A *deployment* is one camera at one station for one active period; a station whose camera
was down for some days is several deployments sharing its station id. Times are written with the UTC offset of
the station's local time, e.g. `2024-05-01T08:00:00-04:00`. *Camera-days* is the length of the active period in
days, fractions kept (set at noon on 1 May and taken at noon on 11 May: 10), the effort the Population tab counts;
*Photos* counts the photos linked to the deployment. Photos are linked when
they are imported: by a Camtrap DP deploymentID, a manifest `deployment` column, or a `Station/...` folder (the
deployment of that station running when the photo was taken).
"""

CSV_HELP = """\
**Deployments CSV.** Camtrap DP column names: `deploymentID`, `deploymentStart`, `deploymentEnd` (required),
`locationID`, `locationName`, `latitude`, `longitude`, `cameraID`, `cameraModel`; other columns are kept as they
came. New deployments are added; one already stored with other values is reported and kept as stored. A file
with a bad row is refused whole, naming every problem.
"""

TABLE_HEADERS = ["Deployment", "Station", "Station name", "Latitude", "Longitude", "Start", "End", "Camera-days",
                 "Photos", "Camera", "Camera model"]
TABLE_WIDTHS = ["9%", "6%", "10%", "7%", "7%", "16%", "16%", "8%", "6%", "6%", "9%"]


def _days(x: float) -> str:
    """Camera-days to two decimals without trailing zeros (10, 39.66), as the Population tab writes them."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


TABLE_TYPES = ["str"] * 5 + ["html", "html"] + ["str"] * 4


def _shown_time(iso: str) -> str:
    """A stored ISO time as its date and its time of day, each kept on one line (the `dt` class): a narrow
    column breaks between them, never after a hyphen inside the date or before a negative UTC offset."""
    date, _, rest = iso.partition("T")
    parts = [date, rest] if rest else [date]
    return " ".join(f'<span class="dt">{html.escape(p)}</span>' for p in parts)


def _table(cat) -> tuple[list[list[object]], list[str], str]:
    rows = da.deployments(cat, ListDeploymentsRequest())
    table = [[r.key, r.location_id or "", r.location_name or "", "" if r.lat is None else r.lat,
              "" if r.lon is None else r.lon, _shown_time(r.start), _shown_time(r.end), round(r.active_days, 2),
              r.photos, r.camera_id or "",
              r.camera_model or ""]
             for r in rows]
    stations = {r.station for r in rows}
    words = (f"{len(rows)} deployment(s) at {len(stations)} station(s), {sum(r.photos for r in rows)} linked "
             f"photo(s), {_days(sum(r.active_days for r in rows))} camera-days in all" if rows else
             "No deployments yet: add one below or upload a deployments CSV.")
    return table, [r.key for r in rows], words


def _report_text(report) -> str:
    lines = [f"**{markdown_text(report.summary())}**"]
    lines += [f"- conflict: {markdown_text(c.describe())}" for c in report.conflicting]
    lines += [f"- warning: {markdown_text(w)}" for w in report.warnings]
    return "\n".join(lines)


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    gr.Markdown(HELP, elem_classes=["help-text"])
    overview = gr.Markdown(elem_id="deployments-overview", elem_classes=["status-line"])
    # widths that fit every column, the camera model included, at 1400 px (times wrap between date and time)
    table = gr.Dataframe(headers=TABLE_HEADERS, value=[], interactive=False, wrap=True, elem_id="deployments-table",
                         max_height=420, column_widths=TABLE_WIDTHS, datatype=TABLE_TYPES)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            chosen = gr.Dropdown([], value=None, label="Deployment to change or delete", elem_id="deployments-chosen",
                                 info="empty: the form adds a new deployment")
            with gr.Row():
                key = gr.Textbox(label="Deployment id (deploymentID)", max_lines=1, elem_id="deployment-id")
                location_id = gr.Textbox(label="Station id (locationID)", max_lines=1, elem_id="deployment-location")
                location_name = gr.Textbox(label="Station name", max_lines=1, elem_id="deployment-location-name")
            with gr.Row():
                start = gr.Textbox(label="Start", placeholder="2024-05-01T08:00:00-04:00", max_lines=1,
                                   elem_id="deployment-start")
                end = gr.Textbox(label="End", placeholder="2024-05-20T17:00:00-04:00", max_lines=1,
                                 elem_id="deployment-end")
            with gr.Row():
                lat = gr.Textbox(label="Latitude (WGS84)", max_lines=1, elem_id="deployment-lat")
                lon = gr.Textbox(label="Longitude (WGS84)", max_lines=1, elem_id="deployment-lon")
                camera_id = gr.Textbox(label="Camera id", max_lines=1, elem_id="deployment-camera")
                camera_model = gr.Textbox(label="Camera model", max_lines=1, elem_id="deployment-camera-model")
            with gr.Row():
                add_button = gr.Button("Add deployment", variant="primary", elem_id="deployment-add")
                save_button = gr.Button("Save changes", elem_id="deployment-save")
                delete_button = gr.Button("Delete", variant="stop", elem_id="deployment-delete")
        with gr.Column(scale=2):
            gr.Markdown(CSV_HELP, elem_classes=["help-text"])
            csv_file = gr.File(label="Deployments CSV", file_count="single", file_types=[".csv"],
                               elem_id="deployments-csv", height=120)
            import_button = gr.Button("Import deployments", elem_id="deployments-import")
    status = gr.Markdown(elem_id="deployments-status", elem_classes=["status-line"])
    form = [key, start, end, location_id, location_name, lat, lon, camera_id, camera_model]

    def show(current):
        rows, keys, words = _table(cat)
        return rows, words, refreshed_choices(keys, current)

    ctx.on_refresh(show, inputs=[chosen], outputs=[table, overview, chosen])

    def load(picked):
        if repeated_pick(("deployment-form", picked)):  # the second event of one pick: the form may be typed in
            return [gr.skip()] * len(form)
        row = {r.key: r for r in da.deployments(cat, ListDeploymentsRequest())}.get(picked or "")
        if row is None:
            return [""] * len(form)
        return [row.key, row.start, row.end, row.location_id or "", row.location_name or "",
                "" if row.lat is None else str(row.lat), "" if row.lon is None else str(row.lon), row.camera_id or "",
                row.camera_model or ""]

    chosen.input(guarded_viewer(load), inputs=[chosen], outputs=form, api_name="deployment_form")

    def form_request(user, key_, start_, end_, loc_id, loc_name, lat_, lon_, cam_id, cam_model):
        return DeploymentFormRequest(key_, start_, end_, user=user, location_id=loc_id, location_name=loc_name,
                                     latitude=lat_, longitude=lon_, camera_id=cam_id, camera_model=cam_model)

    @curator_action
    def add(user, key_, start_, end_, loc_id, loc_name, lat_, lon_, cam_id, cam_model):
        asked = form_request(user, key_, start_, end_, loc_id, loc_name, lat_, lon_, cam_id, cam_model)
        return _report_text(da.add_deployment(cat, asked))

    @curator_action
    def save(picked, user, key_, start_, end_, loc_id, loc_name, lat_, lon_, cam_id, cam_model):
        if not picked:
            raise ValueError("Choose the deployment to change first (or use Add deployment for a new one).")
        asked = form_request(user, key_, start_, end_, loc_id, loc_name, lat_, lon_, cam_id, cam_model)
        warnings = da.edit_deployment(cat, EditDeploymentRequest(picked, asked))
        return "\n".join([f"**Deployment {markdown_text(asked.deployment_id)} saved.**",
                          *[f"- warning: {markdown_text(w)}" for w in warnings]])

    @curator_action
    def delete(picked, user):
        da.delete_deployment(cat, DeleteDeploymentRequest(picked or "", user=user))
        return f"**Deployment {markdown_text(picked)} deleted.**"

    @curator_action
    def import_csv(uploaded, user):
        if not uploaded:
            raise ValueError("Choose a deployments CSV file first.")
        return _report_text(da.import_deployments(cat, ImportDeploymentsRequest(upload_path(uploaded), user=user)))

    ctx.changed(add_button.click(add, inputs=[ctx.user, *form], outputs=[status], api_name="add_deployment"))
    ctx.changed(save_button.click(save, inputs=[chosen, ctx.user, *form], outputs=[status],
                                  api_name="edit_deployment"))
    ctx.changed(delete_button.click(delete, inputs=[chosen, ctx.user], outputs=[status],
                                    api_name="delete_deployment"))
    ctx.changed(import_button.click(import_csv, inputs=[csv_file, ctx.user], outputs=[status],
                                    api_name="import_deployments"))
