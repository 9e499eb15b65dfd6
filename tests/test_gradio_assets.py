"""Gradio's page scripts, rewritten on their way to the browser (app.gradio_assets): the shapes each rewrite needs,
in small scripts written like Gradio 6.31's and in the installed Gradio. What the rewritten code does is run in
Chromium by ``tests/browser/test_gradio_fixes_js.py`` on these same small scripts."""

from pathlib import Path

import gradio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from app.gradio_assets import (GradioAssetFixes, calm_status_timer, fix_core, index_attached_events,
                               index_tree_lookups, send_changed_statuses)

ASSETS = Path(gradio.__file__).parent / "templates" / "frontend" / "assets"

# the loop as Gradio 6.31 minifies it, with the code around it
LOOP = "let a=1;function ze(){me(()=>{F(Pe,(performance.now()-w(de))/1e3),W&&ze()})}let Q=2;"


def test_the_loop_is_put_on_a_100_ms_timer_and_nothing_else_changes():
    fixed, found = calm_status_timer(LOOP)
    assert found
    assert fixed == "let a=1;function ze(){setTimeout(()=>{F(Pe,(performance.now()-w(de))/1e3),W&&ze()},100)}let Q=2;"
    assert calm_status_timer("function ze(){me(()=>{go()})}") == ("function ze(){me(()=>{go()})}", False)


def test_the_installed_gradio_has_the_loop_and_the_rewrite_finds_it():
    trackers = sorted(ASSETS.glob("statustracker-*.js"))
    assert trackers, "Gradio ships no statustracker asset: the rewrite has nothing to fix"
    script = trackers[0].read_text(encoding="utf-8")
    fixed, found = calm_status_timer(script)
    assert found, f"{trackers[0].name}: the status tracker's timer loop has another shape in this Gradio"
    assert fixed.count("},100)}") == script.count("},100)}") + 1 and len(fixed) > len(script)


# Gradio's listing as 6.31 minifies it
LISTING = ("find_attached_events(e,t){let n=t.filter(t=>t.targets.find(([t])=>t===e.id)).map(t=>{let n=t.targets"
           ".find(([t])=>t===e.id);return n?n[1]:null}).filter(Boolean);return e.props.shared_props.attached_events=n,"
           "e}traverse(e,t){}")


def test_the_listing_of_a_components_events_is_answered_from_an_index():
    fixed, found = index_attached_events(LISTING)
    assert found and fixed.endswith("traverse(e,t){}") and "t.filter(" not in fixed and "new Map" in fixed
    assert index_attached_events("find_attached_events(e,t){return e}") == ("find_attached_events(e,t){return e}",
                                                                            False)
    core = sorted(ASSETS.glob("core-*.js"))
    assert core and index_attached_events(core[0].read_text(encoding="utf-8"))[1], \
        "this Gradio lists a component's events in another shape"


def _app() -> Starlette:
    def chunks():
        yield LOOP[:20].encode()
        yield LOOP[20:].encode()

    async def tracker(request):
        return StreamingResponse(chunks(), media_type="text/javascript")

    async def other(request):
        return PlainTextResponse(LOOP, headers={"etag": '"v1"', "cache-control": "max-age=0"})

    return Starlette(routes=[Route("/assets/statustracker-AbC1x2Y3.js", tracker), Route("/assets/other.js", other),
                             Route("/assets/Index-DphvyggB.js", other), Route("/assets/missing-DphvyggB.js",
                                                                                lambda r: PlainTextResponse("", 404))],
                     middleware=[Middleware(GradioAssetFixes)])


def test_the_middleware_rewrites_the_tracker_only_and_sets_its_length_again():
    with TestClient(_app()) as client:
        fixed = client.get("/assets/statustracker-AbC1x2Y3.js")
        assert fixed.status_code == 200 and "setTimeout(" in fixed.text and fixed.text == calm_status_timer(LOOP)[0]
        assert int(fixed.headers["content-length"]) == len(fixed.content)
        # a rewritten asset follows this module, not its name: fetched again by each page, no validator kept
        assert fixed.headers["cache-control"] == "no-cache" and "etag" not in fixed.headers
        untouched = client.get("/assets/other.js")
        assert untouched.text == LOOP and untouched.headers["cache-control"] == "max-age=0"  # not a built name


def test_gradio_built_assets_are_cached_for_a_year_and_nothing_else_is():
    with TestClient(_app()) as client:
        built = client.get("/assets/Index-DphvyggB.js")
        assert built.text == LOOP and built.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert built.headers["etag"] == '"v1"'
        missing = client.get("/assets/missing-DphvyggB.js")
        assert missing.status_code == 404 and "immutable" not in missing.headers.get("cache-control", "")


# the app tree's find-by-id and every place that builds or re-links the tree, as Gradio 6.31 writes them
TREE = ("function X(e){return e}function Z(e,t){if(e.id===t)return e;if(e.children)for(let n of e.children){"
        "let e=Z(n,t);if(e)return e}return null}"
        "class T{constructor(c){this.root={id:0,children:[]};this.root.children=c.map(e=>this.traverse(e,x=>x))}"
        "traverse(e,t){function n(e,t){let r=t(e);return`children`in e&&e.children.length>0&&"
        "(r.children=e.children?.map(e=>n(e,t))||[]),r}return n(e,t)}"
        "reload(c){this.root={id:0,children:[]};this.root.children=c.map(e=>this.traverse(e,x=>x))}"
        "rerender(t){let i=this.traverse(t,e=>({...e})),a=Z(this.root,i.id);if(!a)throw Error(`gone`);"
        "a.children=i.children,this.f(i)}f(){}find(id){return Z(this.root,id)}}")
# the event loop's status broadcast, in a class that records what it sends
STATUSES = ("class B{constructor(){this.loading_stati={current:{}};this.sent=[]}"
            "update_state_cb(e,t,n){this.sent.push([e,t.loading_status.status??null])}"
            "async update_loading_stati_state(){await Promise.all(Object.entries(this.loading_stati.current).map("
            "([e,t])=>this.update_state_cb(Number(e),{loading_status:t},!1)))}}")


def test_the_tree_lookup_is_indexed_only_where_every_place_that_relinks_the_tree_is_found():
    fixed, found = index_tree_lookups(TREE)
    assert found and "new Map" in fixed and fixed.count("__rzTreeEpoch++") == 4  # traversal, root twice, graft
    assert index_tree_lookups(fixed) == (fixed, False)  # never twice
    no_graft = TREE.replace("a.children=i.children,", "a.kids=i.children,")
    assert index_tree_lookups(no_graft) == (no_graft, False)
    core = sorted(ASSETS.glob("core-*.js"))
    assert core, "Gradio ships no core asset"
    script = core[0].read_text(encoding="utf-8")
    both, found = fix_core(script)
    assert found and "__rzEvents" in both and "__rzTreeIndex" in both, \
        f"{core[0].name}: the app tree's lookups have another shape in this Gradio"


def test_status_changes_are_sent_only_to_the_components_they_change():
    fixed, found = send_changed_statuses(STATUSES)
    assert found and ".filter(" in fixed and fixed.startswith("class B{")
    assert send_changed_statuses("class B{}") == ("class B{}", False)
    blocks = sorted(ASSETS.glob("Blocks-*.js"))
    assert blocks and send_changed_statuses(blocks[0].read_text(encoding="utf-8"))[1], \
        f"{blocks[0].name if blocks else 'Blocks'}: the status broadcast has another shape in this Gradio"
