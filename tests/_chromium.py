"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol from Python, for the dashboard test.

Why CDP over a websocket and not `chromium --screenshot`: the page draws after its fetches return, and the
test must see console errors and wait for the page's own ready flag; `--screenshot` does neither. Why not
Playwright: it needs Node and an npm install in CI for what ~100 lines do here. The browser starts with a
fresh profile and everything that talks to the network on its own turned off; it is killed on exit.

    with Chromium() as browser:
        page = browser.open(url)                 # waits for `ready_js` to be true
        page.errors                              # console errors and uncaught exceptions, as text
        page.evaluate("document.title")
        png = page.screenshot(width=1400)        # the full page
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0"]


def chromium_path() -> Optional[str]:
    """The Chromium binary, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One tab: console errors collected as they come, `evaluate`, `screenshot`."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self.console: list[str] = []

    def _event(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            self.console.append(f"{p.get('type')}: {text}")
            if p.get("type") in ("error", "assert"):
                self.errors.append(text)
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.errors.append(f"{e.get('source')}: {e.get('text')} {e.get('url', '')}".strip())

    def send(self, method: str, params: Optional[dict[str, Any]] = None, timeout: float = 60.0) -> dict[str, Any]:
        """Send a CDP command and return its result (events that arrive meanwhile are recorded)."""
        mid = next(self._ids)
        self._ws.send(json.dumps({"id": mid, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self._event(msg)

    def evaluate(self, expression: str) -> Any:
        """The value of a JS expression (awaited if it is a promise)."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails'].get('text')}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> None:
        """Poll until a JS expression is truthy."""
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} still false after {timeout} s; console: {self.console[-10:]}")
            time.sleep(0.1)

    def screenshot(self, width: int = 1400) -> bytes:
        """A PNG of the whole page at `width` CSS pixels."""
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)") or 800)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        self.wait_for("new Promise(r => requestAnimationFrame(() => r(true)))")
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        return base64.b64decode(data)


class Chromium:
    """A headless Chromium process with a throwaway profile; `open(url)` gives a `Page`."""

    def __init__(self, binary: Optional[str] = None) -> None:
        self.binary = binary or chromium_path()
        if self.binary is None:
            raise FileNotFoundError("no chromium on PATH: apt-get install -y chromium")
        self._profile = Path(tempfile.mkdtemp(prefix="looplift-chromium-"))
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._sockets: list[Any] = []

    def __enter__(self) -> "Chromium":
        self._proc = subprocess.Popen([self.binary, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        self.port = int(port_file.read_text().split()[0])
        return self

    def open(self, url: str, *, ready_js: str = "true", timeout: float = 60.0) -> Page:
        """A new tab at `url`, once `ready_js` is true."""
        import httpx
        from websockets.sync.client import connect

        target = httpx.put(f"http://127.0.0.1:{self.port}/json/new?about:blank", timeout=10).json()
        ws = connect(target["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024, open_timeout=10)
        self._sockets.append(ws)
        page = Page(ws)
        for domain in ("Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        page.send("Page.navigate", {"url": url})
        page.wait_for(f"document.readyState === 'complete' && !!({ready_js})", timeout)
        return page

    def __exit__(self, *exc: object) -> None:
        for ws in self._sockets:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - closing a socket of a browser about to be killed
                pass
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)  # the whole process group: renderers and zygotes too
            self._proc.wait(10)
        shutil.rmtree(self._profile, ignore_errors=True)


def png_stats(png: bytes) -> dict[str, Any]:
    """Size, share of non-white pixels and distinct colours of a PNG (decoded with Pillow)."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    small = img.resize((img.width // 4, img.height // 4))
    pixels = list(small.getdata())
    non_white = sum(1 for p in pixels if sum(p) < 3 * 245)
    return {"width": img.width, "height": img.height, "non_white": non_white / len(pixels),
            "colors": len(set(pixels)), "pixels": pixels}
