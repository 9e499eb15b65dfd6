"""Real-browser fixtures: a ``rosette serve`` subprocess and Debian's chromium driven by Playwright.

- ``rosette_server`` (session): ``rosette --data-dir <tmp> serve --port <free> --no-demo``
  started with this interpreter; yields a :class:`RosetteServer` (``.url``, ``.data_dir``,
  ``.log``). ``start_rosette(...)`` starts more servers (e.g. with the demo) when a test needs one, forked from
  a process that has imported the app once (tests/browser/serve_fork.py; ``ROSETTE_TEST_SERVE_FORK=0`` to not).
- ``page`` (per test): a fresh context (profile) in the session's headless chromium, that
  refuses every request leaving this machine (recorded in ``page.external_requests``,
  so a test can assert the app works offline).
- ``shot(name)``: saves a full-page screenshot under ``test-output/browser/``.

Chromium is never downloaded: it must be ``/usr/bin/chromium``. Without it the
tests fail with a clear message; they are skipped only when ``CI`` is unset AND
``ROSETTE_SKIP_BROWSER=1`` (so they never skip in CI).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIR = REPO_ROOT / "test-output" / "browser"
CHROMIUM = "/usr/bin/chromium"
# every host name but this machine's fails to resolve, a second wall behind the page fixture's route
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1"]
SERVER_START_TIMEOUT_S = 90.0
VIEWPORT = {"width": 1400, "height": 1000}


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)


def require_chromium() -> None:
    """Fail (or, outside CI and only when asked, skip) when Debian's chromium is missing."""
    if Path(CHROMIUM).exists():
        return
    if os.environ.get("CI") is None and os.environ.get("ROSETTE_SKIP_BROWSER") == "1":
        pytest.skip(f"{CHROMIUM} is missing and ROSETTE_SKIP_BROWSER=1 (outside CI)")
    pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium), "
                "or outside CI set ROSETTE_SKIP_BROWSER=1 to skip the browser tests", pytrace=False)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RosetteServer:
    url: str
    data_dir: Path
    log: Path
    process: subprocess.Popen = field(repr=False)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-6000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class ForkedProcess:
    """A server forked by tests/browser/serve_fork.py: the parts of ``subprocess.Popen`` that tests use. It is the
    fork server's child, not ours, so its end is seen through a pidfd and its status read from ``<log>.rc``."""

    def __init__(self, pid: int, log: Path) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._status = Path(f"{log}.rc")
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # it has already ended and been reaped
            self._pidfd = None

    def _ended(self) -> int:
        deadline = time.monotonic() + 5.0  # the fork server writes the status once it has reaped the child
        while not self._status.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            self.returncode = int(self._status.read_text())
        except (OSError, ValueError):
            self.returncode = -1
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if self._pidfd is not None and not select.select([self._pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(f"rosette serve (pid {self.pid})", timeout)
        return self._ended()

    def poll(self) -> int | None:
        try:
            return self.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return None

    def _signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)


_fork_server: subprocess.Popen | None = None


def _stop_fork_server() -> None:
    if _fork_server is not None and _fork_server.poll() is None:
        _fork_server.stdin.close()  # its loop ends with its input
        try:
            _fork_server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _fork_server.kill()


def _fork_rosette(argv: list[str], *, env: dict[str, str], log: Path) -> ForkedProcess:
    """``rosette <argv>`` forked from a process that has imported the app and Gradio once for the session (see
    tests/browser/serve_fork.py); ``ROSETTE_TEST_SERVE_FORK=0`` starts each server from scratch instead."""
    global _fork_server
    if _fork_server is None or _fork_server.poll() is not None:
        _fork_server = subprocess.Popen([sys.executable, "-m", "tests.browser.serve_fork"], cwd=REPO_ROOT, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        atexit.register(_stop_fork_server)
    _fork_server.stdin.write(json.dumps({"argv": argv, "log": str(log), "env": env}) + "\n")
    _fork_server.stdin.flush()
    answer = _fork_server.stdout.readline()
    if not answer:
        raise RuntimeError(f"the fork server for rosette serve ended (code {_fork_server.wait()})")
    return ForkedProcess(json.loads(answer)["pid"], log)


def start_rosette(data_dir: Path, *, demo: bool = False, extra_args: list[str] | None = None,
                  timeout: float = SERVER_START_TIMEOUT_S, user: str = "curator", sign_in: bool = False,
                  env_extra: dict[str, str] | None = None) -> RosetteServer:
    """Start ``rosette serve`` on a free port and wait (bounded) until it answers HTTP 200.

    By default in loopback single-user mode (every change recorded as ``user``); ``sign_in=True`` serves with
    the login page and accounts, as in production.
    """
    port = free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir.parent / f"rosette-serve-{port}.log"
    cmd = [sys.executable, "-m", "app.cli", "--data-dir", str(data_dir), "--user", user,
           "serve", "--host", "127.0.0.1", "--port", str(port), *([] if demo else ["--no-demo"]),
           *([] if sign_in else ["--single-user"]), *(extra_args or [])]
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env_extra or {}),
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    # forked where Linux's pidfd lets us watch another process's child; env_extra may be read by an import
    if env_extra is None and hasattr(os, "pidfd_open") and os.environ.get("ROSETTE_TEST_SERVE_FORK", "1") != "0":
        log.write_bytes(b"")
        proc = _fork_rosette(cmd[3:], env=env, log=log)
    else:
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    server = RosetteServer(url=f"http://127.0.0.1:{port}/", data_dir=data_dir, log=log, process=proc)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"rosette serve exited with code {proc.returncode} before answering:\n{server.log_text()}")
        try:
            with urllib.request.urlopen(server.url, timeout=5) as resp:
                if resp.status == 200:
                    return server
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"rosette serve did not answer on {server.url} within {timeout:.0f} s:\n{server.log_text()}")
        time.sleep(0.3)


