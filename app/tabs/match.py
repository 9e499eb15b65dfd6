"""Match review tab: the screen curators live in (docs/DESIGN.md section 7).

The photo to identify is large on the left with its flank, sighting, date and
place (and its mask outline when it has a mask); the ranked candidates are a
grid on the right with picture, individual, score bar, rank, flank and badges.
The curator decides with one click or one key (M same individual, N not the
same, U unsure, I new individual, Z undo, arrows previous / next) and the next
photo of the review queue loads at once. Every decision records who decided,
with which model, and the score and rank that were shown.

This module holds the layout and the handlers; what the grid, the facts line and the header look like is drawn by
:mod:`app.tabs.match_cards`, the decisions are :mod:`jobs.actions.decisions`. Other tabs open a photo here through
:func:`photo_link`.
"""

from __future__ import annotations

import base64
import html
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from app.tabs.match_cards import PAIR_CSS, ahead_html, board_html, pair_html
from app.tabs.match_links import build_flank_links
from app.ui_base import ASSETS_DIR, UIContext, curator_action, guarded_viewer, refreshed_choices, repeated_pick
from db.models import Role
from jobs.actions import decisions as ds
from jobs.actions import flanks as fs
from jobs.actions import frames as fr
from jobs.actions import identities as ident
from jobs.actions import match as ms
from jobs.actions import review_words as rw
from jobs.actions import species as sa
from jobs.actions.common import curator_name, upload_path
from jobs.actions.errors import CatalogueError, ConflictError
from jobs.requests.catalogue import SpeciesThresholdRequest

TITLE = "Match review"
ORDER = 20

