"""Jobs tab: every background job with its status, progress and message; cancel and retry.

The list refreshes itself every two seconds while the page is open (a gr.Timer),
so a curator can watch an evaluation or an embedding run without reloading.
"""

from __future__ import annotations

import html

import gradio as gr

from app import match_services as ms
from app.ui import UIContext, curator_action

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
# Cancel / retry buttons inside the table send (action, job id) to the server.
ACTIONS_JS = """
element.addEventListener('click', (e) => {
  const b = e.target.closest('button[data-job]');
  if (b) trigger('click', {action: b.dataset.action, job: Number(b.dataset.job)});
});
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def jobs_html(rows: list[ms.JobRow]) -> str:
    """The job list as an HTML table with progress bars and per-job Cancel / Retry buttons."""
    if not rows:
        return "<div class='empty'>No jobs yet. Evaluations started from <b>Benchmarks &amp; models</b> appear here.</div>"
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
            f"<td>{_e(r.kind)}<div class='params'>{_e(r.params)}</div></td>"
            f"<td><span class='st st-{r.status}'>{_e(r.status)}</span></td>"
            f"<td><progress max='100' value='{pct}' title='{pct}%'></progress> {pct}%</td>"
            f"<td>{_e(r.message)}{error}</td><td>{_e(r.created)}</td><td>{_e(r.duration)}</td>"
            f"<td>{''.join(actions)}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("Job", "Kind", "Status", "Progress", "Message", "Queued (UTC)",
                                             "Ran for", ""))
    return f"<table id='jobs-table'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def worker_line(rows: list[ms.JobRow] | None = None) -> str:
    """Whether queued jobs will run: an in-process worker, or a warning when one has waited too long."""
    if ms.worker_running():
        return "A job worker runs inside this server: queued jobs start within a second or two."
    waiting = ms.oldest_queued_wait_s(rows or [])
    if waiting is not None and waiting > WAIT_WARNING_S:
        return (f"**A job has waited {waiting:.0f} s for a worker.** Jobs run in a separate process: "
                "is `rosette worker` running for this data directory?")
    return "Jobs run in the background in a `rosette worker` process; this list refreshes by itself."


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    with gr.Row(equal_height=True):
        worker = gr.Markdown(worker_line(), elem_id="jobs-worker", elem_classes=["status-line"])
        warm_button = gr.Button("Compute features for every photo", elem_id="jobs-embed", scale=0, min_width=260)
    status = gr.Markdown(elem_id="jobs-status", elem_classes=["status-line"])
    table = gr.HTML(jobs_html([]), elem_id="jobs-list", css_template=CSS, js_on_load=ACTIONS_JS)
    timer = gr.Timer(REFRESH_EVERY_S)

    def render():
        rows = ms.job_rows(cat)
        return jobs_html(rows), worker_line(rows)

    ctx.on_refresh(render, outputs=[table, worker])
    timer.tick(curator_action(render), outputs=[table, worker], show_progress="hidden", api_visibility="private",
               queue=False)

    @curator_action
    def act(evt: gr.EventData):
        data = getattr(evt, "_data", None) or {}
        job_id, action = data.get("job"), data.get("action")
        if job_id is None or action not in ("cancel", "retry"):
            return gr.skip(), gr.skip(), gr.skip()
        message = ms.cancel_job(cat, int(job_id)) if action == "cancel" else ms.retry_job(cat, int(job_id))
        return message, *render()

    @curator_action
    def warm():
        return ms.warm_feature_cache(cat, backbone=ms.DEFAULT_MODEL), *render()

    table.click(act, outputs=[status, table, worker], api_visibility="private")
    warm_button.click(warm, outputs=[status, table, worker], api_name="compute_features")
