"""The Gradio app shell: header (who is curating), one tab per module in ``app/tabs``, footer.

A tab module exposes ``TITLE: str``, ``ORDER: int`` and ``build(ctx: UIContext)``;
``build`` is called inside ``with gr.Tab(TITLE):`` and creates the tab's
components and events. Tabs are found by listing ``app/tabs`` so adding a
screen means adding one module. A tab that fails to import or build is replaced
by a tab showing the error, and the rest of the app still works.

Cross-tab refresh is one shared ``gr.State`` counter, ``ctx.version``: a
handler that changes the catalogue is chained with ``ctx.changed(event)``, and
a tab that shows catalogue data registers its refresh with
``ctx.on_refresh(fn, inputs, outputs)`` (runs on page load, whenever the
version changes, and when the tab is selected).

Handlers are wrapped with :func:`curator_action`: a ``CatalogueError`` or
``ValueError`` becomes a message box with its text, never a stack trace.

``launch_options(cat)`` holds what ``Blocks.launch`` needs (Gradio 6 takes theme
and CSS there, not in ``Blocks()``): a system-font theme (no web fonts, so the
page works offline), every ``assets/*.css``, and the data-directory folders the
browser may load pictures from (the database files are blocked).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import logging
import os
import pkgutil
import traceback
import typing
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

import app.tabs  # noqa: E402
from app import services  # noqa: E402
from db.audit import acting_as  # noqa: E402
from db.models import Role  # noqa: E402
from db.session import Catalogue  # noqa: E402
from db.users import ROLE_RANK, PermissionDenied, role_allows, require_role  # noqa: E402

log = logging.getLogger("rosette.ui")

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
STYLE_CSS = ASSETS_DIR / "style.css"
# Blob kinds under the data directory that the browser may load (content-addressed, never modified).
SERVED_KINDS = ("images", "thumbs", "masks", "inpainted", "variants", "exports")


# --------------------------------------------------------------------------- who is acting, and may they


class ActingUser(str):
    """The signed-in person's name as a handler receives it; only :func:`curator_action` makes these."""


class SessionUser:
    """What ``ctx.user`` (a ``gr.State``) holds: a placeholder the guard replaces with the signed-in name.

    A State lives on the server: Gradio fills a State input from the session and ignores whatever a client sends
    in its slot, so nobody can send a name in its place.
    """

    def __deepcopy__(self, memo: dict) -> SessionUser:  # gr.State copies its value per session
        return self

    def __repr__(self) -> str:
        return "<the signed-in user>"


@dataclass(frozen=True)
class AccessPolicy:
    """How the server knows who is acting: the signed-in account (Gradio's login), or one fixed admin in
    loopback-only single-user mode."""

    catalogue: Catalogue | None
    single_user: str | None = None

    def actor(self, request: Any, needed: Role) -> str:
        """The acting user's name, or ``PermissionDenied`` if their role does not allow ``needed``."""
        if self.single_user:
            return self.single_user
        name = getattr(request, "username", None)
        if self.catalogue is None:
            raise PermissionDenied("This server has no catalogue to check accounts against.")
        require_role(self.catalogue, name, needed)
        return str(name)


_POLICY: AccessPolicy | None = None  # set by build_app (one app per process)
_ACTOR: ContextVar[str | None] = ContextVar("rosette_ui_actor", default=None)


def _as_actor(value: Any, name: str) -> Any:
    return ActingUser(name) if isinstance(value, SessionUser) else value


