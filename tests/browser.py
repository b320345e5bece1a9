"""A real headless Chromium driven over the DevTools protocol through a pipe (no port, no
network): load a page, collect console errors, exceptions and every requested URL, evaluate
JavaScript, take a screenshot. Debian's ``chromium`` package; nothing here mocks the browser.

Used by the browser tests and by ``docs/make_screenshot.py``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--remote-debugging-pipe", "--hide-scrollbars",
]
MISSING = ("chromium is not installed: the browser tests need Debian's 'chromium' package "
           "(apt-get install -y chromium); .ci/run installs it")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One Chromium process with a fresh profile; ``open(path)`` returns a :class:`Page`."""

    def __init__(self, *, timeout: float = 60.0) -> None:
        exe = chromium_path()
        if exe is None:
            raise BrowserError(MISSING)
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="osg-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4: the shell puts them there
        # (through two spare numbers first, in case the pipes themselves got 3 or 4)
        script = (f'exec "$0" "$@" 198<&{cmd_r} 199>&{resp_w} {cmd_r}<&- {resp_w}>&- '
                  "3<&198 4>&199 198<&- 199>&-")
        self.proc = subprocess.Popen(
            ["bash", "-c", script, exe, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            pass_fds=(cmd_r, resp_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(resp_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        self.version = self.call("Browser.getVersion")["product"]

    # ---------------------------------------------------------------- protocol
    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self._resp_r], [], [], left)
            if ready:
                chunk = os.read(self._resp_r, 1 << 20)
                if not chunk:
                    raise BrowserError("chromium exited")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             session: str | None = None) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        for k, ev in enumerate(self.events):
            if ev.get("method") == method and ev.get("sessionId") == session:
                return self.events.pop(k)
        while True:
            ev = self._read(deadline)
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev
            self.events.append(ev)

    def open(self, path: str | Path, *, width: int = 1400, height: int = 1000) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=session)
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                  "deviceScaleFactor": 1, "mobile": False}, session=session)
        url = Path(path).resolve().as_uri()
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session)
        return Page(self, session, target, url)

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._resp_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    """A loaded page: evaluate JavaScript, list problems, take a screenshot."""

    def __init__(self, browser: Browser, session: str, target: str, url: str) -> None:
        self.browser, self.session, self.target, self.url = browser, session, target, url

    def eval(self, expression: str) -> Any:
        result = self.browser.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True,
        }, session=self.session)
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def _events(self) -> list[dict[str, Any]]:
        self.eval("1")  # flush: every event sent before this reply is now in browser.events
        return [e for e in self.browser.events if e.get("sessionId") == self.session]

    def problems(self) -> list[str]:
        """Console errors/warnings, uncaught exceptions, and log entries of level error or
        warning (blocked or failed loads, CSP violations)."""
        out = []
        for ev in self._events():
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                what = details.get("exception", {}).get("description") or details.get("text", "")
                out.append(f"exception: {what[:500]}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                out.append("console: " + json.dumps(params.get("args", []))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
                out.append("log: " + params["entry"].get("text", "")[:500])
        return out

    def requests(self) -> list[str]:
        """Every URL the page asked for (the page itself included)."""
        return [ev["params"]["request"]["url"] for ev in self._events()
                if ev.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: str | Path, *, full: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full}
        if full:
            w, h = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": min(h, 8000), "scale": 1}
        data = self.browser.call("Page.captureScreenshot", params, session=self.session)["data"]
        out = Path(path)
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        self.browser.call("Target.closeTarget", {"targetId": self.target})


# What the tests measure inside the page: every drawn box, the hooks, overlaps between boxes.
MEASURE = r"""
(() => {
  const boxes = [...document.querySelectorAll('#graph .node rect, #graph .terminal rect')]
    .map(r => { const b = r.getBoundingClientRect(); const g = r.parentElement;
      return {id: g.getAttribute('data-node') || g.getAttribute('data-tensor'),
              x: b.left, y: b.top, w: b.width, h: b.height}; });
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h)
      overlaps.push([a.id, b.id]);
  }
  const nodes = [...document.querySelectorAll('[data-node]')]
    .map(e => [e.getAttribute('data-node'), e.getAttribute('data-change')]);
  const edges = [...document.querySelectorAll('#graph .edge')]
    .map(e => [e.getAttribute('data-tensor'), e.getAttribute('data-change')]);
  const down = [...document.querySelectorAll('#graph .edge:not([data-stub]) path:not(.err)')].every(p => {
    const n = p.getTotalLength(); return p.getPointAtLength(0).y < p.getPointAtLength(n).y; });
  const svg = document.getElementById('graph').getBoundingClientRect();
  return {boxes: boxes.length, overlaps, nodes, edges, down, svg: [svg.width, svg.height],
          errors: [...document.querySelectorAll('[data-error]')].map(
            e => [e.getAttribute('data-tensor'), e.getAttribute('data-error'),
                  getComputedStyle(e.querySelector('path.err')).stroke]),
          divergent: [...document.querySelectorAll('[data-divergent="true"]')].map(
            e => e.getAttribute('data-node'))};
})()
"""
