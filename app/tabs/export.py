"""Export tab: a Kaggle-format submission (row_id,similarity) for a competition's test.csv."""

from __future__ import annotations

import gradio as gr

from app.ui_base import UIContext, curator_action, guarded_viewer
from db.models import Role
from jobs.actions import export as es
from jobs.actions import match as ms
from jobs.actions.common import upload_name, upload_path
from jobs.requests.export import KaggleUploadRequest

TITLE = "Export"
ORDER = 50

HELP = """\
**Kaggle submission.** Upload the competition's `test.csv` (`row_id,query_image,gallery_image`) and its images
(a zip, or a folder on this machine). Each image is embedded once by the chosen model and every row gets a
similarity, higher = more alike (Lorentz models: exp(-distance)). Rows are written in the order of `test.csv`.
"""


def _models(cat) -> list[str]:
    """The active model first, then trained models and backbones (what match review offers)."""
    active = ms.active_model(cat)
    return [active] + [n for n in ms.matcher_choices(cat) if n != active]


def build(ctx: UIContext) -> None:
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
    timer = gr.Timer(2.0)

    @curator_action(role=Role.viewer)
    def start(csv_file, zip_file, folder, model_name, var, user):
        asked = KaggleUploadRequest(test_csv=upload_path(csv_file) if csv_file else None, model=model_name,
                                    images_zip=upload_path(zip_file) if zip_file else None, images_dir=folder,
                                    variant=var, user=user, test_csv_name=upload_name(csv_file))
        jid, msg = es.submit_kaggle_export(cat, asked)
        return jid, msg, None

    run.click(start, [test_csv, images_zip, images_dir, model, variant, ctx.user], [job_id, status, result])
    def poll(jid):
        return es.export_status(cat, jid) if jid else (gr.skip(), gr.skip())

    timer.tick(guarded_viewer(poll), [job_id], [status, result], show_progress="hidden")

    def latest(current):
        # after a page reload the newest export (and its download) is shown again
        if current:
            return gr.skip(), *poll(current)
        jid = es.latest_export_job(cat)
        return (jid, *es.export_status(cat, jid)) if jid else (gr.skip(), gr.skip(), gr.skip())

    ctx.on_refresh(latest, inputs=[job_id], outputs=[job_id, status, result], on_tab_select=False)
