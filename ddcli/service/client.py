"""The client side of the warm engine: hand a command to the user's service, or decline.

:func:`forward` is the first thing the ``ddcli`` executable does. For a command the service
runs (``ddcli run``, ``ddcli verify``; a small ``ddcli ingest`` only when one is running)
with the warm engine on (``DDCLI_SERVICE``, default on)
and a local Spark master, it finds the service of the command's key
(ddcli/service/identity.py), starting one when there is none, sends it the command with
this process's working folder, environment and terminals, copies what the command writes
to this process's stdout and stderr as it comes, and returns the command's exit code.

It returns None — the command then runs in this process, exactly as without a service —
whenever the service cannot take it: turned off, a cluster master (a service would hold
the cluster's executors while idle), a folder that cannot be made private, a service busy
with another command, or one that did not start; one that does not answer within a few
seconds (stopped, stuck) is named in a ``warning:`` line. A service that dies during a
command is one ``error:`` line and exit code 1; the store holds the command's commit only
if it finished it (the commit protocol: nothing is ever half-written).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

from ddcli.service import folder as place
from ddcli.service import identity, protocol
from storage.processes import pid_alive

START_SECONDS = 90.0  # a new service may first wait for a predecessor of its key to stop
ANSWER_SECONDS = 5.0  # a live service answers a request at once (its own thread listens)
GRACE_SECONDS = 30.0  # after Ctrl-C, how long the service may take to stop the command
EXIT_INTERNAL, EXIT_INTERRUPTED = 1, 130
BUSY = "busy"  # the service's answer while it runs another command
SILENT = "silent"  # a service is there but did not answer within ANSWER_SECONDS (stopped, stuck)


def forward(argv: list[str]) -> int | None:
    """The exit code of ``ddcli ARGV`` run by the user's service; None to run it here. A
    small ingest goes to a service that is already running, and never starts one."""
    joining = identity.command_of(argv) is None
    if (joining and not identity.joins_running(argv)) or not hasattr(socket, "AF_UNIX"):
        return None
    env = _settings(identity.root_options(argv)[0].get("--config"))
    if env is None or not identity.enabled(env):
        return None
    master = identity.master_of(argv, env)
    if not identity.is_local(master):
        return None
    try:
        folder = place.private_folder(identity.service_dir(env))
        request = _request(argv, identity.idle_seconds(env))  # the service reads the configuration file itself
    except (place.FolderUnusable, OSError):
        return None
    key = identity.service_key(master, env, cache=folder)
    request["key"] = key
    path = place.socket_path(folder, key)
    if len(path) > place.MAX_SOCKET_PATH:
        return None
    channel = _accepted(path, request) if os.path.exists(path) else None
    if channel is None and joining:  # no service to join: the command's own process
        return None
    if channel is None:
        pid = start(folder, key, master, env)
        channel = _wait_for_service(path, request, pid) if pid else None
    if channel is SILENT:  # a second service of the key would only wait for this one to stop
        _warning(f"the ddcli service did not answer within {ANSWER_SECONDS:g} s; the command runs in this "
                 f"process (service log: {place.log_path(folder, key)})")
        return None
    if channel is None or channel is BUSY:
        return None
    return _relay(channel, folder, key, grace_seconds(env))


def _settings(explicit: str | None = None, environ=None) -> dict | None:
    """The environment (``environ``, else this process's) with the configuration file's
    settings under it (ddcli/config.py does the same as a command starts; ``explicit``:
    ``ddcli --config PATH``), so the key sees a Spark setting the file holds; None when the
    file is wrong (the command, run here, says how)."""
    from storage.settings import SettingError, config_path, read_config
    env = dict(os.environ if environ is None else environ)
    try:
        path = config_path(explicit)
        for name, text in (read_config(path) if path else {}).items():
            env.setdefault(name, text)
    except (SettingError, OSError):
        return None
    return env


def _request(argv: list[str], idle: float) -> dict:
    tty = {"stdout": _isatty(1), "stderr": _isatty(2)}
    size = None
    if tty["stdout"] or tty["stderr"]:
        try:
            size = list(os.get_terminal_size(1 if tty["stdout"] else 2))
        except OSError:
            size = None
        if size and min(size) <= 0:  # a terminal that does not know its size: Rich's default
            size = None
    return {"op": "command", "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
            "path0": sys.path[0] if sys.path else "", "tty": tty, "size": size,
            "encoding": {"stdout": _encoding(sys.stdout, "strict"), "stderr": _encoding(sys.stderr, "backslashreplace")},
            "umask": oct(identity.current_umask()), "idle": idle, "pid": os.getpid()}


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _encoding(stream, errors: str) -> list[str]:
    return [getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or errors]


def _connect(path: str) -> protocol.Channel | str | None:
    """A channel to the service listening at ``path``; None if none listens there,
    :data:`SILENT` if one does and took no connection within :data:`ANSWER_SECONDS`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_SECONDS)
        sock.connect(path)
    except socket.timeout:
        sock.close()
        return SILENT
    except OSError:
        sock.close()
        return None
    return protocol.Channel(sock)


