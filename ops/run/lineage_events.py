"""ddcli's run events as OpenLineage's JSON (spec 2-0-2), and their POST to the receiver.

Written with the standard library rather than the ``openlineage-python`` client: the client
takes 0.7 s to import on an idle machine and 2 s on a loaded one — a run would spend its
whole lineage budget (``DDCLI_LINEAGE_TIMEOUT``, 2 s) before sending anything, and a run
with nothing to do would wait for it — and it brings nine packages for what is one JSON
document POSTed per event. The client's conventions are kept: ``OPENLINEAGE_URL``,
``OPENLINEAGE_ENDPOINT`` (default ``api/v1/lineage``), ``OPENLINEAGE_API_KEY`` (sent as
``Authorization: Bearer KEY``). A redirect is not followed (the key would go with it).

The custom facets follow the spec's rules for them: a prefixed name (``ddcli_trace``,
``ddcli_run``), ``_producer`` and ``_schemaURL`` (their schema: docs/openlineage_facets.json).
"""

from __future__ import annotations

import json
import os
import urllib.request
from importlib import metadata


def _version() -> str:
    try:
        return metadata.version("ddcli")
    except metadata.PackageNotFoundError:
        return "unknown"


PRODUCER = f"urn:ddcli:{_version()}"
SPEC = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
FACETS = "urn:ddcli:openlineage-facets:1"  # docs/openlineage_facets.json
DEFAULT_ENDPOINT = "api/v1/lineage"


def _facet(schema: str, **fields) -> dict:
    return {"_producer": PRODUCER, "_schemaURL": schema, **fields}


def _standard(name: str, version: str = "1-0-0") -> str:
    """The schema URL of one of OpenLineage's standard facets."""
    return f"https://openlineage.io/spec/facets/{version}/{name}.json#/$defs/{name}"


def _dataset(d: dict, kind: str) -> dict:
    out = {"namespace": d["namespace"], "name": d["name"],
           "facets": {"ddcli_trace": _facet(f"{FACETS}#/$defs/DdcliTraceDatasetFacet", **d["trace"])}}
    if kind == "input" and "read_rows" in d:
        out["inputFacets"] = {"inputStatistics": _facet(
            _standard("InputStatisticsInputDatasetFacet", "1-0-1"), rowCount=d["read_rows"])}
    if kind == "output" and "written_rows" in d:
        out["outputFacets"] = {"outputStatistics": _facet(
            _standard("OutputStatisticsOutputDatasetFacet", "1-0-2"), rowCount=d["written_rows"])}
    return out


def to_json(e: dict) -> dict:
    """An event of ops/run/lineage.py as the spec's RunEvent."""
    run_facets = {"ddcli_run": _facet(f"{FACETS}#/$defs/DdcliRunRunFacet",
                                      **{k: v for k, v in e["run"].items() if v is not None})}
    if e["eventType"] == "FAIL":
        run_facets["errorMessage"] = _facet(_standard("ErrorMessageRunFacet", "1-0-1"),
                                            message=e["run"]["error"], programmingLanguage="python")
    return {
        "eventType": e["eventType"], "eventTime": e["eventTime"], "producer": PRODUCER,
        "schemaURL": f"{SPEC}#/$defs/RunEvent",
        "run": {"runId": e["runId"], "facets": run_facets},
        "job": {"namespace": e["namespace"], "name": e["job"], "facets": {"jobType": _facet(
            _standard("JobTypeJobFacet", "2-0-3"), processingType="BATCH", integration="DDCLI", jobType="PIPELINE")}},
        "inputs": [_dataset(d, "input") for d in e["inputs"]],
        "outputs": [_dataset(d, "output") for d in e["outputs"]],
    }


class RedirectNotFollowed(Exception):
    """A receiver answered with a redirect, which ddcli does not follow."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuses every redirect: an event, and the API key sent with it, go to ``OPENLINEAGE_URL``
    and nowhere else (urllib would resend the ``Authorization`` header to any host a 302 names)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise RedirectNotFollowed(f"the receiver answered {code} redirecting to {newurl}, not followed (events and "
                                  f"OPENLINEAGE_API_KEY go only to OPENLINEAGE_URL: set it to the receiver's address)")


def post(event: dict, timeout: float) -> None:
    """POST one event to ``$OPENLINEAGE_URL/$OPENLINEAGE_ENDPOINT``; an HTTP error raises."""
    url = os.environ["OPENLINEAGE_URL"].rstrip("/") + "/" + \
        (os.environ.get("OPENLINEAGE_ENDPOINT") or DEFAULT_ENDPOINT).lstrip("/")
    headers = {"Content-Type": "application/json"}
    if os.environ.get("OPENLINEAGE_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['OPENLINEAGE_API_KEY']}"
    body = json.dumps(to_json(event)).encode()
    opener = urllib.request.build_opener(_NoRedirect)
    with opener.open(urllib.request.Request(url, body, headers, method="POST"), timeout=timeout) as resp:
        resp.read()
