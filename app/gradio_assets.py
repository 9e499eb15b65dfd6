"""Fixes to Gradio's own page scripts, applied as the server sends them.

**The status tracker's elapsed-time loop.**
Gradio 6's status tracker counts a running event's seconds with a ``requestAnimationFrame`` loop that re-arms
itself while its "timer running" flag is set. A tracker taken off the page while pending (the app's own loading
screen, on every page load) never clears that flag, so its loop asks the browser for a frame 60 times a second for
as long as the page stays open: an idle page costs about 0.1 core of browser CPU doing nothing (measured in
Chromium, on Gradio's one-button app as much as on Rosette; README, "Match review's speed"). The loop only shows
seconds to one decimal, so this rewrite drives it with a 100 ms ``setTimeout`` instead: a tick updates a number and
asks for no frame, and the orphaned loop then costs next to nothing. The elapsed time shown on a running event is
unchanged.

**Which events each component has, at page load.** For each of the page's ~700 components Gradio filters every
event listener of the app (~1,000) for the ones that name it (``find_attached_events``): some 700,000 look-ups
through Svelte's reactive proxies, 0.3-0.5 s of the first page load after sign-in (Chromium's profiler). The rewrite
indexes the listeners by component once per page and answers from the index: the same events, in the same order.

**Every loading status, on every status change.** Each time any event changes status (pending, then complete),
Gradio's event loop sends the loading status of every component that ever had one, not only the event's: hundreds
once a few tabs have been opened. The rewrite keeps a copy of the last status sent to each component and sends only
those that differ (a status changed in place counts).

**Finding a component by id.** Each of those sends finds its component by walking the page's tree from the root
through Svelte's proxies (a walk of ~700 nodes per look-up). Together with the statuses above this was 60-70 % of the
browser's time when a tab opened (profiled: 2.2 s of 3.5 s). The rewrite answers from a map of the tree's nodes,
built again on the first look-up after the tree was built or re-linked: the traversal that builds nodes, the root's
children set at creation and reload, a re-render grafting new children; inside a traversal it walks as before.

Each rewrite is a pattern over a minified asset; where a Gradio release no longer has that shape, the asset is served
unchanged (``tests/test_gradio_assets.py`` says which shape went missing; ``tests/browser`` notices the frames).
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

# function ze(){me(()=>{F(Pe,(performance.now()-w(de))/1e3),W&&ze()})}: the loop, by shape (names are minified)
TIMER_LOOP = re.compile(
    r"function (?P<loop>[\w$]+)\(\)\{[\w$]+\(\(\)=>\{(?P<tick>[^{}]*?performance\.now\(\)[^{}]*?/1e3\)),"
    r"(?P<running>[\w$]+)&&(?P=loop)\(\)\}\)\}")
TICK_MS = 100
# find_attached_events(e,t){let n=t.filter(t=>t.targets.find(([t])=>t===e.id)).map(...).filter(Boolean);
# return e.props.shared_props.attached_events=n,e}
ATTACHED_EVENTS = re.compile(
    r"find_attached_events\((?P<node>[\w$]+),(?P<deps>[\w$]+)\)\{let (?P<out>[\w$]+)=(?P=deps)\.filter\("
    r"[^{}]*?\{[^{}]*?\}\)\.filter\(Boolean\);return (?P=node)\.props\.shared_props\.attached_events=(?P=out),"
    r"(?P=node)\}")

# async update_loading_stati_state(){await Promise.all(Object.entries(this.loading_stati.current).map(([e,t])=>
# this.update_state_cb(Number(e),{loading_status:t},!1)))}
STATUS_BROADCAST = re.compile(
    r"async update_loading_stati_state\(\)\{await Promise\.all\(Object\.entries\(this\.loading_stati\.current\)"
    r"\.map\(\(\[(?P<id>[\w$]+),(?P<status>[\w$]+)\]\)=>this\.update_state_cb\(Number\((?P=id)\),"
    r"\{loading_status:(?P=status)\},!1\)\)\)\}")

# function Z(e,t){if(e.id===t)return e;if(e.children)for(let n of e.children){let e=Z(n,t);if(e)return e}return null}
TREE_FIND = re.compile(
    r"function (?P<find>[\w$]+)\((?P<node>[\w$]+),(?P<id>[\w$]+)\)\{if\((?P=node)\.id===(?P=id)\)return (?P=node);"
    r"if\((?P=node)\.children\)for\(let (?P<child>[\w$]+) of (?P=node)\.children\)\{let (?P=node)=(?P=find)\("
    r"(?P=child),(?P=id)\);if\((?P=node)\)return (?P=node)\}return null\}")
# the places that build or re-link the tree: the traversal that builds nodes, the root's children set at creation
# and reload, and a re-render grafting new children on a node
TREE_TRAVERSE = re.compile(r"traverse\((?P<a>[\w$]+),(?P<b>[\w$]+)\)\{(?=function )")
ROOT_CHILDREN = re.compile(r";this\.root\.children=")
GRAFT = re.compile(r";(?P<node>[\w$]+)\.children=(?P<new>[\w$]+)\.children,")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def index_attached_events(script: str) -> tuple[str, bool]:
    """Gradio's app tree with ``find_attached_events`` answered from an index of the listeners by component (built
    once per list of listeners); and whether it was found. Per listener, the first target naming the component
    gives its event, as in the original."""
    def indexed(m: re.Match) -> str:
        node, deps = m["node"], m["deps"]
        return (f"find_attached_events({node},{deps}){{let m=this.__rzEvents;if(!m||this.__rzEventsOf!=={deps}){{"
                f"m=new Map;for(const d of {deps}){{const seen=new Set;for(const [id,ev] of d.targets){{"
                "if(seen.has(id))continue;seen.add(id);if(!m.has(id))m.set(id,[]);m.get(id).push(ev)}}"
                f"this.__rzEvents=m;this.__rzEventsOf={deps}}}"
                f"return {node}.props.shared_props.attached_events=(m.get({node}.id)||[]).filter(Boolean),{node}}}")
    fixed, n = ATTACHED_EVENTS.subn(indexed, script, count=1)
    return fixed, n == 1


def index_tree_lookups(script: str) -> tuple[str, bool]:
    """Gradio's app tree with its find-by-id answered from a map of the tree's nodes, built again whenever the tree
    has been built or re-linked since (an epoch counter bumped at each such place); and whether every place was
    found (otherwise the script is returned unchanged)."""
    find = TREE_FIND.search(script)
    if (find is None or len(TREE_TRAVERSE.findall(script)) != 1 or len(ROOT_CHILDREN.findall(script)) != 2
            or len(GRAFT.findall(script)) != 1 or "__rzTree" in script):
        return script, False
    name = find["find"]
    # inside a traversal the tree is half built: look it up the original way and keep no map
    indexed = (f"var __rzTreeEpoch=0,__rzTreeBuilding=0,__rzTreeIndex=null;function {name}(e,t){{"
               "if(__rzTreeBuilding>0){if(e.id===t)return e;if(e.children)for(const c of e.children){"
               f"const f={name}(c,t);if(f)return f}}return null}}"
               "let x=__rzTreeIndex;if(!x||x.root!==e||x.epoch!==__rzTreeEpoch){const m=new Map;"
               "const walk=n=>{if(!m.has(n.id))m.set(n.id,n);if(n.children)for(const c of n.children)walk(c)};"
               "walk(e);x=__rzTreeIndex={root:e,epoch:__rzTreeEpoch,map:m}}"
               "const n=x.map.get(t);return n===void 0?null:n}")
    out = script[:find.start()] + indexed + script[find.end():]
    out = TREE_TRAVERSE.sub(
        lambda m: (f"traverse({m['a']},{m['b']}){{__rzTreeBuilding++;try{{return this.__rzTraverse({m['a']},{m['b']})"
                   f"}}finally{{__rzTreeBuilding--;__rzTreeEpoch++}}}}__rzTraverse({m['a']},{m['b']}){{"), out, count=1)
    out = ROOT_CHILDREN.sub(";__rzTreeEpoch++,this.root.children=", out)
    out = GRAFT.sub(lambda m: f";{m['node']}.children={m['new']}.children,__rzTreeEpoch++,", out, count=1)
    return out, True


def fix_core(script: str) -> tuple[str, bool]:
    """The app tree's script with both of its rewrites (each applied where its shape is found)."""
    listed, found_listing = index_attached_events(script)
    indexed, found_index = index_tree_lookups(listed)
    return indexed, found_listing or found_index


