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
import logging
import os
import pkgutil
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

import app.tabs  # noqa: E402
from app import services  # noqa: E402
from db.session import Catalogue  # noqa: E402

log = logging.getLogger("rosette.ui")

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
STYLE_CSS = ASSETS_DIR / "style.css"
# Blob kinds under the data directory that the browser may load (content-addressed, never modified).
SERVED_KINDS = ("images", "thumbs", "masks", "inpainted", "variants", "exports")


# --------------------------------------------------------------------------- errors shown to curators


def curator_action(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a handler so curator-caused errors show as a message box, unexpected ones as a short message.

    ``CatalogueError`` and ``ValueError`` (which includes it) and ``FileNotFoundError``
    carry messages written for curators and are shown as they are; anything else
    is logged with its traceback on the server and shown as one line.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (ValueError, FileNotFoundError) as exc:
            raise gr.Error(str(exc), title="Could not do that", print_exception=False) from None
        except Exception as exc:  # noqa: BLE001 - a curator must never see a stack trace
            log.exception("handler %s failed", getattr(fn, "__name__", fn))
            raise gr.Error(f"Something went wrong ({type(exc).__name__}: {exc}). The details are in the server log.",
                           title="Unexpected error", print_exception=False) from None

    return wrapper


# --------------------------------------------------------------------------- shared context


def _bump(version: int | None) -> int:
    return (version or 0) + 1


@dataclass
class UIContext:
    """What every tab gets: the catalogue, who is curating, and the shared refresh hooks."""

    catalogue: Catalogue
    user: gr.Textbox  # an input for every handler that records a change
    version: gr.State  # bumped after every change to the catalogue
    demo: gr.Blocks
    default_user: str = "curator"
    tab: gr.Tab | None = None  # the tab currently being built
    tabs: dict[str, gr.Tab] = field(default_factory=dict)

    def changed(self, event: Any) -> Any:
        """Chain after ``event``: when it succeeds, tell every tab the catalogue changed."""
        return event.success(_bump, inputs=self.version, outputs=self.version, show_progress="hidden",
                             api_visibility="private")

    def on_refresh(self, fn: Callable[..., Any], inputs: Sequence[Any] | None = None,
                   outputs: Sequence[Any] | None = None, *, on_tab_select: bool = True) -> Any:
        """Run ``fn`` on page load, after every catalogue change, and (by default) when this tab is selected."""
        triggers = [self.demo.load, self.version.change]
        if on_tab_select and self.tab is not None:
            triggers.append(self.tab.select)
        return gr.on(triggers, curator_action(fn), inputs=list(inputs or []), outputs=list(outputs or []),
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


def launch_options(cat: Catalogue) -> dict[str, Any]:
    """Keyword arguments for ``Blocks.launch`` shared by ``rosette serve`` and tests."""
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
    }


def build_app(cat: Catalogue, *, user: str = "curator") -> gr.Blocks:
    """The whole Rosette UI over an open catalogue; ``user`` is the default curator name."""
    # Catalogue files are content-addressed and never change: serve them in place instead of copying.
    gr.set_static_paths([str(d) for d in served_dirs(cat)] + [str(plotly_js_path().parent)])
    # delete_cache: every hour, drop uploaded temporary files older than a day (the catalogue keeps its own copy).
    with gr.Blocks(title="Rosette", analytics_enabled=False, delete_cache=(3600, 86400)) as demo:
        with gr.Row(elem_id="rosette-header", equal_height=True):
            gr.Markdown("## Rosette\nWildlife re-identification catalogue", elem_id="rosette-title")
            user_box = gr.Textbox(value=user, label="Curator", elem_id="curator-name", scale=0, min_width=220,
                                  max_lines=1,
                                  info="Recorded with every change you make.")
        version = gr.State(0)
        ctx = UIContext(catalogue=cat, user=user_box, version=version, demo=demo, default_user=user)
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
    return demo
