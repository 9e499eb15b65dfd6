"""Export tab: the catalogue as a Camtrap DP 1.0 package (deployments, photos and observations, checked against the
standard, people blurred unless the curator chooses otherwise) written by a background job, to download; below it a
Kaggle-format submission (row_id,similarity) for a competition's test.csv."""

from __future__ import annotations

import gradio as gr

from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text
from core.field.camtrapdp_writer import SAMPLING_DESIGNS
from db.models import Role
from jobs.actions import export as es
from jobs.actions import jobs as js
from jobs.actions import match as ms
from jobs.actions.common import upload_name, upload_path
from jobs.requests.camtrapdp import ExportCamtrapDPRequest
from jobs.requests.export import KaggleUploadRequest

TITLE = "Export"
ORDER = 50

HELP = """\
**Kaggle submission.** Upload the competition's `test.csv` (`row_id,query_image,gallery_image`) and its images
(a zip, or a folder on this machine). Each image is embedded once by the chosen model and every row gets a
similarity, higher = more alike (Lorentz models: exp(-distance)). Rows are written in the order of `test.csv`.
"""

CAMTRAP_HELP = """\
**Camtrap DP package.** The catalogue as a [Camtrap DP 1.0](https://camtrap-dp.tdwg.org) package: the camera
deployments, their photos (copied into the package) and one observation per animal, with the individual it is
catalogued as and who decided that. Photos without a deployment (or of a deployment without coordinates) cannot be
Camtrap DP media: they are left out and counted. The package is checked against the standard before it is offered.
People stay private: the people in every exported photo are blurred as on the screens, unless you choose to leave
those photos out, or to keep them unblurred (recorded in the audit trail). It is written in the background: its
progress shows here and in the Jobs tab.
"""

#: The people choice's labels (value: core.io.privacy.PEOPLE_CHOICES); blur comes first and is the default.
PEOPLE_LABELS = [("Blur the people (default)", "blur"), ("Leave out the photos showing people", "omit"),
                 ("Keep the people unblurred (recorded in the audit trail)", "keep")]


def _camtrap_result(done) -> str:
    """What the curator reads after a Camtrap DP export: counts, what was left out, and the check's verdict."""
    d = done.details
    lines = [markdown_text(f"{'Valid' if done.valid else 'NOT VALID'} Camtrap DP package: {d['deployments']} "
                           f"deployment(s), {d['media']} photo(s), {d['observations']} observation(s) "
                           f"({d.get('people_observations', 0)} of people), {d['individuals']} individual(s).")]
    if d.get("people_words"):
        lines.append(markdown_text(d["people_words"][0].upper() + d["people_words"][1:] + "."))
    if d["left_out"]:
        lines.append(markdown_text("Left out: " + ", ".join(f"{n} photo(s) {why}" for why, n in d["left_out"].items())
                                   + "."))
    problems = d["problems"][:20]  # the first twenty: the rest are in the CLI's output
    if problems:
        lines.append("\n".join("- " + markdown_text(f"{p['resource'] or 'datapackage.json'}"
                                                    + (f", row {p['row']}" if p["row"] is not None else "")
                                                    + (f", field {p['field']}" if p["field"] else "")
                                                    + f": {p['message']}") for p in problems))
    lines.append(markdown_text(f"Written to {done.path}."))
    return "\n\n".join(lines)


def _models(cat) -> list[str]:
    """The active model first, then trained models and backbones (what match review offers)."""
    active = ms.active_model(cat)
    return [active] + [n for n in ms.matcher_choices(cat) if n != active]


def build(ctx: UIContext) -> None:
    _camtrap_block(ctx, ctx.tab_timer(2.0))
    _kaggle_block(ctx, ctx.tab_timer(2.0))


def _polled(cat, jid: int | None) -> object:
    """A poll's timer: stopped once its job has ended (or when there is none), else left running."""
    return gr.Timer(active=False) if not jid or js.job_over(cat, jid) else gr.skip()


