"""An Airflow DAG that keeps a ddcli store up to date: ingest, advance, run, compact.

Every task is one ``ddcli`` command in a BashOperator, so the DAG does nothing a shell or
cron job could not do (see "Operating ddcli" in README.md). Copy this file into your
``dags/`` folder and set, in the workers' environment:

* ``DDCLI_STORE``     the store (a directory every worker sees);
* ``DDCLI_INCOMING``  where update files arrive (default: the repository's ``sample_data``);
* ``DDCLI_PIPELINES`` where the pipeline files are (default: ``sample_data/pipelines``);
* ``DDCLI_BIN``       the ddcli command (default: ``ddcli`` on the workers' PATH).

How the tasks use ddcli's exit codes:

* ``ingest`` and ``run`` pass ``--strict-noop``: when no new file arrived or a pipeline
  has nothing to process they exit 4, which the task maps to *skipped*
  (``skip_on_exit_code=4``) — a green-but-grey box says "nothing new" at a glance;
* exit 3 is a conflict with a concurrent command (another DAG run, a manual run): nothing
  was written and the task's retries run it again safely;
* exit 2 is a user error (a bad file: the one-line message names file, row and value) and
  exit 1 an internal error: both fail the task; retrying a bad file fails the same way.

Downstream tasks use ``trigger_rule="none_failed"`` so a skipped ingest (nothing arrived)
does not skip the runs or the compaction. Tasks only ever add new commits to the store;
there are no locks to clean up after a killed worker, and the rerun of a killed task does
exactly the work that is still missing.

Re-ingesting a file is a no-op (ddcli remembers every file it ingested by its content),
so files can stay in the incoming folder; move them away once ingested to keep each
ingest's reading short.
"""

from __future__ import annotations

import os
import shlex
from datetime import datetime, timedelta

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.operators.bash import BashOperator

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.dirname(HERE)

STORE = os.environ.get("DDCLI_STORE", "/var/lib/ddcli/store")
INCOMING = os.environ.get("DDCLI_INCOMING", SAMPLE)
PIPELINES = os.environ.get("DDCLI_PIPELINES", os.path.join(SAMPLE, "pipelines"))
DDCLI = os.environ.get("DDCLI_BIN", "ddcli")

# Input traces: the glob of their arriving update files (under INCOMING) and the options of
# their first ingest. A trace of product times (d >= 2) is sealed by its ``advance``: the
# store cannot guess when a partially ordered time is complete.
TRACES = {
    "words": {"files": "words_[0-9]*.csv"},
    "orders": {"files": "orders_[0-9]*.csv", "ingest": "--key customer"},
    "customers": {"files": "customers_[0-9]*.csv"},
    "strings": {"files": "strings_[0-9]*.csv"},
}
# What each trace's ``advance`` does after the ingest: seal times and/or allow compaction.
# Pipelines hold the history they still need, so a since here never loses anything a
# run has not processed yet.
ADVANCE = {
    "words": "--since 3",
    "strings": '--upper "(2,0)"',
}
# Pipelines and the input traces they read.
RUNS = {
    "wordcount": ["words"],
    "length_count": ["strings"],
    "join_example": ["orders", "customers"],
}

NOTHING_TO_DO = 4  # ddcli's exit code for "nothing to do" under --strict-noop


def ddcli(*args: str) -> str:
    """The shell command line `ddcli ARGS --store STORE`."""
    return " ".join([DDCLI, *args, "--store", shlex.quote(STORE)])


def ingest_command(trace: str, spec: dict) -> str:
    """Ingest every file that matches the trace's glob; exit 4 when none matches or every
    one was ingested before (the task is then skipped).

    Airflow renders bash_command with Jinja, so the command avoids ``{{``, ``{%`` and ``{#``."""
    return (
        f"shopt -s nullglob; set -- {shlex.quote(INCOMING)}/{spec['files']}; "
        f"[ $# -gt 0 ] || exit {NOTHING_TO_DO}; "
        + ddcli("ingest", trace, '"$@"', *spec.get("ingest", "").split(), "--strict-noop", "--json")
    )


default_args = {
    "retries": 3,  # exit 3 (a conflict) is always safe to retry
    "retry_delay": timedelta(seconds=30),
    "execution_timeout": timedelta(hours=2),
}

with DAG(
    dag_id="ddcli",
    description="Keep a ddcli store up to date: ingest arriving files, advance, run pipelines, compact.",
    schedule=timedelta(hours=1),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,  # not needed for safety (commits are optimistic), only to avoid wasted work
    default_args=default_args,
    tags=["ddcli"],
) as dag:
    ready = {}
    for trace, spec in TRACES.items():
        ingest = BashOperator(
            task_id=f"ingest_{trace}",
            bash_command=ingest_command(trace, spec),
            skip_on_exit_code=NOTHING_TO_DO,
        )
        ready[trace] = ingest
        if trace in ADVANCE:
            advance = BashOperator(
                task_id=f"advance_{trace}",
                bash_command=ddcli("advance", trace, ADVANCE[trace], "--json"),
                trigger_rule="none_failed",
            )
            ingest >> advance
            ready[trace] = advance

    runs = []
    for name, inputs in RUNS.items():
        run = BashOperator(
            task_id=f"run_{name}",
            bash_command=ddcli("run", shlex.quote(os.path.join(PIPELINES, f"{name}.py")),
                               "--strict-noop", "--json"),
            skip_on_exit_code=NOTHING_TO_DO,
            trigger_rule="none_failed",
        )
        for trace in inputs:
            ready[trace] >> run
        runs.append(run)

    compact = BashOperator(
        task_id="compact",
        bash_command=ddcli("compact", "--json"),
        trigger_rule="none_failed",
    )
    status = BashOperator(
        task_id="status",
        bash_command=ddcli("status", "--json"),  # lag per pipeline input, for the task log
        trigger_rule="none_failed",
    )
    runs >> compact >> status
