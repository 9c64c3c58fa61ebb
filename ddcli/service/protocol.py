"""What a client and its service say to each other over the service's Unix socket.

A message is a frame: one byte naming its kind, four bytes of length (big-endian), then
that many bytes. The client opens with a request (JSON); the service answers whether it
takes the command, then streams the command's output as it is written and ends with its
exit code. While the command runs the client may send an interrupt (the user's Ctrl-C);
a client that goes away is taken as one too.
"""

from __future__ import annotations

import json
import socket
import struct
import threading

REQUEST = b"R"  # client -> service: JSON {"op": "command" | "status" | "stop", ...}
ACCEPTED = b"A"  # service -> client: the command is taken (it runs once the service is free)
BUSY = b"B"  # service -> client: not now, another command runs (the client runs it itself)
STATUS = b"S"  # service -> client: JSON of what the service is
STDOUT = b"O"  # service -> client: bytes the command wrote to its stdout
STDERR = b"E"  # service -> client: bytes the command wrote to its stderr
EXIT = b"X"  # service -> client: JSON {"code": n}; the command is over
INTERRUPT = b"I"  # client -> service: the user pressed Ctrl-C

_HEADER = struct.Struct(">cI")
MAX_FRAME = 64 << 20


class Channel:
    """Frames over one connected socket; sending is safe from several threads."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        with self._send_lock:
            self.sock.sendall(_HEADER.pack(kind, len(payload)) + payload)

    def send_json(self, kind: bytes, value: dict) -> None:
        self.send(kind, json.dumps(value).encode("utf-8"))

    def receive(self) -> tuple[bytes, bytes] | None:
        """The next frame ``(kind, payload)``; None when the other side has closed."""
        header = self._exactly(_HEADER.size)
        if header is None:
            return None
        kind, size = _HEADER.unpack(header)
        if size > MAX_FRAME:
            raise ConnectionError(f"a frame of {size} bytes: not a ddcli service")
        payload = self._exactly(size) if size else b""
        if payload is None:
            return None
        return kind, payload

    def _exactly(self, n: int) -> bytes | None:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(min(n - got, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def decode(payload: bytes) -> dict:
    return json.loads(payload.decode("utf-8"))
