"""What the Match review tab draws: the ranked candidate cards (picture, individual, score bar, badges), the
query's facts line and the header above the grid, the chosen candidate's caption. Pure rendering of a
:class:`jobs.actions.match.MatchView` into HTML; the tab's layout and handlers are in :mod:`app.tabs.match`."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from core.inspect.diagnostics import mirror_tier, tier_colour
from jobs.actions import match as ms

EMPTY_QUEUE = ("Nothing is waiting for review. Pick a photo in <b>Open a photo</b>, upload a new one, "
               "or press <b>Reload queue</b> after importing photos.")


def file_url(path: str | None) -> str:
    """URL under which Gradio serves a catalogue file (its folder is registered as a static path)."""
    return f"gradio_api/file={quote(str(path))}" if path else ""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def candidates_html(view: ms.MatchView | None, selected: int | None, pictures: dict[int, str] | None = None) -> str:
    """The ranked candidate grid as HTML (cards carry ``data-rank`` for selection). ``pictures`` (image id ->
    URL) replaces a card's picture, e.g. by its whole frame with the boxes drawn."""
    if view is None:
        return f"<div class='rz-empty'>{EMPTY_QUEUE}</div>"
    if not view.candidates:
        return ("<div class='rz-empty'>No candidates: the gallery has no other photo of a known individual"
                + (" with these filters" if view.flank_filter != "any" or view.place_date_note else "") + ".</div>")
    chosen = view.candidate(selected)
    cards = []
    for c in view.candidates:
        if view.pipeline:
            raw = (f"raw global score {c.global_score:.4f} (cosine of the two photos' features by the pipeline's "
                   f"global model)" if c.global_score is not None else "no raw global score")
            fused = ("outside the pipeline's verified shortlist: no fused probability, ranked by the global model"
                     if c.spot_status == "outside_shortlist" else
                     f"the bar is this pair's fused probability {c.score:.3f} of the same animal (global shortlist "
                     f"+ spot evidence), which ranks it; the percentage is its individual's share of the one "
                     f"distribution over the individuals and a new animal")
            score_tip = f"{fused} by {view.model_name}; {raw}. Provenance: {view.model_provenance}"
        else:
            score_tip = (f"similarity score {c.score:.4f} (cosine of the two photos' features; 1 = identical) "
                         f"by {view.model_name}. Provenance: {view.model_provenance}")
        badges = []
        if c.same_sighting:
            badges.append("<span class='rz-badge rz-same-sighting' title='Taken in the same sighting as the query "
                          "(same place and moment): similar background can inflate the score.'>same sighting</span>")
        if c.mirror_sim is not None and c.danger_margin is not None:
            warn = c.danger_margin > 0
            tier = mirror_tier(c.mirror_sim)
            tip = (f"mirror similarity {c.mirror_sim:.3f} ({tier} tier, as in Diagnostics): how alike the model finds "
                   f"this photo and its mirror image; danger margin {c.danger_margin:+.3f} (> 0: the mirrored photo "
                   f"looks more like another animal than like itself). From {view.diagnostics_source}.")
            badges.append(f"<span class='rz-badge rz-mirror {'rz-mirror-warn' if warn else ''}' data-tier='{_e(tier)}' "
                          f"style='background:{tier_colour(c.mirror_sim)}' title='{_e(tip)}'>"
                          f"mirror {c.mirror_sim:.2f}{' ⚠' if warn else ''}</span>")
        if c.has_spot_facts:
            badges.append(spots_badge(c))
        if c.in_photo_as is not None:
            badges.append(f"<span class='rz-badge rz-in-photo' data-in-photo='{c.in_photo_as}' title='two animals "
                          f"in one photo are two individuals: ranked below the others'>already in this photo as "
                          f"#{c.in_photo_as}</span>")
        if c.probability is not None:
            raw_score = c.global_score if view.pipeline and c.global_score is not None else c.score
            ptip = f"{_e(view.calibration_note or '')}; raw {'global ' if view.pipeline else ''}score {raw_score:.4f}"
            badges.append(f"<span class='rz-badge rz-prob' data-probability='{c.probability:.6f}' title='{ptip}'>"
                          f"{100 * c.probability:.0f}% same animal</span>")
        # a pipeline's score is its pair's fused probability (none outside its verified shortlist)
        bar = (0.0 if c.spot_status == "outside_shortlist" else c.score) if view.pipeline else c.score
        width = max(0.0, min(1.0, bar)) * 100
        src = (pictures or {}).get(c.image_id) or (file_url(c.thumb) if c.thumb else "")
        img = (f"<img src='{_e(src)}' alt='candidate {c.rank}: {_e(c.individual_name)}' loading='lazy'>"
               if src else "")
        flank = f"{c.flank} flank" if c.flank != "unknown" else "flank not set"
        sighting = f" · sighting {_e(c.sighting)}" if c.sighting else ""
        cards.append(
            f"<div class='rz-card{' rz-selected' if chosen and c.rank == chosen.rank else ''}' data-rank='{c.rank}' "
            f"data-image-id='{c.image_id}' data-label='{_e(compare_label(c))}' "
            f"title='photo #{c.image_id} of {_e(c.individual_name)}'>"
            f"<div class='rz-thumb'>{img}</div><div class='rz-rank'>{c.rank}</div>"
            f"<div class='rz-name'>{_e(c.individual_name)}</div>"
            f"<div class='rz-bar' title='{_e(score_tip)}'><span style='width:{width:.1f}%'></span></div>"
            f"<div class='rz-meta' title='{_e(score_tip)}'>{score_line(view, c)} · {_e(flank)}{sighting}</div>"
            f"<div class='rz-badges'>{''.join(badges)}</div></div>")
    return f"<div class='rz-grid' id='match-grid'>{''.join(cards)}</div>"


