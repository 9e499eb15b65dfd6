"""Ingest tab: upload photos or zip archives, optionally with a manifest CSV naming the animals."""

from __future__ import annotations

import gradio as gr

from app.ui_base import UIContext, curator_action
from core.annotations import DEFAULT_MIN_CONFIDENCE
from jobs.actions import ingest as services
from jobs.actions.common import upload_path
from jobs.requests.ingest import ImportUploadsRequest, PreviewFoldersRequest

TITLE = "Ingest"
ORDER = 10

MANIFEST_HELP = """\
**Manifest (optional).** A CSV file with a header row. The `filename` column names the uploaded photo
(its original file name, or its path inside the zip); `identity` (optional) names the individual it shows:
an empty identity leaves the animal unassigned, ready to be matched.
Optional columns: `flank` (left / right / front / other), `sighting` (photos taken in the same encounter
share a sighting label), and sighting details such as `date`, `place`, `camera`, `observer`.
For camera traps: `deployment` (a deployment id or station of the Deployments tab) and `timestamp`
(ISO 8601, e.g. `2024-05-01T08:00:00-04:00`) link the photo to its station; photos of one deployment
within 60 s form one sighting. A **Camtrap DP package** (a zip holding its `datapackage.json`, deployments,
media and observations) is imported as a package when uploaded on its own, without a manifest: its deployments,
boxes, species and individuals come in with it (from the shell: `rosette import datapackage.json`).
Photos without a row are imported without an individual, ready to be matched.
"""

#: What a zip's first-level folders can mean (the label shown, the value the import takes).
FOLDER_CHOICES = [("camera stations (Station/... as camera traps store them)", "stations"),
                  ("individuals (one folder per animal)", "individuals"),
                  ("nothing (photos come in unassigned)", "none")]

#: After an import, the report table shows its first rows, not where the last import's was scrolled to.
SCROLL_REPORT_TO_TOP = """() => {
  const root = document.getElementById('ingest-report');
  if (root) { root.scrollIntoView({block: 'nearest'}); root.querySelectorAll('*').forEach(el => {
    if (el.scrollTop) { el.scrollTop = 0; } }); }
}"""


