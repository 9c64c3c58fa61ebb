"""The driver's class-data archive (ops/spark/class_archive.py): written once by a run that exits
cleanly, used by later runs, and never a reason for a run to fail or to print more."""

from __future__ import annotations

import os
import time

import pytest

from ops.spark import class_archive
from tests.helpers.operations import PIPELINES, REPO, run_ddcli

WORDCOUNT = os.path.join(PIPELINES, "wordcount.py")
SAMPLE = os.path.join(REPO, "sample_data")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("DDCLI_CACHE_DIR", str(folder))
    monkeypatch.delenv("DDCLI_SPARK_CDS", raising=False)
    return folder


def test_off_by_switch_and_a_first_run_writes_to_a_file_of_its_own(cache, monkeypatch):
    monkeypatch.setenv("DDCLI_SPARK_CDS", "0")
    assert class_archive.plan().options == ""
    monkeypatch.setenv("DDCLI_SPARK_CDS", "1")
    first, second = class_archive.plan(), class_archive.plan()
    assert "-XX:ArchiveClassesAtExit=" in first.options and "SharedArchiveFile" not in first.options
    assert first.pending != second.pending  # concurrent first runs never write one file
    assert os.path.dirname(first.pending) == str(cache)
    assert "-Xlog:disable" in first.options  # the JVM's warnings never reach ddcli's stdout


def test_an_archive_is_used_only_when_its_size_is_the_one_in_its_name(cache):
    stem = class_archive.archive_stem()
    os.makedirs(cache, exist_ok=True)
    cut = f"{stem}-1000.jsa"
    with open(cut, "wb") as fh:
        fh.write(b"x" * 400)  # cut short: the JVM would crash mapping it
    assert class_archive.installed_archive(stem) is None
    assert "ArchiveClassesAtExit" in class_archive.plan().options
    whole = f"{stem}-400.jsa"
    os.replace(cut, whole)
    plan = class_archive.plan()
    assert plan.path == whole and f"-XX:SharedArchiveFile={whole}" in plan.options
    class_archive.discard(plan)
    assert not os.path.exists(whole)


def test_unfinished_archives_are_removed_once_no_jvm_can_be_writing_them(cache):
    stem = class_archive.archive_stem()
    os.makedirs(cache, exist_ok=True)
    old, fresh = f"{stem}.1.1.tmp", f"{stem}.2.2.tmp"
    for path in (old, fresh):
        open(path, "wb").close()
    past = time.time() - class_archive.STALE_SECONDS - 60
    os.utime(old, (past, past))
    class_archive.plan()
    assert not os.path.exists(old) and os.path.exists(fresh)


class _Exited:
    """A stand-in for the JVM's process: exits with ``code`` when its stdin closes."""

    def __init__(self, code: int):
        self.code, self.stdin = code, None

    def wait(self, timeout=None):
        return self.code


def test_finish_installs_only_what_a_cleanly_exited_jvm_wrote(cache):
    for code, installed in ((1, False), (0, True)):
        plan = class_archive.plan()
        with open(plan.pending, "wb") as fh:
            fh.write(b"a" * 123)
        assert class_archive.finish(plan, _Exited(code)) is installed
        assert not os.path.exists(plan.pending)
    assert class_archive.installed_archive(class_archive.archive_stem()).endswith("-123.jsa")


def test_an_install_removes_the_other_archives_of_its_stem_and_long_superseded_ones(cache):
    stem = class_archive.archive_stem()
    os.makedirs(cache, exist_ok=True)
    racing = f"{stem}-77.jsa"  # a concurrent first run installed its own
    other = os.path.join(str(cache), "spark-driver-0.0.0-0123456789abcdef")
    recent, old = f"{other}-5.jsa", f"{other}-6.jsa".replace("0123", "4567")
    for path, size in ((racing, 77), (recent, 5), (old, 6)):
        with open(path, "wb") as fh:
            fh.write(b"z" * size)
    past = time.time() - (class_archive.SUPERSEDED_DAYS + 1) * 24 * 3600
    os.utime(old, (past, past))
    plan = class_archive.plan()
    assert plan.path == racing  # while one is installed, it is used
    os.remove(racing)
    plan = class_archive.plan()
    with open(plan.pending, "wb") as fh:
        fh.write(b"b" * 50)
    with open(racing, "wb") as fh:  # another first run installs meanwhile
        fh.write(b"z" * 77)
    assert class_archive.finish(plan, _Exited(0))
    left = sorted(os.path.basename(p) for p in os.listdir(cache))
    assert left == sorted([os.path.basename(f"{stem}-50.jsa"), os.path.basename(recent)]), left


@pytest.mark.slow
def test_real_runs_write_the_archive_use_it_and_survive_a_damaged_one(tmp_path):
    """Three real ``ddcli run`` processes on a fresh cache: the first writes the archive as
    its JVM exits, the second maps it, the third finds it damaged (cut short, renamed to
    its new size as if the JVM had written it so), starts without it and drops it. Every
    run's output is the same as without any archive, and nothing of the JVM's reaches
    stdout or stderr."""
    store, folder = str(tmp_path / "store"), str(tmp_path / "cache")
    env = {"DDCLI_CACHE_DIR": folder, "DDCLI_SERVICE": "0"}  # each run's own JVM writes or maps the archive
    words = [os.path.join(SAMPLE, "words_1.csv"), os.path.join(SAMPLE, "words_2.csv")]

    def run(*args):
        res = run_ddcli(["run", WORDCOUNT, *args], store, env=env, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        # stderr holds the run's progress lines (not a terminal: plain) and nothing of the JVM's
        assert all(line.startswith("· ") for line in res.stderr.splitlines()), res.stderr
        assert res.stdout.startswith("pipeline 'wordcount' ran"), res.stdout + res.stderr
        return res

    assert run_ddcli(["ingest", "words", words[0]], store).returncode == 0
    run()
    stem = os.path.join(folder, os.path.basename(class_archive.archive_stem()))
    archive = class_archive.installed_archive(stem)
    assert archive, os.listdir(folder)
    assert [n for n in os.listdir(folder) if n.endswith(".tmp")] == []

    assert run_ddcli(["ingest", "words", words[1]], store).returncode == 0
    run()
    assert class_archive.installed_archive(stem) == archive  # used, not rewritten

    with open(archive, "rb") as fh:
        head = fh.read(os.path.getsize(archive) // 3)
    os.remove(archive)
    damaged = f"{stem}-{len(head)}.jsa"
    with open(damaged, "wb") as fh:
        fh.write(head)
    res = run("--rebuild-all")  # everything again, from the inputs' since
    assert "11 new input updates -> counts (+14 updates)" in res.stdout
    assert not os.path.exists(damaged)
