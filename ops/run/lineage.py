"""OpenLineage run events of ``ddcli run``: what each run read and wrote, for Marquez,
DataHub or any other OpenLineage receiver.

On when ``OPENLINEAGE_URL`` is set (``OPENLINEAGE_DISABLED=true`` turns it off), with the
OpenLineage client's variables for the rest: ``OPENLINEAGE_ENDPOINT``,
``OPENLINEAGE_API_KEY``, ``OPENLINEAGE_NAMESPACE`` (the job's namespace, default
``default``). The job is the pipeline, named as the pipeline. Each run sends START once
planned (the inputs with what it reads, the outputs), then COMPLETE after its commit or
FAIL with its error. A dataset is a trace's folder, where every trace is also a Delta
table, so an engine that reads the table names the same dataset (OpenLineage's naming:
namespace ``file`` and the absolute folder, or ``s3://bucket`` and the key); its
``ddcli_trace`` facet gives the trace's name, since, upper, rows and layers, the run's
``ddcli_run`` facet its seconds, rows and Spark jobs (ops/run/lineage_events.py writes the
JSON).

Never in a run's way: events go out from a thread of their own, so a run does not wait on
them while it works; when the command ends it waits for the events still on their way at
most ``DDCLI_LINEAGE_TIMEOUT`` seconds in all (default 2), then leaves them with one
warning. A receiver that is down or hangs costs a command that much at most, never a
failure.
"""

from __future__ import annotations

import datetime
import os
import queue
import threading
import time
import uuid

from ops.run.lineage_events import post
from storage.lattice import format_frontier
from storage.settings import BY_ENV

DEFAULT_NAMESPACE = "default"


def enabled() -> bool:
    return bool(os.environ.get("OPENLINEAGE_URL")) and os.environ.get("OPENLINEAGE_DISABLED", "").lower() != "true"


def timeout_seconds() -> float:
    return float(os.environ.get("DDCLI_LINEAGE_TIMEOUT") or BY_ENV["DDCLI_LINEAGE_TIMEOUT"].default)


class Emitter:
    """Sends events from a thread of its own; :meth:`close` waits for them a bounded time."""

    def __init__(self, budget: float | None = None, send=None):
        self.budget = timeout_seconds() if budget is None else budget
        self._send = send or (lambda event: post(event, self.budget))  # (event) -> None
        self.queue: queue.Queue = queue.Queue()
        self.done = threading.Condition()
        self.pending = 0
        self.failures: list[str] = []
        self.thread: threading.Thread | None = None

    def send(self, event: dict) -> None:
        with self.done:
            self.pending += 1
        self.queue.put(event)
        if self.thread is None:
            self.thread = threading.Thread(target=self._work, name="ddcli-lineage", daemon=True)
            self.thread.start()

    def _work(self) -> None:
        while True:
            event = self.queue.get()
            try:
                self._send(event)
            except Exception as e:  # noqa: BLE001 - a receiver's trouble is a warning, never a failed run
                self.failures.append(f"{type(e).__name__}: {e}")
            finally:
                with self.done:
                    self.pending -= 1
                    self.done.notify_all()

    def close(self) -> str | None:
        """Wait at most the budget for the events on their way; a warning if some were lost."""
        deadline = time.monotonic() + self.budget
        with self.done:
            while self.pending and (left := deadline - time.monotonic()) > 0:
                self.done.wait(left)
            lost = self.pending
        if lost:
            return (f"OpenLineage: {lost} event{'s' if lost > 1 else ''} not sent within {self.budget:g} s to "
                    f"{os.environ.get('OPENLINEAGE_URL')} (DDCLI_LINEAGE_TIMEOUT); the run is not affected")
        if self.failures:
            return f"OpenLineage: {len(self.failures)} event(s) not sent: {self.failures[0]}"
        return None


def dataset(store, trace, **facets) -> dict:
    """A trace as an OpenLineage dataset: its folder, and the ``ddcli_trace`` facet."""
    folder = store.trace_dir(trace.name)
    if "://" in folder:
        scheme, rest = folder.split("://", 1)
        bucket, _, key = rest.partition("/")
        namespace, name = f"{scheme}://{bucket}", key
    else:
        namespace, name = "file", os.path.abspath(folder)
    return {"namespace": namespace, "name": name,
            "trace": {"trace": trace.name, "since": format_frontier(trace.since), "upper": format_frontier(trace.upper),
                      "rows": trace.rows(), "layers": len(trace.layers)}, **facets}


class RunLineage:
    """The events of one run of a pipeline."""

    def __init__(self, emitter: Emitter, store, name: str, path: str):
        self.emitter, self.store, self.name, self.path = emitter, store, name, os.path.abspath(path)
        self.run_id = str(uuid.uuid4())
        self.namespace = os.environ.get("OPENLINEAGE_NAMESPACE") or DEFAULT_NAMESPACE
        self.started = time.monotonic()
        self.inputs: list[dict] = []

    def planned(self, plan) -> None:
        """START: the inputs with the updates this run reads, and the outputs as they are."""
        self.name = plan.p.name
        self.inputs = [dataset(self.store, v.trace, read_rows=sum(l.rows for l in v.new))
                       for v in plan.views.values()]
        outputs = [dataset(self.store, plan.state.traces[o]) for o in plan.p.outputs if o in plan.state.traces]
        self.emitter.send(self._event("START", self.inputs, outputs, {}))

    def completed(self, res) -> None:
        """COMPLETE: what the run wrote, the outputs as its commit left them."""
        state = self.store.state()
        outputs = [dataset(self.store, state.traces[o], written_rows=n) for o, n in res.outputs.items()
                   if o in state.traces]
        run = {"seconds": round(time.monotonic() - self.started, 3), "rows_in": res.rows_in,
               "rows_out": sum(res.outputs.values()), "spark_jobs": res.spark_jobs,
               "frontier": format_frontier(res.frontier) if res.frontier else None, "nothing_to_do": res.nothing_to_do}
        self.emitter.send(self._event("COMPLETE", self.inputs, outputs, run))

    def failed(self, error: BaseException) -> None:
        run = {"seconds": round(time.monotonic() - self.started, 3), "error": str(error) or type(error).__name__}
        self.emitter.send(self._event("FAIL", self.inputs, [], run))

    def _event(self, kind: str, inputs: list[dict], outputs: list[dict], run: dict) -> dict:
        return {"eventType": kind, "eventTime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                "runId": self.run_id, "namespace": self.namespace, "job": self.name, "file": self.path,
                "inputs": inputs, "outputs": outputs, "run": {"pipeline": self.name, "file": self.path, **run}}
