"""The Match review screen draws one progress line, in one place (issue 24, item 3): the events that fill the screen
(the first opening of the tab above all, which computes the photo features) show their progress over the candidates
only, not over every output at once, on top of the text beneath them."""

from __future__ import annotations

import gradio as gr


def test_every_event_that_fills_the_review_screen_shows_its_progress_over_the_candidates_only(tmp_path):
    from app.tabs import match
    from app.ui_base import UIContext
    from db.session import open_catalogue

    cat = open_catalogue(tmp_path / "data")
    try:
        with gr.Blocks() as demo:
            ctx = UIContext(catalogue=cat, user=gr.State("ana"), version=gr.State(0), demo=demo)
            with gr.Tab("Match review") as tab:
                ctx.tab = tab
                match.build(ctx)
    finally:
        cat.close()
    by_id = {block._id: block for block in demo.blocks.values()}
    candidates = next(i for i, b in by_id.items() if getattr(b, "elem_id", None) == "match-board")
    shown = []
    for dep in demo.get_config_file()["dependencies"]:
        if candidates not in dep["outputs"] or dep["show_progress"] == "hidden":
            continue
        shown.append(dep)
        assert dep["show_progress_on"] == [candidates], (dep["targets"], dep["show_progress_on"])
    first_opening = [d for d in shown if (tab._id, "select") in [tuple(t) for t in d["targets"]]]
    assert len(first_opening) == 1 and len(shown) >= 10


def test_a_decision_is_one_round_trip_that_draws_the_next_animal_itself(tmp_path):
    """Each event costs the page a round trip and each updated component a walk over the page: a decision's event
    draws the query, the candidates and the counter itself (two HTML pieces, with the next animal drawn ahead as a
    third), and nothing follows it on the server."""
    import gradio as gr

    from app.tabs import match
    from app.ui_base import UIContext
    from db.session import open_catalogue

    cat = open_catalogue(tmp_path / "data")
    try:
        with gr.Blocks() as demo:
            with gr.Tabs():
                with gr.Tab("Match review") as tab:
                    ctx = UIContext(catalogue=cat, user=gr.State("ana"), version=gr.State(0), demo=demo)
                    ctx.tab = tab
                    match.build(ctx)
    finally:
        cat.close()
    config = demo.get_config_file()
    kinds = {c["id"]: c["type"] for c in config["components"]}
    ids = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    deps = config["dependencies"]
    decisions = [d for d in deps if (d.get("api_name") or "").startswith("decide_")]
    assert len(decisions) == 5
    for d in decisions:
        drawn = [kinds[o] for o in d["outputs"] if kinds[o] not in ("state",)]
        html_ids = [o for o in d["outputs"] if kinds[o] == "html"]
        # the pair (query, chosen candidate, facts), the board, and the next animal drawn ahead (unseen)
        assert len(html_ids) == 3 and ids[html_ids[-1]] == "match-ahead", drawn
        # besides them only the status line and the spots (sent as "unchanged" unless they must go);
        # the name box only for a new individual
        assert len(drawn) == 6 + (d["api_name"] == "decide_new"), drawn
        # what follows runs in the page only (it puts the animal back if the answer did not redraw it)
        chained = [x for x in deps if x.get("trigger_after") == d["id"]]
        assert chained and all(x.get("backend_fn") is False and x.get("js") for x in chained), chained
        states = {o for o in d["outputs"] if kinds[o] == "state"}
        followers = [x for x in deps if any(t[0] in states for t in x["targets"])]
        assert followers == [], "a state the decision writes sets off another event"


def test_a_mouse_pick_sent_twice_is_one_pick_and_a_later_pick_of_that_photo_opens_it_again():
    """Gradio's dropdown sends one pick made with the mouse as two events: the second is recognised (same page,
    same photo, within the window); another page, another photo, or the same photo later are picks of their own."""
    from app.ui_base import RepeatedPicks

    picks = RepeatedPicks(window_s=2.0, sessions=2)
    assert not picks.repeated("page-a", 7, now=100.0)
    assert picks.repeated("page-a", 7, now=100.05)
    assert not picks.repeated("page-b", 7, now=100.1)  # another curator's page
    assert not picks.repeated("page-a", 8, now=100.2)
    assert not picks.repeated("page-a", 7, now=100.3)  # back to 7 after 8: a pick of its own
    assert not picks.repeated("page-a", 7, now=103.0)  # 7 again, after the window: opened again
    assert not picks.repeated(None, 7, now=103.1) and not picks.repeated(None, 7, now=103.2)  # no page: never
    assert not picks.repeated("page-c", 1, now=200.0)  # over `sessions` pages: the stale ones are forgotten
    assert set(picks._last) == {"page-c"}
