"""The Gradio app shell: header (who is curating), one tab per module in ``app/tabs``, footer.

A tab module exposes ``TITLE: str``, ``ORDER: int`` and ``build(ctx: UIContext)``;
``build`` is called inside ``with gr.Tab(TITLE):`` and creates the tab's
components and events. The tab modules are listed in :data:`TABS`, so adding a
screen means adding one module and naming it there. A tab that fails to build is
replaced by a tab showing the error, and the rest of the app still works.

Cross-tab refresh is one shared ``gr.State`` counter, ``ctx.version``: a
handler that changes the catalogue is chained with ``ctx.changed(event)``, and
a tab that shows catalogue data registers its refresh with
``ctx.on_refresh(fn, inputs, outputs)``: it runs while its tab is in sight (page
load for the tab the page opens on, each change while the tab is shown, and
its selection after a change or, by default, every selection).

Handlers are wrapped with :func:`curator_action`: a ``CatalogueError`` or
``ValueError`` becomes a message box with its text, never a stack trace.

``launch_options(cat)`` holds what ``Blocks.launch`` needs (Gradio 6 takes theme
and CSS there, not in ``Blocks()``): a system-font theme (no web fonts, so the
page works offline), every ``assets/*.css``, and the data-directory folders the
browser may load pictures from (the database files are blocked).
"""

from __future__ import annotations

import functools
import html
import json
import logging
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from app import ui_base  # noqa: E402
from app.gradio_assets import GradioAssetFixes  # noqa: E402
from app.tabs import (  # noqa: E402
    benchmarks,
    catalogue,
    deployments,
    diagnostics,
    export,
    ingest,
    jobs,
    map,
    mask,
    match,
    models,
    people,
    population,
    species,
)

# what every tab builds on lives in app.ui_base (the tabs import it, not this module); re-exported here
from app.ui_base import (  # noqa: E402, F401
    ASSETS_DIR,
    SERVED_KINDS,
    STYLE_CSS,
    AccessPolicy,
    ActingUser,
    SessionUser,
    UIContext,
    acting_role,
    curator_action,
    guarded_viewer,
    markdown_text,
    plotly_js_path,
)
from db.models import Role  # noqa: E402
from db.session import Catalogue  # noqa: E402
from jobs.actions import accounts  # noqa: E402
from jobs.actions.accounts import ROLE_RANK, role_allows  # noqa: E402
from jobs.actions.maintenance import provenance_line  # noqa: E402

log = logging.getLogger("rosette.ui")

# --------------------------------------------------------------------------- tab discovery


TABS = (ingest, catalogue, match, mask, benchmarks, export, models, map, diagnostics, jobs, people, population,
        deployments, species)
"""Every tab's module; :func:`discover_tabs` orders them by their ``ORDER``."""


@dataclass
class TabModule:
    name: str
    title: str
    order: int
    build: Callable[[UIContext], None] | None
    error: str | None = None


def discover_tabs() -> list[TabModule]:
    """Every module in :data:`TABS` as a tab, by ``ORDER`` then title."""
    found = [TabModule(name=module.__name__.rsplit(".", 1)[-1], title=str(getattr(module, "TITLE", "")),
                       order=int(getattr(module, "ORDER", 100)), build=module.build) for module in TABS]
    return sorted(found, key=lambda t: (t.order, t.title))


def _error_panel(tab: TabModule, message: str) -> None:
    gr.Markdown(f"**This screen could not be loaded.** The rest of Rosette still works.\n\n"
                f"`app.tabs.{tab.name}`: {message}", elem_classes=["tab-error"])


# --------------------------------------------------------------------------- the app


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


def stylesheets() -> list[Path]:
    """``assets/style.css`` first, then every other ``assets/*.css`` (tabs may ship their own)."""
    others = sorted(p for p in ASSETS_DIR.glob("*.css") if p != STYLE_CSS)
    return ([STYLE_CSS] if STYLE_CSS.exists() else []) + others


def launch_options(cat: Catalogue, *, sign_in: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``Blocks.launch`` shared by ``rosette serve`` and tests.

    ``sign_in``: Gradio's login page is the door (accounts and argon2 hashes in the catalogue, ``db.users``);
    what each signed-in person may do is checked by every handler (:func:`curator_action`).
    """
    throttle = accounts.LoginThrottle()
    door = {"auth": lambda name, password: accounts.sign_in(cat, name, password, throttle=throttle),
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
        "app_kwargs": {"middleware": [Middleware(GradioAssetFixes)]},  # fixes to Gradio's page scripts
        **door,
    }


def identity_line() -> str:
    """The header's "who is acting" line (HTML), inside a guarded call (single-user mode says so plainly).
    Sign out leaves in this tab (``target=_self``: a Markdown link opened a new tab and stranded this one)."""
    policy = ui_base._POLICY
    if policy is not None and policy.single_user:
        return (f"<b>Single-user mode</b> (this machine only, no sign-in): every change is recorded as "
                f"<b>{html.escape(policy.single_user)}</b>.")
    name, role = ui_base._ACTOR.get(), acting_role()
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
# reads as the answer to the latest click. A line's first text (a standing hint) is not a
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
    ui_base._POLICY = AccessPolicy(catalogue=cat, single_user=single_user)
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
        specs = discover_tabs()
        landing = specs[0].name if specs else ""
        ctx = UIContext(catalogue=cat, user=user_state, version=version, demo=demo, landing=landing,
                        shown=gr.State(landing))
        demo.load(guarded_viewer(identity_line), outputs=[who], show_progress="hidden", api_visibility="private")
        # every tab in sight: a menu hid the last ones (People, Species) behind "..." on a laptop screen
        with gr.Tabs(elem_id="rosette-tabs", overflow_behavior="wrap"):
            for spec in specs:
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
        ctx.wire_tab_switches()  # polls and refreshes run for the tab in sight only
        gr.Markdown(provenance_line(cat), elem_id="rosette-provenance", elem_classes=["provenance"])
        locks = role_locks(demo)
        if locks and not single_user:  # a viewer sees the buttons that change things disabled, saying why
            demo.load(guarded_viewer(functools.partial(locked_for_role, locks)), outputs=[lock.button for lock in locks],
                      show_progress="hidden", api_visibility="private")
    return demo
