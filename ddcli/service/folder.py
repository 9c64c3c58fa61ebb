"""Where a user's services live: one private folder of sockets, locks and logs.

The folder is the only protection a Unix socket has (there is no TCP port): it is created
with mode 0700 and used only while it belongs to this user and nobody else may enter it,
so only the user's own processes can reach a service. Each service ``KEY`` has

* ``KEY.sock``: its socket;
* ``KEY.lock``: a file it holds an exclusive ``flock`` on for as long as it lives (the
  kernel drops it when the process dies, however it dies), holding its pid;
* ``KEY.log``: what it and its JVM print (never a terminal: the service is detached).

and ``code-STATUS`` files hold the hash of a version of ddcli's code, named by its files'
status (ddcli/service/identity.py), so that a client need not read the files each time.
"""

from __future__ import annotations

import os
import stat


class FolderUnusable(Exception):
    """The service folder cannot be made private (another owner, or not a folder)."""


# a Unix socket's path must fit in sun_path (108 bytes on Linux, 104 on macOS)
MAX_SOCKET_PATH = 100


def private_folder(path: str) -> str:
    """``path``, created with mode 0700 if missing; refused unless it is this user's and
    private (a looser mode of the user's own folder is tightened)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        raise FolderUnusable(f"{path}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise FolderUnusable(f"{path} is not a folder")
    if st.st_uid != os.getuid():
        raise FolderUnusable(f"{path} belongs to another user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        try:
            os.chmod(path, 0o700)
        except OSError as e:
            raise FolderUnusable(f"{path} is open to others and cannot be made private: {e.strerror}") from None
    return path


def socket_path(folder: str, key: str) -> str:
    return os.path.join(folder, f"{key}.sock")


def lock_path(folder: str, key: str) -> str:
    return os.path.join(folder, f"{key}.lock")


def log_path(folder: str, key: str) -> str:
    return os.path.join(folder, f"{key}.log")


def keys(folder: str) -> list[str]:
    """The keys of the services that have a lock file in ``folder`` (alive or not)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(n[:-len(".lock")] for n in names if n.endswith(".lock"))


def holder(folder: str, key: str) -> int | None:
    """The pid of the live service ``key``, or None when no process holds its lock."""
    import fcntl
    try:
        fd = os.open(lock_path(folder, key), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
