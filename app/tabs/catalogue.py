"""Catalogue tab: browse individuals, open one (its page: facts, best photo per flank, timeline, station map, home
range, sex and life stage), rename / merge / split, undo, see the history."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text, refreshed_choices
from db.models import Role
from jobs.actions import catalogue as services
from jobs.actions import frames as fr
from jobs.actions import individuals as pages
from jobs.actions import species as sa
from jobs.actions.export import export_catalogue
from jobs.requests.catalogue import (
    IndividualSpeciesRequest,
    MergeRequest,
    MovePhotosRequest,
    RenameRequest,
    SetFlanksRequest,
    SplitRequest,
    UndoRequest,
)
from jobs.requests.export import ExportCatalogueRequest
from jobs.requests.individuals import IndividualHistoryRequest, SetTraitsRequest

TITLE = "Catalogue"
ORDER = 15
NOT_RECORDED = "not recorded"


def _table(rows: list[list[object]], headers: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=headers)


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    open_id = gr.State(None)  # id of the opened individual
    shown_ids = gr.State([])  # individual id of each picture in the overview gallery, in order

    with gr.Row(equal_height=False):
        with gr.Column(scale=2, min_width=320):
            summary = gr.Markdown(elem_id="catalogue-summary", elem_classes=["status-line"])
            search = gr.Textbox(label="Find an individual", placeholder="part of a name", max_lines=1,
                                elem_id="catalogue-search")
            overview = gr.Gallery(label="Individuals", columns=3, height=600, allow_preview=False,
                                  object_fit="cover", interactive=False, elem_id="catalogue-individuals", fit_columns=False,
                                  buttons=[])
        with gr.Column(scale=3, min_width=420):
            chooser = gr.Dropdown(label="Open individual", choices=[], value=None, filterable=True,
                                  elem_id="catalogue-open",
                                  info="Pick a name here or click a picture on the left.")
            headline = gr.Markdown("Open an individual to see its photos.", elem_id="catalogue-headline",
                                   elem_classes=["headline"])
            facts = gr.Markdown(elem_id="catalogue-facts")
            best_photos = gr.Gallery(label="Best photo per flank", columns=4, height=270, object_fit="contain",
                                     preview=False, interactive=False, elem_id="catalogue-best-photos",
                                     fit_columns=False)
            best_why = gr.Markdown(pages.BEST_PHOTO_RULE, elem_id="catalogue-best-why", elem_classes=["help-text"])
            with gr.Row(equal_height=True, elem_id="catalogue-traits-box"):
                sex = gr.Dropdown([NOT_RECORDED, *pages.SEXES], value=None, label="Sex", elem_id="catalogue-sex",
                                  scale=2)
                life_stage = gr.Dropdown([NOT_RECORDED, *pages.LIFE_STAGES], value=None, label="Life stage",
                                         elem_id="catalogue-life-stage", scale=2)
                traits_button = gr.Button("Save sex and life stage", elem_id="catalogue-set-traits", scale=1)
            # each button's answer is shown beside it (a status line per box), not at the foot of the page
            traits_status = gr.Markdown(elem_id="catalogue-traits-status", elem_classes=["status-line"])
            photos = gr.Gallery(label="Photos (click one to see its whole photo with every animal's box)", columns=4,
                                height=340, object_fit="contain", allow_preview=False, fit_columns=False,
                                interactive=False, elem_id="catalogue-photos")
            photo_ids = gr.State([])  # annotation id of each picture in the photos gallery, in order
            frame_view = gr.Image(label="The whole photo: every animal's box, named (people blurred)", type="numpy",
                                  interactive=False, height=380, visible=False, elem_id="catalogue-frame",
                                  buttons=["fullscreen"])
            frame_caption = gr.Markdown(elem_id="catalogue-frame-caption")
            # wrapped in fixed shares: a camera trap's event id is long and pushed Place off the table's edge
            sightings = gr.Dataframe(headers=services.SIGHTING_HEADERS, value=[], interactive=False,
                                     label="Sightings (photos taken in the same encounter)", wrap=True,
                                     column_widths=["27%", "24%", "17%", "10%", "12%", "10%"],
                                     elem_id="catalogue-sightings", max_height=220)
            with gr.Row(equal_height=False):
                with gr.Column(min_width=200, elem_id="catalogue-rename-box"):
                    new_name = gr.Textbox(label="Name", max_lines=1, elem_id="catalogue-new-name")
                    rename_button = gr.Button("Rename", elem_id="catalogue-rename")
                    rename_status = gr.Markdown(elem_id="catalogue-rename-status", elem_classes=["status-line"])
                with gr.Column(min_width=200, elem_id="catalogue-merge-box"):
                    merge_target = gr.Dropdown(label="Merge into", choices=[], value=None, filterable=True,
                                               elem_id="catalogue-merge-target",
                                               info="All photos of this individual move to the one chosen; "
                                                    "the merge can be undone.")
                    merge_button = gr.Button("Merge", elem_id="catalogue-merge")
                    merge_status = gr.Markdown(elem_id="catalogue-merge-status", elem_classes=["status-line"])
                with gr.Column(min_width=200, elem_id="catalogue-species-box"):
                    species = gr.Dropdown(label="Species", choices=[], value=None, allow_custom_value=True,
                                          elem_id="catalogue-species",
                                          info="Type a new name to add a species; its photos move with it.")
                    species_button = gr.Button("Set species", elem_id="catalogue-set-species")
                    species_status = gr.Markdown(elem_id="catalogue-species-status", elem_classes=["status-line"])
            with gr.Group(elem_id="catalogue-split-box"):
                split_pick = gr.CheckboxGroup(label="Tick photos to split out, move, or set their flank", choices=[],
                                              elem_id="catalogue-split-pick")
                with gr.Row(equal_height=True):
                    split_name = gr.Textbox(label="New individual's name", placeholder="leave empty for an automatic name",
                                            max_lines=1, elem_id="catalogue-split-name", scale=3)
                    split_button = gr.Button("Split out", elem_id="catalogue-split", scale=1)
                with gr.Row(equal_height=True):
                    bulk_flank = gr.Dropdown(["left", "right", "front", "other", "unknown"], value=None,
                                             label="Flank of the ticked photos", elem_id="catalogue-bulk-flank", scale=2)
                    bulk_flank_button = gr.Button("Set flank", elem_id="catalogue-set-flanks", scale=1)
                    move_button = gr.Button("Move ticked photos to “Merge into”", elem_id="catalogue-move",
                                            scale=2)
                split_status = gr.Markdown(elem_id="catalogue-split-status", elem_classes=["status-line"])
    with gr.Row(equal_height=False):
        timeline_plot = gr.Plot(label="Timeline of its sightings", elem_id="catalogue-timeline")
        station_map = gr.Plot(label="Its stations (no map tiles: plain latitude and longitude)",
                              elem_id="catalogue-station-map")
    home_range = gr.Markdown(elem_id="catalogue-home-range")
    with gr.Row(equal_height=True):
        undo_button = gr.Button("Undo last change", elem_id="catalogue-undo", scale=0, min_width=220,
                                variant="secondary", size="md")
        status = gr.Markdown(elem_id="catalogue-status", elem_classes=["status-line"])
    # the change this page shows as the newest: Undo undoes that one and no other (jobs.actions.catalogue.undo)
    undo_seen = gr.State(None)
    with gr.Row(equal_height=True):
        export_button = gr.Button("Export the catalogue (CSV + sheets)", elem_id="catalogue-export", scale=0,
                                  min_width=280, size="md")
        export_file = gr.File(label="Catalogue export", elem_id="catalogue-export-file", interactive=False, scale=2,
                              height=90)
        export_status = gr.Markdown(elem_id="catalogue-export-status", elem_classes=["status-line"])
    changes = gr.Dataframe(headers=services.HISTORY_HEADERS, value=[], interactive=False, wrap=True,
                           label="Recent changes (newest first; Undo reverses the newest one not yet undone)",
                           elem_id="catalogue-history", max_height=320)

    # the name the Name box was last given from the catalogue: a refresh that finds other text there keeps it (the
    # curator is typing a new name)
    shown_name = gr.State("")
    list_outputs = [overview, shown_ids, summary, chooser]
    detail_outputs = [headline, photos, sightings, split_pick, new_name, merge_target, changes, species, undo_seen,
                      facts, best_photos, best_why, timeline_plot, station_map, home_range, sex, life_stage,
                      photo_ids, frame_view, frame_caption, shown_name]
    no_frame = (gr.update(visible=False, value=None), "")

    def render_list(search_text, current):
        cards = services.individual_cards(cat, search=search_text)
        everyone = services.individual_cards(cat) if (search_text or "").strip() else cards
        pictured = [c for c in cards if c.thumb]
        choices = [(c.caption, c.id) for c in everyone]
        return ([(c.thumb, c.caption) for c in pictured], [c.id for c in pictured], services.catalogue_summary(cat),
                refreshed_choices(choices, current, values=[c.id for c in everyone]))

    def render_detail(current, ticked=None, target=None, typed=None, shown=None):
        everyone = services.individual_cards(cat)
        history = _table(services.history_rows(cat), services.HISTORY_HEADERS)
        species_names = sa.species_names(cat)
        newest = services.last_change_id(cat)
        if current is None:
            return ("Open an individual to see its photos.", [], _table([], services.SIGHTING_HEADERS),
                    gr.update(choices=[], value=[]), "", gr.update(choices=[], value=None), history,
                    gr.update(choices=species_names, value=None), newest, *render_page(None), [], *no_frame, "")
        view = services.open_individual(cat, current)
        targets = [(c.caption, c.id) for c in everyone if c.id != view.id]
        choices = services.image_choices(view)
        # ticks and the chosen "Merge into" survive a refresh (one that lands just after a choice must not undo it)
        still_here = [i for i in (ticked or []) if any(i == c for _, c in choices)]
        # so does a name being typed (text other than what the box was last given)
        name = typed if typed is not None and shown is not None and typed != shown else view.name
        return (f"### {markdown_text(view.headline())}", [(c.path, c.caption) for c in view.images if c.path],
                _table(view.sightings, services.SIGHTING_HEADERS),
                gr.update(choices=choices, value=still_here), name,
                gr.update(choices=targets, value=target if any(target == t for _, t in targets) else None), history,
                gr.update(choices=species_names, value=sa.species_of_individual(cat, view.id)), newest,
                *render_page(view.id), [c.id for c in view.images if c.path], *no_frame, view.name)

    def render_page(current):
        """The individual page's parts: facts, best photos and why, timeline, station map, home range, sex, life
        stage."""
        if current is None:
            return "", [], pages.BEST_PHOTO_RULE, None, None, "", None, None
        page = pages.individual_history(cat, IndividualHistoryRequest(current))
        h = page.history
        why = "".join(f"- {markdown_text(line)}\n" for line in page.best_photo_reasons())
        return (f"{markdown_text(page.facts())}  \n**{markdown_text(page.traits())}**", page.best_pictures,
                f"{why}\n{pages.BEST_PHOTO_RULE}", pages.timeline_figure(page), pages.station_map_figure(page),
                markdown_text(page.home_range()), h.sex or NOT_RECORDED, h.life_stage or NOT_RECORDED)

    def render_all(search_text, current, ticked, target, typed, shown):
        return (*render_list(search_text, current), *render_detail(current, ticked, target, typed, shown))

    ctx.on_refresh(render_all, inputs=[search, open_id, split_pick, merge_target, new_name, shown_name],
                   outputs=list_outputs + detail_outputs)
    search.change(guarded_viewer(render_list), inputs=[search, open_id], outputs=list_outputs,
                  trigger_mode="always_last", show_progress="hidden", api_visibility="private")

    @curator_action(role=Role.viewer)
    def open_from_gallery(ids, evt: gr.SelectData):
        chosen = ids[evt.index] if evt.index is not None and evt.index < len(ids) else None
        return (chosen, gr.update(value=chosen), *render_detail(chosen))

    @curator_action(role=Role.viewer)
    def show_frame(ids, evt: gr.SelectData):
        chosen = ids[evt.index] if evt.index is not None and evt.index < len(ids) else None
        if chosen is None:
            return no_frame
        return (gr.update(visible=True, value=fr.frame_with_boxes(cat, chosen, legend="this animal")),
                markdown_text(fr.frame_words(cat, chosen)))

    photos.select(show_frame, inputs=[photo_ids], outputs=[frame_view, frame_caption], api_visibility="private")

    @curator_action(role=Role.viewer)
    def open_from_dropdown(chosen):
        return (chosen, *render_detail(chosen))

    overview.select(open_from_gallery, inputs=[shown_ids], outputs=[open_id, chooser, *detail_outputs],
                    api_visibility="private")
    chooser.input(open_from_dropdown, inputs=[chooser], outputs=[open_id, *detail_outputs], api_visibility="private")

    @curator_action
    def do_rename(current, name, user):
        done = services.rename(cat, RenameRequest(current, name, user=user))
        return markdown_text(done.message), services.last_change_id(cat)

    @curator_action
    def do_merge(current, target, user):
        done = services.merge(cat, MergeRequest(current, target, user=user))
        return markdown_text(done.message), target, services.last_change_id(cat)

    def untick():
        # a bulk action done, its ticks are cleared: they must not carry over to the next action by surprise (a
        # fresh update each time: Gradio consumes the one it is given)
        return gr.update(value=[])

    @curator_action
    def do_split(image_ids, name, user):
        done = services.split(cat, SplitRequest(tuple(image_ids or ()), user=user, new_name=name))
        return markdown_text(done.message), "", services.last_change_id(cat), untick()

    @curator_action
    def do_move(image_ids, target, user):
        message = services.move_photos(cat, MovePhotosRequest(tuple(image_ids or ()), target, user=user))
        return markdown_text(message), services.last_change_id(cat), untick()

    @curator_action
    def do_set_flanks(image_ids, flank, user):
        return (markdown_text(services.set_flanks(cat, SetFlanksRequest(tuple(image_ids or ()), flank, user=user))),
                untick())

    @curator_action
    def do_set_species(current, name, user):
        done = sa.set_individual_species(cat, IndividualSpeciesRequest(current, name, user=user))
        return markdown_text(done.message), services.last_change_id(cat)

    @curator_action
    def do_set_traits(current, sex_value, stage_value, user):
        done = pages.set_individual_traits(cat, SetTraitsRequest(current, sex_value, stage_value, user=user))
        return markdown_text(done.message)

    @curator_action
    def do_undo(seen, user):
        return markdown_text(services.undo(cat, UndoRequest(user=user, seen_event_id=seen)).message)

    ctx.changed(rename_button.click(do_rename, inputs=[open_id, new_name, ctx.user],
                                    outputs=[rename_status, undo_seen], api_name="rename_individual"))
    ctx.changed(new_name.submit(do_rename, inputs=[open_id, new_name, ctx.user], outputs=[rename_status, undo_seen],
                                api_visibility="private"))
    ctx.changed(merge_button.click(do_merge, inputs=[open_id, merge_target, ctx.user],
                                   outputs=[merge_status, open_id, undo_seen], api_name="merge_individuals"))
    ctx.changed(split_button.click(do_split, inputs=[split_pick, split_name, ctx.user],
                                   outputs=[split_status, split_name, undo_seen, split_pick], api_name="split_images"))
    ctx.changed(traits_button.click(do_set_traits, inputs=[open_id, sex, life_stage, ctx.user],
                                    outputs=[traits_status], api_name="set_individual_traits"))
    ctx.changed(species_button.click(do_set_species, inputs=[open_id, species, ctx.user],
                                     outputs=[species_status, undo_seen], api_name="set_species"))
    @curator_action(role=Role.viewer)
    def do_export(user):
        done = export_catalogue(cat, ExportCatalogueRequest(user=user))
        return done.path, markdown_text(done.message)

    export_button.click(do_export, inputs=[ctx.user], outputs=[export_file, export_status],
                        api_name="export_catalogue")
    ctx.changed(move_button.click(do_move, inputs=[split_pick, merge_target, ctx.user],
                                  outputs=[split_status, undo_seen, split_pick], api_name="move_photos"))
    ctx.changed(bulk_flank_button.click(do_set_flanks, inputs=[split_pick, bulk_flank, ctx.user],
                                        outputs=[split_status, split_pick], api_name="set_flanks"))
    undo_click = undo_button.click(do_undo, inputs=[undo_seen, ctx.user], outputs=[status], api_name="undo_last_change")
    ctx.changed(undo_click)
    # refused (undone by someone else, or a newer change came): show the history as it is now, so that the next
    # press undoes what the page shows
    undo_click.failure(guarded_viewer(render_detail), inputs=[open_id, split_pick], outputs=detail_outputs,
                       show_progress="hidden", api_visibility="private")