def spots_badge(c: ms.CandidateCard) -> str:
    """The card's spot-evidence badge: "N matched spots", or why there are none to count."""
    words = ms.spot_status_words(c.spot_status)
    tip_text = f"spot evidence by the pipeline's local matcher: {words}" if words else "spot evidence"
    if c.spot_probability is not None:
        tip_text += f"; the matched spots alone give a {100 * c.spot_probability:.0f}% probability of the same animal"
    if c.spot_status in ms.SPOT_CARD_WORDS:
        return (f"<span class='rz-badge rz-spots rz-spots-none' data-spot-status='{_e(c.spot_status)}' "
                f"title='{_e(tip_text)}'>{_e(ms.SPOT_CARD_WORDS[c.spot_status])}</span>")
    n = int(c.inliers or 0)
    weak = " rz-spots-weak" if c.spot_status != "verified" or n < 8 else ""
    return (f"<span class='rz-badge rz-spots{weak}' data-spot-status='{_e(c.spot_status or '')}' "
            f"data-inliers='{n}' title='{_e(tip_text)}'>{n} matched spot{'' if n == 1 else 's'}</span>")


def score_line(view: ms.MatchView, c: ms.CandidateCard) -> str:
    """The card's score text: the raw score, and for a pipeline the inlier count and fused probability beside it."""
    if not view.pipeline:
        return f"score {c.score:.3f}"
    parts = [f"score {c.global_score:.3f}" if c.global_score is not None else "score —"]
    if c.inliers is not None and c.spot_status not in ms.SPOT_CARD_WORDS:
        parts.append(f"{c.inliers} spots")
    if c.probability is not None:
        parts.append(f"<b>{100 * c.probability:.0f}%</b>")
    return " · ".join(parts)


FACTS_CSS = """
.rz-facts { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: var(--text-sm); padding: 2px 4px; }
.rz-facts span b { color: var(--body-text-color-subdued); font-weight: 600; margin-right: 4px; }
.rz-facts .rz-decided { color: #92400e; }
"""


def facts_html(view: ms.MatchView | None) -> str:
    """The query's facts as one compact wrapped line under the photo."""
    if view is None:
        return ""
    items = "".join(f"<span class='{'rz-decided' if k == 'Decided' else ''}'><b>{_e(k)}</b>{_e(v)}</span>"
                    for k, v in view.query.facts())
    return f"<div class='rz-facts' data-image-id='{view.query.image_id}'>{items}</div>"


