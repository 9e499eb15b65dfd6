"""What every tab builds on: who is acting and whether they may (:func:`curator_action`), the context a tab is
built with (:class:`UIContext`), the assets folder, and escaping a user's text for Markdown. The app shell
(``app.ui``) imports the tabs; the tabs import this module, never the shell.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import inspect
import logging
import os
import threading
import time
import typing
from collections.abc import Callable, Hashable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from db.models import Role  # noqa: E402
from db.session import Catalogue  # noqa: E402
from jobs.actions.accounts import ROLE_RANK, require_role, role_of  # noqa: E402
from jobs.actions.audit import acting_as  # noqa: E402
from jobs.actions.errors import PermissionDenied  # noqa: E402

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
# the page whose event runs now (Gradio's session hash), for handlers that tell a repeated pick
_SESSION: ContextVar[str | None] = ContextVar("rosette_ui_session", default=None)


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
                session = getattr(request, "session_hash", None)
            else:
                name, session = nested, _SESSION.get()
                policy = captured or _POLICY
                if policy is not None and not policy.single_user:
                    require_role(policy.catalogue, name, needed)
            args = tuple(_as_actor(a, name) for a in args)
            kwargs = {k: _as_actor(v, name) for k, v in kwargs.items()}
            token, page = _ACTOR.set(name), _SESSION.set(session)
            try:
                with acting_as(name):
                    return fn(*args, **kwargs)
            finally:
                _ACTOR.reset(token)
                _SESSION.reset(page)
        except gr.Error:
            raise
        except PermissionDenied as exc:
            log.info("%s refused: %s", getattr(fn, "__name__", fn), exc)
            raise gr.Error(str(exc), title="Not allowed", print_exception=False) from None
        except (ValueError, FileNotFoundError) as exc:
            log.info("%s could not do that: %s", getattr(fn, "__name__", fn), exc)
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


class RepeatedPicks:
    """Which picks in a dropdown repeat the one just made: Gradio 6's dropdown sends a pick made with the mouse as
    two ``input`` events, run side by side (the queue runs four at once), and the second, landing after the
    curator's next step (a card chosen, a field typed in), would draw over it. A pick of the same key by the same
    page within ``window_s`` of its last pick is the same pick."""

    def __init__(self, *, window_s: float = 2.0, sessions: int = 1000) -> None:
        self.window_s, self.sessions = window_s, sessions
        self._last: dict[str, tuple[Hashable, float]] = {}
        self._lock = threading.Lock()

    def repeated(self, session: str | None, key: Hashable, *, now: float | None = None) -> bool:
        if session is None:
            return False
        now = time.monotonic() if now is None else now
        with self._lock:
            last = self._last.get(session)
            self._last[session] = (key, now)
            if len(self._last) > self.sessions:  # pages long closed
                for key, (_, at) in list(self._last.items()):
                    if now - at > self.window_s:
                        del self._last[key]
        return last is not None and last[0] == key and now - last[1] < self.window_s


PICKS = RepeatedPicks()


def repeated_pick(key: Hashable) -> bool:
    """Whether this pick (``key``: the dropdown and the value picked) repeats the last one of the page whose event
    runs now (see :class:`RepeatedPicks`); a handler answers a repeated pick with nothing."""
    return PICKS.repeated(_SESSION.get(), key)


def _resolved_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The handler's annotations as objects (Gradio must see gr.EventData / gr.Progress on the wrapper)."""
    try:
        return dict(typing.get_type_hints(fn))
    except Exception:  # noqa: BLE001 - unresolvable hints: keep them as written
        return dict(getattr(fn, "__annotations__", {}))


def refreshed_choices(choices: Sequence[Any], current: Any, *, values: Sequence[Any] | None = None) -> Any:
    """A dropdown update for a refresh: new ``choices``, and the value cleared only when the current pick is gone.

    A refresh runs with the value the dropdown had when it was triggered; a pick made while it was in flight arrives
    as ``None`` (or ``""``, an empty box), so either leaves the value alone instead of wiping that pick. ``values``
    are the choices' values (by default the second item of each ``(label, value)`` pair).
    """
    known = list(values) if values is not None else [c[1] if isinstance(c, tuple) else c for c in choices]
    if current is None or current == "" or current in known:  # an empty pick has nothing to clear
        return gr.update(choices=list(choices))
    return gr.update(choices=list(choices), value=None)