def curator_action(fn: Callable[..., Any] | None = None, *, role: Role | str = Role.curator) -> Any:
    """Guard a handler: check the signed-in user's role, hand it their name, and turn errors into messages.

    Gradio passes the request first (the wrapper's signature starts with ``_rosette_request: gr.Request``;
    a handler's own ``gr.Request`` parameter still gets it too); the role of
    ``request.username`` is read from the catalogue on every call (a role change applies at once) and must allow
    ``role`` (default curator: a handler not marked ``role=Role.viewer`` is refused to viewers). Every
    ``ctx.user`` input arrives as the signed-in name, and every change made inside is audited under it. A
    guarded handler called from inside another runs as the same user, checked again for its own role.

    ``CatalogueError``, ``ValueError`` and ``FileNotFoundError`` carry messages written for curators and are
    shown as they are; anything else is logged with its traceback on the server and shown as one line.
    """
    if fn is None:
        return functools.partial(curator_action, role=role)
    needed = Role(role)
    if hasattr(fn, "__rosette_role__"):  # guarded twice: one guard over the handler, with the stricter role
        stricter = max(needed, fn.__rosette_role__, key=ROLE_RANK.__getitem__)
        return curator_action(fn.__rosette_handler__, role=stricter)
    captured = _POLICY

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nested = _ACTOR.get()
        try:
            if nested is None:  # called by Gradio: the request comes first
                request, args = (args[0] if args else None), args[1:]
                policy = captured or _POLICY
                if policy is None:
                    raise PermissionDenied("This handler runs only inside the Rosette app.")
                name = policy.actor(request, needed)
            else:
                name = nested
                policy = captured or _POLICY
                if policy is not None and not policy.single_user:
                    require_role(policy.catalogue, name, needed)
            args = tuple(_as_actor(a, name) for a in args)
            kwargs = {k: _as_actor(v, name) for k, v in kwargs.items()}
            token = _ACTOR.set(name)
            try:
                with acting_as(name):
                    return fn(*args, **kwargs)
            finally:
                _ACTOR.reset(token)
        except gr.Error:
            raise
        except PermissionDenied as exc:
            raise gr.Error(str(exc), title="Not allowed", print_exception=False) from None
        except (ValueError, FileNotFoundError) as exc:
            raise gr.Error(str(exc), title="Could not do that", print_exception=False) from None
        except Exception as exc:  # noqa: BLE001 - a curator must never see a stack trace
            log.exception("handler %s failed", getattr(fn, "__name__", fn))
            raise gr.Error(f"Something went wrong ({type(exc).__name__}: {exc}). The details are in the server log.",
                           title="Unexpected error", print_exception=False) from None

    # Gradio reads the signature to inject the request: put it first, before the handler's own parameters.
    positional_or_keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD
    request_param = inspect.Parameter("_rosette_request", positional_or_keyword, annotation=gr.Request)
    params = [p.replace(kind=positional_or_keyword) if p.kind == p.POSITIONAL_ONLY else p
              for p in inspect.signature(fn).parameters.values()]
    wrapper.__signature__ = inspect.Signature([request_param, *params])
    wrapper.__annotations__ = {**_resolved_hints(fn), "_rosette_request": gr.Request}
    wrapper.__rosette_role__ = needed
    wrapper.__rosette_handler__ = fn
    return wrapper


def _resolved_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The handler's annotations as objects (Gradio must see gr.EventData / gr.Progress on the wrapper)."""
    try:
        return dict(typing.get_type_hints(fn))
    except Exception:  # noqa: BLE001 - unresolvable hints: keep them as written
        return dict(getattr(fn, "__annotations__", {}))


