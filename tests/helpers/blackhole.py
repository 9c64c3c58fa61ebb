"""Endpoints that stop answering, for the tests of an object store that hangs.

* :func:`silent_endpoint` — a socket that listens and never accepts or answers: the
  connection is made (the kernel completes it) and the request is sent, then nothing.
* :class:`CuttingProxy` — forwards TCP to a real endpoint until the client has sent a
  number of bytes, then goes silent: every connection, old and new, stays open and
  nothing more is forwarded either way.
"""

from __future__ import annotations

import contextlib
import socket
import threading


@contextlib.contextmanager
def silent_endpoint():
    """``http://127.0.0.1:PORT`` of a listening socket that never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    try:
        yield f"http://127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


class CuttingProxy:
    """A TCP proxy to ``upstream`` (``http://host:port``) that goes silent once clients have
    sent more than ``cut_after`` bytes through it (``None``: never)."""

    def __init__(self, upstream: str, cut_after: int | None = None):
        host, _, port = upstream.split("://", 1)[1].partition(":")
        self.upstream = (host, int(port))
        self.cut_after = cut_after
        self.sent = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(128)
        self.endpoint = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def silent(self) -> bool:
        return self.cut_after is not None and self.sent > self.cut_after

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
            if self.silent():
                continue  # accepted, never answered
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self._sockets.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if from_client:
                with self._lock:
                    before = self.cut_after is not None and self.sent > self.cut_after
                    self.sent += len(data)
                    if before:
                        continue
                    if self.silent():  # the part up to the cut goes through, the rest never
                        data = data[:len(data) - (self.sent - self.cut_after - 1)]
            elif self.silent():
                continue
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._closed = True
        with self._lock:
            for s in [self._server] + self._sockets:
                with contextlib.suppress(OSError):
                    s.close()