def _accepted(path: str, request: dict) -> protocol.Channel | str | None:
    """A channel to the service at ``path`` that took ``request``; :data:`BUSY` when it
    declined (it runs another command); :data:`SILENT` when it did not answer within
    :data:`ANSWER_SECONDS`; None if there is no live service there."""
    channel = _connect(path)
    if not isinstance(channel, protocol.Channel):
        return channel
    try:
        channel.send_json(protocol.REQUEST, request)
        answer = channel.receive()
    except socket.timeout:
        channel.close()
        return SILENT
    except OSError:
        answer = None
    if answer is None or answer[0] != protocol.ACCEPTED:
        channel.close()
        return BUSY if answer is not None and answer[0] == protocol.BUSY else None
    channel.sock.settimeout(None)
    return channel


def start(folder: str, key: str, master: str, env) -> int | None:
    """Start the service ``key`` (ddcli/service/server.py), detached; its pid, or None."""
    import subprocess
    try:
        proc = subprocess.Popen([sys.executable, "-m", "ddcli.service.server", folder, key, master],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=identity.service_environment(env), cwd="/", start_new_session=True,
                                close_fds=True)
        out, _ = proc.communicate(timeout=30)  # the first child leaves once the service is forked
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _wait_for_service(path: str, request: dict, pid: int) -> protocol.Channel | str | None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if os.path.exists(path):
            channel = _accepted(path, request)
            if channel is not None:  # taken, busy, or a service there that does not answer
                return channel
        if not pid_alive(pid) and not os.path.exists(path):
            return None  # it could not start (its log says why), or found another one
        time.sleep(0.02)
    return None



class _Interrupts:
    """The client's Ctrl-C: the first is sent to the service, which stops the command."""

    def __init__(self, channel: protocol.Channel):
        self.channel = channel
        self.at: float | None = None

    def __call__(self, signum, frame) -> None:
        if self.at is None:
            self.at = time.monotonic()
            try:
                self.channel.send(protocol.INTERRUPT)
            except OSError:
                pass


def grace_seconds(env=os.environ) -> float:
    """After Ctrl-C, the seconds a service may take to stop its command before the client
    kills it (``DDCLI_SERVICE_GRACE``, default 30)."""
    try:
        value = float(env.get("DDCLI_SERVICE_GRACE") or GRACE_SECONDS)
    except ValueError:
        return GRACE_SECONDS
    return value if value > 0 else GRACE_SECONDS


