"""The warm engine: a user's ddcli service, which runs ``ddcli run`` and ``ddcli verify``
commands one after another on one Spark session (docs/architecture.md, "The warm engine").

Started by a client (ddcli/service/client.py) as ``python -m ddcli.service.server FOLDER
KEY``, it detaches at once: a second fork leaves it in a session of its own with no
terminal, stdin from /dev/null, and stdout and stderr (its own and its JVM's) in
``FOLDER/KEY.log``; so it never keeps a terminal, a cron job or a CI step waiting. It
holds ``FOLDER/KEY.lock`` for its whole life and listens on ``FOLDER/KEY.sock``.

One command at a time: a command's working folder, environment and streams are the
process's (ddcli/service/command.py), and so is Spark's session configuration, so a
second client that comes while a command runs is told the service is busy and runs in
a process of its own — exactly what it would do with no service; commands on the same
store then meet the store's usual lease and commit rules. A client's Ctrl-C, or a client
that goes away, interrupts its command as Ctrl-C interrupts a command in its own process
(jobs cancelled, nothing committed, exit 130), and the session stays warm. After its
first command that started Spark, it warms up once (ddcli/service/warm_up.py). After
``DDCLI_SERVICE_IDLE`` seconds (of the last client) without a command, or on
``ddcli service stop``, the service stops.

Each command runs on the current code: the user's modules are imported again by each
command (ddcli/service/command.py), and the code the service keeps (ddcli's, the
libraries') is checked before each: when a file of it changed since the service imported
it (a package upgraded, a file of the checkout edited back to its old content), the
service declines the command, as a busy one does, and stops; the client runs the command
in its own process, and the next command starts a service that imports the new code.
"""

from __future__ import annotations

import fcntl
import functools
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time

from ddcli.service import folder as place
from ddcli.service import protocol
from ddcli.service import identity
from ddcli.service.identity import DEFAULT_IDLE_SECONDS
from ops.spark.user_code import KeptFiles

# each distinct environment a command's tasks get starts a set of Python workers that lives
# as long as the session: a service that has started this many retires after its command
MAX_WORKER_SETS = 8
LOCK_WAIT_SECONDS = 60.0  # a predecessor of the same key may still be stopping
MAX_LOG_BYTES = 4 << 20


def log(message: str) -> None:
    """A line in the service's log (its own stderr, never a client's)."""
    stream = sys.__stderr__
    if stream is not None:
        stream.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {message}\n")
        stream.flush()


