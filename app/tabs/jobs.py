"""Jobs tab: train a model, watch a training run, and every background job with its status; cancel and retry.

"Train a model" queues a training job (heavy queue) from a form whose defaults
follow the measured recipes. The run panel shows the chosen (by default the
newest) training run: live curves of training loss and validation mAP against
the frozen features, the log tail, cancel and retry (a retried run resumes from
its last checkpoint). Everything is read back from the database and the job's
folder, so a page reload shows the same state.

While the tab is shown (and the browser tab is in sight) the page asks every two seconds for the list, the worker
line and a digest of the training runs: one call to a server function of the list's HTML component, redrawn in
place when it differs. No Gradio event runs for it: an event costs the browser a walk over the whole page for each
component it updates, and a gr.Timer that refreshed the list, the worker line and the six parts of the run panel
kept 0.4-0.6 core of browser CPU busy while the tab was open. The page asks for the run panel (one event) only when
the digest of the training runs changes.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import gradio as gr

from app.ui_base import UIContext, curator_action, fingerprint, guarded_viewer
from db.models import Role
from jobs.actions import jobs as js
from jobs.actions import match as ms
from jobs.actions import training as ts
from jobs.actions.common import curator_name
from jobs.actions.job_words import job_params_words

TITLE = "Jobs"
ORDER = 60
REFRESH_EVERY_S = 2.0
WAIT_WARNING_S = 15.0

CSS = """
table { width: 100%; border-collapse: collapse; font-size: var(--text-sm); border: none; }
th, td { padding: 6px 8px; border: none; border-bottom: 1px solid var(--border-color-primary); text-align: left;
  vertical-align: top; }
