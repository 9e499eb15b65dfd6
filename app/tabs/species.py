"""Species tab: every species with its common name, individuals, photos and active model; an admin renames one (the
scientific name exports write, and its common name) or merges one into another, and undoes the newest of these
changes."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from app.ui_base import UIContext, curator_action, markdown_text, refreshed_choices
from db.models import Role
from jobs.actions import species as sa
from jobs.requests.catalogue import MergeSpeciesRequest, RenameSpeciesRequest, UndoRequest

TITLE = "Species"
ORDER = 75

HELP = """\
**Species.** Every individual and photo belongs to one species; match review offers candidates of the query's own
species, and benchmarks, training and the active model are per species. The name is the one exports write (Camtrap
DP's `scientificName`), so give the scientific name, e.g. *Tragelaphus angasii*. The **common name** (e.g. *nyala*)
is what people call it; Camtrap DP exports give it as the species' English name (`vernacularNames`). **Save names**
changes the scientific name (leave *New name* empty to keep it) and the common name (empty it to clear it), in one
change; nothing else moves. **Merge** moves every individual, photo, benchmark and trained model of the chosen
species into the other one and removes it (the first species, which photos imported without a species go to, stays,
empty); the other species keeps its active model, or takes this one's if it had none. A merge is refused when an
individual of one species has the name of one of the other's. Both are recorded with who made them and can be undone
here or in the Catalogue tab's recent changes. Admins only.
"""

TABLE_HEADERS = ["Id", "Species", "Common name", "Individuals", "Photos", "Animals", "Active model",
                 "New individual below"]


def _overview(cat) -> tuple[pd.DataFrame, list[tuple[str, int]], str]:
    rows = sa.list_species(cat)
    table = pd.DataFrame([[r["id"], r["name"], r["common_name"] or "", r["individuals"], r["photos"], r["images"],
                           r["active_model"],
                           "default" if r["new_individual_threshold"] is None
                           else f"{100 * r['new_individual_threshold']:.0f}%"] for r in rows], columns=TABLE_HEADERS)
    words = sa.totals_text(cat, rows)
    return table, [(r["name"], r["id"]) for r in rows], words


def _common_name(cat, species_id) -> str:
    """The common name of the species picked (empty when it has none, or none is picked)."""
    return next((r["common_name"] or "" for r in sa.list_species(cat) if r["id"] == species_id), "")


def _history(cat) -> pd.DataFrame:
    return pd.DataFrame(sa.species_history_rows(cat), columns=sa.SPECIES_HISTORY_HEADERS)


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    gr.Markdown(HELP, elem_classes=["help-text"])
    overview = gr.Markdown(elem_id="species-overview", elem_classes=["status-line"])
    table = gr.Dataframe(headers=TABLE_HEADERS, value=[], interactive=False, wrap=True, elem_id="species-table",
                         max_height=360)
    with gr.Row(equal_height=True):
        pick = gr.Dropdown([], value=None, label="Species", elem_id="species-pick", scale=2)
        new_name = gr.Textbox(label="New name (scientific)", placeholder="e.g. Tragelaphus angasii", max_lines=1,
                              elem_id="species-new-name", scale=3)
        common_name = gr.Textbox(label="Common name", placeholder="e.g. nyala", max_lines=1,
                                 elem_id="species-common-name", scale=3)
        rename_button = gr.Button("Save names", variant="primary", elem_id="species-rename", scale=1)
    with gr.Row(equal_height=True):
        target = gr.Dropdown([], value=None, label="Merge the species above into", elem_id="species-merge-target",
                             scale=5)
        merge_button = gr.Button("Merge", variant="stop", elem_id="species-merge", scale=1)
    status = gr.Markdown(elem_id="species-status", elem_classes=["status-line"])
    with gr.Row(equal_height=True):
        undo_button = gr.Button("Undo the newest species change", elem_id="species-undo", scale=0, min_width=260)
    history = gr.Dataframe(headers=sa.SPECIES_HISTORY_HEADERS, value=[], interactive=False, wrap=True,
                           label="Species changes (newest first)", elem_id="species-history", max_height=260)
    undo_seen = gr.State(None)  # the change this page shows as the newest: Undo undoes that one and no other

    def show(current, merge_into):
        rows, choices, words = _overview(cat)
        return (rows, words, refreshed_choices(choices, current), refreshed_choices(choices, merge_into),
                _history(cat), sa.last_species_change_id(cat))

    ctx.on_refresh(show, inputs=[pick, target], outputs=[table, overview, pick, target, history, undo_seen])

    @curator_action(role=Role.viewer)
    def show_common_name(species_id, _user):
        return _common_name(cat, species_id)

    @curator_action(role=Role.admin)
    def do_rename(species_id, name, common, user):
        if species_id is None:
            raise ValueError("Choose the species to rename first.")
        # an empty New name keeps the scientific name; the common name field holds the one to keep (empty: none)
        done = sa.rename_species(cat, RenameSpeciesRequest(str(species_id), (name or "").strip() or None, user=user,
                                                           common_name=common or ""))
        return markdown_text(done.message), "", done.common_name or ""

    @curator_action(role=Role.admin)
    def do_merge(species_id, into, user):
        done = sa.merge_species(cat, MergeSpeciesRequest(None if species_id is None else str(species_id),
                                                         None if into is None else str(into), user=user))
        return markdown_text(done.message), gr.update(value=into), gr.update(value=None)

    @curator_action(role=Role.admin)
    def do_undo(seen, user):
        return markdown_text(sa.undo_species_change(cat, UndoRequest(user=user, event_id=seen)).message)

    pick.change(show_common_name, inputs=[pick, ctx.user], outputs=[common_name], show_progress="hidden",
                api_visibility="private")
    rename_inputs, rename_outputs = [pick, new_name, common_name, ctx.user], [status, new_name, common_name]
    ctx.changed(rename_button.click(do_rename, inputs=rename_inputs, outputs=rename_outputs,
                                    api_name="rename_species"))
    for box in (new_name, common_name):
        ctx.changed(box.submit(do_rename, inputs=rename_inputs, outputs=rename_outputs, api_visibility="private"))
    ctx.changed(merge_button.click(do_merge, inputs=[pick, target, ctx.user], outputs=[status, pick, target],
                                   api_name="merge_species"))
    ctx.changed(undo_button.click(do_undo, inputs=[undo_seen, ctx.user], outputs=[status],
                                  api_name="undo_species_change"))
