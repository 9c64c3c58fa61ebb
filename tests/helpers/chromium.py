"""Headless Chromium driven over the DevTools protocol on a pipe, for tests of HTML pages.

Chromium started with ``--remote-debugging-pipe`` reads protocol commands on its file
descriptor 3 and writes answers and events on 4, each a JSON message ended by a NUL byte.
:class:`Browser` opens a page, evaluates JavaScript in it, records every request the page
makes (``Network.requestWillBeSent``) and takes screenshots: no package beyond the
standard library, and Debian's ``chromium``. Chromium gets an empty profile and no
network: ``--host-resolver-rules`` answers every host name with "not found", so a page
that tried to fetch anything would fail to, and the recorded requests say it tried.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND", "--remote-debugging-pipe"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _above(fd: int, floor: int) -> int:
    """``fd`` moved to a descriptor number of at least ``floor``."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, floor)
    os.close(fd)
    return moved


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, executable: str, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="ddcli-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # the child's ends above 4, so that placing them at 3 and 4 overwrites neither
        to_child_r, from_child_w = (_above(fd, 10) for fd in (to_child_r, from_child_w))

        def child_fds():  # the protocol's descriptors: 3 (commands in) and 4 (answers out)
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=child_fds, pass_fds=(3, 4))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        self.session = None

    def __enter__(self) -> "Browser":
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Network.enable")
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.call("Browser.close", session=False)
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed its protocol pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: bool = True, **params) -> dict:
        """Send one command and wait for its answer (events met meanwhile are kept)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, event: str) -> dict:
        deadline = time.monotonic() + self.timeout
        for m in self.events:
            if m.get("method") == event:
                return m
        while True:
            m = self._read(deadline)
            self.events.append(m)
            if m.get("method") == event:
                return m

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, js: str):
        res = self.call("Runtime.evaluate", expression=js, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"JavaScript failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def requested_urls(self) -> list[str]:
        return [m["params"]["request"]["url"] for m in self.events if m.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: str, width: int = 1280, height: int = 1600) -> bytes:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        with open(path, "wb") as fh:
            fh.write(data)
        return data