def calm_status_timer(script: str) -> tuple[str, bool]:
    """The status tracker's script with its elapsed-time loop on a ``TICK_MS`` timer; and whether it was found."""
    fixed, n = TIMER_LOOP.subn(
        lambda m: (f"function {m['loop']}(){{setTimeout(()=>{{{m['tick']},{m['running']}&&{m['loop']}()}},"
                   f"{TICK_MS})}}"), script, count=1)
    return fixed, n == 1


def send_changed_statuses(script: str) -> tuple[str, bool]:
    """Gradio's event loop with each status change sent only to the components whose loading status changed (a
    copy of the last one sent is kept per component); and whether it was found."""
    def changed_only(m: re.Match) -> str:
        i, st = m["id"], m["status"]
        return ("async update_loading_stati_state(){const sent=this.__rzSent||(this.__rzSent=new Map);"
                "await Promise.all(Object.entries(this.loading_stati.current).filter(([id,now])=>{"
                "const was=sent.get(id),keys=Object.keys(now);"
                "if(was&&keys.length===Object.keys(was).length&&keys.every(k=>Object.is(was[k],now[k])))return!1;"
                f"sent.set(id,{{...now}});return!0}}).map(([{i},{st}])=>this.update_state_cb(Number({i}),"
                f"{{loading_status:{st}}},!1)))}}")
    fixed, n = STATUS_BROADCAST.subn(changed_only, script, count=1)
    return fixed, n == 1


