"""A wrong set-up is one line, exit 2, nothing written — never an internal error.

Missing AWS credentials, a malformed ``AWS_ENDPOINT_URL`` or S3 setting, JSON nested far
too deep. (A pipeline's wrong argument types are refused before Spark starts:
tests/pipelines/test_fast_feedback.py.)
"""

from __future__ import annotations

import os

import pytest

from storage.blobs.resolve import forget_clients
from tests.helpers.cli import cli, one_line_error, write
from tests.helpers.s3 import BUCKET, new_prefix


@pytest.fixture
def fresh_clients():
    forget_clients()
    yield
    forget_clients()


def test_no_credentials_is_one_line(s3_env, monkeypatch, tmp_path, fresh_clients):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    local = str(tmp_path / "local")
    for args, store in ((["status"], new_prefix()), (["ingest", "w", f"s3://{BUCKET}/a.csv"], local)):
        err = one_line_error(cli(store, *args))
        assert "no AWS credentials" in err and "AWS_ACCESS_KEY_ID" in err, err
    assert not os.path.exists(local)


@pytest.mark.parametrize("endpoint", ["localhost:9000", "http//x", "ftp://x", "http://[::1", "http://host:port",
                                      "http://", "http://a b"])
def test_a_malformed_endpoint_is_one_line(s3_env, monkeypatch, tmp_path, endpoint, fresh_clients):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    local = str(tmp_path / "local")
    for args, store in ((["status"], new_prefix()), (["ingest", "w", f"s3://{BUCKET}/a.csv"], local)):
        err = one_line_error(cli(store, *args))
        assert "AWS_ENDPOINT_URL" in err, err
    assert not os.path.exists(local)


@pytest.mark.parametrize("name,value", [("AWS_MAX_ATTEMPTS", "abc"), ("AWS_MAX_ATTEMPTS", "0"),
                                        ("DDCLI_S3_TIMEOUT", "-1"), ("DDCLI_S3_TIMEOUT", "soon")])
def test_a_malformed_s3_setting_is_one_line(s3_env, monkeypatch, name, value, fresh_clients):
    monkeypatch.setenv(name, value)
    err = one_line_error(cli(new_prefix(), "status"))
    assert name in err, err


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_json_nested_deeply_is_one_line(tmp_path, depth):
    store = str(tmp_path / "store")
    f = write(tmp_path / "deep.jsonl", '{"word": ' + "[" * depth + "]" * depth + ', "time": 1}\n')
    err = one_line_error(cli(store, "ingest", "w", f))
    assert "deep.jsonl" in err
    assert not os.path.exists(store)
