"""One client's command, run inside the service's process as if it ran in the client's.

A command reads the process's working folder, environment, search path and standard
streams, and its Spark tasks read their own environment. For the length of one command
the service takes all of them from the client — its folder, its whole environment, its
``sys.path[0]``, its umask, streams that carry what the command writes back to the
client's stdout and stderr as it is written (and say whether the client's are terminals),
and the ``DDCLI_*``/``AWS_*`` variables for the tasks — then puts its own back. What the
process's object-store clients learnt of their endpoints in the last command is forgotten
(storage/blobs/resolve.py builds a client per bucket and settings). Modules a
pipeline file imported from the user's folders are forgotten afterwards, so the next run
reads them again, as a new process would.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import time

from ddcli.service import protocol
from ddcli.service.identity import task_environment


class ClientStream(io.RawIOBase):
    """The write end of the client's stdout or stderr: bytes go to the client as frames.

    A client that has gone away loses what is written after (the service stops the
    command: see ddcli/service/server.py); the command never sees an error for it.
    """

    def __init__(self, channel: protocol.Channel, kind: bytes, tty: bool):
        super().__init__()
        self.channel, self.kind, self.tty = channel, kind, tty
        self.gone = False

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.tty

    def write(self, data) -> int:
        data = bytes(data)
        if data and not self.gone:
            try:
                self.channel.send(self.kind, data)
            except OSError:
                self.gone = True
        return len(data)


def text_stream(channel: protocol.Channel, kind: bytes, tty: bool, encoding: str, errors: str) -> io.TextIOWrapper:
    """A ``sys.stdout``-like stream to the client: line-buffered, in the client's encoding,
    with ``.buffer`` for binary output."""
    raw = ClientStream(channel, kind, tty)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errors, line_buffering=True)


@contextlib.contextmanager
def client_command(request: dict, channel: protocol.Channel):
    """Within the block, the process looks like the client's: its folder, environment,
    search path, umask and streams (see the module's docstring)."""
    from ops.spark import session
    from ops.spark.user_code import forget_user_modules
    from storage import faults
    from storage.blobs import resolve

    tty, encoding = request.get("tty", {}), request.get("encoding", {})
    env = dict(request["env"])
    size = request.get("size")
    if size and "COLUMNS" not in env:  # what Rich would read from the client's terminal
        env["COLUMNS"], env["LINES"] = str(size[0]), str(size[1])
    saved_env, saved_cwd, saved_path0 = dict(os.environ), os.getcwd(), sys.path[0]
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_umask = os.umask(int(request.get("umask", "0o022"), 8))
    before = set(sys.modules)
    out = text_stream(channel, protocol.STDOUT, bool(tty.get("stdout")), *encoding.get("stdout", ("utf-8", "strict")))
    err = text_stream(channel, protocol.STDERR, bool(tty.get("stderr")),
                      *encoding.get("stderr", ("utf-8", "backslashreplace")))
    stdin = open(os.devnull, encoding="utf-8")
    try:
        os.environ.clear()
        os.environ.update(env)
        time.tzset()
        os.chdir(request["cwd"])
        sys.path[0] = request.get("path0", sys.path[0])
        sys.stdin, sys.stdout, sys.stderr = stdin, out, err
        importlib.invalidate_caches()  # a module file created since the last command is found
        faults.reset()
        resolve.new_command()
        session.start_command(task_environment(env))
        yield
    finally:
        for stream in (out, err):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        stdin.close()
        os.umask(saved_umask)
        sys.path[0] = saved_path0
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        time.tzset()
        forget_user_modules(before)