# which asset each rewrite applies to
FIXES: tuple[tuple[re.Pattern[str], Callable[[str], tuple[str, bool]]], ...] = (
    (re.compile(r"/assets/statustracker-[\w-]+\.js$"), calm_status_timer),
    (re.compile(r"/assets/core-[\w-]+\.js$"), fix_core),
    (re.compile(r"/assets/Blocks-[\w-]+\.js$"), send_changed_statuses),
)


# Gradio's build: /assets/<name>-<content hash>.<ext>, named by Vite from the file's content
BUILT_ASSET = re.compile(r"/assets/[\w.-]+-[\w-]{8,}\.(?:js|css|woff2?|ttf|svg|png|wasm)$")
IMMUTABLE = ((b"cache-control", b"public, max-age=31536000, immutable"),)


def fix_for(path: str) -> Callable[[str], tuple[str, bool]] | None:
    return next((fix for asset, fix in FIXES if asset.search(path)), None)


class GradioAssetFixes:
    """ASGI middleware: rewrites the assets of ``FIXES`` on their way to the browser; every other request passes
    untouched, but for the cache headers of Gradio's own build. The body of a rewritten asset is held until complete
    so its length can be set again.

    Gradio's build names every asset by its content (``Index-DphvyggB.js``) but sends no cache lifetime, so a
    browser asks again for each of the ~90 files of a page once its heuristic freshness (a tenth of the file's age)
    runs out: on a 2-core server that is a few hundred ms of every first page of the day. Those files are sent as
    immutable for a year. A rewritten one is not: its name follows Gradio's file while its text follows this module,
    so it is sent without validators, to be fetched again by each page (three small files)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        is_get = scope.get("type") == "http" and scope.get("method") == "GET"
        path = scope.get("path", "") if is_get else ""
        fix = fix_for(path) if is_get else None
        if fix is None:
            if is_get and BUILT_ASSET.search(path):
                await self.app(scope, receive, _with_headers(send, IMMUTABLE))
            else:
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
                fixed, found = fix(body.decode("utf-8"))
                if found:
                    body = fixed.encode("utf-8")
            dropped = {b"content-length", b"etag", b"last-modified", b"cache-control"}
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in dropped]
            headers += [(b"content-length", str(len(body)).encode("ascii")), (b"cache-control", b"no-cache")]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, held)


def _with_headers(send: Send, extra: tuple[tuple[bytes, bytes], ...]) -> Send:
    """``send`` with ``extra`` headers set on a successful response's start (replacing any of the same names)."""
    names = {k for k, _ in extra}

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message.get("status") == 200:
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
            message = {**message, "headers": [*headers, *extra]}
        await send(message)

    return sending
