"""The status tracker's elapsed-time loop, rewritten on its way to the browser (app.gradio_assets)."""

from pathlib import Path

import gradio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from app.gradio_assets import GradioAssetFixes, calm_status_timer, index_attached_events

# the loop as Gradio 6.31 minifies it, with the code around it
LOOP = "let a=1;function ze(){me(()=>{F(Pe,(performance.now()-w(de))/1e3),W&&ze()})}let Q=2;"


def test_the_loop_is_put_on_a_100_ms_timer_and_nothing_else_changes():
    fixed, found = calm_status_timer(LOOP)
    assert found
    assert fixed == "let a=1;function ze(){setTimeout(()=>{F(Pe,(performance.now()-w(de))/1e3),W&&ze()},100)}let Q=2;"
    assert calm_status_timer("function ze(){me(()=>{go()})}") == ("function ze(){me(()=>{go()})}", False)


def test_the_installed_gradio_has_the_loop_and_the_rewrite_finds_it():
    assets = Path(gradio.__file__).parent / "templates" / "frontend" / "assets"
    trackers = sorted(assets.glob("statustracker-*.js"))
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
    core = sorted((Path(gradio.__file__).parent / "templates" / "frontend" / "assets").glob("core-*.js"))
    assert core and index_attached_events(core[0].read_text(encoding="utf-8"))[1], \
        "this Gradio lists a component's events in another shape"


def _app() -> Starlette:
    def chunks():
        yield LOOP[:20].encode()
        yield LOOP[20:].encode()

    async def tracker(request):
        return StreamingResponse(chunks(), media_type="text/javascript")

    async def other(request):
        return PlainTextResponse(LOOP)

    return Starlette(routes=[Route("/assets/statustracker-AbC1.js", tracker), Route("/assets/other.js", other)],
                     middleware=[Middleware(GradioAssetFixes)])


def test_the_middleware_rewrites_the_tracker_only_and_sets_its_length_again():
    with TestClient(_app()) as client:
        fixed = client.get("/assets/statustracker-AbC1.js")
        assert fixed.status_code == 200 and "setTimeout(" in fixed.text and fixed.text == calm_status_timer(LOOP)[0]
        assert int(fixed.headers["content-length"]) == len(fixed.content)
        untouched = client.get("/assets/other.js")
        assert untouched.text == LOOP
