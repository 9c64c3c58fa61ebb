"""The code zip shipped to a cluster's executors (ops/spark/code_zip.py): built once
per content, and the zips of older versions deleted once no process used them for a day,
never one a running process holds."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

from ops.spark import code_zip

DAY = code_zip.CODE_ZIP_KEEP_SECONDS


def _make(path: str, age: float) -> str:
    with open(path, "wb") as fh:
        fh.write(b"PK\x05\x06" + b"\0" * 18)  # an empty zip
    t = time.time() - age
    os.utime(path, (t, t))
    return path


def test_stale_code_zips_are_deleted_but_not_the_current_a_recent_or_a_held_one(tmp_path, monkeypatch):
    monkeypatch.setattr(code_zip.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(code_zip, "_held_zips", [])
    cache = tmp_path / f"ddcli-code-{os.getuid()}"
    first = code_zip.code_zip()
    assert os.path.dirname(first) == str(cache)
    os.utime(first, (time.time() - 2 * DAY,) * 2)  # the current one, unused for two days: kept
    stale = _make(str(cache / "ddcli-00000000000000000000.zip"), 2 * DAY)
    recent = _make(str(cache / "ddcli-11111111111111111111.zip"), DAY / 2)
    held = _make(str(cache / "ddcli-22222222222222222222.zip"), 2 * DAY)
    dead_build = _make(str(cache / "abc.tmp"), 2 * DAY)
    other = _make(str(cache / "notes.txt"), 2 * DAY)
    # another process is running with the held zip (its shared lock, as code_zip takes)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys; fh = open(sys.argv[1], 'rb'); fcntl.flock(fh.fileno(), fcntl.LOCK_SH); "
        "print('held', flush=True); sys.stdin.read()"), held], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert code_zip.code_zip() == first
        left = set(os.listdir(cache))
    finally:
        holder.communicate("")
    assert left == {os.path.basename(p) for p in (first, recent, held, other)}
    assert time.time() - os.path.getmtime(first) < 60, "the current zip is marked used"
    assert not os.path.exists(stale) and not os.path.exists(dead_build)
    # released and still old: the next process deletes it
    assert code_zip.code_zip() == first and not os.path.exists(held)


def test_a_process_holds_its_code_zip_so_no_cleaner_deletes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(code_zip.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(code_zip, "_held_zips", [])
    path = code_zip.code_zip()
    os.utime(path, (time.time() - 2 * DAY,) * 2)
    removed = code_zip._remove_stale_zips(os.path.dirname(path), keep="")  # another version's cleaner
    assert removed == 0 and os.path.exists(path)
    with open(path, "rb") as fh:  # the lock is what kept it
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = False
        except BlockingIOError:
            locked = True
    assert locked
    for fh in code_zip._held_zips:
        fh.close()
    code_zip._held_zips.clear()
    assert code_zip._remove_stale_zips(os.path.dirname(path), keep="") == 1 and not os.path.exists(path)
