"""The People tab's Accounts panel: who may sign in and with what role (changes: admins only, checked on the
server). Built by ``app/tabs/people.py`` (the leading underscore keeps it from being a tab of its own)."""

from __future__ import annotations

import gradio as gr

from app.ui_base import UIContext, acting_role, curator_action
from db.models import Role
from jobs.actions import accounts as acc
from jobs.requests.accounts import AddAccountRequest, SetActiveRequest, SetPasswordRequest, SetRoleRequest

HELP = """\
**Accounts and roles.** *Viewer*: browse and export. *Curator*: also decide matches, mask, label flanks, import,
evaluate. *Admin*: also manage accounts, train, promote and archive models, manage species. Every change here is in
the audit trail. Passwords are stored as salted argon2id hashes; the last admin who can sign in cannot be demoted
or disabled. The same from the shell: `rosette users add|list|role|passwd|disable|enable`.
"""


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    gr.Markdown(HELP, elem_classes=["help-text"])
    notice = gr.Markdown(elem_id="accounts-notice", elem_classes=["status-line"])
    table = gr.Dataframe(headers=acc.ACCOUNT_HEADERS, value=[], interactive=False, elem_id="accounts-table",
                         max_height=360)
    with gr.Row():
        name = gr.Textbox(label="Name", max_lines=1, elem_id="accounts-name")
        password = gr.Textbox(label="Password (8+ characters)", type="password", max_lines=1,
                              elem_id="accounts-password")
        role = gr.Dropdown([r.value for r in Role], value=Role.curator.value, label="Role", elem_id="accounts-role")
    with gr.Row():
        add_button = gr.Button("Add account", variant="primary", elem_id="accounts-add")
        role_button = gr.Button("Set role", elem_id="accounts-set-role")
        password_button = gr.Button("Set password", elem_id="accounts-set-password")
        disable_button = gr.Button("Disable", elem_id="accounts-disable")
        enable_button = gr.Button("Enable", elem_id="accounts-enable")
    status = gr.Markdown(elem_id="accounts-status", elem_classes=["status-line"])

    def show():
        if acting_role() != Role.admin:  # everyone may open the tab; only admins see and manage accounts
            return [], "Only admins manage accounts."
        return acc.accounts_table(cat), ""

    ctx.on_refresh(show, outputs=[table, notice])

    @curator_action(role=Role.admin)
    def add(n, p, r, user):
        return acc.add_account(cat, AddAccountRequest(n, p, role=r, by=user)).message, ""

    @curator_action(role=Role.admin)
    def set_role(n, r, user):
        return acc.change_role(cat, SetRoleRequest(n, r, by=user)).message

    @curator_action(role=Role.admin)
    def set_password(n, p, user):
        return acc.reset_password(cat, SetPasswordRequest(n, p, by=user)).message, ""

    @curator_action(role=Role.admin)
    def disable(n, user):
        return acc.set_enabled(cat, SetActiveRequest(n, False, by=user)).message

    @curator_action(role=Role.admin)
    def enable(n, user):
        return acc.set_enabled(cat, SetActiveRequest(n, True, by=user)).message

    ctx.changed(add_button.click(add, inputs=[name, password, role, ctx.user], outputs=[status, password],
                                 api_name="add_account"))
    ctx.changed(role_button.click(set_role, inputs=[name, role, ctx.user], outputs=[status], api_name="set_role"))
    ctx.changed(password_button.click(set_password, inputs=[name, password, ctx.user], outputs=[status, password],
                                      api_name="set_password"))
    ctx.changed(disable_button.click(disable, inputs=[name, ctx.user], outputs=[status], api_name="disable_account"))
    ctx.changed(enable_button.click(enable, inputs=[name, ctx.user], outputs=[status], api_name="enable_account"))