KEYS_JS = (ASSETS_DIR / "keys.js").read_text(encoding="utf-8") if (ASSETS_DIR / "keys.js").exists() else None
GRID_CSS = (ASSETS_DIR / "match.css").read_text(encoding="utf-8") if (ASSETS_DIR / "match.css").exists() else ""
# what the screen was last drawn with (see ``render``): outline / whole frames asked for; matched spots shown
LOOK = {"outline": False, "whole": False, "spots": False}
# the pair's own buttons (accept the suggested flank) send their action to the server; and what follows from the
# animal shown is set here in the page, not sent as more updates with every decision (each costs a walk over the
# page): the decision buttons are off at the queue's end (a viewer's stay as the role lock left them), the mask
# outline box shows only for a photo with a mask, and the photo picker forgets an animal no longer shown
PAIR_JS = """
element.addEventListener('click', (e) => {
  const b = e.target.closest('[data-action]');
  if (b) trigger('click', {action: b.dataset.action});
});
const DECIDE = ['match-same', 'match-not', 'match-unsure', 'match-new', 'match-same-sighting'];
const WAIT = [...DECIDE, 'match-next', 'match-prev', 'match-undo'];
let saved = null;  // the screen as it was before the animal drawn ahead was shown, until the answer
const hold = (on) => {
  for (const id of WAIT) {
    const b = document.getElementById(id);
    if (!b) continue;
    if (on && !b.disabled) { b.disabled = true; b.dataset.rzWait = '1'; }
    else if (!on && b.dataset.rzWait) { b.disabled = false; delete b.dataset.rzWait; }
  }
};
const sync = () => {
  const pair = element.querySelector('.rz-pair');
  if (!pair) return;
  const end = pair.dataset.end === '1';
  for (const id of DECIDE) {
    const b = document.getElementById(id);
    if (!b) continue;
    if (end && !b.disabled) { b.disabled = true; b.dataset.rzEnd = '1'; }
    else if (!end && b.dataset.rzEnd) { b.disabled = false; delete b.dataset.rzEnd; }
  }
  const box = document.getElementById('match-outline');
  if (box) box.style.display = pair.dataset.mask === '1' ? '' : 'none';
  // "Open a photo" names the animal it opened: once another is on screen it names nothing (its choices, every
  // photo of the catalogue, are not sent again with each decision)
  const pick = document.querySelector('#match-open input');
  const shown = pair.dataset.query || '';
  if (pick && pick.value && !pick.value.startsWith('#' + shown + ' ')) pick.value = '';
  if (!pair.dataset.ahead) { saved = null; hold(false); }  // the server's answer has redrawn the screen
};
new MutationObserver(sync).observe(element, {childList: true, subtree: true, attributes: true});
sync();
// The next animal, drawn ahead by the server (#match-ahead), is shown the moment a decision or Next is sent; the
// buttons wait for the server's answer, which redraws the screen as it is (a decision refused or failed puts the
// animal decided on back). After "same" or "new" the candidates may rank differently: they say so meanwhile.
const board = () => { const h = document.getElementById('match-header'); return h ? h.parentElement : null; };
window.__rzAhead = (mode) => {
  const ahead = document.querySelector('#match-ahead .rz-ahead');
  const now = element.querySelector('.rz-pair');
  const grid = board();
  if (!ahead || !now || !grid || saved || ahead.dataset.from !== now.dataset.query) return false;
  if (ahead.dataset[mode === 'next' ? 'next' : 'decision'] !== '1') return false;
  saved = {pair: element.innerHTML, board: grid.innerHTML};
  element.innerHTML = ahead.dataset.pair;
  grid.innerHTML = ahead.dataset.board;
  element.querySelector('.rz-pair').dataset.ahead = '1';
  const cards = grid.querySelector('#match-candidates');
  if (mode === 'changes' && cards) cards.dataset.pending = '1';
  return true;
};
// "Not the same" on a candidate compares the next one: its card is chosen and its caption and picture (the card's,
// until the answer brings the whole photo) shown at once
window.__rzNext = () => {
  const grid = board();
  const now = element.querySelector('.rz-pair');
  if (!grid || !now || saved || now.dataset.end === '1') return false;
  const cur = grid.querySelector('.rz-card.rz-selected');
  const next = cur ? grid.querySelector(`.rz-card[data-rank='${Number(cur.dataset.rank) + 1}']`) : null;
  const box = element.querySelector('#match-compare');
  if (!next || !box) return false;
  saved = {pair: element.innerHTML, board: grid.innerHTML};
  cur.classList.remove('rz-selected');
  next.classList.add('rz-selected');
  const label = box.querySelector('.rz-photo-label');
  if (label && next.dataset.label) { label.textContent = next.dataset.label; label.title = next.dataset.label; }
  const img = box.querySelector('img');
  const thumb = next.querySelector('img');
  if (img && thumb) { img.src = thumb.src; img.alt = thumb.alt; }
  now.dataset.ahead = '1';
  return true;
};
// Shown from the click itself, and painted before Gradio handles the click: its handler works a fifth of a second
// on a full page before it lets the browser paint, so the click reaches it again a frame later (then the buttons
// wait). The pair the page showed is kept for DECIDE_JS, which then reads a screen already moved on.
const SHOWS = {'match-same': 'changes', 'match-new': 'changes', 'match-unsure': 'keeps', 'match-next': 'next',
               'match-not': 'not'};
let passing = null;
window.__rzShownNow = () => {
  const facts = document.querySelector('#match-facts .rz-facts');
  const card = document.querySelector('#match-candidates .rz-card.rz-selected');
  return [facts ? facts.dataset.imageId : '', card ? card.dataset.rank : '', card ? card.dataset.imageId : ''].join(':');
};
if (!window.__rzAheadClicks) {
  window.__rzAheadClicks = true;
  document.addEventListener('click', (e) => {
    const b = e.target && e.target.closest ? e.target.closest('button') : null;
    if (!b || b === passing || b.disabled || !(b.id in SHOWS) || !window.__rzAhead) return;
    const shown = window.__rzShownNow();
    const mode = SHOWS[b.id];
    if (!(mode === 'not' ? window.__rzNext() : window.__rzAhead(mode))) { window.__rzShown = null; return; }
    window.__rzShown = {button: b.id, pair: shown};
    e.stopImmediatePropagation();
    requestAnimationFrame(() => setTimeout(() => {
      passing = b;
      try { b.click(); } finally { passing = null; }
      hold(true);
    }, 0));
  }, true);
}
window.__rzSettle = () => setTimeout(() => {
  const pair = element.querySelector('.rz-pair');
  const grid = board();
  if (saved && pair && pair.dataset.ahead) {
    element.innerHTML = saved.pair;
    if (grid) grid.innerHTML = saved.board;
  }
  saved = null;
  hold(false);
}, 0);
"""
# Clicking a candidate card sends its rank to the server as the selected candidate.
PICK_JS = """
element.addEventListener('click', (e) => {
  const card = e.target.closest('[data-rank]');
  if (card) trigger('click', {rank: Number(card.dataset.rank)});
});
"""
# Runs in the page as a decision is sent: its last input becomes the photo and the chosen card the page showed when
# __BUTTON__ was clicked (PAIR_JS keeps it where the click showed the next animal drawn ahead at once).
DECIDE_JS = """
(...args) => {
  const kept = window.__rzShown;
  if (kept && kept.button === '__BUTTON__') window.__rzShown = null;
  args[args.length - 1] = kept && kept.button === '__BUTTON__' ? kept.pair
      : (window.__rzShownNow ? window.__rzShownNow() : '');
  return args;
}
"""
# after the answer (or the error) of an event that may have shown the animal drawn ahead
SETTLE_JS = "() => { if (window.__rzSettle) window.__rzSettle(); }"
KEYS_HELP = ("<div class='rz-keys' style='font-size:var(--text-sm);color:var(--body-text-color-subdued)'>"
             "Keys: <kbd>M</kbd> same individual · <kbd>N</kbd> not the same · <kbd>U</kbd> unsure · "
             "<kbd>I</kbd> new individual · <kbd>Z</kbd> undo · <kbd>←</kbd>/<kbd>→</kbd> previous / next photo · "
             "<kbd>F</kbd> accept the suggested flank · <kbd>S</kbd> show the matched spots · <kbd>?</kbd> all keys. "
             "Wheel over a photo zooms both photos together, drag pans them, a double click shows them whole. "
             "Click a candidate to compare it (the top one is chosen by default).</div>")
SPOTS_HINT = ("*Matched spots:* press **Show matched spots** (key S) to see which coat spots of the photo and the "
              "chosen candidate match, joined by lines.")