def guarded_viewer(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``curator_action(fn, role=Role.viewer)``: for handlers that only read or only change the screen."""
    return curator_action(fn, role=Role.viewer)


# --------------------------------------------------------------------------- shared context


def fingerprint(value: Any) -> str:
    """A short digest of plain data (lists, dicts, strings, numbers): a page compares digests to ask for a panel
    only when what it shows has changed."""
    text = json.dumps(value, sort_keys=True, default=repr)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def _bump(version: int | None) -> int:
    return (version or 0) + 1


def _poll_on() -> gr.Timer:
    return gr.Timer(active=True)


@dataclass
class UIContext:
    """What every tab gets: the catalogue, who is curating, and the shared refresh hooks.

    A tab's refreshes run only while it is in sight: on page load for the tab the page opens on, after a catalogue
    change while the tab is shown, and when the tab is selected after a change it has not shown yet. Each update of
    a component costs the browser a walk over the whole page (Gradio's tree of some 600 components), so refreshing
    every tab after every decision made each click cost seconds of CPU in the browser and the server for screens
    nobody was looking at."""

    catalogue: Catalogue
    user: gr.State  # an input for every handler that records a change: arrives as the signed-in name
    version: gr.State  # bumped after every change to the catalogue
    demo: gr.Blocks
    tab: gr.Tab | None = None  # the tab currently being built
    tabs: dict[str, gr.Tab] = field(default_factory=dict)
    timers: list[tuple[str, gr.Timer]] = field(default_factory=list)  # (owning tab's name, timer)
    landing: str = ""  # the tab a page opens on
    shown: gr.State | None = None  # the name of the tab in sight
    #: per tab, the catalogue version it was shown at: set when the tab is selected and, while it is shown, when
    #: the version changes (its refreshes that do not run on every selection follow it)
    seen: dict[str, gr.State] = field(default_factory=dict)
    #: per tab, the catalogue version while the tab is shown (its refreshes that also run on selection follow it)
    live: dict[str, gr.State] = field(default_factory=dict)
    #: changes a tab made and already drew itself (a decision in Match review): counted with ``version`` when another
    #: tab is selected, so that tab refreshes, but not fanned out to the tab that made them (see
    #: :meth:`changed_here`)
    quiet: gr.State | None = None

    def __post_init__(self) -> None:
        if self.quiet is None:
            self.quiet = gr.State(0)

    def changed_here(self, count: int | None) -> int:
        """For a handler that changed the catalogue and returns its whole screen itself (``ctx.quiet`` is one of
        its inputs and outputs): the new count. Other tabs refresh when next selected; the tab shown does not
        re-run its refreshes, which would redraw what the handler just drew, one round trip each."""
        return (count or 0) + 1

    def _owner(self) -> str:
        return next((name for name, tab in self.tabs.items() if tab is self.tab), "")

    def tab_timer(self, seconds: float) -> gr.Timer:
        """A poll that ticks every ``seconds`` only while the tab being built is the one shown (see
        :func:`tab_timers_switch`): a timer left running polls the server from every open page all day."""
        # rendered outside the tabs by wire_tab_switches: the page mounts a tab's components only when the tab is
        # first shown, and an update (active=True) reaching a timer not yet mounted can be lost
        timer = gr.Timer(seconds, active=False, render=False)
        self.timers.append((self._owner(), timer))
        return timer

    def polls_after(self, event: Any, timer: gr.Timer) -> Any:
        """Chain after ``event`` (an action that queues a job): the poll that shows the job's progress runs. The
        tab's selection started it already; a queued job starting its own poll does not depend on that update."""
        return event.success(guarded_viewer(_poll_on), outputs=timer, show_progress="hidden",
                             api_visibility="private")

    def changed(self, event: Any) -> Any:
        """Chain after ``event``: when it succeeds, tell every tab the catalogue changed."""
        return event.success(guarded_viewer(_bump), inputs=self.version, outputs=self.version,
                             show_progress="hidden", api_visibility="private")

    def on_refresh(self, fn: Callable[..., Any], inputs: Sequence[Any] | None = None,
                   outputs: Sequence[Any] | None = None, *, on_tab_select: bool = True) -> Any:
        """Run ``fn`` when the tab being built comes into sight with a catalogue it has not shown (page load for
        the landing tab, a selection after a change), after every catalogue change while it is shown, and (by
        default) on every selection of the tab. Outside a tab: on page load and after every change."""
        owner = self._owner() if self.tab is not None else ""
        if not owner:
            triggers = [self.demo.load, self.version.change]
        else:
            if owner not in self.seen:
                self.seen[owner] = gr.State(0 if owner == self.landing else None)
                self.live[owner] = gr.State(0 if owner == self.landing else None)
            triggers = [self.tab.select, self.live[owner].change] if on_tab_select else [self.seen[owner].change]
            if owner == self.landing:
                triggers.insert(0, self.demo.load)
        return gr.on(triggers, guarded_viewer(fn), inputs=list(inputs or []), outputs=list(outputs or []),
                     show_progress="hidden", api_visibility="private")

    def wire_tab_switches(self) -> None:
        """After every tab is built: each selection records the tab shown, starts its timers and stops the others',
        and marks the catalogue version it shows; a catalogue change reaches the refreshes of the tab shown only."""
        # through the queue: Gradio tells the page which states changed (so their .change events fire) only there
        owners = [owner for owner, _ in self.timers]
        timers = [timer for _, timer in self.timers]
        for timer in timers:
            timer.render()
        for name, tab in self.tabs.items():
            states = [self.seen[name]] if name in self.seen else []
            tab.select(guarded_viewer(functools.partial(tab_selected, name, owners, with_seen=bool(states))),
                       inputs=[self.version, self.quiet], outputs=[self.shown, *timers, *states],
                       show_progress="hidden", api_visibility="private")
        names = list(self.seen)
        if names:
            self.version.change(guarded_viewer(functools.partial(version_reaches, names)),
                                inputs=[self.version, self.shown, self.quiet],
                                outputs=[*(self.live[n] for n in names), *(self.seen[n] for n in names)],
                                show_progress="hidden", api_visibility="private")


def tab_selected(shown: str, owners: Sequence[str], version: int | None, quiet: int | None = 0, *,
                 with_seen: bool) -> list[Any]:
    """For the tab ``shown`` when it is selected: its name, its timers on and the others off, and (when it has
    refreshes) the version it now shows (changes made quietly by a tab count too)."""
    return [shown, *tab_timers_switch(shown, owners), *([(version or 0) + (quiet or 0)] if with_seen else [])]


def version_reaches(names: Sequence[str], version: int | None, shown: str | None,
                    quiet: int | None = 0) -> list[Any]:
    """A catalogue change: the new version for the tab shown (its live and seen states), nothing for the others."""
    live = [(version or 0) + (quiet or 0) if n == shown else gr.skip() for n in names]
    return [*live, *live]


def tab_timers_switch(shown: str, owners: Sequence[str]) -> list[Any]:
    """For the tab ``shown``: its own timers started, every other tab's stopped (one update per timer, in order)."""
    return [gr.Timer(active=owner == shown) for owner in owners]


_MARKDOWN_SPECIALS = "\\`*_{}[]()#+-.!|~>"


def markdown_text(text: object) -> str:
    """A user's string (a name, a place) as literal text inside Markdown: HTML characters become entities, so
    ``<img onerror=...>`` is shown, never drawn, and Markdown's own characters are backslash-escaped."""
    out = html.escape(str(text), quote=False)
    return "".join("\\" + ch if ch in _MARKDOWN_SPECIALS else ch for ch in out)


def plotly_js_path() -> Path:
    """plotly.js as shipped inside the plotly package (served locally: the page works offline)."""
    import plotly  # heavy (a second or more to import); only its folder is needed, once the app is built

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def acting_role() -> Role | None:
    """The role of the person acting in the current guarded call (admin in single-user mode)."""
    policy, name = _POLICY, _ACTOR.get()
    if policy is not None and policy.single_user:
        return Role.admin
    return role_of(policy.catalogue, name) if policy and policy.catalogue and name else None