def _relay(channel: protocol.Channel, folder: str, key: str, grace: float) -> int | None:
    """Copy the command's output to this process's stdout and stderr until its exit code;
    None when the service, having taken the command, declines it before running anything
    (its own code changed on disk): the command then runs in this process."""
    import select
    interrupts = _Interrupts(channel)
    previous = signal.signal(signal.SIGINT, interrupts)
    broken = False
    try:
        while True:
            if interrupts.at is not None:  # a Ctrl-C was sent: the command has ``grace`` seconds to stop
                left = grace - (time.monotonic() - interrupts.at)
                if left <= 0:
                    return _hung(folder, key, grace)
                channel.sock.settimeout(left)
            if not select.select([channel.sock], [], [], 0.5)[0]:
                continue
            try:
                frame = channel.receive()
            except socket.timeout:
                return _hung(folder, key, grace)
            except OSError:
                frame = None
            if frame is None:
                return _died(folder, key, interrupts.at is not None)
            kind, payload = frame
            if kind == protocol.STDOUT and not broken:
                broken = not _write(1, payload)
            elif kind == protocol.STDERR:
                _write(2, payload)
            elif kind == protocol.EXIT:
                code = int(protocol.decode(payload).get("code", EXIT_INTERNAL))
                return EXIT_INTERNAL if broken and code == 0 else code
            elif kind == protocol.BUSY:
                return None
    finally:
        signal.signal(signal.SIGINT, previous)
        channel.close()


def _write(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to ``fd``; False when its reader has gone (``ddcli run | head``)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            return False
        except OSError:
            return False
        view = view[n:]
    return True


def _line(text: str) -> None:
    _write(2, f"error: {text}\n".encode("utf-8", "replace"))


def _warning(text: str) -> None:
    _write(2, f"warning: {text}\n".encode("utf-8", "replace"))


def _died(folder: str, key: str, interrupted: bool) -> int:
    log = place.log_path(folder, key)
    if interrupted:
        _line("interrupted; the ddcli service stopped with the command: nothing of it was written unless it "
              f"had committed (service log: {log})")
        return EXIT_INTERRUPTED
    _line(f"the ddcli service stopped during the command: nothing of it was written unless it had committed; "
          f"run it again (service log: {log})")
    return EXIT_INTERNAL


def _hung(folder: str, key: str, grace: float) -> int:
    """The service did not stop an interrupted command in time: kill it (a commit is
    atomic, so killing leaves the store as a commit left it)."""
    pid = place.holder(folder, key)
    if pid and pid > 0:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _line(f"interrupted; the ddcli service did not stop the command within {grace:g} s and was "
          f"killed: nothing of it was written unless it had committed (service log: "
          f"{place.log_path(folder, key)})")
    return EXIT_INTERRUPTED


# ---------------------------------------------------------------- ddcli service status|stop


def ask(folder: str, key: str, op: str) -> dict | None:
    """A live service's answer to ``status`` or ``stop``; None if none answers."""
    channel = _connect(place.socket_path(folder, key))
    if not isinstance(channel, protocol.Channel):
        return None
    try:
        channel.send_json(protocol.REQUEST, {"op": op})
        answer = channel.receive()
    except OSError:
        return None
    finally:
        channel.close()
    if answer is None or answer[0] != protocol.STATUS:
        return None
    return protocol.decode(answer[1])


def own_key(folder: str, environ, explicit: str | None) -> str | None:
    """The key of the service a ``ddcli run`` with the environment ``environ`` in this
    working folder would use (``explicit``: ``ddcli --config PATH``; None: the configuration
    file is wrong)."""
    env = _settings(explicit, environ)
    if env is None:
        return None
    return identity.service_key(identity.master_of([], env), env, cache=folder if os.path.isdir(folder) else None)


def stop(folder: str, key: str, wait: float = 60.0) -> bool:
    """Stop the service ``key`` and wait until it is gone (killed after ``wait`` seconds);
    True if one was running."""
    pid = place.holder(folder, key)
    if pid is None:
        return False
    ask(folder, key, "stop")
    deadline = time.monotonic() + wait
    while place.holder(folder, key) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if place.holder(folder, key) is not None and pid > 0:
        try:
            os.kill(pid, signal.SIGKILL)  # a commit is atomic: killing leaves no half-written data
        except OSError:
            pass
        while place.holder(folder, key) is not None and time.monotonic() < deadline + 10:
            time.sleep(0.05)
    return True