# what the grid says until the queue is loaded: the first opening may compute features (not "nothing waiting")
LOADING_QUEUE = ("<div class='rz-empty' id='match-loading'>Loading the review queue… The first time, the photos' "
                 "features are computed (about a second per photo on this machine); imports start this in the "
                 "background, so it is usually ready.</div>")


@dataclass(frozen=True)
class PhotoLink:
    """A way into Match review from another tab, so a list elsewhere (the Population tab's "review these first")
    opens an annotation here as the query, ready to decide.

    The other tab's event returns ``(annotation id, link.switch())`` into ``[link.request, link.tabs]``; then
    ``link.open_after(that event)`` opens the photo, with the review queue most informative for the population
    estimate first, so each decision moves on to the next most useful photo."""

    request: gr.State  # the annotation to open: set by the other tab, emptied once it is on screen
    tabs: gr.Tabs  # the app's tabs, switched to Match review
    tab_id: str
    opener: Callable[[Any, Any], Any]  # (event, progress component) -> the chained opening event

    def switch(self) -> gr.Tabs:
        """The update that shows the Match review tab."""
        return gr.Tabs(selected=self.tab_id)

    def open_after(self, event: Any, *, progress_on: Any = None) -> Any:
        """Chain the opening after ``event`` (when it succeeds); its progress shows on ``progress_on`` too."""
        return self.opener(event, progress_on)


_LINKS: weakref.WeakKeyDictionary[gr.Blocks, PhotoLink] = weakref.WeakKeyDictionary()