def header_html(view: ms.MatchView | None, queue: list[int], pos: int, *, end_words: str | None = None) -> str:
    """The line above the grid: where the photo stands in the queue and which animal it is, the model, the
    filters. With no photo on screen, ``end_words`` (the queue's end, in words) replaces it."""
    where = ""  # the queue holds animals (annotations), several to a photo at times: it counts animals
    if view is not None and queue and 0 <= pos < len(queue) and queue[pos] == view.query.image_id:
        where = f"Animal {pos + 1} of {len(queue)} in the review queue"
    elif view is not None:
        where = f"Animal #{view.query.image_id} (opened by hand; {len(queue)} in the review queue)"
    elif queue:
        where = f"{len(queue)} animal{'s' if len(queue) != 1 else ''} in the review queue"
    if view is None:
        return f"<div class='rz-head' id='match-queue-end'>{_e(end_words or where)}</div>"
    title = (f"<span id='match-query-title'>{_e(view.query.title)}</span>" if view.query.title else "")
    flt = dict((v, k) for k, v in ms.FLANK_FILTERS)[view.flank_filter]
    if view.flank_filter != "any" and view.query.flank not in ("left", "right"):
        flt = f"{flt}: not applied, this photo's flank is not set"
    if view.place_date_note:
        flt = f"{flt}; {view.place_date_note}"
    prov = (f"<span id='match-provenance' title='{_e(view.model_provenance)}' "
            f"style='text-decoration:underline dotted;cursor:help'>scored by <b>{_e(view.model_name)}</b> "
            f"(hover for provenance)</span>")
    suggestion = ""
    if view.probability_withheld:
        suggestion = (f"<span class='rz-withheld' id='match-probability-withheld' style='color:#57534e'>"
                      f"{_e(view.probability_withheld)}</span>")
    elif view.p_new is not None:
        suggestion = (f"<span class='rz-p-new' id='match-p-new' data-p-new='{view.p_new:.6f}' "
                      f"title='{_e(view.calibration_note or '')}'>New animal: {100 * view.p_new:.0f}%</span>")
    if view.candidates and view.suggest_new and view.p_new is not None:
        suggestion += (f"<span class='rz-suggest-new' id='match-suggest-new'>A new animal is "
                       f"{100 * view.p_new:.0f}% likely, more than any candidate (your threshold: "
                       f"{100 * view.new_threshold:.0f}%): probably a <b>new individual</b> (key I)</span>")
    spot_note = (f"<span class='rz-spot-note' id='match-spot-note' title='spot evidence of this photo' "
                 f"style='background:#f5f5f4;border:1px solid #a8a29e;border-radius:6px;padding:1px 8px'>"
                 f"Spots: {_e(view.query_spot_note)}</span>") if view.query_spot_note else ""
    index_note = (f"<span id='match-index' title='the search index that found these candidates' "
                  f"style='color:#57534e;font-size:0.85em'>searched by {_e(view.index_note)}</span>"
                  ) if view.index_note else ""
    return (f"<div class='rz-head' style='display:flex;gap:1em;flex-wrap:wrap;align-items:baseline'>"
            f"<b>{_e(where)}</b>{title}<span>{prov}</span><span>{_e(flt)}</span>{suggestion}{spot_note}{index_note}</div>")


def compare_label(chosen: ms.CandidateCard | None) -> str:
    """The chosen candidate's caption above its photo: who, which photo, which flank, and its scores."""
    if chosen is None:
        return "Chosen candidate"
    flank = f"{chosen.flank} flank" if chosen.flank != "unknown" else "flank not set"
    which = chosen.title or f"photo #{chosen.image_id}"
    label = f"Candidate {chosen.rank}: {chosen.individual_name} · {which} · {flank}"
    if chosen.global_score is None:
        return f"{label} · score {chosen.score:.3f}"
    spots = (f" · {chosen.inliers} matched spots" if chosen.inliers is not None
             and chosen.spot_status not in ms.SPOT_CARD_WORDS else "")
    fused = f" · {100 * chosen.probability:.0f}% same animal" if chosen.probability is not None else ""
    return f"{label} · score {chosen.global_score:.3f}{spots}{fused}"


PAIR_CSS = FACTS_CSS + """
.rz-pair { display: grid; grid-template-columns: 1fr 1fr; gap: 8px; }
.rz-photo { position: relative; border: 1px solid var(--border-color-primary); border-radius: 8px; overflow: hidden;
            background: var(--background-fill-secondary); height: 300px; display: flex; flex-direction: column; }
.rz-photo-label { font-size: var(--text-sm); padding: 3px 26px 3px 8px; white-space: nowrap; overflow: hidden;
                  text-overflow: ellipsis; color: var(--body-text-color-subdued); }
.rz-photo-box { flex: 1; min-height: 0; overflow: hidden; display: flex; align-items: center; justify-content: center; }
.rz-photo-box img { max-width: 100%; max-height: 100%; object-fit: contain; display: block; }
.rz-photo a.rz-full { position: absolute; top: 2px; right: 6px; font-size: var(--text-sm); text-decoration: none; }
.rz-flank-hint { display: flex; gap: 10px; align-items: center; font-size: var(--text-sm); margin-top: 4px; }
"""


