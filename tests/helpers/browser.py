"""A page opened in headless Chromium (Debian's `chromium`), driven over the Chrome DevTools Protocol on the pipe
Chromium opens with --remote-debugging-pipe: messages are JSON, each ended by a NUL byte, written to the
browser's fd 3 and read from its fd 4 (what Puppeteer does by default). That needs no port, no driver binary and
no library (a WebDriver or Playwright client would add one and drive the same protocol), and nothing is
downloaded: the browser is the distribution's.

`inspect_page(path)` loads a file, waits for its load event and its images' decoding, and returns what a reader
would meet: images that did not load, tables or cells outside the page's width, and console errors
(console.error, uncaught exceptions, and the browser's own log errors such as a resource that failed to load).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# The flags a headless check needs on a CI machine run as root: no sandbox (root), no GPU, and nothing that
# reaches out (first-run pages, background networking, component updates, sync). A fresh profile each time.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
WIDTH, HEIGHT = 1280, 1000  # a laptop's window: the report's body is at most 1150 px wide
TIMEOUT_S = 60.0

# Run in the page once it has loaded: every image decoded (or failed), then what a reader would see.
PAGE_CHECK = """(async () => {
  await Promise.all([...document.images].map(img => img.decode().catch(() => null)));
  const width = document.documentElement.clientWidth;
  const outside = el => { const r = el.getBoundingClientRect(); return r.left < -0.5 || r.right > width + 0.5; };
  return {
    images: [...document.images].map(img => ({alt: img.alt, loaded: img.complete && img.naturalWidth > 0,
                                             width: img.naturalWidth, height: img.naturalHeight})),
    tables: [...document.querySelectorAll('table')].map((t, i) => ({
      index: i, rows: t.tBodies.length ? t.tBodies[0].rows.length : 0,
      cut_off: outside(t) || [...t.querySelectorAll('th, td')].some(outside),
      heading: (t.previousElementSibling && t.previousElementSibling.textContent || '').slice(0, 80)})),
    page_overflows: document.documentElement.scrollWidth > width,
    height: document.documentElement.scrollHeight,
    text: document.body.innerText.length,
  };
})()"""


class BrowserError(RuntimeError):
    """The browser could not be driven (it exited, or did not answer in time)."""


@dataclass
class Page:
    """What inspect_page saw."""

    images: list[dict]
    tables: list[dict]
    page_overflows: bool
    height: int
    text: int
    console_errors: list[str] = field(default_factory=list)

    @property
    def missing_images(self) -> list[str]:
        return [img["alt"] or "(no alt)" for img in self.images if not img["loaded"]]

    @property
    def cut_off_tables(self) -> list[str]:
        return [f"table {t['index']} after {t['heading']!r}" for t in self.tables if t["cut_off"]]


def chromium() -> str | None:
    return shutil.which("chromium")


class _Pipe:
    """One browser and its DevTools pipe: send(method, params, session) -> result; events are kept."""

    def __init__(self, executable: str, profile_dir: str) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser wants them as its fds 3 and 4: a small Python places them there and becomes the browser
        # (exec), since a preexec_fn is unsafe in a process with threads (pytest-xdist's workers have some).
        place = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
        argv = [executable, *FLAGS, f"--window-size={WIDTH},{HEIGHT}", f"--user-data-dir={profile_dir}", "about:blank"]
        self.process = subprocess.Popen(
            [sys.executable, "-c", place, str(to_browser_r), str(from_browser_w), *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, session: str) -> dict:
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._read())

    def _read(self) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise BrowserError(f"chromium did not answer in {TIMEOUT_S:.0f} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError(f"chromium exited: {self.process.stderr.read().decode(errors='replace')[-2000:]}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        self.process.stderr.close()


def _console_errors(events: list[dict], session: str) -> list[str]:
    errors = []
    for event in events:
        if event.get("sessionId") != session:
            continue
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
    return errors


def inspect_pages(paths: list[Path]) -> list[Page]:
    """Each file opened in a fresh tab of one headless Chromium (a fresh profile), as inspect_page says."""
    executable = chromium()
    if executable is None:
        raise BrowserError("no chromium on PATH (Debian's chromium package)")
    with tempfile.TemporaryDirectory(prefix="planner-chromium-") as profile:
        pipe = _Pipe(executable, profile)
        try:
            return [_inspect(pipe, Path(path)) for path in paths]
        finally:
            pipe.close()


def inspect_page(path: Path) -> Page:
    return inspect_pages([path])[0]


def _inspect(pipe: _Pipe, path: Path) -> Page:
    target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log"):  # before loading: every console message and error is reported
        pipe.send(f"{domain}.enable", session=session)
    pipe.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
    pipe.wait_for("Page.loadEventFired", session)
    result = pipe.send(
        "Runtime.evaluate", {"expression": PAGE_CHECK, "awaitPromise": True, "returnByValue": True}, session=session
    )
    if "exceptionDetails" in result:
        raise BrowserError(f"the page check failed: {result['exceptionDetails']}")
    page = Page(**result["result"]["value"])
    page.console_errors = _console_errors(pipe.events, session)
    pipe.events = [e for e in pipe.events if e.get("sessionId") != session]
    pipe.send("Target.closeTarget", {"targetId": target})
    return page
