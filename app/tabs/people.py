"""People tab: the audit trail (every change, who made it and when, filtered, exported as CSV) and the accounts."""

from __future__ import annotations

import gradio as gr

from app.tabs import _accounts
from app.ui_base import UIContext, guarded_viewer
from jobs.actions import audit as au
from jobs.requests.audit import AuditExportRequest

TITLE = "People"
ORDER = 70

HELP = """\
**Who did what.** Every change (decisions, merges, splits, renames, masks, flanks, imports, promotions, account
changes) is recorded with the signed-in person who made it, in the same transaction as the change. Each row is
chained to the one before by a SHA-256 hash, so a row rewritten or deleted outside Rosette shows as a broken chain
(also `rosette audit verify`). Action and target filters match prefixes: `decision`, `photo.flank`, `photo#12`.
"""


def build(ctx: UIContext) -> None:
    with gr.Tabs(elem_id="people-tabs"):
        with gr.Tab("Audit trail", id="audit", elem_id="tab-audit"):
            build_audit(ctx)
        with gr.Tab("Accounts", id="accounts", elem_id="tab-accounts"):
            _accounts.build(ctx)


def build_audit(ctx: UIContext) -> None:
    cat = ctx.catalogue
    gr.Markdown(HELP, elem_classes=["help-text"])
    with gr.Row():
        who = gr.Dropdown(au.audit_choices(cat), value="anyone", label="Who", elem_id="audit-user",
                          allow_custom_value=True)
        action = gr.Textbox(label="Action", placeholder="e.g. decision", elem_id="audit-action", max_lines=1)
        target = gr.Textbox(label="Target", placeholder="e.g. photo#12", elem_id="audit-target", max_lines=1)
        since = gr.Textbox(label="From (YYYY-MM-DD)", elem_id="audit-since", max_lines=1)
        until = gr.Textbox(label="To (YYYY-MM-DD)", elem_id="audit-until", max_lines=1)
    with gr.Row():
        show_button = gr.Button("Show", variant="primary", elem_id="audit-show", scale=0, min_width=120)
        csv_button = gr.Button("Export CSV", elem_id="audit-export", scale=0, min_width=140)
    summary = gr.Markdown(elem_id="audit-summary", elem_classes=["status-line"])
    table = gr.Dataframe(headers=au.AUDIT_HEADERS, value=[], interactive=False, wrap=True, elem_id="audit-table",
                         max_height=520)
    download = gr.File(label="Audit CSV", elem_id="audit-csv", interactive=False)
    filters = [who, action, target, since, until]

    def show(*values):
        return au.audit_table(cat, *values)

    def refresh_people(current):
        return gr.update(choices=au.audit_choices(cat), value=current or "anyone")

    def export(who, action, target, since, until):
        done = au.export_audit(cat, AuditExportRequest(who=au.who_filter(who), action=action, target=target,
                                                       since=since, until=until))
        return done.path, done.message

    ctx.on_refresh(show, inputs=filters, outputs=[table, summary])
    ctx.on_refresh(refresh_people, inputs=[who], outputs=[who])
    gr.on([show_button.click, who.input, action.submit, target.submit, since.submit, until.submit],
          guarded_viewer(show), inputs=filters, outputs=[table, summary], api_name="audit_trail")
    csv_button.click(guarded_viewer(export), inputs=filters, outputs=[download, summary], api_name="audit_csv")