def guarded_viewer(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``curator_action(fn, role=Role.viewer)``: for handlers that only read or only change the screen."""
    return curator_action(fn, role=Role.viewer)


# --------------------------------------------------------------------------- shared context


def _bump(version: int | None) -> int:
    return (version or 0) + 1


@dataclass
class UIContext:
    """What every tab gets: the catalogue, who is curating, and the shared refresh hooks."""

    catalogue: Catalogue
    user: gr.State  # an input for every handler that records a change: arrives as the signed-in name
    version: gr.State  # bumped after every change to the catalogue
    demo: gr.Blocks
    tab: gr.Tab | None = None  # the tab currently being built
    tabs: dict[str, gr.Tab] = field(default_factory=dict)

    def changed(self, event: Any) -> Any:
        """Chain after ``event``: when it succeeds, tell every tab the catalogue changed."""
        return event.success(guarded_viewer(_bump), inputs=self.version, outputs=self.version,
                             show_progress="hidden", api_visibility="private")

    def on_refresh(self, fn: Callable[..., Any], inputs: Sequence[Any] | None = None,
                   outputs: Sequence[Any] | None = None, *, on_tab_select: bool = True) -> Any:
        """Run ``fn`` on page load, after every catalogue change, and (by default) when this tab is selected."""
        triggers = [self.demo.load, self.version.change]
        if on_tab_select and self.tab is not None:
            triggers.append(self.tab.select)
        return gr.on(triggers, guarded_viewer(fn), inputs=list(inputs or []), outputs=list(outputs or []),
                     show_progress="hidden", api_visibility="private")


# --------------------------------------------------------------------------- tab discovery


@dataclass
class TabModule:
    name: str
    title: str
    order: int
    build: Callable[[UIContext], None] | None
    error: str | None = None


def discover_tabs() -> list[TabModule]:
    """Every module in ``app/tabs`` as a tab, by ``ORDER`` then title; import errors become error tabs."""
    found: list[TabModule] = []
    for info in pkgutil.iter_modules(app.tabs.__path__):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"app.tabs.{info.name}")
            found.append(TabModule(name=info.name, title=str(getattr(module, "TITLE", info.name.title())),
                                   order=int(getattr(module, "ORDER", 100)), build=getattr(module, "build")))
        except Exception as exc:  # noqa: BLE001 - one broken tab must not take the app down
            log.error("tab module app.tabs.%s failed to import:\n%s", info.name, traceback.format_exc())
            found.append(TabModule(name=info.name, title=info.name.replace("_", " ").title(), order=1000,
                                   build=None, error=f"{type(exc).__name__}: {exc}"))
    return sorted(found, key=lambda t: (t.order, t.title))


def _error_panel(tab: TabModule, message: str) -> None:
    gr.Markdown(f"**This screen could not be loaded.** The rest of Rosette still works.\n\n"
                f"`app.tabs.{tab.name}`: {message}", elem_classes=["tab-error"])


# --------------------------------------------------------------------------- the app


_MARKDOWN_SPECIALS = "\\`*_{}[]()#+-.!|~>"


def markdown_text(text: object) -> str:
    """A user's string (a name, a place) as literal text inside Markdown: HTML characters become entities, so
    ``<img onerror=...>`` is shown, never drawn, and Markdown's own characters are backslash-escaped."""
    import html

    out = html.escape(str(text), quote=False)
    return "".join("\\" + ch if ch in _MARKDOWN_SPECIALS else ch for ch in out)


def theme() -> gr.themes.Base:
    """Warm, readable theme with system fonts only (no web-font downloads, so the page works offline)."""
    return gr.themes.Default(
        primary_hue="amber", secondary_hue="orange", neutral_hue="stone",
        font=["system-ui", "-apple-system", "Segoe UI", "Roboto", "Helvetica Neue", "Arial", "sans-serif"],
        font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"],
    )


def served_dirs(cat: Catalogue) -> list[Path]:
    """Directories of the data dir whose files the browser may load (created so they can be registered)."""
    dirs = []
    for kind in SERVED_KINDS:
        d = cat.data_dir / kind
        d.mkdir(parents=True, exist_ok=True)
        dirs.append(d)
    return dirs


def plotly_js_path() -> Path:
    """plotly.js as shipped inside the plotly package (served locally: the page works offline)."""
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def stylesheets() -> list[Path]:
    """``assets/style.css`` first, then every other ``assets/*.css`` (tabs may ship their own)."""
    others = sorted(p for p in ASSETS_DIR.glob("*.css") if p != STYLE_CSS)
    return ([STYLE_CSS] if STYLE_CSS.exists() else []) + others


def launch_options(cat: Catalogue, *, sign_in: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``Blocks.launch`` shared by ``rosette serve`` and tests.

    ``sign_in``: Gradio's login page is the door (accounts and argon2 hashes in the catalogue, ``db.users``);
    what each signed-in person may do is checked by every handler (:func:`curator_action`).
    """
    from db.users import LoginThrottle
    from db.users import sign_in as check_sign_in

    throttle = LoginThrottle()
    door = {"auth": lambda name, password: check_sign_in(cat, name, password, throttle=throttle),
            "auth_message": "Sign in with your Rosette account. No account? Ask an admin "
                            "(`rosette users add NAME --role curator`)."} if sign_in else {}
    db_files = [str(cat.data_dir / name) for name in ("catalogue.db", "catalogue.db-wal", "catalogue.db-shm")]
    return {
        "theme": theme(),
        "css_paths": stylesheets() or None,
        "allowed_paths": [str(d) for d in served_dirs(cat)] + [str(plotly_js_path().parent)],
        "blocked_paths": db_files,
        "share": False,
        "ssr_mode": False,
        "mcp_server": False,
        "show_error": True,
        "footer_links": ["settings"],
        "max_file_size": "2gb",  # uploads above this are refused by the server before anything is written
        **door,
    }


def acting_role() -> Role | None:
    """The role of the person acting in the current guarded call (admin in single-user mode)."""
    from db.users import role_of

    policy, name = _POLICY, _ACTOR.get()
    if policy is not None and policy.single_user:
        return Role.admin
    return role_of(policy.catalogue, name) if policy and policy.catalogue and name else None


def identity_line() -> str:
    """The header's "who is acting" line (HTML), inside a guarded call (single-user mode says so plainly).
    Sign out leaves in this tab (``target=_self``: a Markdown link opened a new tab and stranded this one)."""
    import html

    if _POLICY is not None and _POLICY.single_user:
        return (f"<b>Single-user mode</b> (this machine only, no sign-in): every change is recorded as "
                f"<b>{html.escape(_POLICY.single_user)}</b>.")
    name, role = _ACTOR.get(), acting_role()
    return (f"Signed in as <b>{html.escape(str(name))}</b> ({role.value if role else 'no role'}) · "
            "<a href='logout' target='_self' id='rosette-sign-out'>Sign out</a>")


LOCKED_CLASS = "rosette-locked"
_LOCK_WORDS = {Role.curator: "Curators only: you are signed in as a viewer. An admin can give you the curator "
                             "role (People tab, Accounts).",
               Role.admin: "Admins only: an admin can do this, or give you the admin role (People tab, Accounts)."}


@dataclass(frozen=True)
class RoleLock:
    """A button whose click handlers need more than the viewer role, and the role they need."""

    button: gr.Button
    needed: Role
    classes: tuple[str, ...]


def role_locks(demo: gr.Blocks) -> list[RoleLock]:
    """Every button of ``demo`` with a guarded click handler that needs more than the viewer role (the
    strictest of its handlers counts), read from the handlers themselves so a new tab needs no list."""
    needed: dict[int, Role] = {}
    for dep in demo.fns.values():
        role = getattr(dep.fn, "__rosette_role__", None)
        if role is None or role == Role.viewer:
            continue
        for block_id, event in dep.targets:
            if event == "click" and isinstance(demo.blocks.get(block_id), gr.Button):
                needed[block_id] = max(role, needed.get(block_id, role), key=ROLE_RANK.__getitem__)
    return [RoleLock(demo.blocks[i], role, tuple(demo.blocks[i].elem_classes or ())) for i, role in needed.items()]


def locked_for_role(locks: Sequence[RoleLock]) -> list[Any]:
    """Inside a guarded call: the buttons the acting user's role does not allow are disabled and marked (the
    page says why on hover); the others are left as their tab set them. The server refuses them anyway."""
    role = acting_role()
    return [gr.update() if role is not None and role_allows(role, lock.needed)
            else gr.update(interactive=False, elem_classes=[*lock.classes, LOCKED_CLASS, f"rosette-needs-{lock.needed.value}"])
            for lock in locks]


# the browser side of a lock: a native tooltip saying why the button is disabled, kept up as Gradio redraws
_LOCK_TITLES_JS = ("const words = " + json.dumps({f"rosette-needs-{r.value}": w for r, w in _LOCK_WORDS.items()}) + ";\n"
                   """const label = () => { for (const [cls, text] of Object.entries(words))
  document.querySelectorAll('.' + cls).forEach(b => { if (b.title !== text) b.title = text; }); };
new MutationObserver(label).observe(document.body, {subtree: true, childList: true, attributes: true,
                                                     attributeFilter: ['class']});
label();
""")


# One message at a time per screen: when a status line of a tab (a ``*-status`` element) shows a new message, the
# tab's other status lines that showed one earlier are folded away (class status-stale), so an old "Saved" never
# reads as the answer to the latest click (issue 14, item 11). A line's first text (a standing hint) is not a
# message and is left alone.
STATUS_SWEEP_JS = """
const LINES = '.status-line[id$="-status"]';  // the answers to clicks (summaries and notices are not swept)
const said = new WeakMap();
const textOf = (line) => { const p = line.querySelector('.prose'); return p ? p.textContent.trim() : ''; };
const sweep = () => {
  document.querySelectorAll(LINES).forEach((line) => {
    const text = textOf(line);
    if (!said.has(line)) { said.set(line, text); return; }
    if (text === said.get(line)) return;
    said.set(line, text);
    line.dataset.fresh = text ? '1' : '';
    line.classList.remove('status-stale');
    if (!text) return;
    const panel = line.closest('[role="tabpanel"]') || document.body;
    panel.querySelectorAll(LINES).forEach((other) => {
      if (other !== line && other.dataset.fresh === '1') { other.classList.add('status-stale'); other.dataset.fresh = ''; }
    });
  });
};
let queued = false;  // one sweep per animation frame, however many mutations came
new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; sweep(); }); } })
  .observe(document.body, {subtree: true, childList: true, characterData: true});
