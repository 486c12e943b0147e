"""The headless browser the report tests render pages in (.ci/run installs Debian's chromium)."""

from __future__ import annotations

import shutil

import pytest


def chromium() -> str:
    for exe in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(exe)
        if path:
            return path
    pytest.fail("Chromium is needed for the report test (.ci/run installs Debian's chromium)")


def _end_group(pgid: int, profile: str) -> None:
    import os
    import signal
    import time

    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(20):
        shutil.rmtree(profile, ignore_errors=True)
        if not os.path.exists(profile):
            return
        time.sleep(0.25)


def screenshot_when(url: str, out, ready_js: str, then_js: str | None = None,
                    timeout: float = 120.0, size: tuple[int, int] = (1600, 1000)) -> bool:
    """Open `url` in headless Chromium and save a PNG screenshot to `out` once the JavaScript
    expression `ready_js` is true (polled in real time), or at `timeout`; returns whether it
    became true; `then_js` (a click, say) runs once it is.  A page that renders after server
    round trips (Model Explorer converts the model on its server) is not ready at the load
    event, where --screenshot takes its picture;
    this drives the browser over the DevTools protocol (tornado's websocket client) instead."""
    import asyncio
    import base64
    import json
    import subprocess
    import tempfile
    import time
    import urllib.request
    from pathlib import Path

    from tornado.ioloop import IOLoop
    from tornado.websocket import websocket_connect

    # Chromium's helpers (crashpad, renderers) outlive the browser by a moment and keep
    # writing its profile, so the directory is removed after the whole group is gone.
    with tempfile.TemporaryDirectory(prefix="provmap-chromium-",
                                     ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--enable-unsafe-swiftshader", f"--user-data-dir={profile}",
             f"--window-size={size[0]},{size[1]}", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("headless Chromium did not start its DevTools endpoint")
                time.sleep(0.2)
            port = int(port_file.read_text().split()[0])
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                                       timeout=10))
            ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")

            async def drive() -> bool:
                ws = await websocket_connect(ws_url, max_message_size=256 << 20)
                ids = iter(range(1, 1 << 30))

                async def call(method, **params):
                    i = next(ids)
                    ws.write_message(json.dumps({"id": i, "method": method, "params": params}))
                    while True:
                        msg = json.loads(await ws.read_message())
                        if msg.get("id") == i:
                            return msg.get("result", {})

                await call("Page.enable")
                await call("Page.navigate", url=url)
                ready = False
                end = time.monotonic() + timeout
                while time.monotonic() < end:
                    r = await call("Runtime.evaluate", expression=f"Boolean({ready_js})",
                                   returnByValue=True)
                    if r.get("result", {}).get("value") is True:
                        ready = True
                        break
                    await asyncio.sleep(1.0)
                if ready and then_js:
                    await call("Runtime.evaluate", expression=then_js)
                if ready:
                    await asyncio.sleep(4.0)  # let the graph finish drawing
                shot = await call("Page.captureScreenshot", format="png")
                Path(out).write_bytes(base64.b64decode(shot["data"]))
                ws.close()
                return ready

            return IOLoop.current().run_sync(drive, timeout=timeout + 60)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            _end_group(proc.pid, profile)