def photo_link(ctx: UIContext) -> PhotoLink | None:
    """The way into this app's Match review tab, or None where it is not built (it failed, or is built later)."""
    return _LINKS.get(ctx.demo)


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    tab = ctx.tab
    view_state = gr.State(None)  # the MatchView on screen: what a decision refers to
    queue_state = gr.State([])  # image ids of the review queue, in order
    pos_state = gr.State(0)  # position of the shown photo in the queue
    selected_state = gr.State(1)  # rank of the chosen candidate
    link_state = gr.State(None)  # an annotation another tab asked to open here (see PhotoLink), until it is shown

    with gr.Row(equal_height=True, elem_id="match-controls"):
        flank_filter = gr.Radio(ms.FLANK_FILTERS, value="any", label="Candidates", elem_id="match-flank-filter",
                                info="Opposite flank only: the hardest and most useful check (patterns differ left/right).",
                                scale=3)
        model = gr.Dropdown(ms.matcher_choices(cat), value=ms.active_model(cat), label="Matching model",
                            elem_id="match-model", scale=2,
                            info="The model that ranks the candidates."
                                 + (f" Not available here (weights not on this machine): "
                                    f"{', '.join(ms.unavailable_models())}." if ms.unavailable_models() else ""))
        photo_pick = gr.Dropdown([], value=None, label="Open a photo", elem_id="match-open", filterable=True, scale=3,
                                 info="Any photo by number, name or individual.")
        reload_button = gr.Button("Reload queue", elem_id="match-reload", scale=1, min_width=120)
        informative_button = gr.Button("Most informative for the population estimate first",
                                       elem_id="match-informative-first", scale=1, min_width=200)
    with gr.Accordion("Only candidates from a place or date range", open=False, elem_id="match-more-filters"):
        with gr.Row():
            place_filter = gr.Textbox(label="Place contains", max_lines=1, elem_id="match-place",
                                      info="Keeps gallery photos whose sighting place contains this text.")
            date_from = gr.Textbox(label="From date", placeholder="YYYY-MM-DD", max_lines=1, elem_id="match-date-from")
            date_to = gr.Textbox(label="To date", placeholder="YYYY-MM-DD", max_lines=1, elem_id="match-date-to",
                                 info="Sighting date, else the photo's EXIF time; photos without one are left out.")
            threshold = gr.Number(label="Suggest a new individual from (% new animal)", precision=0, minimum=0,
                                  maximum=100, elem_id="match-new-threshold",
                                  info="When the probability of a new animal reaches this and is above every "
                                       "candidate's, the screen suggests a new individual.")
    # what the candidates are restricted to: flank, place and dates, as one value every handler reads
    filters_state = gr.State({"flank": "any", "place": None, "date_from": None, "date_to": None})

    with gr.Row(equal_height=False, elem_id="match-main"):
        # the photo to identify and the chosen candidate side by side, decisions right under them:
        # everything a decision needs fits above the fold at 1400 x 900. The pair (with the query's facts) and the
        # board (header and candidates) are one HTML each: moving to the next animal updates two pieces of the
        # page, not one per picture, caption and line (each update costs the browser a walk over the page)
        with gr.Column(scale=6, min_width=520):
            pair = gr.HTML(pair_html(None, None, query_src=None, compare_src=None), elem_id="match-pair",
                           css_template=PAIR_CSS, js_on_load=PAIR_JS)
            # shown by the pair's script when the photo has a mask
            outline = gr.Checkbox(label="Show mask outline", value=False, elem_id="match-outline")
            with gr.Row(equal_height=True):
                same_button = gr.Button("Same individual (M)", variant="primary", elem_id="match-same")
                not_button = gr.Button("Not the same (N)", elem_id="match-not")
                unsure_button = gr.Button("Unsure (U)", elem_id="match-unsure")
                new_button = gr.Button("New individual (I)", elem_id="match-new")
                sighting_button = gr.Button("Same, with its whole sighting", elem_id="match-same-sighting")
            with gr.Row(equal_height=True):
                prev_button = gr.Button("← Previous", elem_id="match-prev", size="sm")
                next_button = gr.Button("Next →", elem_id="match-next", size="sm")
                undo_button = gr.Button("Undo my last decision (Z)", elem_id="match-undo", size="sm")
                # below the decisions, so the buttons stay above the fold: the whole photos with every box drawn
                whole_frame = gr.Checkbox(label="Whole frame", value=False, elem_id="whole-frame", container=False,
                                          min_width=150)
                new_name = gr.Textbox(label="Name for a new individual", placeholder="new individual's name (optional)",
                                      max_lines=1, elem_id="match-new-name", scale=2, container=False)
            status = gr.Markdown(elem_id="match-status", elem_classes=["status-line"])
            gr.HTML(KEYS_HELP, elem_id="match-keys", js_on_load=KEYS_JS)
            # the matched spots of the compared pair: the same coat spots joined by lines, on demand (S)
            with gr.Group(elem_id="match-spots-panel"):
                with gr.Row(equal_height=True):
                    spots_button = gr.Button("Show matched spots (S)", elem_id="match-show-spots", size="sm",
                                             scale=0, min_width=220)
                    spots_text = gr.Markdown(SPOTS_HINT, elem_id="match-spots-text")
                spots_image = gr.Image(label="Matched spots: photo to identify (left), chosen candidate (right)",
                                       interactive=False, height=300, elem_id="match-spots-image", visible=False,
                                       buttons=["fullscreen"])
        with gr.Column(scale=6, min_width=420):
            board = gr.HTML(f"<div id='match-candidates'>{LOADING_QUEUE}</div>", elem_id="match-board",
                            css_template=GRID_CSS, js_on_load=PICK_JS, min_height=200)
    with gr.Accordion("Match a new photo (upload)", open=False, elem_id="match-upload-box"):
        upload = gr.File(label="Photo", file_count="single", file_types=["image"], elem_id="match-upload", height=110)
    build_flank_links(ctx)

    # what the page shows as a decision is sent ("query:rank:candidate"), written by DECIDE_JS
    shown_box = gr.Textbox(visible=False, elem_id="match-shown")
    # the next animal of the queue, drawn while the curator looks at this one (see ahead_html): never seen itself
    ahead = gr.HTML("", elem_id="match-ahead", container=False, padding=False)
    # how the screen is drawn beyond the photo: outline and whole frames asked for, and what the last drawing left
    # that the next must undo (spots shown, a picker naming a photo, the queue's end); a server-side value, so the
    # next drawing sends only what changed
    look_state = gr.State(dict(LOOK))
    screen = [pair, board, spots_image, spots_text, view_state, selected_state, look_state]

    # ------------------------------------------------------------------ rendering

    def render(view, selected, look, queue, pos):
        """The whole screen for ``view`` (None: the queue's end), as the outputs of ``screen``: what did not change
        since the last drawing (per ``look``) is skipped, so the page updates only what it must."""
        look = {**LOOK, **(look or {})}
        new_look = dict(look, spots=False)
        spots = (gr.update(value=None, visible=False), SPOTS_HINT) if look["spots"] else (gr.skip(), gr.skip())
        if view is None:  # the queue's end (or an empty queue): no candidate, nothing left of the last photo
            return (pair_html(None, None, query_src=None, compare_src=None, at_end=True),
                    board_html(None, None, queue, pos, end_words=rw.queue_end_words(cat, queue)),
                    *spots, None, 1, new_look)
        chosen = view.candidate(selected)
        has_mask = bool(view.query.mask_path)
        rank = chosen.rank if chosen else None
        pictures = None
        if look["whole"]:
            query_src = fr.screen_file(cat, fr.frame_with_boxes(cat, view.query.image_id, legend="photo to identify"))
            compare_src = fr.screen_file(cat, fr.frame_with_boxes(
                cat, chosen.image_id, legend=f"candidate {chosen.rank}, {chosen.individual_name}")) if chosen else None
            pictures = {c.image_id: _frame_uri(c.image_id) for c in view.candidates}
        else:
            query_src = fr.screen_file(cat, _query_crop(view, look["outline"] and has_mask))
            compare_src = fr.screen_file(cat, _full_photo(chosen))
        hint, button = fs.flank_suggestion(cat, view.query.image_id)
        return (pair_html(view, chosen, query_src=query_src, compare_src=compare_src,
                          flank_hint=_markdown_bold(hint), flank_button=button, has_mask=has_mask),
                board_html(view, rank, queue, pos, pictures=pictures),
                *spots, view, chosen.rank if chosen else 1, new_look)

    def _query_crop(view, show_outline):
        return ms.query_picture(cat, view.query, outline=show_outline)

    def _full_photo(chosen):
        if chosen is None:
            return None
        picture = fr.annotation_picture(cat, chosen.image_id)
        return chosen.thumb if isinstance(picture, str) and not picture else picture

    def _frame_uri(image_id):
        return "data:image/jpeg;base64," + base64.b64encode(fr.frame_jpeg(cat, image_id)).decode("ascii")

    def show(image_id, model_name, flank, look, queue, pos, progress=None, selected=1):
        step = None
        if progress is not None:
            def step(done, total):
                progress((done, total), desc="Computing photo features", unit="photos")
        filters = flank if isinstance(flank, dict) else {"flank": flank}
        view = ms.match_query(cat, int(image_id), model_name=model_name or ms.DEFAULT_MODEL,
                              flank_filter=filters.get("flank") or "any", place=filters.get("place"),
                              date_from=filters.get("date_from"), date_to=filters.get("date_to"),
                              progress=step) if image_id is not None else None
        return render(view, selected, look, queue, pos)

    def load_queue(model_name, flank, look, progress, *, keep_view=None):
        def step(done, total):
            progress((done, total), desc="Computing photo features for the review queue", unit="photos")

        entries = ms.review_queue(cat, model_name=model_name or ms.DEFAULT_MODEL, progress=step)
        queue = [e.image_id for e in entries]
        if keep_view is not None:
            pos = queue.index(keep_view.query.image_id) if keep_view.query.image_id in queue else 0
            return (queue, pos, *render(keep_view, 1, look, queue, pos))
        first = queue[0] if queue else None
        return (queue, 0, *show(first, model_name, flank, look, queue, 0, progress))

    # ------------------------------------------------------------------ handlers

    @curator_action(role=Role.viewer)
    def on_open_tab(view, linked, model_name, flank, look, progress=gr.Progress()):
        # keep the curator's place when coming back to the tab; a photo opened from another tab loads by itself
        if view is not None or linked is not None:
            return (gr.skip(),) * (2 + len(screen))
        return load_queue(model_name, flank, look, progress)

    @curator_action(role=Role.viewer)
    def on_follow_link(image_id, model_name, flank, look, progress=gr.Progress()):
        """Open the annotation another tab linked to, at its place in the queue most informative first."""
        if image_id is None:
            return (gr.skip(),) * (5 + len(screen))

        def step(done, total):
            progress((done, total), desc="Computing photo features for the review queue", unit="photos")

        entries = ms.review_queue(cat, model_name=model_name or ms.DEFAULT_MODEL, progress=step)
        ordered, words = ident.informative_first(cat, [e.image_id for e in entries])
        pos = ordered.index(int(image_id)) if int(image_id) in ordered else -1
        where = f"Animal #{int(image_id)}, opened from the Population tab's review list. " + (
            words if pos >= 0 else "It is not in the review queue: what was decided on it shows under the photo.")
        # the picker gets its choices with the value: the tab's own refresh of them may not have run yet
        pick = gr.update(choices=ms.photo_choices(cat), value=int(image_id))
        return (ordered, max(pos, 0), *show(int(image_id), model_name, flank, look, ordered, pos, progress), pick,
                where, None)

    @curator_action(role=Role.viewer)
    def on_reload(model_name, flank, look, progress=gr.Progress()):
        return (*load_queue(model_name, flank, look, progress), "Review queue reloaded.")

    @curator_action(role=Role.viewer)
    def on_informative_first(model_name, flank, look, progress=gr.Progress()):
        def step(done, total):
            progress((done, total), desc="Computing photo features for the review queue", unit="photos")

        entries = ms.review_queue(cat, model_name=model_name or ms.DEFAULT_MODEL, progress=step)
        ordered, words = ident.informative_first(cat, [e.image_id for e in entries])
        first = ordered[0] if ordered else None
        return (ordered, 0, *show(first, model_name, flank, look, ordered, 0, progress), words)

    @curator_action(role=Role.viewer)
    def on_move(delta, queue, pos, model_name, flank, look, progress=gr.Progress()):
        if not queue:
            raise gr.Error("The review queue is empty.", title="Nothing to show", print_exception=False)
        new = max(0, min(len(queue) - 1, pos + delta))
        if new == pos:
            return (pos, *(gr.skip(),) * len(screen), "This is the " + ("first" if delta < 0 else "last") +
                    " photo of the queue.")
        return (new, *show(queue[new], model_name, flank, look, queue, new, progress), "")

    @curator_action
    def on_decide(kind, view, selected, name, user, queue, pos, model_name, flank, look, quiet, shown=None,
                  progress=gr.Progress()):
        # the pair the page showed (DECIDE_JS), not only the server's copy of the screen: a late answer to an
        # earlier event may have redrawn that copy after the curator chose a card
        pair_shown = ds.ShownPair.parse(shown)
        try:
            if kind == "sighting":
                request = ds.sighting_request(view, user=user, rank=selected, shown=pair_shown)
                outcome = ds.decide_sighting(cat, request)
            else:
                request = ds.decision_request(view, kind, user=user, rank=selected, new_name=name, shown=pair_shown)
                outcome = ds.decide(cat, request)
            selected = request.rank or selected
        except ConflictError as exc:  # another curator decided this photo meanwhile: show it as it is now
            return (pos, *show(view.query.image_id, model_name, flank, look, queue, pos, progress),
                    gr.skip(), f"**Not recorded:** {exc}. The photo is shown again as it is now.", gr.skip())
        changed = ctx.changed_here(quiet)
        if kind == "not" and view.candidate((selected or 1) + 1) is not None \
                and view.candidate((selected or 1) + 1).rank == (selected or 1) + 1:
            # "not the same" on a candidate: stay on this photo and compare the next candidate
            rank = (selected or 1) + 1
            return (pos, *show(view.query.image_id, model_name, flank, look, queue, pos, progress,
                               selected=rank), gr.skip(), outcome.message + f" Now comparing candidate {rank}.",
                    changed)
        if kind == "not":
            # "not the same" on the last candidate: none of them is this animal, so it may be a new individual;
            # the photo stays on screen for that decision instead of the queue moving on
            rank = (selected or 1)
            return (pos, *show(view.query.image_id, model_name, flank, look, queue, pos, progress,
                               selected=rank), gr.skip(),
                    outcome.message + " " + rw.last_candidate_words(
                        rank, candidates=len(view.candidates),
                        name=view.candidate(rank).individual_name if view.candidate(rank) else None), changed)
        new_name_update = "" if name else gr.skip()
        nxt = ms.next_pending(cat, queue, pos)
        if nxt is None:
            return (pos, *render(None, 1, look, queue, pos), new_name_update,
                    outcome.message + " The queue is done.", changed)
        return (nxt, *show(queue[nxt], model_name, flank, look, queue, nxt, progress), new_name_update,
                outcome.message, changed)

    @curator_action
    def on_undo(user, queue, model_name, flank, look, quiet, progress=gr.Progress()):
        undone = ds.undo_last_decision(cat, ds.UndoDecisionRequest(user=curator_name(user)))
        pos = queue.index(undone.image_id) if undone.image_id in queue else 0
        return (pos, *show(undone.image_id, model_name, flank, look, queue, pos, progress), undone.message,
                ctx.changed_here(quiet))

    @curator_action
    def on_pair_action(view, user, model_name, filters, look, queue, pos, quiet, evt: gr.EventData):
        # the flank suggestion's Accept button (key F) lives in the pair's HTML
        action = (getattr(evt, "_data", {}) or {}).get("action")
        if action != "accept-flank" or view is None:
            return (*(gr.skip(),) * len(screen), gr.skip(), gr.skip())
        message = fs.accept_suggestion(cat, fs.AcceptFlankRequest(view.query.image_id, user=curator_name(user)))
        return (*show(view.query.image_id, model_name, filters, look, queue, pos), message, ctx.changed_here(quiet))

    def ahead_of(view, queue, pos, model_name, flank, look):
        """The animal a decision on ``view`` moves on to, drawn now for the page to show at once when the decision
        is sent (see ahead_html); empty where the shown animal is not the queue's or nothing follows it."""
        if view is None or not queue or not isinstance(pos, int) or not 0 <= pos < len(queue) \
                or queue[pos] != view.query.image_id:
            return ""
        try:
            target = ms.next_pending(cat, queue, pos + 1)
            if target is None or target == pos:
                return ""
            drawn = show(queue[target], model_name, flank, look, queue, target)
        except (CatalogueError, ValueError, FileNotFoundError):  # the decision's own answer will say it
            return ""
        return ahead_html(drawn[0], drawn[1], from_query=view.query.image_id, after_decision=True,
                          after_next=target == pos + 1)

    view_at = 1 + screen.index(view_state)  # where a move's answer (the position, then the screen) holds the view

    def with_ahead(answer, before, queue, model_name, flank, look):
        """A move's answer and, last, the animal drawn ahead of the one it shows: in the answer itself, so it is in
        the page by the time the buttons take the next decision; skipped while the same animal stays."""
        view = answer[view_at] if isinstance(answer, tuple) and len(answer) > view_at else None
        if not isinstance(view, ms.MatchView) or (before is not None and before.query.image_id == view.query.image_id):
            return (*answer, gr.skip())
        return (*answer, ahead_of(view, queue, answer[0], model_name, flank, look))

    @curator_action(role=Role.viewer)
    def on_ahead(view, queue, pos, model_name, flank, look):
        return ahead_of(view, queue, pos, model_name, flank, look)

    @curator_action
    def on_decide_ahead(kind, named, view, selected, name, user, queue, pos, model_name, flank, look, quiet,
                        shown=None):
        answer = _named_or_not(on_decide(kind, view, selected, name, user, queue, pos, model_name, flank, look, quiet,
                                         shown), named)
        return with_ahead(answer, view, queue, model_name, flank, look)

    @curator_action(role=Role.viewer)
    def on_move_ahead(delta, queue, pos, model_name, flank, look):
        return with_ahead(on_move(delta, queue, pos, model_name, flank, look), None, queue, model_name, flank, look)

    @curator_action(role=Role.viewer)
    def on_pick_candidate(view, look, queue, pos, evt: gr.EventData):
        rank = getattr(evt, "_data", {}) or {}
        if view is None:
            return (gr.skip(),) * len(screen)
        return render(view, rank.get("rank"), look, queue, pos)

    @curator_action(role=Role.viewer)
    def on_open_photo(image_id, view, model_name, flank, look, queue, progress=gr.Progress()):
        if image_id is None:
            return (gr.skip(),) * (1 + len(screen))
        if (view is not None and view.query.image_id == int(image_id)) or repeated_pick(("match-open", int(image_id))):
            # the photo on screen, or being opened, already: Gradio's picker sends one pick with the mouse as two
            # events, and the second must not redraw over what the curator did since the first (a chosen card)
            return (gr.skip(),) * (1 + len(screen))
        pos = queue.index(int(image_id)) if int(image_id) in queue else -1
        return (pos if pos >= 0 else 0, *show(image_id, model_name, flank, look, queue, pos, progress))

    @curator_action(role=Role.viewer)
    def on_rerank(view, model_name, flank, look, queue, pos, progress=gr.Progress()):
        if view is None:
            return (gr.skip(),) * len(screen)
        return show(view.query.image_id, model_name, flank, look, queue, pos, progress)

    @curator_action(role=Role.viewer)
    def on_look(view, selected, show_outline, whole, look, queue, pos):
        """The outline or whole-frame box changed: draw the same animal and candidate again that way."""
        look = dict(look or LOOK, outline=bool(show_outline), whole=bool(whole))
        if view is None:
            return (*(gr.skip(),) * (len(screen) - 1), look)
        return render(view, selected, look, queue, pos)

    @curator_action
    def on_upload(file, user, model_name, flank, look, queue, progress=gr.Progress()):
        if file is None:
            return (gr.skip(),) * (len(screen) + 1)
        image_id, message = ds.ingest_query(cat, ds.IngestQueryRequest(path=upload_path(file),
                                                                        user=curator_name(user)))
        return (*show(image_id, model_name, flank, look, queue, -1, progress), message)

    @curator_action(role=Role.viewer)
    def on_show_spots(view, selected, look, progress=gr.Progress()):
        progress(0, desc="Matching spots")
        sv = ms.candidate_spots(cat, view, selected)
        return gr.update(value=sv.picture, visible=True), sv.text, dict(look or LOOK, spots=True)

    def photo_list(current):
        choices = ms.photo_choices(cat)
        return refreshed_choices(choices, current)

    # ------------------------------------------------------------------ wiring

    hidden = dict(show_progress="hidden", api_visibility="private")
    # one progress line, in one place: over the candidates, not over every output of the screen
    one_bar = dict(show_progress_on=[board])
    def settled(event):
        """After ``event`` (answered or failed: Gradio's ``then`` skips a failure), the page checks the animal it
        may have drawn ahead was redrawn by the answer."""
        event.failure(None, js=SETTLE_JS)
        event.then(None, js=SETTLE_JS)

    # the next animal drawn ahead, after the screens that do not draw it in their own answer
    ahead_io = dict(fn=on_ahead, inputs=[view_state, queue_state, pos_state, model, filters_state, look_state],
                    outputs=[ahead], concurrency_id="match-ahead", concurrency_limit=1, trigger_mode="always_last",
                    **hidden)
    if tab is not None:
        tab.select(on_open_tab, inputs=[view_state, link_state, model, filters_state, look_state],
                   outputs=[queue_state, pos_state, *screen], show_progress="full", api_visibility="private",
                   **one_bar).then(**ahead_io)

        def opener(event, progress_on):
            # the request is emptied last, once the photo is stored as on screen: the tab's opening, reading
            # both meanwhile, sees one or the other and leaves the screen to this
            return event.success(on_follow_link, inputs=[link_state, model, filters_state, look_state],
                                 outputs=[queue_state, pos_state, *screen, photo_pick, status, link_state],
                                 api_visibility="private", show_progress="full",
                                 show_progress_on=[board, *([progress_on] if progress_on is not None else [])])

        if isinstance(tab.parent, gr.Tabs):
            _LINKS[ctx.demo] = PhotoLink(request=link_state, tabs=tab.parent, tab_id=str(tab.id), opener=opener)
    ctx.on_refresh(photo_list, inputs=[photo_pick], outputs=[photo_pick], on_tab_select=False)
    pair.click(on_pair_action, inputs=[view_state, ctx.user, model, filters_state, look_state, queue_state, pos_state,
                                       ctx.quiet], outputs=[*screen, status, ctx.quiet], api_name="accept_flank",
               **one_bar)

    # the species' new-individual threshold (a calibrated probability), set by the curator
    @curator_action(role=Role.viewer)
    def load_threshold(view):
        return ms.new_threshold_percent(cat, view.query.image_id if view else None)

    @curator_action
    def save_threshold(value, view, model_name, filters, look, queue, pos, user):
        if value is None:
            return gr.skip()
        species = ms.photo_species(cat, view.query.image_id if view else None)
        sa.set_new_individual_threshold(cat, SpeciesThresholdRequest(
            species=str(species), threshold=float(value) / 100.0, user=curator_name(user)))
        if view is None:
            return (gr.skip(),) * len(screen) + (f"New-individual threshold set to {value:.0f}%.",)
        return (*show(view.query.image_id, model_name, filters, look, queue, pos),
                f"New-individual threshold set to {value:.0f}%.")

    ctx.on_refresh(load_threshold, inputs=[view_state], outputs=[threshold], on_tab_select=False)
    threshold.submit(save_threshold, inputs=[threshold, view_state, model, filters_state, look_state, queue_state,
                                             pos_state, ctx.user], outputs=[*screen, status], **hidden)

    # trained models appear in the picker once their training job registered them; after a promotion, once its
    # re-embedding job has finished, the picker switches to the new active model and the queue re-ranks
    last_active = gr.State(ms.active_model(cat))
    switched = gr.State(False)

    def follow_active(current, last):
        active, ready = ms.active_model_state(cat)
        if ready and active != last and current in (last, None):
            return gr.update(choices=ms.matcher_choices(cat), value=active), active, True
        return gr.update(choices=ms.matcher_choices(cat)), last, False

    def reload_if_switched(flag, model_name, flank, look, progress=gr.Progress()):
        if not flag:
            return (gr.skip(),) * (3 + len(screen))
        out = on_reload(model_name, flank, look, progress)
        return (*out[:-1], f"The active model is now {model_name}: the review queue was re-ranked with it.")

    ctx.on_refresh(follow_active, inputs=[model, last_active], outputs=[model, last_active, switched]).then(
        guarded_viewer(reload_if_switched), inputs=[switched, model, filters_state, look_state],
        outputs=[queue_state, pos_state, *screen, status], api_visibility="private", **one_bar)
    reload_button.click(on_reload, inputs=[model, filters_state, look_state],
                        outputs=[queue_state, pos_state, *screen, status], api_name="reload_review_queue",
                        **one_bar).then(**ahead_io)
    informative_button.click(on_informative_first, inputs=[model, filters_state, look_state],
                             outputs=[queue_state, pos_state, *screen, status], api_name="review_informative_first",
                             **one_bar).then(**ahead_io)
    for button, delta in ((prev_button, -1), (next_button, 1)):
        moved = button.click(guarded_viewer(lambda *a, _d=delta: on_move_ahead(_d, *a)),
                             inputs=[queue_state, pos_state, model, filters_state, look_state],
                             outputs=[pos_state, *screen, status, ahead], api_visibility="private",
                             **one_bar)
        settled(moved)
    # a decision draws the next animal itself: no refresh of this tab follows it (other tabs refresh when shown)
    for button, kind in ((same_button, "same"), (not_button, "not"), (unsure_button, "unsure"), (new_button, "new"),
                         (sighting_button, "sighting")):
        # only a new individual takes (and empties) the name box: every other decision leaves it out of its answer
        named = kind == "new"
        decided = button.click(
            curator_action(lambda *a, _k=kind, _named=named: on_decide_ahead(_k, _named, *a)),
            inputs=[view_state, selected_state, new_name, ctx.user, queue_state, pos_state, model, filters_state,
                    look_state, ctx.quiet, shown_box],
            outputs=[pos_state, *screen, *([new_name] if named else []), status, ctx.quiet, ahead],
            js=DECIDE_JS.replace("__BUTTON__", button.elem_id), api_name=f"decide_{kind}", trigger_mode="once",
            **one_bar)
        settled(decided)
    undo_button.click(on_undo, inputs=[ctx.user, queue_state, model, filters_state, look_state, ctx.quiet],
                      outputs=[pos_state, *screen, status, ctx.quiet], api_name="undo_decision", **one_bar,
                      trigger_mode="once").then(**ahead_io)
    board.click(on_pick_candidate, inputs=[view_state, look_state, queue_state, pos_state], outputs=screen,
                **hidden)
    photo_pick.input(on_open_photo, inputs=[photo_pick, view_state, model, filters_state, look_state, queue_state],
                     outputs=[pos_state, *screen], api_visibility="private", **one_bar)

    @curator_action(role=Role.viewer)
    def set_filters(flank, place, start, end):
        # a malformed date is refused here, before anything changes: the screen and the filters stay as they were
        return ms.review_filters(flank, place, start, end)

    gr.on([flank_filter.input, place_filter.submit, date_from.submit, date_to.submit, place_filter.blur,
           date_from.blur, date_to.blur], set_filters, inputs=[flank_filter, place_filter, date_from, date_to],
          outputs=[filters_state], **hidden).success(
        on_rerank, inputs=[view_state, model, filters_state, look_state, queue_state, pos_state], outputs=screen,
        api_visibility="private", **one_bar)
    model.input(on_rerank, inputs=[view_state, model, filters_state, look_state, queue_state, pos_state],
                outputs=screen, api_visibility="private", **one_bar)
    # one queue for the two boxes: redraws run in the order they were asked, a redraw asked while a box was ticked
    # can no longer land after the untick
    gr.on([outline.input, whole_frame.input], on_look,
          inputs=[view_state, selected_state, outline, whole_frame, look_state, queue_state, pos_state],
          outputs=screen, concurrency_id="match-look", **hidden)
    spots_button.click(on_show_spots, inputs=[view_state, selected_state, look_state],
                       outputs=[spots_image, spots_text, look_state], api_name="show_matched_spots",
                       concurrency_limit=2)
    ctx.changed(upload.upload(on_upload, inputs=[upload, ctx.user, model, filters_state, look_state, queue_state],
                              outputs=[*screen, status], api_visibility="private", **one_bar))


def _named_or_not(answer, named: bool):
    """A decision's answer without the name box's update, for the buttons that do not output it."""
    if named or not isinstance(answer, tuple) or len(answer) < 3:
        return answer
    return (*answer[:-3], *answer[-2:])


def _markdown_bold(text: str) -> str:
    """The flank suggestion's words (Markdown with **bold**) as HTML for the pair."""
    parts = html.escape(text or "").split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