@pytest.fixture(scope="session")
def rosette_server(tmp_path_factory) -> Iterator[RosetteServer]:
    """One empty catalogue served for the whole session (tests use their own individual names)."""
    require_chromium()
    server = start_rosette(tmp_path_factory.mktemp("serve") / "rosette-data")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def playwright_driver() -> Iterator[object]:
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


def _is_local(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in ("data", "blob", "about") or parsed.hostname in ("127.0.0.1", "localhost", "::1")


@pytest.fixture(scope="session")
def chromium_browser(playwright_driver) -> Iterator[object]:
    """One headless chromium for the session; each test gets its own context in it (a fresh profile)."""
    browser = playwright_driver.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture()
def page(chromium_browser) -> Iterator[object]:
    """A page in a fresh browser context (its own cookies, storage and cache: a new profile, without starting
    chromium again); requests leaving this machine are refused and recorded."""
    context = chromium_browser.new_context(viewport=VIEWPORT, accept_downloads=False)
    external: list[str] = []

    def guard(route) -> None:
        if _is_local(route.request.url):
            route.continue_()
        else:
            external.append(route.request.url)
            route.abort()

    context.route("**/*", guard)
    context.set_default_timeout(20_000)
    # a first page load fetches Gradio's assets while a server may still be warming up (or, under
    # pytest-xdist, while the other worker holds a core): navigation gets longer than an element wait
    context.set_default_navigation_timeout(60_000)
    pg = context.new_page()
    pg.external_requests = external
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture()
def shot(page, request):
    """``shot(name)`` saves a full-page screenshot as test-output/browser/<test>-<name>.png and returns its path."""
    OUTPUT_DIR.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = OUTPUT_DIR / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


def choose(page, elem_id: str, text: str) -> None:
    """Pick the option containing ``text`` in the gr.Dropdown with ``elem_id``."""
    import re

    box = page.locator(f"#{elem_id} input").first
    box.click()
    box.fill(text)
    page.get_by_role("option", name=re.compile(re.escape(text))).first.click()


def fill_settled(locator, text: str, *, tries: int = 3, settle_s: float = 0.5) -> None:
    """Type ``text`` into a field and leave it (Tab). A field that mounts as its accordion opens can be drawn again
    with its default just after the first drawing; the value is checked to stay, and typed again if it did not,
    as a curator who sees the default come back types it again."""
    import time

    for _ in range(tries):
        locator.fill(text)
        locator.press("Tab")
        time.sleep(settle_s)
        if locator.input_value() == text:
            return
    raise AssertionError(f"the field kept showing {locator.input_value()!r} after {text!r} was typed {tries} times")


def shown_query_id(page) -> str | None:
    """The photo id Match review's facts name, None when none is shown. One read in the page: a count and then a
    second lookup could find the facts gone in between (the queue's end removes them) and wait for them in vain."""
    return page.evaluate("() => document.querySelector('#match-facts .rz-facts')?.dataset.imageId ?? null")


def settled_text(locator, *, timeout_s: float = 20.0) -> str:
    """The element's text once Gradio's pending overlay (a timer line such as ``0.3s``) has gone.

    Gradio writes its progress timer into the component while an event runs; reading ``inner_text`` at that moment
    returns the timer too. This waits until no line is a bare timer or a ``processing`` status, then returns the text.
    """
    import re
    import time

    timer = re.compile(r"^\s*(processing\s*\|?\s*)?\d+(\.\d+)?s(\s*/\s*\d+(\.\d+)?s)?\s*$", re.IGNORECASE)
    # a gr.Progress overlay: "48/48 photos | 0.3s" and "Computing photo features - 100.0%"
    # and, while the event waits in Gradio's queue, "queue: 1/1 | 0.2/0.3s" (elapsed / expected)
    progress = re.compile(r"(\|\s*\d+(\.\d+)?(\s*/\s*\d+(\.\d+)?)?s\s*$)|(\s-\s*\d+(\.\d+)?%\s*$)|(^\s*queue:\s*\d+/\d+)")
    deadline = time.monotonic() + timeout_s
    while True:
        text = locator.inner_text()
        pending = any(timer.match(line) or progress.search(line) for line in text.splitlines())
        if not pending or time.monotonic() > deadline:
            return text
        time.sleep(0.1)


def sign_in(page, server: RosetteServer, name: str, password: str, *, timeout_ms: int = 45_000) -> None:
    """Sign in on the login page (Gradio's door) and wait until the header names ``name``."""
    from playwright.sync_api import expect

    page.goto(server.url)
    page.locator("input[data-testid='textbox']").first.fill(name)
    page.locator("input[type='password']").first.fill(password)
    page.get_by_role("button", name="Login").click()
    expect(page.locator("#rosette-identity")).to_contain_text(f"Signed in as {name}", timeout=timeout_ms)