def _camtrap_block(ctx: UIContext, timer: gr.Timer) -> None:
    """The field formats: the catalogue as a Camtrap DP package, written by a background job."""
    cat = ctx.catalogue
    gr.Markdown(CAMTRAP_HELP, elem_classes=["help-text"])
    with gr.Row():
        camtrap_title = gr.Textbox(label="Package title (optional)", elem_id="camtrap-title",
                                   info="names the package and its project; default: the catalogue's folder")
        camtrap_design = gr.Dropdown(list(SAMPLING_DESIGNS), value="opportunistic", label="Sampling design",
                                     elem_id="camtrap-design", info="how the camera sites were chosen")
        camtrap_media = gr.Checkbox(value=True, label="Copy the photos into the package", elem_id="camtrap-media")
    camtrap_people = gr.Radio(PEOPLE_LABELS, value="blur", label="People in the photos", elem_id="camtrap-people")
    camtrap_run = gr.Button("Write Camtrap DP package", elem_id="camtrap-run")
    camtrap_job = gr.State(None)
    camtrap_status = gr.Markdown(elem_id="camtrap-status")
    camtrap_file = gr.File(label="Camtrap DP package (zip)", interactive=False, elem_id="camtrap-result")

    @curator_action(role=Role.viewer)
    def write_camtrap(title, design, with_media, people, user):
        jid, message = es.queue_camtrap_dp_export(cat, ExportCamtrapDPRequest(
            user=user, zip=True, title=title, sampling_design=design, include_media=with_media, people=people))
        return jid, markdown_text(message), None

    ctx.polls_after(camtrap_run.click(write_camtrap,
                                      [camtrap_title, camtrap_design, camtrap_media, camtrap_people, ctx.user],
                                      [camtrap_job, camtrap_status, camtrap_file], api_name="export_camtrap_dp"), timer)

    def camtrap_status_now(jid):
        if not jid:
            return gr.skip(), gr.skip()
        done, words = es.camtrap_dp_export_status(cat, jid)
        return (_camtrap_result(done), done.zip_path) if done is not None else (markdown_text(words), None)

    def camtrap_poll(jid):
        return *camtrap_status_now(jid), _polled(cat, jid)

    timer.tick(guarded_viewer(camtrap_poll), [camtrap_job], [camtrap_status, camtrap_file, timer],
               show_progress="hidden")

    def camtrap_latest(current):
        # after a page reload the newest package (and its download) is shown again
        jid = current or es.latest_camtrap_dp_job(cat)
        return (jid, *camtrap_status_now(jid)) if jid else (gr.skip(), gr.skip(), gr.skip())

    ctx.on_refresh(camtrap_latest, inputs=[camtrap_job], outputs=[camtrap_job, camtrap_status, camtrap_file],
                   on_tab_select=False)


def _kaggle_block(ctx: UIContext, timer: gr.Timer) -> None:
    """A Kaggle submission for a competition's test.csv, written by a background job."""
    cat = ctx.catalogue
    gr.Markdown(HELP, elem_classes=["help-text"])
    with gr.Row():
        test_csv = gr.File(label="test.csv", file_types=[".csv"], elem_id="export-test-csv")
        images_zip = gr.File(label="Images (zip)", file_types=[".zip"], elem_id="export-images-zip")
    with gr.Row():
        images_dir = gr.Textbox(label="…or images folder on this machine", elem_id="export-images-dir")
        model = gr.Dropdown(_models(cat), value=_models(cat)[0], label="Model", allow_custom_value=True,
                            info="the active model by default; any backbone or trained model")
        variant = gr.Radio([("Whole photo", "full_rgb"), ("Animal only (PNG alpha as mask)", "foreground_only")],
                           value="full_rgb", label="What the model sees")
    run = gr.Button("Write submission", variant="primary", elem_id="export-run")
    job_id = gr.State(None)
    status = gr.Markdown(elem_id="export-status")
    result = gr.File(label="submission.csv", interactive=False, elem_id="export-result")

    @curator_action(role=Role.viewer)
    def start(csv_file, zip_file, folder, model_name, var, user):
        asked = KaggleUploadRequest(test_csv=upload_path(csv_file) if csv_file else None, model=model_name,
                                    images_zip=upload_path(zip_file) if zip_file else None, images_dir=folder,
                                    variant=var, user=user, test_csv_name=upload_name(csv_file))
        jid, msg = es.submit_kaggle_export(cat, asked)
        return jid, msg, None

    ctx.polls_after(run.click(start, [test_csv, images_zip, images_dir, model, variant, ctx.user],
                              [job_id, status, result]), timer)
    def poll(jid):
        return *(es.export_status(cat, jid) if jid else (gr.skip(), gr.skip())), _polled(cat, jid)

    timer.tick(guarded_viewer(poll), [job_id], [status, result, timer], show_progress="hidden")

    def latest(current):
        # after a page reload the newest export (and its download) is shown again
        if current:
            return gr.skip(), *es.export_status(cat, current)
        jid = es.latest_export_job(cat)
        return (jid, *es.export_status(cat, jid)) if jid else (gr.skip(), gr.skip(), gr.skip())

    ctx.on_refresh(latest, inputs=[job_id], outputs=[job_id, status, result], on_tab_select=False)