def _photo(box_id: str, label: str, src: str | None, alt: str) -> str:
    url = file_url(src) if src else ""
    img = f"<img src='{_e(url)}' alt='{_e(alt)}' draggable='false'>" if url else ""
    full = (f"<a class='rz-full' href='{_e(url)}' target='_blank' rel='noopener' title='open the picture at full "
            f"size in a new browser tab'>⤢</a>") if url else ""
    return (f"<div class='rz-photo' id='{box_id}'><div class='rz-photo-label' title='{_e(label)}'>{_e(label)}</div>"
            f"<div class='rz-photo-box'>{img}</div>{full}</div>")


def pair_html(view: ms.MatchView | None, chosen: ms.CandidateCard | None, *, query_src: str | None,
              compare_src: str | None, flank_hint: str = "", flank_button: bool = False, has_mask: bool = False,
              at_end: bool = False) -> str:
    """The photo to identify and the chosen candidate side by side, the query's facts and the flank suggestion
    (``flank_hint``, HTML) under them: one piece of the page, so moving to the next animal is one update."""
    query_alt = f"photo to identify: animal #{view.query.image_id}" if view is not None else "no photo to identify"
    chosen_alt = (f"candidate {chosen.rank}: {chosen.individual_name}" if chosen is not None else "no candidate")
    button = ("<button class='lg secondary sm' id='match-accept-flank' data-action='accept-flank'>Accept suggested "
              "flank (F)</button>") if flank_button else ""
    hint = (f"<div class='rz-flank-hint' id='match-flank-suggestion'><span>{flank_hint}</span>{button}</div>"
            if flank_hint else "")
    key = f"{view.query.image_id}:{chosen.rank if chosen else 0}" if view is not None else "none"
    # read by the tab's script: the decision buttons are off at the queue's end, the outline box needs a mask
    query = view.query.image_id if view is not None else ""
    return (f"<div class='rz-pair' data-key='{_e(key)}' data-query='{query}' data-end='{int(at_end)}' "
            f"data-mask='{int(has_mask)}'>"
            f"{_photo('match-query', 'Photo to identify', query_src, query_alt)}"
            f"{_photo('match-compare', compare_label(chosen), compare_src, chosen_alt)}</div>"
            f"<div id='match-facts'>{facts_html(view)}</div>{hint}")


def board_html(view: ms.MatchView | None, selected: int | None, queue: list[int], pos: int, *,
               end_words: str | None = None, pictures: dict[int, str] | None = None) -> str:
    """The right of the screen: the header line (where the animal stands in the queue, model, filters, the
    probability of a new animal) above the ranked candidates."""
    return (f"<div id='match-header'>{header_html(view, queue, pos, end_words=end_words)}</div>"
            f"<div id='match-candidates'>{candidates_html(view, selected, pictures)}</div>")


_SRC = re.compile(r"""src=(?:'([^']*)'|"([^"]*)")""")


def ahead_html(pair: str, board: str, *, from_query: int, after_decision: bool, after_next: bool) -> str:
    """The next animal of the queue, drawn before the curator decides on the one shown (``from_query``): the pair and
    the board as they will be, kept in the page unseen, with their pictures loaded, so the page's script can show
    them the moment a decision or Next is sent (``after_decision``: what a decision moves on to; ``after_next``:
    the next place in the queue). The server's answer then redraws the screen as it is, which after "same" or "new"
    may rank the candidates differently: the board says so until it arrives."""
    pictures = "".join(f"<img src='{_e(html.unescape(a or b))}' alt=''>" for a, b in _SRC.findall(pair + board))
    return (f"<div class='rz-ahead' hidden data-from='{int(from_query)}' data-decision='{int(after_decision)}' "
            f"data-next='{int(after_next)}' data-pair='{_e(pair)}' data-board='{_e(board)}'>{pictures}</div>")
