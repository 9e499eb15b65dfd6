"""One fix to Gradio's own page script, applied as the server sends it: the status tracker's elapsed-time loop.

Gradio 6's status tracker counts a running event's seconds with a ``requestAnimationFrame`` loop that re-arms
itself while its "timer running" flag is set. A tracker taken off the page while pending (the app's own loading
screen, on every page load) never clears that flag, so its loop asks the browser for a frame 60 times a second for
as long as the page stays open: an idle page costs about 0.1 core of browser CPU doing nothing (measured in
Chromium, on Gradio's one-button app as much as on Rosette; README, "Match review's speed"). The loop only shows seconds to one
decimal, so this rewrite drives it with a 100 ms ``setTimeout`` instead: a tick updates a number and asks for no
frame, and the orphaned loop then costs next to nothing. The elapsed time shown on a running event is unchanged.

The rewrite is a pattern over the minified asset; where a Gradio release no longer has that shape, the asset is
served unchanged (and ``tests/browser`` notices the frames again).
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

# function ze(){me(()=>{F(Pe,(performance.now()-w(de))/1e3),W&&ze()})}: the loop, by shape (names are minified)
TIMER_LOOP = re.compile(
    r"function (?P<loop>[\w$]+)\(\)\{[\w$]+\(\(\)=>\{(?P<tick>[^{}]*?performance\.now\(\)[^{}]*?/1e3\)),"
    r"(?P<running>[\w$]+)&&(?P=loop)\(\)\}\)\}")
TICK_MS = 100
ASSET = re.compile(r"/assets/statustracker-[\w-]+\.js$")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def calm_status_timer(script: str) -> tuple[str, bool]:
    """The status tracker's script with its elapsed-time loop on a ``TICK_MS`` timer; and whether it was found."""
    fixed, n = TIMER_LOOP.subn(
        lambda m: (f"function {m['loop']}(){{setTimeout(()=>{{{m['tick']},{m['running']}&&{m['loop']}()}},"
                   f"{TICK_MS})}}"), script, count=1)
    return fixed, n == 1


class StatusTimerFix:
    """ASGI middleware: rewrites the status tracker asset (``calm_status_timer``) on its way to the browser; every
    other request passes untouched. The body is held until complete so its length can be set again."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "GET" or not ASSET.search(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] | None = None
        chunks: list[bytes] = []

        async def held(message: dict[str, Any]) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            if start.get("status") == 200:
                fixed, found = calm_status_timer(body.decode("utf-8"))
                if found:
                    body = fixed.encode("utf-8")
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode("ascii")))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, held)