th { color: var(--body-text-color-subdued); font-weight: 600; }
progress { width: 140px; height: 12px; vertical-align: middle; accent-color: var(--color-accent, #d97706); }
.st { padding: 1px 8px; border-radius: 999px; font-weight: 600; white-space: nowrap; }
.st-queued { background: #e7e5e4; } .st-running, .st-cancelling { background: #fef3c7; color: #78350f; }
.st-succeeded { background: #d1fae5; color: #065f46; } .st-failed { background: #fee2e2; color: #7f1d1d; }
.st-cancelled { background: #f5f5f4; color: #57534e; }
button.job-action { padding: 2px 10px; border-radius: 6px; border: 1px solid var(--border-color-primary);
  background: var(--button-secondary-background-fill); cursor: pointer; }
button.job-action:hover { border-color: var(--color-accent, #d97706); }
.params, .error { color: var(--body-text-color-subdued); font-size: var(--text-xs); word-break: break-all; }
.error { color: #b91c1c; }
.empty { padding: 1.5rem; color: var(--body-text-color-subdued); }
"""
# Cancel / retry buttons inside the table send (action, job id) to the server. When the poll brings a run panel
# digest other than the one the page last saw, the page asks for the panel ("submit"): the poll itself stays one
# output.
ACTIONS_JS = """
element.addEventListener('click', (e) => {
  const b = e.target.closest('button[data-job]');
  if (b) trigger('click', {action: b.dataset.action, job: Number(b.dataset.job)});
});
let seen = null;
const stamp = () => { const s = element.querySelector('[data-run-stamp]'); return s ? s.dataset.runStamp : null; };
new MutationObserver(() => {
  const now = stamp();
  if (now && seen && now !== seen) trigger('submit', {});
  if (now) seen = now;
}).observe(element, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-run-stamp']});
let asking = false;
setInterval(async () => {
  if (asking || document.hidden || !element.isConnected || element.offsetParent === null) return;
  asking = true;
  try {
    const now = await server.jobs_now(null);
    if (typeof now === 'string' && now !== props.value) props.value = now;
  } catch (e) { /* signed out or the server restarting: the next tick asks again */ }
  finally { asking = false; }
}, __EVERY_MS__);
""".replace("__EVERY_MS__", str(int(REFRESH_EVERY_S * 1000)))


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def jobs_page_html(rows: list[js.JobRow], requests: dict[int, str], *, worker: str, run_stamp: str) -> str:
    """What the poll draws: the worker line (HTML), the job list, and the run panel's digest (unseen)."""
    return (f"<div id='jobs-worker' class='status-line'>{worker}</div>{jobs_html(rows, requests)}"
            f"<span hidden data-run-stamp='{_e(run_stamp)}'></span>")


def jobs_html(rows: list[js.JobRow], requests: dict[int, str] | None = None) -> str:
    """The job list as an HTML table with progress bars and per-job Cancel / Retry buttons; ``requests``: each
    job's request in words (:func:`jobs.actions.job_words.job_params_words`), else its raw parameters."""
    if not rows:
        return "<div class='empty'>No jobs yet. Evaluations started from <b>Benchmarks</b> and training runs appear here.</div>"
    body = []
    for r in rows:
        actions = []
        if r.can_cancel:
            actions.append(f"<button class='job-action' data-action='cancel' data-job='{r.id}' "
                           f"id='job-cancel-{r.id}'>Cancel</button>")
        if r.can_retry:
            actions.append(f"<button class='job-action' data-action='retry' data-job='{r.id}' "
                           f"id='job-retry-{r.id}'>Retry</button>")
        pct = round(100 * r.progress)
        error = f"<div class='error' title='{_e(r.error)}'>{_e(r.error[:200])}</div>" if r.error else ""
        body.append(
            f"<tr id='job-row-{r.id}' data-status='{r.status}'><td>#{r.id}</td>"
            f"<td>{_e(r.kind)}<div class='params'>{_e((requests or {}).get(r.id, r.params))}</div></td>"
            f"<td><span class='st st-{r.status}'>{_e(r.status)}</span></td>"
            f"<td><progress max='100' value='{pct}' title='{pct}%'></progress> {pct}%</td>"
            f"<td>{_e(r.message)}{error}</td><td>{_e(r.created)}</td><td>{_e(r.duration)}</td>"
            f"<td class='ran-on'>{_e(r.ran_on)}</td>"
            f"<td>{''.join(actions)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("Job", "Kind", "Status", "Progress", "Message", "Queued (UTC)",
                                             "Ran for", "Ran on", ""))
    return f"<table id='jobs-table'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def worker_line(rows: list[js.JobRow] | None = None) -> str:
    """Whether queued jobs will run (HTML): an in-process worker, or a warning when one has waited too long."""
    if js.worker_running():
        return "A job worker runs inside this server: queued jobs start within a second or two."
    waiting = js.oldest_queued_wait_s(rows or [])
    if waiting is not None and waiting > WAIT_WARNING_S:
        return (f"<b>A job has waited {waiting:.0f} s for a worker.</b> Jobs run in a separate process: "
                "is <code>rosette worker</code> running for this data directory?")
    return "Jobs run in the background in a <code>rosette worker</code> process; this list refreshes by itself."


def job_action(cat, action: str, job_id: int, user: str) -> str:
    """Cancel or retry a job (the list's buttons and the training run's); returns what happened, in words."""
    if action == "cancel":
        return js.cancel_job(cat, js.CancelJobRequest(job_id=int(job_id), user=curator_name(user))).message
    return js.retry_job(cat, js.RetryJobRequest(job_id=int(job_id), user=curator_name(user))).message


def _run_outputs(view: ts.RunView, runs: list[tuple[str, int]]):
    # no run, no plot: an empty figure still loads and lays out Plotly in the browser (0.7 s of CPU, profiled)
    figure = view.figure if view.job_id is not None else None
    return (gr.update(choices=runs, value=view.job_id), view.summary, figure, view.log_tail,
            gr.update(interactive=view.can_cancel), gr.update(interactive=view.can_retry))


def build_training(ctx: UIContext) -> tuple[list, Callable[..., tuple]]:
    """The "Train a model" form and the live view of one training run; returns the panel's outputs and the
    function that draws them (the tab's poll asks for the panel when the training runs change)."""
    cat = ctx.catalogue
    d = ts.train_defaults(cat)
    with gr.Accordion("Train a model", open=True, elem_id="train-panel"):
        gr.Markdown("Trains on photos whose individual is known, never on a benchmark's test photos; the new "
                    "model is evaluated on the benchmark and appears as a candidate. SupCon is the loss that "
                    "improved nyala retrieval; the others are there to compare.", elem_classes=["status-line"])
        with gr.Row():
            backbone = gr.Dropdown(d.backbones, value=d.backbone, label="Backbone", elem_id="train-backbone")
            head = gr.Dropdown(d.heads, value=d.head, label="Head and loss", elem_id="train-head")
            blocks = gr.Dropdown(d.blocks, value=d.block, label="What to train", elem_id="train-blocks",
                                 info="fine-tuning backbone blocks is slower but learns more")
        with gr.Row():
            training_set = gr.Dropdown(d.training_sets, value=d.training_set, label="Training photos",
                                       elem_id="train-set")
            epochs = gr.Number(d.epochs, label="Epochs", precision=0, minimum=1, maximum=1000, elem_id="train-epochs")
            device = gr.Dropdown(d.devices, value=d.device, label="Device", elem_id="train-device",
                                 info="auto uses a GPU when there is one")
            sampler = gr.Dropdown(d.samplers, value=d.sampler, label="Batches", elem_id="train-sampler")
            holdout = gr.Dropdown(d.holdouts, value=d.holdout, label="Held out for calibration",
                                  elem_id="train-holdout",
                                  info="identities a spot pipeline calibrates on, unseen in training")
            train_button = gr.Button("Train", variant="primary", elem_id="train-start", scale=0, min_width=120)
        train_status = gr.Markdown(elem_id="train-status", elem_classes=["status-line"])
    with gr.Group(elem_id="train-run-panel"):
        with gr.Row(equal_height=True):
            run = gr.Dropdown(ts.training_runs(cat), label="Training run", elem_id="train-run", scale=3)
            cancel_run = gr.Button("Cancel run", elem_id="train-cancel", scale=0, min_width=130, interactive=False)
            retry_run = gr.Button("Retry (resume)", elem_id="train-retry", scale=0, min_width=150, interactive=False)
        summary = gr.Markdown(elem_id="train-summary")
        plot = gr.Plot(label="Loss and validation mAP", elem_id="train-plot")
        log_tail = gr.Textbox(label="Log (last lines)", lines=8, max_lines=8, interactive=False,
                              elem_id="train-log", autoscroll=True)
    outputs = [run, summary, plot, log_tail, cancel_run, retry_run]

    def show(job_id=None):
        return _run_outputs(ts.run_view(cat, job_id), ts.training_runs(cat))

    def refresh_form():
        fresh = ts.train_defaults(cat)
        return gr.update(choices=fresh.training_sets, value=fresh.training_set)

    @curator_action(role=Role.admin)
    def start(user, backbone_v, head_v, blocks_v, set_v, epochs_v, device_v, sampler_v, holdout_v):
        request = ts.training_form(backbone=backbone_v, head=head_v, blocks=blocks_v, epochs=epochs_v,
                                   training_set=set_v, device=device_v, user=curator_name(user),
                                   sampler=sampler_v or ts.DEFAULT_SAMPLER, calibration_holdout=holdout_v or "auto")
        job_id, message = ts.launch_training(cat, request)
        return message, *show(job_id)

    @curator_action
    def act(action, job_id, user):
        if job_id is None:
            raise ValueError("Choose a training run first.")
        return job_action(cat, action, job_id, user), *show(job_id)

    ctx.on_refresh(refresh_form, outputs=[training_set])
    ctx.on_refresh(show, outputs=outputs)
    train_button.click(start, inputs=[ctx.user, backbone, head, blocks, training_set, epochs, device, sampler, holdout],
                       outputs=[train_status, *outputs], api_name="train_model")
    run.input(guarded_viewer(show), inputs=[run], outputs=outputs, api_visibility="private")
    cancel_run.click(curator_action(lambda j, u: act("cancel", j, u), role=Role.admin), inputs=[run, ctx.user],
                     outputs=[train_status, *outputs], api_visibility="private")
    retry_run.click(curator_action(lambda j, u: act("retry", j, u), role=Role.admin), inputs=[run, ctx.user],
                    outputs=[train_status, *outputs], api_visibility="private")
    return outputs, show


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    run_outputs, show = build_training(ctx)
    run = run_outputs[0]
    with gr.Row(equal_height=True):
        warm_button = gr.Button("Compute features for every photo", elem_id="jobs-embed", scale=0, min_width=260)
    status = gr.Markdown(elem_id="jobs-status", elem_classes=["status-line"])

    def render():
        rows = js.job_rows(cat)
        runs = [(r.id, r.status, r.progress, r.message, r.error) for r in rows if r.kind == "train"]
        return jobs_page_html(rows, job_params_words(cat, [r.id for r in rows]), worker=worker_line(rows),
                              run_stamp=fingerprint(runs))

    def jobs_now(_unused=None):
        return render()

    table = gr.HTML(jobs_page_html([], {}, worker=worker_line(), run_stamp=""), elem_id="jobs-list",
                    css_template=CSS, js_on_load=ACTIONS_JS, server_functions=[guarded_viewer(jobs_now)])

    ctx.on_refresh(render, outputs=[table])
    table.submit(guarded_viewer(show), inputs=[run], outputs=run_outputs, show_progress="hidden",
                 api_visibility="private")

    @curator_action
    def act(user, evt: gr.EventData):
        data = getattr(evt, "_data", None) or {}
        job_id, action = data.get("job"), data.get("action")
        if job_id is None or action not in ("cancel", "retry"):
            return gr.skip(), gr.skip()
        return job_action(cat, action, job_id, user), render()

    @curator_action
    def warm(user):
        return js.warm_feature_cache(cat, js.WarmFeaturesRequest(user=curator_name(user),
                                                                 backbone=ms.DEFAULT_MODEL)), render()

    table.click(act, inputs=[ctx.user], outputs=[status, table], api_visibility="private")
    warm_button.click(warm, inputs=[ctx.user], outputs=[status, table], api_name="compute_features")
