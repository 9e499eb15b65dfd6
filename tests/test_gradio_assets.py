"""The status tracker's elapsed-time loop, rewritten on its way to the browser (app.gradio_assets)."""

from pathlib import Path

import gradio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from app.gradio_assets import StatusTimerFix, calm_status_timer

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


def _app() -> Starlette:
    def chunks():
        yield LOOP[:20].encode()
        yield LOOP[20:].encode()

    async def tracker(request):
        return StreamingResponse(chunks(), media_type="text/javascript")

    async def other(request):
        return PlainTextResponse(LOOP)

    return Starlette(routes=[Route("/assets/statustracker-AbC1.js", tracker), Route("/assets/other.js", other)],
                     middleware=[Middleware(StatusTimerFix)])


def test_the_middleware_rewrites_the_tracker_only_and_sets_its_length_again():
    with TestClient(_app()) as client:
        fixed = client.get("/assets/statustracker-AbC1.js")
        assert fixed.status_code == 200 and "setTimeout(" in fixed.text and fixed.text == calm_status_timer(LOOP)[0]
        assert int(fixed.headers["content-length"]) == len(fixed.content)
        untouched = client.get("/assets/other.js")
        assert untouched.text == LOOP
