"""``ddcli --version``: what a bug report needs to say what ran, one line each.

Fast and without a JVM: the Python packages' versions come from their installed metadata
(nothing is imported), Java's from ``java -version`` of the Java Spark would start
(``$JAVA_HOME/bin/java``, else ``java`` on the PATH, as Spark's launcher chooses).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from importlib import metadata

PACKAGES = ("ddcli", "pyspark", "duckdb", "pyarrow", "deltalake")
JAVA_SECONDS = 10  # a JVM printing its version takes well under a second; a broken one may hang


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        exe = os.path.join(home, "bin", "java")
        return exe if os.access(exe, os.X_OK) else None
    return shutil.which("java")


def java_version() -> str:
    """``17.0.15 (/usr/lib/jvm/…/bin/java)``, or what is wrong with the Java Spark would use."""
    exe = java_executable()
    if exe is None:
        where = f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java" if os.environ.get("JAVA_HOME") \
            else "no java on the PATH and JAVA_HOME is not set"
        return f"not found ({where}; Spark needs Java 17 or later)"
    try:
        res = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=JAVA_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unusable ({exe}: {e})"
    m = re.search(r'version "([^"]+)"', res.stderr + res.stdout)
    return f"{m.group(1) if m else 'unknown version'} ({os.path.realpath(exe)})"


def version_lines() -> list[str]:
    return [f"ddcli {package_version('ddcli')}",
            f"Python {platform.python_version()} ({platform.python_implementation()})",
            *(f"{name} {package_version(name)}" for name in PACKAGES[1:]),
            f"Java {java_version()}"]