class Service:
    """A listening service: greets clients on a thread each, runs commands on the main
    thread (Python runs signal handlers there, and a command's Ctrl-C is a signal)."""

    def __init__(self, folder: str, key: str, master: str, listener: socket.socket):
        self.folder, self.key, self.master, self.listener = folder, key, master, listener
        self.idle = DEFAULT_IDLE_SECONDS
        self.started = time.time()
        self.last_used = time.monotonic()
        self.commands = 0
        self.busy = False  # a command is accepted or running
        self.running = False  # a command runs now: a Ctrl-C goes to it
        self.current: protocol.Channel | None = None  # the channel of the command that runs
        self.stopping = False
        self.lock = threading.RLock()  # also taken by signal handlers, on the main thread
        self.work: queue.Queue = queue.Queue()
        self.main_thread = threading.get_ident()
        self.worker_sets: set[int] = set()
        self.warm_up = None  # ddcli/service/warm_up.py: started once, after the first command
        self.kept = KeptFiles()  # the files of the modules the service keeps between commands
        self.kept.remember()

    # ------------------------------------------------------------ clients

    def accept_forever(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # the listener closed: the service is stopping
                return
            threading.Thread(target=self.greet, args=(conn,), name="ddcli-service-greet", daemon=True).start()

    def greet(self, conn: socket.socket) -> None:
        channel = protocol.Channel(conn)
        try:
            if not _same_user(conn):
                channel.close()
                return
            conn.settimeout(10)
            frame = channel.receive()
            if frame is None or frame[0] != protocol.REQUEST:
                channel.close()
                return
            request = protocol.decode(frame[1])
            op = request.get("op")
            if op == "status":
                channel.send_json(protocol.STATUS, self.describe())
            elif op == "stop":
                self.stop("ddcli service stop")
                channel.send_json(protocol.STATUS, self.describe())
            elif op == "command":
                with self.lock:
                    take = not (self.busy or self.stopping) and request.get("key") == self.key
                    if take:
                        self.busy = True
                    busy = self.busy and not self.stopping
                if take:
                    # taken at once, from this thread: the client knows the service is alive
                    # while its command waits for the main thread (a warm-up may hold it)
                    conn.settimeout(None)
                    try:
                        channel.send(protocol.ACCEPTED)
                    except OSError:
                        with self.lock:
                            self.busy = False
                        raise
                    self.work.put((channel, request))
                    return
                if busy:  # the client runs the command itself; a service that stops says nothing,
                    channel.send(protocol.BUSY)  # and the client starts its successor
            channel.close()
        except (OSError, ValueError) as e:
            log(f"a client's request failed: {e}")
            channel.close()

    def stop(self, why: str) -> None:
        """Stop after the command that runs now, which is interrupted."""
        with self.lock:
            if self.stopping:
                return
            self.stopping = True
            log(f"stopping: {why}")
            if self.running:
                signal.pthread_kill(self.main_thread, signal.SIGINT)
        self.work.put(None)

    def describe(self) -> dict:
        import pyspark

        from ddcli import __version__
        from ops.spark import session
        left = max(0.0, self.idle - (time.monotonic() - self.last_used))
        return {"key": self.key, "pid": os.getpid(), "state": "stopping" if self.stopping else
                ("busy" if self.busy else "idle"), "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
                "uptime_seconds": round(time.time() - self.started, 1), "commands": self.commands,
                "idle_seconds": self.idle, "stops_in_seconds": None if self.busy else round(left, 1),
                "spark": session._session is not None, "master": self.master,
                "python": sys.version.split()[0], "pyspark": pyspark.__version__, "ddcli": __version__,
                "log": place.log_path(self.folder, self.key)}

    # ------------------------------------------------------------ commands

    def serve(self) -> None:
        """Run commands as they come until idle for ``self.idle`` seconds, or stopped."""
        signal.signal(signal.SIGINT, self.on_sigint)
        signal.signal(signal.SIGTERM, lambda signum, frame: self.stop("SIGTERM"))
        threading.Thread(target=self.accept_forever, name="ddcli-service-accept", daemon=True).start()
        log(f"listening on {place.socket_path(self.folder, self.key)}")
        while True:
            try:
                item = self.work.get(timeout=max(0.05, self.idle - (time.monotonic() - self.last_used)))
            except queue.Empty:
                with self.lock:
                    if self.busy or time.monotonic() - self.last_used < self.idle:
                        continue
                    self.stopping = True
                log(f"stopping: idle for {self.idle:g} s")
                self.end_warm_up(cancel=True)
                return
            if item is None:
                self.end_warm_up(cancel=True)
                return
            self.end_warm_up()
            self.run_command(*item)
            if self.warm_up is None and self.master.startswith("local") and spark_running():
                self.start_warm_up(item[1])

    def on_sigint(self, signum, frame) -> None:
        """A Ctrl-C a client sent: its command's (ops/spark/session.py cancels its jobs);
        one that arrives after its command ended is dropped."""
        if self.running:
            from ops.spark import session
            session.on_interrupt(signum, frame)

    def run_command(self, channel: protocol.Channel, request: dict) -> None:
        from ddcli.service.command import client_command
        changed = self.kept.first_changed()
        if changed is not None:
            self.decline(channel, f"{changed} changed since the service imported it")
            return
        started, started_ns = time.monotonic(), time.time_ns()
        from ops.operators import keyed_reads
        keyed_reads.command_started()
        self.idle = float(request.get("idle") or self.idle)
        argv = [str(a) for a in request.get("argv", [])]
        code = 1
        released = False

        def release() -> None:
            # before the client hears the exit code: its next command must find the service
            # free (it waits in the queue while this thread tidies up), never busy
            nonlocal released
            if not released:
                released = True
                with self.lock:
                    self.busy = False
                    self.last_used = time.monotonic()

        try:
            watcher = threading.Thread(target=self.watch_client, args=(channel,), name="ddcli-service-watch",
                                       daemon=True)
            with client_command(request, channel):
                with self.lock:
                    self.running, self.current = True, channel
                watcher.start()
                try:
                    code = _run_cli(argv)
                finally:
                    with self.lock:
                        self.running, self.current = False, None
            release()
            channel.send_json(protocol.EXIT, {"code": code})
        except OSError as e:  # the client went away; its command was interrupted
            log(f"client of pid {request.get('pid')} went away: {e}")
        except BaseException as e:  # noqa: BLE001 - the service outlives any one command
            log(f"command {argv[:1]} failed in the service: {type(e).__name__}: {e}")
            _try(lambda: channel.send(protocol.STDERR, f"error: internal error in the ddcli service: {e}\n".encode()))
            release()
            _try(lambda: channel.send_json(protocol.EXIT, {"code": 1}))
        finally:
            channel.close()
            self.commands += 1
            log(f"ran {identity.root_options(argv)[1] or ' '.join(argv[:1])} for pid {request.get('pid')} in "
                f"{request.get('cwd')}: exit {code} in {time.monotonic() - started:.2f} s; "
                f"{keyed_reads.held_summary()}")
            _tidy()
            release()
            self.kept.remember(since_ns=started_ns)
            self.count_worker_sets(request)

    def decline(self, channel: protocol.Channel, why: str) -> None:
        """Send the client to run its command in its own process (the answer a busy service
        gives), and stop."""
        self.stop(why)
        with self.lock:
            self.busy = False
        _try(lambda: channel.send(protocol.BUSY))
        channel.close()

    def start_warm_up(self, request: dict) -> None:
        from ddcli.service.identity import task_environment
        from ddcli.service.warm_up import WarmUp
        self.warm_up = WarmUp(self.folder, self.key, task_environment(request.get("env", {})), log)
        self.warm_up.start()

    def end_warm_up(self, cancel: bool = False) -> None:
        """Before a command: let the warm-up finish; when stopping: cut it short."""
        if self.warm_up is None:
            return
        if cancel:
            self.warm_up.cancel()
        else:
            self.warm_up.wait()

    def count_worker_sets(self, request: dict) -> None:
        from ddcli.service.identity import task_environment
        self.worker_sets.add(hash(frozenset(task_environment(request.get("env", {})).items())))
        if len(self.worker_sets) >= MAX_WORKER_SETS:
            self.stop(f"{len(self.worker_sets)} sets of Python workers (one per environment of tasks) started")

    def watch_client(self, channel: protocol.Channel) -> None:
        """While a command runs, wait for its client's Ctrl-C (or the client going away)
        and interrupt the command on the main thread."""
        try:
            while True:
                frame = channel.receive()
                if frame is None or frame[0] == protocol.INTERRUPT:
                    break
        except OSError:
            pass
        with self.lock:
            # only its own command: a client that hangs up after its exit code must not
            # interrupt the next client's command, which may already run
            if self.running and self.current is channel:
                signal.pthread_kill(self.main_thread, signal.SIGINT)


@functools.lru_cache(maxsize=1)
def _cli_command():
    """The command line as a Click command, built once: Typer reads every command's
    signature and type hints to build it (0.2-0.4 s), and the service runs many commands."""
    import typer

    from ddcli.cli import app
    return typer.main.get_command(app)


def _run_cli(argv: list[str]) -> int:
    code = _cli_command().main(args=argv, prog_name="ddcli", standalone_mode=False)
    return code if isinstance(code, int) else 0


def spark_running() -> bool:
    from ops.spark.session import running_spark
    return running_spark() is not None


def _tidy() -> None:
    """Between commands: free what the last one left (its frames' JVM objects, and with
    them Spark's shuffle files and cached blocks), then freeze what survives (the session,
    modules, caches) out of the garbage collector's view: a full collection during a
    command would scan it all (~15 ms a run, in whichever allocation set it off). Unfrozen
    first, so what an earlier command left frozen is collected once it is garbage."""
    import gc
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _try(fn) -> None:
    try:
        fn()
    except OSError:
        pass


def _same_user(conn: socket.socket) -> bool:
    """The peer runs as this user (the folder already says so; this checks it again)."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    creds = conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


def _take_lock(folder: str, key: str) -> int | None:
    """Hold the service's lock (waiting for a predecessor that is still stopping); None
    when another service of this key is running."""
    fd = os.open(place.lock_path(folder, key), os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline or os.path.exists(place.socket_path(folder, key)):
                os.close(fd)  # a live service answers there: this one is not needed
                return None
            time.sleep(0.05)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _listen(folder: str, key: str) -> socket.socket:
    path = place.socket_path(folder, key)
    try:
        os.unlink(path)  # a dead predecessor's (we hold the lock: no live one has it)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mask = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(mask)
    sock.listen(16)
    return sock


def _detach(folder: str, key: str) -> None:
    """Fork once more (the client waits for the first child only) and send this process's
    output to the log; tell the client the service's pid on the pipe it gave as stdout."""
    pid = os.fork()
    if pid:
        os.write(1, f"{pid}\n".encode())
        os._exit(0)
    path = place.log_path(folder, key)
    with open(path, "ab") as fh:
        if fh.tell() > MAX_LOG_BYTES:
            fh.truncate(0)
        for fd in (1, 2):
            os.dup2(fh.fileno(), fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir("/")


def main(argv: list[str] | None = None) -> None:
    folder, key, master = (argv if argv is not None else sys.argv[1:])[:3]
    _detach(folder, key)
    lock = _take_lock(folder, key)
    if lock is None:
        log("another service of this key is running: not starting")
        return
    listener = _listen(folder, key)
    from ops.operators import keyed_reads
    from ops.spark import session
    session.keep_warm()
    keyed_reads.enable()  # commands after commands read the same layers by key
    service = Service(folder, key, master, listener)
    log(f"started: python {sys.version.split()[0]}, code in {os.path.dirname(os.path.dirname(__file__))}")
    try:
        service.serve()
    finally:
        listener.close()
        try:
            os.unlink(place.socket_path(folder, key))
        except FileNotFoundError:
            pass
        session.stop_spark()
        log("stopped")
        os.close(lock)


if __name__ == "__main__":
    main()