sweep();
"""


def build_app(cat: Catalogue, *, single_user: str | None = None) -> gr.Blocks:
    """The whole Rosette UI over an open catalogue.

    Every handler is guarded (:func:`curator_action`): who acts comes from the signed-in session (Gradio's login,
    see ``launch_options(..., auth=...)``), or is ``single_user`` (an admin) in loopback single-user mode.
    """
    global _POLICY
    _POLICY = AccessPolicy(catalogue=cat, single_user=single_user)
    # Catalogue files are content-addressed and never change: serve them in place instead of copying.
    gr.set_static_paths([str(d) for d in served_dirs(cat)] + [str(plotly_js_path().parent)])
    # delete_cache: every hour, drop uploaded temporary files older than a day (the catalogue keeps its own copy).
    with gr.Blocks(title="Rosette", analytics_enabled=False, delete_cache=(3600, 86400)) as demo:
        with gr.Row(elem_id="rosette-header", equal_height=True):
            gr.Markdown("## Rosette\nWildlife re-identification catalogue", elem_id="rosette-title")
            who = gr.HTML("", elem_id="rosette-identity",
                          js_on_load=STATUS_SWEEP_JS + ("" if single_user else _LOCK_TITLES_JS))
        user_state = gr.State(SessionUser())
        version = gr.State(0)
        ctx = UIContext(catalogue=cat, user=user_state, version=version, demo=demo)
        demo.load(guarded_viewer(identity_line), outputs=[who], show_progress="hidden", api_visibility="private")
        with gr.Tabs(elem_id="rosette-tabs"):
            for spec in discover_tabs():
                with gr.Tab(spec.title, id=spec.name, elem_id=f"tab-{spec.name}") as tab:
                    ctx.tab = tab
                    ctx.tabs[spec.name] = tab
                    if spec.build is None:
                        _error_panel(spec, spec.error or "unknown error")
                        continue
                    with gr.Column() as body:
                        try:
                            spec.build(ctx)
                        except Exception as exc:  # noqa: BLE001 - show the error in place of the tab
                            log.error("tab app.tabs.%s failed to build:\n%s", spec.name, traceback.format_exc())
                            body.visible = False
                            failed = exc
                        else:
                            failed = None
                    if failed is not None:
                        _error_panel(spec, f"{type(failed).__name__}: {failed}")
            ctx.tab = None
        gr.Markdown(services.provenance_line(cat), elem_id="rosette-provenance", elem_classes=["provenance"])
        locks = role_locks(demo)
        if locks and not single_user:  # a viewer sees the buttons that change things disabled, saying why
            demo.load(guarded_viewer(functools.partial(locked_for_role, locks)), outputs=[lock.button for lock in locks],
                      show_progress="hidden", api_visibility="private")
    return demo
