"""An OpenLineage receiver the lineage tests start: ``http.server`` in a thread."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """An OpenLineage HTTP receiver: every POSTed body, parsed, with its path; ``requests``:
    every request's method, path and ``Authorization`` header (``redirect``: a URL it answers
    every POST with a 302 to, after recording it)."""

    def __init__(self, redirect: str | None = None):
        events = self.events = []
        auth = self.auth = []
        requests = self.requests = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name; a client following a 302 comes as GET
                requests.append(("GET", self.path, self.headers.get("Authorization")))
                self.send_response(405)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):  # noqa: N802 - http.server's name
                requests.append(("POST", self.path, self.headers.get("Authorization")))
                body = self.rfile.read(int(self.headers["Content-Length"]))
                events.append((self.path, json.loads(body)))
                auth.append(self.headers.get("Authorization"))
                self.send_response(302 if redirect else 200)
                if redirect:
                    self.send_header("Location", redirect)
                    self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