DETECTIONS_HELP = """\
Boxes can come from a MegaDetector batch JSON (run MegaDetector, AddaxAI or Timelapse on your frames first).
Each animal box at or above the minimum confidence becomes one animal of its photo; person boxes are blurred.
"""


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue

    gr.Markdown("Add photos to the catalogue. Each photo is stored once, even if it is uploaded again.")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            files = gr.File(label="Photos or zip archives", file_count="multiple", file_types=["image", ".zip"],
                            elem_id="ingest-files", height=220)
            files_count = gr.Markdown(elem_id="ingest-files-count")
            folders = gr.Radio(FOLDER_CHOICES, value="none", label="What are the zip's folders?",
                               elem_id="ingest-folders",
                               info="folder names become individuals only when you choose it")
            folders_preview = gr.Markdown(elem_id="ingest-folders-preview")
            species = gr.Textbox(label="Species (optional)", elem_id="ingest-species", max_lines=1,
                                 placeholder="e.g. Tragelaphus angasii",
                                 info="the species of these photos (a new one is added); a manifest's species "
                                      "column names a row's own; empty: the default species")
        with gr.Column(scale=2):
            manifest = gr.File(label="Manifest CSV (optional)", file_count="single", file_types=[".csv"],
                               elem_id="ingest-manifest", height=120)
            gr.Markdown(MANIFEST_HELP, elem_classes=["help-text"])
            update_metadata = gr.Checkbox(label="Update metadata of existing photos", value=False,
                                          elem_id="ingest-update-metadata",
                                          info="photos already in the catalogue take the manifest's date, place, "
                                               "camera and observer (an audited change); otherwise differences are "
                                               "only reported")
            gr.Markdown(DETECTIONS_HELP, elem_classes=["help-text"], elem_id="ingest-detections-help")
            with gr.Accordion("MegaDetector boxes (optional)", open=False, elem_id="ingest-detections-box"):
                detections = gr.File(label="MegaDetector output (JSON)", file_count="single", file_types=[".json"],
                                     elem_id="ingest-detections", height=110)
                with gr.Row():
                    min_confidence = gr.Number(label="minimum confidence", value=DEFAULT_MIN_CONFIDENCE, minimum=0,
                                               maximum=1, step=0.05, elem_id="ingest-min-confidence",
                                               info="animal boxes below this confidence are left out")
                    keep_empty = gr.Checkbox(label="keep empty frames", value=False, elem_id="ingest-keep-empty",
                                             info="import frames with no animal box too (as photos without "
                                                  "animals); otherwise they are reported and left out")
    with gr.Row():
        import_button = gr.Button("Import", variant="primary", elem_id="ingest-import", scale=4)
        stop_button = gr.Button("Stop import", elem_id="ingest-stop", scale=1, min_width=120)
    summary = gr.Markdown(elem_id="ingest-summary", elem_classes=["status-line"])
    # fixed shares: sized by its content, the Details column ran past the table's right edge
    report = gr.Dataframe(headers=services.REPORT_HEADERS, value=[], interactive=False, wrap=True,
                          label="Import report", elem_id="ingest-report", max_height=420,
                          column_widths=["28%", "9%", "63%"])

    @curator_action
    def run_import(uploaded, manifest_file, update, detections_file, confidence, empty, folder_meaning, species_name,
                   user, request: gr.Request, progress=gr.Progress()):
        def step(done: int, total: int) -> None:
            progress((done, total), desc="Importing photos", unit="photos")

        key = getattr(request, "session_hash", None)
        services.IMPORT_STOPS.clear(key)
        asked = ImportUploadsRequest(tuple(upload_path(f) for f in (uploaded or [])), user=user,
                                     manifest=upload_path(manifest_file) if manifest_file else None,
                                     update_metadata=bool(update),
                                     detections=upload_path(detections_file) if detections_file else None,
                                     min_confidence=DEFAULT_MIN_CONFIDENCE if confidence is None else float(confidence),
                                     keep_empty=bool(empty), folders=folder_meaning or "none",
                                     species=species_name or None)
        outcome = services.import_uploads(cat, asked, progress=step, should_cancel=services.IMPORT_STOPS.checker(key))
        stopped = outcome.counts.get("skipped", 0) and services.IMPORT_STOPS.checker(key)()
        services.IMPORT_STOPS.clear(key)
        head = "**Import stopped:**" if stopped else "**Import finished:**"
        return f"{head} {outcome.summary}", outcome.rows

    event = import_button.click(run_import, inputs=[files, manifest, update_metadata, detections, min_confidence,
                                                          keep_empty, folders, species, ctx.user],
                                outputs=[summary, report], api_name="import_photos", concurrency_limit=1)
    event.then(None, js=SCROLL_REPORT_TO_TOP)
    ctx.changed(event)

    @curator_action
    def on_files(uploaded, folder_meaning, user):
        # nothing chosen yet ("nothing", the default): the preview picks stations when every folder names one
        paths = tuple(upload_path(f) for f in (uploaded or []))
        chosen = None if folder_meaning in (None, "none") else folder_meaning
        found = services.preview_folders(cat, PreviewFoldersRequest(paths, folders=chosen))
        return found.files_words, found.words, gr.update(value=found.chosen)

    @curator_action
    def on_folders(uploaded, folder_meaning, user):
        paths = tuple(upload_path(f) for f in (uploaded or []))
        return services.preview_folders(cat, PreviewFoldersRequest(paths, folders=folder_meaning or "none")).words

    files.change(on_files, inputs=[files, folders, ctx.user], outputs=[files_count, folders_preview, folders],
                 api_visibility="private")
    folders.input(on_folders, inputs=[files, folders, ctx.user], outputs=[folders_preview], api_visibility="private")

    def stop_import(request: gr.Request):
        services.IMPORT_STOPS.request(getattr(request, "session_hash", None))
        return "Stopping after the current photo…"

    stop_button.click(curator_action(stop_import), outputs=[summary], api_visibility="private", concurrency_limit=None)
